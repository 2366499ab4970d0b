"""The federated run loop: phases, rounds, client sampling, secure sums, evaluation and early stopping.

:func:`run_seed` runs one algorithm on one :class:`~securefgl.data.FederatedGraph` for one seed. Every
upload goes through ``protocol.aggregate`` (with the round's dropout plan); the algorithm's server step gets
the released :class:`~securefgl.protocols.base.Sums` and nothing else. Per round it records the training
loss, bytes up and down per client (from the protocol transcripts plus the broadcast), the time spent in
client training, in the protocol ("crypto") and in the server step, and, every ``eval_every`` rounds, the
metrics of :mod:`securefgl.engine.metrics`. A NaN/Inf loss or upload stops the run with
:class:`~securefgl.errors.NonFiniteError` naming the client and the round; the records so far stay
available on the exception (``exc.partial``) so that callers can write them to disk.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from securefgl.algorithms.base import MAIN, Algorithm, Client, Phase, RoundState, Setting
from securefgl.algorithms.registry import create_algorithm, get_algorithm
from securefgl.engine.config import RunConfig
from securefgl.engine.metrics import ClientMetrics, aggregate_clients, client_metrics
from securefgl.errors import ConfigError, NonFiniteError, SecureFGLError, TrainingError
from securefgl.protocols.base import DropoutPlan, Protocol, Sums

__all__ = ["EvalRecord", "RoundRecord", "SeedResult", "broadcast_nbytes", "run_seed"]


def broadcast_nbytes(broadcast: Mapping[str, torch.Tensor]) -> int:
    """Bytes of a broadcast as sent: the raw bytes of its tensors."""
    return int(sum(t.numel() * t.element_size() for t in broadcast.values()))


def _context(broadcast: Mapping[str, torch.Tensor]) -> bytes:
    """Public round context: a hash of what the server broadcast (bound into protocol sessions)."""
    h = hashlib.sha256(b"securefgl.round-context.v1")
    for k in sorted(broadcast):
        t = broadcast[k].detach()
        h.update(k.encode())
        h.update(str(tuple(t.shape)).encode() + str(t.dtype).encode())
        h.update(t.cpu().contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.digest()


@dataclass
class EvalRecord:
    """Metrics of one evaluation: overall (``overall``) and per client."""

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


def _check_finite_losses(clients: Sequence[Client], phase: str, rnd: int) -> list[float]:
    losses = []
    for c in clients:
        for v in c.losses:
            if not math.isfinite(v):
                raise NonFiniteError(
                    f"training loss of client {c.id} became {v} in round {rnd} of phase {phase!r}; "
                    "lower train.lr or check the client's features"
                )
        if c.losses:
            losses.append(c.losses[-1])
    return losses


def _check_finite_upload(cid: int, contribution: Mapping[str, Any], phase: str, rnd: int) -> None:
    for name, value in contribution.items():
        t = torch.as_tensor(value)
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise NonFiniteError(
                f"upload block {name!r} of client {cid} is not finite in round {rnd} of phase {phase!r}"
            )


def grid_rng(seed: int, global_round: int, client: int, key: str) -> np.random.Generator:
    """The client's stream for rounding its upload onto the sum's grid (``protocol.grid_upload``).

    Its own stream, so rounding consumes nothing from the training generators; a function of the seed,
    the round, the client and the request only, so every protocol sees the same rounded upload.
    """
    tag = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return np.random.default_rng(np.random.SeedSequence([seed, 0x6121D, global_round, client, tag]))


def _contribution(out: Any, key: str, single: bool, cid: int) -> Mapping[str, Any]:
    if out is None:
        raise TrainingError(f"client {cid} produced no contribution for sum {key!r}")
    if single:
        return out
    if key not in out:
        raise TrainingError(f"client {cid} produced no contribution for sum {key!r}; got {sorted(out)}")
    return out[key]


def run_seed(
    config: RunConfig,
    fg: Any,
    seed: int,
    device: torch.device,
    *,
    on_round: Callable[[RoundRecord], None] | None = None,
    on_start: Callable[[list[Phase]], None] | None = None,
) -> SeedResult:
    """Run the configured algorithm on ``fg`` for one seed.

    Args:
        config: The validated run config.
        fg: The :class:`~securefgl.data.FederatedGraph`.
        seed: Training seed (models, dropout masks, client sampling, dropout plans).
        device: Where every tensor of the run lives.
        on_round: Called after every round (and local phase) with its record (progress display).
        on_start: Called once the algorithm is built, with its phases.

    Raises:
        NonFiniteError: A NaN/Inf loss or upload; ``exc.partial`` holds the :class:`SeedResult` so far.
        SecureFGLError: Any other failure; ``exc.partial`` likewise.
    """
    result = SeedResult(seed=seed)
    t_start = time.perf_counter()
    try:
        _run(config, fg, seed, device, result, on_round, on_start)
    except SecureFGLError as exc:
        result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
        result.seconds = time.perf_counter() - t_start
        exc.partial = result  # type: ignore[attr-defined]
        raise
    result.seconds = time.perf_counter() - t_start
    return result


def _run(
    config: RunConfig,
    fg: Any,
    seed: int,
    device: torch.device,
    result: SeedResult,
    on_round: Callable[[RoundRecord], None] | None,
    on_start: Callable[[list[Phase]], None] | None,
) -> None:
    train = config.train
    k_all = fg.num_clients
    per_round = train.clients_in_round(k_all)
    setting = make_setting(config, fg, device)
    algorithm: Algorithm = create_algorithm(config.algorithm.name, setting, config.algorithm.options)
    phases = list(algorithm.phases(train))
    if on_start:
        on_start(phases)
    protocol: Protocol | None = None
    if algorithm.uses_protocol:
        protocol = _build_protocol(config, per_round, k_all)

    clients, server, broadcast, sampling_rng = start_seed(algorithm, fg, seed, device)

    global_round = 0
    best: EvalRecord | None = None
    delivered: Mapping[str, torch.Tensor] | None = None  # the broadcast the clients were last charged for
    for phase in phases:
        best = None
        if phase.kind == "local":
            # A local phase starts from the server's latest broadcast (a final model, O-pFGL's pseudo-graph):
            # every client downloads it once, even when no communicating round follows to carry the charge.
            down: dict[int, int] = {}
            size = broadcast_nbytes(broadcast)
            if broadcast is not delivered and size:
                down = dict.fromkeys((c.id for c in clients), size)
                delivered = broadcast
            t0 = time.perf_counter()
            algorithm.personalize_clients(clients, broadcast, phase)
            rec = RoundRecord(
                phase.name,
                0,
                global_round,
                [c.id for c in clients],
                float("nan"),
                {},
                down,
                time.perf_counter() - t0,
                0.0,
                0.0,
            )
            losses = _check_finite_losses(clients, phase.name, 0)
            rec.loss = float(np.mean(losses)) if losses else float("nan")
            for c in clients:
                c.losses.clear()
            if phase.evaluate:
                rs = RoundState(phase.name, 0, global_round, tuple(c.id for c in clients), broadcast, 1)
                best = _evaluate(algorithm, clients, broadcast, rs, rec, fg.num_classes, result)
            result.rounds.append(rec)
            if on_round:
                on_round(rec)
            if best is not None:
                result.final = best
            continue

        num_rounds = phase.rounds if phase.rounds is not None else train.rounds
        since_best = 0
        for r in range(num_rounds):
            if phase.sample and per_round < k_all:
                invited = sorted(int(i) for i in sampling_rng.choice(k_all, size=per_round, replace=False))
            else:
                invited = list(range(k_all))
            rs = RoundState(phase.name, r, global_round, tuple(invited), broadcast, num_rounds)
            rec = _round(
                algorithm,
                protocol,
                server,
                [clients[i] for i in invited],
                clients,
                rs,
                config,
                sampling_rng,
                seed,
            )
            broadcast = rec.pop("broadcast")
            record: RoundRecord = rec["record"]
            if any(record.bytes_down.values()):
                delivered = rs.broadcast
            last = r == num_rounds - 1
            if phase.evaluate and ((r + 1) % train.eval_every == 0 or last):
                ev = _evaluate(algorithm, clients, broadcast, rs, record, fg.num_classes, result)
                if best is None or _better(ev, best):
                    best, since_best = ev, 0
                else:
                    since_best += 1
            result.rounds.append(record)
            global_round += 1
            if on_round:
                on_round(record)
            if train.patience is not None and since_best >= train.patience and phase.evaluate:
                result.stopped_early[phase.name] = r
                break
        if phase.evaluate and result.evals:
            result.final = best if (train.select_best and best is not None) else result.evals[-1]
    result.report = algorithm.run_report(server)


def _better(a: EvalRecord, b: EvalRecord) -> bool:
    va, vb = a.overall.get("val_acc", float("nan")), b.overall.get("val_acc", float("nan"))
    if math.isnan(vb):
        return not math.isnan(va)
    return not math.isnan(va) and va > vb


def _evaluate(
    algorithm: Algorithm,
    clients: Sequence[Client],
    broadcast: Mapping[str, torch.Tensor],
    rs: RoundState,
    record: RoundRecord,
    num_classes: int,
    result: SeedResult,
) -> EvalRecord:
    t0 = time.perf_counter()
    scores = algorithm.evaluate(clients, broadcast, rs)
    per_client = []
    for c in clients:
        if c.id not in scores:
            raise TrainingError(f"{algorithm.name}: evaluate() returned no scores for client {c.id}")
        logits = scores[c.id]
        if tuple(logits.shape) != (c.num_nodes, num_classes):
            raise TrainingError(
                f"{algorithm.name}: evaluate() returned shape {tuple(logits.shape)} for client {c.id}; "
                f"expected ({c.num_nodes}, {num_classes})"
            )
        per_client.append(client_metrics(c.id, logits, c.data, num_classes))
    overall = aggregate_clients(per_client)
    ev = EvalRecord(rs.phase, rs.round, overall, per_client)
    record.metrics = overall
    record.eval_seconds = time.perf_counter() - t0
    result.evals.append(ev)
    return ev


def _round(
    algorithm: Algorithm,
    protocol: Protocol | None,
    server: Any,
    invited: list[Client],
    all_clients: list[Client],
    rs: RoundState,
    config: RunConfig,
    rng: np.random.Generator,
    seed: int,
) -> dict[str, Any]:
    requests = list(algorithm.requests(rs))
    communicates = bool(requests)
    ids = [c.id for c in invited]
    bytes_up = dict.fromkeys(ids, 0)
    bytes_down = dict.fromkeys(ids, 0)
    if communicates:
        size = broadcast_nbytes(rs.broadcast)
        for cid in ids:
            bytes_down[cid] += size

    for c in invited:
        c.losses.clear()
    t0 = time.perf_counter()
    outs = algorithm.client_steps(invited, rs)
    train_seconds = time.perf_counter() - t0
    losses = _check_finite_losses(invited, rs.phase, rs.round)

    crypto = 0.0
    server_seconds = 0.0
    dropped: dict[int, str] = {}
    excluded: dict[int, str] = {}
    clips: dict[str, int] = {}
    privacy: dict[str, Any] | None = None
    broadcast = rs.broadcast
    if communicates:
        if protocol is None:
            raise TrainingError(f"algorithm {algorithm.name!r} declared a sum but uses no protocol")
        plan = None
        if config.protocol.dropout > 0:
            plan = DropoutPlan.random(ids, config.protocol.dropout, rng)
        context = _context(rs.broadcast)
        single = len(requests) == 1
        server_sums: dict[str, Sums] = {}
        for req in requests:
            participants = list(req.participants) if req.participants is not None else ids
            contribs = {}
            for cid in participants:
                contrib = _contribution(outs.get(cid), req.key, single, cid)
                _check_finite_upload(cid, contrib, rs.phase, rs.round)
                if config.protocol.grid_upload:
                    contrib = req.schema.round_to_grid(
                        contrib,
                        grid_rng(seed, rs.global_round, cid, req.key),
                        skip_dp=config.protocol.name.endswith("+dp"),
                    )
                contribs[cid] = contrib
            sub_plan = None
            if plan is not None:
                sub_plan = DropoutPlan({c: p for c, p in plan.at.items() if c in contribs})
            t1 = time.perf_counter()
            sums, transcript = protocol.aggregate(
                req.schema,
                contribs,
                dropouts=sub_plan,
                round_index=rs.global_round,
                recipient=req.recipient,
                context=context,
            )
            crypto += time.perf_counter() - t1
            for cid in contribs:
                bytes_up[cid] = bytes_up.get(cid, 0) + transcript.total_bytes_sent(cid)
                bytes_down[cid] = bytes_down.get(cid, 0) + transcript.total_bytes_received(cid)
            dropped.update(transcript.dropped)
            excluded.update(transcript.excluded)
            privacy = transcript.extra.get("privacy", privacy)
            for k, v in transcript.clip_counts.items():
                ck = k if single else f"{req.key}.{k}"
                clips[ck] = clips.get(ck, 0) + int(v)
            if req.recipient is None:
                server_sums[req.key] = sums
            else:
                all_clients[req.recipient].inbox[req.key] = sums
        if server_sums:
            for s in server_sums.values():
                if not isinstance(s, Sums):
                    raise TrainingError(f"protocol returned {type(s).__name__}, not Sums")
            arg: Any = (
                next(iter(server_sums.values()))
                if len(server_sums) == 1 and (single or MAIN in server_sums)
                else server_sums
            )
            t2 = time.perf_counter()
            broadcast = algorithm.server_step(server, arg, rs)
            server_seconds = time.perf_counter() - t2
    record = RoundRecord(
        rs.phase,
        rs.round,
        rs.global_round,
        ids,
        float(np.mean(losses)) if losses else float("nan"),
        bytes_up,
        bytes_down,
        train_seconds,
        crypto,
        server_seconds,
        dropped=dropped,
        excluded=excluded,
        clip_counts=clips,
        privacy=privacy,
    )
    return {"record": record, "broadcast": broadcast}


def _build_protocol(config: RunConfig, per_round: int, k_all: int) -> Protocol:
    """The run's protocol; a ``+dp`` target epsilon lasts ``train.rounds`` rounds unless told otherwise."""
    from securefgl.protocols.registry import get_protocol

    options = dict(config.protocol.options)
    name = config.protocol.name
    if name.endswith("+dp"):
        if "dp_epsilon" in options and "dp_rounds" not in options:
            options["dp_rounds"] = int(config.train.rounds)
        if "dp_sample_rate" not in options and per_round < k_all:
            options["dp_sample_rate"] = per_round / k_all
        try:
            return get_protocol(name, **options)
        except ConfigError as exc:
            raise ConfigError(
                f"{exc} (DP options go in protocol.options with a dp_ prefix, e.g. --set "
                "protocol.options.dp_min_contributors=9 --set protocol.options.dp_clip_norm=1.0 --set "
                "protocol.options.dp_epsilon=8)"
            ) from exc
    return get_protocol(name, **options)


def federation_edge_index(fg: Any) -> torch.Tensor:
    """``(2, E)`` every edge the clients hold (their local edges and the cross-client edges), global ids."""
    parts = [c.global_id[c.edge_index] for c in fg.clients]
    cross = getattr(fg, "cross_edges", None)
    if cross is not None and cross.numel():
        parts.append(cross)
    edges = torch.cat([p.long() for p in parts], dim=1) if parts else torch.zeros(2, 0, dtype=torch.long)
    return torch.unique(torch.cat([edges, edges.flip(0)], dim=1), dim=1)


def make_setting(config: RunConfig, fg: Any, device: torch.device | str) -> Setting:
    """The public facts of a run (:class:`Setting`) for ``config`` on the federated graph ``fg``."""
    public_edges = None
    if get_algorithm(config.algorithm.name).server_knows_edges(config.algorithm.options):
        public_edges = federation_edge_index(fg)
    return Setting(
        num_features=fg.num_features,
        num_classes=fg.num_classes,
        num_clients=fg.num_clients,
        num_nodes=fg.num_nodes,
        count_bound=int(fg.num_nodes),
        model=config.model,
        train=config.train,
        device=torch.device(device),
        max_clients_per_round=fg.num_clients,
        protocol=config.protocol.name,
        public_edge_index=public_edges,
    )


def start_seed(
    algorithm: Algorithm, fg: Any, seed: int, device: torch.device
) -> tuple[list[Client], Any, Any, np.random.Generator]:
    """Clients, server state, first broadcast and the client-sampling generator of one seed.

    Every random stream of a seed (per-client generators, the shared workspace generator, the server's
    initialisation, client sampling) is spawned here from ``seed``, so a run and its audit replay agree.
    """
    root = np.random.SeedSequence([seed, 0x5EC])
    s_clients, s_server, s_sampling, s_work = root.spawn(4)

    def torch_gen(ss: np.random.SeedSequence, dev: torch.device) -> torch.Generator:
        g = torch.Generator(device=dev)
        g.manual_seed(int(ss.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)))
        return g

    workspace: dict[str, Any] = {"generator": torch_gen(s_work, device)}
    if getattr(algorithm, "needs_cross_edges", False):
        from securefgl.algorithms.fedstruct import attach_cross_edges

        fg = attach_cross_edges(fg)
    clients = [
        Client(i, data.to(device), torch_gen(ss, device), workspace=workspace)
        for i, (data, ss) in enumerate(zip(fg.clients, s_clients.spawn(fg.num_clients), strict=True))
    ]
    if algorithm.needs_global_graph:
        workspace["global_data"] = fg.global_data().to(device)
    for c in clients:
        algorithm.init_client(c)
    server = algorithm.init_server(torch_gen(s_server, torch.device("cpu")))
    return clients, server, algorithm.initial_broadcast(server), np.random.default_rng(s_sampling)
