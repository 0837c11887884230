"""The standard suite: which commands ``surrogate microbench`` runs, how many measurements
each writes, and about how long they take.

Each collective op runs in its own ``torchrun`` so that one that hangs (and is ended by the
watchdog) does not stop the others. The duration estimate prices every measurement with the
datasheet model of the GPU found (``SpecPerfModel``; H100 figures when run on a CPU, where the
real run is slower) plus a fixed cost per measurement and per process start.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microbench.collectives import LAYOUTS, OPS, group_sizes, message_sizes
from microbench.gemm import GemmShape, grid_shapes, standard_shapes
from surrogate.analytic.perf import SpecPerfModel
from surrogate.config.gpus import get_gpu

PROCESS_START_S = 10.0
"""Assumed cost of starting a torchrun and its process group (s)."""
PER_MEASUREMENT_S = 0.02
"""Assumed fixed cost of one measurement: allocation, barrier, rank reduction, writing (s)."""


@dataclass(frozen=True, kw_only=True)
class Step:
    """One command of the suite."""

    name: str
    argv: tuple[str, ...]
    out: Path
    """The JSON-lines file it appends to."""
    records: int
    """Measurements it will write."""
    estimate_s: float

    def shell(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True, kw_only=True)
class SuiteSettings:
    out_dir: Path
    nproc: int
    """Processes for the collectives (GPUs on this node; 2 on a CPU)."""
    cuda: bool
    gpu: str = "H100-SXM-80GB"
    """Hardware table key used for the estimate."""
    quick: bool = False
    """A small suite (grid GEMMs only, messages up to 64 MiB; on CPU 4-64 KiB, tiny GEMMs)."""
    ops: tuple[str, ...] = OPS
    gemm: bool = True
    fp8: bool = False


def _gemm_estimate_s(
    shapes: list[GemmShape], dtypes: list[str], gpu: str, warmup: int, repeats: int
) -> float:
    spec = get_gpu(gpu)
    total = 0.0
    for d in dtypes:
        peak = spec.peak_flops("fp8" if d == "fp8" else "bf16") * 0.7
        for s in shapes:
            t = s.flops / peak
            total += (warmup + 1) * t + repeats * max(t, 1e-3) + PER_MEASUREMENT_S
    return total


def _collective_estimate_s(
    op: str, sizes: list[int], groups: list[int], world: int, gpu: str, warmup: int, iters: int
) -> tuple[int, float]:
    spec = get_gpu(gpu)
    c = {
        "intra_node_bw": np.array(spec.intra_node_bw_bytes_per_s),
        "inter_node_bw": np.array(spec.inter_node_bw_bytes_per_s),
        "intra_node_latency_s": np.array(spec.intra_node_latency_s),
        "inter_node_latency_s": np.array(spec.inter_node_latency_s),
    }
    n, total = 0, PROCESS_START_S
    size_arr = np.array(sizes, dtype=np.float64)
    for g in groups:
        if op == "send_recv" and g != 2:
            continue
        layouts = len(LAYOUTS) if g < world else 1
        t = SpecPerfModel().collective_time_s(
            op, size_arr, np.full_like(size_arr, g), np.zeros_like(size_arr), c
        )
        n += layouts * len(sizes)
        total += layouts * float(np.sum((warmup + iters) * t + PER_MEASUREMENT_S))
    return n, total


def torchrun_argv() -> list[str]:
    """``torchrun`` beside this Python (a venv's), else ``python -m torch.distributed.run``."""
    exe = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "torch.distributed.run"]


def plan(s: SuiteSettings) -> list[Step]:
    """The commands of the standard suite under settings ``s``."""
    py = sys.executable
    steps: list[Step] = []
    warmup, repeats, iters = (2, 5, 5) if s.quick else (5, 20, 20)
    if s.gemm:
        out = s.out_dir / "gemm.jsonl"
        if s.cuda:
            shapes = grid_shapes() if s.quick else standard_shapes()
            dtypes = ["bf16"] + (["fp8"] if s.fp8 else [])
            argv = [
                py,
                "-m",
                "microbench.gemm",
                "--out",
                str(out),
                "--suite",
                "grid" if s.quick else "standard",
                "--dtypes",
                ",".join(dtypes),
            ]
        else:
            shapes = grid_shapes((64, 128, 256)) if s.quick else grid_shapes((256, 512, 1024))
            dtypes = ["f32"]
            argv = [
                py,
                "-m",
                "microbench.gemm",
                "--out",
                str(out),
                "--device",
                "cpu",
                "--dtypes",
                "f32",
                "--shapes",
                *[f"{x.m},{x.n},{x.k}" for x in shapes],
            ]
        argv += ["--warmup", str(warmup), "--repeats", str(repeats)]
        steps.append(
            Step(
                name="gemm",
                argv=tuple(argv),
                out=out,
                records=len(shapes) * len(dtypes),
                estimate_s=_gemm_estimate_s(shapes, dtypes, s.gpu, warmup, repeats),
            )
        )
    if s.nproc >= 2:
        lo, hi = ("4KiB", "64KiB") if not s.cuda else ("4KiB", "64MiB" if s.quick else "1GiB")
        sizes = message_sizes(4096, 65536 if not s.cuda else (2**26 if s.quick else 2**30))
        groups = group_sizes(s.nproc, None)
        out = s.out_dir / "collectives.jsonl"
        for op in s.ops:
            argv = [
                *torchrun_argv(),
                "--standalone",
                "--nproc-per-node",
                str(s.nproc),
                "-m",
                "microbench.collectives",
                "--ops",
                op,
                "--min-bytes",
                lo,
                "--max-bytes",
                hi,
                "--warmup",
                str(warmup),
                "--iters",
                str(iters),
                "--out",
                str(out),
            ]
            n, est = _collective_estimate_s(op, sizes, groups, s.nproc, s.gpu, warmup, iters)
            steps.append(Step(name=op, argv=tuple(argv), out=out, records=n, estimate_s=est))
    return steps
