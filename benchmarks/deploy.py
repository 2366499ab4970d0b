"""Deployed run (SuperLink + SuperNodes as processes, TLS, SuperNode auth) against the in-process simulation.

For each number of clients (Cora, GCN, FedAvg, secagg+, the bit-identical settings ``train.batched=false``,
``model.dropout=0``), runs the same job twice, side by side: in process (``securefgl.run``) and deployed
(:class:`~securefgl.deploy.launcher.LocalFederation`: one SuperLink, one SuperNode + worker per client, ``flwr
run``). Reports per round: wall time of each (the round's training, protocol, server step and evaluation, as the
server measured them), their ratio, bytes per client of our frames as handed to Flower, and the transcript's
bytes per client (protocol messages and broadcast), and whether the final metrics are bit-identical. The same job
deployed under ``plaintext`` on the same federation gives the baseline of the issue's target (the deployed secagg+
round at most 1.5x the deployed plaintext one; ``--no-plaintext`` skips it). ``--resumed`` adds the secagg+ job
with resumed sessions (``protocol.options.session_uses``: one key agreement per sum key, then 2 steps a sum
instead of 4) on the same federation, and its ratio to the plaintext round; ``--optimistic`` adds it with
``protocol.options.optimistic_uses`` too (one step a sum after key agreement, plaintext's count; a dropout aborts
that sum and the next agrees on fresh keys); with ``--rounds 4`` or more also the steady round of each (the median
of the rounds after the two that agree on keys and before the last, which carries the final evaluation) and their
ratio.

Each size's row is printed as JSON when it is measured, and all rows as one markdown table at the end (seconds per
round: mean [steady], ratio to deployed plaintext: mean [steady]).

Usage::

    python benchmarks/deploy.py --clients 5 --rounds 2          # one size, quick
    python benchmarks/deploy.py --clients 5,10,20 --rounds 3    # the issue's sizes
    python benchmarks/deploy.py --clients 5 --rounds 4 --no-flower-ref --resumed
    python benchmarks/deploy.py --clients 5 --rounds 6 --no-flower-ref --resumed --optimistic

Flower starts a ClientApp process per message and a SuperNode polls every few seconds when idle, so the deployed
round is dominated by Flower's per-message latency on a small or busy machine. ``--launches warm`` (the default,
as ``securefgl deploy``) forks each ClientApp from a process that imported Flower once
(:mod:`securefgl.deploy.warm`); ``--launches cold`` starts each from nothing, as Flower does; ``warm,cold`` runs
both at each size, one after the other. Flower's own SecAgg+ workflow on the
same payload (``benchmarks/flower_secagg_ref.py``) and plain Flower FedAvg run on the same federation after the
deployed run (``--no-flower-ref`` skips them). Timings on a shared CPU are noisy; compare ratios from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import securefgl
from securefgl.api import load_federated_graph
from securefgl.config import RunConfig, to_dict
from securefgl.deploy.export import export_clients
from securefgl.deploy.launcher import LocalFederation


def _config(
    args: argparse.Namespace, clients: int, out: Path, protocol: str = "secagg+", **options: Any
) -> RunConfig:
    return RunConfig.from_mapping(
        {
            "dataset": {"name": "cora", "root": args.root},
            "partition": {"clients": clients},
            "protocol": {"name": protocol, "options": options},
            "model": {"name": "gcn", "dropout": 0.0},
            "train": {"rounds": args.rounds, "batched": False},
            "output": {"dir": str(out), "plot": False},
            "device": "cpu",
            "threads": 1,
        }
    )


def _per_round(rounds: list[dict[str, Any]]) -> float:
    keys = ("train_seconds", "crypto_seconds", "server_seconds", "eval_seconds")
    return float(np.mean([sum(float(r.get(k) or 0.0) for k in keys) for r in rounds]))


def _steady(rounds: list[dict[str, Any]]) -> float | None:
    """Median round time after the first two rounds (where resumed sums agree on keys) and before the last (which
    carries the final evaluation); ``None`` with fewer than 4 rounds."""
    keys = ("train_seconds", "crypto_seconds", "server_seconds", "eval_seconds")
    middle = rounds[2:-1]
    if not middle:
        return None
    return float(np.median([sum(float(r.get(k) or 0.0) for k in keys) for r in middle]))


def _transcript_bytes(rounds: list[dict[str, Any]]) -> float:
    """Mean bytes per client per round of the transcripts (protocol messages, broadcast, evaluation sums)."""

    def total(value: Any) -> int:
        return sum(int(v) for v in value.values()) if isinstance(value, dict) else int(value or 0)

    keys = ("bytes_up", "bytes_down", "eval_bytes_up", "eval_bytes_down")
    per = [sum(total(r.get(k)) for k in keys) for r in rounds]
    return float(np.mean(per)) / max(1, len(rounds[0]["clients"]))


def measure(args: argparse.Namespace, clients: int, work: Path) -> dict[str, Any]:
    cfg_sim = _config(args, clients, work / "sim")
    securefgl.run(cfg_sim)
    sim = json.loads((work / "sim" / "metrics.json").read_text())
    cfg_dep = _config(args, clients, work / "dep")
    export_clients(load_federated_graph(cfg_dep), work / "data")
    t0 = time.perf_counter()
    ref: dict[str, float] = {}
    with LocalFederation(work / "fed", work / "data", clients, warm=args.warm) as fed:
        fed.start()
        started = time.perf_counter() - t0
        run_id = fed.submit(fed.write_app(to_dict(cfg_dep), work / "dep", args.stage_timeout))
        status = fed.wait(run_id, args.timeout)
        if args.plaintext:  # the same job deployed without protection, on the same federation
            plain = _deployed(
                fed, args, _config(args, clients, work / "dep-plain", "plaintext"), work / "dep-plain"
            )
            if isinstance(plain, str):
                ref["deployed_plaintext_status"] = plain  # type: ignore[assignment]
            else:
                ref["deployed_plaintext_round_s"] = round(_per_round(plain["rounds"]), 3)
                if (steady := _steady(plain["rounds"])) is not None:
                    ref["deployed_plaintext_steady_round_s"] = round(steady, 3)
        for variant, options in _variants(args):  # the secagg+ job resuming sessions after key agreement
            out = work / f"dep-{variant}"
            res = _deployed(fed, args, _config(args, clients, out, **options), out)
            if isinstance(res, str):
                ref[f"deployed_{variant}_status"] = res  # type: ignore[assignment]
                continue
            ref[f"deployed_{variant}_round_s"] = round(_per_round(res["rounds"]), 3)
            if (steady := _steady(res["rounds"])) is not None:
                ref[f"deployed_{variant}_steady_round_s"] = round(steady, 3)
            same = res["final"]["overall"] == sim["seeds"][0]["final"]["overall"]
            ref[f"{variant}_bit_identical"] = same  # type: ignore[assignment]
        if not args.no_flower_ref:
            ref.update(_flower_reference(fed, args, clients, _payload(cfg_dep), work))
    dep = json.loads((work / "dep" / "metrics.json").read_text())
    wire = dep["wire_bytes"]["0"]
    wire_per = (sum(wire["up"].values()) + sum(wire["down"].values())) / max(1, wire["rounds"]) / clients
    sim_round, dep_round = _per_round(sim["seeds"][0]["rounds"]), _per_round(dep["seeds"][0]["rounds"])
    if "deployed_plaintext_round_s" in ref:
        ref["secagg+_over_plaintext_deployed"] = round(dep_round / ref["deployed_plaintext_round_s"], 2)
        for variant, _ in _variants(args):
            if f"deployed_{variant}_round_s" in ref:
                ref[f"{variant}_over_plaintext_deployed"] = round(
                    ref[f"deployed_{variant}_round_s"] / ref["deployed_plaintext_round_s"], 2
                )
            if f"deployed_{variant}_steady_round_s" in ref and "deployed_plaintext_steady_round_s" in ref:
                ref[f"{variant}_over_plaintext_steady"] = round(
                    ref[f"deployed_{variant}_steady_round_s"] / ref["deployed_plaintext_steady_round_s"], 2
                )
    return {
        "clients": clients,
        "warm_clientapps": args.warm,
        "status": status,
        "federation_start_s": round(started, 1),
        "sim_round_s": round(sim_round, 3),
        "deployed_round_s": round(dep_round, 3),
        "deployed_over_sim": round(dep_round / sim_round, 1),
        "wire_bytes_per_client_round": int(wire_per),
        "transcript_bytes_per_client_round": int(_transcript_bytes(dep["seeds"][0]["rounds"])),
        "bit_identical": dep["seeds"][0]["final"]["overall"] == sim["seeds"][0]["final"]["overall"],
        **ref,
    }


def _variants(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    """The resumed-session variants of the secagg+ job that ``--resumed`` and ``--optimistic`` ask for."""
    variants: list[tuple[str, dict[str, Any]]] = []
    if args.resumed:
        variants.append(("resumed", {"session_uses": 1_000_000}))
    if args.optimistic:
        variants.append(("optimistic", {"session_uses": 1_000_000, "optimistic_uses": True}))
    return variants


def _deployed(
    fed: LocalFederation, args: argparse.Namespace, cfg: RunConfig, out: Path
) -> dict[str, Any] | str:
    """Deploy ``cfg`` on the running federation: its seed's results, or the run's status if it did not complete."""
    status = fed.wait(fed.submit(fed.write_app(to_dict(cfg), out, args.stage_timeout)), args.timeout)
    if status != "finished:completed":
        return status
    seed: dict[str, Any] = json.loads((out / "metrics.json").read_text())["seeds"][0]
    return seed


def _payload(cfg: RunConfig) -> int:
    """Model parameters of the job: the length of each client's upload (numerator blocks)."""
    from securefgl.nn.registry import build_model

    return sum(p.numel() for p in build_model(cfg.model, 1433, 7).parameters())


def _flower_reference(
    fed: LocalFederation, args: argparse.Namespace, n: int, d: int, work: Path
) -> dict[str, float]:
    """Flower's SecAgg+ workflow (and plain FedAvg) on the same SuperLink, SuperNodes and payload size."""
    source = (Path(__file__).parent / "flower_secagg_ref.py").read_text()
    out: dict[str, float] = {"payload_d": d}
    for secagg in (True, False):
        res = work / f"flower-{'secagg' if secagg else 'plain'}.json"
        client = "flower_secagg_ref:client_app" if secagg else "flower_secagg_ref:plain_client_app"
        app = fed.write_project(
            {"serverapp": "flower_secagg_ref:server_app", "clientapp": client},
            {"clients": n, "rounds": args.rounds, "d": d, "secagg": secagg, "out": str(res)},
            {"flower_secagg_ref.py": source},
        )
        status = fed.wait(fed.submit(app), args.timeout)
        if status != "finished:completed":
            out[f"flower_{'secagg' if secagg else 'plain'}_status"] = status  # type: ignore[assignment]
            continue
        row = json.loads(res.read_text())
        out[f"flower_{'secaggplus' if secagg else 'plain'}_round_s"] = round(
            row["seconds"] / row["rounds"], 3
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", default="5,10,20", help="comma-separated client counts")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--root", default=os.environ.get("SECUREFGL_DATA"))
    p.add_argument("--stage-timeout", type=float, default=300.0)
    p.add_argument("--timeout", type=float, default=3600.0)
    p.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    p.add_argument("--no-flower-ref", action="store_true", help="skip Flower's own SecAgg+ workflow")
    p.add_argument(
        "--no-plaintext",
        dest="plaintext",
        action="store_false",
        help="skip the deployed plaintext run (the baseline of the secagg+/plaintext ratio)",
    )
    p.add_argument(
        "--resumed",
        action="store_true",
        help="also deploy the secagg+ job with resumed sessions (session_uses)",
    )
    p.add_argument(
        "--optimistic",
        action="store_true",
        help="also deploy the secagg+ job with optimistic resumed uses (session_uses + optimistic_uses: one step "
        "a sum after key agreement, all members or nothing)",
    )
    p.add_argument(
        "--launches",
        default="warm",
        help="ClientApp launches: warm (forked from a process that imported Flower), cold (Flower's own: a "
        "new process each), or warm,cold (both, one after the other at each size)",
    )
    args = p.parse_args()
    launches = [w.strip() for w in args.launches.split(",") if w.strip()]
    if not launches or any(w not in ("warm", "cold") for w in launches):
        p.error(f"--launches {args.launches!r}: give warm, cold or warm,cold")
    rows = []
    for n in [int(c) for c in args.clients.split(",")]:
        for launch in launches:
            args.warm = launch == "warm"
            with tempfile.TemporaryDirectory(prefix=f"bench-deploy-{n}-") as tmp:
                row = measure(args, n, Path(tmp))
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(summary_table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


def summary_table(rows: list[dict[str, Any]]) -> str:
    """The rows as one markdown table: seconds per round, mean over the run [steady round, where measured], and
    each secure configuration's ratio to the deployed plaintext round (mean [steady])."""

    def cell(row: dict[str, Any], name: str) -> str:
        mean = row.get("deployed_round_s" if name == "secagg+" else f"deployed_{name}_round_s")
        if mean is None:
            return str(row.get(f"deployed_{name}_status", "-"))
        steady = row.get(f"deployed_{name}_steady_round_s")
        ratio, steady_ratio = (row.get(f"{name}_over_plaintext_{kind}") for kind in ("deployed", "steady"))
        text = f"{mean:.2f}" + (f" [{steady:.2f}]" if steady is not None else "")
        if ratio is not None:
            text += f" ({ratio:.2f}x" + (f" [{steady_ratio:.2f}x]" if steady_ratio is not None else "") + ")"
        return text

    names = ["secagg+", "plaintext", "resumed", "optimistic"]
    head = "| clients | launches | sim | " + " | ".join(f"deployed {n}" for n in names)
    head += " | Flower SecAgg+ | plain Flower | wire / transcript bytes | bit-identical |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        flower = [row.get(k) for k in ("flower_secaggplus_round_s", "flower_plain_round_s")]
        lines.append(
            f"| {row['clients']} | {'warm' if row['warm_clientapps'] else 'cold'} | {row['sim_round_s']:.3f} | "
            + " | ".join(cell(row, n) for n in names)
            + " | "
            + " | ".join("-" if f is None else f"{f:.2f}" for f in flower)
            + f" | {row['wire_bytes_per_client_round']:,} / {row['transcript_bytes_per_client_round']:,}"
            + f" | {row['bit_identical']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
