r"""Evaluation through secure sums: clients count, the protocol sums, the server decides.

Every evaluation of a run is a sum request like any other. Each client scores its own nodes
(:func:`~securefgl.engine.metrics.client_metrics`, on the client) and uploads a few numbers per split
``s`` (``val``, ``test``); the run's protocol sums them, and the overall metrics, the best round and early
stopping are computed from those sums alone (:func:`metrics_from_sums`, :class:`RoundSelector`). No
per-client metric reaches the server. Per client ``k`` and split ``s``:

.. math::
    n_{k,s},\quad c_{k,s} \;(\text{correct}),\quad \ell_{k,s} = \sum_{v} \min(\mathrm{CE}_v, 64),\quad
    w_{k,s} = N_k\,1[n_{k,s}>0],\quad N_k\,\mathrm{acc}_{k,s},\quad N_k\,\mathrm{F1}_{k,s}

(and, on ``test``, the minority-class counts of FedSpray; on binary tasks, the counts of positive and negative
nodes per bin of the class-1 logit margin, from which the pooled ROC AUC is read:
:mod:`securefgl.engine.auc`). Over clients the server computes exactly the rules of
:mod:`securefgl.engine.metrics`:

.. math::
    \mathrm{acc}_s = \frac{\sum_k N_k\,\mathrm{acc}_{k,s}}{\sum_k w_{k,s}},\qquad
    \mathrm{acc}^{pooled}_s = \frac{\sum_k c_{k,s}}{\sum_k n_{k,s}}

Counts are exact; the two weighted real blocks are fixed point with a step of :math:`2^{-f}` chosen as fine as
the 64-bit ring allows (:func:`evaluation_schema`), so two rounds whose weighted accuracies differ by less than
the sum's rounding bound count as a tie and the earlier round is kept (:class:`RoundSelector`). On binary tasks
the best round is the one of highest validation ROC AUC instead (:func:`selection_metric`: accuracy says little
when one class is most of the nodes), read from exact counts, so without a rounding bound. A per-node
cross-entropy above 64 is clipped in the loss sum (reported only; it steers nothing).

The per-client table a user sees (``SeedResult.final.per_client``) is computed on the client side and stays
there: in a deployment each organisation sees its own row only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from securefgl.engine.auc import AUC_BINS, auc_from_histograms
from securefgl.errors import OverflowRiskError
from securefgl.protocols.base import Contribution, Sums
from securefgl.protocols.encoding import BlockSpec, SumSchema

if TYPE_CHECKING:
    from securefgl.engine.metrics import ClientMetrics

__all__ = [
    "EVAL_KEY",
    "LOSS_CLIP",
    "RoundSelector",
    "evaluation_contribution",
    "evaluation_schema",
    "metrics_from_sums",
    "selection_metric",
    "selection_tolerance",
]

#: Request key of the evaluation sum (transcripts, hooks, grid-rounding streams).
EVAL_KEY = "eval"
#: Per-node cross-entropy cap in the loss sum (``exp(-64)`` is below float32's smallest normal).
LOSS_CLIP = 64.0
_SPLITS = ("val", "test")


def evaluation_schema(
    count_bound: int,
    max_clients: int,
    splits: Sequence[str] = _SPLITS,
    *,
    finest: int = 40,
    num_classes: int | None = None,
) -> SumSchema:
    r"""The public schema of an evaluation sum.

    Args:
        count_bound: Public bound on any client's node count :math:`N_k`.
        max_clients: The most clients in one evaluation sum.
        splits: The splits evaluated. (default: ``("val", "test")``)
        finest: The finest step tried for the real blocks is :math:`2^{-\mathrm{finest}}`; coarser steps are
            tried until the worst-case sum fits the 64-bit ring. (default: ``40``)
        num_classes: The task's classes; with 2 the sum carries the ROC AUC histograms (``<split>.auc_pos``,
            ``<split>.auc_neg``: :data:`~securefgl.engine.auc.AUC_BINS` counts each). (default: ``None``)

    Raises:
        OverflowRiskError: Even a step of 1 does not fit (more than about :math:`2^{50}` nodes).
    """
    bound = int(count_bound)
    blocks: list[BlockSpec] = []
    for s in splits:
        blocks += [
            BlockSpec(f"{s}.n", (1,), kind="count", bound=bound),
            BlockSpec(f"{s}.correct", (1,), kind="count", bound=bound),
            BlockSpec(f"{s}.weight", (1,), kind="count", bound=bound),
            BlockSpec(f"{s}.acc_w", (1,), bound=bound, dtype=torch.float64),
            BlockSpec(f"{s}.f1_w", (1,), bound=bound, dtype=torch.float64),
            BlockSpec(f"{s}.loss", (1,), bound=bound * LOSS_CLIP, dtype=torch.float64),
        ]
        if s == "test":
            blocks += [
                BlockSpec("test.minority_n", (1,), kind="count", bound=bound),
                BlockSpec("test.minority_correct", (1,), kind="count", bound=bound),
            ]
        if num_classes == 2:
            blocks += [
                BlockSpec(f"{s}.auc_pos", (AUC_BINS,), kind="count", bound=bound),
                BlockSpec(f"{s}.auc_neg", (AUC_BINS,), kind="count", bound=bound),
            ]
    for f in range(finest, -1, -1):
        try:
            return SumSchema(blocks, max_clients=max(1, int(max_clients)), precision=2.0**-f)
        except OverflowRiskError:
            continue
    raise OverflowRiskError(
        f"no fixed-point step fits an evaluation sum of {max_clients} clients with node counts up to {bound}"
    )


def evaluation_contribution(metrics: ClientMetrics, splits: Sequence[str] = _SPLITS) -> Contribution:
    """One client's upload for the evaluation sum, from its own metrics (client side); the ROC AUC histograms
    when the metrics have them (binary tasks: the schema's ``num_classes=2``)."""
    n_k = float(metrics.num_nodes)
    out: dict[str, torch.Tensor] = {}
    for s in splits:
        m = metrics.splits[s]
        has = m.n > 0
        out[f"{s}.n"] = torch.tensor([m.n], dtype=torch.int64)
        out[f"{s}.correct"] = torch.tensor([m.correct], dtype=torch.int64)
        out[f"{s}.weight"] = torch.tensor([int(n_k) if has else 0], dtype=torch.int64)
        out[f"{s}.acc_w"] = torch.tensor([n_k * m.acc if has else 0.0], dtype=torch.float64)
        f1 = m.f1 if has and not math.isnan(m.f1) else 0.0
        out[f"{s}.f1_w"] = torch.tensor([n_k * f1], dtype=torch.float64)
        out[f"{s}.loss"] = torch.tensor([min(m.loss_sum, LOSS_CLIP * m.n)], dtype=torch.float64)
        if s == "test":
            out["test.minority_n"] = torch.tensor([m.minority_n], dtype=torch.int64)
            out["test.minority_correct"] = torch.tensor([m.minority_correct], dtype=torch.int64)
        if m.auc_pos is not None and m.auc_neg is not None:
            out[f"{s}.auc_pos"] = m.auc_pos.to(torch.int64)
            out[f"{s}.auc_neg"] = m.auc_neg.to(torch.int64)
    return out


def metrics_from_sums(sums: Mapping[str, torch.Tensor], splits: Sequence[str] = _SPLITS) -> dict[str, float]:
    """The overall metrics (the keys of :func:`~securefgl.engine.metrics.aggregate_clients`) from the sums."""

    def one(name: str) -> float:
        return float(sums[name].double().reshape(-1)[0])

    def ratio(num: float, den: float) -> float:
        return num / den if den > 0 else float("nan")

    out: dict[str, float] = {}
    for s in splits:
        n, weight = one(f"{s}.n"), one(f"{s}.weight")
        out[f"{s}_acc"] = ratio(one(f"{s}.acc_w"), weight)
        out[f"{s}_f1"] = ratio(one(f"{s}.f1_w"), weight)
        out[f"{s}_acc_pooled"] = ratio(one(f"{s}.correct"), n)
        out[f"{s}_loss"] = ratio(one(f"{s}.loss"), n)
        if s == "test":
            out["test_minority_acc"] = ratio(one("test.minority_correct"), one("test.minority_n"))
        if f"{s}.auc_pos" in sums:
            out[f"{s}_auc"] = auc_from_histograms(sums[f"{s}.auc_pos"], sums[f"{s}.auc_neg"])
    return out


def selection_metric(overall: Mapping[str, float]) -> str:
    """The metric the best round is chosen by: ``val_auc`` on binary tasks (it is in the sums), else
    ``val_acc``."""
    return "val_auc" if "val_auc" in overall else "val_acc"


def selection_tolerance(sums: Sums, schema: SumSchema, split: str = "val", metric: str = "val_acc") -> float:
    """Bound on how far the summed selection metric of ``split`` can be from the exact value.

    Each contributor's real block is within one grid step of its value (rounded on the client or by the
    protocol's encoder), plus whatever error the protocol states for the sum (CKKS). The ROC AUC (``metric``
    ``val_auc``) is read from counts, which every protocol sums exactly: 0.
    """
    if metric.endswith("_auc"):
        return 0.0
    name = f"{split}.acc_w"
    weight = float(sums[f"{split}.weight"].double().reshape(-1)[0])
    if weight <= 0:
        return 0.0
    err = sums.num_contributors * schema.steps[name] + float(sums.max_abs_error.get(name, 0.0))
    return err / weight


@dataclass
class RoundSelector:
    """The server's model selection and early stopping, from evaluation sums only.

    A round is better when its selection metric (:func:`selection_metric`: ``val_acc``, node-weighted over
    clients, or ``val_auc`` on binary tasks) exceeds the best one by more than both rounds' rounding bounds; on a tie the earlier round stays. ``patience``
    evaluations without a better round stop the phase.

    Args:
        patience: Evaluations without improvement before stopping; ``None`` never stops. (default: ``None``)
    """

    patience: int | None = None
    best_value: float = float("nan")
    best_tolerance: float = 0.0
    since_best: int = 0
    seen: int = 0

    def observe(self, value: float, tolerance: float = 0.0) -> bool:
        """Record one evaluation's validation accuracy; ``True`` if it is the new best."""
        self.seen += 1
        first = self.seen == 1
        if first or (not math.isnan(value) and math.isnan(self.best_value)):
            better = True
        else:
            better = not math.isnan(value) and value > self.best_value + tolerance + self.best_tolerance
        if better:
            self.best_value, self.best_tolerance, self.since_best = value, tolerance, 0
        else:
            self.since_best += 1
        return better

    @property
    def should_stop(self) -> bool:
        """Whether ``patience`` evaluations passed without a better round."""
        return self.patience is not None and self.since_best >= self.patience
