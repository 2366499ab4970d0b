"""One protocol's share of the audit: the captured run, the adversary views built from it, progress bars.

Also what several attack drivers share: the targets (the clients with the fewest training nodes), their ground
truth, and the algorithm's first upload computed by its own client step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from securefgl.attacks._audit_config import AuditConfig
from securefgl.errors import AttackNotApplicableError


class _Progress:
    """rich progress bars (on stderr, with elapsed and remaining time) when enabled; a no-op otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._p: Any = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._p = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=Console(stderr=True),  # stdout stays clean for --json and the table
                transient=False,
            )
            self._p.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._p is not None:
            self._p.__exit__(*exc)

    def task(self, description: str, total: int) -> Callable[[int, int], None]:
        if self._p is None:
            return lambda done, tot: None
        tid = self._p.add_task(description, total=max(1, total))

        def update(done: int, tot: int) -> None:
            self._p.update(tid, completed=done, total=max(1, tot))

        return update


def _final_round(result: Any) -> dict[str, Any] | None:
    """Phase and round of a run's final (selected) evaluation, or ``None``."""
    final = getattr(result, "final", None)
    if final is None:
        return None
    return {"phase": final.phase, "round": int(final.round)}


class _Context:
    """One protocol's share of the audit: its run, the views built from it, and where figures go."""

    def __init__(
        self,
        cfg: AuditConfig,
        protocol: str,
        run_cfg: Any,
        fg: Any,
        device: torch.device,
        bars: _Progress,
        figures: dict[str, Any],
    ) -> None:
        self.cfg = cfg
        self.protocol = protocol
        self.run_cfg = run_cfg
        self.fg = fg
        self.device = device
        self.bars = bars
        self.figures = figures
        self.run: Any = None
        self._views: dict[str, Any] = {}

    # -- the job -------------------------------------------------------------------------------------

    def capture(self) -> None:
        from securefgl.attacks._capture import capture_run

        total = self.run_cfg.train.rounds
        bar = self.bars.task(f"{self.protocol}: federated run", total)
        self.run = capture_run(self.run_cfg, self.fg, self.cfg.seed, self.device, on_round=bar)

    def run_facts(self) -> dict[str, Any]:
        r = self.run
        return {
            "aggregations": len(r.records),
            "seconds": r.seconds,
            "metrics": {k: v for k, v in r.metrics.items() if isinstance(v, float) and math.isfinite(v)},
            # the engine's final evaluation is the selected round's (best validation when train.select_best)
            "metrics_round": _final_round(r.result),
            "excluded": sorted({c for rec in r.records for c in rec.transcript.excluded}),
            "privacy": next(
                (
                    rec.transcript.extra.get("privacy")
                    for rec in r.records
                    if "privacy" in rec.transcript.extra
                ),
                None,
            ),
            # the algorithm's own privacy statement (e.g. GAP's node-/edge-level DP), SeedResult.report["privacy"]
            "algorithm_privacy": (getattr(r.result, "report", None) or {}).get("privacy"),
        }

    def public(self) -> Any:
        from securefgl.attacks.views import PublicInfo

        mu = float(getattr(getattr(self.run.algorithm, "options", None), "mu", 0.0) or 0.0)
        return PublicInfo(
            self.cfg.algorithm,
            self.fg.num_features,
            self.fg.num_classes,
            self.fg.num_clients,
            self.run_cfg.model,
            self.run_cfg.train,
            self.run.final_broadcast,
            mu,
        )

    def colluders(self) -> list[int]:
        if self.cfg.colluders:
            return list(self.cfg.colluders)
        sizes = sorted(range(self.fg.num_clients), key=lambda i: -int(self.fg.clients[i].num_nodes))
        return sorted(sizes[:2])

    def view(self, kind: str) -> Any:
        from securefgl.attacks.views import GraphKnowledge, client_view, collusion_view, server_view

        if kind in self._views:
            return self._views[kind]
        graph = (
            [GraphKnowledge.from_data(i, c) for i, c in enumerate(self.fg.clients)]
            if self.cfg.graph_known
            else None
        )
        records = self.run.records
        if kind == "server":
            v = server_view(records, self.public(), graph=graph)
        elif kind == "client":
            target = self.colluders()[0]
            v = client_view(records, self.public(), target, graph=graph)
        else:
            v = collusion_view(records, self.public(), self.colluders(), graph=graph)
        self._views[kind] = v
        return v


def _targets(fg: Any, trials: int, exclude: Sequence[int] = ()) -> list[int]:
    sizes = [(int(c.train_mask.sum()), i) for i, c in enumerate(fg.clients) if i not in exclude]
    ok = sorted((n, i) for n, i in sizes if n > 0)
    return [i for _, i in ok[:trials]]


def _truth(fg: Any, client: int) -> tuple[torch.Tensor, torch.Tensor]:
    c = fg.clients[client]
    m = c.train_mask
    return c.x[m].detach().cpu(), c.y[m].detach().cpu()


class _Upload(NamedTuple):
    """The algorithm's first upload on every client, as :func:`_upload_setup` computes it."""

    alg: Any
    schema: Any
    contribs: dict[int, dict[str, torch.Tensor]]
    context: Any
    broadcast: dict[str, torch.Tensor]


def _upload_setup(ctx: _Context) -> _Upload:
    """The algorithm's first upload, computed by its own client step on every client (no server step)."""
    from securefgl.algorithms.base import Client, RoundState
    from securefgl.algorithms.registry import create_algorithm
    from securefgl.engine.runner import make_setting

    fg, rc = ctx.fg, ctx.run_cfg
    setting = make_setting(rc, fg, ctx.device)
    alg = create_algorithm(rc.algorithm.name, setting, rc.algorithm.options)
    ws: dict[str, Any] = {"generator": torch.Generator(device=ctx.device).manual_seed(ctx.cfg.seed)}
    clients = [
        Client(
            i,
            d.to(ctx.device),
            torch.Generator(device=ctx.device).manual_seed(ctx.cfg.seed * 7919 + i),
            workspace=ws,
        )
        for i, d in enumerate(fg.clients)
    ]
    for c in clients:
        alg.init_client(c)
    server = alg.init_server(torch.Generator().manual_seed(ctx.cfg.seed))
    broadcast = dict(alg.initial_broadcast(server))
    phase = next(p for p in alg.phases(rc.train) if p.kind == "rounds")
    rs = RoundState(phase.name, 0, 0, tuple(range(fg.num_clients)), broadcast, 1)
    req = list(alg.requests(rs))
    if not req:
        raise AttackNotApplicableError(f"algorithm {rc.algorithm.name!r} declares no sum in its first round")
    outs = alg.client_steps(clients, rs)
    key = req[0].key
    single = len(req) == 1

    def pick(o: Any) -> dict[str, torch.Tensor]:
        v = o if single else o[key]  # the engine's rule (securefgl.engine.runner._contribution)
        return {k: torch.as_tensor(x).detach().cpu() for k, x in v.items()}

    contribs = {cid: pick(o) for cid, o in outs.items()}
    from securefgl.engine.broadcast import round_context

    return _Upload(
        alg,
        req[0].schema,
        contribs,
        round_context(broadcast),
        {k: v.detach().cpu() for k, v in broadcast.items()},
    )
