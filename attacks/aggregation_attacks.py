r"""Attacks on secure aggregation itself: model inconsistency, disaggregation, and the minimum cohort.

Secure aggregation hides individual inputs only if the sum really mixes several honest inputs. A server can
try to make it not do so (anchors §1.10 of ``shared/specs/secure-aggregation-anchors.md``):

* **Model inconsistency** (Pasquini, Francati, Ateniese, "Eluding Secure Aggregation in Federated Learning
  via Model Inconsistency", CCS 2022, https://arxiv.org/abs/2111.07380): the server sends the target the real
  model and every other client a crafted one whose update on some parameters is known (here: a first layer
  with zero weights and bias :math:`-1`, so its ReLU never fires and its gradient is zero). The sum of that
  block is then the target's alone:

  .. math::
      \sum_k n_k\, W_{1,k} = n_t W_{1,t} + \textstyle\sum_{k \ne t} n_k \cdot 0 .

  Defence: every client binds the hash of the model it received (the round context) into the session id;
  clients shown different models cannot complete a session together, so the target is excluded
  (:class:`~securefgl.errors.InconsistentViewError`) or the session aborts, and its update is never summed.
* **Disaggregation across rounds** (Lam, Wang, Fu, Zhang, Wang, Zhao, "Gradient Disaggregation: Breaking
  Privacy in Federated Learning by Reconstructing the User Participant Matrix", ICML 2021,
  https://arxiv.org/abs/2106.06089): sums of a static statistic over varying participant sets form a linear
  system :math:`S = M X` (participation matrix :math:`M`); every client whose indicator lies in the row space
  of :math:`M` is recovered by least squares. The pairwise rule of
  :class:`~securefgl.protocols.release_guard.ReleaseGuard` (``mode="difference"``) stops a one-client
  difference but not every linear combination (three sums over :math:`\{1,2\}, \{1,3\}, \{2,3\}` give
  :math:`x_1`); ``mode="fixed"`` stops it.
* **Minimum cohort**: a server that invites (or keeps alive) only the target gets a "sum" of one input. The
  schema's ``min_contributors`` rule (and the masking threshold) must refuse it.

Every function returns what the adversary recovered and whether a protocol defence refused it; scoring is by
cosine similarity to the target's true contribution block (1.0: isolated exactly).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.errors import AttackNotApplicableError, ConfigError, ProtocolError

__all__ = [
    "DisaggregationResult",
    "InconsistencyResult",
    "context_digest",
    "dead_first_layer",
    "disaggregation_attack",
    "minimum_cohort_attack",
    "model_inconsistency_attack",
]


def context_digest(broadcast: Mapping[str, Tensor]) -> bytes:
    """The round context the engine binds into sessions: a hash of the broadcast (same as the engine's)."""
    from securefgl.engine.broadcast import round_context

    return round_context(broadcast)


def _cos(a: Tensor, b: Tensor) -> float:
    return float(
        F.cosine_similarity(a.flatten().to(torch.float64), b.flatten().to(torch.float64), dim=0, eps=1e-30)
    )


def _rel(a: Tensor, b: Tensor) -> float:
    b64 = b.flatten().to(torch.float64)
    return float((a.flatten().to(torch.float64) - b64).norm() / b64.norm().clamp(min=1e-30))


def dead_first_layer(
    model: torch.nn.Module, params: Mapping[str, Tensor]
) -> tuple[dict[str, Tensor], list[str]]:
    """A crafted copy of ``params`` whose first layer never fires: zero weights, bias -1 (ReLU is then 0).

    Returns:
        ``(crafted params, names of the first layer's parameters)``.

    Raises:
        AttackNotApplicableError: the model has no ReLU after a first layer with a bias (SGC, one layer).
    """
    kind = type(model).__name__.lower()
    layers = len(getattr(model, "convs", getattr(model, "lins", [])))
    if kind == "sgc" or layers < 2:
        raise AttackNotApplicableError(
            f"{type(model).__name__} has no hidden ReLU layer whose gradient a crafted model can switch off "
            "(model inconsistency needs a model with at least two layers, e.g. mlp, gcn, sage)"
        )
    names = [n for n, _ in model.named_parameters()]
    prefix = "lins.0." if kind == "mlp" else "convs.0."
    first = [n for n in names if n.startswith(prefix)]
    biases = [n for n in first if n.endswith("bias")]
    if not biases:
        raise AttackNotApplicableError(f"the first layer of {type(model).__name__} has no bias to silence it")
    crafted = {k: v.detach().clone() for k, v in params.items()}
    for n in first:
        crafted[n] = torch.full_like(crafted[n], -1.0) if n in biases else torch.zeros_like(crafted[n])
    return crafted, first


@dataclass
class InconsistencyResult:
    r"""Outcome of a model-inconsistency attempt.

    Args:
        target: The targeted client.
        bound: Whether clients bound their received model into the session (the engine's behaviour).
        refused: Why the protocol refused/excluded (empty if the sum was released with the target in it).
        target_in_sum: Whether the target's input is in the released sum.
        isolation_cosine: Cosine between the isolated block of the released sum and the target's true block
            (NaN if nothing was released).
        baseline_cosine: The same cosine for an honest round (everybody gets the real model); close to 1 as
            well, because every client's weights are near the shared model: read ``isolation_error``.
        isolation_error: :math:`\lVert s - x_t \rVert / \lVert x_t \rVert` for the released block ``s`` and the
            target's block :math:`x_t` (0: isolated exactly; NaN if nothing was released).
        baseline_error: The same for the honest round.
        blocks: The isolated block names.
    """

    target: int
    bound: bool
    refused: str
    target_in_sum: bool
    isolation_cosine: float
    baseline_cosine: float
    isolation_error: float = float("nan")
    baseline_error: float = float("nan")
    blocks: list[str] = field(default_factory=list)
    excluded: dict[int, str] = field(default_factory=dict)


def model_inconsistency_attack(
    protocol: Any,
    schema_for: Callable[[Mapping[str, Tensor]], Any],
    train: Callable[[Sequence[int], Mapping[str, Tensor]], Mapping[int, Mapping[str, Tensor]]],
    model: torch.nn.Module,
    broadcast: Mapping[str, Tensor],
    clients: Sequence[int],
    target: int,
    *,
    bind_context: bool = True,
    round_index: int = 0,
    block_prefix: str = "w.",
) -> InconsistencyResult:
    """Send ``target`` the real model and everybody else a crafted one; see what the sum reveals.

    Args:
        protocol: The protocol under test.
        schema_for: ``broadcast -> SumSchema`` (the algorithm's public schema).
        train: ``(client ids, broadcast) -> {client: contribution}`` (the clients' honest training step).
        model: The architecture.
        broadcast: The real model.
        clients: The round's clients.
        target: The targeted client.
        bind_context: Clients bind the model they received into the session (the engine always does);
            ``False`` models a protocol without that binding.
        round_index: The round.
        block_prefix: Prefix of the upload's parameter blocks (``"w."`` for FedAvg).
    """
    if target not in clients:
        raise ConfigError(f"target {target!r} is not among the round's clients {list(clients)[:10]}")
    crafted, first = dead_first_layer(model, broadcast)
    others = [c for c in clients if c != target]
    contrib = dict(train([target], broadcast))
    contrib.update(train(others, crafted))
    honest = dict(train(list(clients), broadcast))
    schema = schema_for(broadcast)
    # the weights: the crafted clients' weight blocks stay exactly zero (their biases stay at -1 * n_k)
    blocks = [block_prefix + n for n in first if n.endswith("weight") and (block_prefix + n) in schema]
    truth = torch.cat([torch.as_tensor(contrib[target][b]).flatten() for b in blocks])

    ctx_real, ctx_crafted = context_digest(broadcast), context_digest(crafted)
    context: bytes | dict[int, bytes]
    context = {c: (ctx_real if c == target else ctx_crafted) for c in clients} if bind_context else ctx_real

    # Baseline: an honest round, everybody on the real model.
    try:
        hs, _ = protocol.aggregate(schema, honest, round_index=round_index, context=ctx_real)
        hb = torch.cat([hs[b].flatten() for b in blocks])
        base_cos, base_err = _cos(hb, truth), _rel(hb, truth)
    except ProtocolError:
        base_cos = base_err = float("nan")
    try:
        sums, tr = protocol.aggregate(schema, contrib, round_index=round_index + 1, context=context)
    except ProtocolError as exc:
        excluded = dict(getattr(getattr(exc, "transcript", None), "excluded", {}) or {})
        return InconsistencyResult(
            int(target),
            bind_context,
            f"{type(exc).__name__}: {exc}",
            False,
            float("nan"),
            base_cos,
            float("nan"),
            base_err,
            blocks,
            excluded,
        )
    in_sum = target in tr.survivors
    got = torch.cat([sums[b].flatten() for b in blocks])
    refused = "" if in_sum else f"target excluded: {tr.excluded.get(target, 'not among the survivors')}"
    return InconsistencyResult(
        int(target),
        bind_context,
        refused,
        in_sum,
        _cos(got, truth),
        base_cos,
        _rel(got, truth),
        base_err,
        blocks,
        dict(tr.excluded),
    )


@dataclass
class DisaggregationResult:
    """Outcome of a disaggregation attempt.

    Args:
        released: Participant sets whose sums were released.
        refused: Participant sets refused (with the reason).
        identifiable: Clients whose input the released sums determine.
        recovered: Client -> recovered flat vector (identifiable clients only).
        errors: Client -> max abs error of the recovery.
    """

    released: list[tuple[int, ...]]
    refused: list[tuple[tuple[int, ...], str]]
    identifiable: list[int]
    recovered: dict[int, np.ndarray]
    errors: dict[int, float]


def disaggregation_attack(
    protocol: Any,
    schema: Any,
    contributions: Mapping[int, Mapping[str, Any]],
    participant_sets: Sequence[Sequence[int]],
    *,
    context: bytes = b"",
    round_index: int = 0,
) -> DisaggregationResult:
    """Aggregate one static statistic over several participant sets and solve for individual inputs.

    Args:
        protocol: The protocol (possibly guarded).
        schema: The statistic's schema.
        contributions: Every client's (static) input.
        participant_sets: The sets the server asks for, in order.
        context, round_index: The round (the same statistic every time).
    """
    clients = sorted(int(c) for c in contributions)
    col = {c: i for i, c in enumerate(clients)}
    rows, sums = [], []
    released, refused = [], []
    for r, pset in enumerate(participant_sets):
        sub = {int(c): contributions[c] for c in pset}
        try:
            s, tr = protocol.aggregate(schema, sub, round_index=round_index + r, context=context)
        except ProtocolError as exc:
            refused.append((tuple(sorted(sub)), f"{type(exc).__name__}: {exc}"))
            continue
        surv = tuple(sorted(int(c) for c in tr.survivors))
        row = np.zeros(len(clients))
        row[[col[c] for c in surv]] = 1.0
        rows.append(row)
        sums.append(
            np.concatenate(
                [s[n].detach().cpu().numpy().astype(np.float64).ravel() for n in schema.names if n in s]
            )
        )
        released.append(surv)
    ident: list[int] = []
    rec: dict[int, np.ndarray] = {}
    errs: dict[int, float] = {}
    if rows:
        m = np.stack(rows)
        y = np.stack(sums)
        pinv = np.linalg.pinv(m)
        for c in clients:
            e = np.zeros(len(clients))
            e[col[c]] = 1.0
            # client c is determined iff e_c lies in the row space of M: e_c^T = a^T M for some a
            a = e @ pinv
            if np.allclose(a @ m, e, atol=1e-8):
                ident.append(c)
                x = a @ y
                rec[c] = x
                true = np.concatenate(
                    [
                        np.asarray(
                            torch.as_tensor(contributions[c][n]).detach().cpu(), dtype=np.float64
                        ).ravel()
                        for n in schema.names
                    ]
                )
                errs[c] = float(np.nanmax(np.abs(x - true))) if x.size else float("nan")
    return DisaggregationResult(released, refused, ident, rec, errs)


def minimum_cohort_attack(
    protocol: Any,
    schema: Any,
    contributions: Mapping[int, Mapping[str, Any]],
    target: int,
    *,
    context: bytes = b"",
    round_index: int = 0,
) -> tuple[bool, str, float]:
    """Invite the target alone; return ``(released, reason if refused, cosine to the target's input)``."""
    try:
        s, _ = protocol.aggregate(
            schema, {int(target): contributions[target]}, round_index=round_index, context=context
        )
    except ProtocolError as exc:
        return False, f"{type(exc).__name__}: {exc}", float("nan")
    got = torch.cat([s[n].flatten().to(torch.float64) for n in schema.names if n in s])
    true = torch.cat(
        [
            torch.as_tensor(contributions[target][n]).flatten().to(torch.float64)
            for n in schema.names
            if n in s
        ]
    )
    return True, "", _cos(got, true)
