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

import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.config.frameworks import get_framework
from surrogate.config.table import FlatTable, concat, flat_table, table_len, take
from surrogate.config.training import TrainingConfig, config_from_flat, config_to_flat
from surrogate.errors import ConfigError, DataError
from surrogate.hardware.network import scaled_profile
from surrogate.io.json_files import read_json
from surrogate.io.jsonsafe import json_safe
from surrogate.io.outputs import check_writable_dir
from surrogate.layouts.best_odds import p_best
from surrogate.layouts.grid import TABLE_LIMIT, space_table
from surrogate.layouts.labels import layout_label
from surrogate.layouts.search import RANK_COLUMNS, Limits, score_configs
from surrogate.layouts.space import layout_key
from surrogate.loop.acquisition import Acquisition, problem_codes, select
from surrogate.loop.launch import LAUNCH_FRAMEWORK, launchable, write_launch_files
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
) -> Path:
    """Write a round directory (module docstring) atomically; ConfigError if it exists.

    ``picks``: per run its configuration, the reason it was picked and its predicted scores."""
    import pandas as pd

    final = check_new_round_dir(round_dir)
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
        (tmp / ROUND_FILE).write_text(json.dumps(json_safe(record), indent=2))
        if final.exists():
            final.rmdir()  # empty (checked above)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
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
    the round over the profile's curve (``surrogate.hardware.network``; None: the curve); the
    round records both and :func:`score_round` scores under them."""
    check_new_round_dir(round_dir)  # before the work, not after it
    if rank not in RANK_COLUMNS:
        raise ConfigError(f"rank must be mean or safe, got {rank!r}")
    for name, value in (("k", k), ("steps", steps), ("round_number", round_number)):
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
    candidates = take(candidates, np.flatnonzero(keep))
    n = table_len(candidates)
    scored = scored[keep].reset_index(drop=True)
    ran, best = _runs_of(runs, candidates)
    report(progress, f"picking {k} of {n:,}", 0, 1)
    picks = select(scored, candidates, k, best_measured=best, already_run=ran, acquisition=acq)
    report(progress, f"picking {k} of {n:,}", 1, 1)
    cols = ("pred_mfu", "pred_mfu_lo", "pred_mfu_hi", "pred_tokens_per_s_per_gpu",
            "pred_step_time_s", "pred_peak_mem_gib", "pred_peak_mem_lo_gib",
            "pred_peak_mem_hi_gib", "pred_device_mem_gib", "p_oom", "p_fail", "extrapolation",
            "correction_share")
    chosen = _listed(scored, _configs(space, scored, picks), picks, cols, RANK_COLUMNS[rank])
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
                       acquisition=acq, round_number=round_number, steps=steps)


def _profile_record(profile: str | Path | None) -> str | None:
    """The profile as the round records it: a file as its absolute path (``score-round`` may
    run elsewhere), a shipped profile by its name."""
    if profile is None:
        return None
    return str(Path(profile).resolve()) if Path(profile).is_file() else str(profile)


def _runs_of(runs: pd.DataFrame | None, candidates: FlatTable,
             ) -> tuple[list[TrainingConfig], float | None]:
    """The configurations of ``runs`` (rows that are not one are skipped) and the best MFU
    completed by a run of the candidates' problem (:func:`problem_codes`; None: no such run):
    the incumbent of expected improvement is not another model's MFU."""
    ran: list[TrainingConfig] = []
    mfu: list[float] = []
    if runs is None or not len(runs):
        return ran, None
    for row in runs.to_dict("records"):
        try:
            cfg = config_from_flat(row)
        except ConfigError:
            continue
        ran.append(cfg)
        done = row.get("status") == "completed" and isinstance(row.get("mfu"), int | float)
        mfu.append(float(row["mfu"]) if done else math.nan)
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
