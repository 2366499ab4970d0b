r"""Analytic first-layer inversion of honest uploads: the inputs a first linear layer's update gives away.

For a first layer :math:`y = W x + b` (an MLP's first layer on the node features :math:`X`, or a GCN's first
layer, whose input is the propagated :math:`\hat A X`) the gradient of a client's loss is
:math:`\partial L/\partial W = \sum_n \delta_n x_n^\top` and :math:`\partial L/\partial b = \sum_n \delta_n`,
with :math:`\delta_n` the error signal of node :math:`n` at the layer's output. For a hidden unit :math:`i`
where exactly one node :math:`n` has :math:`\delta_{n,i} \ne 0` (the ReLU is off for every other node) row
:math:`i` of :math:`\partial L/\partial W` divided by entry :math:`i` of :math:`\partial L/\partial b` is
:math:`x_n` **exactly** (Phong et al. 2017; Geiping et al. 2020, Prop. D.1). No crafted model is needed: the
server reads the honest upload.

What the server sees:

* FedSGD or one local step of SGD with learning rate :math:`\eta`: :math:`\Delta W = -\eta\,\partial L/\partial
  W`, :math:`\Delta b = -\eta\,\partial L/\partial b`, and the ratio is the same.
* :math:`E > 1` local SGD steps: :math:`\Delta W_i/\Delta b_i` is a weighted mean of the inputs reaching unit
  :math:`i` over the steps; it stays one node's input while that node alone activates the unit (measured in
  :mod:`benchmarks.analytic_inversion`).
* Adam: the first step is :math:`-\eta\,\mathrm{sign}(g)` elementwise (:math:`\hat m/\sqrt{\hat v} = g/|g|`),
  so the ratio of a single-node unit is the **support** of :math:`x_n` (1 where :math:`x_{n,j} \ne 0`, 0
  elsewhere): the exact input for binary bag-of-words features, only its support for real-valued ones
  (propagated rows). Implemented as the same ratio; its success is measured, not assumed.
* Under secure aggregation the server sees only :math:`\sum_k n_k \Delta_k` over the round's clients: a unit
  now needs exactly one active node among **all** clients' training nodes, which almost never happens
  unless one client has very few nodes and the others leave the unit dead.

Scoring (:func:`score_inversion`): for every true row (a client's training nodes' first-layer inputs) the best
cosine over the candidates; the fraction above ``exact_cosine`` (0.99), the mean best cosine, and the chance
baseline: the same score for as many random rows of the public part of the graph as there are candidates.

The federated path (:func:`analytic_study`) runs the engine's clients and their algorithm's own client step
(:func:`~securefgl.attacks._imprint_run.malicious_setup`, here with the honest broadcast) and the named
protocol with real keys for the secure sum.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from securefgl.attacks._inversion_analytic import group_repeated_rows
from securefgl.attacks.imprint import imprint_layout, match_rows
from securefgl.errors import AttackNotApplicableError, ConfigError

__all__ = [
    "AnalyticConfig",
    "AnalyticResult",
    "analytic_study",
    "first_layer_candidates",
    "invert_first_layer",
    "score_inversion",
    "subsample_train",
    "upload_delta",
]


@dataclass(frozen=True)
class AnalyticConfig:
    """The inversion's thresholds.

    Args:
        min_bias: Units whose :math:`|\\Delta b_i|` is below ``min_bias`` times the largest are skipped (dead
            units, float noise). (default: ``1e-4``)
        dedup_cosine: Candidates with cosine above this (and norms within ``dedup_norm``) are merged. Several
            units active on the same single node give the same row. (default: ``0.9999``)
        dedup_norm: Relative norm tolerance of the merge. (default: ``1e-3``)
        exact_cosine: A true row counts as recovered exactly above this best cosine. (default: ``0.99``)
        seed: Seeds the chance baseline's draw. (default: ``0``)
    """

    min_bias: float = 1e-4
    dedup_cosine: float = 0.9999
    dedup_norm: float = 1e-3
    exact_cosine: float = 0.99
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.min_bias < 1:
            raise ConfigError(f"min_bias must be in [0, 1), got {self.min_bias}")
        if not (0 < self.dedup_cosine <= 1 and 0 < self.exact_cosine <= 1 and self.dedup_norm >= 0):
            raise ConfigError("dedup_cosine and exact_cosine must be in (0, 1], dedup_norm >= 0")


def first_layer_candidates(
    dw: Tensor, db: Tensor, config: AnalyticConfig | None = None
) -> tuple[Tensor, Tensor]:
    r"""Candidate inputs :math:`\Delta W_i / \Delta b_i` of every live unit, near-duplicates merged.

    Args:
        dw: ``(H, F)`` first-layer weight update (or gradient; the sign and scale cancel).
        db: ``(H,)`` first-layer bias update.
        config: Thresholds (default: :class:`AnalyticConfig`).

    Returns:
        ``(rows, repeats)``: ``(m, F)`` float64 distinct candidates, most repeated first, and how many units gave
        each (a row given by two or more units is, up to float error, one node's input).
    """
    cfg = config or AnalyticConfig()
    dw = torch.as_tensor(dw).detach().to(torch.float64)
    db = torch.as_tensor(db).detach().to(torch.float64).flatten()
    if dw.dim() != 2 or db.numel() != dw.shape[0]:
        raise ConfigError(f"dw must be (H, F) and db (H,), got {tuple(dw.shape)} and {tuple(db.shape)}")
    empty = torch.empty(0, dw.shape[1], dtype=torch.float64), torch.empty(0, dtype=torch.long)
    top = float(db.abs().max()) if db.numel() else 0.0
    if top == 0.0 or not math.isfinite(top):
        return empty
    live = db.abs() > top * cfg.min_bias
    cand = dw[live] / db[live, None]
    cand = cand[torch.isfinite(cand).all(1) & (cand.abs().sum(1) > 0)]
    if cand.numel() == 0:
        return empty
    rows, rep = group_repeated_rows(
        cand, min_cosine=cfg.dedup_cosine, norm_rtol=cfg.dedup_norm, norm_floor=1e-30
    )
    order = torch.argsort(-rep, stable=True)
    return rows[order], rep[order]


def score_inversion(
    candidates: Tensor,
    truth: Tensor,
    public: Tensor | None = None,
    config: AnalyticConfig | None = None,
) -> dict[str, float]:
    """Fraction of ``truth`` rows recovered exactly, mean best cosine, and the chance baseline.

    The chance baseline scores, against the same truth, ``len(candidates)`` (at least one) rows drawn at
    random from ``public`` (the first-layer inputs of nodes that are no client's training node).
    """
    cfg = config or AnalyticConfig()
    best, exact = match_rows(candidates, truth, cfg.exact_cosine)
    out = {
        "nodes": float(truth.shape[0]),
        "candidates": float(candidates.shape[0]),
        "exact": float(exact.double().mean()) if exact.numel() else math.nan,
        "mean_best_cosine": float(best.mean()) if best.numel() else math.nan,
    }
    if public is not None and public.shape[0]:
        gen = torch.Generator().manual_seed(cfg.seed)
        k = min(max(1, candidates.shape[0]), public.shape[0])
        rand = public[torch.randperm(public.shape[0], generator=gen)[:k]]
        cb, ce = match_rows(rand, truth, cfg.exact_cosine)
        out["chance_exact"] = float(ce.double().mean()) if ce.numel() else math.nan
        out["chance_mean_best_cosine"] = float(cb.mean()) if cb.numel() else math.nan
    return out


def upload_delta(upload: Mapping[str, Tensor], name: str, broadcast: Mapping[str, Tensor]) -> Tensor:
    """The update of parameter ``name`` carried by a FedAvg upload or sum.

    FedAvg uploads (and their sums) carry ``w.<name>`` :math:`= \\sum_k n_k w_k` and ``n`` :math:`= \\sum_k n_k`;
    the summed update is :math:`\\sum_k n_k (w_k - w) = \\text{w.<name>} - n\\,w`. DP-FedAvg uploads carry
    ``d.<name>`` (the delta) directly.
    """
    if f"d.{name}" in upload:
        return torch.as_tensor(upload[f"d.{name}"]).detach().double()
    if f"w.{name}" not in upload or "n" not in upload:
        raise AttackNotApplicableError(f"the upload holds no block for {name!r} (needs FedAvg uploads)")
    n = float(torch.as_tensor(upload["n"]).double().reshape(-1)[0])
    return torch.as_tensor(upload[f"w.{name}"]).detach().double() - n * broadcast[name].detach().double()


def invert_first_layer(
    upload: Mapping[str, Tensor],
    model: torch.nn.Module,
    broadcast: Mapping[str, Tensor],
    config: AnalyticConfig | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`first_layer_candidates` of one upload (or sum) of a two-layer MLP or GCN."""
    layout = imprint_layout(model)
    dw = upload_delta(upload, layout.first_weight, broadcast)
    db = upload_delta(upload, layout.first_bias, broadcast)
    return first_layer_candidates(dw, db, config)


def subsample_train(fg: Any, per_client: int | None, seed: int = 0) -> Any:
    """A copy of ``fg`` whose clients keep at most ``per_client`` training nodes (random, seeded)."""
    if per_client is None:
        return fg
    if per_client < 1:
        raise ConfigError(f"per_client must be >= 1, got {per_client}")
    out = copy.copy(fg)
    gen = torch.Generator().manual_seed(seed)
    clients = []
    for data in fg.clients:
        d = copy.copy(data)
        idx = torch.nonzero(data.train_mask.cpu()).flatten()
        keep = idx[torch.randperm(idx.numel(), generator=gen)[:per_client]]
        m = torch.zeros_like(data.train_mask)
        m[keep.to(m.device)] = True
        d.train_mask = m
        clients.append(d)
    out.clients = clients
    return out


@dataclass
class AnalyticResult:
    """One analytic-inversion run on a federated job.

    Args:
        model: ``"mlp"`` or ``"gcn"``.
        rows: One row per (view, client): ``view`` is ``"plaintext"`` (the client's own upload),
            ``"graph-unknown"`` (GCN: the same candidates scored against the raw features), or the protocol
            name (the secure sum of all clients, scored per client); the :func:`score_inversion` figures.
        summary: Per view: mean over clients (with at least one training node) of every figure.
        seconds: Wall time.
    """

    model: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0


def _summarise(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for view in dict.fromkeys(r["view"] for r in rows):
        sel = [r for r in rows if r["view"] == view and r["nodes"] > 0]
        keys = [k for k in sel[0] if isinstance(sel[0][k], float)] if sel else []
        out[view] = {k: float(sum(r[k] for r in sel) / len(sel)) for k in keys}
        out[view]["clients"] = float(len(sel))
    return out


def analytic_study(
    run_cfg: Any,
    fg: Any,
    *,
    seed: int = 0,
    protocols: Sequence[str] = ("secagg",),
    config: AnalyticConfig | None = None,
    clients: Sequence[int] | None = None,
    protocol_options: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> AnalyticResult:
    """Invert every client's first honest upload of ``run_cfg`` (FedAvg, mlp or gcn) and their secure sums.

    The clients, broadcast and upload are the engine's and the algorithm's own
    (:func:`~securefgl.attacks._imprint_run.malicious_setup`, honest first broadcast); each protocol in
    ``protocols`` aggregates the uploads with real keys and the released sum is inverted the same way.

    Args:
        run_cfg: The job (its ``train`` recipe sets optimiser, lr and local epochs).
        fg: The federated graph.
        seed: Engine seed.
        protocols: Protocols whose sum is inverted (besides each client's plaintext upload).
        config: Thresholds.
        clients: The round's clients (default: every client).
        protocol_options: Options of the protocols.
        progress: ``(done, total)`` callback.
    """
    from securefgl.attacks._imprint_run import malicious_setup
    from securefgl.engine.broadcast import round_context
    from securefgl.protocols.registry import get_protocol

    cfg = config or AnalyticConfig()
    t0 = time.perf_counter()
    setup = malicious_setup(run_cfg, fg, seed, "cpu")
    layout = imprint_layout(setup.model)
    ids = list(setup.clients if clients is None else clients)
    bc = setup.broadcast
    contrib = setup.train(ids, bc)
    raw = {i: fg.clients[i].x.detach().cpu().float()[fg.clients[i].train_mask.cpu()] for i in ids}
    res = AnalyticResult(model="gcn" if layout.propagated else "mlp")
    total = len(ids) + len(protocols)
    for j, i in enumerate(ids):
        cand, rep = invert_first_layer(contrib[i], setup.model, bc, cfg)
        s = score_inversion(cand, setup.truth[i], setup.public, cfg)
        res.rows.append({"view": "plaintext", "client": i, **s, "repeated": float(int((rep >= 2).sum()))})
        if layout.propagated:
            pub_x = torch.cat([d.x.detach().cpu().float()[~d.train_mask.cpu()] for d in fg.clients])
            res.rows.append(
                {"view": "graph-unknown", "client": i, **score_inversion(cand, raw[i], pub_x, cfg)}
            )
        if progress is not None:
            progress(j + 1, total)
    opts = dict(protocol_options or {})
    for j, name in enumerate(protocols):
        proto = get_protocol(name, **opts)
        sums, _tr = proto.aggregate(setup.schema_for(bc), contrib, round_index=0, context=round_context(bc))
        cand, _ = invert_first_layer(dict(sums), setup.model, bc, cfg)
        for i in ids:
            res.rows.append(
                {"view": name, "client": i, **score_inversion(cand, setup.truth[i], setup.public, cfg)}
            )
        if progress is not None:
            progress(len(ids) + j + 1, total)
    res.summary = _summarise(res.rows)
    res.seconds = time.perf_counter() - t0
    return res
