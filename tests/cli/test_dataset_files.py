"""Real data by command: ``datasets import DIR``, ``--root`` everywhere, and one line for every broken file
(issue #26, items 1 and 4)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


@pytest.fixture
def raw_copy(data_root: Path, tmp_path: Path) -> Path:
    """A folder with Cora's raw files and two npz graphs, in the data-root layout (no processed/)."""
    src = tmp_path / "download"
    shutil.copytree(data_root / "Cora" / "raw", src / "Cora" / "raw")
    (src / "heterophily-npz").mkdir()
    for name in ("cornell", "texas"):
        shutil.copy(data_root / "heterophily-npz" / f"{name}.npz", src / "heterophily-npz")
    return src


def _dirs(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()}


def test_import_copies_checks_and_lists(cli, raw_copy: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    res = cli(["datasets", "import", str(raw_copy), "--root", str(root), "--json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    rows = {r["name"]: r for r in payload["datasets"]}
    assert set(rows) == {"Cora", "cornell", "texas"}
    assert rows["Cora"]["available"] and rows["Cora"]["nodes"] == 2708 and rows["cornell"]["nodes"] == 183
    assert rows["Cora"]["import"] == "copied 8 of 8 files"
    assert (root / "Cora" / "raw" / "ind.cora.x").is_file()
    again = cli(["datasets", "import", str(raw_copy), "--root", str(root), "--json"])
    assert {r["import"] for r in json.loads(again.stdout)["datasets"]} == {"already in the data root"}
    run = cli(["run", "--dataset", "cornell", "--root", str(root), "--rounds", "1", "--no-save", "-q"])
    assert run.exit_code == 0, run.output


def test_import_skips_a_broken_dataset_and_says_why(cli, raw_copy: Path, tmp_path: Path) -> None:
    bad = raw_copy / "heterophily-npz" / "texas.npz"
    bad.write_bytes(bad.read_bytes()[:500])
    root = tmp_path / "root"
    res = cli(["datasets", "import", str(raw_copy), "--root", str(root)])
    assert res.exit_code == 4, res.output
    assert f"skipped texas: {bad} cannot be read" in res.stderr
    assert "cornell" in res.stdout and not (root / "heterophily-npz" / "texas.npz").exists()


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["datasets", "import"], 2, "takes one folder"),
        (["datasets", "import", "/no/such/folder"], 2, "is not a folder"),
    ],
)
def test_import_usage_errors(cli, args: list[str], code: int, needle: str) -> None:
    cli(args).one_error_line(code, needle)


def test_import_of_a_folder_without_datasets(cli, tmp_path: Path) -> None:
    cli(["datasets", "import", str(tmp_path), "--root", str(tmp_path / "r")]).one_error_line(
        4, "no complete dataset", "DIR/Cora/raw/ind.cora.x"
    )


def _break_truncated_raw(root: Path) -> Path:
    p = root / "Cora" / "raw" / "ind.cora.allx"
    p.write_bytes(p.read_bytes()[:1000])
    return p


def _break_dir_for_file(root: Path) -> Path:
    p = root / "Cora" / "raw" / "ind.cora.graph"
    p.unlink()
    p.mkdir()
    return p


@pytest.mark.parametrize(
    ("dataset", "breaker", "fix"),
    [
        ("Cora", _break_truncated_raw, "cannot be read"),
        ("Cora", _break_dir_for_file, "is a directory, not a file"),
    ],
)
def test_broken_raw_file_is_one_line_and_leaves_no_empty_folder(
    cli, raw_copy: Path, dataset: str, breaker, fix: str
) -> None:
    bad = breaker(raw_copy)
    before = _dirs(raw_copy)
    res = cli(["run", "--dataset", dataset, "--root", str(raw_copy), "--rounds", "1", "--no-save", "-q"])
    res.one_error_line(4, str(bad), fix, "securefgl datasets import")
    assert _dirs(raw_copy) == before  # no empty processed/ left behind


def test_truncated_npz_is_one_line(cli, raw_copy: Path) -> None:
    bad = raw_copy / "heterophily-npz" / "cornell.npz"
    bad.write_bytes(bad.read_bytes()[:300])
    res = cli(["run", "--dataset", "cornell", "--root", str(raw_copy), "--rounds", "1", "--no-save", "-q"])
    res.one_error_line(4, str(bad), "cannot be read")


def test_corrupted_processed_copy_says_delete_it(cli, raw_copy: Path) -> None:
    from securefgl.data import load_dataset

    load_dataset("Cora", raw_copy)  # writes processed/
    processed = raw_copy / "Cora" / "processed"
    for f in processed.glob("data*.pt"):
        f.write_bytes(b"not a torch file")
    res = cli(["run", "--dataset", "Cora", "--root", str(raw_copy), "--rounds", "1", "--no-save", "-q"])
    res.one_error_line(4, str(processed), "delete")


def test_datasets_listing_marks_a_bad_row_and_lists_the_rest(cli, raw_copy: Path) -> None:
    bad = raw_copy / "heterophily-npz" / "texas.npz"
    bad.write_bytes(bad.read_bytes()[:300])
    res = cli(["datasets", "Cora", "texas", "cornell", "--root", str(raw_copy), "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert rows["Cora"]["nodes"] == 2708 and rows["cornell"]["nodes"] == 183
    assert not rows["texas"]["available"] and rows["texas"]["status"].startswith("unreadable:")
    assert str(bad) in rows["texas"]["status"]


def test_missing_dataset_names_the_import_command(cli, tmp_path: Path) -> None:
    root = tmp_path / "empty"
    res = cli(["run", "--dataset", "cornell", "--root", str(root), "--rounds", "1", "--no-save", "-q"])
    res.one_error_line(4, "securefgl datasets import DIR", "--root")
    assert not root.exists()


def test_piped_tables_are_not_wrapped_at_80_columns(cli, data_root: Path) -> None:
    res = cli(["datasets", "cornell", "--root", str(data_root)])
    assert res.exit_code == 0, res.output
    row = next(ln for ln in res.stdout.splitlines() if "cornell" in ln)
    assert "183" in row and len(row) > 80
