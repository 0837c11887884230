"""Accuracy of the learned surrogate under protocols that hide part of the data.

Protocols (each refits :class:`~surrogate.learned.model.SurrogateModel` on the training part and
predicts the rest; the metrics pool the held-out predictions of all splits). By default each
split also refits the analytic model's free parameters on its training part
(:func:`physics_of`), and computes its features and targets under them; with
``refit_physics=False`` the features and targets are prepared once under the shipped parameters
(:func:`surrogate.learned.training_data.training_data`), which saw every run, and each fit takes its
part of them:

- ``cv``: 5-fold cross-validation over runs, plain (shuffled ``KFold``, not grouped): a test run
  usually has neighbours of the same model and node count in the training part. This is the
  protocol the issue's plain-LightGBM baseline figures refer to.
- ``cv_cells``: 5-fold cross-validation grouped by (model, nodes) cell, so whole cells are
  unseen (harder; not run by default).
- ``lomo``: leave one model size out: train on the other sizes, test on it, for each size.
- ``nodes``: train on runs of at most 16 nodes, test on 32 and 64 nodes.

Metrics (:func:`accuracy_metrics`): on completed runs, MFU MAPE over runs with MFU >= 10%,
median APE over all, Spearman's rank correlation and MAE in MFU points; top-1 regret per
(model, nodes) cell: (best measured MFU - measured MFU of the run predicted best) / best
measured MFU, among the completed runs of the cell; OOM recall and precision of
``pred_status == "oom"`` against measured oom among completed + oom runs (failed runs left
out); peak reserved memory MAPE on completed runs; coverage of the 80% MFU interval and of
the 80% peak memory interval (against the rank each run's memory was logged on). The same
metrics of the analytic model alone (``analytic_predictions``) give the baseline.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.inputs import FRAMEWORK_VERSIONS
from surrogate.analytic.params import ParameterSets
from surrogate.errors import DataError
from surrogate.learned.model import SurrogateModel
from surrogate.learned.training_data import TrainingData, cell_groups, training_data
from surrogate.prediction.scoring import score_runs
from surrogate.progress import ProgressFn, report
from training.coverage import interval_hits, measured_runs, recalibrated_hits

if TYPE_CHECKING:
    import pandas as pd

PROTOCOLS: dict[str, str] = {
    "cv": "5-fold CV over runs (plain, shuffled)",
    "cv_cells": "5-fold CV grouped by (model, nodes) cell",
    "lomo": "leave one model size out",
    "nodes": "train <= 16 nodes, test 32 and 64",
}
DEFAULT_PROTOCOLS: tuple[str, ...] = ("cv", "lomo", "nodes")
PRED_KEYS: tuple[str, ...] = (
    "p_oom",
    "pred_status",
    "pred_mfu",
    "pred_mfu_lo",
    "pred_mfu_hi",
    "pred_peak_mem_reserved_gib",
    "pred_peak_mem_reserved_lo_gib",
    "pred_peak_mem_reserved_hi_gib",
    "pred_logged_mem_gib",
    "domain_weight",
)
NODES_TRAIN_MAX = 16


def model_key(runs: pd.DataFrame) -> np.ndarray:
    """The model size of each run (its shape), for leave-one-model-out."""
    return (runs["hidden_size"].astype(str) + "/" + runs["num_layers"].astype(str)).to_numpy()


def splits(
    runs: pd.DataFrame, protocol: str, *, seed: int = 0, n_folds: int = 5
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(train, test) positional indices of ``runs`` for ``protocol``."""
    from sklearn.model_selection import GroupKFold, KFold

    idx = np.arange(len(runs))
    if protocol == "cv":
        yield from KFold(n_splits=n_folds, shuffle=True, random_state=seed).split(idx)
    elif protocol == "cv_cells":
        groups = cell_groups(runs)
        n = min(n_folds, len(np.unique(groups)))
        yield from GroupKFold(n_splits=n).split(idx, groups=groups)
    elif protocol == "lomo":
        key = model_key(runs)
        for size in np.unique(key):
            yield idx[key != size], idx[key == size]
    elif protocol == "nodes":
        nodes = runs["num_nodes"].to_numpy()
        test = np.isin(nodes, (32, 64))
        yield idx[nodes <= NODES_TRAIN_MAX], idx[test]
    else:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")


def analytic_predictions(
    runs: pd.DataFrame, *, profile: Any = None, sets: ParameterSets | None = None
) -> pd.DataFrame:
    """The analytic model's answers in the learned model's columns (baseline), under
    parameter sets ``sets`` (None: the shipped ones)."""
    return score_runs(runs, profile=profile, sets=sets)[list(PRED_KEYS)]


def _regret(done: pd.DataFrame) -> np.ndarray:
    regrets = []
    for _, cell in done.groupby(cell_groups(done)):
        if len(cell) < 2:
            continue
        best = float(cell["mfu"].max())
        chosen = float(cell["mfu"].to_numpy()[int(np.argmax(cell["pred_mfu"].to_numpy()))])
        regrets.append((best - chosen) / best)
    return np.asarray(regrets, dtype=float)


def accuracy_metrics(res: pd.DataFrame) -> dict[str, float]:
    """Metrics of a table of runs with prediction columns (module docstring)."""
    from scipy.stats import spearmanr

    done, mem = measured_runs(res)
    ape = ((done["pred_mfu"] - done["mfu"]).abs() / done["mfu"]).to_numpy()
    big = done["mfu"].to_numpy() >= 0.10
    judged = res[res["status"].isin(["completed", "oom"])]
    true_oom = (judged["status"] == "oom").to_numpy()
    pred_oom = (judged["pred_status"] == "oom").to_numpy()
    hits = float((true_oom & pred_oom).sum())
    # against the prediction for the rank each run's memory was logged on
    # (surrogate.prediction.scoring)
    pred_mem = mem[
        "pred_logged_mem_gib" if "pred_logged_mem_gib" in mem else "pred_peak_mem_reserved_gib"
    ]
    mem_ape = (
        (pred_mem - mem["peak_mem_reserved_gib"]).abs() / mem["peak_mem_reserved_gib"]
    ).to_numpy()
    inside, mem_inside = interval_hits(res)
    with_interval = bool(len(done)) and bool(done["pred_mfu_lo"].notna().any())
    # the coverage of the intervals as a trained model ships them (recalibrated, held out)
    recal = recalibrated_hits(res) if with_interval else (inside[:0], mem_inside[:0])
    regret = _regret(done)
    nan = float("nan")
    return {
        "runs": float(len(res)),
        "completed": float(len(done)),
        "mfu_mape_ge10": float(ape[big].mean()) if big.any() else nan,
        "mfu_median_ape": float(np.median(ape)) if len(ape) else nan,
        "mfu_spearman": float(spearmanr(done["pred_mfu"], done["mfu"]).statistic)
        if len(done) > 2
        else nan,
        "mfu_mae_points": float(100 * np.mean(np.abs(done["pred_mfu"] - done["mfu"])))
        if len(done)
        else nan,
        "regret_median": float(np.median(regret)) if len(regret) else nan,
        "regret_max": float(regret.max()) if len(regret) else nan,
        "regret_cells": float(len(regret)),
        "oom_recall": hits / float(true_oom.sum()) if true_oom.any() else nan,
        "oom_precision": hits / float(pred_oom.sum()) if pred_oom.any() else nan,
        "oom_brier": float(np.mean((judged["p_oom"].to_numpy(float) - true_oom) ** 2))
        if len(judged)
        else nan,
        "memory_mape": float(mem_ape.mean()) if len(mem_ape) else nan,
        "interval_coverage": float(inside.mean()) if with_interval else nan,
        "memory_interval_coverage": float(mem_inside.mean()) if len(mem_inside) else nan,
        "interval_coverage_recalibrated": float(recal[0].mean()) if len(recal[0]) else nan,
        "memory_interval_coverage_recalibrated": float(recal[1].mean()) if len(recal[1]) else nan,
    }


@dataclass(frozen=True, kw_only=True)
class ProtocolResult:
    """A protocol's pooled held-out predictions and their metrics (learned and analytic)."""

    protocol: str
    predictions: pd.DataFrame
    """The test runs (each once) with the learned model's prediction columns."""
    metrics: dict[str, float]
    analytic_metrics: dict[str, float]
    n_splits: int
    refit_physics: bool = True
    """Whether each split refit the analytic parameters on its training part
    (:func:`physics_of`)."""
    analytic_predictions: pd.DataFrame | None = None
    """The same test runs with the analytic model's prediction columns instead."""
    network: str = "measured"
    """The network the test runs were predicted under
    (``surrogate.runs.context.NETWORKS``)."""


def evaluate_protocol(
    runs: pd.DataFrame | TrainingData,
    protocol: str,
    *,
    params: dict[str, dict[str, Any] | None] | None = None,
    seed: int = 0,
    n_folds: int = 5,
    profile: Any = None,
    shrink_doublings: float | None = None,
    progress: ProgressFn | None = None,
    settings: dict[str, Any] | None = None,
    refit_physics: bool = True,
    network: str = "measured",
) -> ProtocolResult:
    """Refit on each training part with ``params`` (keys status, mfu, mem) and score the
    pooled test parts (``shrink_doublings``: see ``surrogate.learned.domain``; None: the default;
    ``progress``: reports each split, :mod:`surrogate.progress`; ``settings``: other
    SurrogateModel settings, e.g. ``unseen_shape_weight``; ``refit_physics``: refit the
    analytic model's free parameters on each training part too, :func:`physics_of`, the
    default; False keeps the shipped parameters, which were fitted on every Playbook run, the
    test runs among them; ``network``: the network the test runs are predicted under,
    :func:`evaluate_grid`). ``runs``: the table, or
    :func:`~surrogate.learned.training_data.training_data` of it (then ``profile`` must be its
    own)."""
    return evaluate_shrinks(
        runs,
        protocol,
        (shrink_doublings,),
        params=params,
        seed=seed,
        n_folds=n_folds,
        profile=profile,
        progress=progress,
        settings=settings,
        refit_physics=refit_physics,
        network=network,
    )[shrink_doublings]


def physics_of(data: TrainingData, train: np.ndarray) -> dict[str, dict[str, Any]]:
    """The analytic parameter sets of a split that hides its test runs from the physics too:
    each framework version of ``data`` fitted on the training rows ``train`` alone
    (``surrogate.calibration.fit_params.fit_runs``, no cross-validation), or at its priors where the
    training part has too few runs to fit it; the sets ``data`` was computed under
    (``TrainingData.parameter_sets``: the shipped ones unless given others) of framework
    versions ``data`` does not hold. (The shipped sets of the versions it holds were fitted on
    all their runs, the test runs among them.)"""
    from surrogate.calibration.fit_params import fit_runs

    held = {FRAMEWORK_VERSIONS[int(c)] for c in np.unique(data.cols["framework_code"])}
    base = data.parameter_sets
    fitted = fit_runs(data.runs.iloc[train], data.profile, group_by=None, sets=base)["sets"]
    return {**{k: v for k, v in base.as_dict().items() if k not in held}, **fitted}


def evaluate_shrinks(
    runs: pd.DataFrame | TrainingData,
    protocol: str,
    shrinks: Sequence[float | None],
    *,
    params: dict[str, dict[str, Any] | None] | None = None,
    seed: int = 0,
    n_folds: int = 5,
    profile: Any = None,
    progress: ProgressFn | None = None,
    settings: dict[str, Any] | None = None,
    refit_physics: bool = True,
    network: str = "measured",
) -> dict[float | None, ProtocolResult]:
    """:func:`evaluate_protocol` for each domain shrinkage in ``shrinks``, from one fit per
    split (the shrinkage acts at prediction time only); the held-out runs predicted under
    ``network`` (:func:`evaluate_grid`)."""
    grid = evaluate_grid(
        runs,
        protocol,
        shrinks,
        (network,),
        params=params,
        seed=seed,
        n_folds=n_folds,
        profile=profile,
        progress=progress,
        settings=settings,
        refit_physics=refit_physics,
    )
    return {s: grid[s, network] for s in shrinks}


def evaluate_grid(
    runs: pd.DataFrame | TrainingData,
    protocol: str,
    shrinks: Sequence[float | None],
    networks: Sequence[str] = ("measured",),
    *,
    params: dict[str, dict[str, Any] | None] | None = None,
    seed: int = 0,
    n_folds: int = 5,
    profile: Any = None,
    progress: ProgressFn | None = None,
    settings: dict[str, Any] | None = None,
    refit_physics: bool = True,
) -> dict[tuple[float | None, str], ProtocolResult]:
    """:func:`evaluate_protocol` per (domain shrinkage, network) from one fit per split: both
    act at prediction time only. ``networks`` (``surrogate.runs.context.NETWORKS``):
    the held-out runs scored with the network each measured at its start (``measured``) or
    under the cluster profile's curve alone (``profile``: as a user predicts before a run;
    ``surrogate.runs.context.as_predicted``). Training always explains its runs under
    their own measured network."""
    import pandas as pd

    from surrogate.runs.context import as_predicted

    data = _prepared(runs, profile)
    runs, profile = data.runs, data.profile
    params = params or {}
    keys = [(s, net) for net in networks for s in shrinks]
    parts: dict[tuple[float | None, str], list[pd.DataFrame]] = {k: [] for k in keys}
    analytic_parts: dict[str, list[pd.DataFrame]] = {net: [] for net in networks}
    n = 0
    todo = _usable_splits(runs, protocol, seed=seed, n_folds=n_folds)
    stage = f"evaluating {protocol}: one refit per split"
    report(progress, stage, 0, len(todo))
    for train, test in todo:
        sets = ParameterSets(physics_of(data, train)) if refit_physics else data.parameter_sets
        # every feature and target is its own run's (TrainingData), so a refit physics
        # prepares the training part alone: the test part is scored below
        part_data = (
            data.take(train)
            if not refit_physics
            else training_data(runs.iloc[train], profile=profile, sets=sets)
        )
        model = SurrogateModel(
            status_params=params.get("status"),
            mfu_params=params.get("mfu"),
            mem_params=params.get("mem"),
            n_folds=n_folds,
            seed=seed,
            **(settings or {}),
        )
        model.fit(part_data)
        for net in networks:
            test_runs = as_predicted(runs.iloc[test], net)
            for shrink in shrinks:
                pred = score_runs(test_runs, model=model, profile=profile, shrink_doublings=shrink)
                part = runs.iloc[test].copy()
                for k in PRED_KEYS:
                    part[k] = pred[k].to_numpy()
                parts[shrink, net].append(part)
            analytic_parts[net].append(analytic_predictions(test_runs, profile=profile, sets=sets))
        n += 1
        report(progress, stage, n, len(todo))
    out: dict[tuple[float | None, str], ProtocolResult] = {}
    for net in networks:
        first = pd.concat(parts[shrinks[0], net]).sort_index()
        base = pd.concat(
            [first.drop(columns=list(PRED_KEYS)), pd.concat(analytic_parts[net]).sort_index()],
            axis=1,
        )
        analytic = accuracy_metrics(base)
        for shrink in shrinks:
            res = pd.concat(parts[shrink, net]).sort_index()
            out[shrink, net] = ProtocolResult(
                protocol=protocol,
                predictions=res,
                metrics=accuracy_metrics(res),
                analytic_metrics=analytic,
                n_splits=n,
                refit_physics=refit_physics,
                analytic_predictions=base,
                network=net,
            )
    return out


def evaluate_analytic(
    runs: pd.DataFrame | TrainingData,
    protocol: str,
    *,
    seed: int = 0,
    n_folds: int = 5,
    profile: Any = None,
    progress: ProgressFn | None = None,
    refit_physics: bool = True,
    network: str = "measured",
) -> ProtocolResult:
    """The analytic model alone under ``protocol``, no learned model fitted: each split's test
    runs predicted under the free parameters fitted on its training part (:func:`physics_of`;
    ``refit_physics=False``: the shipped ones) and under ``network`` (:func:`evaluate_grid`).
    The figures are those :func:`evaluate_protocol` gives as its analytic baseline;
    ``metrics`` and ``analytic_metrics`` both hold them."""
    import pandas as pd

    from surrogate.runs.context import as_predicted

    data = _prepared(runs, profile)
    runs, profile = data.runs, data.profile
    todo = _usable_splits(runs, protocol, seed=seed, n_folds=n_folds)
    stage = f"evaluating {protocol}: the analytic model, its parameters refit per split"
    report(progress, stage, 0, len(todo))
    parts = []
    for n, (train, test) in enumerate(todo, start=1):
        sets = ParameterSets(physics_of(data, train)) if refit_physics else data.parameter_sets
        test_runs = runs.iloc[test]
        scored = analytic_predictions(as_predicted(test_runs, network), profile=profile, sets=sets)
        parts.append(pd.concat([test_runs, scored], axis=1))
        report(progress, stage, n, len(todo))
    res = pd.concat(parts).sort_index()
    metrics = accuracy_metrics(res)
    return ProtocolResult(
        protocol=protocol,
        predictions=res,
        metrics=metrics,
        analytic_metrics=metrics,
        n_splits=len(todo),
        refit_physics=refit_physics,
        analytic_predictions=res,
        network=network,
    )


def _usable_splits(
    runs: pd.DataFrame, protocol: str, *, seed: int, n_folds: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (train, test) splits of ``protocol`` with both parts non-empty; an error if none."""
    todo = [
        (a, b) for a, b in splits(runs, protocol, seed=seed, n_folds=n_folds) if len(a) and len(b)
    ]
    if not todo:
        raise DataError(f"protocol {protocol!r} has no split with both training and test runs")
    return todo


def _prepared(runs: pd.DataFrame | TrainingData, profile: Any) -> TrainingData:
    if not isinstance(runs, TrainingData):
        return training_data(runs, profile=profile)
    if profile is not None and profile is not runs.profile:
        raise ValueError(
            "profile must be None or the TrainingData's own: its features were "
            "computed under that one"
        )
    return runs


def evaluate(
    runs: pd.DataFrame | TrainingData,
    protocols: Sequence[str] = DEFAULT_PROTOCOLS,
    *,
    profile: Any = None,
    **kwargs: Any,
) -> dict[str, ProtocolResult]:
    """:func:`evaluate_protocol` for each protocol, the table prepared once for all."""
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        raise DataError(f"protocols must be among {', '.join(PROTOCOLS)}, got {unknown}")
    data = _prepared(runs, profile)
    return {p: evaluate_protocol(data, p, **kwargs) for p in protocols}


def metrics_frame(result: ProtocolResult) -> pd.DataFrame:
    """Rows: metrics; columns: learned, analytic."""
    import pandas as pd

    return pd.DataFrame({"learned": result.metrics, "analytic": result.analytic_metrics})


def format_metric(name: str, value: float) -> str:
    """Counts as integers, rank correlation and MAE as numbers, the rest as percentages."""
    if value != value:  # NaN
        return "-"
    if name in ("runs", "completed", "regret_cells"):
        return f"{value:.0f}"
    if name in ("mfu_spearman", "mfu_mae_points", "oom_brier"):
        return f"{value:.3f}"
    return f"{100 * value:.1f}%"
