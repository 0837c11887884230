"""Active learning: propose the next real runs, then score them against the model that chose them.

The loop (``surrogate propose`` -> run -> ``surrogate ingest`` -> ``surrogate score-round`` ->
``surrogate train``):

1. :func:`propose` scores the space's layouts and :func:`surrogate.loop.acquisition.select`
   picks k of them (expected improvement, the OOM boundary, diversity).

2. :func:`write_round` writes ``proposals.csv``, ``logs/<name>/`` launch files (torchtitan TOML,
   torchrun, sbatch: :mod:`surrogate.loop.launch`) and ``round.json`` (what, why, by which model:
   its ``data_hash``, and the goal). It refuses to overwrite a round.

3. :func:`score_round`: the round's ingested runs against the proposing model's predictions
   (prospective accuracy) and the best MFU found so far; :func:`log_round` sends them to
   MLflow: one experiment per campaign (the directory holding its rounds), one run per round
   found again by its tags, metrics stepped by round, figures, and a run drawing accuracy
   against rounds beside the analytic baseline.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.config.files import CONFIG_KEYS
from surrogate.config.frameworks import get_framework
from surrogate.config.table import FlatTable, concat, flat_table, table_len, take
from surrogate.config.training import TrainingConfig, config_from_flat, config_to_flat
from surrogate.errors import ConfigError, DataError, OutputError
from surrogate.calibration.network import scaled_profile
from surrogate.io.atomic import is_write_failure, output_error
from surrogate.io.json_files import read_json
from surrogate.io.jsonsafe import json_safe
from surrogate.io.outputs import check_writable_dir
from surrogate.layouts.best_odds import p_best
from surrogate.layouts.grid import TABLE_LIMIT, space_table
from surrogate.layouts.labels import layout_label
from surrogate.layouts.search import RANK_COLUMNS, Limits, score_configs
from surrogate.layouts.space import layout_key
from surrogate.loop.acquisition import Acquisition, problem_codes, select
from surrogate.loop.launch import (
    LAUNCH_FRAMEWORK,
    SBATCH_TIME_LIMIT,
    launchable,
    write_launch_files,
)
from surrogate.prediction.predict import resolve_model
from surrogate.progress import report

if TYPE_CHECKING:
    import pandas as pd

    from surrogate.layouts.search import RankBy
    from surrogate.learned.model import SurrogateModel
    from surrogate.progress import ProgressFn

ROUND_FILE = "round.json"
PROPOSALS_FILE = "proposals.csv"
LOGS_DIR = "logs"
MAX_K = 1_000
"""Most runs one round proposes (``k``, ``propose --k``). A round is runs to launch on a
cluster, each with its launch files; the picking costs k passes over the candidates and the
picks' odds of being the best of them (:func:`surrogate.layouts.best_odds.p_best`) a Monte
Carlo whose time grows faster than the square of k (minutes beyond a few thousand)."""


def check_k(k: int, flag: str = "k") -> None:
    """ConfigError unless 1 <= ``k`` <= :data:`MAX_K`, saying why the cap."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"{flag} must be >= 1, got {k!r}")
    if k > MAX_K:
        raise ConfigError(
            f"{flag} must be at most {MAX_K:,}, got {k:,}: a round is runs to launch, and "
            f"picking them and their odds of being the best of them take time that grows faster "
            f"than the square of their count; propose {MAX_K:,} or fewer, and more in the next "
            f"round, once these have taught the model")


# ------------------------------------------------------------------ round files
def model_identity(model: SurrogateModel | None, where: str) -> dict[str, Any]:
    """What identifies the proposing model in ``round.json``: where it was, the data it was
    trained on and, for a saved model, its own sha256 (``saved_sha256_``: a model retrained on
    the same data with other settings is another model)."""
    if model is None:
        return {"path": None, "kind": "analytic", "data_hash": None}
    return {"path": where, "kind": "learned", "data_hash": model.data_hash_,
            "model_sha256": getattr(model, "saved_sha256_", None), "n_train": model.n_train_}

def next_round_number(round_dir: Path) -> int:
    """1 + the largest round number recorded beside ``round_dir`` (1 for the first)."""
    numbers = [0]
    parent = round_dir.parent
    if parent.is_dir():
        for f in parent.glob(f"*/{ROUND_FILE}"):
            try:
                numbers.append(int(json.loads(f.read_text())["round"]))
            except (ValueError, KeyError, TypeError, json.JSONDecodeError):
                continue
    return max(numbers) + 1

def check_new_round_dir(round_dir: str | Path) -> Path:
    """``round_dir`` as a Path if a new round can be written there (absent or an empty
    directory, in a writable place); ConfigError otherwise. :func:`propose` checks before it
    scores the space, so a taken directory costs nothing."""

    final = Path(round_dir)
    if final.exists() and not final.is_dir():
        raise ConfigError(f"--round must be a new directory, got the file {str(final)!r}")
    if final.is_dir() and any(final.iterdir()):
        raise ConfigError(
            f"round directory {str(final)!r} already exists and is not empty: a round is never "
            "overwritten; give a new --round directory")
    check_writable_dir(final.parent, flag="--round")
    return final

def write_round(
    round_dir: str | Path,
    picks: Sequence[tuple[TrainingConfig, str, Mapping[str, Any]]],
    *,
    model_info: Mapping[str, Any],
    goal: Mapping[str, Any],
    acquisition: Acquisition,
    round_number: int | None = None,
    steps: int = 50,
    cost: Mapping[str, Any] | None = None,
) -> Path:
    """Write a round directory (module docstring) atomically; ConfigError if it exists.

    ``picks``: per run its configuration, the reason it was picked and its predicted scores;
    ``cost``: what the round costs (:func:`round_cost`), recorded as ``cost``."""
    import pandas as pd

    final = check_new_round_dir(round_dir)
    if not picks:  # read_round and score-round refuse a round of no run: none is written
        raise ConfigError("a round holds at least one run, got none to write")
    number = round_number if round_number is not None else next_round_number(final)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        rows, records = [], []
        for i, (cfg, reason, scores) in enumerate(picks):
            name = f"r{number:02d}-{i:02d}-n{cfg.cluster.num_nodes}-" + layout_label(cfg).replace(
                " ", "_")
            files = write_launch_files(cfg, tmp / LOGS_DIR / name, run_name=name, steps=steps)
            flat = config_to_flat(cfg) | {"global_batch_seqs": cfg.batch_seqs}
            clean = {k: json_safe(v) for k, v in scores.items()}
            rows.append({"name": name, "reason": reason, "layout": layout_label(cfg), **flat,
                         **clean})
            records.append({"name": name, "reason": reason, "config": flat, "predicted": clean,
                            "command": files.command})
        pd.DataFrame(rows).to_csv(tmp / PROPOSALS_FILE, index=False)
        record = {
            "round": number,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "goal": dict(goal),
            "model": dict(model_info),
            "acquisition": {"boundary_frac": acquisition.boundary_frac,
                            "diversity_scale": acquisition.diversity_scale,
                            "gain": acquisition.gain,
                            "open_with_best": acquisition.open_with_best},
            "proposals": records,
        }
        if cost is not None:
            record["cost"] = dict(cost)
        (tmp / ROUND_FILE).write_text(json.dumps(json_safe(record), indent=2))
        final.parent.mkdir(parents=True, exist_ok=True)
        # one rename: it replaces an absent or empty directory, never a written round, so of
        # several proposes into one new directory at once exactly one wins
        os.rename(tmp, final)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise ConfigError(
                f"round directory {str(final)!r} was written by another propose meanwhile: a "
                "round is never overwritten; give a new --round directory") from None
        if isinstance(e, OutputError):  # a file of the round: name the round, not its tmp
            raise OutputError(f"cannot write the round {str(final)!r}: {e.reason}") from None
        if isinstance(e, OSError) and is_write_failure(e):
            raise output_error(final, e) from None
        raise
    return final

def read_round(round_dir: str | Path) -> dict[str, Any]:
    path = Path(round_dir) / ROUND_FILE
    data = read_json(path, missing=DataError(
        f"{str(round_dir)!r} is not a round directory ({ROUND_FILE} missing)"))
    return _check_round(data, path)

def _check_round(record: Any, where: Path) -> dict[str, Any]:
    """The parts of ``round.json`` that scoring reads, type-checked (a hand-edited or foreign
    file must not end in a KeyError or score under a round number that is not one)."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: a round file holds a JSON object, got "
                        f"{type(record).__name__}")
    number = record.get("round")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise DataError(f"{where}: round must be an integer >= 1, got {number!r}")
    proposals = record.get("proposals")
    if not isinstance(proposals, list) or not proposals or not all(
            isinstance(p, dict) and isinstance(p.get("name"), str)
            and isinstance(p.get("config"), dict) for p in proposals):
        raise DataError(f"{where}: proposals must be a non-empty list of objects with a name "
                        "and a config (what `surrogate propose` writes)")
    if not isinstance(record.get("model"), dict):
        raise DataError(f"{where}: round {number} names no proposing model (a 'model' object)")
    return record

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
        checks.append(("model sha256", info["model_sha256"],
                       getattr(model, "saved_sha256_", None)))
    for key, recorded, found in checks:
        if model is None or found != recorded:
            raise DataError(
                f"the model at {info.get('path')!r} is not the one that proposed round "
                f"{record.get('round')} ({key} {str(recorded)[:12]}..., found "
                f"{str(found)[:12]}...): score a round before retraining over it, or pass the "
                "proposing model's directory (--model-dir)")
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
            f"{', '.join(map(str, runs.columns[:12]))}{' ...' if len(runs.columns) > 12 else ''}")
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
            "logs into the table first (surrogate ingest ROUND/logs --into TABLE)")
    configs = [config_from_flat(r) for r in frame.to_dict("records")]
    goal = record.get("goal", {})
    pred = score_configs(configs, model=model,
                         profile=scaled_profile(goal.get("profile"), str(goal.get("gpu")),
                                                goal.get("network_scale")))
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

# ------------------------------------------------------------------ the runs so far
def read_measured_runs(path: str | Path, *, flag: str = "--runs") -> pd.DataFrame:
    """The measured runs of ``path``: a sweep table (what ``surrogate ingest`` writes, checked
    against its schema) or a file a sweep parser reads as runs
    (:func:`surrogate.ingest.dispatch.read_runs`). Anything else is a DataError that says what
    the table looks like instead (an earlier round's ``proposals.csv``, predictions, layouts
    without outcomes): its rows were never run, and taking them as runs would hide their layouts
    from the proposals and take a predicted MFU for a measured one."""
    # here, not at the top: the readers of every log format and pandas double the import of
    # this module (0.55 -> 1.3 s), which scoring a round or proposing without --runs needs not
    from surrogate.ingest.dispatch import read_runs

    p = Path(path)
    try:
        return read_runs(p)
    except DataError as e:
        looks = _what_table(p)  # what it is instead, where its columns say
        if looks is not None:
            raise DataError(f"{flag} {str(p)!r} is {looks}; {flag} takes a sweep table of "
                            "measured runs (what `surrogate ingest LOGS --into TABLE` writes: a "
                            "status and the measurements of each run)") from None
        raise DataError(f"{flag} must be a sweep table of measured runs (what `surrogate ingest "
                        f"LOGS --into TABLE` writes): {e}") from None


def _what_table(path: Path) -> str | None:
    """What a table that no runs reader takes looks like, from its columns (None: not a table
    whose columns can be read, or none of these: :func:`read_measured_runs` says why)."""
    # here, not at the top: pandas, which the module's import leaves out (read_measured_runs)
    from surrogate.io.tableio import read_table

    if path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        return None
    try:
        columns = {str(c) for c in read_table(path).columns}
    except DataError:
        return None
    predicted = sorted(c for c in columns if c.startswith("pred_") or c == "p_oom")
    if {"name", "reason", "layout"} <= columns and predicted:
        return (f"a round's {PROPOSALS_FILE} (runs `surrogate propose` proposed, with their "
                "predictions, not measurements): run them, then `surrogate ingest ROUND/logs "
                "--into TABLE` and pass that table")
    if predicted and "status" not in columns:
        return (f"a table of predictions ({', '.join(predicted[:3])}...: what `surrogate "
                "predict --out` writes), not of measured runs")
    if predicted:
        return (f"a sweep table with predictions added ({', '.join(predicted[:3])}...): pass the "
                "sweep table itself")
    if "status" not in columns and columns & set(CONFIG_KEYS):
        return ("a table of configurations without outcomes (no status column): layouts, not "
                "measured runs")
    if "status" not in columns:
        shown_columns = ", ".join(sorted(columns)[:5]) + (" ..." if len(columns) > 5 else "")
        return (f"no sweep table: its columns ({shown_columns}) hold no configuration and no "
                "status")
    return None


# ------------------------------------------------------------------ what a round costs
MAX_LEFT_OUT_LISTED = 10
"""Layouts a round lists by name among those its budget left out (all are counted)."""


def check_budget(budget_gpu_hours: float | None, flag: str = "budget_gpu_hours") -> None:
    """ConfigError unless the budget is None or a finite number of GPU-hours above 0."""
    if budget_gpu_hours is None:
        return
    if isinstance(budget_gpu_hours, bool) or not isinstance(budget_gpu_hours, int | float) \
            or not math.isfinite(budget_gpu_hours) or budget_gpu_hours <= 0:
        raise ConfigError(f"{flag} must be a number of GPU-hours above 0, got "
                          f"{budget_gpu_hours!r}")


def run_gpu_hours(scored: pd.DataFrame, steps: int) -> np.ndarray:
    """Per scored layout, the GPU-hours of one run of ``steps`` steps at its predicted step
    time: GPUs x steps x step time / 3600 (start-up, compilation and checkpoints not counted;
    NaN where no step time is predicted)."""
    gpus = scored["num_gpus"].to_numpy(dtype=float)
    return np.asarray(gpus * steps * scored["pred_step_time_s"].to_numpy(dtype=float) / 3600.0)


def round_cost(picked: pd.DataFrame, *, steps: int) -> dict[str, Any]:
    """What the runs of a round cost (rows of scored layouts with ``gpu_hours``): GPU-hours at
    the predicted step times, the GPU-hours the sbatch time limit allows at most, how many are
    predicted to run past it, and the expected number of OOMs (the sum of p_oom) and of other
    failures (the sum of p_fail; NaN under the analytic model, which predicts none)."""
    hours = picked["gpu_hours"].to_numpy(dtype=float)
    gpus = picked["num_gpus"].to_numpy(dtype=float)
    h, m, sec = (int(x) for x in SBATCH_TIME_LIMIT.split(":"))
    limit_h = h + m / 60 + sec / 3600
    run_hours = np.divide(hours, gpus, out=np.full(len(hours), np.nan), where=gpus > 0)
    p_fail = picked["p_fail"].to_numpy(dtype=float)
    return {
        "runs": len(picked), "gpus": int(gpus.sum()),
        "steps_per_run": steps,
        "steps_from": "--steps, written as [training] steps in each run's config.toml",
        "gpu_hours": float(np.nansum(hours)),
        "runs_without_step_time": int(np.isnan(hours).sum()),
        "sbatch_time_limit": SBATCH_TIME_LIMIT,
        "gpu_hours_at_time_limit": float(gpus.sum() * limit_h),
        "runs_past_time_limit": int((run_hours > limit_h).sum()),
        "expected_ooms": float(picked["p_oom"].to_numpy(dtype=float).sum()),
        "expected_other_failures": (float(p_fail.sum()) if np.isfinite(p_fail).all()
                                    else None),
    }


# ------------------------------------------------------------------ the propose step
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
    picks' cost at their predicted step times (:func:`run_gpu_hours`) sums to at most this; a
    pick that would exceed what is left is passed over for the next best, and the round records
    what was left out. ``round.json`` records the round's cost (:func:`round_cost`) in any
    case."""
    check_new_round_dir(round_dir)  # before the work, not after it
    check_budget(budget_gpu_hours)
    if rank not in RANK_COLUMNS:
        raise ConfigError(f"rank must be mean or safe, got {rank!r}")
    check_k(k)
    for name, value in (("steps", steps), ("round_number", round_number)):
        if value is not None and (isinstance(value, bool) or value < 1):
            raise ConfigError(f"{name} must be >= 1, got {value!r}")
    acq = acquisition or Acquisition()
    limits = limits or Limits(max_p_oom=1.0)
    learned = resolve_model(model)
    space.check_bound(TABLE_LIMIT, optuna=False)  # propose weighs every layout
    report(progress, "enumerating the layouts torchtitan can launch", 0, 1)
    every = space_table(space)
    candidates = take(every, np.flatnonzero(launchable(every)))
    report(progress, "enumerating the layouts torchtitan can launch", 1, 1)
    n = table_len(candidates)
    if not n:
        stages = " or ".join(map(str, get_framework(LAUNCH_FRAMEWORK).zero_stages))
        raise ConfigError(f"the space holds no layout that can be launched with "
                          f"{LAUNCH_FRAMEWORK} (allow --framework {LAUNCH_FRAMEWORK} and zero "
                          f"stages {stages})")
    report(progress, f"scoring {n:,} candidates", 0, 1)
    scored = score_configs(candidates, model=learned, limits=limits,
                           profile=scaled_profile(profile, space.gpu, network_scale))
    report(progress, f"scoring {n:,} candidates", 1, 1)
    keep = scored["feasible"].to_numpy()
    if not keep.any():
        raise ConfigError(_none_feasible(scored, limits))
    candidates = take(candidates, np.flatnonzero(keep))
    n = table_len(candidates)
    scored = scored[keep].reset_index(drop=True)
    ran, best = _runs_of(runs, candidates)
    report(progress, f"picking {k} of {n:,}", 0, 1)
    cost = run_gpu_hours(scored, steps)
    skipped: list[int] = []
    picks = select(scored, candidates, k, best_measured=best, already_run=ran, acquisition=acq,
                   cost=cost, budget=budget_gpu_hours, skipped=skipped)
    report(progress, f"picking {k} of {n:,}", 1, 1)
    if not picks and budget_gpu_hours is not None and skipped:
        cheapest = float(np.nanmin(cost)) if np.isfinite(cost).any() else math.nan
        raise ConfigError(
            f"no candidate fits --budget-gpu-hours {budget_gpu_hours:g}: the cheapest run costs "
            f"{cheapest:,.3g} GPU-hours at its predicted step time ({steps} steps); raise the "
            "budget, lower --steps, or allow fewer --nodes (nothing was written)")
    if not picks:
        raise ConfigError(
            f"every one of the {n:,} candidates within the limits was run already (--runs "
            f"holds {len(ran):,} runs): nothing is left to propose; widen the space (more "
            f"--nodes, --framework, --recompute choices) or relax --max-p-oom "
            f"({limits.max_p_oom:g}) and --memory-margin ({limits.memory_margin_frac:g})")
    cols = ("pred_mfu", "pred_mfu_lo", "pred_mfu_hi", "pred_tokens_per_s_per_gpu",
            "pred_step_time_s", "pred_peak_mem_gib", "pred_peak_mem_lo_gib",
            "pred_peak_mem_hi_gib", "pred_device_mem_gib", "p_oom", "p_fail", "extrapolation",
            "correction_share")
    scored = scored.assign(gpu_hours=cost)
    chosen = _listed(scored, _configs(space, scored, picks), picks, (*cols, "gpu_hours"),
                     RANK_COLUMNS[rank])
    spent = round_cost(scored.iloc[[i for i, _, _ in picks]], steps=steps)
    left_out = scored.iloc[skipped]
    spent |= {"budget_gpu_hours": budget_gpu_hours, "left_out_over_budget": len(skipped),
              "left_out": [{"layout": str(r["layout"]), "num_nodes": int(r["num_nodes"]),
                            "pred_mfu": json_safe(r["pred_mfu"]),
                            "gpu_hours": json_safe(r["gpu_hours"])}
                           for r in left_out.head(MAX_LEFT_OUT_LISTED).to_dict("records")]}
    goal = {"model": space.model.name, "gpu": space.gpu, "gpus_per_node": space.gpus_per_node,
            "node_counts": list(space.node_counts), "seq_len": space.model.seq_len,
            "global_batch_seqs": space.global_batch_seqs, "objective": "max MFU",
            "max_p_oom": limits.max_p_oom, "memory_margin_frac": limits.memory_margin_frac,
            "candidates": n, "best_measured_mfu": best, "rank": rank,
            "profile": _profile_record(profile)}
    if network_scale is not None:
        goal["network_scale"] = network_scale
    where = str(model) if not isinstance(model, str) or model != "default" else "default"
    return write_round(round_dir, chosen, model_info=model_identity(learned, where), goal=goal,
                       acquisition=acq, round_number=round_number, steps=steps, cost=spent)


def _none_feasible(scored: pd.DataFrame, limits: Limits) -> str:
    """Why no candidate is left after the limits, and which to relax, by how much."""
    p_oom = np.nan_to_num(scored["p_oom"].to_numpy(dtype=float), nan=1.0)
    headroom = (1.0 - limits.memory_margin_frac) * scored["capacity_gib"].to_numpy(dtype=float)
    in_memory = scored["pred_device_mem_gib"].to_numpy(dtype=float) <= headroom
    head = f"no candidate is left to propose (nothing was written): of the {len(scored):,} " \
           "launchable layouts, "
    if p_oom.min() >= 0.5:
        return (head + f"every one is predicted to run out of memory (the lowest OOM risk is "
                f"{p_oom.min():.2f}): widen the space (more --nodes; --recompute full where "
                "--recompute leaves it out)")
    if not in_memory.any():
        return (head + f"none keeps {limits.memory_margin_frac:.0%} of the GPU's memory free "
                f"(--memory-margin {limits.memory_margin_frac:g}): lower --memory-margin")
    lowest = float(p_oom[in_memory].min())
    over = int((p_oom > limits.max_p_oom).sum())
    why = (f"every one has a predicted OOM risk above --max-p-oom {limits.max_p_oom:g}"
           if over == len(p_oom) else
           f"{over:,} have a predicted OOM risk above --max-p-oom {limits.max_p_oom:g} and the "
           f"others too little memory free (--memory-margin {limits.memory_margin_frac:g})")
    return (head + f"{why}; the lowest risk within the memory margin is {lowest:.2g}: raise "
            f"--max-p-oom to {max(lowest, 0.01):.2g} or more")


def _profile_record(profile: str | Path | None) -> str | None:
    """The profile as the round records it: a file as its absolute path (``score-round`` may
    run elsewhere), a shipped profile by its name."""
    if profile is None:
        return None
    return str(Path(profile).resolve()) if Path(profile).is_file() else str(profile)


def _runs_of(runs: pd.DataFrame | None, candidates: FlatTable,
             ) -> tuple[list[TrainingConfig], float | None]:
    """The configurations of ``runs`` (a sweep table; its flagged runs skipped, another row
    that is no configuration a DataError) and the best MFU
    completed by a run of the candidates' problem (:func:`problem_codes`; None: no such run):
    the incumbent of expected improvement is not another model's MFU."""
    # here, not at the top: pandas, which the module's import leaves out (read_measured_runs)
    from surrogate.ingest.sweeps import FLAG_COLUMN, flagged_mask

    ran: list[TrainingConfig] = []
    mfu: list[float] = []
    if runs is None:
        return ran, None
    if "status" not in runs.columns:
        raise DataError("runs must be a sweep table of measured runs, with a status column "
                        "(what `surrogate ingest` writes), got the columns "
                        f"{', '.join(map(str, runs.columns[:8]))}"
                        f"{' ...' if len(runs.columns) > 8 else ''}")
    flagged = flagged_mask(runs)  # runs of a layout the validator refuses: never a candidate
    for number, row in enumerate(runs.to_dict("records")):
        if flagged[number]:
            continue
        try:
            cfg = config_from_flat(row)
        except ConfigError as e:
            raise DataError(f"runs, row {number}: not a configuration ({e}); a run whose layout "
                            f"is refused is flagged in {FLAG_COLUMN}") from None
        ran.append(cfg)
        done = row.get("status") == "completed" and isinstance(row.get("mfu"), int | float)
        mfu.append(float(row["mfu"]) if done else math.nan)
    if not ran:
        return ran, None
    n = table_len(candidates)
    problems = problem_codes(concat(candidates, flat_table(ran)))
    mine = np.isin(problems[n:], problems[:n])
    measured = np.asarray(mfu)[mine] if ran else np.zeros(0)
    measured = measured[np.isfinite(measured)]
    return ran, float(measured.max()) if len(measured) else None


def _configs(space: Any, scored: pd.DataFrame, picks: Sequence[tuple[int, str, float]]
             ) -> dict[int, TrainingConfig]:
    """The configuration of each pick (a row of ``scored``, its flat configuration), with the
    space's model name and batch, which no column holds."""
    records = scored.iloc[[i for i, _, _ in picks]].to_dict("records")
    return {i: config_from_flat({**row, "name": space.model.name},
                                global_batch_seqs=space.global_batch_seqs)
            for (i, _, _), row in zip(picks, records, strict=True)}


def _listed(scored: pd.DataFrame, candidates: Mapping[int, TrainingConfig],
            picks: Sequence[tuple[int, str, float]], cols: Sequence[str],
            by: str) -> list[tuple[TrainingConfig, str, dict[str, Any]]]:
    """The picks with their scores and ``p_best`` among them, ordered by the column ``by``
    (the predicted MFU or its 10% quantile; stable: ties keep the order they were picked)."""
    rows = scored.iloc[[i for i, _, _ in picks]].reset_index(drop=True)
    odds = p_best(rows)
    order = np.argsort(-np.nan_to_num(rows[by].to_numpy(dtype=float), nan=-np.inf),
                       kind="stable")
    return [(candidates[picks[j][0]], picks[j][1],
             {"value": picks[j][2], **{c: rows[c].iloc[j] for c in cols},
              "p_best": odds[j]}) for j in order]
