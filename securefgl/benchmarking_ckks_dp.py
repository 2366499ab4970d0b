"""The CKKS and distributed-DP benchmark sections (issue 5) of :mod:`securefgl.benchmarking`.

Three sections, run with ``securefgl bench protocols --section ckks --section ckks-bytes --section dp``
(all three are part of ``--full``):

- ``ckks``: one CKKS aggregation (n clients, d floats) against the raw TenSEAL cost of the same work
  with the same parameters (N, primes, scale): every client encrypts ``ceil(d / (N/2))`` full
  ciphertexts and serialises them, the server deserialises and adds them, one party deserialises and
  decrypts the sum. Reported per step (client encrypt, server add, decrypt) and for the three together
  (target: at most 1.1x, column ``meets_1.1x``), against three floors timed side by side: raw TenSEAL
  with one warm context for every party (``raw_*``, ``enc+add+dec_x``); with a context per party
  deserialised before its step (``fresh_*``, ``vs_fresh_x``), which separate parties cannot avoid: a
  context's first encryption or decryption after deserialisation is slower than a warm one's, and every
  sum has fresh keys; and the latter through TenSEAL's native binding (``vs_native_x``), which the
  protocol's parties call (:mod:`securefgl.protocols._ckks_native`) and raw TenSEAL code does not: the
  protocol's own cost above TenSEAL's SEAL work. The per-session key setup (key generation and sealing,
  opening the key message, loading the secret context at the decryptor) has no raw counterpart and is
  reported on its own.
- ``ckks-bytes``: the CKKS upload against the plaintext and SecAgg uploads of the same vector
  (expansion factors), and against raw float32.
- ``dp``: each protocol with and without the DP wrapper, total wall time and the clients'
  noise-generation time.

CKKS timings are medians over ``repeats`` runs (each followed at once by its floors), the ``dp`` section's
the minimum. Like the ``protocols`` section, CKKS cases with ``n * d`` above
:data:`securefgl.benchmarking.GRID_LIMITS` are skipped unless ``ckks`` is asked for by name
(``--protocol ckks``). Every import of TenSEAL, the protocols and Opacus happens when a section
runs, so listing the sections stays cheap.
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from securefgl.benchmarking import GRID_LIMITS, BenchConfig, register_section

if TYPE_CHECKING:
    from securefgl.protocols import SumSchema
    from securefgl.protocols.base import Transcript

__all__ = ["bytes_section", "ckks_section", "dp_section", "raw_tenseal"]

#: The DP wrapper's options in the ``dp`` section.
DP_OPTIONS: dict[str, Any] = {"min_contributors": 2, "clip_norm": 1.0, "noise_multiplier": 1.0}


def _schema(n: int, d: int, dp: bool = False) -> SumSchema:
    from securefgl.protocols import BlockSpec, SumSchema

    return SumSchema([BlockSpec("x", (d,), bound=1.0, dp=dp)], max_clients=max(n, 16))


def _contributions(n: int, d: int, seed: int) -> dict[int, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {c: {"x": rng.uniform(-1, 1, d) / math.sqrt(d)} for c in range(n)}


def _best(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Minimum wall time of ``fn`` over ``repeats`` calls, and the last call's result."""
    best, out = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _ckks_skip(config: BenchConfig, n: int, d: int) -> str | None:
    """Why the CKKS case (n, d) is skipped, or ``None`` when it runs."""
    limit = GRID_LIMITS.get("ckks")
    if limit is None or "ckks" in config.protocols or n * d <= limit:
        return None
    return f"n*d > {limit:g} (pass --protocol ckks to run it)"


def raw_tenseal(
    n: int,
    d: int,
    coeff: tuple[int, ...],
    scale_bits: int,
    n_poly: int,
    *,
    seed: int = 1,
    fresh_contexts: bool = False,
    native: bool = False,
) -> dict[str, float]:
    """The raw TenSEAL floor: encrypt + serialise per client, deserialise + add, deserialise + decrypt.

    ``fresh_contexts=False`` reuses one warm context for every party (the cheapest TenSEAL can do);
    ``True`` gives every client, the server and the decryptor a context of their own, deserialised from
    bytes before their step (untimed, as a protocol party's key setup is), which is what separate parties
    must do: a context's first use after deserialisation costs more than a warm one's. ``native=False``
    calls TenSEAL's public API (``ts.ckks_vector``, ``ts.ckks_vector_from``, ``+=``, ``decrypt``), what raw
    TenSEAL code is; ``True`` its native binding, as the protocol's parties do
    (:mod:`securefgl.protocols._ckks_native`: the same SEAL work without the wrapper's list conversions).
    """
    import tenseal as ts

    from securefgl.protocols import _ckks_native

    def encrypt(ctx: Any, row: np.ndarray) -> bytes:
        return _ckks_native.encrypt(ctx, row) if native else ts.ckks_vector(ctx, row.tolist()).serialize()

    def load(ctx: Any, blob: bytes) -> Any:
        return _ckks_native.load(ctx, blob) if native else ts.ckks_vector_from(ctx, blob)

    def add(acc: Any, vec: Any) -> None:
        if native:
            acc.add_(vec)
        else:
            acc += vec

    def decrypt(vec: Any) -> np.ndarray:
        if not native:
            return np.array(vec.decrypt())
        out = np.empty(vec.size())
        _ckks_native.decrypt_into(vec, out)
        return out

    ctx = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=n_poly, coeff_mod_bit_sizes=list(coeff))
    ctx.global_scale = 2.0**scale_bits
    public_bytes = ctx.serialize(
        save_public_key=True, save_secret_key=False, save_galois_keys=False, save_relin_keys=False
    )
    public = ts.context_from(public_bytes)
    secret_bytes = (
        ctx.serialize(save_secret_key=True, save_galois_keys=False, save_relin_keys=False)
        if fresh_contexts
        else b""
    )

    def party_context(secret: bool = False) -> Any:
        if not fresh_contexts:
            return ctx if secret else public
        return ts.context_from(secret_bytes if secret else public_bytes)

    slots = n_poly // 2
    chunks = -(-d // slots)
    data = np.random.default_rng(seed).uniform(-1, 1, (n, chunks * slots))
    t_enc = 0.0
    uploads = []
    for c in range(n):
        client = party_context()
        t0 = time.perf_counter()
        rows = data[c].reshape(chunks, slots)
        uploads.append([encrypt(client, r) for r in rows])
        t_enc += time.perf_counter() - t0
    server = party_context()
    t0 = time.perf_counter()
    acc = [load(server, b) for b in uploads[0]]
    for up in uploads[1:]:
        for a, b in zip(acc, up, strict=True):
            add(a, load(server, b))
    sums = [a.serialize() for a in acc]
    t_add = time.perf_counter() - t0
    decryptor = party_context(secret=True)
    t0 = time.perf_counter()
    out = np.concatenate([decrypt(load(decryptor, b)) for b in sums])
    t_dec = time.perf_counter() - t0
    if out.shape != (chunks * slots,):
        raise RuntimeError(f"raw TenSEAL decrypted {out.shape[0]} slots, expected {chunks * slots}")
    error = float(np.max(np.abs(out - data.sum(axis=0))))
    if not error < 1e-2:  # a floor that decrypts something else times the wrong work
        raise RuntimeError(f"raw TenSEAL's sum is off by {error:.3g}")
    return {
        "encrypt_per_client": t_enc / n,
        "add": t_add,
        "decrypt": t_dec,
        "chunks": chunks,
        "bytes_per_client": sum(len(b) for b in uploads[0]),
    }


def _ckks_row(n: int, d: int, repeats: int, seed: int) -> dict[str, Any]:
    """One CKKS aggregation against the raw TenSEAL floors with the same parameters.

    Each repeat runs the protocol and then, at once, its two floors (one warm context shared by every
    party; a context per party, as separate parties have), so a noisy moment of the machine hits all three;
    every figure is the median over the repeats, and the core ratios are also given as their min-max.
    """
    from securefgl.protocols.ckks import CKKSAggregation

    schema, contribs = _schema(n, d), _contributions(n, d, seed)
    proto = CKKSAggregation(record_views=False)
    params = proto.parameters(schema)
    proto.aggregate(schema, contribs)  # warm-up: TenSEAL's first context is not a per-round cost
    floor_args = (n, d, params.coeff_mod_bit_sizes, params.scale_bits, params.poly_modulus_degree)
    runs, raws, freshes, ratios, fresh_ratios, native_ratios = [], [], [], [], [], []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        _, t = proto.aggregate(schema, contribs)
        runs.append((time.perf_counter() - t0, t))
        raws.append(raw_tenseal(*floor_args, seed=seed + 1))
        freshes.append(raw_tenseal(*floor_args, seed=seed + 1, fresh_contexts=True))
        natives = raw_tenseal(*floor_args, seed=seed + 1, fresh_contexts=True, native=True)
        s_ = t.extra["ckks"]["seconds"]
        core = s_["client_encrypt_mean"] + s_["server_add"] + s_["server_sum"] + s_["client_decrypt"]
        ratios.append(core / _floor_core(raws[-1]))
        fresh_ratios.append(core / _floor_core(freshes[-1]))
        native_ratios.append(core / _floor_core(natives))
    tr = runs[-1][1]
    wall = float(np.median([r[0] for r in runs]))
    sec = {
        k: float(np.median([r[1].extra["ckks"]["seconds"][k] for r in runs]))
        for k in tr.extra["ckks"]["seconds"]
    }
    raw = {k: float(np.median([r[k] for r in raws])) for k in raws[0]}
    fresh = {k: float(np.median([r[k] for r in freshes])) for k in freshes[0]}
    server_add = sec["server_add"] + sec["server_sum"]
    proto_core = sec["client_encrypt_mean"] + server_add + sec["client_decrypt"]
    setup = (
        sec.get("client_keygen", 0.0) + sec.get("client_open_key_mean", 0.0) + sec["client_load_secret_key"]
    )
    return {
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
        "server_add_ms": 1e3 * server_add,
        "raw_add_ms": 1e3 * raw["add"],
        "add_x": server_add / raw["add"],
        "decrypt_ms": 1e3 * sec["client_decrypt"],
        "raw_dec_ms": 1e3 * raw["decrypt"],
        "dec_x": sec["client_decrypt"] / raw["decrypt"],
        "enc+add+dec_x": float(np.median(ratios)),
        "enc+add+dec_x_range": f"{min(ratios):.2f}-{max(ratios):.2f}",
        "meets_1.1x": float(np.median(ratios)) <= 1.1,
        "fresh_enc_ms": 1e3 * fresh["encrypt_per_client"],
        "fresh_add_ms": 1e3 * fresh["add"],
        "fresh_dec_ms": 1e3 * fresh["decrypt"],
        "vs_fresh_x": float(np.median(fresh_ratios)),
        "vs_fresh_x_range": f"{min(fresh_ratios):.2f}-{max(fresh_ratios):.2f}",
        "vs_native_x": float(np.median(native_ratios)),
        "key_setup_ms": 1e3 * setup,
        "protocol_wall_ms": 1e3 * wall,
        "protocol_core_ms": 1e3 * proto_core,
    }


def _floor_core(floor: dict[str, float]) -> float:
    """A floor's encrypt (one client) + add + decrypt seconds: the steps the 1.1x target compares."""
    return floor["encrypt_per_client"] + floor["add"] + floor["decrypt"]


def _ckks_grid(config: BenchConfig, row: Any) -> list[dict[str, Any]]:
    """``row(n, d)`` for every (n, d) of the config, or a ``skipped`` row where CKKS would be too large."""
    rows: list[dict[str, Any]] = []
    for n in config.clients:
        for d in config.lengths:
            skip = _ckks_skip(config, n, d)
            rows.append({"n": n, "d": d, "skipped": skip} if skip is not None else row(int(n), int(d)))
    return rows


def ckks_section(config: BenchConfig) -> list[dict[str, Any]]:
    """Section ``ckks``: CKKS per-step times against raw TenSEAL, for every (n, d) of the config."""
    return _ckks_grid(config, lambda n, d: _ckks_row(n, d, config.repeats, config.seed))


def _upload_bytes(t: Transcript, phase: str) -> float:
    """Mean bytes a surviving client sent in ``phase``."""
    ups = [v for (p, ph), v in t.bytes_sent.items() if ph == phase and p in t.survivors]
    return float(np.mean(ups)) if ups else float("nan")


def _bytes_row(n: int, d: int, seed: int) -> dict[str, Any]:
    """CKKS upload sizes for one (n, d) against plaintext, float32 and (if present) SecAgg."""
    from securefgl.protocols import available_protocols, get_protocol
    from securefgl.protocols.ckks import CKKSAggregation

    schema, contribs = _schema(n, d), _contributions(n, d, seed)
    _, tc = CKKSAggregation(record_views=False).aggregate(schema, contribs)
    _, tall = CKKSAggregation(record_views=False, key_holders="all").aggregate(schema, contribs)
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
        **_key_bytes(tc, tall),
    }
    if "secagg" in available_protocols():
        _, tsa = get_protocol("secagg", record_views=False).aggregate(schema, contribs)
        sec_total = float(np.mean([tsa.total_bytes_sent(c) for c in tsa.invited]))
        row["secagg_sent_per_client_B"] = sec_total
        row["ckks/secagg"] = float(np.mean([tc.total_bytes_sent(c) for c in tc.invited])) / sec_total
    return row


def _key_bytes(default: Transcript, every: Transcript) -> dict[str, Any]:
    """The key distribution's downlink per client (the sealed context rides on the upload request):
    a key holder's and another client's under the default ``key_holders``, and the mean with ``"all"``."""
    holders = set(default.extra["ckks"]["key_holders"]) - {default.extra["ckks"]["generator"]}
    others = set(default.invited) - set(default.extra["ckks"]["key_holders"])

    def mean_down(t: Transcript, parties: set[Any]) -> float:
        vals = [t.bytes_received.get((c, "upload"), 0) for c in parties]
        return float(np.mean(vals)) if vals else float("nan")

    every_parties = set(every.invited) - {every.extra["ckks"]["generator"]}
    return {
        "key_holders": len(default.extra["ckks"]["key_holders"]),
        "key_down_holder_B": mean_down(default, holders),
        "key_down_other_B": mean_down(default, others),
        "key_down_mean_B": mean_down(default, set(default.invited) - {default.extra["ckks"]["generator"]}),
        "key_down_mean_all_holders_B": mean_down(every, every_parties),
    }


def bytes_section(config: BenchConfig) -> list[dict[str, Any]]:
    """Section ``ckks-bytes``: CKKS bytes per client against plaintext, SecAgg and float32."""
    return _ckks_grid(config, lambda n, d: _bytes_row(n, d, config.seed))


def dp_section(config: BenchConfig) -> list[dict[str, Any]]:
    """Section ``dp``: every protocol with and without the DP wrapper (``--protocol`` narrows it)."""
    from securefgl.protocols import ProtocolSpec, available_protocols, get_protocol
    from securefgl.protocols.dp import DDGBlock, ddg_epsilon

    known = available_protocols()
    bases = [b for b in ("plaintext", "secagg", "secagg+", "ckks") if b in known]
    if config.protocols:
        bases = [b for b in bases if b in config.protocols]
    # Warm up: the first epsilon imports opacus (seconds), which is not DP overhead per round.
    ddg_epsilon(
        [DDGBlock(dim=1, clip=1.0, sigma=1.0)],
        rounds=1,
        sample_rate=1.0,
        delta=1e-5,
        min_shares=1,
        max_shares=2,
    )
    rows: list[dict[str, Any]] = []
    for n in config.clients:
        for d in config.lengths:
            contribs = _contributions(n, d, config.seed)
            for base in bases:
                skip = _ckks_skip(config, n, d) if base == "ckks" else None
                if skip is not None:
                    rows.append({"protocol": base, "n": n, "d": d, "skipped": skip})
                    continue
                plain_schema, dp_schema = _schema(n, d), _schema(n, d, dp=True)
                proto = get_protocol(base, record_views=False)
                wrapped = get_protocol(ProtocolSpec.of(base, dp=True), record_views=False, dp=DP_OPTIONS)
                t_base, _ = _best(
                    lambda p=proto, s=plain_schema, c=contribs: p.aggregate(s, c), config.repeats
                )
                t_dp, res = _best(
                    lambda p=wrapped, s=dp_schema, c=contribs: p.aggregate(s, c), config.repeats
                )
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


_CKKS_COLUMNS = [
    "n",
    "d",
    "N",
    "primes",
    "scale",
    "chunks",
    "raw_chunks",
    "client_enc_ms",
    "raw_enc_ms",
    "enc_x",
    "server_add_ms",
    "raw_add_ms",
    "add_x",
    "decrypt_ms",
    "raw_dec_ms",
    "dec_x",
    "enc+add+dec_x",
    "meets_1.1x",
    "fresh_enc_ms",
    "fresh_add_ms",
    "fresh_dec_ms",
    "vs_fresh_x",
    "vs_native_x",
    "key_setup_ms",
    "protocol_wall_ms",
    "skipped",
]
_BYTES_COLUMNS = [
    "n",
    "d",
    "ckks_up_B",
    "ckks_total_per_client_B",
    "plaintext_up_B",
    "float32_B",
    "ckks/plaintext",
    "ckks/float32",
    "secagg_sent_per_client_B",
    "ckks/secagg",
    "skipped",
]
_DP_COLUMNS = [
    "protocol",
    "n",
    "d",
    "without_dp_ms",
    "with_dp_ms",
    "dp_overhead_x",
    "noise_per_client_ms",
    "epsilon(1 round, delta 1e-5)",
    "skipped",
]
if importlib.util.find_spec("tenseal") is not None:
    register_section("ckks", ckks_section, columns=_CKKS_COLUMNS)
    register_section("ckks-bytes", bytes_section, columns=_BYTES_COLUMNS)
register_section("dp", dp_section, columns=_DP_COLUMNS)
