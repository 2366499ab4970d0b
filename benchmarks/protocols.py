"""Protocol benchmark (issues 3 and 5): every protocol against plaintext summation and the raw PRG
floor, CKKS against raw TenSEAL, and the cost of distributed DP.

A thin script over :mod:`securefgl.benchmarking` (the same code as ``securefgl bench protocols``).
Without arguments it runs the full grid: n in {10, 100}, d in {1e4, 1e5, 1e6}, dropout 0 % and 10 %,
plus the n = 500, d = 1e5, 10 % dropout server-unmasking check, and the CKKS and DP sections
(``ckks``: CKKS per step against raw TenSEAL with the same parameters, target 1.1x; ``ckks-bytes``:
CKKS upload against plaintext, SecAgg and float32; ``dp``: each protocol with and without the DP
wrapper; see :mod:`securefgl.benchmarking_ckks_dp`). Any ``securefgl bench protocols`` option narrows
it; ``--no-full`` drops the full grid's defaults (n = 10, d = 1e4 unless given), e.g.::

    python benchmarks/protocols.py --protocol plaintext --protocol secagg+ --clients 10 --length 100000
    python benchmarks/protocols.py --section ckks --section ckks-bytes --section dp
    python benchmarks/protocols.py --no-full --section dp --clients 10 --length 100000 --repeats 2
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
