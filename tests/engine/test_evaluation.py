"""Evaluation through secure sums: the counts, the metrics the server reads from them, its selection rule."""

from __future__ import annotations

import math

import pytest
import torch

from securefgl.engine.evaluation import (
    RoundSelector,
    evaluation_contribution,
    evaluation_schema,
    metrics_from_sums,
    selection_tolerance,
)
from securefgl.engine.hooks import RunHooks
from securefgl.engine.metrics import aggregate_clients, client_metrics
from securefgl.engine.runner import run_seed
from securefgl.errors import OverflowRiskError
from securefgl.protocols.registry import get_protocol


def _clients(num_classes: int = 4, seed: int = 0):
    """Three clients' own metrics from random scores, one of them without validation nodes."""
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    out = []
    for k, n in enumerate((37, 120, 9)):
        y = torch.randint(0, num_classes, (n,), generator=g)
        masks = torch.rand(3, n, generator=g)
        val = masks[1] < 0.3 if k != 2 else torch.zeros(n, dtype=torch.bool)
        data = Data(y=y, train_mask=masks[0] < 0.3, val_mask=val, test_mask=masks[2] < 0.4, num_nodes=n)
        logits = torch.randn(n, num_classes, generator=g) * 3
        out.append(client_metrics(k, logits, data, num_classes))
    return out


@pytest.mark.parametrize("protocol", ["plaintext", "secagg", "ckks"])
def test_metrics_from_the_sums_equal_the_pooled_client_rules(protocol: str) -> None:
    per_client = _clients()
    schema = evaluation_schema(count_bound=200, max_clients=3)
    contribs = {m.client: evaluation_contribution(m) for m in per_client}
    sums, transcript = get_protocol(protocol).aggregate(schema, contribs)
    overall = metrics_from_sums(sums)
    expected = aggregate_clients(per_client)
    assert overall.keys() == expected.keys()
    for key, value in expected.items():
        assert overall[key] == pytest.approx(value, abs=1e-6 if protocol == "ckks" else 1e-12, nan_ok=True), (
            key
        )
    # the counts are exact whatever the protocol
    assert int(sums["val.correct"][0]) == sum(m.splits["val"].correct for m in per_client)
    assert transcript.total_bytes_sent(0) > 0


def test_the_schema_is_as_fine_as_the_ring_allows_and_refuses_what_cannot_fit() -> None:
    small = evaluation_schema(count_bound=3_000, max_clients=10)
    large = evaluation_schema(count_bound=2_500_000, max_clients=1_000)
    assert small.steps["val.acc_w"] == 2.0**-40
    assert 2.0**-40 < large.steps["val.acc_w"] <= 2.0**-20
    with pytest.raises(OverflowRiskError, match="evaluation sum"):
        evaluation_schema(count_bound=2**50, max_clients=1_000)


def test_selection_keeps_the_earlier_round_on_a_tie_and_counts_patience() -> None:
    sel = RoundSelector(patience=2)
    assert sel.observe(float("nan"))  # the first evaluation is the best so far, even undefined
    assert sel.observe(0.5, 1e-9)  # a defined value beats an undefined one
    assert not sel.observe(0.5 + 1e-9, 1e-9)  # within both rounding bounds: a tie, the earlier round stays
    assert not sel.should_stop
    assert not sel.observe(0.4)
    assert sel.should_stop and sel.best_value == 0.5
    assert sel.observe(0.6) and not sel.should_stop


def test_selection_tolerance_is_the_rounding_bound_over_the_weight() -> None:
    per_client = _clients()
    schema = evaluation_schema(count_bound=200, max_clients=3)
    sums, _ = get_protocol("plaintext").aggregate(
        schema, {m.client: evaluation_contribution(m) for m in per_client}
    )
    weight = sum(m.num_nodes for m in per_client if m.splits["val"].n)
    assert selection_tolerance(sums, schema) == pytest.approx(3 * schema.steps["val.acc_w"] / weight)


def test_a_run_selects_the_round_the_pooled_client_rule_selects(toy_config, toy_graph) -> None:
    """The server's decisions (from sums) agree with the rule applied to every client's own metrics."""
    events = []
    result = run_seed(
        toy_config("fedavg"),
        toy_graph("fedavg"),
        0,
        torch.device("cpu"),
        hooks=RunHooks(on_evaluate=events.append),
    )
    best, best_value = None, float("nan")
    for i, ev in enumerate(events):
        value = aggregate_clients(list(ev.per_client))["val_acc"]
        if best is None or (not math.isnan(value) and (math.isnan(best_value) or value > best_value)):
            best, best_value = i, value
        assert ev.overall["val_acc"] == pytest.approx(value, abs=1e-12)
    assert [ev.improved for ev in events].count(True) >= 1
    assert result.final is result.evals[best]
