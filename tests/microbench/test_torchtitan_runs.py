"""microbench.torchtitan_runs without a GPU: the launch files it plans (surrogate.loop.launch's,
with the reader's columns) and the kernel table of a profiler trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import microbench.torchtitan_runs as runs
from microbench.torchtitan_runs import CASES, kernel_table, plan
from surrogate.loop import launch


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
        launch.FLAVOUR_FILE,
        launch.CONFIG_FILE,
        launch.TRAIN_SCRIPT,
    )


def test_kernel_table_sums_gpu_kernels_by_name(tmp_path: Path) -> None:
    """A synthetic trace, written here: two kernels of one name, one of another, a CPU op."""
    events = [
        {"cat": "kernel", "ph": "X", "name": "gemm", "dur": 1500.0},
        {"cat": "kernel", "ph": "X", "name": "gemm", "dur": 500.0},
        {"cat": "kernel", "ph": "X", "name": "copy", "dur": 250.0},
        {"cat": "cpu_op", "ph": "X", "name": "aten::mm", "dur": 9000.0},
        {"cat": "user_annotation", "ph": "X", "name": "ProfilerStep#20", "dur": 4000.0},
    ]
    trace = tmp_path / "synthetic_trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    lines = kernel_table(trace).splitlines()
    assert lines[0] == "profiled step: 4.00 ms wall, 2.25 ms of GPU kernels, 2 kernel names"
    assert lines[1].split() == ["2.000", "ms", "2x", "gemm"]
    assert lines[2].split() == ["0.250", "ms", "1x", "copy"]


def test_train_one_runs_the_launch_files_script_where_torchtitan_is_installed(
    tmp_path: Path, monkeypatch
) -> None:
    """Where torchtitan is installed (CI skips this; torchtitan's trainer itself needs a GPU):
    train_one runs the run's train_custom.py, which registers the flavour before torchtitan's
    main parses the run's config."""
    torchtitan_train = pytest.importorskip("torchtitan.train")
    seen = {}

    def fake_main(trainer_class) -> None:
        import sys

        from torchtitan.config import ConfigManager
        from torchtitan.models.llama4 import llama4_args

        # explicit: the default argv was bound when this process (pytest) imported torchtitan
        job = ConfigManager().parse_args(sys.argv[1:])
        seen.update(
            flavor=job.model.flavor,
            name=job.model.name,
            dim=llama4_args[job.model.flavor].dim,
            steps=job.training.steps,
        )

    monkeypatch.setattr(torchtitan_train, "main", fake_main)
    moe = next(c for c in CASES if c.label == "moe8e")
    (d,) = plan(tmp_path, [moe], steps=3)
    runs.train_one(d, ["--training.steps", "2"])
    assert seen == {"flavor": "custom", "name": "llama4", "dim": 2048, "steps": 2}
