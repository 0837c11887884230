"""Tuning LightGBM hyperparameters with optuna, scored on unseen (model, nodes) cells.

Two studies, one per model that matters most: the throughput corrector (the regressor of
log(measured / analytic tokens/s per GPU) on completed runs) and the status classifier. Each
trial is scored by grouped K-fold cross-validation over the cells of :func:`cell_groups`, so the
objective measures how well the model carries over to a model size and node count it has not
seen, not how well it interpolates inside a cell. The regressor's score is the mean absolute
error of the log factor (close to the MFU MAPE for small errors); the classifier's the
multiclass log loss.

Pruning: each fold's running mean is reported as an intermediate value and a
:class:`optuna.pruners.MedianPruner` stops trials that are worse than the median at the same
fold. Sampling: :class:`optuna.samplers.TPESampler` seeded, so a fixed seed gives the same
trials. Studies live in an optuna storage (default ``sqlite:///mlruns/optuna.db``), named
after the target, the data hash and the seed: running the same command again resumes the
study and only runs the trials still missing (stop it with Ctrl-C at any point). A resumed
study restarts the sampler's random stream, so its later trials can differ from those of an
uninterrupted run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from surrogate.errors import DataError
from surrogate.extras import require
from surrogate.io.stores import ensure_sqlite_dir
from surrogate.learned.boosters import (
    CATEGORICAL,
    DEFAULT_PARAMS,
    booster_params,
    fit_status,
    status_proba,
)
from surrogate.learned.training_data import TrainingData, source_weights

if TYPE_CHECKING:
    import optuna

Target = Literal["mfu", "status"]
TARGETS: tuple[Target, ...] = ("mfu", "status")
DEFAULT_STORAGE = "sqlite:///mlruns/optuna.db"
MAX_ESTIMATORS = 100
"""Upper bound of n_estimators (trees per booster, per class for the status model) in the
search. A bound on prediction cost: the bundled model trained under 600 held 2,779 trees and
its boosters scored 11,600-14,300 configurations/s; under 100 the first retrain held 529 trees
(82,000-84,000/s) with held-out accuracy within a point either way, the bundled one 595
(60,000-68,000/s) (docs/speed.md)."""


def suggest_params(trial: optuna.Trial, *, max_estimators: int = MAX_ESTIMATORS) -> dict[str, Any]:
    """The search space (LightGBM's scikit-learn names)."""
    return {
        "n_estimators": trial.suggest_int(
            "n_estimators", min(50, max_estimators), max_estimators, log=True
        ),
        "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
        "num_leaves": trial.suggest_int("num_leaves", 7, 127, log=True),
        "min_child_samples": trial.suggest_int("min_child_samples", 3, 60, log=True),
        "subsample": trial.suggest_float("subsample", 0.5, 1.0),
        "subsample_freq": 1,
        "colsample_bytree": trial.suggest_float("colsample_bytree", 0.4, 1.0),
        "reg_lambda": trial.suggest_float("reg_lambda", 1e-3, 30.0, log=True),
    }


def _fold_score(
    target: Target,
    params: dict[str, Any],
    data: TrainingData,
    train: np.ndarray,
    test: np.ndarray,
    seed: int,
) -> float:
    """The score of one fold's model, fitted as :meth:`SurrogateModel.fit` fits it: the same
    settings, the same categorical features, the training part's :func:`source_weights`."""
    import lightgbm as lgb
    from sklearn.metrics import log_loss

    settings = booster_params(params, seed)
    weight = source_weights(data.runs.iloc[train])
    if target == "mfu":
        reg = lgb.LGBMRegressor(**settings)
        reg.fit(
            data.X.iloc[train],
            data.y_mfu[train],
            sample_weight=weight,
            categorical_feature=CATEGORICAL,
        )
        pred = np.asarray(reg.predict(data.X.iloc[test]))
        return float(np.mean(np.abs(pred - data.y_mfu[test])))
    p_oom = data.analytic["p_oom"]
    booster, classes, fail_rate = fit_status(
        data.X.iloc[train], data.y_status[train], weight, p_oom[train], settings
    )
    proba = status_proba(booster, data.X.iloc[test], p_oom[test], fail_rate, classes)
    full = np.full((len(test), 3), 1e-6)
    full[:, classes] = proba
    full /= full.sum(axis=1, keepdims=True)
    return float(log_loss(data.y_status[test], full, labels=[0, 1, 2]))


def cv_score(
    target: Target,
    params: dict[str, Any],
    data: TrainingData,
    *,
    n_folds: int = 5,
    seed: int = 0,
    trial: optuna.Trial | None = None,
) -> float:
    """Mean grouped-K-fold score of ``params`` (lower is better); reports each fold's running
    mean to ``trial`` and raises :class:`optuna.TrialPruned` when the pruner says so."""
    from sklearn.model_selection import GroupKFold

    rows = np.flatnonzero(data.done) if target == "mfu" else np.arange(len(data.X))
    groups = data.groups[rows]
    n_splits = min(n_folds, len(np.unique(groups)))
    if n_splits < 2:
        raise DataError("tuning needs runs from at least two (model, nodes) cells")
    scores: list[float] = []
    for step, (train, test) in enumerate(GroupKFold(n_splits=n_splits).split(rows, groups=groups)):
        scores.append(_fold_score(target, params, data, rows[train], rows[test], seed))
        if trial is not None:
            import optuna

            trial.report(float(np.mean(scores)), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
    return float(np.mean(scores))


@dataclass(frozen=True, kw_only=True)
class TuneResult:
    """What a study found."""

    target: Target
    study_name: str
    storage: str
    best_params: dict[str, Any]
    best_value: float
    n_complete: int
    n_pruned: int
    top_trials: list[dict[str, Any]] = field(default_factory=list)
    """The best completed trials: number, value, params."""


def study_name_for(target: Target, data: TrainingData, seed: int) -> str:
    """Same target, data, physics and seed -> same study (so a rerun resumes it); a change of
    the analytic model changes the targets, and so the study."""
    return f"surrogate-{target}-{data.data_hash[:12]}-{data.targets_hash[:8]}-seed{seed}"


def tune(
    data: TrainingData,
    target: Target,
    *,
    n_trials: int,
    seed: int = 0,
    storage: str | None = DEFAULT_STORAGE,
    study_name: str | None = None,
    n_folds: int = 5,
    max_estimators: int = MAX_ESTIMATORS,
    timeout_s: float | None = None,
    progress: bool = True,
) -> TuneResult:
    """Run (or resume) the study of ``target`` until it holds ``n_trials`` finished trials.

    ``storage=None`` keeps the study in memory. Ctrl-C stops it; the finished trials stay in
    the storage and the same call resumes.
    """
    require("optuna", extra="train", purpose="tuning")  # absent: names the extra
    import optuna
    from optuna.trial import TrialState

    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    if n_trials < 1:
        raise ValueError(f"n_trials must be at least 1, got {n_trials}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if storage is not None:
        ensure_sqlite_dir(storage)
    name = study_name or study_name_for(target, data, seed)
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        load_if_exists=True,
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=1),
    )
    finished = (TrialState.COMPLETE, TrialState.PRUNED)

    def n_finished() -> int:
        return len(study.get_trials(deepcopy=False, states=finished))

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        # Start from the library defaults so tuning can only improve on them.
        study.enqueue_trial(
            {k: v for k, v in DEFAULT_PARAMS.items() if k != "subsample_freq"}
            | {"n_estimators": min(int(DEFAULT_PARAMS["n_estimators"]), max_estimators)},
            skip_if_exists=True,
        )

    def objective(trial: optuna.Trial) -> float:
        params = suggest_params(trial, max_estimators=max_estimators)
        return cv_score(target, params, data, n_folds=n_folds, seed=seed, trial=trial)

    remaining = n_trials - n_finished()
    if remaining > 0:
        _optimize(study, objective, remaining, n_trials, timeout_s, progress, target)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        raise DataError(f"the {target} study {name!r} has no completed trial")
    best = min(complete, key=lambda t: float(t.value))  # type: ignore[arg-type]
    top = sorted(complete, key=lambda t: float(t.value))[:5]  # type: ignore[arg-type]
    return TuneResult(
        target=target,
        study_name=name,
        storage=storage or "memory",
        best_params={**best.params, "subsample_freq": 1},
        best_value=float(best.value),  # type: ignore[arg-type]
        n_complete=len(complete),
        n_pruned=len(study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))),
        top_trials=[{"number": t.number, "value": t.value, "params": t.params} for t in top],
    )


def _optimize(
    study: optuna.Study,
    objective: Any,
    remaining: int,
    total: int,
    timeout_s: float | None,
    progress: bool,
    target: str,
) -> None:
    """``study.optimize`` with a rich progress line: trial, best so far, time left."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(
        *columns, disable=not progress, transient=False, console=Console(stderr=True)
    ) as bar:  # stdout keeps the answer
        task = bar.add_task(f"tuning {target}", total=total, completed=total - remaining)

        def callback(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            try:
                best = f"{study.best_value:.4f}"
            except ValueError:  # no completed trial yet
                best = "-"
            bar.update(
                task, advance=1, description=f"tuning {target}: trial {trial.number} best {best}"
            )

        start = time.monotonic()
        try:
            study.optimize(objective, n_trials=remaining, timeout=timeout_s, callbacks=[callback])
        except KeyboardInterrupt:
            bar.console.print(
                f"stopped after {time.monotonic() - start:.0f} s; the finished trials are in "
                f"the study {study.study_name!r}: run the same command to resume"
            )
            raise
