"""Which candidates the active-learning loop proposes: the acquisition values and the picks.

:func:`select` picks k candidates by acquisition value with a diversity penalty:

- *the best predicted* layout first, before any completed run of the problem
  (``Acquisition.open_with_best``);
- *probability of being the best* (``Acquisition.gain``, the default): each candidate's
  probability of completing with the highest MFU of the layouts not run yet and above the
  best measured so far (or the best predicted, before any run), errors correlated as in
  :mod:`surrogate.layouts.best_odds` (:func:`probability_best`): the runs go where the model
  cannot tell the layouts apart, the close calls, and a layout likely to fail has little of
  it (it is the best only in the draws where it completes); or, with
  ``gain="expected-improvement"``, the expected improvement (Jones et al. 1998) of the MFU over
  the same incumbent, the learned 80% interval read as a normal distribution (sigma =
  (hi - lo) / (2 x 1.2816)), times the probability the run completes;
- *OOM boundary*: a share of the slots goes to layouts whose p_oom is most uncertain
  (4 p (1 - p), highest at p = 0.5), weighted by their predicted MFU, so the boundary is
  learned where it matters;
- *diversity*: each expected-improvement or OOM-boundary value is multiplied by
  1 - exp(-d^2 / 2), d the distance (in doublings of the parallel degrees, micro-batch and
  nodes, and steps of ZeRO/recompute) to the nearest layout of the same problem
  (:func:`problem_codes`) already picked or run, so the k picks are not near-copies; the
  probability of being the best needs none (:data:`SPREAD_BY_DRAWS`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from surrogate.config.framework_traits import RECOMPUTE_MODES
from surrogate.config.table import (
    FlatTable,
    concat,
    distinct_rows,
    flat_table,
    per_group,
    table_len,
)
from surrogate.config.training import MODEL_FIELDS, TrainingConfig
from surrogate.errors import ConfigError
from surrogate.layouts.best_odds import p_best
from surrogate.layouts.degrees import stage_layers
from surrogate.layouts.space import layout_keys

if TYPE_CHECKING:
    import pandas as pd

_Z80 = 1.2815515655446004  # standard normal quantile of 0.9: an 80% interval is mu +- 1.28 sigma
Gain = Literal["expected-improvement", "probability-best"]
GAINS: tuple[str, ...] = ("expected-improvement", "probability-best")
"""How the slots that look for the best can value a candidate (``Acquisition.gain``)."""
SPREAD_BY_DRAWS = frozenset({"probability-best"})
"""Slots without the diversity penalty: their odds are drawn with correlated errors, which
already share a layout's chance with its near neighbours (two near copies each get about half
of it), and a penalty on top would count that twice. On the Playbook replay (seeds 0 and 1)
without it: 24 and 23 cells of 27 within 3 runs, 2 and 2 behind the ranking; with it: 23 and
23, 2 and 3."""
SHORTLIST = 256
"""Most candidates :func:`probability_best` draws (of the highest upper end x p_completed): the
draws' cost grows faster than the square of their count, and a layout whose interval ends
below hundreds of others has no odds of being the best."""


@dataclass(frozen=True, kw_only=True)
class Acquisition:
    """How :func:`select` values candidates."""

    boundary_frac: float = 0.25
    """Share of the k slots for layouts near the OOM boundary."""
    diversity_scale: float = 1.0
    """Length scale of the diversity penalty, in doublings (0 disables it); the
    probability-best slots have none (:data:`SPREAD_BY_DRAWS`)."""
    gain: Gain = "probability-best"
    """How the slots that look for the best value a candidate: its probability of being the
    best of the candidates and above the incumbent (:func:`probability_best`: errors
    correlated as :mod:`surrogate.layouts.best_odds` models them), or its expected
    improvement. On the Playbook replay (``benchmarks/active_replay.py``, seed 0) the first
    finds a layout within 2% of a cell's best within 3 runs in 25 cells of 27 and lets 3 of
    its 68 runs fail (4.4%), expected improvement 21 and 5 of 72 (6.9%)."""
    open_with_best: bool = True
    """Before any completed run of the problem, the first pick is the layout the model ranks
    best (predicted MFU x p_completed: what a user would run first), the others explore. On
    the Playbook replay (``benchmarks/active_replay.py``, three seeds) it leaves the loop more
    than one run behind its initial ranking in 3 cell-replays of 81 instead of 8, the share
    found within 8 runs unchanged."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.boundary_frac <= 1.0:
            raise ConfigError(f"boundary_frac must be in [0, 1], got {self.boundary_frac}")
        if self.diversity_scale < 0:
            raise ConfigError(f"diversity_scale must be >= 0, got {self.diversity_scale}")
        if self.gain not in GAINS:
            raise ConfigError(f"gain must be one of {', '.join(GAINS)}, got {self.gain!r}")


def expected_improvement(scored: pd.DataFrame, best: float) -> np.ndarray:
    """EI of each row's MFU over ``best``, times its probability of completing."""
    from scipy.stats import norm

    mu = scored["pred_mfu"].to_numpy(dtype=float)
    lo = scored["pred_mfu_lo"].to_numpy(dtype=float)
    hi = scored["pred_mfu_hi"].to_numpy(dtype=float)
    sigma = np.where(np.isfinite(hi - lo), (hi - lo) / (2 * _Z80), 0.0)
    sigma = np.maximum(sigma, 1e-4)
    z = (mu - best) / sigma
    ei = sigma * norm.pdf(z) + (mu - best) * norm.cdf(z)
    p_ok = scored["p_completed"].to_numpy(dtype=float)
    return np.asarray(np.maximum(ei, 0.0) * np.nan_to_num(p_ok, nan=1.0))


def probability_best(
    scored: pd.DataFrame, best: float | None, free: np.ndarray | None = None
) -> np.ndarray:
    """Each row's probability of completing with the highest MFU of the rows and above
    ``best`` (:func:`surrogate.layouts.best_odds.p_best`), drawn over the :data:`SHORTLIST`
    rows of the highest upper end x p_completed (0 elsewhere). Where no row has odds above
    ``best``, a millionth of the odds without it, so that the picks still follow them;
    without intervals (the analytic model alone), the predicted MFU x p_completed.

    ``free``: per row, whether it is still to run (None: every row). A row already run is
    not drawn and gets 0: its outcome is measured, not predicted (it is in ``best`` if it
    completed), and drawn from its prediction it would take the odds of the layouts that
    beat it only in the draws where it came out high."""
    mu = scored["pred_mfu"].to_numpy(dtype=float)
    p_ok = np.nan_to_num(scored["p_completed"].to_numpy(dtype=float), nan=1.0)
    hi = scored["pred_mfu_hi"].to_numpy(dtype=float)
    upper = np.nan_to_num(np.where(np.isfinite(hi), hi, mu) * p_ok, nan=-np.inf)
    drawn = np.arange(len(scored)) if free is None else np.flatnonzero(free)
    rows = drawn[np.argsort(-upper[drawn], kind="stable")][:SHORTLIST]
    shortlist = scored.iloc[rows]
    odds = p_best(shortlist, incumbent=best)
    if not np.isfinite(odds).all():
        return np.asarray(np.nan_to_num(mu * p_ok, nan=0.0))
    if not odds.sum() > 0:
        odds = 1e-6 * p_best(shortlist)
    out = np.zeros(len(scored))
    out[rows] = odds
    return out


def boundary_value(scored: pd.DataFrame) -> np.ndarray:
    """4 p (1 - p) of p_oom (1 at the boundary), times MFU relative to the best predicted."""
    p = scored["p_oom"].to_numpy(dtype=float)
    mu = scored["pred_mfu"].to_numpy(dtype=float)
    top = float(np.nanmax(mu)) if len(mu) else 1.0
    return np.asarray(4 * p * (1 - p) * mu / max(top, 1e-9))


_LOGGED: tuple[str, ...] = ("dp", "tp", "pp", "cp", "ep", "vpp", "mbs", "grad_accum", "num_nodes")
"""The counts a layout's coordinates hold as doublings (log2)."""


def layout_vectors(table: FlatTable) -> np.ndarray:
    """Per configuration of a flat table, coordinates for the diversity distance: log2 of
    degrees, micro-batch, accumulation and nodes; ZeRO stage and recompute mode in steps (full
    recomputation of a share s of each stage's layers, its checkpointed layers over the
    stage's (:func:`~surrogate.layouts.degrees.stage_layers`), 1 - s short of every layer);
    sequence parallelism 0/1."""
    n = table_len(table)
    logs = np.log2(np.stack([np.asarray(table[k], dtype=np.float64) for k in _LOGGED], axis=1))
    checkpointed = np.asarray(table["recompute_layers"], dtype=np.int64)
    share = np.ones(n)
    rows = np.flatnonzero(checkpointed > 0)
    if rows.size:
        codes, layers = per_group(
            [table[k][rows] for k in ("framework", "num_layers", "pp", "vpp")], stage_layers
        )
        share[rows] = checkpointed[rows] / np.asarray(layers, dtype=np.int64)[codes]
    codes, modes = per_group([table["recompute"]], RECOMPUTE_MODES.index)
    recompute = np.asarray(modes, dtype=np.float64)[codes] - (1.0 - share)
    return np.column_stack(
        [
            logs,
            np.asarray(table["zero_stage"], dtype=np.float64),
            recompute,
            np.asarray(table["sequence_parallel"], dtype=np.float64),
        ]
    )


def layout_vector(cfg: TrainingConfig) -> np.ndarray:
    """:func:`layout_vectors` of one configuration."""
    return np.asarray(layout_vectors(flat_table([cfg]))[0])


def problem_codes(configs: Sequence[TrainingConfig] | FlatTable) -> np.ndarray:
    """An integer per configuration (or row of a flat table), equal where two are layouts of
    one problem: the same model shape (its name aside: a preset and an ingested run of it
    agree), sequence length and GPU type and count per node. Runs of another problem are
    neither "already run" nor neighbours of a candidate: a layout run for an 8B model says
    nothing of the same layout of a 70B one."""
    table = configs if isinstance(configs, dict) else flat_table(configs)
    codes, _ = distinct_rows([table[k] for k in (*MODEL_FIELDS, "gpu", "gpus_per_node")])
    return codes


def select(
    scored: pd.DataFrame,
    configs: Sequence[TrainingConfig] | FlatTable,
    k: int,
    *,
    best_measured: float | None = None,
    already_run: Iterable[TrainingConfig] = (),
    acquisition: Acquisition | None = None,
    cost: np.ndarray | None = None,
    budget: float | None = None,
    skipped: list[int] | None = None,
) -> list[tuple[int, str, float]]:
    """Pick ``k`` rows of ``scored`` (aligned with ``configs``, configurations or their flat
    table): ``(row, reason, value)``.

    Rows whose layout was already run (of the same problem: :func:`problem_codes`) are never
    picked, and the diversity penalty counts the runs of a candidate's own problem only.
    ``best_measured`` is the incumbent of expected improvement (None: no run has completed,
    and the incumbent is the best predicted MFU among rows likely to complete; the first slot
    then takes the best-ranked row, with ``Acquisition.open_with_best``).

    ``cost`` (per row, e.g. its GPU-hours) and ``budget``: the picks' costs sum to at most the
    budget; a row its slot would pick whose cost exceeds what is left (or is unknown, NaN) is
    passed over for the next best, and appended to ``skipped`` if given."""
    acq = acquisition or Acquisition()
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k}")
    table = configs if isinstance(configs, dict) else flat_table(configs)
    n = table_len(table)
    if n == 0:
        return []
    ran = flat_table(list(already_run))
    problem, ran_problem, free = _not_run(table, ran)
    plan, values = _slot_values(scored, k, best_measured, acq, free)
    vectors = layout_vectors(table)
    spread = acq.diversity_scale > 0
    # Per row, the squared distance to the nearest layout of its problem run or picked so far
    # (inf: none, and the penalty factor is then exactly 1).
    nearest = np.full(n, np.inf)
    if spread:
        for p, v in zip(ran_problem.tolist(), layout_vectors(ran), strict=True):
            nearest = _nearer(nearest, vectors, problem == p, v)
    if budget is not None and cost is None:
        raise ConfigError("a budget needs the cost of each row")
    left = math.inf if budget is None else float(budget)
    costs = None if cost is None else np.asarray(cost, dtype=float)
    out: list[tuple[int, str, float]] = []
    for reason in plan:
        if not free.any():
            break
        value = np.nan_to_num(values[reason], nan=0.0)
        if spread and reason not in SPREAD_BY_DRAWS:
            value = value * (1 - np.exp(-nearest / (2 * acq.diversity_scale**2)))
        value = np.where(free, value, -np.inf)
        i = int(np.argmax(value))
        if costs is not None and budget is not None:
            fitting = _within_budget(value, free, costs, left, i, skipped)
            if fitting is None:
                break
            i = fitting
            left -= float(costs[i])
        out.append((i, reason, float(values[reason][i])))
        free[i] = False
        if spread:
            nearest = _nearer(nearest, vectors, problem == problem[i], vectors[i])
    return out


def _not_run(table: FlatTable, ran: FlatTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The problem code of each row of ``table`` and of each run of ``ran``
    (:func:`problem_codes`), and per row whether its layout is still free (not run already
    for its own problem)."""
    n = table_len(table)
    problems = problem_codes(concat(table, ran))
    problem, ran_problem = problems[:n], problems[n:]
    done_keys = set(zip(ran_problem.tolist(), layout_keys(ran), strict=True))
    free = np.array(
        [key not in done_keys for key in zip(problem.tolist(), layout_keys(table), strict=True)],
        dtype=bool,
    )
    return problem, ran_problem, free


def _slot_values(
    scored: pd.DataFrame, k: int, best_measured: float | None, acq: Acquisition, free: np.ndarray
) -> tuple[list[str], dict[str, np.ndarray]]:
    """The reason of each of the ``k`` slots, and per reason the value of each row (see
    :func:`select` for the incumbent when ``best_measured`` is None; ``free``: the rows not
    run yet, the only ones the probability of being the best draws)."""
    opening = best_measured is None
    if best_measured is None:
        likely = scored["p_completed"].to_numpy(dtype=float) >= 0.5
        mu = scored["pred_mfu"].to_numpy(dtype=float)
        best_measured = float(np.nanmax(mu[likely])) if likely.any() else 0.0
    values = {"oom-boundary": boundary_value(scored)}
    values[acq.gain] = (
        probability_best(scored, best_measured, free)
        if acq.gain == "probability-best"
        else expected_improvement(scored, best_measured)
    )
    n_boundary = round(k * acq.boundary_frac)
    plan = [acq.gain] * (k - n_boundary) + ["oom-boundary"] * n_boundary
    if acq.open_with_best and opening and k > n_boundary:
        plan[0] = "best-predicted"
        values["best-predicted"] = np.asarray(
            scored["pred_mfu"].to_numpy(dtype=float)
            * np.nan_to_num(scored["p_completed"].to_numpy(dtype=float), nan=1.0)
        )
    return plan, values


def _within_budget(
    value: np.ndarray,
    free: np.ndarray,
    costs: np.ndarray,
    left: float,
    i: int,
    skipped: list[int] | None,
) -> int | None:
    """The slot's pick ``i`` if its cost fits what is ``left``; else the best free row that
    fits, the dearer better ones passed over (marked not free, appended to ``skipped``); None
    if none fits (``i`` appended to ``skipped``)."""
    if costs[i] <= left:
        return i
    # the slot's pick is too dear for what is left: it and every better one that is
    # too dear are passed over (for good: what is left only shrinks), the best that
    # fits is picked
    order = np.argsort(-value, kind="stable")
    order = order[free[order]]
    fits = costs[order] <= left
    if not fits.any():  # nothing fits what is left: the slot's pick is left out
        if skipped is not None:
            skipped.append(i)
        return None
    j = int(np.argmax(fits))
    dear, i = order[:j], int(order[j])
    if skipped is not None:
        skipped.extend(dear.tolist())
    free[dear] = False
    return i


def _nearer(
    nearest: np.ndarray, vectors: np.ndarray, same: np.ndarray, v: np.ndarray
) -> np.ndarray:
    """``nearest`` (squared distances) lowered to each row's distance to ``v`` where ``same``
    (the rows of ``v``'s problem)."""
    return np.asarray(
        np.minimum(nearest, np.where(same, np.sum((vectors - v) ** 2, axis=1), np.inf))
    )
