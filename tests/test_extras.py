"""Optional dependencies: the predictor runs without torch, MLflow and optuna, and a command
that needs a missing one says which extra installs it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from surrogate.errors import SurrogateError
from surrogate.extras import OPTIONAL, MissingExtraError, missing_extra_message, require


def test_require_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)  # an import of it now fails
    with pytest.raises(
        MissingExtraError,
        match=r"^searching with optuna needs optuna, which "
        r"is not installed: pip install "
        r"'surrogate\[search\]'$",
    ):
        require("optuna")
    with pytest.raises(MissingExtraError, match=r"tuning needs optuna, .*'surrogate\[train\]'"):
        require("optuna", extra="train", purpose="tuning")
    assert issubclass(MissingExtraError, SurrogateError)  # the CLI: one line, exit 2


def test_require_returns_the_module() -> None:
    assert require("optuna").__name__ == "optuna"


def test_tracking_without_mlflow_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from surrogate.io import tracking

    for name in ("mlflow", "mlflow.tracking"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingExtraError, match=r"pip install 'surrogate\[tracking\]'"):
        tracking.client()
    with pytest.raises(MissingExtraError, match=r"pip install 'surrogate\[tracking\]'"):
        tracking.connect()


def test_missing_extra_message_only_for_optional_modules() -> None:
    assert missing_extra_message(ModuleNotFoundError("no torch", name="torch.cuda")) == (
        "running microbenchmarks needs torch, which is not installed: "
        "pip install 'surrogate[microbench]'"
    )
    assert missing_extra_message(ModuleNotFoundError("x", name="numpy")) is None
    assert missing_extra_message(ImportError("x")) is None
    assert set(OPTIONAL) == {"torch", "mlflow", "optuna", "sqlalchemy"}


BLOCKED = ("torch", "mlflow", "optuna", "sqlalchemy", "lleaves")
"""The optional modules a process of :func:`_without_extras` cannot import."""


def _without_extras(*args: str) -> subprocess.CompletedProcess[str]:
    """``surrogate ARGS`` in a process where the optional modules cannot be imported; its
    stdout ends with ``RC <exit code> ASKED <the blocked modules asked for>``."""
    code = textwrap.dedent(f"""
        import importlib.abc, sys
        asked = []
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {BLOCKED!r}:
                    asked.append(name)
                    raise ModuleNotFoundError(f"blocked {{name}}", name=name)
                return None
        sys.meta_path.insert(0, Block())
        from surrogate.cli import main
        rc = main({list(args)!r})
        print("RC", rc, "ASKED", sorted(set(asked)))
    """)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


def test_predict_runs_without_torch_mlflow_and_optuna() -> None:
    """``surrogate predict`` with the optional modules made unimportable: it answers, and none
    of them was even asked for."""
    out = _without_extras(
        "predict",
        "--model",
        "8b",
        "--nodes",
        "4",
        "--dp",
        "8",
        "--tp",
        "4",
        "--mbs",
        "2",
        "--grad-accum",
        "16",
        "--zero",
        "1",
        "--framework",
        "nanotron",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "RC 0 ASKED []", out.stdout[-2000:]
    assert '"mfu"' in out.stdout


SEARCH = [
    "search",
    "--model",
    "1.34b",
    "--nodes",
    "1",
    "--global-batch-seqs",
    "16",
    "--max-cp",
    "1",
    "--max-vpp",
    "1",
    "--max-mbs",
    "2",
    "--json",
]


def test_search_without_optuna_enumerates_or_names_the_extra() -> None:
    """Without optuna (nor SQLAlchemy, which comes with it) ``search`` scores an enumerable
    space whole, and ``search --storage`` (optuna's study) says in one line which extra brings
    it, before any scoring."""
    out = _without_extras(*SEARCH)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "RC 0 ASKED []", out.stdout[-2000:]
    assert '"top"' in out.stdout
    out = _without_extras(*SEARCH, "--storage", "sqlite:///study.db")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "RC 2 ASKED ['optuna']", out.stdout[-2000:]
    assert out.stderr.strip().splitlines() == [
        "error: search --storage (a study of optuna's trials; without --storage a space that "
        "can be enumerated is scored whole, without optuna) needs optuna, which is not "
        "installed: pip install 'surrogate[search]'"
    ]
