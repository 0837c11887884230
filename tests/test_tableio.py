"""Tables: atomic writes that keep permissions, known suffixes only, appends safe across
processes."""

from __future__ import annotations

import csv
import multiprocessing
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from surrogate.errors import DataError
from surrogate.ingest.dispatch import ingest
from surrogate.sweeps import read_sweeps
from surrogate.tableio import locked, table_format, write_table_atomic

PLAYBOOK = Path(__file__).resolve().parent / "fixtures" / "sweeps_playbook_excerpt.csv"
WRITERS = 8
ROUNDS = 3


def _synthetic_chunks(tmp: Path, n: int) -> list[Path]:
    """``n`` synthetic Playbook tables: the excerpt's rows (one of which validation skips)
    under job ids of their own, so that every row of every chunk is a distinct run."""
    with PLAYBOOK.open(newline="") as f:
        header, *rows = list(csv.reader(f))
    job = header.index("job_id")
    paths = []
    for i in range(n):
        p = tmp / f"synthetic_chunk_{i}.csv"
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            for j, row in enumerate(rows):
                w.writerow([*row[:job], str(900_000 + 100 * i + j), *row[job + 1:]])
        paths.append(p)
    return paths


def _ingest_one(args: tuple[str, str]) -> tuple[int, int]:
    """One writer process: rows read and rows skipped of its chunk."""
    chunk, into = args
    result = ingest([chunk], into)
    return result.report.rows_read, len(result.report.skips)


def test_concurrent_ingests_lose_no_rows(tmp_path: Path) -> None:
    chunks = _synthetic_chunks(tmp_path, WRITERS)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(WRITERS) as pool:
        for r in range(ROUNDS):
            into = tmp_path / f"round{r}.parquet"
            counts = pool.map(_ingest_one, [(str(c), str(into)) for c in chunks])
            rows_in = sum(n for n, _ in counts)
            skipped = sum(s for _, s in counts)
            rows_out = len(read_sweeps(into, flagged=True))  # runs kept flagged count too
            assert (rows_in, rows_out + skipped) == (WRITERS * 9, rows_in), f"round {r}"


def test_append_lock_times_out_with_a_clear_error(tmp_path: Path) -> None:
    table = tmp_path / "t.parquet"
    ctx = multiprocessing.get_context("fork")
    held, release = ctx.Event(), ctx.Event()

    def hold() -> None:
        with locked(table):
            held.set()
            release.wait(10)

    holder = ctx.Process(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        with pytest.raises(DataError, match=r"another process has held the lock of .*t\.parquet"), \
                locked(table, timeout_s=0.2):
            pass
    finally:
        release.set()
        holder.join(10)


def test_rewritten_table_keeps_its_permissions(tmp_path: Path) -> None:
    p = tmp_path / "t.parquet"
    write_table_atomic(pd.DataFrame({"a": [1]}), p)
    os.chmod(p, 0o640)
    write_table_atomic(pd.DataFrame({"a": [1, 2]}), p)
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert len(pd.read_parquet(p)) == 2


def test_new_table_gets_the_umask_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_table_atomic(pd.DataFrame({"a": [1]}), tmp_path / "t.csv")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "t.csv").stat().st_mode) == 0o644
    assert [f.name for f in tmp_path.iterdir()] == ["t.csv"]  # no temporary file left


def test_unknown_table_suffix_is_refused(tmp_path: Path) -> None:
    assert table_format("a.PARQUET") == "parquet" and table_format("a.csv") == "csv"
    with pytest.raises(DataError, match=r"a table file must end in \.parquet, \.pq, \.csv, "
                                        r"got '.*t\.xlsx' \(\.xlsx\)"):
        write_table_atomic(pd.DataFrame({"a": [1]}), tmp_path / "t.xlsx")
    with pytest.raises(DataError, match=r"must end in .*\(no suffix\)"):
        ingest([PLAYBOOK], tmp_path / "table")
    assert not list(tmp_path.iterdir())
