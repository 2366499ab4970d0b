"""Optimisation-based update inversion on real FedAvg clients (Cora, GCN): the simulation, then the attack."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from securefgl.attacks._inversion_analytic import deconvolve_rows
from securefgl.attacks.gradient_inversion import (
    InversionConfig,
    TrainingRecipe,
    invert_update,
    score_reconstruction,
    simulate_update,
    update_from_upload,
)
from securefgl.attacks.views import GraphKnowledge


def _cell(root: Any, per_client: int, model: str = "gcn", epochs: int = 1) -> dict[str, Any]:
    """Cora, 10 clients, FedAvg's real client step from the honest first broadcast (SGD, lr 0.1, dropout 0)."""
    from securefgl.api import load_federated_graph
    from securefgl.attacks._imprint_run import malicious_setup
    from securefgl.attacks.analytic_inversion import subsample_train
    from securefgl.config import RunConfig

    cfg = RunConfig.from_mapping(
        {
            "dataset": {"name": "Cora", "root": str(root)},
            "partition": {"clients": 10},
            "algorithm": {"name": "fedavg"},
            "model": {"name": model, "dropout": 0.0},
            "train": {"optimizer": "sgd", "local_epochs": epochs, "lr": 0.1},
            "protocol": {"name": "secagg"},
            "output": {"save": False},
        }
    )
    fg = subsample_train(load_federated_graph(cfg), per_client, 0)
    setup = malicious_setup(cfg, fg, 0, "cpu")
    contrib = setup.train(setup.clients, setup.broadcast)
    return {
        "fg": fg,
        "setup": setup,
        "contrib": contrib,
        "recipe": TrainingRecipe.from_train_config(cfg.train),
    }


def _cos(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    keys = list(a)
    u = torch.cat([a[k].double().flatten() for k in keys])
    v = torch.cat([b[k].double().flatten() for k in keys])
    return float(F.cosine_similarity(u, v, dim=0))


def test_simulated_update_equals_the_real_client_update(data_root):
    """True features through the attack's own receptive field reproduce the engine's upload (GCN, 2 steps)."""
    from torch_geometric.utils import k_hop_subgraph

    from securefgl.attacks.gradient_inversion import _unknown_rows

    c = _cell(data_root, 2, epochs=2)
    fg, setup = c["fg"], c["setup"]
    field_only = []
    for i in setup.clients[:4]:
        d = fg.clients[i]
        up = update_from_upload(c["contrib"][i], setup.broadcast, source="individual")
        tidx = torch.nonzero(d.train_mask).flatten()
        y = F.one_hot(d.y[tidx], fg.num_classes).float()
        graph = GraphKnowledge(i, d.num_nodes, d.edge_index, tidx)
        n, rows, pad, ei, train_rows, used = _unknown_rows(
            setup.model, graph, InversionConfig(), int(tidx.numel()), torch.device("cpu")
        )
        assert used and n == tidx.numel() and pad > 0
        inner = k_hop_subgraph(tidx, 2, d.edge_index, num_nodes=d.num_nodes)[0]
        assert inner.numel() == rows
        x = torch.cat([d.x[inner].float(), torch.zeros(pad, d.x.shape[1])])  # pad rows: any features
        sim = simulate_update(
            setup.model, up.base, x, y, c["recipe"], edge_index=ei, train_index=train_rows, create_graph=False
        )
        assert _cos(sim, up.delta) > 0.999
        # the receptive field alone (no outer hop) gets the outermost degrees wrong: a different update
        sub, sei, mapping, _ = k_hop_subgraph(
            tidx, 2, d.edge_index, relabel_nodes=True, num_nodes=d.num_nodes
        )
        bad = simulate_update(
            setup.model, up.base, d.x[sub].float(), y, c["recipe"], edge_index=sei, train_index=mapping
        )
        field_only.append(_cos({k: v.detach() for k, v in bad.items()}, up.delta))
    assert min(field_only) < 0.999


def test_deconvolution_reads_raw_rows_back_from_propagated_rows():
    """Sparse binary rows on a path graph: the bound min_j Z_j / P_ji recovers a row whose neighbours differ."""
    x = torch.tensor([[1, 0, 0, 1], [0, 1, 0, 1], [0, 0, 1, 0]], dtype=torch.float32)
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    from securefgl.attacks._inversion_model import first_layer_operator
    from securefgl.nn.registry import ModelSpec, build_model

    op = first_layer_operator(build_model(ModelSpec(name="gcn"), 4, 2), ei, 3)
    assert op is not None
    z = op @ x
    est = deconvolve_rows(z, op, torch.tensor([1]), torch.ones(3, dtype=torch.bool), cap=1.0)
    assert torch.allclose(est[0], x[1], atol=1e-5)
    # with only the node itself observed the bound is loose (its neighbours' features leak in)
    own = torch.tensor([False, True, False])
    loose = deconvolve_rows(z, op, torch.tensor([1]), own, cap=1.0)
    assert float(F.cosine_similarity(loose[0], x[1], dim=0)) < 0.9


def _invert(c: dict[str, Any], i: int, up: Any, n: int) -> dict[str, float]:
    fg, setup = c["fg"], c["setup"]
    d = fg.clients[i]
    tidx = torch.nonzero(d.train_mask).flatten()
    rec = invert_update(
        up,
        setup.model,
        c["recipe"],
        num_features=fg.num_features,
        num_classes=fg.num_classes,
        num_nodes=n,
        graph=GraphKnowledge(i, d.num_nodes, d.edge_index, tidx),
        config=InversionConfig(restarts=2, iterations=150, prior="binary", labels="idlg", anchors=False),
        generator=torch.Generator().manual_seed(i),
    )
    assert rec.graph_used and rec.extra["deconvolved"] and rec.extra["candidate_rows"] == 0
    xs = torch.cat([cl.x for cl in fg.clients]).double()
    xt, yt = d.x[tidx].float(), d.y[tidx]
    sc = score_reconstruction(rec.x, rec.y, xt, yt, num_classes=fg.num_classes)
    chance = score_reconstruction(
        xs.mean(0, keepdim=True).repeat(n, 1), yt, xt, yt, num_classes=fg.num_classes
    )
    return {"cos": sc["feature_cosine"], "chance": chance["feature_cosine"]}


@pytest.mark.slow
def test_plaintext_inversion_succeeds_and_the_secure_sum_does_not(data_root):
    """Cora GCN, 2 training nodes per client, graph known, random starts only: cosine >= 0.5 and far above
    chance on each client's plaintext upload; the same attack on the real secure sum of the 10 clients stays
    at or below chance."""
    from securefgl.engine.broadcast import round_context
    from securefgl.protocols.registry import get_protocol

    c = _cell(data_root, 2)
    setup, bc = c["setup"], c["setup"].broadcast
    sums, _ = get_protocol("secagg").aggregate(
        setup.schema_for(bc), c["contrib"], round_index=0, context=round_context(bc)
    )
    total = update_from_upload(dict(sums), bc, source="sum", contributors=len(c["contrib"]))
    plain, secure = [], []
    for i in setup.clients[:4]:
        n = int(c["fg"].clients[i].train_mask.sum())
        plain.append(_invert(c, i, update_from_upload(c["contrib"][i], bc, source="individual"), n))
        secure.append(_invert(c, i, total, n))
    cos = sum(r["cos"] for r in plain) / len(plain)
    chance = sum(r["chance"] for r in plain) / len(plain)
    sec = sum(r["cos"] for r in secure) / len(secure)
    assert cos >= 0.5 and cos > chance + 0.2, (cos, chance)
    assert sec < chance + 0.05 and sec < cos - 0.3, (sec, chance, cos)
