"""Partitioners: split one graph among K clients, deterministically by seed, cached by every parameter.

Methods (``partition_graph(data, method, K, seed=..., split=..., **params)``):

``random``
    Each node goes to a client drawn uniformly at random (FedStruct; sizes are Binomial(N, 1/K)).
``metis``
    ``pymetis`` k-way partition into K parts (minimum edge cut), seeded.
``louvain``
    Louvain communities (seeded, ``resolution``; networkx ``louvain_communities`` up to 20,000 nodes, a
    vectorised synchronous Louvain above, selectable with ``backend``). ``assign="largest"``
    (default, FedSpray): communities larger than ``max_size`` (default ``ceil(N / K)``) are cut into chunks of
    at most ``max_size`` nodes, and the K largest groups become the clients; the other nodes belong to no client.
    ``assign="greedy"`` (FedSage+/AdaFGL "community split"): groups are capped at ``N // K - delta`` and
    assigned greedily so that every node has a client.
``louvain+`` / ``metis+``
    O-pFGL's label-imbalance splits (spec ``opfgl.md`` §1.2): over-partition into ``num_coms = 100`` groups
    (Louvain, size-capped at ``N // 100 - 20`` and greedily packed into 100 owners; or Metis into 100 parts),
    then ``KMeans(K)`` on the groups' normalised label histograms; a client is the union of one cluster.
``dirichlet``
    Label skew: each class is split among clients with proportions drawn from ``Dir(alpha)``.
``structure-noniid``
    AdaFGL (spec ``adafgl.md`` §1.3): Metis into K parts, then per client a coin (``p_homo``) chooses homophilous
    or heterophilous random edge injection of ``floor(rho |E_i|)`` new intra-client edges.
``fedlog``
    FedLoG (spec ``fedlog.md`` §1.2): largest connected component, Metis (k-way) into K + 1 parts, the last
    part is the held-out new client (``FederatedGraph.held_out``, owner -1), and each client loses the nodes of
    its tail classes ("missing classes", owner -1).
``file``
    A partition made elsewhere (another toolkit, a paper's reference pipeline, :func:`save_partition`): an
    ``.npz`` with the node -> client array ``node_owner`` and, optionally, the ``train_mask`` / ``val_mask`` /
    ``test_mask`` split, which then replaces ``split``. Never cached (the file is the cache).
``kmeans``
    FedStruct: KMeans on node features, clusters above ``ceil(N / K) + delta`` split in two until they fit,
    then packed into K clients (the K largest pieces first; a piece that fits nowhere is cut to fill the
    client with the most room, so no client exceeds the cap).

After the assignment, every client gets a train/val/test split: per-client stratified ratios (default), one
global split drawn before partitioning (``split_scope="global"``), or the dataset's public split
(``split="public"``). The result is a :class:`~securefgl.data.FederatedGraph` with all cross-client edges.

One module per method family: ``_uniform`` (random), ``_metis``, ``_community`` (louvain), ``_label_clusters``
(louvain+, metis+), ``_dirichlet``, ``_structure_noniid``, ``_fedlog``, ``_kmeans``, ``_file``; the registry
of methods in ``_registry`` and :func:`partition_graph` (validation, cache, split) in ``_graph``.
"""

from __future__ import annotations

from securefgl.data.partition._community import AUTO_LOUVAIN_MAX_NODES, LouvainParams
from securefgl.data.partition._community import _chunks as _chunks
from securefgl.data.partition._community import _greedy_pack as _greedy_pack
from securefgl.data.partition._dirichlet import DirichletParams
from securefgl.data.partition._fedlog import FedLoGParams
from securefgl.data.partition._file import PARTITION_FILE_KEYS, FileParams, save_partition
from securefgl.data.partition._graph import partition_graph
from securefgl.data.partition._kmeans import KMeansParams
from securefgl.data.partition._label_clusters import LouvainPlusParams, MetisPlusParams
from securefgl.data.partition._metis import MetisParams
from securefgl.data.partition._registry import (
    check_method_params,
    method_params_class,
    normalize_method,
    partition_methods,
)
from securefgl.data.partition._structure_noniid import StructureNonIIDParams
from securefgl.data.partition._uniform import RandomParams

__all__ = [
    "partition_graph",
    "partition_methods",
    "normalize_method",
    "check_method_params",
    "method_params_class",
    "RandomParams",
    "MetisParams",
    "LouvainParams",
    "LouvainPlusParams",
    "MetisPlusParams",
    "DirichletParams",
    "StructureNonIIDParams",
    "FedLoGParams",
    "KMeansParams",
    "FileParams",
    "save_partition",
    "PARTITION_FILE_KEYS",
    "AUTO_LOUVAIN_MAX_NODES",
]
