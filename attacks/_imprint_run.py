"""The malicious-model attack on a real federated job: honest clients, their algorithm, the real protocol.

:func:`malicious_setup` builds, from a run configuration, everything :func:`~securefgl.attacks.imprint.
imprint_attack` needs: the clients as the engine starts them (:func:`~securefgl.engine.runner.start_seed`),
their honest training step (the algorithm's own ``client_steps``), the algorithm's public schema, the honest
first broadcast, the ground truth (first-layer inputs of every client's training nodes) and the attacker's
public sample; :func:`run_imprint` runs the attack against a named protocol, with real keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from securefgl.attacks.imprint import (
    ImprintConfig,
    ImprintResult,
    imprint_attack,
    imprint_layout,
    propagated_inputs,
)

__all__ = ["MaliciousSetup", "imprint_study", "malicious_setup", "rule_guard", "run_imprint", "sanity_guard"]


@dataclass
class MaliciousSetup:
    """One federated job seen by a malicious server (see :func:`malicious_setup`)."""

    algorithm: Any
    model: torch.nn.Module
    train: Callable[[Sequence[int], Mapping[str, Tensor]], dict[int, Any]]
    schema_for: Callable[[Mapping[str, Tensor]], Any]
    broadcast: dict[str, Tensor]
    clients: list[int]
    truth: dict[int, Tensor]
    public: Tensor
    num_classes: int
    client_objects: list[Any]


def _inputs(data: Any, propagated: bool) -> Tensor:
    x = data.x.detach().cpu().to(torch.float32)
    return propagated_inputs(x, data.edge_index.detach().cpu()) if propagated else x


def malicious_setup(
    run_cfg: Any, fg: Any, seed: int = 0, device: torch.device | str = "cpu"
) -> MaliciousSetup:
    """Clients, training step, schema, truth and public sample of the job ``run_cfg`` on ``fg``.

    The public sample is the first-layer inputs of the nodes that are no client's training node: the
    attacker's prior of the input distribution (Fowl et al. assume known input statistics; a real server
    would use public data of the domain).
    """
    from securefgl.algorithms.base import RoundState
    from securefgl.algorithms.registry import create_algorithm
    from securefgl.engine.runner import make_setting, start_seed
    from securefgl.nn.registry import build_model

    dev = torch.device(device)
    alg = create_algorithm(run_cfg.algorithm.name, make_setting(run_cfg, fg, dev), run_cfg.algorithm.options)
    cl, _server, broadcast, _ = start_seed(alg, fg, seed, dev)
    model = build_model(run_cfg.model, fg.num_features, fg.num_classes)
    layout = imprint_layout(model)
    ids = [c.id for c in cl]
    phase = next(p for p in alg.phases(run_cfg.train) if p.kind == "rounds")

    def train(which: Sequence[int], bc: Mapping[str, Tensor]) -> dict[int, Any]:
        rs = RoundState(phase.name, 0, 0, tuple(which), {k: v.to(dev) for k, v in bc.items()}, 1)
        out = alg.client_steps([cl[i] for i in which], rs)
        return {k: {n: torch.as_tensor(x).detach().cpu() for n, x in v.items()} for k, v in out.items()}

    def schema_for(bc: Mapping[str, Tensor]) -> Any:
        rs = RoundState(phase.name, 0, 0, tuple(ids), dict(bc), 1)
        return next(iter(alg.requests(rs))).schema

    truth: dict[int, Tensor] = {}
    public = []
    for i, data in enumerate(fg.clients):
        rows = _inputs(data, layout.propagated)
        m = data.train_mask.cpu()
        truth[i] = rows[m]
        public.append(rows[~m])
    return MaliciousSetup(
        alg,
        model,
        train,
        schema_for,
        {k: v.detach().cpu() for k, v in dict(broadcast).items()},
        ids,
        truth,
        torch.cat(public),
        int(fg.num_classes),
        cl,
    )


def run_imprint(
    setup: MaliciousSetup,
    protocol: str,
    target: int,
    *,
    config: ImprintConfig | None = None,
    protocol_options: Mapping[str, Any] | None = None,
    client_check: Callable[[int, Mapping[str, Tensor]], None] | None = None,
) -> ImprintResult:
    """Run :func:`~securefgl.attacks.imprint.imprint_attack` against ``protocol`` (a registry name)."""
    from securefgl.protocols.registry import get_protocol

    opts = dict(protocol_options or {})
    return imprint_attack(
        lambda r: get_protocol(protocol, **opts),
        setup.schema_for,
        setup.train,
        setup.model,
        setup.broadcast,
        setup.clients,
        setup.public,
        setup.truth,
        target,
        num_classes=setup.num_classes,
        config=config,
        client_check=client_check,
    )


def sanity_guard(
    setup: MaliciousSetup, check: Any | None = None
) -> Callable[[int, Mapping[str, Tensor]], None]:
    """The client-side first-layer test as a ``client_check`` (each client tests on its own training inputs)."""
    from securefgl.attacks.model_check import SuspiciousModelError, first_layer_sanity

    def guard(client: int, params: Mapping[str, Tensor]) -> None:
        rep = first_layer_sanity(setup.model, params, setup.truth[client], check)
        if not rep.passed:
            raise SuspiciousModelError(f"client {client} refused the broadcast: {rep.reason}")

    return guard


def rule_guard(setup: MaliciousSetup) -> Callable[[int, Mapping[str, Tensor]], None]:
    """The update-rule check of the first round: the broadcast must be the public-seed initialisation."""
    from securefgl.attacks.model_check import check_update_rule

    expected = dict(setup.broadcast)

    def guard(client: int, params: Mapping[str, Tensor]) -> None:
        check_update_rule(params, expected)

    return guard


def _row(res: ImprintResult, **extra: Any) -> dict[str, Any]:
    return {
        **extra,
        "rounds_released": res.rounds,
        "refused": res.refused,
        "exact_target": res.exact_target,
        "exact_all": res.exact_all,
        "best_cosine_target": res.best_cosine_target,
        "certified": res.certified,
        "seconds": res.seconds,
    }


def imprint_study(
    setup: MaliciousSetup,
    target: int,
    *,
    rounds: int,
    protocols: Sequence[str] = ("plaintext", "secagg"),
    epsilons: Sequence[float] = (8.0, 1.0),
    dp_min_contributors: int | None = None,
    trap_units: Sequence[int] = (16,),
    dp_setup: MaliciousSetup | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Tensor]]:
    """The malicious-model grid on one job: bins and traps per protocol, DP epsilons, and the defences.

    The ``+dp`` cells run on ``dp_setup`` (the same job configured with a ``+dp`` protocol, so that clients
    upload DP-FedAvg deltas marked for noise); they are skipped without it.

    Returns:
        ``(rows, {"truth": target's rows, "<label>": best recovered row per true row})`` for the figures.
    """
    cells: list[tuple[str, str, dict[str, Any], ImprintConfig, str | None]] = []
    m = dp_min_contributors or max(1, len(setup.clients) - 1)
    for p in protocols:
        cells.append((p, "bins", {}, ImprintConfig(rounds=rounds), None))
        cells.append((p, "trap", {}, ImprintConfig(kind="trap", rounds=rounds), None))
    base = "secagg" if "secagg" in protocols else protocols[-1]
    for eps in epsilons if dp_setup is not None else ():
        opts = {"dp_min_contributors": m, "dp_clip_norm": 1.0, "dp_epsilon": float(eps), "dp_rounds": rounds}
        cells.append((f"{base}+dp", "bins", opts, ImprintConfig(rounds=rounds), None))
    cells.append((base, "bins", {}, ImprintConfig(rounds=rounds), "sanity"))
    cells.append((base, "trap", {}, ImprintConfig(kind="trap", rounds=rounds), "sanity"))
    for tu in trap_units:
        cells.append((base, f"trap{tu}", {}, ImprintConfig(kind="trap", rounds=rounds, trap_units=tu), None))
        cells.append(
            (base, f"trap{tu}", {}, ImprintConfig(kind="trap", rounds=rounds, trap_units=tu), "sanity")
        )
    cells.append((base, "bins", {}, ImprintConfig(rounds=rounds), "update-rule"))
    rows: list[dict[str, Any]] = []
    recon: dict[str, Tensor] = {"truth": setup.truth[target]}
    for i, (proto, kind, opts, cfg, defence) in enumerate(cells):
        guard = {None: None, "sanity": sanity_guard(setup), "update-rule": rule_guard(setup)}[defence]
        job = dp_setup if (dp_setup is not None and proto.endswith("+dp")) else setup
        res = run_imprint(job, proto, target, config=cfg, protocol_options=opts, client_check=guard)
        eps = opts.get("dp_epsilon")
        rows.append(_row(res, protocol=proto, attack=kind, epsilon=eps, defence=defence or "none"))
        if defence is None and res.best_target is not None and kind in ("bins", "trap"):
            recon[f"{proto}{'' if eps is None else f' eps={eps:g}'} {kind}"] = res.best_target
        if progress is not None:
            progress(i + 1, len(cells))
    return rows, recon
