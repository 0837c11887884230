"""Microbenchmark inputs of any format into one table: tables and raw outputs together, and
errors that say which inputs are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from surrogate.errors import DataError
from surrogate.ingest.microbench_inputs import read_microbench_inputs
from surrogate.runs.microbench_table import rows_to_microbench


def _row(size: float, t: float) -> dict[str, object]:
    return {
        "op": "all_reduce",
        "dtype": "f32",
        "size_bytes": size,
        "group_size": 8.0,
        "nodes": 1.0,
        "layout": "contiguous",
        "in_place": True,
        "time_s": t,
        "algbw_bytes_per_s": size / t,
        "busbw_bytes_per_s": size / t * 1.75,
        "hardware": "H100-SXM-80GB",
        "source": "synthetic",
        "run_id": "a",
    }


def test_tables_of_both_formats_are_read_into_one(tmp_path: Path) -> None:
    rows = rows_to_microbench([_row(1024, 1e-5), _row(2048, 2e-5)])
    rows.iloc[:1].to_csv(tmp_path / "a.csv", index=False)
    rows.iloc[1:].to_parquet(tmp_path / "b.parquet")
    table, summaries = read_microbench_inputs([tmp_path / "a.csv", tmp_path / "b.parquet"])
    assert sorted(table["size_bytes"]) == [1024, 2048]
    assert summaries == []  # tables need no summary: only raw outputs get one


def test_an_unknown_suffix_names_the_formats_read(tmp_path: Path) -> None:
    path = tmp_path / "bench.xlsx"
    path.write_text("")
    with pytest.raises(DataError, match=r"\.jsonl \(microbench\), \.txtpb \(XLA\)"):
        read_microbench_inputs([path])


def test_no_input_is_an_error() -> None:
    with pytest.raises(DataError, match="no microbenchmark input given"):
        read_microbench_inputs([])
