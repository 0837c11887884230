"""Sizes a reader can hold: no module of the package over 500 lines, no function over 80 (one
of the command-line interface over 60), so that each concept reads in one sitting. A module or
function over its limit is split by concept."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "surrogate"
MODULE_LINES = 500
FUNCTION_LINES = 80
CLI_FUNCTION_LINES = 60



def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _module_lines() -> dict[str, int]:
    return {_name(p): len(p.read_text().splitlines()) for p in _modules()}


def _function_lines() -> dict[str, tuple[int, int]]:
    """path:name -> (lines, limit) of every function and method."""
    out = {}
    for p in _modules():
        limit = CLI_FUNCTION_LINES if _name(p).startswith("cli/") else FUNCTION_LINES
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
        f"functions over {FUNCTION_LINES} lines ({CLI_FUNCTION_LINES} in surrogate/cli): {over}")
