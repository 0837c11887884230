"""Microbenchmark inputs of any format read into one table: tables (.parquet, .csv) and the
raw outputs each parser reads (nccl-tests logs, XLA perf tables, ``microbench`` JSON lines),
validated against the schema of :mod:`surrogate.runs.microbench_table`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from surrogate.errors import DataError
from surrogate.ingest.microbench_jsonl import parse_microbench_jsonl
from surrogate.ingest.nccl_tests import parse_nccl_tests
from surrogate.ingest.xla_tables import parse_xla_table
from surrogate.io.tableio import read_table
from surrogate.runs.microbench_table import empty_microbench, validate_microbench


def read_microbench_inputs(paths: list[str | Path]) -> tuple[pd.DataFrame, list[str]]:
    """One table from microbenchmark tables (.parquet, .csv) and raw outputs: nccl-tests logs
    (.log, .txt, .md), XLA perf tables (.txtpb) and ``microbench`` JSON lines (.jsonl).

    Returns the table and one summary line per raw file (what was read and skipped).
    """
    frames: list[pd.DataFrame] = []
    summaries: list[str] = []
    for path in paths:
        p = Path(path)
        suffix = p.suffix.lower()
        if suffix in (".parquet", ".pq", ".csv"):
            frames.append(validate_microbench(read_table(p)))
            continue
        if suffix == ".txtpb":
            df, rep = parse_xla_table(p)
        elif suffix == ".jsonl":
            df, rep = parse_microbench_jsonl(p)
        elif suffix in (".log", ".txt", ".md"):
            df, rep = parse_nccl_tests(p)
        else:
            raise DataError(
                f"{p}: a microbenchmark input is .parquet/.csv (table), .jsonl "
                f"(microbench), .txtpb (XLA) or .log/.txt/.md (nccl-tests), got "
                f"{suffix or 'no suffix'!r}"
            )
        frames.append(df)
        summaries.append(f"{p.name}: " + rep.summary(max_lines=3))
    if not frames:
        raise DataError("no microbenchmark input given")
    nonempty = [f for f in frames if len(f)]
    table = pd.concat(nonempty, ignore_index=True) if nonempty else empty_microbench()
    return validate_microbench(table), summaries
