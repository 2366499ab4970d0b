"""Protocol benchmark (issue 3): every protocol against plaintext summation and the raw PRG floor.

A thin script over :mod:`securefgl.benchmarking` (the same code as ``securefgl bench protocols``).
Without arguments it runs the full grid: n in {10, 100}, d in {1e4, 1e5, 1e6}, dropout 0 % and 10 %,
plus the n = 500, d = 1e5, 10 % dropout server-unmasking check. Any ``securefgl bench protocols``
option narrows it, e.g.::

    python benchmarks/protocols.py --protocol plaintext --protocol secagg+ --clients 10 --length 100000
    python benchmarks/protocols.py --json > protocols.json
"""

from __future__ import annotations

import sys

from securefgl.cli import main

if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        [
            "bench",
            "protocols",
            *([] if "--no-full" in args else ["--full"]),
            *[a for a in args if a != "--no-full"],
        ]
    )
