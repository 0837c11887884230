"""The one way from configurations to predictions: :func:`score`.

``predict``, ``predict_frame``, search, active learning and evaluation all call it, so a
column means the same everywhere. One vectorised pass: the analytic model over every
configuration (``surrogate.analytic.run``), then, with a learned model, its correction from
the physics-shaped features (``surrogate.learned.features``, ``surrogate.learned.model``).

Columns (:data:`SCORE_COLUMNS`, one array each, in configuration order):

- ``p_completed``, ``p_oom``, ``p_fail``: status probabilities. The analytic model alone gives
  p_oom from its memory estimate and its fitted error (``memory.oom_probability``) and no
  p_fail (NaN).
- ``pred_status``: ``oom`` where p_oom >= 0.5, else the likelier of completed and fail;
  p_oom is held to the memory interval where one is given
  (``surrogate.prediction.memory_verdict``).
- ``pred_mfu``, ``pred_mfu_lo``, ``pred_mfu_hi``: MFU and its interval (NaN analytic alone).
- ``pred_tokens_per_s_per_gpu``, ``pred_step_time_s``: throughput and step time, consistent
  with ``pred_mfu``.
- ``pred_peak_mem_reserved_gib``: peak memory reserved by PyTorch's caching allocator on the most
  loaded GPU (``torch.cuda.max_memory_reserved``: what frameworks log and the sweep tables
  hold as ``peak_mem_reserved_gib``).
- ``pred_peak_mem_reserved_lo_gib``, ``pred_peak_mem_reserved_hi_gib``: its interval (NaN
  analytic alone).
- ``pred_peak_device_mem_gib``: the device's peak, ``pred_peak_mem_reserved_gib`` plus the CUDA
  context; this is what must fit ``capacity_gib``.
- ``capacity_gib``: the GPU's memory.
- ``analytic_mfu``: the analytic model's MFU, before any correction.
- ``domain_weight``: share of the learned correction kept (1 inside the learned model's data,
  0 for an unseen GPU or framework, and 0 for the analytic model alone).
- ``correction_share``: share of the learned throughput correction that the held-out runs of
  the configuration's framework version bear out
  (``SurrogateModel.correction_weight_by_framework_``: 1 where the correction beat the physics
  under it on them, less where it gave way to it; 0 for the analytic model alone). The
  throughput keeps ``domain_weight`` x ``correction_share`` of the correction.
- ``extrapolation``: '' or what lies outside the learned model's data and published practice.
- ``error``: '' or why the analytic answer is physically impossible
  (``surrogate.analytic.run.impossible``); such a row is never a prediction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.params import ParameterSets
from surrogate.analytic.run import analytic_for, impossible
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.gpus import GIB
from surrogate.config.table import FlatTable, table_len, valid_table
from surrogate.config.training import TrainingConfig
from surrogate.hardware.perf_models import resolve_perf_model
from surrogate.learned.domain import beyond_practice
from surrogate.learned.features import features_from_analytic
from surrogate.learned.physics import check_physics
from surrogate.prediction.memory_verdict import STATUS_NAMES
from surrogate.prediction.memory_verdict import agree as agreeing
from surrogate.runs.context import run_context

if TYPE_CHECKING:
    import pandas as pd

    from surrogate.analytic.perf import PerfModel
    from surrogate.learned.model import SurrogateModel

SCORE_COLUMNS: tuple[str, ...] = (
    "p_completed",
    "p_oom",
    "p_fail",
    "pred_status",
    "pred_mfu",
    "pred_mfu_lo",
    "pred_mfu_hi",
    "pred_tokens_per_s_per_gpu",
    "pred_step_time_s",
    "pred_peak_mem_reserved_gib",
    "pred_peak_mem_reserved_lo_gib",
    "pred_peak_mem_reserved_hi_gib",
    "pred_peak_device_mem_gib",
    "capacity_gib",
    "analytic_mfu",
    "domain_weight",
    "correction_share",
    "extrapolation",
    "error",
)
"""What :func:`score` returns for every configuration (module docstring)."""


@dataclass(frozen=True)
class Scores:
    """:func:`score`'s answer: the columns, and what they were computed from."""

    columns: dict[str, np.ndarray]
    """:data:`SCORE_COLUMNS`, one array each."""
    cols: dict[str, np.ndarray]
    """The analytic model's input columns (``surrogate.analytic.inputs``)."""
    analytic: dict[str, np.ndarray]
    """The analytic outputs: ``mem_*`` bytes, ``time_*`` seconds, headline figures."""
    perf_models: list[str]
    """Name of the hardware speed each configuration used (a profile's, or 'datasheet')."""
    explanations: list[dict[str, float]] = field(default_factory=list)
    """With ``explain=True`` and a learned model: per configuration, the largest SHAP
    contributions to the throughput correction."""
    parameter_sets: ParameterSets = field(default_factory=ParameterSets)
    """The analytic parameter sets the configurations were scored under."""

    def __len__(self) -> int:
        return len(self.perf_models)

    def frame(self, index: Any = None) -> pd.DataFrame:
        """The columns as a DataFrame (``index``: the rows' index, default 0..n-1)."""
        import pandas as pd

        return pd.DataFrame(self.columns, index=index)


def score(
    configs: Sequence[TrainingConfig] | FlatTable,
    *,
    model: SurrogateModel | None = None,
    profile: str | Path | PerfModel | Sequence[Any] | None = None,
    extra: Mapping[str, np.ndarray] | None = None,
    shrink_doublings: float | None = None,
    explain: bool = False,
    agree: bool = True,
    sets: ParameterSets | None = None,
) -> Scores:
    """Score ``configs``: validated configurations, or their flat table
    (:func:`surrogate.config.table.validate_table` checks a DataFrame of them column-wise);
    see the module docstring for the columns.

    ``model``: a fitted :class:`~surrogate.learned.model.SurrogateModel`, or None for the analytic
    model alone (``surrogate.prediction.predict.resolve_model`` turns "default" or a path into one).
    ``profile``: one calibration profile for all configurations or one per configuration;
    ``extra``: per-configuration columns the hardware model reads (``net_scale``: a run's own
    measured bandwidth). ``shrink_doublings`` overrides the learned model's shrinkage off its
    domain (evaluation compares settings); ``explain`` adds SHAP contributions; ``agree=False``
    leaves the memory interval, ``p_oom`` and the status as the learned model's parts gave them,
    unreconciled (``surrogate.prediction.memory_verdict``; ``benchmarks/oom_agreement.py``
    counts what that changes). ``sets``: the analytic parameter sets (None: the model's,
    :meth:`SurrogateModel.parameter_sets`, or without a model the shipped ones); a model's own
    sets (``physics_sets_``) go over them, and sets other than those the model was trained
    against are warned about (``surrogate.learned.physics.check_physics``)."""
    n = table_len(configs) if isinstance(configs, dict) else len(configs)
    if n == 0:
        return Scores(
            columns={k: np.zeros(0) for k in SCORE_COLUMNS}, cols={}, analytic={}, perf_models=[]
        )
    # the analytic model under the parameters the learned one was trained under
    if sets is None:
        used = shipped_parameter_sets() if model is None else model.parameter_sets()
    else:
        if model is not None:
            check_physics(model.base_parameter_sets_, sets)
        used = sets if model is None else sets.with_more(model.physics_sets_)
    c, out, names = analytic_for(
        configs, profile, extra=extra, sets=used, resolve=resolve_perf_model
    )
    context = out["mem_cuda_context"]
    explanations: list[dict[str, float]] = []
    if model is not None:
        X = features_from_analytic(c, out)
        learned = model.predict_from_features(
            X, out, c, shrink_doublings=shrink_doublings, sets=used
        )
        columns = {
            k: np.asarray(learned[k])
            for k in (
                "p_completed",
                "p_oom",
                "p_fail",
                "pred_status",
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
                "extrapolation",
            )
        }
        if explain:
            explanations = model.explain(X)
    else:
        columns = _analytic_columns(c, out)
    columns["pred_peak_device_mem_gib"] = columns["pred_peak_mem_reserved_gib"] + context / GIB
    columns["capacity_gib"] = c["memory_bytes"] / GIB
    columns["analytic_mfu"] = out["mfu"]
    # one answer about memory: interval, p_oom and verdict
    # (surrogate.prediction.memory_verdict)
    if agree:
        columns = agreeing(columns, context / GIB)
    columns["error"] = np.array(impossible(c, out), dtype=object)
    return Scores(
        columns={k: columns[k] for k in SCORE_COLUMNS},
        cols=c,
        analytic=out,
        perf_models=names,
        explanations=explanations,
        parameter_sets=used,
    )


def _analytic_columns(
    c: dict[str, np.ndarray], out: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The prediction columns of the analytic model alone: no interval, no learned status."""
    n = len(out["mfu"])

    def nan() -> np.ndarray:
        return np.full(n, np.nan)

    return {
        "p_completed": 1.0 - out["p_oom"],
        "p_oom": out["p_oom"],
        "p_fail": nan(),
        "pred_status": STATUS_NAMES[np.where(out["p_oom"] < 0.5, 2, 0)],
        "pred_mfu": out["mfu"],
        "pred_mfu_lo": nan(),
        "pred_mfu_hi": nan(),
        "pred_tokens_per_s_per_gpu": out["tokens_per_s_per_gpu"],
        "pred_step_time_s": out["step_time_s"],
        "pred_peak_mem_reserved_gib": out["mem_reserved"] / GIB,
        "pred_peak_mem_reserved_lo_gib": nan(),
        "pred_peak_mem_reserved_hi_gib": nan(),
        "domain_weight": np.zeros(n),
        "correction_share": np.zeros(n),
        "extrapolation": np.array(beyond_practice(c), dtype=object),
    }


def score_runs(
    runs: pd.DataFrame,
    *,
    model: SurrogateModel | None = None,
    profile: str | Path | PerfModel | None = None,
    shrink_doublings: float | None = None,
    sets: ParameterSets | None = None,
) -> pd.DataFrame:
    """:func:`score` a sweep table's runs, each explained under its own cluster
    (:func:`surrogate.runs.context.run_context`: the cluster's profile and the bandwidth
    the run
    measured); the columns indexed like ``runs``, and ``pred_logged_mem_gib``: the predicted
    peak reserved memory of the rank whose log the run's measurement comes from (the most
    loaded rank's, ``pred_peak_mem_reserved_gib``, unless the source logs another)."""

    table = valid_table(runs, where="runs to score")
    profiles, extra = run_context(runs, profile)
    scores = score(
        table,
        model=model,
        profile=profiles,
        extra=extra,
        shrink_doublings=shrink_doublings,
        sets=sets,
    )
    frame = scores.frame(index=runs.index)
    # the prediction of what each run measured: its memory on the rank it was logged on, the
    # learned factor (pred_peak_mem_reserved_gib over the analytic most loaded rank's) applied to it
    a = scores.analytic
    frame["pred_logged_mem_gib"] = (
        frame["pred_peak_mem_reserved_gib"].to_numpy()
        * a["mem_reserved_logged"]
        / a["mem_reserved"]
    )
    return frame


__all__ = ["SCORE_COLUMNS", "Scores", "score", "score_runs"]
