"""`surrogate microbench` (run the standard suite) and `surrogate calibrate` (fit a profile).

The suite's programs live in ``microbench/`` (``python -m microbench.gemm``,
``torchrun ... -m microbench.collectives``); this command plans them (``microbench.suite``),
prints the duration estimate, and runs them one by one with a progress bar fed by the JSON
lines they write. ``--print-commands`` prints the commands instead, to run by hand or under
Slurm (``microbench/collectives.sbatch``).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from surrogate.cli.app import app
from surrogate.errors import ConfigError


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


@app.command("microbench")
def microbench_cmd(
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where the JSON lines go.")] = Path(
        "datasets/microbench/local"),
    quick: Annotated[bool, typer.Option(help="A small suite (minutes on a GPU).")] = False,
    print_commands: Annotated[bool, typer.Option(
        "--print-commands", help="Print the commands and the estimate; run nothing.")] = False,
    ops: Annotated[str, typer.Option(help="Comma-separated collectives to run.")] = (
        "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,send_recv"),
    gemm: Annotated[bool, typer.Option(help="Run the GEMM suite.")] = True,
    nproc: Annotated[int, typer.Option(help="Processes for collectives (0: all GPUs, or 2 on "
                                            "a CPU).")] = 0,
) -> int:
    """Run the standard microbenchmark suite on this machine's devices."""
    from surrogate.extras import require

    torch = require("torch")
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from microbench.collectives import OPS
    from microbench.gemm import fp8_supported
    from microbench.suite import SuiteSettings, plan
    from surrogate.errors import ConfigError, MeasurementError
    from surrogate.microbench_table import hardware_from_device_name

    chosen = tuple(o.strip() for o in ops.split(",") if o.strip())
    bad = [o for o in chosen if o not in OPS]
    if bad:
        raise ConfigError(f"--ops must be among {', '.join(OPS)}, got {', '.join(bad)}")
    cuda = torch.cuda.is_available()
    gpu = hardware_from_device_name(torch.cuda.get_device_name()) if cuda else "H100-SXM-80GB"
    try:
        from surrogate.hardware import canonical_gpu_name

        gpu = canonical_gpu_name(gpu)
    except ConfigError:
        gpu = "H100-SXM-80GB"
    if nproc < 0:
        raise ConfigError(f"--nproc must be >= 0, got {nproc}")
    procs = nproc or (torch.cuda.device_count() if cuda else 2)
    settings = SuiteSettings(out_dir=out_dir, nproc=procs, cuda=cuda, gpu=gpu, quick=quick,
                             ops=chosen, gemm=gemm, fp8=cuda and fp8_supported())
    steps = plan(settings)
    console = Console(stderr=True)
    total_s = sum(s.estimate_s for s in steps)
    device = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}" if cuda else "CPU"
    console.print(f"[bold]{len(steps)} step(s)[/], {sum(s.records for s in steps)} measurements "
                  f"on {escape(device)}; estimated {total_s / 60:.1f} min"
                  + ("" if cuda else " at GPU speed (a CPU run is slower)"))
    if print_commands:
        for s in steps:
            print(f"# {s.name}: {s.records} measurements, about {s.estimate_s:.0f} s")
            print(s.shell())
        return 0
    failed: list[str] = []
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeRemainingColumn(),
                  console=console) as progress:
        for s in steps:
            task = progress.add_task(escape(s.name), total=s.records)
            start = _count_lines(s.out)
            proc = subprocess.Popen(list(s.argv), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            while proc.poll() is None:
                progress.update(task, completed=min(s.records, _count_lines(s.out) - start))
                time.sleep(0.5)
            progress.update(task, completed=min(s.records, _count_lines(s.out) - start))
            if proc.returncode != 0:
                err = (proc.stderr.read() if proc.stderr else "").strip().splitlines()
                failed.append(f"{s.name} (exit {proc.returncode}): "
                              f"{err[-1] if err else 'no message'}")
    for written in sorted({s.out for s in steps}):
        console.print(f"wrote {escape(str(written))}", highlight=False)
    if failed:
        raise MeasurementError(
            "some steps failed, their other measurements are kept: " + "; ".join(failed))
    return 0


@app.command("calibrate")
def calibrate_cmd(
    out: Annotated[Path, typer.Option(
        help="Profile JSON to write (or, with --runs, the fitted parameters' JSON).")],
    tables: Annotated[list[Path] | None, typer.Argument(
        help="Microbenchmark tables (.parquet/.csv) or raw outputs (.jsonl, .txtpb, .log).",
        show_default=False)] = None,
    gpu: Annotated[str, typer.Option(
        help="GPU of the profile (hardware table key or alias).")] = "",
    name: Annotated[str, typer.Option(help="Profile name shown by predict.")] = "",
    note: Annotated[list[str] | None, typer.Option(
        help="A note stored in the profile (repeatable), e.g. how the data was taken.")] = None,
    runs: Annotated[list[str] | None, typer.Option(
        help="Fit the analytic model's free parameters instead, per framework version, on "
             "these sweep tables ('playbook': the Playbook's runs). Repeatable.")] = None,
    profile: Annotated[str, typer.Option(
        help="With --runs: calibration profile of the runs' cluster (default: each run's "
             "own where known, else its GPU's default).")] = "",
    group_by: Annotated[str, typer.Option(
        help="With --runs: the column whose groups grouped cross-validation leaves out.")]
        = "model_name",
) -> int:
    """Fit a calibration profile (GEMM efficiency, collective times) from microbenchmarks,
    or, with --runs, the analytic model's free parameters from measured runs."""
    from rich.console import Console

    console = Console(stderr=True)
    if runs:
        if tables:
            raise ConfigError("give microbenchmark tables or --runs, not both")
        return _calibrate_runs(runs, out, profile or None, group_by, console)
    if not tables or not gpu:
        raise ConfigError("calibrating a profile needs microbenchmark TABLES and --gpu "
                         "(or --runs to fit the analytic model's parameters)")
    from surrogate.calibrate import fit_profile
    from surrogate.microbench_table import read_microbench_inputs

    table, summaries = read_microbench_inputs(list(tables))
    for line in summaries:
        console.print(escape(line), highlight=False)
    fitted = fit_profile(table, gpu, name=name or None, notes=tuple(note or ()))
    fitted.save(out)
    measured = sum(c.provenance == "measured" for c in fitted.collectives)
    console.print(escape(
        f"wrote {out}: GEMM dtypes "
        + ", ".join(f"{d} ({c.provenance})" for d, c in fitted.gemm.items())
        + f"; {measured} measured and {len(fitted.collectives) - measured} extrapolated "
          "collective curves"), highlight=False)
    for e in fitted.excluded:
        console.print(escape(f"  not used: {e['rows']} x {e['reason']}"), highlight=False)
    return 0


def _calibrate_runs(sources: list[str], out: Path, profile: str | None, group_by: str,
                    console: Any) -> int:
    import numpy as np
    import pandas as pd

    from surrogate.analytic.params import PARAMETERS
    from surrogate.clusters import playbook_runs
    from surrogate.errors import DataError
    from surrogate.fit_params import fit_runs, held_out_figures, write_sets
    from surrogate.sweeps import read_sweeps

    frames = [playbook_runs() if s == "playbook" else read_sweeps(s) for s in sources]
    table = pd.concat(frames, ignore_index=True)
    with console.status(escape(f"fitting the analytic model's parameters on {len(table)} "
                               f"runs (and once per {group_by} left out)")):
        result = fit_runs(table, profile, group_by=group_by)
    if not result["sets"]:
        raise DataError("no framework version has enough measured runs to fit its parameters")
    write_sets(result, out, source=", ".join(sources))
    from rich.table import Table

    for fv, entry in result["sets"].items():
        table_out = Table(title=escape(f"{fv}: {entry['runs']['time']} runs (time), "
                                       f"{entry['runs']['memory']} (memory)"))
        for col in ("parameter", "value", "unit", "sd", f"sd over {group_by} folds"):
            table_out.add_column(col, overflow="fold")
        for k, v in entry["values"].items():
            sd = entry["sd"].get(k, float("nan"))
            fold = entry.get("fold_sd", {}).get(k, float("nan"))
            table_out.add_row(k, f"{v:.4g}", PARAMETERS[k].unit, f"{sd:.2g}", f"{fold:.2g}")
        console.print(table_out)
    figures = held_out_figures(table, result["held_out"])
    if np.isfinite(figures.get("mfu_mape_ge10", np.nan)):
        console.print(escape(f"held out by {group_by}: " + ", ".join(
            f"{k} {v:.3f}" for k, v in figures.items())), highlight=False)
    console.print(f"wrote {escape(str(out))}", highlight=False)
    return 0

