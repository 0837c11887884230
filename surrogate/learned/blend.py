"""How the learned corrections meet the physics in a prediction (``surrogate.learned.model``
module doc): the throughput factor shrunk toward the analytic answer by the domain weight and
bounded by 100% MFU, its interval widened off the domain and holding the analytic answer,
the memory interval likewise, and the width held-out frameworks, GPUs and clusters measured
for one never seen. Arrays in, arrays out: one value per configuration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.run import mfu_bound
from surrogate.learned.boosters import STATUS_CLASSES, status_proba, take_rows
from surrogate.learned.compiled_trees import CompiledForest

if TYPE_CHECKING:
    import lightgbm as lgb
    import pandas as pd

CERTAIN_P_OOM = 0.99
"""An analytic ``p_oom`` from which the status is the physics' (``surrogate.learned.model``
module doc). With each framework's fitted memory error and margin
(``surrogate.analytic.memory.oom_probability``) it is reached where the memory estimate is
1.54 x the capacity for nanotron pp-fix, 1.27 x for pre-pp-fix. Chosen as a certainty, not by
its effect: under the protocols of ``benchmarks/accuracy.py`` 0.9 and 0.99 give the same
verdicts."""
MAX_WIDEN = 4.0
"""The most doublings off the domain an interval widens by (a factor 1 + distance)."""


def shrunk_status(
    booster: lgb.Booster,
    X: pd.DataFrame,
    p_oom: np.ndarray,
    w: np.ndarray,
    fail_rate: float | None,
    status_classes: Sequence[str],
    *,
    compiled: CompiledForest | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The probabilities of completed, oom and fail: the status classifier's (``booster``, of
    the classes ``status_classes``) weighed by the domain weight ``w`` against the physics'
    ``p_oom``. Where ``w`` is 0 (far off the domain: a search of new scales) the classifier is
    not run; where the physics is certain of an OOM (:data:`CERTAIN_P_OOM`) the status is its
    own."""
    w_status = np.where(p_oom >= CERTAIN_P_OOM, 0.0, w)
    judged = np.flatnonzero(w_status > 0)
    classes = [STATUS_CLASSES.index(name) for name in status_classes]
    p = np.zeros((len(X), len(STATUS_CLASSES)))
    if len(judged):
        probs = status_proba(
            booster, take_rows(X, judged), p_oom[judged], fail_rate, classes, compiled=compiled
        )
        for j, k in enumerate(classes):
            p[judged, k] = probs[:, j]
    p_oom_shrunk = w_status * p[:, 1] + (1 - w_status) * p_oom
    p_fail = w_status * p[:, 2]
    p_done = np.clip(1.0 - p_oom_shrunk - p_fail, 0.0, 1.0)
    return p_done, p_oom_shrunk, p_fail


def widened(half: np.ndarray, widen: np.ndarray, cap: float | None) -> np.ndarray:
    """A log half-width ``half`` widened by ``widen`` off the domain, but no wider than the
    transfer width ``cap`` (the half-width an unseen framework or cluster gets,
    :meth:`surrogate.analytic.params.ParameterSets.transfer_half_widths`) unless it was
    already: beyond the data along one axis the answer is no further off than on a framework
    or cluster never seen. ``cap`` None: widened without bound."""
    out = np.asarray(half * widen, dtype=np.float64)
    return out if cap is None else np.asarray(np.minimum(out, np.maximum(half, cap)))


def mfu_bounds(
    f: np.ndarray,
    q_lo: np.ndarray,
    q_hi: np.ndarray,
    center: np.ndarray,
    shared: np.ndarray,
    widen: np.ndarray,
    cap: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The log-factor interval: the conformalised quantiles ``q_lo``, ``q_hi`` around the
    learned factor ``f``; where the answer is ``shared`` with the physics (off the domain, or a
    framework whose runs bear out only a share), widened around the shrunk ``center``
    (:func:`widened`, up to ``cap``) and holding the analytic answer (0) and the unshrunk
    interval, but, off the domain (``widen`` over 1) with a ``cap``, reaching no further beyond
    the shrunk and the analytic answers than the cap (or the conformal half-width, where
    wider): there the unshrunk correction is the trees' extrapolation, which no held-out error
    measured, while the cap is the error measured on frameworks and clusters never seen.
    Inside the domain, a framework's unshrunk interval is its conformal one, kept whole."""
    q_lo, q_hi = np.minimum(q_lo, f), np.maximum(q_hi, f)
    lo = np.minimum(np.minimum(center - widened(f - q_lo, widen, cap), q_lo), 0.0)
    hi = np.maximum(np.maximum(center + widened(q_hi - f, widen, cap), q_hi), 0.0)
    if cap is not None:  # off the domain (widened), not a framework's share inside it
        beyond = widen > 1.0
        lo = np.where(
            beyond, np.maximum(lo, np.minimum(center, 0.0) - np.maximum(f - q_lo, cap)), lo
        )
        hi = np.where(
            beyond, np.minimum(hi, np.maximum(center, 0.0) + np.maximum(q_hi - f, cap)), hi
        )
    return np.where(shared, lo, q_lo), np.where(shared, hi, q_hi)


def bounded_factor(center: np.ndarray, mfu: np.ndarray) -> np.ndarray:
    """exp(``center``), the correction of the analytic ``mfu``. The correction is a ratio
    learned from runs; the physics bounds it: no run passes 100% MFU, so the factor stops where
    the analytic MFU times it reaches 1 (an analytic MFU above 1 is refused by
    surrogate.prediction.predict, not hidden here)."""
    bound = np.where(mfu > 0, 1.0 / np.maximum(mfu, 1e-300), np.inf)
    return np.asarray(np.where(mfu <= 1, np.minimum(np.exp(center), bound), np.exp(center)))


def memory_half_width(
    q_mem: np.ndarray,
    q_unseen_shape: float,
    unseen_shape: Any,
    widen: np.ndarray,
    cap: float | None = None,
) -> np.ndarray:
    """The memory interval's half-width in log memory: the conformal one, never narrower for
    a model shape unseen than for one seen, widened off the domain like the throughput's
    (:func:`widened`, up to ``cap``)."""
    if unseen_shape is not None and np.isfinite(q_unseen_shape):
        q_mem = np.where(unseen_shape, np.maximum(q_mem, q_unseen_shape), q_mem)
    return widened(np.asarray(q_mem, dtype=np.float64), widen, cap)


def memory_bounds(
    mem: np.ndarray, half: np.ndarray, analytic: np.ndarray, outside: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The memory ``mem``, and its interval of log half-width ``half``, holding the
    ``analytic`` answer where the configuration is ``outside`` the domain."""
    lo, hi = mem * np.exp(-half), mem * np.exp(half)
    return (
        mem,
        np.where(outside, np.minimum(lo, analytic), lo),
        np.where(outside, np.maximum(hi, analytic), hi),
    )


def unseen_widths(
    lo: np.ndarray,
    hi: np.ndarray,
    half: np.ndarray,
    center: np.ndarray,
    distance: np.ndarray,
    transfer: tuple[float, float] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For an unseen framework, GPU or cluster (an infinite ``distance``), the widths the
    held-out ones measured (``transfer``: log MFU, log memory) around the shrunk answer."""
    unseen = ~np.isfinite(distance)
    if transfer is not None and unseen.any():
        lo = np.where(unseen, np.minimum(center, 0.0) - transfer[0], lo)
        hi = np.where(unseen, np.maximum(center, 0.0) + transfer[0], hi)
        half = np.where(unseen, transfer[1], half)
    return lo, hi, half


def no_predictions() -> dict[str, np.ndarray]:
    """The learned model's columns (:func:`prediction_columns` and the domain's) for no
    configuration: empty arrays."""
    texts = ("pred_status", "extrapolation")
    names = (
        "p_completed",
        "p_oom",
        "p_fail",
        "pred_mfu",
        "pred_mfu_lo",
        "pred_mfu_hi",
        "pred_tokens_per_s_per_gpu",
        "pred_step_time_s",
        "pred_peak_mem_reserved_gib",
        "pred_peak_mem_reserved_lo_gib",
        "pred_peak_mem_reserved_hi_gib",
        "domain_weight",
        "correction_share",
    )
    return {**{k: np.zeros(0) for k in names}, **{k: np.zeros(0, dtype=object) for k in texts}}


def prediction_columns(
    out: dict[str, np.ndarray],
    status: tuple[np.ndarray, ...],
    factor: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    memory: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> dict[str, Any]:
    """The predicted columns from the analytic outputs ``out``, the status probabilities
    (completed, oom, fail), the throughput factor and its log interval, and the memory with
    its interval (bytes)."""
    p_done, p_oom, p_fail = status
    mem, mem_lo, mem_hi = memory
    stacked = np.stack([p_done, p_oom, p_fail], axis=1)
    return {
        "p_completed": p_done,
        "p_oom": p_oom,
        "p_fail": p_fail,
        "pred_status": np.array(STATUS_CLASSES, dtype=object)[stacked.argmax(axis=1)],
        "pred_mfu": out["mfu"] * factor,
        "pred_mfu_lo": np.minimum(out["mfu"] * np.exp(lo), out["mfu"] * factor),
        "pred_mfu_hi": np.minimum(
            out["mfu"] * np.exp(hi), mfu_bound(out.get("mfu_ceiling", 1.0), out["mfu"] * factor)
        ),
        "pred_tokens_per_s_per_gpu": out["tokens_per_s_per_gpu"] * factor,
        "pred_step_time_s": out["step_time_s"] / factor,
        "pred_peak_mem_reserved_gib": mem / 2**30,
        "pred_peak_mem_reserved_lo_gib": mem_lo / 2**30,
        "pred_peak_mem_reserved_hi_gib": mem_hi / 2**30,
    }


def with_network_spread(columns: dict[str, Any], out: dict[str, np.ndarray]) -> dict[str, Any]:
    """The predicted ``columns`` with the MFU interval widened by the network between jobs
    where the configuration's own network is unknown: its log half-widths and the analytic
    model's (``net_spread_lo``, ``net_spread_hi`` of ``out``: how far the cluster's 10th and
    90th percentile of all-reduce bandwidth move the MFU, ``surrogate.analytic.run.
    network_widening``) added in quadrature, two independent sources of error, each of 80%;
    still under the hardware's ceiling. Unchanged where both are 0 (a known network, one
    node, a profile without a recorded spread)."""
    if "net_spread_lo" not in out:
        return columns
    down, up = out["net_spread_lo"], out["net_spread_hi"]
    rows = np.flatnonzero((down > 0) | (up > 0))
    if not len(rows):
        return columns
    pred = columns["pred_mfu"][rows]
    with np.errstate(divide="ignore", invalid="ignore"):
        below = np.maximum(np.log(pred / columns["pred_mfu_lo"][rows]), 0.0)
        above = np.maximum(np.log(columns["pred_mfu_hi"][rows] / pred), 0.0)
    lo = np.array(columns["pred_mfu_lo"], dtype=np.float64)
    hi = np.array(columns["pred_mfu_hi"], dtype=np.float64)
    new_lo = pred * np.exp(-np.hypot(below, down[rows]))
    new_hi = pred * np.exp(np.hypot(above, up[rows]))
    lo[rows] = np.where(np.isfinite(new_lo), new_lo, lo[rows])
    ceiling = mfu_bound(out.get("mfu_ceiling", 1.0), columns["pred_mfu"])[rows]
    hi[rows] = np.where(np.isfinite(new_hi), np.minimum(new_hi, ceiling), hi[rows])
    return {**columns, "pred_mfu_lo": lo, "pred_mfu_hi": hi}
