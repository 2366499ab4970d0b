"""Per-organisation data files: one file per client, holding that client's part of the graph and nothing else.

``securefgl partition ... --export DIR`` (and ``securefgl deploy``) write ``DIR/client-<i>.pt`` for every client
``i`` and ``DIR/federation.json``. A client file holds

- the client's subgraph (features, labels, local edges, its own train/val/test masks, the global ids of its
  own nodes) and its evaluation sets that arrive later (FedLoG),
- what it legitimately knows of its inter-client edges: for each edge leaving its node set, its own endpoint,
  the external endpoint's global id and owner (:func:`~securefgl.data.cross_edges.attach_cross_edges`),
- the federation's public facts (:class:`Federation`: dataset name, total nodes, features, classes, clients,
  the partition's parameters and a digest of them), which every party agrees on.

Files are plain dicts of tensors and numbers, read back with ``torch.load(weights_only=True)`` (no pickled
code). ``federation.json`` holds only the public facts: it is what the server may be given.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch_geometric.data import Data

from securefgl.data.cross_edges import attach_cross_edges
from securefgl.errors import ConfigError, PartitionError

__all__ = ["FORMAT", "ClientFile", "Federation", "export_clients", "load_client_file"]

#: Version tag of a client file.
FORMAT = "securefgl.client-file.v1"
#: Keys of the cross-client edge view (:func:`attach_cross_edges`), kept only for algorithms that use it.
CROSS_KEYS = ("fs_cross_src", "fs_cross_dst", "fs_cross_owner", "fs_num_global")


@dataclass(frozen=True)
class Federation:
    """The public facts of a partitioned federation (no features, labels or edges)."""

    name: str
    num_nodes: int
    num_features: int
    num_classes: int
    num_clients: int
    partition: dict[str, Any]

    @property
    def digest(self) -> str:
        """SHA-256 of the facts: every party checks it agrees with the others before the run starts."""
        blob = json.dumps(asdict(self), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "digest": self.digest}

    @staticmethod
    def from_json(raw: dict[str, Any]) -> Federation:
        try:
            fed = Federation(
                str(raw["name"]),
                int(raw["num_nodes"]),
                int(raw["num_features"]),
                int(raw["num_classes"]),
                int(raw["num_clients"]),
                dict(raw["partition"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"federation facts are incomplete or malformed ({exc}); got keys {sorted(raw)}"
            ) from None
        if "digest" in raw and raw["digest"] != fed.digest:
            raise ConfigError(f"federation facts do not match their digest {raw['digest']!r}")
        return fed


@dataclass
class ClientFile:
    """One client's file, loaded: its id, its data, its later-arriving evaluation sets, the public facts."""

    client_id: int
    data: Data
    eval_data: dict[str, torch.Tensor]
    federation: Federation


def _public(fg: Any) -> Federation:
    meta = {k: v for k, v in fg.meta.items() if isinstance(v, str | int | float | bool) and k != "cache_path"}
    meta.pop("time_s", None)
    meta.pop("cached", None)
    return Federation(
        fg.name, int(fg.num_nodes), int(fg.num_features), int(fg.num_classes), fg.num_clients, meta
    )


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, int | float | bool | str):
        return value
    raise PartitionError(f"cannot export a client attribute of type {type(value).__name__}")


def export_clients(fg: Any, folder: str | Path) -> list[Path]:
    """Write one file per client of ``fg`` and ``federation.json`` into ``folder``; return the paths.

    Raises:
        PartitionError: ``fg`` carries a client attribute that is not a tensor or a number.
    """
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    fed = _public(fg)
    if getattr(fg, "cross_edges", None) is not None and getattr(fg, "cross_owners", None) is not None:
        fg = attach_cross_edges(fg)
    paths = []
    evals = fg.client_eval or [{} for _ in fg.clients]
    for i, (data, later) in enumerate(zip(fg.clients, evals, strict=True)):
        blob = {
            "format": FORMAT,
            "client_id": i,
            "federation": fed.to_json(),
            "data": {k: _plain(v) for k, v in data.items()},
            "num_nodes": int(data.num_nodes),
            "eval": {k: _plain(v) for k, v in later.items()},
        }
        path = out / f"client-{i}.pt"
        torch.save(blob, path)
        paths.append(path)
    (out / "federation.json").write_text(
        json.dumps(fed.to_json(), indent=2, sort_keys=True, default=str) + "\n"
    )
    return [*paths, out / "federation.json"]


def load_client_file(path: str | Path) -> ClientFile:
    """Read a client file written by :func:`export_clients`.

    Raises:
        ConfigError: the file is missing, unreadable or not a securefgl client file.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"client data file {str(p)!r} does not exist")
    try:
        blob = torch.load(p, weights_only=True, map_location="cpu")
    except Exception as exc:
        raise ConfigError(f"client data file {str(p)!r} cannot be read: {exc}") from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise ConfigError(f"{str(p)!r} is not a securefgl client file (expected format {FORMAT!r})")
    data = Data(**blob["data"])
    data.num_nodes = int(blob["num_nodes"])
    return ClientFile(
        int(blob["client_id"]), data, dict(blob["eval"]), Federation.from_json(blob["federation"])
    )
