"""Sizes a reader can hold: no module of the package, of the programs beside it (training,
microbench), of the benchmarks or of the fuzz harness over 500 lines, no function over 80 (one
of a command-line interface, ``surrogate/cli/`` or a program's ``cli.py``, over 60), so that
each concept reads in one sitting. A module or function over its limit is split by concept."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("surrogate", "training", "microbench", "benchmarks", "tests/fuzz")
"""The folders whose code the limits hold for."""
MODULE_LINES = 500
FUNCTION_LINES = 80
CLI_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(p for tree in TREES for p in (ROOT / tree).rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _is_cli(name: str) -> bool:
    """A module of the command-line interface: ``surrogate/cli/`` or a program's ``cli.py``."""
    return name.startswith("surrogate/cli/") or name.endswith("/cli.py")


def _module_lines() -> dict[str, int]:
    return {_name(p): len(p.read_text().splitlines()) for p in _modules()}


def _function_lines() -> dict[str, tuple[int, int]]:
    """path:name -> (lines, limit) of every function and method."""
    out = {}
    for p in _modules():
        limit = CLI_FUNCTION_LINES if _is_cli(_name(p)) else FUNCTION_LINES
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                key = f"{_name(p)}:{node.name}"
                out[key] = max(out.get(key, (0, limit)), (lines, limit))
    return out


def test_no_module_over_its_limit():
    over = {m: n for m, n in _module_lines().items() if n > MODULE_LINES}
    assert not over, f"modules over {MODULE_LINES} lines (split them by concept): {over}"


def test_no_function_over_its_limit():
    over = {f: n for f, (n, limit) in _function_lines().items() if n > limit}
    assert not over, (
        f"functions over {FUNCTION_LINES} lines ({CLI_FUNCTION_LINES} in a command-line "
        f"interface): {over}")


def test_every_tree_is_searched():
    names = set(_module_lines())
    for tree in TREES:
        assert any(n.startswith(tree + "/") for n in names), f"no module found under {tree}/"
    assert _is_cli("training/cli.py") and _is_cli("surrogate/cli/predict.py")
    assert not _is_cli("surrogate/loop/active.py")
