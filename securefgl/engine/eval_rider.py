r"""An evaluation's counts carried in the next round's training sum: one protocol run fewer per round.

Every evaluation is a sum like any other (:mod:`securefgl.engine.evaluation`), and a secure sum has a fixed
cost per run that does not depend on its length: a fresh SecAgg+ run is a key agreement of every client
with its neighbours, a Shamir sharing and four round trips, about 0.15 s for 100 simulated clients against a
few microseconds for the evaluation's couple of dozen numbers. When the next round has a server-bound sum of every
client (the first one, where it has several), the evaluation of the round before rides in it instead of running
its own protocol.

The two sums live in different rings. The evaluation schema's real blocks use steps down to :math:`2^{-40}`
and need the 64-bit ring; a training schema's ring is as narrow as its bounds allow (33-40 bits for FedAvg's
GCN on Cora), and widening it for the riders would widen every element of the upload. So each client encodes
its evaluation upload with the evaluation schema, exactly as the evaluation protocol would, and splits every
ring element :math:`e < 2^{k_e}` into :math:`L = \lceil k_e / w \rceil` limbs of :math:`w` bits,

.. math::
    e = \sum_{j<L} e_j\,2^{wj},\qquad 0 \le e_j < 2^{w},

appended to its training contribution as one count block (:data:`RIDER_BLOCK`, bound :math:`2^w - 1`). The
width :math:`w` is the largest that keeps the training schema's ring (about :math:`k - \operatorname{bitlen}(N)
- 1` for :math:`N` = ``max_clients``), so a sum of :math:`n \le N` limbs never wraps and the upload keeps its
width. From the limb sums :math:`S_j = \sum_u e_{u,j}` the server rebuilds

.. math::
    \sum_u e_u \equiv \sum_{j<L} S_j\,2^{wj} \pmod{2^{k_e}},

the very ring sum the evaluation protocol would have unmasked, and decodes and releases it under the evaluation
schema's own rules. The released evaluation sums are bit-identical to those of a separate run over the same
clients (``train.eval_in_next_sum=false`` runs them separately; a test compares the two runs), and the
training blocks encode exactly as under the training schema alone, so the training sums are unchanged too.
The server learns the same two sums as before, over the training sum's contributors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from securefgl.algorithms.base import RoundState
from securefgl.engine.metrics import ClientMetrics
from securefgl.engine.records import EvalRecord, RoundRecord
from securefgl.errors import OverflowRiskError, TrainingError
from securefgl.protocols.base import Sums
from securefgl.protocols.encoding import BlockSpec, SumSchema, check_sum_range

__all__ = ["MIN_LIMB_BITS", "RIDER_BLOCK", "EvalRider", "PendingEvaluation"]

#: Name of the count block that carries the evaluation's limbs in a training contribution.
RIDER_BLOCK = "__eval__"
#: Narrower limbs than this are not worth it: the evaluation sum then runs on its own.
MIN_LIMB_BITS = 8


@dataclass(frozen=True)
class EvalRider:
    """A training schema with an evaluation schema's ring sum appended as limbs (see the module docstring).

    Build it with :meth:`fit`; :attr:`combined` is the schema the protocol runs.
    """

    train: SumSchema
    evaluation: SumSchema
    combined: SumSchema
    limb_bits: int
    limbs: int

    @classmethod
    def fit(cls, train: SumSchema, evaluation: SumSchema) -> EvalRider | None:
        """The rider for ``train`` and ``evaluation``, or ``None`` where the evaluation cannot ride: the
        training schema already has a block named :data:`RIDER_BLOCK`, reserves ring bits for DP noise
        (``extra_bits``), sums fewer clients than the evaluation, or its ring leaves limbs narrower than
        :data:`MIN_LIMB_BITS`."""
        if RIDER_BLOCK in train or train.extra_bits or train.max_clients < evaluation.max_clients:
            return None
        width = min(train.ring_bits - int(train.max_clients).bit_length() - 1, evaluation.ring_bits)
        for w in range(width, MIN_LIMB_BITS - 1, -1):
            limbs = -(-evaluation.ring_bits // w)
            block = BlockSpec(RIDER_BLOCK, (evaluation.length * limbs,), kind="count", bound=(1 << w) - 1)
            try:
                combined = SumSchema(
                    (*train.blocks, block),
                    max_clients=train.max_clients,
                    precision=train.precision,
                    min_contributors=train.min_contributors,
                )
            except OverflowRiskError:
                continue
            if combined.ring_bits <= train.ring_bits:
                return cls(train, evaluation, combined, w, limbs)
        return None

    def attach(self, contribution: Mapping[str, Any], evaluation: Mapping[str, Any]) -> dict[str, Any]:
        """Client side: the training contribution with the evaluation upload's limbs appended.

        The evaluation upload is encoded under the evaluation schema (on its grid, as the engine rounds it,
        the encoding is exact); a clipped evaluation value would be lost, so it is refused.
        """
        enc = self.evaluation.encode(evaluation)
        clipped = {k: v for k, v in enc.clip_counts.items() if v}
        if clipped:
            raise TrainingError(f"evaluation upload outside the evaluation schema's bounds: {clipped}")
        shifts = np.arange(self.limbs, dtype=np.uint64) * np.uint64(self.limb_bits)
        mask = np.uint64((1 << self.limb_bits) - 1)
        parts = (enc.data[:, None] >> shifts[None, :]) & mask  # (length, limbs), least significant first
        return {**contribution, RIDER_BLOCK: torch.from_numpy(parts.reshape(-1).astype(np.int64))}

    def split(self, sums: Sums) -> tuple[Sums, Sums]:
        """Server side: the released combined sums -> (the training sums, the evaluation sums).

        Raises:
            ReleaseRefusedError: the rebuilt evaluation sum breaks the evaluation schema's release rules.
        """
        names = self.train.names
        rows = {n: r for n in names if (r := sums.withheld_rows(n)) is not None}
        training = Sums(
            {n: sums[n] for n in names if not sums.is_withheld(n)},
            num_contributors=sums.num_contributors,
            withheld={n: why for n, why in sums.withheld.items() if n != RIDER_BLOCK},
            withheld_rows=rows,
            clip_counts={n: c for n, c in sums.clip_counts.items() if n != RIDER_BLOCK},
            max_abs_error={n: e for n, e in sums.max_abs_error.items() if n != RIDER_BLOCK},
        )
        return training, self._evaluation_sums(sums[RIDER_BLOCK], sums.num_contributors)

    def _evaluation_sums(self, limb_sums: torch.Tensor, n: int) -> Sums:
        parts = limb_sums.numpy().astype(np.uint64).reshape(self.evaluation.length, self.limbs)
        ring = np.zeros(self.evaluation.length, dtype=np.uint64)
        for j in range(self.limbs):  # uint64 arithmetic wraps mod 2^64, the widest ring
            ring += parts[:, j] << np.uint64(j * self.limb_bits)
        if self.evaluation.ring_bits < 64:
            ring &= np.uint64((1 << self.evaluation.ring_bits) - 1)
        values = self.evaluation.decode(ring, n)
        errors = self.evaluation.error_bound(n)
        check_sum_range(self.evaluation.blocks, values, n, errors, {}, "release")
        return self.evaluation.release(values, n, {}, errors)


@dataclass
class PendingEvaluation:
    """An evaluated round: its broadcast, record and, once the clients scored it, their uploads and sums.

    Without early stopping the evaluation of a round is scored at the start of the next round and its counts
    ride in that round's training sum (:class:`EvalRider`); otherwise, or where they cannot
    ride, they are summed on their own.
    """

    rs: RoundState
    broadcast: Mapping[str, torch.Tensor]
    record: RoundRecord
    select: bool = True
    scored: bool = False
    per_client: list[ClientMetrics] = field(default_factory=list)
    contribs: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    sums: Sums | None = None
    seconds: float = 0.0
    read: bool = False  # the server has read the sums (never read twice, also after a failure)
    outcome: tuple[EvalRecord, bool] | None = None

    @property
    def eval_rs(self) -> RoundState:
        """The evaluated round's state, with the evaluated broadcast and the clients that score it."""
        rs = self.rs
        return RoundState(
            rs.phase, rs.round, rs.global_round, tuple(self.contribs), self.broadcast, rs.num_rounds
        )
