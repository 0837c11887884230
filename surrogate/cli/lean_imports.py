"""A prediction process imports LightGBM without scikit-learn.

LightGBM's ``compat`` module imports scikit-learn at import time to offer its scikit-learn
estimators (``LGBMRegressor`` ...), and scikit-learn imports ``scipy.stats``: about 1.4 s of a
cold ``surrogate predict`` on a 2-core machine, for a process that only evaluates saved
boosters (``lightgbm.Booster``), which need neither. A CLI process runs one command, so a
command that only predicts can import LightGBM while scikit-learn is hidden: LightGBM then
defines its estimators as stubs (its documented behaviour without scikit-learn installed) and
its Booster works unchanged. Nothing else in that process needs the estimators.

Never call this in a library or a long-lived process that may train later (training builds
``LGBMRegressor``s): that is why it lives with the CLI and runs only where a command starts.
"""

from __future__ import annotations

import sys

ONE_COMMAND_PROCESS = False
"""Set by the console script (``surrogate.cli.entry``): this process runs one command and
exits. In-process callers of ``surrogate.cli.main`` (tests, notebooks) leave it False, and
their LightGBM keeps its scikit-learn estimators."""


def import_lightgbm_for_prediction() -> None:
    """In a one-command process, import LightGBM with scikit-learn hidden, unless either is
    already imported (then nothing changes). scikit-learn stays importable afterwards."""
    if not ONE_COMMAND_PROCESS or "lightgbm" in sys.modules or "sklearn" in sys.modules:
        return
    sys.modules["sklearn"] = None  # type: ignore[assignment]  # import sklearn -> ImportError
    try:
        import lightgbm  # noqa: F401
    except ImportError:
        pass  # no LightGBM: the command reports it where it needs it
    finally:
        del sys.modules["sklearn"]
