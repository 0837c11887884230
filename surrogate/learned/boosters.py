"""The LightGBM boosters of the learned model: their settings, the status classifier boosted from
the physics' log-probabilities, the memory regressor with censored targets, and predicting
with a booster (or its compiled forest)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.learned.compiled_trees import CompiledForest

if TYPE_CHECKING:
    import lightgbm as lgb
    import pandas as pd


STATUS_CLASSES: tuple[str, ...] = ("completed", "oom", "fail")


DEFAULT_PARAMS: dict[str, Any] = {
    "n_estimators": 400,
    "learning_rate": 0.05,
    "num_leaves": 31,
    "min_child_samples": 10,
    "subsample": 0.8,
    "subsample_freq": 1,
    "colsample_bytree": 0.8,
    "reg_lambda": 1.0,
}
"""LightGBM settings when none are tuned (``training`` tunes them with optuna)."""


_FIXED = {"deterministic": True, "force_row_wise": True, "n_jobs": 1, "verbose": -1}


CATEGORICAL = ["framework_code"]
"""Features LightGBM treats as categories (fit argument ``categorical_feature``)."""


SMALL_BATCH = 2048
"""Below this many rows a booster predicts on one thread: starting OpenMP threads costs
more than the trees (5-8 ms against 0.1 ms for one row, measured on 2 cores)."""


def take_rows(X: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """The rows of ``X`` at positions ``rows`` (``X`` itself when they are all of them)."""
    return X if len(rows) == len(X) else X.iloc[rows]


def booster_predict(
    booster: lgb.Booster, X: pd.DataFrame, *, compiled: CompiledForest | None = None, **kwargs: Any
) -> np.ndarray:
    """``booster.predict`` on a float array (skipping LightGBM's DataFrame handling): by the
    booster's ``compiled`` forest where it can (``surrogate.learned.compiled_trees``; not for
    ``pred_contrib``), else by LightGBM on one thread for small batches and its default (0:
    OpenMP's) for large ones."""
    arr = X.to_numpy(dtype=np.float64)
    if compiled is not None and set(kwargs) <= {"raw_score"}:
        got = compiled.predict(booster, arr, raw_score=bool(kwargs.get("raw_score", False)))
        if got is not None:
            return got
    threads = 1 if len(arr) < SMALL_BATCH else 0
    return np.asarray(booster.predict(arr, num_threads=threads, **kwargs))


def status_init_score(p_oom: np.ndarray, fail_rate: float, classes: Sequence[int]) -> np.ndarray:
    """The status classifier's starting raw scores (LightGBM ``init_score``): the physics'
    log-probabilities of the ``classes`` present (indices into :data:`STATUS_CLASSES`):
    completed (1 - p_oom)(1 - f), oom p_oom (1 - f), fail f, with p_oom the analytic model's and
    f the training runs' share of failures, taken as independent of memory (the Playbook's
    runs fail otherwise at 3-11% in every bin of predicted memory over capacity, from under
    half to over five times).
    Measured against the alternative where a run that does not fit cannot fail otherwise
    (oom p_oom, fail (1 - p_oom) f'): summed held-out log loss over cv, lomo and nodes 0.463 vs
    0.472 (0.467 without a start). Two classes: the log-odds of the second."""
    po = np.clip(np.asarray(p_oom, dtype=np.float64), 1e-4, 1 - 1e-4)
    f = float(np.clip(fail_rate, 1e-4, 0.5))
    logp = [np.log((1 - po) * (1 - f)), np.log(po * (1 - f)), np.full(len(po), np.log(f))]
    cols = [logp[int(c)] for c in classes]
    if len(cols) == 2:
        return np.asarray(cols[1] - cols[0])
    return np.column_stack(cols)


def fit_status(
    X: pd.DataFrame,
    y: np.ndarray,
    sample_weight: np.ndarray,
    p_oom: np.ndarray,
    settings: dict[str, Any],
) -> tuple[lgb.Booster, list[int], float]:
    """The status classifier boosted from :func:`status_init_score`: its booster, the class
    indices it saw and the failure share it starts from (weighted by ``sample_weight``)."""
    import lightgbm as lgb

    classes = [int(c) for c in np.unique(y)]
    fail_rate = float(np.average(y == STATUS_CLASSES.index("fail"), weights=sample_weight))
    clf = lgb.LGBMClassifier(**settings)
    clf.fit(
        X,
        y,
        sample_weight=sample_weight,
        categorical_feature=CATEGORICAL,
        init_score=status_init_score(p_oom, fail_rate, classes),
    )
    return clf.booster_, classes, fail_rate


def fit_memory(
    X: pd.DataFrame,
    y_mem: np.ndarray,
    mem_ok: np.ndarray,
    floor: np.ndarray,
    sample_weight: np.ndarray,
    settings: dict[str, Any],
) -> lgb.Booster:
    """The memory regressor of log(measured / analytic peak reserved memory), with the runs
    out of memory as censored targets.

    Only runs that fit in memory measure it, so near and past the capacity the completed runs
    are the ones the analytic model over-estimated: fitted on them alone the correction learns
    that survivorship as "less memory where the estimate is above the capacity", and the
    predicted memory falls where the estimate crosses it (``benchmarks/monotonicity.py``). A
    run out of memory says only that its need was above the GPU's: its target is censored
    from below at ``floor`` (log(capacity / analytic estimate); NaN for other runs). Such a
    run is fitted at max(0, floor): the analytic answer, raised to the least that explains
    the out-of-memory. Far past the capacity that is the physics, to which the correction
    falls back off its data. (Moving these targets to max(floor, the fit's prediction) and
    refitting, in the manner of Buckley and James 1979, was measured and not kept: the same
    held-out memory error within 0.1 point, more falls along the micro-batch.)"""
    import lightgbm as lgb

    censored = np.isfinite(floor) & ~mem_ok
    rows = np.flatnonzero(mem_ok | censored)
    y = np.where(mem_ok, y_mem, np.maximum(np.nan_to_num(floor, nan=0.0), 0.0))
    reg = lgb.LGBMRegressor(**settings)
    reg.fit(
        take_rows(X, rows),
        y[rows],
        sample_weight=sample_weight[rows],
        categorical_feature=CATEGORICAL,
    )
    return reg.booster_


def status_proba(
    booster: lgb.Booster,
    X: pd.DataFrame,
    p_oom: np.ndarray,
    fail_rate: float | None,
    classes: Sequence[int],
    *,
    compiled: CompiledForest | None = None,
) -> np.ndarray:
    """Probabilities of ``classes`` (one column each) from a :func:`fit_status` booster (or its
    ``compiled`` forest): its raw scores plus the physics it started from. ``fail_rate`` None:
    a booster fitted without a start (models saved before it had one)."""
    if fail_rate is None:
        probs = booster_predict(booster, X, compiled=compiled)
        return probs if probs.ndim == 2 else np.column_stack([1 - probs, probs])
    raw = booster_predict(booster, X, compiled=compiled, raw_score=True) + status_init_score(
        p_oom, fail_rate, classes
    )
    if raw.ndim == 1:
        p1 = 1.0 / (1.0 + np.exp(-raw))
        return np.column_stack([1 - p1, p1])
    e = np.exp(raw - raw.max(axis=1, keepdims=True))
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def booster_params(given: dict[str, Any] | None, seed: int, **extra: Any) -> dict[str, Any]:
    """The LightGBM settings of a fit: :data:`DEFAULT_PARAMS` overridden by ``given`` (tuned),
    then the fixed ones (deterministic, one thread) and the seed; tuning scores these too."""
    return {**DEFAULT_PARAMS, **(given or {}), **_FIXED, "random_state": seed, **extra}
