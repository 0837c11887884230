"""One answer about memory: the peak memory's interval, ``p_oom`` and the verdict agree.

A learned model answers the memory question twice: its memory regressor gives the peak memory
and an interval that holds ``coverage`` (80%) of held-out runs, its status classifier gives
``p_oom``. Left alone the two can contradict each other (an interval entirely above the GPU's
memory beside a p_oom of 0.19). The rule that makes them one answer reads the interval as what
it claims, a ``coverage`` interval with (1 - coverage) / 2 of the runs beyond each end
(10% at 80%), on the device's peak (the reserved peak plus the CUDA context):

- the interval's high end within the GPU's memory says at most 10% of such runs need more,
  so it requires ``p_oom`` <= 0.1;
- its low end beyond the GPU's memory says at least 90% do: ``p_oom`` >= 0.9;
- the verdict follows ``p_oom`` alone: a configuration fits where ``p_oom < 0.5``
  (``Prediction.fits``), and its most likely status is ``oom`` exactly where it does not
  (else the likelier of completed and fail).

Where they disagree, ``p_oom`` stands and the interval stretches to the GPU's memory (its high
end up to the capacity where ``p_oom`` > 0.1, its low end down to it where ``p_oom`` < 0.9):
the interval's coverage is measured on completed runs only (a run out of memory has no
measured peak), so near the capacity it is the less reliable of the two, while ``p_oom``'s
reliability table counts the runs that ran out (``python benchmarks/accuracy.py``). Held out
on the Playbook, the runs whose interval lay within the capacity beside a higher p_oom ran
out of memory more often than the interval's 10% allows (docs/intervals.md). Without an
interval (the analytic model alone) ``p_oom`` comes from the memory estimate itself and only
the verdict rule applies. ``python benchmarks/oom_agreement.py`` counts the configurations of a
random sample that break the rule before and after.
"""

from __future__ import annotations

import numpy as np

TAIL = 0.1
"""The share of runs beyond each end of the 80% memory interval: the most ``p_oom`` may be
where the interval lies within the capacity (and 1 - it the least, beyond)."""


STATUS_NAMES = np.array(["oom", "fail", "completed"], dtype=object)
"""The verdicts as an object array: indexing it by a code per row gives the status column."""


_PAST = 1e-6
"""GiB (1 KiB) by which a stretched end passes the capacity, so that it lies on the other side
whatever the rounding of adding the CUDA context back."""


def disagreements(
    columns: dict[str, np.ndarray], context_gib: np.ndarray, tail: float = TAIL
) -> np.ndarray:
    """Per configuration, whether :func:`agree`'s rule fails (module doc): the columns of
    :func:`surrogate.prediction.scoring.score` and the CUDA context, GiB."""
    p_oom = np.asarray(columns["p_oom"], dtype=np.float64)
    lo, hi, cap = _device_interval(columns, context_gib)
    status = np.asarray(columns["pred_status"], dtype=object)
    bad: np.ndarray = (
        ((hi <= cap) & (p_oom > tail))
        | ((lo > cap) & (p_oom < 1 - tail))
        | ((p_oom >= 0.5) != (status == "oom"))
    )
    return bad


def agree(
    columns: dict[str, np.ndarray], context_gib: np.ndarray, tail: float = TAIL
) -> dict[str, np.ndarray]:
    """``columns`` with the memory interval stretched to the capacity where ``p_oom`` says
    the other side is more likely than ``tail``, and the status held to ``p_oom`` (module
    doc); ``p_completed`` and ``p_fail`` adjusted to sum to one with it."""
    p_oom = np.asarray(columns["p_oom"], dtype=np.float64)
    lo, hi, cap = _device_interval(columns, context_gib)
    reserved_cap = cap - context_gib  # the reserved peak that fills the GPU
    mem_hi = np.where(
        (hi <= cap) & (p_oom > tail), reserved_cap + _PAST, columns["pred_peak_mem_reserved_hi_gib"]
    )
    mem_lo = np.where(
        (lo > cap) & (p_oom < 1 - tail),
        reserved_cap - _PAST,
        columns["pred_peak_mem_reserved_lo_gib"],
    )
    p_fail = np.asarray(columns["p_fail"], dtype=np.float64)
    p_fail = np.where(np.isnan(p_fail), p_fail, np.minimum(p_fail, 1.0 - p_oom))
    fail_or_none = np.nan_to_num(p_fail)
    p_done = 1.0 - p_oom - fail_or_none
    # codes into STATUS_NAMES: one shared string object per status, not one per row
    code = np.where(p_oom >= 0.5, 0, np.where(fail_or_none > p_done, 1, 2))
    return {
        **columns,
        "p_fail": p_fail,
        "p_completed": p_done,
        "pred_peak_mem_reserved_lo_gib": mem_lo,
        "pred_peak_mem_reserved_hi_gib": mem_hi,
        "pred_status": STATUS_NAMES[code],
    }


def _device_interval(
    columns: dict[str, np.ndarray], context_gib: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The memory interval on the device (reserved plus context) and the capacity, GiB; an
    interval that is not there (NaN) bounds nothing."""
    lo = np.asarray(columns["pred_peak_mem_reserved_lo_gib"], dtype=np.float64) + context_gib
    hi = np.asarray(columns["pred_peak_mem_reserved_hi_gib"], dtype=np.float64) + context_gib
    cap = np.asarray(columns["capacity_gib"], dtype=np.float64)
    return lo, hi, cap
