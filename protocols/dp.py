"""Distributed differential privacy inside the sum: the distributed discrete Gaussian (DDG) wrapper.

Kairouz, Liu and Steinke, "The Distributed Discrete Gaussian Mechanism for Federated Learning with
Secure Aggregation", ICML 2021 (https://arxiv.org/abs/2102.06387). Each client clips its update,
rounds it onto the integer grid of the encoding and adds *discrete* Gaussian noise of its own; the
secure sum (masking or CKKS) then carries the sum of the noise shares, and nobody ever sees a
noise-free individual update or a noise-free sum. Privacy unit: **one client** (add/remove one
client's whole contribution to a round); accounting composes over rounds and client sampling.

Mechanism, per round, for every block :math:`b` marked ``dp`` (grid step :math:`\\gamma_b`: the
schema's quantisation step for real blocks, 1 for count blocks; all quantities below in grid units):

.. math::

    x_{k,b} &\\leftarrow x_{k,b} \\cdot \\min\\big(1, C_b / \\lVert x_{k,b} \\rVert_2\\big)
        && \\text{(L2 clipping, client } k)\\\\
    \\tilde x_{k,b} &= \\mathrm{CRR}_\\beta(x_{k,b} / \\gamma_b), \\quad
        \\lVert \\tilde x_{k,b} \\rVert_2 \\le \\Delta_b
        && \\text{(conditional randomized rounding)}\\\\
    y_{k,b} &= \\tilde x_{k,b} + Z_{k,b}, \\quad Z_{k,b} \\sim \\mathcal{N}_{\\mathbb{Z}}(0, \\sigma_b^2)^{d_b}
        && \\text{(discrete Gaussian share)}\\\\
    \\textstyle\\sum_k y_{k,b} &= \\textstyle\\sum_k \\tilde x_{k,b} + \\sum_k Z_{k,b}
        && \\text{(computed by the inner secure protocol)}

with :math:`\\Delta_b^2 = \\min\\{(c + \\sqrt{d})^2,\\ c^2 + d/4 + \\sqrt{2\\ln(1/\\beta)}\\,(c +
\\sqrt{d}/2)\\}`, :math:`c = C_b/\\gamma_b` (Kairouz et al., Thm. 1). The per-client scale is
:math:`\\sigma_b = z \\sqrt{K}\\,\\Delta_b / \\sqrt{m}` for noise multiplier :math:`z`, :math:`K` noised
blocks and :math:`m` = ``min_contributors``: **a public constant of the client configuration**, never a
number the server reports. Any sum the protocol releases has at least :math:`m` noise shares (the
wrapper raises the schema's ``min_contributors`` to :math:`m`), so its noise has variance at least
:math:`z^2 K \\Delta_b^2` per element however many of the other invited clients drop out.

RDP of one round (orders :math:`\\alpha`; Prop. 14 / Thm. 1 of the paper, summed over blocks), valid for
any number :math:`n' \\in [m, N]` of noise shares (:math:`N` = ``schema.max_clients``):

.. math::

    \\varepsilon(\\alpha) = \\sum_b \\min\\Big\\{ \\frac{\\alpha \\Delta_b^2}{2 m \\sigma_b^2} + \\tau_b d_b,\\;
        \\frac{\\alpha}{2}\\Big(\\frac{\\Delta_b}{\\sqrt{m}\\,\\sigma_b} + \\tau_b\\sqrt{d_b}\\Big)^2 \\Big\\},
    \\qquad \\tau_b = 10 \\sum_{k=1}^{N-1} e^{-2\\pi^2 \\sigma_b^2 k/(k+1)}.

Client sampling with rate :math:`q < 1` is amplified only with ``sampler="poisson"``: each client
decides its own participation with probability :math:`q` from client-side randomness (as DP-FTRL and
TFF's DP-FedAvg assume), and the round uses the general Poisson-subsampling RDP bound of Zhu and Wang
(ICML 2019, Thm. 6; integer orders) under add/remove adjacency of one client, applied to the whole round
(all sums with the same ``round_index`` share one sample). With ``sampler="server"`` (the default: the
server draws the cohort, e.g. a fixed-size sample from its own generator) no amplification is claimed:
every round composes at :math:`q = 1` under zero-out adjacency (one client's contribution replaced by
zeros; the sensitivity is the clip norm, as for add/remove). Rounds compose additively and RDP is converted to
:math:`(\\varepsilon, \\delta)` with Opacus's ``get_privacy_spent`` (Balle et al. 2020). With
:math:`q = 1` the round RDP is exactly Opacus's Gaussian RDP for :math:`z` plus the tiny
:math:`\\tau` terms, so the epsilon equals Opacus's ``RDPAccountant`` for the same
``(noise_multiplier, sample_rate=1, steps)``.

Randomness: rounding and noise come from AES-256-CTR keyed by 256 bits from ``os.urandom`` (a fresh key
per client and sum) via :class:`CryptoUniform`; no numpy or torch RNG is involved. The sampler is the
rejection sampler of Canonne, Kamath and Steinke (NeurIPS 2020, Alg. 3: a discrete Laplace proposal
accepted with probability :math:`e^{-(|y| - \\sigma^2/t)^2 / 2\\sigma^2}`), vectorised over elements and
evaluated in float64 with 53-bit uniforms. Outputs are integers, so the floating-point attack on
continuous noise (Mironov 2012) does not apply; the price is that point masses are exact only to about
:math:`2^{-50}` relative and the support is truncated near :math:`37\\sigma` (probability mass below
:math:`e^{-600}`). This is an approximation of the exact (rational-arithmetic) sampler, which is too slow
per element in Python; the reported :math:`(\\varepsilon, \\delta)` does not include it.

The wrapper is :class:`DistributedDP`; the registry builds it for any ``"<protocol>+dp"`` name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from securefgl.errors import ConfigError, PrivacyBudgetError, ReleaseRefusedError, UnsupportedCombinationError
from securefgl.protocols._dp_accounting import (
    ADJACENCY,
    DEFAULT_BETA,
    OPACUS_DEFAULT_ALPHAS,
    RDP_ORDERS_ALL_INT,
    RDP_ORDERS_INT,
    RDP_ORDERS_Q1,
    SAMPLERS,
    DDGBlock,
    PrivacyLedger,
    check_delta,
    check_sample_rate,
    ddg_epsilon,
    ddg_round_rdp,
    epsilon_from_rdp,
    poisson_subsampled_rdp,
)
from securefgl.protocols._dp_report import PrivacyReport, PrivateSums
from securefgl.protocols._dp_sampler import CryptoUniform, conditional_round, discrete_gaussian
from securefgl.protocols._prg import derive_key
from securefgl.protocols.base import Contribution, DropoutPlan, Protocol, Sums, Transcript
from securefgl.protocols.encoding import BlockSpec, SumSchema

__all__ = [
    "CryptoUniform",
    "DDGBlock",
    "DistributedDP",
    "OPACUS_DEFAULT_ALPHAS",
    "PrivacyReport",
    "PrivateSums",
    "RDP_ORDERS_INT",
    "RDP_ORDERS_Q1",
    "conditional_round",
    "ddg_epsilon",
    "ddg_round_rdp",
    "discrete_gaussian",
    "poisson_subsampled_rdp",
]

#: Noise tail (in standard deviations of one share) kept inside the inner schema's bound; a share
#: beyond it (probability < 2 e^{-98} per element) would be clipped by the inner protocol.
_TAIL_SIGMAS = 14.0


@dataclass
class _SchemaPlan:
    """Per-schema derived parameters: the inner schema, grids, clip norms and per-client scales."""

    inner: SumSchema
    dp_names: tuple[str, ...]
    gamma: dict[str, float]
    clip: dict[str, float]
    blocks: dict[str, DDGBlock]
    noise_multiplier: float
    round_rdp_q1: np.ndarray = field(repr=False)  # on RDP_ORDERS_Q1
    round_rdp_int: np.ndarray = field(repr=False)  # on every integer 2..256


class DistributedDP(Protocol):
    """Distributed discrete Gaussian noise inside any protocol's sum, with client-level accounting.

    See the module docstring for the mechanism, the accounting and the sampler.

    Security:
        The noise floor is enforced by the release rule ``min_contributors >= m``, which the honest-but-
        curious server applies before unmasking (SecAgg, SecAgg+) and the decrypting client applies
        itself (CKKS). A server that deviates from a masking protocol could unmask a sum of as few as the
        protocol's threshold :math:`t` inputs (``PrivacyReport.inner_threshold``): choose :math:`t \\ge m`
        for the floor to hold against it.
        The wrapper adds privacy against *everyone who sees the released sum* (the server, the algorithm,
        model consumers); it does not replace secure aggregation (without an inner secure protocol the server
        sees each client's noise share, which alone is far too small to protect it). The amplified epsilon
        (``sample_rate < 1``) assumes the sample is hidden from the adversary; the server sees who takes part
        in a round, so against the server the report also gives ``epsilon_participation_visible``: the
        largest unamplified epsilon of any single client over the sums it took part in. Clip counts of noised
        blocks are not released (they are not differentially private).

    Args:
        base: the inner protocol (plaintext, secagg, secagg+ or ckks).
        min_contributors: :math:`m`, see above (required; an integer fixed in the client configuration).
        clip_norm: L2 clip norm :math:`C_b` of every noised block, one float or a mapping block -> float.
        noise_multiplier: :math:`z`; give this or ``epsilon``. (default: ``None``)
        epsilon: target epsilon after ``rounds`` rounds; :math:`z` is calibrated per schema and further rounds
            beyond the budget are refused. (default: ``None``)
        delta: target delta, in :math:`(0, 1)`. (default: ``1e-5``)
        rounds: the number of rounds the budget must last (needed with ``epsilon``). (default: ``None``)
        sample_rate: the client-sampling probability :math:`q` per round, in :math:`(0, 1]`. (default: ``1``)
        sampler: who samples the clients: ``"server"`` (the server draws the cohort; no amplification is
            reported) or ``"poisson"`` (each client joins with probability ``sample_rate`` using its own
            randomness; epsilon amplified by Poisson subsampling). (default: ``"server"``)
        beta: conditional-rounding parameter :math:`\\beta \\in [0, 1)`. (default: :math:`e^{-1/2}`)
        insecure_seed: INSECURE, tests only: derive every noise key from this seed. (default: ``None``)

    Shapes:
        Contributions and sums as in the inner protocol; a noised block of shape ``s`` has
        :math:`d_b = \\prod s` elements.
    """

    name: ClassVar[str] = "dp"

    @property
    def reveals_individual_inputs(self) -> bool:  # type: ignore[override]
        """Whatever the inner protocol reveals: noise shares do not hide an input from the server that
        sees it (``plaintext+dp`` reveals every input)."""
        return bool(self.base.reveals_individual_inputs)

    def __init__(
        self,
        base: Protocol,
        *,
        min_contributors: int | None = None,
        clip_norm: float | Mapping[str, float] | None = None,
        noise_multiplier: float | None = None,
        epsilon: float | None = None,
        delta: float = 1e-5,
        rounds: int | None = None,
        sample_rate: float = 1.0,
        sampler: str = "server",
        beta: float = DEFAULT_BETA,
        insecure_seed: int | None = None,
    ) -> None:
        if not isinstance(base, Protocol):
            raise ConfigError(f"DistributedDP wraps a Protocol instance, got {type(base).__name__}")
        if isinstance(base, DistributedDP):
            raise ConfigError("DistributedDP cannot wrap another DistributedDP")
        if isinstance(min_contributors, str) or min_contributors is None:
            raise ConfigError(
                f"min_contributors must be an integer fixed in the client configuration, got "
                f"{min_contributors!r}: deriving the per-client noise from the number of invited or "
                "surviving clients would let the server shrink everyone's noise by reporting a larger "
                "cohort; set it to (expected clients - tolerated dropouts)"
            )
        if isinstance(min_contributors, bool) or not isinstance(min_contributors, (int, np.integer)):
            raise ConfigError(f"min_contributors must be an integer >= 1, got {min_contributors!r}")
        if min_contributors < 1:
            raise ConfigError(f"min_contributors must be >= 1, got {min_contributors!r}")
        if clip_norm is None:
            raise ConfigError("clip_norm is required: one L2 norm, or a mapping block name -> L2 norm")
        if (noise_multiplier is None) == (epsilon is None):
            raise ConfigError(
                "give exactly one of noise_multiplier and epsilon, got "
                f"noise_multiplier={noise_multiplier!r}, epsilon={epsilon!r}"
            )
        if noise_multiplier is not None and (
            isinstance(noise_multiplier, bool)
            or not isinstance(noise_multiplier, (int, float, np.floating))
            or not math.isfinite(noise_multiplier)
            or noise_multiplier <= 0
        ):
            raise PrivacyBudgetError(
                f"noise_multiplier must be a positive finite number, got {noise_multiplier!r}"
            )
        if epsilon is not None:
            if (
                isinstance(epsilon, bool)
                or not isinstance(epsilon, (int, float, np.floating))
                or not math.isfinite(epsilon)
                or epsilon <= 0
            ):
                raise PrivacyBudgetError(f"epsilon must be a positive finite number, got {epsilon!r}")
            if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
                raise ConfigError(f"a target epsilon needs rounds (an integer >= 1), got {rounds!r}")
        elif rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1):
            raise ConfigError(f"rounds must be None or an integer >= 1, got {rounds!r}")
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0.0 <= beta < 1.0:
            raise ConfigError(f"beta must be a number in [0, 1), got {beta!r}")
        self.base = base
        self.min_contributors = int(min_contributors)
        self.clip_norm = self._check_clip(clip_norm)
        self.noise_multiplier = None if noise_multiplier is None else float(noise_multiplier)
        self.target_epsilon = None if epsilon is None else float(epsilon)
        self.delta = check_delta(delta)
        self.rounds = None if rounds is None else int(rounds)
        self.sample_rate = check_sample_rate(sample_rate)
        if sampler not in SAMPLERS:
            raise ConfigError(f"sampler must be one of {list(SAMPLERS)}, got {sampler!r}")
        self.sampler = str(sampler)
        self.beta = float(beta)
        self._insecure_seed = insecure_seed
        self._plans: dict[bytes, _SchemaPlan] = {}
        self._ledger = PrivacyLedger()
        self._calls = 0

    @property
    def label(self) -> str:
        """The registry name of the wrapped protocol, e.g. ``"secagg+dp"``."""
        return f"{self.base.name}+dp"

    def __repr__(self) -> str:
        how = (
            f"noise_multiplier={self.noise_multiplier}"
            if self.noise_multiplier is not None
            else f"epsilon={self.target_epsilon}, rounds={self.rounds}"
        )
        return (
            f"DistributedDP({self.base!r}, min_contributors={self.min_contributors}, {how}, "
            f"delta={self.delta:g}, sample_rate={self.sample_rate:g}, sampler={self.sampler!r})"
        )

    @staticmethod
    def _check_clip(clip: float | Mapping[str, float]) -> float | dict[str, float]:
        def one(name: str, v: Any) -> float:
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float, np.floating))
                or not math.isfinite(v)
                or v <= 0
            ):
                raise ConfigError(f"clip_norm{name} must be a positive finite number, got {v!r}")
            return float(v)

        if isinstance(clip, Mapping):
            return {str(k): one(f"[{k!r}]", v) for k, v in clip.items()}
        return one("", clip)

    # -- per-schema plan ------------------------------------------------------------------------------

    def _plan(self, schema: SumSchema) -> _SchemaPlan:
        key = schema.fingerprint()
        plan = self._plans.get(key)
        if plan is None:
            plan = self._build_plan(schema)
            self._plans[key] = plan
        return plan

    def _build_plan(self, schema: SumSchema) -> _SchemaPlan:
        dp_specs = [b for b in schema.blocks if b.dp and b.size > 0]
        if not dp_specs:
            raise ConfigError(
                f"the DP wrapper needs at least one block with dp=True; schema blocks: {list(schema.names)}"
            )
        if self.min_contributors > schema.max_clients:
            raise ConfigError(
                f"min_contributors={self.min_contributors} exceeds the schema's max_clients={schema.max_clients}"
            )
        dp_names = tuple(b.name for b in dp_specs)
        for b in schema.blocks:
            if b.counted_by is not None and b.counted_by in dp_names:
                raise UnsupportedCombinationError(
                    f"block {b.name!r} is released row-wise by the count block {b.counted_by!r}, which is "
                    "marked dp=True: row-wise release on noised counts is not supported yet; mark the "
                    "count block dp=False (its rows then gate the release exactly) or drop counted_by"
                )
        clip = self._plan_clip(schema, dp_names)
        gamma = {b.name: (schema.steps[b.name] if b.kind == "real" else 1.0) for b in dp_specs}
        unit = {
            b.name: DDGBlock(dim=b.size, clip=clip[b.name] / gamma[b.name], sigma=1.0, beta=self.beta)
            for b in dp_specs
        }
        k = len(dp_specs)
        m = self.min_contributors

        def blocks_for(z: float) -> dict[str, DDGBlock]:
            return {
                n: dataclasses.replace(
                    u, sigma=z * math.sqrt(k) * math.sqrt(u.sensitivity_sq()) / math.sqrt(m)
                )
                for n, u in unit.items()
            }

        if self.noise_multiplier is not None:
            z = self.noise_multiplier
        else:
            z = self._calibrate(blocks_for, schema.max_clients)
        blocks = blocks_for(z)
        for n, blk in blocks.items():
            if blk.sigma < 0.5:
                raise PrivacyBudgetError(
                    f"block {n!r}: the per-client noise scale is {blk.sigma:.3g} grid steps (< 0.5), where the "
                    "distributed discrete Gaussian analysis does not apply; raise the noise multiplier or "
                    "the clip norm, or use a finer precision"
                )
        inner = self._inner_schema(schema, blocks, gamma, clip)
        for n in dp_names:
            if schema[n].kind == "real" and inner.steps[n] != gamma[n]:  # pragma: no cover - same precision
                raise ConfigError(f"block {n!r}: inner step {inner.steps[n]} differs from {gamma[n]}")
        bl = list(blocks.values())
        return _SchemaPlan(
            inner=inner,
            dp_names=dp_names,
            gamma=gamma,
            clip=clip,
            blocks=blocks,
            noise_multiplier=z,
            round_rdp_q1=ddg_round_rdp(bl, RDP_ORDERS_Q1, min_shares=m, max_shares=schema.max_clients),
            round_rdp_int=ddg_round_rdp(bl, RDP_ORDERS_ALL_INT, min_shares=m, max_shares=schema.max_clients),
        )

    def _plan_clip(self, schema: SumSchema, dp_names: tuple[str, ...]) -> dict[str, float]:
        """The L2 clip norm of every dp block (from one norm, or a mapping that names exactly them)."""
        clip: dict[str, float] = {}
        if isinstance(self.clip_norm, dict):
            missing = [n for n in dp_names if n not in self.clip_norm]
            unknown = sorted(set(self.clip_norm) - set(schema.names))
            if missing or unknown:
                raise ConfigError(
                    f"clip_norm mapping must name every dp block: missing {missing}, unknown {unknown}; "
                    f"dp blocks: {list(dp_names)}"
                )
            clip = {n: self.clip_norm[n] for n in dp_names}
        else:
            clip = {n: float(self.clip_norm) for n in dp_names}
        return clip

    def _inner_schema(
        self,
        schema: SumSchema,
        blocks: Mapping[str, DDGBlock],
        gamma: Mapping[str, float],
        clip: Mapping[str, float],
    ) -> SumSchema:
        """The schema the inner protocol sums: dp blocks widened to hold the noise tail, as real blocks."""
        inner_blocks: list[BlockSpec] = []
        for spec in schema.blocks:
            if spec.name not in blocks:
                inner_blocks.append(spec)
                continue
            blk = blocks[spec.name]
            g = gamma[spec.name]
            reach = min(spec.bound, clip[spec.name]) + g + _TAIL_SIGMAS * blk.sigma * g
            inner_blocks.append(
                dataclasses.replace(
                    spec,
                    kind="real",
                    bound=float(reach),
                    on_out_of_bound="clip",
                    dp=False,
                    dtype=spec.dtype if spec.kind == "real" else torch.float64,
                )
            )
        return SumSchema(
            inner_blocks,
            max_clients=schema.max_clients,
            precision=schema.precision,
            min_contributors=max(schema.min_contributors, self.min_contributors),
            extra_bits=schema.extra_bits,
        )

    def _calibrate(self, blocks_for: Any, max_shares: int) -> float:
        """Smallest noise multiplier whose epsilon after ``rounds`` rounds is <= the target."""
        if self.target_epsilon is None or self.rounds is None:
            raise ConfigError("calibration needs a target epsilon and rounds")
        target = self.target_epsilon

        def eps(z: float) -> float:
            return ddg_epsilon(
                list(blocks_for(z).values()),
                rounds=self.rounds or 1,
                sample_rate=self.accounting_rate,
                delta=self.delta,
                min_shares=self.min_contributors,
                max_shares=max_shares,
            )

        lo, hi = 1e-3, 1.0
        while eps(hi) > target:
            lo, hi = hi, hi * 2.0
            if hi > 1e6:
                raise PrivacyBudgetError(
                    f"epsilon={self.target_epsilon!r} at delta={self.delta:g} over {self.rounds} rounds cannot "
                    "be reached with any noise multiplier up to 1e6"
                )
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            if eps(mid) > target:
                lo = mid
            else:
                hi = mid
            if hi / lo < 1 + 1e-6:
                break
        return hi

    # -- accounting -------------------------------------------------------------------------------------

    @property
    def accounting_rate(self) -> float:
        """The sampling rate the accountant amplifies by: ``sample_rate`` for Poisson sampling by the
        clients, 1 for a cohort the server draws (never an amplified figure for a server-run sampler)."""
        return self.sample_rate if self.sampler == "poisson" else 1.0

    def _report(self, plan: _SchemaPlan | None = None, inner_threshold: int | None = None) -> PrivacyReport:
        led = self._ledger
        q = self.accounting_rate
        if q >= 1.0:
            orders: tuple[float, ...] = RDP_ORDERS_Q1
            total = sum(led.rounds_q1.values(), np.zeros(len(orders)))
        else:
            orders = RDP_ORDERS_INT
            total = np.zeros(len(orders))
            for curve in led.rounds_int.values():
                total = total + poisson_subsampled_rdp(curve, orders, q)
        if led.rounds_q1:
            eps, best, edge = epsilon_from_rdp(orders, total, self.delta)
        else:
            eps, best, edge = 0.0, float("nan"), False
        worst = 0.0
        for curve in led.clients_q1.values():
            worst = max(worst, epsilon_from_rdp(RDP_ORDERS_Q1, curve, self.delta)[0])
        plan = plan or next(iter(self._plans.values()), None)
        noise_std: dict[str, float] = {}
        clip: dict[str, float] = {}
        z = self.noise_multiplier or 0.0
        if plan is not None:
            z = plan.noise_multiplier
            m = self.min_contributors
            noise_std = {n: math.sqrt(m) * b.sigma * plan.gamma[n] for n, b in plan.blocks.items()}
            clip = dict(plan.clip)
        return PrivacyReport(
            unit="client",
            mechanism="distributed discrete Gaussian (Kairouz, Liu, Steinke 2021)",
            accountant=(
                "RDP: DDG bound (Prop. 14/Thm. 1)"
                + (" + Poisson subsampling (Zhu-Wang 2019, Thm. 6)" if q < 1 else "")
                + "; RDP -> (eps, delta) by opacus get_privacy_spent"
            ),
            epsilon=eps,
            delta=self.delta,
            epsilon_participation_visible=worst,
            rounds=len(led.rounds_q1),
            sample_rate=self.sample_rate,
            sampler=self.sampler,
            adjacency=ADJACENCY[self.sampler],
            amplified=q < 1,
            noise_multiplier=z,
            min_contributors=self.min_contributors,
            noise_std=noise_std,
            clip_norm=clip,
            best_order=best,
            order_at_edge=edge,
            inner_threshold=inner_threshold,
        )

    def privacy_report(self) -> PrivacyReport:
        """The guarantee accumulated so far over every sum this wrapper released."""
        return self._report()

    def _check_budget(self, plan: _SchemaPlan, round_index: int) -> None:
        """Refuse a sum that would push a target-epsilon run past its budget."""
        if self.target_epsilon is None:
            return
        led = self._ledger
        saved = (dict(led.rounds_q1), dict(led.rounds_int))
        led.rounds_q1[round_index] = led.rounds_q1.get(round_index, 0) + plan.round_rdp_q1
        led.rounds_int[round_index] = led.rounds_int.get(round_index, 0) + plan.round_rdp_int
        try:
            eps = self._report(plan).epsilon
        finally:
            led.rounds_q1, led.rounds_int = saved
        if eps > self.target_epsilon * (1 + 1e-6):
            raise PrivacyBudgetError(
                f"round {round_index} would raise epsilon to {eps:.4g} > the budget epsilon="
                f"{self.target_epsilon!r} at delta={self.delta:g} (planned for {self.rounds} rounds)"
            )

    # -- client side ------------------------------------------------------------------------------------

    def _source(self, client: int, round_index: int) -> CryptoUniform:
        if self._insecure_seed is None:
            return CryptoUniform()
        seed = hashlib.sha256(b"securefgl-insecure-dp" + str(int(self._insecure_seed)).encode()).digest()
        key = derive_key(seed, "insecure-dp-noise", round_index=round_index, pair=(client, self._calls))
        return CryptoUniform(key)

    def privatize(
        self, schema: SumSchema, contribution: Contribution, *, client: int, round_index: int = 0
    ) -> dict[str, Any]:
        """One client's local step: clip, round and noise the dp blocks (other blocks pass through).

        Args:
            schema: the outer schema.
            contribution: the client's contribution (validated against ``schema``).
            client: the client id (used only to separate insecure test streams).
            round_index: the round.

        Returns:
            The contribution for the inner protocol (under the inner schema): dp blocks as float64 numpy
            arrays on the grid.
        """
        plan = self._plan(schema)
        flat, _ = schema.pack(contribution)  # validation, NaN/Inf refusal, per-element clipping
        src = self._source(client, round_index)
        out: dict[str, Any] = {n: contribution[n] for n in schema.names if n not in plan.blocks}
        for n, b in plan.blocks.items():
            spec = schema[n]
            x = flat[schema.slices[n]]
            norm = math.sqrt(float(np.einsum("i,i->", x, x)))  # no BLAS call (threads stall under load)
            c = plan.clip[n]
            if norm > c:
                x = x * (c / norm)
            g = plan.gamma[n]
            r = conditional_round(x / g, b.sensitivity_sq(), src)
            r += discrete_gaussian(b.sigma, r.size, src)
            out[n] = (r.astype(np.float64) * g).reshape(spec.shape)
        return out

    # -- protocol -----------------------------------------------------------------------------------------

    def aggregate(
        self,
        schema: SumSchema,
        contributions: Mapping[int, Contribution],
        *,
        dropouts: DropoutPlan | None = None,
        round_index: int = 0,
        recipient: int | None = None,
        context: bytes | Mapping[int, bytes] = b"",
    ) -> tuple[Sums, Transcript]:
        """Noise every client's dp blocks, sum with the inner protocol, and account the privacy loss.

        Returns ``(PrivateSums, Transcript)``: the sums carry ``.privacy`` and the transcript
        ``extra["privacy"]`` (a :class:`PrivacyReport` as a dict).

        Raises:
            ReleaseRefusedError: fewer invited clients than ``min_contributors`` (nothing is sent).
            PrivacyBudgetError: the round would exceed a target-epsilon budget.
            Whatever the inner protocol raises (e.g. ``ThresholdError`` when too few survive).
        """
        self.before_sum(schema, len(contributions), round_index)
        plan = self._plan(schema)
        self._calls += 1
        noised: dict[int, Any] = {}
        seconds: dict[int, float] = {}
        for cid, contrib in contributions.items():
            t0 = time.perf_counter()
            noised[cid] = self.privatize(schema, contrib, client=int(cid), round_index=round_index)
            seconds[int(cid)] = time.perf_counter() - t0
        sums, transcript = self.base.aggregate(
            plan.inner,
            noised,
            dropouts=dropouts,
            round_index=round_index,
            recipient=recipient,
            context=context,
        )
        released, report = self.after_sum(
            schema, sums, transcript.survivors or tuple(contributions), len(contributions), round_index
        )
        for cid, s in seconds.items():
            transcript.add_time("dp_noise", s, party=cid)
        transcript.protocol = self.label
        transcript.extra["privacy"] = report.to_dict()
        for n in plan.dp_names:
            transcript.clip_counts.pop(n, None)
        return released, transcript

    # -- the server's halves of one sum (a deployment drives the inner protocol's parties itself) ---------

    def inner_schema(self, schema: SumSchema) -> SumSchema:
        """The schema the inner protocol sums: the dp blocks as integers on their noise grid."""
        return self._plan(schema).inner

    def before_sum(self, schema: SumSchema, invited: int, round_index: int) -> None:
        """The server's checks before a sum of ``invited`` clients' noised contributions is started.

        Raises:
            ReleaseRefusedError: fewer invited clients than ``min_contributors`` (nothing is sent).
            PrivacyBudgetError: the round would exceed a target-epsilon budget.
        """
        if invited < self.min_contributors:
            raise ReleaseRefusedError(
                f"{invited} invited client(s) < min_contributors={self.min_contributors}: a sum "
                "of so few noise shares would not carry the configured noise; nothing was sent",
                phase="dp",
            )
        self._check_budget(self._plan(schema), round_index)

    def after_sum(
        self, schema: SumSchema, sums: Sums, survivors: Sequence[int], invited: int, round_index: int
    ) -> tuple[PrivateSums, PrivacyReport]:
        """Account the released inner sum of ``survivors`` and turn it into the outer schema's sums."""
        plan = self._plan(schema)
        led = self._ledger
        led.rounds_q1[round_index] = led.rounds_q1.get(round_index, 0) + plan.round_rdp_q1
        led.rounds_int[round_index] = led.rounds_int.get(round_index, 0) + plan.round_rdp_int
        for cid in survivors:
            led.clients_q1[int(cid)] = led.clients_q1.get(int(cid), 0) + plan.round_rdp_q1
        report = self._report(plan, self._inner_threshold(invited))
        return self._outer_sums(schema, plan, sums, report), report

    def _inner_threshold(self, n: int) -> int | None:
        """The Shamir threshold of a masking inner protocol (SecAgg, SecAgg+) for ``n`` clients."""
        params = getattr(self.base, "parameters", None)
        if getattr(self.base, "config", None) is None or not callable(params):
            return None
        try:
            return int(params(n).threshold)
        except (AttributeError, TypeError, ValueError, ConfigError):
            return None

    def _outer_sums(
        self, schema: SumSchema, plan: _SchemaPlan, sums: Sums, report: PrivacyReport
    ) -> PrivateSums:
        values: dict[str, torch.Tensor] = {}
        for n in sums:
            t = sums[n]
            spec = schema[n]
            if n in plan.blocks and t.dtype != spec.out_dtype:
                t = torch.round(t) if not spec.out_dtype.is_floating_point else t
                t = t.to(spec.out_dtype)
            values[n] = t
        rows = {n: m for n in sums if (m := sums.withheld_rows(n)) is not None}
        clip = {k: v for k, v in sums.clip_counts.items() if k not in plan.blocks}
        return PrivateSums(
            values,
            num_contributors=sums.num_contributors,
            withheld=sums.withheld,
            withheld_rows=rows,
            clip_counts=clip,
            max_abs_error=sums.max_abs_error,
            privacy=report,
        )
