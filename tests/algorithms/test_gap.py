"""GAP federated: node-/edge-level DP runs, the secure sum, the statement and the plan."""

from __future__ import annotations

import math

import pytest
import torch

import securefgl
from securefgl.algorithms.gap import GAPOptions, head_sensitivity, make_plan
from securefgl.errors import ConfigError


def _run(protocol: str = "plaintext", model: str = "gcn", **options):
    return securefgl.run(
        {
            "dataset": {"name": "csbm", "csbm": {"num_nodes": 600, "num_classes": 3, "num_features": 12}},
            "partition": {"clients": 4, "split": [0.5, 0.25, 0.25]},
            "protocol": {"name": protocol},
            "algorithm": {"name": "gap", "options": {"noise": "insecure-seeded", **options}},
            "model": {"name": model, "hidden": 16},
            "train": {"rounds": 6, "local_epochs": 2, "lr": 0.05, "eval_every": 3},
            "output": {"save": False},
            "threads": 1,
        }
    )


@pytest.mark.parametrize("privacy", ["node", "edge"])
def test_secagg_releases_the_same_model_as_plaintext(privacy: str) -> None:
    plain = _run("plaintext", privacy=privacy, epsilon=4.0)
    secure = _run("secagg", privacy=privacy, epsilon=4.0)
    assert plain.seeds[0].summary()["test_acc"] == secure.seeds[0].summary()["test_acc"]
    assert [r.metrics for r in plain.seeds[0].rounds] == [r.metrics for r in secure.seeds[0].rounds]


def test_node_level_run_states_its_guarantee() -> None:
    res = _run("secagg", privacy="node", epsilon=2.0, degree_bound=5)
    p = res.privacy
    assert p["unit"] == "node" and p["epsilon"] <= 2.0 and p["epsilon"] > 1.95
    assert p["delta"] == pytest.approx(1 / 6000)
    assert [m["name"] for m in p["mechanisms"]] == [
        "encoder DP-SGD",
        "aggregation perturbation",
        "classifier DP-SGD",
    ]
    assert any("D=5" in a for a in p["assumptions"])
    phases = [r.phase for r in res.seeds[0].rounds]
    assert phases == ["encoder"] * 6 + ["classifier"] * 6
    assert 0.0 <= res.metric("test_acc")[0] <= 1.0


def test_node_level_uploads_no_count_and_needs_every_noise_share() -> None:
    from securefgl.algorithms.base import RoundState, Setting
    from securefgl.algorithms.registry import create_algorithm
    from securefgl.config.train import TrainConfig
    from securefgl.nn.registry import ModelSpec

    setting = Setting(
        12, 3, 4, 600, 200, ModelSpec("gcn", hidden=16), TrainConfig(rounds=5), max_clients_per_round=4
    )
    alg = create_algorithm("gap", setting, {"privacy": "node", "epsilon": 8.0})
    server = alg.init_server(torch.Generator().manual_seed(0))
    rs = RoundState("encoder", 0, 0, (0, 1, 2, 3), alg.initial_broadcast(server))
    schema = alg.schema(rs)
    names = [b.name for b in schema.blocks]
    assert "n" not in names and all(n.startswith("g.encoder.") or n.startswith("g.head.") for n in names)
    assert schema.min_contributors == 4


def test_the_aggregates_are_computed_once_per_client() -> None:
    from securefgl.algorithms.base import Client, RoundState, Setting
    from securefgl.algorithms.registry import create_algorithm
    from securefgl.config.train import TrainConfig
    from securefgl.data import make_csbm
    from securefgl.nn.registry import ModelSpec

    data = make_csbm(num_nodes=100, num_classes=3, num_features=6, seed=0)
    data.train_mask = torch.ones(100, dtype=torch.bool)
    setting = Setting(
        6, 3, 1, 100, 100, ModelSpec("gcn", hidden=8), TrainConfig(rounds=2), max_clients_per_round=1
    )
    alg = create_algorithm("gap", setting, {"privacy": "edge", "epsilon": 1.0})
    client = Client(0, data, torch.Generator().manual_seed(0))
    alg.init_client(client)
    server = alg.init_server(torch.Generator().manual_seed(0))
    rs = RoundState("classifier", 0, 0, (0,), alg.initial_broadcast(server))
    first = alg.evaluate([client], rs.broadcast, rs)[0]
    again = alg.evaluate([client], rs.broadcast, rs)[0]
    assert torch.equal(first, again)  # no second noisy aggregation: the budget is spent once
    assert len(client.state["gap"]["aggregates"]) == 3  # X0, X1, X2 (gcn: 2 layers -> 2 hops)


def test_plan_units_and_baselines() -> None:
    kw = {"model_layers": 2, "rounds": 10, "num_nodes": 1000, "clients_per_round": 10}
    edge = make_plan(GAPOptions(privacy="edge", epsilon=1.0), model_name="gcn", **kw)
    assert [m["name"] for m in edge.statement.mechanisms] == ["aggregation perturbation"]
    assert edge.aggregation_noise_std == pytest.approx(edge.noise_multiplier * math.sqrt(2))
    node = make_plan(GAPOptions(privacy="node", epsilon=1.0, degree_bound=4), model_name="gcn", **kw)
    assert node.aggregation_noise_std == pytest.approx(node.noise_multiplier * 2.0)
    assert node.gradient_noise_share_std == pytest.approx(node.noise_multiplier / math.sqrt(10))
    dp_mlp = make_plan(GAPOptions(privacy="node", epsilon=1.0), model_name="mlp", **kw)
    assert dp_mlp.hops == 0 and dp_mlp.classifier_rounds == 0
    edge_mlp = make_plan(GAPOptions(privacy="edge", epsilon=1.0), model_name="mlp", **kw)
    assert edge_mlp.statement.epsilon == 0.0  # an MLP never reads an edge
    none = make_plan(GAPOptions(privacy="node", epsilon=math.inf), model_name="gcn", **kw)
    assert none.noise_multiplier == 0.0 and none.statement.to_dict()["epsilon"] is None


def test_dp_mlp_is_one_phase() -> None:
    mlp = _run("plaintext", model="mlp", privacy="node", epsilon=8.0)
    assert {r.phase for r in mlp.seeds[0].rounds} == {"encoder"}


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"privacy": "people"}, "privacy"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"degree_bound": 0}, "degree_bound"),
        ({"sample_rate": 1.5}, "sample_rate"),
        ({"noise": "urandom"}, "noise"),
        ({"embedding": "logits"}, "embedding"),
        ({"classifier": "mlp"}, "classifier"),
        ({"classifier_rounds": 0}, "classifier_rounds"),
        ({"aggregation_noise_scale": 0.0}, "aggregation_noise_scale"),
        ({"head_noise_scale": math.inf}, "head_noise_scale"),
        ({"link_prior": math.nan}, "link_prior"),
    ],
)
def test_bad_options_are_named(options: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        GAPOptions(**options)


def _tiny_model(**kw):
    from securefgl.algorithms.gap.model import GAPModel

    return GAPModel(
        6,
        3,
        hidden=8,
        hops=1,
        encoder_layers=1,
        encoder_dim=4,
        generator=torch.Generator().manual_seed(0),
        **kw,
    )


def test_the_residual_classifier_starts_as_the_encoder_and_trains_it_with_the_links() -> None:
    from securefgl.algorithms.gap.schema import phase_params

    model = _tiny_model(embedding="vote", classifier="residual")
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(1))
    aggs = [torch.randn(10, 3), torch.randn(10, 3)]
    inputs = model.classifier_inputs(x, aggs)
    assert inputs[0] is x and inputs[1] is aggs[1]  # the features and X^(1); X^(0) is the encoder's own path
    model.eval()
    assert torch.equal(model.cls(*inputs), model.enc(x))  # zero links: the encoder's prediction
    trained = phase_params(model.flat_state(), "classifier", "residual")
    assert sorted(trained) == ["encoder.0.bias", "encoder.0.weight", "head.bias", "head.weight"] + [
        "links.0.bias",
        "links.0.weight",
    ]
    paper = phase_params(_tiny_model().flat_state(), "classifier", "gap")
    assert all(n.startswith(("bases.", "out.")) for n in paper) and paper  # GAP's: the encoder stays frozen


def test_vote_and_prediction_embeddings_are_class_wide_rows() -> None:
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(1))
    vote = _tiny_model(embedding="vote").embedding(x)
    assert vote.shape == (10, 3) and torch.equal(vote.sum(1), torch.ones(10))
    assert set(vote.unique().tolist()) <= {0.0, 1.0}
    probs = _tiny_model(embedding="prediction").embedding(x)
    assert probs.shape == (10, 3) and torch.allclose(probs.sum(1), torch.ones(10))
    assert _tiny_model().embedding(x).shape == (10, 4)  # hidden: the encoder output


def test_features_and_labels_embeddings_skip_the_encoder() -> None:
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(1))
    feats = _tiny_model(embedding="features", classifier="residual")
    assert feats.embedding(x) is x  # the node's own features, F wide
    assert feats.cls.links[0].in_features == 6
    known = torch.nn.functional.one_hot(torch.arange(10) % 3, 3) * (torch.arange(10) < 5)[:, None]
    labels = _tiny_model(embedding="labels", classifier="residual", link_prior=2.0)
    assert torch.equal(labels.embedding(x, known), known.float())
    assert torch.equal(labels.cls.links[0].weight, 2.0 * torch.eye(3))  # class-wide: the prior applies
    assert torch.equal(feats.cls.links[0].weight, torch.zeros(3, 6))  # feature-wide: links start at zero
    with pytest.raises(ConfigError, match="labels"):
        labels.embedding(x)


def test_labels_embedding_aggregates_only_the_training_labels() -> None:
    from securefgl.algorithms.base import Client, RoundState, Setting
    from securefgl.algorithms.registry import create_algorithm
    from securefgl.config.train import TrainConfig
    from securefgl.data import make_csbm
    from securefgl.nn.registry import ModelSpec

    def first_hop(y: torch.Tensor) -> torch.Tensor:
        data = make_csbm(num_nodes=60, num_classes=3, num_features=6, seed=0)
        data.train_mask = torch.arange(60) < 30
        data.y = y
        setting = Setting(
            6, 3, 1, 60, 30, ModelSpec("gcn", hidden=8), TrainConfig(rounds=2), max_clients_per_round=1
        )
        opts = {"privacy": "none", "embedding": "labels", "classifier": "residual", "hops": 1}
        alg = create_algorithm("gap", setting, opts)
        client = Client(0, data, torch.Generator().manual_seed(0))
        alg.init_client(client)
        rs = RoundState("classifier", 0, 0, (0,), alg.initial_broadcast(alg.init_server(torch.Generator())))
        alg.evaluate([client], rs.broadcast, rs)
        x0, x1 = client.state["gap"]["aggregates"]
        assert torch.equal(x0[30:], torch.zeros(30, 3))  # no label for the nodes it does not train on
        assert torch.equal(x0[:30].argmax(1), y[:30])
        return x1

    y = make_csbm(num_nodes=60, num_classes=3, num_features=6, seed=0).y
    other = y.clone()
    other[30:] = (other[30:] + 1) % 3  # every validation/test label changed
    assert torch.equal(first_hop(y), first_hop(other))
    changed = y.clone()
    changed[:30] = (changed[:30] + 1) % 3
    assert not torch.equal(first_hop(y), first_hop(changed))


def test_aggregation_noise_scale_moves_budget_between_hops_and_gradients() -> None:
    from opacus.accountants import RDPAccountant

    kw = {"model_layers": 2, "rounds": 20, "num_nodes": 1000, "clients_per_round": 10}
    base = {"privacy": "node", "epsilon": 4.0, "hops": 1, "degree_bound": 4, "classifier_rounds": 5}
    even = make_plan(GAPOptions(**base), model_name="gcn", **kw)
    cheap = make_plan(GAPOptions(**base, aggregation_noise_scale=2.0), model_name="gcn", **kw)
    assert cheap.noise_multiplier < even.noise_multiplier  # less noise on the gradients...
    assert cheap.aggregation_noise_std == pytest.approx(
        cheap.noise_multiplier * 2.0 * 2.0
    )  # ...more on the hop
    assert cheap.classifier_rounds == 5 and cheap.encoder_rounds == 20
    acc = RDPAccountant()
    acc.history = [(m["noise_multiplier"], m["sample_rate"], m["steps"]) for m in cheap.statement.mechanisms]
    assert [h[0] for h in acc.history] == pytest.approx(
        [cheap.noise_multiplier, 2 * cheap.noise_multiplier] + [cheap.noise_multiplier]
    )
    assert cheap.statement.epsilon == pytest.approx(acc.get_epsilon(cheap.statement.delta), rel=1e-12)
    assert 3.99 < cheap.statement.epsilon <= 4.0


@pytest.mark.parametrize("embedding", ["vote", "prediction", "features", "labels"])
def test_node_level_residual_runs_under_secagg_as_plaintext(embedding: str) -> None:
    opts = {"privacy": "node", "epsilon": 4.0, "embedding": embedding, "classifier": "residual", "hops": 1}
    plain = _run("plaintext", **opts, classifier_rounds=3)
    secure = _run("secagg", **opts, classifier_rounds=3)
    assert [r.metrics for r in plain.seeds[0].rounds] == [r.metrics for r in secure.seeds[0].rounds]
    assert [r.phase for r in secure.seeds[0].rounds] == ["encoder"] * 6 + ["classifier"] * 3
    assert [m["steps"] for m in secure.privacy["mechanisms"]] == [6, 1, 3]
    assert 3.95 < secure.privacy["epsilon"] <= 4.0


def test_the_node_dp_head_reads_the_frozen_encoder_and_trains_only_links() -> None:
    from securefgl.algorithms.gap.schema import phase_params

    model = _tiny_model(embedding="vote", classifier="head", link_prior=1.5)
    assert torch.equal(model.cls.links[0].weight, 1.5 * torch.eye(3))  # the public prior
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(1))
    aggs = [torch.randn(10, 3), torch.randn(10, 3)]
    logits, agg = model.classifier_inputs(x, aggs)
    assert not logits.requires_grad and torch.equal(logits, model.enc(x).detach()) and agg is aggs[1]
    model.eval()
    assert torch.allclose(model.cls(logits, agg), logits + 1.5 * agg)
    assert sorted(phase_params(model.flat_state(), "classifier", "head")) == [
        "links.0.bias",
        "links.0.weight",
    ]


def test_the_head_plan_has_no_aggregation_noise_and_its_steps_the_node_sensitivity() -> None:
    from opacus.accountants import RDPAccountant

    kw = {"model_layers": 2, "rounds": 20, "num_nodes": 1000, "clients_per_round": 10}
    opts = GAPOptions(
        privacy="node",
        epsilon=4.0,
        embedding="vote",
        classifier="head",
        hops=1,
        degree_bound=3,
        classifier_rounds=6,
        aggregation_noise_scale=4.0,
    )
    plan = make_plan(opts, model_name="gcn", **kw)
    assert plan.aggregation_noise_std == 0.0 and plan.classifier_sample_rate == 1.0
    z = plan.noise_multiplier
    assert plan.classifier_noise_share_std == pytest.approx(
        4.0 * z * 7 * opts.clip / math.sqrt(10)
    )  # (2D+1)C
    names = [m["name"] for m in plan.statement.mechanisms]
    assert names[0] == "encoder DP-SGD" and names[1].startswith("head DP-GD") and len(names) == 2
    acc = RDPAccountant()
    acc.history = [(z, opts.sample_rate, 20), (4.0 * z, 1.0, 6)]
    assert plan.statement.epsilon == pytest.approx(acc.get_epsilon(plan.statement.delta), rel=1e-12)
    assert any("= 7C" in a and "not covered if published" in a for a in plan.statement.assumptions)
    two = make_plan(GAPOptions(**{**opts.__dict__, "hops": 2}), model_name="gcn", **kw)
    assert head_sensitivity(3, 1) == 7 and head_sensitivity(3, 2) == 25  # 1 + 2 (D + D^2)
    assert two.classifier_noise_share_std == pytest.approx(
        4.0 * two.noise_multiplier * 25 * opts.clip / math.sqrt(10)
    )
    assert "= 25C" in two.statement.mechanisms[1]["name"]


@pytest.mark.parametrize("hops", [1, 2])
def test_removing_one_node_moves_the_heads_clipped_sum_by_at_most_its_sensitivity(hops: int) -> None:
    from securefgl.algorithms.gap.model import GAPModel
    from securefgl.privacy import bound_degree, dp_gradient_sum, perturbed_aggregates

    gen = torch.Generator().manual_seed(0)
    n, d_bound, clip = 40, 3, 0.5
    edges = torch.randint(0, n, (2, 200), generator=gen)
    edges = bound_degree(edges[:, edges[0] != edges[1]], n, d_bound, generator=gen)
    model = GAPModel(
        6,
        3,
        hidden=8,
        hops=hops,
        encoder_layers=1,
        encoder_dim=4,
        embedding="vote",
        classifier="head",
        link_prior=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    model.eval()
    x = 3 * torch.randn(n, 6, generator=gen)
    y = torch.randint(0, 3, (n,), generator=gen)

    def clipped_sum(keep: torch.Tensor) -> torch.Tensor:
        idx = keep.nonzero().flatten()
        remap = torch.full((n,), -1, dtype=torch.long)
        remap[idx] = torch.arange(idx.numel())
        e = edges[:, keep[edges[0]] & keep[edges[1]]]  # the node and its edges leave the bounded graph
        aggs = perturbed_aggregates(model.embedding(x[idx]), remap[e], hops, noise_std=0.0, generator=None)
        inputs = model.classifier_inputs(x[idx], aggs)
        g, _ = dp_gradient_sum(
            model.cls,
            inputs,
            y[idx],
            sample_rate=1.0,
            clip=clip,
            noise_std=0.0,
            sampling_generator=torch.Generator().manual_seed(1),
            noise_generator=None,
        )
        return torch.cat([v.flatten() for v in g.values()])

    full = clipped_sum(torch.ones(n, dtype=torch.bool))
    degree = torch.bincount(edges[0], minlength=n)
    hub = int(degree.argmax())
    assert int(degree[hub]) == d_bound  # a node at the bound: its removal changes D other aggregates
    moved = []
    for v in range(n):
        keep = torch.ones(n, dtype=torch.bool)
        keep[v] = False
        moved.append(float((full - clipped_sum(keep)).norm()))
    assert min(moved) > 0 and max(moved) <= head_sensitivity(d_bound, hops) * clip + 1e-9


def test_node_level_head_runs_under_secagg_as_plaintext() -> None:
    opts = {"privacy": "node", "epsilon": 4.0, "embedding": "vote", "classifier": "head", "hops": 1}
    plain = _run("plaintext", **opts, classifier_rounds=3, link_prior=1.0)
    secure = _run("secagg", **opts, classifier_rounds=3, link_prior=1.0)
    # The head's sums carry the noise of the (2D+1)C sensitivity, so the fixed-point grid of the secure sum is
    # coarser than in the other phases and the result equals plaintext up to the grid, not to the last bit.
    (p,), (q,) = ([r.metrics for r in res.seeds[0].rounds if r.metrics] for res in (plain, secure))
    assert q["val_loss"] == pytest.approx(p["val_loss"], rel=5e-3)
    assert abs(q["test_acc"] - p["test_acc"]) <= 0.02
    assert [r.phase for r in secure.seeds[0].rounds] == ["encoder"] * 6 + ["classifier"] * 3
    assert [m["sample_rate"] for m in secure.privacy["mechanisms"]] == [0.25, 1.0]


def test_the_noisy_head_plan_noises_the_hops_and_its_steps_at_the_clip_norm() -> None:
    """GAP's guarantee with a head: the hops are noised as GAP's, the head's full-batch steps have sensitivity C
    (the aggregates are released), and the epsilon is Opacus's for the three parts."""
    from opacus.accountants import RDPAccountant

    kw = {"model_layers": 2, "rounds": 20, "num_nodes": 1000, "clients_per_round": 10}
    opts = GAPOptions(
        privacy="node",
        epsilon=4.0,
        embedding="labels",
        classifier="noisy-head",
        hops=1,
        degree_bound=3,
        classifier_rounds=6,
        clip=2.0,
        aggregation_noise_scale=0.5,
        head_noise_scale=8.0,
    )
    plan = make_plan(opts, model_name="gcn", **kw)
    z = plan.noise_multiplier
    assert plan.aggregation_noise_std == pytest.approx(0.5 * z * math.sqrt(3))  # node sensitivity sqrt(D)
    assert plan.classifier_sample_rate == 1.0
    assert plan.classifier_noise_share_std == pytest.approx(8.0 * z * 2.0 / math.sqrt(10))  # C, not (2D+1)C
    assert [m["name"] for m in plan.statement.mechanisms] == [
        "encoder DP-SGD",
        "aggregation perturbation",
        "head DP-GD (full batch, sensitivity C)",
    ]
    acc = RDPAccountant()
    acc.history = [(z, opts.sample_rate, 20), (0.5 * z, 1.0, 1), (8.0 * z, 1.0, 6)]
    assert plan.statement.epsilon == pytest.approx(acc.get_epsilon(plan.statement.delta), rel=1e-12)
    assert 3.95 < plan.statement.epsilon <= 4.0
    said = " ".join(plan.statement.assumptions)
    assert (
        "predictions a client computes on its graph are covered" in said
        and "not covered if published" not in said
    )


def test_the_noisy_head_is_the_head_on_noised_aggregates() -> None:
    from securefgl.algorithms.base import Client, RoundState, Setting
    from securefgl.algorithms.gap.schema import phase_params
    from securefgl.algorithms.registry import create_algorithm
    from securefgl.config.train import TrainConfig
    from securefgl.data import make_csbm
    from securefgl.nn.registry import ModelSpec

    model = _tiny_model(embedding="labels", classifier="noisy-head", link_prior=2.0)
    assert torch.equal(model.cls.links[0].weight, 2.0 * torch.eye(3))
    assert sorted(phase_params(model.flat_state(), "classifier", "noisy-head")) == [
        "links.0.bias",
        "links.0.weight",
    ]

    data = make_csbm(num_nodes=100, num_classes=3, num_features=6, seed=0)
    data.train_mask = torch.arange(100) % 2 == 0
    setting = Setting(
        6, 3, 1, 100, 100, ModelSpec("gcn", hidden=8), TrainConfig(rounds=2), max_clients_per_round=1
    )
    aggregates = {}
    for classifier in ("head", "noisy-head"):
        opts = {"privacy": "node", "epsilon": 4.0, "embedding": "labels", "classifier": classifier, "hops": 1}
        alg = create_algorithm("gap", setting, {**opts, "noise": "insecure-seeded"})
        client = Client(0, data, torch.Generator().manual_seed(0))
        alg.init_client(client)
        rs = RoundState("classifier", 0, 0, (0,), alg.initial_broadcast(alg.init_server(torch.Generator())))
        alg.evaluate([client], rs.broadcast, rs)
        aggregates[classifier] = client.state["gap"]["aggregates"][1]
        noise = alg.plan.aggregation_noise_std
        assert (noise > 0) == (classifier == "noisy-head")
    # the same bounded graph and labels, normalised after the noise: every row of the noisy head's hop moved
    diff = aggregates["noisy-head"] - aggregates["head"]
    assert bool((diff.abs().sum(dim=1) > 0).all())


def test_node_level_noisy_head_runs_under_secagg() -> None:
    opts = {"privacy": "node", "epsilon": 4.0, "embedding": "labels", "classifier": "noisy-head", "hops": 1}
    res = _run("secagg", **opts, classifier_rounds=3, link_prior=1.0, head_noise_scale=4.0)
    assert [r.phase for r in res.seeds[0].rounds] == ["encoder"] * 6 + ["classifier"] * 3
    assert [(m["sample_rate"], m["steps"]) for m in res.privacy["mechanisms"]] == [
        (0.25, 6),
        (1.0, 1),
        (1.0, 3),
    ]
    assert 3.95 < res.privacy["epsilon"] <= 4.0
    assert 0.0 <= res.metric("test_acc")[0] <= 1.0
