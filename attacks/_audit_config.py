"""The audit's configuration: attack names, :class:`AuditConfig`, and which cells apply before any work."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from securefgl.attacks.gradient_inversion import InversionConfig
from securefgl.errors import AttackNotApplicableError, ConfigError
from securefgl.protocols.registry import parse_protocol

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
    "malicious-model",
    "analytic-inversion",
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
    "imprint": "malicious-model",
    "robbing-the-fed": "malicious-model",
    "analytic": "analytic-inversion",
    "bias-ratio": "analytic-inversion",
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
        rounds: Rounds of the federated job (``None``: the run config's); the job is evaluated once, after
            the last round (``train.eval_every`` in ``run`` overrides). The update attacks read round
            ``attack_round``, the model attacks the last broadcast. (default: ``20``)
        attack_round: Which round's updates the update attacks use (0: the first). (default: ``0``)
        graph_known: Give the adversary the targets' graph structure (edges, labelled nodes). (default: False)
        run: Extra run-config sections merged into the job's config (``{"train": {...}, "partition":
            {...}, "protocol": {"options": ...}}``). (default: ``{}``)
        inversion: Reconstruction settings. (default: one restart of 25 iterations, so that the default
            audit finishes in about two minutes; raise ``restarts`` and ``iterations`` for the attack's
            documented strength)
        guard_min_difference: ``m`` of the ReleaseGuard used by the differencing defence. (default: ``2``)
        imprint_rounds: Crafted rounds of the malicious-model attack (bins = rounds x (hidden - 1)).
            (default: ``64``)
        output: Folder for ``audit.json``, ``summary.md`` and figures (``None``: nothing written).
        figures: Write figures. (default: ``True``)
        device: ``"cpu"``, ``"cuda"`` or ``"auto"``. (default: ``"cpu"``)
        progress: Show rich progress bars. (default: ``False``)
        privacy: GAP's protected unit, ``"node"``, ``"edge"`` or ``"none"`` (the same architecture without
            noise); ``None``: not set. Only with ``algorithm="gap"`` (a :class:`ConfigError` otherwise); sets
            ``algorithm.options.privacy`` of the run. (default: ``None``)
        epsilon: GAP's target epsilon of the whole run (``inf``: no noise); ``None``: GAP's default. Only
            with ``algorithm="gap"``. (default: ``None``)
        delta: GAP's target delta; ``None``: GAP's default ``1 / (10 N)``. Only with ``algorithm="gap"``.
            (default: ``None``)
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
    rounds: int | None = 20
    attack_round: int = 0
    graph_known: bool = False
    run: Mapping[str, Any] = field(default_factory=dict)
    inversion: InversionConfig = field(default_factory=lambda: InversionConfig(restarts=1, iterations=25))
    guard_min_difference: int = 2
    imprint_rounds: int = 64
    output: str | None = None
    figures: bool = True
    device: str = "cpu"
    progress: bool = False
    privacy: str | None = None
    epsilon: float | None = None
    delta: float | None = None

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
        if self.imprint_rounds < 1:
            raise ConfigError(f"imprint_rounds must be >= 1, got {self.imprint_rounds}")
        if self.guard_min_difference < 2:
            raise ConfigError(f"guard_min_difference must be >= 2, got {self.guard_min_difference}")
        if not isinstance(self.run, Mapping):
            raise ConfigError(f"run must be a mapping of run-config sections, got {type(self.run).__name__}")
        self._check_privacy()

    def _check_privacy(self) -> None:
        """``privacy``/``epsilon``/``delta`` are GAP's options: refuse them with another algorithm."""
        pairs = (("privacy", self.privacy), ("epsilon", self.epsilon), ("delta", self.delta))
        given = {k: v for k, v in pairs if v is not None}
        if not given:
            return
        if self.algorithm != "gap":
            what = ", ".join(f"{k}={v!r}" for k, v in given.items())
            raise ConfigError(
                f"{what} is differential privacy of algorithm 'gap' (node-/edge-level DP); algorithm "
                f"{self.algorithm!r} has no such option: use algorithm 'gap' (or drop {', '.join(given)})"
            )
        from securefgl.algorithms.gap.options import PRIVACY_UNITS

        if self.privacy is not None and self.privacy not in PRIVACY_UNITS:
            raise ConfigError(f"privacy: invalid value {self.privacy!r}; valid: {', '.join(PRIVACY_UNITS)}")
        if self.epsilon is not None:
            object.__setattr__(self, "epsilon", float(self.epsilon))
            if not self.epsilon > 0:
                raise ConfigError(f"epsilon must be > 0 (inf: no noise), got {self.epsilon}")
        if self.delta is not None and not 0.0 < float(self.delta) < 1.0:
            raise ConfigError(f"delta must be in (0, 1), got {self.delta}")

    def algorithm_options(self) -> dict[str, Any]:
        """The run's algorithm options: ``run["algorithm"]["options"]`` with ``privacy``/``epsilon``/``delta``
        (when set) on top."""
        opts = dict(dict(self.run.get("algorithm", {}) or {}).get("options", {}) or {})
        for key in ("privacy", "epsilon", "delta"):
            value = getattr(self, key)
            if value is not None:
                opts[key] = value
        return opts


# ----------------------------------------------------------------------------------------------------
# applicability (decided before any work)
# ----------------------------------------------------------------------------------------------------

_UPDATE_ATTACKS = ("gradient-inversion", "label")
_MODEL_ATTACKS = ("link-stealing", "membership")
_STAT_ATTACKS = ("statistics", "differencing")
_PROTOCOL_ATTACKS = (
    "model-inconsistency",
    "min-cohort",
    "disaggregation",
    "malicious-model",
    "analytic-inversion",
)
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
        options=cfg.algorithm_options() or None,
    )
    if problems:
        why = "the run itself cannot run: " + "; ".join(str(p) for p in problems)
        return dict.fromkeys(cfg.attacks, why)
    cls = get_algorithm(cfg.algorithm)
    for a in cfg.attacks:
        try:
            if cfg.algorithm == "gap":
                _gap_applicable(a)
            elif a in _UPDATE_ATTACKS:
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
            elif a == "malicious-model":
                if cfg.algorithm not in MODEL_AVERAGING:
                    raise AttackNotApplicableError(
                        f"the malicious-model attack crafts a model broadcast; algorithm {cfg.algorithm!r} "
                        f"broadcasts none (implemented for {', '.join(MODEL_AVERAGING)})"
                    )
                malicious_applicable(cfg.model)
            elif a == "analytic-inversion":
                if cfg.algorithm not in MODEL_AVERAGING:
                    raise AttackNotApplicableError(
                        f"the analytic first-layer inversion reads a FedAvg-style model update; algorithm "
                        f"{cfg.algorithm!r} uploads none (implemented for {', '.join(MODEL_AVERAGING)})"
                    )
                if cfg.model.lower() not in ("mlp", "gcn"):
                    raise AttackNotApplicableError(
                        f"the analytic first-layer inversion needs a two-layer mlp or gcn (a hidden ReLU layer "
                        f"whose units one node alone activates); {cfg.model!r} has none"
                    )
            if a in _PROTOCOL_ATTACKS and not cls.uses_protocol:
                raise AttackNotApplicableError(f"algorithm {cfg.algorithm!r} never aggregates")
        except AttackNotApplicableError as exc:
            out[a] = str(exc)
    return out


#: Why an attack does not apply to GAP (absent: it applies): its uploads are GAP's own encoder/classifier blocks
#: (under node-level DP one DP-SGD step's clipped, noised gradient sum ``g.*``), its broadcast a flat dict of
#: GAP's parts, not a FedAvg model of the run's architecture.
_GAP_NOT_APPLICABLE = {
    "gradient-inversion": "gradient inversion simulates FedAvg's local training of the run's GNN and reads its "
    "'w.*' model blocks; GAP uploads its own encoder/classifier parts (under node-level DP a clipped, noised "
    "DP-SGD gradient sum 'g.*' of the whole federation's step), which the inversion does not model",
    "label": "iDLG label counts read the output bias of a FedAvg 'w.*' update of the run's GNN; GAP uploads its "
    "own encoder/classifier parts (under node-level DP a clipped, noised DP-SGD gradient sum)",
    "model-inconsistency": "model inconsistency crafts a FedAvg model of the run's architecture (a hidden ReLU "
    "layer to switch off); GAP's broadcast is its own encoder/classifier, which the attack does not craft",
    "malicious-model": "the imprint attack crafts a FedAvg model of the run's architecture and reads its 'w.*' "
    "update; GAP's broadcast and uploads are its own encoder/classifier parts (not implemented for gap)",
    "analytic-inversion": "the analytic first-layer inversion reads a FedAvg 'w.*' update of a two-layer mlp/gcn; "
    "GAP uploads its own encoder/classifier parts (under node-level DP a clipped, noised gradient sum)",
}


def _gap_applicable(attack: str) -> None:
    """Raise :class:`AttackNotApplicableError` for an attack the audit does not run on GAP.

    The model attacks (link stealing, membership) query GAP's released model through its client half
    (:func:`securefgl.attacks._audit_models._posteriors`); the statistics and structure attacks keep their own
    refusals (GAP uploads no class statistics and delivers no multi-hop rows).
    """
    from securefgl.attacks.statistics_inversion import layout_for

    if attack in _GAP_NOT_APPLICABLE:
        raise AttackNotApplicableError(f"algorithm 'gap': {_GAP_NOT_APPLICABLE[attack]}")
    if attack in _STAT_ATTACKS:
        layout_for("gap")
    elif attack in _STRUCTURE_ATTACKS:
        raise AttackNotApplicableError(
            "external-edge inference reads the multi-hop rows FedStruct's setup delivers to a client; "
            "algorithm 'gap' delivers none"
        )


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


def malicious_applicable(model: str) -> None:
    """Raise :class:`AttackNotApplicableError` unless ``model`` has a hidden layer to bin with."""
    if model.lower() not in ("mlp", "gcn"):
        raise AttackNotApplicableError(
            f"the malicious-model (imprint) attack needs a two-layer mlp or gcn; {model!r} has "
            + (
                "a single linear layer and no hidden units to bin"
                if model.lower() == "sgc"
                else "no implementation"
            )
        )


def run_config(cfg: AuditConfig, protocol: str) -> Any:
    """The run config the audit uses for ``protocol`` (one evaluation after the last round; DP defaults)."""
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
        # one evaluation, of the released model after the last round: the attacks need no learning curve
        base["train"] = {"rounds": cfg.rounds, "eval_every": cfg.rounds}
    mapping = merge(base, {k: dict(v) if isinstance(v, Mapping) else v for k, v in cfg.run.items()})
    mapping["protocol"]["name"] = protocol
    if alg_opts := cfg.algorithm_options():
        mapping["algorithm"] = {**dict(mapping["algorithm"]), "options": alg_opts}
    if parse_protocol(protocol).dp:
        opts = dict(mapping["protocol"].get("options", {}))
        opts.setdefault("dp_min_contributors", max(1, cfg.clients - 1))
        opts.setdefault("dp_clip_norm", 1.0)
        opts.setdefault("dp_noise_multiplier", 1.0)
        mapping["protocol"]["options"] = opts
    return RunConfig.from_mapping(mapping)
