"""securefgl.attacks: what an adversary can reconstruct from its view of a run."""

from __future__ import annotations

__all__: list[str] = []
