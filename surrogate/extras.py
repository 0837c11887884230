"""Optional dependencies: what each brings, and the error that names the extra to install.

A predictor needs none of them (``surrogate predict`` imports neither torch, mlflow nor
optuna), so they are extras of the distribution (pyproject.toml), imported where they are used.
A command that needs a missing one stops with one line naming the extra: :func:`require` raises
:class:`MissingExtraError`, a :class:`~surrogate.errors.SurrogateError`, which the CLI prints
and turns into exit code 2; :func:`missing_extra_message` words the same for an import that
failed elsewhere.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from surrogate.errors import SurrogateError

OPTIONAL: dict[str, tuple[str, str]] = {
    "mlflow": ("tracking", "recording runs in MLflow"),
    "optuna": ("search", "searching with optuna"),
    "torch": ("microbench", "running microbenchmarks"),
    "sqlalchemy": ("search", "an optuna storage"),  # optuna's dependency, not imported alone
}
"""Optional top-level module -> (the extra that installs it, what it is needed for)."""


class MissingExtraError(SurrogateError, ImportError):
    """An optional dependency is not installed; the message says which extra brings it."""


def _message(module: str, extra: str, purpose: str) -> str:
    return f"{purpose} needs {module}, which is not installed: pip install 'surrogate[{extra}]'"


def require(module: str, *, extra: str | None = None, purpose: str | None = None) -> ModuleType:
    """Import ``module`` (one of :data:`OPTIONAL`, or a submodule of one), or raise
    MissingExtraError naming ``extra`` (default: the module's own extra)."""
    top = module.split(".")[0]
    default_extra, default_purpose = OPTIONAL[top]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and e.name.split(".")[0] != top:
            raise  # the module is there but something it imports is broken: show that
        raise MissingExtraError(
            _message(top, extra or default_extra, purpose or default_purpose)
        ) from None


def missing_extra_message(error: ImportError) -> str | None:
    """The one-line message for ``error`` if it is an optional dependency's absence, else
    None (for the CLI, around code that imports one directly)."""
    name = getattr(error, "name", None)
    if not isinstance(error, ModuleNotFoundError) or name is None:
        return None
    top = name.split(".")[0]
    if top not in OPTIONAL:
        return None
    extra, purpose = OPTIONAL[top]
    return _message(top, extra, purpose)
