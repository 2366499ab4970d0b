"""The fixed cost of a secure sum: SecAgg+ against plaintext on an evaluation-sized and a model-sized vector.

Every round of every algorithm runs small sums besides the model's (evaluation counts, validation counts, class
counts). Their masks are short, so what they cost is the per-message work around the masking: key agreement,
Shamir shares, AEAD, message codecs, the server's bookkeeping. This script times whole ``aggregate`` calls at
``n`` clients for a vector of ``d`` elements, in four configurations, interleaved sum by sum so that load on a
shared machine hits them alike:

- ``plaintext``: the server sums the encoded vectors in the clear (the baseline);
- ``secagg+``: a fresh session per sum (four round trips, Bonawitz et al.'s protocol);
- ``secagg+ resumed``: one key agreement, resumed for every later sum (``session_uses``);
- ``secagg+ optimistic``: resumed, each later sum one round trip without self masks (``optimistic_uses``).

It prints the median milliseconds per sum (min-max over the sums) and the ratio to plaintext.

Usage::

    python benchmarks/small_sums.py [--clients 10] [--lengths 40,92231] [--sums 25] [--no-tune-allocator]

Like ``securefgl run``, it raises glibc's mmap threshold first
(:func:`securefgl.training.device.tune_cpu_allocator`): untuned, the plaintext sum of 92,231-element vectors
pays page faults on fresh buffers (4.96 against 2.20 ms), which flatters every ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from securefgl.protocols import get_protocol
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.training.device import tune_cpu_allocator

CONFIGS: dict[str, dict[str, Any]] = {
    "plaintext": {"name": "plaintext"},
    "secagg+": {"name": "secagg+"},
    "secagg+ resumed": {"name": "secagg+", "session_uses": 1_000_000},
    "secagg+ optimistic": {"name": "secagg+", "session_uses": 1_000_000, "optimistic_uses": True},
}


def _case(n: int, d: int) -> tuple[SumSchema, dict[int, dict[str, np.ndarray]]]:
    schema = SumSchema([BlockSpec("x", (d,), bound=1.0)], max_clients=n, precision=2.0**-20)
    rng = np.random.default_rng(0)
    return schema, {c: {"x": rng.uniform(-1.0, 1.0, d).astype(np.float32)} for c in range(n)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--lengths", default="40,92231", help="comma-separated vector lengths (default 40,92231)")
    ap.add_argument("--sums", type=int, default=25, help="timed sums per configuration (after one warm-up)")
    ap.add_argument(
        "--no-tune-allocator",
        action="store_true",
        help="leave glibc's mmap threshold alone (securefgl run tunes it; see training.device.tune_cpu_allocator)",
    )
    args = ap.parse_args()
    if args.clients < 3 or args.sums < 1:
        ap.error(f"need --clients >= 3 and --sums >= 1, got {args.clients} and {args.sums}")
    tuned = False if args.no_tune_allocator else tune_cpu_allocator()  # as `securefgl run` does
    print(
        f"# n = {args.clients} clients; median ms per aggregate call (min-max over {args.sums} sums); CPU "
        f"allocator {'tuned' if tuned else 'default'}"
    )
    print("| d | configuration | ms per sum | vs plaintext |")
    print("|---|---|---|---|")
    for d in (int(x) for x in args.lengths.split(",")):
        schema, contributions = _case(args.clients, d)
        protos = {
            name: get_protocol(cfg["name"], **{k: v for k, v in cfg.items() if k != "name"})
            for name, cfg in CONFIGS.items()
        }
        times: dict[str, list[float]] = {name: [] for name in CONFIGS}
        for r in range(args.sums + 1):
            for name, proto in protos.items():
                t0 = time.perf_counter()
                proto.aggregate(schema, contributions, round_index=r)
                if r:  # the first sum of each is a warm-up (and the resumed session's key agreement)
                    times[name].append(time.perf_counter() - t0)
        plain = statistics.median(times["plaintext"])
        for name, ts in times.items():
            med = statistics.median(ts)
            print(
                f"| {d} | {name} | {1e3 * med:.2f} ({1e3 * min(ts):.2f}-{1e3 * max(ts):.2f}) | {med / plain:.2f}x |"
            )


if __name__ == "__main__":
    main()
