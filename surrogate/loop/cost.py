"""What a round costs: the GPU-hours of each run at its predicted step time, the budget the
picks keep within, and the cost ``round.json`` records (GPU-hours, the sbatch time limit,
expected OOMs and other failures, what the budget left out)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.errors import ConfigError
from surrogate.io.jsonsafe import json_safe
from surrogate.loop.launch import SBATCH_TIME_LIMIT

if TYPE_CHECKING:
    import pandas as pd

MAX_LEFT_OUT_LISTED = 10
"""Layouts a round lists by name among those its budget left out (all are counted)."""


def check_budget(budget_gpu_hours: float | None, flag: str = "budget_gpu_hours") -> None:
    """ConfigError unless the budget is None or a finite number of GPU-hours above 0."""
    if budget_gpu_hours is None:
        return
    if (
        isinstance(budget_gpu_hours, bool)
        or not isinstance(budget_gpu_hours, int | float)
        or not math.isfinite(budget_gpu_hours)
        or budget_gpu_hours <= 0
    ):
        raise ConfigError(f"{flag} must be a number of GPU-hours above 0, got {budget_gpu_hours!r}")


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
        "runs": len(picked),
        "gpus": int(gpus.sum()),
        "steps_per_run": steps,
        "steps_from": "--steps, written as [training] steps in each run's config.toml",
        "gpu_hours": float(np.nansum(hours)),
        "runs_without_step_time": int(np.isnan(hours).sum()),
        "sbatch_time_limit": SBATCH_TIME_LIMIT,
        "gpu_hours_at_time_limit": float(gpus.sum() * limit_h),
        "runs_past_time_limit": int((run_hours > limit_h).sum()),
        "expected_ooms": float(picked["p_oom"].to_numpy(dtype=float).sum()),
        "expected_other_failures": (float(p_fail.sum()) if np.isfinite(p_fail).all() else None),
    }


def budget_record(
    scored: pd.DataFrame, skipped: list[int], budget_gpu_hours: float | None
) -> dict[str, Any]:
    """The budget as ``round.json`` records it beside the cost: the budget, how many layouts it
    left out (rows ``skipped`` of ``scored``, with ``gpu_hours``) and the first
    :data:`MAX_LEFT_OUT_LISTED` of them by name."""
    left_out = scored.iloc[skipped]
    return {
        "budget_gpu_hours": budget_gpu_hours,
        "left_out_over_budget": len(skipped),
        "left_out": [
            {
                "layout": str(r["layout"]),
                "num_nodes": int(r["num_nodes"]),
                "pred_mfu": json_safe(r["pred_mfu"]),
                "gpu_hours": json_safe(r["gpu_hours"]),
            }
            for r in left_out.head(MAX_LEFT_OUT_LISTED).to_dict("records")
        ],
    }
