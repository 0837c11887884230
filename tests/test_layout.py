"""Sizes a reader can hold: no module of the package, of the programs beside it (training,
microbench), of the benchmarks or of the fuzz harness over 350 statements, no function over 70
(one of a command-line interface, ``surrogate/cli/`` or a program's ``cli.py``, over 50), so that
each concept reads in one sitting. A module or function over its limit is split by concept.

Sizes count logical lines (Python's tokenizer ends one at each statement: a docstring or a call
wrapped over ten physical lines is one), not physical ones, since ``ruff format`` decides how a
statement wraps; comments and blank lines count for nothing."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("surrogate", "training", "microbench", "benchmarks", "tests/fuzz")
"""The folders whose code the limits hold for."""
MODULE_LINES = 350
FUNCTION_LINES = 70
CLI_FUNCTION_LINES = 50


def _modules() -> list[Path]:
    return sorted(p for tree in TREES for p in (ROOT / tree).rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _is_cli(name: str) -> bool:
    """A module of the command-line interface: ``surrogate/cli/`` or a program's ``cli.py``."""
    return name.startswith("surrogate/cli/") or name.endswith("/cli.py")


def _statement_ends(source: str) -> list[int]:
    """The physical line on which each logical line (statement) of ``source`` ends."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [t.end[0] for t in tokens if t.type == tokenize.NEWLINE]


def _module_lines() -> dict[str, int]:
    return {_name(p): len(_statement_ends(p.read_text())) for p in _modules()}


def _function_lines() -> dict[str, tuple[int, int]]:
    """path:name -> (lines, limit) of every function and method."""
    out = {}
    for p in _modules():
        limit = CLI_FUNCTION_LINES if _is_cli(_name(p)) else FUNCTION_LINES
        source = p.read_text()
        ends = _statement_ends(source)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = sum(node.lineno <= e <= node.end_lineno for e in ends)
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
        f"interface): {over}"
    )


def test_sizes_count_statements_not_wrapping():
    wrapped = (
        'def f(\n    a,\n    b,\n):\n    """One.\n\n    Two."""\n'
        "    return g(\n        a,\n        b,\n    )\n"
    )
    assert len(_statement_ends(wrapped)) == 3  # the def, its docstring, the return


def test_every_tree_is_searched():
    names = set(_module_lines())
    for tree in TREES:
        assert any(n.startswith(tree + "/") for n in names), f"no module found under {tree}/"
    assert _is_cli("training/cli.py") and _is_cli("surrogate/cli/predict.py")
    assert not _is_cli("surrogate/loop/active.py")
