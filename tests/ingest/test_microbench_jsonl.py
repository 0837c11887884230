"""Our own JSON lines: written by microbench.records, read by the parser (round trip)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microbench.fingerprint import Fingerprint
from microbench.records import JsonlWriter, make_record
from surrogate.errors import DataError
from surrogate.ingest.microbench_jsonl import RECORD_SCHEMA, parse_microbench_jsonl
from surrogate.runs.microbench_table import validate_microbench

FP = Fingerprint(
    gpu_name="NVIDIA H100 80GB HBM3",
    gpu_count=8,
    world_size=8,
    nodes=1,
    driver="550.54",
    cuda="12.4",
    nccl="2.21.5",
    torch="2.13.0",
    backend="nccl",
    hostname_hash="abc123def456",
    date="2026-01-02T03:04:05+00:00",
    run_id="r1",
)


def test_round_trip_and_skips(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    w = JsonlWriter(p)
    w.write(
        make_record(
            FP,
            op="gemm",
            dtype="bf16",
            m=4096,
            n=4096,
            k=4096,
            batch=1,
            time_s=2e-4,
            flops_per_s=2 * 4096**3 / 2e-4,
        )
    )
    w.write(
        make_record(
            FP,
            op="all_reduce",
            dtype="f32",
            size_bytes=2**20,
            group_size=8,
            nodes=1,
            layout="contiguous",
            in_place=True,
            time_s=3e-5,
            algbw_bytes_per_s=2**20 / 3e-5,
            busbw_bytes_per_s=2**20 / 3e-5 * 1.75,
        )
    )
    w.write(
        make_record(
            FP,
            status="timeout",
            message="all_gather did not finish within 60 s",
            op="all_gather",
            size_bytes=2**30,
            group_size=8,
        )
    )
    w.close()
    with p.open("a") as f:
        f.write('{"schema": "' + RECORD_SCHEMA + '", "status": "ok", "op": "gemm"\n')  # cut
        f.write(json.dumps({"hello": 1}) + "\n")
    df, rep = parse_microbench_jsonl(p)
    validate_microbench(df)
    assert list(df["op"]) == ["gemm", "all_reduce"]
    assert (df["hardware"] == "H100-SXM-80GB").all() and (df["run_id"] == "r1").all()
    assert df["date"].iloc[0] == "2026-01-02"
    reasons = [(s.line, s.reason) for s in rep.skips]
    assert reasons[0][0] == 3 and "timeout" in reasons[0][1] and "within 60 s" in reasons[0][1]
    assert "not valid JSON" in reasons[1][1] and "not a surrogate" in reasons[2][1]


def test_make_record_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="measurement fields must be among"):
        make_record(FP, op="gemm", flops=1.0)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"microbenchmark file .*nope\.jsonl. does not exist"):
        parse_microbench_jsonl(tmp_path / "nope.jsonl")
