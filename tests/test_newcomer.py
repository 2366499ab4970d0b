"""A newcomer's first hour (issue #26), replayed: every case asserts its exit code, one line on stderr, no
traceback and nothing lost.

The fast cases run the real console script in a subprocess (they must not import torch, so each takes a
fraction of a second); the cases that load data or train run in-process. ``-m slow`` adds the README's
commands in order and a real Ctrl-C (SIGINT) during a multi-seed run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = shutil.which("securefgl") or ""

pytestmark = pytest.mark.skipif(not SCRIPT, reason="the securefgl console script is not installed")

#: (arguments, exit code, text the single stderr line must contain); none of these may import torch.
FAST_CASES: list[tuple[list[str], int, str]] = [
    (["run", "--rounds", "0"], 2, "--rounds must be >= 1, got 0"),
    (["run", "--protocol", "secagg+dpp"], 2, "unknown protocol 'secagg+dpp'; valid choices: plaintext"),
    (["run", "--dataset", "Coraa"], 2, "unknown dataset 'Coraa'"),
    (["run", "--algorithm", "fedsgd"], 2, "unknown algorithm 'fedsgd'"),
    (["run", "--seeds", "a,b"], 2, "--seeds must be comma-separated integers"),
    (["run", "--dropout", "1.5"], 2, "--dropout must be in [0, 1)"),
    (["run", "--lr", "-1"], 2, "--lr must be > 0"),
    (["run", "--client-fraction", "2"], 2, "--client-fraction must be > 0 and <= 1"),
    (["run", "--no-save", "--output", "x"], 2, "--no-save and --output contradict"),
    (["run", "--output", "{file}"], 2, "is an existing file"),
    (["run", "--output", "{file}/sub"], 2, "lies under the file"),
    (["run", "--config", "nope.toml"], 2, "is not a file"),
    (["run", "--rounds", "abc"], 2, "'abc' is not a valid integer"),
    (["audit", "--threads", "0"], 2, "--threads must be >= 1"),
    (["audit", "--dataset", "Coraa"], 2, "unknown dataset 'Coraa'"),
    (["datasets", "import"], 2, "takes one folder"),
    (["datasets", "import", "/no/such/folder"], 2, "is not a folder"),
]

#: A sanity bound only (0.3-0.5 s measured on an idle core; importing torch alone takes 3-6 s): what makes
#: these cases fast is checked exactly, by asserting that torch was never imported.
FAST_LIMIT_S = 10.0

#: Runs the console entry point like the installed script, then reports whether torch was imported.
_WRAPPER = (
    "import sys\n"
    "from securefgl.cli import main\n"
    "sys.argv = ['securefgl', *sys.argv[1:]]\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    "else:\n"
    "    code = 0\n"
    "if 'torch' in sys.modules:\n"
    "    sys.stderr.write('TORCH-IMPORTED\\n')\n"
    "sys.exit(code)\n"
)


def _env(data_root: Path) -> dict[str, str]:
    return {**os.environ, "SECUREFGL_DATA": str(data_root), "MPLBACKEND": "Agg", "COLUMNS": "200"}


def _securefgl(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120
) -> tuple[int, str, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.run([SCRIPT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - t0


def test_help_imports_no_torch() -> None:
    code = (
        "import sys\nfrom securefgl.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('torch', 'torch_geometric', 'numpy') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_help_is_fast(tmp_path: Path, data_root: Path) -> None:
    code, out, err, seconds = _securefgl(["--help"], tmp_path, _env(data_root))
    assert code == 0 and "datasets" in out and not err
    assert seconds < FAST_LIMIT_S, f"securefgl --help took {seconds:.2f} s"


@pytest.mark.parametrize(("args", "code", "needle"), FAST_CASES, ids=[" ".join(c[0]) for c in FAST_CASES])
def test_bad_input_is_one_fast_line(
    tmp_path: Path, data_root: Path, args: list[str], code: int, needle: str
) -> None:
    (tmp_path / "file").write_text("not a folder")
    args = [a.replace("{file}", str(tmp_path / "file")) for a in args]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *args],
        cwd=tmp_path,
        env=_env(data_root),
        capture_output=True,
        text=True,
    )
    got, err, seconds = proc.returncode, proc.stderr, time.perf_counter() - t0
    assert "TORCH-IMPORTED" not in err, f"{args} imported torch"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert got == code, err
    assert "Traceback" not in err and len(lines) <= 6, err  # click's usage errors draw a small box
    assert needle in " ".join(err.split()), err
    if code == 2 and lines and lines[0].startswith("error:"):
        assert len(lines) == 1, err
    assert seconds < FAST_LIMIT_S, f"{args} took {seconds:.2f} s"
    assert not (tmp_path / "results").exists()


def _in_process(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from securefgl.cli import main

    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_real_data_by_the_readme(tmp_path: Path, data_root: Path, capsys, monkeypatch) -> None:
    """README: import the raw files into an empty data root, list them, train on one (in-process)."""
    root = tmp_path / "root"
    monkeypatch.setenv("SECUREFGL_DATA", str(root))
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "download"
    (src / "heterophily-npz").mkdir(parents=True)
    for name in ("cornell", "texas"):
        shutil.copy(data_root / "heterophily-npz" / f"{name}.npz", src / "heterophily-npz")
    code, out, err = _in_process(["datasets", "import", str(src)], capsys)
    assert code == 0, err
    assert "cornell" in out and "183" in out and "Traceback" not in err
    code, out, err = _in_process(["datasets", "--json", "--no-stats"], capsys)
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["cornell"]["available"] and not rows["Cora"]["available"]
    code, out, err = _in_process(
        ["run", "--dataset", "cornell", "--rounds", "2", "--threads", "1", "-q"], capsys
    )
    assert code == 0, err
    (folder,) = (tmp_path / "results").iterdir()
    assert json.loads((folder / "metrics.json").read_text())["status"] == "ok"


@pytest.mark.slow
def test_readme_commands_in_order(tmp_path: Path, data_root: Path) -> None:
    env = _env(data_root)
    commands = [
        ["--help"],
        ["datasets"],
        ["partition", "--dataset", "Cora", "--method", "louvain+", "--clients", "10"],
        ["run", "--protocol", "secagg", "--threads", "1"],
        [
            "run",
            "--dataset",
            "Cora",
            "--partition",
            "louvain+",
            "--clients",
            "10",
            "--rounds",
            "5",
            "--threads",
            "1",
        ],
        ["bench", "protocols", "--protocol", "secagg", "--clients", "10", "--length", "1000"],
    ]
    for args in commands:
        code, out, err, seconds = _securefgl(args, tmp_path, env, timeout=600)
        assert code == 0, (args, err)
        assert "Traceback" not in err


@pytest.mark.slow
def test_ctrl_c_saves_finished_seeds(tmp_path: Path, data_root: Path) -> None:
    out = tmp_path / "res"
    args = ["run", "--seeds", "0,1,2,3", "--rounds", "40", "--threads", "1", "--output", str(out), "-q"]
    proc = subprocess.Popen(
        [SCRIPT, *args], cwd=tmp_path, env=_env(data_root), stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while not (out / "metrics.json").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted:" in err and "Traceback" not in err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "interrupted" and metrics["seeds"][0]["status"] == "ok"
    assert (out / "INCOMPLETE").is_file()
