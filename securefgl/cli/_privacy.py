"""``securefgl run --privacy node|edge|client --epsilon E [--delta D]``: one privacy statement per run.

``node`` and ``edge`` train GAP (``--algorithm gap``; any ``--model``, and ``--model mlp`` is the DP-MLP
baseline); ``client`` wraps the protocol in distributed DP (``<protocol>+dp``, DP-FedAvg). The statement is
printed after the run and saved in ``metrics.json`` and the ``--json`` output as ``privacy``.
"""

from __future__ import annotations

import math
from typing import Any

from securefgl.errors import ConfigError

__all__ = ["PRIVACY_UNITS", "privacy_lines", "privacy_overrides"]

#: The units ``--privacy`` accepts.
PRIVACY_UNITS = ("node", "edge", "client")


def privacy_overrides(
    privacy: str | None,
    epsilon: float | None,
    delta: float | None,
    *,
    algorithm: str | None,
    protocol: str | None,
    clients: int | None = None,
) -> dict[str, Any]:
    """The run-config overrides ``--privacy``/``--epsilon``/``--delta`` stand for (checked, no torch).

    ``client`` also sets distributed DP's public client configuration, which ``--set
    protocol.options.dp_*=...`` overrides: at least ``clients - 1`` noise shares in every sum (one dropout
    tolerated) and a clip norm of 1.
    """
    if privacy is None:
        if epsilon is not None or delta is not None:
            raise ConfigError("--epsilon and --delta need --privacy node, edge or client")
        return {}
    unit = privacy.lower()
    if unit not in PRIVACY_UNITS:
        raise ConfigError(f"--privacy: invalid value {privacy!r}; valid: {', '.join(PRIVACY_UNITS)}")
    if epsilon is not None and (math.isnan(epsilon) or epsilon <= 0):
        raise ConfigError(f"--epsilon must be > 0 (inf: no noise), got {epsilon:g}")
    if delta is not None and not 0.0 < delta < 1.0:
        raise ConfigError(f"--delta must be in (0, 1), got {delta:g}")
    if unit in ("node", "edge"):
        if algorithm is not None and algorithm.lower() != "gap":
            raise ConfigError(
                f"--privacy {unit} trains GAP (algorithm gap, aggregation perturbation with DP-SGD); "
                f"--algorithm {algorithm} has no {unit}-level DP. Drop --algorithm or use --algorithm gap"
            )
        options: dict[str, Any] = {"privacy": unit}
        if epsilon is not None:
            options["epsilon"] = epsilon
        if delta is not None:
            options["delta"] = delta
        return {"algorithm": {"name": "gap", "options": options}}
    if epsilon is None:
        epsilon = 8.0
    if math.isinf(epsilon):
        raise ConfigError("--privacy client needs a finite --epsilon (the budget of distributed DP), e.g. 8")
    name = protocol or "secagg"
    if not name.endswith("+dp"):
        name += "+dp"
    opts: dict[str, Any] = {
        "dp_epsilon": epsilon,
        "dp_min_contributors": max(1, (clients or 10) - 1),
        "dp_clip_norm": 1.0,
    }
    if delta is not None:
        opts["dp_delta"] = delta
    return {"protocol": {"name": name, "options": opts}}


def privacy_lines(statement: dict[str, Any]) -> list[str]:
    """The statement as lines for the terminal (unit, epsilon, delta, accountant, assumptions)."""
    unit = statement.get("unit", "none")
    if unit == "none":
        return ["privacy: no differential-privacy guarantee (no --privacy)"]
    eps = statement.get("epsilon")
    eps_text = "infinite (no noise)" if eps is None else f"{eps:.3g}"
    lines = [
        f"privacy: {unit}-level DP, epsilon {eps_text} at delta {statement.get('delta'):g}",
        f"  accountant: {statement.get('accountant')}",
    ]
    for m in statement.get("mechanisms", []):
        lines.append(
            f"  - {m['name']}: {m['steps']} step(s), sampling rate {m['sample_rate']:g}, noise multiplier "
            f"{m['noise_multiplier']:.4g}"
        )
    lines += [f"  assumes: {a}" for a in statement.get("assumptions", [])]
    if "client_level" in statement:
        lines += privacy_lines(statement["client_level"])
    return lines
