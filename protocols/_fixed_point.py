"""Fixed point of a :class:`~securefgl.protocols.encoding.SumSchema`: grid steps and the ring width.

Each real block is scaled by :math:`s_b = 2^{f_b}` (the largest power-of-two step
:math:`\\Delta = 2^{-f_b} \\le` ``precision``); count blocks use :math:`s_b = 1`. With
:math:`M_b = \\lceil s_b B_b \\rceil` the largest encoded magnitude of one element, a sum of at most
``max_clients`` :math:`=N` encodings is recovered exactly by the centred lift iff
:math:`N M_b \\le 2^{k-1} - 1`, which fixes the ring width :math:`k` (see the module docstring of
:mod:`securefgl.protocols.encoding`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

import torch

from securefgl.errors import ConfigError, OverflowRiskError
from securefgl.protocols._blocks import BlockSpec, dtype_name

__all__ = [
    "MAX_PRECISION",
    "MIN_PRECISION",
    "cast_error",
    "check_output_dtypes",
    "grid_exponents",
    "max_encoded_magnitudes",
    "ring_bits_for",
]

#: The finest and the coarsest allowed ``precision`` of a schema.
MIN_PRECISION = 2.0**-64
MAX_PRECISION = 2.0**64


def grid_exponents(blocks: Sequence[BlockSpec], precision: float) -> dict[str, int]:
    """Block name -> :math:`f_b`: the step of a real block is :math:`2^{-f_b} \\le` ``precision``; counts 0."""
    # Fixed point: the largest power-of-two step <= precision. frexp: precision = m * 2**e,
    # m in [0.5, 1), so 2**(e-1) <= precision < 2**e and the exponent is f = 1 - e.
    _, e = math.frexp(precision)
    real_f = 1 - e
    return {b.name: (real_f if b.kind == "real" else 0) for b in blocks}


def max_encoded_magnitudes(blocks: Sequence[BlockSpec], exponents: Mapping[str, int]) -> dict[str, int]:
    """Block name -> :math:`M_b = \\lceil B_b 2^{f_b} \\rceil`, exactly (rational arithmetic)."""
    # Largest encoded magnitude of one element, exactly: M_b = ceil(B_b * 2**f_b).
    return {b.name: math.ceil(Fraction(b.bound) * Fraction(2) ** exponents[b.name]) for b in blocks}


def ring_bits_for(
    blocks: Sequence[BlockSpec],
    exponents: Mapping[str, int],
    max_encoded: Mapping[str, int],
    *,
    max_clients: int,
    extra_bits: int,
    precision: float,
) -> int:
    """:math:`1 + \\max_b \\operatorname{bitlen}(N M_b) + \\text{extra\\_bits}` (before the floor of 2).

    Raises:
        OverflowRiskError: more than 64 bits are needed (the message gives the numbers).
    """
    by_name = {b.name: b for b in blocks}
    worst_name = max(by_name, key=lambda n: max_encoded[n])
    worst_sum = max_clients * max_encoded[worst_name]
    bits = 1 + worst_sum.bit_length() + extra_bits
    if bits > 64:
        wb = by_name[worst_name]
        raise OverflowRiskError(
            f"schema cannot fit a 64-bit ring: block {worst_name!r} (bound {wb.bound:g}, kind {wb.kind}, "
            f"step 2**{-exponents[worst_name]}) summed over max_clients={max_clients} "
            f"reaches {worst_sum} in absolute value, which needs {bits} bits "
            f"(1 sign + {worst_sum.bit_length()} magnitude + {extra_bits} extra) with "
            f"precision={precision!r}; lower max_clients, the bound or extra_bits, or raise precision"
        )
    return bits


def check_output_dtypes(blocks: Sequence[BlockSpec], max_clients: int) -> None:
    """Refuse a block whose sum over ``max_clients`` clients can exceed its output dtype.

    Raises:
        ConfigError: naming the block, the reach and the dtype's largest value.
    """
    for b in blocks:
        dt = b.out_dtype
        top = torch.finfo(dt).max if dt.is_floating_point else torch.iinfo(dt).max
        reach = max_clients * (b.bound if dt.is_floating_point else int(b.bound))
        if reach > top:
            raise ConfigError(
                f"block {b.name!r}: its sum over max_clients={max_clients} can reach "
                f"{reach:g}, beyond the largest {dtype_name(dt)} ({top:g}); "
                "declare a wider dtype"
            )


def cast_error(spec: BlockSpec, n: int, step: float) -> float:
    """Rounding of the cast of a sum of ``n`` elements to the block's output dtype: :math:`n B_b u`."""
    dt = spec.out_dtype
    if not dt.is_floating_point:
        return 0.0
    u = torch.finfo(dt).eps / 2
    magnitude = n * spec.bound
    if dt == torch.float64 and magnitude < 2.0**53 * step:
        return 0.0  # every multiple of the step up to the magnitude is a float64
    return magnitude * u
