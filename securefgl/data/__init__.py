"""securefgl.data: datasets, the synthetic CSBM default, partitioners, splits and homophily metrics."""

from __future__ import annotations

from securefgl.data.cache import graph_fingerprint
from securefgl.data.datasets import (
    DATASETS,
    DatasetInfo,
    canonical_name,
    dataset_names,
    load_dataset,
    missing_files,
)
from securefgl.data.federated import FederatedGraph
from securefgl.data.homophily import (
    adjusted_homophily,
    class_homophily,
    edge_homophily,
    homophily_report,
    node_homophily,
)
from securefgl.data.partition import partition_graph, partition_methods
from securefgl.data.root import data_root
from securefgl.data.splits import split_masks
from securefgl.data.synthetic import make_csbm

__all__ = [
    "DATASETS",
    "DatasetInfo",
    "FederatedGraph",
    "adjusted_homophily",
    "canonical_name",
    "class_homophily",
    "data_root",
    "dataset_names",
    "edge_homophily",
    "graph_fingerprint",
    "homophily_report",
    "load_dataset",
    "make_csbm",
    "missing_files",
    "node_homophily",
    "partition_graph",
    "partition_methods",
    "split_masks",
]
