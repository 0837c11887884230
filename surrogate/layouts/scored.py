"""Layouts scored and ranked: the limits a layout must meet, one vectorised scoring of many
layouts (:func:`score_configs`), the rankings (by predicted MFU or by its 10% quantile) and the
scorer a search uses (:mod:`surrogate.layouts.search`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from surrogate.config.table import FlatTable, flat_table, table_frame, table_len
from surrogate.config.training import TrainingConfig
from surrogate.errors import ConfigError
from surrogate.io.jsonsafe import json_safe
from surrogate.layouts.labels import layout_labels
from surrogate.layouts.space import KEY_FIELDS, layout_keys
from surrogate.prediction.predict import resolve_model
from surrogate.prediction.scoring import SCORE_COLUMNS, score

if TYPE_CHECKING:
    import pandas as pd

    from surrogate.analytic.perf import PerfModel
    from surrogate.learned.model import SurrogateModel


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
            raise ConfigError(f"memory margin must be in [0, 1), got {self.memory_margin_frac}")


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
    flat table: :func:`surrogate.layouts.grid.space_table`), with what ranking needs: the flat
    configuration,
    ``layout`` (left out with ``labels=False``: a search labels only the rows it shows),
    ``num_gpus``, ``analytic_fits``, ``feasible`` and ``key``
    (:func:`surrogate.layouts.space.layout_key`; left out with ``keys=False``: a million Python
    tuples
    take a second, and a search without optuna needs only the shown rows' keys).
    ``feasible``: p_oom within the limit and the device peak (``pred_peak_device_mem_gib``) within
    the GPU's memory less the margin.

    A model whose shape makes every layout's answer impossible is a ConfigError: no layout of
    it can be ranked honestly."""
    import pandas as pd

    limits = limits or Limits()
    table = configs if isinstance(configs, dict) else flat_table(configs)
    if table_len(table) == 0:
        return pd.DataFrame(
            columns=[
                "layout",
                "num_gpus",
                *(k for k in SCORE_COLUMNS if k != "error"),
                "analytic_fits",
                "feasible",
                "key",
            ]
        )
    columns, analytic_fits = _score_in_chunks(table, resolve_model(model), profile)
    frame = table_frame(table)
    if labels:
        frame["layout"] = layout_labels(table)
    frame["num_gpus"] = table["gpus_per_node"] * table["num_nodes"]
    for k, v in columns.items():
        frame[k] = v
    frame["analytic_fits"] = analytic_fits
    frame["feasible"] = (frame["p_oom"] <= limits.max_p_oom) & (
        frame["pred_peak_device_mem_gib"]
        <= (1.0 - limits.memory_margin_frac) * frame["capacity_gib"]
    )
    if keys:
        frame["key"] = layout_keys(table)
    return frame


SCORE_CHUNK = 131_072
"""Rows :func:`score_configs` scores at a time: the whole-column passes of the analytic model
then work on arrays that the allocator reuses and the caches hold, about half the CPU time of
one pass over 10^6 rows (docs/speed.md). Every row's answer is the same."""


def _score_in_chunks(
    table: FlatTable, model: SurrogateModel | None, profile: str | Path | PerfModel | None
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """:func:`~surrogate.prediction.scoring.score`'s columns (without ``error``) of every row
    of ``table``, :data:`SCORE_CHUNK` rows at a time, and where the analytic memory fits the
    GPU; ConfigError with the first row's error."""
    columns: list[dict[str, np.ndarray]] = []
    fits = []
    for start in range(0, table_len(table), SCORE_CHUNK):
        s = score(
            {k: v[start : start + SCORE_CHUNK] for k, v in table.items()},
            model=model,
            profile=profile,
        )
        bad = next((r for r in s.columns["error"] if r), "")
        if bad:
            raise ConfigError(bad)
        columns.append({k: v for k, v in s.columns.items() if k != "error"})
        fits.append(s.analytic["mem_total"] <= s.cols["memory_bytes"])
    if len(columns) == 1:
        return columns[0], fits[0]
    return ({k: np.concatenate([c[k] for c in columns]) for k in columns[0]}, np.concatenate(fits))


def with_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (score_configs rows) with its ``key`` column, computed where it is missing."""
    if "key" not in frame.columns:
        frame["key"] = layout_keys({k: frame[k].to_numpy() for k in KEY_FIELDS})
    return frame


RankBy = Literal["mean", "safe"]
RANK_COLUMNS: dict[str, str] = {"mean": "pred_mfu", "safe": "pred_mfu_lo"}
"""What each ranking sorts by: ``mean`` the predicted MFU, ``safe`` the lower end of its 80%
interval (its 10% quantile: a layout likely to be good, not only good on average)."""


def rank(scored: pd.DataFrame, by: RankBy = "mean") -> pd.DataFrame:
    """Feasible layouts first, by predicted MFU (``by="safe"``: by its 10% quantile, rows
    without one last); ties: fewer GPUs, then lower OOM risk."""
    column = rank_column(by)
    order = scored.assign(_inf=~scored["feasible"]).sort_values(
        ["_inf", column, "num_gpus", "p_oom"], ascending=[True, False, True, True], kind="mergesort"
    )
    return order.drop(columns="_inf").reset_index(drop=True)


def rank_column(by: str) -> str:
    if by not in RANK_COLUMNS:
        raise ConfigError(f"rank must be mean or safe, got {by!r}")
    return RANK_COLUMNS[by]


@dataclass(frozen=True, kw_only=True)
class Scorer:
    """How a search scores and ranks layouts: the model, the hardware, the limits, the rank."""

    learned: SurrogateModel | None
    profile: str | Path | PerfModel | None
    limits: Limits
    rank: RankBy

    def ranked(self, configs: Sequence[TrainingConfig] | FlatTable, **kw: bool) -> pd.DataFrame:
        return rank(
            score_configs(
                configs, model=self.learned, profile=self.profile, limits=self.limits, **kw
            ),
            self.rank,
        )

    def value(self, row: pd.Series) -> float:
        """What optuna maximises: the ranked column (a missing lower end counts as 0)."""
        v = float(row[RANK_COLUMNS[self.rank]])
        return v if math.isfinite(v) else 0.0


def scored_to_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready rows (NaN -> None; the key dropped)."""
    return [
        {str(k): json_safe(v) for k, v in rec.items()}
        for rec in frame.drop(columns=["key"], errors="ignore").to_dict("records")
    ]
