"""The reproduction scripts' partition files: lookup and the ``--partition-dir`` option."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from securefgl.errors import ConfigError, PartitionError
from securefgl.experiments import add_partition_dir_option, partition_file


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, node_owner=np.zeros(3, dtype=np.int64))
    return path


def test_partition_file_matches_the_name_in_any_case(tmp_path: Path) -> None:
    made = _touch(tmp_path / "Cora_louvain+.npz")
    _touch(tmp_path / "Cora_metis+.npz")
    assert partition_file(tmp_path, "Cora", "louvain+") == made
    assert partition_file(tmp_path, "cora", "LOUVAIN+") == made
    assert partition_file(str(tmp_path), "CORA", "louvain+") == made


def test_partition_file_takes_the_first_in_name_order(tmp_path: Path) -> None:
    upper = _touch(tmp_path / "CiteSeer_metis+.npz")
    _touch(tmp_path / "citeseer_metis+.npz")
    assert partition_file(tmp_path, "citeseer", "metis+") == upper  # "C" sorts before "c"


def test_partition_file_ignores_subfolders_and_other_suffixes(tmp_path: Path) -> None:
    _touch(tmp_path / "nested" / "Cora_louvain+.npz")
    (tmp_path / "Cora_louvain+.npz.bak").write_text("old")
    (tmp_path / "Cora_louvain+.txt").write_text("notes")
    with pytest.raises(PartitionError):
        partition_file(tmp_path, "Cora", "louvain+")


def test_a_missing_partition_file_names_the_script_that_makes_it(tmp_path: Path) -> None:
    _touch(tmp_path / "Cora_metis+.npz")
    with pytest.raises(PartitionError, match=r"no cora_louvain\+\.npz in .*opfgl_reference_partition\.py"):
        partition_file(tmp_path, "Cora", "louvain+")
    with pytest.raises(
        PartitionError, match=r"examples/adafgl_reference_partition\.py \(export, then partition\)"
    ):
        partition_file(tmp_path, "Cora", "louvain", maker="adafgl_reference_partition")
    with pytest.raises(ConfigError):  # PartitionError is a ConfigError (and a ValueError)
        partition_file(tmp_path / "absent", "Cora", "louvain")


def test_partition_dir_option() -> None:
    parser = argparse.ArgumentParser()
    add_partition_dir_option(parser, "table: ")
    assert parser.parse_args([]).partition_dir is None
    assert parser.parse_args(["--partition-dir", "ref"]).partition_dir == Path("ref")
    (action,) = [a for a in parser._actions if a.dest == "partition_dir"]
    assert action.help.startswith(
        "table: read each cell's partition and split from <dir>/<dataset>_<partition>.npz"
    )
    assert "examples/opfgl_reference_partition.py" in action.help
    bare = argparse.ArgumentParser()
    add_partition_dir_option(bare)
    (action,) = [a for a in bare._actions if a.dest == "partition_dir"]
    assert action.help.startswith("read each cell's partition")
