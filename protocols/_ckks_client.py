"""The CKKS client party: a stage machine, bytes in and bytes out.

Re-exported by :mod:`securefgl.protocols.ckks` (see its docstring for the stages). The client never
imports the server half.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import tenseal as ts

from securefgl.errors import (
    InconsistentViewError,
    InvalidMessage,
    MalformedMessageError,
    ProtocolError,
    StageOrderError,
)
from securefgl.protocols import _ckks_native as native
from securefgl.protocols._channel import ChannelKeys
from securefgl.protocols._ckks_keys import (
    check_ciphertext,
    check_context,
    ckks_session_id,
    new_context,
    save_secret_context,
)
from securefgl.protocols._ckks_messages import (
    CKKSAdvertise,
    CKKSAdvertiseRequest,
    CKKSKeys,
    CKKSKeysRequest,
    CKKSRelease,
    CKKSSumRequest,
    CKKSUpload,
    CKKSUploadRequest,
    decode_as,
    sums_to_wire,
)
from securefgl.protocols._ckks_params import (
    PROTOCOL_NAME,
    CKKSParameters,
    from_digits,
    slot_layout,
    to_digits,
)
from securefgl.protocols._release import (
    DEFAULT_MIN_CONTRIBUTORS,
    check_min_contributors,
    check_sum_range,
    refuse_small_sum,
)
from securefgl.protocols.base import Contribution, Sums
from securefgl.protocols.encoding import SumSchema, centred_lift

__all__ = ["CKKSClient"]


class CKKSClient:
    """A CKKS client's state machine for one session (bytes in, bytes out; see the module docstring).

    Args:
        party_id: the client id.
        schema: the schema it was configured with.
        params: the CKKS parameters it derived from the schema and its configuration.
        contribution: its named tensors.
        round_index: the round it expects.
        context: the public round context it was shown.
        save_secret_key: where a key generator writes its secret context (mode 0600), if anywhere.
    """

    def __init__(
        self,
        party_id: int,
        schema: SumSchema,
        params: CKKSParameters,
        contribution: Contribution,
        round_index: int,
        context: bytes,
        save_secret_key: Path | None = None,
        *,
        min_contributors: int = DEFAULT_MIN_CONTRIBUTORS,
    ) -> None:
        self.min_contributors = check_min_contributors(min_contributors)
        self.party_id = int(party_id)
        self.schema = schema
        self.params = params
        self.layout = slot_layout(schema, params.digit_bits, params.slots)
        self._contribution: Contribution | None = contribution
        self.round_index = int(round_index)
        self.context_digest = hashlib.sha256(bytes(context)).digest()
        self._save_to = save_secret_key
        self.stage = "start"
        self._keys: ChannelKeys | None = None
        self._request = b""
        self.roster: dict[int, bytes] = {}
        self.session_id = b""
        self.generator: int | None = None
        self._ctx: ts.Context | None = None
        self._secret: bytes | None = None  # serialised secret context (key holders only)
        self._sealed: dict[int, bytes] = {}
        self.recipient: int | None = None
        self.released: Sums | None = None
        self.release_info: dict[str, float] = {}
        #: Wall seconds of this client's steps (benchmarks): keygen, open_key, encrypt, load_secret_key, decrypt.
        self.timing: dict[str, float] = {}

    @property
    def holds_secret_key(self) -> bool:
        """Whether this client holds the secret key (a key holder after the keys stage)."""
        return self._secret is not None

    def handle(self, payload: bytes) -> bytes | None:
        if self.stage == "start":
            return self._advertise(payload)
        if self.stage in ("advertised", "keyed"):
            if len(payload) > 3 and payload[3] == CKKSKeysRequest.TYPE:
                return self._keys_stage(payload)
            return self._upload(payload)
        if self.stage == "uploaded":
            return self._release(payload)
        raise StageOrderError(
            f"request after the protocol finished (stage {self.stage})", party=self.party_id
        )

    # -- advertise ----------------------------------------------------------------------------------------

    def _advertise(self, payload: bytes) -> bytes:
        where: dict[str, Any] = {"party": self.party_id, "phase": "advertise"}
        req = decode_as(payload, CKKSAdvertiseRequest, **where)
        if req.schema_fingerprint != self.schema.fingerprint() or req.length != self.schema.length:
            raise InconsistentViewError(
                "the server's schema differs from the one this client was given", **where
            )
        if req.round_index != self.round_index or self.party_id not in req.invited:
            raise InconsistentViewError(
                f"request for round {req.round_index} does not invite this client (round {self.round_index})",
                **where,
            )
        if req.protocol != PROTOCOL_NAME or req.params != json.dumps(self.params.canonical(), sort_keys=True):
            raise InconsistentViewError(
                f"the server's CKKS parameters {req.params} differ from this client's "
                f"{self.params.canonical()}",
                **where,
            )
        self._request = payload
        self.recipient = req.recipient
        self._keys = ChannelKeys()
        self.stage = "advertised"
        return CKKSAdvertise(public_key=self._keys.public_bytes).to_bytes()

    # -- keys ---------------------------------------------------------------------------------------------

    def _channel(self, peer: int) -> Any:
        if self._keys is None:  # pragma: no cover - guarded by the stage
            raise StageOrderError("no channel key yet", party=self.party_id)
        return self._keys.channel(
            self.party_id,
            peer,
            self.roster[peer],
            session_id=self.session_id,
            round_index=self.round_index,
            purpose="ckks-key",
        )

    def _keys_stage(self, payload: bytes) -> bytes | None:
        where: dict[str, Any] = {"party": self.party_id, "phase": "keys"}
        req = decode_as(payload, CKKSKeysRequest, **where)
        roster = dict(req.roster)
        if len(roster) != len(req.roster):
            raise InconsistentViewError("the roster lists a client twice", **where)
        if self._keys is None or roster.get(self.party_id) != self._keys.public_bytes:
            raise InconsistentViewError("the roster does not carry this client's own key", **where)
        if len(set(roster.values())) != len(roster):
            raise InconsistentViewError("the roster repeats a public key", **where)
        if (
            req.generator not in roster
            or not set(req.holders) <= set(roster)
            or req.generator not in req.holders
        ):
            raise InconsistentViewError("the key generator or a key holder is not in the roster", **where)
        if self.stage == "keyed" and roster != self.roster:
            raise InconsistentViewError("a second keys request changed the roster", **where)
        self.roster = roster
        self.session_id = ckks_session_id(self._request, tuple(req.roster), self.context_digest)
        self.generator = req.generator
        self.stage = "keyed"
        if req.generator != self.party_id:
            return None
        return self._generate(set(req.holders))

    def _generate(self, holders: set[int]) -> bytes:
        t0 = time.perf_counter()
        secret, public = new_context(self.params)
        if self._save_to is not None:
            save_secret_context(self._save_to, secret)
        self._secret = secret
        self._ctx = ts.context_from(public)
        sealed = []
        for peer in sorted(self.roster):
            if peer == self.party_id:
                continue
            kind, blob = (b"S", secret) if peer in holders else (b"P", public)
            sealed.append((peer, self._channel(peer).seal(kind + blob)))
        out = CKKSKeys(session_id=self.session_id, public_context=public, sealed=tuple(sealed)).to_bytes()
        self.timing["keygen"] = time.perf_counter() - t0
        return out

    # -- upload -------------------------------------------------------------------------------------------

    def _upload(self, payload: bytes) -> bytes:
        where: dict[str, Any] = {"party": self.party_id, "phase": "upload"}
        if self.stage != "keyed" or self.generator is None:
            raise StageOrderError("upload request before the keys stage", **where)
        req = decode_as(payload, CKKSUploadRequest, **where)
        if req.session_id != self.session_id:
            raise InconsistentViewError(
                "the key generator's session differs from this client's view", **where
            )
        t0 = time.perf_counter()
        if self.generator != self.party_id:
            plain = self._channel(self.generator).open(req.sealed)  # InvalidMessage on any failure
            private = plain[:1] == b"S"
            if plain[:1] not in (b"S", b"P"):
                raise InvalidMessage()
            try:
                ctx = ts.context_from(plain[1:])
            except Exception as exc:  # noqa: BLE001 - TenSEAL raises assorted types on bad input
                raise MalformedMessageError(
                    f"key context does not deserialise ({type(exc).__name__})", **where
                ) from None
            check_context(ctx, self.params, private=private)
            if private:
                self._secret = plain[1:]
                ctx.make_context_public()  # encrypt with the public key; keep the secret only as bytes
            self._ctx = ctx
        elif req.sealed:
            raise MalformedMessageError("the key generator was sent a key", **where)
        if self._contribution is None or self._ctx is None:  # pragma: no cover - guarded by the stage
            raise StageOrderError("nothing to upload", **where)
        t1 = time.perf_counter()
        enc = self.schema.encode(self._contribution)
        self._contribution = None  # sent: keep nothing
        vec = to_digits(self.layout, centred_lift(enc.data, self.schema.ring_bits), enc.clip_counts)
        rows = vec.reshape(self.layout.chunks, self.layout.slots)
        cts = tuple((i, native.encrypt(self._ctx, row)) for i, row in enumerate(rows))
        self._ctx = None  # decryption (key holders) uses the secret context bytes
        self.stage = "uploaded"
        out = CKKSUpload(session_id=self.session_id, ciphertexts=cts).to_bytes()
        self.timing["open_key"] = t1 - t0
        self.timing["encrypt"] = time.perf_counter() - t1
        return out

    # -- release ------------------------------------------------------------------------------------------

    def _release(self, payload: bytes) -> bytes | None:
        where: dict[str, Any] = {"party": self.party_id, "phase": "release"}
        req = decode_as(payload, CKKSSumRequest, **where)
        self.stage = "done"
        if self._secret is None:
            raise ProtocolError("asked to decrypt without holding the secret key", **where)
        if self.recipient is not None and self.recipient != self.party_id:
            raise ProtocolError(f"asked to decrypt a sum designated for client {self.recipient}", **where)
        if req.session_id != self.session_id:
            raise InconsistentViewError("the sum belongs to another session", **where)
        lay, params, schema = self.layout, self.params, self.schema
        n = len(req.contributors)
        if len(set(req.contributors)) != n or not set(req.contributors) <= set(self.roster) or n == 0:
            raise InconsistentViewError("the claimed contributors are not distinct roster members", **where)
        refuse_small_sum(n, self.min_contributors, schema.min_contributors, "release", self.party_id)
        if [i for i, _ in req.ciphertexts] != list(range(lay.chunks)):
            raise MalformedMessageError(f"expected ciphertexts 0..{lay.chunks - 1}", **where)
        t0 = time.perf_counter()
        ctx = ts.context_from(self._secret)
        self._secret = None  # one decryption per key
        self.timing["load_secret_key"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        dec = np.empty(lay.chunks * lay.slots, dtype=np.float64)
        for i, blob in req.ciphertexts:
            try:
                v = native.load(ctx, blob)
                check_ciphertext(v, params, ctx, full=i == 0)  # a mismatch elsewhere fails the grid check
            except Exception as exc:  # noqa: BLE001
                raise MalformedMessageError(f"sum ciphertext {i} rejected ({exc})", **where) from None
            native.decrypt_into(v, dec[i * lay.slots : (i + 1) * lay.slots])
        del ctx
        ring, clip, dev = from_digits(lay, schema, dec, n, params, where)
        values = schema.decode(ring, n)
        errors = schema.error_bound(n)
        check_sum_range(schema.blocks, values, n, errors, clip, "release")
        sums = schema.release(values, n, clip, errors)
        self.release_info = {"max_grid_deviation": dev, "error_bound": params.error_bound(n)}
        if self.recipient is not None:
            self.released = sums
            self.timing["decrypt"] = time.perf_counter() - t0
            return None
        header, arrays = sums_to_wire(sums)
        out = CKKSRelease(session_id=self.session_id, header=header, arrays=arrays).to_bytes()
        self.timing["decrypt"] = time.perf_counter() - t0
        return out

    def forget(self) -> None:
        """Drop key material and inputs at the end of the session (TenSEAL offers no secure wipe)."""
        self._ctx = None
        self._secret = None
        self._contribution = None
