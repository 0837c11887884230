"""nccl-tests parser on a real excerpt (markdown around the table) and on broken input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from surrogate.errors import DataError
from surrogate.ingest.nccl_tests import parse_nccl_tests
from surrogate.runs.microbench_table import validate_microbench

FIX = Path(__file__).parent / "fixtures"
EXCERPT = FIX / "mbench_nccl_2node_excerpt.log"


def test_excerpt_rows_both_halves_and_conventions() -> None:
    df, rep = parse_nccl_tests(EXCERPT)
    validate_microbench(df)
    assert len(df) == 10 and rep.rows_read == 10
    assert set(df["in_place"]) == {False, True}
    assert (df["op"] == "all_reduce").all()
    # the excerpt names 4 ranks on 2 hosts; the op comes from the quoted all_reduce_perf command
    assert (df["group_size"] == 4).all() and (df["nodes"] == 2).all()
    assert (df["hardware"] == "H100-SXM-80GB").all()
    row = df[(df["size_bytes"] == 16384) & ~df["in_place"].astype(bool)].iloc[0]
    assert row["time_s"] == pytest.approx(138.6e-6)
    assert row["algbw_bytes_per_s"] == pytest.approx(16384 / 138.6e-6)
    assert row["busbw_bytes_per_s"] == pytest.approx(row["algbw_bytes_per_s"] * 2 * 3 / 4)


def test_every_non_table_line_is_reported_with_its_line() -> None:
    _, rep = parse_nccl_tests(EXCERPT)
    lines = EXCERPT.read_text().splitlines()
    nonblank = sum(1 for ln in lines if ln.strip())
    assert rep.rows_read // 2 + len(rep.skips) == nonblank
    assert all(s.line is not None and s.path.endswith(EXCERPT.name) for s in rep.skips)


def test_wrong_results_and_truncated_rows_are_counted(tmp_path: Path) -> None:
    text = EXCERPT.read_text().splitlines()
    rows = [i for i, ln in enumerate(text) if ln.strip()[:1].isdigit()]
    text[rows[0]] = text[rows[0]].rstrip()[:-1] + "3"  # in-place #wrong = 3
    text[rows[1]] = text[rows[1]][:60]  # cut mid-row
    p = tmp_path / "all_reduce.log"
    p.write_text("\n".join(text))
    df, rep = parse_nccl_tests(p)
    assert len(df) == 10 - 1 - 2
    reasons = " ".join(s.reason for s in rep.skips)
    assert "#wrong=3" in reasons and "not a table row" in reasons


def test_op_required_and_table_required(tmp_path: Path) -> None:
    rank = "#  Rank  0 Group  0 Pid 1 on h device  0 [0000:19:00] NVIDIA H100 80GB HBM3\n"
    row = "        1024   256  float  none  -1  16.9  0.06  0.11  0  16.1  0.06  0.11  0\n"
    p = tmp_path / "mystery.log"
    p.write_text(rank + row)
    with pytest.raises(DataError, match="cannot tell which collective"):
        parse_nccl_tests(p)
    df, _ = parse_nccl_tests(p, op="all_gather")
    assert (df["op"] == "all_gather").all() and np.isfinite(df["time_s"]).all()
    p.write_text(rank)
    with pytest.raises(DataError, match="no nccl-tests table row"):
        parse_nccl_tests(p, op="all_gather")
    p.write_text(row)
    with pytest.raises(DataError, match="no 'Rank r"):
        parse_nccl_tests(p, op="all_gather")


def test_public_logs(mbench_data_dir: Path) -> None:
    logs = sorted((mbench_data_dir / "microbench" / "nccl-tests").glob("*.log"))
    assert logs
    for log in logs:
        df, _ = parse_nccl_tests(log)
        validate_microbench(df)
        assert (df["op"] == "all_reduce").all() and len(df) >= 60
