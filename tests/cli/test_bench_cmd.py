"""Tests for ``securefgl bench protocols`` and the benchmark library behind it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from securefgl.benchmarking import (
    BenchConfig,
    available_sections,
    format_report,
    format_rows,
    plaintext_sum_seconds,
    prg_floor_seconds,
    register_section,
    run_benchmarks,
    run_protocol_case,
    to_json,
)
from securefgl.cli import app, main
from securefgl.errors import ConfigError
from securefgl.protocols._split_planner import planner

runner = CliRunner()


def test_prg_floor_and_plain_sum_are_measured() -> None:
    import numpy as np

    t1 = prg_floor_seconds(1, 100_000, 20)
    t8 = prg_floor_seconds(8, 100_000, 40)
    assert 0 < t1 < 0.5 and 0 < t8 < 2.0
    assert 0 < plaintext_sum_seconds([np.ones(1000)] * 5) < 0.5
    assert plaintext_sum_seconds([]) == 0.0


def test_run_protocol_case_plaintext_row() -> None:
    row = run_protocol_case("plaintext", 4, 1000, 0.25, seed=1)
    assert row["protocol"] == "plaintext" and row["n"] == 4 and row["d"] == 1000
    assert row["survivors"] == 3 and row["dropped"] == 1 and row["input_phase"] == "input"
    assert row["masks"] is False and row["client_vs_prg"] is None
    # float64 vector of 1000 elements plus framing, per participating client
    assert 8000 < row["bytes_up_per_client"] < 8200
    assert row["server_ms"] > 0 and row["plain_sum_ms"] > 0 and row["server_vs_plain_sum"] > 0


def test_sections_registry_refuses_silent_overwrite() -> None:
    assert {"protocols", "unmasking"} <= set(available_sections())
    with pytest.raises(ConfigError, match="already registered"):
        register_section("protocols", lambda cfg: [])
    with pytest.raises(ConfigError, match="unknown benchmark section"):
        run_benchmarks(BenchConfig(sections=("nope",)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"clients": (1,)}, "--clients"),
        ({"lengths": (0,)}, "--length"),
        ({"dropouts": (1.0,)}, "--dropout"),
        ({"repeats": 0}, "repeats"),
        ({"prg": "rc4"}, "prg"),
    ],
)
def test_config_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        BenchConfig(**kwargs)


def test_format_rows() -> None:
    text = format_rows(
        [{"a": 1, "b": 0.5, "c": None, "d": True}, {"a": 1_000_000, "b": 1234.5, "c": "x", "d": False}]
    )
    lines = text.splitlines()
    assert lines[0].split("|")[1].strip() == "a" and len(lines) == 4
    assert "1e6" in lines[3] and "1234" in lines[3] and "NO" in lines[3] and "-" in lines[2]
    assert format_rows([]) == "(no rows)"


def test_report_says_what_the_split_planner_learnt() -> None:
    """A masked sum of vectors long enough to split (280 KB of words, two workers) is timed both ways and the
    report carries what the planner learnt: the median time per key of each choice and the choice taken."""
    config = BenchConfig(
        protocols=("secagg+",),
        clients=(3,),
        lengths=(70_000,),
        repeats=3,
        consistency=False,
        options={"secagg+": {"workers": 2}},
    )
    planner().reset()  # process-wide: forget the shapes earlier tests taught it
    result = run_benchmarks(config)
    rows = [r for r in result["split_planner"] if r["kind"] == "combine"]
    assert rows and all(r["pieces"] == 2 and r["word_bytes"] == 4 for r in rows)
    assert any(r["choice"] in ("one thread", "split") for r in rows)  # three sums warm it up
    assert all(r["one_thread_us"] > 0 and r["split_us"] > 0 for r in rows if r["choice"] != "warming up")
    assert "## split planner" in format_report(result)
    assert json.loads(to_json(result))["split_planner"] == result["split_planner"]


def test_cli_json_output() -> None:
    result = runner.invoke(
        app,
        ["bench", "protocols", "--protocol", "plaintext", "-n", "3", "-d", "500", "--dropout", "0", "--json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = data["sections"]["protocols"]
    assert [r["protocol"] for r in rows] == ["plaintext"] and rows[0]["n"] == 3 and rows[0]["d"] == 500
    assert data["machine"]["cpu_count"] >= 1 and data["config"]["clients"] == [3]
    # several timed runs by default, so one noisy draw of a loaded machine does not make the figure
    assert data["config"]["repeats"] == 3 and rows[0]["repeats"] == 3


def test_cli_table_output() -> None:
    result = runner.invoke(app, ["bench", "protocols", "-p", "plaintext", "-n", "2", "-d", "100"])
    assert result.exit_code == 0, result.output
    assert "## protocols" in result.stdout and "| plaintext |" in result.stdout.replace("  ", " ")


def test_cli_errors_map_to_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "protocols", "--protocol", "nosuch", "-n", "2", "-d", "10"])
    assert exc.value.code == 2
    assert "unknown protocol 'nosuch'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["bench", "protocols", "--dropout", "1.5"])
    assert exc.value.code == 2


def test_cli_help_lists_protocols() -> None:
    result = runner.invoke(app, ["bench", "protocols", "--help"])
    assert result.exit_code == 0 and "plaintext" in result.stdout


@pytest.mark.parametrize(
    ("name", "phase"),
    [("plaintext", "input"), ("secagg", "masked_input"), ("secagg+", "masked_input"), ("ckks", "upload")],
)
def test_benchmark_drops_clients_at_their_upload_stage(name: str, phase: str) -> None:
    import numpy as np

    from securefgl._bench_case import _dropout_plan
    from securefgl.protocols import get_protocol

    proto = get_protocol(name)
    plan = _dropout_plan(proto, list(range(10)), 0.2, np.random.default_rng(0))
    assert len(plan.at) == 2 and set(plan.at.values()) == {phase}


_RATIOS = {
    "ckks": ["enc_x", "add_x", "dec_x", "enc+add+dec_x", "vs_fresh_x", "vs_native_x"],
    "ckks-bytes": ["ckks/plaintext", "ckks/float32", "ckks/secagg"],
    "dp": ["dp_overhead_x"],
}


def test_cli_ckks_and_dp_sections() -> None:
    import math

    result = runner.invoke(
        app,
        [
            "bench",
            "protocols",
            *("--section", "ckks", "--section", "ckks-bytes", "--section", "dp"),
            *("--clients", "3", "--length", "1000", "--repeats", "1", "--json"),
        ],
    )
    assert result.exit_code == 0, result.output
    sections = json.loads(result.stdout)["sections"]
    assert list(sections) == ["ckks", "ckks-bytes", "dp"]
    (ckks,) = sections["ckks"]
    assert (ckks["n"], ckks["d"], ckks["chunks"], ckks["raw_chunks"]) == (3, 1000, 1, 1)
    assert isinstance(ckks["meets_1.1x"], bool) and ckks["key_setup_ms"] > 0
    (nbytes,) = sections["ckks-bytes"]
    assert nbytes["float32_B"] == 4000 and nbytes["ckks_up_B"] > nbytes["plaintext_up_B"] > 0
    # The default key distribution: two key holders; the others get the (smaller) public context only.
    assert nbytes["key_holders"] == 2
    assert nbytes["key_down_other_B"] < nbytes["key_down_holder_B"] == nbytes["key_down_mean_all_holders_B"]
    assert ckks["enc+add+dec_x_range"].count("-") == 1 and ckks["vs_fresh_x_range"].count("-") == 1
    assert all(ckks[f"fresh_{step}_ms"] > 0 for step in ("enc", "add", "dec"))
    dp = sections["dp"]
    assert [r["protocol"] for r in dp] == ["plaintext", "secagg", "secagg+", "ckks"]
    assert all(r["noise_per_client_ms"] > 0 and r["epsilon(1 round, delta 1e-5)"] > 0 for r in dp)
    for name, cols in _RATIOS.items():
        for row in sections[name]:
            assert "skipped" not in row
            for col in cols:
                assert math.isfinite(row[col]) and row[col] > 0, (name, col, row[col])


def test_ckks_sections_skip_large_cases_unless_asked() -> None:
    from securefgl.benchmarking_ckks_dp import bytes_section, ckks_section

    config = BenchConfig(clients=(100,), lengths=(100_000,), sections=("ckks", "ckks-bytes"))
    for section in (ckks_section, bytes_section):
        (row,) = section(config)
        assert row["skipped"].startswith("n*d > 1e+06")


def test_full_runs_the_ckks_and_dp_sections() -> None:
    from securefgl.cli.bench_cmd import FULL_SECTIONS, _section_help

    assert FULL_SECTIONS == ("protocols", "unmasking", "ckks", "ckks-bytes", "dp")
    assert set(FULL_SECTIONS) <= set(available_sections())
    assert "one of: protocols, unmasking, ckks, ckks-bytes, dp" in _section_help()


def test_cli_unknown_section_names_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "protocols", "--section", "nope", "-n", "2", "-d", "10"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown benchmark section(s): nope" in err
    assert "valid sections: protocols, unmasking, ckks, ckks-bytes, dp" in err


def test_cli_quick_grid_reports_medians_ranges_and_measured_error() -> None:
    result = runner.invoke(app, ["bench", "protocols", "--quick", "--protocol", "secagg+", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["config"]["clients"] == [10] and data["config"]["repeats"] == 3
    rows = data["sections"]["protocols"]
    assert rows and {r["d"] for r in rows} == {10_000, 100_000}
    for r in rows:
        assert r["sum_unmask_vs_prg"] > 0 and "server_other_ms" in r
        assert any(k.endswith("_range") for k in r)
        # the error is measured against the float64 sum, and stays within the stated bound
        assert 0.0 <= r["max_abs_error"] <= r["stated_error_bound"]
