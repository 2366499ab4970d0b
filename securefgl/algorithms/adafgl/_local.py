"""AdaFGL step 2 on one client, end to end: correct the topology, smooth, score, train, predict.

Private helper of :mod:`securefgl.algorithms.adafgl` (client side); it takes one client's graph and the frozen
extractor's output and sends nothing anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from securefgl.algorithms.adafgl._batched import BatchClient, train_local_batched
from securefgl.algorithms.adafgl._topology import adjacency, correct_topology, homophily_confidence_score
from securefgl.algorithms.adafgl.model import LocalOutcome, LocalStepOptions, SmoothedFeatures, cpu_generator

__all__ = [
    "PreparedClient",
    "StepTwoResult",
    "client_homophily_report",
    "extractor_fallback",
    "local_personalization",
    "prepare_client",
    "step_options",
    "train_prepared",
]


@dataclass
class StepTwoResult:
    """Everything step 2 leaves on one client (client-local; never uploaded)."""

    outcome: LocalOutcome
    hcs: float
    similarity_edges: int
    corrected_edges: int
    dense_message_passing: bool
    fell_back: bool = False


@dataclass
class PreparedClient:
    """A client's step-2 inputs (corrected topology, smoothed features, HCS) and topology statistics."""

    inputs: BatchClient
    similarity_edges: int
    corrected_edges: int
    dense_message_passing: bool


def step_options(o: Any) -> LocalStepOptions:
    """The training-loop view of :class:`~securefgl.algorithms.adafgl.AdaFGLOptions`."""
    return LocalStepOptions(
        epochs=o.epochs,
        lr=o.lr,
        weight_decay=o.weight_decay,
        dropout=o.dropout,
        hidden=o.hidden,
        num_hops=o.num_hops,
        beta=o.beta,
        he_input=o.he_input,
        compat_c1_scaling=o.compat_c1_scaling,
        knowledge_preserving=o.knowledge_preserving,
        knowledge_loss=o.knowledge_loss,
        feature_embedding=o.feature_embedding,
        message_passing=o.message_passing,
        loss=o.loss,
        combine=o.combine if o.adaptive_combination else "mean",
        hard_threshold=o.hcs_hard_threshold,
        compat_double_softmax=o.compat_double_softmax,
        selection=o.selection,
        blend_grid=tuple(g for g in o.blend_grid if g != 0.0) if o.blend == "select" else (),
    )


def prepare_client(
    x: torch.Tensor,
    edge_index: torch.Tensor,
    y: torch.Tensor,
    masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    p_hat: torch.Tensor,
    extractor_logits: torch.Tensor,
    options: Any,
    *,
    num_classes: int,
    generator: torch.Generator,
    client: int | str = "?",
) -> PreparedClient:
    """Everything of step 2 that is not learned: eqs. (5)-(7) and (15)-(16), for one client.

    Draws from ``generator`` in a fixed order (HCS mask, then the weight-initialisation seed), so the
    one-client and the batched training paths start from the same models.
    """
    o = options
    n = x.size(0)
    device = x.device
    adj = adjacency(edge_index, n, device=device)
    topo = correct_topology(
        adj,
        p_hat,
        alpha=o.alpha,
        normalization=o.eq6,
        threshold=o.sim_threshold,
        topk=o.sim_topk,
        dense_max_nodes=o.dense_max_nodes,
        large_client_topk=o.large_client_topk,
        chunk_size=o.sim_chunk_size,
        enabled=o.topology_correction,
    )
    feats = SmoothedFeatures(x, topo.operator, o.num_hops)
    p0_sparse = topo.similarity if o.lm_init == "similarity" else topo.corrected
    dense = n <= o.dense_max_nodes
    if not o.message_passing:
        p0 = None
    elif dense:
        p0 = p0_sparse.to_dense()
    else:
        # Large client: message passing restricted to the support of P~(0) and the local edges.
        p0 = (p0_sparse + 0.0 * adj).coalesce()
    hcs = homophily_confidence_score(
        adj,
        y,
        masks[0],
        num_classes,
        generator=generator,
        steps=o.lp_steps,
        kappa=o.lp_kappa,
        mask_prob=o.hcs_mask_prob,
        num_masks=o.hcs_num_masks,
        reinject=o.lp_reinject,
    )
    target = p_hat if o.knowledge_target == "probs" else extractor_logits
    inputs = BatchClient(
        id=client,
        x=x,
        feats=feats,
        p0=p0,
        p_hat=p_hat,
        target=target.detach(),
        y=y,
        masks=masks,
        hcs=hcs,
        init_generator=cpu_generator(generator),
    )
    return PreparedClient(
        inputs=inputs,
        similarity_edges=int(topo.similarity._nnz()),
        corrected_edges=int(topo.corrected._nnz()),
        dense_message_passing=bool(dense and o.message_passing),
    )


def train_prepared(
    prepared: Sequence[PreparedClient],
    options: Any,
    *,
    num_classes: int,
    generators: Sequence[torch.Generator],
    batched: bool = True,
    batch_generator: torch.Generator | None = None,
) -> list[StepTwoResult]:
    """Train step 2 on prepared clients: together where possible, else one at a time (a batch of one).

    Every client trains through :func:`~securefgl.algorithms.adafgl._batched.train_local_batched`; batching
    only changes which clients share the tensor operations (and, with dropout, the random stream).

    Args:
        prepared: from :func:`prepare_client`.
        options: the AdaFGL options.
        num_classes: ``C``.
        generators: each client's generator (dropout masks of a client trained alone).
        batched: train the clients with dense message passing (or none) together; large clients (sparse
            message passing) train one at a time either way.
        batch_generator: dropout masks of the shared batch (default: the first batched client's generator).
    """
    opts = step_options(options)
    outcomes: dict[int, LocalOutcome] = {}
    together = [
        i for i, p in enumerate(prepared) if batched and (p.dense_message_passing or not opts.message_passing)
    ]
    if len(together) > 1:
        gen = batch_generator if batch_generator is not None else generators[together[0]]
        outs = train_local_batched(
            [prepared[i].inputs for i in together], opts, num_classes=num_classes, generator=gen
        )
        outcomes.update(zip(together, outs, strict=True))
    for i, p in enumerate(prepared):
        if i not in outcomes:
            (outcomes[i],) = train_local_batched(
                [p.inputs], opts, num_classes=num_classes, generator=generators[i]
            )
    results = []
    for i, p in enumerate(prepared):
        outcome, fell_back = outcomes[i], False
        if options.fallback == "extractor":
            outcome, fell_back = extractor_fallback(outcome, p.inputs)
        results.append(
            StepTwoResult(
                outcome=outcome,
                hcs=p.inputs.hcs,
                similarity_edges=p.similarity_edges,
                corrected_edges=p.corrected_edges,
                dense_message_passing=p.dense_message_passing,
                fell_back=fell_back,
            )
        )
    return results


def extractor_fallback(outcome: LocalOutcome, client: BatchClient) -> tuple[LocalOutcome, bool]:
    r"""The federated extractor's prediction :math:`\hat P` instead of step 2's when it gets more of the client's
    validation nodes right (ties keep step 2); ``(outcome, whether it fell back)``. Local: labels stay here."""
    pred = client.p_hat.argmax(dim=1)
    y = client.y.long()
    train, val, test = client.masks
    val_correct = int(((pred == y) & val).sum())
    if val_correct <= outcome.val_correct:
        return outcome, False
    fallback = LocalOutcome(
        probs=client.p_hat.detach().clone(),
        best_epoch=0,
        val_correct=val_correct,
        val_total=int(val.sum()),
        test_correct=int(((pred == y) & test).sum()),
        test_total=int(test.sum()),
        train_correct=int(((pred == y) & train).sum()),
        train_total=int(train.sum()),
        history=outcome.history,
    )
    return fallback, True


def local_personalization(
    x: torch.Tensor,
    edge_index: torch.Tensor,
    y: torch.Tensor,
    masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    p_hat: torch.Tensor,
    extractor_logits: torch.Tensor,
    options: Any,
    *,
    num_classes: int,
    generator: torch.Generator,
    client: int | str = "?",
) -> StepTwoResult:
    """Run AdaFGL step 2 on one client's subgraph (spec §2.2, pseudocode §2.3).

    Args:
        x: ``(N, F)`` features.
        edge_index: ``(2, E)`` local edges.
        y: ``(N,)`` labels (only train labels are used for training and HCS; val labels select the epoch).
        masks: train, val, test boolean masks ``(N,)``.
        p_hat: ``(N, C)`` frozen extractor probabilities :math:`\\hat P`.
        extractor_logits: ``(N, C)`` the extractor's logits (the eq. (8) target when
            ``options.knowledge_target == "logits"``).
        options: an :class:`~securefgl.algorithms.adafgl.AdaFGLOptions`.
        num_classes: ``C``.
        generator: the client's generator (HCS mask, weight init, dropout).
        client: client id, for error messages.
    """
    prepared = prepare_client(
        x,
        edge_index,
        y,
        masks,
        p_hat,
        extractor_logits,
        options,
        num_classes=num_classes,
        generator=generator,
        client=client,
    )
    return train_prepared(
        [prepared], options, num_classes=num_classes, generators=[generator], batched=False
    )[0]


def _finite_or_none(v: float) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def client_homophily_report(edge_index: torch.Tensor, y: torch.Tensor, num_classes: int) -> dict[str, Any]:
    """Spec §6 per-client statistics: size, edges, isolated nodes, label histogram, H_node/H_edge/H_class.

    Undefined values (no edges, a single class) are reported as ``None`` with the reason, never NaN.
    """
    from securefgl.data.homophily import class_homophily, edge_homophily, node_homophily

    n = int(y.numel())
    ei = edge_index.detach().cpu()
    ei = ei[:, ei[0] != ei[1]] if ei.numel() else ei.reshape(2, 0)
    yy = y.detach().cpu().long()
    deg = np.bincount(ei[0].numpy(), minlength=n) if ei.numel() else np.zeros(n, dtype=np.int64)
    hist = np.bincount(yy.numpy(), minlength=num_classes).tolist() if n else [0] * num_classes
    undirected = int(torch.unique(torch.sort(ei, dim=0).values, dim=1).size(1)) if ei.numel() else 0
    rep: dict[str, Any] = {
        "num_nodes": n,
        "num_edges": undirected,
        "isolated_nodes": int((deg == 0).sum()),
        "label_histogram": hist,
        "node_homophily": _finite_or_none(node_homophily(ei, yy)) if n else None,
        "edge_homophily": _finite_or_none(edge_homophily(ei, yy)),
        "class_homophily": _finite_or_none(class_homophily(ei, yy, num_classes)),
    }
    undefined = [k for k in ("node_homophily", "edge_homophily", "class_homophily") if rep[k] is None]
    if undefined:
        rep["undefined"] = {k: ("no edges" if undirected == 0 else "fewer than 2 classes") for k in undefined}
    return rep
