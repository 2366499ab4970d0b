"""Partition files of the reproduction scripts: ``<dir>/<dataset>_<method>.npz`` and the ``--partition-dir`` option.

The reference-partition replays (:mod:`securefgl.experiments.opfgl_reference_partition`,
:mod:`securefgl.experiments.adafgl_reference_partition`) write one partition file per (dataset, partition
scheme); the reproduction scripts read it back with ``partition_graph(data, "file", K, path=...)`` instead of
partitioning themselves. This module finds such a file and declares the scripts' common option.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from securefgl.errors import PartitionError

__all__ = ["add_partition_dir_option", "partition_file"]


def partition_file(
    directory: str | Path, dataset: str, method: str, *, maker: str = "opfgl_reference_partition"
) -> Path:
    """The partition file ``<directory>/<dataset>_<method>.npz``; the case of the name does not matter.

    Args:
        directory: The folder to look in (only its ``*.npz`` files are considered, not its subfolders).
        dataset: The dataset name, e.g. ``"Cora"`` (``cora_louvain+.npz`` and ``Cora_louvain+.npz`` both match).
        method: The partition scheme, e.g. ``"louvain+"``, ``"metis+"`` or ``"louvain"``.
        maker: The example script that writes such files (without ``.py``), named in the error message.
            (default: ``"opfgl_reference_partition"``)

    Returns:
        The first matching file in name order.

    Raises:
        PartitionError: No file of that name is in ``directory``; the message says how to make it.
    """
    name = f"{dataset}_{method}.npz".lower()
    found = [f for f in sorted(Path(directory).glob("*.npz")) if f.name.lower() == name]
    if not found:
        raise PartitionError(
            f"no {name} in {directory}; make it with examples/{maker}.py (export, then partition)"
        )
    return found[0]


def add_partition_dir_option(parser: argparse.ArgumentParser, what: str = "") -> None:
    """Add ``--partition-dir`` (a :class:`~pathlib.Path`, default ``None``) to a reproduction script's parser.

    The option reads each cell's partition and split from ``<dir>/<dataset>_<partition>.npz`` (see
    :func:`partition_file`), O-pFGL's own partitions rebuilt by ``examples/opfgl_reference_partition.py``.

    Args:
        parser: The parser (or subparser) to extend.
        what: A prefix of the help text naming where the option applies, e.g. ``"table: "``. (default: ``""``)
    """
    parser.add_argument(
        "--partition-dir",
        type=Path,
        default=None,
        help=f"{what}read each cell's partition and split from <dir>/<dataset>_<partition>.npz, O-pFGL's own "
        "partitions rebuilt by examples/opfgl_reference_partition.py, instead of partitioning here",
    )
