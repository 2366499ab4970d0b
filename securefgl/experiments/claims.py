"""FedLoG's generalisation claim, checked from per-seed result rows (issue 10, check 2; spec ``fedlog.md`` §1.2).

FedLoG claims higher Missing-Class and New-Client accuracy than its baselines without giving up Seen-Graph
accuracy. :func:`claim_verdicts` turns the rows of a ``claim`` grid (``examples/reproduce_fedlog.py``) into one
:class:`ClaimVerdict` per (dataset, K): Missing Class and New Client above the FedAvg view and Local, Seen Graph
not more than :data:`CLAIM_SEEN_TOLERANCE` points below the FedAvg view. Every method is scored at the round
FedLoG's own rule picks (:func:`securefgl.algorithms.fedlog.best_round`), which the rows already reflect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CLAIM_GENERALIZATION",
    "CLAIM_SEEN_TOLERANCE",
    "ClaimCheck",
    "ClaimVerdict",
    "all_claim_verdicts",
    "claim_verdicts",
]

#: The metrics FedLoG's claim is about (spec §1.2): above the baselines on these two.
CLAIM_GENERALIZATION = ("missing_class", "new_client")
#: How far FedLoG's Seen-Graph accuracy may fall below FedAvg's (points) under the claim.
CLAIM_SEEN_TOLERANCE = 1.0


@dataclass(frozen=True)
class ClaimCheck:
    """One comparison of the claim: ``metric`` of FedLoG against ``baseline`` (means over seeds, points)."""

    metric: str
    baseline: str
    fedlog: float
    other: float
    ok: bool

    @property
    def margin(self) -> float:
        """FedLoG's mean minus the baseline's (points); the Seen-Graph check passes down to -1."""
        return self.fedlog - self.other


@dataclass(frozen=True)
class ClaimVerdict:
    """FedLoG's claim in one (dataset, K) setting against one FedAvg view and Local.

    ``holds`` needs every check to pass and at least one check made: Missing Class and New Client above
    the FedAvg view and Local, Seen Graph not more than :data:`CLAIM_SEEN_TOLERANCE` below the FedAvg view.
    ``missing`` names the comparisons that could not be made (a method that did not run, a metric that is
    undefined in every seed), so a partial grid never reads as a pass.
    """

    dataset: str
    clients: int
    method: str
    fedavg: str
    checks: tuple[ClaimCheck, ...]
    missing: tuple[str, ...]

    @property
    def holds(self) -> bool:
        return bool(self.checks) and not self.missing and all(c.ok for c in self.checks)

    def describe(self) -> str:
        """``does not hold (missing_class vs fedavg-local +8.0, new_client vs fedavg-local -2.0 (fails), ...)``:
        the verdict and every check's margin in points, then the comparisons that could not be made."""
        parts = [
            f"{c.metric} vs {c.baseline} {c.margin:+.1f}{'' if c.ok else ' (fails)'}" for c in self.checks
        ]
        if self.missing:
            parts.append("not measured: " + ", ".join(self.missing))
        return f"{'holds' if self.holds else 'does not hold'} ({', '.join(parts)})"


def _mean_points(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return 100.0 * float(np.mean(vals)) if vals else None


def claim_verdicts(
    rows: list[dict[str, Any]], method: str = "fedlog", fedavg: str = "fedavg-local", local: str = "local"
) -> list[ClaimVerdict]:
    """FedLoG's claim (issue 10, check 2) per (dataset, K), from per-seed result rows.

    Each row is a dict with ``dataset``, ``clients``, ``method`` and the accuracies ``seen_test``,
    ``missing_class``, ``new_client`` (fractions in [0, 1], or ``None`` where undefined); rows of one
    (dataset, K, method) are averaged over seeds. ``fedavg`` picks which FedAvg rows stand for FedAvg:
    ``"fedavg-local"`` (post-update local models, how FED-PUB's code, the paper's FedAvg, scores it) or
    ``"fedavg"`` (the aggregated model). Settings without a ``method`` row are skipped.

    Args:
        rows: The per-seed rows.
        method: The FedLoG variant to judge, e.g. ``"fedlog"`` or ``"fedlog-nopg"``. (default: ``"fedlog"``)
        fedavg: The method label of the FedAvg rows. (default: ``"fedavg-local"``)
        local: The method label of the Local rows. (default: ``"local"``)

    Returns:
        One verdict per (dataset, K) that has ``method`` rows, in the order the rows first name them.
    """
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], int(r["clients"]), r["method"]), []).append(r)
    out = []
    for ds, k in dict.fromkeys((d, kk) for d, kk, m in groups if m == method):
        ours = groups[(ds, k, method)]
        checks: list[ClaimCheck] = []
        missing: list[str] = []
        wanted = [(key, other) for other in (fedavg, local) for key in CLAIM_GENERALIZATION]
        wanted.append(("seen_test", fedavg))
        for key, other in wanted:
            a = _mean_points(ours, key)
            b = _mean_points(groups.get((ds, k, other), []), key)
            if a is None or b is None:
                missing.append(f"{key} vs {other}")
                continue
            ok = a >= b - CLAIM_SEEN_TOLERANCE - 1e-9 if key == "seen_test" else a > b  # 1e-9: float %
            checks.append(ClaimCheck(key, other, a, b, ok))
        out.append(ClaimVerdict(ds, k, method, fedavg, tuple(checks), tuple(missing)))
    return out


def all_claim_verdicts(rows: list[dict[str, Any]]) -> list[ClaimVerdict]:
    """:func:`claim_verdicts` for every FedLoG variant in ``rows`` (methods starting ``fedlog``, in the order the
    rows first name them), each against both FedAvg views: ``fedavg-local`` (the paper's) first, then ``fedavg``."""
    variants = dict.fromkeys(r["method"] for r in rows if str(r["method"]).startswith("fedlog"))
    return [
        v
        for method in variants
        for fedavg in ("fedavg-local", "fedavg")
        for v in claim_verdicts(rows, method=method, fedavg=fedavg)
    ]
