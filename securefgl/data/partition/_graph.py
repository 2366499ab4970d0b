"""``partition_graph``: validate a request, look it up in the cache, run the method, split, store."""

from __future__ import annotations

import numbers
import time
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch_geometric.data import Data

from securefgl.config.loader import to_dict
from securefgl.data.cache import CACHE_VERSION, cache_key, graph_fingerprint, load_cached, store_cached
from securefgl.data.federated import FederatedGraph, build_federated_graph
from securefgl.data.partition._base import _Result, _rng
from securefgl.data.partition._registry import _METHODS, check_method_params, normalize_method
from securefgl.data.root import data_root
from securefgl.data.splits import check_split, split_masks
from securefgl.errors import ConfigError, PartitionError


def _check_int(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise PartitionError(f"{what} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise PartitionError(f"{what} must be at least {minimum}, got {value!r}")
    return int(value)


def _masks_from(data: Data, owner: np.ndarray, split: Any, scope: str, stratified: bool, seed: int) -> tuple:
    if split == "public":
        return tuple(getattr(data, k).numpy().astype(bool) for k in ("train_mask", "val_mask", "test_mask"))
    rng = _rng(seed, 4)
    groups = None if scope == "global" else owner
    masks = split_masks(data.y, split, rng, stratified=stratified, groups=groups)
    return tuple(m.numpy() for m in masks)


def partition_graph(
    data: Data | str,
    method: str,
    num_clients: int,
    *,
    seed: int = 0,
    split: tuple[float, float, float] | str = (0.2, 0.4, 0.4),
    split_scope: Literal["client", "global"] = "client",
    stratified: bool = True,
    cache_dir: str | Path | None = None,
    cache: bool = True,
    root: str | Path | None = None,
    **method_params: Any,
) -> FederatedGraph:
    """Partition a graph among ``num_clients`` clients and split each client's nodes.

    Args:
        data: The graph (``Data`` from :func:`~securefgl.data.load_dataset` or
            :func:`~securefgl.data.make_csbm`), or a dataset name.
        method: One of :func:`partition_methods` (see the module docstring).
        num_clients: K >= 1.
        seed: Integer seed of the partition and of the splits. (default: 0)
        split: ``(train, val, test)`` ratios summing to at most 1, or ``"public"``. (default: ``(0.2, 0.4, 0.4)``)
        split_scope: ``"client"`` (per-client split) or ``"global"`` (one split of the whole graph drawn before
            partitioning). (default: ``"client"``)
        stratified: Split per class. (default: ``True``)
        cache_dir: Cache directory; ``None`` means ``<data root>/_partitions``. (default: ``None``)
        cache: Read and write the cache. (default: ``True``)
        root: Data root, for a dataset name and the default cache directory. (default: ``None``)
        **method_params: Method parameters (see the ``*Params`` dataclasses); unknown ones are rejected.

    Returns:
        A :class:`~securefgl.data.FederatedGraph`; ``meta`` holds the method, the resolved parameters, the seed,
        the split, the dataset fingerprint, the cache ``key``, ``cache_hit`` and method-specific information.

    Raises:
        PartitionError: Unknown method, a seed or K that is not an integer, more clients than nodes or
            communities, a ``"public"`` split on a dataset without one, or an empty client.
        ConfigError: Invalid split ratios or method parameters (PartitionError is a ConfigError).
    """
    # ---- validation: everything that can be checked before any work ----
    method = normalize_method(method)
    seed = _check_int(seed, "seed", 0)
    num_clients = _check_int(num_clients, "num_clients", 1)
    split = check_split(split, key="split")
    if split_scope not in ("client", "global"):
        raise ConfigError(f"split_scope: invalid value {split_scope!r}; valid choices: 'client', 'global'")
    if not isinstance(stratified, bool):
        raise ConfigError(f"stratified must be true or false, got {stratified!r}")
    params = check_method_params(method, method_params)
    data = _graph(data, root)
    _check_request(data, method, num_clients, params, split)

    if method == "file":
        cache = False  # the file is the stored partition; a cache entry would go stale when it changes
    # ---- cache lookup ----
    request = {
        "dataset": str(getattr(data, "name", "graph")),
        "fingerprint": graph_fingerprint(data),
        "num_nodes": int(data.num_nodes),
        "method": method,
        "num_clients": num_clients,
        "seed": seed,
        "split": list(split) if split != "public" else "public",
        "split_scope": split_scope,
        "stratified": stratified,
        "params": to_dict(params),
    }
    key = cache_key(request)
    cdir = Path(cache_dir) if cache_dir is not None else data_root(root) / "_partitions"
    meta = {**request, "key": key, "cache_version": CACHE_VERSION, "cache_path": str(cdir / f"{key}.pt")}

    if cache:
        hit = _from_cache(data, num_clients, cdir, key, request, meta)
        if hit is not None:
            return hit

    # ---- build ----
    t0 = time.perf_counter()
    result = _METHODS[method].fn(data, num_clients, seed, params)
    owner = _checked_owner(result, method, num_clients)
    masks = (
        result.masks
        if result.masks is not None
        else _masks_from(data, owner, split, split_scope, stratified, seed)
    )
    if result.masks is not None:
        meta["split"] = "file"
    elapsed = time.perf_counter() - t0
    meta.update(info=result.info, cache_hit=False, time_s=elapsed)
    if cache:
        _store(cdir, key, request, result, owner, masks, elapsed)
    return build_federated_graph(
        data, owner, num_clients, masks, injected=result.injected, held_out=result.held_out, meta=meta
    )


def _graph(data: Data | str, root: str | Path | None) -> Data:
    """The graph to partition: ``data`` itself, or the dataset it names; ``num_classes`` filled in."""
    if isinstance(data, str):
        from securefgl.data.datasets import load_dataset

        data = load_dataset(data, root)
    if not isinstance(data, Data) or data.edge_index is None or data.y is None:
        raise PartitionError(
            f"data must be a torch_geometric Data with edge_index and y, got {type(data).__name__}"
        )
    if not hasattr(data, "num_classes") or not isinstance(data.num_classes, int):
        data.num_classes = int(data.y.max()) + 1
    return data


def _check_request(data: Data, method: str, num_clients: int, params: Any, split: Any) -> None:
    """The checks that need the graph: client and community counts, per-client lists, a public split."""
    n = int(data.num_nodes)
    extra = 1 if method == "fedlog" and params.new_client else 0
    if num_clients + extra > n:
        raise PartitionError(
            f"{num_clients} clients requested for a graph of {n} nodes; use at most {n - extra}"
        )
    if method in ("louvain+", "metis+"):
        if num_clients > params.num_coms:
            raise PartitionError(
                f"{method}: {num_clients} clients but only num_coms={params.num_coms} communities; "
                f"use at most {params.num_coms} clients or raise num_coms"
            )
        if params.num_coms > n:
            raise PartitionError(f"{method}: num_coms={params.num_coms} exceeds the {n} nodes of the graph")
    if method == "structure-noniid" and params.modes is not None and len(params.modes) != num_clients:
        raise PartitionError(
            f"structure-noniid: modes has {len(params.modes)} entries for {num_clients} clients"
        )
    if (
        method == "fedlog"
        and params.missing_classes is not None
        and len(params.missing_classes) != num_clients
    ):
        raise PartitionError(
            f"fedlog: missing_classes has {len(params.missing_classes)} entries for {num_clients}"
        )
    if split == "public":
        missing = [k for k in ("train_mask", "val_mask", "test_mask") if getattr(data, k, None) is None]
        if missing:
            raise PartitionError(
                f"split='public' but dataset {getattr(data, 'name', '?')!r} has no public split "
                f"(missing {', '.join(missing)}); give [train, val, test] ratios instead"
            )


def _from_cache(
    data: Data, num_clients: int, cdir: Path, key: str, request: dict[str, Any], meta: dict[str, Any]
) -> FederatedGraph | None:
    """The cached partition of ``request`` (``meta`` updated), or ``None`` when absent or not this graph's."""
    n = int(data.num_nodes)
    hit = load_cached(cdir, key, request)
    if hit is None:
        return None
    tensors, info = hit
    owner_t = tensors.get("node_owner")
    masks_t = [tensors.get(k) for k in ("train_mask", "val_mask", "test_mask")]
    if not (
        owner_t is not None
        and owner_t.shape == (n,)
        and all(m is not None and m.shape == (n,) for m in masks_t)
    ):
        return None
    inj = tensors.get("injected")
    held = tensors.get("held_out")
    meta.update(info=info.get("info", {}), cache_hit=True, time_s=info.get("time_s"))
    return build_federated_graph(
        data,
        owner_t.numpy(),
        num_clients,
        tuple(m.numpy() for m in masks_t),  # type: ignore[union-attr]
        injected=inj.numpy() if inj is not None else None,
        held_out=held.numpy() if held is not None else None,
        meta=meta,
    )


def _checked_owner(result: _Result, method: str, num_clients: int) -> np.ndarray:
    """The node -> client array of a partitioner's result; refused when a client is empty."""
    owner = np.asarray(result.owner, dtype=np.int64)
    counts = np.bincount(owner[owner >= 0], minlength=num_clients)
    if counts.size > num_clients:
        raise PartitionError(f"{method} produced client ids >= {num_clients}")  # defensive: a partitioner bug
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise PartitionError(
            f"{method}: client {int(empty[0])} is empty ({empty.size} of {num_clients} clients have no node); "
            f"use fewer clients or other parameters"
        )
    return owner


def _store(
    cdir: Path,
    key: str,
    request: dict[str, Any],
    result: _Result,
    owner: np.ndarray,
    masks: tuple,
    elapsed: float,
) -> None:
    """Write the partition to the cache; a cache that cannot be written is warned about, not fatal."""
    tensors = {"node_owner": torch.from_numpy(owner)}
    tensors.update(
        {
            k: torch.from_numpy(np.ascontiguousarray(m))
            for k, m in zip(("train_mask", "val_mask", "test_mask"), masks, strict=True)
        }
    )
    if result.injected is not None and result.injected.size:
        tensors["injected"] = torch.from_numpy(np.ascontiguousarray(result.injected, dtype=np.int64))
    if result.held_out is not None:
        tensors["held_out"] = torch.from_numpy(np.ascontiguousarray(result.held_out, dtype=np.int64))
    try:
        store_cached(cdir, key, request, tensors, {"info": result.info, "time_s": elapsed})
    except OSError as exc:
        warnings.warn(
            f"partition cache {str(cdir)!r} is not writable ({exc}); continuing without it", stacklevel=3
        )
