"""``Sums``: the decoded sum over the participating clients, the only thing a server step receives.

Its own module so that both the protocol interface (:mod:`securefgl.protocols.base`, which re-exports it)
and the encoder that releases it (:mod:`securefgl.protocols.encoding`) import it without importing each
other.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from securefgl.errors import WithheldBlockError

__all__ = ["Sums"]


class Sums(Mapping[str, torch.Tensor]):
    """The decoded sums over the participating clients: the only thing a server step receives.

    A block refused as a whole by a release rule raises :class:`WithheldBlockError` when read; never a
    silent zero. A class-wise block whose rows are refused individually (``BlockSpec.counted_by``) comes
    back with those rows set to NaN and listed by :meth:`withheld_rows`, so a step that forgets to skip
    them fails loudly instead of training on a made-up value.

    Args:
        values: name -> summed tensor, on the CPU, in the block's declared dtype.
        num_contributors: how many clients' inputs are in the sum.
        withheld: name -> reason, for blocks refused as a whole.
        withheld_rows: name -> boolean mask over the block's first dimension, for row-wise refusals.
        clip_counts: name -> number of clipped elements summed over clients (public: reported).
        max_abs_error: name -> bound on the absolute error of each element of the sum (quantisation,
            CKKS), as stated by the protocol.
    """

    def __init__(
        self,
        values: Mapping[str, torch.Tensor],
        *,
        num_contributors: int,
        withheld: Mapping[str, str] | None = None,
        withheld_rows: Mapping[str, torch.Tensor] | None = None,
        clip_counts: Mapping[str, int] | None = None,
        max_abs_error: Mapping[str, float] | None = None,
    ) -> None:
        self._values = dict(values)
        self.num_contributors = int(num_contributors)
        self.withheld: dict[str, str] = dict(withheld or {})
        self._withheld_rows = {k: v.bool() for k, v in (withheld_rows or {}).items()}
        self.clip_counts: dict[str, int] = dict(clip_counts or {})
        self.max_abs_error: dict[str, float] = dict(max_abs_error or {})

    def __getitem__(self, name: str) -> torch.Tensor:
        if name in self.withheld:
            raise WithheldBlockError(f"block {name!r} was withheld: {self.withheld[name]}")
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def is_withheld(self, name: str) -> bool:
        """Whether block ``name`` was refused as a whole."""
        return name in self.withheld

    def withheld_rows(self, name: str) -> torch.Tensor | None:
        """Boolean mask of the rows of ``name`` refused by a row-wise rule, or ``None`` if none was."""
        return self._withheld_rows.get(name)

    def to(self, device: torch.device | str) -> Sums:
        """A copy with every released tensor moved to ``device``."""
        return Sums(
            {k: v.to(device) for k, v in self._values.items()},
            num_contributors=self.num_contributors,
            withheld=self.withheld,
            withheld_rows=self._withheld_rows,
            clip_counts=self.clip_counts,
            max_abs_error=self.max_abs_error,
        )

    def __repr__(self) -> str:
        blocks = ", ".join(f"{k}{tuple(v.shape)}" for k, v in self._values.items())
        return f"Sums({blocks}; contributors={self.num_contributors}, withheld={sorted(self.withheld)})"
