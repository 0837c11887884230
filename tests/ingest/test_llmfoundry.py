"""The llm-foundry MPT throughput tables: mapping, skips, the parameter check, the CLI."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from surrogate.cli import main
from surrogate.config.training import CONFIG_COLUMNS, config_from_flat
from surrogate.errors import DataError
from surrogate.ingest.detect import detect_format
from surrogate.ingest.llmfoundry import (
    MPT_SHAPES,
    PARAM_TOLERANCE,
    equivalent_ffn,
    param_check,
    parse_llmfoundry,
)
from surrogate.runs.sweep_files import read_sweeps
from surrogate.runs.sweeps import validate_sweeps

EXCERPT = Path(__file__).resolve().parent / "fixtures" / "llmfoundry_excerpt.md"
"""Rows of three tables of ../shared/data/sweeps/llmfoundry_mpt/benchmarking_README.md; its
lines 25-30 are real rows altered by hand, one per skip reason."""
FULL = Path("sweeps/llmfoundry_mpt/benchmarking_README.md")
A100_40 = "A100 40GB with 1600 Gbps node-node interconnect (RoCE)"


@pytest.fixture(scope="module")
def excerpt() -> tuple[pd.DataFrame, object]:
    return parse_llmfoundry(EXCERPT)


def _row(df: pd.DataFrame, line: int) -> pd.Series:
    hit = df[df["run_id"].str.endswith(f"/{line}")]
    assert len(hit) == 1
    return hit.iloc[0]


def test_excerpt_rows_and_skips(excerpt) -> None:
    df, report = excerpt
    assert report.rows_read == 11  # rows of the three throughput tables
    assert len(df) == 5
    assert list(df["model_name"]) == ["mpt-70b", "mpt-3b", "mpt-3b", "mpt-125m", "mpt-350m"]
    skips = {s.line: s.reason for s in report.skips}
    assert set(skips) == {25, 26, 27, 28, 29, 30, 33}
    assert all(s.path == str(EXCERPT) for s in report.skips)
    assert (
        "GlobalBatchSize must equal MicroBatchSize x GradAccum x # GPUs "
        "(12 x 4 x 8 = 384), got 380" in skips[25]
    )
    assert "Activation CPUOffload must be False: the analytic model has no CPU offload" in skips[26]
    assert skips[27].startswith("mpt-13b maps to parameters +93.1% off NumParams 6658859008")
    assert "Model must be one of 125m, 350m" in skips[28] and "got '2b'" in skips[28]
    assert "# GPUs must fill whole 8-GPU nodes (a multiple of 8), got 12" in skips[29]
    assert skips[30] == "row has 19 cells, the header of line 21 has 20"
    assert "not a throughput table" in skips[33]


def test_excerpt_mapping_h100_large_scale(excerpt) -> None:
    df, _ = excerpt
    r = _row(df, 11)  # 70b | 2048 | 512 | h100_80gb | 41.25 | ... | 408 | 8 | 1 | 4096 | ...
    assert (r["num_layers"], r["hidden_size"], r["num_heads"]) == (80, 8192, 64)
    assert r["num_kv_heads"] == 64 and r["vocab_size"] == 50368 and r["tie_embeddings"]
    assert r["ffn_hidden_size"] == round(8 * 8192 / 3) == 21845
    assert r["seq_len"] == 2048
    assert r["gpu"] == "H100-SXM-80GB"
    assert (r["gpus_per_node"], r["num_nodes"], r["dp"]) == (8, 64, 512)
    assert (r["tp"], r["pp"], r["cp"], r["ep"]) == (1, 1, 1, 1)
    assert (r["mbs"], r["grad_accum"]) == (8, 1)
    assert r["zero_stage"] == 3 and r["recompute"] == "full" and r["dtype"] == "bf16"
    assert r["framework"] == "llm-foundry" and r["framework_version"] == "composer-fsdp1"
    assert r["status"] == "completed"
    assert r["tokens_per_s_per_gpu"] == 1007
    assert r["step_time_s"] == pytest.approx(8388608 / 515636)
    assert r["mfu_reported"] == 41.25 and r["tflops_per_gpu_reported"] == 408
    assert 0 < r["mfu"] < 1 and r["mfu"] == pytest.approx(0.4125, rel=0.01)
    assert math.isnan(r["peak_mem_allocated_gib"]) and math.isnan(r["peak_mem_reserved_gib"])
    assert r["source"] == "llmfoundry_mpt"
    assert r["run_id"] == "h100-80gb-bf16-large-scale-128-gpus/11"
    assert r["hardware"] == "H100 80GB BF16 (Large Scale, >= 128 GPUs)"
    assert r["date"] is None


def test_excerpt_mapping_sharding_precision_and_small_clusters(excerpt) -> None:
    df, _ = excerpt
    r = _row(df, 12)  # 3b SHARD_GRAD_OP, no checkpointing
    assert r["zero_stage"] == 2 and r["recompute"] == "none"
    r = _row(df, 17)  # the FP8 table
    assert r["dtype"] == "fp8" and r["recompute"] == "full" and r["seq_len"] == 32768
    assert (r["mbs"], r["grad_accum"], r["num_nodes"], r["gpus_per_node"]) == (3, 6, 1, 8)
    assert r["hardware"] == "H100 80GB FP8"
    r = _row(df, 23)  # A100 40GB, Precision bf16 with MP Mode PURE
    assert r["gpu"] == "A100-SXM-40GB" and r["dtype"] == "bf16"
    assert (r["num_layers"], r["hidden_size"], r["num_heads"]) == (12, 768, 12)
    assert r["hardware"] == A100_40
    r = _row(df, 24)  # 350m on 16 GPUs: two nodes
    assert (r["hidden_size"], r["num_layers"], r["num_heads"]) == (1024, 24, 16)
    assert (r["gpus_per_node"], r["num_nodes"], r["dp"]) == (8, 2, 16)
    assert r["step_time_s"] == pytest.approx(589824 / 886622)


def test_equivalent_mlp_matches_gelu_parameters() -> None:
    for hidden, _, _ in MPT_SHAPES.values():
        f = equivalent_ffn(hidden)
        assert abs(3 * hidden * f - 8 * hidden**2) / (8 * hidden**2) < 1.3e-4


@pytest.mark.parametrize(
    ("size", "seq_len", "num_params"),
    # NumParams of the README's rows (A100 80GB table, 2048 tokens unless given)
    [
        ("125m", 2048, 125311488),
        ("125m", 65536, 174070272),
        ("350m", 2048, 355985408),
        ("760m", 2048, 760470528),
        ("1b", 2048, 1315950592),
        ("3b", 2048, 2651837440),
        ("7b", 2048, 6658859008),
        ("13b", 2048, 12853954560),
        ("30b", 8192, 30019254272),
        ("70b", 2048, 64862437376),
    ],
)
def test_param_check_against_num_params(size: str, seq_len: int, num_params: int) -> None:
    hidden, layers, heads = MPT_SHAPES[size]
    cfg = config_from_flat(
        dict(
            num_layers=layers,
            hidden_size=hidden,
            ffn_hidden_size=equivalent_ffn(hidden),
            num_heads=heads,
            vocab_size=50368,
            seq_len=seq_len,
            tie_embeddings=True,
            framework="llm-foundry",
            zero_stage=3,
            dp=8,
        )
    )
    diff = param_check(cfg, num_params)
    print(f"mpt-{size} s={seq_len}: mapped parameters {diff:+.4%} vs NumParams - s h")
    # the rest is the yamls' biases: 13 h per layer and 2 h, ours has none (and 2 h of norms)
    biases = layers * 13 * hidden + 2 * hidden - (2 * layers + 1) * hidden
    assert diff == pytest.approx(-biases / (num_params - seq_len * hidden), abs=1e-4)
    assert abs(diff) < 1e-3 < PARAM_TOLERANCE


def test_detect_and_missing(tmp_path: Path) -> None:
    assert detect_format(EXCERPT) == "llm-foundry"
    (tmp_path / "notes.md").write_text("# notes\n\n| a | b |\n| --- | --- |\n")
    with pytest.raises(DataError, match="cannot tell the format"):
        detect_format(tmp_path / "notes.md")
    with pytest.raises(DataError, match="holds no llm-foundry throughput table"):
        parse_llmfoundry(tmp_path / "notes.md")
    with pytest.raises(DataError, match="does not exist"):
        parse_llmfoundry(tmp_path / "none.md")


def test_cli_ingest_excerpt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    into = tmp_path / "t.parquet"
    assert main(["ingest", str(EXCERPT), "--into", str(into)]) == 0
    out = capsys.readouterr().out
    assert "read 11 rows from 1 file(s), skipped 7" in out
    assert "added 5, replaced 0, unchanged 0, table now holds 5 rows" in out
    table = read_sweeps(into)
    assert set(table["framework"]) == {"llm-foundry"}
    assert main(["ingest", str(EXCERPT), "--into", str(into), "--set", "tp=2"]) == 2
    assert "llm-foundry tables carry their own configuration" in capsys.readouterr().err


def test_full_readme() -> None:
    from surrogate.io.datasource import data_dir

    path = data_dir() / FULL
    if not path.exists():
        pytest.skip(
            f"the shared llm-foundry README is absent ({path}); "
            "see ../shared/data/MANIFEST.md, sweeps/llmfoundry_mpt"
        )
    df, report = parse_llmfoundry(path)
    print(report.summary())
    assert report.rows_read == 216
    assert len(df) == 216 and not report.skips
    validate_sweeps(df)
    for record in df[list(CONFIG_COLUMNS)].to_dict("records"):
        config_from_flat(record)
    assert df["run_id"].is_unique
    assert set(df["gpu"]) == {"H100-SXM-80GB", "A100-SXM-80GB", "A100-SXM-40GB"}
    assert df.groupby("dtype").size().to_dict() == {"bf16": 209, "fp8": 7}
    assert df.groupby("zero_stage").size().to_dict() == {2: 6, 3: 210}
    assert df["hardware"].nunique() == 5
    assert not df["gated_mlp"].any()  # MPT's MLP is GELU (MPTMLP)
    ratio = df["mfu"] * 100 / df["mfu_reported"]
    # the README's MFU counts the position table and biases too: at most 3.8 % above ours
    assert ratio.between(0.96, 1.0).all()
