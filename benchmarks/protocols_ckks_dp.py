"""CKKS and distributed-DP benchmark (issue 5), measured side by side in one run.

Three tables:

1. **ckks vs raw TenSEAL**: one CKKS aggregation (n clients, d floats) against the raw TenSEAL cost
   of the same work with the same parameters (N, primes, scale): every client encrypts
   ``ceil(d / (N/2))`` full ciphertexts and serialises them, the server deserialises and adds them, one
   party deserialises and decrypts the sum. Reported per step (client encrypt, server add, decrypt) and
   for the three together (target: at most 1.1x); the per-session key setup (key generation and
   sealing, opening the key message, loading the secret context at the decryptor) has no raw
   counterpart (raw TenSEAL reuses one context) and is reported on its own.
2. **bytes per client**: the CKKS upload against the plaintext and SecAgg uploads of the same vector
   (expansion factors), and against raw float32.
3. **dp overhead**: each protocol with and without the DP wrapper, total wall time and the clients'
   noise-generation time.

Timings are the minimum over ``--repeats`` runs. Usage::

    python benchmarks/protocols_ckks_dp.py [--clients 10] [--lengths 10000 100000] [--repeats 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tenseal as ts

from securefgl.benchmarking import format_rows, machine_info
from securefgl.protocols import BlockSpec, SumSchema, available_protocols, get_protocol
from securefgl.protocols.ckks import CKKSAggregation
from securefgl.protocols.dp import DDGBlock, ddg_epsilon


def _schema(n: int, d: int, dp: bool = False) -> SumSchema:
    return SumSchema([BlockSpec("x", (d,), bound=1.0, dp=dp)], max_clients=max(n, 16))


def _contributions(n: int, d: int, seed: int = 0) -> dict[int, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {c: {"x": rng.uniform(-1, 1, d) / math.sqrt(d)} for c in range(n)}


def _best(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best, out = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def raw_tenseal(n: int, d: int, coeff: tuple[int, ...], scale_bits: int, n_poly: int) -> dict[str, float]:
    """The raw TenSEAL floor: encrypt + serialise per client, deserialise + add, deserialise + decrypt."""
    ctx = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=n_poly, coeff_mod_bit_sizes=list(coeff))
    ctx.global_scale = 2.0**scale_bits
    public = ts.context_from(
        ctx.serialize(
            save_public_key=True, save_secret_key=False, save_galois_keys=False, save_relin_keys=False
        )
    )
    slots = n_poly // 2
    chunks = -(-d // slots)
    rng = np.random.default_rng(1)
    data = rng.uniform(-1, 1, (n, chunks * slots))
    t_enc = 0.0
    uploads = []
    for c in range(n):
        t0 = time.perf_counter()
        rows = data[c].reshape(chunks, slots)
        uploads.append([ts.ckks_vector(public, r.tolist()).serialize() for r in rows])
        t_enc += time.perf_counter() - t0
    t0 = time.perf_counter()
    acc = [ts.ckks_vector_from(public, b) for b in uploads[0]]
    for up in uploads[1:]:
        for a, b in zip(acc, up, strict=True):
            a += ts.ckks_vector_from(public, b)
    sums = [a.serialize() for a in acc]
    t_add = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = np.concatenate([np.array(ts.ckks_vector_from(ctx, b).decrypt()) for b in sums])
    t_dec = time.perf_counter() - t0
    assert out.shape == (chunks * slots,)
    return {
        "encrypt_per_client": t_enc / n,
        "add": t_add,
        "decrypt": t_dec,
        "chunks": chunks,
        "bytes_per_client": sum(len(b) for b in uploads[0]),
    }


def ckks_rows(clients: list[int], lengths: list[int], repeats: int) -> list[dict[str, Any]]:
    rows = []
    for n in clients:
        for d in lengths:
            schema, contribs = _schema(n, d), _contributions(n, d)
            proto = CKKSAggregation(record_views=False)
            params = proto.parameters(schema)
            runs = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                _, t = proto.aggregate(schema, contribs)
                runs.append((time.perf_counter() - t0, t))
            wall, tr = min(runs, key=lambda r: r[0])
            sec = {
                k: min(r[1].extra["ckks"]["seconds"][k] for r in runs) for k in tr.extra["ckks"]["seconds"]
            }
            raws = [
                raw_tenseal(n, d, params.coeff_mod_bit_sizes, params.scale_bits, params.poly_modulus_degree)
                for _ in range(repeats)
            ]
            raw = {k: min(r[k] for r in raws) for k in raws[0]}
            proto_core = (
                sec["client_encrypt_mean"] + sec["server_add"] + sec["server_sum"] + sec["client_decrypt"]
            )
            raw_core = raw["encrypt_per_client"] + raw["add"] + raw["decrypt"]
            setup = (
                sec.get("client_keygen", 0.0)
                + sec.get("client_open_key_mean", 0.0)
                + sec["client_load_secret_key"]
            )
            rows.append(
                {
                    "n": n,
                    "d": d,
                    "N": params.poly_modulus_degree,
                    "primes": "+".join(map(str, params.coeff_mod_bit_sizes)),
                    "scale": f"2^{params.scale_bits}",
                    "chunks": tr.extra["ckks"]["chunks"],
                    "raw_chunks": raw["chunks"],
                    "client_enc_ms": 1e3 * sec["client_encrypt_mean"],
                    "raw_enc_ms": 1e3 * raw["encrypt_per_client"],
                    "enc_x": sec["client_encrypt_mean"] / raw["encrypt_per_client"],
                    "server_add_ms": 1e3 * (sec["server_add"] + sec["server_sum"]),
                    "raw_add_ms": 1e3 * raw["add"],
                    "add_x": (sec["server_add"] + sec["server_sum"]) / raw["add"],
                    "decrypt_ms": 1e3 * sec["client_decrypt"],
                    "raw_dec_ms": 1e3 * raw["decrypt"],
                    "dec_x": sec["client_decrypt"] / raw["decrypt"],
                    "enc+add+dec_x": proto_core / raw_core,
                    "meets_1.1x": proto_core / raw_core <= 1.1,
                    "key_setup_ms": 1e3 * setup,
                    "protocol_wall_ms": 1e3 * wall,
                }
            )
    return rows


def _upload_bytes(t: Any, phase: str) -> float:
    ups = [v for (p, ph), v in t.bytes_sent.items() if ph == phase and p in t.survivors]
    return float(np.mean(ups)) if ups else float("nan")


def bytes_rows(clients: list[int], lengths: list[int]) -> list[dict[str, Any]]:
    rows = []
    have_secagg = "secagg" in available_protocols()
    for n in clients:
        for d in lengths:
            schema, contribs = _schema(n, d), _contributions(n, d)
            _, tc = CKKSAggregation(record_views=False).aggregate(schema, contribs)
            _, tp = get_protocol("plaintext", record_views=False).aggregate(schema, contribs)
            ckks_up = _upload_bytes(tc, "upload")
            plain_up = _upload_bytes(tp, "input")
            row: dict[str, Any] = {
                "n": n,
                "d": d,
                "ckks_up_B": ckks_up,
                "ckks_total_per_client_B": float(
                    np.mean([tc.total_bytes_sent(c) + tc.total_bytes_received(c) for c in tc.invited])
                ),
                "plaintext_up_B": plain_up,
                "float32_B": 4 * d,
                "ckks/plaintext": ckks_up / plain_up,
                "ckks/float32": ckks_up / (4 * d),
            }
            if have_secagg:
                _, ts_ = get_protocol("secagg", record_views=False).aggregate(schema, contribs)
                sec_total = float(np.mean([ts_.total_bytes_sent(c) for c in ts_.invited]))
                row["secagg_sent_per_client_B"] = sec_total
                row["ckks/secagg"] = float(np.mean([tc.total_bytes_sent(c) for c in tc.invited])) / sec_total
            rows.append(row)
    return rows


def dp_rows(clients: list[int], lengths: list[int], repeats: int) -> list[dict[str, Any]]:
    rows = []
    bases = [b for b in ("plaintext", "secagg", "secagg+", "ckks") if b in available_protocols()]
    dp_opts = {"min_contributors": 2, "clip_norm": 1.0, "noise_multiplier": 1.0}
    # Warm up: the first epsilon imports opacus (seconds), which is not DP overhead per round.
    ddg_epsilon(
        [DDGBlock(dim=1, clip=1.0, sigma=1.0)],
        rounds=1,
        sample_rate=1.0,
        delta=1e-5,
        min_shares=1,
        max_shares=2,
    )
    for n in clients:
        for d in lengths:
            contribs = _contributions(n, d)
            for base in bases:
                plain_schema, dp_schema = _schema(n, d), _schema(n, d, dp=True)
                proto = get_protocol(base, record_views=False)
                wrapped = get_protocol(base + "+dp", record_views=False, dp=dp_opts)
                t_base, _ = _best(lambda p=proto, s=plain_schema, c=contribs: p.aggregate(s, c), repeats)
                t_dp, res = _best(lambda p=wrapped, s=dp_schema, c=contribs: p.aggregate(s, c), repeats)
                tr = res[1]
                noise = float(np.mean([v for (p, ph), v in tr.party_seconds.items() if ph == "dp_noise"]))
                rows.append(
                    {
                        "protocol": base,
                        "n": n,
                        "d": d,
                        "without_dp_ms": 1e3 * t_base,
                        "with_dp_ms": 1e3 * t_dp,
                        "dp_overhead_x": t_dp / t_base,
                        "noise_per_client_ms": 1e3 * noise,
                        "epsilon(1 round, delta 1e-5)": res[0].privacy.epsilon,
                    }
                )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10])
    ap.add_argument("--lengths", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    result = {
        "machine": machine_info(),
        "ckks_vs_raw_tenseal": ckks_rows(args.clients, args.lengths, args.repeats),
        "bytes_per_client": bytes_rows(args.clients, args.lengths),
        "dp_overhead": dp_rows(args.clients, args.lengths, args.repeats),
    }
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        m = result["machine"]
        print(
            f"machine: {m['processor']}, {m['cpu_count']} CPUs, Python {m['python']}, tenseal {ts.__version__}"
        )
        for name in ("ckks_vs_raw_tenseal", "bytes_per_client", "dp_overhead"):
            print(f"\n## {name}\n")
            print(format_rows(result[name]))
    return result


if __name__ == "__main__":
    main()
