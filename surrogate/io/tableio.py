"""Reading and atomically writing tables (Parquet or CSV), and running the pandera schemas
that check them (:func:`failure_cases`).

Writes are atomic (:mod:`surrogate.io.atomic`): a temporary file in the table's directory,
renamed over it, so a crash or a full disk never leaves a half-written table; the new file
keeps the mode bits of the one it replaces. Reads open only regular files of a table's size
(:mod:`surrogate.io.input_files`). An append is a read-modify-write that holds the table's
cross-process lock throughout (:func:`surrogate.io.locks.locked`), so that concurrent appends
lose no rows.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import pandas as pd

from surrogate.errors import DataError
from surrogate.io.atomic import (
    atomic_path,
    atomic_write,
    commit_temporary,
    is_write_failure,
    new_temporary,
    output_error,
    target_of,
)
from surrogate.io.input_files import check_input_file

if TYPE_CHECKING:  # pandera is imported where a table is checked: `surrogate predict` needs none
    import pandera.pandas as pa

TableFormat = Literal["parquet", "csv"]
TABLE_SUFFIXES: dict[str, TableFormat] = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
"""The table files written, by suffix (case-insensitive)."""


def table_format(path: str | Path) -> TableFormat:
    """``"parquet"`` or ``"csv"`` by the suffix of ``path``; DataError for any other suffix
    (a table named ``t.xlsx`` must not silently become Parquet)."""
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise DataError(
            f"a table file must end in {', '.join(TABLE_SUFFIXES)}, got "
            f"{str(path)!r} ({suffix or 'no suffix'})"
        )
    return TABLE_SUFFIXES[suffix]


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a Parquet or CSV table; a clear DataError if missing, unreadable, or a CSV whose
    header repeats a column or whose rows hold values without a column
    (:func:`check_csv_header`). A CSV is read by pyarrow's reader (:func:`iter_table`'s
    column types); one with ragged rows by the csv module and pandas."""
    p = check_input_file(path, what="table", kind="table")
    if p.suffix.lower() in (".parquet", ".pq"):
        try:
            return pd.read_parquet(p)
        except Exception as e:  # pyarrow raises many types; name the file
            raise DataError(f"cannot read table {str(p)!r}: {e}") from e
    try:
        frames = list(iter_table(p, chunk_rows=None))
    except NotStreamable:
        return _read_csv_pandas(p)
    return frames[0]


def _read_csv_pandas(p: Path) -> pd.DataFrame:
    """A CSV that pyarrow's reader refuses (ragged rows, not UTF-8), read by pandas after the
    csv module's checks of every row (:func:`check_csv_header`)."""
    header = check_csv_header(p)
    try:
        # the header's columns only: trailing commas must not shift the values (pandas would
        # take a first column for the index)
        return pd.read_csv(p, usecols=range(len(header)) if header else None)
    except Exception as e:  # pandas raises many types; name the file
        raise DataError(f"cannot read table {str(p)!r}: {e}") from e


class NotStreamable(Exception):
    """A CSV that pyarrow's reader cannot read as written (a row with more or fewer values
    than the header, text that is not UTF-8): it is read whole by :func:`read_table`."""


CHUNK_ROWS = 131_072
"""Rows per chunk of a table read by :func:`iter_table` (a CSV's chunks end at the first
block of :data:`CSV_BLOCK_BYTES` past it)."""
CSV_BLOCK_BYTES = 1 << 20
"""Bytes of CSV text pyarrow's reader parses at once (its default; about 7,000
configurations): larger blocks were slower here, out of the CPU's caches."""
NULL_TEXTS = (
    "",
    "#N/A",
    "#N/A N/A",
    "#NA",
    "-1.#IND",
    "-1.#QNAN",
    "-NaN",
    "-nan",
    "1.#IND",
    "1.#QNAN",
    "<NA>",
    "N/A",
    "NA",
    "NULL",
    "NaN",
    "None",
    "n/a",
    "nan",
    "null",
)
"""CSV cells read as missing: pandas' ``read_csv`` defaults, so that both readers agree."""


def _csv_header(path: Path) -> list[str]:
    """The header of the CSV at ``path`` (its first record); DataError if it names a column
    twice (pandas would rename the second ``NAME.1`` and every reader would take the first)."""
    try:
        with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
            header = next(csv.reader(f), [])
    except (OSError, csv.Error) as e:
        raise DataError(f"cannot read table {str(path)!r}: {e}") from e
    _check_unique(path, header)
    return header


def _check_unique(path: Any, header: list[str]) -> None:
    """DataError naming the first column the header names twice."""
    seen: set[str] = set()
    for i, name in enumerate(header, start=1):
        if name in seen:
            raise DataError(
                f"{path}: each column must appear once in the header, got "
                f"{name!r} again as column {i}"
            )
        seen.add(name)


def _typed(column: Any) -> Any:
    """A CSV column read as text, in the first type that holds every one of its cells (blanks
    around a cell ignored): int64, bool (true/false in any case), float64, else the text
    itself; a column of missing cells only is float64 (NaN), as pandas reads it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_string(column.type):
        return column
    if column.null_count == len(column):
        return pa.nulls(len(column), pa.float64())
    trimmed = pc.utf8_trim_whitespace(column)
    head = trimmed.slice(0, 64)  # a failed cast costs a pass over the column: try these first
    for kind in (pa.int64(), pa.bool_(), pa.float64()):
        with suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pc.cast(head, kind)
            return pc.cast(trimmed, kind)
    return column


def iter_table(path: str | Path, *, chunk_rows: int | None = CHUNK_ROWS) -> Iterator[pd.DataFrame]:
    """The table at ``path`` (Parquet or CSV by suffix) as DataFrames of consecutive rows, in
    order, holding a chunk at a time in memory: Parquet record batches of ``chunk_rows``,
    CSV blocks read by pyarrow's streaming reader, at least ``chunk_rows`` rows a chunk
    (``chunk_rows`` None: the whole table in one frame). Each CSV column of a chunk takes the
    first type that holds all its cells (:func:`_typed`: int64, bool, float64, text; pandas'
    missing cells), so a chunk reads as pandas would read it alone. NotStreamable for a CSV
    that pyarrow's reader refuses (read it whole with :func:`read_table`); DataError for a
    header naming a column twice or an unreadable file."""
    import pyarrow as pa

    p = check_input_file(path, what="table", kind="table")
    if p.suffix.lower() in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        try:
            source = pq.ParquetFile(p)
            if chunk_rows is None:
                yield source.read().to_pandas()
                return
            for batch in source.iter_batches(batch_size=chunk_rows):
                yield pa.Table.from_batches([batch]).to_pandas()
        except (OSError, pa.ArrowException) as e:
            raise DataError(f"cannot read table {str(p)!r}: {e}") from e
        return
    import pyarrow.csv as pcsv

    header = _csv_header(p)
    options = dict(
        read_options=pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES),
        parse_options=pcsv.ParseOptions(newlines_in_values=True),
        convert_options=pcsv.ConvertOptions(
            column_types=dict.fromkeys(header, pa.string()),
            null_values=list(NULL_TEXTS),
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
        ),
    )
    try:
        if chunk_rows is None:  # the whole file: pyarrow reads its blocks in parallel
            whole = pcsv.read_csv(p, **options)
        else:
            reader = pcsv.open_csv(p, **options)
    except pa.ArrowInvalid as e:
        raise NotStreamable(str(e)) from e
    except OSError as e:
        raise DataError(f"cannot read table {str(p)!r}: {e}") from e
    if chunk_rows is None:
        yield _typed_frame(whole, header)
        return
    pending: list[Any] = []
    produced = False
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except pa.ArrowInvalid as e:
            raise NotStreamable(str(e)) from e
        pending.append(batch)
        if sum(b.num_rows for b in pending) >= chunk_rows:
            produced = True
            yield _typed_frame(pa.Table.from_batches(pending), header)
            pending = []
    if pending or not produced:
        yield _typed_frame(pa.Table.from_batches(pending, schema=reader.schema), header)


def _typed_frame(table: Any, header: list[str]) -> pd.DataFrame:
    """The DataFrame of a CSV chunk read as text, each column typed by :func:`_typed`."""
    import pyarrow as pa

    if table is None or table.num_rows == 0:
        return pd.DataFrame({name: pd.Series([], dtype=object) for name in header})
    columns = [_typed(table.column(i).combine_chunks()) for i in range(table.num_columns)]
    frame: pd.DataFrame = pa.table(columns, names=table.column_names).to_pandas()
    return frame


def check_csv_header(path: str | Path) -> list[str]:
    """DataError if the header of the CSV file at ``path`` names a column twice (pandas would
    rename the second ``NAME.1`` and every reader would silently take the first), or a row
    holds more values than the header names columns (pandas would silently make the first
    column the index and shift every value one column left). Empty values past the header's
    columns (a spreadsheet's trailing commas) are allowed: read the file with
    ``usecols=range(len(header))``, as :func:`read_table` does. Returns the header."""
    try:
        with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
            reader = csv.reader(f)
            header = next(reader, [])
            _check_unique(path, header)
            for row in reader:
                if len(row) > len(header) and any(v.strip() for v in row[len(header) :]):
                    raise DataError(
                        f"{path}: line {reader.line_num} holds {len(row)} values, but the header "
                        f"names {len(header)} columns (a value without a column)"
                    )
    except FileNotFoundError:
        raise
    except (OSError, csv.Error) as e:
        raise DataError(f"cannot read table {str(path)!r}: {e}") from e
    return header


def write_csv(df: pd.DataFrame, target: str | Path | IO[str]) -> None:
    """Write ``df`` as CSV (no index) that reads back as written, by pyarrow's CSV writer
    (:func:`csv_bytes`); a path atomically (:func:`surrogate.io.atomic.atomic_write`)."""
    data = csv_bytes(df)
    if isinstance(target, str | Path):
        atomic_write(target, data)
    else:
        target.write(data.decode("utf-8"))


_SPECIAL = '[,"\r\n]'
"""Characters a CSV cell or column name must be quoted for."""


def csv_bytes(df: pd.DataFrame, *, header: bool = True) -> bytes:
    """``df`` as CSV text (UTF-8, no index), by pyarrow's CSV writer: missing values empty,
    booleans ``true``/``false``, floats in their shortest exact form; every text cell quoted
    when any cell or name needs it (a comma, a quote, a line break, a bare carriage return),
    none otherwise. A frame pyarrow cannot convert (an object column of mixed types) is
    written by pandas (:func:`_csv_bytes_pandas`)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError):
        return _csv_bytes_pandas(df, header=header)
    table = _floats_read_back_as_floats(table)
    sink = pa.BufferOutputStream()
    options = pcsv.WriteOptions(
        include_header=header,
        batch_size=65_536,
        quoting_style=_quoting(table),
        quoting_header=_quoting_names(table.column_names),
    )
    try:
        pcsv.write_csv(table, sink, write_options=options)
    except pa.ArrowException:  # a type the CSV writer lacks
        return _csv_bytes_pandas(df, header=header)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _floats_read_back_as_floats(table: Any) -> Any:
    """``table`` with each float column whose values are all whole numbers as text ending in
    ``.0`` (``1.0``, as pandas writes it): pyarrow writes ``1``, and every reader would take
    the column for integers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, field in enumerate(table.schema):
        column = table.column(i)
        if not pa.types.is_floating(field.type) or column.null_count == len(column):
            continue
        # a value that is not a whole number (NaN included) never prints as one: most float
        # columns are told apart here, without writing them out as text (an infinity passes
        # this check and is caught by the text's)
        if not pc.all(pc.equal(pc.floor(column), column)).as_py():
            continue
        text = pc.cast(column, pa.string())
        if pc.all(pc.match_substring_regex(text, "^-?[0-9]+$")).as_py():
            table = table.set_column(i, field.name, pc.binary_join_element_wise(text, ".0", ""))
    return table


def _quoting_names(names: list[str]) -> str:
    return "needed" if any(re.search(_SPECIAL, n) for n in names) else "none"


def _quoting(table: Any) -> str:
    """pyarrow's quoting style for ``table``: ``needed`` (every text cell quoted) if a text cell
    holds a character that must be quoted (or a column is of a type not checked here), else
    ``none`` (no quotes, as pandas writes such a table)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for column in table.columns:
        kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            # each distinct text once: a prediction table's text columns hold a few values
            if pc.any(pc.match_substring_regex(pc.unique(column), _SPECIAL)).as_py():
                return "needed"
        elif not (
            pa.types.is_integer(kind)
            or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind)
            or pa.types.is_null(kind)
        ):
            return "needed"
    return "none"


def _csv_bytes_pandas(df: pd.DataFrame, *, header: bool = True) -> bytes:
    """``df`` as CSV by pandas. Python's csv module quotes a cell only for the delimiter, the
    quote and the line terminator's characters, so a cell holding a bare carriage return
    would go out unquoted and every reader would end the row there; a table holding one is
    written with every text cell quoted."""

    def has_cr(values: Iterable[Any]) -> bool:
        return any(isinstance(v, str) and "\r" in v for v in values)

    texts = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]
    quote = has_cr(df.columns) or any(has_cr(df[c]) for c in texts)
    text: str = df.to_csv(
        index=False, header=header, quoting=csv.QUOTE_NONNUMERIC if quote else csv.QUOTE_MINIMAL
    )
    return text.encode("utf-8")


class TableWriter:
    """Frames of one table written in order to ``path`` (Parquet or CSV by suffix:
    :func:`table_format`), a chunk at a time: into a temporary file beside it, renamed over it
    by :meth:`commit` (the mode bits of a table replaced are kept), removed if the writing
    fails, so that a crash never leaves a half-written table. A Parquet table takes the types
    of its first chunk (a column without a value there: text); NotStreamable if a later chunk
    cannot be cast to them (write the table whole)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.format = table_format(self.path)
        self.rows = 0
        self._target = target_of(self.path)
        self._tmp = new_temporary(self._target)
        self._file: IO[bytes] | None = None
        self._parquet: Any = None
        self._schema: Any = None

    def write(self, df: pd.DataFrame) -> None:
        """Append the rows of ``df`` (the same columns in every chunk). OutputError naming the
        table if the system refuses the write (the temporary file is removed)."""
        try:
            if self.format == "csv":
                if self._file is None:
                    self._file = open(self._tmp, "wb")  # noqa: SIM115 (closed by commit/abort)
                self._file.write(csv_bytes(df, header=self.rows == 0))
            else:
                self._write_parquet(df)
        except OSError as e:
            self.abort()
            if is_write_failure(e):
                raise output_error(self.path, e) from None
            raise
        self.rows += len(df)

    def _write_parquet(self, df: pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(df, preserve_index=False)
        if self._parquet is None:
            fields = [
                pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f
                for f in table.schema
            ]
            self._schema = pa.schema(fields, metadata=table.schema.metadata)
            self._parquet = pq.ParquetWriter(self._tmp, self._schema)
        schema = self._schema
        if not table.schema.equals(schema, check_metadata=False):
            try:
                table = table.cast(schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise NotStreamable(f"a chunk's columns do not take the first's types: {e}") from e
        self._parquet.write_table(table)

    def commit(self) -> None:
        """Finish the table and rename it over ``path``."""
        try:
            if self.format == "csv" and self._file is None:
                raise DataError(f"no rows were written to {str(self.path)!r}")
            self._close()
        except BaseException as e:
            self.abort()
            if isinstance(e, OSError) and is_write_failure(e):
                raise output_error(self.path, e) from None
            raise
        commit_temporary(self._tmp, self._target)

    def abort(self) -> None:
        """Drop what was written; ``path`` is left as it was."""
        with suppress(Exception):
            self._close()
        self._tmp.unlink(missing_ok=True)

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._parquet is not None:
            self._parquet.close()
            self._parquet = None

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()


def write_table_atomic(df: pd.DataFrame, path: str | Path) -> None:
    """Write ``df`` to ``path`` (Parquet, or CSV by suffix: :func:`table_format`) via a
    temporary file and a rename, so that a crash never leaves a half-written table. The table
    keeps the mode bits of the file it replaces; a new one gets 0666 less the umask."""
    p = Path(path)
    fmt = table_format(p)
    with atomic_path(p) as tmp:
        if fmt == "csv":
            tmp.write_bytes(csv_bytes(df))
        else:
            df.to_parquet(tmp, index=False)


def failure_cases(schema: pa.DataFrameSchema, df: pd.DataFrame) -> pd.DataFrame:
    """pandera's failure cases of ``df`` under ``schema``, every check run (none if it holds),
    whatever pandera's configuration says: its switches must not let a bad table through."""
    import pandera.pandas as pa
    from pandera.config import ValidationDepth, config_context

    with config_context(validation_enabled=True, validation_depth=ValidationDepth.SCHEMA_AND_DATA):
        try:
            schema.validate(df, lazy=True)
        except pa.errors.SchemaErrors as e:
            cases: pd.DataFrame = e.failure_cases
            return cases
    return pd.DataFrame(columns=["column", "check", "failure_case", "index"])
