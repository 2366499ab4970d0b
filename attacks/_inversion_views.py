"""Gradient inversion, reading updates out of an adversary view (FedAvg / FedProx / DP-FedAvg uploads)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch import Tensor

from securefgl.attacks._inversion_config import ModelUpdate
from securefgl.errors import AttackNotApplicableError

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
