"""External-edge inference from FedStruct rows, on rows delivered by the real setup (plaintext and secagg)."""

from __future__ import annotations

import warnings

import pytest
import torch

from securefgl.algorithms.fedstruct import attach_cross_edges
from securefgl.algorithms.fedstruct._setup import StructureView, private_abar
from securefgl.attacks import AuditConfig, audit, external_edge_inference
from securefgl.attacks.structure_inference import known_walks
from securefgl.data import make_csbm, partition_graph
from securefgl.errors import AttackNotApplicableError, ConfigError
from securefgl.protocols.registry import get_protocol


@pytest.fixture(scope="module")
def fg():
    data = make_csbm(num_nodes=200, num_classes=3, avg_degree=4.0, homophily=0.7, num_features=8, seed=0)
    return attach_cross_edges(partition_graph(data, "random", 4, seed=0, cache=False))


def _rows(fg, protocol: str, hops: int, beta=None) -> list[torch.Tensor]:
    views = [StructureView.from_data(i, c) for i, c in enumerate(fg.clients)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        abar, _ = private_abar(views, get_protocol(protocol), hops, beta=beta)
    return abar


def _known(c) -> torch.Tensor:
    """The edges client ``c`` knows (spec §1.2): intra-edges and inter-edges, in global ids."""
    gid = c.global_id.long()
    return torch.cat([gid[c.edge_index], torch.stack([gid[c.fs_cross_src], c.fs_cross_dst])], 1)


def _attack(fg, rows, cid: int, beta=None, seed: int = 0) -> dict:
    c = fg.clients[cid]
    return external_edge_inference(
        rows[cid],
        c.global_id,
        _known(c),
        fg.global_data().edge_index,
        fg.num_nodes,
        generator=torch.Generator().manual_seed(seed),
        beta=beta,
    )


def test_two_hop_rows_reveal_other_clients_edges(fg):
    rows = _rows(fg, "plaintext", 2)
    for cid in (0, 1):
        raw = _attack(fg, rows, cid)
        out = _attack(fg, rows, cid, beta=(0.0, 1.0))
        assert out["pairs"] == 2 * out["k"] and out["pairs"] > 300
        assert out["chance"] == {"auc": 0.5, "precision@k": 0.5}
        # observed: AUC 0.93-0.96, precision@k 0.89-0.90
        assert raw["auc"] > 0.88 and out["auc"] > 0.9 and out["precision@k"] > 0.8
        assert out["public"]["auc"] < 0.6  # without the setup: only triangles through own nodes
    again = _attack(fg, rows, 1, beta=(0.0, 1.0))
    assert again["auc"] == out["auc"] and again["precision@k"] == out["precision@k"]


def test_one_hop_rows_reveal_nothing_new(fg):
    rows = _rows(fg, "plaintext", 1)
    c = fg.clients[0]
    known = known_walks(c.global_id, _known(c), fg.num_nodes, (1.0,))
    assert torch.allclose(known, rows[0], atol=1e-12)  # the client computes its 1-hop rows alone
    sub = _attack(fg, rows, 0, beta=(1.0,))
    assert sub["auc"] == 0.5 and sub["informative_pairs"] == 0
    raw = _attack(fg, rows, 0)  # raw 1-hop rows: only triangles through known nodes, observed AUC ~0.50
    assert abs(raw["auc"] - 0.5) < 0.05


def test_secagg_delivered_rows_leak_as_much_as_plaintext(fg):
    beta = (0.2, 0.3, 0.5)
    secure = _attack(fg, _rows(fg, "secagg", 3, beta), 1, beta=beta)
    plain = _attack(fg, _rows(fg, "plaintext", 3, beta), 1, beta=beta)
    # observed: AUC 0.95, precision@k 0.92 under both (the secure sum hides the terms, not the sum)
    assert secure["auc"] > 0.9 and secure["precision@k"] > 0.85
    assert abs(secure["auc"] - plain["auc"]) < 1e-3


def test_refusals_are_typed_and_explain():
    g = torch.Generator().manual_seed(0)
    own = torch.tensor([0, 1])
    intra = torch.tensor([[0], [1]])
    rows = torch.zeros(2, 5, dtype=torch.float64)
    with pytest.raises(AttackNotApplicableError, match="no external neighbour"):
        external_edge_inference(rows, own, intra, intra, 5, generator=g)
    known = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(AttackNotApplicableError, match="no true edge among the candidate pairs"):
        external_edge_inference(rows, own, known, known, 5, generator=g)
    with pytest.raises(ConfigError, match=r"rows must be \(n_i, N\)"):
        external_edge_inference(rows[:1], own, known, known, 5, generator=g)


SMALL_RUN = {
    "dataset": {"csbm": {"num_nodes": 200, "num_classes": 3, "num_features": 8, "avg_degree": 4.0}},
    "partition": {"method": "random", "cache": False},
    "algorithm": {"options": {"num_hops_s": 2}},
}


def test_audit_cell_curious_fedstruct_client():
    res = audit(
        AuditConfig(
            algorithm="fedstruct",
            dataset="csbm",
            clients=4,
            trials=2,
            rounds=1,
            attacks=("structure-inference",),
            protocols=("plaintext", "secagg"),
            views=("client", "server"),
            run=SMALL_RUN,
        )
    )
    plain = res.get("structure-inference", "plaintext", "client")
    secure = res.get("structure-inference", "secagg", "client")
    assert plain.status == secure.status == "ok"
    auc = secure.metrics["auc"]
    # observed: AUC 0.937 under both protocols, public 0.51
    assert auc.trials == 2 and auc.mean > 0.85 and auc.baselines["chance"] == 0.5
    assert auc.baselines["public"] < 0.6
    assert abs(auc.mean - plain.metrics["auc"].mean) < 1e-3
    server = res.get("structure-inference", "secagg", "server")
    assert server.status == "not_applicable" and "curious client" in server.reason


def test_audit_refuses_other_algorithms_and_one_hop():
    with pytest.raises(AttackNotApplicableError, match="delivers none"):
        audit(AuditConfig(algorithm="fedavg", dataset="csbm", attacks=("structure-inference",)))
    one_hop = {**SMALL_RUN, "algorithm": {"options": {"num_hops_s": 1}}}
    with pytest.raises(AttackNotApplicableError, match="num_hops_s=1"):
        audit(
            AuditConfig(
                algorithm="fedstruct",
                dataset="csbm",
                clients=4,
                attacks=("structure-inference",),
                protocols=("plaintext",),
                run=one_hop,
            )
        )
