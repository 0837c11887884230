"""The project's own H100 measurements (datasets/h100): they read whole, and their runs are
explained under the profile fitted from their GEMMs."""

from __future__ import annotations

from pathlib import Path

import pytest

from surrogate.clusters import SOURCE_PROFILES, run_context
from surrogate.ingest.dispatch import read_runs
from surrogate.ingest.microbench_jsonl import parse_microbench_jsonl
from surrogate.profile import load_profile, shipped_profiles

DATA = Path(__file__).resolve().parents[1] / "datasets" / "h100" / "2026-11-23"


@pytest.mark.parametrize("name", ["gemm.jsonl", "attention.jsonl", "membound.jsonl"])
def test_microbenchmarks_read_whole(name: str) -> None:
    df, report = parse_microbench_jsonl(DATA / name)
    assert not report.skips and len(df) > 0
    assert (df["hardware"] == "H100-SXM-80GB").all()
    assert df["detail"].str.contains("torch=2.11.0+cu130 cuda=13.0", regex=False).all()


def test_training_steps_read_whole_and_use_their_profile() -> None:
    runs = read_runs(DATA / "train_steps_recompute_none.jsonl")
    assert set(runs["status"]) == {"completed", "oom"}
    assert (runs["source"] == "surrogate_h100").all()
    assert "h100-own-measured" in shipped_profiles()
    profiles, _ = run_context(runs)
    assert set(profiles) == {SOURCE_PROFILES["surrogate_h100"]} == {"h100-own-measured"}
    prof = load_profile("h100-own-measured")
    assert {c.provenance for c in prof.gemm.values()} == {"measured"}
