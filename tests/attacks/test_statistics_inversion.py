"""Statistics inversion and the differencing attack on O-pFGL's upload, before and after ReleaseGuard."""

from __future__ import annotations

import pytest
import torch

from securefgl.algorithms.base import Client, RoundState, Setting
from securefgl.algorithms.registry import create_algorithm
from securefgl.attacks.statistics_inversion import (
    class_statistics,
    compare_statistics,
    differencing_attack,
    layout_for,
)
from securefgl.attacks.views import PublicInfo, server_view
from securefgl.config import TrainConfig
from securefgl.data import make_csbm, partition_graph
from securefgl.errors import AttackNotApplicableError
from securefgl.nn.registry import ModelSpec
from securefgl.protocols.registry import get_protocol
from securefgl.protocols.release_guard import ReleaseGuard


@pytest.fixture(scope="module")
def opfgl_upload():
    data = make_csbm(num_nodes=360, num_classes=3, num_features=8, avg_degree=6.0, homophily=0.6, seed=1)
    fg = partition_graph(data, "random", 4, seed=0, cache=False, split=(0.3, 0.35, 0.35))
    setting = Setting(
        fg.num_features,
        fg.num_classes,
        fg.num_clients,
        fg.num_nodes,
        fg.num_nodes,
        ModelSpec("gcn"),
        TrainConfig(),
        max_clients_per_round=fg.num_clients,
    )
    alg = create_algorithm("opfgl", setting, {"min_class_contributors": 1})
    clients = [Client(i, c, torch.Generator().manual_seed(i)) for i, c in enumerate(fg.clients)]
    for c in clients:
        alg.init_client(c)
    rs = RoundState("upload", 0, 0, tuple(range(fg.num_clients)), {}, 1)
    contribs = {c.id: {k: torch.as_tensor(v) for k, v in alg.client_step(c, rs).items()} for c in clients}
    return alg.build_schema(), contribs


def test_class_statistics_match_a_direct_computation():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]])
    y = torch.tensor([0, 0, 1])
    up = {
        "count": torch.tensor([2.0, 1.0]),
        "sum": torch.stack([x[y == 0].sum(0), x[y == 1].sum(0)]),
        "sumsq": torch.stack([(x[y == 0] ** 2).sum(0), (x[y == 1] ** 2).sum(0)]),
    }
    st = class_statistics(up, layout_for("opfgl"))
    assert torch.allclose(st.means[0], torch.tensor([2.0, 3.0], dtype=torch.float64))
    assert torch.allclose(st.variances[0], x[y == 0].double().var(0, unbiased=True))
    assert torch.isnan(st.variances[1]).all()  # one node: no variance
    assert torch.allclose(st.label_distribution, torch.tensor([2 / 3, 1 / 3], dtype=torch.float64))
    with pytest.raises(AttackNotApplicableError, match="no class statistics"):
        layout_for("fedavg")


@pytest.mark.parametrize("protocol", ["plaintext", "secagg"])
def test_differencing_recovers_statistics_exactly_and_guard_stops_it(opfgl_upload, protocol):
    schema, contribs = opfgl_upload
    layout = layout_for("opfgl")
    target = 2
    truth = class_statistics(contribs[target], layout)
    res = differencing_attack(get_protocol(protocol), schema, contribs, target)
    assert res.refused == "" and res.second_set == tuple(c for c in sorted(contribs) if c != target)
    # the adversary's side: the two released sums, from the server's view only
    view = server_view(res.records, PublicInfo("opfgl", 8, 3, 4))
    a, b = (view.released_sum(o) for o in view.observations)
    got = class_statistics({k: a[k].double() - b[k].double() for k in a}, layout)
    cmp = compare_statistics(got, truth, atol=1e-5)
    assert cmp["exact"] == 1.0 and cmp["label_l1"] < 1e-9 and cmp["classes_compared"] >= 1
    # the public baseline (one sum) is not the client's statistics
    agg = compare_statistics(class_statistics({k: a[k] for k in a}, layout), truth)
    assert agg["exact"] == 0.0

    for mode in ("difference", "fixed"):
        guarded = differencing_attack(
            ReleaseGuard(get_protocol(protocol), mode=mode), schema, contribs, target
        )
        assert guarded.recovered is None and "ReleaseRefusedError" in guarded.refused
        assert len(guarded.records) == 1  # only the first release happened
