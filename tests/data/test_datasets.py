"""Loaders on the real shared files, the registry, and the offline errors."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch

from securefgl.data import DATASETS, canonical_name, load_dataset, missing_files
from securefgl.errors import ConfigError, DatasetNotFoundError

SHARED = [
    ("Cora", 2708, 7, True),
    ("CiteSeer", 3327, 6, True),
    ("Minesweeper", 10000, 2, True),
    ("Tolokers", 11758, 2, True),
    ("chameleon", 2277, 5, True),
    ("squirrel", 5201, 5, True),
    ("actor", 7600, 5, True),
    ("cornell", 183, 5, True),
    ("texas", 183, 5, True),
    ("wisconsin", 251, 5, True),
    ("chameleon_filtered", 890, 5, True),
    ("squirrel_filtered", 2223, 5, True),
]


def _assert_clean(data) -> None:
    assert data.edge_index.dtype == torch.long and data.edge_index.shape[0] == 2
    src, dst = data.edge_index.numpy()
    n = int(data.num_nodes)
    assert not (src == dst).any(), "self-loops"
    keys = src * n + dst
    assert np.unique(keys).size == keys.size, "duplicate edges"
    assert np.array_equal(np.sort(keys), np.sort(dst * n + src)), "not undirected"
    assert data.x.dtype == torch.float32 and data.x.shape[0] == data.num_nodes
    assert data.y.dtype == torch.long and data.y.shape == (data.num_nodes,)
    assert isinstance(data.num_classes, int) and data.num_classes == int(data.y.max()) + 1


@pytest.mark.parametrize(("name", "nodes", "classes", "public"), SHARED)
def test_shared_files_load(data_root, name: str, nodes: int, classes: int, public: bool) -> None:
    assert missing_files(name, data_root) == []
    data = load_dataset(name, data_root, download=False)
    _assert_clean(data)
    assert data.num_nodes == nodes and data.num_classes == classes
    assert data.name == canonical_name(name)
    if public:
        tr, va, te = data.train_mask, data.val_mask, data.test_mask
        assert tr.dtype == torch.bool and tr.shape == (nodes,)
        assert not (tr & va).any() and not (tr & te).any() and not (va & te).any()
        assert tr.any() and te.any()


def test_cora_public_split_and_case_insensitive(data_root) -> None:
    data = load_dataset("cora")
    assert data.name == "Cora"
    assert (
        int(data.train_mask.sum()) == 140
        and int(data.val_mask.sum()) == 500
        and int(data.test_mask.sum()) == 1000
    )
    assert data.edge_index.shape[1] == 10556


def test_split_index_selects_other_public_split(data_root) -> None:
    a = load_dataset("chameleon", data_root, split_index=0)
    b = load_dataset("chameleon", data_root, split_index=3)
    assert not torch.equal(a.train_mask, b.train_mask)
    with pytest.raises(ConfigError, match="split_index"):
        load_dataset("chameleon", data_root, split_index=-1)


def test_registry_names_and_unknown() -> None:
    for name in (
        "PubMed",
        "Computers",
        "Photo",
        "CS",
        "Physics",
        "WikiCS",
        "Roman-empire",
        "Amazon-ratings",
        "Questions",
        "Flickr",
        "Reddit",
        "ogbn-arxiv",
        "ogbn-products",
        "csbm",
    ):
        assert name in DATASETS
    assert canonical_name("roman_empire") == "Roman-empire"
    assert canonical_name("AMAZON-RATINGS") == "Amazon-ratings"
    with pytest.raises(ConfigError, match="valid choices: Cora, CiteSeer"):
        load_dataset("Coraa")


def test_missing_files_offline_error_names_everything(tmp_path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("PubMed", tmp_path, download=False)
    msg = str(info.value)
    assert "'PubMed'" in msg and str(tmp_path) in msg and "SECUREFGL_DATA" in msg
    assert str(tmp_path / "PubMed" / "raw" / "ind.pubmed.graph") in msg


def test_npz_format_is_never_downloaded(tmp_path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("cornell", tmp_path)
    assert "heterophily-npz/cornell.npz" in str(info.value) and "SECUREFGL_DATA" in str(info.value)


def test_synthetic_default_needs_no_files(tmp_path) -> None:
    data = load_dataset("csbm", tmp_path)
    _assert_clean(data)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_root_is_a_config_error(tmp_path, data_root) -> None:
    ro = tmp_path / "ro"
    shutil.copytree(data_root / "CiteSeer" / "raw", ro / "CiteSeer" / "raw")
    os.chmod(ro / "CiteSeer", 0o555)
    try:
        with pytest.raises(ConfigError, match="not writable"):
            load_dataset("CiteSeer", ro, download=False)
    finally:
        os.chmod(ro / "CiteSeer", 0o755)
