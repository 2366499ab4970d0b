"""The audit's findings (:class:`AuditResult`) and its report: ``audit.json``, ``summary.md`` and figures."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from securefgl.attacks._common import AttackOutcome
from securefgl.errors import ConfigError


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
    if res.config.get("figures", True) and res.config.get("output"):
        lines += [
            "",
            "## Figures",
            "",
            "- `success.png`: each attack's headline figure per protocol, beside its chance and public "
            "baselines.",
            "- `reconstructions.png`: true training-node features next to the reconstructions.",
            "- `epsilon.png` (with a `+dp` protocol): the headline figures against the run's epsilon.",
            "- `roc.png` (model attacks): ROC curves.",
        ]
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
    if figures is not None:
        _plots(out, figures)
        _success_plot(out, res)
    return out


def _headline(res: AuditResult) -> dict[tuple[str, str], dict[str, Any]]:
    """(attack, view) -> protocol -> the attack's first metric (the headline figure) of the ``ok`` cells."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for o in res.outcomes:
        if o.status == "ok" and o.metrics:
            name, m = next(iter(o.metrics.items()))
            cells.setdefault((o.attack, o.view), {})[o.protocol] = (name, m)
    return cells


def _epsilon(res: AuditResult, protocol: str) -> float | None:
    priv = (res.runs.get(protocol) or {}).get("privacy") or {}
    for key in ("epsilon", "epsilon_participation_visible"):
        v = priv.get(key) if isinstance(priv, dict) else None
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v)
    return None


def _success_plot(out: Path, res: AuditResult) -> None:
    """``success.png``: each attack's headline figure per protocol, beside its chance and public baselines;
    ``epsilon.png`` (when a ``+dp`` protocol reports its epsilon): the same figure against epsilon."""
    cells = _headline(res)
    if not cells:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(cells)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False)
    markers = {"chance": ("k", "_"), "public": ("tab:red", "x")}
    others = [("tab:orange", "v"), ("tab:green", "^"), ("tab:purple", "s"), ("tab:brown", "D")]
    for ax, ((attack, view), by_proto) in zip(axes[0], cells.items(), strict=True):
        protos = list(by_proto)
        metric_name = next(iter(by_proto.values()))[0]
        ax.bar(range(len(protos)), [by_proto[p][1].mean for p in protos], color="tab:blue", label=metric_name)
        seen: set[str] = set()
        for i, p in enumerate(protos):
            for bname, bval in by_proto[p][1].baselines.items():
                if bname not in markers:
                    markers[bname] = others[(len(markers) - 2) % len(others)]
                color, mark = markers[bname]
                ax.scatter(
                    [i],
                    [bval],
                    color=color,
                    marker=mark,
                    s=160,
                    zorder=3,
                    label=None if bname in seen else bname,
                )
                seen.add(bname)
        ax.set_xticks(range(len(protos)), protos, rotation=20, fontsize=8)
        ax.set_title(f"{attack} ({view})", fontsize=9)
        ax.set_ylabel(metric_name, fontsize=8)
        ax.legend(fontsize=6)
    fig.suptitle("attack success per protocol (bars) beside its baselines (markers)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "success.png", dpi=110)
    plt.close(fig)
    dp = {p: e for p in res.config.get("protocols", ()) if "+dp" in p and (e := _epsilon(res, p)) is not None}
    if not dp:
        return
    fig, ax = plt.subplots(figsize=(5, 4))
    for (attack, view), by_proto in cells.items():
        pts = sorted((dp[p], by_proto[p][1].mean) for p in by_proto if p in dp)
        if pts:
            ax.plot([e for e, _ in pts], [v for _, v in pts], "o-", label=f"{attack} ({view})")
    ax.set_xscale("log")
    ax.set_xlabel("epsilon of the +dp run")
    ax.set_ylabel("headline figure")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "epsilon.png", dpi=110)
    plt.close(fig)


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
