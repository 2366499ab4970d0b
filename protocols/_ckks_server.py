"""The CKKS server party: relays keys, adds ciphertexts and asks one key holder to decrypt.

Re-exported by :mod:`securefgl.protocols.ckks` (see its docstring for the stages). The server never
holds a secret key and never imports the client half.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import tenseal as ts

from securefgl.errors import (
    InconsistentViewError,
    MalformedMessageError,
    ProtocolError,
    StageOrderError,
    ThresholdError,
)
from securefgl.protocols import _ckks_native as native
from securefgl.protocols._ckks_keys import check_ciphertext, check_context
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
    sums_from_fields,
)
from securefgl.protocols._ckks_params import PHASES, PROTOCOL_NAME, CKKSParameters, slot_layout
from securefgl.protocols._release import DEFAULT_MIN_CONTRIBUTORS, check_min_contributors, refuse_small_sum
from securefgl.protocols.base import SERVER, Sums, Transcript
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.router import Outgoing

__all__ = ["CKKSServer"]


def _add_all_or_nothing(
    acc: list[native.NativeVector], vecs: list[native.NativeVector], where: Mapping[str, Any]
) -> None:
    """``acc += vecs`` chunk by chunk; if SEAL refuses a chunk (level, scale, size), undo the others."""
    done = 0
    try:
        for a, v in zip(acc, vecs, strict=True):
            a.add_(v)
            done += 1
    except Exception as exc:  # noqa: BLE001 - SEAL raises ValueError/RuntimeError on mismatched operands
        for a, v in zip(acc[:done], vecs[:done], strict=True):
            a.sub_(v)
        raise MalformedMessageError(
            f"ciphertext {done} does not match the session's parameters ({exc})", **where
        ) from None


class CKKSServer:
    """The CKKS server: relays, adds ciphertexts, asks one key holder to decrypt; never holds a secret key.

    Args:
        schema: the schema of the sum.
        params: the CKKS parameters.
        invited: the invited client ids.
        round_index: the round.
        recipient: the designated recipient, or ``None`` (the sum is released to the server).
        key_holders: ``"all"`` or how many clients receive the secret key.
        key_generator: the configured key generator, or ``None``.
        transcript: where exclusions are recorded.
    """

    stages: tuple[str, ...] = PHASES

    def __init__(
        self,
        schema: SumSchema,
        params: CKKSParameters,
        invited: Sequence[int],
        round_index: int,
        recipient: int | None,
        key_holders: Literal["all"] | int,
        key_generator: int | None,
        transcript: Transcript,
        *,
        min_contributors: int = DEFAULT_MIN_CONTRIBUTORS,
    ) -> None:
        self.min_contributors = check_min_contributors(min_contributors)
        self.schema = schema
        self.params = params
        self.layout = slot_layout(schema, params.digit_bits, params.slots)
        self.invited = tuple(invited)
        self.recipient = recipient
        self.key_holders = key_holders
        self.key_generator = key_generator
        self.transcript = transcript
        self.request = CKKSAdvertiseRequest(
            protocol=PROTOCOL_NAME,
            round_index=int(round_index),
            invited=self.invited,
            recipient=recipient,
            length=schema.length,
            schema_fingerprint=schema.fingerprint(),
            params=json.dumps(params.canonical(), sort_keys=True),
        )
        self.roster: dict[int, bytes] = {}
        self.tried: list[int] = []
        self.generator: int | None = None
        self.holders: tuple[int, ...] = ()
        self.session_id = b""
        self.public_context: ts.Context | None = None
        self.contributors: tuple[int, ...] = ()
        self.decryptor: int | None = None
        self._asked: list[int] = []
        self._sum = b""
        self.sums: Sums | None = None
        self.finished = False
        #: Wall seconds of the server's steps: add (validate, deserialise, add), sum (serialise).
        self.timing: dict[str, float] = {}

    def _exclude(self, client: int, error: Exception) -> None:
        self.transcript.excluded.setdefault(client, f"{type(error).__name__}: {error}")

    def start(self) -> Outgoing:
        return Outgoing("advertise", dict.fromkeys(self.invited, self.request.to_bytes()))

    def handle(self, stage: str, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        if stage == "advertise":
            return self._roster(replies)
        if stage == "keys":
            return self._keys(replies)
        if stage == "upload":
            return self._add(replies)
        if stage == "release":
            return self._released(replies)
        raise StageOrderError(f"unexpected stage {stage!r}; valid: {list(PHASES)}", party=SERVER)

    @staticmethod
    def _once(replies: Sequence[tuple[int, bytes]]) -> tuple[dict[int, bytes], set[int]]:
        seen: dict[int, list[bytes]] = {}
        for c, p in replies:
            seen.setdefault(c, []).append(p)
        return {c: ps[0] for c, ps in seen.items() if len(ps) == 1}, {
            c for c, ps in seen.items() if len(ps) > 1
        }

    def _roster(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ok, dup = self._once(replies)
        for c in dup:
            self._exclude(c, StageOrderError("sent more than one advertisement", party=c, phase="advertise"))
        keys: dict[int, bytes] = {}
        for c, payload in ok.items():
            if c not in self.invited:
                continue
            try:
                keys[c] = decode_as(payload, CKKSAdvertise, c, "advertise").public_key
            except MalformedMessageError as exc:
                self._exclude(c, exc)
        seen: dict[bytes, int] = {}
        for c in sorted(keys):
            if keys[c] in seen:
                self._exclude(
                    c, InconsistentViewError("advertised another client's key", party=c, phase="advertise")
                )
            else:
                seen[keys[c]] = c
        self.roster = {c: k for k, c in seen.items()}
        if not self.roster:
            raise ThresholdError(
                "no client advertised a key; nothing revealed", party=SERVER, phase="advertise"
            )
        return self._next_generator()

    def _next_generator(self) -> Outgoing:
        members = [c for c in sorted(self.roster) if c not in self.transcript.excluded]
        if self.key_generator is not None:
            candidates = [self.key_generator] if self.key_generator in self.roster else []
        else:
            candidates = members
        candidates = [c for c in candidates if c not in self.tried]
        if not candidates:
            raise ThresholdError(
                "no key generator is available; nothing revealed", party=SERVER, phase="keys"
            )
        g = candidates[0]
        self.tried.append(g)
        ranked = [g] + ([self.recipient] if self.recipient is not None and self.recipient not in (g,) else [])
        ranked += [c for c in members if c not in ranked]
        ranked = [c for c in ranked if c in members]
        holders = ranked if self.key_holders == "all" else ranked[: int(self.key_holders)]
        if self.recipient is not None and self.recipient in members and self.recipient not in holders:
            holders.append(self.recipient)
        self.generator, self.holders = g, tuple(holders)
        req = CKKSKeysRequest(roster=tuple(sorted(self.roster.items())), generator=g, holders=self.holders)
        return Outgoing("keys", dict.fromkeys(members, req.to_bytes()))

    def _keys(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ok, dup = self._once(replies)
        for c in dup | (set(ok) - {self.generator}):
            self._exclude(c, StageOrderError("sent an unrequested keys message", party=c, phase="keys"))
            ok.pop(c, None)
        g = self.generator
        if g not in ok:
            return self._next_generator()  # the generator dropped out or aborted: ask the next client
        try:
            msg = decode_as(ok[g], CKKSKeys, g, "keys")
            ctx = ts.context_from(msg.public_context)
        except MalformedMessageError as exc:
            self._exclude(g, exc)
            return self._next_generator()
        except Exception as exc:  # noqa: BLE001 - TenSEAL raises assorted types on bad input
            self._exclude(g, MalformedMessageError(f"public context does not deserialise ({exc})", party=g))
            return self._next_generator()
        if ctx.is_private() or ctx.has_secret_key():
            del ctx
            self._exclude(
                g, ProtocolError("sent the server a context holding the secret key", party=g, phase="keys")
            )
            return self._next_generator()
        try:
            check_context(ctx, self.params, private=False)
        except InconsistentViewError as exc:
            self._exclude(g, exc)
            return self._next_generator()
        sealed = dict(msg.sealed)
        self.public_context = ctx
        self.session_id = msg.session_id
        out = {}
        for c in sorted(self.roster):
            if c in self.transcript.excluded:
                continue
            if c == g:
                out[c] = CKKSUploadRequest(session_id=msg.session_id, sealed=b"").to_bytes()
            elif c in sealed:
                out[c] = CKKSUploadRequest(session_id=msg.session_id, sealed=sealed[c]).to_bytes()
        return Outgoing("upload", out)

    def _add(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ok, dup = self._once(replies)
        for c in dup:
            self._exclude(
                c, StageOrderError("sent more than one input; all discarded", party=c, phase="upload")
            )
        t0 = time.perf_counter()
        ctx = self.public_context
        if ctx is None:  # pragma: no cover - guarded by the stage order
            raise StageOrderError("upload before the keys stage", party=SERVER, phase="upload")
        acc: list[native.NativeVector] | None = None
        contributors = []
        for c in sorted(ok):
            if c in self.transcript.excluded or c not in self.roster:
                continue
            where: dict[str, Any] = {"party": c, "phase": "upload"}
            try:
                msg = decode_as(ok[c], CKKSUpload, c, "upload")
                if msg.session_id != self.session_id:
                    raise InconsistentViewError("input for another session", **where)
                if [i for i, _ in msg.ciphertexts] != list(range(self.layout.chunks)):
                    raise MalformedMessageError(
                        f"sent {len(msg.ciphertexts)} ciphertexts, expected {self.layout.chunks} in order (a vector "
                        "longer or shorter than the schema)",
                        **where,
                    )
                vecs = []
                for i, blob in msg.ciphertexts:
                    try:
                        v = native.load(ctx, blob)
                        check_ciphertext(v, self.params, ctx, full=acc is None or i == 0)
                    except Exception as exc:  # noqa: BLE001 - TenSEAL/SEAL raise assorted types on bad input
                        raise MalformedMessageError(f"ciphertext {i} rejected: {exc}", **where) from None
                    vecs.append(v)
                if acc is not None:
                    _add_all_or_nothing(acc, vecs, where)
            except ProtocolError as exc:
                self._exclude(c, exc)
                continue
            if acc is None:
                acc = vecs
            contributors.append(c)
        self.contributors = tuple(contributors)
        self.timing["add"] = time.perf_counter() - t0
        n = len(contributors)
        if n == 0:
            raise ThresholdError(
                "no client uploaded a valid ciphertext; nothing revealed", party=SERVER, phase="upload"
            )
        refuse_small_sum(n, self.min_contributors, self.schema.min_contributors, "upload", SERVER)
        if acc is None:  # pragma: no cover - n > 0 above
            raise ThresholdError("no ciphertext to add", party=SERVER, phase="upload")
        t0 = time.perf_counter()
        self._sum = CKKSSumRequest(
            session_id=self.session_id,
            contributors=self.contributors,
            ciphertexts=tuple((i, v.serialize()) for i, v in enumerate(acc)),
        ).to_bytes()
        self.timing["sum"] = time.perf_counter() - t0
        return self._ask_decryptor()

    def _ask_decryptor(self) -> Outgoing:
        order = [c for c in self.holders if c in self.contributors and c not in self._asked]
        if self.recipient is not None:
            order = [c for c in order if c == self.recipient]
        for c in order:
            if c in self.transcript.excluded:
                continue
            self._asked.append(c)
            self.decryptor = c
            return Outgoing("release", {c: self._sum})
        raise ThresholdError(
            "no key holder is alive to decrypt the sum; nothing revealed", party=SERVER, phase="release"
        )

    def _released(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        d = self.decryptor
        ok, _ = self._once(replies)
        if d is not None and d in self.transcript.excluded:
            raise ProtocolError(
                f"the decryptor aborted ({self.transcript.excluded[d]}); nothing released",
                party=SERVER,
                phase="release",
            )
        if self.recipient is not None:
            self.finished = True  # the recipient keeps the sum; the server learns nothing
            return None
        if d not in ok:
            return self._ask_decryptor()  # the decryptor dropped out: ask the next key holder
        try:
            msg = decode_as(ok[d], CKKSRelease, d, "release")
            if msg.session_id != self.session_id:
                raise InconsistentViewError("release for another session", party=d, phase="release")
            self.sums = sums_from_fields([msg.header, *[b for _, b in msg.arrays]], self.schema)
        except ProtocolError:
            raise
        except Exception as exc:  # noqa: BLE001 - a garbled release
            raise MalformedMessageError(f"undecodable release ({exc})", party=d, phase="release") from None
        self.finished = True
        return None
