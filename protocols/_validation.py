"""Validation and clipping of a contribution against its blocks (names, shapes, dtypes, NaN/Inf, bounds).

Used by :class:`~securefgl.protocols.encoding.SumSchema` (``validate``, ``pack``, ``encode``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from securefgl.errors import ConfigError, EncodingError
from securefgl.protocols._blocks import BlockSpec, dtype_name
from securefgl.protocols._rounding import RoundingBits

__all__ = [
    "check_names",
    "fast_real_input",
    "rounding_source",
    "to_numpy",
    "validate_block",
    "validate_contribution",
]


def to_numpy(name: str, value: Any) -> np.ndarray:
    """A CPU numpy view/copy of a tensor, array or Python number (bfloat16 widened to float32)."""
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.is_complex():
            raise EncodingError(
                f"block {name!r}: expected a real tensor, received dtype {dtype_name(t.dtype)}"
            )
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (np.generic, int, float)) and not isinstance(value, (bool, np.bool_)):
        return np.asarray(value)
    raise EncodingError(
        f"block {name!r}: expected a torch.Tensor or numpy.ndarray, received {type(value).__name__}"
    )


def validate_block(spec: BlockSpec, value: Any) -> tuple[np.ndarray, int]:
    """Validate one block; return its clipped flat values (float64 real, int64 count) and clip count."""
    name = spec.name
    arr = to_numpy(name, value)
    if tuple(arr.shape) != spec.shape:
        raise EncodingError(f"block {name!r}: expected shape {spec.shape}, received shape {tuple(arr.shape)}")
    kind = arr.dtype.kind
    allowed = "fiu" if spec.kind == "real" else "fiub"
    if kind not in allowed:
        expected = (
            "a real (floating or integer) dtype"
            if spec.kind == "real"
            else "a count (integer, bool or integral floating) dtype"
        )
        raise EncodingError(f"block {name!r}: expected {expected}, received {arr.dtype}")
    flat = arr.reshape(-1)
    if kind == "f":
        finite = np.isfinite(flat)
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[0])
            nbad = int(flat.size - np.count_nonzero(finite))
            raise EncodingError(
                f"block {name!r}: {nbad} non-finite value(s) (NaN/Inf), first {flat[bad].item()!r} at flat "
                f"index {bad}; nothing was sent"
            )
    if spec.kind == "real":
        return _clip_real(spec, flat)
    return _clip_count(spec, flat)


def _reject(spec: BlockSpec, flat: np.ndarray, out: np.ndarray, n_out: int) -> None:
    bad = int(np.flatnonzero(out)[0])
    rng = f"[-{spec.bound:g}, {spec.bound:g}]" if spec.kind == "real" else f"[0, {int(spec.bound)}]"
    raise EncodingError(
        f"block {spec.name!r}: {n_out} value(s) outside the bound {rng} (on_out_of_bound='reject'), "
        f"first {flat[bad].item()!r} at flat index {bad}"
    )


def _clip_real(spec: BlockSpec, flat: np.ndarray) -> tuple[np.ndarray, int]:
    x = flat.astype(np.float64, copy=True)
    out = np.abs(x) > spec.bound
    n_out = int(np.count_nonzero(out))
    if n_out:
        if spec.on_out_of_bound == "reject":
            _reject(spec, flat, out, n_out)
        np.clip(x, -spec.bound, spec.bound, out=x)
    return x, n_out


def _clip_count(spec: BlockSpec, flat: np.ndarray) -> tuple[np.ndarray, int]:
    kind = flat.dtype.kind
    if kind == "b":
        return flat.astype(np.int64), 0
    if kind == "f":
        nonint = flat != np.floor(flat)
        if nonint.any():
            bad = int(np.flatnonzero(nonint)[0])
            raise EncodingError(
                f"block {spec.name!r}: a count block expects whole numbers, received {flat[bad].item()!r} at "
                f"flat index {bad} (dtype {flat.dtype})"
            )
    hi = int(spec.bound)
    out = (flat < 0) | (flat > hi)
    n_out = int(np.count_nonzero(out))
    if n_out:
        if spec.on_out_of_bound == "reject":
            _reject(spec, flat, out, n_out)
        # Clip in the native dtype (a uint64 above 2**63 must not wrap before clipping).
        flat = np.where(flat < 0, 0, np.where(flat > hi, hi, flat))
    return flat.astype(np.int64), n_out


def validate_contribution(
    blocks: Sequence[BlockSpec], names: Sequence[str], contribution: Mapping[str, Any]
) -> tuple[list[np.ndarray], dict[str, int]]:
    """Validate a contribution against ``blocks`` (named ``names``, in order).

    Returns:
        ``(parts, clip_counts)``: each block's clipped flat values (float64 real, int64 count), in block
        order, and block name -> number of clipped elements.

    Raises:
        EncodingError: naming the block, what was expected and what was received.
    """
    check_names(names, contribution)
    parts: list[np.ndarray] = []
    clips: dict[str, int] = {}
    for spec in blocks:
        vals, n_clip = validate_block(spec, contribution[spec.name])
        parts.append(vals)
        clips[spec.name] = n_clip
    return parts, clips


def check_names(names: Sequence[str], contribution: Any) -> None:
    """A contribution is a mapping with exactly the blocks ``names``.

    Raises:
        EncodingError: not a mapping, or missing/unexpected block names.
    """
    if not isinstance(contribution, Mapping):
        raise EncodingError(
            f"a contribution must be a mapping of block name to tensor, received {type(contribution).__name__}"
        )
    got = set(contribution)
    missing = [n for n in names if n not in got]
    unexpected = sorted(str(k) for k in got - set(names))
    if missing or unexpected:
        raise EncodingError(
            f"contribution blocks do not match the schema: missing {missing}, unexpected {unexpected}; "
            f"expected exactly {list(names)}"
        )


def fast_real_input(spec: BlockSpec, value: Any, scale: float) -> np.ndarray | None:
    """The flat ``float32``/``float64`` values of a real block that the fused encoder can take as they
    are (right shape, scale :math:`\\ge 1`), or ``None`` (then :func:`validate_block` decides)."""
    if scale < 1.0 or not isinstance(value, (torch.Tensor, np.ndarray)):
        return None
    try:
        arr = to_numpy(spec.name, value)
    except EncodingError:
        return None
    if tuple(arr.shape) != spec.shape or arr.dtype not in (np.float32, np.float64):
        return None
    return np.ascontiguousarray(arr.reshape(-1))


def rounding_source(rng: Any) -> RoundingBits:
    """The rounding bits for an ``rng`` argument: ``None`` -> fresh OS-keyed :class:`RoundingBits`; a
    ``RoundingBits`` as is; a ``numpy.random.Generator`` (tests only) -> an insecure stream seeded
    with 32 bytes from it.

    Raises:
        ConfigError: anything else.
    """
    if rng is None:
        return RoundingBits()
    if isinstance(rng, RoundingBits):
        return rng
    if isinstance(rng, np.random.Generator):
        return RoundingBits.insecure_seeded(rng.bytes(32), "numpy-generator")
    raise ConfigError(
        f"rng must be a RoundingBits (or, in tests, a numpy.random.Generator), got {type(rng).__name__}"
    )
