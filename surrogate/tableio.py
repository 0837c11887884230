"""Reading and atomically writing tables (Parquet or CSV), locking them for appends, and
running the pandera schemas that check them (:func:`failure_cases`).

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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import pandas as pd

from surrogate.errors import DataError

if TYPE_CHECKING:  # pandera is imported where a table is checked: `surrogate predict` needs none
    import pandera.pandas as pa

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
    header repeats a column or whose rows hold values without a column
    (:func:`check_csv_header`)."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"table {str(p)!r} does not exist")
    parquet = p.suffix.lower() in (".parquet", ".pq")
    header = [] if parquet else check_csv_header(p)
    try:
        if parquet:
            return pd.read_parquet(p)
        # the header's columns only: trailing commas must not shift the values (pandas would
        # take a first column for the index)
        return pd.read_csv(p, usecols=range(len(header)) if header else None)
    except Exception as e:  # pyarrow and pandas raise many types; name the file
        raise DataError(f"cannot read table {str(p)!r}: {e}") from e


def check_csv_header(path: str | Path) -> list[str]:
    """DataError if the header of the CSV file at ``path`` names a column twice (pandas would
    rename the second ``NAME.1`` and every reader would silently take the first), or a row
    holds more values than the header names columns (pandas would silently make the first
    column the index and shift every value one column left). Empty values past the header's
    columns (a spreadsheet's trailing commas) are allowed: read the file with
    ``usecols=range(len(header))``, as :func:`read_table` does. Returns the header."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
            reader = csv.reader(f)
            header = next(reader, [])
            seen: set[str] = set()
            for i, name in enumerate(header, start=1):
                if name in seen:
                    raise DataError(f"{path}: each column must appear once in the header, got "
                                    f"{name!r} again as column {i}")
                seen.add(name)
            for row in reader:
                if len(row) > len(header) and any(v.strip() for v in row[len(header):]):
                    raise DataError(
                        f"{path}: line {reader.line_num} holds {len(row)} values, but the header "
                        f"names {len(header)} columns (a value without a column)")
    except FileNotFoundError:
        raise
    except (OSError, csv.Error) as e:
        raise DataError(f"cannot read table {str(path)!r}: {e}") from e
    return header


def write_csv(df: pd.DataFrame, target: str | Path | IO[str]) -> None:
    """Write ``df`` as CSV (no index) that reads back as written. Python's csv module quotes
    a cell only for the delimiter, the quote and the line terminator's characters, so a cell
    holding a bare carriage return would go out unquoted and every reader would end the row
    there; a table holding one is written with every text cell quoted."""
    import csv

    def has_cr(values: Iterable[Any]) -> bool:
        return any(isinstance(v, str) and "\r" in v for v in values)

    texts = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]
    quote = has_cr(df.columns) or any(has_cr(df[c]) for c in texts)
    df.to_csv(target, index=False,
              quoting=csv.QUOTE_NONNUMERIC if quote else csv.QUOTE_MINIMAL)


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
            write_csv(df, tmp)
        else:
            df.to_parquet(tmp, index=False)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def failure_cases(schema: pa.DataFrameSchema, df: pd.DataFrame) -> pd.DataFrame:
    """pandera's failure cases of ``df`` under ``schema``, every check run (none if it holds),
    whatever pandera's configuration says: its switches must not let a bad table through."""
    import pandera.pandas as pa
    from pandera.config import ValidationDepth, config_context

    with config_context(validation_enabled=True,
                        validation_depth=ValidationDepth.SCHEMA_AND_DATA):
        try:
            schema.validate(df, lazy=True)
        except pa.errors.SchemaErrors as e:
            cases: pd.DataFrame = e.failure_cases
            return cases
    return pd.DataFrame(columns=["column", "check", "failure_case", "index"])
