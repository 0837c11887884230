"""``surrogate.predict``: one configuration or a table of them in, predictions out.

The analytic model (``surrogate.analytic``) answers with the hardware speed of a
:class:`~surrogate.analytic.perf.PerfModel`: a calibration profile when one is given, the
default profile of the GPU when one ships, the datasheet otherwise. Its OOM verdict is a hard
0/1 and it gives no MFU interval (``pred_mfu_lo``/``pred_mfu_hi`` are NaN): those come with
the learned models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from surrogate.analytic.inputs import Cols, to_cols
from surrogate.analytic.memory import BREAKDOWN_TERMS, memory_breakdown, torch_reserved_bytes
from surrogate.analytic.perf import PerfModel, SpecPerfModel
from surrogate.analytic.step import STEP_TERMS, step_breakdown
from surrogate.config import CONFIG_COLUMNS, TrainingConfig, config_from_flat
from surrogate.errors import SurrogateError
from surrogate.hardware import GIB

if TYPE_CHECKING:
    import pandas as pd

PRED_COLUMNS: tuple[str, ...] = (
    "p_oom", "pred_status", "pred_mfu", "pred_mfu_lo", "pred_mfu_hi",
    "pred_tokens_per_s_per_gpu", "pred_step_time_s", "pred_peak_mem_gib",
)
"""Columns ``predict --from-csv`` adds to the input columns (and ``error``)."""


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

    @property
    def fits(self) -> bool:
        return self.p_oom < 0.5

    @property
    def status(self) -> str:
        return "completed" if self.fits else "oom"

    @property
    def peak_mem_gib(self) -> float:
        return self.memory_bytes["total"] / GIB

    @property
    def peak_reserved_gib(self) -> float:
        """What ``torch.cuda.max_memory_reserved`` would report (no CUDA context)."""
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
            "pred_status": self.status,
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
    out["p_oom"] = (mem["total"] > c["memory_bytes"]).astype(np.float64)
    for k in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "bubble_frac"):
        out[k] = step[k]
    return out


def analytic_for(
    configs: Sequence[TrainingConfig], profile: str | Path | PerfModel | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[str]]:
    """Columns, analytic outputs and the PerfModel name of each configuration, in order
    (configurations are grouped by GPU so that each group uses its GPU's profile)."""
    n = len(configs)
    by_gpu: dict[str, list[int]] = {}
    for i, cfg in enumerate(configs):
        by_gpu.setdefault(cfg.cluster.gpu, []).append(i)
    cols: dict[str, np.ndarray] = {}
    outs: dict[str, np.ndarray] = {}
    names = [""] * n
    for gpu, idx in by_gpu.items():
        perf = resolve_perf_model(gpu, profile)
        c = to_cols([configs[i] for i in idx])
        out = analytic_columns(c, perf)
        for target, part in ((cols, c), (outs, out)):
            for k, v in part.items():
                target.setdefault(k, np.full(n, np.nan))[idx] = v
        for i in idx:
            names[i] = perf.name
    return cols, outs, names


def _predict_configs(
    configs: Sequence[TrainingConfig], profile: str | Path | PerfModel | None
) -> list[Prediction]:
    if not configs:
        return []
    c, out, names = analytic_for(configs, profile)
    return [
        Prediction(
            config=cfg,
            memory_bytes={k: float(out[f"mem_{k}"][j]) for k in (*BREAKDOWN_TERMS, "total")},
            capacity_bytes=float(c["memory_bytes"][j]),
            step_s={k: float(out[f"time_{k}"][j]) for k in STEP_TERMS},
            step_time_s=float(out["step_time_s"][j]),
            tokens_per_s_per_gpu=float(out["tokens_per_s_per_gpu"][j]),
            mfu=float(out["mfu"][j]),
            mfu_lo=float("nan"),
            mfu_hi=float("nan"),
            p_oom=float(out["p_oom"][j]),
            bubble_frac=float(out["bubble_frac"][j]),
            perf_model=names[j],
        )
        for j, cfg in enumerate(configs)
    ]


def predict_frame(
    df: pd.DataFrame, *, profile: str | Path | PerfModel | None = None
) -> pd.DataFrame:
    """Predict every row of ``df`` (columns :data:`CONFIG_COLUMNS`; optional ones take their
    defaults). Returns the input columns plus :data:`PRED_COLUMNS` and ``error``: a row that
    fails validation gets its message there and NaN predictions; the others are predicted."""
    import pandas as pd

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
    preds = _predict_configs(configs, profile)
    values: dict[str, list[Any]] = {col: [] for col in PRED_COLUMNS}
    for p in preds:
        values["p_oom"].append(p.p_oom)
        values["pred_status"].append(p.status)
        values["pred_mfu"].append(p.mfu)
        values["pred_mfu_lo"].append(p.mfu_lo)
        values["pred_mfu_hi"].append(p.mfu_hi)
        values["pred_tokens_per_s_per_gpu"].append(p.tokens_per_s_per_gpu)
        values["pred_step_time_s"].append(p.step_time_s)
        values["pred_peak_mem_gib"].append(p.peak_mem_gib)
    if ok_rows:
        ok_index = out.index[ok_rows]
        for col, vals in values.items():
            out.loc[ok_index, col] = vals
    out["error"] = errors
    return out


@overload
def predict(
    config: TrainingConfig, *, profile: str | Path | PerfModel | None = None
) -> Prediction: ...
@overload
def predict(
    config: pd.DataFrame, *, profile: str | Path | PerfModel | None = None
) -> pd.DataFrame: ...
def predict(
    config: TrainingConfig | pd.DataFrame, *, profile: str | Path | PerfModel | None = None
) -> Prediction | pd.DataFrame:
    """Predict one :class:`TrainingConfig` (a :class:`Prediction`) or every row of a DataFrame
    (see :func:`predict_frame`)."""
    if isinstance(config, TrainingConfig):
        return _predict_configs([config], profile)[0]
    return predict_frame(config, profile=profile)


__all__ = ["CONFIG_COLUMNS", "PRED_COLUMNS", "Prediction", "predict", "predict_frame"]
