"""Partitioners: invariants, determinism, caching, the methods' intended effects, and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from securefgl.data import edge_homophily, load_dataset, make_csbm, partition_graph, partition_methods
from securefgl.data.federated import FederatedGraph
from securefgl.errors import ConfigError, PartitionError

SMALL_PARAMS = {
    "random": {},
    "metis": {},
    "louvain": {},
    "louvain+": {"num_coms": 20},
    "metis+": {"num_coms": 20},
    "dirichlet": {"alpha": 1.0},
    "structure-noniid": {},
    "fedlog": {},
    "kmeans": {"n_init": 2},
}


def _keys(src: torch.Tensor, dst: torch.Tensor, n: int) -> np.ndarray:
    return np.sort((src.long() * n + dst.long()).numpy())


def check_invariants(fg: FederatedGraph, data) -> None:
    """Each node in at most one client; local (minus injected) + cross + unowned edges == source edges."""
    n = int(data.num_nodes)
    assert fg.num_nodes == n and fg.node_owner.shape == (n,)
    gids = torch.cat([c.global_id for c in fg.clients])
    assert gids.unique().numel() == gids.numel(), "a node is in two clients"
    assert int((fg.node_owner >= 0).sum()) == gids.numel()
    for k, c in enumerate(fg.clients):
        assert c.num_nodes > 0, "empty client"
        assert torch.equal(fg.node_owner[c.global_id], torch.full((c.num_nodes,), k))
        assert torch.equal(c.x, data.x[c.global_id]) and torch.equal(c.y, data.y[c.global_id])
        assert not (c.train_mask & c.val_mask).any() and not (c.train_mask & c.test_mask).any()
        assert not (c.val_mask & c.test_mask).any()
        if c.edge_index.numel():
            assert int(c.edge_index.max()) < c.num_nodes
    # edges
    local = torch.cat([c.global_id[c.edge_index] for c in fg.clients], 1)
    local_keys = _keys(local[0], local[1], n)
    if fg.injected_edges.numel():
        inj = _keys(fg.injected_edges[0], fg.injected_edges[1], n)
        assert np.isin(inj, local_keys).all(), "injected edges missing from the clients"
        assert not np.isin(inj, _keys(data.edge_index[0], data.edge_index[1], n)).any(), (
            "injected an existing edge"
        )
        local_keys = local_keys[~np.isin(local_keys, inj)]
    whole = np.sort(
        np.concatenate(
            [
                local_keys,
                _keys(fg.cross_edges[0], fg.cross_edges[1], n),
                _keys(fg.unowned_edges[0], fg.unowned_edges[1], n),
            ]
        )
    )
    assert np.array_equal(whole, _keys(data.edge_index[0], data.edge_index[1], n))
    assert torch.equal(fg.cross_owners, fg.node_owner[fg.cross_edges])
    assert (fg.cross_owners[0] != fg.cross_owners[1]).all() and (fg.cross_owners >= 0).all()


def _state(fg: FederatedGraph) -> list[torch.Tensor]:
    out = [fg.node_owner, fg.injected_edges]
    for c in fg.clients:
        out += [c.train_mask, c.val_mask, c.test_mask, c.edge_index]
    return out


def _same(a: FederatedGraph, b: FederatedGraph) -> bool:
    sa, sb = _state(a), _state(b)
    return len(sa) == len(sb) and all(
        x.shape == y.shape and torch.equal(x, y) for x, y in zip(sa, sb, strict=True)
    )


def test_all_methods_listed() -> None:
    assert list(partition_methods()) == [*SMALL_PARAMS, "file"]  # file: tests/data/test_partition_file.py


@pytest.mark.parametrize("method", list(SMALL_PARAMS))
def test_invariants_and_determinism_small(small_csbm, method: str, tmp_path) -> None:
    k = 3 if method == "fedlog" else 4
    params = SMALL_PARAMS[method]
    a = partition_graph(small_csbm, method, k, seed=1, cache=False, **params)
    check_invariants(a, small_csbm)
    assert a.num_clients == k and a.meta["method"] == method and a.meta["cache_hit"] is False
    b = partition_graph(small_csbm, method, k, seed=1, cache=False, **params)
    assert _same(a, b), "same seed must give the identical partition"
    c = partition_graph(small_csbm, method, k, seed=2, cache=False, **params)
    assert not _same(a, c), "a different seed must give a different partition"


@pytest.mark.parametrize(
    ("name", "method", "k"),
    [
        ("Cora", "louvain", 10),
        ("CiteSeer", "metis", 5),
        ("chameleon", "random", 5),
        ("Tolokers", "metis", 10),
    ],
)
def test_invariants_on_real_graphs(data_root, name: str, method: str, k: int) -> None:
    data = load_dataset(name, data_root)
    fg = partition_graph(data, method, k, seed=0, cache=False)
    check_invariants(fg, data)


def _mean_label_tv(fg: FederatedGraph) -> float:
    glob = torch.bincount(torch.cat([c.y for c in fg.clients]), minlength=fg.num_classes).double()
    glob /= glob.sum()
    tvs = []
    for c in fg.clients:
        h = torch.bincount(c.y, minlength=fg.num_classes).double()
        tvs.append(0.5 * float((h / h.sum() - glob).abs().sum()))
    return float(np.mean(tvs))


@pytest.mark.parametrize("method", ["louvain+", "metis+"])
def test_opfgl_splits_skew_labels(cora, method: str) -> None:
    fg = partition_graph(cora, method, 10, seed=0, cache=False)
    check_invariants(fg, cora)
    assert 90 <= fg.meta["info"]["num_groups"] <= 100  # owners left empty by the packing are skipped
    rnd = partition_graph(cora, "random", 10, seed=0, cache=False)
    skew, base = _mean_label_tv(fg), _mean_label_tv(rnd)
    assert base < 0.1 and skew > 0.35 and skew > 4 * base
    # every client is dominated by a few classes: its top class is far above the global share
    top_share = [float(torch.bincount(c.y).max()) / c.num_nodes for c in fg.clients]
    global_top = float(torch.bincount(cora.y).max()) / cora.num_nodes  # 0.30 on Cora
    assert np.median(top_share) > 1.25 * global_top
    # unequal sizes (the recipe does not balance clients)
    assert max(fg.client_sizes()) > 1.5 * min(fg.client_sizes())


def test_louvain_largest_caps_and_drops(cora) -> None:
    fg = partition_graph(cora, "louvain", 10, seed=0, cache=False)
    cap = fg.meta["info"]["max_size"]
    assert cap == 271 and max(fg.client_sizes()) <= cap
    assert fg.client_sizes() == sorted(fg.client_sizes(), reverse=True)
    assert int((fg.node_owner < 0).sum()) == 2708 - sum(fg.client_sizes()) > 0
    greedy = partition_graph(cora, "louvain", 10, seed=0, cache=False, assign="greedy")
    check_invariants(greedy, cora)
    assert int((greedy.node_owner >= 0).sum()) == 2708


def test_dirichlet_alpha_controls_skew(cora) -> None:
    skewed = partition_graph(cora, "dirichlet", 5, seed=0, cache=False, alpha=0.1)
    mild = partition_graph(cora, "dirichlet", 5, seed=0, cache=False, alpha=100.0)
    assert _mean_label_tv(skewed) > 0.3 > 0.05 > _mean_label_tv(mild)


@pytest.mark.parametrize("name", ["Cora", "chameleon"])
def test_structure_noniid_moves_homophily(data_root, name: str) -> None:
    data = load_dataset(name, data_root)
    modes = ("homo", "hete", "homo", "hete")
    fg = partition_graph(data, "structure-noniid", 4, seed=0, cache=False, modes=modes)
    check_invariants(fg, data)
    metis = partition_graph(data, "metis", 4, seed=0, cache=False)
    assert torch.equal(fg.node_owner, metis.node_owner)  # Metis first, then injection only adds edges
    for k, (c, m) in enumerate(zip(fg.clients, metis.clients, strict=True)):
        before, after = edge_homophily(m.edge_index, m.y), edge_homophily(c.edge_index, c.y)
        added = (c.edge_index.shape[1] - m.edge_index.shape[1]) // 2
        info = fg.meta["info"]["clients"][k]
        assert added == info["added"] == info["requested"] == (m.edge_index.shape[1] // 2) // 2
        assert info["edge_homophily_after"] == pytest.approx(after)
        if modes[k] == "homo":
            assert after > before
        else:
            assert after < before


def test_structure_noniid_coin_and_edge_anchor(small_csbm) -> None:
    fg = partition_graph(small_csbm, "structure-noniid", 6, seed=3, cache=False, anchor="edge", p_homo=0.5)
    check_invariants(fg, small_csbm)
    assert set(fg.meta["info"]["modes"]) <= {"homo", "hete"}
    all_homo = partition_graph(small_csbm, "structure-noniid", 6, seed=3, cache=False, p_homo=1.0)
    assert fg.meta["info"]["modes"] != ["hete"] * 6 and all_homo.meta["info"]["modes"] == ["homo"] * 6


def test_structure_noniid_pair_rate_is_the_codes_injection(data_root) -> None:
    """``pair_rate``: each eligible non-edge pair at that rate (labels equal for homo, different for hete), and
    every node left without edges gets one eligible partner (unless it has none)."""
    data = load_dataset("chameleon", data_root)
    modes = ("homo", "hete", "homo", "hete")
    fg = partition_graph(data, "structure-noniid", 4, seed=0, cache=False, modes=modes, pair_rate=0.001)
    check_invariants(fg, data)
    metis = partition_graph(data, "metis", 4, seed=0, cache=False)
    assert torch.equal(fg.node_owner, metis.node_owner)
    for k, (c, m) in enumerate(zip(fg.clients, metis.clients, strict=True)):
        before = {tuple(e) for e in m.edge_index.t().tolist()}
        new = [(u, v) for u, v in c.edge_index.t().tolist() if u < v and (u, v) not in before]
        info = fg.meta["info"]["clients"][k]
        assert len(new) == info["added"] > 0
        same = [bool(c.y[u] == c.y[v]) for u, v in new]
        assert all(same) if modes[k] == "homo" else not any(same)
        n = int(c.num_nodes)
        eligible = sum(
            int((c.y == y).sum()) * (int((c.y == y).sum()) - 1) // 2 for y in torch.unique(c.y).tolist()
        )
        if modes[k] == "hete":
            eligible = n * (n - 1) // 2 - eligible
        isolated = int((torch.bincount(m.edge_index[0], minlength=n) == 0).sum())
        assert info["added"] <= 0.001 * eligible + 5 * math.sqrt(0.001 * eligible) + isolated
        assert info["added"] < 0.5 * (m.edge_index.shape[1] // 2)  # far below the text's rho = 0.5
        degree = torch.bincount(c.edge_index[0], minlength=n)
        assert int((degree == 0).sum()) <= isolated
    with pytest.raises(ConfigError, match="pair_rate must be in"):
        partition_graph(data, "structure-noniid", 4, seed=0, cache=False, pair_rate=1.5)


def test_fedlog_held_out_and_missing_classes(cora) -> None:
    fg = partition_graph(cora, "fedlog", 3, seed=0, split=(0.4, 0.3, 0.3), cache=False)
    check_invariants(fg, cora)
    info = fg.meta["info"]
    assert info["lcc_nodes"] == 2485  # Cora's largest connected component
    held = fg.held_out
    assert held is not None and held.num_nodes == info["new_client_nodes"] > 400
    assert (fg.node_owner[held.global_id] == -1).all() and held.test_mask.all() and not held.train_mask.any()
    for k, c in enumerate(fg.clients):
        missing = info["missing_classes"][k]
        assert len(missing) >= 1
        assert not np.isin(c.y.numpy(), missing).any()
        assert info["removed_nodes"][k] >= 20
        assert len(torch.unique(c.y)) >= 2
    explicit = partition_graph(cora, "fedlog", 3, seed=0, cache=False, missing_classes=[[0], [1, 2], []])
    assert explicit.meta["info"]["missing_classes"] == [[0], [1, 2], []]
    assert not (explicit.clients[1].y <= 2).logical_and(explicit.clients[1].y >= 1).any()


def test_fedlog_metis_is_kway_unless_asked(cora) -> None:
    """k-way (FED-PUB's call; FedLoG's A.16 parts are unequal) by default, recursive bisection on request."""
    keep_all = {"missing_per_client": 0, "min_missing_nodes": 0, "cache": False}

    def part_sizes(fg) -> list[int]:
        return sorted([int(c.num_nodes) for c in fg.clients] + [int(fg.held_out.num_nodes)])

    kway = part_sizes(partition_graph(cora, "fedlog", 3, seed=0, **keep_all))
    bisect = part_sizes(partition_graph(cora, "fedlog", 3, seed=0, recursive=True, **keep_all))
    assert sum(kway) == sum(bisect) == 2485
    assert bisect == [621, 621, 621, 622]  # recursive bisection balances exactly
    assert max(kway) - min(kway) > 1


def test_kmeans_is_capped(cora) -> None:
    fg = partition_graph(cora, "kmeans", 5, seed=0, cache=False, n_init=2)
    check_invariants(fg, cora)
    assert max(fg.client_sizes()) <= int(np.ceil(2708 / 5)) + 20


def test_public_and_global_splits(cora, small_csbm) -> None:
    fg = partition_graph(cora, "metis", 4, seed=0, split="public", cache=False)
    g = fg.global_data()
    for k in ("train_mask", "val_mask", "test_mask"):
        assert torch.equal(g[k], cora[k])
    glob = partition_graph(
        cora, "random", 4, seed=0, split=(0.1, 0.1, 0.8), split_scope="global", cache=False
    )
    tr = glob.global_data().train_mask
    counts = torch.bincount(cora.y[tr], minlength=7)
    assert torch.equal(counts, (torch.bincount(cora.y, minlength=7) * 0.1).floor().long())
    with pytest.raises(PartitionError, match="no public split"):
        partition_graph(small_csbm, "metis", 2, split="public", cache=False)


def test_global_data_roundtrip(small_csbm) -> None:
    fg = partition_graph(small_csbm, "structure-noniid", 3, seed=0, cache=False)
    g = fg.global_data()
    assert g.edge_index.shape[1] == small_csbm.edge_index.shape[1] + fg.injected_edges.shape[1]
    assert torch.equal(fg.global_data(include_injected=False).edge_index, small_csbm.edge_index)
    assert int(g.train_mask.sum()) == sum(int(c.train_mask.sum()) for c in fg.clients)
    s = fg.summary()
    assert s["num_clients"] == 3 and sum(r["nodes"] for r in s["clients"]) == s["nodes_in_clients"]


# ------------------------------------------------------------------------------------------------ cache


def test_cache_hit_and_rebuild_on_any_change(small_csbm, tmp_path) -> None:
    base = dict(seed=0, split=(0.2, 0.4, 0.4), cache_dir=tmp_path)
    first = partition_graph(small_csbm, "dirichlet", 3, alpha=0.5, **base)
    assert first.meta["cache_hit"] is False
    assert (tmp_path / f"{first.meta['key']}.pt").is_file() and (
        tmp_path / f"{first.meta['key']}.json"
    ).is_file()
    second = partition_graph(small_csbm, "dirichlet", 3, alpha=0.5, **base)
    assert (
        second.meta["cache_hit"] is True and second.meta["key"] == first.meta["key"] and _same(first, second)
    )
    check_invariants(second, small_csbm)

    other_graph = make_csbm(
        num_nodes=300, num_classes=3, avg_degree=6.0, homophily=0.8, num_features=16, seed=1
    )
    variants = [
        dict(alpha=0.6, **base),
        dict(alpha=0.5, **{**base, "seed": 1}),
        dict(alpha=0.5, **{**base, "split": (0.3, 0.3, 0.4)}),
        dict(alpha=0.5, split_scope="global", **base),
        dict(alpha=0.5, stratified=False, **base),
        dict(alpha=0.5, min_size=2, **base),
    ]
    keys = {first.meta["key"]}
    for kw in variants:
        fg = partition_graph(small_csbm, "dirichlet", 3, **kw)
        assert fg.meta["cache_hit"] is False
        keys.add(fg.meta["key"])
    assert partition_graph(small_csbm, "dirichlet", 4, alpha=0.5, **base).meta["cache_hit"] is False
    assert partition_graph(other_graph, "dirichlet", 3, alpha=0.5, **base).meta["cache_hit"] is False
    assert partition_graph(small_csbm, "random", 3, **base).meta["cache_hit"] is False
    assert len(keys) == len(variants) + 1


def test_mismatching_or_corrupt_cache_is_rebuilt(small_csbm, tmp_path) -> None:
    fg = partition_graph(small_csbm, "random", 3, seed=0, cache_dir=tmp_path)
    key = fg.meta["key"]
    js, pt = tmp_path / f"{key}.json", tmp_path / f"{key}.pt"
    # tamper with the stored parameters: the entry no longer matches and must not be reused
    stored = json.loads(js.read_text())
    stored["request"]["seed"] = 99
    js.write_text(json.dumps(stored))
    again = partition_graph(small_csbm, "random", 3, seed=0, cache_dir=tmp_path)
    assert again.meta["cache_hit"] is False and _same(fg, again)
    assert json.loads(js.read_text())["request"]["seed"] == 0  # rewritten
    # a wrong tensor file (another partition of the same graph) beside a matching JSON is detected and rebuilt
    other = partition_graph(small_csbm, "random", 3, seed=1, cache_dir=tmp_path)
    pt.write_bytes((tmp_path / f"{other.meta['key']}.pt").read_bytes())
    swapped = partition_graph(small_csbm, "random", 3, seed=0, cache_dir=tmp_path)
    assert swapped.meta["cache_hit"] is False and _same(fg, swapped)
    torch.save({"node_owner": torch.zeros(5, dtype=torch.long)}, pt)
    assert partition_graph(small_csbm, "random", 3, seed=0, cache_dir=tmp_path).meta["cache_hit"] is False
    pt.write_bytes(b"garbage")
    rebuilt = partition_graph(small_csbm, "random", 3, seed=0, cache_dir=tmp_path)
    assert rebuilt.meta["cache_hit"] is False and _same(fg, rebuilt)
    assert partition_graph(small_csbm, "random", 3, seed=0, cache_dir=tmp_path).meta["cache_hit"] is True


def test_default_cache_dir_is_under_data_root(data_root, small_csbm) -> None:
    fg = partition_graph(small_csbm, "metis", 2, seed=5)
    assert fg.meta["cache_path"].startswith(str(data_root / "_partitions"))


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "needle"),
    [
        (("spectral", 3), {}, PartitionError, "valid choices: random, metis, louvain, louvain+, metis+"),
        (("random", 301), {}, PartitionError, "301 clients requested for a graph of 300 nodes"),
        (("random", 0), {}, PartitionError, "num_clients must be at least 1"),
        (("random", 2.0), {}, PartitionError, "num_clients must be an integer"),
        (("louvain+", 21), {"num_coms": 20}, PartitionError, "only num_coms=20 communities"),
        (("metis+", 101), {}, PartitionError, "only num_coms=100 communities"),
        (("random", 3), {"split": (0.5, 0.5, 0.5)}, ConfigError, "sum to 1.5 > 1"),
        (("random", 3), {"seed": 1.5}, PartitionError, "seed must be an integer"),
        (("random", 3), {"seed": "7"}, PartitionError, "seed must be an integer"),
        (("random", 3), {"seed": True}, PartitionError, "seed must be an integer"),
        (("random", 3), {"seed": -1}, PartitionError, "seed must be at least 0"),
        (("dirichlet", 3), {"beta": 2}, ConfigError, "valid keys in 'params': alpha, min_size, max_tries"),
        (("dirichlet", 3), {"alpha": 0}, ConfigError, "alpha must be a finite number > 0"),
        (("louvain", 3), {"assign": "all"}, ConfigError, "valid choices: 'largest', 'greedy'"),
        (("random", 3), {"split_scope": "local"}, ConfigError, "valid choices: 'client', 'global'"),
        (("random", 290), {}, PartitionError, "is empty"),
        (("louvain", 200), {"max_size": 1000}, PartitionError, "communities"),
        (("structure-noniid", 3), {"modes": ("homo",)}, PartitionError, "modes has 1 entries for 3 clients"),
    ],
)
def test_bad_input_raises_documented_error(small_csbm, args, kwargs, error, needle: str) -> None:
    with pytest.raises(error) as info:
        partition_graph(small_csbm, *args, cache=False, **kwargs)
    assert needle in str(info.value)


def test_unknown_dataset_name(data_root) -> None:
    with pytest.raises(ConfigError, match="unknown dataset 'Corra'"):
        partition_graph("Corra", "random", 2)


def test_vectorized_louvain_backend(cora) -> None:
    import networkx as nx
    import scipy.sparse as sp

    from securefgl.data._louvain import modularity, vectorized_louvain

    src, dst = cora.edge_index.numpy()
    n = int(cora.num_nodes)
    a = vectorized_louvain(n, src, dst, seed=0)
    assert np.array_equal(a, vectorized_louvain(n, src, dst, seed=0))
    adj = sp.csr_matrix((np.ones(src.size), (src, dst)), shape=(n, n))
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    ref = np.zeros(n, dtype=np.int64)
    for i, c in enumerate(nx.community.louvain_communities(g, seed=0)):
        ref[list(c)] = i
    assert modularity(adj, a) > 0.97 * modularity(adj, ref)
    fg = partition_graph(cora, "louvain", 10, seed=0, cache=False, backend="vectorized")
    check_invariants(fg, cora)
    assert fg.meta["info"]["backend"] == "vectorized"
    assert partition_graph(cora, "louvain", 10, seed=0, cache=False).meta["info"]["backend"] == "networkx"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["random", "metis", "dirichlet"])
def test_million_node_graph(method: str) -> None:
    data = make_csbm(num_nodes=1_000_000, num_classes=10, avg_degree=10.0, num_features=8, seed=0)
    fg = partition_graph(data, method, 10, seed=0, cache=False)
    check_invariants(fg, data)


def test_chunk_orders() -> None:
    """'breadth' lists every community's first piece, then the second pieces...; 'community' keeps them together."""
    from securefgl.data.partition import _chunks

    a, b = np.arange(5), np.arange(10, 13)
    by_comm = [c.tolist() for c in _chunks([a, b], 2, "community")]
    by_level = [c.tolist() for c in _chunks([a, b], 2, "breadth")]
    assert by_comm == [[0, 1], [2, 3], [4], [10, 11], [12]]
    assert by_level == [[0, 1], [10, 11], [2, 3], [12], [4]]


def test_louvain_plus_breadth_order_mixes_communities(cora) -> None:
    """O-pFGL's reference packing (breadth order) gives less pure owners than keeping communities together."""
    purity = {}
    for order in ("breadth", "community"):
        fg = partition_graph(cora, "louvain+", 10, seed=0, cache=False, chunk_order=order)
        check_invariants(fg, cora)
        purity[order] = float(np.mean([float(torch.bincount(c.y).max()) / c.num_nodes for c in fg.clients]))
    assert purity["breadth"] < purity["community"] - 0.05, purity
    with pytest.raises(ConfigError, match="chunk_order"):
        partition_graph(cora, "louvain+", 10, seed=0, cache=False, chunk_order="random")
