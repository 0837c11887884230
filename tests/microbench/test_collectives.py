"""Collectives for real: torchrun, 2 processes, gloo, small sizes; and a hung peer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from microbench.collectives import group_sizes, message_sizes, parse_bytes, subgroups
from surrogate.ingest.microbench_jsonl import parse_microbench_jsonl
from surrogate.runs.microbench_table import validate_microbench

REPO = Path(__file__).resolve().parents[2]


def _torchrun(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    return subprocess.run(
        [exe, "--standalone", "--nproc-per-node", "2", "-m", "microbench.collectives", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def test_layouts() -> None:
    assert subgroups(8, 2, "contiguous") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert subgroups(8, 2, "strided") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert subgroups(8, 4, "strided") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    with pytest.raises(ValueError, match="divide the world size"):
        subgroups(8, 3, "contiguous")
    assert group_sizes(16, None) == [2, 4, 8, 16]
    assert message_sizes(parse_bytes("4KiB"), parse_bytes("1M")) == [2**i for i in range(12, 21)]


@pytest.mark.slow
def test_gloo_two_processes(tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    r = _torchrun(
        tmp_path,
        "--min-bytes",
        "4KiB",
        "--max-bytes",
        "8KiB",
        "--warmup",
        "1",
        "--iters",
        "2",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    df, rep = parse_microbench_jsonl(out)
    validate_microbench(df)
    assert not rep.skips
    assert set(df["op"]) == {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "broadcast",
        "send_recv",
    }
    assert len(df) == 12 and (df["group_size"] == 2).all() and (df["nodes"] == 1).all()
    ag = df[df["op"] == "all_gather"].iloc[0]
    assert ag["busbw_bytes_per_s"] == pytest.approx(ag["algbw_bytes_per_s"] / 2)
    assert df["run_id"].nunique() == 1


@pytest.mark.slow
def test_hung_peer_times_out_and_keeps_earlier_measurements(tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    r = _torchrun(
        tmp_path,
        "--ops",
        "all_reduce,all_gather",
        "--min-bytes",
        "4KiB",
        "--max-bytes",
        "4KiB",
        "--warmup",
        "1",
        "--iters",
        "1",
        "--timeout-s",
        "3",
        "--out",
        str(out),
        env={"MICROBENCH_FAULT": "hang:all_gather:1"},
    )
    assert r.returncode != 0
    df, rep = parse_microbench_jsonl(out)
    assert list(df["op"]) == ["all_reduce"]
    assert len(rep.skips) == 1 and "status timeout" in rep.skips[0].reason
    assert "all_gather" in rep.skips[0].reason and "within 3 s" in rep.skips[0].reason
