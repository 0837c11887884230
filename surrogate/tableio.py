"""Reading and atomically writing tables (Parquet, CSV accepted on input)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

from surrogate.errors import DataError


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a Parquet or CSV table; a clear DataError if missing or unreadable."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"table {str(p)!r} does not exist")
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            return pd.read_parquet(p)
        return pd.read_csv(p)
    except Exception as e:  # pyarrow and pandas raise many types; name the file
        raise DataError(f"cannot read table {str(p)!r}: {e}") from e


def write_table_atomic(df: pd.DataFrame, path: str | Path) -> None:
    """Write ``df`` to ``path`` (Parquet, or CSV by suffix) via a temporary file and a rename,
    so that a crash never leaves a half-written table."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    try:
        if p.suffix.lower() == ".csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
