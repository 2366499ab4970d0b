r"""``audit(config) -> AuditResult``: run a federated job under each protocol and attack every adversary view.

A privacy claim rests on a measurement. For one algorithm, model and dataset, the audit

1. checks, before any work, which (attack, protocol) cells apply (an attack that does not apply is refused with
   :class:`~securefgl.errors.AttackNotApplicableError` naming the reason; the cell is reported as such);
2. runs the federated job once per protocol with the engine's :func:`~securefgl.engine.runner.run_seed`,
   observing it through the engine's hooks to keep every aggregation's transcript
   (:mod:`securefgl.attacks._capture`); the run's utility is the engine's final evaluation (the round the
   server selected), the attacks on the model use the last broadcast;
3. builds each adversary's view from the transcripts alone (:mod:`securefgl.attacks.views`);
4. runs each attack on each view, over ``trials`` targets/seeds, and scores it against ground truth, next to
   its baselines: *chance* (what an adversary with no view gets) and *public* (the same attack on what the
   adversary is entitled to see, e.g. the released sum);
5. writes ``audit.json`` (for pipelines), ``summary.md`` (for a reviewer), and figures (true vs reconstructed
   features, ROC curves) with matplotlib's Agg backend.

A view that holds nothing for an attack (CKKS ciphertexts, a client's view of other clients' updates) is
reported as "nothing to attack", never as a zero score.

Attacks (``AuditConfig.attacks``):

=========================  =====================================================================================
``gradient-inversion``     labels and features of a small client's training nodes from its update (DLG/iDLG/IG)
``label``                  iDLG label counts from the output bias of a client's update
``link-stealing``          edges from the released model's posteriors (He et al. 2021, Attack-0)
``structure-inference``    a curious FedStruct client: other clients' edges from its setup rows (AUC, P@k)
``membership``             training-node membership from the released model (loss / confidence thresholds)
``statistics``             a client's class statistics / proxies (O-pFGL, FedSpray) from its upload
``differencing``           a client's statistics from two releases that differ by it, before/after ReleaseGuard
``model-inconsistency``    Pasquini et al.: isolate a target by showing others a crafted model
``min-cohort``             a "sum" of one client; the minimum-contributors rule
``disaggregation``         least squares over sums with varying participants (Lam et al.)
=========================  =====================================================================================
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from securefgl.attacks._common import AttackOutcome, metric
from securefgl.attacks.gradient_inversion import InversionConfig
from securefgl.errors import AttackNotApplicableError, ConfigError, NothingToAttackError, ProtocolError

__all__ = ["ATTACKS", "AuditConfig", "AuditResult", "audit"]

#: Every attack the audit knows, in report order.
ATTACKS = (
    "gradient-inversion",
    "label",
    "link-stealing",
    "structure-inference",
    "membership",
    "statistics",
    "differencing",
    "model-inconsistency",
    "min-cohort",
    "disaggregation",
)
_ALIASES = {
    "gi": "gradient-inversion",
    "dlg": "gradient-inversion",
    "labels": "label",
    "idlg": "label",
    "link": "link-stealing",
    "mia": "membership",
    "stats": "statistics",
    "inconsistency": "model-inconsistency",
    "cohort": "min-cohort",
    "structure": "structure-inference",
    "edge-inference": "structure-inference",
}
_VIEWS = ("server", "client", "collusion")


def _norm_attack(name: str) -> str:
    key = str(name).strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in ATTACKS:
        raise ConfigError(f"unknown attack {name!r}; valid: {', '.join(ATTACKS)}")
    return key


@dataclass(frozen=True)
class AuditConfig:
    """What to audit.

    Args:
        algorithm: Algorithm name. (default: ``"fedavg"``)
        model: Model name. (default: ``"sgc"``)
        dataset: Dataset name or ``"csbm"``. (default: ``"Cora"``)
        clients: Number of clients. (default: ``10``)
        attacks: Attack names (see :data:`ATTACKS`). (default: gradient inversion, labels, link stealing)
        protocols: Protocol names. (default: ``("plaintext", "secagg", "secagg+dp")``)
        views: Adversaries: ``"server"``, ``"client"`` (a curious client), ``"collusion"`` (the server with
            ``colluders``). (default: ``("server",)``)
        colluders: Colluding clients of the ``"collusion"`` view (default: the two largest clients).
        trials: Targets (or seeds) per attack; at least 5 is the harness's rule. (default: ``5``)
        seed: Training and attack seed. (default: ``0``)
        rounds: Rounds of the federated job (``None``: the run config's). (default: ``None``)
        attack_round: Which round's updates the update attacks use (0: the first). (default: ``0``)
        graph_known: Give the adversary the targets' graph structure (edges, labelled nodes). (default: False)
        run: Extra run-config sections merged into the job's config (``{"train": {...}, "partition":
            {...}, "protocol": {"options": ...}}``). (default: ``{}``)
        inversion: Reconstruction settings. (default: a lighter :class:`InversionConfig` than the library's)
        guard_min_difference: ``m`` of the ReleaseGuard used by the differencing defence. (default: ``2``)
        output: Folder for ``audit.json``, ``summary.md`` and figures (``None``: nothing written).
        figures: Write figures. (default: ``True``)
        device: ``"cpu"``, ``"cuda"`` or ``"auto"``. (default: ``"cpu"``)
        progress: Show rich progress bars. (default: ``False``)
    """

    algorithm: str = "fedavg"
    model: str = "sgc"
    dataset: str = "Cora"
    clients: int = 10
    attacks: tuple[str, ...] = ("gradient-inversion", "label", "link-stealing")
    protocols: tuple[str, ...] = ("plaintext", "secagg", "secagg+dp")
    views: tuple[str, ...] = ("server",)
    colluders: tuple[int, ...] = ()
    trials: int = 5
    seed: int = 0
    rounds: int | None = None
    attack_round: int = 0
    graph_known: bool = False
    run: Mapping[str, Any] = field(default_factory=dict)
    inversion: InversionConfig = field(default_factory=lambda: InversionConfig(restarts=4, iterations=100))
    guard_min_difference: int = 2
    output: str | None = None
    figures: bool = True
    device: str = "cpu"
    progress: bool = False

    def __post_init__(self) -> None:
        attacks = tuple(dict.fromkeys(_norm_attack(a) for a in self.attacks))
        if not attacks:
            raise ConfigError(f"attacks must name at least one attack; valid: {', '.join(ATTACKS)}")
        object.__setattr__(self, "attacks", attacks)
        from securefgl.protocols.registry import available_protocols, normalize_protocol_name

        protos = tuple(dict.fromkeys(normalize_protocol_name(p) for p in self.protocols))
        unknown = [p for p in protos if p not in available_protocols()]
        if not protos or unknown:
            raise ConfigError(f"unknown protocol(s) {unknown}; valid: {', '.join(available_protocols())}")
        object.__setattr__(self, "protocols", protos)
        bad = [v for v in self.views if v not in _VIEWS]
        if bad or not self.views:
            raise ConfigError(f"unknown view(s) {bad}; valid: {', '.join(_VIEWS)}")
        if self.trials < 1:
            raise ConfigError(f"trials must be >= 1, got {self.trials}")
        if self.clients < 1:
            raise ConfigError(f"clients must be >= 1, got {self.clients}")
        if self.attack_round < 0:
            raise ConfigError(f"attack_round must be >= 0, got {self.attack_round}")
        if self.guard_min_difference < 2:
            raise ConfigError(f"guard_min_difference must be >= 2, got {self.guard_min_difference}")
        if not isinstance(self.run, Mapping):
            raise ConfigError(f"run must be a mapping of run-config sections, got {type(self.run).__name__}")


@dataclass
class AuditResult:
    """The audit's findings.

    Args:
        config: The audit configuration (as a dict).
        outcomes: One :class:`AttackOutcome` per attack x protocol x view.
        runs: Per protocol: utility of the released model and run facts.
        output_dir: Where the report was written (``None``: not written).
        seconds: Total wall time.
    """

    config: dict[str, Any]
    outcomes: list[AttackOutcome]
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    output_dir: Path | None = None
    seconds: float = 0.0

    def get(self, attack: str, protocol: str, view: str = "server") -> AttackOutcome:
        """The outcome of one cell.

        Raises:
            ConfigError: no such cell.
        """
        for o in self.outcomes:
            if o.attack == attack and o.protocol == protocol and o.view == view:
                return o
        raise ConfigError(
            f"no outcome for attack={attack!r} protocol={protocol!r} view={view!r}; cells: "
            f"{sorted({(o.attack, o.protocol, o.view) for o in self.outcomes})}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "runs": self.runs,
            "outcomes": [o.to_dict() for o in self.outcomes],
            "seconds": self.seconds,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def table(self) -> list[dict[str, Any]]:
        """Flat rows ``attack, protocol, view, status, metric, mean, std, baselines``."""
        rows = []
        for o in self.outcomes:
            if o.status != "ok" or not o.metrics:
                rows.append(
                    {
                        "attack": o.attack,
                        "protocol": o.protocol,
                        "view": o.view,
                        "status": o.status,
                        "metric": "",
                        "mean": None,
                        "std": None,
                        "baselines": {},
                        "reason": o.reason,
                    }
                )
                continue
            for name, m in o.metrics.items():
                rows.append(
                    {
                        "attack": o.attack,
                        "protocol": o.protocol,
                        "view": o.view,
                        "status": o.status,
                        "metric": name,
                        "mean": m.mean,
                        "std": m.std,
                        "baselines": dict(m.baselines),
                        "reason": o.reason,
                    }
                )
        return rows

    def summary_markdown(self) -> str:
        return _markdown(self)


# ----------------------------------------------------------------------------------------------------
# applicability (decided before any work)
# ----------------------------------------------------------------------------------------------------

_UPDATE_ATTACKS = ("gradient-inversion", "label")
_MODEL_ATTACKS = ("link-stealing", "membership")
_STAT_ATTACKS = ("statistics", "differencing")
_PROTOCOL_ATTACKS = ("model-inconsistency", "min-cohort", "disaggregation")
_STRUCTURE_ATTACKS = ("structure-inference",)


def _applicability(cfg: AuditConfig, protocol: str) -> dict[str, str]:
    """attack -> reason it does not apply under ``protocol`` (absent: it applies)."""
    from securefgl.algorithms.registry import find_problems, get_algorithm
    from securefgl.attacks.gradient_inversion import MODEL_AVERAGING, check_applicable
    from securefgl.attacks.statistics_inversion import layout_for
    from securefgl.nn.registry import ModelSpec

    out: dict[str, str] = {}
    problems = find_problems(
        cfg.algorithm,
        protocol,
        cfg.model,
        cfg.dataset,
        num_clients=cfg.clients,
        options=dict(cfg.run.get("algorithm", {}).get("options", {})) or None,
    )
    if problems:
        why = "the run itself cannot run: " + "; ".join(str(p) for p in problems)
        return dict.fromkeys(cfg.attacks, why)
    cls = get_algorithm(cfg.algorithm)
    for a in cfg.attacks:
        try:
            if a in _UPDATE_ATTACKS:
                check_applicable(cfg.algorithm, ModelSpec(name=cfg.model))
            elif a in _MODEL_ATTACKS:
                if cfg.algorithm not in MODEL_AVERAGING:
                    raise AttackNotApplicableError(
                        f"algorithm {cfg.algorithm!r} releases no single global model to query (link stealing "
                        f"and membership inference are implemented for {', '.join(MODEL_AVERAGING)})"
                    )
            elif a in _STAT_ATTACKS:
                layout_for(cfg.algorithm)
            elif a in _STRUCTURE_ATTACKS:
                _structure_applicable(cfg)
            elif a == "model-inconsistency":
                if cfg.algorithm not in MODEL_AVERAGING:
                    raise AttackNotApplicableError(
                        f"model inconsistency crafts a model broadcast; algorithm {cfg.algorithm!r} broadcasts none"
                    )
                if cfg.model in ("sgc",):
                    raise AttackNotApplicableError(
                        "model inconsistency needs a hidden ReLU layer to switch off; sgc is linear (use mlp, "
                        "gcn or sage)"
                    )
            if a in _PROTOCOL_ATTACKS and not cls.uses_protocol:
                raise AttackNotApplicableError(f"algorithm {cfg.algorithm!r} never aggregates")
        except AttackNotApplicableError as exc:
            out[a] = str(exc)
    return out


# ----------------------------------------------------------------------------------------------------
# the audit
# ----------------------------------------------------------------------------------------------------


def _run_config(cfg: AuditConfig, protocol: str) -> Any:
    from securefgl.config import RunConfig, merge

    base: dict[str, Any] = {
        "dataset": {"name": cfg.dataset},
        "partition": {"clients": cfg.clients},
        "protocol": {"name": protocol},
        "algorithm": {"name": cfg.algorithm},
        "model": {"name": cfg.model},
        "output": {"save": False},
        "seeds": [cfg.seed],
        "device": cfg.device if cfg.device != "auto" else "auto",
    }
    if cfg.rounds is not None:
        base["train"] = {"rounds": cfg.rounds}
    mapping = merge(base, {k: dict(v) if isinstance(v, Mapping) else v for k, v in cfg.run.items()})
    mapping["protocol"]["name"] = protocol
    if protocol.endswith("+dp"):
        opts = dict(mapping["protocol"].get("options", {}))
        opts.setdefault("dp_min_contributors", max(1, cfg.clients - 1))
        opts.setdefault("dp_clip_norm", 1.0)
        opts.setdefault("dp_noise_multiplier", 1.0)
        mapping["protocol"]["options"] = opts
    return RunConfig.from_mapping(mapping)


class _Progress:
    """rich progress bars when enabled; a no-op otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._p: Any = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
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


def audit(config: AuditConfig | Mapping[str, Any]) -> AuditResult:
    """Run the audit described by ``config`` (see :class:`AuditConfig` and the module docstring).

    Raises:
        ConfigError: invalid names or values (before any work).
        AttackNotApplicableError: not one requested attack applies to any requested protocol (the message
            lists every reason).
    """
    cfg = config if isinstance(config, AuditConfig) else AuditConfig(**dict(config))
    t0 = time.perf_counter()
    cells = {p: _applicability(cfg, p) for p in cfg.protocols}
    if all(len(reasons) == len(cfg.attacks) for reasons in cells.values()):
        lines = "\n".join(f"  - {a} under {p}: {r}" for p, rs in cells.items() for a, r in rs.items())
        raise AttackNotApplicableError(f"no requested attack applies to any requested protocol:\n{lines}")

    outcomes: list[AttackOutcome] = []
    runs: dict[str, dict[str, Any]] = {}
    figures: dict[str, Any] = {"reconstructions": {}, "roc": {}}
    from securefgl.training.device import resolve_device

    device = resolve_device(cfg.device) if cfg.device != "cpu" else torch.device("cpu")
    fg = None
    with _Progress(cfg.progress) as bars:
        for protocol in cfg.protocols:
            skip = cells[protocol]
            for a in cfg.attacks:
                if a in skip:
                    for v in cfg.views:
                        outcomes.append(AttackOutcome(a, protocol, v, "not_applicable", skip[a]))
            todo = [a for a in cfg.attacks if a not in skip]
            if not todo:
                continue
            run_cfg = _run_config(cfg, protocol)
            if fg is None:
                from securefgl.algorithms.registry import get_algorithm
                from securefgl.api import load_federated_graph

                fg = load_federated_graph(run_cfg)
                if get_algorithm(cfg.algorithm).needs_cross_edges:
                    from securefgl.data.cross_edges import attach_cross_edges

                    fg = attach_cross_edges(fg)  # as the engine does (spec §1.2: what clients know)
            ctx = _Context(cfg, protocol, run_cfg, fg, device, bars, figures)
            needs_run = any(a in _UPDATE_ATTACKS + _MODEL_ATTACKS + _STRUCTURE_ATTACKS for a in todo)
            if needs_run:
                try:
                    ctx.capture()
                except ProtocolError as exc:
                    for a in todo:
                        for v in cfg.views:
                            outcomes.append(
                                AttackOutcome(
                                    a,
                                    protocol,
                                    v,
                                    "failed",
                                    f"the federated run aborted: {type(exc).__name__}: {exc}",
                                )
                            )
                    continue
                runs[protocol] = ctx.run_facts()
            for a in todo:
                for v in cfg.views:
                    t1 = time.perf_counter()
                    try:
                        out = ctx.attack(a, v)
                    except NothingToAttackError as exc:
                        out = AttackOutcome(a, protocol, v, "nothing_to_attack", str(exc))
                    except AttackNotApplicableError as exc:
                        out = AttackOutcome(a, protocol, v, "not_applicable", str(exc))
                    out.seconds = time.perf_counter() - t1
                    outcomes.append(out)
    result = AuditResult(
        config=_config_dict(cfg), outcomes=outcomes, runs=runs, seconds=time.perf_counter() - t0
    )
    if cfg.output is not None:
        result.output_dir = _write(result, Path(cfg.output), figures if cfg.figures else None)
    return result


def _config_dict(cfg: AuditConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["inversion"] = asdict(cfg.inversion)
    d["run"] = json.loads(json.dumps(dict(cfg.run), default=str))
    return d


# ----------------------------------------------------------------------------------------------------
# per-protocol context: the run, its views, and the attacks
# ----------------------------------------------------------------------------------------------------


def _final_round(result: Any) -> dict[str, Any] | None:
    """Phase and round of a run's final (selected) evaluation, or ``None``."""
    final = getattr(result, "final", None)
    if final is None:
        return None
    return {"phase": final.phase, "round": int(final.round)}


class _Context:
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

    def attack(self, name: str, kind: str) -> AttackOutcome:
        if name in _UPDATE_ATTACKS:
            return _update_attack(self, name, kind)
        if name in _MODEL_ATTACKS:
            return _model_attack(self, name, kind)
        if name in _STAT_ATTACKS:
            return _stat_attack(self, name, kind)
        if name in _STRUCTURE_ATTACKS:
            return _structure_attack(self, name, kind)
        return _protocol_attack(self, name, kind)


def _targets(fg: Any, trials: int, exclude: Sequence[int] = ()) -> list[int]:
    sizes = [(int(c.train_mask.sum()), i) for i, c in enumerate(fg.clients) if i not in exclude]
    ok = sorted((n, i) for n, i in sizes if n > 0)
    return [i for _, i in ok[:trials]]


def _truth(fg: Any, client: int) -> tuple[torch.Tensor, torch.Tensor]:
    c = fg.clients[client]
    m = c.train_mask
    return c.x[m].detach().cpu(), c.y[m].detach().cpu()


def _prior_guess(fg: Any, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The chance baseline: n copies of the population's mean feature vector, labels in proportion to the
    population's class distribution (what an adversary knows with no view at all)."""
    xs = torch.cat([c.x for c in fg.clients]).to(torch.float64)
    ys = torch.cat([c.y for c in fg.clients])
    counts = torch.bincount(ys, minlength=fg.num_classes).to(torch.float64)
    from securefgl.attacks.gradient_inversion import _round_counts

    k = _round_counts(counts / counts.sum() * n, n)
    labels = torch.repeat_interleave(torch.arange(fg.num_classes), k)
    return xs.mean(0, keepdim=True).repeat(n, 1), labels


def _observation(view: Any, cfg: AuditConfig) -> Any:
    rounds = [o for o in view.observations if o.key == "main" or len(view.observations) == 1]
    if not rounds:
        raise NothingToAttackError(f"view {view.name!r} observed no model-update aggregation")
    idx = min(cfg.attack_round, len(rounds) - 1)
    return rounds[idx]


def _update_attack(ctx: _Context, name: str, kind: str) -> AttackOutcome:
    """Gradient inversion / labels of the smallest clients, from what the view holds."""
    from securefgl.attacks.gradient_inversion import (
        TrainingRecipe,
        invert_update,
        label_accuracy,
        recover_label_counts,
        score_reconstruction,
        updates_in_view,
    )
    from securefgl.nn.registry import build_model

    cfg, fg = ctx.cfg, ctx.fg
    view = ctx.view(kind)
    obs = _observation(view, cfg)
    ups = updates_in_view(view, obs)
    own = set(view.colluders)
    targets = _targets(fg, cfg.trials, exclude=own)
    if "individual" not in ups and "sum" not in ups:
        raise NothingToAttackError(
            f"view {view.name!r} holds neither an individual update nor a released sum"
        )
    model = build_model(
        ctx.run_cfg.model, fg.num_features, fg.num_classes, generator=torch.Generator().manual_seed(0)
    )
    recipe = TrainingRecipe.from_train_config(ctx.run_cfg.train, prox_mu=view.public.prox_mu)
    if kind == "collusion" and "sum" in ups and "individual" not in ups:
        ups = _collusion_residual(view, obs, ups)
    indiv = ups.get("individual", {})
    bar = ctx.bars.task(f"{ctx.protocol}/{kind}: {name}", len(targets))
    vals: dict[str, list[float]] = {}
    pub: dict[str, list[float]] = {}
    chance: dict[str, list[float]] = {}
    per: list[dict[str, Any]] = []
    kinds = {u.source for u in indiv.values()}
    for i, t in enumerate(targets):
        x_true, y_true = _truth(fg, t)
        n = int(y_true.numel())
        gx, gy = _prior_guess(fg, n)
        if name == "label":
            ch = {
                "label_accuracy": label_accuracy(
                    torch.bincount(gy, minlength=fg.num_classes), y_true, fg.num_classes
                )
            }
        else:
            ch = score_reconstruction(gx, gy, x_true, y_true, num_classes=fg.num_classes)
        for k, v in ch.items():
            chance.setdefault(k, []).append(v)
        graph = view.graph.get(t) if cfg.graph_known else None
        row: dict[str, Any] = {"target": t, "train_nodes": n}
        for source, up in (("view", indiv.get(t)), ("public", ups.get("sum"))):
            if up is None:
                continue
            if name == "label":
                nn_ = (
                    n if up.source != "sum" else n
                )  # the adversary scales the aggregate to the target's size
                counts = recover_label_counts(up, model, recipe, fg.num_classes, num_nodes=nn_)
                sc = {"label_accuracy": label_accuracy(counts, y_true, fg.num_classes)}
            else:
                rec = invert_update(
                    up,
                    model,
                    recipe,
                    num_features=fg.num_features,
                    num_classes=fg.num_classes,
                    num_nodes=n if up.source != "individual" else None,
                    graph=graph,
                    config=cfg.inversion,
                    generator=torch.Generator().manual_seed(cfg.seed + i),
                    device=ctx.device,
                )
                extra = {}
                if cfg.model == "sgc":
                    extra["propagated"] = _propagated(model, fg, t)
                sc = score_reconstruction(
                    rec.x, rec.y, x_true, y_true, num_classes=fg.num_classes, extra_targets=extra
                )
                if source == "view" and len(ctx.figures["reconstructions"]) < 6:
                    ctx.figures["reconstructions"][f"{ctx.protocol}/{kind}/client{t}"] = (
                        x_true[:4],
                        rec.x[:4],
                    )
            for k, v in sc.items():
                (vals if source == "view" else pub).setdefault(k, []).append(v)
            row[source] = sc
        per.append(row)
        bar(i + 1, len(targets))
    if not vals and not pub:
        raise NothingToAttackError(f"view {view.name!r} holds no update of the targets")
    metrics = {}
    main = vals if vals else pub
    for k, v in main.items():
        base = {"chance": float(np.mean(chance[k]))} if k in chance else {}
        if vals and k in pub:
            base["public"] = float(np.mean(pub[k]))
        metrics[k] = metric(v, base, higher_is_worse=k != "mse")
    if vals:
        what = (
            "the target's individual upload in the clear"
            if kinds == {"individual"}
            else "the target's masked vector (decoded as if it were an encoding)"
        )
        reason = f"attack on {what}; 'public' = the same attack on the released sum"
    else:
        why = "no individual upload (ciphertexts or a client's view)"
        reason = f"{why}: figures are the attack on the released sum (the public information) itself"
    return AttackOutcome(
        name,
        ctx.protocol,
        kind,
        "ok",
        reason,
        metrics,
        {
            "view": view.name,
            "targets": targets,
            "per_target": per,
            "round": obs.round_index,
            "recipe": asdict(recipe),
            "sources": sorted(kinds) or ["sum"],
        },
    )


def _collusion_residual(view: Any, obs: Any, ups: dict[str, Any]) -> dict[str, Any]:
    """Server + colluders: subtract the colluders' own uploads from the sum (the honest clients' sum)."""
    from securefgl.attacks.gradient_inversion import update_from_upload

    total = view.released_sum(obs)
    rest = {k: total[k].to(torch.float64).clone() for k in total}
    for c, vals in obs.own_inputs.items():
        if c in obs.survivors:
            for k in rest:
                rest[k] = rest[k] - vals[k].to(torch.float64).reshape(rest[k].shape)
    honest = [c for c in obs.survivors if c not in obs.own_inputs]
    up = update_from_upload(rest, obs.broadcast, source="sum", contributors=len(honest))
    out = dict(ups)
    out["sum"] = up
    if len(honest) == 1:
        out["individual"] = {honest[0]: update_from_upload(rest, obs.broadcast, source="individual")}
    return out


def _propagated(model: Any, fg: Any, client: int) -> torch.Tensor:
    c = fg.clients[client]
    with torch.no_grad():
        z = model.propagate(c.x.cpu(), c.edge_index.cpu())
    return z[c.train_mask.cpu()]


def _posteriors(ctx: _Context) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The released model's outputs on every client's graph, in global node order (the deployment)."""
    from securefgl.attacks.gradient_inversion import model_forward
    from securefgl.nn.registry import build_model

    fg = ctx.fg
    view = ctx.view("server") if "server" in ctx.cfg.views else ctx.view(ctx.cfg.views[0])
    params = view.public.released_model
    if not params:
        raise NothingToAttackError("the run released no model to query")
    model = build_model(
        ctx.run_cfg.model, fg.num_features, fg.num_classes, generator=torch.Generator().manual_seed(0)
    )
    n = fg.num_nodes
    logits = torch.zeros(n, fg.num_classes, dtype=torch.float64)
    labels = torch.zeros(n, dtype=torch.long)
    train = torch.zeros(n, dtype=torch.bool)
    test = torch.zeros(n, dtype=torch.bool)
    owner = torch.full((n,), -1, dtype=torch.long)
    for i, c in enumerate(fg.clients):
        gid = c.global_id.cpu()
        with torch.no_grad():
            out = model_forward(
                model, {k: v.float() for k, v in params.items()}, c.x.float().cpu(), c.edge_index.cpu()
            )
        logits[gid] = out.to(torch.float64)
        labels[gid] = c.y.cpu()
        train[gid] = c.train_mask.cpu()
        test[gid] = c.test_mask.cpu() | c.val_mask.cpu()
        owner[gid] = i
    return logits, labels, train, test, owner


def _model_attack(ctx: _Context, name: str, kind: str) -> AttackOutcome:
    from securefgl.attacks.link_stealing import DISTANCES, balanced_pairs, link_stealing
    from securefgl.attacks.membership import membership_inference

    cfg, fg = ctx.cfg, ctx.fg
    view = ctx.view(kind)
    if not view.public.released_model:
        raise NothingToAttackError(f"view {view.name!r} holds no released model")
    logits, labels, train, test, owner = _posteriors(ctx)
    post = torch.softmax(logits, -1)
    bar = ctx.bars.task(f"{ctx.protocol}/{kind}: {name}", cfg.trials)
    per: list[dict[str, Any]] = []
    vals: dict[str, list[float]] = {}
    roc_fig = None
    if name == "link-stealing":
        local = []
        for c in fg.clients:
            local.append(c.global_id.cpu()[c.edge_index.cpu()])
        edges = torch.cat(local, 1)
        for t in range(cfg.trials):
            g = torch.Generator().manual_seed(cfg.seed * 1000 + t)
            pairs, y = balanced_pairs(edges, fg.num_nodes, generator=g, max_pairs=2000, groups=owner)
            res = link_stealing(post, pairs, y, metrics=DISTANCES)
            best = res["correlation"]
            vals.setdefault("auc", []).append(best["auc"])
            vals.setdefault("precision@k", []).append(best["precision@k"])
            vals.setdefault("best_distance_auc", []).append(res[res["best"]]["auc"])
            per.append(
                {
                    "trial": t,
                    "k": res["k"],
                    "best": res["best"],
                    **{d: {"auc": res[d]["auc"], "precision@k": res[d]["precision@k"]} for d in DISTANCES},
                }
            )
            if roc_fig is None:
                roc_fig = (best["fpr"], best["tpr"])
            bar(t + 1, cfg.trials)
        metrics = {
            "auc": metric(vals["auc"], {"chance": 0.5}),
            "precision@k": metric(vals["precision@k"], {"chance": 0.5}),
            "best_distance_auc": metric(vals["best_distance_auc"], {"chance": 0.5}),
        }
        reason = (
            "Attack-0 (correlation distance) on balanced pairs of the clients' edges vs sampled non-edges of "
            "the same clients, posteriors of the released model; best_distance_auc picks the best of 8 "
            "distances after the fact (optimistic)"
        )
    else:
        members = train
        pool = torch.nonzero(test).flatten()
        for t in range(cfg.trials):
            g = torch.Generator().manual_seed(cfg.seed * 1000 + t)
            k = min(int(members.sum()), pool.numel())
            nm = torch.zeros_like(test)
            nm[pool[torch.randperm(pool.numel(), generator=g)[:k]]] = True
            mem = torch.zeros_like(train)
            idx = torch.nonzero(members).flatten()
            mem[idx[torch.randperm(idx.numel(), generator=g)[:k]]] = True
            res = membership_inference(logits, labels, mem, nm)
            for s in ("loss", "confidence"):
                vals.setdefault(f"{s}_auc", []).append(res[s]["auc"])
                vals.setdefault(f"{s}_tpr@1%fpr", []).append(res[s]["tpr@0.01"])
                vals.setdefault(f"{s}_tpr@0.1%fpr", []).append(res[s]["tpr@0.001"])
            per.append({"trial": t, "members": res["members"], "non_members": res["non_members"]})
            if roc_fig is None:
                roc_fig = (res["loss"]["fpr"], res["loss"]["tpr"])
            bar(t + 1, cfg.trials)
        metrics = {}
        for k, v in vals.items():
            ch = 0.5 if k.endswith("auc") else (0.01 if "@1%" in k else 0.001)
            metrics[k] = metric(v, {"chance": ch})
        reason = (
            "members: training nodes; non-members: an equal number of validation/test nodes; the released "
            "model applied to each client's graph"
        )
    if roc_fig is not None:
        ctx.figures["roc"][f"{name}/{ctx.protocol}"] = roc_fig
    return AttackOutcome(name, ctx.protocol, kind, "ok", reason, metrics, {"view": view.name, "trials": per})


# -- structure (FedStruct) ------------------------------------------------------------------------------


def _structure_applicable(cfg: AuditConfig) -> None:
    """Refuse external-edge inference unless the run is FedStruct with a multi-hop setup."""
    if cfg.algorithm != "fedstruct":
        raise AttackNotApplicableError(
            f"external-edge inference reads the multi-hop rows FedStruct's setup delivers to a client; "
            f"algorithm {cfg.algorithm!r} delivers none"
        )
    hops = dict(cfg.run.get("algorithm", {}).get("options", {})).get("num_hops_s")
    if hops is not None and int(hops) < 2:
        raise AttackNotApplicableError(
            f"num_hops_s={hops}: no setup sum, a client receives nothing beyond the 1-hop rows it computes itself"
        )


def _structure_attack(ctx: _Context, name: str, kind: str) -> AttackOutcome:
    """A curious FedStruct client rebuilds its rows from the setup sums designated to it and infers edges."""
    from securefgl.algorithms._fedstruct_setup import StructureView
    from securefgl.attacks.structure_inference import external_edge_inference

    if kind != "client":
        raise AttackNotApplicableError(
            f"external-edge inference models a curious client reading the setup sums designated to it "
            f"(view 'client'); the {kind!r} view is not modelled"
        )
    cfg, fg = ctx.cfg, ctx.fg
    view = ctx.view(kind)
    t = view.colluders[0]
    sums = [o.released["B"] for o in view.observations if o.phase == "setup" and o.released is not None]
    opts = ctx.run.algorithm.options
    hops = int(opts.num_hops_s)
    if len(sums) != hops - 1:
        raise NothingToAttackError(
            f"view {view.name!r} received {len(sums)} setup sums, expected num_hops_s - 1 = {hops - 1}"
        )
    betas = list(opts.beta) if opts.beta is not None else [0.0] * (hops - 1) + [1.0]
    sv = StructureView.from_data(t, fg.clients[t])
    rows = betas[0] * sv.first_power()
    for b, s in zip(betas[1:], sums, strict=True):
        rows = rows + b * s.to(torch.float64).cpu() / sv.tilde_deg[:, None]
    own = sv.gid[sv.order]  # the setup's rows are in ascending global id
    known = torch.cat([sv.gid[sv.edge_index], torch.stack([sv.gid[sv.cross_src], sv.cross_dst])], 1)
    truth = fg.global_data().edge_index
    bar = ctx.bars.task(f"{ctx.protocol}/{kind}: {name}", cfg.trials)
    vals: dict[str, list[float]] = {}
    per: list[dict[str, Any]] = []
    roc_fig = None
    for i in range(cfg.trials):
        g = torch.Generator().manual_seed(cfg.seed * 1000 + i)
        res = external_edge_inference(rows, own, known, truth, fg.num_nodes, generator=g, beta=betas)
        for k in ("auc", "precision@k"):
            vals.setdefault(k, []).append(res[k])
            vals.setdefault(f"public_{k}", []).append(res["public"][k])
            vals.setdefault(f"chance_{k}", []).append(res["chance"][k])
        per.append({k: res[k] for k in ("k", "pairs", "external_neighbours", "informative_pairs")})
        if roc_fig is None:
            roc_fig = (res["fpr"], res["tpr"])
        bar(i + 1, cfg.trials)
    metrics = {
        k: metric(
            vals[k],
            {"chance": float(np.mean(vals[f"chance_{k}"])), "public": float(np.mean(vals[f"public_{k}"]))},
        )
        for k in ("auc", "precision@k")
    }
    ctx.figures["roc"][f"{name}/{ctx.protocol}"] = roc_fig
    reason = (
        f"client {t} rebuilds its rows of A_bar (L_s={hops}) from the setup sums designated to "
        "it and scores pairs (external neighbour, outside node) against as many non-edges; 'public' = the "
        "same score on the walks it computes from its own edges alone"
    )
    return AttackOutcome(name, ctx.protocol, kind, "ok", reason, metrics, {"view": view.name, "trials": per})


# -- statistics (O-pFGL, FedSpray) ----------------------------------------------------------------------


def _upload_setup(ctx: _Context) -> tuple[Any, Any, dict[int, Any], Any, dict[str, torch.Tensor]]:
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
    from securefgl.engine.runner import round_context

    return (
        alg,
        req[0].schema,
        contribs,
        round_context(broadcast),
        {k: v.detach().cpu() for k, v in broadcast.items()},
    )


def _stat_attack(ctx: _Context, name: str, kind: str) -> AttackOutcome:
    from securefgl.attacks.statistics_inversion import (
        class_statistics,
        compare_statistics,
        differencing_attack,
        layout_for,
    )
    from securefgl.attacks.views import PublicInfo, client_view, collusion_view, server_view
    from securefgl.protocols.registry import get_protocol
    from securefgl.protocols.release_guard import ReleaseGuard

    cfg, fg = ctx.cfg, ctx.fg
    layout = layout_for(cfg.algorithm)
    _, schema, contribs, context, broadcast = _upload_setup(ctx)
    targets = [t for t in _targets(fg, cfg.trials) if t in contribs]
    pub = PublicInfo(cfg.algorithm, fg.num_features, fg.num_classes, fg.num_clients)
    bar = ctx.bars.task(f"{ctx.protocol}/{kind}: {name}", len(targets))
    vals: dict[str, list[float]] = {}
    pubv: dict[str, list[float]] = {}
    chance: dict[str, list[float]] = {}
    per: list[dict[str, Any]] = []

    def build_view(records: list[Any]) -> Any:
        if kind == "server":
            return server_view(records, pub)
        if kind == "client":
            return client_view(records, pub, targets[0] if targets else 0)
        return collusion_view(records, pub, [c for c in ctx.colluders()])

    for i, t in enumerate(targets):
        truth = class_statistics(contribs[t], layout, broadcast)
        row: dict[str, Any] = {"target": t}
        if name == "statistics":
            protocol = get_protocol(ctx.protocol, **dict(ctx.run_cfg.protocol.options))
            from securefgl.attacks.views import AggregationRecord

            sums, tr = protocol.aggregate(schema, contribs, round_index=0, context=context)
            view = build_view(
                [AggregationRecord("stats", "upload", 0, schema, broadcast, tr, sums, None, contribs)]
            )
            obs = view.observations[0]
            total = view.released_sum(obs)
            agg = class_statistics({k: total[k] for k in total}, layout, broadcast)
            sp = compare_statistics(agg, truth)
            for k, v in sp.items():
                pubv.setdefault(k, []).append(v)
            try:
                ins = view.individual_inputs(obs)
                got = ins.get(t)
                if got is not None:
                    sc = compare_statistics(class_statistics(got.values, layout, broadcast), truth)
                    for k, v in sc.items():
                        vals.setdefault(k, []).append(v)
                    row["view"] = sc
                    row["kind"] = got.kind
            except NothingToAttackError as exc:
                row["view"] = f"nothing to attack: {exc}"
            row["public"] = sp
            uni = torch.full((fg.num_classes,), 1.0 / fg.num_classes, dtype=torch.float64)
            chance.setdefault("label_l1", []).append(float((uni - truth.label_distribution).abs().sum()))
        else:
            results = {}
            for label, guarded in (("undefended", False), ("guarded", True)):
                base = get_protocol(ctx.protocol, **dict(ctx.run_cfg.protocol.options))
                proto = ReleaseGuard(base, min_difference=cfg.guard_min_difference) if guarded else base
                res = differencing_attack(proto, schema, contribs, t, context=context, broadcast=broadcast)
                if res.recovered is None:
                    results[label] = {"refused": res.refused}
                    continue
                view = build_view(res.records)
                if len(view.observations) < 2 or any(o.released is None for o in view.observations):
                    results[label] = {"refused": f"view {view.name!r} did not receive both sums"}
                    continue
                a, b = (view.released_sum(o) for o in view.observations[:2])
                from securefgl.attacks.statistics_inversion import subtract

                diff = subtract({k: a[k] for k in a}, {k: b[k] for k in b})
                results[label] = compare_statistics(class_statistics(diff, layout, broadcast), truth)
            row.update(results)
            und, gua = results["undefended"], results["guarded"]
            if "refused" not in und:
                for k, v in und.items():
                    vals.setdefault(k, []).append(v)
            if "refused" not in gua:
                for k, v in gua.items():
                    pubv.setdefault(f"guarded_{k}", []).append(v)
            vals.setdefault("guard_refused", []).append(1.0 if "refused" in gua else 0.0)
        per.append(row)
        bar(i + 1, len(targets))
    metrics = {}
    if name == "statistics":
        main = vals if vals else pubv
        for k in ("label_l1", "mean_cosine", "mean_max_abs_error", "exact"):
            if k in main:
                base = {"public": float(np.nanmean(pubv[k]))} if vals and k in pubv else {}
                if k in chance:
                    base["chance"] = float(np.mean(chance[k]))
                metrics[k] = metric(
                    main[k], base, higher_is_worse=k not in ("label_l1", "mean_max_abs_error")
                )
        reason = (
            "the target's upload as the view holds it; 'public' = the released sum's statistics against the "
            "target's"
            if vals
            else "no individual upload: figures are the released sum's statistics "
            "against the target's (public information)"
        )
    else:
        for k in ("exact", "label_l1", "mean_max_abs_error", "guard_refused", "classes_withheld"):
            # a trial whose classes were all withheld compares no mean: it counts in 'exact' (as 0), not here
            got = [v for v in vals.get(k, []) if k != "mean_max_abs_error" or np.isfinite(v)]
            if got:
                base = {}
                gk = f"guarded_{k}"
                if gk in pubv:
                    base["with_guard"] = float(np.nanmean(pubv[gk]))
                metrics[k] = metric(got, base, higher_is_worse=k not in ("label_l1", "mean_max_abs_error"))
        reason = (
            f"two releases of the same statistic, the second after the target dropped out; 'with_guard' = "
            f"the same under ReleaseGuard(min_difference={cfg.guard_min_difference}), which refuses the second "
            "release (guard_refused = 1)"
        )
    return AttackOutcome(
        name, ctx.protocol, kind, "ok", reason, metrics, {"targets": targets, "per_target": per}
    )


# -- attacks on the protocol ---------------------------------------------------------------------------------


def _protocol_attack(ctx: _Context, name: str, kind: str) -> AttackOutcome:
    from securefgl.attacks.aggregation_attacks import (
        disaggregation_attack,
        minimum_cohort_attack,
        model_inconsistency_attack,
    )
    from securefgl.protocols.encoding import SumSchema
    from securefgl.protocols.registry import get_protocol
    from securefgl.protocols.release_guard import ReleaseGuard

    if kind != "server":
        raise AttackNotApplicableError(f"{name} is an attack by the server; view {kind!r} does not run it")
    cfg, fg = ctx.cfg, ctx.fg
    alg, schema, contribs, context, broadcast = _upload_setup(ctx)
    opts = dict(ctx.run_cfg.protocol.options)
    clients = sorted(contribs)
    targets = _targets(fg, cfg.trials)
    vals: dict[str, list[float]] = {}
    base: dict[str, list[float]] = {}
    per: list[dict[str, Any]] = []
    bar = ctx.bars.task(f"{ctx.protocol}: {name}", len(targets))
    if name == "model-inconsistency":
        from securefgl.algorithms.base import Client, RoundState
        from securefgl.nn.registry import build_model

        model = build_model(ctx.run_cfg.model, fg.num_features, fg.num_classes)
        ws: dict[str, Any] = {"generator": torch.Generator().manual_seed(cfg.seed)}
        cl = [
            Client(i, d.to(ctx.device), torch.Generator().manual_seed(i), workspace=ws)
            for i, d in enumerate(fg.clients)
        ]
        for c in cl:
            alg.init_client(c)

        def train(ids: Sequence[int], bc: Mapping[str, torch.Tensor]) -> dict[int, Any]:
            if not ids:
                return {}
            rs = RoundState("train", 0, 0, tuple(ids), dict(bc), 1)
            out = alg.client_steps([cl[i] for i in ids], rs)
            return {k: {n: torch.as_tensor(x).detach().cpu() for n, x in v.items()} for k, v in out.items()}

        def schema_for(bc: Mapping[str, torch.Tensor]) -> SumSchema:
            return alg.schema(RoundState("train", 0, 0, tuple(clients), dict(bc), 1))

        for i, t in enumerate(targets):
            row = {"target": t}
            for bind in (True, False):
                r = model_inconsistency_attack(
                    get_protocol(ctx.protocol, **opts),
                    schema_for,
                    train,
                    model,
                    broadcast,
                    clients,
                    t,
                    bind_context=bind,
                )
                key = "bound" if bind else "unbound"
                row[key] = {
                    "refused": r.refused,
                    "target_in_sum": r.target_in_sum,
                    "isolation_error": r.isolation_error,
                    "baseline_error": r.baseline_error,
                }
                if bind:
                    vals.setdefault("target_isolated", []).append(
                        1.0 if (r.target_in_sum and r.isolation_error < 1e-3) else 0.0
                    )
                    vals.setdefault("caught", []).append(0.0 if r.target_in_sum else 1.0)
                else:
                    base.setdefault("target_isolated", []).append(
                        1.0 if (r.target_in_sum and r.isolation_error < 1e-3) else 0.0
                    )
            per.append(row)
            bar(i + 1, len(targets))
        metrics = {
            k: metric(v, {"without_binding": float(np.mean(base[k]))} if k in base else {})
            for k, v in vals.items()
        }
        reason = (
            "the server shows the target the real model and the others a crafted one (dead first layer); "
            "'caught' = the target was excluded/the session refused because clients bind the model they "
            "received into the session id; 'without_binding' = the same attack on a protocol run without "
            "that binding"
        )
    elif name == "min-cohort":
        strict = SumSchema(
            schema.blocks,
            max_clients=schema.max_clients,
            precision=schema.precision,
            min_contributors=min(schema.max_clients, max(2, cfg.guard_min_difference)),
        )
        for i, t in enumerate(targets):
            ok, why, cos = minimum_cohort_attack(
                get_protocol(ctx.protocol, **opts), schema, contribs, t, context=context
            )
            ok2, why2, _ = minimum_cohort_attack(
                get_protocol(ctx.protocol, **opts), strict, contribs, t, context=context
            )
            vals.setdefault("released_alone", []).append(1.0 if ok2 else 0.0)
            base.setdefault("released_alone", []).append(1.0 if ok else 0.0)
            per.append(
                {
                    "target": t,
                    "schema_min_contributors": schema.min_contributors,
                    "released": ok,
                    "cosine": cos,
                    "refused": why,
                    "with_rule": {"released": ok2, "refused": why2},
                }
            )
            bar(i + 1, len(targets))
        metrics = {
            "released_alone": metric(
                vals["released_alone"], {"algorithm_schema": float(np.mean(base["released_alone"]))}
            )
        }
        reason = (
            f"the server invites the target alone; 'algorithm_schema' = under the algorithm's own schema "
            f"(min_contributors={schema.min_contributors}), the figure = with min_contributors="
            f"{strict.min_contributors}"
        )
    else:
        rng = np.random.default_rng(cfg.seed)
        k = len(clients)
        sets: list[list[int]] = []
        seen: set[tuple[int, ...]] = set()
        for _ in range(50 * k):
            if len(sets) >= 2 * k:
                break
            size = int(rng.integers(max(2, k // 2), max(3, k)))
            s_ = tuple(sorted(rng.choice(clients, size=min(size, k), replace=False).tolist()))
            if s_ not in seen:
                seen.add(s_)
                sets.append(list(s_))
        for label in ("undefended", "difference", "fixed"):
            p = get_protocol(ctx.protocol, **opts)
            if label != "undefended":
                p = ReleaseGuard(p, min_difference=cfg.guard_min_difference, mode=label)  # type: ignore[arg-type]
            res = disaggregation_attack(p, schema, contribs, sets, context=context)
            frac = len(res.identifiable) / max(1, k)
            (vals if label == "undefended" else base).setdefault(f"identified_{label}", []).append(frac)
            per.append(
                {
                    "guard": label,
                    "released": len(res.released),
                    "refused": len(res.refused),
                    "identifiable": res.identifiable,
                    "max_error": max(res.errors.values()) if res.errors else None,
                }
            )
        bar(len(targets), len(targets))
        metrics = {
            "identified_fraction": metric(
                vals["identified_undefended"],
                {
                    "guard_difference": float(np.mean(base["identified_difference"])),
                    "guard_fixed": float(np.mean(base["identified_fixed"])),
                },
            )
        }
        reason = (
            f"{len(sets)} releases of the first upload over distinct random subsets of the clients; least "
            "squares on the participation matrix; 'guard_*' = the same under ReleaseGuard(mode=...)"
        )
    return AttackOutcome(name, ctx.protocol, "server", "ok", reason, metrics, {"per_target": per})


# ----------------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------------


def _fmt(v: float | None) -> str:
    if v is None or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "n/a"
    return f"{v:.3f}"


def _markdown(res: AuditResult) -> str:
    c = res.config
    lines = [
        f"# Privacy audit: {c['algorithm']} / {c['model']} / {c['dataset']} ({c['clients']} clients)",
        "",
        f"Protocols: {', '.join(c['protocols'])}. Attacks: {', '.join(c['attacks'])}. Adversary views: "
        f"{', '.join(c['views'])}. Trials per attack: {c['trials']} (mean ± std). Seed {c['seed']}.",
        "",
        "How to read this: each figure is what the attack recovered against ground truth. *chance* is what an "
        "adversary gets with no view at all; *public* is the same attack on information the adversary is "
        "entitled to (the released sum). A protected view should score near *public*/*chance*; a leaking view "
        "scores far above them. 'Not applicable' and 'nothing to attack' cells are not zeros: they say why.",
        "",
    ]
    if res.runs:
        lines += [
            "## Utility of the released model",
            "",
            "| protocol | test accuracy | selected round | run seconds |",
            "|---|---|---|---|",
        ]
        for p, r in res.runs.items():
            sel = r.get("metrics_round")
            where = f"{sel['phase']} {sel['round']}" if sel else "n/a"
            acc = _fmt(r.get("metrics", {}).get("test_acc"))
            lines.append(f"| {p} | {acc} | {where} | {r.get('seconds', 0):.1f} |")
        lines += [
            "",
            "Test accuracy is the engine's final evaluation: the round the server selected from the "
            "evaluation sums (best validation accuracy when `train.select_best`, else the last evaluation). "
            "The attacks on the released model use the last broadcast.",
            "",
        ]
    lines += [
        "## Findings",
        "",
        "| attack | protocol | view | metric | value | baselines |",
        "|---|---|---|---|---|---|",
    ]
    notes = []
    for o in res.outcomes:
        if o.status != "ok":
            label = {
                "not_applicable": "not applicable",
                "nothing_to_attack": "nothing to attack",
                "refused": "refused by the protocol",
                "failed": "failed",
            }[o.status]
            lines.append(f"| {o.attack} | {o.protocol} | {o.view} | — | **{label}** | {o.reason[:160]} |")
            continue
        for name, m in o.metrics.items():
            bl = ", ".join(f"{k} {_fmt(v)}" for k, v in m.baselines.items())
            lines.append(
                f"| {o.attack} | {o.protocol} | {o.view} | {name} | {_fmt(m.mean)} ± {_fmt(m.std)} | {bl} |"
            )
        if o.reason:
            notes.append(f"- **{o.attack} / {o.protocol} / {o.view}**: {o.reason}.")
    lines += ["", "## Notes", "", *notes, ""]
    lines += ["## Verdicts", ""]
    lines += _verdicts(res)
    return "\n".join(lines) + "\n"


def _verdicts(res: AuditResult) -> list[str]:
    out = []
    for o in res.outcomes:
        if o.status != "ok":
            continue
        key = {
            "gradient-inversion": "feature_cosine",
            "label": "label_accuracy",
            "link-stealing": "auc",
            "membership": "loss_auc",
            "statistics": "exact",
            "differencing": "exact",
        }.get(o.attack)
        if key is None or key not in o.metrics:
            continue
        m = o.metrics[key]
        ref = max([v for v in m.baselines.values() if v is not None and math.isfinite(v)], default=None)
        if ref is None:
            continue
        margin = m.mean - ref
        verdict = (
            "LEAKS beyond the baselines" if margin > max(0.05, 2 * m.std) else "no better than the baselines"
        )
        out.append(
            f"- {o.attack} under {o.protocol} ({o.view}): {key} {_fmt(m.mean)} vs best baseline "
            f"{_fmt(ref)}: {verdict}."
        )
    return out or ["- no comparable figure."]


def _write(res: AuditResult, out: Path, figures: dict[str, Any] | None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "audit.json").write_text(res.to_json())
    (out / "summary.md").write_text(res.summary_markdown())
    if figures:
        _plots(out, figures)
    return out


def _plots(out: Path, figures: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = figures.get("reconstructions", {})
    if recs:
        n = len(recs)
        fig, axes = plt.subplots(n, 2, figsize=(10, 1.6 * n + 1), squeeze=False)
        for row, (name, (xt, xr)) in enumerate(recs.items()):
            k = min(xt.shape[1], 64)
            top = torch.argsort(xt.abs().sum(0) + xr.abs().sum(0), descending=True)[:k]
            for col, (mat, title) in enumerate(((xt[:, top], "true"), (xr[:, top], "reconstructed"))):
                ax = axes[row][col]
                ax.imshow(mat.numpy(), aspect="auto", cmap="viridis")
                ax.set_title(f"{name}: {title}", fontsize=8)
                ax.set_yticks([])
                ax.set_xticks([])
        fig.suptitle("Training nodes' features (rows: nodes; columns: the most active features)")
        fig.tight_layout()
        fig.savefig(out / "reconstructions.png", dpi=110)
        plt.close(fig)
    rocs = figures.get("roc", {})
    if rocs:
        fig, ax = plt.subplots(figsize=(5, 5))
        for name, (f, t) in rocs.items():
            ax.plot(f, t, label=name)
        ax.plot([0, 1], [0, 1], "k--", lw=0.8, label="chance")
        ax.set_xlabel("false-positive rate")
        ax.set_ylabel("true-positive rate")
        ax.set_title("ROC of the model attacks")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "roc.png", dpi=110)
        plt.close(fig)
