"""The import graph of securefgl: no cycles, and the import-linter contracts of pyproject.toml hold.

grimp (import-linter's graph builder) finds a package's modules by walking its folder, but
``securefgl.protocols`` and ``securefgl.attacks`` live in the top-level folders ``protocols/`` and
``attacks/`` (setuptools ``package-dir``). Both checks therefore run, in a subprocess, on a view of the
installed layout: a ``securefgl`` folder of symlinks to the entries of ``securefgl/`` plus ``protocols`` and
``attacks`` (``.ci/run`` lints the same view).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Every import counts: module level, inside functions (lazy) and under ``if TYPE_CHECKING:``.
_CYCLES = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, os.getcwd())
    import grimp

    graph = grimp.build_graph("securefgl", cache_dir=None, exclude_type_checking_imports=False)
    modules = sorted(graph.modules)
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(root):  # Tarjan's strongly connected components, iteratively
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(shortest_cycle(sorted(component)))

    def shortest_cycle(component):
        start = component[0]
        inside = set(component)
        for nxt in sorted(graph.find_modules_directly_imported_by(start)):
            if nxt in inside:
                chain = graph.find_shortest_chain(importer=nxt, imported=start)
                if chain:
                    path = [start, *chain]
                    return [
                        (a, b, [d["line_number"] for d in graph.get_import_details(importer=a, imported=b)])
                        for a, b in zip(path, path[1:])
                    ]
        return [(m, "?", []) for m in component]

    for module in modules:
        if module not in index:
            visit(module)
    print(json.dumps({"modules": len(modules), "cycles": cycles}))
    """
)


@pytest.fixture(scope="module")
def layout_view(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``securefgl/`` as installed: the package's entries plus protocols/ and attacks/."""
    root = tmp_path_factory.mktemp("layering")
    package = root / "securefgl"
    package.mkdir()
    for entry in sorted((REPO / "securefgl").iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "protocols").symlink_to(REPO / "protocols")
    (package / "attacks").symlink_to(REPO / "attacks")
    return root


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(importlib.util.find_spec("grimp") is None, reason="grimp not installed")
def test_no_import_cycles(layout_view: Path) -> None:
    out = _run([sys.executable, "-c", _CYCLES], layout_view)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["modules"] > 100, "the graph misses modules: is securefgl.protocols/attacks in the view?"
    text = "\n\n".join(
        "\n".join(f"  {a} -> {b} (line {', '.join(map(str, lines))})" for a, b, lines in cycle)
        for cycle in report["cycles"]
    )
    assert not report["cycles"], f"import cycles among securefgl modules:\n{text}"


@pytest.mark.skipif(importlib.util.find_spec("importlinter") is None, reason="import-linter not installed")
def test_import_linter_contracts(layout_view: Path) -> None:
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    out = _run(
        [sys.executable, "-c", code, str(REPO / "pyproject.toml"), "--no-cache", "--no-logo"], layout_view
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_protocols_contract_forbids_every_other_part_of_securefgl() -> None:
    """The forbidden list is explicit: a new top-level module or package must join it."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c.get("id") == "protocols-standalone"]
    parts = {
        f"securefgl.{p.stem}"
        for p in (REPO / "securefgl").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    parts |= {"securefgl.attacks"}
    assert set(contract["forbidden_modules"]) == parts - {"securefgl.errors"}
