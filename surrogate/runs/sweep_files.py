"""Sweep tables on disk: read, written atomically, and appended to under a lock with the runs
already there kept (:func:`append_sweeps`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from surrogate.io.locks import locked
from surrogate.io.tableio import read_table, table_format, write_table_atomic
from surrogate.runs.sweeps import empty_sweeps, is_missing, unflagged, validate_sweeps


def read_sweeps(path: str | Path, *, flagged: bool = False) -> pd.DataFrame:
    """Read and validate a sweep table (Parquet, or CSV); its flagged runs
    (:data:`FLAG_COLUMN`) only with ``flagged=True``."""

    table = validate_sweeps(read_table(path), where=str(path))
    return table if flagged else unflagged(table)


def write_sweeps(df: pd.DataFrame, path: str | Path) -> None:
    """Validate and write a sweep table atomically."""

    write_table_atomic(validate_sweeps(df, where=f"table to write to {path}"), path)


def _row_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row's values with NaN and None made comparable."""
    return tuple(None if is_missing(v) else v for v in row)


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
        line = (
            f"added {self.added}, replaced {self.replaced}, unchanged {self.unchanged}, "
            f"table now holds {self.total} rows"
        )
        if self.replaced_keys:
            shown = ", ".join(f"{s}/{r}" for s, r in self.replaced_keys[:5])
            more = " ..." if len(self.replaced_keys) > 5 else ""
            line += f" (replaced: {shown}{more})"
        return line


def append_sweeps(new_df: pd.DataFrame, path: str | Path) -> AppendResult:
    """Add ``new_df`` to the table at ``path`` (created if absent), atomically.

    A row whose (source, run_id) is already in the table replaces the old row, and the result
    counts it; ``new_df`` itself must not repeat a key (which of two would win is not ours to
    guess). The whole read-modify-write holds the table's lock
    (:func:`surrogate.io.locks.locked`),
    so concurrent appends from several processes all land.
    """

    new = validate_sweeps(new_df, where="rows to append")
    p = Path(path)
    table_format(p)
    with locked(p):
        return _append_locked(new, p)


def _append_locked(new: pd.DataFrame, p: Path) -> AppendResult:
    """The read-modify-write of :func:`append_sweeps`; the caller holds the table's lock."""
    old = read_sweeps(p, flagged=True) if p.exists() else empty_sweeps()
    new_keys = set(zip(new["source"], new["run_id"], strict=True))
    old_keys = list(zip(old["source"], old["run_id"], strict=True))
    replaced_mask = np.array([k in new_keys for k in old_keys], dtype=bool)
    old_rows = {
        k: _row_key(r)
        for k, r in zip(old_keys, old.itertuples(index=False), strict=True)
        if k in new_keys
    }
    same = {
        k
        for k, r in zip(
            zip(new["source"], new["run_id"], strict=True), new.itertuples(index=False), strict=True
        )
        if k in old_rows and old_rows[k] == _row_key(r)
    }
    replaced_keys = tuple(
        k for k, r in zip(old_keys, replaced_mask, strict=True) if r and k not in same
    )
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
