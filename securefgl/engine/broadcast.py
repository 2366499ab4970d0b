"""A round's broadcast as the transport sees it: its public digest, bound into every sum of the round (the round
context), and its size on the wire."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch

__all__ = ["broadcast_nbytes", "round_context"]


def broadcast_nbytes(broadcast: Mapping[str, torch.Tensor]) -> int:
    """Bytes of a broadcast as sent: the raw bytes of its tensors."""
    return int(sum(t.numel() * t.element_size() for t in broadcast.values()))


def round_context(broadcast: Mapping[str, torch.Tensor]) -> bytes:
    """Public round context: a hash of what the server broadcast (bound into protocol sessions)."""
    h = hashlib.sha256(b"securefgl.round-context.v1")
    for k in sorted(broadcast):
        t = broadcast[k].detach()
        h.update(k.encode())
        h.update(str(tuple(t.shape)).encode() + str(t.dtype).encode())
        h.update(t.cpu().contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.digest()
