"""The standard suite's plan: commands, counts, estimates."""

from __future__ import annotations

from pathlib import Path

from microbench.suite import SuiteSettings, plan


def test_gpu_plan_counts_and_estimates(tmp_path: Path) -> None:
    steps = plan(SuiteSettings(out_dir=tmp_path, nproc=8, cuda=True, fp8=True))
    names = [s.name for s in steps]
    assert names == [
        "gemm",
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "broadcast",
        "send_recv",
    ]
    ar = steps[1]
    # groups 2 and 4 in two layouts, 8 (the world) once; 4 KiB .. 1 GiB = 19 sizes
    assert ar.records == (2 + 2 + 1) * 19
    assert steps[-1].records == 2 * 19  # pairs only
    assert all(s.estimate_s > 0 for s in steps)
    assert "--nproc-per-node 8 -m microbench.collectives --ops all_reduce" in ar.shell()
    assert "fp8" in steps[0].shell()


def test_cpu_plan_has_no_collectives_with_one_process(tmp_path: Path) -> None:
    steps = plan(SuiteSettings(out_dir=tmp_path, nproc=1, cuda=False, quick=True))
    assert [s.name for s in steps] == ["gemm"] and "--device cpu" in steps[0].shell()
