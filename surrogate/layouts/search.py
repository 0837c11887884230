"""Searching a :class:`~surrogate.layouts.space.LayoutSpace` for the best layouts: every valid
layout scored and ranked, or, where that cannot be, optuna's trials.

Which path a search takes (``method``, :func:`search`):

- **enumerate** (``"auto"``'s choice for a space of at most ``enumerate_limit`` points,
  :data:`~surrogate.layouts.grid.TABLE_LIMIT` by default, and no storage): the space is
  generated as a table (:func:`~surrogate.layouts.grid.space_table`), every valid layout
  scored in one vectorised pass (:func:`score_configs`: the analytic model once over all
  configurations, the learned model once over all features) and ranked. The answer is exact
  under the model; no sampler runs.
- **optuna** (``"auto"``'s choice for a larger space, or whenever an optuna storage is given):
  ``n_trials`` trials, TPE (Bergstra et al. 2011) maximising the predicted MFU, or NSGA-II
  (Deb et al. 2002) for MFU against the OOM risk or against the number of GPUs. Where the
  space has at most ``enumerate_limit`` points, the trials are drawn among its valid layouts
  alone (its table, :mod:`~surrogate.layouts.valid_sampler`); in a larger space, invalid
  points (a rule of the space broken, :func:`~surrogate.layouts.grid.point_config`) are met
  too. Invalid and infeasible layouts (OOM risk above ``Limits.max_p_oom``, predicted memory
  above the margin) are optuna *constraints* (a value > 0 is a violation), so the samplers
  learn to avoid them instead of seeing a fake objective. A study lives in any optuna
  storage: an RDB URL (``sqlite:///study.db``, PostgreSQL, MySQL) lets several workers share
  it and a later search resume it, each of the space the study records
  (:mod:`~surrogate.layouts.study_space`).
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from surrogate.config.checks import capped_count
from surrogate.config.table import table_len
from surrogate.config.training import TrainingConfig, config_from_flat
from surrogate.errors import ConfigError
from surrogate.extras import require
from surrogate.io.stores import check_storage, ensure_sqlite_dir
from surrogate.layouts.best_odds import best_set, p_best
from surrogate.layouts.dimensions import DIMENSIONS
from surrogate.layouts.grid import TABLE_LIMIT, space_table
from surrogate.layouts.labels import layout_label, layout_labels
from surrogate.layouts.scored import (
    RANK_COLUMNS,
    Limits,
    RankBy,
    Scorer,
    rank,
    rank_column,
    score_configs,
    scored_to_records,
    with_keys,
)
from surrogate.layouts.space import LayoutSpace, layout_key
from surrogate.layouts.study_space import check_study_space
from surrogate.layouts.valid_sampler import ValidPoints, valid_sampler
from surrogate.prediction.predict import resolve_model
from surrogate.progress import ProgressFn, report

__all__ = [
    "RANK_COLUMNS",
    "Limits",
    "RankBy",
    "SearchResult",
    "rank",
    "score_configs",
    "scored_to_records",
    "search",
]

if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from surrogate.analytic.perf import PerfModel
    from surrogate.learned.model import SurrogateModel

Objective = Literal["mfu", "mfu-vs-oom", "mfu-vs-gpus"]
Method = Literal["auto", "enumerate", "optuna"]
METHODS: tuple[Method, ...] = ("auto", "enumerate", "optuna")


MAX_TOP_K = 1_000
"""Most layouts a search returns in its top (``top_k``, ``search --top-k``): each gets its odds
of being the best of them (:func:`surrogate.layouts.best_odds.p_best`), a Monte Carlo over
their correlated errors whose time grows faster than the square of their count (seconds at
1,000, over a minute at 4,000 on one CPU core)."""


def check_top_k(top_k: int, flag: str = "top_k") -> None:
    """ConfigError unless 1 <= ``top_k`` <= :data:`MAX_TOP_K`, saying why the cap."""
    capped_count(
        top_k,
        flag,
        MAX_TOP_K,
        "each layout shown gets its odds of being the best of those shown, a Monte "
        "Carlo over their correlated errors whose time grows faster than the square of "
        "their count (minutes beyond a few thousand)",
    )


TOP_COLUMNS: tuple[str, ...] = (
    "pred_tokens_per_s_per_gpu_lo",
    "pred_tokens_per_s_per_gpu_hi",
    "p_best",
    "best_set",
)
"""What the top layouts carry besides :func:`score_configs`' columns: the tokens/s interval (the
MFU interval's, in tokens/s per GPU), the probability that the layout completes and is the
fastest of the top ones (:func:`surrogate.layouts.best_odds.p_best`; NaN without intervals) and
whether it is one of the layouts the search cannot tell apart, which together hold 90% of the
top's P(best) (:func:`surrogate.layouts.best_odds.best_set`)."""


@dataclass(kw_only=True)
class SearchResult:
    """What a search found."""

    top: pd.DataFrame
    """The best feasible layouts (ranked :func:`score_configs` rows and :data:`TOP_COLUMNS`),
    at most k."""
    pareto: pd.DataFrame | None
    """Multi-objective modes: the feasible Pareto front, else None."""
    configs: dict[tuple[Any, ...], TrainingConfig]
    """The configuration of each key in ``top`` and ``pareto``."""
    n_trials: int
    n_invalid: int
    n_infeasible: int
    study_name: str | None
    method: Literal["enumerate", "optuna"] = "enumerate"
    """The path the search took (module docstring)."""
    enumerated: int | None = None
    """Valid layouts scored by enumeration (None: optuna searched)."""
    notes: list[str] = field(default_factory=list)


CONSTRAINT_NAMES: tuple[str, ...] = ("invalid", "oom_risk", "memory_gib")
"""Trial constraints (> 0 violates): rule broken, p_oom over the limit, GiB over the margin."""


def _constraints(trial: optuna.trial.FrozenTrial) -> Sequence[float]:
    value = trial.user_attrs.get("constraints")
    return [1.0, 1.0, 1.0] if value is None else list(value)


def search(
    space: LayoutSpace,
    *,
    model: SurrogateModel | str | Path | None = "default",
    profile: str | Path | PerfModel | None = None,
    limits: Limits | None = None,
    objective: Objective = "mfu",
    n_trials: int = 200,
    top_k: int = 5,
    storage: str | None = None,
    study_name: str | None = None,
    seed: int = 0,
    enumerate_limit: int = TABLE_LIMIT,
    method: Method = "auto",
    progress: ProgressFn | None = None,
    rank: RankBy = "mean",
) -> SearchResult:
    """Search ``space`` for the best layouts (module docstring).

    Every valid layout is scored and ranked when the space has at most ``enumerate_limit``
    points and no ``storage`` is given; else optuna runs ``n_trials`` trials (TPE for
    ``"mfu"``, NSGA-II for the two-objective modes). ``method`` forces one path.

    Args:
        space: The layouts to consider: a model, a batch, node counts, frameworks and bounds.
        model: The learned correction, as for :func:`surrogate.predict`: ``"default"``, a
            saved model's directory, a ``SurrogateModel``, or None for the analytic model.
        profile: The hardware's speeds, as for :func:`surrogate.predict`.
        limits: What a layout must satisfy besides being valid (largest p_oom, memory margin);
            None: :class:`Limits`' defaults.
        objective: ``"mfu"`` (predicted MFU), ``"mfu-vs-oom"`` (MFU against the OOM risk) or
            ``"mfu-vs-gpus"`` (MFU against the GPU count; needs several node counts).
        n_trials: Optuna's trials, where optuna searches (at least 1 there; unused when the
            space is enumerated).
        top_k: Layouts returned in ``SearchResult.top``, 1 to :data:`MAX_TOP_K`.
        storage: An optuna storage URL (``sqlite:///study.db``, ``postgresql+psycopg://...``)
            shared by workers; None keeps the study in memory.
        study_name: The study's name in ``storage`` (a new or an existing one).
        seed: The sampler's seed.
        enumerate_limit: Largest number of points scored by enumeration, or, where optuna
            searches, whose valid layouts alone its trials are drawn among.
        method: ``"auto"`` (module docstring), ``"enumerate"`` (every valid layout, however
            large the space, up to ``enumerate_limit`` points) or ``"optuna"`` (trials even
            where the space could be enumerated).
        progress: Hears of the enumeration or of each trial (:mod:`surrogate.progress`).
        rank: ``"mean"`` ranks (and optuna maximises) the predicted MFU; ``"safe"`` the lower
            end of its 80% interval (:data:`RANK_COLUMNS`; needs a learned model).

    Returns:
        A ``SearchResult``, the best feasible layouts ranked (or the least bad ones, with
            a note, when none meets the limits) with each one's tokens/s interval and
            probability of being the best of them (``p_best``), the Pareto front of a
            two-objective search, the configuration of each key shown, and the trial counts.

    Raises:
        ConfigError: No layout of the space is valid (the message names one rule its points
            break), the space is too large to enumerate without optuna trials, optuna is
            to search with fewer than one trial, ``storage`` is given to an enumeration or is
            a URL optuna cannot open, the study in ``storage`` records another space (or
            holds trials and no space), ``method`` is none of :data:`METHODS`,
            ``"mfu-vs-gpus"`` is asked of one node count, or
            ``rank`` is not mean or safe (safe without a learned model), or ``top_k`` is
            not in 1 to :data:`MAX_TOP_K`.
        MissingExtraError: Optuna trials are asked for and the ``search`` extra (optuna) is not
            installed.
        NoModelError: ``model`` is a path that holds no saved model.
    """
    import pandas as pd

    check_top_k(top_k)
    how = _scorer(space, model, profile, limits, objective, rank)
    result = SearchResult(
        top=pd.DataFrame(),
        pareto=None,
        configs={},
        n_trials=0,
        n_invalid=0,
        n_infeasible=0,
        study_name=None,
        method=_method(space, method, n_trials, storage, enumerate_limit),
    )
    scored, invalid = (
        (_score_enumerated(space, how, enumerate_limit, result, progress), [])
        if result.method == "enumerate"
        else _score_trials(
            space,
            how,
            objective,
            n_trials,
            enumerate_limit,
            storage,
            study_name,
            seed,
            result,
            progress,
        )
    )
    if scored is None:  # invalid: optuna trials' broken rules
        raise ConfigError(_no_valid_layout(space, enumerate_limit, invalid, result.n_trials))
    _choose(result, space, scored, how, objective, top_k)
    return result


def _method(
    space: LayoutSpace, method: Method, n_trials: int, storage: str | None, limit: int
) -> Literal["enumerate", "optuna"]:
    """The path :func:`search` takes (module docstring); ConfigError where the request
    cannot be met (its Raises)."""
    if method not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "enumerate" and storage is not None:
        raise ConfigError(
            "an optuna storage holds optuna's trials: search it with method "
            "optuna (or auto), or enumerate without a storage"
        )
    if method == "enumerate" or (
        method == "auto" and storage is None and space.is_enumerable(limit)
    ):
        space.check_bound(limit, optuna=method == "auto")  # raises, saying why
        return "enumerate"
    if n_trials < 1:
        if method == "auto" and storage is None:
            space.check_bound(limit)  # too large to enumerate: raises, saying why
        raise ConfigError(f"optuna searches with at least one trial, got n_trials={n_trials}")
    return "optuna"


def _scorer(
    space: LayoutSpace,
    model: SurrogateModel | str | Path | None,
    profile: str | Path | PerfModel | None,
    limits: Limits | None,
    objective: Objective,
    rank: RankBy,
) -> Scorer:
    """How :func:`search` scores, once its request is checked (its Raises)."""
    rank_column(rank)
    if objective == "mfu-vs-gpus" and len(space.node_counts) < 2:
        raise ConfigError("objective mfu-vs-gpus needs a range of node counts, got one")
    learned = resolve_model(model)
    if rank == "safe" and learned is None:
        raise ConfigError(
            "rank safe ranks by the lower end of the learned model's 80% interval, "
            "which the analytic model alone does not give: rank mean, or a "
            "learned model"
        )
    return Scorer(learned=learned, profile=profile, limits=limits or Limits(), rank=rank)


def _score_enumerated(
    space: LayoutSpace, how: Scorer, limit: int, result: SearchResult, progress: ProgressFn | None
) -> pd.DataFrame | None:
    """Every valid layout of the space scored and ranked (None: none is valid); the count goes
    to ``result``."""
    report(progress, "enumerating and scoring the space", 0, 1)
    every = space_table(space, limit)
    result.enumerated = table_len(every)
    frame = how.ranked(every, labels=False, keys=False) if result.enumerated else None
    report(progress, "enumerating and scoring the space", 1, 1)
    return frame


def _score_trials(
    space: LayoutSpace,
    how: Scorer,
    objective: Objective,
    n_trials: int,
    limit: int,
    storage: str | None,
    study_name: str | None,
    seed: int,
    result: SearchResult,
    progress: ProgressFn | None,
) -> tuple[pd.DataFrame | None, list[str]]:
    """Optuna's trials (drawn among the valid layouts alone where the space has at most
    ``limit`` points): the layouts they found scored and ranked (None: none valid, or none in
    the space) and the rules the invalid ones broke; the counts and the configurations go to
    ``result``."""
    points = ValidPoints(space, space_table(space, limit)) if space.is_enumerable(limit) else None
    if points is not None and not points.size:
        return None, []  # no trial runs: the space holds no valid layout
    study, found = _run_study(
        space, how, objective, n_trials, storage, study_name, seed, progress, points
    )
    result.study_name = study.study_name
    result.n_trials = len(study.trials)
    result.n_invalid = sum(1 for t in study.trials if t.user_attrs.get("invalid"))
    result.n_infeasible = sum(
        1 for t in study.trials if not t.user_attrs.get("invalid") and max(_constraints(t)) > 0
    )
    result.configs.update({layout_key(c): c for c in found})
    invalid = [str(t.user_attrs["invalid"]) for t in study.trials if t.user_attrs.get("invalid")]
    return (how.ranked(found) if found else None), invalid


def _choose(
    result: SearchResult,
    space: LayoutSpace,
    every_scored: pd.DataFrame,
    how: Scorer,
    objective: Objective,
    top_k: int,
) -> None:
    """Fill ``result``'s top (with each one's odds of being the best), Pareto front, notes and
    the configurations of the layouts shown, from every layout scored (ranked, keys
    distinct)."""
    feasible = every_scored[every_scored["feasible"]]
    if objective != "mfu":  # over every layout scored: the whole space, or optuna's trials
        result.pareto = _labelled(_pareto(every_scored, objective, RANK_COLUMNS[how.rank]))
    if feasible.empty:
        limits = how.limits
        result.notes.append(
            f"no layout meets the limits (p_oom <= {limits.max_p_oom}, memory margin "
            f"{limits.memory_margin_frac:.0%}); the table shows the least bad ones"
            + ("" if objective == "mfu" else " and the Pareto front is empty")
        )
        feasible = every_scored
    top = _labelled(feasible.head(top_k).reset_index(drop=True))
    ratio = top["pred_tokens_per_s_per_gpu"] / top["pred_mfu"]  # tokens/s per unit of MFU
    top["pred_tokens_per_s_per_gpu_lo"] = ratio * top["pred_mfu_lo"]
    top["pred_tokens_per_s_per_gpu_hi"] = ratio * top["pred_mfu_hi"]
    top["p_best"] = p_best(top)
    top["best_set"] = best_set(top["p_best"].to_numpy())
    result.top = top
    shown = [result.top] if result.pareto is None else [result.top, result.pareto]
    for frame in shown:  # enumerated layouts are rows of a table: their configurations,
        # with the model's name, which no column holds (launch files name its flavour)
        for key, row in zip(frame["key"], frame.to_dict("records"), strict=True):
            if key not in result.configs:
                result.configs[key] = config_from_flat(
                    {**row, "name": space.model.name}, global_batch_seqs=space.global_batch_seqs
                )


def _labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its ``layout`` labels (score_configs' column, before ``num_gpus``) and
    its keys, for rows scored without them."""
    frame = with_keys(frame.drop(columns="layout", errors="ignore"))
    table = {str(k): frame[k].to_numpy() for k in frame.columns}
    frame.insert(list(frame.columns).index("num_gpus"), "layout", layout_labels(table))
    return frame


def _no_valid_layout(space: LayoutSpace, limit: int, invalid: list[str], trials: int) -> str:
    """Why a search found nothing to score: the space (or optuna's ``trials``, which need not
    have met every point) and one rule its points break."""
    example = invalid[:1]
    if not example and space.is_enumerable(limit):
        for point in space.points():
            try:
                space.build(point)
            except ConfigError as e:
                example = [str(e)]
                break
    nodes = ",".join(map(str, space.node_counts))
    found = (
        f"none of optuna's {trials} trials was a valid layout"
        if trials
        else "the space holds no valid layout"
    )
    return (
        f"{found} of {space.model.name} on {nodes} x {space.gpus_per_node} {space.gpu} for "
        f"a global batch of {space.global_batch_seqs} sequences"
        + (f" (e.g. {example[0]})" if example else "")
        + (": run more trials, or" if trials else ":")
        + " widen it (other node counts or "
        "frameworks, a larger --max-mbs or --max-cp, a global batch that more "
        "data-parallel degrees divide)"
    )


def _pareto(frame: pd.DataFrame, objective: Objective, column: str = "pred_mfu") -> pd.DataFrame:
    """Feasible rows not dominated in (max ``column``: the predicted MFU or its 10% quantile,
    min p_oom | min num_gpus)."""
    import numpy as np

    second = "p_oom" if objective == "mfu-vs-oom" else "num_gpus"
    f = frame[frame["feasible"]].sort_values([column, second], ascending=[False, True])
    values = f[second].to_numpy(dtype=np.float64)
    best_before = np.minimum.accumulate(np.concatenate([[math.inf], values[:-1]]))
    return f[values < best_before].reset_index(drop=True)


def _run_study(
    space: LayoutSpace,
    how: Scorer,
    objective: Objective,
    n_trials: int,
    storage: str | None,
    study_name: str | None,
    seed: int,
    progress: ProgressFn | None = None,
    points: ValidPoints | None = None,
) -> tuple[optuna.Study, list[TrainingConfig]]:
    """The study of ``n_trials`` trials (drawn among ``points`` alone where given: the
    space's valid layouts, :mod:`surrogate.layouts.valid_sampler`) and the valid layouts they
    met; ConfigError where the study searches another space
    (:func:`~surrogate.layouts.study_space.check_study_space`)."""
    require("optuna")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # optuna >= 5 reads constraints set on the trial; older versions take constraints_func.
    native = hasattr(optuna.trial.Trial, "set_constraint")
    sampler, directions = _sampler(objective, n_trials, seed, native)
    if points is not None:
        sampler = valid_sampler(sampler, points, seed)
    if storage is not None:
        check_storage(storage)
        ensure_sqlite_dir(storage)
    study = optuna.create_study(
        storage=storage,
        study_name=study_name,
        sampler=sampler,
        directions=directions,
        load_if_exists=study_name is not None,
    )
    check_study_space(study, space)
    found: dict[tuple[Any, ...], TrainingConfig] = {}
    run = _trial_objective(space, how, objective, {}, found, native)
    stage = f"optuna: {n_trials} trials" + (f" in study {study_name!r}" if study_name else "")
    report(progress, stage, 0, n_trials)
    finished = 0

    def tick(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        nonlocal finished
        finished += 1
        report(progress, stage, finished, n_trials)

    study.optimize(run, n_trials=n_trials, callbacks=[tick])
    check_study_space(study, space)  # a worker that started at the same instant recorded last
    return study, list(found.values())


def _sampler(
    objective: Objective,
    n_trials: int,
    seed: int,
    native: bool,
) -> tuple[optuna.samplers.BaseSampler, list[Literal["minimize", "maximize"]]]:
    """TPE for one objective, NSGA-II for two, and the study's directions."""
    import optuna

    extra: dict[str, Any] = {} if native else {"constraints_func": _constraints}
    if objective == "mfu":
        return (
            optuna.samplers.TPESampler(
                seed=seed, **extra, n_startup_trials=min(20, max(1, n_trials // 4))
            ),
            ["maximize"],
        )
    return (
        optuna.samplers.NSGAIISampler(
            seed=seed, **extra, population_size=min(50, max(4, n_trials // 4))
        ),
        ["maximize", "minimize"],
    )


def _trial_objective(
    space: LayoutSpace,
    how: Scorer,
    objective: Objective,
    cache: dict[tuple[Any, ...], tuple[float, float, float, float, float]],
    found: dict[tuple[Any, ...], TrainingConfig],
    native: bool,
) -> Callable[[optuna.Trial], float | tuple[float, float]]:
    """Optuna's objective: a trial's layout built, scored (or looked up in ``cache``, where a
    layout met before is kept), its constraints set and its values returned; each valid
    layout lands in ``found``."""
    choices = space.choices()
    worker = f"{socket.gethostname()}:{os.getpid()}"  # which of several workers ran a trial
    limits = how.limits

    def constrain(trial: optuna.Trial, values: list[float]) -> None:
        trial.set_user_attr("constraints", values)
        if native:
            for name, value in zip(CONSTRAINT_NAMES, values, strict=True):
                trial.set_constraint(name, value)

    def run(trial: optuna.Trial) -> float | tuple[float, float]:
        trial.set_user_attr("worker", worker)
        point = {
            d: trial.suggest_categorical(d, choices[d])
            for d in DIMENSIONS
            if d not in ("recompute_share", "sharding")
        }
        # The share and the sharding only where they are a choice (conditional parameters:
        # optuna's samplers handle a search space that changes with the other choices).
        for name, options in (
            (
                "recompute_share",
                space.share_choices(point["recompute"], point["framework"], choices),
            ),
            ("sharding", space.sharding_choices(point["zero_stage"], point["framework"], choices)),
        ):
            point[name] = (
                trial.suggest_categorical(name, options) if len(options) > 1 else options[0]
            )
        try:
            cfg = space.build(point)
        except ConfigError as e:
            trial.set_user_attr("invalid", str(e))
            constrain(trial, [1.0, 0.0, 0.0])
            return (
                0.0
                if objective == "mfu"
                else (0.0, 1.0 if objective == "mfu-vs-oom" else float(space.node_counts[-1]))
            )
        key = layout_key(cfg)
        if key not in cache:
            s = score_configs([cfg], model=how.learned, profile=how.profile, limits=limits).iloc[0]
            cache[key] = (
                how.value(s),
                float(s["p_oom"]),
                float(s["pred_peak_device_mem_gib"]),
                float(s["capacity_gib"]),
                float(s["num_gpus"]),
            )
        found[key] = cfg
        value, p_oom, peak, cap, gpus = (float(v) for v in cache[key])
        constrain(
            trial, [0.0, p_oom - limits.max_p_oom, peak - (1.0 - limits.memory_margin_frac) * cap]
        )
        trial.set_user_attr("layout", layout_label(cfg))
        if objective == "mfu":
            return value
        return value, p_oom if objective == "mfu-vs-oom" else gpus

    return run
