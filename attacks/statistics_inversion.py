r"""Statistics and prototype inversion: a client's class statistics from what the server saw, and differencing.

Targets:

* **O-pFGL** (Yan et al., https://arxiv.org/abs/2411.11304): client :math:`k` uploads, per class :math:`c`,
  :math:`a_k^c = N_k^c`, :math:`b_k^c = \sum_{i \in S_k^c} x_i^{prop}` and :math:`q_k^c = \sum_{i \in S_k^c}
  x_i^{prop} \odot x_i^{prop}`, from which

  .. math::
      \mu_k^c = b_k^c / a_k^c,\qquad \sigma_k^{2,c} = \frac{q_k^c - a_k^c (\mu_k^c)^2}{a_k^c - 1},\qquad
      \pi_k^c = a_k^c / \textstyle\sum_{c'} a_k^{c'}.

* **FedSpray** (Fu et al., KDD 2024, https://doi.org/10.1145/3637528.3671717): client :math:`k` uploads the
  weighted proxy deltas :math:`a_k^j (s_k^j - S_{r-1}^j)` and the weights :math:`a_k^j` (its label
  distribution), so :math:`s_k^j = S_{r-1}^j + \text{delta}/a_k^j` with the broadcast :math:`S_{r-1}`.

The server gets these from a plaintext view directly (the positive control), and from a secure protocol
only the sum over clients (the public baseline). The **differencing attack** (the disaggregation of Lam et
al., "Gradient Disaggregation", ICML 2021, https://arxiv.org/abs/2106.06089, in its simplest form) needs no
individual upload: two released sums of the same statistic whose participant sets differ by one client give
that client's upload by subtraction,

.. math::
    S(A) - S(A \setminus \{k\}) = x_k,

exactly up to the encoding's quantisation. A one-shot statistic (O-pFGL's upload, FedStruct's setup sums)
re-aggregated after a dropout, or a server that simply asks twice, is enough. The defence belongs to the
protocol layer: :class:`securefgl.protocols.release_guard.ReleaseGuard` refuses to release a sum of the same
statistic (same schema and round context) whose participant set differs from an earlier release by fewer
than :math:`m` clients, or fixes the participant set of the session.

Metrics against the client's true statistics: L1 distance of the label distributions (chance: the
distance between the public, i.e. released, overall distribution and the client's), the mean cosine and the
largest absolute error of the per-class means, and whether every released statistic was recovered exactly
(within the stated quantisation error).

Shapes:
    ``C`` classes, ``D`` statistic dimension (``(h+1) F`` for O-pFGL, the proxy dimension for FedSpray).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.errors import AttackNotApplicableError, ConfigError, ProtocolError

__all__ = [
    "ClassStatistics",
    "DifferencingResult",
    "StatisticsLayout",
    "class_statistics",
    "compare_statistics",
    "differencing_attack",
    "layout_for",
    "subtract",
]


@dataclass(frozen=True)
class StatisticsLayout:
    """Which blocks of an algorithm's upload hold which class statistic.

    Args:
        algorithm: Algorithm name.
        weight: Per-class count/weight block ``(C,)`` (the label distribution).
        sums: Per-class sums ``(C, D)`` (O-pFGL) or weighted proxy deltas (FedSpray).
        sumsq: Per-class sums of squares ``(C, D)`` (O-pFGL), else ``None``.
        reference: Broadcast key of the rows the sums are deltas from (FedSpray's proxies), else ``None``.
    """

    algorithm: str
    weight: str
    sums: str
    sumsq: str | None = None
    reference: str | None = None


_LAYOUTS = {
    "opfgl": StatisticsLayout("opfgl", weight="count", sums="sum", sumsq="sumsq"),
    "fedspray": StatisticsLayout("fedspray", weight="proxy.weight", sums="proxy.sum", reference="proxies"),
}


def layout_for(algorithm: str) -> StatisticsLayout:
    """The statistics layout of ``algorithm``.

    Raises:
        AttackNotApplicableError: the algorithm uploads no class statistics (the valid ones are listed).
    """
    try:
        return _LAYOUTS[algorithm]
    except KeyError:
        raise AttackNotApplicableError(
            f"algorithm {algorithm!r} uploads no class statistics or prototypes; the statistics attacks apply "
            f"to: {', '.join(sorted(_LAYOUTS))}"
        ) from None


@dataclass
class ClassStatistics:
    """Per-class statistics of one client (or of a sum).

    Args:
        weights: ``(C,)`` counts (O-pFGL) or weights (FedSpray).
        label_distribution: ``(C,)`` weights normalised to sum 1.
        means: ``(C, D)`` class means (NaN rows for classes with no weight or withheld).
        variances: ``(C, D)`` class variances (O-pFGL, classes with at least two nodes), else ``None``.
    """

    weights: Tensor
    label_distribution: Tensor
    means: Tensor
    variances: Tensor | None = None


def class_statistics(
    values: Mapping[str, Tensor], layout: StatisticsLayout, broadcast: Mapping[str, Tensor] | None = None
) -> ClassStatistics:
    """The statistics encoded by an upload (or a sum, or a difference of sums).

    Raises:
        AttackNotApplicableError: blocks of the layout are missing (or the reference broadcast is).
    """
    need = [b for b in (layout.weight, layout.sums, layout.sumsq) if b is not None and b not in values]
    if need:
        raise AttackNotApplicableError(f"the upload lacks the statistic blocks {need}")
    w = torch.as_tensor(values[layout.weight]).to(torch.float64).flatten()
    s = torch.as_tensor(values[layout.sums]).to(torch.float64)
    s = s.reshape(w.numel(), -1)
    present = (w > 0.5 if layout.algorithm == "opfgl" else w > 1e-12) & torch.isfinite(w)
    safe = torch.where(present, w, torch.ones_like(w))
    means = s / safe[:, None]
    if layout.reference is not None:
        if broadcast is None or layout.reference not in broadcast:
            raise AttackNotApplicableError(
                f"the statistics are deltas from broadcast {layout.reference!r}, which is missing"
            )
        means = means + broadcast[layout.reference].detach().to(torch.float64).reshape(means.shape)
    means[~present] = float("nan")
    var = None
    if layout.sumsq is not None:
        q = torch.as_tensor(values[layout.sumsq]).to(torch.float64).reshape(s.shape)
        den = (w - 1).clamp(min=1)[:, None]
        var = (q - w[:, None] * means.nan_to_num() ** 2) / den
        var[~(present & (w > 1.5))] = float("nan")
    tot = w[present].sum()
    dist = torch.where(present, w, torch.zeros_like(w)) / (tot if float(tot) > 0 else 1.0)
    return ClassStatistics(weights=w, label_distribution=dist, means=means, variances=var)


def compare_statistics(
    got: ClassStatistics, truth: ClassStatistics, *, atol: float = 1e-4
) -> dict[str, float]:
    """How close recovered statistics are to the true ones.

    Returns:
        ``label_l1`` (L1 distance of the label distributions), ``mean_cosine`` (over classes present in
        both), ``mean_max_abs_error``, ``var_max_abs_error`` (O-pFGL), ``classes_compared``, and ``exact``
        (1.0 when every released weight and every compared mean agree within ``atol``, else 0.0), and
        ``classes_withheld`` (classes the target holds whose row the protocol withheld, e.g. by its
        minimum-contributors rule: they are not counted against ``exact``, and are reported).
    """
    out: dict[str, float] = {
        "label_l1": float((got.label_distribution - truth.label_distribution).abs().sum())
    }
    both = torch.isfinite(got.means).all(1) & torch.isfinite(truth.means).all(1)
    out["classes_compared"] = float(both.sum())
    if bool(both.any()):
        cos = F.cosine_similarity(got.means[both], truth.means[both], dim=1, eps=1e-30)
        out["mean_cosine"] = float(cos.mean())
        out["mean_max_abs_error"] = float((got.means[both] - truth.means[both]).abs().max())
    else:
        out["mean_cosine"] = float("nan")
        out["mean_max_abs_error"] = float("nan")
    if got.variances is not None and truth.variances is not None:
        vb = torch.isfinite(got.variances).all(1) & torch.isfinite(truth.variances).all(1)
        out["var_max_abs_error"] = (
            float((got.variances[vb] - truth.variances[vb]).abs().max()) if bool(vb.any()) else float("nan")
        )
    released = torch.isfinite(got.weights)
    out["classes_withheld"] = float((~released & (truth.weights > 0)).sum())
    weights_ok = bool(((got.weights - truth.weights)[released].abs() <= atol).all())
    means_ok = (
        bool(both.any())
        and out["mean_max_abs_error"] <= atol
        and bool((torch.isfinite(got.means).all(1) == torch.isfinite(truth.means).all(1))[released].all())
    )
    out["exact"] = 1.0 if (weights_ok and means_ok) else 0.0
    return out


def subtract(first: Any, second: Any) -> dict[str, Tensor]:
    """``first - second`` block by block (two released sums); withheld rows come out NaN.

    Raises:
        AttackNotApplicableError: a block needed on both sides was withheld as a whole.
    """
    out = {}
    for name in first:
        if name not in second:
            continue
        a = torch.as_tensor(first[name]).to(torch.float64)
        b = torch.as_tensor(second[name]).to(torch.float64)
        out[name] = a - b
    if not out:
        raise AttackNotApplicableError("the two sums share no released block to subtract")
    return out


@dataclass
class DifferencingResult:
    """The outcome of a differencing attempt.

    Args:
        target: The client the attack isolates.
        first_set, second_set: Participant sets of the two releases (``second_set`` empty if refused).
        recovered: The difference ``S(A) - S(A \\ {k})`` (``None`` if the second release was refused).
        refused: Why the protocol refused the second release (empty if it did not).
        records: The two aggregation records (auditor's side).
    """

    target: int
    first_set: tuple[int, ...]
    second_set: tuple[int, ...]
    recovered: dict[str, Tensor] | None
    refused: str
    records: list[Any]


def differencing_attack(
    protocol: Any,
    schema: Any,
    contributions: Mapping[int, Mapping[str, Any]],
    target: int,
    *,
    round_index: int = 0,
    context: bytes = b"",
    phase: str = "upload",
    broadcast: Mapping[str, Tensor] | None = None,
) -> DifferencingResult:
    """Release the same statistic twice, with and without ``target``, and subtract (server-side).

    The second aggregation is what a retry after ``target`` drops out produces: the same inputs, the same
    round context, one participant fewer (modelled with a dropout of ``target`` before its masked input,
    so the protocol runs its dropout recovery). Only the released sums are used, as the server sees them.

    Args:
        protocol: The protocol object (e.g. ``get_protocol("secagg")``, possibly wrapped by
            :class:`~securefgl.protocols.release_guard.ReleaseGuard`).
        schema: The statistic's public schema.
        contributions: Every participant's upload (the clients' side of the simulation).
        target: The client to isolate.
        round_index, context, phase, broadcast: The round (the same for both releases: the same statistic).

    Raises:
        ConfigError: ``target`` is not a participant.
    """
    from securefgl.attacks.views import AggregationRecord
    from securefgl.protocols.base import DropoutPlan

    if target not in contributions:
        raise ConfigError(f"target {target!r} is not a participant; participants: {sorted(contributions)}")
    first_sums, first_tr = protocol.aggregate(schema, contributions, round_index=round_index, context=context)
    records = [
        AggregationRecord(
            "stats",
            phase,
            round_index,
            schema,
            dict(broadcast or {}),
            first_tr,
            first_sums,
            None,
            dict(contributions),
        )
    ]
    stage = _input_stage(first_tr)
    try:
        second_sums, second_tr = protocol.aggregate(
            schema,
            contributions,
            dropouts=DropoutPlan({int(target): stage}),
            round_index=round_index,
            context=context,
        )
    except ProtocolError as exc:
        return DifferencingResult(
            int(target), tuple(first_tr.survivors), (), None, f"{type(exc).__name__}: {exc}", records
        )
    records.append(
        AggregationRecord(
            "stats",
            phase,
            round_index,
            schema,
            dict(broadcast or {}),
            second_tr,
            second_sums,
            None,
            dict(contributions),
        )
    )
    diff = subtract({k: first_sums[k] for k in first_sums}, {k: second_sums[k] for k in second_sums})
    return DifferencingResult(
        int(target), tuple(first_tr.survivors), tuple(second_tr.survivors), diff, "", records
    )


def _input_stage(transcript: Any) -> str:
    """The stage at which clients send their inputs, from the transcript's phases."""
    for stage in ("masked_input", "input", "upload"):
        if stage in transcript.phase_seconds:
            return stage
    if "resume" in transcript.phase_seconds:  # a resumed SecAgg+ use; a planned dropout gets a fresh session
        return "masked_input"
    phases = list(transcript.phase_seconds)
    return phases[0] if phases else "input"
