"""The sweep table: one row per training run, its full configuration, outcome and provenance.

Columns (documented in ``datasets/README.md``):

- every name of :data:`surrogate.config.CONFIG_COLUMNS`, checked per row by
  :func:`surrogate.config.config_from_flat` (so the layout invariants hold) and stored in the
  canonical form :func:`surrogate.config.config_to_flat` gives back;
- the outcome :data:`OUTCOME_COLUMNS` (``status`` from :data:`STATUSES`; measurements are
  NaN when missing, never 0 or -1);
- the provenance :data:`PROVENANCE_COLUMNS` (``framework_version`` is a configuration column).

Rows are unique on (source, run_id). Validation runs on every read and write; appends are
atomic (:func:`surrogate.tableio.write_table_atomic`) and say what they added and replaced.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd

from surrogate.config import (
    ARCHITECTURE_FIELDS,
    CONFIG_COLUMNS,
    TrainingConfig,
    config_from_flat,
    config_to_flat,
)
from surrogate.errors import ConfigError, DataError

Status = Literal["completed", "oom", "fail", "timeout"]
STATUSES: tuple[str, ...] = get_args(Status)

MEASUREMENT_COLUMNS: tuple[str, ...] = (
    "tokens_per_s_per_gpu",
    "step_time_s",
    "mfu",
    "mfu_reported",
    "tflops_per_gpu_reported",
    "peak_mem_allocated_gib",
    "peak_mem_reserved_gib",
)
"""Measured values, float, NaN when the source lacks them.

- ``mfu``: a fraction of the GPU's dense peak for the run's dtype, recomputed under the
  project's definition (:func:`surrogate.analytic.flops.mfu`, 6N + 12 L h s per token).
- ``mfu_reported``: the source's own MFU, as given (the Playbook and torchtitan write percent).
- ``tflops_per_gpu_reported``: the source's model TFLOP/s per GPU, as given.
- memory: GiB (2**30 bytes), peaks over the run as the framework's allocator reports them.
"""
OUTCOME_COLUMNS: tuple[str, ...] = ("status", *MEASUREMENT_COLUMNS)
PROVENANCE_COLUMNS: tuple[str, ...] = ("source", "run_id", "date", "hardware", "model_name")
"""``source``: where the row comes from (e.g. ``hf_ultrascale_playbook``); ``run_id``: the run's
name within the source; ``date``: ISO-8601 text or missing; ``hardware``: free text;
``model_name``: the model as the source names it (e.g. ``8.86G``), or missing."""
SWEEP_COLUMNS: tuple[str, ...] = (*CONFIG_COLUMNS, *OUTCOME_COLUMNS, *PROVENANCE_COLUMNS)
KEY_COLUMNS: tuple[str, str] = ("source", "run_id")

_MAX_ERRORS_SHOWN = 5


def empty_sweeps() -> pd.DataFrame:
    """A sweep table with no rows and every column."""
    return pd.DataFrame({c: pd.Series([], dtype=_dtype(c)) for c in SWEEP_COLUMNS})


def _config_dtypes() -> dict[str, str]:
    from dataclasses import fields

    from surrogate.config import ClusterConfig, LayoutConfig, ModelConfig

    types = {"int": "int64", "bool": "bool"}
    return {
        f.name: types.get(str(f.type), "object")
        for cls in (ModelConfig, ClusterConfig, LayoutConfig)
        for f in fields(cls)
    }


_CONFIG_DTYPES = _config_dtypes()


def _dtype(column: str) -> str:
    if column in MEASUREMENT_COLUMNS:
        return "float64"
    return _CONFIG_DTYPES.get(column, "object")


def sweep_row(
    cfg: TrainingConfig,
    *,
    status: str,
    source: str,
    run_id: str,
    date: str | None = None,
    hardware: str | None = None,
    model_name: str | None = None,
    **measurements: float | None,
) -> dict[str, Any]:
    """One row of the table from a validated configuration, a status, measurements and
    provenance. Unknown measurement names raise, so a typo cannot silently drop a value."""
    unknown = sorted(set(measurements) - set(MEASUREMENT_COLUMNS))
    if unknown:
        raise DataError(
            f"measurements must be among {', '.join(MEASUREMENT_COLUMNS)}, got {', '.join(unknown)}"
        )
    row: dict[str, Any] = config_to_flat(cfg)
    row["status"] = status
    for name in MEASUREMENT_COLUMNS:
        value = measurements.get(name)
        row[name] = math.nan if value is None else float(value)
    row.update(source=source, run_id=run_id, date=date, hardware=hardware, model_name=model_name)
    return row


def recompute_mfu(df: pd.DataFrame) -> pd.Series:
    """MFU (fraction) of every row from ``tokens_per_s_per_gpu`` under the project's
    definition: tokens/s/GPU x (6 N + 12 L h s) / dense peak of the row's dtype
    (:mod:`surrogate.analytic.flops`). NaN where the throughput is missing."""
    from surrogate.analytic.flops import mfu
    from surrogate.analytic.inputs import to_cols

    if df.empty:
        return pd.Series([], dtype="float64", index=df.index)
    configs = [config_from_flat(r) for r in df[list(CONFIG_COLUMNS)].to_dict("records")]
    tps = df["tokens_per_s_per_gpu"].to_numpy(dtype=np.float64)
    return pd.Series(mfu(tps, to_cols(configs)), index=df.index, dtype="float64")


def _indices(mask: Any) -> list[int]:
    """Row positions where a boolean mask holds."""
    return [int(i) for i in np.flatnonzero(mask)]


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def validate_sweeps(df: pd.DataFrame, *, where: str = "sweep table") -> pd.DataFrame:
    """Check ``df`` against the schema and return it in canonical form (column order, dtypes,
    configuration columns as :func:`config_to_flat` writes them). A table that lacks the
    model-variant columns (:data:`surrogate.config.ARCHITECTURE_FIELDS`, added later) gets
    their defaults, 0: it was written when every model was a Llama block.

    Raises DataError saying what must hold, what was given and in which rows (the first few
    of each kind of problem, and how many in all).
    """
    absent = [c for c in ARCHITECTURE_FIELDS if c not in df.columns]
    if absent:  # a table written before these columns existed holds Llama blocks (their 0)
        df = df.assign(**dict.fromkeys(absent, 0))
    missing = [c for c in SWEEP_COLUMNS if c not in df.columns]
    extra = [c for c in df.columns if c not in SWEEP_COLUMNS]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(map(str, missing))}")
        if extra:
            parts.append(f"unknown {', '.join(map(str, extra))}")
        raise DataError(f"{where}: the columns must be those of the sweep schema; "
                        f"{'; '.join(parts)}")
    out = df.reset_index(drop=True).copy()
    errors: list[str] = []

    def bad(row: int, message: str) -> None:
        errors.append(f"row {row}: {message}")

    flat_rows: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = out[list(CONFIG_COLUMNS)].to_dict("records")  # type: ignore[assignment]
    for i, record in enumerate(records):
        try:
            flat_rows.append(config_to_flat(config_from_flat(record)))
        except ConfigError as e:
            bad(i, str(e))
            flat_rows.append(record)
    for col in MEASUREMENT_COLUMNS:
        values = pd.to_numeric(out[col], errors="coerce")
        not_numeric = values.isna() & out[col].notna()
        for i in _indices(not_numeric.to_numpy()):
            bad(int(i), f"{col} must be a number or missing (NaN), got {out[col].iloc[i]!r}")
        non_positive = values <= 0
        for i in _indices(non_positive.to_numpy()):
            bad(int(i), f"{col} must be > 0 or missing (NaN, never 0 or -1), "
                        f"got {float(values.iloc[i])!r}")
        infinite = np.isinf(values.to_numpy(dtype=np.float64))
        for i in _indices(infinite):
            bad(int(i), f"{col} must be finite, got {float(values.iloc[i])!r}")
        out[col] = values.astype("float64")
    for i in _indices((out["mfu"] > 1).to_numpy()):
        bad(int(i), f"mfu must be a fraction in (0, 1], got {float(out['mfu'].iloc[i])!r} "
                    "(a percentage belongs in mfu_reported)")
    for i, s in enumerate(out["status"]):
        if s not in STATUSES:
            bad(i, f"status must be one of {', '.join(STATUSES)}, got {s!r}")
    for col in ("source", "run_id"):
        for i, v in enumerate(out[col]):
            if not isinstance(v, str) or not v.strip():
                bad(i, f"{col} must be a non-empty string, got {v!r}")
    for col in ("date", "hardware", "model_name"):
        for i, v in enumerate(out[col]):
            if not _is_missing(v) and not isinstance(v, str):
                bad(i, f"{col} must be text or missing, got {v!r}")
    dup = out.duplicated(list(KEY_COLUMNS), keep="first")
    for i in _indices(dup.to_numpy()):
        bad(int(i), f"(source, run_id) must be unique, got a second "
                    f"({out['source'].iloc[i]!r}, {out['run_id'].iloc[i]!r})")
    if errors:
        shown = "; ".join(errors[:_MAX_ERRORS_SHOWN])
        more = f" (and {len(errors) - _MAX_ERRORS_SHOWN} more)" if len(errors) > 5 else ""
        raise DataError(f"{where}: {len(errors)} problem(s): {shown}{more}")
    config = pd.DataFrame(flat_rows, columns=list(CONFIG_COLUMNS))
    for col in CONFIG_COLUMNS:
        out[col] = config[col].to_numpy()
    for col in ("date", "hardware", "model_name"):
        out[col] = out[col].map(lambda v: None if _is_missing(v) else v).astype("object")
    for col in SWEEP_COLUMNS:
        out[col] = out[col].astype(_dtype(col))  # type: ignore[call-overload]
    return out[list(SWEEP_COLUMNS)]


def frame_from_rows(rows: Iterable[Mapping[str, Any]], *, where: str = "rows") -> pd.DataFrame:
    """A validated sweep table from rows made by :func:`sweep_row`, with ``mfu`` recomputed
    from each row's throughput (:func:`recompute_mfu`)."""
    records = list(rows)
    if not records:
        return empty_sweeps()
    df = validate_sweeps(pd.DataFrame.from_records(records, columns=list(SWEEP_COLUMNS)),
                         where=where)
    df["mfu"] = recompute_mfu(df)
    return df


def read_sweeps(path: str | Path) -> pd.DataFrame:
    """Read and validate a sweep table (Parquet, or CSV)."""
    from surrogate.tableio import read_table

    return validate_sweeps(read_table(path), where=str(path))


def write_sweeps(df: pd.DataFrame, path: str | Path) -> None:
    """Validate and write a sweep table atomically."""
    from surrogate.tableio import write_table_atomic

    write_table_atomic(validate_sweeps(df, where=f"table to write to {path}"), path)


def _row_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row's values with NaN and None made comparable."""
    return tuple(None if _is_missing(v) else v for v in row)


@dataclass(frozen=True, kw_only=True)
class AppendResult:
    """What :func:`append_sweeps` did."""

    added: int
    """Rows whose (source, run_id) was new."""
    replaced: int
    """Rows whose (source, run_id) was already present with other values; the new row
    replaced the old one."""
    unchanged: int = 0
    """Rows whose (source, run_id) was already present with the same values."""
    total: int
    """Rows in the table after the append."""
    replaced_keys: tuple[tuple[str, str], ...] = ()

    def summary(self) -> str:
        line = (f"added {self.added}, replaced {self.replaced}, unchanged {self.unchanged}, "
                f"table now holds {self.total} rows")
        if self.replaced_keys:
            shown = ", ".join(f"{s}/{r}" for s, r in self.replaced_keys[:5])
            more = " ..." if len(self.replaced_keys) > 5 else ""
            line += f" (replaced: {shown}{more})"
        return line


def append_sweeps(new_df: pd.DataFrame, path: str | Path) -> AppendResult:
    """Add ``new_df`` to the table at ``path`` (created if absent), atomically.

    A row whose (source, run_id) is already in the table replaces the old row, and the result
    counts it; ``new_df`` itself must not repeat a key (which of two would win is not ours to
    guess). The whole read-modify-write holds the table's lock (:func:`surrogate.tableio.locked`),
    so concurrent appends from several processes all land.
    """
    from surrogate.tableio import locked, table_format

    new = validate_sweeps(new_df, where="rows to append")
    p = Path(path)
    table_format(p)
    with locked(p):
        return _append_locked(new, p)


def _append_locked(new: pd.DataFrame, p: Path) -> AppendResult:
    """The read-modify-write of :func:`append_sweeps`; the caller holds the table's lock."""
    old = read_sweeps(p) if p.exists() else empty_sweeps()
    new_keys = set(zip(new["source"], new["run_id"], strict=True))
    old_keys = list(zip(old["source"], old["run_id"], strict=True))
    replaced_mask = np.array([k in new_keys for k in old_keys], dtype=bool)
    old_rows = {k: _row_key(r) for k, r in zip(old_keys, old.itertuples(index=False), strict=True)
                if k in new_keys}
    same = {k for k, r in zip(zip(new["source"], new["run_id"], strict=True),
                              new.itertuples(index=False), strict=True)
            if k in old_rows and old_rows[k] == _row_key(r)}
    replaced_keys = tuple(k for k, r in zip(old_keys, replaced_mask, strict=True)
                          if r and k not in same)
    kept = old.loc[~replaced_mask]
    combined = new if kept.empty else pd.concat([kept, new], ignore_index=True)
    write_sweeps(combined, p)
    return AppendResult(
        added=len(new) - len(replaced_keys) - len(same),
        replaced=len(replaced_keys),
        unchanged=len(same),
        total=len(combined),
        replaced_keys=replaced_keys,
    )


def sweep_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Runs per (source, model, nodes) and status, one column per status plus the total."""
    model = df["model_name"].where(
        df["model_name"].notna(),
        "L" + df["num_layers"].astype(str) + "-h" + df["hidden_size"].astype(str),
    )
    counts = (
        df.assign(model=model)
        .groupby(["source", "model", "num_nodes", "status"])
        .size()
        .unstack("status", fill_value=0)
    )
    for s in STATUSES:
        if s not in counts.columns:
            counts[s] = 0
    counts = counts[list(STATUSES)]
    counts["runs"] = counts.sum(axis=1)
    return counts.reset_index()
