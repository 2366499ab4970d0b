"""What a run records: per-round records, evaluations and each seed's result.

:class:`RoundRecord` (one round or local phase: loss, bytes, times, dropouts, metrics), :class:`EvalRecord`
(one evaluation: the server's overall metrics from the evaluation sum, and each client's own row, computed on
the client side) and :class:`SeedResult` (one seed: every record, the selected final evaluation, totals).
Written to disk by :mod:`securefgl.engine.results`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from securefgl.engine.metrics import ClientMetrics

__all__ = ["EvalRecord", "RoundRecord", "SeedResult"]


@dataclass
class EvalRecord:
    """Metrics of one evaluation.

    ``overall`` is what the server computed from the evaluation sum (it decides the best round from it);
    ``per_client`` holds each client's own metrics, computed on the client side (reported locally: in a
    deployment each organisation sees its own row).
    """

    phase: str
    round: int
    overall: dict[str, float]
    per_client: list[ClientMetrics]


@dataclass
class RoundRecord:
    """What happened in one round (or one local phase)."""

    phase: str
    round: int
    global_round: int
    clients: list[int]
    loss: float
    bytes_up: dict[int, int]
    bytes_down: dict[int, int]
    train_seconds: float
    crypto_seconds: float
    server_seconds: float
    eval_seconds: float = 0.0
    eval_bytes_up: dict[int, int] = field(default_factory=dict)
    eval_bytes_down: dict[int, int] = field(default_factory=dict)
    dropped: dict[int, str] = field(default_factory=dict)
    excluded: dict[int, str] = field(default_factory=dict)
    clip_counts: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float] | None = None
    privacy: dict[str, Any] | None = None

    @property
    def total_up(self) -> int:
        return sum(self.bytes_up.values())

    @property
    def total_down(self) -> int:
        return sum(self.bytes_down.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "round": self.round,
            "global_round": self.global_round,
            "num_clients": len(self.clients),
            "clients": list(self.clients),
            "loss": self.loss,
            "bytes_up": self.total_up,
            "bytes_down": self.total_down,
            "bytes_up_per_client": {str(k): v for k, v in self.bytes_up.items()},
            "bytes_down_per_client": {str(k): v for k, v in self.bytes_down.items()},
            "train_seconds": self.train_seconds,
            "crypto_seconds": self.crypto_seconds,
            "server_seconds": self.server_seconds,
            "eval_seconds": self.eval_seconds,
            "eval_bytes_up": sum(self.eval_bytes_up.values()),
            "eval_bytes_down": sum(self.eval_bytes_down.values()),
            "dropped": {str(k): v for k, v in self.dropped.items()},
            "excluded": {str(k): v for k, v in self.excluded.items()},
            "clip_counts": dict(self.clip_counts),
            "metrics": self.metrics,
            "privacy": self.privacy,
        }


@dataclass
class SeedResult:
    """One seed's run: round records, evaluations and the selected final metrics."""

    seed: int
    rounds: list[RoundRecord] = field(default_factory=list)
    evals: list[EvalRecord] = field(default_factory=list)
    final: EvalRecord | None = None
    stopped_early: dict[str, int] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    status: str = "ok"
    error: str | None = None

    # -------------------------------------------------------------- totals -----------------------------

    @property
    def bytes_up(self) -> int:
        return sum(r.total_up for r in self.rounds)

    @property
    def bytes_down(self) -> int:
        return sum(r.total_down for r in self.rounds)

    def client_bytes(self) -> dict[int, tuple[int, int]]:
        out: dict[int, list[int]] = {}
        for r in self.rounds:
            for c, b in r.bytes_up.items():
                out.setdefault(c, [0, 0])[0] += b
            for c, b in r.bytes_down.items():
                out.setdefault(c, [0, 0])[1] += b
        return {c: (u, d) for c, (u, d) in out.items()}

    @property
    def train_seconds(self) -> float:
        return sum(r.train_seconds + r.server_seconds for r in self.rounds)

    @property
    def crypto_seconds(self) -> float:
        return sum(r.crypto_seconds for r in self.rounds)

    @property
    def eval_seconds(self) -> float:
        return sum(r.eval_seconds for r in self.rounds)

    @property
    def num_dropped(self) -> int:
        return sum(len(r.dropped) for r in self.rounds)

    def summary(self) -> dict[str, float]:
        """Final metrics plus totals, flat (for mean/std over seeds)."""
        out: dict[str, float] = dict(self.final.overall) if self.final else {}
        out.update(
            {
                "rounds": float(sum(1 for r in self.rounds if r.phase != "local")),
                "best_round": float(self.final.round) if self.final else float("nan"),
                "bytes_up": float(self.bytes_up),
                "bytes_down": float(self.bytes_down),
                "train_seconds": self.train_seconds,
                "crypto_seconds": self.crypto_seconds,
                "eval_seconds": self.eval_seconds,
                "eval_bytes_up": float(sum(sum(r.eval_bytes_up.values()) for r in self.rounds)),
                "seconds": self.seconds,
                "dropouts": float(self.num_dropped),
            }
        )
        spent = [r.privacy for r in self.rounds if r.privacy]
        if spent:  # a +dp protocol: the guarantee after the last noised sum
            out["dp_epsilon"] = float(spent[-1]["epsilon"])
            out["dp_delta"] = float(spent[-1]["delta"])
        return out

    def to_dict(self) -> dict[str, Any]:
        final = None
        if self.final is not None:
            final = {
                "phase": self.final.phase,
                "round": self.final.round,
                "overall": self.final.overall,
                "per_client": [c.row() for c in self.final.per_client],
            }
        return {
            "seed": self.seed,
            "status": self.status,
            "error": self.error,
            "summary": self.summary(),
            "final": final,
            "stopped_early": self.stopped_early,
            "report": self.report,
            "rounds": [r.to_dict() for r in self.rounds],
        }
