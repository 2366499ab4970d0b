"""Partition cache: fingerprints, keys, and tensor-only files under the data root.

A partition is stored as ``<cache_dir>/<key>.pt`` (a dict of tensors, written with :func:`torch.save` and read
with ``weights_only=True``) and ``<cache_dir>/<key>.json`` (every parameter, the seed, the dataset fingerprint
the method's metadata and a digest of the tensors). The key is a SHA-256 over a canonical JSON of all of them, so a change to any
parameter gives a new key. A file whose stored parameters, fingerprint or format version disagree with the
request is rebuilt, never reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

__all__ = ["CACHE_VERSION", "graph_fingerprint", "cache_key", "load_cached", "store_cached"]

#: Bump when a partitioner's output for the same parameters changes; old entries are then rebuilt.
CACHE_VERSION = 2


def _feed(h: Any, t: torch.Tensor | None, label: str) -> None:
    h.update(label.encode())
    if t is None:
        h.update(b"<none>")
        return
    t = t.detach().cpu().contiguous()
    h.update(f"{t.dtype}|{tuple(t.shape)}".encode())
    h.update(memoryview(t.numpy() if t.dtype != torch.bool else t.to(torch.uint8).numpy()).cast("B"))


def graph_fingerprint(data: Data) -> str:
    """A content hash of a graph: node count, edges, labels, features and public split masks (BLAKE2b-128)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"n={int(data.num_nodes)}".encode())
    _feed(h, data.edge_index, "edge_index")
    _feed(h, data.y, "y")
    _feed(h, data.x, "x")
    for k in ("train_mask", "val_mask", "test_mask"):
        _feed(h, getattr(data, k, None), k)
    return h.hexdigest()


def _tensor_digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for k in sorted(tensors):
        _feed(h, tensors[k], k)
    return h.hexdigest()


def _canonical(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, list | tuple):
        return [_canonical(v) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return obj


def cache_key(request: dict[str, Any]) -> str:
    """SHA-256 (hex, 32 characters kept) of the canonical JSON of a request (method, params, seed, ...)."""
    blob = json.dumps(
        _canonical({"version": CACHE_VERSION, **request}), sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def load_cached(
    cache_dir: Path, key: str, request: dict[str, Any]
) -> tuple[dict[str, torch.Tensor], dict] | None:
    """Return ``(tensors, info)`` when a valid entry for ``key`` exists and matches ``request``, else ``None``.

    An entry whose JSON is unreadable, whose stored request differs from ``request`` (any parameter, seed or
    fingerprint), or whose tensor file is unreadable or does not match the digest recorded in the JSON is treated
    as absent (the caller rebuilds and overwrites).
    """
    pt, js = cache_dir / f"{key}.pt", cache_dir / f"{key}.json"
    if not (pt.is_file() and js.is_file()):
        return None
    try:
        info = json.loads(js.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if info.get("version") != CACHE_VERSION or _canonical(info.get("request")) != _canonical(request):
        return None
    try:
        tensors = torch.load(pt, map_location="cpu", weights_only=True)
    except Exception:  # corrupt or truncated file: rebuild
        return None
    if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
        return None
    if info.get("tensor_digest") != _tensor_digest(tensors):  # a .pt that is not the one this JSON describes
        return None
    return tensors, info


def _atomic_write(path: Path, write: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def store_cached(
    cache_dir: Path, key: str, request: dict[str, Any], tensors: dict[str, torch.Tensor], info: dict[str, Any]
) -> None:
    """Write an entry atomically (tensors only in the ``.pt``; parameters and metadata in the ``.json``)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "version": CACHE_VERSION,
        "key": key,
        "request": _canonical(request),
        "tensor_digest": _tensor_digest(tensors),
        **_canonical(info),
    }
    _atomic_write(
        cache_dir / f"{key}.pt", lambda p: torch.save({k: v.contiguous() for k, v in tensors.items()}, p)
    )
    _atomic_write(
        cache_dir / f"{key}.json",
        lambda p: Path(p).write_text(json.dumps(payload, indent=1, sort_keys=True), encoding="utf-8"),
    )
