"""The project's own training-step records -> sweep rows (records here are synthetic: written
by the test with an H100's fingerprint, never measured)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from microbench.train_step import MODELS, config_row
from surrogate.errors import DataError
from surrogate.ingest.detect import detect_format
from surrogate.ingest.dispatch import read_runs
from surrogate.ingest.train_step import parse_train_step_jsonl

FINGERPRINT = {
    "gpu_name": "NVIDIA H100 80GB HBM3",
    "gpu_count": 1,
    "world_size": 1,
    "nodes": 1,
    "driver": "580.159.04",
    "cuda": "13.0",
    "nccl": "2.28.9",
    "torch": "2.11.0+cu130",
    "backend": "none",
    "hostname_hash": "0" * 12,
    "date": "2026-11-23T08:00:00+00:00",
    "run_id": "synthetic1",
}


def _record(mbs: int, status: str = "ok", **over: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "schema": "surrogate.train_step/1",
        "status": status,
        "message": "",
        "model_name": "bench-0.15b",
        "config": config_row(
            MODELS["bench-0.15b"],
            gpu="H100-SXM-80GB",
            seq_len=1024,
            mbs=mbs,
            grad_accum=1,
            recompute="none",
        ),
        "fingerprint": FINGERPRINT,
    }
    if status == "ok":
        rec.update(
            step_time_s=0.1,
            tokens_per_s_per_gpu=1024 * mbs / 0.1,
            peak_mem_allocated_gib=3.0,
            peak_mem_reserved_gib=3.5,
        )
    rec.update(over)
    return rec


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_records_become_runs(tmp_path: Path) -> None:
    path = _write(tmp_path / "steps.jsonl", [json.dumps(_record(1)), json.dumps(_record(2, "oom"))])
    assert detect_format(path) == "train-step-jsonl"
    df, report = parse_train_step_jsonl(path)
    assert not report.skips and list(df["status"]) == ["completed", "oom"]
    done = df.iloc[0]
    assert (done["gpu"], done["framework"], done["framework_version"]) == (
        "H100-SXM-80GB",
        "pytorch",
        "autocast",
    )
    assert (done["source"], done["run_id"]) == ("surrogate_h100", "synthetic1/1")
    assert done["profile"] == "h100-own-measured" and math.isnan(done["net_scale"])
    assert done["peak_mem_reserved_gib"] == 3.5 and done["step_time_s"] == pytest.approx(0.1)
    assert 0 < done["mfu"] < 1
    assert df.iloc[1][["step_time_s", "peak_mem_reserved_gib"]].isna().all()
    assert read_runs(path).equals(df)


def test_the_first_campaigns_dense_encoding_reads_as_dense(tmp_path: Path) -> None:
    rec = _record(1)
    rec["config"].update(num_experts=1, experts_topk=1)
    df, report = parse_train_step_jsonl(_write(tmp_path / "s.jsonl", [json.dumps(rec)]))
    assert not report.skips and (df["num_experts"] == 0).all()


def test_bad_lines_are_counted_skips(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "s.jsonl",
        [
            json.dumps(_record(1)),
            "{not json",
            json.dumps(_record(2, "running")),
            json.dumps(_record(4, schema="other/1")),
        ],
    )
    df, report = parse_train_step_jsonl(path)
    assert len(df) == 1 and report.rows_read == 4
    reasons = " | ".join(report.reasons())
    assert "status must be one of ok, oom, timeout, error" in reasons
    assert "schema must be 'surrogate.train_step/1'" in reasons


def test_read_runs_refuses_microbenchmarks(tmp_path: Path) -> None:
    path = _write(tmp_path / "g.jsonl", ['{"schema": "surrogate.microbench/1"}'])
    with pytest.raises(DataError, match="holds microbenchmark measurements"):
        read_runs(path)
