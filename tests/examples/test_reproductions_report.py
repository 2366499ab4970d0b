"""examples/reproductions_report.py: REPRODUCTIONS.md is computed from the saved results, never typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(load_example):
    return load_example("reproductions_report")


def _adafgl_out(path: Path, protocol: str, seeds: list[int], acc: float) -> Path:
    runs = [
        {
            "protocol": protocol,
            "seed": s,
            "adafgl_test_acc": acc + 0.01 * s,
            "fedavg_test_acc_last": 0.5,
            "fedavg_test_acc_bestval": 0.5,
            "reference_weighted_test_acc": acc + 0.05,
            "adafgl_blend_test_acc": acc + 0.03,
            "blend_weight": 0.5,
            "local_test_acc": 0.6,
            "seconds": 100.0,
            "per_client": [{"test_acc": 0.5}],
        }
        for s in seeds
    ]
    cell = {
        "dataset": "chameleon",
        "split": "louvain",
        "ratios": [0.6, 0.2, 0.2],
        "partition": "file chameleon_louvain.npz",
        "exact_replay": True,
        "row_normalize": False,
        "clients": [],
        "runs": runs,
    }
    path.write_text(json.dumps({"args": {"device": "cpu"}, "cells": [cell]}))
    return path


def test_collect_and_render(report, tmp_path: Path) -> None:
    a = _adafgl_out(tmp_path / "a.json", "secagg", [0, 1], 0.64)
    b = _adafgl_out(tmp_path / "b.json", "plaintext", [0, 1], 0.64)
    res = tmp_path / "reproductions"
    report.main(
        [
            "collect",
            "--paper",
            "adafgl",
            "--name",
            "cham",
            "--machine",
            "test box",
            "--command",
            "run it",
            "--partition",
            "exact replay",
            "--dir",
            str(res),
            str(a),
            str(b),
        ]
    )
    rec = json.loads((res / "adafgl" / "cham.json").read_text())
    (cell,) = rec["cells"]  # the two files are one cell, its runs merged
    assert [(r["protocol"], r["seed"]) for r in cell["runs"]] == [
        ("plaintext", 0),
        ("plaintext", 1),
        ("secagg", 0),
        ("secagg", 1),
    ]
    assert "per_client" not in cell["runs"][0]
    log = tmp_path / "fs.log"
    log.write_text(
        'noise\n{"method": "fedstruct", "seed": 3, "test_acc": 0.8, "test_acc_pooled": 0.8, "seconds": 5}\n'
    )
    report.main(
        [
            "collect",
            "--paper",
            "fedstruct",
            "--name",
            "cora",
            "--dataset",
            "Cora",
            "--machine",
            "m",
            "--command",
            "c",
            "--dir",
            str(res),
            str(log),
        ]
    )
    page = report.render(res)
    # 64.5 ± 0.7 (seeds 0-1): within 2.5 of 68.9 with the blend (67.0) and with the reference weighting only
    row = "| 64.5 ± 0.7 | 69.0 ± 0.0 | 67.0 ± 0.0 (0.5/0.5) | 50.0 ± 0.0 | 60.0 ± 0.0 | - | 68.9 ± 2.1 "
    assert row + "| no / blend yes / yes | 2 (0-1) | 100 |" in page
    assert "largest per-seed gap 0.00 points" in page and "identical" in page
    assert "| Cora | fedstruct | secagg | 80.00 ± 0.00 | 80.28 ± 1.44 | yes | 3 |" in page
    assert "run it" in page and "test box" in page
    for title in ("O-pFGL", "FedSpray", "FedLoG"):  # no saved result: the docstring's figures, said so
        assert f"[{title}]" in page
    assert page.count("Figures (no saved result yet)") == 3


def _fedspray_row(seed: int, val_loss: list[float], val_acc: list[float], test_acc: list[float]) -> dict:
    """One seed as reproduce_fedspray.py ``table`` saves it (per-round series, fractions)."""
    series = {
        "val_acc": val_acc,
        "val_loss": val_loss,
        "test_acc": test_acc,
        "test_f1": [a - 0.1 for a in test_acc],
        "test_minority_acc": [a - 0.2 for a in test_acc],
    }
    return {
        "seed": seed,
        "series": series,
        "train_seconds": 30.0,
        "crypto_seconds": 10.0,
        "seconds": 60.0 + seed,
        "report": {},
    }


def test_collect_and_render_fedspray(report, tmp_path: Path) -> None:
    """A reproduce_fedspray.py table.json: round picked by validation loss (NaN skipped, first on ties), secagg and
    plaintext compared seed by seed, the target read from the script."""
    nan = float("nan")
    s0 = ([nan, 0.8, 0.9, 0.85], [0.5, 0.7, 0.7, 0.6], [0.6, 0.65, 0.7, 0.72])  # val_loss round 1: 65
    s1 = ([1.0, 0.9, 0.7, 0.7], [0.5, 0.6, 0.8, 0.8], [0.6, 0.66, 0.71, 0.73])  # val_loss round 2: 71
    off = (s0[0], s0[1], [0.6, 0.66, 0.7, 0.72])  # plaintext one point off at the selected round
    table = {
        "Cora|louvain+|secagg|fedspray-code|100": [_fedspray_row(0, *s0), _fedspray_row(1, *s1)],
        "Cora|louvain+|plaintext|fedspray-code|100": [_fedspray_row(0, *s0), _fedspray_row(1, *s1)],
        "CiteSeer|metis+|secagg|fedspray-code|100": [_fedspray_row(0, *s0)],
        "CiteSeer|metis+|plaintext|fedspray-code|100": [_fedspray_row(0, *off)],
    }
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))  # NaN as the script writes it
    res = tmp_path / "reproductions"
    args = ["collect", "--paper", "fedspray", "--name", "t", "--machine", "box", "--command", "go"]
    report.main([*args, "--dir", str(res), str(path)])
    rec = json.loads((res / "fedspray" / "t.json").read_text())
    cora = next(c for c in rec["cells"] if c["dataset"] == "Cora" and c["protocol"] == "secagg")
    assert [r["select"]["val_loss"]["round"] for r in cora["runs"]] == [1, 2]
    assert [r["select"]["val_acc"]["round"] for r in cora["runs"]] == [1, 2]
    assert "series" not in cora["runs"][0]
    page = report.render(res)
    assert (
        "| Cora | louvain+ (ours, partition seed 42) | 100 (fedspray-code) | 70.08 ± 0.41 | 68.00 ± 3.00 | "
        "68.00 ± 3.00 | 0 (identical per seed, every rule and metric: grid upload) | yes | 56.46 ± 1.30 | "
        "58.00 ± 3.00 | 68.00 ± 3.00 | 0,1 | 60 |"
    ) in page
    assert "| 65.00 ± 0.00 | 66.00 ± 0.00 | -1.00 (largest per-seed gap 1.00) | yes |" in page
    assert "[FedSpray](#fedspray-o-pfgls-third-party-table-fedsprays-minority-node-claim) | 2 of 2 |" in page
    assert "go" in page and "Figures on O-pFGL's own partitions" in page
    assert page.count("Figures (no saved result yet)") == 4


def test_collect_and_render_the_fedspray_claim(report, tmp_path: Path) -> None:
    """A reproduce_fedspray.py claim.json (keys carry the method): minority accuracy of the three methods and
    FedSpray's gaps paired by seed, only over the seeds all three ran; kept out of the table's rows."""
    s0 = ([0.9, 0.8, 0.85], [0.5, 0.7, 0.6], [0.6, 0.7, 0.72])  # val_loss round 1: 70, minority 50
    s1 = ([0.9, 0.7, 0.8], [0.5, 0.6, 0.8], [0.6, 0.66, 0.75])  # val_loss round 1: 66, val_acc round 2: 75
    low = ([0.9, 0.8, 0.85], [0.5, 0.7, 0.6], [0.5, 0.6, 0.62])  # round 1: 60, minority 40
    claim = {
        "Cora|louvain|fedspray|secagg|fedspray-code|100": [_fedspray_row(0, *s0), _fedspray_row(1, *s1)],
        "Cora|louvain|fedavg|secagg|-|100": [_fedspray_row(0, *low), _fedspray_row(1, *low)],
        "Cora|louvain|local|plaintext|-|100": [_fedspray_row(0, *low), _fedspray_row(2, *low)],
    }
    path = tmp_path / "claim.json"
    path.write_text(json.dumps(claim))
    res = tmp_path / "reproductions"
    args = ["collect", "--paper", "fedspray", "--name", "c", "--machine", "box", "--command", "go"]
    report.main([*args, "--dir", str(res), str(path)])
    rec = json.loads((res / "fedspray" / "c.json").read_text())
    assert {c["method"]: c["protocol"] for c in rec["cells"]} == {
        "fedspray": "secagg",
        "fedavg": "secagg",
        "local": "plaintext",
    }
    page = report.render(res)
    assert (
        "| Cora | louvain (FedSpray's style) | `val_loss` | 50.00 ± 0.00 | 40.00 ± 0.00 | 40.00 ± 0.00 | "
        "+10.00 ± 0.00 | +10.00 ± 0.00 | 70.00 / 60.00 / 60.00 | secagg/secagg/plaintext | 0 |"
    ) in page
    assert "| Cora | louvain (FedSpray's style) | `val_acc` | 50.00 ± 0.00 |" in page
    assert "| Cora | louvain (" not in page.split("FedSpray's minority-node claim (`claim`)")[0]


def _opfgl_out(path: Path, protocol: str, seeds: list[int], acc: float) -> Path:
    """A reproduce_opfgl.py ``--out`` file (fractions; one record per seed, the partition's statistics)."""
    runs = [
        {
            "cell": f"Cora/louvain+/p42/opfgl/{protocol}",
            "seed": s,
            "test_acc": acc + 0.01 * s,
            "test_f1": 0.6,
            "seconds": 100.0,
            "bytes_up_per_client": {"0": 1},
            "bytes_down_per_client": {"0": 1},
            "report": {},
        }
        for s in seeds
    ]
    path.write_text(json.dumps({"runs": runs, "partitions": {"Cora/louvain+/p42": {"sizes": [3, 4]}}}))
    return path


def test_collect_and_render_opfgl(report, tmp_path: Path) -> None:
    """reproduce_opfgl.py files from separate invocations merge into one cell per label; target from the script."""
    files = [
        _opfgl_out(tmp_path / "a.json", "secagg", [0], 0.75),
        _opfgl_out(tmp_path / "b.json", "secagg", [1, 2], 0.75),
        _opfgl_out(tmp_path / "c.json", "plaintext", [0, 1, 2], 0.75),
    ]
    res = tmp_path / "reproductions"
    args = ["collect", "--paper", "opfgl", "--name", "o", "--machine", "box", "--command", "go"]
    report.main([*args, "--partition", "reference replay", "--dir", str(res), *map(str, files)])
    rec = json.loads((res / "opfgl" / "o.json").read_text())
    assert [(c["protocol"], [r["seed"] for r in c["runs"]]) for c in rec["cells"]] == [
        ("secagg", [0, 1, 2]),
        ("plaintext", [0, 1, 2]),
    ]
    assert rec["cells"][0]["client_sizes"] == [3, 4] and "report" not in rec["cells"][0]["runs"][0]
    page = report.render(res)
    assert (
        "| Cora | louvain+ (reference replay) | O-pFGL | 76.43 ± 1.24 | 76.00 ± 0.82 | 76.00 ± 0.82 | "
        "0 (identical per seed, accuracy and F1) | yes | 61.58 ± 2.16 | 60.00 ± 0.00 | 60.00 ± 0.00 | 0,1,2 | 100 |"
    ) in page
    assert "[O-pFGL](#o-pfgl-cora--citeseer-louvain-and-metis-10-clients) | 1 of 1 |" in page
    assert report._seeds([{"seed": 0}, {"seed": 1}], [{"seed": 0}]) == "secagg 0,1; plaintext 0"


def _fedlog_out(path: Path, protocol: str, seeds: list[int], acc: float, experiment: str = "table") -> Path:
    rows = [
        {
            "dataset": "Cora",
            "partition": "metis+",
            "protocol": protocol,
            "seed": s,
            "test_acc": acc + s,
            "round": 50,
            "seconds": 60.0,
            "crypto_seconds": 1.0,
        }
        for s in seeds
    ]
    args = {"experiment": experiment, "classifier_mode": "released"}
    path.write_text(json.dumps({"args": args, "rows": rows}))
    return path


def test_collect_and_render_fedlog(report, tmp_path: Path) -> None:
    """reproduce_fedlog.py 'table' files merge into one cell per (dataset, partition, protocol); target from
    the script; a 'claim' file is refused."""
    files = [
        _fedlog_out(tmp_path / "a.json", "secagg", [0], 75.0),
        _fedlog_out(tmp_path / "b.json", "secagg", [1, 2], 75.0),
        _fedlog_out(tmp_path / "c.json", "plaintext", [0], 75.0),
    ]
    res = tmp_path / "reproductions"
    args = ["collect", "--paper", "fedlog", "--name", "f", "--machine", "box", "--command", "go"]
    report.main([*args, "--partition", "O-pFGL's own", "--dir", str(res), *map(str, files)])
    rec = json.loads((res / "fedlog" / "f.json").read_text())
    assert [(c["protocol"], [r["seed"] for r in c["runs"]]) for c in rec["cells"]] == [
        ("secagg", [0, 1, 2]),
        ("plaintext", [0]),
    ]
    assert rec["cells"][0]["runs"][1]["test_acc"] == pytest.approx(0.76)
    page = report.render(res)
    assert (
        "| Cora | metis+ (O-pFGL's own) | released | 75.08 ± 0.21 | 76.00 ± 0.82 | 75.00 ± 0.00 | "
        "0 (identical per seed) | yes | secagg 0,1,2; plaintext 0 | 60 |"
    ) in page
    assert "| [FedLoG](#fedlog-o-pfgls-third-party-table-fedlogs-generalisation-claim) | 1 of 1 |" in page
    # a check re-running a saved cell (an ``issue*`` record) is a row of its own but not another cell at a glance
    check = ["collect", "--paper", "fedlog", "--name", "issue25_check", "--machine", "box", "--command", "go"]
    report.main([*check, "--dir", str(res), str(files[0]), str(files[2])])
    page = report.render(res)
    assert "`reproductions/fedlog/issue25_check.json` |" in page
    assert "| [FedLoG](#fedlog-o-pfgls-third-party-table-fedlogs-generalisation-claim) | 1 of 1 |" in page
    other = _fedlog_out(tmp_path / "d.json", "secagg", [0], 75.0, experiment="report")
    with pytest.raises(SystemExit, match="is not a reproduce_fedlog.py 'table' or 'claim' result"):
        report.main([*args, "--dir", str(res), str(other)])


def _fedlog_claim_out(path: Path, seeds: list[int], prompt_mode: str = "paper", rounds: int = 100) -> Path:
    """A reproduce_fedlog.py ``claim`` file: FedLoG, FedAvg (both views) and Local on Cora K=3."""
    acc = {"fedlog": 0.70, "fedavg": 0.74, "fedavg-local": 0.72, "local": 0.60}
    methods = ["fedlog"] if prompt_mode == "none" else list(acc)
    rows = [
        {
            "seen_test": acc[m] + 0.01 * s,
            "unseen_node": acc[m] - 0.05,
            "missing_class": 0.0 if m == "local" else acc[m] - 0.3 + (0.1 if m == "fedlog" else 0),
            "new_client": None if m == "local" else acc[m] - 0.1,
            "round": 90,
            "dataset": "Cora",
            "clients": 3,
            "method": m,
            "seed": s,
            "seconds": 100.0 if m != "local" else 50.0,
        }
        for m in methods
        for s in seeds
    ]
    args = {
        "experiment": "claim",
        "classifier_mode": "released",
        "prompt_mode": prompt_mode,
        "protocol": "secagg",
        "rounds": rounds,
        "hops": 2,
        "missing_per_client": 1,
        "min_missing_nodes": 20,
    }
    path.write_text(json.dumps({"args": args, "rows": rows}))
    return path


def test_collect_and_render_the_fedlog_claim(report, tmp_path: Path) -> None:
    """reproduce_fedlog.py 'claim' files merge into one cell per (dataset, K, method), FedLoG labelled by prompt
    mode; the page shows the four accuracies and the claim's verdict against each FedAvg view; a saved record
    takes later seeds; files of other settings are refused."""
    res = tmp_path / "reproductions"
    files = [
        _fedlog_claim_out(tmp_path / "a.json", [0]),
        _fedlog_claim_out(tmp_path / "b.json", [1]),
        _fedlog_claim_out(tmp_path / "c.json", [0, 1], prompt_mode="none"),
    ]
    args = ["collect", "--paper", "fedlog", "--name", "claim", "--machine", "box", "--command", "go"]
    report.main([*args, "--dir", str(res), *map(str, files)])
    rec = json.loads((res / "fedlog" / "claim.json").read_text())
    by = {c["method"]: c for c in rec["cells"]}
    assert sorted(by) == ["fedavg", "fedavg-local", "fedlog", "fedlog-nopg", "local"]
    assert [r["seed"] for r in by["fedlog"]["runs"]] == [0, 1] and by["fedavg-local"][
        "same_run_as"
    ] == "fedavg"
    page = report.render(res)
    assert (
        "| Cora | 3 | `fedlog` | 70.50 ± 0.50 | 65.00 ± 0.00 | 50.00 ± 0.00 | 60.00 ± 0.00 | secagg | 0,1 |"
        in page
    )
    assert (
        "| Cora | 3 | `local` | 60.50 ± 0.50 | 55.00 ± 0.00 | 0.00 ± 0.00 | - | secagg | 0,1 | 50 |" in page
    )
    assert "| Cora | 3 | `fedavg-local` |" in page and "same runs as fedavg" in page
    # FedLoG: Missing Class +8 over fedavg-local, New Client -2, Seen Graph -2 (beyond the 1-point tolerance)
    assert (
        "- Cora K=3, `fedlog` vs `fedavg-local`: does not hold (missing_class vs fedavg-local +8.0, "
        "new_client vs fedavg-local -2.0 (fails), missing_class vs local +50.0, seen_test vs fedavg-local -2.0 "
        "(fails), not measured: new_client vs local)"
    ) in page
    assert "- Cora K=3, `fedlog-nopg` vs `fedavg`: does not hold" in page
    # the time counts each run once: fedlog 2 x 100 s, fedlog-nopg 2 x 100, fedavg 2 x 100, local 2 x 50
    assert "Run time of `reproductions/fedlog/claim.json`: 12 min in all" in page
    assert (
        "| [FedLoG](#fedlog-o-pfgls-third-party-table-fedlogs-generalisation-claim) | none saved yet |"
        in page
    )
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(rec))
    later = _fedlog_claim_out(tmp_path / "d.json", [2])
    report.main([*args, "--dir", str(res), str(saved), str(later)])
    rec = json.loads((res / "fedlog" / "claim.json").read_text())
    assert [r["seed"] for r in {c["method"]: c for c in rec["cells"]}["fedlog"]["runs"]] == [0, 1, 2]
    short = _fedlog_claim_out(tmp_path / "e.json", [3], rounds=20)
    with pytest.raises(SystemExit, match="measured on different settings"):
        report.main([*args, "--dir", str(res), str(saved), str(short)])


def _collect_adafgl(report, res: Path, name: str, *files: Path) -> dict:
    args = ["collect", "--paper", "adafgl", "--name", name, "--machine", "m", "--command", "c"]
    report.main([*args, "--dir", str(res), *map(str, files)])
    return json.loads((res / "adafgl" / f"{name}.json").read_text())


def test_collect_extends_a_saved_record(report, tmp_path: Path) -> None:
    """Later seeds are filed into a record collect wrote earlier; a seed read twice is refused."""
    res = tmp_path / "reproductions"
    first = _collect_adafgl(report, res, "cham", _adafgl_out(tmp_path / "a.json", "secagg", [0, 1], 0.6))
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(first))
    later = _adafgl_out(tmp_path / "b.json", "secagg", [2, 3], 0.6)
    (cell,) = _collect_adafgl(report, res, "cham", saved, later)["cells"]
    assert [r["seed"] for r in cell["runs"]] == [0, 1, 2, 3] and cell["device"] == "cpu"
    with pytest.raises(SystemExit, match="repeats chameleon louvain secagg seed 0"):
        _collect_adafgl(report, res, "again", saved, tmp_path / "a.json")


def test_collect_carries_the_library_versions_into_the_record_and_the_page(report, tmp_path: Path) -> None:
    """Each distinct install the files ran on is kept once, a saved record's are kept when it is extended, and
    the page names them beside the command; a file written before the scripts recorded them adds none."""
    res = tmp_path / "reproductions"
    old = {
        "python": "3.11.7",
        "torch": "2.5.0",
        "tenseal": None,
        "securefgl_commit": "0123456789abcdef+dirty",
    }
    new = {"python": "3.11.7", "torch": "2.13.0+cpu", "tenseal": "0.3.18", "securefgl_commit": None}
    files = []
    for name, seeds, libraries in (("a", [0], old), ("b", [1], old), ("c", [2], None)):
        path = _adafgl_out(tmp_path / f"{name}.json", "secagg", seeds, 0.6)
        if libraries is not None:
            path.write_text(json.dumps({**json.loads(path.read_text()), "libraries": libraries}))
        files.append(path)
    first = _collect_adafgl(report, res, "cham", *files)
    assert first["libraries"] == [old]
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(first))
    later = _adafgl_out(tmp_path / "d.json", "secagg", [3], 0.6)
    later.write_text(json.dumps({**json.loads(later.read_text()), "libraries": new}))
    assert _collect_adafgl(report, res, "cham", saved, later)["libraries"] == [old, new]
    page = report.render(res)
    assert "libraries: python 3.11.7, torch 2.5.0, securefgl at 0123456789+dirty; " in page
    assert "python 3.11.7, torch 2.13.0+cpu, tenseal 0.3.18):" in page
    assert _collect_adafgl(report, res, "bare", files[2]).get("libraries") is None


def test_collect_files_baseline_only_runs_into_the_saved_runs(report, tmp_path: Path) -> None:
    """--baselines-only runs add the centralised column to the runs of their seeds, in any file order."""
    saved = _adafgl_out(tmp_path / "a.json", "secagg", [0, 1], 0.6)
    extra = json.loads(_adafgl_out(tmp_path / "b.json", "secagg", [1], 0.6).read_text())
    extra["cells"][0]["runs"] = [
        {
            "protocol": "secagg",
            "seed": 1,
            "baselines_only": True,
            "centralized_test_acc": 0.7,
            "local_test_acc": 0.6,
        }
    ]
    (tmp_path / "b.json").write_text(json.dumps(extra))
    res = tmp_path / "reproductions"
    (cell,) = _collect_adafgl(report, res, "cham", tmp_path / "b.json", saved)["cells"]
    assert [r.get("centralized_test_acc") for r in cell["runs"]] == [None, 0.7]
    assert "| 60.0 ± 0.0 | 70.0 ± 0.0 | 68.9 ± 2.1 |" in report.render(res)
    extra["cells"][0]["runs"][0]["local_test_acc"] = 0.5  # differs from the saved run's Local
    (tmp_path / "b.json").write_text(json.dumps(extra))
    with pytest.raises(SystemExit, match="gives local_test_acc 0.5"):
        _collect_adafgl(report, res, "x", saved, tmp_path / "b.json")
    extra["cells"][0]["runs"][0]["seed"] = 7
    (tmp_path / "b.json").write_text(json.dumps(extra))
    with pytest.raises(SystemExit, match="no file read has that run"):
        _collect_adafgl(report, res, "x", saved, tmp_path / "b.json")


def test_collect_reads_the_cells_of_a_run_cut_short(report, tmp_path: Path) -> None:
    """A run stopped in its second cell: the finished cell and the runs done of the second are both filed."""
    data = json.loads(_adafgl_out(tmp_path / "a.json", "secagg", [0, 1], 0.6).read_text())
    partial = {**data["cells"][0], "split": "structure-noniid", "injection": "text"}
    partial["runs"] = partial["runs"][:1]
    (tmp_path / "a.json").write_text(json.dumps({**data, "partial": partial}))
    rec = _collect_adafgl(report, tmp_path / "r", "cut", tmp_path / "a.json")
    assert [(c["split"], len(c["runs"])) for c in rec["cells"]] == [("louvain", 2), ("structure-noniid", 1)]


def test_the_heterophilous_table_pairs_runs_by_seed(report) -> None:
    """Issue 27's table: paired differences with a t interval, and the 4-point bar on the blend."""
    runs = [
        {
            "protocol": "secagg",
            "seed": s,
            "adafgl_test_acc": 0.40,
            "adafgl_blend_test_acc": b,
            "blend_weight": 0.5,
            "fedavg_test_acc_last": f,
            "fedavg_test_acc_bestval": f - 0.01,
            "local_test_acc": 0.44,
            "centralized_test_acc": 0.50,
        }
        for s, b, f in ((0, 0.45, 0.44), (1, 0.47, 0.45))
    ]
    cell = {
        "dataset": "squirrel",
        "split": "louvain",
        "ratios": [0.6, 0.2, 0.2],
        "partition": "ours",
        "runs": runs,
    }
    rows = report.adafgl_baseline_rows([{"cells": [cell]}])
    # differences +1 and +2: mean 1.5, std 0.71, t(0.975, 1) = 12.71 -> half-width 6.35; +2 and +3 against
    # the best-validation round
    assert rows[-1] == (
        "| squirrel louvain | 60/20/20 | - | 2 | +1.5 [-4.9, +7.9] | +2.5 [-3.9, +8.9] | -4.5 [-10.9, +1.9] "
        "| +2.0 [-10.7, +14.7] "
        "| -10.1 | no | -6.1 (2 seeds) |"
    )
    assert report.adafgl_baseline_rows([{"cells": [{**cell, "dataset": "cora"}]}]) == []


def test_identical_predictions_pair_to_exactly_zero(report) -> None:
    """Two pooled ratios of the same predictions can differ in the last bit; the difference reads +0.0."""
    assert report.paired([48.20350795782054, 47.37349347022761], [48.20350795782059, 47.37349347022765]) == (
        "+0.0 [+0.0, +0.0]"
    )
    assert report.paired([48.0, 47.0], [47.5, 47.5]) == "+0.0 [-6.4, +6.4]"


def test_a_one_client_cell_is_labelled_and_kept_out_of_the_federated_comparison(
    report, tmp_path: Path
) -> None:
    """The whole graph as one client (AdaFGL without federation): its own row, not issue 27's paired table."""
    data = json.loads(_adafgl_out(tmp_path / "a.json", "plaintext", [0], 0.6).read_text())
    data["cells"][0].update(dataset="squirrel", partition="ours", clients=[{"client": 0}])
    (tmp_path / "a.json").write_text(json.dumps(data))
    res = tmp_path / "reproductions"
    (cell,) = _collect_adafgl(report, res, "one", tmp_path / "a.json")["cells"]
    assert cell["num_clients"] == 1
    assert "| squirrel louvain, 1 client | ours |" in report.render(res)
    assert (
        report.adafgl_baseline_rows(
            [{"cells": [{**cell, "runs": [{**cell["runs"][0], "protocol": "secagg"}]}]}]
        )
        == []
    )


def test_collect_keys_old_structure_noniid_cells_as_the_texts_injection(report, tmp_path: Path) -> None:
    """A structure non-iid cell saved before --injection existed merges with a new cell of the text's."""
    old, new = (
        json.loads(_adafgl_out(tmp_path / f"{n}.json", "secagg", seeds, 0.6).read_text())
        for n, seeds in (("old", [0]), ("new", [1]))
    )
    old["cells"][0]["split"] = "structure-noniid"
    new["cells"][0].update(split="structure-noniid", injection="text")
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    rec = _collect_adafgl(report, tmp_path / "r", "sn", tmp_path / "old.json", tmp_path / "new.json")
    (cell,) = rec["cells"]
    assert cell["injection"] == "text" and [r["seed"] for r in cell["runs"]] == [0, 1]


def test_collect_refuses_missing_files(report, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no such file"):
        report.main(
            [
                "collect",
                "--paper",
                "adafgl",
                "--name",
                "x",
                "--machine",
                "m",
                "--command",
                "c",
                "--dir",
                str(tmp_path),
                str(tmp_path / "missing.json"),
            ]
        )


def test_the_page_is_up_to_date(report) -> None:
    """REPRODUCTIONS.md is exactly what `render` makes of reproductions/ (regenerate it after a change)."""
    assert (ROOT / "REPRODUCTIONS.md").read_text() == report.render(ROOT / "reproductions")


def test_every_table_on_the_page_is_one_block(report) -> None:
    """No line breaks a table: every run of `|` lines starts with a header and its separator row.

    A run-time line between two result files' rows once split the O-pFGL table, leaving the second file's
    rows as a headerless table that markdown renders as text.
    """
    lines = report.render(ROOT / "reproductions").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("|") and not lines[i - 1].startswith("|")]
    assert starts
    for i in starts:
        assert lines[i + 1].startswith("|---"), f"table without a header at line {i + 1}: {lines[i][:80]}"


def test_runs_with_adafgl_options_are_kept_apart_and_paired_with_the_defaults_local_runs(
    report, tmp_path: Path
) -> None:
    """A cell run with ``--option extractor="last"`` is its own cell (from its saved ``options``, or from the
    ``args`` of a file written before cells saved them), labelled with the option; its blend − Local pairs with
    the Local runs of the defaults' cell of the same seeds, since Local does not depend on AdaFGL's options."""
    default = _adafgl_out(tmp_path / "a.json", "secagg", [0, 1], 0.6)
    variant = json.loads(_adafgl_out(tmp_path / "b.json", "secagg", [0, 1], 0.6).read_text())
    variant["args"]["option"] = ['extractor="last"', 'blend="select"']
    for r in variant["cells"][0]["runs"]:
        del r["local_test_acc"]
        r["adafgl_blend_test_acc"] = 0.65
    (tmp_path / "b.json").write_text(json.dumps(variant))
    res = tmp_path / "reproductions"
    cells = _collect_adafgl(report, res, "cham", default, tmp_path / "b.json")["cells"]
    assert [c.get("options") for c in cells] == [None, {"extractor": "last"}]
    saved = tmp_path / "saved.json"
    saved.write_text(
        json.dumps({**variant, "cells": [{**variant["cells"][0], "options": {"extractor": "x"}}]})
    )
    assert _collect_adafgl(report, res, "opt", saved)["cells"][0]["options"] == {"extractor": "x"}
    records = [{"cells": [{**c, "partition": "ours"} for c in cells]}]
    rows = report.adafgl_baseline_rows(records)
    assert rows[-1].startswith("| chameleon louvain, extractor=last | 60/20/20 | - | 2 |")
    assert "| +5.0 [+5.0, +5.0] | -3.9 | yes |" in rows[-1]  # blend − Local, then − paper
    page = report.render(res)
    assert "| chameleon louvain, extractor=last | file chameleon_louvain.npz |" in page
