"""Tests for securefgl.protocols.ckks: real TenSEAL contexts, real X25519 channels, the real router."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import numpy as np
import pytest
import tenseal as ts
import torch

from securefgl.errors import (
    ConfigError,
    MalformedMessageError,
    OverflowRiskError,
    ProtocolError,
    ReleaseRefusedError,
    ThresholdError,
    WithheldBlockError,
)
from securefgl.protocols import SERVER, BlockSpec, DropoutPlan, SumSchema, get_protocol
from securefgl.protocols.base import MessageRecord, Transcript
from securefgl.protocols.ckks import (
    ERROR_BUDGET,
    PHASES,
    CKKSAggregation,
    CKKSClient,
    CKKSKeys,
    CKKSParameters,
    CKKSRelease,
    CKKSServer,
    CKKSSumRequest,
    CKKSUpload,
    select_parameters,
)
from securefgl.protocols.messages import WIRE_VERSION, decode
from securefgl.protocols.plaintext import PlaintextAggregation
from securefgl.protocols.router import Router


def small_schema(max_clients: int = 16, **kw: object) -> SumSchema:
    return SumSchema(
        [
            BlockSpec("w", (30, 7), bound=1.5),
            BlockSpec("n", (4,), kind="count", bound=300),
            BlockSpec("h", (9,), bound=0.25, dtype=torch.float64),
        ],
        max_clients=max_clients,
        **kw,  # type: ignore[arg-type]
    )


def random_contributions(s: SumSchema, n: int, seed: int, overshoot: float = 1.2) -> dict[int, dict]:
    """Random contributions, some values beyond the bounds (so clipping happens)."""
    rng = np.random.default_rng(seed)
    out: dict[int, dict] = {}
    for c in range(n):
        d = {}
        for b in s.blocks:
            if b.kind == "count":
                d[b.name] = torch.as_tensor(rng.integers(0, int(b.bound) + 1, size=b.shape))
            else:
                d[b.name] = torch.as_tensor(
                    rng.uniform(-overshoot * b.bound, overshoot * b.bound, size=b.shape)
                )
        out[c] = d
    return out


def grid_contributions(s: SumSchema, n: int, seed: int) -> dict[int, dict]:
    """Contributions exactly on the fixed-point grid, so stochastic rounding is the identity."""
    rng = np.random.default_rng(seed)
    out: dict[int, dict] = {}
    for c in range(n):
        d = {}
        for b in s.blocks:
            m = int(s.max_encoded[b.name])
            if b.kind == "count":
                d[b.name] = rng.integers(0, m + 1, size=b.shape)
            else:
                m = int(b.bound * s.scales[b.name])  # stay inside the bound
                d[b.name] = rng.integers(-m, m + 1, size=b.shape).astype(np.float64) * s.steps[b.name]
        out[c] = d
    return out


def exact_sum(
    s: SumSchema, contribs: dict[int, dict], who: list[int] | tuple[int, ...]
) -> dict[str, np.ndarray]:
    total = {b.name: np.zeros(b.shape, dtype=np.float64) for b in s.blocks}
    for c in who:
        flat, _ = s.pack(contribs[c])
        for b in s.blocks:
            total[b.name] += flat[s.slices[b.name]].reshape(b.shape)
    return total


def assert_close_to(sums, s: SumSchema, expected: dict[str, np.ndarray]) -> None:
    for b in s.blocks:
        got = sums[b.name].double().numpy()
        bound = sums.max_abs_error[b.name]
        err = np.abs(got - expected[b.name]).max() if got.size else 0.0
        assert err <= bound, (b.name, err, bound)


@pytest.fixture(scope="module")
def schema_() -> SumSchema:
    return small_schema()


@pytest.fixture(scope="module")
def basic_run(schema_):
    """One CKKS run shared by several tests: 6 clients, one drops before upload."""
    contribs = random_contributions(schema_, 6, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # TenSEAL must never warn (explicit chunking)
        sums, t = CKKSAggregation().aggregate(schema_, contribs, dropouts=DropoutPlan({4: "upload"}))
    return contribs, sums, t


# -- parameters ---------------------------------------------------------------------------------------


def test_parameters_fit_the_schema(schema_):
    p = select_parameters(schema_)
    assert p.poly_modulus_degree == 8192
    assert sum(p.coeff_mod_bit_sizes) <= 218
    assert p.error_bound(schema_.max_clients) <= ERROR_BUDGET
    # no wrap-around: max_clients sums of w-bit digits times the scale stay below the data modulus
    assert np.log2(schema_.max_clients) + p.digit_bits + p.scale_bits < p.data_bits_lower - 1
    # the widest field (the real block w: 2 * 1.5 * 2^20) needs 22 bits: one digit suffices
    assert p.digit_bits >= 22


def test_wide_ranges_use_several_digits():
    s = SumSchema([BlockSpec("x", (10,), bound=1000.0)], max_clients=1000, precision=2.0**-40)
    p = select_parameters(s)
    assert s.ring_bits > p.digit_bits  # more bits per element than one digit carries
    assert p.error_bound(1000) <= ERROR_BUDGET
    contribs = grid_contributions(s, 3, seed=5)
    sums, t = CKKSAggregation().aggregate(s, contribs)
    got = sums["x"].double().numpy()
    assert np.array_equal(got, np.float32(exact_sum(s, contribs, [0, 1, 2])["x"]).astype(np.float64))
    assert t.extra["ckks"]["digit_bits"] == p.digit_bits


def test_imprecise_context_is_refused_with_the_numbers(schema_):
    with pytest.raises(ConfigError, match=r"too imprecise.*scale 2\^20.*error bound .* exceeds") as exc:
        CKKSAggregation(coeff_mod_bit_sizes=[30, 30], scale_bits=20).parameters(schema_)
    assert "max_clients=16" in str(exc.value)
    with pytest.raises(ConfigError, match="128-bit security"):
        CKKSAggregation(coeff_mod_bit_sizes=[60, 60, 60, 60])
    with pytest.raises(ConfigError, match="poly_modulus_degree must be one of"):
        CKKSAggregation(poly_modulus_degree=4096)


def test_vector_longer_than_the_maximum_is_refused(schema_):
    with pytest.raises(ConfigError, match=r"length 223 exceeds the configured max_length=100"):
        CKKSAggregation(max_length=100).aggregate(schema_, random_contributions(schema_, 2, 0))


def test_noise_bound_is_conservative_on_fresh_and_summed_ciphertexts():
    """Measured decryption error of real TenSEAL sums stays well inside the stated bound."""
    for n_poly, coeff, scale in [(8192, (60, 60), 25), (8192, (60, 60, 60), 40), (16384, (60, 60), 25)]:
        p = CKKSParameters(n_poly, coeff, scale, 20, 64)
        ctx = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=n_poly, coeff_mod_bit_sizes=list(coeff))
        ctx.global_scale = 2.0**scale
        rng = np.random.default_rng(n_poly + scale)
        xs = rng.integers(0, 2**20, size=(8, p.slots)).astype(np.float64)
        acc = ts.ckks_vector(ctx, xs[0].tolist())
        fresh = np.abs(np.array(acc.decrypt()) - xs[0]).max()
        for x in xs[1:]:
            acc += ts.ckks_vector(ctx, x.tolist())
        summed = np.abs(np.array(acc.decrypt()) - xs.sum(0)).max()
        assert fresh <= p.error_bound(1) / 4
        assert summed <= p.error_bound(8) / 4


# -- sums ----------------------------------------------------------------------------------------------


def test_sum_equals_plaintext_within_the_bound(basic_run, schema_):
    contribs, sums, t = basic_run
    assert t.survivors == (0, 1, 2, 3, 5)
    assert t.dropped == {4: "upload"}
    assert sums.num_contributors == 5
    assert_close_to(sums, schema_, exact_sum(schema_, contribs, t.survivors))
    plain, _ = PlaintextAggregation().aggregate(schema_, contribs, dropouts=DropoutPlan({4: "input"}))
    assert torch.equal(sums["n"], plain["n"])  # counts are exact
    for name in ("w", "h"):
        bound = sums.max_abs_error[name] + plain.max_abs_error[name]
        assert (sums[name].double() - plain[name].double()).abs().max() <= bound
    # the clip counts are summed inside the ciphertexts and equal the plaintext ones
    assert sums.clip_counts == plain.clip_counts
    assert sums.clip_counts["w"] > 0
    assert t.extra["ckks"]["max_grid_deviation"] <= t.extra["ckks"]["ckks_error_bound"] <= ERROR_BUDGET


def test_on_grid_inputs_give_bit_exact_sums():
    s = small_schema()
    contribs = grid_contributions(s, 4, seed=3)
    sums, _ = CKKSAggregation().aggregate(s, contribs)
    plain, _ = PlaintextAggregation().aggregate(s, contribs)
    for b in s.blocks:
        assert torch.equal(sums[b.name], plain[b.name]), b.name


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_schemas_including_many_chunks(seed):
    rng = np.random.default_rng(seed)
    blocks = []
    for i in range(int(rng.integers(1, 4))):
        shape = tuple(int(d) for d in rng.integers(1, 60, size=int(rng.integers(1, 3))))
        if rng.random() < 0.3:
            blocks.append(BlockSpec(f"c{i}", shape, kind="count", bound=int(rng.integers(1, 10_000))))
        else:
            blocks.append(BlockSpec(f"r{i}", shape, bound=float(rng.uniform(0.1, 50.0))))
    blocks.append(BlockSpec("big", (int(rng.integers(2 * 4096, 3 * 4096)),), bound=1.0))  # >= 3 ciphertexts
    s = SumSchema(blocks, max_clients=int(rng.integers(5, 200)), precision=float(2.0 ** -rng.integers(8, 30)))
    n = int(rng.integers(2, 5))
    contribs = random_contributions(s, n, seed=seed)
    sums, t = CKKSAggregation().aggregate(s, contribs)
    assert t.extra["ckks"]["chunks"] >= 3
    assert_close_to(sums, s, exact_sum(s, contribs, list(range(n))))


def test_bytes_are_the_real_serialised_sizes(basic_run):
    _, _, t = basic_run
    ups = [m for m in t.view(SERVER) if m.phase == "upload"]
    assert {m.sender for m in ups} == {0, 1, 2, 3, 5}
    for m in ups:
        msg = decode(m.payload, CKKSUpload)
        assert len(msg.ciphertexts) == t.extra["ckks"]["chunks"]
        assert t.bytes_sent[(m.sender, "upload")] == len(m.payload)
        assert len(m.payload) > sum(len(b) for _, b in msg.ciphertexts)  # framing on top of the ciphertexts


# -- where the secret key lives --------------------------------------------------------------------------


def _run_parties(schema, contribs, **kw):
    p = CKKSAggregation(**kw)
    params = p.parameters(schema)
    clients = tuple(sorted(contribs))
    t = Transcript(protocol="ckks", invited=clients)
    server = CKKSServer(schema, params, clients, 0, None, "all", None, t)
    parties = {c: CKKSClient(c, schema, params, contribs[c], 0, b"") for c in clients}
    Router(t).run(server, parties)
    return server, parties, t


def test_the_server_never_holds_a_secret_key(schema_, tmp_path):
    contribs = random_contributions(schema_, 4, seed=2)
    key_file = tmp_path / "ckks-secret.bin"
    sums, t = CKKSAggregation(save_secret_key=key_file).aggregate(schema_, contribs)
    # the only copy written to disk is the one asked for, with mode 0600
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    secret = key_file.read_bytes()
    holder_ctx = ts.context_from(secret)
    assert holder_ctx.is_private() and holder_ctx.has_secret_key()
    # everything the server received: no context with a secret key, no copy of the secret context
    contexts = 0
    for m in t.view(SERVER):
        assert secret not in m.payload
        if m.phase == "keys":
            pub = ts.context_from(decode(m.payload, CKKSKeys).public_context)
            assert not pub.is_private() and not pub.has_secret_key()
            assert not pub.has_relin_keys() and not pub.has_galois_keys()
            contexts += 1
    assert contexts == 1
    # the server's view holds every upload, but it cannot decrypt one...
    up = decode(next(m for m in t.view(SERVER) if m.phase == "upload").payload, CKKSUpload)
    with pytest.raises(ValueError, match="secret"):
        ts.ckks_vector_from(pub, up.ciphertexts[0][1]).decrypt()
    # ...while the key holder's secret context (from the file) can
    holder_view = np.array(ts.ckks_vector_from(holder_ctx, up.ciphertexts[0][1]).decrypt())
    assert np.abs(holder_view - np.rint(holder_view)).max() < 1e-3
    # the released sum is what reached the server, nothing else from the decryptor
    rel = [m for m in t.view(SERVER) if m.phase == "release"]
    assert len(rel) == 1 and decode(rel[0].payload, CKKSRelease)
    with pytest.raises(FileExistsError):  # never overwrites an existing key file
        CKKSAggregation(save_secret_key=key_file).aggregate(schema_, contribs)


def test_server_objects_hold_only_the_public_context(schema_):
    server, parties, t = _run_parties(schema_, random_contributions(schema_, 3, seed=4))
    ctx = server.public_context
    assert ctx is not None and not ctx.is_private() and not ctx.has_secret_key()
    state = ctx.serialize(save_secret_key=True)  # even when asked, there is no secret key to save
    assert not ts.context_from(state).has_secret_key()
    assert server.sums is not None
    # the decryptor drops the key after its single decryption; the others when the session ends
    assert not parties[server.decryptor].holds_secret_key
    assert [c for c, p in parties.items() if p.holds_secret_key] == [
        c for c in parties if c != server.decryptor
    ]
    for p in parties.values():
        p.forget()
    assert not any(p.holds_secret_key for p in parties.values())


def test_a_context_with_a_secret_key_is_refused_by_the_server(schema_):
    """A generator that (wrongly) sends its secret context to the server is excluded; the next one keys."""
    contribs = random_contributions(schema_, 3, seed=6)
    params = CKKSAggregation().parameters(schema_)

    def leak(rec: MessageRecord) -> list[bytes]:
        if rec.phase == "keys" and rec.receiver == SERVER and rec.sender == 0:
            msg = decode(rec.payload, CKKSKeys)
            ctx = ts.context(
                ts.SCHEME_TYPE.CKKS,
                poly_modulus_degree=8192,
                coeff_mod_bit_sizes=list(params.coeff_mod_bit_sizes),
            )
            ctx.global_scale = 2.0**params.scale_bits
            bad = CKKSKeys(
                session_id=msg.session_id,
                public_context=ctx.serialize(save_secret_key=True),
                sealed=msg.sealed,
            )
            return [bad.to_bytes()]
        return [rec.payload]

    sums, t = CKKSAggregation(interceptor=leak).aggregate(schema_, contribs)
    assert "secret key" in t.excluded[0]
    assert t.extra["ckks"]["generator"] == 1
    assert t.survivors == (1, 2)
    assert_close_to(sums, schema_, exact_sum(schema_, contribs, (1, 2)))


# -- dropouts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "survivors", "generator", "decryptor"),
    [
        ({0: "keys"}, (1, 2, 3, 4), 1, 1),  # the generator drops: the next client generates
        ({0: "release"}, (0, 1, 2, 3, 4), 0, 1),  # the decryptor drops: the next holder decrypts
        ({1: "advertise", 2: "upload"}, (0, 3, 4), 0, 0),
    ],
)
def test_dropouts(schema_, plan, survivors, generator, decryptor):
    contribs = random_contributions(schema_, 5, seed=7)
    sums, t = CKKSAggregation().aggregate(schema_, contribs, dropouts=DropoutPlan(plan))
    assert t.survivors == survivors
    assert t.extra["ckks"]["generator"] == generator
    assert t.extra["ckks"]["decryptor"] == decryptor
    assert_close_to(sums, schema_, exact_sum(schema_, contribs, survivors))


def test_no_live_key_holder_aborts_with_nothing_revealed(schema_):
    contribs = random_contributions(schema_, 3, seed=8)
    p = CKKSAggregation(key_holders=1)
    with pytest.raises(ThresholdError, match="no key holder is alive"):
        p.aggregate(schema_, contribs, dropouts=DropoutPlan({0: "release"}))


def test_too_few_contributors_are_not_decrypted():
    s = small_schema(min_contributors=3)
    contribs = random_contributions(s, 3, seed=9)
    with pytest.raises(ReleaseRefusedError, match="nothing is revealed"):
        CKKSAggregation().aggregate(s, contribs, dropouts=DropoutPlan({2: "upload"}))


def test_block_release_rule_withholds():
    s = SumSchema([BlockSpec("a", (3,)), BlockSpec("cls", (2,), min_contributors=4)], max_clients=8)
    sums, t = CKKSAggregation().aggregate(s, random_contributions(s, 3, seed=10))
    assert sums.is_withheld("cls")
    with pytest.raises(WithheldBlockError):
        sums["cls"]
    rel = decode(next(m for m in t.view(SERVER) if m.phase == "release").payload, CKKSRelease)
    assert len(rel.arrays) == 1  # the withheld block never left the decryptor


def test_designated_recipient_keeps_the_sum(schema_):
    contribs = random_contributions(schema_, 4, seed=11)
    sums, t = CKKSAggregation(key_holders=1).aggregate(schema_, contribs, recipient=2)
    assert t.extra["ckks"]["decryptor"] == 2 and 2 in t.extra["ckks"]["key_holders"]
    assert not [m for m in t.view(SERVER) if m.phase == "release"]  # the server learns nothing
    assert_close_to(sums, schema_, exact_sum(schema_, contribs, (0, 1, 2, 3)))


# -- bad input and faults -------------------------------------------------------------------------------------


def _replace_ciphertext(client: int, make_blob):
    def hook(rec: MessageRecord) -> list[bytes]:
        if rec.phase == "upload" and rec.sender == client and rec.receiver == SERVER:
            msg = decode(rec.payload, CKKSUpload)
            cts = ((0, make_blob(msg.ciphertexts[0][1])), *msg.ciphertexts[1:])
            return [CKKSUpload(session_id=msg.session_id, ciphertexts=cts).to_bytes()]
        return [rec.payload]

    return hook


@pytest.mark.parametrize(
    "make_blob",
    [
        lambda blob: blob[: len(blob) // 2],  # truncated
        lambda blob: b"\x00" * 64,  # garbage
    ],
)
def test_undeserialisable_ciphertext_excludes_that_client(schema_, make_blob):
    contribs = random_contributions(schema_, 4, seed=12)
    sums, t = CKKSAggregation(interceptor=_replace_ciphertext(1, make_blob)).aggregate(schema_, contribs)
    assert t.excluded[1].startswith("MalformedMessageError")
    assert t.survivors == (0, 2, 3)
    assert_close_to(sums, schema_, exact_sum(schema_, contribs, (0, 2, 3)))


@pytest.mark.parametrize(
    ("n_poly", "coeff", "scale"), [(8192, [60, 60], 20), (16384, [60, 60], 29), (8192, [60, 60, 60], 29)]
)
def test_ciphertext_with_wrong_parameters_excludes_that_client(schema_, n_poly, coeff, scale):
    other = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=n_poly, coeff_mod_bit_sizes=coeff)
    other.global_scale = 2.0**scale
    blob = ts.ckks_vector(other, [0.0] * (n_poly // 2)).serialize()
    contribs = random_contributions(schema_, 3, seed=13)
    sums, t = CKKSAggregation(interceptor=_replace_ciphertext(2, lambda _: blob)).aggregate(schema_, contribs)
    assert "MalformedMessageError" in t.excluded[2]
    assert t.survivors == (0, 1)
    assert_close_to(sums, schema_, exact_sum(schema_, contribs, (0, 1)))


def test_mismatched_later_chunk_is_rolled_back():
    """A bad ciphertext after good ones: the chunks already added are subtracted again."""
    s = SumSchema([BlockSpec("x", (3 * 4096,), bound=1.0)], max_clients=8)
    params = CKKSAggregation().parameters(s)
    other = ts.context(
        ts.SCHEME_TYPE.CKKS, poly_modulus_degree=8192, coeff_mod_bit_sizes=list(params.coeff_mod_bit_sizes)
    )
    other.global_scale = 2.0 ** (params.scale_bits - 3)  # right level, wrong scale: only SEAL's add notices
    bad = ts.ckks_vector(other, [1.0] * params.slots).serialize()

    def hook(rec: MessageRecord) -> list[bytes]:
        if rec.phase == "upload" and rec.sender == 2 and rec.receiver == SERVER:
            msg = decode(rec.payload, CKKSUpload)
            cts = tuple((i, bad if i == 2 else b) for i, b in msg.ciphertexts)
            return [CKKSUpload(session_id=msg.session_id, ciphertexts=cts).to_bytes()]
        return [rec.payload]

    contribs = random_contributions(s, 4, seed=21)
    sums, t = CKKSAggregation(interceptor=hook).aggregate(s, contribs)
    assert "ciphertext 2 does not match" in t.excluded[2]
    assert t.survivors == (0, 1, 3)
    assert_close_to(sums, s, exact_sum(s, contribs, (0, 1, 3)))


def test_ciphertext_under_another_key_aborts_before_release(schema_):
    """Same parameters, another key: undetectable per client, caught by the decryptor's grid check."""
    params = CKKSAggregation().parameters(schema_)
    other = ts.context(
        ts.SCHEME_TYPE.CKKS, poly_modulus_degree=8192, coeff_mod_bit_sizes=list(params.coeff_mod_bit_sizes)
    )
    other.global_scale = 2.0**params.scale_bits
    blob = ts.ckks_vector(other, [5.0] * params.slots).serialize()
    contribs = random_contributions(schema_, 3, seed=14)
    with pytest.raises(ProtocolError, match="decryptor aborted.*off the integer grid"):
        CKKSAggregation(interceptor=_replace_ciphertext(1, lambda _: blob)).aggregate(schema_, contribs)


def test_server_lying_about_the_contributors_is_caught(schema_):
    def drop_one(rec: MessageRecord) -> list[bytes]:
        if rec.phase == "release" and rec.sender == SERVER:
            msg = decode(rec.payload, CKKSSumRequest)
            fake = CKKSSumRequest(
                session_id=msg.session_id, contributors=msg.contributors[:-1], ciphertexts=msg.ciphertexts
            )
            return [fake.to_bytes()]
        return [rec.payload]

    with pytest.raises(ProtocolError, match="holds 3 contributions but the server claims 2"):
        CKKSAggregation(interceptor=drop_one).aggregate(schema_, random_contributions(schema_, 3, seed=15))


def test_tampered_key_message_excludes_only_that_client(schema_):
    def flip(rec: MessageRecord) -> list[bytes]:
        if rec.phase == "upload" and rec.sender == SERVER and rec.receiver == 2:
            raw = bytearray(rec.payload)
            raw[-5] ^= 1  # inside the sealed key
            return [bytes(raw)]
        return [rec.payload]

    contribs = random_contributions(schema_, 4, seed=16)
    sums, t = CKKSAggregation(interceptor=flip).aggregate(schema_, contribs)
    assert t.excluded[2].startswith("InvalidMessage")
    assert t.survivors == (0, 1, 3)
    assert_close_to(sums, schema_, exact_sum(schema_, contribs, (0, 1, 3)))


def test_client_shown_another_context_cannot_join(schema_):
    contribs = random_contributions(schema_, 4, seed=17)
    ctx = {0: b"model-A", 1: b"model-A", 2: b"model-B", 3: b"model-A"}
    sums, t = CKKSAggregation().aggregate(schema_, contribs, context=ctx)
    assert 2 in t.excluded and t.survivors == (0, 1, 3)
    assert_close_to(sums, schema_, exact_sum(schema_, contribs, (0, 1, 3)))


def test_invalid_contribution_is_refused_by_its_client(schema_):
    contribs = random_contributions(schema_, 3, seed=18)
    contribs[1]["w"][0, 0] = float("nan")
    sums, t = CKKSAggregation().aggregate(schema_, contribs)
    assert t.excluded[1].startswith("EncodingError")
    assert t.survivors == (0, 2)


def test_duplicate_upload_is_discarded(schema_):
    def twice(rec: MessageRecord) -> list[bytes]:
        if rec.phase == "upload" and rec.sender == 0:
            return [rec.payload, rec.payload]
        return [rec.payload]

    contribs = random_contributions(schema_, 3, seed=19)
    sums, t = CKKSAggregation(interceptor=twice).aggregate(schema_, contribs)
    assert "more than one input" in t.excluded[0]
    assert t.survivors == (1, 2)


def test_argument_errors(schema_):
    contribs = random_contributions(schema_, 2, seed=20)
    with pytest.raises(ConfigError, match="recipient 7 is not an invited client"):
        CKKSAggregation().aggregate(schema_, contribs, recipient=7)
    with pytest.raises(OverflowRiskError):
        CKKSAggregation().aggregate(small_schema(max_clients=1), contribs)
    with pytest.raises(ConfigError, match="key_holders"):
        CKKSAggregation(key_holders=0)
    with pytest.raises(MalformedMessageError):
        decode(b"SF" + bytes([WIRE_VERSION, 0x55]) + b"\x00" * 10, CKKSUpload)


def test_registry_resolves_ckks_lazily():
    p = get_protocol("CKKS", key_holders=2)
    assert isinstance(p, CKKSAggregation) and p.key_holders == 2
    assert PHASES == ("advertise", "keys", "upload", "release")
    wrapped = get_protocol("ckks+dp", dp={"min_contributors": 2, "clip_norm": 1.0, "noise_multiplier": 1.0})
    assert type(wrapped).__name__ == "DistributedDP" and wrapped.label == "ckks+dp"
    assert isinstance(Path(__file__), Path)


# -- the peer channel (protocols/_channel.py) --------------------------------------------------------------


def test_peer_channel_authenticates_session_pair_and_direction():
    from securefgl.errors import InvalidMessage
    from securefgl.protocols._channel import ChannelKeys

    a, b = ChannelKeys(), ChannelKeys()
    sid = bytes(32)
    ab = a.channel(1, 2, b.public_bytes, session_id=sid, round_index=3, purpose="ckks-key")
    ba = b.channel(2, 1, a.public_bytes, session_id=sid, round_index=3, purpose="ckks-key")
    blob = ab.seal(b"secret context")
    assert ba.open(blob) == b"secret context"
    assert ab.seal(b"x") != ab.seal(b"x")  # fresh nonces
    with pytest.raises(InvalidMessage):
        ab.open(blob)  # the sender cannot replay its own message back to itself (direction-bound keys)
    for other in (
        b.channel(2, 1, a.public_bytes, session_id=b"\x01" * 32, round_index=3, purpose="ckks-key"),
        b.channel(2, 1, a.public_bytes, session_id=sid, round_index=4, purpose="ckks-key"),
        b.channel(2, 1, a.public_bytes, session_id=sid, round_index=3, purpose="secagg-shares"),
    ):
        with pytest.raises(InvalidMessage):
            other.open(blob)
    tampered = bytearray(blob)
    tampered[20] ^= 1
    with pytest.raises(InvalidMessage):
        ba.open(bytes(tampered))
    with pytest.raises(InvalidMessage):
        ba.open(blob[:20])
    with pytest.raises(InvalidMessage):  # a low-order point gives an all-zero shared secret
        a.channel(1, 2, bytes(32), session_id=sid, round_index=0, purpose="ckks-key")
