"""Reading and atomically writing tables (Parquet or CSV), and locking them for appends.

Writes go to a temporary file in the table's directory and are renamed over it, so a crash
never leaves a half-written table; the new file keeps the mode bits of the one it replaces
(a new table gets the usual 0666 less the umask). An append is a read-modify-write: two
processes appending at once would each write the table they read plus their own rows, and the
second rename would drop the first one's rows. :func:`locked` serialises them with an
advisory lock on a sibling file ``.NAME.lock`` (the ``filelock`` package: ``flock``, which
local filesystems and NFSv4 honour); every append path holds it around the whole
read-modify-write.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Literal

import pandas as pd

from surrogate.errors import DataError

TableFormat = Literal["parquet", "csv"]
TABLE_SUFFIXES: dict[str, TableFormat] = {".parquet": "parquet", ".pq": "parquet",
                                          ".csv": "csv"}
"""The table files written, by suffix (case-insensitive)."""
LOCK_TIMEOUT_S = 600.0
"""How long an append waits for another process's append to the same table before giving up."""


def table_format(path: str | Path) -> TableFormat:
    """``"parquet"`` or ``"csv"`` by the suffix of ``path``; DataError for any other suffix
    (a table named ``t.xlsx`` must not silently become Parquet)."""
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise DataError(f"a table file must end in {', '.join(TABLE_SUFFIXES)}, got "
                        f"{str(path)!r} ({suffix or 'no suffix'})")
    return TABLE_SUFFIXES[suffix]


@contextmanager
def locked(path: str | Path, *, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the append lock of the table at ``path`` (module docstring) for the ``with`` body.

    Not re-entrant: a second ``locked`` on the same table inside the body waits for the first.
    DataError if another holder keeps it for ``timeout_s``."""
    from filelock import FileLock, Timeout

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(p.with_name(f".{p.name}.lock"), timeout=timeout_s)
    try:
        lock.acquire()
    except Timeout:
        raise DataError(f"another process has held the lock of {str(p)!r} ({lock.lock_file}) "
                        f"for more than {timeout_s:g} s; is an ingest stuck?") from None
    try:
        yield
    finally:
        lock.release()


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a Parquet or CSV table; a clear DataError if missing, unreadable, or a CSV whose
    header repeats a column (:func:`check_csv_header`)."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"table {str(p)!r} does not exist")
    if p.suffix.lower() not in (".parquet", ".pq"):
        check_csv_header(p)
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            return pd.read_parquet(p)
        return pd.read_csv(p)
    except Exception as e:  # pyarrow and pandas raise many types; name the file
        raise DataError(f"cannot read table {str(p)!r}: {e}") from e


def check_csv_header(path: str | Path) -> None:
    """DataError if the header of the CSV file at ``path`` names a column twice: pandas would
    rename the second ``NAME.1`` and every reader would silently take the first."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
            header = next(csv.reader(f), [])
    except FileNotFoundError:
        raise
    except (OSError, csv.Error) as e:
        raise DataError(f"cannot read table {str(path)!r}: {e}") from e
    seen: set[str] = set()
    for i, name in enumerate(header, start=1):
        if name in seen:
            raise DataError(f"{path}: each column must appear once in the header, got {name!r} "
                            f"again as column {i}")
        seen.add(name)


def write_table_atomic(df: pd.DataFrame, path: str | Path) -> None:
    """Write ``df`` to ``path`` (Parquet, or CSV by suffix: :func:`table_format`) via a
    temporary file and a rename, so that a crash never leaves a half-written table. The table
    keeps the mode bits of the file it replaces; a new one gets 0666 less the umask."""
    p = Path(path)
    fmt = table_format(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    # os.open applies the umask to 0o666, as creating the file by name would (mkstemp: 0600)
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        with suppress(FileNotFoundError):  # a new table keeps the umask's mode
            os.chmod(tmp, stat.S_IMODE(os.stat(p).st_mode))
        if fmt == "csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
