"""``surrogate.predict``: one configuration or a table of them in, predictions out.

The analytic model (``surrogate.analytic``) answers with the hardware speed of a
:class:`~surrogate.analytic.perf.PerfModel`: a calibration profile when one is given, the
default profile of the GPU when one ships, the datasheet otherwise. A learned
:class:`~surrogate.learned.model.SurrogateModel` then corrects it (``model="default"``: the model
shipped in the package; a directory or a fitted model; ``None`` for the analytic model alone).
Alone, the analytic OOM verdict is a hard 0/1 and there is no MFU interval
(``pred_mfu_lo``/``pred_mfu_hi`` are NaN). When no learned model is available, predictions
fall back to the analytic model with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, overload

import numpy as np

from surrogate.analytic.memory import BREAKDOWN_TERMS
from surrogate.analytic.params import DEFAULT_SET, ParameterSets
from surrogate.analytic.perf import PerfModel
from surrogate.analytic.step import STEP_TERMS
from surrogate.config.files import check_table_columns, expand_model_column
from surrogate.config.gpus import GIB
from surrogate.config.table import runs_as_another, validate_table
from surrogate.config.training import CONFIG_COLUMNS, TrainingConfig, config_to_flat
from surrogate.errors import ConfigError, NoModelError
from surrogate.io.jsonsafe import json_safe
from surrogate.learned.model import SurrogateModel
from surrogate.prediction.scoring import score
from surrogate.runs.names import current_names

if TYPE_CHECKING:
    import pandas as pd

    from surrogate.learned.model import SurrogateModel

DEFAULT_MODEL_DIR = Path(__file__).parents[1] / "data" / "models" / "default"
"""Where the bundled model lives (LightGBM text files + ``model.json``)."""

PRED_COLUMNS: tuple[str, ...] = (
    "p_oom",
    "pred_status",
    "pred_mfu",
    "pred_mfu_lo",
    "pred_mfu_hi",
    "pred_tokens_per_s_per_gpu",
    "pred_step_time_s",
    "pred_peak_mem_reserved_gib",
    "pred_peak_mem_reserved_lo_gib",
    "pred_peak_mem_reserved_hi_gib",
    "extrapolation",
    "domain_weight",
    "correction_share",
)
"""Columns ``predict --from-csv`` adds to the input columns (and ``error``).

``pred_peak_mem_reserved_gib`` is the peak memory reserved by PyTorch's allocator on the most loaded
GPU (what frameworks log and the sweep tables measure as ``peak_mem_reserved_gib``), with
its interval from a learned model (NaN analytic alone); the device total adds the CUDA
context (``Prediction.peak_device_mem_gib``). ``extrapolation`` is empty where the learned model has
data and the configuration lies within published practice, else what lies outside them
(``surrogate.learned.domain``); with the analytic model alone, only the latter. ``domain_weight``
and ``correction_share``: how much of the learned correction the row keeps, off the data and
where its framework's held-out runs gave it only part (``surrogate.prediction.scoring``; 0 analytic
alone)."""
RUNS_AS_ANOTHER = "runs_as_another"
"""The column ``predict --from-csv`` adds after :data:`PRED_COLUMNS`: why the row's framework
would run its layout as another one (``Prediction.to_dict``'s key of the same name; the layout
is still predicted as given), '' where it runs as given or the row is not a configuration."""
_EMPTY: dict[str, Any] = {"pred_status": None, "extrapolation": ""}
"""What a row without a prediction holds in the non-numeric :data:`PRED_COLUMNS` (NaN else)."""

PredStatus = Literal["completed", "oom", "fail"]
"""A prediction's likeliest outcome (``fail`` only with a learned model)."""
_PRED_STATUSES: dict[str, PredStatus] = {s: s for s in get_args(PredStatus)}


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """What the surrogate says of one configuration."""

    config: TrainingConfig
    memory_bytes: dict[str, float]
    """Breakdown of the most loaded rank (keys: ``memory.BREAKDOWN_TERMS`` and ``total``)."""
    capacity_bytes: float
    step_s: dict[str, float]
    """Step-time breakdown (keys: ``step.STEP_TERMS``), summing to ``step_time_s``."""
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    mfu_lo: float
    mfu_hi: float
    p_oom: float
    bubble_frac: float
    perf_model: str
    """Which hardware speed was used: a profile's name or 'datasheet'."""
    peak_mem_reserved_gib: float
    """What ``torch.cuda.max_memory_reserved`` would report on the most loaded GPU (no CUDA
    context): ``pred_peak_mem_reserved_gib`` of :mod:`surrogate.prediction.scoring`."""
    peak_mem_reserved_lo_gib: float = float("nan")
    peak_mem_reserved_hi_gib: float = float("nan")
    """The interval of ``peak_mem_reserved_gib`` (learned model: ``coverage`` of held-out runs
    inside; NaN for the analytic model alone)."""
    pred_status: PredStatus
    """completed / oom (/ fail with a learned model)."""
    source: str = "analytic"
    """'analytic', or 'learned' when a SurrogateModel corrected the analytic estimate."""
    p_fail: float = float("nan")
    analytic_mfu: float = float("nan")
    explanation: dict[str, float] | None = None
    """With ``explain=True`` and a learned model: the largest SHAP contributions to
    log(measured / analytic throughput), by feature."""
    extrapolation: str = ""
    """Empty inside the learned model's data; else what lies outside it (the correction then
    shrinks toward the analytic answer by ``domain_weight`` and the interval widens), and where
    the configuration passes anything published (``surrogate.learned.domain.beyond_practice``)."""
    domain_weight: float = 0.0
    """Share of the learned correction kept (1 inside the data, 0 for an unseen GPU or
    framework, 0 for the analytic model alone)."""
    correction_share: float = 0.0
    """Share of the learned throughput correction its framework version's held-out runs bear
    out (1: all of it; 0 for the analytic model alone). The throughput keeps
    ``domain_weight`` x ``correction_share`` of the correction."""
    parameter_sets: ParameterSets = field(default_factory=ParameterSets, repr=False, compare=False)
    """The analytic parameter sets the prediction was made under."""

    @property
    def fits(self) -> bool:
        return self.p_oom < 0.5

    @property
    def parameter_set(self) -> tuple[str, bool]:
        """The ``framework/version`` whose free parameters the analytic model used
        (``FrameworkTraits.parameter_set``) and whether a fitted set of it is in use (False:
        the priors)."""

        name = self.config.layout.parameter_set()
        return name, name in self.parameter_sets

    @property
    def parameter_source(self) -> str:
        """Where the analytic model's free parameters came from: ``fitted`` (the set of
        :attr:`parameter_set`), ``default`` (no set of its own: the default set, fitted on
        every framework's runs together, ``surrogate.calibration.fit_params.fit_default``) or
        ``priors``
        (neither ships)."""

        _, fitted = self.parameter_set
        if fitted:
            return "fitted"
        return "default" if DEFAULT_SET in self.parameter_sets else "priors"

    @property
    def status(self) -> PredStatus:
        return self.pred_status

    @property
    def peak_device_mem_gib(self) -> float:
        """Device memory of the most loaded GPU, GiB: ``peak_mem_reserved_gib`` plus the CUDA
        context (``pred_peak_device_mem_gib`` of :mod:`surrogate.prediction.scoring`)."""
        return self.peak_mem_reserved_gib + self.memory_bytes["cuda_context"] / GIB

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: configuration, breakdowns (GiB and seconds) and headline figures."""

        out: dict[str, Any] = json_safe(
            {
                "config": config_to_flat(self.config),
                "source": self.source,
                "perf_model": self.perf_model,
                "memory_gib": {k: v / GIB for k, v in self.memory_bytes.items()},
                "capacity_gib": self.capacity_bytes / GIB,
                "fits": self.fits,
                "p_oom": self.p_oom,
                "p_fail": self.p_fail,
                "pred_status": self.status,
                "peak_mem_reserved_gib": self.peak_mem_reserved_gib,
                "peak_mem_reserved_lo_gib": self.peak_mem_reserved_lo_gib,
                "peak_mem_reserved_hi_gib": self.peak_mem_reserved_hi_gib,
                "analytic_mfu": self.analytic_mfu,
                "explanation": self.explanation,
                "runs_as_another": self.config.runs_as_another() or "",
                "analytic_parameters": {
                    **dict(zip(("set", "fitted"), self.parameter_set, strict=True)),
                    "source": self.parameter_source,
                },
                "extrapolates": bool(self.extrapolation),
                "extrapolation": self.extrapolation,
                "domain_weight": self.domain_weight,
                "correction_share": self.correction_share,
                "step_time_s": self.step_s | {"total": self.step_time_s},
                "bubble_frac": self.bubble_frac,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "mfu": self.mfu,
                "mfu_lo": self.mfu_lo,
                "mfu_hi": self.mfu_hi,
            }
        )
        return out


@cache
def _bundled_model() -> SurrogateModel | None:

    try:
        return SurrogateModel.load(DEFAULT_MODEL_DIR)
    except NoModelError:
        return None


def resolve_model(model: SurrogateModel | str | Path | None) -> SurrogateModel | None:
    """The learned model to use: ``"default"`` is the bundled one (None, with a warning, when
    the package ships none); a path is loaded; None means the analytic model alone."""
    if model is None:
        return None
    if isinstance(model, str) and model == "default":
        bundled = _bundled_model()
        if bundled is None:
            warnings.warn(
                "no learned model is bundled; predictions are the analytic model's alone "
                "(train one with `surrogate train`)",
                stacklevel=3,
            )
        return bundled
    if isinstance(model, str | Path):
        return SurrogateModel.load(model)
    return model


def _predict_configs(
    configs: Sequence[TrainingConfig],
    profile: str | Path | PerfModel | None,
    model: SurrogateModel | None,
    *,
    explain: bool = False,
    sets: ParameterSets | None = None,
) -> list[Prediction]:
    """:class:`Prediction` objects from :func:`surrogate.prediction.scoring.score`; an impossible
    answer
    is a ConfigError."""
    if not configs:
        return []
    s = score(configs, model=model, profile=profile, explain=explain, sets=sets)
    bad = next((r for r in s.columns["error"] if r), "")
    if bad:
        raise ConfigError(bad)
    col, out, learned = s.columns, s.analytic, model is not None
    preds = []
    for j, cfg in enumerate(configs):
        preds.append(
            Prediction(
                config=cfg,
                memory_bytes={k: float(out[f"mem_{k}"][j]) for k in (*BREAKDOWN_TERMS, "total")},
                capacity_bytes=float(s.cols["memory_bytes"][j]),
                step_s={k: float(out[f"time_{k}"][j]) for k in STEP_TERMS},
                bubble_frac=float(out["bubble_frac"][j]),
                perf_model=s.perf_models[j],
                analytic_mfu=float(col["analytic_mfu"][j]),
                step_time_s=float(col["pred_step_time_s"][j]),
                tokens_per_s_per_gpu=float(col["pred_tokens_per_s_per_gpu"][j]),
                mfu=float(col["pred_mfu"][j]),
                mfu_lo=float(col["pred_mfu_lo"][j]),
                mfu_hi=float(col["pred_mfu_hi"][j]),
                p_oom=float(col["p_oom"][j]),
                p_fail=float(col["p_fail"][j]),
                pred_status=_PRED_STATUSES[str(col["pred_status"][j])],
                peak_mem_reserved_gib=float(col["pred_peak_mem_reserved_gib"][j]),
                peak_mem_reserved_lo_gib=float(col["pred_peak_mem_reserved_lo_gib"][j]),
                peak_mem_reserved_hi_gib=float(col["pred_peak_mem_reserved_hi_gib"][j]),
                source="learned" if learned else "analytic",
                explanation=s.explanations[j] if s.explanations else None,
                extrapolation=str(col["extrapolation"][j]),
                domain_weight=float(col["domain_weight"][j]),
                correction_share=float(col["correction_share"][j]),
                parameter_sets=s.parameter_sets,
            )
        )
    return preds


def predict_frame(
    df: pd.DataFrame,
    *,
    profile: str | Path | PerfModel | None = None,
    model: SurrogateModel | str | Path | None = "default",
    sets: ParameterSets | None = None,
) -> pd.DataFrame:
    """Predict every row of ``df`` (columns :data:`CONFIG_COLUMNS`, optional ones taking their
    defaults, and ``model`` naming a preset, as ``predict --from-csv`` reads them). Returns the
    input columns (a preset's model columns filled in where a row leaves them empty) plus
    :data:`PRED_COLUMNS`, :data:`RUNS_AS_ANOTHER` and ``error``: a row that fails validation
    gets its message there and NaN predictions; the others are predicted.
    A column that is a near miss of a configuration column (``zero``, ``grad-accum``) is a
    ConfigError, not a silently defaulted column, as is a ``model`` cell that names no preset.
    Anything but a DataFrame is a TypeError saying what is taken."""
    _check_frame(df)
    df = current_names(df)  # a table of predictions under older names predicts again
    check_table_columns(df.columns, where="the configuration table")
    # the one reader of a model column, --from-csv's (whose chunks come here already filled)
    df = expand_model_column(df, where="the configuration table")
    learned = resolve_model(model)
    checked = validate_table(df)
    errors = list(checked.errors)
    n = len(df)
    answers: dict[str, np.ndarray] = {col: np.full(n, np.nan) for col in PRED_COLUMNS}
    answers["pred_status"] = np.full(n, None, dtype=object)
    answers["extrapolation"] = np.full(n, "", dtype=object)
    notes = np.full(n, "", dtype=object)
    if len(checked.rows):
        notes[checked.rows] = runs_as_another(checked.table)
        columns = score(checked.table, model=learned, profile=profile, sets=sets).columns
        for col in PRED_COLUMNS:
            answers[col][checked.rows] = columns[col]
        # an impossible answer is an error, not a prediction
        reasons = columns["error"]
        bad = np.flatnonzero(reasons.astype(bool))
        impossible_rows = checked.rows[bad]
        for pos, reason in zip(impossible_rows.tolist(), reasons[bad].tolist(), strict=True):
            errors[pos] = reason
        notes[impossible_rows] = ""
        for col in PRED_COLUMNS:
            answers[col][impossible_rows] = _EMPTY.get(col, np.nan)
    import pandas as pd

    out = df.copy()
    for col in PRED_COLUMNS:  # a Series keeps None as None in the text columns
        out[col] = pd.Series(answers[col], index=df.index, dtype=answers[col].dtype)
    out[RUNS_AS_ANOTHER] = pd.Series(notes, index=df.index, dtype=object)
    out["error"] = errors
    return out


def _check_frame(config: Any) -> None:
    """TypeError unless ``config`` is a DataFrame, saying what :func:`predict` takes."""
    import pandas as pd

    if isinstance(config, pd.DataFrame):
        return
    hint = (
        ": for one configuration's columns, predict(pd.DataFrame([columns])) (or build a "
        "TrainingConfig)"
        if isinstance(config, Mapping)
        else ""
    )
    raise TypeError(
        f"predict takes a TrainingConfig (one configuration) or a pandas DataFrame "
        f"(one configuration per row, the columns of predict --from-csv), got "
        f"{type(config).__name__}{hint}"
    )


@overload
def predict(
    config: TrainingConfig,
    *,
    profile: str | Path | PerfModel | None = None,
    model: SurrogateModel | str | Path | None = "default",
    explain: bool = False,
    sets: ParameterSets | None = None,
) -> Prediction: ...
@overload
def predict(
    config: pd.DataFrame,
    *,
    profile: str | Path | PerfModel | None = None,
    model: SurrogateModel | str | Path | None = "default",
    explain: bool = False,
    sets: ParameterSets | None = None,
) -> pd.DataFrame: ...
def predict(
    config: TrainingConfig | pd.DataFrame,
    *,
    profile: str | Path | PerfModel | None = None,
    model: SurrogateModel | str | Path | None = "default",
    explain: bool = False,
    sets: ParameterSets | None = None,
) -> Prediction | pd.DataFrame:
    """Predict one :class:`TrainingConfig` (a :class:`Prediction`) or every row of a DataFrame
    (see :func:`predict_frame`).

    Args:
        config: A validated configuration, or a table with one configuration per row (the
            columns of :data:`CONFIG_COLUMNS`, optional ones taking their defaults, and
            ``model`` naming a preset: those of ``predict --from-csv``).
        profile: The hardware's speeds: a calibration profile's file or shipped name (such as
            ``"hf-playbook-cluster"``), a ``PerfModel``, or None for the GPU's default profile
            (the datasheet where none ships).
        model: The learned correction (:func:`resolve_model`): ``"default"`` is the bundled
            model, a path loads a saved one, a ``SurrogateModel`` is used as given, and None
            gives the analytic model alone.
        explain: With a single configuration and a learned model, add the correction's
            largest SHAP contributions (``Prediction.explanation``).
        sets: The analytic model's parameter sets (None: the model's, else the shipped
            ones; :func:`surrogate.prediction.scoring.score`).

    Returns:
        One ``Prediction`` for a configuration. For a table, a DataFrame of the input
            columns plus :data:`PRED_COLUMNS`, :data:`RUNS_AS_ANOTHER` and ``error``: a row that
            fails validation gets its message in ``error`` and NaN predictions, the others are
            predicted.

    Raises:
        ConfigError: The single configuration's answer is impossible (an MFU above 100%, a
            count beyond exact float64 integers), a table column is a near miss of a
            configuration column (``zero`` for ``zero_stage``), or a ``model`` cell names no
            preset.
        TypeError: ``config`` is neither a TrainingConfig nor a DataFrame (a dict of one
            configuration's columns: ``pd.DataFrame([columns])``).
        NoModelError: ``model`` is a path that holds no saved model.
        DataError: The saved model's files are damaged (their sha256 does not match its
            sidecar) or were written for other features.
    """
    if isinstance(config, TrainingConfig):
        return _predict_configs(
            [config], profile, resolve_model(model), explain=explain, sets=sets
        )[0]
    return predict_frame(config, profile=profile, model=model, sets=sets)


__all__ = [
    "CONFIG_COLUMNS",
    "PRED_COLUMNS",
    "RUNS_AS_ANOTHER",
    "Prediction",
    "predict",
    "predict_frame",
]
