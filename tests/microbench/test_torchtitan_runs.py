"""microbench.torchtitan_runs without a GPU: the launch files it plans (surrogate.launch's,
with the reader's columns) and the kernel table of a profiler trace."""

from __future__ import annotations

import json
from pathlib import Path

import microbench.torchtitan_runs as runs
from microbench.torchtitan_runs import CASES, kernel_table, plan
from surrogate import launch


def test_plan_writes_launch_files_and_flavours(tmp_path: Path) -> None:
    dirs = plan(tmp_path, CASES[:2], steps=3)
    assert [d.name for d in dirs] == [c.name for c in CASES[:2]]
    spec = json.loads((dirs[0] / "flavour.json").read_text())
    assert spec["torchtitan_model"] == "llama3" and spec["columns"]["num_nodes"] == 1
    assert "steps = 3" in (dirs[0] / "config.toml").read_text()
    assert (dirs[0] / "train_custom.py").exists()
    assert "train_custom.py --job.config_file config.toml" in (dirs[0] / "launch.sh").read_text()
    # the names this module repeats for the GPU machine are the launch files'
    assert (runs.FLAVOUR_FILE, runs.CONFIG_FILE, runs.TRAIN_SCRIPT) == (
        launch.FLAVOUR_FILE, launch.CONFIG_FILE, launch.TRAIN_SCRIPT)


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
