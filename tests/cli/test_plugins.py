"""Plugin commands: the library never imports the programs (``training``, ``microbench``); their
commands arrive through the ``surrogate.commands`` entry points, only when asked for, and a
plugin that fails to load breaks nothing but its own command."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import surrogate
from surrogate.cli import main

PROGRAMS = {"training", "microbench"}
PREDICT = [
    "predict",
    "--model",
    "8b",
    "--gpu",
    "H100-SXM-80GB",
    "--nodes",
    "4",
    "--dp",
    "8",
    "--tp",
    "4",
    "--pp",
    "1",
    "--mbs",
    "2",
    "--grad-accum",
    "16",
    "--zero",
    "1",
    "--framework",
    "nanotron",
    "--analytic",
    "--json",
]
SCRIPT = (
    "import sys; from surrogate.cli import entry; sys.argv = ['surrogate', *sys.argv[1:]]\n"
    "import atexit; atexit.register(lambda: print('PROGRAMS', sorted({m.split('.')[0] "
    "for m in sys.modules} & {'training', 'microbench'}), file=sys.stderr))\nentry()"
)


def _app_module() -> ModuleType:
    # not `import surrogate.cli.app`: the package's `app` attribute is the typer app itself
    return importlib.import_module("surrogate.cli.app")


def _imported_programs(path: Path) -> list[str]:
    """``file:line name`` of each absolute import of a program, or import_module of one."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in ("import_module", "__import__")
        ):
            names = [node.args[0].value]
        found += [f"{path}:{node.lineno} {n}" for n in names if n.split(".")[0] in PROGRAMS]
    return found


def test_the_library_imports_no_program():
    root = Path(surrogate.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) > 20
    assert [hit for f in files for hit in _imported_programs(f)] == []


def test_the_scan_finds_program_imports_and_not_library_modules(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import training.train\nfrom microbench.suite import plan\n"
        "from surrogate import microbench_table\n"
        "from surrogate.ingest import microbench_jsonl\nimport microbenchmarks\n"
        "from .training import x\nimportlib.import_module('training.cli')\n"
    )
    assert [h.split(" ")[1] for h in _imported_programs(sample)] == [
        "training.train",
        "microbench.suite",
        "training.cli",
    ]


def test_the_programs_are_declared_as_plugins():
    declared = {ep.name: ep.value for ep in _app_module().plugin_entry_points()}
    expected = {"train": "training.cli:register", "microbench": "microbench.cli:register"}
    assert declared == expected, "reinstall the package after editing its entry points"


def test_help_lists_the_plugin_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("predict", "train", "evaluate", "microbench", "calibrate", "data"):
        assert f" {command} " in out, command


def test_a_cold_predict_imports_no_program():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *PREDICT], capture_output=True, text=True, check=True
    )
    assert "PROGRAMS []" in done.stderr, done.stderr
    assert 0 < json.loads(done.stdout)["mfu"] < 1


@pytest.fixture
def unloaded(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """surrogate.cli.app as if no plugin were loaded yet; its commands restored afterwards."""
    module = _app_module()
    monkeypatch.setattr(module, "_plugins_loaded", False)
    monkeypatch.setattr(module.app, "registered_commands", list(module.app.registered_commands))
    monkeypatch.setattr(module.app, "registered_groups", list(module.app.registered_groups))
    return module


def test_a_core_command_loads_no_plugin(unloaded, monkeypatch, capsys):
    def fail() -> list[object]:
        raise AssertionError("plugins looked up for a core command")

    monkeypatch.setattr(unloaded, "plugin_entry_points", fail)
    assert main(PREDICT) == 0
    assert json.loads(capsys.readouterr().out)["mfu"] > 0


class _BrokenPlugin:
    """An entry point whose register adds a command, then fails to import what it needs."""

    name = "broken"
    value = "broken.cli:register"

    def load(self):
        def register(app):
            app.command("half")(lambda: None)
            raise ImportError("cannot import name 'solver' from 'broken.core'")

        return register


class _MissingExtraPlugin(_BrokenPlugin):
    name = "gpu-only"
    value = "gpu_only.cli:register"

    def load(self):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")


def test_a_broken_plugin_breaks_only_its_own_command(unloaded, monkeypatch, capsys):
    monkeypatch.setattr(
        unloaded, "plugin_entry_points", lambda: [_BrokenPlugin(), _MissingExtraPlugin()]
    )
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert " broken " in out and "(unavailable: ImportError: cannot import name" in out
    assert "pip install 'surrogate[microbench]'" in out  # the extra is text, not rich markup
    assert main(PREDICT) == 0  # the library's commands work
    assert json.loads(capsys.readouterr().out)["mfu"] > 0
    for argv in (["broken"], ["broken", "--whatever", "3"], ["broken", "--help"]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert captured.err == (
            "error: 'surrogate broken' is unavailable: its plugin broken.cli:register failed to "
            "load (ImportError: cannot import name 'solver' from 'broken.core')\n"
        ), argv
        assert captured.out == ""
    assert main(["gpu-only"]) == 2
    assert capsys.readouterr().err.endswith(
        "(running microbenchmarks needs torch, which is not installed: "
        "pip install 'surrogate[microbench]')\n"
    )
    assert main(["half"]) == 2  # what the broken plugin registered before failing is gone
    assert capsys.readouterr().err.startswith("error: No such command 'half'.")


def test_debug_shows_why_a_plugin_failed(unloaded, monkeypatch):
    monkeypatch.setattr(unloaded, "plugin_entry_points", lambda: [_BrokenPlugin()])
    with pytest.raises(unloaded.PluginError, match="'surrogate broken' is unavailable") as e:
        main(["broken", "--debug"])
    assert isinstance(e.value.__cause__, ImportError)
