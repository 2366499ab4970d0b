"""What every partitioner shares: the record it returns and its seeded generators."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class _Result:
    owner: np.ndarray
    injected: np.ndarray | None = None
    held_out: np.ndarray | None = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    masks: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # a split that comes with the partition


def _rng(seed: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), purpose]))
