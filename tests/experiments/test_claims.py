"""FedLoG's claim verdicts (securefgl.experiments.claims), and their report by examples/reproduce_fedlog.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from securefgl.experiments import ClaimCheck, ClaimVerdict, all_claim_verdicts, claim_verdicts
from securefgl.experiments.claims import CLAIM_SEEN_TOLERANCE

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reproduce_fedlog.py"


def _row(ds: str, k: int, method: str, seed: int, sg: float, mc: float | None, nc: float) -> dict:
    return {
        "dataset": ds,
        "clients": k,
        "method": method,
        "seed": seed,
        "seen_test": sg,
        "unseen_node": 0.5,
        "missing_class": mc,
        "new_client": nc,
    }


def _grid(fedlog_sg: float = 0.90) -> list[dict]:
    return [
        _row("Cora", 3, "fedlog", 0, fedlog_sg, 0.60, 0.40),
        _row("Cora", 3, "fedlog", 1, fedlog_sg, 0.50, 0.30),
        _row("Cora", 3, "fedavg", 0, 0.91, 0.70, 0.45),
        _row("Cora", 3, "fedavg-local", 0, 0.905, 0.50, 0.30),
        _row("Cora", 3, "local", 0, 0.92, 0.0, 0.10),
    ]


def test_claim_verdict_means_over_seeds_and_picks_the_fedavg_view() -> None:
    (local_view,) = claim_verdicts(_grid(), fedavg="fedavg-local")
    assert isinstance(local_view, ClaimVerdict)
    assert all(isinstance(c, ClaimCheck) for c in local_view.checks)
    checks = {(c.metric, c.baseline): c for c in local_view.checks}
    assert checks[("missing_class", "fedavg-local")].fedlog == pytest.approx(55.0)
    assert checks[("missing_class", "fedavg-local")].margin == pytest.approx(5.0)
    assert checks[("new_client", "fedavg-local")].margin == pytest.approx(5.0)
    assert checks[("seen_test", "fedavg-local")].margin == pytest.approx(-0.5)
    assert local_view.holds and not local_view.missing
    (global_view,) = claim_verdicts(_grid(), fedavg="fedavg")
    assert not global_view.holds
    failed = {(c.metric, c.baseline) for c in global_view.checks if not c.ok}
    assert failed == {("missing_class", "fedavg"), ("new_client", "fedavg")}


def test_all_verdicts_cover_every_variant_against_both_views_and_describe_each_check() -> None:
    rows = _grid() + [{**r, "method": "fedlog-nopg"} for r in _grid() if r["method"] == "fedlog"]
    got = [(v.method, v.fedavg, v.holds) for v in all_claim_verdicts(rows)]
    assert got == [
        ("fedlog", "fedavg-local", True),
        ("fedlog", "fedavg", False),
        ("fedlog-nopg", "fedavg-local", True),
        ("fedlog-nopg", "fedavg", False),
    ]
    text = all_claim_verdicts(rows)[1].describe()
    assert text.startswith(
        "does not hold (missing_class vs fedavg -15.0 (fails), new_client vs fedavg -10.0 (fails)"
    )
    assert "seen_test vs fedavg -1.0)" in text  # 90 vs 91: within the tolerance, so not marked
    partial = claim_verdicts([r for r in _grid() if r["method"] != "local"])[0]
    assert partial.describe().endswith("not measured: missing_class vs local, new_client vs local)")


def test_claim_verdict_seen_graph_tolerance_is_one_point() -> None:
    assert CLAIM_SEEN_TOLERANCE == 1.0
    at_edge = claim_verdicts(_grid(fedlog_sg=0.895), fedavg="fedavg-local")[0]
    assert at_edge.holds  # 89.5 vs 90.5: exactly 1 point below
    below = claim_verdicts(_grid(fedlog_sg=0.894), fedavg="fedavg-local")[0]
    assert not below.holds
    assert [c.metric for c in below.checks if not c.ok] == ["seen_test"]


def test_claim_verdict_never_passes_on_a_partial_grid() -> None:
    rows = [r for r in _grid() if r["method"] != "local"]
    (v,) = claim_verdicts(rows, fedavg="fedavg-local")
    assert not v.holds
    assert v.missing == ("missing_class vs local", "new_client vs local")
    undefined = [dict(r, missing_class=None) if r["method"] == "fedlog" else r for r in _grid()]
    (v,) = claim_verdicts(undefined, fedavg="fedavg-local")
    assert not v.holds and "missing_class vs fedavg-local" in v.missing
    empty = ClaimVerdict("Cora", 3, "fedlog", "fedavg", checks=(), missing=())
    assert not empty.holds, "a verdict without any check is not a pass"


def test_claim_verdict_per_setting_and_variant() -> None:
    rows = _grid() + [dict(r, clients=5) for r in _grid()] + [dict(_grid()[0], method="fedlog-nopg")]
    assert [(v.dataset, v.clients) for v in claim_verdicts(rows)] == [("Cora", 3), ("Cora", 5)]
    (nopg,) = claim_verdicts(rows, method="fedlog-nopg")
    assert nopg.method == "fedlog-nopg" and nopg.clients == 3
    assert claim_verdicts(rows, method="absent") == []


def _claim_file(path: Path, rows: list[dict], **args: object) -> Path:
    stored = {"experiment": "claim", "prompt_mode": "paper", "min_missing_nodes": 20, **args}
    path.write_text(json.dumps({"args": stored, "rows": rows}))
    return path


def _report(*files: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(EXAMPLE), "report", "--results", *map(str, files)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_report_merges_claim_files_and_labels_the_ablation(tmp_path: Path) -> None:
    grid = _grid()
    full = _claim_file(tmp_path / "full.json", [r for r in grid if r["method"] == "fedlog"])
    base = _claim_file(tmp_path / "base.json", grid, prompt_mode="none")
    out = _report(base, full)
    assert out.returncode == 0, out.stderr
    assert "claim Cora K=3 fedlog vs fedavg-local: holds" in out.stdout
    assert "claim Cora K=3 fedlog vs fedavg: does not hold" in out.stdout
    assert "claim Cora K=3 fedlog-nopg vs fedavg-local: holds" in out.stdout


def test_report_refuses_files_from_different_partitions(tmp_path: Path) -> None:
    a = _claim_file(tmp_path / "a.json", _grid())
    b = _claim_file(tmp_path / "b.json", _grid(), min_missing_nodes=0)
    out = _report(a, b)
    assert out.returncode != 0
    assert "different settings" in out.stderr and "min_missing_nodes" in out.stderr
    out = _report(tmp_path / "absent.json")
    assert out.returncode != 0 and "no result file" in out.stderr
