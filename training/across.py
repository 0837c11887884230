"""Protocols that judge transfer: hold out a whole framework or a whole cluster.

A user's first prediction is made for a framework or a cluster the parameter sets were not
fitted on. These protocols measure exactly that on every framework and cluster with measured
runs: the Playbook's (nanotron on its H100 + EFA cluster), MosaicML's MPT runs (llm-foundry on
H100 and on A100 clusters) and the project's own single-H100 runs (PyTorch autocast, FSDP2,
torchtitan). For each held-out framework or cluster, the analytic model's parameter sets are
fitted on every other run (``surrogate.calibration.fit_params.fit_runs``; a framework version with
no run
left keeps no set), and so is the default set (``surrogate.calibration.fit_params.fit_default``);
the
held-out runs are then predicted

- ``priors``: a framework version without a set of its own at the priors;
- ``default (runs)`` / ``default (sets)``: at the default set fitted on the rest, its runs
  weighed one each or each parameter set as much as any other.

Figures per held-out group: completed runs, median predicted / measured tokens/s, the mean
absolute error of tokens/s over runs of MFU >= 10% (MAPE) and the median over all, and peak
reserved memory MAPE where measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from microbench.torchtitan_runs import read_run_dirs
from surrogate.analytic.params import DEFAULT_SET, ParameterSets
from surrogate.calibration.blocks import (
    MIN_FIT_MFU,
    blocks_for_runs,
    predicted_logged_reserved,
    predicted_step_s,
)
from surrogate.calibration.fit_params import Balance, fit_default, fit_runs
from surrogate.config.training import config_from_flat
from surrogate.ingest.dispatch import read_runs
from surrogate.ingest.llmfoundry import parse_llmfoundry
from surrogate.ingest.playbook_network import playbook_runs
from surrogate.ingest.train_step import OWN_H100_PROFILE
from surrogate.io.datasource import data_dir as resolve_data_dir

DATASETS = Path(__file__).resolve().parents[1] / "datasets" / "h100"
"""The project's own H100 measurements (``datasets/h100``)."""

GROUPINGS: dict[str, str] = {
    "framework": "leave one framework out",
    "cluster": "leave one cluster out",
}
VARIANTS: tuple[str, ...] = ("priors", "default (runs)", "default (sets)")


def own_h100_runs() -> pd.DataFrame:
    """The project's own single-H100 runs: PyTorch autocast and FSDP2 training steps
    (``microbench.train_step``) and torchtitan 0.2.2 runs, all on the machine of
    ``datasets/h100/2026-11-23/env.txt``, explained under its measured profile."""
    paths = sorted((DATASETS / "2026-11-23").glob("train_steps_*.jsonl"))
    paths += sorted((DATASETS / "2026-11-24" / "fsdp2").glob("train_steps_*.jsonl"))
    frames = [read_runs(p) for p in paths]
    torchtitan = read_run_dirs(DATASETS / "2026-11-24" / "torchtitan")[0]
    torchtitan["source"] = "surrogate_h100"
    torchtitan["profile"] = OWN_H100_PROFILE  # the same machine: its profile explains them
    frames.append(torchtitan)
    return pd.concat(frames, ignore_index=True)


def all_runs(data_dir: str | Path | None = None, *, published: bool = False) -> pd.DataFrame:
    """Every measured run of every framework and cluster, with a ``cluster`` column:
    ``playbook``, ``mpt-h100``, ``mpt-a100`` (both A100 memory sizes) and ``own-h100``;
    ``published``: NVIDIA's Megatron-Bridge runs too (``megatron-bridge-h100``, the runs whose
    layout the project's rules accept; ``surrogate.ingest.published``)."""
    playbook = playbook_runs(data_dir).assign(cluster="playbook")
    mpt = parse_llmfoundry(
        resolve_data_dir(data_dir) / "sweeps/llmfoundry_mpt/benchmarking_README.md"
    )[0]
    mpt["cluster"] = np.where(mpt["gpu"].str.startswith("H100"), "mpt-h100", "mpt-a100")
    own = own_h100_runs().assign(cluster="own-h100")
    frames = [playbook, mpt, own]
    if published:
        from surrogate.ingest.published import parse_published

        path = resolve_data_dir(data_dir) / "published/megatron_bridge_h100.csv"
        frames.append(
            parse_published(path, flagged=False)[0].assign(cluster="megatron-bridge-h100")
        )
    return pd.concat(frames, ignore_index=True)


def _parameter_sets_taken(runs: pd.DataFrame) -> np.ndarray:
    return np.array(
        [config_from_flat(r).layout.parameter_set() for r in runs.to_dict("records")], dtype=object
    )


def log_errors(runs: pd.DataFrame, sets: ParameterSets | None = None) -> dict[str, np.ndarray]:
    """Per run of ``runs``, under parameter sets ``sets`` (None: the shipped ones):
    log(predicted / measured) of tokens/s over the completed runs and of peak reserved memory
    over those with a measurement (NaN elsewhere), measured as the fits read them
    (``surrogate.calibration.blocks.blocks_for_runs``)."""
    blocks, rows = blocks_for_runs(runs, sets=sets)
    tps = np.full(len(runs), np.nan)
    mem = np.full(len(runs), np.nan)
    for b, idx in zip(blocks, rows, strict=True):
        tps[idx] = np.log(b.step_time_s / predicted_step_s(b, {}))  # NaN where not completed
        mem[idx] = np.log(predicted_logged_reserved(b, {}) / b.reserved_bytes)
    return {"log_tps": tps, "log_memory": mem}


def figures(runs: pd.DataFrame, errors: dict[str, np.ndarray]) -> dict[str, float]:
    """Tokens/s median predicted / measured and median absolute error over the completed runs,
    MAPE over those of measured MFU >= 10% (the project's convention: a run at a few percent
    MFU is a broken run, not a layout to rank); peak reserved memory MAPE over the completed
    runs with a measurement (``errors``: :func:`log_errors`)."""
    ratio = np.exp(errors["log_tps"])
    ok = np.isfinite(ratio)
    big = ok & (runs["mfu"].to_numpy(float) >= MIN_FIT_MFU)
    mem = np.exp(errors["log_memory"])
    mok = np.isfinite(mem)
    ape = np.abs(ratio - 1)
    return {
        "runs": float(ok.sum()),
        "tps_ratio_median": float(np.median(ratio[ok])) if ok.any() else np.nan,
        "tps_mape_ge10": float(np.mean(ape[big])) if big.any() else np.nan,
        "tps_median_ape": float(np.median(ape[ok])) if ok.any() else np.nan,
        "memory_runs": float(mok.sum()),
        "memory_mape": float(np.mean(np.abs(mem[mok] - 1))) if mok.any() else np.nan,
    }


@dataclass
class Transfer:
    """What :func:`leave_one_out` measured: one row of figures per (grouping, held-out
    value, variant), and every held-out run's log errors (``run``: its row in the runs)."""

    table: pd.DataFrame
    errors: pd.DataFrame


def _record(
    rows: list[dict[str, Any]],
    errors: list[pd.DataFrame],
    column: str,
    held: str,
    test: np.ndarray,
    results: dict[str, tuple[dict[str, Any], dict[str, np.ndarray], str]],
) -> None:
    """Append one held-out group's figures and log errors, per variant."""
    for name, (figs, err, own) in results.items():
        rows.append(
            {"grouping": column, "held_out": held, "variant": name, "own_sets": own, **figs}
        )
        errors.append(
            pd.DataFrame(
                {
                    "grouping": column,
                    "held_out": held,
                    "variant": name,
                    "run": np.flatnonzero(test),
                    **err,
                }
            )
        )


def leave_one_out(
    runs: pd.DataFrame,
    by: Sequence[str] = tuple(GROUPINGS),
    balances: Sequence[Balance] = ("runs", "sets"),
    progress: Any = print,
    sets: ParameterSets | None = None,
) -> Transfer:
    """For each column of ``by`` and each of its values: fit on the other runs, predict the
    held-out ones (module doc); the fits start from parameter sets ``sets`` (None: the
    shipped ones)."""
    taken = _parameter_sets_taken(runs)
    full = fit_runs(runs, group_by=None, sets=sets)["sets"]
    rows: list[dict[str, Any]] = []
    errors: list[pd.DataFrame] = []
    measured: dict[bytes, dict[str, tuple[dict[str, Any], dict[str, np.ndarray], str]]] = {}
    for column in by:
        for held in sorted(runs[column].astype(str).unique()):
            test = (runs[column].astype(str) == held).to_numpy()
            if test.tobytes() in measured:  # the same runs held out by another grouping
                _record(rows, errors, column, held, test, measured[test.tobytes()])
                continue
            touched = set(taken[test])
            kept = kept_sets(runs, test, taken=taken, full=full, sets=sets)
            train = runs[~test].reset_index(drop=True)
            held_runs = runs[test].reset_index(drop=True)
            variants: dict[str, dict[str, Any]] = {"priors": kept}
            for balance in balances:
                default = fit_default(train, balance=balance, sets=ParameterSets(kept))
                variants[f"default ({balance})"] = kept | {DEFAULT_SET: default}
            results = {}
            for name, chosen in variants.items():
                err = log_errors(held_runs, ParameterSets(chosen))
                own = sorted(fv for fv in touched if fv in chosen)
                results[name] = (figures(held_runs, err), err, ", ".join(own) or "-")
            measured[test.tobytes()] = results
            _record(rows, errors, column, held, test, results)
            progress(f"  {GROUPINGS[column]}: {held} done")
    return Transfer(pd.DataFrame(rows), pd.concat(errors, ignore_index=True))


def kept_sets(
    runs: pd.DataFrame,
    test: np.ndarray,
    *,
    taken: np.ndarray | None = None,
    full: dict[str, Any] | None = None,
    sets: ParameterSets | None = None,
) -> dict[str, Any]:
    """The framework versions' own sets with the runs of ``test`` held out: those fitted on
    every run (``full``, fitted here when None) less the sets the held-out runs take (``taken``:
    each run's set, :func:`_parameter_sets_taken` when None), refitted on those sets' other
    runs (a set with none left is dropped). The default set is not among them
    (:func:`held_out_sets`)."""
    taken = _parameter_sets_taken(runs) if taken is None else taken
    full = fit_runs(runs, group_by=None, sets=sets)["sets"] if full is None else full
    touched = set(taken[test])
    refit_rows = ~test & np.isin(taken, list(touched))
    refit = (
        fit_runs(runs[refit_rows].reset_index(drop=True), group_by=None, sets=sets)["sets"]
        if refit_rows.any()
        else {}
    )
    return {k: v for k, v in full.items() if k not in touched} | refit


def held_out_sets(
    runs: pd.DataFrame,
    test: np.ndarray,
    *,
    balance: Balance = "sets",
    taken: np.ndarray | None = None,
    full: dict[str, Any] | None = None,
    sets: ParameterSets | None = None,
) -> ParameterSets:
    """Every parameter set a user would predict the runs of ``test`` with had they never been
    measured: :func:`kept_sets`, and the default set fitted on every other run
    (``balance`` as :func:`surrogate.calibration.fit_params.fit_default`)."""
    kept = kept_sets(runs, test, taken=taken, full=full, sets=sets)
    train = runs[~test].reset_index(drop=True)
    default = fit_default(train, balance=balance, sets=ParameterSets(kept))
    return ParameterSets(kept | {DEFAULT_SET: default})


def level_and_spread(ratio: np.ndarray) -> tuple[float, float, float]:
    """Of predicted / measured ratios (NaN ignored): the level, their median; the spread about
    it, the mean of |ratio / level - 1| (the MAPE once the level is removed); and the median of
    the same (robust to a few outliers). NaN for no finite ratio."""
    r = np.asarray(ratio, dtype=np.float64)
    r = r[np.isfinite(r)]
    if not len(r):
        return np.nan, np.nan, np.nan
    level = float(np.median(r))
    dev = np.abs(r / level - 1)
    return level, float(np.mean(dev)), float(np.median(dev))


def _cases(errors: pd.DataFrame, variant: str, column: str) -> list[pd.DataFrame]:
    """The held-out groups of ``variant`` with a finite ``column``, each once (a framework
    that is a whole cluster, nanotron and the Playbook's, is one case, not two)."""
    part = errors[(errors["variant"] == variant) & np.isfinite(errors[column])]
    seen: set[tuple[int, ...]] = set()
    cases = []
    for _, group in part.groupby(["grouping", "held_out"], sort=True):
        key = tuple(sorted(group["run"].tolist()))
        if key not in seen:
            seen.add(key)
            cases.append(group)
    return cases


def balanced_quantile(cases: Sequence[pd.DataFrame], column: str, coverage: float) -> float:
    """The ``coverage`` quantile of |``column``| over ``cases``, each case weighing alike
    whatever its runs (the Playbook's 1,479 completed runs do not outvote torchtitan's 26)."""
    values = np.concatenate([np.abs(c[column].to_numpy(float)) for c in cases])
    weights = np.concatenate([np.full(len(c), 1.0 / len(c)) for c in cases])
    order = np.argsort(values)
    cum = np.cumsum(weights[order]) / weights.sum()
    return float(values[order][np.searchsorted(cum, coverage)])


def transfer_intervals(
    errors: pd.DataFrame, *, variant: str = "default (sets)", coverage: float = 0.8
) -> dict[str, Any]:
    """The half-width, in log, of a ``coverage`` interval around a prediction for a framework or
    cluster the sets were not fitted on (tokens/s and memory): the balanced quantile of the
    held-out errors (:func:`balanced_quantile`), and its own check, each case held out of the
    quantile in turn (cross-conformal): per case the share of its runs inside, and the width
    hi / lo (exp(2 q))."""
    out: dict[str, Any] = {"coverage": coverage, "variant": variant}
    for column in ("log_tps", "log_memory"):
        cases = _cases(errors, variant, column)
        if len(cases) < 2:
            continue
        out[column] = balanced_quantile(cases, column, coverage)
        checks = []
        for i, case in enumerate(cases):
            q = balanced_quantile([c for j, c in enumerate(cases) if j != i], column, coverage)
            inside = float(np.mean(np.abs(case[column].to_numpy(float)) <= q))
            checks.append(
                {
                    "held_out": f"{case['grouping'].iloc[0]} {case['held_out'].iloc[0]}",
                    "runs": len(case),
                    "coverage": inside,
                    "width": float(np.exp(2 * q)),
                }
            )
        out[f"{column}_check"] = checks
    return out
