"""Active learning: propose the next real runs, then score them against the model that chose them.

The loop (``surrogate propose`` -> run -> ``surrogate ingest`` -> ``surrogate score-round`` ->
``surrogate train``):

1. :func:`select` picks k candidates by acquisition value with a diversity penalty:

   - *expected improvement* (Jones et al. 1998) of the MFU over the best measured so far (or the
     best predicted, before any run), with the learned 80% interval read as a normal
     distribution (sigma = (hi - lo) / (2 x 1.2816)), times the probability the run completes;
   - *OOM boundary*: a share of the slots goes to layouts whose p_oom is most uncertain
     (4 p (1 - p), highest at p = 0.5), weighted by their predicted MFU, so the boundary is
     learned where it matters;
   - *diversity*: each value is multiplied by 1 - exp(-d^2 / 2), d the distance (in doublings
     of the parallel degrees, micro-batch and nodes, and steps of ZeRO/recompute) to the nearest
     layout already picked or run, so the k picks are not near-copies.

2. :func:`write_round` writes ``proposals.csv``, ``logs/<name>/`` launch files (torchtitan TOML,
   torchrun, sbatch: :mod:`surrogate.launch`) and ``round.json`` (what, why, by which model:
   its ``data_hash``, and the goal). It refuses to overwrite a round.

3. :func:`score_round`: the round's ingested runs against the proposing model's predictions
   (prospective accuracy) and the best MFU found so far; :func:`log_round` sends them to
   MLflow, one experiment for the loop and one run per round, metrics stepped by round.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.config import RECOMPUTE_MODES, TrainingConfig, config_from_flat, config_to_flat
from surrogate.errors import ConfigError, DataError
from surrogate.space import layout_key, layout_label

if TYPE_CHECKING:
    import pandas as pd

    from surrogate.learned import SurrogateModel

ROUND_FILE = "round.json"
PROPOSALS_FILE = "proposals.csv"
LOGS_DIR = "logs"
EXPERIMENT = "surrogate-active-learning"
DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"
"""The same default as ``training/tracking.py``: ``$MLFLOW_TRACKING_URI`` wins."""
_Z80 = 1.2815515655446004  # standard normal quantile of 0.9: an 80% interval is mu +- 1.28 sigma


@dataclass(frozen=True, kw_only=True)
class Acquisition:
    """How :func:`select` values candidates."""

    boundary_frac: float = 0.25
    """Share of the k slots for layouts near the OOM boundary."""
    diversity_scale: float = 1.0
    """Length scale of the diversity penalty, in doublings (0 disables it)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.boundary_frac <= 1.0:
            raise ConfigError(f"boundary_frac must be in [0, 1], got {self.boundary_frac}")
        if self.diversity_scale < 0:
            raise ConfigError(f"diversity_scale must be >= 0, got {self.diversity_scale}")


def _phi(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return out


def _cdf(z: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    out: np.ndarray = np.asarray(ndtr(z), dtype=float)
    return out


def expected_improvement(scored: pd.DataFrame, best: float) -> np.ndarray:
    """EI of each row's MFU over ``best``, times its probability of completing."""
    mu = scored["pred_mfu"].to_numpy(dtype=float)
    lo = scored["pred_mfu_lo"].to_numpy(dtype=float)
    hi = scored["pred_mfu_hi"].to_numpy(dtype=float)
    sigma = np.where(np.isfinite(hi - lo), (hi - lo) / (2 * _Z80), 0.0)
    sigma = np.maximum(sigma, 1e-4)
    z = (mu - best) / sigma
    ei = sigma * _phi(z) + (mu - best) * _cdf(z)
    p_ok = scored["p_completed"].to_numpy(dtype=float)
    return np.asarray(np.maximum(ei, 0.0) * np.nan_to_num(p_ok, nan=1.0))


def boundary_value(scored: pd.DataFrame) -> np.ndarray:
    """4 p (1 - p) of p_oom (1 at the boundary), times MFU relative to the best predicted."""
    p = scored["p_oom"].to_numpy(dtype=float)
    mu = scored["pred_mfu"].to_numpy(dtype=float)
    top = float(np.nanmax(mu)) if len(mu) else 1.0
    return np.asarray(4 * p * (1 - p) * mu / max(top, 1e-9))


def layout_vector(cfg: TrainingConfig) -> np.ndarray:
    """Coordinates for the diversity distance: log2 of degrees, micro-batch, accumulation and
    nodes; ZeRO stage and recompute mode in steps; sequence parallelism 0/1."""
    lay = cfg.layout
    logs = [lay.dp, lay.tp, lay.pp, lay.cp, lay.ep, lay.vpp, lay.mbs, lay.grad_accum,
            cfg.cluster.num_nodes]
    return np.array([*np.log2(logs), lay.zero_stage, RECOMPUTE_MODES.index(lay.recompute),
                     float(lay.sequence_parallel)])


def select(
    scored: pd.DataFrame,
    configs: Sequence[TrainingConfig],
    k: int,
    *,
    best_measured: float | None = None,
    already_run: Iterable[TrainingConfig] = (),
    acquisition: Acquisition | None = None,
) -> list[tuple[int, str, float]]:
    """Pick ``k`` rows of ``scored`` (aligned with ``configs``): ``(row, reason, value)``.

    Rows whose layout was already run are never picked. ``best_measured`` is the incumbent of
    expected improvement (None: the best predicted MFU among rows likely to complete)."""
    acq = acquisition or Acquisition()
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k}")
    n = len(configs)
    if n == 0:
        return []
    ran = list(already_run)
    done_keys = {layout_key(c) for c in ran}
    free = np.array([layout_key(c) not in done_keys for c in configs])
    if best_measured is None:
        likely = scored["p_completed"].to_numpy(dtype=float) >= 0.5
        mu = scored["pred_mfu"].to_numpy(dtype=float)
        best_measured = float(np.nanmax(mu[likely])) if likely.any() else 0.0
    values = {"expected-improvement": expected_improvement(scored, best_measured),
              "oom-boundary": boundary_value(scored)}
    n_boundary = round(k * acq.boundary_frac)
    plan = ["expected-improvement"] * (k - n_boundary) + ["oom-boundary"] * n_boundary
    vectors = np.stack([layout_vector(c) for c in configs])
    picked_vecs = [layout_vector(c) for c in ran]
    out: list[tuple[int, str, float]] = []
    for reason in plan:
        if not free.any():
            break
        value = np.nan_to_num(values[reason], nan=0.0)
        if picked_vecs and acq.diversity_scale > 0:
            d2 = np.min([np.sum((vectors - v) ** 2, axis=1) for v in picked_vecs], axis=0)
            value = value * (1 - np.exp(-d2 / (2 * acq.diversity_scale**2)))
        value = np.where(free, value, -np.inf)
        i = int(np.argmax(value))
        out.append((i, reason, float(values[reason][i])))
        free[i] = False
        picked_vecs.append(vectors[i])
    return out


# ------------------------------------------------------------------ round files
def model_identity(model: SurrogateModel | None, where: str) -> dict[str, Any]:
    """What identifies the proposing model in ``round.json``."""
    if model is None:
        return {"path": None, "kind": "analytic", "data_hash": None}
    return {"path": where, "kind": "learned", "data_hash": model.data_hash_,
            "n_train": model.n_train_}


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

    from surrogate.launch import write_launch_files

    final = Path(round_dir)
    if (final / ROUND_FILE).exists() or (final.exists() and any(final.iterdir())):
        raise ConfigError(
            f"round directory {str(final)!r} already exists and is not empty: a round is never "
            "overwritten; give a new --round directory")
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
            clean = {k: _plain(v) for k, v in scores.items()}
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
                            "diversity_scale": acquisition.diversity_scale},
            "proposals": records,
        }
        (tmp / ROUND_FILE).write_text(json.dumps(record, indent=2, default=_plain))
        if final.exists():
            final.rmdir()  # empty (checked above)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def read_round(round_dir: str | Path) -> dict[str, Any]:
    path = Path(round_dir) / ROUND_FILE
    if not path.exists():
        raise DataError(f"{str(round_dir)!r} is not a round directory ({ROUND_FILE} missing)")
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e.msg})") from None
    return data


# ------------------------------------------------------------------ scoring a round
def load_round_model(record: Mapping[str, Any]) -> SurrogateModel | None:
    """The model that proposed a round; DataError if it has been replaced since."""
    from surrogate.prediction import resolve_model

    info = record["model"]
    if info.get("kind") == "analytic":
        return None
    model = resolve_model(info["path"])
    if model is None or model.data_hash_ != info["data_hash"]:
        raise DataError(
            f"the model at {info['path']!r} is not the one that proposed round {record['round']} "
            f"(data_hash {info['data_hash'][:12]}...): score a round before retraining over it, "
            "or pass the proposing model's directory")
    return model


def score_round(
    record: Mapping[str, Any], runs: pd.DataFrame, *, model: SurrogateModel | None
) -> tuple[dict[str, float], pd.DataFrame]:
    """Prospective accuracy of a round: its proposals matched to measured ``runs`` (a sweep
    table) by run name (the first part of ``run_id``) or by configuration.

    Returns metrics (proposed, measured, status accuracy, MFU error of completed runs, interval
    coverage, the round's best MFU and the best MFU of ``runs`` so far) and the matched rows."""
    from surrogate.search import score_configs

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
        return metrics, frame
    configs = [config_from_flat(r) for r in frame.to_dict("records")]
    pred = score_configs(configs, model=model)
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


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def log_round(record: Mapping[str, Any], metrics: Mapping[str, float], *,
              experiment: str = EXPERIMENT) -> str:
    """Log one round to MLflow (one run per round, metrics at step = round); the run id."""
    import mlflow

    uri = tracking_uri()
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(experiment) is None:
        mlflow.create_experiment(experiment)
    mlflow.set_experiment(experiment)
    step = int(record["round"])
    with mlflow.start_run(run_name=f"round-{step:02d}") as run:
        mlflow.set_tag("proposing_model_data_hash", str(record["model"].get("data_hash")))
        mlflow.log_params({"round": step, "k": len(record["proposals"]),
                           **{f"goal.{k}": v for k, v in record["goal"].items()}})
        finite = {k: float(v) for k, v in metrics.items() if v == v and abs(v) != math.inf}
        mlflow.log_metrics(finite | {"round": float(step)}, step=step)
        mlflow.log_dict(dict(record), "round.json")
        return str(run.info.run_id)


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
) -> Path:
    """Propose ``k`` runs in ``space`` (a :class:`~surrogate.space.LayoutSpace`, enumerated
    whole) and write the round. ``runs``: the sweep table so far (its layouts are not
    proposed again; its best completed MFU is the incumbent of expected improvement). Only
    layouts that can be written as torchtitan runs are proposed."""
    from surrogate.launch import launch_problem
    from surrogate.prediction import resolve_model
    from surrogate.search import Limits, score_configs

    acq = acquisition or Acquisition()
    limits = limits or Limits(max_p_oom=1.0)
    learned = resolve_model(model)
    candidates = [c for c in space.enumerate() if launch_problem(c) is None]
    if not candidates:
        raise ConfigError("the space holds no layout that can be launched with torchtitan "
                          "(allow --framework torchtitan and zero stages 0, 2 or 3)")
    scored = score_configs(candidates, model=learned, limits=limits)
    keep = scored["feasible"].to_numpy()
    candidates = [c for c, ok in zip(candidates, keep, strict=True) if ok]
    scored = scored[keep].reset_index(drop=True)
    ran: list[TrainingConfig] = []
    best = None
    if runs is not None and len(runs):
        for row in runs.to_dict("records"):
            try:
                ran.append(config_from_flat(row))
            except ConfigError:
                continue
        done = runs[runs["status"] == "completed"]
        best = float(done["mfu"].max()) if len(done) else None
    picks = select(scored, candidates, k, best_measured=best, already_run=ran, acquisition=acq)
    cols = ("pred_mfu", "pred_mfu_lo", "pred_mfu_hi", "pred_tokens_per_s_per_gpu",
            "pred_step_time_s", "pred_peak_mem_gib", "p_oom", "p_fail")
    chosen = [(candidates[i], reason, {"value": value, **{c: scored[c].iloc[i] for c in cols}})
              for i, reason, value in picks]
    goal = {"model": space.model.name, "gpu": space.gpu, "gpus_per_node": space.gpus_per_node,
            "node_counts": list(space.node_counts), "seq_len": space.model.seq_len,
            "global_batch_seqs": space.global_batch_seqs, "objective": "max MFU",
            "max_p_oom": limits.max_p_oom, "memory_margin_frac": limits.memory_margin_frac,
            "candidates": len(candidates), "best_measured_mfu": best}
    where = str(model) if not isinstance(model, str) or model != "default" else "default"
    return write_round(round_dir, chosen, model_info=model_identity(learned, where), goal=goal,
                       acquisition=acq, round_number=round_number, steps=steps)
