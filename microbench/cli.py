"""`surrogate microbench`: plan and run the standard suite of this program.

The suite's programs are ``python -m microbench.gemm`` and ``torchrun ... -m
microbench.collectives``; this command plans them (``microbench.suite``), prints the duration
estimate, and runs them one by one with a progress bar fed by the JSON lines they write.
``--print-commands`` prints the commands instead, to run by hand or under Slurm
(``microbench/collectives.sbatch``).

The library never imports this program: pyproject.toml declares :func:`register` under the
``surrogate.commands`` entry-point group, and ``surrogate.cli`` calls it when a command it
does not have itself is asked for (or for the help that lists every command).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from microbench.collectives import OPS
from microbench.gemm import fp8_supported
from microbench.suite import Step, SuiteSettings, plan
from surrogate.config.gpus import canonical_gpu_name
from surrogate.errors import ConfigError, MeasurementError
from surrogate.extras import require


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def microbench_cmd(
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where the JSON lines go.")] = Path(
        "datasets/microbench/local"
    ),
    quick: Annotated[bool, typer.Option(help="A small suite (minutes on a GPU).")] = False,
    print_commands: Annotated[
        bool,
        typer.Option("--print-commands", help="Print the commands and the estimate; run nothing."),
    ] = False,
    ops: Annotated[str, typer.Option(help="Comma-separated collectives to run.")] = (
        "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,send_recv"
    ),
    gemm: Annotated[bool, typer.Option(help="Run the GEMM suite.")] = True,
    nproc: Annotated[
        int, typer.Option(help="Processes for collectives (0: all GPUs, or 2 on a CPU).")
    ] = 0,
) -> int:
    """Run the standard microbenchmark suite on this machine's devices."""
    torch = require("torch")
    chosen = tuple(o.strip() for o in ops.split(",") if o.strip())
    bad = [o for o in chosen if o not in OPS]
    if bad:
        raise ConfigError(f"--ops must be among {', '.join(OPS)}, got {', '.join(bad)}")
    cuda = torch.cuda.is_available()
    gpu = _gpu_name(torch) if cuda else "H100-SXM-80GB"
    if nproc < 0:
        raise ConfigError(f"--nproc must be >= 0, got {nproc}")
    procs = nproc or (torch.cuda.device_count() if cuda else 2)
    settings = SuiteSettings(
        out_dir=out_dir,
        nproc=procs,
        cuda=cuda,
        gpu=gpu,
        quick=quick,
        ops=chosen,
        gemm=gemm,
        fp8=cuda and fp8_supported(),
    )
    steps = plan(settings)
    console = Console(stderr=True)
    total_s = sum(s.estimate_s for s in steps)
    device = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}" if cuda else "CPU"
    console.print(
        f"[bold]{len(steps)} step(s)[/], {sum(s.records for s in steps)} measurements "
        f"on {escape(device)}; estimated {total_s / 60:.1f} min"
        + ("" if cuda else " at GPU speed (a CPU run is slower)")
    )
    if print_commands:
        for s in steps:
            print(f"# {s.name}: {s.records} measurements, about {s.estimate_s:.0f} s")
            print(s.shell())
        return 0
    failed = _run_steps(steps, console)
    for written in sorted({s.out for s in steps}):
        console.print(f"wrote {escape(str(written))}", highlight=False)
    if failed:
        raise MeasurementError(
            "some steps failed, their other measurements are kept: " + "; ".join(failed)
        )
    return 0


def _gpu_name(torch: Any) -> str:
    """This machine's GPU by the name of the GPU table (an H100's where it has none)."""
    # the ingest module reads tables with pandas: loaded only where a GPU is there to name
    from surrogate.runs.microbench_table import hardware_from_device_name

    gpu = hardware_from_device_name(torch.cuda.get_device_name())
    try:
        return canonical_gpu_name(gpu)
    except ConfigError:
        return "H100-SXM-80GB"


def _run_steps(steps: Sequence[Step], console: Console) -> list[str]:
    """Run ``steps`` one by one under a progress bar fed by the lines each writes; return
    what failed (step, exit code, last line of its stderr)."""
    failed: list[str] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        for s in steps:
            task = progress.add_task(escape(s.name), total=s.records)
            start = _count_lines(s.out)
            proc = subprocess.Popen(
                list(s.argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
            while proc.poll() is None:
                progress.update(task, completed=min(s.records, _count_lines(s.out) - start))
                time.sleep(0.5)
            progress.update(task, completed=min(s.records, _count_lines(s.out) - start))
            if proc.returncode != 0:
                err = (proc.stderr.read() if proc.stderr else "").strip().splitlines()
                failed.append(
                    f"{s.name} (exit {proc.returncode}): {err[-1] if err else 'no message'}"
                )
    return failed


def register(app: typer.Typer) -> None:
    """Add ``microbench`` to ``app`` (the ``surrogate.commands`` entry point)."""
    app.command("microbench")(microbench_cmd)
