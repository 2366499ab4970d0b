"""AdaFGL's blend phase (``blend="select"``, issue 27): one secure sum of validation counts picks the weight of the
federated extractor in every client's prediction."""

from __future__ import annotations

import math

import pytest
import torch

from securefgl.algorithms.adafgl import BLEND, STEP1, STEP2, AdaFGL, AdaFGLOptions
from securefgl.algorithms.adafgl.client import split_validation
from securefgl.algorithms.adafgl.server import blend_test_z
from securefgl.algorithms.base import RoundState, Setting
from securefgl.config import RunConfig, build
from securefgl.engine.hooks import RunHooks
from securefgl.engine.runner import run_seed
from securefgl.errors import ConfigError
from securefgl.protocols.base import Sums


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _fed_graph():
    from securefgl.data import make_csbm, partition_graph

    data = make_csbm(
        num_nodes=240, num_classes=3, avg_degree=6.0, homophily=0.3, num_features=12, signal=1.0, seed=0
    )
    return partition_graph(data, "metis", 3, seed=0, split=(0.3, 0.3, 0.4), cache=False)


def _config(protocol: str, options: dict) -> RunConfig:
    return build(
        RunConfig,
        {
            "protocol": {"name": protocol},
            "algorithm": {"name": "adafgl", "options": {"epochs": 4, "hidden": 8, **options}},
            "model": {"name": "gcn", "hidden": 16, "layers": 2, "dropout": 0.5},
            "train": {"rounds": 3, "local_epochs": 2, "lr": 0.01, "eval_every": 1},
            "device": "cpu",
        },
    )


def _run(protocol: str, options: dict, monkeypatch: pytest.MonkeyPatch | None = None):
    """One seed; returns the result and each client's uploaded count vector (recorded on the client side)."""
    uploads: dict[int, torch.Tensor] = {}
    if monkeypatch is not None:
        real = AdaFGL.blend_counts

        def record(self, client):
            uploads[client.id] = out = real(self, client)
            return out

        monkeypatch.setattr(AdaFGL, "blend_counts", record)
    return run_seed(
        _config(protocol, options), _fed_graph(), 0, torch.device("cpu"), hooks=RunHooks()
    ), uploads


def test_blend_weight_is_the_pooled_best_of_the_securely_summed_counts(monkeypatch) -> None:
    grid = (0.0, 0.5, 1.0)
    res, uploads = _run("secagg", {"blend": "select", "blend_grid": list(grid)}, monkeypatch)
    assert [e.phase for e in res.evals][-2:] == [STEP2, BLEND] and res.final.phase == BLEND
    assert sorted(uploads) == [0, 1, 2]
    total = torch.stack(list(uploads.values())).sum(dim=0).tolist()
    report = res.report["adafgl_blend"]
    assert list(report["val_correct"].values()) == total  # the secure sum equals the plain sum of the uploads
    best = max(range(len(grid)), key=lambda g: (total[g], -g))
    assert report["weight"] == grid[best]
    val_total = sum(c.splits["val"].n for c in res.final.per_client)
    assert res.final.overall["val_acc_pooled"] == pytest.approx(total[best] / val_total)
    # the blend round uploads one count vector, less than a step-1 upload of the model
    (blend_round,) = [r for r in res.rounds if r.phase == BLEND]
    step1_up = min(res.rounds[0].bytes_up.values())
    assert all(b < step1_up for b in blend_round.bytes_up.values())


def test_a_zero_weight_blend_is_the_papers_prediction_and_a_full_weight_one_the_extractors() -> None:
    zero, _ = _run("plaintext", {"blend": "select", "blend_grid": [0.0]})
    by_phase = {e.phase: e.overall for e in zero.evals if e.phase != STEP1}
    assert by_phase[BLEND]["test_acc"] == by_phase[STEP2]["test_acc"]
    assert by_phase[BLEND]["val_acc"] == by_phase[STEP2]["val_acc"]

    one, _ = _run("plaintext", {"blend": "select", "blend_grid": [1.0], "extractor": "best_val"})
    step1 = [e for e in one.evals if e.phase == STEP1]
    kept = max(
        step1, key=lambda e: e.overall["val_acc_pooled"]
    )  # the first best round, as the server keeps it
    assert one.final.overall["test_acc"] == kept.overall["test_acc"]
    assert one.final.overall["val_acc"] == kept.overall["val_acc"]


def test_secagg_and_plaintext_choose_the_same_blend() -> None:
    sec, _ = _run("secagg", {"blend": "select"})
    pla, _ = _run("plaintext", {"blend": "select"})
    assert sec.report["adafgl_blend"] == pla.report["adafgl_blend"]
    assert sec.final.overall["test_acc"] == pla.final.overall["test_acc"]


def test_without_blend_there_is_no_blend_phase() -> None:
    cfg = _config("plaintext", {})
    algo = AdaFGL(_setting(cfg), cfg.algorithm.options)
    assert [p.name for p in algo.phases(cfg.train)] == [STEP1, STEP2]


def _setting(cfg: RunConfig) -> Setting:
    return Setting(12, 3, 3, 240, 120, cfg.model, cfg.train)


def test_server_picks_the_most_counts_and_the_first_weight_on_ties() -> None:
    cfg = _config("plaintext", {"blend": "select", "blend_grid": [0.0, 0.25, 0.5, 1.0]})
    algo = AdaFGL(_setting(cfg), cfg.algorithm.options)
    rs = RoundState(BLEND, 0, 3, (0, 1, 2), {}, 1)
    server: dict = {}
    out = algo.server_step(
        server, Sums({"blend.val_correct": torch.tensor([5, 9, 9, 2])}, num_contributors=3), rs
    )
    assert float(out["blend.weight"][0]) == 0.25
    assert server["blend"] == {"weight": 0.25, "val_correct": {0.0: 5, 0.25: 9, 0.5: 9, 1.0: 2}}
    schema = algo.schema(rs)
    assert [b.name for b in schema.blocks] == ["blend.val_correct"] and schema.blocks[0].shape == (4,)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"blend": "always"}, "blend='always' is invalid; valid: 'none', 'select'"),
        ({"blend_grid": ()}, "blend_grid is empty"),
        ({"blend_grid": (0.0, 1.5)}, "blend_grid entry"),
    ],
)
def test_bad_blend_options_are_refused(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AdaFGLOptions(**options)


def test_blend_alpha_keeps_the_extractor_unless_a_weight_beats_it_beyond_the_counts_noise() -> None:
    cfg = _config("plaintext", {"blend": "select", "blend_grid": [0.0, 0.5, 1.0], "blend_alpha": 0.05})
    algo = AdaFGL(_setting(cfg), cfg.algorithm.options)
    rs = RoundState(BLEND, 0, 3, (0, 1, 2), {}, 1)
    z = blend_test_z(0.05, 2)  # two weights tested against the extractor
    assert z == pytest.approx(1.959964, abs=1e-6)  # Phi^-1(1 - 0.025)

    def choose(correct: list[int], discordant: list[int]) -> float:
        sums = {"blend.val_correct": torch.tensor(correct), "blend.val_discordant": torch.tensor(discordant)}
        return float(algo.server_step({}, Sums(sums, num_contributors=3), rs)["blend.weight"][0])

    # 0.5 leads by 10 with 30 discordant nodes: 10 < 1.96 * sqrt(30) = 10.7, so the extractor stays
    assert choose([90, 110, 100], [40, 30, 0]) == 1.0
    # the same lead with 25 discordant nodes passes (10 > 9.8); the plain maximum would also take 0.5
    assert choose([90, 110, 100], [40, 25, 0]) == 0.5
    # the most counts fails (20 < 1.96 * sqrt(400)) but 0.5 passes: the best qualifying weight wins
    assert choose([120, 110, 100], [400, 25, 0]) == 0.5
    server: dict = {}
    algo.server_step(
        server,
        Sums(
            {
                "blend.val_correct": torch.tensor([90, 110, 100]),
                "blend.val_discordant": torch.tensor([40, 30, 0]),
            },
            num_contributors=3,
        ),
        rs,
    )
    assert server["blend"] == {
        "weight": 1.0,
        "val_correct": {0.0: 90, 0.5: 110, 1.0: 100},
        "val_discordant": {0.0: 40, 0.5: 30, 1.0: 0},
        "z": z,
    }
    assert [b.name for b in algo.schema(rs).blocks] == ["blend.val_correct", "blend.val_discordant"]


def test_blend_alpha_sums_each_clients_discordant_counts_securely(monkeypatch) -> None:
    uploads: dict[int, torch.Tensor] = {}
    real = AdaFGL.blend_discordant

    def record(self, client):
        uploads[client.id] = out = real(self, client)
        return out

    monkeypatch.setattr(AdaFGL, "blend_discordant", record)
    options = {"blend": "select", "blend_alpha": 0.05, "extractor": "last"}
    sec, counts = _run("secagg", options, monkeypatch)
    report = sec.report["adafgl_blend"]
    assert sorted(uploads) == [0, 1, 2]
    total = torch.stack(list(uploads.values())).sum(dim=0).tolist()
    assert list(report["val_discordant"].values()) == total
    assert report["val_discordant"][1.0] == 0  # the extractor never disagrees with itself
    correct = torch.stack(list(counts.values())).sum(dim=0).tolist()
    grid = list(report["val_correct"])
    # a lead over the extractor needs at least that many discordant nodes
    assert all(d >= abs(c - correct[-1]) for d, c in zip(total, correct, strict=True))
    passing = [
        i for i in range(len(grid) - 1) if correct[i] - correct[-1] > report["z"] * math.sqrt(total[i])
    ]
    expected = grid[max(passing, key=lambda i: (correct[i], -i))] if passing else 1.0
    assert report["weight"] == expected
    pla, _ = _run("plaintext", options)
    assert pla.report["adafgl_blend"] == report
    assert pla.final.overall["test_acc"] == sec.final.overall["test_acc"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"blend_alpha": 0.0}, r"blend_alpha=0.0 is out of range; valid: \(0, 1\)"),
        ({"blend_alpha": 1.5}, r"blend_alpha=1.5 is out of range"),
        ({"blend_alpha": 0.05, "blend_grid": (0.0, 0.5)}, r"needs the extractor's weight 1.0"),
        ({"blend_alpha": 0.05, "blend_grid": (1.0,)}, r"needs the extractor's weight 1.0 and another weight"),
    ],
)
def test_bad_blend_alpha_is_refused(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AdaFGLOptions(**options)


def test_split_validation_holds_out_a_fixed_share_of_each_clients_validation_nodes() -> None:
    val = torch.zeros(50, dtype=torch.bool)
    val[torch.arange(3, 50, 2)] = True  # 24 validation nodes
    sel, held = split_validation(val, 0.5, client=4)
    assert int(held.sum()) == 12 and int(sel.sum()) == 12
    assert not (sel & held).any() and torch.equal(sel | held, val)
    again, held_again = split_validation(val, 0.5, client=4)
    assert torch.equal(held, held_again) and torch.equal(sel, again)  # a fixed draw: no run seed involved
    assert not torch.equal(held, split_validation(val, 0.5, client=5)[1])  # each client has its own draw
    one = torch.zeros(5, dtype=torch.bool)
    one[2] = True
    assert torch.equal(split_validation(one, 0.5, client=0)[0], one)  # a lone node stays with the selection
    two = one.clone()
    two[4] = True
    for fraction in (0.01, 0.99):  # each part keeps one node
        s, h = split_validation(two, fraction, client=0)
        assert int(s.sum()) == 1 and int(h.sum()) == 1


def test_blend_holdout_counts_only_the_held_out_validation_nodes(monkeypatch) -> None:
    options = {"blend": "select", "blend_holdout": 0.5, "extractor": "last"}
    sec, uploads = _run("secagg", options, monkeypatch)
    fg = _fed_graph()
    for cid, counts in uploads.items():
        held = split_validation(fg.clients[cid].val_mask, 0.5, cid)[1]
        assert int(counts.max()) <= int(held.sum()) < int(fg.clients[cid].val_mask.sum())
    report = sec.report["adafgl_blend"]
    assert list(report["val_correct"].values()) == torch.stack(list(uploads.values())).sum(dim=0).tolist()
    pla, _ = _run("plaintext", options)
    assert pla.report["adafgl_blend"] == report
    assert pla.final.overall["test_acc"] == sec.final.overall["test_acc"]
    # the paper's prediction changes too: step 2 now picks its epochs on the selection half only
    full, _ = _run("plaintext", {"blend": "select", "extractor": "last"})
    step2 = [next(e for e in r.evals if e.phase == STEP2) for r in (pla, full)]
    assert step2[0].overall["val_acc"] != step2[1].overall["val_acc"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"blend": "select", "blend_holdout": 1.0},
            r"blend_holdout=1.0 is out of range; valid: \(0, 1\) or None",
        ),
        ({"blend": "none", "blend_holdout": 0.5}, r"blend_holdout=0.5 needs blend='select' \(got 'none'\)"),
    ],
)
def test_bad_blend_holdout_is_refused(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AdaFGLOptions(**options)
