r"""A malicious server that crafts the model it broadcasts: imprint bins and trap weights.

Two published attacks recover individual inputs from the *securely summed* update: the server needs no
inconsistency (every client receives the same crafted model) and no protocol deviation (the sum is computed
by the real SecAgg/SecAgg+ with real keys); it only chooses the parameters of the public architecture.

* **Imprint bins** (Fowl, Geiping, Czaja, Goldblum, Goldstein, "Robbing the Fed: Directly Obtaining Private
  Data in Federated Learning with Modified Models", ICLR 2022, https://arxiv.org/abs/2110.13057). Every row
  of the first layer is one measurement vector :math:`a`, the biases are a ladder :math:`-c_1 > \dots > -c_H`
  (quantiles of :math:`a^\top x` on a public sample), and the second layer gives every hidden unit the same
  column :math:`v`. Unit :math:`j` fires for the inputs with :math:`a^\top x_i > c_j`, all with the same
  back-propagated factor :math:`G_i`, so after one SGD step of every client the summed update telescopes:

  .. math::
      \frac{\Delta W_j - \Delta W_{j+1}}{\Delta b_j - \Delta b_{j+1}}
        = \frac{\sum_{i:\,c_j < a^\top x_i \le c_{j+1}} G_i\,x_i}{\sum_{i:\,c_j < a^\top x_i \le c_{j+1}} G_i}
        = x_i \quad\text{when one input falls in bin } j .

  The sum over clients is a sum over *all* the clients' inputs, so the bins separate inputs across clients
  (a client's share of the sum is what SecAgg hides, the bins undo it). Several rounds with disjoint bin
  ranges multiply the number of bins (``rounds``).
* **Trap weights** (Boenisch, Dziedzic, Schuster, Shamsabadi, Shumailov, Papernot, "When the Curious Abandon
  Honesty: Federated Learning Is Not Private", EuroS&P 2023, https://arxiv.org/abs/2112.02918): random
  first-layer rows whose biases make each unit fire for a small fraction :math:`\rho` of inputs; a unit that
  fired for exactly one input gives it as :math:`\Delta W_j / \Delta b_j`. Rows look like an honest random
  initialisation, so a test on the rows alone does not see them (``trap_units`` of the units are traps, the
  others keep their honest values).

Inputs. For an MLP the first layer sees the node features :math:`x_i`; for a GCN it sees the propagated
features :math:`(\hat A X)_i` on the client's graph (:math:`Z = \hat A X W^\top + b`), and every node in the
receptive field of a training node back-propagates, so the bins must separate those nodes too. SGC has one
linear layer (:math:`C` outputs, no hidden ReLU): no bins can be built and the attack does not apply.

Recovered rows are scored by cosine to the true inputs (exact: cosine :math:`> 0.99`). With binary
features an attacker can also certify a recovery without ground truth: a single input's ratio is a 0/1
vector, a mix of two is not (``certified``).

Shapes:
    ``F`` input features, ``H`` hidden units, ``C`` classes, ``R`` rounds; recovered rows ``(k, F)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.errors import AttackNotApplicableError, ConfigError, ProtocolError

__all__ = [
    "ImprintConfig",
    "ImprintLayout",
    "ImprintResult",
    "bin_edges",
    "craft_imprint",
    "craft_trap",
    "imprint_attack",
    "imprint_layout",
    "match_rows",
    "propagated_inputs",
    "recover_bins",
    "recover_traps",
]


@dataclass(frozen=True)
class ImprintLayout:
    r"""Where the crafted parameters go in a two-layer model (names of ``model.named_parameters()``).

    Args:
        first_weight, first_bias: The first layer :math:`(H, F)` and :math:`(H,)`.
        second_weight, second_bias: The output layer :math:`(C, H)` and :math:`(C,)`.
        propagated: Whether the first layer sees :math:`\hat A X` (GCN) rather than :math:`X` (MLP).
    """

    first_weight: str
    first_bias: str
    second_weight: str
    second_bias: str
    propagated: bool
    hidden: int
    num_features: int


def imprint_layout(model: torch.nn.Module) -> ImprintLayout:
    """The first/second-layer parameter names of a two-layer MLP or GCN.

    Raises:
        AttackNotApplicableError: SGC (one linear layer, no hidden units to bin), a model with more or fewer
            than two layers, or a first layer without a bias.
    """
    kind = type(model).__name__.lower()
    if kind == "sgc":
        raise AttackNotApplicableError(
            "SGC has a single linear layer with C outputs and no hidden ReLU units: the server cannot build "
            "bins; the imprint attack needs a hidden layer (mlp, gcn)"
        )
    names = dict(model.named_parameters())
    if kind == "mlp" and len(model.lins) == 2:  # type: ignore[arg-type]
        p = ("lins.0.weight", "lins.0.bias", "lins.1.weight", "lins.1.bias")
        prop = False
    elif kind == "gcn" and len(model.convs) == 2:  # type: ignore[arg-type]
        p = ("convs.0.lin.weight", "convs.0.bias", "convs.1.lin.weight", "convs.1.bias")
        prop = True
    else:
        raise AttackNotApplicableError(
            f"the imprint attack is implemented for two-layer mlp and gcn models, got {type(model).__name__}"
        )
    missing = [n for n in p if n not in names]
    if missing:
        raise AttackNotApplicableError(
            f"{type(model).__name__} lacks {missing}: no first-layer bias to bin with"
        )
    h, f = names[p[0]].shape
    return ImprintLayout(*p, propagated=prop, hidden=int(h), num_features=int(f))


@dataclass(frozen=True)
class ImprintConfig:
    """The crafted model.

    Args:
        kind: ``"bins"`` (Fowl et al.) or ``"trap"`` (Boenisch et al.). (default: ``"bins"``)
        rounds: Crafted rounds; bins: each covers its own range of quantiles. (default: ``1``)
        trap_units: Trap units per round (``None``: every hidden unit). (default: ``None``)
        trap_rate: :math:`\rho`, the fraction of the public sample each trap fires for. (default: ``0.003``)
        head: Scale of the output-layer column :math:`v` (kept small so the softmax is not saturated).
            (default: ``0.05``)
        span: Total range of :math:`a^\top x` on the public sample after scaling (kept small so that the
            logits stay small however many bins an input crosses). (default: ``1.0``)
        exact_cosine: A row counts as recovered exactly above this cosine. (default: ``0.99``)
        seed: Seeds the measurement vector and the trap rows. (default: ``0``)
    """

    kind: Literal["bins", "trap"] = "bins"
    rounds: int = 1
    trap_units: int | None = None
    trap_rate: float = 0.003
    head: float = 0.05
    span: float = 1.0
    exact_cosine: float = 0.99
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("bins", "trap"):
            raise ConfigError(f"kind must be one of 'bins', 'trap', got {self.kind!r}")
        if self.rounds < 1:
            raise ConfigError(f"rounds must be >= 1, got {self.rounds}")
        if not 0 < self.trap_rate < 1:
            raise ConfigError(f"trap_rate must be in (0, 1), got {self.trap_rate}")
        if self.trap_units is not None and self.trap_units < 1:
            raise ConfigError(f"trap_units must be >= 1 or None, got {self.trap_units}")
        if not (self.head > 0 and self.span > 0 and 0 < self.exact_cosine <= 1):
            raise ConfigError("head and span must be > 0 and exact_cosine in (0, 1]")


def propagated_inputs(x: Tensor, edge_index: Tensor) -> Tensor:
    r""":math:`\hat A X` with the GCN normalisation :math:`\tilde D^{-1/2}(A + I)\tilde D^{-1/2}` (as GCNConv)."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    n = x.shape[0]
    ei, w = gcn_norm(edge_index, None, n, add_self_loops=True)
    adj = torch.sparse_coo_tensor(ei.flip(0), w, (n, n), check_invariants=False)
    return torch.sparse.mm(adj, x.to(torch.float32))


def _measurement(num_features: int, gen: torch.Generator) -> Tensor:
    return torch.randn(num_features, generator=gen, dtype=torch.float64)


def bin_edges(
    public: Tensor, a: Tensor, hidden: int, rounds: int, span: float
) -> tuple[Tensor, list[Tensor]]:
    r"""Scale :math:`a` and place ``rounds`` ladders of ``hidden`` edges at quantiles of :math:`a^\top x`.

    Args:
        public: A public sample of first-layer inputs ``(m, F)`` (the attacker's prior).
        a: The measurement vector ``(F,)``.
        hidden: :math:`H`; round ``r`` uses edges ``r(H-1) .. r(H-1)+H-1`` of the global ladder.
        rounds: :math:`R`.
        span: Range of the scaled measurement on the sample.

    Returns:
        ``(scaled a, [edges of round r])`` with ``R (H-1) + 1`` distinct global edges.
    """
    h = public.to(torch.float64) @ a
    lo, hi = torch.quantile(h, 0.002), torch.quantile(h, 0.998)
    scale = span / float((hi - lo).clamp(min=1e-12))
    total = rounds * (hidden - 1) + 1
    levels = torch.linspace(0.002, 0.998, total, dtype=torch.float64)
    q = torch.quantile(h * scale, levels)
    return a * scale, [q[r * (hidden - 1) : r * (hidden - 1) + hidden] for r in range(rounds)]


def _head(num_classes: int, hidden: int, head: float) -> Tensor:
    r"""The shared output column :math:`v` (distinct squares: :math:`v^\top p - v_y \ne 0` for every label)."""
    v = torch.arange(1, num_classes + 1, dtype=torch.float64) ** 2
    return (head * v / v.max()).unsqueeze(1).expand(num_classes, hidden)


def craft_imprint(
    layout: ImprintLayout,
    params: Mapping[str, Tensor],
    a: Tensor,
    edges: Tensor,
    num_classes: int,
    head: float,
) -> dict[str, Tensor]:
    """The imprint-bin model: every first-layer row :math:`a`, biases :math:`-c_j`, one shared output column."""
    if edges.numel() != layout.hidden:
        raise ConfigError(f"{edges.numel()} edges for {layout.hidden} hidden units")
    out = {k: v.detach().clone() for k, v in params.items()}
    dt = out[layout.first_weight].dtype
    out[layout.first_weight] = a.to(dt).unsqueeze(0).expand(layout.hidden, -1).clone()
    out[layout.first_bias] = (-edges).to(dt).clone()
    out[layout.second_weight] = _head(num_classes, layout.hidden, head).to(dt).clone()
    out[layout.second_bias] = torch.zeros_like(out[layout.second_bias])
    return out


def craft_trap(
    layout: ImprintLayout,
    params: Mapping[str, Tensor],
    public: Tensor,
    num_classes: int,
    cfg: ImprintConfig,
    gen: torch.Generator,
) -> tuple[dict[str, Tensor], Tensor]:
    r"""Trap weights: ``trap_units`` random rows (scaled like the honest ones) firing for a fraction
    :math:`\rho` of the public sample; the other units keep their honest parameters.

    Returns:
        ``(crafted params, indices of the trap units)``.
    """
    out = {k: v.detach().clone() for k, v in params.items()}
    w, b = out[layout.first_weight], out[layout.first_bias]
    traps = min(layout.hidden, cfg.trap_units or layout.hidden)
    units = torch.randperm(layout.hidden, generator=gen)[:traps]
    rows = torch.randn(traps, layout.num_features, generator=gen, dtype=torch.float64)
    rows = rows * (w.double().norm(dim=1).mean() / rows.norm(dim=1, keepdim=True))
    h = public.double() @ rows.T
    cut = torch.quantile(h, 1 - cfg.trap_rate, dim=0)
    w[units] = rows.to(w.dtype)
    b[units] = (-cut).to(b.dtype)
    w2 = out[layout.second_weight]
    w2[:, units] = _head(num_classes, traps, cfg.head).to(w2.dtype)
    out[layout.second_bias] = torch.zeros_like(out[layout.second_bias])
    return out, units


def recover_bins(dw: Tensor, db: Tensor, rel_tol: float = 1e-2) -> Tensor:
    """Rows :math:`(\\Delta W_j - \\Delta W_{j+1}) / (\\Delta b_j - \\Delta b_{j+1})` of the non-empty bins.

    A bin counts as non-empty when its bias difference exceeds ``rel_tol`` times the largest one (an empty
    bin's difference is the encoding's rounding noise).
    """
    dw, db = dw.double(), db.double()
    num, den = dw[:-1] - dw[1:], db[:-1] - db[1:]
    keep = den.abs() > rel_tol * den.abs().max().clamp(min=1e-30)
    return num[keep] / den[keep].unsqueeze(1)


def recover_traps(dw: Tensor, db: Tensor, units: Tensor, rel_tol: float = 1e-4) -> Tensor:
    r"""Rows :math:`\Delta W_j / \Delta b_j` of the trap units that fired."""
    dw, db = dw.double()[units], db.double()[units]
    keep = db.abs() > rel_tol * db.abs().max().clamp(min=1e-30)
    return dw[keep] / db[keep].unsqueeze(1)


def match_rows(recovered: Tensor, truth: Tensor, threshold: float = 0.99) -> tuple[Tensor, Tensor]:
    """For every true row, the best cosine over the recovered rows, and whether it exceeds ``threshold``."""
    if recovered.numel() == 0 or truth.numel() == 0:
        best = torch.zeros(truth.shape[0], dtype=torch.float64)
        return best, best > threshold
    cos = F.normalize(truth.double(), dim=1, eps=1e-30) @ F.normalize(recovered.double(), dim=1, eps=1e-30).T
    best = cos.max(dim=1).values
    return best, best > threshold


def _certified(rows: Tensor, tol: float = 0.05) -> int:
    """Recovered rows that are 0/1 vectors up to scale: single binary inputs, recognisable without truth."""
    if rows.numel() == 0:
        return 0
    scale = rows.abs().max(dim=1, keepdim=True).values.clamp(min=1e-30)
    r = rows / scale
    ok = ((r.abs() < tol) | ((r - 1).abs() < tol)).all(dim=1) & (rows.abs().max(dim=1).values > 0)
    return int(ok.sum())


@dataclass
class ImprintResult:
    """Outcome of a malicious-model attack against one protocol.

    Args:
        protocol: The protocol's name.
        kind: ``"bins"`` or ``"trap"``.
        rounds: Crafted rounds run (and released).
        refused: Why the attack stopped (a client refused the model, the protocol refused the sum), or ``""``.
        recovered: Rows recovered over all rounds ``(k, F)``.
        exact_target: Fraction of the target's training nodes recovered exactly.
        exact_all: The same over every client's training nodes.
        best_cosine_target: Mean best cosine over the target's training nodes.
        certified: Recovered rows an attacker can recognise as single binary inputs without the truth.
        seconds: Wall time.
    """

    protocol: str
    kind: str
    rounds: int
    refused: str
    recovered: Tensor
    exact_target: float
    exact_all: float
    best_cosine_target: float
    certified: int
    seconds: float = 0.0
    per_round: list[dict[str, Any]] = field(default_factory=list)
    best_target: Tensor | None = None


Train = Callable[[Sequence[int], Mapping[str, Tensor]], Mapping[int, Mapping[str, Tensor]]]


def _summed_delta(sums: Mapping[str, Tensor], name: str, broadcast: Mapping[str, Tensor]) -> Tensor:
    """The summed update of parameter ``name``: DP-FedAvg deltas as summed, or :math:`\\sum n_k w_k - N w`."""
    if f"d.{name}" in sums:
        return torch.as_tensor(sums[f"d.{name}"]).double()
    if f"w.{name}" not in sums or "n" not in sums:
        raise AttackNotApplicableError(f"the released sum holds no block for {name!r} (needs FedAvg uploads)")
    n = float(torch.as_tensor(sums["n"]).double().reshape(-1)[0])
    return torch.as_tensor(sums[f"w.{name}"]).double() - n * broadcast[name].double()


def imprint_attack(
    protocol_for: Callable[[int], Any],
    schema_for: Callable[[Mapping[str, Tensor]], Any],
    train: Train,
    model: torch.nn.Module,
    broadcast: Mapping[str, Tensor],
    clients: Sequence[int],
    public: Tensor,
    truth: Mapping[int, Tensor],
    target: int,
    *,
    num_classes: int,
    config: ImprintConfig | None = None,
    context_for: Callable[[Mapping[str, Tensor]], Any] | None = None,
    client_check: Callable[[int, Mapping[str, Tensor]], None] | None = None,
) -> ImprintResult:
    """Broadcast crafted models for ``config.rounds`` rounds, sum the updates with the protocol, invert.

    Args:
        protocol_for: ``round -> protocol`` (a fresh instance of the protocol under test per round).
        schema_for: ``broadcast -> SumSchema`` (the algorithm's public schema).
        train: ``(client ids, broadcast) -> {client: contribution}``: the clients' honest training step.
        model: The public architecture.
        broadcast: The honest model the crafted ones start from.
        clients: The round's clients (all honest).
        public: The attacker's public sample of first-layer inputs (``(m, F)``, the prior of the bins).
        truth: Client -> its training nodes' first-layer inputs (scoring only).
        target: The client whose recovery is reported.
        num_classes: :math:`C`.
        config: The crafted model (default: :class:`ImprintConfig`).
        context_for: ``broadcast -> round context`` bound into the session (default: the engine's hash).
        client_check: Called as ``client_check(client, received)`` before a client trains; raises
            :class:`~securefgl.errors.RequestRefusedError` (the client-side defence) to refuse the model.
    """
    import time

    from securefgl.errors import RequestRefusedError

    cfg = config or ImprintConfig()
    t0 = time.perf_counter()
    if target not in truth:
        raise ConfigError(f"target {target!r} has no ground truth")
    layout = imprint_layout(model)
    gen = torch.Generator().manual_seed(cfg.seed)
    a, ladders = bin_edges(
        public, _measurement(layout.num_features, gen), layout.hidden, cfg.rounds, cfg.span
    )
    if context_for is None:
        from securefgl.engine.broadcast import round_context as context_for
    found: list[Tensor] = []
    per: list[dict[str, Any]] = []
    refused = ""
    for r in range(cfg.rounds):
        if cfg.kind == "bins":
            crafted, units = craft_imprint(layout, broadcast, a, ladders[r], num_classes, cfg.head), None
        else:
            crafted, units = craft_trap(layout, broadcast, public, num_classes, cfg, gen)
        try:
            if client_check is not None:
                for c in clients:
                    client_check(c, crafted)
            contrib = dict(train(list(clients), crafted))
            sums, tr = protocol_for(r).aggregate(
                schema_for(crafted), contrib, round_index=r, context=context_for(crafted)
            )
        except (ProtocolError, RequestRefusedError) as exc:
            refused = f"round {r}: {type(exc).__name__}: {exc}"
            break
        dw = _summed_delta(sums, layout.first_weight, crafted)
        db = _summed_delta(sums, layout.first_bias, crafted)
        rows = recover_bins(dw, db) if units is None else recover_traps(dw, db, units)
        found.append(rows)
        per.append({"round": r, "rows": int(rows.shape[0]), "survivors": len(tr.survivors)})
    rec = torch.cat(found) if found else torch.empty(0, layout.num_features, dtype=torch.float64)
    best_t, ok_t = match_rows(rec, truth[target], cfg.exact_cosine)
    all_truth = torch.cat([truth[c] for c in clients if c in truth])
    _, ok_all = match_rows(rec, all_truth, cfg.exact_cosine)
    return ImprintResult(
        protocol=str(getattr(protocol_for(0), "name", "")),
        kind=cfg.kind,
        rounds=len(found),
        refused=refused,
        recovered=rec.float(),
        exact_target=float(ok_t.double().mean()) if ok_t.numel() else math.nan,
        exact_all=float(ok_all.double().mean()) if ok_all.numel() else math.nan,
        best_cosine_target=float(best_t.mean()) if best_t.numel() else math.nan,
        certified=_certified(rec),
        seconds=time.perf_counter() - t0,
        per_round=per,
        best_target=_best_rows(rec, truth[target]),
    )


def _best_rows(rec: Tensor, truth: Tensor) -> Tensor | None:
    """For every true row the recovered row closest to it (for figures)."""
    if rec.numel() == 0:
        return None
    cos = F.normalize(truth.double(), dim=1, eps=1e-30) @ F.normalize(rec.double(), dim=1, eps=1e-30).T
    return rec[cos.argmax(dim=1)].float()
