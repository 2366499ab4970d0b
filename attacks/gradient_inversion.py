r"""Gradient / update inversion against a client's model update: labels, then the training nodes' features.

Three published attacks, adapted to node classification with GNNs:

* **DLG** (Zhu, Liu, Han, "Deep Leakage from Gradients", NeurIPS 2019, https://arxiv.org/abs/1906.08935):
  optimise dummy inputs (and labels) so that their gradient matches the observed one in Euclidean
  distance.
* **iDLG** (Zhao, Mopuri, Bilen, "iDLG: Improved Deep Leakage from Gradients", 2020,
  https://arxiv.org/abs/2001.02610): the labels come analytically from the last layer. With a mean
  cross-entropy over :math:`n` nodes the bias gradient is :math:`g_b = \frac1n\sum_i (p_i - e_{y_i})`, so
  the label counts are

  .. math::
      \hat n_c = n\,(\bar p_c - g_{b,c}),\qquad \bar p = \tfrac1n \textstyle\sum_i p_i,

  with :math:`\bar p` the model's mean prediction (estimated on the reconstruction and refined once), and
  rounded to integers summing to :math:`n` (largest remainder). For one node this is iDLG's sign rule.
* **Inverting Gradients** (Geiping, Bauermeister, Dröge, Moeller, NeurIPS 2020,
  https://arxiv.org/abs/2003.14053): a cosine objective, many restarts, box/positivity priors, and the
  simulation of several local steps for FedAvg updates.

What the server observes of a FedAvg client is not a gradient but its trained model:
:math:`\Delta_k = w_k - w` after :math:`E` local epochs. The attacker simulates the client's public
training recipe (optimizer, learning rate, epochs; dropout off, since its masks are private) from the
broadcast :math:`w` on dummy nodes :math:`\hat X, \hat y` and minimises

.. math::
    \mathcal L(\hat X) = 1 - \frac{\langle \hat\Delta(\hat X, \hat y), \Delta_k \rangle}
        {\lVert \hat\Delta(\hat X, \hat y) \rVert\,\lVert \Delta_k \rVert}
        \;+\; \lambda_1 \lVert \hat X \rVert_1 \;+\; \lambda_+ \lVert \min(\hat X, 0) \rVert_1

(Euclidean :math:`\lVert \hat\Delta - \Delta_k \rVert^2` for DLG) with L-BFGS (or signed Adam) from
several random starts. Two facts about the first layer :math:`W_1` (input dimension :math:`F`) make the
search tractable and are used as priors:

* *support*: a column :math:`f` of :math:`\Delta W_1` is exactly zero when feature :math:`f` is zero at every
  node the update depends on (bag-of-words: the client's vocabulary leaks exactly);
* *subspace* (SGD recipes): every row of :math:`\Delta W_1 = -\eta \sum_t \sum_i \delta_{i,t} x_i^\top`
  lies in :math:`\mathrm{span}\{x_i\}`, so the dummy features are searched in the row space of
  :math:`\Delta W_1` (computed by SVD), which for an MLP with :math:`n <` hidden width is exactly that span.

Graph models. With the graph known (:class:`~securefgl.attacks.views.GraphKnowledge`), the unknowns are
the features of every node in the training nodes' receptive field and the attacker runs the model on the
client's real structure; without it, each training node is treated as isolated, so SGC/GCN reconstruct
the *propagated* features :math:`(S^K X)_i` the model actually saw (reported separately for SGC).

Metrics (after optimal matching of reconstructed to true training nodes by feature cosine, with
:func:`scipy.optimize.linear_sum_assignment`): label accuracy (= multiset overlap of the label counts for
the label-only attack), feature cosine, MSE, and for binary features the F1 of the recovered non-zeros
(a reconstructed entry counts as non-zero above half of its row's maximum).

Shapes:
    ``n`` training nodes of the target, ``F`` features, ``C`` classes; updates have the model's parameter
    shapes.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.attacks._common import hungarian_match
from securefgl.errors import AttackNotApplicableError, ConfigError

__all__ = [
    "InversionConfig",
    "ModelUpdate",
    "Reconstruction",
    "TrainingRecipe",
    "bias_candidates",
    "invert_update",
    "label_accuracy",
    "last_layer_bias",
    "recover_label_counts",
    "score_reconstruction",
    "simulate_update",
]

_EMPTY_EDGES = torch.empty(2, 0, dtype=torch.long)


@dataclass(frozen=True)
class TrainingRecipe:
    """The public local-training recipe a client follows (the server configures it).

    Args:
        epochs: Full-batch local epochs :math:`E`. (default: ``1``)
        lr: Learning rate :math:`\\eta`. (default: ``0.01``)
        optimizer: ``"sgd"`` or ``"adam"``. (default: ``"sgd"``)
        weight_decay: L2 penalty added to the gradient. (default: ``0.0``)
        momentum: SGD momentum. (default: ``0.0``)
        prox_mu: FedProx proximal weight. (default: ``0.0``)
    """

    epochs: int = 1
    lr: float = 0.01
    optimizer: Literal["sgd", "adam"] = "sgd"
    weight_decay: float = 0.0
    momentum: float = 0.0
    prox_mu: float = 0.0

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ConfigError(f"recipe epochs must be >= 1, got {self.epochs}")
        if not self.lr > 0:
            raise ConfigError(f"recipe lr must be > 0, got {self.lr}")
        if self.optimizer not in ("sgd", "adam"):
            raise ConfigError(f"recipe optimizer must be 'sgd' or 'adam', got {self.optimizer!r}")

    @staticmethod
    def from_train_config(train: Any, prox_mu: float = 0.0) -> TrainingRecipe:
        """The recipe of a :class:`~securefgl.config.TrainConfig`."""
        return TrainingRecipe(
            epochs=int(train.local_epochs),
            lr=float(train.lr),
            optimizer=train.optimizer,
            weight_decay=float(train.weight_decay),
            momentum=float(train.momentum),
            prox_mu=float(prox_mu),
        )


@dataclass(frozen=True)
class ModelUpdate:
    """An update as the adversary reads it.

    Args:
        base: The broadcast parameters the training started from.
        delta: Trained parameters minus ``base``.
        num_nodes: Training nodes behind the update when the view reveals it (FedAvg's ``n`` block),
            else ``None``.
        source: ``"individual"`` (one client's exact upload), ``"masked"`` (a masked vector decoded as if it
            were an encoding) or ``"sum"`` (the released aggregate of ``contributors`` clients).
        contributors: Clients in the update.
    """

    base: dict[str, Tensor]
    delta: dict[str, Tensor]
    num_nodes: int | None
    source: Literal["individual", "masked", "sum"] = "individual"
    contributors: int = 1


@dataclass(frozen=True)
class InversionConfig:
    """Settings of the feature reconstruction.

    Args:
        objective: ``"cosine"`` (Inverting Gradients) or ``"euclidean"`` (DLG). (default: ``"cosine"``)
        optimizer: ``"lbfgs"`` or ``"adam"`` (signed gradients, step decay, as Inverting Gradients).
            (default: ``"lbfgs"``)
        iterations: Iterations per restart. (default: ``200``)
        restarts: Random restarts; the lowest objective wins. (default: ``10``)
        step: Adam step size. (default: ``0.1``)
        prior: ``"none"``, ``"nonneg"`` (features >= 0) or ``"binary"`` (features in [0, 1], sparse).
            (default: ``"none"``)
        sparsity: L1 weight :math:`\\lambda_1` (bag-of-words). (default: ``0.0``)
        support: Zero the features whose first-layer column of the update is zero. (default: ``True``)
        subspace: Search in the row space of the first-layer update (SGD recipes). (default: ``True``)
        graph_known: Use the client's graph structure if the view holds it. (default: ``True``)
        labels: ``"joint"``: per-node soft labels optimised with the features (DLG), then fixed to their
            argmax while the features are polished; ``"idlg"``: label counts fixed from the output bias
            (iDLG), refined with the reconstruction's mean prediction. (default: ``"joint"``)
        refine_labels: ``"idlg"`` only: re-estimate the counts from quick reconstructions. (default: ``True``)
        label_passes: At most this many re-estimations (until the counts are stable). (default: ``4``)
        anchors: SGD recipes: fix the rows that :func:`bias_candidates` proves exact and start the others at
            the remaining candidates. (default: ``True``)
        exact_tol: An objective below this counts as an exact fit (no leave-one-out search over the fixed
            rows). (default: ``1e-3``)
        adam_eps: Epsilon of the simulated Adam (larger than Adam's own, for stable derivatives).
            (default: ``1e-4``)
        max_unknown_nodes: Refuse a graph-known inversion with more unknown nodes. (default: ``2000``)
    """

    objective: Literal["cosine", "euclidean"] = "cosine"
    optimizer: Literal["lbfgs", "adam"] = "lbfgs"
    iterations: int = 200
    restarts: int = 10
    step: float = 0.1
    prior: Literal["none", "nonneg", "binary"] = "none"
    sparsity: float = 0.0
    support: bool = True
    subspace: bool = True
    graph_known: bool = True
    labels: Literal["joint", "idlg"] = "joint"
    refine_labels: bool = True
    label_passes: int = 4
    anchors: bool = True
    exact_tol: float = 1e-3
    adam_eps: float = 1e-4
    max_unknown_nodes: int = 2000

    def __post_init__(self) -> None:
        if self.objective not in ("cosine", "euclidean"):
            raise ConfigError(f"objective must be 'cosine' or 'euclidean', got {self.objective!r}")
        if self.optimizer not in ("lbfgs", "adam"):
            raise ConfigError(f"optimizer must be 'lbfgs' or 'adam', got {self.optimizer!r}")
        if self.prior not in ("none", "nonneg", "binary"):
            raise ConfigError(f"prior must be 'none', 'nonneg' or 'binary', got {self.prior!r}")
        if self.iterations < 1 or self.restarts < 1:
            raise ConfigError(f"iterations and restarts must be >= 1, got {self.iterations}, {self.restarts}")
        if self.labels not in ("joint", "idlg"):
            raise ConfigError(f"labels must be 'joint' or 'idlg', got {self.labels!r}")
        if self.sparsity < 0:
            raise ConfigError(f"sparsity must be >= 0, got {self.sparsity}")


@dataclass
class Reconstruction:
    """The attacker's guess of the target's training nodes.

    Args:
        x: ``(n, F)`` reconstructed features of the training nodes.
        y: ``(n,)`` recovered labels (aligned with ``x``).
        label_counts: ``(C,)`` recovered label counts.
        objective: Final objective value of the best restart.
        graph_used: Whether the client's structure was used.
        seconds: Wall time.
    """

    x: Tensor
    y: Tensor
    label_counts: Tensor
    objective: float
    graph_used: bool
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------
# the model side: which parameter is what, receptive fields
# ----------------------------------------------------------------------------------------------------


def last_layer_bias(model: torch.nn.Module, num_classes: int) -> str:
    """Name of the output layer's bias (the last 1-D parameter of size ``C``).

    Raises:
        AttackNotApplicableError: the model has no output bias (label recovery needs it).
    """
    names = [n for n, p in model.named_parameters() if p.dim() == 1 and p.numel() == num_classes]
    if not names:
        raise AttackNotApplicableError(
            f"{type(model).__name__} has no output-layer bias of size {num_classes}: the iDLG label rule needs one"
        )
    return names[-1]


def _first_layer_weights(model: torch.nn.Module, num_features: int) -> list[str]:
    """Parameters that multiply the raw features (2-D, last dimension ``F``)."""
    return [n for n, p in model.named_parameters() if p.dim() == 2 and p.shape[-1] == num_features]


def _hops(model: torch.nn.Module) -> int:
    name = type(model).__name__.lower()
    if name == "mlp":
        return 0
    if name == "sgc":
        return int(getattr(model, "K", 2))
    convs = getattr(model, "convs", None)
    if convs is not None:
        return len(convs)
    raise AttackNotApplicableError(f"cannot tell the receptive field of model {type(model).__name__}")


def _propagates(model: torch.nn.Module) -> bool:
    return type(model).__name__.lower() != "mlp"


# ----------------------------------------------------------------------------------------------------
# simulation of the client's local training (differentiable in the dummy data)
# ----------------------------------------------------------------------------------------------------


def simulate_update(
    model: torch.nn.Module,
    base: Mapping[str, Tensor],
    x: Tensor,
    y_soft: Tensor,
    recipe: TrainingRecipe,
    *,
    edge_index: Tensor | None = None,
    train_index: Tensor | None = None,
    adam_eps: float = 1e-8,
    create_graph: bool = True,
) -> dict[str, Tensor]:
    """The update :math:`w_E - w_0` of ``recipe`` on nodes ``x`` with soft labels ``y_soft``.

    Dropout is off (the client's masks are private). Differentiable in ``x`` and ``y_soft`` when
    ``create_graph``.

    Args:
        model: The public architecture (only its structure is used).
        base: Starting parameters :math:`w_0`.
        x: ``(N, F)`` node features (all nodes of ``edge_index``).
        y_soft: ``(n, C)`` label distributions of the training nodes.
        recipe: The local-training recipe.
        edge_index: ``(2, E)`` edges among the ``N`` nodes (default: none, isolated nodes).
        train_index: ``(n,)`` rows of the training nodes (default: all rows).
        adam_eps: Adam's epsilon in the simulation.
        create_graph: Keep the graph for a derivative in ``x``.
    """
    from torch.func import functional_call

    ei = _EMPTY_EDGES.to(x.device) if edge_index is None else edge_index
    was = model.training
    model.eval()
    grad_on = torch.enable_grad()
    grad_on.__enter__()
    try:
        start = {k: v.detach().to(x.dtype).clone().requires_grad_(True) for k, v in base.items()}
        cur: dict[str, Tensor] = dict(start)
        m = {k: torch.zeros_like(v) for k, v in cur.items()}
        v2 = {k: torch.zeros_like(v) for k, v in cur.items()}
        b1, b2 = 0.9, 0.999
        for t in range(1, recipe.epochs + 1):
            out = functional_call(model, cur, (x, ei))
            if train_index is not None:
                out = out[train_index]
            loss = -(y_soft * F.log_softmax(out, dim=-1)).sum(-1).mean()
            if recipe.prox_mu > 0:
                loss = loss + 0.5 * recipe.prox_mu * sum(((cur[k] - start[k]) ** 2).sum() for k in cur)
            grads = torch.autograd.grad(loss, list(cur.values()), create_graph=create_graph)
            nxt = {}
            for (k, w), g in zip(cur.items(), grads, strict=True):
                if recipe.weight_decay:
                    g = g + recipe.weight_decay * w
                if recipe.optimizer == "sgd":
                    if recipe.momentum:
                        m[k] = recipe.momentum * m[k] + g if t > 1 else g
                        g = m[k]
                    nxt[k] = w - recipe.lr * g
                else:
                    m[k] = b1 * m[k] + (1 - b1) * g
                    v2[k] = b2 * v2[k] + (1 - b2) * g * g
                    mh = m[k] / (1 - b1**t)
                    vh = v2[k] / (1 - b2**t)
                    nxt[k] = w - recipe.lr * mh / (torch.sqrt(vh + 1e-30) + adam_eps)
            cur = nxt
        delta = {k: cur[k] - start[k].detach() for k in cur}
        return delta if create_graph else {k: v.detach() for k, v in delta.items()}
    finally:
        grad_on.__exit__(None, None, None)
        model.train(was)


# ----------------------------------------------------------------------------------------------------
# labels (iDLG, counts for a batch)
# ----------------------------------------------------------------------------------------------------


def _round_counts(expected: Tensor, n: int) -> Tensor:
    """Non-negative integers summing to ``n`` closest to ``expected`` (largest remainder)."""
    e = expected.clamp(min=0).to(torch.float64)
    if float(e.sum()) <= 0:
        e = torch.ones_like(e)
    e = e * (n / float(e.sum()))
    base = torch.floor(e)
    rest = int(n - base.sum())
    if rest > 0:
        order = torch.argsort(e - base, descending=True)
        base[order[:rest]] += 1
    return base.to(torch.long)


def recover_label_counts(
    update: ModelUpdate,
    model: torch.nn.Module,
    recipe: TrainingRecipe,
    num_classes: int,
    *,
    num_nodes: int,
    mean_prediction: Tensor | None = None,
) -> Tensor:
    """iDLG label counts from the output bias of the update.

    SGD recipes: :math:`\\hat g_b = -\\Delta b / (\\eta E)` and :math:`\\hat n = n(\\bar p - \\hat g_b)`
    (first order in the change of the predictions over the :math:`E` steps). Adam recipes: Adam's
    normalisation keeps little more than the sign of :math:`g_b`, so the present classes are those whose
    bias grew, and the counts are split over them in proportion to :math:`\\bar p_c - \\hat g_{b,c}` with
    :math:`\\hat g_b = -\\Delta b / (\\eta E)` as a (weak) magnitude proxy.

    Args:
        update: The observed update.
        model: The architecture.
        recipe: The training recipe.
        num_classes: ``C``.
        num_nodes: ``n``.
        mean_prediction: :math:`\\bar p` if known (default: uniform :math:`1/C`).

    Returns:
        ``(C,)`` int64 counts summing to ``num_nodes``.
    """
    name = last_layer_bias(model, num_classes)
    db = update.delta[name].detach().to(torch.float64).flatten()
    if db.numel() != num_classes:
        raise AttackNotApplicableError(f"update has no output bias of size {num_classes}")
    p = (
        torch.full((num_classes,), 1.0 / num_classes, dtype=torch.float64)
        if mean_prediction is None
        else mean_prediction.detach().cpu().to(torch.float64).flatten()
    )
    g = -db / (recipe.lr * recipe.epochs)
    if recipe.optimizer == "sgd":
        return _round_counts(num_nodes * (p - g), num_nodes)
    present = db > 0
    if not bool(present.any()):
        present = db >= db.max()
    weight = torch.where(present, (p - g).clamp(min=1e-3), torch.zeros_like(p))
    return _round_counts(weight, num_nodes)


def label_accuracy(pred_counts: Tensor, true_labels: Tensor, num_classes: int) -> float:
    """Multiset overlap of recovered and true labels: :math:`\\sum_c \\min(\\hat n_c, n_c) / n`."""
    true = torch.bincount(true_labels.cpu().long(), minlength=num_classes)
    pc = pred_counts.cpu().long()
    return float(torch.minimum(pc, true).sum()) / max(1, int(true.sum()))


# ----------------------------------------------------------------------------------------------------
# feature reconstruction
# ----------------------------------------------------------------------------------------------------


def _flat(d: Mapping[str, Tensor], keys: Sequence[str]) -> Tensor:
    return torch.cat([d[k].flatten() for k in keys])


def _support_and_basis(
    update: ModelUpdate,
    firsts: Sequence[str],
    num_features: int,
    rows: int,
    config: InversionConfig,
    recipe: TrainingRecipe,
) -> tuple[Tensor | None, Tensor | None]:
    """The feature support (zero columns of the first-layer update) and a row-space basis."""
    if not firsts:
        return None, None
    w = torch.cat([update.delta[n].detach().to(torch.float64).reshape(-1, num_features) for n in firsts], 0)
    scale = float(w.abs().max())
    if scale == 0.0 or not math.isfinite(scale):
        return None, None
    support = None
    if config.support:
        col = w.abs().amax(0)
        keep = col > scale * 1e-7
        support = keep if 0 < int(keep.sum()) < num_features else None
    basis = None
    if config.subspace and recipe.optimizer == "sgd" and not recipe.weight_decay:
        _, s, vh = torch.linalg.svd(w, full_matrices=False)
        rank = int((s > float(s[0]) * 1e-6).sum())
        # The row space holds every unknown row only if it is at least as large as their number (an MLP
        # with n < hidden: rank n; a single linear layer has rank <= C - 1 and cannot hold n >= C rows).
        if rows <= rank < num_features:
            basis = vh[:rank].to(torch.float32)
    return support, basis


def _first_layer_bias(model: torch.nn.Module, weight: str) -> str | None:
    names = dict(model.named_parameters())
    for cand in (weight.removesuffix(".weight") + ".bias", weight.rsplit(".", 2)[0] + ".bias"):
        if cand in names and names[cand].dim() == 1 and names[cand].numel() == names[weight].shape[0]:
            return cand
    return None


def bias_candidates(
    update: ModelUpdate, model: torch.nn.Module, num_features: int, *, tol: float = 1e-4
) -> tuple[Tensor, Tensor]:
    r"""Rows :math:`\Delta W_1[h] / \Delta b_1[h]` of the first layer and how often each one repeats.

    For a unit :math:`h` of a first layer :math:`W_1 x + b_1` the update is
    :math:`\Delta W_1[h] = -\eta\sum_{t,i} \delta_{i,h,t}\, x_i` and :math:`\Delta b_1[h] =
    -\eta\sum_{t,i}\delta_{i,h,t}` (SGD), so the ratio is a weighted mean of the inputs that reach unit
    :math:`h`, and *exactly* one input when only that input activates the unit (Phong et al. 2017,
    https://eprint.iacr.org/2017/715, for one sample). Several units active on the same single input give the
    same row: a row repeated by at least two units is, up to float error, an exact input. For graph models the
    inputs are what the first layer sees (GCN: :math:`(\hat A X)_i`).

    Returns:
        ``(rows, repeats)``: ``(m, F)`` distinct candidate rows (cosine < 1 - ``tol`` between any two) sorted
        by ``repeats`` (``(m,)``, the number of units giving each), most repeated first.
    """
    rows: list[Tensor] = []
    for w in _first_layer_weights(model, num_features):
        b = _first_layer_bias(model, w)
        if b is None or w not in update.delta or b not in update.delta:
            continue
        dw = update.delta[w].detach().to(torch.float64)
        db = update.delta[b].detach().to(torch.float64)
        if dw.dim() != 2 or db.numel() != dw.shape[0]:
            continue
        big = db.abs() > db.abs().max() * 1e-6
        if bool(big.any()):
            rows.append(dw[big] / db[big, None])
    if not rows:
        return torch.empty(0, num_features), torch.empty(0, dtype=torch.long)
    cand = torch.cat(rows, 0)
    cand = cand[torch.isfinite(cand).all(1) & (cand.abs().sum(1) > 0)]
    if cand.numel() == 0:
        return torch.empty(0, num_features), torch.empty(0, dtype=torch.long)
    unit = F.normalize(cand, dim=1)
    same = (unit @ unit.T) > 1 - tol
    # also require equal norms (a repeated exact input has the same scale, not only the same direction)
    norms = cand.norm(dim=1)
    same &= (norms[:, None] - norms[None, :]).abs() <= 1e-3 * norms[:, None].clamp(min=1e-12)
    taken = torch.zeros(cand.shape[0], dtype=torch.bool)
    reps, counts = [], []
    for i in range(cand.shape[0]):
        if taken[i]:
            continue
        group = same[i] & ~taken
        taken |= group
        reps.append(cand[group].mean(0))
        counts.append(int(group.sum()))
    reps_t = torch.stack(reps)
    counts_t = torch.tensor(counts, dtype=torch.long)
    # A repeated row can still be a mixture: at a fresh model two same-label nodes have nearly equal
    # residuals, so every unit active on exactly that pair gives their midpoint. Drop repeated rows that are
    # the midpoint of two other rows.
    scale = reps_t.norm(dim=1).max().clamp(min=1e-12)
    for i in torch.nonzero(counts_t >= 2).flatten().tolist():
        mirror = 2 * reps_t[i] - reps_t  # 2a - b: the partner c of every b
        mirror[i] = float("inf")
        dist = torch.cdist(mirror, reps_t)
        dist[:, i] = float("inf")
        dist.fill_diagonal_(float("inf"))
        if bool((dist < 1e-3 * scale).any()):
            counts_t[i] = 0
    order = torch.argsort(-counts_t, stable=True)
    return reps_t[order].to(torch.float32), counts_t[order]


def _prior_penalty(x: Tensor, config: InversionConfig) -> Tensor:
    pen = x.new_zeros(())
    if config.prior in ("nonneg", "binary"):
        pen = pen + F.relu(-x).sum() * 10.0
    if config.prior == "binary":
        pen = pen + F.relu(x - 1.0).sum() * 10.0
    if config.sparsity:
        pen = pen + config.sparsity * x.abs().sum()
    return pen


def _objective(sim: dict[str, Tensor], obs: dict[str, Tensor], keys: Sequence[str], kind: str) -> Tensor:
    a = _flat(sim, keys)
    b = _flat(obs, keys)
    if kind == "cosine":
        return 1.0 - F.cosine_similarity(a, b, dim=0, eps=1e-30)
    return ((a - b) ** 2).sum() / (b.pow(2).sum() + 1e-30)


def _labels_from_counts(counts: Tensor, device: torch.device | None = None) -> Tensor:
    return torch.repeat_interleave(torch.arange(counts.numel()), counts.cpu().long()).to(device or "cpu")


def invert_update(
    update: ModelUpdate,
    model: torch.nn.Module,
    recipe: TrainingRecipe,
    *,
    num_features: int,
    num_classes: int,
    num_nodes: int | None = None,
    graph: Any | None = None,
    config: InversionConfig | None = None,
    generator: torch.Generator | None = None,
    progress: Callable[[int, int], None] | None = None,
    device: torch.device | str = "cpu",
) -> Reconstruction:
    """Reconstruct the training nodes (labels and features) behind ``update``.

    Args:
        update: The observed update.
        model: The public architecture (a securefgl model, e.g. from ``build_model``).
        recipe: The client's public training recipe.
        num_features: ``F``.
        num_classes: ``C``.
        num_nodes: Training nodes ``n`` (default: ``update.num_nodes``, else the rank of the first-layer
            update).
        graph: :class:`~securefgl.attacks.views.GraphKnowledge` of the target, used when
            ``config.graph_known`` and the model propagates.
        config: Reconstruction settings (default: :class:`InversionConfig`).
        generator: Seeds the random starts (default: a fixed seed 0: the attack is deterministic).
        progress: Called as ``progress(done, total)`` after every restart.
        device: Where the simulation runs (``"cuda"`` on a GPU); results come back on the CPU.

    Raises:
        AttackNotApplicableError: the update does not match the architecture, or the receptive field is
            larger than ``config.max_unknown_nodes``.
    """
    cfg = config or InversionConfig()
    gen = generator or torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    keys = [k for k, _ in model.named_parameters()]
    missing = [k for k in keys if k not in update.delta or k not in update.base]
    if missing:
        raise AttackNotApplicableError(
            f"the update does not match the {type(model).__name__} architecture: missing {missing[:4]}"
        )
    dev = torch.device(device)
    model = model.to(dev)
    obs = {k: update.delta[k].detach().to(dev, torch.float32) for k in keys}
    base = {k: update.base[k].detach().to(dev, torch.float32) for k in keys}
    if not all(torch.isfinite(v).all() for v in obs.values()):
        raise AttackNotApplicableError("the update holds non-finite values")
    firsts = _first_layer_weights(model, num_features)

    n = num_nodes if num_nodes is not None else update.num_nodes
    if n is None:
        w = torch.cat([obs[k].reshape(-1, num_features) for k in firsts], 0) if firsts else None
        n = int(torch.linalg.matrix_rank(w.double()).item()) if w is not None else 1
    n = max(1, int(n))

    # Unknown rows: the training nodes alone, or (graph known) their receptive field.
    edge_index = None
    train_rows = torch.arange(n)
    rows = n
    graph_used = False
    if graph is not None and cfg.graph_known and _propagates(model):
        from torch_geometric.utils import k_hop_subgraph

        tidx = graph.train_index
        if tidx.numel() != n:
            n = int(tidx.numel())
        subset, sub_ei, mapping, _ = k_hop_subgraph(
            tidx, _hops(model), graph.edge_index, relabel_nodes=True, num_nodes=graph.num_nodes
        )
        if subset.numel() > cfg.max_unknown_nodes:
            raise AttackNotApplicableError(
                f"the receptive field holds {subset.numel()} nodes > max_unknown_nodes={cfg.max_unknown_nodes}"
            )
        edge_index, train_rows, rows, graph_used = sub_ei.to(dev), mapping.to(dev), int(subset.numel()), True
    train_rows = train_rows.to(dev)

    support, basis = _support_and_basis(update, firsts, num_features, rows, cfg, recipe)
    if graph_used:
        basis = None  # the row space bounds the aggregated rows, not every node of the receptive field
    mask = support.to(dev, torch.float32) if support is not None else None
    basis = basis.to(dev) if basis is not None else None
    anchors = torch.empty(0, num_features, device=dev)
    pool = torch.empty(0, num_features, device=dev)
    if cfg.anchors and not graph_used and recipe.optimizer == "sgd":
        cand, reps = bias_candidates(update, model, num_features)
        anchors = cand[reps >= 2][:rows].to(dev)
        pool = cand[reps < 2].to(dev)

    counts = recover_label_counts(update, model, recipe, num_classes, num_nodes=n)
    joint = cfg.labels == "joint"
    quick = max(1, min(2, cfg.restarts))
    passes = cfg.label_passes if (cfg.labels == "idlg" and cfg.refine_labels) else 0
    total = passes * quick + cfg.restarts
    done = 0

    def attempt(restarts: int, counts: Tensor | None, anchors: Tensor) -> tuple[float, Tensor, Tensor]:
        nonlocal done
        fixed = (
            None
            if counts is None
            else F.one_hot(_labels_from_counts(counts, dev), num_classes).to(torch.float32)
        )
        best: tuple[float, Tensor | None, Tensor | None] = (math.inf, None, None)
        for _ in range(restarts):
            x, y_soft = _optimise(
                model,
                base,
                obs,
                keys,
                recipe,
                fixed,
                n,
                num_classes,
                rows,
                num_features,
                edge_index,
                train_rows,
                basis,
                mask,
                anchors,
                pool,
                cfg,
                gen,
            )
            sim = simulate_update(
                model,
                base,
                x,
                y_soft,
                recipe,
                edge_index=edge_index,
                train_index=train_rows,
                adam_eps=cfg.adam_eps,
                create_graph=False,
            )
            val = float(_objective(sim, obs, keys, cfg.objective).detach())
            if best[1] is None or val < best[0]:
                best = (val, x, y_soft.argmax(-1))
            done += 1
            if progress is not None:
                progress(done, total)
            if best[0] < cfg.exact_tol:  # an exact fit: further restarts cannot do better
                break
        assert best[1] is not None and best[2] is not None
        return best[0], best[1], best[2]

    # A row repeated by several units can still be a mixture (two same-label nodes with equal residuals):
    # if fixing every such row leaves a clearly non-zero objective, try leaving each one out.
    k = int(anchors.shape[0])
    if k:
        fixed_counts = None if joint else counts
        total += quick * (k + 1)
        trials = [(attempt(quick, fixed_counts, anchors)[0], anchors)]
        for j in range(k):
            if min(t[0] for t in trials) < cfg.exact_tol:
                break
            keep = torch.cat([anchors[:j], anchors[j + 1 :]], 0)
            trials.append((attempt(quick, fixed_counts, keep)[0], keep))
        anchors = min(trials, key=lambda t: t[0])[1]
    if joint:
        value, x_full, labels = attempt(cfg.restarts, None, anchors)
        counts = torch.bincount(labels.cpu(), minlength=num_classes)
    else:
        # iDLG counts need the mean prediction p-bar; estimate it on quick reconstructions until stable.
        for _ in range(passes):
            _, x, _ = attempt(quick, counts, anchors)
            with torch.no_grad():
                pbar = F.softmax(model_forward(model, base, x, edge_index)[train_rows], -1).mean(0)
            new = recover_label_counts(update, model, recipe, num_classes, num_nodes=n, mean_prediction=pbar)
            if torch.equal(new, counts):
                break
            counts = new
        total = done + cfg.restarts
        value, x_full, labels = attempt(cfg.restarts, counts, anchors)
    return Reconstruction(
        x=x_full[train_rows].detach().cpu().clone(),
        y=labels.cpu().clone(),
        label_counts=counts.cpu(),
        objective=value,
        graph_used=graph_used,
        seconds=time.perf_counter() - t0,
        extra={
            "unknown_nodes": rows,
            "subspace_rank": 0 if basis is None else int(basis.shape[0]),
            "exact_rows": int(anchors.shape[0]),
            "candidate_rows": int(pool.shape[0]),
            "support": None if support is None else int(support.sum()),
            "labels": cfg.labels,
        },
    )


def model_forward(
    model: torch.nn.Module, params: Mapping[str, Tensor], x: Tensor, edge_index: Tensor | None
) -> Tensor:
    """The model's logits with ``params`` (eval mode)."""
    from torch.func import functional_call

    was = model.training
    model.eval()
    try:
        ei = _EMPTY_EDGES.to(x.device) if edge_index is None else edge_index
        return functional_call(model, {k: v.to(x.dtype) for k, v in params.items()}, (x, ei))
    finally:
        model.train(was)


def _optimise(
    model: torch.nn.Module,
    base: dict[str, Tensor],
    obs: dict[str, Tensor],
    keys: Sequence[str],
    recipe: TrainingRecipe,
    fixed_labels: Tensor | None,
    n: int,
    num_classes: int,
    rows: int,
    num_features: int,
    edge_index: Tensor | None,
    train_rows: Tensor,
    basis: Tensor | None,
    mask: Tensor | None,
    anchors: Tensor,
    pool: Tensor,
    cfg: InversionConfig,
    gen: torch.Generator,
) -> tuple[Tensor, Tensor]:
    """One random start: features (and, without ``fixed_labels``, soft labels) minimising the objective.

    Returns ``(x, y_soft)``; with free labels a second run polishes the features with the labels fixed to
    their argmax.
    """
    dim = basis.shape[0] if basis is not None else num_features
    k = int(anchors.shape[0])
    free = rows - k
    dev = obs[keys[0]].device
    init = torch.randn(free, dim, generator=gen).to(dev)
    if basis is None and cfg.prior in ("nonneg", "binary"):
        init = init.abs() * 0.5
    if pool.shape[0] and free:
        # start the free rows at candidate rows of the first layer (weighted means of true inputs)
        pick = torch.randperm(pool.shape[0], generator=gen)[:free].to(dev)
        start = pool[pick] @ basis.T if basis is not None else pool[pick]
        init[: start.shape[0]] = start
    var = init.clone().requires_grad_(True)
    fixed_rows = anchors.to(torch.float32)
    lab = (0.01 * torch.randn(n, num_classes, generator=gen)).to(dev).requires_grad_(True)

    def features() -> Tensor:
        x = var @ basis if basis is not None else var
        if mask is not None:
            x = x * mask
        return torch.cat([fixed_rows, x], 0) if k else x

    def run(labels: Tensor | None, iterations: int) -> None:
        params = [var] if labels is not None else [var, lab]

        def value() -> Tensor:
            x = features()
            y = labels if labels is not None else F.softmax(lab, -1)
            sim = simulate_update(
                model,
                base,
                x,
                y,
                recipe,
                edge_index=edge_index,
                train_index=train_rows,
                adam_eps=cfg.adam_eps,
            )
            return _objective(sim, obs, keys, cfg.objective) + _prior_penalty(x, cfg) / max(1, x.numel())

        if cfg.optimizer == "lbfgs":
            opt = torch.optim.LBFGS(
                params,
                lr=1.0,
                max_iter=iterations,
                history_size=50,
                line_search_fn="strong_wolfe",
                tolerance_grad=1e-10,
                tolerance_change=1e-12,
            )

            def closure() -> Tensor:
                opt.zero_grad()
                loss = value()
                loss.backward()
                return loss

            with contextlib.suppress(RuntimeError):  # a line search that hit NaN: keep the last finite point
                opt.step(closure)
            return
        opt2 = torch.optim.Adam(params, lr=cfg.step)
        marks = [int(iterations * f) for f in (0.375, 0.625, 0.875)]
        sched = torch.optim.lr_scheduler.MultiStepLR(opt2, marks, 0.1)
        for _ in range(iterations):
            opt2.zero_grad()
            loss = value()
            loss.backward()
            for p in params:
                if p.grad is not None:
                    p.grad.sign_()
            opt2.step()
            sched.step()

    if fixed_labels is not None:
        run(fixed_labels, cfg.iterations)
        y_soft = fixed_labels
    else:
        run(None, cfg.iterations)
        with torch.no_grad():
            y_soft = F.one_hot(lab.argmax(-1), num_classes).to(torch.float32)
        run(y_soft, max(1, cfg.iterations // 2))
    with torch.no_grad():
        x = features().detach()
        if not torch.isfinite(x).all():
            x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
        if cfg.prior in ("nonneg", "binary"):
            x = x.clamp(min=0)
        if cfg.prior == "binary":
            x = x.clamp(max=1)
    return x, y_soft


# ----------------------------------------------------------------------------------------------------
# scoring
# ----------------------------------------------------------------------------------------------------


def _binarize(x: Tensor) -> Tensor:
    peak = x.amax(dim=1, keepdim=True)
    return (x > 0.5 * peak) & (peak > 0)


def score_reconstruction(
    x_hat: Tensor,
    y_hat: Tensor,
    x_true: Tensor,
    y_true: Tensor,
    *,
    num_classes: int,
    binary: bool | None = None,
    extra_targets: Mapping[str, Tensor] | None = None,
) -> dict[str, float]:
    """Match reconstructed to true nodes (Hungarian, on feature cosine) and score.

    Args:
        x_hat: ``(n', F)`` reconstructed features.
        y_hat: ``(n',)`` recovered labels (row-aligned with ``x_hat``).
        x_true: ``(n, F)`` true features of the training nodes.
        y_true: ``(n,)`` true labels.
        num_classes: ``C``.
        binary: Whether features are binary (default: inferred from ``x_true``).
        extra_targets: Other ``(n, F)`` targets to report the matched cosine against (e.g.
            ``"propagated"``: SGC's :math:`(S^K X)_{train}`), matched independently.

    Returns:
        ``label_accuracy`` (after matching), ``label_multiset_accuracy``, ``feature_cosine``, ``mse``,
        ``feature_f1`` (binary features only) and ``<name>_cosine`` per extra target.
    """
    xh = x_hat.detach().to(torch.float64).cpu()
    xt = x_true.detach().to(torch.float64).cpu()
    cos = F.normalize(xh, dim=1, eps=1e-30) @ F.normalize(xt, dim=1, eps=1e-30).T
    r, c = hungarian_match(-cos)
    out: dict[str, float] = {
        "feature_cosine": float(cos[r, c].mean()),
        "mse": float(((xh[r] - xt[c]) ** 2).mean()),
        "label_accuracy": float((y_hat.cpu()[r] == y_true.cpu()[c]).double().mean()),
        "label_multiset_accuracy": label_accuracy(
            torch.bincount(y_hat.cpu().long(), minlength=num_classes), y_true, num_classes
        ),
    }
    is_binary = bool(((xt == 0) | (xt == 1)).all()) if binary is None else binary
    if is_binary:
        pred = _binarize(xh[r])
        true = xt[c] > 0.5
        tp = float((pred & true).sum())
        fp = float((pred & ~true).sum())
        fn = float((~pred & true).sum())
        out["feature_f1"] = 2 * tp / max(1e-12, 2 * tp + fp + fn)
    for name, target in (extra_targets or {}).items():
        tt = target.detach().to(torch.float64).cpu()
        cc = F.normalize(xh, dim=1, eps=1e-30) @ F.normalize(tt, dim=1, eps=1e-30).T
        r2, c2 = hungarian_match(-cc)
        out[f"{name}_cosine"] = float(cc[r2, c2].mean())
    return out


# ----------------------------------------------------------------------------------------------------
# reading updates out of an adversary view
# ----------------------------------------------------------------------------------------------------

#: Algorithms whose upload is a FedAvg-style weighted model (``w.<param>`` numerators, ``n`` denominator).
MODEL_AVERAGING = ("fedavg", "fedprox")


def check_applicable(algorithm: str, model: Any) -> None:
    """Refuse, before any work, an algorithm or model the update inversion does not handle.

    Raises:
        AttackNotApplicableError: with the reason.
    """
    if algorithm == "fedspray":
        raise AttackNotApplicableError(
            "gradient inversion of FedSpray's encoder update is not supported yet: the encoder's local loss "
            "distils from each client's private GNN (a KL term to its predictions), which the attacker cannot "
            "simulate; only the update's support and label signs would be usable"
        )
    if algorithm not in MODEL_AVERAGING:
        raise AttackNotApplicableError(
            f"algorithm {algorithm!r} uploads no model update (gradient inversion applies to "
            f"{', '.join(MODEL_AVERAGING)}); use the statistics attacks for one-shot statistics"
        )
    if model is None:
        raise AttackNotApplicableError("the run has no shared model architecture to simulate")
    if getattr(model, "name", "") == "gat":
        raise AttackNotApplicableError(
            "gradient inversion of GAT is not supported (attention makes the receptive field dense); "
            "use gcn, sgc, sage or mlp"
        )


def update_from_upload(
    values: Mapping[str, Tensor],
    broadcast: Mapping[str, Tensor],
    *,
    source: Literal["individual", "masked", "sum"],
    contributors: int = 1,
    num_nodes_hint: int | None = None,
) -> ModelUpdate:
    """A FedAvg/FedProx upload (or sum) as a :class:`ModelUpdate`: :math:`w_k = (n_k w_k) / n_k`.

    The DP-FedAvg form (``d.<param>`` deltas and a client count ``n``) gives the mean delta directly; its
    node count is unknown to the adversary (``num_nodes_hint``).

    Args:
        values: The upload's blocks (``w.<param>`` and ``n``, or ``d.<param>`` and ``n``).
        broadcast: The round's broadcast (the parameters the clients started from).
        source: Where the values come from (see :class:`ModelUpdate`).
        contributors: Clients in ``values``.
        num_nodes_hint: The adversary's guess of ``n`` when ``values["n"]`` is unusable (a masked vector).

    Raises:
        AttackNotApplicableError: the blocks are not a model-averaging upload.
    """
    names = list(broadcast)
    if "n" in values and all(f"d.{k}" in values for k in names):  # DP-FedAvg: Δ_k = w_k − w, n = clients
        m = float(torch.as_tensor(values["n"]).to(torch.float64).flatten()[0])
        m = m if source != "masked" and m >= 1 and math.isfinite(m) else float(contributors)
        base = {k: broadcast[k].detach().to(torch.float64).cpu() for k in names}
        delta = {
            k: (torch.as_tensor(values[f"d.{k}"]).to(torch.float64) / m).reshape(base[k].shape) for k in names
        }
        return ModelUpdate(
            base=base, delta=delta, num_nodes=num_nodes_hint, source=source, contributors=int(contributors)
        )
    missing = [f"w.{k}" for k in names if f"w.{k}" not in values] + ([] if "n" in values else ["n"])
    if missing:
        raise AttackNotApplicableError(
            f"the upload is not a model-averaging upload: missing blocks {missing[:4]}"
        )
    n = float(torch.as_tensor(values["n"]).to(torch.float64).flatten()[0])
    known = source != "masked" and n >= 1 and math.isfinite(n)
    if not known:
        n = float(num_nodes_hint or 1)
    params = {k: torch.as_tensor(values[f"w.{k}"]).to(torch.float64) / n for k in names}
    base = {k: broadcast[k].detach().to(torch.float64).cpu() for k in names}
    delta = {k: params[k].reshape(base[k].shape) - base[k] for k in names}
    return ModelUpdate(
        base=base,
        delta=delta,
        num_nodes=int(round(n)) if known else num_nodes_hint,
        source=source,
        contributors=int(contributors),
    )


def updates_in_view(view: Any, obs: Any) -> dict[str, Any]:
    """The model updates a view holds for one aggregation.

    Returns:
        ``{"individual": {client: ModelUpdate}, "sum": ModelUpdate}``; a key is missing when the view does
        not hold it (``"individual"`` for CKKS or a client view; ``"sum"`` for a server that only relayed).
    """
    from securefgl.errors import NothingToAttackError

    out: dict[str, Any] = {}
    hint = None
    try:
        total = view.released_sum(obs)
        out["sum"] = update_from_upload(
            {k: total[k] for k in total}, obs.broadcast, source="sum", contributors=total.num_contributors
        )
        if out["sum"].num_nodes and total.num_contributors:
            hint = max(1, int(round(out["sum"].num_nodes / total.num_contributors)))
    except NothingToAttackError:
        pass
    try:
        ins = view.individual_inputs(obs)
        out["individual"] = {
            c: update_from_upload(
                i.values, obs.broadcast, source="individual" if i.exact else "masked", num_nodes_hint=hint
            )
            for c, i in ins.items()
        }
    except NothingToAttackError:
        pass
    return out
