"""The training data of the learned surrogate (``surrogate.learned.model``): a sweep table turned
into the features and targets its models learn from.

The targets are each run's own measurements relative to the analytic model's answer for it
(the status, log(measured / analytic tokens/s per GPU), log(measured / analytic peak reserved
memory)), the features the dimensionless physics of ``surrogate.learned.features``, each run
explained
under its own cluster. They are prepared once per table (:func:`training_data`), and a
training that fits many times on parts of one table takes those parts of it
(:meth:`TrainingData.take`). Alongside: the hashes that identify the data (:func:`data_hash`;
:attr:`TrainingData.targets_hash` for what was computed from it),
the weights that balance its sources (:func:`source_weights`) and the (model, nodes) cells of
grouped folds (:func:`cell_groups`).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.params import ParameterSets
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.errors import DataError
from surrogate.learned.features import features_for_runs
from surrogate.learned.physics import Physics, fit_physics

if TYPE_CHECKING:
    import pandas as pd


def data_hash(runs: pd.DataFrame) -> str:
    """sha256 of the training rows (sorted by source and run_id), identifying the data."""
    cols = sorted(runs.columns)
    frame = runs[cols].sort_values([c for c in ("source", "run_id") if c in cols] or cols)
    return hashlib.sha256(frame.to_csv(index=False).encode()).hexdigest()


def status_labels(status: pd.Series) -> np.ndarray:
    """completed -> 0, oom -> 1, fail and timeout -> 2."""
    mapping = {"completed": 0, "oom": 1, "fail": 2, "timeout": 2}
    unknown = set(status.unique()) - set(mapping)
    if unknown:
        raise DataError(f"status must be one of {', '.join(mapping)}, got {sorted(unknown)}")
    return status.map(mapping).to_numpy(dtype=np.int64)


def source_weights(runs: pd.DataFrame) -> np.ndarray:
    """Per run: (runs of the largest source) / (runs of its source), so that every source
    weighs as much as the largest in the fit and a user's few runs of their own cluster are
    not drowned by thousands of Playbook runs. One source: all 1.

    Chosen by measurement against unweighted runs: MosaicML's MPT runs play the user's, k of
    them added to the Playbook's (``python benchmarks/accuracy.py --transfer`` prints both,
    README "The learned model")."""
    counts = runs["source"].map(runs["source"].value_counts()).to_numpy(dtype=np.float64)
    return np.asarray(counts.max() / counts, dtype=np.float64)


def cell_groups(runs: pd.DataFrame) -> np.ndarray:
    """Group label per run for grouped folds: the (model shape, node count) cell."""
    key = (
        runs["hidden_size"].astype(str)
        + "/"
        + runs["num_layers"].astype(str)
        + "@"
        + runs["num_nodes"].astype(str)
    )
    return key.to_numpy()


@dataclass(frozen=True, kw_only=True)
class TrainingData:
    """A runs table turned into what the models learn from, once (:func:`training_data`).

    Every feature and target is a function of its own run only, so the rows of a part are the
    part's own preparation (:meth:`take`): an evaluation or a tuning study that fits on many
    parts of one table prepares it once."""

    runs: pd.DataFrame
    """The runs (``surrogate.runs.sweeps`` columns), indexed 0..n-1."""
    profile: Any
    """The calibration profile the features were computed under (None: each run's cluster's,
    ``surrogate.runs.context.run_context``)."""
    X: pd.DataFrame
    """Features (:data:`surrogate.learned.features.FEATURE_NAMES`), one row per run."""
    analytic: dict[str, np.ndarray]
    """The analytic model's outputs for each run (``tokens_per_s_per_gpu``, ``mem_reserved``
    bytes, ...)."""
    cols: dict[str, np.ndarray]
    """The analytic model's input columns (the training domain is read from them)."""
    y_status: np.ndarray
    """0 completed, 1 oom, 2 fail and timeout (:func:`status_labels`)."""
    done: np.ndarray
    """Completed runs with a measured throughput: the rows of the throughput models."""
    y_mfu: np.ndarray
    """log(measured / analytic tokens/s per GPU) where ``done``, NaN elsewhere."""
    mem_ok: np.ndarray
    """Completed runs with a measured peak reserved memory: the rows of the memory model."""
    y_mem: np.ndarray
    """log(measured / analytic peak reserved memory) where ``mem_ok``, NaN elsewhere."""
    groups: np.ndarray
    """(model, nodes) cell of each run (:func:`cell_groups`), for grouped folds."""
    physics_sets: dict[str, Any] = field(default_factory=dict)
    """Analytic parameter sets fitted on these runs for framework versions
    :attr:`parameter_sets` lacked (``surrogate.calibration.fit_params.own_sets``), under which (over
    :attr:`parameter_sets`) the features were computed."""
    parameter_sets: ParameterSets = field(default_factory=shipped_parameter_sets)
    """The analytic parameter sets the features were computed under, below
    :attr:`physics_sets` (the shipped ones unless :func:`training_data` was given others)."""

    def __len__(self) -> int:
        return len(self.runs)

    @property
    def physics(self) -> Physics:
        """The analytic parameter sets the features and targets were computed under
        (``surrogate.learned.physics``)."""
        return Physics(base=self.parameter_sets, own=self.physics_sets)

    def take(self, rows: np.ndarray) -> TrainingData:
        """The part of the table at positions ``rows``, as :func:`training_data` would
        prepare it (without computing anything again)."""
        rows = np.asarray(rows)
        return TrainingData(
            runs=self.runs.iloc[rows].reset_index(drop=True),
            profile=self.profile,
            X=self.X.iloc[rows].reset_index(drop=True),
            analytic={k: v[rows] for k, v in self.analytic.items()},
            cols={k: v[rows] for k, v in self.cols.items()},
            y_status=self.y_status[rows],
            done=self.done[rows],
            y_mfu=self.y_mfu[rows],
            mem_ok=self.mem_ok[rows],
            y_mem=self.y_mem[rows],
            groups=self.groups[rows],
            physics_sets=self.physics_sets,
            parameter_sets=self.parameter_sets,
        )

    def sample_weight(self, *, balance_sources: bool = True) -> np.ndarray:
        """One weight per run: :func:`source_weights` of these runs (each part is balanced
        over its own sources), or all 1."""
        return source_weights(self.runs) if balance_sources else np.ones(len(self.runs))

    @functools.cached_property
    def mem_floor(self) -> np.ndarray:
        """Where a run ran out of memory, log(GPU capacity / analytic peak reserved memory of
        the most loaded rank): its need was above the capacity, so the memory correction
        that prediction applies to that rank is above this (NaN for other runs)."""
        floor = np.full(len(self.runs), np.nan)
        oom = self.y_status == 1
        floor[oom] = np.log(self.cols["memory_bytes"][oom] / self.analytic["mem_reserved"][oom])
        return floor

    @functools.cached_property
    def data_hash(self) -> str:
        """:func:`data_hash` of the runs."""
        return data_hash(self.runs)

    @functools.cached_property
    def targets_hash(self) -> str:
        """sha256 of the features and targets: unlike :attr:`data_hash` it changes with the
        physics under them (the analytic model, its parameters, the profiles), not only with
        the runs."""
        h = hashlib.sha256()
        for a in (self.X.to_numpy(dtype=np.float64), self.y_status, self.y_mfu, self.y_mem):
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        return h.hexdigest()


def training_data(
    runs: pd.DataFrame,
    *,
    profile: Any = None,
    own_physics: bool = True,
    sets: ParameterSets | None = None,
    physics: Physics | None = None,
) -> TrainingData:
    """Features and targets of a runs table, computed once (:class:`TrainingData`).

    The targets are the runs' own measurements relative to the analytic model's answer for
    them, each run explained under its own cluster
    (``surrogate.learned.features.features_for_runs``):
    the status code, log(measured / analytic tokens/s per GPU) and log(measured / analytic
    peak reserved memory), the latter of the rank the measurement was logged on
    (``surrogate.ingest.playbook.LOGGED_STAGE``): the learned factor corrects a rank's
    memory,
    and prediction applies it to the most loaded rank's.

    The physics comes first, its own step (``surrogate.learned.physics``): ``physics`` as
    given, else :func:`~surrogate.learned.physics.fit_physics` of these runs: ``sets`` (None:
    the shipped ones) and, with ``own_physics``, sets fitted on these runs for the framework
    versions they lack (a user's own), under which every run is explained: the correction
    learns what calibrated physics misses, and a model fitted on these data carries the sets
    (``parameter_sets``, ``physics_sets``)."""
    if physics is not None and sets is not None:
        raise ValueError("give the physics or the sets it starts from, not both")
    if len(runs) == 0:
        raise DataError("cannot learn from an empty sweep table")
    runs = runs.reset_index(drop=True)
    y_status = status_labels(runs["status"])
    if physics is None:
        physics = (
            fit_physics(runs, profile=profile, sets=sets)
            if own_physics
            else Physics(base=shipped_parameter_sets() if sets is None else sets)
        )
    base, own = physics.base, dict(physics.own)
    X, out, cols = features_for_runs(runs, profile, physics.sets)
    tps = runs["tokens_per_s_per_gpu"].to_numpy(dtype=np.float64)
    mem_gib = runs["peak_mem_reserved_gib"].to_numpy(dtype=np.float64)
    done = (y_status == 0) & (tps > 0)
    mem_ok = (y_status == 0) & (mem_gib > 0)
    y_mfu = np.full(len(runs), np.nan)
    y_mfu[done] = np.log(tps[done] / out["tokens_per_s_per_gpu"][done])
    y_mem = np.full(len(runs), np.nan)
    logged = out.get("mem_reserved_logged", out["mem_reserved"])  # the rank that logged it
    y_mem[mem_ok] = np.log(mem_gib[mem_ok] * 2**30 / logged[mem_ok])
    return TrainingData(
        runs=runs,
        profile=profile,
        X=X,
        analytic=out,
        cols=cols,
        y_status=y_status,
        done=done,
        y_mfu=y_mfu,
        mem_ok=mem_ok,
        y_mem=y_mem,
        groups=cell_groups(runs),
        physics_sets=own,
        parameter_sets=base,
    )


def fit_inputs(
    X: pd.DataFrame | TrainingData,
    y: None,
    profile: Any,
    sample_weight: np.ndarray | None,
    *,
    n_folds: int,
    balance_sources: bool,
) -> tuple[TrainingData, np.ndarray]:
    """The training data and per-run weights ``SurrogateModel.fit`` learns from, checked
    before anything is fitted (``SurrogateModel.fit`` says what must hold)."""
    if y is not None:
        raise DataError(
            "y must be None: the targets are the runs' own columns (status, "
            "tokens_per_s_per_gpu, peak_mem_reserved_gib), read from X"
        )
    if isinstance(X, TrainingData):
        if profile is not None:
            raise ValueError(
                "profile must be None when X is a TrainingData: give it to "
                "training_data(), which computed the features under it"
            )
        data = X
    else:
        data = training_data(X, profile=profile)
    if sample_weight is not None:
        sw = np.asarray(sample_weight, dtype=np.float64)
    else:
        sw = data.sample_weight(balance_sources=balance_sources)
    if sw.shape != (len(data),) or not (np.isfinite(sw) & (sw > 0)).all():
        raise DataError(f"sample_weight must hold one positive number per run ({len(data)})")
    done = data.done
    if done.sum() < 2 * n_folds:
        raise DataError(
            f"need at least {2 * n_folds} completed runs with a throughput, got {int(done.sum())}"
        )
    if len(np.unique(data.groups[done])) < 2:
        raise DataError("need runs from at least two (model, nodes) cells for the interval")
    return data, sw
