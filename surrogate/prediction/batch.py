"""A table file of configurations predicted into a table file, a chunk of rows at a time.

``surrogate predict --from-csv`` reads its table (CSV or Parquet by suffix) with pyarrow's
streaming readers (:func:`surrogate.io.tableio.iter_table`), predicts each chunk
(:func:`surrogate.prediction.predict.predict_frame`) and writes it on
(:class:`surrogate.io.tableio.TableWriter`), so that memory holds one chunk whatever the table's
length (under 1 GiB for 10^7 rows, measured by ``benchmarks/speed.py --stream-rows``). The
output is the rows of the input in order, each with its predictions or its error: the
answers of the whole table predicted at once (each row is predicted on its own columns). It
appears under its name only once complete (a temporary file renamed), and without ``--out``
it is copied to stdout once complete: a failure leaves nothing half-written.

A CSV that pyarrow's reader refuses (a row with more or fewer values than the header: a
spreadsheet's trailing commas; text that is not UTF-8), or whose chunks a Parquet output
cannot hold under one type per column, is read and predicted whole instead
(:func:`surrogate.io.tableio.read_table`: the csv module's checks and pandas).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from surrogate.config.files import CONFIG_KEYS, OWN_COLUMN_PREFIX, nearest_key
from surrogate.errors import ConfigError, shown
from surrogate.io.tableio import CHUNK_ROWS, NotStreamable, TableWriter, iter_table, read_table
from surrogate.prediction.predict import PRED_COLUMNS, RUNS_AS_ANOTHER, predict_frame, resolve_model
from surrogate.progress import ProgressFn, report
from surrogate.runs.names import known_names
from surrogate.runs.sweeps import (
    CONTEXT_COLUMNS,
    FLAG_COLUMN,
    OUTCOME_COLUMNS,
    PROVENANCE_COLUMNS,
)

if TYPE_CHECKING:
    import pandas as pd

    from surrogate.analytic.params import ParameterSets
    from surrogate.analytic.perf import PerfModel
    from surrogate.learned.model import SurrogateModel

CheckFn = Callable[["pd.DataFrame", int], "pd.DataFrame | None"]
"""``check(chunk, first_row)``: raise for a chunk of the input that must not be predicted
(``first_row``: the 1-based row under the header of its first row); a frame it returns is
predicted in the chunk's place (a column expanded, say)."""


@dataclass(frozen=True)
class BatchResult:
    """What :func:`predict_file` wrote."""

    rows: int
    errors: int
    """Rows with an error (not predicted)."""
    chunks: int
    """Chunks the input was read in (1: read whole)."""
    first_error: str = ""
    """The first row's error where it has one."""


def predict_file(
    source: str | Path,
    target: str | Path | None,
    *,
    profile: str | Path | PerfModel | None = None,
    model: SurrogateModel | str | Path | None = "default",
    stdout: IO[str] | None = None,
    check: CheckFn | None = None,
    chunk_rows: int = CHUNK_ROWS,
    progress: ProgressFn | None = None,
    sets: ParameterSets | None = None,
) -> BatchResult:
    """Predict every row of the table at ``source`` into the table ``target`` (Parquet or
    CSV by suffix), or as CSV into ``stdout`` when ``target`` is None; see the module
    docstring. ``model``, ``profile`` and ``sets`` as for
    :func:`surrogate.prediction.predict.predict_frame`;
    ``check`` is called on each chunk before it is predicted."""
    learned = resolve_model(model)
    if target is None:
        with tempfile.TemporaryDirectory(prefix="surrogate-predict-") as scratch:
            done = _predict_into(
                source,
                Path(scratch) / "out.csv",
                profile,
                learned,
                check,
                chunk_rows,
                progress,
                sets,
            )
            with open(Path(scratch) / "out.csv", encoding="utf-8", newline="") as f:
                shutil.copyfileobj(f, stdout if stdout is not None else _stdout())
            return done
    return _predict_into(source, Path(target), profile, learned, check, chunk_rows, progress, sets)


def _stdout() -> IO[str]:
    return sys.stdout


def _predict_into(
    source: str | Path,
    target: Path,
    profile: Any,
    model: SurrogateModel | None,
    check: CheckFn | None,
    chunk_rows: int,
    progress: ProgressFn | None,
    sets: ParameterSets | None = None,
) -> BatchResult:
    try:
        return _write(
            iter_table(source, chunk_rows=chunk_rows), target, profile, model, check, progress, sets
        )
    except NotStreamable:
        return _write(iter([read_table(source)]), target, profile, model, check, progress, sets)


def _write(
    chunks: Any,
    target: Path,
    profile: Any,
    model: SurrogateModel | None,
    check: CheckFn | None,
    progress: ProgressFn | None,
    sets: ParameterSets | None = None,
) -> BatchResult:
    """Predict each frame of ``chunks`` and write it to ``target`` (committed once all are)."""
    rows = errors = count = 0
    first_error = ""
    with TableWriter(target) as writer:
        for chunk in chunks:
            if check is not None:
                checked = check(chunk, rows + 1)
                if checked is not None:
                    chunk = checked
            result = predict_frame(chunk, profile=profile, model=model, sets=sets)
            if rows == 0 and len(result):
                first_error = str(result["error"].iloc[0])
            writer.write(result)
            errors += int((result["error"] != "").sum())
            rows += len(chunk)
            count += 1
            report(progress, "predicting rows", rows, 0)
    return BatchResult(rows=rows, errors=errors, chunks=count, first_error=first_error)


__all__ = ["BatchResult", "CheckFn", "predict_file"]


def check_batch_columns(columns: Iterable[Any], *, where: str) -> None:
    """ConfigError for a column of a ``predict --from-csv`` table that the batch reader does not
    read, as the YAML reader refuses an unknown key: a column it ignored would leave its setting
    at the default and the row predicted for another configuration. The reader knows the
    configuration columns (``model`` naming a preset among them), a sweep table's outcome,
    provenance and context columns (carried through: a prediction's profile is ``--profile``,
    as a user has before the run), the columns a prediction adds (a table of predictions can be
    predicted again, under older names too: :mod:`surrogate.runs.names`), and columns named
    ``_...`` (the user's own, carried through). The message names the configuration column the
    name most likely means (:func:`nearest_key`)."""
    known = known_names(
        (
            *CONFIG_KEYS,
            "model",
            *OUTCOME_COLUMNS,
            *PROVENANCE_COLUMNS,
            *CONTEXT_COLUMNS,
            FLAG_COLUMN,
            *PRED_COLUMNS,
            RUNS_AS_ANOTHER,
            "error",
        )
    )
    names = [str(c) for c in columns]
    for name in names:
        if name in known or name.startswith(OWN_COLUMN_PREFIX):
            continue
        hint = nearest_key(name, (*CONFIG_KEYS, "model"))
        if hint is not None:
            also = " (the table has both: drop one)" if hint in names else ""
            raise ConfigError(
                f"{where}: column {shown(name)} is not a configuration column; "
                f"did you mean {hint!r}?{also} (an unknown column would be "
                f"ignored and {hint} defaulted)"
            )
        raise ConfigError(
            f"{where}: column {shown(name)} is not a column predict reads; columns must be "
            f"configuration columns ({', '.join(CONFIG_KEYS)}, or model naming a preset), a "
            f"sweep table's outcomes ({', '.join(OUTCOME_COLUMNS[:3])}...), or your own named "
            f"{OWN_COLUMN_PREFIX}{name.lstrip(OWN_COLUMN_PREFIX) or 'x'} (carried through)"
        )
