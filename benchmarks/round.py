"""A whole secure round against a plaintext one (issue 23's end-to-end targets), with the floor that bounds it.

The runs are ``securefgl run --algorithm fedavg --dataset Cora --clients K --local-epochs E`` through the API
(GCN, Louvain, grid-rounded uploads, so every protocol trains the same model), in three configurations:

- ``plaintext``: the server sums the uploads in the clear;
- ``secagg+``: a key agreement for every sum (``session_uses=1``, Bonawitz et al.'s protocol);
- ``secagg+ resumed``: one key agreement, resumed for every later sum of the run (``session_uses`` above the
  run's sums; :mod:`securefgl.protocols._secaggplus_resume`);
- ``secagg+ optimistic``: resumed, with optimistic uses (``optimistic_uses``: after the key agreement each sum
  is one round trip without self masks, all clients or nothing);
- ``secagg+ optimistic aes128``: the same with AES-128-CTR masks (``prg="aes128-ctr"``: 128-bit security, the
  level of the X25519 key agreement, at about 1.4x AES-256's keystream rate; SECURITY.md says what it gives up).

Per round (median over the rounds after ``--warmup``): the wall time split into train / crypto (each client's
upload checks and grid rounding, then the training sum's protocol run) / eval (the clients' scoring, and the
evaluation sum where it does not ride in the next round's training sum: ``train.eval_in_next_sum``) / server
(the server step), and the ratio to plaintext. The four add up to the round's wall time within a few
milliseconds. The configurations run
interleaved, ``--repeats`` times each (in reverse order on every second repeat, so that no configuration
always runs first), and the medians are over all their rounds, so load on a shared machine hits them alike.

**The floor.** Whatever the protocol, every sum of a round costs each client one keystream per pairwise mask
and one for its self mask, and the server one per survivor's self mask, each as long as the masked vector.
The ``prg floor`` column times exactly that many expansions of the round's sums (training and evaluation,
lengths and neighbour counts read from the transcripts) with raw ``cryptography`` AES-CTR into a
preallocated buffer (:func:`securefgl.benchmarking.prg_floor_seconds`), once in one thread and once with the
vector split over as many threads as the protocol expands its masks with (``workers``: the CPU count, at most
8). ``(plaintext + floor) / plaintext`` is the best ratio any masking protocol could reach on this machine
with the clients run in one process, one after another, and their masks expanded on that many threads. Each
configuration has its own floor, read from its own transcripts and timed with its own PRG: a fresh or resumed
sum counts the self masks (each client adds one, the server removes the survivors'), an optimistic use the
pairwise masks alone.

Resumed and optimistic uses do not wait for the training to end: the engine announces each round's training sum
before its clients train (:meth:`~securefgl.protocols.base.Protocol.prepare`), and a resumed use expands every
client's pairwise masks then (each pair's stream once, for both of its clients), in a worker process, on the
core that training (one thread here) leaves idle (:mod:`securefgl.protocols._secaggplus_precompute`,
:mod:`securefgl.protocols._mask_worker`). What of the masks is not done when the clients upload (and the self masks)
counts in ``crypto``; the training shares its core's neighbour, so ``train`` can grow a little. Their
rounds can therefore go below ``(plain + floor) / plain``, which stays the bound of masking that starts after
training.

Usage::

    python benchmarks/round.py [--clients 10,100] [--rounds 8] [--warmup 2] [--repeats 2] [--epochs 3]
        [--no-tune-allocator]

Like ``securefgl run``, it raises glibc's mmap threshold first
(:func:`securefgl.training.device.tune_cpu_allocator`), unless ``--no-tune-allocator``.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

import torch

import securefgl
from securefgl.benchmarking import prg_floor_seconds
from securefgl.engine.hooks import AggregateEvent, RunHooks
from securefgl.protocols.secaggplus import ClipLayout, SecAggPlus
from securefgl.training.device import tune_cpu_allocator

CONFIGS: dict[str, dict[str, Any]] = {
    "plaintext": {"name": "plaintext"},
    "secagg+": {"name": "secagg+"},
    "secagg+ resumed": {"name": "secagg+", "options": {"session_uses": 1_000_000}},
    "secagg+ optimistic": {
        "name": "secagg+",
        "options": {"session_uses": 1_000_000, "optimistic_uses": True},
    },
    "secagg+ optimistic aes128": {
        "name": "secagg+",
        "options": {"session_uses": 1_000_000, "optimistic_uses": True, "prg": "aes128-ctr"},
    },
}


def _run(
    name: str, clients: int, rounds: int, epochs: int
) -> tuple[list[dict[str, float]], list[list[tuple]]]:
    """One run: per-round seconds, and per round the (streams, length, ring_bits) of each of its sums."""
    sums: dict[int, list[tuple[int, int, int]]] = {}

    def on_aggregate(ev: AggregateEvent) -> None:
        tr = ev.transcript
        # A carried evaluation shares the training sum's protocol run (counted once; the floor leaves out its
        # few dozen limbs, a conservative floor).
        if tr is None or "degree" not in tr.extra or ev.carried:
            return
        n, degree = len(tr.survivors), int(tr.extra["degree"])
        if tr.extra.get("optimistic_use"):
            streams = n * degree  # pairwise masks only: no self mask to add or remove
        else:
            streams = n * (degree + 1) + n  # clients: pairwise + self masks; server: self masks
        length = ClipLayout(ev.schema).length
        sums.setdefault(ev.rs.global_round, []).append((streams, length, ev.schema.ring_bits))

    result = securefgl.run(
        {
            "dataset": {"name": "Cora"},
            "partition": {"method": "louvain", "clients": clients},
            "algorithm": {"name": "fedavg"},
            "protocol": CONFIGS[name],
            "train": {"rounds": rounds, "local_epochs": epochs},
            "output": {"save": False},
            "threads": 1,
        },
        hooks=RunHooks(on_aggregate=on_aggregate),
    )
    seed = result.seeds[0]
    per_round = [
        {
            "train": r.train_seconds,
            "crypto": r.crypto_seconds,
            "eval": r.eval_seconds,
            "server": r.server_seconds,
        }
        for r in seed.rounds
    ]
    return per_round, [sums.get(i, []) for i in range(len(per_round))]


def _floor(round_sums: list[tuple[int, int, int]], threads: int, prg: str) -> float:
    return sum(
        prg_floor_seconds(s, length, bits, algorithm=prg, repeats=3, threads=threads)
        for s, length, bits in round_sums
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="10,100", help="comma-separated client counts (default 10,100)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2, help="rounds left out of the medians (default 2)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per configuration, interleaved (default 2)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument(
        "--no-tune-allocator",
        action="store_true",
        help="leave glibc's mmap threshold alone (securefgl run tunes it; see training.device.tune_cpu_allocator)",
    )
    args = ap.parse_args()
    tuned = False if args.no_tune_allocator else tune_cpu_allocator()  # as `securefgl run` does
    torch.set_num_threads(1)
    workers = SecAggPlus().workers
    print(
        f"# {os.cpu_count()} CPUs, torch {torch.__version__}, training on 1 thread, masks expanded on {workers} "
        f"(the protocol's workers); medians over rounds after {args.warmup}; CPU allocator "
        f"{'tuned' if tuned else 'default'} (every configuration)"
    )
    print(
        f"| K | configuration | round | train | crypto | eval | server | vs plaintext | prg floor, 1 / {workers} "
        "threads | (plain + floor) / plain |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k in (int(x) for x in args.clients.split(",")):
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in CONFIGS}
        floors: dict[str, list[tuple[float, float]]] = {name: [] for name in CONFIGS}
        for rep in range(args.repeats):
            # every second repeat in reverse: no configuration always runs first
            order = list(CONFIGS) if rep % 2 == 0 else list(reversed(CONFIGS))
            for name in order:
                per_round, round_sums = _run(name, k, args.rounds, args.epochs)
                rows[name] += per_round[args.warmup :]
                if name != "plaintext":
                    prg = CONFIGS[name].get("options", {}).get("prg", "aes256-ctr")
                    floors[name] += [
                        (_floor(s, 1, prg), _floor(s, workers, prg)) for s in round_sums[args.warmup :]
                    ]
        med = {
            name: {c: statistics.median(r[c] for r in rs) for c in ("train", "crypto", "eval", "server")}
            for name, rs in rows.items()
        }
        totals = {name: statistics.median(sum(r.values()) for r in rs) for name, rs in rows.items()}
        plain = totals["plaintext"]
        for name, m in med.items():
            floor = "- | -"
            if floors[name]:
                f1, fw = (statistics.median(f[i] for f in floors[name]) for i in (0, 1))
                floor = f"{f1:.3f} / {fw:.3f} s | {(plain + f1) / plain:.2f}x / {(plain + fw) / plain:.2f}x"
            print(
                f"| {k} | {name} | {totals[name]:.3f} s | {m['train']:.3f} | {m['crypto']:.3f} | {m['eval']:.3f} "
                f"| {m['server']:.3f} | {totals[name] / plain:.2f}x | {floor} |"
            )


if __name__ == "__main__":
    main()
