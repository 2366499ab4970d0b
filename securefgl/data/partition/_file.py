"""``file``: a partition made elsewhere, read from an ``.npz``; :func:`save_partition` writes one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch_geometric.data import Data

from securefgl.data.federated import FederatedGraph
from securefgl.data.partition._base import _Result
from securefgl.errors import ConfigError, PartitionError

#: Arrays of a partition file (:func:`save_partition`; the ``file`` method reads them).
PARTITION_FILE_KEYS = ("node_owner", "train_mask", "val_mask", "test_mask")


@dataclass(frozen=True)
class FileParams:
    """``file`` parameters.

    Args:
        path: ``.npz`` with ``node_owner`` (``(N,)`` integers: the client of each node, ``-1`` for none) and,
            optionally, all three of ``train_mask``, ``val_mask``, ``test_mask`` (``(N,)`` booleans, disjoint);
            with them the file's split is used and the ``split`` setting is ignored. (required)
    """

    path: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise ConfigError(
                "file: params.path must name an .npz partition file (node_owner [, train_mask, val_mask, "
                "test_mask]), e.g. securefgl run --partition file --set partition.params.path=partition.npz"
            )


def _file_method(data: Data, k: int, seed: int, p: FileParams) -> _Result:
    """Read a node -> client assignment (and optionally its split) written by :func:`save_partition` or elsewhere."""
    path = Path(p.path).expanduser()
    if not path.is_file():
        raise PartitionError(f"file: partition file {str(path)!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {key: np.asarray(z[key]) for key in z.files}
    except (OSError, ValueError, EOFError) as exc:
        # numpy's own text ("pickled data", "Failed to interpret file") describes its loader, not the file
        raise PartitionError(
            f"file: {str(path)!r} is not a readable .npz archive (numpy arrays saved with np.savez, e.g. by "
            "securefgl partition --out DIR or securefgl.data.save_partition)"
        ) from exc
    n = int(data.num_nodes)
    if "node_owner" not in arrays:
        raise PartitionError(
            f"file: {str(path)!r} has no 'node_owner' array (it has: {', '.join(sorted(arrays)) or 'nothing'})"
        )
    owner = arrays["node_owner"]
    if owner.shape != (n,) or not np.issubdtype(owner.dtype, np.integer):
        raise PartitionError(
            f"file: node_owner must be ({n},) integers for this graph, got shape {owner.shape} dtype {owner.dtype}"
        )
    owner = owner.astype(np.int64)
    if owner.min() < -1:
        raise PartitionError(
            f"file: node_owner holds client id {int(owner.min())}; valid ids are -1 (no client) and 0..{k - 1}"
        )
    if owner.max() >= k:
        raise PartitionError(
            f"file: node_owner holds client ids up to {int(owner.max())} but num_clients is {k} "
            f"(valid: -1 for no client, 0..{k - 1}); set partition.clients to {int(owner.max()) + 1}"
        )
    present = [key for key in PARTITION_FILE_KEYS[1:] if key in arrays]
    masks = None
    if present:
        if len(present) != 3:
            missing = sorted(set(PARTITION_FILE_KEYS[1:]) - set(present))
            raise PartitionError(f"file: {str(path)!r} has {', '.join(present)} but not {', '.join(missing)}")
        loaded = tuple(arrays[key] for key in PARTITION_FILE_KEYS[1:])
        for key, m in zip(PARTITION_FILE_KEYS[1:], loaded, strict=True):
            if m.shape != (n,) or m.dtype != np.bool_:
                raise PartitionError(
                    f"file: {key} must be ({n},) booleans, got shape {m.shape} dtype {m.dtype}"
                )
        overlap = int((loaded[0].astype(int) + loaded[1] + loaded[2] > 1).sum())
        if overlap:
            raise PartitionError(f"file: {overlap} nodes are in more than one of train/val/test")
        masks = (loaded[0], loaded[1], loaded[2])
    info = {"path": str(path), "split_from_file": masks is not None}
    return _Result(owner, info=info, masks=masks)


def save_partition(fg: FederatedGraph, path: str | Path) -> Path:
    """Write ``fg``'s node -> client assignment and split to an ``.npz`` that the ``file`` method reads back.

    FedLoG's held-out client and ``structure-noniid``'s injected edges are not part of the file format.
    """
    n = fg.num_nodes
    masks = {key: np.zeros(n, dtype=bool) for key in PARTITION_FILE_KEYS[1:]}
    for client in fg.clients:
        gid = client.global_id.numpy()
        for key, m in masks.items():
            m[gid] = client[key].numpy()
    out = Path(path)
    np.savez(out, node_owner=fg.node_owner.numpy().astype(np.int64), **masks)
    return out if out.suffix == ".npz" else out.with_name(out.name + ".npz")
