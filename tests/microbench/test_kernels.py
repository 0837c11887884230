"""Flash attention and memory-bound kernel microbenchmarks: the CPU path, ingested."""

from __future__ import annotations

from pathlib import Path

import pytest

from microbench import attention, membound
from surrogate.ingest.microbench_jsonl import parse_microbench_jsonl
from surrogate.runs.microbench_table import ATTENTION_OPS, MEMORY_BOUND_OPS, validate_microbench


def test_attention_records_are_table_rows(tmp_path: Path) -> None:
    out = tmp_path / "a.jsonl"
    assert (
        attention.main(
            [
                "--device",
                "cpu",
                "--seqs",
                "32",
                "--heads",
                "2",
                "--head-dims",
                "16",
                "--tokens",
                "64",
                "--warmup",
                "1",
                "--repeats",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    df, report = parse_microbench_jsonl(out)
    validate_microbench(df)
    assert not report.skips and sorted(df["op"]) == sorted(ATTENTION_OPS)
    row = df[df["op"] == "sdpa_fwd_bwd"].iloc[0]
    # 2 sequences x 2 heads of 32 x 16; forward + backward counted as 3 x 4 b s^2 d
    assert (row["m"], row["k"], row["batch"]) == (32, 16, 4)
    assert row["flops_per_s"] == pytest.approx(3 * 4 * 4 * 32 * 32 * 16 / row["time_s"])


def test_memory_bound_records_are_table_rows(tmp_path: Path) -> None:
    out = tmp_path / "m.jsonl"
    assert (
        membound.main(
            [
                "--device",
                "cpu",
                "--tokens",
                "32",
                "--widths",
                "16",
                "--vocabs",
                "64",
                "--warmup",
                "1",
                "--repeats",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    df, report = parse_microbench_jsonl(out)
    validate_microbench(df)
    assert not report.skips and list(df["op"]) == list(MEMORY_BOUND_OPS)
    rms = df[df["op"] == "rmsnorm_fwd_bwd"].iloc[0]
    assert rms["size_bytes"] == 5 * 2 * 32 * 16
    assert rms["algbw_bytes_per_s"] == pytest.approx(rms["size_bytes"] / rms["time_s"])


def test_an_unknown_kernel_is_refused() -> None:
    with pytest.raises(ValueError, match="kernel must be one of rmsnorm_fwd_bwd"):
        membound.kernel("layernorm", 4, 4, device="cpu")
