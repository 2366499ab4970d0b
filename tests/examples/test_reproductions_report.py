"""examples/reproductions_report.py: REPRODUCTIONS.md is computed from the saved results, never typed by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location(
        "reproductions_report", ROOT / "examples" / "reproductions_report.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _adafgl_out(path: Path, protocol: str, seeds: list[int], acc: float) -> Path:
    runs = [
        {
            "protocol": protocol,
            "seed": s,
            "adafgl_test_acc": acc + 0.01 * s,
            "fedavg_test_acc_last": 0.5,
            "reference_weighted_test_acc": acc + 0.05,
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
    # 64.5 ± 0.7 (seeds 0-1): within 2.5 of 68.9 with the reference weighting only
    assert "| 64.5 ± 0.7 | 69.0 ± 0.0 | 50.0 ± 0.0 | 68.9 ± 2.1 | no / yes | 2 (0-1) | 100 |" in page
    assert "largest per-seed gap 0.00 points" in page and "identical" in page
    assert "| Cora | fedstruct | secagg | 80.00 ± 0.00 | 80.28 ± 1.44 | yes | 3 |" in page
    assert "run it" in page and "test box" in page
    for title in ("O-pFGL", "FedSpray", "FedLoG"):  # no saved result: the docstring's figures, said so
        assert f"[{title}]" in page
    assert page.count("Figures (no saved result yet)") == 3


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
