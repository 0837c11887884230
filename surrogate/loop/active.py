"""Active learning: propose the next real runs, then score them against the model that chose them.

The loop (``surrogate propose`` -> run -> ``surrogate ingest`` -> ``surrogate score-round`` ->
``surrogate train``):

1. :func:`propose` scores the space's layouts and :func:`surrogate.loop.acquisition.select`
   picks k of them (expected improvement, the OOM boundary, diversity).

2. :func:`surrogate.loop.round_files.write_round` writes ``proposals.csv``, ``logs/<name>/``
   launch files (torchtitan TOML, torchrun, sbatch: :mod:`surrogate.loop.launch`) and
   ``round.json`` (what, why, by which model: its ``data_hash``, and the goal, and what the
   round costs: :mod:`surrogate.loop.cost`). It refuses to overwrite a round.

3. :func:`score_round`: the round's ingested runs against the proposing model's predictions
   (prospective accuracy) and the best MFU found so far; :func:`log_round` sends them to
   MLflow: one experiment per campaign (the directory holding its rounds), one run per round
   found again by its tags, metrics stepped by round, figures, and a run drawing accuracy
   against rounds beside the analytic baseline.

The measured runs so far (``propose --runs``) are read by :mod:`surrogate.loop.measured`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.calibration.network import scaled_profile
from surrogate.config.checks import capped_count
from surrogate.config.frameworks import get_framework
from surrogate.config.table import FlatTable, table_len, take
from surrogate.config.training import TrainingConfig, config_from_flat
from surrogate.errors import ConfigError, DataError
from surrogate.layouts.best_odds import best_set, p_best
from surrogate.layouts.grid import TABLE_LIMIT, space_table
from surrogate.layouts.search import RANK_COLUMNS, Limits, score_configs
from surrogate.layouts.space import layout_key
from surrogate.loop.acquisition import Acquisition, select
from surrogate.loop.cost import budget_record, check_budget, round_cost, run_gpu_hours
from surrogate.loop.launch import LAUNCH_FRAMEWORK, launchable
from surrogate.loop.measured import runs_and_incumbent
from surrogate.loop.round_files import check_new_round_dir, model_identity, write_round
from surrogate.prediction.predict import resolve_model
from surrogate.progress import report

if TYPE_CHECKING:
    import pandas as pd

    from surrogate.layouts.search import RankBy
    from surrogate.learned.model import SurrogateModel
    from surrogate.progress import ProgressFn

MAX_K = 1_000
"""Most runs one round proposes (``k``, ``propose --k``). A round is runs to launch on a
cluster, each with its launch files; the picking costs k passes over the candidates and the
picks' odds of being the best of them (:func:`surrogate.layouts.best_odds.p_best`) a Monte
Carlo whose time grows faster than the square of k (minutes beyond a few thousand)."""


def check_k(k: int, flag: str = "k") -> None:
    """ConfigError unless 1 <= ``k`` <= :data:`MAX_K`, saying why the cap."""
    capped_count(
        k,
        flag,
        MAX_K,
        "a round is runs to launch, and picking them and their odds of being the best "
        "of them take time that grows faster than the square of their count; propose "
        f"{MAX_K:,} or fewer, and more in the next round, once these have taught the "
        "model",
    )


# ------------------------------------------------------------------ scoring a round
def load_round_model(record: Mapping[str, Any]) -> SurrogateModel | None:
    """The model that proposed a round; DataError if it has been replaced since.

    The model is identified by its own sha256 (which a retraining on the same data with other
    settings changes too) and by the hash of its training data; rounds proposed before the
    sha256 was recorded, by the latter alone."""

    info = record.get("model")
    if not isinstance(info, Mapping) or "kind" not in info:
        raise DataError(f"round {record.get('round')!r}: round.json names no proposing model")
    if info["kind"] == "analytic":
        return None
    model = resolve_model(info.get("path"))
    checks = [("data_hash", info.get("data_hash"), getattr(model, "data_hash_", None))]
    if info.get("model_sha256") is not None:  # absent from older rounds
        checks.append(("model sha256", info["model_sha256"], getattr(model, "saved_sha256_", None)))
    for key, recorded, found in checks:
        if model is None or found != recorded:
            raise DataError(
                f"the model at {info.get('path')!r} is not the one that proposed round "
                f"{record.get('round')} ({key} {str(recorded)[:12]}..., found "
                f"{str(found)[:12]}...): score a round before retraining over it, or pass the "
                "proposing model's directory (--model-dir)"
            )
    return model


def score_round(
    record: Mapping[str, Any], runs: pd.DataFrame, *, model: SurrogateModel | None
) -> tuple[dict[str, float], pd.DataFrame]:
    """Prospective accuracy of a round: its proposals matched to measured ``runs`` (a sweep
    table) by run name (the first part of ``run_id``) or by configuration.

    Returns metrics (proposed, measured, status accuracy, MFU error of completed runs, interval
    coverage, the round's best MFU and the best MFU of ``runs`` so far) and the matched rows.
    DataError if ``runs`` lacks the outcome columns or none of its runs is of this round
    (nothing to score is not a score of zero). The runs are predicted under the calibration
    profile the round was proposed with (its goal's ``profile``)."""

    missing = [c for c in ("status", "mfu") if c not in runs.columns]
    if missing:
        raise DataError(
            f"the runs table must be a sweep table with the columns status and mfu (what "
            f"`surrogate ingest` writes), got no {' or '.join(missing)} among its columns "
            f"{', '.join(map(str, runs.columns[:12]))}{' ...' if len(runs.columns) > 12 else ''}"
        )
    names = {p["name"]: p for p in record["proposals"]}
    by_key = {layout_key(config_from_flat(p["config"])): p["name"] for p in record["proposals"]}
    matched = []
    for row in runs.to_dict("records"):
        name = str(row.get("run_id", "")).split("/", 1)[0]
        if name not in names:
            try:
                name = by_key.get(layout_key(config_from_flat(row)), "")
            except ConfigError:
                name = ""
        if name in names:
            matched.append({**row, "name": name})
    import pandas as pd

    frame = pd.DataFrame(matched)
    metrics: dict[str, float] = {"proposed": float(len(names)), "measured": float(len(frame))}
    done_all = runs[runs["status"] == "completed"]
    metrics["best_mfu_so_far"] = float(done_all["mfu"].max()) if len(done_all) else math.nan
    if frame.empty:
        raise DataError(
            f"none of the {len(runs)} runs matches a proposal of round {record['round']} (by run "
            f"name, e.g. {next(iter(names), '?')}/..., or by configuration): ingest the round's "
            "logs into the table first (surrogate ingest ROUND/logs --into TABLE)"
        )
    configs = [config_from_flat(r) for r in frame.to_dict("records")]
    goal = record.get("goal", {})
    pred = score_configs(
        configs,
        model=model,
        profile=scaled_profile(
            goal.get("profile"), str(goal.get("gpu")), goal.get("network_scale")
        ),
    )
    frame = frame.reset_index(drop=True)
    for col in ("pred_mfu", "pred_mfu_lo", "pred_mfu_hi", "p_oom", "p_completed"):
        frame[col] = pred[col].to_numpy()
    predicted_status = np.where(frame["p_oom"] >= 0.5, "oom", "completed")
    measured_status = frame["status"].replace({"timeout": "fail"})
    metrics["status_accuracy"] = float(np.mean(predicted_status == measured_status))
    metrics["oom_rate"] = float(np.mean(measured_status == "oom"))
    done = frame[frame["status"] == "completed"]
    if len(done):
        err = (done["pred_mfu"] - done["mfu"]).abs() / done["mfu"]
        metrics["mfu_mape"] = float(err.mean())
        inside = (done["mfu"] >= done["pred_mfu_lo"]) & (done["mfu"] <= done["pred_mfu_hi"])
        metrics["interval_coverage"] = float(inside.mean()) if model is not None else math.nan
        metrics["best_mfu_round"] = float(done["mfu"].max())
    return metrics, frame


# ------------------------------------------------------------------ the propose step
PROPOSAL_COLUMNS = (
    "pred_mfu",
    "pred_mfu_lo",
    "pred_mfu_hi",
    "pred_tokens_per_s_per_gpu",
    "pred_step_time_s",
    "pred_peak_mem_reserved_gib",
    "pred_peak_mem_reserved_lo_gib",
    "pred_peak_mem_reserved_hi_gib",
    "pred_peak_device_mem_gib",
    "p_oom",
    "p_fail",
    "extrapolation",
    "correction_share",
)
"""The predictions each proposal carries in ``proposals.csv`` and ``round.json`` (and its
GPU-hours)."""


def propose(
    space: Any,
    round_dir: str | Path,
    *,
    k: int = 16,
    model: str | Path = "default",
    limits: Any = None,
    acquisition: Acquisition | None = None,
    runs: pd.DataFrame | None = None,
    round_number: int | None = None,
    steps: int = 50,
    progress: ProgressFn | None = None,
    rank: RankBy = "mean",
    profile: str | Path | None = None,
    budget_gpu_hours: float | None = None,
    network_scale: float | None = None,
) -> Path:
    """Propose ``k`` runs in ``space`` (a :class:`~surrogate.layouts.space.LayoutSpace`, enumerated
    whole) and write the round. ``runs``: the sweep table so far (its layouts are not
    proposed again; its best completed MFU is the incumbent of expected improvement). Only
    layouts that can be written as torchtitan runs are proposed. ``progress`` hears of each
    stage (:mod:`surrogate.progress`). ``rank``: how the proposals are listed, by predicted
    MFU (``"mean"``) or by its 10% quantile (``"safe"``); each carries ``p_best``, its
    probability of being the best of the proposals (:func:`surrogate.layouts.best_odds.p_best`).
    ``profile``: the cluster's calibration profile, as for :func:`surrogate.predict` (a file or
    a shipped name; None: the GPU's default); ``network_scale``: the network measured before
    the round over the profile's curve (``surrogate.calibration.network``; None: the curve); the
    round records both and :func:`score_round` scores under them. ``budget_gpu_hours``: the
    picks' cost at their predicted step times (:func:`surrogate.loop.cost.run_gpu_hours`) sums
    to at most this; a pick that would exceed what is left is passed over for the next best,
    and the round records what was left out. ``round.json`` records the round's cost
    (:func:`surrogate.loop.cost.round_cost`) in any case."""
    check_new_round_dir(round_dir)  # before the work, not after it
    _check_asked(
        k=k, rank=rank, steps=steps, round_number=round_number, budget_gpu_hours=budget_gpu_hours
    )
    acq = acquisition or Acquisition()
    limits = limits or Limits(max_p_oom=1.0)
    learned = resolve_model(model)
    candidates, scored = _feasible_candidates(
        space, learned, limits, progress=progress, profile=profile, network_scale=network_scale
    )
    n = table_len(candidates)
    ran, best = runs_and_incumbent(runs, candidates)
    report(progress, f"picking {k} of {n:,}", 0, 1)
    cost = run_gpu_hours(scored, steps)
    skipped: list[int] = []
    picks = select(
        scored,
        candidates,
        k,
        best_measured=best,
        already_run=ran,
        acquisition=acq,
        cost=cost,
        budget=budget_gpu_hours,
        skipped=skipped,
    )
    report(progress, f"picking {k} of {n:,}", 1, 1)
    _check_picked(
        picks,
        bool(skipped),
        cost,
        candidates=n,
        ran=len(ran),
        limits=limits,
        budget_gpu_hours=budget_gpu_hours,
        steps=steps,
    )
    scored = scored.assign(gpu_hours=cost)
    chosen = _listed(
        scored,
        _configs(space, scored, picks),
        picks,
        (*PROPOSAL_COLUMNS, "gpu_hours"),
        RANK_COLUMNS[rank],
    )
    spent = round_cost(scored.iloc[[i for i, _, _ in picks]], steps=steps)
    spent |= budget_record(scored, skipped, budget_gpu_hours)
    goal = _goal(
        space,
        limits,
        candidates=n,
        best=best,
        rank=rank,
        profile=profile,
        network_scale=network_scale,
    )
    where = str(model) if not isinstance(model, str) or model != "default" else "default"
    return write_round(
        round_dir,
        chosen,
        model_info=model_identity(learned, where),
        goal=goal,
        acquisition=acq,
        round_number=round_number,
        steps=steps,
        cost=spent,
    )


def _check_asked(
    *, k: int, rank: str, steps: int, round_number: int | None, budget_gpu_hours: float | None
) -> None:
    """ConfigError unless what :func:`propose` is asked holds (before any scoring)."""
    check_budget(budget_gpu_hours)
    if rank not in RANK_COLUMNS:
        raise ConfigError(f"rank must be mean or safe, got {rank!r}")
    check_k(k)
    for name, value in (("steps", steps), ("round_number", round_number)):
        if value is not None and (isinstance(value, bool) or value < 1):
            raise ConfigError(f"{name} must be >= 1, got {value!r}")


def _feasible_candidates(
    space: Any,
    learned: SurrogateModel | None,
    limits: Limits,
    *,
    progress: ProgressFn | None,
    profile: str | Path | None,
    network_scale: float | None,
) -> tuple[FlatTable, pd.DataFrame]:
    """The space's layouts torchtitan can launch that are within the limits, and their scores
    (aligned rows); ConfigError if none is launchable, or none within the limits."""
    space.check_bound(TABLE_LIMIT, optuna=False)  # propose weighs every layout
    report(progress, "enumerating the layouts torchtitan can launch", 0, 1)
    every = space_table(space)
    candidates = take(every, np.flatnonzero(launchable(every)))
    report(progress, "enumerating the layouts torchtitan can launch", 1, 1)
    n = table_len(candidates)
    if not n:
        stages = " or ".join(map(str, get_framework(LAUNCH_FRAMEWORK).zero_stages))
        raise ConfigError(
            f"the space holds no layout that can be launched with "
            f"{LAUNCH_FRAMEWORK} (allow --framework {LAUNCH_FRAMEWORK} and zero "
            f"stages {stages})"
        )
    report(progress, f"scoring {n:,} candidates", 0, 1)
    scored = score_configs(
        candidates,
        model=learned,
        limits=limits,
        profile=scaled_profile(profile, space.gpu, network_scale),
    )
    report(progress, f"scoring {n:,} candidates", 1, 1)
    keep = scored["feasible"].to_numpy()
    if not keep.any():
        raise ConfigError(_none_feasible(scored, limits))
    return take(candidates, np.flatnonzero(keep)), scored[keep].reset_index(drop=True)


def _check_picked(
    picks: Sequence[tuple[int, str, float]],
    skipped: bool,
    cost: np.ndarray,
    *,
    candidates: int,
    ran: int,
    limits: Limits,
    budget_gpu_hours: float | None,
    steps: int,
) -> None:
    """ConfigError if nothing was picked, saying why: nothing fits the budget (``skipped``:
    the budget left something out), or every candidate was run already."""
    if not picks and budget_gpu_hours is not None and skipped:
        cheapest = float(np.nanmin(cost)) if np.isfinite(cost).any() else math.nan
        raise ConfigError(
            f"no candidate fits --budget-gpu-hours {budget_gpu_hours:g}: the cheapest run costs "
            f"{cheapest:,.3g} GPU-hours at its predicted step time ({steps} steps); raise the "
            "budget, lower --steps, or allow fewer --nodes (nothing was written)"
        )
    if not picks:
        raise ConfigError(
            f"every one of the {candidates:,} candidates within the limits was run already "
            f"(--runs holds {ran:,} runs): nothing is left to propose; widen the space (more "
            f"--nodes, --framework, --recompute choices) or relax --max-p-oom "
            f"({limits.max_p_oom:g}) and --memory-margin ({limits.memory_margin_frac:g})"
        )


def _goal(
    space: Any,
    limits: Limits,
    *,
    candidates: int,
    best: float | None,
    rank: RankBy,
    profile: str | Path | None,
    network_scale: float | None,
) -> dict[str, Any]:
    """The round's goal as ``round.json`` records it: the problem, the limits, the candidates'
    count, the incumbent, the ranking and the calibration profile (and network) scored under."""
    goal = {
        "model": space.model.name,
        "gpu": space.gpu,
        "gpus_per_node": space.gpus_per_node,
        "node_counts": list(space.node_counts),
        "seq_len": space.model.seq_len,
        "global_batch_seqs": space.global_batch_seqs,
        "objective": "max MFU",
        "max_p_oom": limits.max_p_oom,
        "memory_margin_frac": limits.memory_margin_frac,
        "candidates": candidates,
        "best_measured_mfu": best,
        "rank": rank,
        "profile": _profile_record(profile),
    }
    if network_scale is not None:
        goal["network_scale"] = network_scale
    return goal


def _none_feasible(scored: pd.DataFrame, limits: Limits) -> str:
    """Why no candidate is left after the limits, and which to relax, by how much."""
    p_oom = np.nan_to_num(scored["p_oom"].to_numpy(dtype=float), nan=1.0)
    headroom = (1.0 - limits.memory_margin_frac) * scored["capacity_gib"].to_numpy(dtype=float)
    in_memory = scored["pred_peak_device_mem_gib"].to_numpy(dtype=float) <= headroom
    head = (
        f"no candidate is left to propose (nothing was written): of the {len(scored):,} "
        "launchable layouts, "
    )
    if p_oom.min() >= 0.5:
        return (
            head + f"every one is predicted to run out of memory (the lowest OOM risk is "
            f"{p_oom.min():.2f}): widen the space (more --nodes; --recompute full where "
            "--recompute leaves it out)"
        )
    if not in_memory.any():
        return (
            head + f"none keeps {limits.memory_margin_frac:.0%} of the GPU's memory free "
            f"(--memory-margin {limits.memory_margin_frac:g}): lower --memory-margin"
        )
    lowest = float(p_oom[in_memory].min())
    over = int((p_oom > limits.max_p_oom).sum())
    why = (
        f"every one has a predicted OOM risk above --max-p-oom {limits.max_p_oom:g}"
        if over == len(p_oom)
        else f"{over:,} have a predicted OOM risk above --max-p-oom {limits.max_p_oom:g} and the "
        f"others too little memory free (--memory-margin {limits.memory_margin_frac:g})"
    )
    return (
        head + f"{why}; the lowest risk within the memory margin is {lowest:.2g}: raise "
        f"--max-p-oom to {max(lowest, 0.01):.2g} or more"
    )


def _profile_record(profile: str | Path | None) -> str | None:
    """The profile as the round records it: a file as its absolute path (``score-round`` may
    run elsewhere), a shipped profile by its name."""
    if profile is None:
        return None
    return str(Path(profile).resolve()) if Path(profile).is_file() else str(profile)


def _configs(
    space: Any, scored: pd.DataFrame, picks: Sequence[tuple[int, str, float]]
) -> dict[int, TrainingConfig]:
    """The configuration of each pick (a row of ``scored``, its flat configuration), with the
    space's model name and batch, which no column holds."""
    records = scored.iloc[[i for i, _, _ in picks]].to_dict("records")
    return {
        i: config_from_flat(
            {**row, "name": space.model.name}, global_batch_seqs=space.global_batch_seqs
        )
        for (i, _, _), row in zip(picks, records, strict=True)
    }


def _listed(
    scored: pd.DataFrame,
    candidates: Mapping[int, TrainingConfig],
    picks: Sequence[tuple[int, str, float]],
    cols: Sequence[str],
    by: str,
) -> list[tuple[TrainingConfig, str, dict[str, Any]]]:
    """The picks with their scores, ``p_best`` among them and ``best_set`` (those the model
    cannot tell apart: :func:`surrogate.layouts.best_odds.best_set`), ordered by the column
    ``by`` (the predicted MFU or its 10% quantile; stable: ties keep the order they were
    picked)."""
    rows = scored.iloc[[i for i, _, _ in picks]].reset_index(drop=True)
    odds = p_best(rows)
    tied = best_set(odds)
    order = np.argsort(-np.nan_to_num(rows[by].to_numpy(dtype=float), nan=-np.inf), kind="stable")
    return [
        (
            candidates[picks[j][0]],
            picks[j][1],
            {
                "value": picks[j][2],
                **{c: rows[c].iloc[j] for c in cols},
                "p_best": odds[j],
                "best_set": bool(tied[j]),
            },
        )
        for j in order
    ]
