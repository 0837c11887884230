"""Searching a :class:`~surrogate.layouts.space.LayoutSpace` against the surrogate with optuna.

- Single objective (TPE, Bergstra et al. 2011): maximise the predicted MFU.
- Multi-objective (NSGA-II, Deb et al. 2002): predicted MFU against the OOM risk, or against the
  number of GPUs when the space holds several node counts.

Invalid points (a rule of :mod:`surrogate.config.training` or :mod:`surrogate.layouts.space`
broken) and
infeasible ones (OOM risk above ``Limits.max_p_oom``, predicted memory above the margin) are
optuna *constraints* (``constraints_func``: a value > 0 is a violation), so the samplers learn
to avoid them instead of seeing a fake objective. A study lives in any optuna storage: an RDB
URL (``sqlite:///study.db``, PostgreSQL, MySQL) lets several workers share it.

Scoring is vectorised: :func:`score_configs` runs the analytic model once over all
configurations and the learned model once over all features. When the space is small enough it
is scored whole and :func:`search` reports whether optuna found the same best.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from surrogate.config.table import FlatTable, flat_table, table_frame, table_len
from surrogate.config.training import TrainingConfig, config_from_flat
from surrogate.errors import ConfigError
from surrogate.layouts.labels import layout_label, layout_labels
from surrogate.layouts.space import (
    DEFAULT_ENUMERATION_LIMIT,
    DIMENSIONS,
    KEY_FIELDS,
    LayoutSpace,
    layout_key,
    layout_keys,
)
from surrogate.progress import ProgressFn, report

if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from surrogate.analytic.perf import PerfModel
    from surrogate.learned.model import SurrogateModel

Objective = Literal["mfu", "mfu-vs-oom", "mfu-vs-gpus"]


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What a layout must satisfy besides being valid."""

    max_p_oom: float = 0.2
    """Largest acceptable predicted OOM probability."""
    memory_margin_frac: float = 0.0
    """Keep this fraction of the GPU memory free: predicted peak <= (1 - margin) x capacity."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_p_oom <= 1.0:
            raise ConfigError(f"max_p_oom must be between 0 and 1, got {self.max_p_oom}")
        if not 0.0 <= self.memory_margin_frac < 1.0:
            raise ConfigError(
                f"memory margin must be in [0, 1), got {self.memory_margin_frac}")


def score_configs(
    configs: Sequence[TrainingConfig] | FlatTable,
    *,
    model: SurrogateModel | str | Path | None = "default",
    profile: str | Path | PerfModel | None = None,
    limits: Limits | None = None,
    labels: bool = True,
    keys: bool = True,
) -> pd.DataFrame:
    """:func:`surrogate.prediction.scoring.score` of every configuration (validated ones, or their
    flat
    table: :meth:`LayoutSpace.table`), with what ranking needs: the flat configuration,
    ``layout`` (left out with ``labels=False``: a search labels only the rows it shows),
    ``num_gpus``, ``analytic_fits``, ``feasible`` and ``key``
    (:func:`surrogate.layouts.space.layout_key`; left out with ``keys=False``: a million Python
    tuples
    take a second, and a search without optuna needs only the shown rows' keys).
    ``feasible``: p_oom within the limit and the device peak (``pred_device_mem_gib``) within
    the GPU's memory less the margin.

    A model whose shape makes every layout's answer impossible is a ConfigError: no layout of
    it can be ranked honestly."""
    import pandas as pd

    from surrogate.prediction.predict import resolve_model
    from surrogate.prediction.scoring import SCORE_COLUMNS, score

    limits = limits or Limits()
    table = configs if isinstance(configs, dict) else flat_table(configs)
    if table_len(table) == 0:
        return pd.DataFrame(columns=["layout", "num_gpus",
                                     *(k for k in SCORE_COLUMNS if k != "error"),
                                     "analytic_fits", "feasible", "key"])
    s = score(table, model=resolve_model(model), profile=profile)
    bad = next((r for r in s.columns["error"] if r), "")
    if bad:
        raise ConfigError(bad)
    frame = table_frame(table)
    if labels:
        frame["layout"] = layout_labels(table)
    frame["num_gpus"] = table["gpus_per_node"] * table["num_nodes"]
    for k, v in s.columns.items():
        if k != "error":
            frame[k] = v
    frame["analytic_fits"] = s.analytic["mem_total"] <= s.cols["memory_bytes"]
    frame["feasible"] = (frame["p_oom"] <= limits.max_p_oom) & (
        frame["pred_device_mem_gib"] <= (1.0 - limits.memory_margin_frac) * frame["capacity_gib"])
    if keys:
        frame["key"] = layout_keys(table)
    return frame


def _with_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (score_configs rows) with its ``key`` column, computed where it is missing."""
    if "key" not in frame.columns:
        frame["key"] = layout_keys({k: frame[k].to_numpy() for k in KEY_FIELDS})
    return frame


def rank(scored: pd.DataFrame) -> pd.DataFrame:
    """Feasible layouts first, by predicted MFU (ties: fewer GPUs, then lower OOM risk)."""
    order = scored.assign(_inf=~scored["feasible"]).sort_values(
        ["_inf", "pred_mfu", "num_gpus", "p_oom"], ascending=[True, False, True, True],
        kind="mergesort")
    return order.drop(columns="_inf").reset_index(drop=True)


@dataclass(kw_only=True)
class SearchResult:
    """What a search found."""

    top: pd.DataFrame
    """The best feasible layouts (ranked :func:`score_configs` rows), at most k."""
    pareto: pd.DataFrame | None
    """Multi-objective modes: the feasible Pareto front, else None."""
    configs: dict[tuple[Any, ...], TrainingConfig]
    """The configuration of each key in ``top`` and ``pareto``."""
    n_trials: int
    n_invalid: int
    n_infeasible: int
    study_name: str | None
    enumerated: int | None = None
    """Valid layouts scored by enumeration (None: the space was too large)."""
    enum_best: pd.Series | None = None
    optuna_found_enum_best: bool | None = None
    """Whether optuna's best is the enumerated best (None when not enumerated or no optuna)."""
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
    enumerate_limit: int = DEFAULT_ENUMERATION_LIMIT,
    use_optuna: bool = True,
    progress: ProgressFn | None = None,
) -> SearchResult:
    """Search ``space`` for the best layouts (module docstring).

    Every valid layout is scored when the space has at most ``enumerate_limit`` points; optuna
    then samples ``n_trials`` more (TPE for ``"mfu"``, NSGA-II for the two-objective modes)
    and the result says whether it found the enumerated best.

    Args:
        space: The layouts to consider: a model, a batch, node counts, frameworks and bounds.
        model: The learned correction, as for :func:`surrogate.predict`: ``"default"``, a
            saved model's directory, a ``SurrogateModel``, or None for the analytic model.
        profile: The hardware's speeds, as for :func:`surrogate.predict`.
        limits: What a layout must satisfy besides being valid (largest p_oom, memory margin);
            None: :class:`Limits`' defaults.
        objective: ``"mfu"`` (predicted MFU), ``"mfu-vs-oom"`` (MFU against the OOM risk) or
            ``"mfu-vs-gpus"`` (MFU against the GPU count; needs several node counts).
        n_trials: Optuna trials (0: the enumerated space alone).
        top_k: Layouts returned in ``SearchResult.top``.
        storage: An optuna storage URL (``sqlite:///study.db``, ``postgresql+psycopg://...``)
            shared by workers; None keeps the study in memory.
        study_name: The study's name in ``storage`` (a new or an existing one).
        seed: The sampler's seed.
        enumerate_limit: Largest number of points scored by enumeration.
        use_optuna: False scores the enumerated space alone.
        progress: Hears of the enumeration and of each trial (:mod:`surrogate.progress`).

    Returns:
        A ``SearchResult``, the best feasible layouts ranked (or the least bad ones, with
            a note, when none meets the limits), the Pareto front of a two-objective search, the
            configuration of each key shown, and the trial counts.

    Raises:
        ConfigError: No layout of the space is valid (the message names one rule its points
            break), the space is too large to enumerate without optuna trials, ``storage`` is
            a URL optuna cannot open, or ``"mfu-vs-gpus"`` is asked of one node count.
        MissingExtraError: Optuna trials are asked for and the ``search`` extra (optuna) is not
            installed.
        NoModelError: ``model`` is a path that holds no saved model.
    """
    import pandas as pd

    from surrogate.prediction.predict import resolve_model

    limits = limits or Limits()
    if objective == "mfu-vs-gpus" and len(space.node_counts) < 2:
        raise ConfigError("objective mfu-vs-gpus needs a range of node counts, got one")
    learned = resolve_model(model)
    scored_rows: list[pd.DataFrame] = []
    configs: dict[tuple[Any, ...], TrainingConfig] = {}
    result = SearchResult(top=pd.DataFrame(), pareto=None, configs=configs, n_trials=0,
                          n_invalid=0, n_infeasible=0, study_name=None)

    enum_frame: pd.DataFrame | None = None
    if space.is_enumerable(enumerate_limit):
        report(progress, "enumerating and scoring the space", 0, 1)
        every = space.table(enumerate_limit)
        result.enumerated = table_len(every)
        if result.enumerated:
            enum_frame = rank(score_configs(every, model=learned, profile=profile,
                                            limits=limits, labels=False, keys=False))
            scored_rows.append(enum_frame)
            if enum_frame["feasible"].iloc[0]:
                result.enum_best = _labelled(enum_frame.head(1)).iloc[0]
        report(progress, "enumerating and scoring the space", 1, 1)
    elif not use_optuna or n_trials <= 0:  # nothing else would score a layout
        space.enumerate(enumerate_limit)  # raises, saying why

    opt_best_key: tuple[Any, ...] | None = None
    invalid: list[str] = []  # optuna trials' broken rules
    if use_optuna and n_trials > 0:
        known = None if enum_frame is None else _score_cache(_with_keys(enum_frame))
        study, found = _run_study(space, learned, profile, limits, objective, n_trials, storage,
                                  study_name, seed, known, progress)
        result.study_name = study.study_name
        result.n_trials = len(study.trials)
        result.n_invalid = sum(1 for t in study.trials if t.user_attrs.get("invalid"))
        result.n_infeasible = sum(
            1 for t in study.trials
            if not t.user_attrs.get("invalid") and max(_constraints(t)) > 0)
        configs.update({layout_key(c): c for c in found})
        invalid = [str(t.user_attrs["invalid"]) for t in study.trials
                   if t.user_attrs.get("invalid")]
        if found:
            opt_frame = rank(score_configs(found, model=learned, profile=profile, limits=limits))
            scored_rows.append(opt_frame)
            if opt_frame["feasible"].iloc[0]:
                opt_best_key = opt_frame["key"].iloc[0]

    if result.enum_best is not None and use_optuna and n_trials > 0:
        result.optuna_found_enum_best = opt_best_key == result.enum_best["key"]
    if not scored_rows:
        raise ConfigError(_no_valid_layout(space, enumerate_limit, invalid))
    every_scored = (scored_rows[0] if len(scored_rows) == 1  # ranked, its keys distinct
                    else rank(pd.concat(scored_rows, ignore_index=True).drop_duplicates("key")))
    feasible = every_scored[every_scored["feasible"]]
    if objective != "mfu":
        # Over every layout scored: the enumerated space (exact) and optuna's trials. Optuna's
        # alone may hold no feasible layout when most of its trials are invalid points.
        result.pareto = _pareto(every_scored, objective)
    if feasible.empty:
        result.notes.append(
            f"no layout meets the limits (p_oom <= {limits.max_p_oom}, memory margin "
            f"{limits.memory_margin_frac:.0%}); the table shows the least bad ones"
            + ("" if objective == "mfu" else " and the Pareto front is empty"))
        feasible = every_scored
    result.top = _labelled(feasible.head(top_k).reset_index(drop=True))
    if result.pareto is not None:
        result.pareto = _labelled(result.pareto)
    shown = [result.top] if result.pareto is None else [result.top, result.pareto]
    for frame in shown:  # enumerated layouts are rows of a table: their configurations,
        # with the model's name, which no column holds (launch files name its flavour)
        for key, row in zip(frame["key"], frame.to_dict("records"), strict=True):
            if key not in configs:
                configs[key] = config_from_flat({**row, "name": space.model.name},
                                                global_batch_seqs=space.global_batch_seqs)
    return result


def _labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its ``layout`` labels (score_configs' column, before ``num_gpus``) and
    its keys, for rows scored without them."""
    frame = _with_keys(frame.drop(columns="layout", errors="ignore"))
    table = {str(k): frame[k].to_numpy() for k in frame.columns}
    frame.insert(list(frame.columns).index("num_gpus"), "layout", layout_labels(table))
    return frame


def _no_valid_layout(space: LayoutSpace, limit: int, invalid: list[str]) -> str:
    """Why a search found nothing to score: the space and one rule its points break."""
    example = invalid[:1]
    if not example and space.is_enumerable(limit):
        for point in space.points():
            try:
                space.build(point)
            except ConfigError as e:
                example = [str(e)]
                break
    nodes = ",".join(map(str, space.node_counts))
    return (f"the space holds no valid layout of {space.model.name} on {nodes} x "
            f"{space.gpus_per_node} {space.gpu} for a global batch of "
            f"{space.global_batch_seqs} sequences" + (f" (e.g. {example[0]})" if example else "")
            + ": widen it (other node counts or frameworks, a larger --max-mbs or --max-cp, a "
            "global batch that more data-parallel degrees divide)")


def _score_cache(
    frame: pd.DataFrame,
) -> dict[tuple[Any, ...], tuple[float, float, float, float, float]]:
    cols = ["pred_mfu", "p_oom", "pred_device_mem_gib", "capacity_gib", "num_gpus"]
    return {key: tuple(float(v) for v in vals)  # type: ignore[misc]
            for key, vals in zip(frame["key"], frame[cols].to_numpy(), strict=True)}


def _pareto(frame: pd.DataFrame, objective: Objective) -> pd.DataFrame:
    """Feasible rows not dominated in (max pred_mfu, min p_oom | min num_gpus)."""
    import numpy as np

    second = "p_oom" if objective == "mfu-vs-oom" else "num_gpus"
    f = frame[frame["feasible"]].sort_values(["pred_mfu", second], ascending=[False, True])
    values = f[second].to_numpy(dtype=np.float64)
    best_before = np.minimum.accumulate(np.concatenate([[math.inf], values[:-1]]))
    return f[values < best_before].reset_index(drop=True)


def _run_study(
    space: LayoutSpace,
    learned: SurrogateModel | None,
    profile: str | Path | PerfModel | None,
    limits: Limits,
    objective: Objective,
    n_trials: int,
    storage: str | None,
    study_name: str | None,
    seed: int,
    known: dict[tuple[Any, ...], tuple[float, float, float, float, float]] | None = None,
    progress: ProgressFn | None = None,
) -> tuple[optuna.Study, list[TrainingConfig]]:
    from surrogate.extras import require

    require("optuna")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    choices = space.choices()
    # optuna >= 5 reads constraints set on the trial; older versions take constraints_func.
    native = hasattr(optuna.trial.Trial, "set_constraint")
    extra: dict[str, Any] = {} if native else {"constraints_func": _constraints}
    sampler: optuna.samplers.BaseSampler
    if objective == "mfu":
        sampler = optuna.samplers.TPESampler(seed=seed, **extra,
                                             n_startup_trials=min(20, max(1, n_trials // 4)))
        directions: list[Literal["minimize", "maximize"]] = ["maximize"]
    else:
        sampler = optuna.samplers.NSGAIISampler(seed=seed, **extra,
                                                population_size=min(50, max(4, n_trials // 4)))
        directions = ["maximize", "minimize"]

    def constrain(trial: optuna.Trial, values: list[float]) -> None:
        trial.set_user_attr("constraints", values)
        if native:
            for name, value in zip(CONSTRAINT_NAMES, values, strict=True):
                trial.set_constraint(name, value)
    if storage is not None:
        from surrogate.io.stores import check_storage, ensure_sqlite_dir

        check_storage(storage)
        ensure_sqlite_dir(storage)
    study = optuna.create_study(storage=storage, study_name=study_name, sampler=sampler,
                                directions=directions, load_if_exists=study_name is not None)
    # Scores of the enumerated space, when there is one: the same numbers, looked up.
    cache = dict(known or {})
    found: dict[tuple[Any, ...], TrainingConfig] = {}

    worker = f"{socket.gethostname()}:{os.getpid()}"  # which of several workers ran a trial

    def run(trial: optuna.Trial) -> float | tuple[float, float]:
        trial.set_user_attr("worker", worker)
        point = {d: trial.suggest_categorical(d, choices[d]) for d in DIMENSIONS
                 if d not in ("recompute_share", "sharding")}
        # The share and the sharding only where they are a choice (conditional parameters:
        # optuna's samplers handle a search space that changes with the other choices).
        for name, options in (
                ("recompute_share", space.share_choices(point["recompute"], point["framework"],
                                                        choices)),
                ("sharding", space.sharding_choices(point["zero_stage"], point["framework"],
                                                    choices))):
            point[name] = (trial.suggest_categorical(name, options) if len(options) > 1
                           else options[0])
        try:
            cfg = space.build(point)
        except ConfigError as e:
            trial.set_user_attr("invalid", str(e))
            constrain(trial, [1.0, 0.0, 0.0])
            return 0.0 if objective == "mfu" else (0.0, 1.0 if objective == "mfu-vs-oom"
                                                   else float(space.node_counts[-1]))
        key = layout_key(cfg)
        if key not in cache:
            s = score_configs([cfg], model=learned, profile=profile, limits=limits).iloc[0]
            cache[key] = (float(s["pred_mfu"]), float(s["p_oom"]), float(s["pred_device_mem_gib"]),
                          float(s["capacity_gib"]), float(s["num_gpus"]))
        found[key] = cfg
        mfu, p_oom, peak, cap, gpus = (float(v) for v in cache[key])
        constrain(trial, [0.0, p_oom - limits.max_p_oom,
                          peak - (1.0 - limits.memory_margin_frac) * cap])
        trial.set_user_attr("layout", layout_label(cfg))
        if objective == "mfu":
            return mfu
        return mfu, p_oom if objective == "mfu-vs-oom" else gpus

    stage = f"optuna: {n_trials} trials" + (f" in study {study_name!r}" if study_name else "")
    report(progress, stage, 0, n_trials)

    finished = 0

    def tick(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        nonlocal finished
        finished += 1
        report(progress, stage, finished, n_trials)

    study.optimize(run, n_trials=n_trials, callbacks=[tick])
    return study, list(found.values())


def scored_to_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready rows (NaN -> None; the key dropped)."""
    from surrogate.io.jsonsafe import json_safe

    return [{str(k): json_safe(v) for k, v in rec.items()}
            for rec in frame.drop(columns=["key"], errors="ignore").to_dict("records")]
