"""Fixed-point encoding of named tensors into one vector over the ring :math:`\\mathbb{Z}_{2^k}`.

Every protocol sums the same thing: a flat vector built from a client's *contribution* (a mapping of
block name to tensor) as declared by a :class:`SumSchema`. This module validates a contribution against
its schema (names, shapes, dtypes, NaN/Inf, bounds), clips or rejects out-of-bound values, packs the
blocks into one ``float64`` vector (plaintext, CKKS) or encodes them as ring elements (masking
protocols), decodes ring sums, states the error of the decoded sum, and applies the release rules that
every protocol shares.

.. admonition:: Hazmat

    The ring helpers (:func:`ring_add`, :func:`ring_sub`, ...) and :meth:`SumSchema.encode` are
    building blocks for protocol implementers. Algorithms never call them: they hand a contribution to a
    protocol and receive :class:`~securefgl.protocols.sums.Sums`.

Encoding (per block :math:`b` with public bound :math:`B_b`, scale :math:`s_b = 2^{f_b}`):

.. math::

    \\mathrm{enc}(x) = \\mathrm{SR}\\big(s_b \\cdot \\mathrm{clip}(x, -B_b, B_b)\\big) \\bmod 2^k,
    \\qquad \\mathrm{SR}(y) = \\lfloor y \\rfloor + \\mathbb{1}[u < y - \\lfloor y \\rfloor],\\;
    u \\sim U[0, 1),

    \\mathrm{dec}(r) = \\mathrm{lift}(r) / s_b,\\qquad
    \\mathrm{lift}(r) = r - 2^k\\,\\mathbb{1}[r \\ge 2^{k-1}].

Stochastic rounding is unbiased, :math:`\\mathbb{E}[\\mathrm{SR}(y)] = y`: the uniform :math:`u` is
:math:`w` bits of an AES-256-CTR keystream under a key from the OS CSPRNG (:class:`RoundingBits`; never a
numpy or torch generator), :math:`w = 32` for ``float32`` input (rounded in ``float32``) and
:math:`w = 64` for ``float64``, so the expectation is exact whenever :math:`y` has at most :math:`w`
fractional bits (every :math:`|y| \\ge 2^{-9}` for ``float32``, :math:`2^{-12}` for ``float64``) and
off by less than :math:`2^{-w}` of a step otherwise. Encoding, rounding and writing into the ring words is one fused pass over chunks
(:meth:`SumSchema.encode_into`). Real blocks use the
largest power-of-two step :math:`\\Delta = 2^{-f} \\le` ``precision``; count blocks are integers in
:math:`[0, B_b]` with :math:`s_b = 1` (exact). With :math:`M_b = \\lceil s_b B_b \\rceil` the largest
encoded magnitude of one element, the sum over at most ``max_clients`` :math:`=N` clients lies in
:math:`[-N M_b, N M_b]`; the centred lift recovers it exactly iff :math:`N M_b \\le 2^{k-1} - 1`, so

.. math::

    k = 1 + \\max_b \\operatorname{bitlen}(N M_b) \\; (+\\,\\text{extra\\_bits}) \\le 64,

and a schema needing more than 64 bits is refused with :class:`~securefgl.errors.OverflowRiskError`.

Error model of a decoded sum of :math:`n` encodings (per element, before the release cast):
worst case :math:`|\\hat S - S| < n\\Delta`; the errors are independent and zero-mean, each with
variance :math:`\\le \\Delta^2/4`, so the standard deviation is :math:`\\le \\sqrt{n}\\,\\Delta/2`
(see ``../shared/specs/secure-aggregation-anchors.md`` §1.9). :meth:`SumSchema.error_bound` returns
the worst case plus the rounding of the cast to the block's output dtype.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from securefgl.errors import ConfigError, EncodingError, OverflowRiskError
from securefgl.protocols._blocks import BlockSpec, EncodedVector
from securefgl.protocols._buffers import recycled
from securefgl.protocols._fixed_point import (
    MAX_PRECISION,
    MIN_PRECISION,
    cast_error,
    check_output_dtypes,
    grid_exponents,
    max_encoded_magnitudes,
    ring_bits_for,
)
from securefgl.protocols._release import check_sum_range, release_sums
from securefgl.protocols._ring import (
    centred_lift,
    default_rng,
    ring_add,
    ring_from_bytes,
    ring_from_signed,
    ring_mask,
    ring_neg,
    ring_reduce,
    ring_sub,
    ring_sum,
)
from securefgl.protocols._rounding import RoundingBits, encode_real_into
from securefgl.protocols._small_blocks import SmallBlocks
from securefgl.protocols._validation import (
    check_names,
    fast_real_input,
    rounding_source,
    to_numpy,
    validate_block,
    validate_contribution,
)
from securefgl.protocols.sums import Sums

__all__ = [
    "BlockSpec",
    "EncodedVector",
    "RoundingBits",
    "SumSchema",
    "centred_lift",
    "check_sum_range",
    "default_rng",
    "ring_add",
    "ring_from_bytes",
    "ring_from_signed",
    "ring_mask",
    "ring_neg",
    "ring_reduce",
    "ring_sub",
    "ring_sum",
]

#: Version tag hashed into :meth:`SumSchema.fingerprint`; bump when the encoding changes.
ENCODING_VERSION = "securefgl.encoding.v1"


class SumSchema:
    """The public description of a sum: ordered named blocks, bounds, fixed point, ring and rules.

    Built by an algorithm step, shared by all parties (its :meth:`fingerprint` is bound into session
    ids), and used by every protocol to validate, pack, encode, decode and release.

    Args:
        blocks: the blocks, in packing order (names unique).
        max_clients: the most clients whose contributions may ever be summed under this schema; the
            ring is sized so that their worst-case sum cannot wrap around.
        precision: the largest allowed quantisation step of real blocks; the step used is the largest
            power of two :math:`\\le` ``precision``, in :math:`[2^{-64}, 2^{64}]`.
            (default: :math:`2^{-20}`)
        min_contributors: release rule for the whole schema: :meth:`release` raises
            :class:`~securefgl.errors.ReleaseRefusedError` for a sum of fewer clients. (default: ``1``)
        extra_bits: ring bits added above the worst case (e.g. headroom for integer DP noise added
            inside the ring). (default: ``0``)

    Raises:
        ConfigError: invalid blocks or parameters.
        OverflowRiskError: the worst-case sum needs more than 64 bits (the message gives the numbers).

    Shapes:
        A flat vector is ``(length,)``: the blocks' row-major flattenings concatenated in order;
        ``slices[name]`` locates a block in it.
    """

    def __init__(
        self,
        blocks: Sequence[BlockSpec],
        *,
        max_clients: int,
        precision: float = 2.0**-20,
        min_contributors: int = 1,
        extra_bits: int = 0,
    ) -> None:
        blocks = tuple(blocks)
        precision = _check_arguments(blocks, max_clients, precision, min_contributors, extra_bits)
        names = [b.name for b in blocks]
        by_name = {b.name: b for b in blocks}
        _check_counted_by(blocks, by_name, names)

        self.blocks: tuple[BlockSpec, ...] = blocks
        self.names: tuple[str, ...] = tuple(names)
        self.max_clients = int(max_clients)
        self.precision = precision
        self.min_contributors = int(min_contributors)
        self.extra_bits = int(extra_bits)
        self._by_name = by_name

        offset = 0
        self.slices: dict[str, slice] = {}
        for b in blocks:
            self.slices[b.name] = slice(offset, offset + b.size)
            offset += b.size
        self.length: int = offset

        self._exponents: dict[str, int] = grid_exponents(blocks, precision)
        self.max_encoded: dict[str, int] = max_encoded_magnitudes(blocks, self._exponents)
        bits = ring_bits_for(
            blocks,
            self._exponents,
            self.max_encoded,
            max_clients=self.max_clients,
            extra_bits=self.extra_bits,
            precision=precision,
        )
        check_output_dtypes(blocks, self.max_clients)

        self.ring_bits: int = max(bits, 2)
        self.modulus: int = 1 << self.ring_bits
        self.scales: dict[str, float] = {n: math.ldexp(1.0, f) for n, f in self._exponents.items()}
        self.steps: dict[str, float] = {n: math.ldexp(1.0, -f) for n, f in self._exponents.items()}
        self._fingerprint: bytes | None = None
        self._small: dict[int, SmallBlocks] = {}

    # -- lookups -------------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> BlockSpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise ConfigError(f"no block {name!r} in schema; blocks: {list(self.names)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self.blocks)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SumSchema) and self.fingerprint() == other.fingerprint()

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        blocks = ", ".join(f"{b.name}{b.shape}:{b.kind}<={b.bound:g}" for b in self.blocks)
        return (
            f"SumSchema([{blocks}], max_clients={self.max_clients}, precision={self.precision!r}, "
            f"ring_bits={self.ring_bits}, min_contributors={self.min_contributors})"
        )

    def check_num_clients(self, n: int) -> None:
        """Raise :class:`OverflowRiskError` if a sum of ``n`` contributions could wrap the ring."""
        if n > self.max_clients:
            raise OverflowRiskError(
                f"{n} contributions exceed the schema's max_clients={self.max_clients}: their sum could "
                f"wrap around the {self.ring_bits}-bit ring; build the schema with max_clients >= {n}"
            )

    # -- validation and packing ----------------------------------------------------------------------

    def _validated(self, contribution: Mapping[str, Any]) -> tuple[list[np.ndarray], dict[str, int]]:
        return validate_contribution(self.blocks, self.names, contribution)

    def round_to_grid(
        self, contribution: Mapping[str, Any], rng: np.random.Generator, *, skip_dp: bool = False
    ) -> dict[str, Any]:
        """Round the real blocks of a contribution onto this schema's fixed-point grid, on the client.

        Unbiased stochastic rounding to the step :math:`\\Delta_b` of each real block, drawn from ``rng``
        (a seeded client stream, so a run is reproducible). On-grid values are encoded exactly by every
        fixed-point protocol (the protocol's own rounding has nothing left to do) and their sum is exact
        in float64, so plaintext and secure aggregation release bit-identical sums of the rounded
        contribution, and a multi-round run does not depend on the protocol. Rounding is not a privacy
        mechanism: the released sum is at most as informative as the exact sum.

        Args:
            contribution: block name -> tensor/array (validated later by the protocol: unknown names,
                wrong shapes and non-finite values pass through untouched, to be rejected there).
            rng: the client's rounding generator.
            skip_dp: leave DP blocks to the protocol (a ``+dp`` protocol clips and noises them first).

        Returns:
            A new mapping: rounded real blocks as CPU ``float64`` tensors, every other entry as given.
            In-bound values stay in bound (clamped to the largest on-grid magnitude :math:`\\le B`);
            out-of-bound values are left as they are for the protocol to clip and count, so they are
            exact too when :math:`B` is on the grid (any integer bound is).
        """
        out = dict(contribution)
        for spec in self.blocks:
            if spec.kind != "real" or (skip_dp and spec.dp) or spec.name not in out:
                continue
            arr = to_numpy(spec.name, out[spec.name])
            if arr.dtype.kind != "f":
                continue
            flat = arr.reshape(-1)
            # two reductions instead of an elementwise mask: NaN propagates through min/max, +-inf shows
            lo, hi = (float(flat.min()), float(flat.max())) if flat.size else (0.0, 0.0)
            if not (math.isfinite(lo) and math.isfinite(hi)):
                continue
            y = np.multiply(flat, self.scales[spec.name], dtype=np.float64)  # exact: power of two
            fl = np.floor(y)
            y -= fl
            fl += rng.random(y.shape[0]) < y
            top = math.floor(spec.bound * self.scales[spec.name])  # the largest on-grid magnitude <= B
            np.clip(fl, -top, top, out=fl)
            fl *= self.steps[spec.name]
            if max(-lo, hi) > spec.bound:
                x = flat.astype(np.float64)
                outside = np.flatnonzero(np.abs(x) > spec.bound)
                fl[outside] = x[outside]
            out[spec.name] = torch.from_numpy(fl.reshape(arr.shape))
        return out

    def validate(self, contribution: Mapping[str, Any]) -> dict[str, int]:
        """Check a contribution against the schema (names, shapes, dtypes, finiteness, bounds).

        Returns:
            block name -> number of elements that would be clipped.

        Raises:
            EncodingError: naming the block, what was expected and what was received.
        """
        return self._validated(contribution)[1]

    def pack(self, contribution: Mapping[str, Any]) -> tuple[np.ndarray, dict[str, int]]:
        """Validate, clip and flatten a contribution into one ``float64`` vector.

        Returns:
            ``(flat, clip_counts)``: the ``(length,)`` float64 vector and block name -> clipped count.

        Raises:
            EncodingError: wrong names, shapes or dtypes, NaN/Inf, or out of bound in ``"reject"`` mode.
        """
        parts, clips = self._validated(contribution)
        flat = np.empty(self.length, dtype=np.float64)
        for spec, vals in zip(self.blocks, parts, strict=True):
            flat[self.slices[spec.name]] = vals
        return flat, clips

    def _check_flat(self, flat: np.ndarray, what: str) -> np.ndarray:
        if not isinstance(flat, np.ndarray) or flat.ndim != 1 or flat.shape[0] != self.length:
            got = tuple(flat.shape) if isinstance(flat, np.ndarray) else type(flat).__name__
            raise EncodingError(f"{what}: expected a numpy vector of shape ({self.length},), received {got}")
        return flat

    def _to_tensor(self, spec: BlockSpec, values: np.ndarray) -> torch.Tensor:
        dt = spec.out_dtype
        arr = values.reshape(spec.shape)
        if not dt.is_floating_point:
            arr = np.rint(arr) if arr.dtype.kind == "f" else arr
            # np.array (not ascontiguousarray, which turns 0-d arrays into 1-d ones)
            return torch.from_numpy(np.array(arr, dtype=np.int64, order="C")).to(dt)
        return torch.from_numpy(np.array(arr, dtype=np.float64, order="C")).to(dt)

    def unpack(self, flat: np.ndarray) -> dict[str, torch.Tensor]:
        """Split a flat float vector (e.g. a plaintext sum) into named tensors with the declared dtypes.

        Count blocks with an integer dtype are rounded to the nearest integer.
        """
        if isinstance(flat, torch.Tensor):
            flat = flat.detach().cpu().to(torch.float64).numpy()
        flat = self._check_flat(flat, "unpack")
        return {s.name: self._to_tensor(s, flat[self.slices[s.name]]) for s in self.blocks}

    # -- ring encoding --------------------------------------------------------------------------------

    def encode(
        self, contribution: Mapping[str, Any], rng: RoundingBits | np.random.Generator | None = None
    ) -> EncodedVector:
        """Validate, clip and encode a contribution as ring elements with unbiased stochastic rounding.

        Args:
            contribution: block name -> tensor/array, exactly the schema's blocks and shapes.
            rng: the rounding bits (default: a fresh :class:`RoundingBits`, an AES-256-CTR keystream
                under a key from ``os.urandom``). A ``numpy.random.Generator`` is accepted for
                reproducible tests only: it seeds an insecure :meth:`RoundingBits.insecure_seeded`
                stream (32 bytes drawn from it); the bits never come from numpy.

        Returns:
            The encoded vector (``uint64``, ``(length,)``, values ``< modulus``) and the clip counts.

        Raises:
            EncodingError: as :meth:`pack`.
        """
        bits = rounding_source(rng)
        data = np.empty(self.length, dtype=np.uint64)
        clips = self.encode_into(contribution, data, bits)
        ring_reduce(data, self.ring_bits, out=data)
        return EncodedVector(data=data, clip_counts=clips)

    def encode_into(
        self, contribution: Mapping[str, Any], out: np.ndarray, bits: RoundingBits
    ) -> dict[str, int]:
        """Hazmat: validate, clip and encode into the ring words ``out``, in one fused pass per block (the
        small blocks in one batch: :mod:`~securefgl.protocols._small_blocks`).

        ``out`` (``uint32`` for rings of at most 32 bits, or ``uint64``; ``(length,)``, C-contiguous)
        receives the encodings as two's-complement words, *not reduced* mod :math:`2^k`: the caller
        reduces once (e.g. after adding masks). ``float32`` and ``float64`` real blocks within their
        bound are encoded straight from the input (``float32`` never goes through ``float64``); other
        blocks, or blocks with values to clip or reject, go through :meth:`validate` first.

        Returns:
            block name -> number of clipped elements.

        Raises:
            EncodingError: as :meth:`pack`.
        """
        check_names(self.names, contribution)
        if not isinstance(out, np.ndarray) or out.dtype not in (np.uint32, np.uint64):
            raise EncodingError("encode_into needs a uint32 or uint64 output array")
        if out.shape != (self.length,) or not out.flags.c_contiguous:
            raise EncodingError(f"encode_into needs a contiguous ({self.length},) array, got {out.shape}")
        if out.dtype == np.uint32 and self.ring_bits > 32:
            raise EncodingError(f"a {self.ring_bits}-bit ring needs uint64 words")
        words = out.view(np.int32 if out.dtype == np.uint32 else np.int64)
        small = self._small_blocks(8 * out.dtype.itemsize)
        batched = small.names if small.encode_into(contribution, words) else frozenset()
        clips: dict[str, int] = {}
        for spec in self.blocks:
            if spec.name in batched:
                clips[spec.name] = 0
                continue
            dst = words[self.slices[spec.name]]
            value = contribution[spec.name]
            scale = self.scales[spec.name]
            if spec.kind == "real":
                fast = fast_real_input(spec, value, scale)
                if fast is not None and encode_real_into(fast, scale, dst, bits, spec.bound):
                    clips[spec.name] = 0
                    continue
            vals, clips[spec.name] = validate_block(spec, value)
            if spec.kind == "real":
                encode_real_into(vals, scale, dst, bits, None)
            else:
                np.copyto(dst, vals, casting="unsafe")
        return clips

    def _small_blocks(self, word_bits: int) -> SmallBlocks:
        """The blocks :meth:`encode_into` encodes in one batch (:mod:`~securefgl.protocols._small_blocks`),
        built once per word size."""
        small = self._small.get(word_bits)
        if small is None:
            small = self._small[word_bits] = SmallBlocks(self.blocks, self.slices, self.scales, word_bits)
        return small

    def decode(self, ring_sum: np.ndarray, num_contributors: int) -> dict[str, torch.Tensor]:
        """Decode a ring sum of ``num_contributors`` encodings into named tensors (declared dtypes).

        The signed lift and the scaled floats are computed in recycled work buffers
        (:func:`~securefgl.protocols._buffers.recycled`); the returned tensors own their memory.

        Args:
            ring_sum: ``uint64`` ``(length,)``: the sum mod :math:`2^k` (need not be reduced); ``uint32``
                words are accepted for rings of at most 32 bits.
            num_contributors: how many encodings were summed (checked against ``max_clients``).

        Raises:
            OverflowRiskError: ``num_contributors > max_clients``.
            EncodingError: wrong shape or dtype of ``ring_sum``.
        """
        self._check_flat(ring_sum, "decode")
        words_ok = isinstance(ring_sum, np.ndarray) and (
            ring_sum.dtype == np.uint64 or (ring_sum.dtype == np.uint32 and self.ring_bits <= 32)
        )
        if not words_ok:
            raise EncodingError(
                f"decode: expected a uint64 ring vector (uint32 for rings of at most 32 bits), received dtype "
                f"{ring_sum.dtype} for a {self.ring_bits}-bit ring"
            )
        self.check_num_clients(int(num_contributors))
        signed = centred_lift(ring_sum, self.ring_bits, out=recycled(self.length, np.int64))
        out: dict[str, torch.Tensor] = {}
        for spec in self.blocks:
            v = signed[self.slices[spec.name]]
            if spec.kind == "count" and not spec.out_dtype.is_floating_point:
                out[spec.name] = self._to_tensor(spec, v)
                continue
            scaled = recycled(spec.size, np.float64)
            np.multiply(v, self.steps[spec.name], out=scaled)
            out[spec.name] = torch.from_numpy(scaled.reshape(spec.shape)).to(spec.out_dtype, copy=True)
        return out

    def error_bound(self, num_contributors: int) -> dict[str, float]:
        """Worst-case absolute error per element of a decoded sum of ``num_contributors`` encodings.

        Error model: each element of each encoding is rounded stochastically to the step
        :math:`\\Delta_b`, an unbiased error in :math:`(-\\Delta_b, \\Delta_b)` with variance
        :math:`\\le \\Delta_b^2/4`; the decoded sum of :math:`n` encodings is exact in the ring (no
        wrap-around, by construction of :math:`k`), so its error is :math:`< n\\Delta_b` in the worst
        case with standard deviation :math:`\\le \\sqrt{n}\\,\\Delta_b/2`. Counts are exact
        (:math:`\\Delta = 0`). The bound adds the rounding of the cast to the block's output dtype,
        :math:`n B_b u` with :math:`u` the dtype's unit roundoff (zero for integer dtypes and for
        float64 within its exact range). Clipping is not counted as error: the sum is of the clipped
        values.

        Returns:
            block name -> bound (float).
        """
        n = int(num_contributors)
        if n < 0:
            raise ConfigError(f"num_contributors must be >= 0, got {num_contributors!r}")
        self.check_num_clients(n)
        out: dict[str, float] = {}
        for spec in self.blocks:
            q = n * self.steps[spec.name] if spec.kind == "real" else 0.0
            out[spec.name] = q + self._cast_error(spec, n)
        return out

    def error_std(self, num_contributors: int) -> dict[str, float]:
        """Standard-deviation bound :math:`\\sqrt{n}\\,\\Delta_b/2` of the quantisation error of a sum."""
        n = int(num_contributors)
        return {
            s.name: (math.sqrt(n) * self.steps[s.name] / 2 if s.kind == "real" else 0.0) for s in self.blocks
        }

    def float_error_bound(self, num_contributors: int) -> dict[str, float]:
        """Worst-case absolute error per element of a float64 sum of ``num_contributors`` packed vectors.

        For protocols that add :meth:`pack` outputs in floating point (plaintext): recursive float64
        summation of :math:`n` terms of magnitude :math:`\\le B_b` errs by at most
        :math:`(n-1)\\,u\\,n B_b` with :math:`u = 2^{-53}` (zero for counts, whose sums are exact
        integers below :math:`2^{53}`), plus the cast to the output dtype as in :meth:`error_bound`.
        """
        n = int(num_contributors)
        if n < 0:
            raise ConfigError(f"num_contributors must be >= 0, got {num_contributors!r}")
        self.check_num_clients(n)
        out: dict[str, float] = {}
        for spec in self.blocks:
            exact = spec.kind == "count" and n * spec.bound <= 2.0**53
            summation = 0.0 if exact else max(n - 1, 0) * 2.0**-53 * n * spec.bound
            out[spec.name] = summation + self._cast_error(spec, n)
        return out

    def _cast_error(self, spec: BlockSpec, n: int) -> float:
        return cast_error(spec, n, self.steps[spec.name])

    # -- release ---------------------------------------------------------------------------------------

    def release(
        self,
        values: Mapping[str, torch.Tensor | np.ndarray],
        num_contributors: int,
        clip_counts: Mapping[str, int] | None = None,
        max_abs_error: Mapping[str, float] | None = None,
    ) -> Sums:
        """Apply the release rules shared by every protocol and wrap the decoded sums as ``Sums``.

        Rules, in order:

        1. schema level: fewer than ``min_contributors`` contributors -> :class:`ReleaseRefusedError`
           (nothing is released);
        2. block level: a block with ``min_contributors`` above the number of contributors is
           withheld as a whole (``Sums.withheld[name]`` gives the reason; reading it raises
           :class:`~securefgl.errors.WithheldBlockError`) and its value is dropped;
        3. row level: for a block with ``counted_by``, the rows whose count (from the summed count
           block) is below ``min_contributors`` are set to NaN and flagged in
           ``Sums.withheld_rows(name)``; if the count block is itself withheld, so is the block.

        Args:
            values: block name -> decoded sum (every schema block, declared shape).
            num_contributors: how many clients' contributions are in the sums.
            clip_counts: block name -> clipped elements summed over clients.
            max_abs_error: block name -> error bound of each element, as stated by the protocol.

        Raises:
            ReleaseRefusedError: fewer contributors than the schema's ``min_contributors``.
            EncodingError: ``values`` do not match the schema's names or shapes.
        """
        return release_sums(
            self.blocks,
            self.names,
            self.min_contributors,
            values,
            num_contributors,
            clip_counts,
            max_abs_error,
        )

    # -- identity --------------------------------------------------------------------------------------

    def canonical(self) -> dict[str, Any]:
        """The public parameters of the schema as a JSON-ready dict (what :meth:`fingerprint` hashes)."""
        return {
            "version": ENCODING_VERSION,
            "max_clients": self.max_clients,
            "precision": self.precision.hex(),
            "min_contributors": self.min_contributors,
            "extra_bits": self.extra_bits,
            "ring_bits": self.ring_bits,
            "exponents": [self._exponents[n] for n in self.names],
            "blocks": [b._canonical() for b in self.blocks],
        }

    def fingerprint(self) -> bytes:
        """SHA-256 (32 bytes) of the canonical public parameters; bound into protocol session ids."""
        if self._fingerprint is None:
            blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":")).encode()
            self._fingerprint = hashlib.sha256(blob).digest()
        return self._fingerprint


def _check_arguments(
    blocks: tuple[BlockSpec, ...], max_clients: int, precision: float, min_contributors: int, extra_bits: int
) -> float:
    """Check the arguments of :class:`SumSchema` (in this order); return ``precision`` as a float."""
    if not blocks:
        raise ConfigError("a SumSchema needs at least one block")
    for b in blocks:
        if not isinstance(b, BlockSpec):
            raise ConfigError(f"SumSchema blocks must be BlockSpec instances, got {type(b).__name__}")
    names = [b.name for b in blocks]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"duplicate block names in SumSchema: {dupes}")
    if isinstance(max_clients, bool) or not isinstance(max_clients, (int, np.integer)) or max_clients < 1:
        raise ConfigError(f"max_clients must be an integer >= 1, got {max_clients!r}")
    if isinstance(precision, bool) or not isinstance(precision, (int, float, np.integer, np.floating)):
        raise ConfigError(f"precision must be a positive number, got {precision!r}")
    precision = float(precision)
    if not (MIN_PRECISION <= precision <= MAX_PRECISION):
        raise ConfigError(f"precision must be in [2**-64, 2**64], got {precision!r}")
    if (
        isinstance(min_contributors, bool)
        or not isinstance(min_contributors, (int, np.integer))
        or not 1 <= min_contributors <= max_clients
    ):
        raise ConfigError(
            f"min_contributors must be an integer in [1, max_clients={max_clients}], got {min_contributors!r}"
        )
    if isinstance(extra_bits, bool) or not isinstance(extra_bits, (int, np.integer)) or extra_bits < 0:
        raise ConfigError(f"extra_bits must be an integer >= 0, got {extra_bits!r}")
    return precision


def _check_counted_by(
    blocks: tuple[BlockSpec, ...], by_name: Mapping[str, BlockSpec], names: list[str]
) -> None:
    """Each ``counted_by`` names a count block of shape ``(shape[0],)`` that is not itself counted."""
    for b in blocks:
        if b.counted_by is None:
            continue
        c = by_name.get(b.counted_by)
        if c is None:
            raise ConfigError(
                f"block {b.name!r}: counted_by={b.counted_by!r} is not a block of this schema; "
                f"blocks: {names}"
            )
        if c.kind != "count" or c.shape != (b.shape[0],) or c.counted_by is not None:
            raise ConfigError(
                f"block {b.name!r}: counted_by block {c.name!r} must be a count block of shape "
                f"({b.shape[0]},) that is not itself counted_by; got kind={c.kind!r}, shape={c.shape}, "
                f"counted_by={c.counted_by!r}"
            )
