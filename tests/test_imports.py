"""No import cycle among the package's modules (imports for type checking aside: they never
run). The package's own modules are imported at the top of a module. Inside a function only in the
command-line interface (``surrogate/cli/``: each command imports what it runs, so that a
one-layout ``surrogate predict`` starts without pandas, optuna or MLflow), or with the reason
on the line above, ``# here, not at the top: ...`` (an import cycle, or a dependency a
prediction never needs). Third-party imports inside functions are the optional and heavy
dependencies, which this test does not judge. ``docs/package.md`` says why."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REASON = "# here, not at the top:"


def _has_reason(lines: list[str], index: int) -> bool:
    """Whether the comment above the block of imports that holds line ``index`` (0-based)
    starts with :data:`REASON`."""
    i = index - 1
    while i >= 0 and lines[i].strip().startswith(("from ", "import ")):
        i -= 1  # the block's earlier imports
    while i >= 0 and lines[i].strip().startswith("#"):
        if lines[i].strip().startswith(REASON):
            return True
        i -= 1  # the comment's earlier lines
    return False


def _unexplained(path: Path, root: Path = ROOT) -> list[str]:
    """``path:line module`` of each of the package's own imports inside a function of
    ``path`` without :data:`REASON` in the comment above its block of imports."""
    lines = path.read_text().splitlines()
    out = []
    for fn in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("surrogate")
                and not _has_reason(lines, node.lineno - 1)
            ):
                out.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.module}")
    return out


def _cycles(package: str, *, type_checking: bool = False) -> list[str]:
    """``module -> ... -> module`` for each module of ``package`` that a chain of runtime
    imports (with ``type_checking``, of imports for type checking too) leads back to."""
    import grimp  # import-linter's graph of imports (the test extra)

    graph = grimp.build_graph(
        package, exclude_type_checking_imports=not type_checking, cache_dir=None
    )  # a cache can hold imports since removed
    return sorted(
        {
            f"{module} -> {' -> '.join(chain)}"
            for module in graph.modules
            for imported in graph.find_modules_directly_imported_by(module)
            if (chain := graph.find_shortest_chain(importer=imported, imported=module)) is not None
        }
    )


def test_no_import_cycle():
    cycles = _cycles("surrogate")
    assert not cycles, f"import cycles (move what both need to a module below them): {cycles}"


def test_no_import_cycle_even_for_type_checking():
    cycles = _cycles("surrogate", type_checking=True)
    assert not cycles, f"import cycles through imports for type checking: {cycles}"


def test_the_layer_contracts_hold_without_exemptions():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    exempt = {
        c["name"]: c["ignore_imports"] for c in config["contracts"] if c.get("ignore_imports")
    }
    assert not exempt, f"an import against the layers: move what it needs below it: {exempt}"


def test_a_cycle_is_found(tmp_path, monkeypatch):
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cyclic import b\n")
    (package / "b.py").write_text("def f():\n    from cyclic import a\n    return a\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclic import d\n"
    )
    (package / "d.py").write_text("from cyclic import c\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles("cyclic") == [
        "cyclic.a -> cyclic.b -> cyclic.a",
        "cyclic.b -> cyclic.a -> cyclic.b",
    ]
    assert "cyclic.c -> cyclic.d -> cyclic.c" in _cycles("cyclic", type_checking=True)


def test_own_imports_inside_functions_say_why():
    found = [
        entry
        for path in sorted((ROOT / "surrogate").rglob("*.py"))
        if not path.relative_to(ROOT).as_posix().startswith("surrogate/cli/")
        for entry in _unexplained(path)
    ]
    assert not found, (
        f"imports of the package inside functions: move them to the top of the module, or "
        f"say why on the line above ({REASON} ...): {found}"
    )


def test_the_check_sees_an_unexplained_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from surrogate.errors import DataError\n    return DataError\n"
        "\n\ndef g():\n    # here, not at the top: a cycle\n"
        "    from surrogate.errors import ConfigError\n    return ConfigError\n"
    )
    assert _unexplained(module, root=tmp_path) == ["m.py:2 surrogate.errors"]
