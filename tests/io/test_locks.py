"""The append lock of a table: appends safe across processes, a holder named while others
wait, a bounded wait."""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import socket
from pathlib import Path

import pytest

from surrogate.errors import DataError
from surrogate.ingest.dispatch import ingest
from surrogate.io import locks
from surrogate.io.locks import locked
from surrogate.runs.sweep_files import read_sweeps

PLAYBOOK = Path(__file__).resolve().parents[1] / "fixtures" / "sweeps_playbook_excerpt.csv"
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
                w.writerow([*row[:job], str(900_000 + 100 * i + j), *row[job + 1 :]])
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
        with (
            pytest.raises(
                DataError,
                match=rf"t\.parquet' is locked by pid {holder.pid} on "
                r"host .* since .*; gave up after 0\.2 s \(SURROGATE_LOCK_TIMEOUT_S",
            ),
            locked(table, timeout_s=0.2),
        ):
            pass
    finally:
        release.set()
        holder.join(10)


def test_a_stopped_holder_is_named_while_waiting_and_the_wait_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped ingest (SIGSTOP) keeps its lock: the next one says who holds it, with the
    command line, then gives up after the time the variable sets."""
    import signal
    import subprocess
    import sys

    table = tmp_path / "t.parquet"
    ready = tmp_path / "ready"
    code = (
        "import sys, time; from pathlib import Path; from surrogate.io.locks import locked\n"
        f"with locked({str(table)!r}):\n"
        f"    Path({str(ready)!r}).touch(); time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, "ingest-marker"])
    try:
        for _ in range(200):
            if ready.exists():
                break
            subprocess.run(["sleep", "0.05"], check=True)
        os.kill(holder.pid, signal.SIGSTOP)
        told: list[str] = []
        monkeypatch.setenv("SURROGATE_LOCK_TIMEOUT_S", "0.6")
        monkeypatch.setattr(locks, "LOCK_NOTICE_S", 0.2)
        with (
            pytest.raises(
                DataError,
                match=rf"locked by pid {holder.pid} .*ingest-marker.*"
                r"gave up after 0\.6 s",
            ),
            locked(table, notify=told.append),
        ):
            pass
        assert told and f"held by pid {holder.pid}" in told[0], told
    finally:
        holder.kill()
        holder.wait(10)
    with locked(table, timeout_s=5):  # the kernel released the lock of the killed holder
        assert (tmp_path / ".t.parquet.lock.holder").exists()
    assert not (tmp_path / ".t.parquet.lock.holder").exists()


@pytest.mark.parametrize("value", ["-1", "soon", "inf", "nan"])
def test_a_lock_timeout_that_is_not_seconds_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SURROGATE_LOCK_TIMEOUT_S", value)
    with (
        pytest.raises(DataError, match=r"SURROGATE_LOCK_TIMEOUT_S must be a number of seconds"),
        locked(tmp_path / "t.parquet"),
    ):
        pass


def test_a_holder_that_left_no_sidecar_is_said_unknown(tmp_path: Path) -> None:
    assert "did not say who it is" in locks.lock_holder(tmp_path / "t.parquet")
    record = {
        "pid": 999_999_999,
        "host": socket.gethostname(),
        "command": "surrogate ingest x",
        "since": "then",
    }
    (tmp_path / ".t.parquet.lock.holder").write_text(json.dumps(record))
    assert locks.lock_holder(tmp_path / "t.parquet").endswith("which no longer runs")
