"""The measured runs so far: the sweep table ``propose --runs`` reads (and what a table that is
none looks like instead), its layouts, which are not proposed again, and its best completed MFU,
the incumbent of expected improvement."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from surrogate.config.files import CONFIG_KEYS
from surrogate.config.table import FlatTable, concat, flat_table, table_len
from surrogate.config.training import TrainingConfig, config_from_flat
from surrogate.errors import ConfigError, DataError
from surrogate.loop.acquisition import problem_codes
from surrogate.loop.round_files import PROPOSALS_FILE

if TYPE_CHECKING:
    import pandas as pd


def read_measured_runs(path: str | Path, *, flag: str = "--runs") -> pd.DataFrame:
    """The measured runs of ``path``: a sweep table (what ``surrogate ingest`` writes, checked
    against its schema) or a file a sweep parser reads as runs
    (:func:`surrogate.ingest.dispatch.read_runs`). Anything else is a DataError that says what
    the table looks like instead (an earlier round's ``proposals.csv``, predictions, layouts
    without outcomes): its rows were never run, and taking them as runs would hide their layouts
    from the proposals and take a predicted MFU for a measured one."""
    # here, not at the top: the readers of every log format and pandas double the import of
    # this module (0.55 -> 1.3 s), which scoring a round or proposing without --runs needs not
    from surrogate.ingest.dispatch import read_runs

    p = Path(path)
    try:
        return read_runs(p)
    except DataError as e:
        looks = _what_table(p)  # what it is instead, where its columns say
        if looks is not None:
            raise DataError(
                f"{flag} {str(p)!r} is {looks}; {flag} takes a sweep table of "
                "measured runs (what `surrogate ingest LOGS --into TABLE` writes: a "
                "status and the measurements of each run)"
            ) from None
        raise DataError(
            f"{flag} must be a sweep table of measured runs (what `surrogate ingest "
            f"LOGS --into TABLE` writes): {e}"
        ) from None


def _what_table(path: Path) -> str | None:
    """What a table that no runs reader takes looks like, from its columns (None: not a table
    whose columns can be read, or none of these: :func:`read_measured_runs` says why)."""
    # here, not at the top: pandas, which the module's import leaves out (read_measured_runs)
    from surrogate.io.tableio import read_table

    if path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        return None
    try:
        columns = {str(c) for c in read_table(path).columns}
    except DataError:
        return None
    predicted = sorted(c for c in columns if c.startswith("pred_") or c == "p_oom")
    if {"name", "reason", "layout"} <= columns and predicted:
        return (
            f"a round's {PROPOSALS_FILE} (runs `surrogate propose` proposed, with their "
            "predictions, not measurements): run them, then `surrogate ingest ROUND/logs "
            "--into TABLE` and pass that table"
        )
    if predicted and "status" not in columns:
        return (
            f"a table of predictions ({', '.join(predicted[:3])}...: what `surrogate "
            "predict --out` writes), not of measured runs"
        )
    if predicted:
        return (
            f"a sweep table with predictions added ({', '.join(predicted[:3])}...): pass the "
            "sweep table itself"
        )
    if "status" not in columns and columns & set(CONFIG_KEYS):
        return (
            "a table of configurations without outcomes (no status column): layouts, not "
            "measured runs"
        )
    if "status" not in columns:
        shown_columns = ", ".join(sorted(columns)[:5]) + (" ..." if len(columns) > 5 else "")
        return f"no sweep table: its columns ({shown_columns}) hold no configuration and no status"
    return None


def runs_and_incumbent(
    runs: pd.DataFrame | None,
    candidates: FlatTable,
) -> tuple[list[TrainingConfig], float | None]:
    """The configurations of ``runs`` (a sweep table; its flagged runs skipped, another row
    that is no configuration a DataError) and the best MFU
    completed by a run of the candidates' problem (:func:`problem_codes`; None: no such run):
    the incumbent of expected improvement is not another model's MFU."""
    # here, not at the top: pandas, which the module's import leaves out (read_measured_runs)
    from surrogate.runs.sweeps import FLAG_COLUMN, flagged_mask

    ran: list[TrainingConfig] = []
    mfu: list[float] = []
    if runs is None:
        return ran, None
    if "status" not in runs.columns:
        raise DataError(
            "runs must be a sweep table of measured runs, with a status column "
            "(what `surrogate ingest` writes), got the columns "
            f"{', '.join(map(str, runs.columns[:8]))}"
            f"{' ...' if len(runs.columns) > 8 else ''}"
        )
    flagged = flagged_mask(runs)  # runs of a layout the validator refuses: never a candidate
    for number, row in enumerate(runs.to_dict("records")):
        if flagged[number]:
            continue
        try:
            cfg = config_from_flat(row)
        except ConfigError as e:
            raise DataError(
                f"runs, row {number}: not a configuration ({e}); a run whose layout "
                f"is refused is flagged in {FLAG_COLUMN}"
            ) from None
        ran.append(cfg)
        done = row.get("status") == "completed" and isinstance(row.get("mfu"), int | float)
        mfu.append(float(row["mfu"]) if done else math.nan)
    if not ran:
        return ran, None
    n = table_len(candidates)
    problems = problem_codes(concat(candidates, flat_table(ran)))
    mine = np.isin(problems[n:], problems[:n])
    measured = np.asarray(mfu)[mine] if ran else np.zeros(0)
    measured = measured[np.isfinite(measured)]
    return ran, float(measured.max()) if len(measured) else None
