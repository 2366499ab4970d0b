"""Shared type aliases."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

import numpy as np
import torch

__all__ = ["ArrayLike", "ClientId", "Contribution"]

ClientId: TypeAlias = int
ArrayLike: TypeAlias = "torch.Tensor | np.ndarray"
Contribution: TypeAlias = Mapping[str, "torch.Tensor | np.ndarray"]
