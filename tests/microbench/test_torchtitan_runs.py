"""microbench.torchtitan_runs without a GPU: model arguments that build the modelled shapes,
the launch files it plans, and the kernel table of a profiler trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microbench.torchtitan_runs import CASES, kernel_table, plan, torchtitan_model_args
from surrogate.config import ModelConfig


def test_llama_widths_land_exactly() -> None:
    """torchtitan sizes an MLP as multiple_of x ceil(multiplier x int(8 dim / 3) / multiple_of)
    (llama3; llama4's experts from 4 dim likewise): the arguments give the wanted widths."""
    for case in (c for c in CASES if "num_layers" in c.model):  # not the shipped flavours
        model = ModelConfig(**{"seq_len": 4096, **case.model})
        name, args = torchtitan_model_args(model)
        base = int(2 * 4 * args["dim"] / 3)
        width = args["multiple_of"] * -(-int(args["ffn_dim_multiplier"] * base)
                                        // args["multiple_of"])
        want = model.moe_ffn_hidden_size if model.num_experts else model.ffn_hidden_size
        assert width == want and name == ("llama4" if model.num_experts else "llama3")


def test_shapes_torchtitan_cannot_build_are_refused() -> None:
    tied = ModelConfig(name="t", num_layers=2, hidden_size=256, ffn_hidden_size=512,
                       num_heads=4, num_kv_heads=4, vocab_size=1000, seq_len=128,
                       tie_embeddings=True)
    with pytest.raises(ValueError, match="do not tie embeddings"):
        torchtitan_model_args(tied)


def test_plan_writes_launch_files_and_flavours(tmp_path: Path) -> None:
    dirs = plan(tmp_path, CASES[:2], steps=3)
    assert [d.name for d in dirs] == [c.name for c in CASES[:2]]
    spec = json.loads((dirs[0] / "flavour.json").read_text())
    assert spec["torchtitan_model"] == "llama3" and spec["columns"]["num_nodes"] == 1
    assert "steps = 3" in (dirs[0] / "config.toml").read_text()


def test_kernel_table_sums_gpu_kernels_by_name(tmp_path: Path) -> None:
    """A synthetic trace, written here: two kernels of one name, one of another, a CPU op."""
    events = [{"cat": "kernel", "ph": "X", "name": "gemm", "dur": 1500.0},
              {"cat": "kernel", "ph": "X", "name": "gemm", "dur": 500.0},
              {"cat": "kernel", "ph": "X", "name": "copy", "dur": 250.0},
              {"cat": "cpu_op", "ph": "X", "name": "aten::mm", "dur": 9000.0},
              {"cat": "user_annotation", "ph": "X", "name": "ProfilerStep#20", "dur": 4000.0}]
    trace = tmp_path / "synthetic_trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    lines = kernel_table(trace).splitlines()
    assert lines[0] == "profiled step: 4.00 ms wall, 2.25 ms of GPU kernels, 2 kernel names"
    assert lines[1].split() == ["2.000", "ms", "2x", "gemm"]
    assert lines[2].split() == ["0.250", "ms", "1x", "copy"]
