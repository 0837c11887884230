"""``surrogate.predict``: one configuration or a table of them in, predictions out.

The analytic model (``surrogate.analytic``) answers with the hardware speed of a
:class:`~surrogate.analytic.perf.PerfModel`: a calibration profile when one is given, the
default profile of the GPU when one ships, the datasheet otherwise. A learned
:class:`~surrogate.learned.SurrogateModel` then corrects it (``model="default"``: the model
shipped in the package; a directory or a fitted model; ``None`` for the analytic model alone).
Alone, the analytic OOM verdict is a hard 0/1 and there is no MFU interval
(``pred_mfu_lo``/``pred_mfu_hi`` are NaN). When no learned model is available, predictions
fall back to the analytic model with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from surrogate.analytic.inputs import Cols, to_cols
from surrogate.analytic.memory import (
    BREAKDOWN_TERMS,
    memory_breakdown,
    oom_probability,
    torch_reserved_bytes,
)
from surrogate.analytic.perf import PerfModel, SpecPerfModel
from surrogate.analytic.step import STEP_TERMS, step_breakdown
from surrogate.config import CONFIG_COLUMNS, TrainingConfig, config_from_flat
from surrogate.domain import beyond_practice
from surrogate.errors import ConfigError, SurrogateError
from surrogate.hardware import GIB

if TYPE_CHECKING:
    import pandas as pd

    from surrogate.learned import SurrogateModel

DEFAULT_MODEL_DIR = Path(__file__).parent / "data" / "models" / "default"
"""Where the bundled model lives (LightGBM text files + ``model.json``)."""

PRED_COLUMNS: tuple[str, ...] = (
    "p_oom", "pred_status", "pred_mfu", "pred_mfu_lo", "pred_mfu_hi",
    "pred_tokens_per_s_per_gpu", "pred_step_time_s", "pred_peak_mem_gib", "extrapolation",
)
"""Columns ``predict --from-csv`` adds to the input columns (and ``error``).

``pred_peak_mem_gib`` is the peak memory reserved by PyTorch's allocator on the most loaded
GPU (what frameworks log and the sweep tables measure as ``peak_mem_reserved_gib``); the
device total adds the CUDA context (``Prediction.peak_mem_gib``). ``extrapolation`` is empty
where the learned model has data and the configuration lies within published practice, else
what lies outside them (``surrogate.domain``); with the analytic model alone, only the latter."""
_EMPTY: dict[str, Any] = {"pred_status": None, "extrapolation": ""}
"""What a row without a prediction holds in the non-numeric :data:`PRED_COLUMNS` (NaN else)."""


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
    source: str = "analytic"
    """'analytic', or 'learned' when a SurrogateModel corrected the analytic estimate."""
    p_fail: float = float("nan")
    pred_status: str | None = None
    """The learned status (completed / oom / fail); None: the analytic verdict."""
    analytic_mfu: float = float("nan")
    learned_reserved_gib: float = float("nan")
    explanation: dict[str, float] | None = None
    """With ``explain=True`` and a learned model: the largest SHAP contributions to
    log(measured / analytic throughput), by feature."""
    extrapolation: str = ""
    """Empty inside the learned model's data; else what lies outside it (the correction then
    shrinks toward the analytic answer by ``domain_weight`` and the interval widens), and where
    the configuration passes anything published (``surrogate.domain.beyond_practice``)."""
    domain_weight: float = float("nan")
    """Share of the learned correction kept (1 inside the data, 0 for an unseen GPU or
    framework); NaN for the analytic model alone."""

    @property
    def fits(self) -> bool:
        return self.p_oom < 0.5

    @property
    def status(self) -> str:
        if self.pred_status is not None:
            return self.pred_status
        return "completed" if self.fits else "oom"

    @property
    def peak_mem_gib(self) -> float:
        """Device memory of the most loaded GPU, GiB: the analytic total, CUDA context included
        (with a learned model: its reserved-memory prediction plus the context)."""
        if self.learned_reserved_gib == self.learned_reserved_gib:
            return self.learned_reserved_gib + self.memory_bytes["cuda_context"] / GIB
        return self.memory_bytes["total"] / GIB

    @property
    def peak_reserved_gib(self) -> float:
        """What ``torch.cuda.max_memory_reserved`` would report (no CUDA context)."""
        if self.learned_reserved_gib == self.learned_reserved_gib:
            return self.learned_reserved_gib
        return (self.memory_bytes["total"] - self.memory_bytes["cuda_context"]) / GIB

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: configuration, breakdowns (GiB and seconds) and headline figures."""
        from surrogate.config import config_to_flat

        return {
            "config": config_to_flat(self.config),
            "source": self.source,
            "perf_model": self.perf_model,
            "memory_gib": {k: v / GIB for k, v in self.memory_bytes.items()},
            "capacity_gib": self.capacity_bytes / GIB,
            "fits": self.fits,
            "p_oom": self.p_oom,
            "p_fail": None if np.isnan(self.p_fail) else self.p_fail,
            "pred_status": self.status,
            "peak_reserved_gib": self.peak_reserved_gib,
            "analytic_mfu": None if np.isnan(self.analytic_mfu) else self.analytic_mfu,
            "explanation": self.explanation,
            "extrapolates": bool(self.extrapolation),
            "extrapolation": self.extrapolation,
            "domain_weight": None if np.isnan(self.domain_weight) else self.domain_weight,
            "step_time_s": self.step_s | {"total": self.step_time_s},
            "bubble_frac": self.bubble_frac,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "mfu": self.mfu,
            "mfu_lo": None if np.isnan(self.mfu_lo) else self.mfu_lo,
            "mfu_hi": None if np.isnan(self.mfu_hi) else self.mfu_hi,
        }


def resolve_perf_model(gpu: str, profile: str | Path | PerfModel | None = None) -> PerfModel:
    """The PerfModel for ``gpu``: ``profile`` (a path or an object) if given, else the GPU's
    default calibration profile if one ships, else the datasheet."""
    if profile is not None and not isinstance(profile, str | Path):
        return profile
    try:
        from surrogate import profile as profiles
    except ImportError:  # calibration not installed: datasheet figures
        return SpecPerfModel()
    if profile is not None:
        loaded: PerfModel = profiles.load_profile(profile)
        return loaded
    default: PerfModel | None = profiles.default_profile(gpu)
    return default if default is not None else SpecPerfModel()


def analytic_columns(c: Cols, perf: PerfModel) -> dict[str, np.ndarray]:
    """Run the analytic model on columns: memory terms (``mem_*`` bytes), step terms
    (``time_*`` seconds) and the headline outputs."""
    mem = memory_breakdown(c)
    step = step_breakdown(c, perf)
    out: dict[str, np.ndarray] = {f"mem_{k}": v for k, v in mem.items()}
    out.update({f"time_{k}": step[k] for k in STEP_TERMS})
    out["mem_reserved"] = torch_reserved_bytes(mem)
    out["p_oom"] = oom_probability(c, mem)
    for k in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "bubble_frac"):
        out[k] = step[k]
    return out


def impossible(c: Cols, out: Mapping[str, np.ndarray]) -> list[str]:
    """Per configuration: '' or why its analytic answer is physically impossible (an MFU above
    100% of the dense peak, no positive finite throughput), saying what must hold.

    An MFU above 100% comes from the MFU convention (6 N + 12 L h s FLOPs per token,
    ``surrogate.analytic.flops``): N counts an untied input embedding's vocab_size x hidden_size
    parameters at 6 FLOPs each although a lookup executes none, so where the embedding
    dominates N (a vocabulary of 10^12) the counted FLOPs are up to twice those executed and
    the MFU up to twice the GEMM efficiency. Such a configuration is refused, not clamped."""
    from surrogate.analytic.flops import active_params, embedding_params

    mfu, tps, step = out["mfu"], out["tokens_per_s_per_gpu"], out["step_time_s"]
    share = (1.0 - c["tie_embeddings"]) * embedding_params(c) / active_params(c)
    reasons = [""] * len(mfu)
    for k in np.flatnonzero(mfu > 1.0).tolist():
        why = (f"the untied input embedding (vocab_size={int(c['vocab_size'][k]):,} x "
               f"hidden_size={int(c['hidden_size'][k]):,}) is {share[k]:.0%} of the parameters "
               "N, whose 6 N FLOPs per token count a lookup that executes none; the vocabulary "
               "must be small against the rest of the model") if share[k] > 0.25 else (
               "the step time is shorter than the counted FLOPs allow (please report this "
               "configuration)")
        reasons[k] = (f"MFU must be at most 100% of the dense peak, but this configuration "
                      f"would reach {mfu[k]:.0%}: {why}")
    for k in np.flatnonzero(~(np.isfinite(tps) & (tps > 0))).tolist():
        reasons[k] = (f"tokens/s per GPU must be positive and finite, but the analytic model "
                      f"gives {tps[k]!r} (step time {step[k]!r} s)")
    return reasons


def analytic_for(
    configs: Sequence[TrainingConfig],
    profile: str | Path | PerfModel | Sequence[Any] | None = None,
    *,
    extra: Mapping[str, np.ndarray] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[str]]:
    """Columns, analytic outputs and the PerfModel name of each configuration, in order.

    ``profile`` is one profile for every configuration or a sequence of one per
    configuration; ``extra`` adds per-configuration columns the PerfModel may read (e.g.
    ``net_scale``). Configurations are grouped by (GPU, profile) so that each group uses its
    own PerfModel."""
    n = len(configs)
    per_config = not isinstance(profile, str | Path | None) and isinstance(profile, Sequence)
    if per_config and len(profile) != n:  # type: ignore[arg-type]
        raise ValueError(f"one profile per configuration: got {len(profile)} for {n}")  # type: ignore[arg-type]
    groups: dict[tuple[str, int], list[int]] = {}
    keys: dict[int, Any] = {}
    for i, cfg in enumerate(configs):
        prof = profile[i] if per_config else profile  # type: ignore[index]
        key = id(prof) if not isinstance(prof, str | Path) else hash(str(prof))
        keys[key] = prof
        groups.setdefault((cfg.cluster.gpu, key), []).append(i)
    cols: dict[str, np.ndarray] = {}
    outs: dict[str, np.ndarray] = {}
    names = [""] * n
    for (gpu, key), idx in groups.items():
        perf = resolve_perf_model(gpu, keys[key])
        c = to_cols([configs[i] for i in idx])
        for name, values in (extra or {}).items():
            c[name] = np.asarray(values, dtype=np.float64)[idx]
        out = analytic_columns(c, perf)
        for target, part in ((cols, c), (outs, out)):
            for k, v in part.items():
                target.setdefault(k, np.full(n, np.nan))[idx] = v
        for i in idx:
            names[i] = perf.name
    return cols, outs, names


@cache
def _bundled_model() -> SurrogateModel | None:
    from surrogate.errors import NoModelError
    from surrogate.learned import SurrogateModel

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
        from surrogate.learned import SurrogateModel

        return SurrogateModel.load(model)
    return model


def _predict_configs(
    configs: Sequence[TrainingConfig],
    profile: str | Path | PerfModel | None,
    model: SurrogateModel | None,
    *,
    explain: bool = False,
) -> list[Prediction]:
    if not configs:
        return []
    c, out, names = analytic_for(configs, profile)
    bad = next((r for r in impossible(c, out) if r), "")
    if bad:
        raise ConfigError(bad)
    practice = beyond_practice(c)
    learned: dict[str, np.ndarray] = {}
    contrib: list[dict[str, float]] = []
    if model is not None:
        from surrogate.features import features_from_analytic

        X = features_from_analytic(c, out)
        learned = model.predict_from_features(X, out, c)
        if explain:
            contrib = model.explain(X)
    preds = []
    for j, cfg in enumerate(configs):
        base = dict(
            config=cfg,
            memory_bytes={k: float(out[f"mem_{k}"][j]) for k in (*BREAKDOWN_TERMS, "total")},
            capacity_bytes=float(c["memory_bytes"][j]),
            step_s={k: float(out[f"time_{k}"][j]) for k in STEP_TERMS},
            bubble_frac=float(out["bubble_frac"][j]),
            perf_model=names[j],
            analytic_mfu=float(out["mfu"][j]),
        )
        if learned:
            preds.append(Prediction(
                **base,  # type: ignore[arg-type]
                step_time_s=float(learned["pred_step_time_s"][j]),
                tokens_per_s_per_gpu=float(learned["pred_tokens_per_s_per_gpu"][j]),
                mfu=float(learned["pred_mfu"][j]),
                mfu_lo=float(learned["pred_mfu_lo"][j]),
                mfu_hi=float(learned["pred_mfu_hi"][j]),
                p_oom=float(learned["p_oom"][j]),
                p_fail=float(learned["p_fail"][j]),
                pred_status=str(learned["pred_status"][j]),
                learned_reserved_gib=float(learned["pred_peak_mem_gib"][j]),
                source="learned",
                explanation=contrib[j] if contrib else None,
                extrapolation=str(learned["extrapolation"][j]),
                domain_weight=float(learned["domain_weight"][j]),
            ))
        else:
            preds.append(Prediction(
                **base,  # type: ignore[arg-type]
                step_time_s=float(out["step_time_s"][j]),
                tokens_per_s_per_gpu=float(out["tokens_per_s_per_gpu"][j]),
                mfu=float(out["mfu"][j]),
                mfu_lo=float("nan"),
                mfu_hi=float("nan"),
                p_oom=float(out["p_oom"][j]),
                extrapolation=practice[j],
            ))
    return preds


def _prediction_columns(
    configs: Sequence[TrainingConfig],
    profile: str | Path | PerfModel | None,
    model: SurrogateModel | None,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """:data:`PRED_COLUMNS` as arrays, straight from the vectorised models (no per-row
    objects), and per configuration '' or why it is impossible (:func:`impossible`)."""
    c, out, _ = analytic_for(configs, profile)
    bad = impossible(c, out)
    if model is not None:
        from surrogate.features import features_from_analytic

        learned = model.predict_from_features(features_from_analytic(c, out), out, c)
        return {col: learned[col] for col in PRED_COLUMNS}, bad
    return {
        "p_oom": out["p_oom"],
        "pred_status": np.where(out["p_oom"] < 0.5, "completed", "oom").astype(object),
        "pred_mfu": out["mfu"],
        "pred_mfu_lo": np.full(len(configs), np.nan),
        "pred_mfu_hi": np.full(len(configs), np.nan),
        "pred_tokens_per_s_per_gpu": out["tokens_per_s_per_gpu"],
        "pred_step_time_s": out["step_time_s"],
        "pred_peak_mem_gib": out["mem_reserved"] / GIB,
        "extrapolation": np.array(beyond_practice(c), dtype=object),
    }, bad


def predict_frame(
    df: pd.DataFrame,
    *,
    profile: str | Path | PerfModel | None = None,
    model: SurrogateModel | str | Path | None = "default",
) -> pd.DataFrame:
    """Predict every row of ``df`` (columns :data:`CONFIG_COLUMNS`; optional ones take their
    defaults). Returns the input columns plus :data:`PRED_COLUMNS` and ``error``: a row that
    fails validation gets its message there and NaN predictions; the others are predicted.
    A column that is a near miss of a configuration column (``zero``, ``grad-accum``) is a
    ConfigError, not a silently defaulted column."""
    import pandas as pd

    from surrogate.configfile import check_table_columns

    check_table_columns(df.columns, where="the configuration table")
    learned = resolve_model(model)
    configs: list[TrainingConfig] = []
    ok_rows: list[int] = []
    errors: list[str] = [""] * len(df)
    for pos, row in enumerate(df.to_dict("records")):
        try:
            configs.append(config_from_flat(row))
            ok_rows.append(pos)
        except SurrogateError as e:
            errors[pos] = str(e)
    out = df.copy()
    for col in PRED_COLUMNS:
        out[col] = np.nan
    out["pred_status"] = pd.Series([None] * len(df), index=df.index, dtype="object")
    out["extrapolation"] = pd.Series([""] * len(df), index=df.index, dtype="object")
    if ok_rows:
        ok_index = out.index[ok_rows]
        columns, bad = _prediction_columns(configs, profile, learned)
        for col, vals in columns.items():
            out.loc[ok_index, col] = vals
        for pos, reason in zip(ok_rows, bad, strict=True):
            if reason:  # an impossible answer is an error, never a prediction
                errors[pos] = reason
                for col in PRED_COLUMNS:
                    out.loc[out.index[pos], col] = _EMPTY.get(col, np.nan)
    out["error"] = errors
    return out


@overload
def predict(
    config: TrainingConfig,
    *,
    profile: str | Path | PerfModel | None = None,
    model: SurrogateModel | str | Path | None = "default",
    explain: bool = False,
) -> Prediction: ...
@overload
def predict(
    config: pd.DataFrame,
    *,
    profile: str | Path | PerfModel | None = None,
    model: SurrogateModel | str | Path | None = "default",
    explain: bool = False,
) -> pd.DataFrame: ...
def predict(
    config: TrainingConfig | pd.DataFrame,
    *,
    profile: str | Path | PerfModel | None = None,
    model: SurrogateModel | str | Path | None = "default",
    explain: bool = False,
) -> Prediction | pd.DataFrame:
    """Predict one :class:`TrainingConfig` (a :class:`Prediction`) or every row of a DataFrame
    (see :func:`predict_frame`). ``model``: see :func:`resolve_model`; ``explain`` adds the
    learned correction's largest SHAP contributions to a single prediction."""
    if isinstance(config, TrainingConfig):
        return _predict_configs([config], profile, resolve_model(model), explain=explain)[0]
    return predict_frame(config, profile=profile, model=model)


__all__ = ["CONFIG_COLUMNS", "PRED_COLUMNS", "Prediction", "predict", "predict_frame"]
