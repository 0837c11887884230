"""GEMM microbenchmark: shapes of the presets, the CPU path for real, the GPU path if any."""

from __future__ import annotations

from pathlib import Path

import pytest

from microbench.gemm import GemmShape, main, preset_shapes
from surrogate.ingest.microbench_jsonl import parse_microbench_jsonl


def test_preset_shapes_follow_tp() -> None:
    shapes = {(s.m, s.n, s.k): s.origin for s in preset_shapes(tps=(1, 8))}
    # llama3-8b, tp=8: QKV forward is T x (32+2x8)x128/8 x 4096 with T = 8192 tokens
    assert (8192, 768, 4096) in shapes
    # its MLP down projection is row-parallel: k = 14336 / 8
    assert (8192, 4096, 1792) in shapes
    assert all(min(s) >= 1 for s in shapes)


def test_shape_validation() -> None:
    with pytest.raises(ValueError, match=r"GemmShape.k must be an integer >= 1, got 0"):
        GemmShape(m=1, n=1, k=0)


def test_cpu_run_writes_records(tmp_path: Path) -> None:
    out = tmp_path / "g.jsonl"
    code = main(
        [
            "--device",
            "cpu",
            "--dtypes",
            "f32,bf16",
            "--shapes",
            "32,16,8",
            "16,16,16,2",
            "--warmup",
            "1",
            "--repeats",
            "3",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    df, rep = parse_microbench_jsonl(out)
    assert len(df) == 4 and not rep.skips
    assert (df["flops_per_s"] > 0).all() and (df["hardware"] == "cpu").all()
    row = df[(df["m"] == 32) & (df["dtype"] == "f32")].iloc[0]
    assert row["flops_per_s"] == pytest.approx(2 * 32 * 16 * 8 / row["time_s"])


def test_failure_is_recorded_and_the_rest_runs(tmp_path: Path) -> None:
    out = tmp_path / "g.jsonl"
    code = main(
        [
            "--device",
            "cpu",
            "--dtypes",
            "fp8,f32",
            "--shapes",
            "16,16,16,2",
            "--warmup",
            "1",
            "--repeats",
            "1",
            "--out",
            str(out),
        ]
    )
    assert code == 1
    df, rep = parse_microbench_jsonl(out)
    assert list(df["dtype"]) == ["f32"]
    assert "status error" in rep.skips[0].reason and "unbatched" in rep.skips[0].reason


@pytest.mark.gpu
def test_gpu_bf16(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    out = tmp_path / "g.jsonl"
    assert main(["--shapes", "4096,4096,4096", "--out", str(out)]) == 0
    df, _ = parse_microbench_jsonl(out)
    assert (df["flops_per_s"] > 1e13).all()
