"""Train the learned surrogate: load sweep tables, tune, evaluate, fit, save, record.

1. Load the sweep tables: the shared Playbook file (``sweeps/hf_ultrascale_playbook/
   bench_final2_mfu2.csv`` under the data directory) unless ``playbook=False``, plus any
   sweep tables given (``surrogate ingest`` output: runs of another framework or GPU).
2. Tune the throughput corrector and the status classifier with optuna
   (:mod:`training.tune`; ``n_trials=0`` keeps the library defaults).
3. Evaluate the tuned settings under the protocols of :mod:`training.evaluate`, each
   held-out run under its measured network and under the profile's curve alone.
   The hyperparameters were tuned on all the data, test parts included, so the figures are
   slightly optimistic about the settings (not about the fitted models, which never see their
   test part).
4. Fit the final :class:`~surrogate.learned.model.SurrogateModel` on all the runs, rescale its
   intervals by what the protocols' held-out runs needed
   (:meth:`~surrogate.learned.model.SurrogateModel.recalibrate`), store the metrics in its
   sidecar, save it, and record everything in MLflow (:mod:`training.tracking`).

The features and targets are computed once (:func:`surrogate.learned.training_data.training_data`);
the
tuning folds, the evaluation splits and the final fit each take their part of them.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from surrogate.errors import DataError
from surrogate.io.tracking import store_failure
from surrogate.learned.boosters import DEFAULT_PARAMS
from surrogate.learned.model import SurrogateModel
from surrogate.learned.training_data import cell_groups, training_data
from training.evaluate import DEFAULT_PROTOCOLS, PROTOCOLS, ProtocolResult, evaluate_grid
from training.tune import DEFAULT_STORAGE, MAX_ESTIMATORS, TuneResult, tune

if TYPE_CHECKING:
    import pandas as pd

    from training.tracking import TrackedRun

DEFAULT_OUT_DIR = Path("mlruns/model")


def load_runs(
    sweep_paths: Sequence[str | Path] = (),
    *,
    playbook: bool = True,
    data_dir: str | Path | None = None,
) -> pd.DataFrame:
    """The Playbook runs (unless ``playbook=False``) and the given sweep tables, stacked."""
    import pandas as pd

    from surrogate.runs.sweep_files import read_sweeps

    frames = []
    if playbook:
        from surrogate.ingest.playbook_network import playbook_runs

        frames.append(playbook_runs(data_dir))
    for p in sweep_paths:
        frames.append(read_sweeps(p))
    if not frames:
        raise DataError("no training data: give --sweeps tables or keep the Playbook data")
    return pd.concat(frames, ignore_index=True)


def data_summary(runs: pd.DataFrame) -> dict[str, Any]:
    """Counts that identify what a model was trained on."""
    counts = runs["status"].value_counts()
    return {
        "runs": len(runs),
        **{f"status_{s}": int(counts.get(s, 0)) for s in ("completed", "oom", "fail", "timeout")},
        "cells": len(set(cell_groups(runs))),
        "model_sizes": sorted(
            {f"{h}/{n}" for h, n in zip(runs["hidden_size"], runs["num_layers"], strict=True)}
        ),
        "node_counts": sorted(int(n) for n in runs["num_nodes"].unique()),
        "sources": sorted(str(s) for s in runs["source"].unique()),
        "gpus": sorted(str(g) for g in runs["gpu"].unique()),
    }


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    """What :func:`train` produced."""

    model: SurrogateModel
    out_dir: Path
    params: dict[str, dict[str, Any] | None]
    tuning: dict[str, TuneResult] = field(default_factory=dict)
    evaluation: dict[str, ProtocolResult] = field(default_factory=dict)
    as_predicted: dict[str, ProtocolResult] = field(default_factory=dict)
    """The same protocols' held-out runs under the profile's curve alone (as a user predicts
    before a run): what the MFU intervals of a configuration whose network is not known are
    recalibrated on."""
    tracked: TrackedRun | None = None
    tracking_error: str | None = None
    """Why recording in MLflow failed (the evaluation is then in :data:`EVALUATION_FILE`)."""
    seconds: float = 0.0


def train(
    sweep_paths: Sequence[str | Path] = (),
    out_dir: str | Path = DEFAULT_OUT_DIR,
    n_trials: int = 30,
    seed: int = 0,
    *,
    runs: pd.DataFrame | None = None,
    playbook: bool = True,
    data_dir: str | Path | None = None,
    storage: str | None = DEFAULT_STORAGE,
    protocols: Sequence[str] = DEFAULT_PROTOCOLS,
    max_estimators: int = MAX_ESTIMATORS,
    n_folds: int = 5,
    track: bool = True,
    timeout_s: float | None = None,
    progress: bool = True,
    profile: Any = None,
    params: dict[str, dict[str, Any] | None] | None = None,
    keep: SurrogateModel | None = None,
) -> TrainResult:
    """Load, tune (``n_trials`` per study), evaluate, fit, save to ``out_dir`` and record.

    ``runs`` replaces loading (a sweep table already in memory); ``storage=None`` keeps the
    optuna studies in memory; ``track=False`` skips MLflow; ``params`` (LightGBM settings by
    target, status / mfu / mem, e.g. a saved model's) replaces tuning, so ``n_trials`` must
    then be 0. ``keep``: a fitted model whose trees, widths and settings are kept (no final
    fit): only its metrics and recalibration are refitted; its point predictions stay."""
    params = params if keep is None else {**(params or {}), **keep.lightgbm_params}
    start = time.monotonic()
    if runs is None:
        runs = load_runs(sweep_paths, playbook=playbook, data_dir=data_dir)
    runs = runs.reset_index(drop=True)
    if n_trials < 0:
        raise ValueError(f"n_trials must be >= 0, got {n_trials}")
    if params is not None and n_trials > 0:
        raise ValueError(f"given params replace tuning: n_trials must be 0, got {n_trials}")
    capped = {"n_estimators": min(int(DEFAULT_PARAMS["n_estimators"]), max_estimators)}
    params = {"status": capped, "mfu": capped, "mem": capped, **(params or {})}
    tuning: dict[str, TuneResult] = {}
    data = training_data(runs, profile=profile)  # features and targets, once for every fit
    if n_trials > 0:
        for target in ("mfu", "status"):
            result = tune(
                data,
                target,
                n_trials=n_trials,
                seed=seed,
                storage=storage,
                n_folds=n_folds,
                max_estimators=max_estimators,
                timeout_s=timeout_s,
                progress=progress,
            )
            tuning[target] = result
            params[target] = result.best_params
    from surrogate.progress import bars

    with bars(progress) as report:  # after tuning: 30-90 s on two cores
        # every protocol's held-out runs under their measured network and under the
        # profile's curve alone (as a user predicts), from the same fits
        evaluation, as_predicted, known = evaluate_networks(
            data, protocols, params=params, seed=seed, n_folds=n_folds, progress=report
        )
        report(f"fitting the final model on {len(runs):,} runs", 0, 1)
        model = (
            copy.copy(keep)
            if keep is not None
            else SurrogateModel(
                status_params=params["status"],
                mfu_params=params["mfu"],
                mem_params=params["mem"],
                n_folds=n_folds,
                seed=seed,
            ).fit(data)
        )
        recalibrated(model, evaluation, as_predicted, known)
        out = model.save(out_dir)
        report(f"fitting the final model on {len(runs):,} runs", 1, 1)
        tracked, failure = None, None
        if track:
            report("recording in MLflow (metrics, plots, model files)", 0, 1)
            try:
                tracked = _track(
                    runs,
                    model,
                    out,
                    params,
                    tuning,
                    evaluation,
                    sweep_paths=sweep_paths,
                    as_predicted=as_predicted,
                    n_trials=n_trials,
                    seed=seed,
                    max_estimators=max_estimators,
                    n_folds=n_folds,
                )
            except Exception as e:  # any failure of the store, after the work: keep the work
                failure = store_failure(e)
                save_evaluation(out / EVALUATION_FILE, evaluation, tuning)
            report("recording in MLflow (metrics, plots, model files)", 1, 1)
    return TrainResult(
        model=model,
        out_dir=out,
        params=params,
        tuning=tuning,
        evaluation=evaluation,
        as_predicted=as_predicted,
        tracked=tracked,
        tracking_error=failure,
        seconds=time.monotonic() - start,
    )


def recalibrated(
    model: SurrogateModel,
    evaluation: dict[str, ProtocolResult],
    as_predicted: dict[str, ProtocolResult],
    known: dict[str, ProtocolResult],
) -> SurrogateModel:
    """``model`` with the protocols' figures in its metrics (``as_predicted``'s under the
    protocol's name and :data:`PROFILE_NETWORK`) and its intervals rescaled by what their
    held-out runs needed: the MFU's of a configuration whose network is not known by the runs
    predicted as a user would (under the profile's curve alone), beyond what the same
    predictions with the network known (``known``) hold."""
    model.metrics_ = {
        p: {"learned": r.metrics, "analytic": r.analytic_metrics} for p, r in evaluation.items()
    }
    model.metrics_ |= {
        p + PROFILE_NETWORK: {"learned": r.metrics, "analytic": r.analytic_metrics}
        for p, r in as_predicted.items()
    }
    return model.recalibrate(
        {p: r.predictions for p, r in evaluation.items()},
        {p: r.predictions for p, r in as_predicted.items()},
        {p: r.predictions for p, r in known.items()},
    )


PROFILE_NETWORK = "_profile_network"
"""What a protocol's name takes in the model's metrics and in MLflow for its held-out runs
predicted under the profile's curve alone."""


def evaluate_networks(
    data: Any, protocols: Sequence[str], **kwargs: Any
) -> tuple[dict[str, ProtocolResult], ...]:
    """Each protocol's held-out runs predicted under their measured network, under the
    cluster profile's curve alone, and under the curve taken as measured (the interval of a
    known network; ``training.evaluate.evaluate_grid``: one fit per split serves all)."""
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        raise DataError(f"protocols must be among {', '.join(PROTOCOLS)}, got {unknown}")
    nets = ("measured", "profile", "curve")
    out: tuple[dict[str, ProtocolResult], ...] = ({}, {}, {})
    for p in protocols:
        grid = evaluate_grid(data, p, (None,), nets, **kwargs)
        for part, net in zip(out, nets, strict=True):
            part[p] = grid[None, net]
    return out


EVALUATION_FILE = "evaluation.json"
"""Beside the model files: the held-out figures and the tuning, when MLflow could not take
them."""


def save_evaluation(
    path: Path, evaluation: dict[str, ProtocolResult], tuning: dict[str, TuneResult]
) -> None:
    """The evaluation's figures (learned and analytic, per protocol) and the tuning's best
    values as JSON at ``path``, atomically (NaN as null)."""
    import json

    from surrogate.io.atomic import atomic_write
    from surrogate.io.jsonsafe import json_safe

    data = {
        "evaluation": {
            p: {
                "learned": r.metrics,
                "analytic": r.analytic_metrics,
                "refit_physics": r.refit_physics,
                "splits": r.n_splits,
            }
            for p, r in evaluation.items()
        },
        "tuning": {
            t: {
                "study_name": r.study_name,
                "best_value": r.best_value,
                "best_params": r.best_params,
            }
            for t, r in tuning.items()
        },
    }
    atomic_write(path, json.dumps(json_safe(data), indent=2, default=str))


def _track(
    runs: pd.DataFrame,
    model: SurrogateModel,
    out: Path,
    params: dict[str, dict[str, Any] | None],
    tuning: dict[str, TuneResult],
    evaluation: dict[str, ProtocolResult],
    *,
    sweep_paths: Sequence[str | Path],
    as_predicted: dict[str, ProtocolResult],
    **settings: Any,
) -> TrackedRun:
    from training import plots
    from training.tracking import data_label, log_training, rounds_in

    flat = dict(settings)
    for name, p in params.items():
        for k, v in (p or {}).items():
            flat[f"{name}.{k}"] = v
    figures = {"feature_importance": plots.feature_importance(model)}
    for protocol, r in evaluation.items():
        title = f"held out: {protocol}"
        figures[f"{protocol}/mfu_pred_vs_measured"] = plots.mfu_scatter(r.predictions, title)
        figures[f"{protocol}/p_oom_calibration"] = plots.oom_calibration(r.predictions, title)
        figures[f"{protocol}/interval_coverage"] = plots.interval_coverage(
            r.predictions, title, nominal=model.coverage
        )
    rounds = rounds_in(runs["run_id"]) if "run_id" in runs.columns else []
    return log_training(
        params=flat,
        data_summary=data_summary(runs),
        data_hash=model.data_hash_,
        tuning={
            t: {
                "study_name": r.study_name,
                "storage": r.storage,
                "best_value": r.best_value,
                "n_complete": r.n_complete,
                "n_pruned": r.n_pruned,
                "best_params": r.best_params,
                "top_trials": r.top_trials,
            }
            for t, r in tuning.items()
        },
        metrics={p: r.metrics for p, r in evaluation.items()}
        | {p + PROFILE_NETWORK: r.metrics for p, r in as_predicted.items()},
        baseline={p: r.analytic_metrics for p, r in evaluation.items()}
        | {p + PROFILE_NETWORK: r.analytic_metrics for p, r in as_predicted.items()},
        label=data_label(runs["source"], sweep_paths),
        lineage={"data.rounds": ",".join(map(str, rounds))} if rounds else None,
        model_dir=out,
        figures=figures,
    )
