r"""FedSpray's local training: per-client state, the two local training phases, the uploads.

Client side, private to :mod:`securefgl.algorithms.fedspray` (the method is documented on
:class:`~securefgl.algorithms.fedspray.FedSpray`). Everything here is pure tensor code with no engine or
protocol dependency, so it is unit-tested on its own:

* :class:`ClientState` is one client's private state (personalised GNN, local encoder copy, per-node
  proxies, and the three Adam states); :func:`stack_states` / :func:`unstack_states` turn the states of the
  clients of a round into one batch and back.
* :func:`local_update` runs Phase 1 (GNN with KD from the encoder) and Phase 2 (encoder and proxies with KD
  from the GNN) for a batch of clients (spec §2.3, §2.5, §2.6).
* :func:`client_uploads` turns a batch's result into one contribution per client: the numerator and
  denominator blocks of spec §3 (the server step that reads their sums is
  :func:`securefgl.algorithms.fedspray.server.server_update`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.algorithms.fedspray._batch import num_train, train_counts
from securefgl.algorithms.fedspray.encoder import ENCODER_KEYS, reference_encoder
from securefgl.algorithms.fedspray.models import encoder_forward, gnn_forward, to_math_layout
from securefgl.algorithms.fedspray.options import Hyper
from securefgl.errors import NonFiniteError
from securefgl.training.batched import GraphBatch
from securefgl.training.optim import StackedOptimizer

__all__ = [
    "ClientState",
    "LocalResult",
    "client_uploads",
    "gnn_logits",
    "local_update",
    "stack_states",
    "unstack_states",
]

# --------------------------------------------------------------------------------------------------------
# per-client state and batching
# --------------------------------------------------------------------------------------------------------


@dataclass
class _AdamState:
    exp_avg: dict[str, Tensor]
    exp_avg_sq: dict[str, Tensor]
    steps: float = 0.0

    @staticmethod
    def zeros_like(params: Mapping[str, Tensor]) -> _AdamState:
        return _AdamState(
            {k: torch.zeros_like(v) for k, v in params.items()},
            {k: torch.zeros_like(v) for k, v in params.items()},
        )


@dataclass
class ClientState:
    r"""One client's private FedSpray state; never leaves the client.

    Attributes:
        gnn: The personalised GNN :math:`\theta^{(k)}` (never uploaded).
        enc: The client's local copy of the encoder :math:`\omega^{(k)}` (overwritten from the broadcast each
            round; its Adam moments persist unless ``reset_optimizers``).
        proxy: ``(N_k, D)`` per-node structure proxies :math:`s_i`.
        gnn_opt, enc_opt, proxy_opt: Adam moments and step counts.
    """

    gnn: dict[str, Tensor]
    enc: dict[str, Tensor]
    proxy: Tensor
    gnn_opt: _AdamState = field(init=False)
    enc_opt: _AdamState = field(init=False)
    proxy_opt: _AdamState = field(init=False)

    def __post_init__(self) -> None:
        self.gnn_opt = _AdamState.zeros_like(self.gnn)
        self.enc_opt = _AdamState.zeros_like(self.enc)
        self.proxy_opt = _AdamState.zeros_like({"proxy": self.proxy})


@dataclass
class _Stacked:
    gnn: dict[str, Tensor]
    enc: dict[str, Tensor]
    proxy: Tensor
    gnn_opt: StackedOptimizer
    enc_opt: StackedOptimizer
    proxy_opt: StackedOptimizer


def _stack_opt(
    states: Sequence[_AdamState],
    params: dict[str, Tensor],
    lr: float,
    segments: list[tuple[int, int]] | None,
    weight_decay: float = 0.0,
    layout: bool = False,
) -> StackedOptimizer:
    """One Adam over the stacked ``params``; with ``segments``, their rows are per node (concatenated)."""

    def join(k: str, parts: list[Tensor]) -> Tensor:
        out = torch.cat(parts) if segments is not None else torch.stack(parts)
        return to_math_layout(k, out) if layout else out

    keys = list(params)
    buffers = {}
    for k in keys:
        buffers[f"{k}.exp_avg"] = join(k, [s.exp_avg[k] for s in states])
        buffers[f"{k}.exp_avg_sq"] = join(k, [s.exp_avg_sq[k] for s in states])
    steps = torch.tensor([s.steps for s in states], dtype=torch.float64, device=params[keys[0]].device)
    return StackedOptimizer(
        params,
        "adam",
        lr,
        weight_decay,
        state=(buffers, steps),
        segments={k: segments for k in keys} if segments is not None else None,
    )


def stack_states(states: Sequence[ClientState], pack: GraphBatch, hp: Hyper) -> _Stacked:
    """Stack the clients' states (in ``pack`` order) into batched leaf tensors and batched optimizers."""
    gnn = {
        k: to_math_layout(k, torch.stack([s.gnn[k] for s in states])).requires_grad_(True)
        for k in states[0].gnn
    }
    enc = {k: torch.stack([s.enc[k] for s in states]).requires_grad_(True) for k in ENCODER_KEYS}
    proxy = torch.cat([s.proxy for s in states]).requires_grad_(True)
    return _Stacked(
        gnn=gnn,
        enc=enc,
        proxy=proxy,
        gnn_opt=_stack_opt([s.gnn_opt for s in states], gnn, hp.lr, None, hp.weight_decay, layout=True),
        enc_opt=_stack_opt([s.enc_opt for s in states], enc, hp.encoder_lr, None),
        proxy_opt=_stack_opt([s.proxy_opt for s in states], {"proxy": proxy}, hp.proxy_lr, pack.segments()),
    )


def _unstack_opt(
    opt: StackedOptimizer,
    keys: Sequence[str],
    states: Sequence[_AdamState],
    segs: list[tuple[int, int]] | None,
    layout: bool = False,
) -> None:
    for i, st in enumerate(states):
        st.steps = float(opt.steps[i])
        for k in keys:
            m, v = opt.buffers[f"{k}.exp_avg"], opt.buffers[f"{k}.exp_avg_sq"]
            if segs is None:
                if layout:
                    st.exp_avg[k], st.exp_avg_sq[k] = to_math_layout(k, m[i]), to_math_layout(k, v[i])
                else:
                    st.exp_avg[k], st.exp_avg_sq[k] = m[i].clone(), v[i].clone()
            else:
                s, e = segs[i]
                st.exp_avg[k], st.exp_avg_sq[k] = m[s:e].clone(), v[s:e].clone()


def unstack_states(stacked: _Stacked, states: Sequence[ClientState], pack: GraphBatch) -> None:
    """Write a batch back into the clients' own states (copies: no state is shared between clients)."""
    segs = pack.segments()
    for i, st in enumerate(states):
        st.gnn = {
            k: to_math_layout(k, v[i].detach()) if k.endswith("weight") else v[i].detach().clone()
            for k, v in stacked.gnn.items()
        }
        st.enc = {k: v[i].detach().clone() for k, v in stacked.enc.items()}
        s, e = segs[i]
        st.proxy = stacked.proxy[s:e].detach().clone()
    _unstack_opt(stacked.gnn_opt, list(stacked.gnn), [s.gnn_opt for s in states], None, layout=True)
    _unstack_opt(stacked.enc_opt, list(ENCODER_KEYS), [s.enc_opt for s in states], None)
    _unstack_opt(stacked.proxy_opt, ["proxy"], [s.proxy_opt for s in states], segs)


# --------------------------------------------------------------------------------------------------------
# local update
# --------------------------------------------------------------------------------------------------------


def _client_mean(pack: GraphBatch, values: Tensor, mask: Tensor) -> Tensor:
    """Per-client mean of a per-node value over ``mask`` (0 for a client with an empty mask): ``(K,)``."""
    m = mask.to(values.dtype)
    return pack.client_sum(values * m) / pack.client_sum(m).clamp(min=1)


def _kl(log_teacher: Tensor, log_student: Tensor) -> Tensor:
    r"""Per-node :math:`\mathrm{KL}(t \| s) = \sum_c t_c (\log t_c - \log s_c)`: ``(N, C) -> (N,)``."""
    return (log_teacher.exp() * (log_teacher - log_student)).sum(-1)


@dataclass
class LocalResult:
    """What a batch of clients produced in one round (still private: uploads are built from it).

    Attributes:
        enc: stacked local encoders ``(K, ...)``.
        class_proxies: ``(K, C, D)`` class means of the labelled nodes' proxies (0 for absent classes).
        gnn_loss, encoder_loss: ``(K,)`` last-epoch losses :math:`L_G` and :math:`L_F` per client.
    """

    enc: dict[str, Tensor]
    class_proxies: Tensor
    gnn_loss: Tensor
    encoder_loss: Tensor


def gnn_logits(
    pack: GraphBatch,
    params: Mapping[str, Tensor],
    hp: Hyper,
    generator: torch.Generator | None = None,
    *,
    training: bool = False,
) -> Tensor:
    """Every client's personalised GNN on its own graph (dropout only when ``training``): ``(N, C)``."""
    return gnn_forward(
        hp.gnn,
        dict(params),
        pack,
        layers=hp.layers,
        hops=hp.hops,
        dropout=hp.dropout if training else 0.0,
        generator=generator,
    )


def local_update(
    pack: GraphBatch,
    stacked: _Stacked,
    glob_enc: Mapping[str, Tensor],
    glob_proxies: Tensor,
    hp: Hyper,
    generator: torch.Generator | None = None,
) -> LocalResult:
    r"""One round of FedSpray's local update for a batch of clients (Phase 1 then Phase 2).

    Phase 1, teacher from the broadcast encoder (no gradient), :math:`E` Adam steps on :math:`\theta^{(k)}`:

    .. math::

        L_G = \frac{1}{|V_L|}\sum_{i\in V_L} \mathrm{CE}(y_i, \hat y_i)
              + \lambda_1 \frac{1}{|R|}\sum_{i\in R} \mathrm{KL}(p_i \,\|\, \hat y_i),

    with :math:`s_i = S_{y_i}` (``paper_reset``) or the client's persistent proxy (``code_persistent``) for
    labelled nodes, :math:`s_i = q_i^\top S` for the others, and the KD set
    :math:`R = V_L \cup \{i \notin V_L: \max_c q_{ic} > \tau\}` (:math:`\tau = 0` is the paper's all nodes).

    Phase 2, teacher :math:`\hat y` from the updated GNN (no gradient), :math:`E` Adam steps on the local
    encoder and the labelled nodes' proxies from one backward pass:

    .. math::

        L_F = \frac{1}{|V_L|}\sum_{i\in V_L} \mathrm{CE}(y_i, q_i)
              + \lambda_2 \frac{1}{|V_L|}\sum_{i\in V_L} \mathrm{KL}(\hat y_i \,\|\, p_i).

    Finally :math:`S^{(k)}_j = \mathrm{mean}\{s_i : i \in V_L, y_i = j\}`.
    """
    if hp.reset_optimizers:
        for opt in (stacked.gnn_opt, stacked.enc_opt, stacked.proxy_opt):
            opt.reset()
    y, train = pack.y, pack.masks["train_mask"]
    glob = {k: glob_enc[k] for k in ENCODER_KEYS}
    # ---------------- Phase 1: teacher p from the broadcast encoder ----------------
    with torch.no_grad():
        e = torch.relu(pack.features().linear(glob["W_e"]) + glob["b_e"])
        q = torch.softmax(e @ glob["W_q"] + glob["b_q"], dim=-1)
        mixed = q @ glob_proxies
        if hp.proxy_mode == "paper_reset":
            labelled = glob_proxies[y]
        else:
            labelled = stacked.proxy.detach()
        stacked.proxy.copy_(torch.where(train[:, None], labelled, mixed))
        log_pt = torch.log_softmax((e + stacked.proxy) @ glob["W_p"] + glob["b_p"], dim=-1)
        reliable = train | (q.max(dim=-1).values > hp.kd_conf_threshold)
    dev = y.device
    gnn_loss = torch.zeros(pack.num_graphs, device=dev)
    for _ in range(hp.epochs):
        stacked.gnn_opt.zero_grad()
        log_y = torch.log_softmax(gnn_logits(pack, stacked.gnn, hp, generator, training=True), dim=-1)
        ce = _client_mean(pack, -log_y.gather(1, y[:, None]).squeeze(1), train)
        per_client = ce
        if hp.lambda1:
            per_client = ce + hp.lambda1 * _client_mean(pack, _kl(log_pt, log_y), reliable)
        per_client.sum().backward()
        stacked.gnn_opt.step()
        gnn_loss = per_client.detach()
    # ---------------- Phase 2: encoder and proxies, teacher y_hat from the GNN ----------------
    with torch.no_grad():
        log_yhat = torch.log_softmax(gnn_logits(pack, stacked.gnn, hp), dim=-1)
        ref = reference_encoder(glob, hp.projector_init)
        for k in ENCODER_KEYS:
            stacked.enc[k].copy_(ref[k].unsqueeze(0).expand_as(stacked.enc[k]))
    enc_loss = torch.zeros(pack.num_graphs, device=dev)
    for _ in range(hp.epochs):
        stacked.enc_opt.zero_grad()
        stacked.proxy_opt.zero_grad()
        o_p, o_q = encoder_forward(stacked.enc, pack, stacked.proxy)
        ce = _client_mean(pack, F.cross_entropy(o_q, y, reduction="none"), train)
        kd = _client_mean(pack, _kl(log_yhat, torch.log_softmax(o_p, dim=-1)), train)
        per_client = ce + hp.lambda2 * kd
        per_client.sum().backward()
        stacked.enc_opt.step()
        stacked.proxy_opt.step()
        enc_loss = per_client.detach()
    with torch.no_grad():
        c, d = glob_proxies.shape[0], stacked.proxy.shape[1]
        idx = (pack.row_client * c + y)[train]
        sums = torch.zeros(pack.num_graphs * c, d, device=dev).index_add_(
            0, idx, stacked.proxy.detach()[train]
        )
        class_proxies = sums.view(pack.num_graphs, c, d) / train_counts(pack, c).clamp(min=1)[..., None]
    return LocalResult(
        enc={k: v.detach() for k, v in stacked.enc.items()},
        class_proxies=class_proxies,
        gnn_loss=gnn_loss,
        encoder_loss=enc_loss,
    )


# --------------------------------------------------------------------------------------------------------
# uploads
# --------------------------------------------------------------------------------------------------------


def client_uploads(
    result: LocalResult,
    pack: GraphBatch,
    client_ids: Sequence[int],
    glob_enc: Mapping[str, Tensor],
    glob_proxies: Tensor,
    hp: Hyper,
    *,
    round_index: int,
) -> tuple[dict[int, dict[str, Tensor]], dict[str, Any]]:
    r"""Each client's contribution: the numerator and denominator blocks of the two weighted averages.

    .. math::

        u_k = N^{(k)} (\omega^{(k)} - \omega_{\mathrm{ref}}),\quad N^{(k)},\quad
        v_{k,j} = a^{(k)}_j (s^{(k)}_j - S_{r-1,j}),\quad a^{(k)}_j,\quad c_{k,j} = [a^{(k)}_j > 0]

    (``upload="raw"`` drops the subtracted references). :math:`N^{(k)}` is the number of labelled nodes
    (``encoder_weight="train"``) or of nodes (``"nodes"``), and 0 for a client without labelled nodes;
    :math:`a^{(k)}_j` the fraction (``proxy_weight="ratio"``) or number (``"count"``) of its labelled nodes
    in class :math:`j`. The unweighted differences are clipped element-wise to ``encoder_clip`` and
    ``proxy_clip`` first, so the public block bounds always hold.

    Returns:
        ``({client id: {block: tensor}}, notes)``; notes list clients without labelled nodes and clip counts
        (client-side facts reported to the operator of the simulation, not sent to the server).

    Raises:
        NonFiniteError: A client's local encoder or class proxies are NaN/Inf (names client and round).
    """
    ref = reference_encoder(glob_enc, hp.projector_init)
    num_classes = glob_proxies.shape[0]
    n_train = num_train(pack, num_classes).to(torch.float64)
    num_nodes = torch.tensor(pack.sizes, dtype=torch.float64, device=n_train.device)
    weight = n_train if hp.encoder_weight == "train" else num_nodes
    weight = torch.where(n_train > 0, weight, torch.zeros_like(weight))
    counts = train_counts(pack, num_classes).to(torch.float64)
    a = counts if hp.proxy_weight == "count" else counts / n_train.clamp(min=1)[:, None]
    present = (counts > 0).to(torch.int64)
    uploads: dict[int, dict[str, Tensor]] = {}
    clipped = {"encoder": 0, "proxy": 0}
    for i, cid in enumerate(client_ids):
        for name, t in [
            *((f"encoder {k}", result.enc[k][i]) for k in ENCODER_KEYS),
            ("class proxies", result.class_proxies[i]),
        ]:
            if not bool(torch.isfinite(t).all()):
                raise NonFiniteError(
                    f"FedSpray: client {cid} produced non-finite {name} in round {round_index} "
                    f"(GNN loss {float(result.gnn_loss[i]):.4g}, encoder loss {float(result.encoder_loss[i]):.4g}); "
                    "lower the learning rates or check the client's features"
                )
        up: dict[str, Tensor] = {}
        for k in ENCODER_KEYS:
            diff = result.enc[k][i].double() - (ref[k].double() if hp.upload == "delta" else 0.0)
            clipped["encoder"] += int((diff.abs() > hp.encoder_clip).sum())
            up[f"enc.{k}"] = weight[i] * diff.clamp(-hp.encoder_clip, hp.encoder_clip)
        up["enc.weight"] = weight[i].round().to(torch.int64).reshape(1)
        diff = result.class_proxies[i].double() - (glob_proxies.double() if hp.upload == "delta" else 0.0)
        diff = diff * present[i][:, None]  # an absent class sends exactly zero
        clipped["proxy"] += int((diff.abs() > hp.proxy_clip).sum())
        up["proxy.sum"] = a[i][:, None] * diff.clamp(-hp.proxy_clip, hp.proxy_clip)
        up["proxy.weight"] = a[i] if hp.proxy_weight == "ratio" else a[i].round().to(torch.int64)
        up["proxy.clients"] = present[i]
        uploads[int(cid)] = up
    notes = {
        "no_labelled_nodes": [int(c) for i, c in enumerate(client_ids) if int(n_train[i]) == 0],
        "clipped_elements": clipped,
    }
    return uploads, notes
