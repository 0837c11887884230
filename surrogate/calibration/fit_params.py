"""Fit the analytic model's free parameters (:mod:`surrogate.analytic.params`) to measured runs.

Time parameters: least squares on log(predicted step time / measured step time) over the
completed runs, plus one prior term per parameter ((z - z_prior) / width in the fitted space,
log or logit), so a parameter the data cannot identify stays at its prior; the data residuals
are weighed by their fitted spread, so each prior counts as one typical measurement. Memory
parameters: the same on log(predicted / measured peak reserved memory). Each framework version
is fitted on its own runs (its parameters are traits of its implementation).

Uncertainty: the standard deviation of each fitted value from the Gauss-Newton covariance at
the optimum (residual variance x (J^T J)^-1, mapped back through the log/logit), and, by
:func:`grouped_cv`, the spread of the values fitted with each group left out.

OOM: the fitted memory residuals' standard deviation ``memory_log_sd`` turns the memory
estimate into a probability under a normal error, and ``oom_log_margin``, fitted by maximum
likelihood on the completed and out-of-memory runs with that error, places the boundary where
the framework's runs met it: p_oom = Phi((log(predicted / capacity) + margin) / sd)
(:func:`surrogate.analytic.memory.oom_probability`, :func:`fit_oom_margin`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
from scipy.optimize import least_squares

from surrogate.analytic.inputs import Array
from surrogate.analytic.memory import CUDA_CONTEXT_BYTES, oom_probability
from surrogate.analytic.params import (
    DEFAULT_SET,
    PARAMETERS,
    FreeParameter,
    ParameterSets,
    cluster_key,
)
from surrogate.calibration.blocks import (
    MIN_FIT_MFU,
    Block,
    Predictor,
    blocks_for_runs,
    framework_version_of,
    healthy,
    predicted_logged_reserved,
    predicted_reserved,
    predicted_step_s,
)
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.gpus import GIB, get_gpu
from surrogate.config.training import config_from_flat
from surrogate.errors import DataError
from surrogate.io.atomic import atomic_write

TIME_PARAMETERS: tuple[str, ...] = tuple(p.name for p in PARAMETERS.values() if p.kind == "time")
MEMORY_PARAMETERS: tuple[str, ...] = tuple(
    p.name for p in PARAMETERS.values() if p.kind == "memory"
)
ROBUST_LOSS = "soft_l1"
ROBUST_SCALE = 0.2
NOISE_FLOOR = 1e-3
"""Smallest spread of log residuals the data are weighed by (exact synthetic data)."""
MIN_RUNS = 20
"""Fewest measured runs a framework version needs before its parameters are fitted
(``surrogate calibrate --runs``; the shipped sets)."""
OWN_MIN_RUNS = 5
"""Fewest timed runs of a framework without shipped parameters before training fits its own
(:func:`own_sets`): each parameter's prior weighs as one measurement, so a few runs move the
few parameters they inform and leave the rest at their priors (:func:`own_sets` gives the
figures from 10 runs)."""


@dataclass
class ParameterFit:
    """Fitted values of some parameters, their standard deviations, and the fit's residuals."""

    values: dict[str, float]
    sd: dict[str, float]
    runs: int
    log_rmse: float
    extra: dict[str, Any] = field(default_factory=dict)


def free_bounds(params: Sequence[FreeParameter]) -> tuple[np.ndarray, np.ndarray]:
    """Each parameter's physical range in the space the fit works in (log of a positive value,
    the value of a signed one; a fraction's logit is unbounded)."""
    lb = np.array([-np.inf if p.is_fraction else float(p.to_free(p.lower)) for p in params])
    ub = np.array([np.inf if p.is_fraction else float(p.to_free(p.upper)) for p in params])
    return lb, ub


def _fit(
    blocks: Sequence[Block],
    names: Sequence[str],
    predict: Predictor,
    target: str,
    fixed: dict[str, float],
    weights: Sequence[float] | None = None,
) -> ParameterFit:
    params: list[FreeParameter] = [PARAMETERS[n] for n in names]
    root_w = np.sqrt(np.ones(len(blocks)) if weights is None else np.asarray(weights, float))
    ys = [getattr(b, target) for b in blocks]
    masks = [np.isfinite(y) & (y > 0) for y in ys]
    runs = int(sum(m.sum() for m in masks))
    if runs == 0:
        raise DataError(f"no runs with a measured {target} to fit {', '.join(names)} on")
    z0 = np.array([float(p.to_free(p.prior)) for p in params])
    widths = np.array([p.prior_width for p in params])

    def values_of(z: np.ndarray) -> dict[str, float]:
        return {
            **fixed,
            **{p.name: float(p.from_free(zi)) for p, zi in zip(params, z, strict=True)},
        }

    def data_residuals(z: np.ndarray) -> np.ndarray:
        vals = values_of(z)
        parts = [
            w * np.log(predict(b, vals)[m] / y[m])
            for b, y, m, w in zip(blocks, ys, masks, root_w, strict=True)
        ]
        return np.concatenate(parts)

    noise = 1.0

    def residuals(z: np.ndarray) -> np.ndarray:
        return np.concatenate([data_residuals(z) / noise, (z - z0) / widths])

    # Twice: the data residuals are weighed by their own spread (first guessed at 1, then the
    # first fit's), so a prior counts as one measurement of typical error.
    start = np.array(
        [float(p.to_free(p.prior if p.fit_start is None else p.fit_start)) for p in params]
    )
    # The physical range bounds the search itself (a value clipped inside the residuals would
    # leave the search a flat region past the bound, where it stalls short of the optimum).
    lb, ub = free_bounds(params)
    finite = np.where(np.isfinite(lb), np.abs(lb), 0.0) + np.where(np.isfinite(ub), np.abs(ub), 0.0)
    inside = 1e-9 * np.maximum(finite, 1.0)
    start = np.clip(start, lb + inside, ub - inside)
    sol = least_squares(
        residuals,
        start,
        method="trf",
        diff_step=1e-4,
        loss=ROBUST_LOSS,
        f_scale=ROBUST_SCALE,
        bounds=(lb, ub),
    )
    noise = max(float(np.sqrt(np.mean(data_residuals(sol.x) ** 2))), NOISE_FLOOR)
    sol = least_squares(
        residuals,
        sol.x,
        method="trf",
        diff_step=1e-4,
        loss=ROBUST_LOSS,
        f_scale=ROBUST_SCALE,
        bounds=(lb, ub),
    )
    data = data_residuals(sol.x)
    sigma2 = float(np.mean(data**2))
    J = sol.jac
    try:
        cov = np.linalg.inv(J.T @ J) * sigma2
    except np.linalg.LinAlgError:
        cov = np.full((len(params), len(params)), np.nan)
    values = values_of(sol.x)
    sd = {}
    for i, p in enumerate(params):
        # Delta method: d value / d z.
        v = values[p.name]
        dv = v * (1 - v) if p.is_fraction else v
        sd[p.name] = float(abs(dv) * np.sqrt(max(cov[i, i], 0.0)))
    return ParameterFit({p.name: values[p.name] for p in params}, sd, runs, float(np.sqrt(sigma2)))


def fit_time(
    blocks: Sequence[Block],
    names: Sequence[str] = TIME_PARAMETERS,
    fixed: dict[str, float] | None = None,
    weights: Sequence[float] | None = None,
) -> ParameterFit:
    """Fit time parameters ``names`` on the blocks' measured step times (each block's log
    residuals weighed by ``weights``, one per block; 1 by default)."""
    return _fit(blocks, names, predicted_step_s, "step_time_s", dict(fixed or {}), weights)


def fit_memory(
    blocks: Sequence[Block],
    names: Sequence[str] = MEMORY_PARAMETERS,
    fixed: dict[str, float] | None = None,
    weights: Sequence[float] | None = None,
) -> ParameterFit:
    """Fit memory parameters on measured peak reserved memory; ``extra['memory_log_sd']`` is
    the standard deviation of the fitted log residuals, ``extra['oom_log_margin']`` the OOM
    boundary fitted with it (:func:`fit_oom_margin`): together they turn memory into p_oom."""
    fit = _fit(
        blocks, names, predicted_logged_reserved, "reserved_bytes", dict(fixed or {}), weights
    )
    fit.extra["memory_log_sd"] = fit.log_rmse
    fit.extra["oom_log_margin"] = fit_oom_margin(
        blocks, {**(fixed or {}), **fit.values}, fit.log_rmse
    )
    return fit


MIN_OOM_LABELS = 5
"""Fewest runs of each outcome (completed, out of memory) :func:`fit_oom_margin` fits on."""


def fit_oom_margin(blocks: Sequence[Block], values: dict[str, float], sd: float) -> float:
    """The ``oom_log_margin`` that makes the completed and out-of-memory runs of ``blocks``
    most likely under p_oom = Phi((log(predicted total / capacity) + margin) / sd) (a probit
    with its slope fixed by the memory error ``sd``); the prior (0) with fewer than
    :data:`MIN_OOM_LABELS` runs of either outcome."""
    from scipy.optimize import minimize_scalar
    from scipy.special import log_ndtr

    z, y = [], []
    for b in blocks:
        if b.oom is None:
            continue
        known = np.isfinite(b.oom)
        if not known.any():
            continue
        total = predicted_reserved(b.take(known), values) + CUDA_CONTEXT_BYTES
        z.append(np.log(total / b.cols["memory_bytes"][known]))
        y.append(b.oom[known] > 0.5)
    prior = PARAMETERS["oom_log_margin"]
    if not z:
        return prior.prior
    zs, ys = np.concatenate(z), np.concatenate(y)
    if min(int(ys.sum()), int((~ys).sum())) < MIN_OOM_LABELS:
        return prior.prior
    scale = max(sd, NOISE_FLOOR)

    def nll(margin: float) -> float:
        t = (zs + margin) / scale
        return -float(np.sum(np.where(ys, log_ndtr(t), log_ndtr(-t))))

    best = minimize_scalar(nll, bounds=(prior.lower, prior.upper), method="bounded")
    return float(best.x)


def grouped_cv(
    blocks: Sequence[Block],
    groups: Sequence[np.ndarray],
    fit: Callable[[Sequence[Block]], ParameterFit],
    predict: Predictor,
) -> tuple[list[Array], list[ParameterFit]]:
    """Leave each group out: fit on the rest, predict the group. ``groups`` holds one label
    array per block. Returns the held-out predictions (one array per block, NaN where a run's
    group was never held out) and each fold's fit."""
    labels = sorted({g for arr in groups for g in np.unique(arr)}, key=str)
    preds = [np.full(len(b), np.nan) for b in blocks]
    fits = []
    for g in labels:
        train = [b.take(arr != g) for b, arr in zip(blocks, groups, strict=True)]
        test_masks = [arr == g for arr in groups]
        f = fit([b for b in train if len(b)])
        fits.append(f)
        for i, (b, m) in enumerate(zip(blocks, test_masks, strict=True)):
            if m.any():
                preds[i][m] = predict(b.take(m), f.values)
    return preds, fits


FitOn = Literal["all", "healthy"]


def _fitted_set(bs: Sequence[Block], fit_bs: Sequence[Block]) -> tuple[dict[str, Any], bool]:
    """One framework version's fitted set (:func:`fit_runs`): its time parameters fitted on
    ``fit_bs``, its memory ones on ``bs`` where they hold :data:`MIN_RUNS` runs with a memory,
    and whether they did."""
    n_mem = sum(int(np.isfinite(b.reserved_bytes).sum()) for b in bs)
    t = fit_time(fit_bs)
    entry: dict[str, Any] = {
        "values": dict(t.values),
        "sd": dict(t.sd),
        "runs": {"time": t.runs, "memory": 0},
        "log_rmse": {"time": t.log_rmse, "memory": float("nan")},
        "clusters": sorted({cluster_key(b.perf.name) for b in bs}),
    }
    # a table of throughput alone (no peak memory: e.g. llm-foundry's) fits the time
    # parameters; its memory ones keep their priors
    with_memory = n_mem >= MIN_RUNS
    if with_memory:
        m = fit_memory(bs)
        entry["values"] |= {
            **m.values,
            "memory_log_sd": m.extra["memory_log_sd"],
            "oom_log_margin": m.extra["oom_log_margin"],
        }
        entry["sd"] |= m.sd
        entry["runs"]["memory"] = m.runs
        entry["log_rmse"]["memory"] = m.log_rmse
    return entry, with_memory


def fit_runs(
    runs: Any,
    profile: Any = None,
    *,
    group_by: str | None = "model_name",
    fit_on: FitOn = "all",
    min_runs: int = MIN_RUNS,
    sets: ParameterSets | None = None,
) -> dict[str, Any]:
    """Fit every framework version's parameters on ``runs``; report grouped cross-validation.

    Returns ``{"sets": {fv: {...}}, "cv": {...}}``: per framework version the fitted values,
    their standard deviations, the fold-to-fold spread, the runs used, and the memory error
    ``memory_log_sd``; ``held_out`` holds every run's prediction from the fold that left its
    group out (step time, reserved memory on the rank its measurement was logged on and on the
    most loaded rank, that fold's memory error). Time parameters are
    fitted on every completed run (``fit_on="all"``) or on those of MFU >= 10%
    (``"healthy"``, :data:`MIN_FIT_MFU`). ``group_by=None``: the fits alone, no
    cross-validation (``held_out`` is all NaN). A version is fitted from ``min_runs`` timed
    runs; its memory parameters from :data:`MIN_RUNS` runs with a memory (else their
    priors). ``sets``: the parameter sets the runs are explained under before the fit (None:
    the shipped ones; :func:`blocks_for_runs`)."""
    if fit_on not in ("all", "healthy"):
        raise ValueError(f"fit_on must be 'all' or 'healthy', got {fit_on!r}")
    # the versions whose memory parameters are fitted here explain their runs as their own
    # sets will (a framework's stated values give way to them: ParameterSets.as_own)
    blocks, rows = blocks_for_runs(runs, profile, sets=sets, own_memory_from=MIN_RUNS)
    mfu_all = runs["mfu"].to_numpy(dtype=np.float64)
    by_fv: dict[str, list[int]] = {}
    for i, b in enumerate(blocks):
        by_fv.setdefault(framework_version_of(b), []).append(i)
    groups_all = (
        runs[group_by].astype(str).to_numpy() if group_by is not None and group_by in runs else None
    )
    fitted: dict[str, Any] = {}
    held_step = np.full(len(runs), np.nan)
    held_mem = np.full(len(runs), np.nan)
    held_sd = np.full(len(runs), np.nan)
    held_margin = np.full(len(runs), np.nan)
    held_peak = np.full(len(runs), np.nan)
    for fv, ids in sorted(by_fv.items()):
        bs = [blocks[i] for i in ids]
        fit_bs = (
            bs
            if fit_on == "all"
            else [healthy(b, mfu_all[rows[i]]) for b, i in zip(bs, ids, strict=True)]
        )
        n_time = sum(int(np.isfinite(b.step_time_s).sum()) for b in fit_bs)
        if n_time < min_runs:
            continue
        entry, with_memory = _fitted_set(bs, fit_bs)
        if groups_all is not None:
            gs = [groups_all[rows[i]] for i in ids]
            if len({g for arr in gs for g in arr}) >= 2:
                tp, tf = grouped_cv(fit_bs, gs, fit_time, predicted_step_s)
                for i, p_t in zip(ids, tp, strict=True):
                    held_step[rows[i]] = p_t
                mf: list[ParameterFit] = []
                if with_memory:
                    mp, mf = grouped_cv(bs, gs, fit_memory, predicted_logged_reserved)
                    for i, p_m in zip(ids, mp, strict=True):
                        held_mem[rows[i]] = p_m
                entry["fold_sd"] = {
                    k: float(np.std([f.values[k] for f in tf + mf if k in f.values]))
                    for k in entry["sd"]
                }
                # Every fold's memory error and OOM margin, for the held-out OOM probabilities.
                labels = sorted({g for arr in gs for g in np.unique(arr)}, key=str)
                for g, f in zip(labels if mf else [], mf, strict=True):
                    for i, arr in zip(ids, gs, strict=True):
                        held_sd[rows[i][arr == g]] = f.extra["memory_log_sd"]
                        held_margin[rows[i][arr == g]] = f.extra["oom_log_margin"]
                        if (arr == g).any():
                            held_peak[rows[i][arr == g]] = predicted_reserved(
                                blocks[i].take(arr == g), f.values
                            )
        fitted[fv] = entry
    return {
        "sets": fitted,
        "held_out": {
            "step_time_s": held_step,
            "reserved_bytes": held_mem,
            "peak_reserved_bytes": held_peak,
            "memory_log_sd": held_sd,
            "oom_log_margin": held_margin,
        },
        "group_by": group_by,
        "fit_on": fit_on,
    }


Balance = Literal["runs", "sets"]


def _balanced(blocks: Sequence[Block], target: str, balance: Balance) -> list[float]:
    """One weight per block: 1 (``runs``: every run counts once), or each parameter set's runs
    weighing as much in all as any other set's (``sets``: the Playbook's thousand runs do not
    outvote a framework measured a hundred times)."""
    if balance == "runs":
        return [1.0] * len(blocks)
    counts: dict[str, int] = {}
    for b in blocks:
        fv = framework_version_of(b)
        counts[fv] = counts.get(fv, 0) + int(np.isfinite(getattr(b, target)).sum())
    measured = {fv: n for fv, n in counts.items() if n}
    total = sum(measured.values())
    return [
        total / (len(measured) * measured[framework_version_of(b)])
        if framework_version_of(b) in measured
        else 0.0
        for b in blocks
    ]


def fit_default(
    runs: Any,
    profile: Any = None,
    *,
    balance: Balance = "sets",
    min_runs: int = MIN_RUNS,
    sets: ParameterSets | None = None,
) -> dict[str, Any]:
    """The default set (:data:`~surrogate.analytic.params.DEFAULT_SET`): the framework-scoped
    parameters fitted on every run of ``runs`` together, whatever its framework, for the
    framework versions, GPUs and clusters that have no set of their own. Each run is explained
    under its own set's cluster-scoped values where that set was fitted on its cluster
    (:meth:`~surrogate.analytic.params.ParameterSets.cluster_scoped`: a cluster's network
    latency or host floor is not the frameworks' common ground); the default keeps those at
    their priors.
    ``balance``: how runs of different sets are weighed (:func:`_balanced`). Memory parameters
    are fitted on the runs with a measured peak memory (priors where fewer than ``min_runs``),
    with the memory error and OOM margin they show (:func:`fit_memory`).

    Returns the set as the shipped JSON holds it (``values``, ``sd``, ``runs``, ``log_rmse``)
    and the sets it pooled (``pooled``). ``sets``: the sets the runs are explained under
    (None: the shipped ones; :func:`blocks_for_runs`)."""
    blocks, _ = blocks_for_runs(runs, profile, sets=sets)
    time_names = [n for n in TIME_PARAMETERS if PARAMETERS[n].scope == "framework"]
    memory_names = [n for n in MEMORY_PARAMETERS if PARAMETERS[n].scope == "framework"]
    t = fit_time(blocks, time_names, weights=_balanced(blocks, "step_time_s", balance))
    entry: dict[str, Any] = {
        "values": dict(t.values),
        "sd": dict(t.sd),
        "runs": {"time": t.runs, "memory": 0},
        "log_rmse": {"time": t.log_rmse, "memory": float("nan")},
        "pooled": sorted({framework_version_of(b) for b in blocks}),
        "balance": balance,
    }
    if sum(int(np.isfinite(b.reserved_bytes).sum()) for b in blocks) >= min_runs:
        m = fit_memory(blocks, memory_names, weights=_balanced(blocks, "reserved_bytes", balance))
        entry["values"] |= {
            **m.values,
            "memory_log_sd": m.extra["memory_log_sd"],
            "oom_log_margin": m.extra["oom_log_margin"],
        }
        entry["sd"] |= m.sd
        entry["runs"]["memory"] = m.runs
        entry["log_rmse"]["memory"] = m.log_rmse
    return entry


def own_sets(
    runs: Any, profile: Any = None, *, sets: ParameterSets | None = None
) -> dict[str, Any]:
    """Parameter sets fitted on ``runs`` for the sets they take (``LayoutConfig.parameter_set``)
    that ``sets`` (None: the shipped ones) lack: a user's own framework,
    calibrated by their own runs before any learned correction (:func:`fit_runs` on those runs, no
    cross-validation; a version with fewer than :data:`OWN_MIN_RUNS` timed runs keeps the
    priors). ``{version: {"values": ..., "runs": ...}}``, empty where there is nothing to fit.

    Measured (``python benchmarks/accuracy.py --transfer``, MPT runs of llm-foundry, 3 draws
    of k added to the Playbook's): the analytic model alone under the k runs' own parameters
    predicts the rest at 11.9% MFU MAPE (Spearman 0.764) for k = 10 and 9.8% (0.806) for
    k = 50, against 19.6-20.1% (0.762-0.766) under the priors; drawn from one-node runs only,
    the runs of more nodes at 9.5% (0.612) and 7.8% (0.792), against 19.8% (0.629)."""

    base = shipped_parameter_sets() if sets is None else sets
    taken = [config_from_flat(r).layout.parameter_set() for r in runs.to_dict("records")]
    mine = np.array([fv not in base for fv in taken], dtype=bool)
    if not mine.any():
        return {}
    fitted = fit_runs(
        runs[mine].reset_index(drop=True), profile, group_by=None, min_runs=OWN_MIN_RUNS, sets=base
    )["sets"]
    # the runs record says whether the memory parameters were fitted (else the framework's
    # stated values hold beside them: ParameterSets.memory_fitted_codes)
    return {
        fv: {"values": dict(entry["values"]), "runs": dict(entry["runs"])}
        for fv, entry in fitted.items()
    }


def write_sets(result: dict[str, Any], path: Any, *, source: str) -> None:
    """Write the fitted sets of :func:`fit_runs` as the JSON :mod:`surrogate.analytic.params`
    reads (``surrogate/data/analytic_params.json`` ships one)."""
    time_runs = (
        "all completed runs"
        if result.get("fit_on", "all") == "all"
        else f"completed runs of MFU >= {MIN_FIT_MFU:.0%}"
    )
    doc = {
        "format": "surrogate.analytic_params/1",
        "source": source,
        "fitted": datetime.now(UTC).strftime("%Y-%m-%d"),
        "method": (
            f"per framework version: least squares ({ROBUST_LOSS}, scale "
            f"{ROBUST_SCALE}) on log step time of {time_runs} and on log peak "
            "reserved memory of all completed runs, "
            "with one prior term per parameter; memory_log_sd: the memory fit's "
            "residual spread; oom_log_margin: maximum likelihood on completed vs "
            "out-of-memory runs; sd: Gauss-Newton"
            + (
                ""
                if result["group_by"] is None
                else f"; fold_sd: spread over leave-one-{result['group_by']}-out folds"
            )
            + (
                ""
                if DEFAULT_SET not in result["sets"]
                else f"; {DEFAULT_SET}: the framework-scoped parameters on every framework's "
                "runs together (fit_default), each set's runs weighed "
                + ("alike" if result["sets"][DEFAULT_SET].get("balance") == "sets" else "one each")
            )
        ),
        "sets": result["sets"],
    }
    atomic_write(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def held_out_p_oom(runs: Any, held_out: dict[str, np.ndarray]) -> np.ndarray:
    """Each run's probability of running out of memory from its held-out memory prediction
    (``peak_reserved_bytes``: the most loaded rank's; ``reserved_bytes`` where absent) and its
    fold's memory error and margin (:func:`fit_runs`); NaN where nothing was held out."""

    peak = held_out.get("peak_reserved_bytes", held_out["reserved_bytes"])
    capacity = np.array([get_gpu(g).memory_gib * GIB for g in runs["gpu"]])
    margin = held_out.get("oom_log_margin", np.zeros(len(runs)))
    p = oom_probability(
        {
            "memory_bytes": capacity,
            "p_memory_log_sd": held_out["memory_log_sd"],
            "p_oom_log_margin": margin,
        },
        {"total": peak + CUDA_CONTEXT_BYTES},
    )
    return np.where(np.isfinite(peak), p, np.nan)


def held_out_figures(runs: Any, held_out: dict[str, np.ndarray]) -> dict[str, float]:
    """The targets' figures of held-out predictions (:func:`fit_runs`): MFU MAPE on completed
    runs of MFU >= 10%, Spearman's rank correlation of throughput on all completed runs, peak
    reserved memory MAPE, and OOM recall and precision at p_oom > 0.5 (completed vs oom)."""
    from scipy.stats import spearmanr

    done = (runs["status"] == "completed").to_numpy()
    tokens = (runs["dp"] * runs["grad_accum"] * runs["mbs"] * runs["seq_len"]).to_numpy(float)
    gpus = (runs["gpus_per_node"] * runs["num_nodes"]).to_numpy(float)
    measured = tokens / (runs["tokens_per_s_per_gpu"].to_numpy(float) * gpus)
    pred = held_out["step_time_s"]
    ok = done & np.isfinite(pred) & np.isfinite(measured)
    ape = np.abs(measured / pred - 1)  # = |predicted MFU / measured MFU - 1|
    big = ok & (runs["mfu"].to_numpy(float) >= MIN_FIT_MFU)
    out = {
        "mfu_mape_ge10": float(np.mean(ape[big])) if big.any() else float("nan"),
        "mfu_median_ape": float(np.median(ape[ok])) if ok.any() else float("nan"),
    }
    if ok.sum() >= 3:
        out["spearman"] = float(spearmanr(1 / pred[ok], 1 / measured[ok]).statistic)
    mem = held_out["reserved_bytes"]
    got = runs["peak_mem_reserved_gib"].to_numpy(float) * GIB
    mok = done & np.isfinite(mem) & np.isfinite(got)
    if mok.any():
        out["memory_mape"] = float(np.mean(np.abs(mem[mok] / got[mok] - 1)))
    judged = runs["status"].isin(["completed", "oom"]).to_numpy() & np.isfinite(mem)
    if judged.any():
        p_oom = held_out_p_oom(runs, held_out)
        truth = (runs["status"] == "oom").to_numpy()[judged]
        said = p_oom[judged] > 0.5
        hit = float((truth & said).sum())
        out["oom_recall"] = hit / max(float(truth.sum()), 1.0)
        out["oom_precision"] = hit / max(float(said.sum()), 1.0)
    return out
