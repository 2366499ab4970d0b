"""The ``cli`` fixture: run ``securefgl ARGS`` in-process through the console entry point."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from securefgl.cli import main


class Result:
    """What the console entry point did: exit code, stdout, stderr."""

    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.exit_code, self.stdout, self.stderr = code, stdout, stderr
        self.output = stdout + stderr

    def one_error_line(self, code: int, *needles: str) -> str:
        """Assert exit ``code``, one non-empty stderr line holding every needle, and no traceback."""
        assert self.exit_code == code, self.output
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, self.stderr
        assert "Traceback" not in self.output
        for needle in needles:
            assert needle in lines[0], lines[0]
        return lines[0]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[[list[str]], Result]:
    """Run ``securefgl ARGS`` in-process through ``main`` (errors become one line and an exit code)."""

    def invoke(args: list[str]) -> Result:
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    return invoke
