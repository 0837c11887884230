"""Published performance tables as runs: the Megatron-Bridge table's mapping, its assumptions,
its skips and flagged layouts, the format's detection and ingest, and the MPT tables through the
same columns."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from surrogate.cli import main
from surrogate.config.gpus import get_gpu
from surrogate.config.training import CONFIG_COLUMNS, config_from_flat
from surrogate.errors import DataError
from surrogate.ingest.detect import detect_format
from surrogate.ingest.published import (
    PUBLISHED_COLUMNS,
    assumption_sources,
    model_key,
    parse_published,
    parse_published_annotated,
    published_runs,
)
from surrogate.runs.sweep_files import read_sweeps
from surrogate.runs.sweeps import SWEEP_COLUMNS, validate_sweeps

COLUMNS = [
    "source_repo",
    "commit",
    "path",
    "source_line",
    "table",
    "container_version",
    "task",
    "system",
    "gpu",
    "num_gpus",
    "gpus_per_node",
    "model",
    "precision",
    "precision_detail",
    "seq_len",
    "gbs",
    "mbs",
    "tp",
    "pp",
    "cp",
    "vp",
    "ep",
    "fsdp",
    "tokens_per_s_per_gpu",
    "tflops_per_gpu",
    "variant",
    "notes",
    "raw_row",
]

SYNTHETIC: list[dict[str, str]] = [
    # line 2: a dense FP8 row as the 26.x tables write it
    dict(
        container_version="NeMo 26.04",
        task="pre-train",
        num_gpus="64",
        model="LLAMA3_70B",
        precision="FP8",
        seq_len="8192",
        gbs="256",
        mbs="1",
        tp="4",
        pp="8",
        cp="1",
        vp="5",
        ep="",
        fsdp="0",
        tokens_per_s_per_gpu="1600",
        tflops_per_gpu="700",
    ),
    # line 3: a 25.09 row: no precision column, Megatron-FSDP over 8
    dict(
        container_version="NeMo 25.09",
        task="pre-train",
        num_gpus="8",
        model="LLAMA3_8B",
        precision="",
        seq_len="8192",
        gbs="128",
        mbs="1",
        tp="1",
        pp="1",
        cp="1",
        vp="",
        ep="1",
        fsdp="8",
        tokens_per_s_per_gpu="14000",
        tflops_per_gpu="720",
    ),
    # line 4: current scaling, an MoE model with expert parallelism over every GPU
    dict(
        container_version="NeMo 25.11",
        task="pre-train",
        num_gpus="16",
        model="Qwen3_30B_a3B (tokendrop)",
        precision="FP8-CS",
        seq_len="4096",
        gbs="512",
        mbs="2",
        tp="1",
        pp="2",
        cp="1",
        vp="24",
        ep="8",
        fsdp="0",
        tokens_per_s_per_gpu="5000",
        tflops_per_gpu="120",
    ),
    # line 5: a layout the project's rules refuse (126 layers over pp 8 x vp 6: neither 126
    # nor 126 + 2, Megatron's split with the embedding and loss as layers, divides by 48)
    dict(
        container_version="NeMo 26.02",
        task="pre-train",
        num_gpus="1024",
        model="LLAMA3.1_405B",
        precision="FP8",
        seq_len="8192",
        gbs="1536",
        mbs="1",
        tp="8",
        pp="8",
        cp="2",
        vp="6",
        ep="",
        fsdp="0",
        tokens_per_s_per_gpu="300",
        tflops_per_gpu="780",
    ),
    # line 6: a model the analytic model cannot represent
    dict(
        container_version="NeMo 26.04",
        task="pre-train",
        num_gpus="16",
        model="Nemotron_3_Nano",
        precision="FP8",
        seq_len="8192",
        gbs="1024",
        mbs="1",
        tp="1",
        pp="1",
        cp="1",
        vp="",
        ep="8",
        fsdp="0",
        tokens_per_s_per_gpu="14000",
        tflops_per_gpu="320",
    ),
    # line 7: LoRA
    dict(
        container_version="NeMo 26.06",
        task="LoRA",
        num_gpus="8",
        model="LLAMA3_70B",
        precision="FP8",
        seq_len="4096",
        gbs="32",
        mbs="1",
        tp="2",
        pp="4",
        cp="1",
        vp="20",
        ep="",
        fsdp="",
        tokens_per_s_per_gpu="2600",
        tflops_per_gpu="730",
    ),
    # line 8: TFLOP/s only (the value in parentheses)
    dict(
        container_version="NeMo 26.04",
        task="pre-train",
        num_gpus="64",
        model="LLAMA3_70B",
        precision="FP8",
        seq_len="8192",
        gbs="256",
        mbs="1",
        tp="4",
        pp="8",
        cp="1",
        vp="5",
        ep="",
        fsdp="0",
        tokens_per_s_per_gpu="",
        tflops_per_gpu="690",
        variant="alt_in_parens",
    ),
    # line 9: a global batch the layout cannot make
    dict(
        container_version="NeMo 26.04",
        task="pre-train",
        num_gpus="64",
        model="LLAMA3_70B",
        precision="FP8",
        seq_len="8192",
        gbs="255",
        mbs="1",
        tp="4",
        pp="8",
        cp="1",
        vp="5",
        ep="",
        fsdp="0",
        tokens_per_s_per_gpu="1600",
        tflops_per_gpu="700",
    ),
]
"""Synthetic rows in the shape of ../shared/data/published/megatron_bridge_h100.csv (values made
up near the published ones), one per mapping case and skip reason."""


def write_fixture(path: Path, rows: list[dict[str, str]] = SYNTHETIC) -> Path:
    """Write ``rows`` as a published table at ``path`` (the other columns filled)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for k, row in enumerate(rows):
            writer.writerow(
                {
                    "source_repo": "NVIDIA-NeMo/Megatron-Bridge",
                    "commit": "0" * 40,
                    "path": "docs/performance-summary.md",
                    "source_line": str(100 + k),
                    "table": "synthetic",
                    "system": "DGX-H100",
                    "gpu": "H100-SXM-80GB",
                    "gpus_per_node": "8",
                    "precision_detail": "",
                    "variant": "main",
                    "notes": "",
                    "raw_row": "| synthetic |",
                    **row,
                }
            )
    return path


@pytest.fixture
def fixture_csv(tmp_path: Path) -> Path:
    return write_fixture(tmp_path / "published.csv")


def _run(df: pd.DataFrame, line: int) -> pd.Series:
    hit = df[df["run_id"].str.endswith(f"/{line}")]
    assert len(hit) == 1
    return hit.iloc[0]


def test_rows_skips_and_flags(fixture_csv: Path) -> None:
    df, report = parse_published_annotated(fixture_csv)
    assert report.rows_read == 8
    assert len(df) == 4
    reasons = {s.line: s.reason for s in report.skips}
    assert set(reasons) == {6, 7, 8, 9}
    assert "Mamba" in reasons[6]
    assert reasons[7].startswith("LoRA")
    assert "TFLOP/s only" in reasons[8]
    assert "gbs must be a multiple of mbs x dp" in reasons[9]
    flagged = _run(df, 103)
    assert "num_layers must be divisible by pp * vpp" in flagged["layout_problem"]
    assert flagged["status"] == "completed"
    assert any("flagged" in n for n in report.notes)
    strict, strict_report = parse_published(fixture_csv, flagged=False)
    assert len(strict) == 3
    assert any(s.reason.startswith("layout refused: num_layers") for s in strict_report.skips)


def test_layout_as_stated(fixture_csv: Path) -> None:
    df, _ = parse_published_annotated(fixture_csv)
    llama = _run(df, 100)
    assert (llama["dp"], llama["tp"], llama["pp"], llama["cp"], llama["vpp"]) == (2, 4, 8, 1, 5)
    assert (llama["mbs"], llama["grad_accum"], llama["seq_len"]) == (1, 128, 8192)
    assert llama["num_nodes"] == 8 and llama["framework"] == "megatron"
    assert llama["zero_stage"] == 1 and llama["sequence_parallel"] and llama["dtype"] == "fp8"
    assert llama["step_time_s"] == pytest.approx(256 * 8192 / (1600 * 64))
    assert llama["tflops_per_gpu_reported"] == 700
    assert llama["source"] == "megatron_bridge" and llama["run_id"] == "nemo-26.04/pre-train/100"
    assert llama["peak_memory_upper_bound_gib"] == get_gpu("H100-SXM-80GB").memory_gib
    moe = _run(df, 102)
    # ep folds into dp (Megatron's expert-parallel group is carved out of the dp ranks)
    assert (moe["dp"], moe["ep"], moe["grad_accum"], moe["num_experts"]) == (8, 8, 32, 128)
    assert not moe["sequence_parallel"]
    for record in df.loc[df["layout_problem"].isna(), list(CONFIG_COLUMNS)].to_dict("records"):
        config_from_flat(record)


def test_assumptions_recorded(fixture_csv: Path) -> None:
    df, _ = parse_published_annotated(fixture_csv)
    text = {
        line: dict(p.split("=") for p in _run(df, line)["assumptions"].split(";"))
        for line in (100, 101, 102, 103)
    }
    assert text[100]["distributed_optimizer"] == "on"
    assert text[100]["sequence_parallel"] == "on" and text[100]["tp_comm_overlap"] == "on"
    assert text[100]["fp8_recipe"] == "tensorwise" and text[100]["pipeline_split"] == "even"
    assert text[101]["precision"] == "fp8_inferred"
    assert text[101]["distributed_optimizer"] == "off" and text[101]["megatron_fsdp"] == "8"
    assert _run(df, 101)["zero_stage"] == 3
    assert "sequence_parallel" not in text[101]  # tp 1
    assert text[102]["fp8_recipe"] == "current_scaling"
    assert text[102]["moe_dispatch"] == "tokendrop" and text[102]["recompute"] == "full"
    assert _run(df, 102)["recompute"] == "full"
    assert text[103]["pipeline_split"] == "embedding_and_loss_counted_as_stages"
    sources = assumption_sources()
    assert "megatron-bridge 0.3.1" in sources["distributed_optimizer"]
    assert "account_for_embedding_in_pipeline_split" in sources["pipeline_split (LLAMA3.1_405B)"]


def test_model_key() -> None:
    assert model_key("DeepSeekV3 (dropless)") == ("DEEPSEEKV3", "dropless")
    assert model_key("GPT OSS 120B") == ("GPT OSS 120B", None)


def test_detect_ingest_and_bad_files(
    fixture_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert detect_format(fixture_csv) == "published"
    into = tmp_path / "t.parquet"
    assert main(["ingest", str(fixture_csv), "--into", str(into)]) == 0
    out = capsys.readouterr().out
    assert "read 8 rows from 1 file(s), skipped 4" in out
    table = read_sweeps(into, flagged=True)
    assert list(table.columns) == list(SWEEP_COLUMNS)
    assert set(table["framework"]) == {"megatron"} and len(table) == 4
    assert main(["ingest", str(fixture_csv), "--into", str(into), "--set", "tp=2"]) == 2
    assert "published performance table carries its own" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("source_repo,container_version,tokens_per_s_per_gpu,raw_row\nx,y,1,z\n")
    with pytest.raises(DataError, match=r"needs the columns .* missing source_line"):
        parse_published(bad)
    with pytest.raises(DataError, match="does not exist"):
        parse_published(tmp_path / "none.csv")


def _data(path: str) -> Path:
    from surrogate.io.datasource import data_dir

    full = data_dir() / path
    if not full.exists():
        pytest.skip(f"the shared data file is absent ({full}); see ../shared/data/MANIFEST.md")
    return full


def test_real_megatron_bridge_table() -> None:
    path = _data("published/megatron_bridge_h100.csv")
    df, report = parse_published_annotated(path)
    print(report.summary())
    assert report.rows_read == 39
    assert len(df) + len(report.skips) == 39
    validate_sweeps(df[list(SWEEP_COLUMNS)])
    assert df["run_id"].is_unique and set(df["framework"]) == {"megatron"}
    assert (df["status"] == "completed").all()
    kept = df[df["layout_problem"].isna()]
    assert {"LLAMA3_70B", "LLAMA3_8B"} <= set(kept["model_name"])
    llama70 = kept[kept["model_name"] == "LLAMA3_70B"]
    assert set(zip(llama70["tp"], llama70["pp"], llama70["vpp"], llama70["dp"], strict=True)) == {
        (4, 8, 5, 2)
    }
    # Qwen3 235B-A22B: ep 32 over tp 2 x dp 16, Megatron's experts folded (expert tensor
    # parallelism 1, the recipe's), a layout of the rules: no row is flagged
    qwen = df[df["model_name"].str.startswith("Qwen3_235B")]
    assert len(qwen) == 6 and qwen["layout_problem"].isna().all()
    assert set(zip(qwen["tp"], qwen["dp"], qwen["ep"], strict=True)) == {(2, 16, 32)}
    assert qwen["assumptions"].str.contains("expert_tensor_parallel=1").all()
    assert df[list(PUBLISHED_COLUMNS)].notna().all().all()


def test_mpt_rows_unchanged_and_annotated() -> None:
    from surrogate.ingest.llmfoundry import parse_llmfoundry

    path = _data("sweeps/llmfoundry_mpt/benchmarking_README.md")
    plain = parse_llmfoundry(path)[0]
    annotated = published_runs("llmfoundry_mpt")
    pd.testing.assert_frame_equal(annotated[list(SWEEP_COLUMNS)], plain)
    assert (annotated["peak_memory_upper_bound_gib"] <= 80).all()
    assert annotated["assumptions"].str.contains("attention=not_FlashAttention-2").all()
    with pytest.raises(DataError, match="source must be one of"):
        published_runs("nope")
