"""The scripts in examples/ stand on securefgl's public API: no example imports another, nor anything private.

An example may import any module whose dotted path has no ``_``-prefixed component (``securefgl.engine``,
``securefgl.algorithms.adafgl``), and only public names from it. What several examples share lives in the
library (:mod:`securefgl.experiments`), with tests, not in an example that the others import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))


def _private(name: str) -> bool:
    """A ``_``-prefixed name that is not a dunder (``__future__``, ``__version__`` are fine)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def offending_imports(source: str, filename: str, examples: set[str]) -> list[str]:
    """``filename:line: <import>: <reason>`` for every import of another example or of a private module/name.

    Checks ``import a.b``, ``from a.b import c`` (module path and imported names), relative imports, and
    ``importlib.import_module("...")`` / ``__import__("...")`` calls with a literal module name.
    """
    tree = ast.parse(source, filename=filename)
    found: list[str] = []

    def check(node: ast.AST, module: str) -> None:
        parts = module.split(".")
        where = f"{filename}:{node.lineno}: {ast.unparse(node)}"
        if parts[0] in examples:
            found.append(f"{where}: imports the example {parts[0]}.py")
        private = [p for p in parts if _private(p)]
        if private:
            found.append(f"{where}: private module component {private[0]!r}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(node, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}: relative import")
                continue
            check(node, node.module or "")
            for alias in node.names:
                if alias.name in examples:
                    found.append(
                        f"{filename}:{node.lineno}: {ast.unparse(node)}: imports the example {alias.name}.py"
                    )
                elif _private(alias.name):
                    found.append(
                        f"{filename}:{node.lineno}: {ast.unparse(node)}: private name {alias.name!r}"
                    )
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            arg = node.args[0]
            literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            if name in ("import_module", "__import__") and literal:
                check(node, arg.value)
    return found


def test_there_are_examples() -> None:
    assert len(SCRIPTS) >= 5, f"no example scripts found in {EXAMPLES}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_example_uses_only_the_public_api(script: Path) -> None:
    examples = {p.stem for p in SCRIPTS}
    bad = offending_imports(script.read_text(), f"examples/{script.name}", examples)
    assert not bad, "examples must import neither each other nor private modules:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (
            "from opfgl_reference_partition import partition_file",
            "imports the example opfgl_reference_partition.py",
        ),
        ("import reproduce_adafgl", "imports the example reproduce_adafgl.py"),
        ("import reproduce_adafgl.sub as r", "imports the example reproduce_adafgl.py"),
        (
            "from securefgl.algorithms.adafgl._local import prepare_client",
            "private module component '_local'",
        ),
        ("import securefgl.algorithms.adafgl._topology", "private module component '_topology'"),
        ("from securefgl.algorithms.adafgl import _local", "private name '_local'"),
        ("from securefgl.algorithms.fedlog import _EVAL_NAMES", "private name '_EVAL_NAMES'"),
        ("from . import helpers", "relative import"),
        ("import importlib\nimportlib.import_module('securefgl._x')", "private module component '_x'"),
        ("__import__('tune_adafgl')", "imports the example tune_adafgl.py"),
    ],
)
def test_the_check_catches(source: str, reason: str) -> None:
    examples = {"opfgl_reference_partition", "reproduce_adafgl", "tune_adafgl"}
    bad = offending_imports(source, "examples/x.py", examples)
    assert len(bad) == 1 and bad[0].endswith(reason), bad
    assert bad[0].startswith("examples/x.py:")


def test_the_check_lets_public_imports_through() -> None:
    source = (
        "from __future__ import annotations\n"
        "import numpy as np\n"
        "from securefgl.engine import run_seed\n"
        "from securefgl.experiments import partition_file\n"
        "from securefgl import __version__\n"
        "import securefgl.algorithms.fedstruct as fedstruct\n"
    )
    assert offending_imports(source, "examples/x.py", {"reproduce_opfgl"}) == []
