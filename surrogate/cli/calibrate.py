"""`surrogate calibrate`: fit a calibration profile from microbenchmark tables, or the
analytic model's free parameters from measured runs.

The microbenchmarks themselves are the ``microbench`` program's (``surrogate microbench``, a
plugin command); fitting their output is the library's (``surrogate.calibration.calibrate``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from surrogate.analytic.params import PARAMETERS
from surrogate.cli.app import app
from surrogate.errors import ConfigError, DataError


@app.command("calibrate")
def calibrate_cmd(
    out: Annotated[
        Path,
        typer.Option(
            metavar="FILE",
            help="Profile JSON to write (or, with --runs, the fitted parameters' JSON).",
        ),
    ],
    tables: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Microbenchmark tables (.parquet/.csv) or raw outputs (.jsonl, .txtpb, .log).",
            show_default=False,
        ),
    ] = None,
    gpu: Annotated[
        str, typer.Option(metavar="NAME", help="GPU of the profile (hardware table key or alias).")
    ] = "",
    name: Annotated[str, typer.Option(metavar="NAME", help="Profile name shown by predict.")] = "",
    note: Annotated[
        list[str] | None,
        typer.Option(
            help="A note stored in the profile (repeatable), e.g. how the data was taken."
        ),
    ] = None,
    runs: Annotated[
        list[str] | None,
        typer.Option(
            metavar="TABLE",
            help="Fit the analytic model's free parameters instead, per framework version, on "
            "these sweep tables or run records, e.g. microbench.train_step's .jsonl "
            "('playbook': the Playbook's runs). Repeatable.",
        ),
    ] = None,
    profile: Annotated[
        str,
        typer.Option(
            metavar="FILE",
            help="With --runs: calibration profile of the runs' cluster (default: each run's "
            "own where known, else its GPU's default).",
        ),
    ] = "",
    group_by: Annotated[
        str,
        typer.Option(
            metavar="COLUMN",
            help="With --runs: the column whose groups grouped cross-validation leaves out.",
        ),
    ] = "model_name",
    fit_on: Annotated[
        str,
        typer.Option(
            metavar="WHICH",
            help="With --runs: fit time parameters on 'all' completed runs or "
            "on the 'healthy' ones (measured MFU >= 10%).",
        ),
    ] = "all",
) -> int:
    """Fit a calibration profile (GEMM efficiency, collective times) from microbenchmarks,
    or, with --runs, the analytic model's free parameters from measured runs."""
    from rich.console import Console

    console = Console(stderr=True)
    if runs:
        _check_runs(runs, tables, fit_on)
        return _calibrate_runs(runs, out, profile or None, group_by, fit_on, console)
    if not tables or not gpu:
        raise ConfigError(
            "calibrating a profile needs microbenchmark TABLES and --gpu "
            "(or --runs to fit the analytic model's parameters)"
        )
    from surrogate.calibration.calibrate import fit_profile
    from surrogate.ingest.microbench_inputs import read_microbench_inputs

    table, summaries = read_microbench_inputs(list(tables))
    for line in summaries:
        console.print(escape(line), highlight=False)
    fitted = fit_profile(table, gpu, name=name or None, notes=tuple(note or ()))
    fitted.save(out)
    measured = sum(c.provenance == "measured" for c in fitted.collectives)
    console.print(
        escape(
            f"wrote {out}: GEMM dtypes "
            + ", ".join(f"{d} ({c.provenance})" for d, c in fitted.gemm.items())
            + f"; {measured} measured and {len(fitted.collectives) - measured} extrapolated "
            "collective curves; attention "
            + (
                f"measured ({fitted.attention.points} points)"
                if fitted.attention is not None
                else "not measured (the GEMM proxy)"
            )
        ),
        highlight=False,
    )
    for e in fitted.excluded:
        console.print(escape(f"  not used: {e['rows']} x {e['reason']}"), highlight=False)
    return 0


def _check_runs(runs: list[str], tables: list[Path] | None, fit_on: str) -> None:
    """ConfigError for an unreadable --runs file (every one, before anything is read or
    imported), tables beside --runs, or an unknown --fit-on."""
    from surrogate.io.table_files import check_table_file

    for source in runs:
        if source != "playbook":
            check_table_file(source, flag="--runs")
    if tables:
        raise ConfigError("give microbenchmark tables or --runs, not both")
    if fit_on not in ("all", "healthy"):
        raise ConfigError(f"--fit-on must be 'all' or 'healthy', got {fit_on!r}")


def _calibrate_runs(
    sources: list[str], out: Path, profile: str | None, group_by: str, fit_on: Any, console: Any
) -> int:
    import numpy as np
    import pandas as pd

    from surrogate.calibration.fit_params import fit_runs, held_out_figures, write_sets
    from surrogate.ingest.dispatch import read_runs
    from surrogate.ingest.playbook_network import playbook_runs

    frames = [playbook_runs() if s == "playbook" else read_runs(s) for s in sources]
    table = pd.concat(frames, ignore_index=True)
    with console.status(
        escape(
            f"fitting the analytic model's parameters on {len(table)} "
            f"runs (and once per {group_by} left out)"
        )
    ):
        result = fit_runs(table, profile, group_by=group_by, fit_on=fit_on)
    if not result["sets"]:
        raise DataError("no framework version has enough measured runs to fit its parameters")
    write_sets(result, out, source=", ".join(sources))
    from rich.table import Table

    for fv, entry in result["sets"].items():
        table_out = Table(
            title=escape(
                f"{fv}: {entry['runs']['time']} runs (time), {entry['runs']['memory']} (memory)"
            )
        )
        for col in ("parameter", "value", "unit", "sd", f"sd over {group_by} folds"):
            table_out.add_column(col, overflow="fold")
        for k, v in entry["values"].items():
            sd = entry["sd"].get(k, float("nan"))
            fold = entry.get("fold_sd", {}).get(k, float("nan"))
            table_out.add_row(k, f"{v:.4g}", PARAMETERS[k].unit, f"{sd:.2g}", f"{fold:.2g}")
        console.print(table_out)
    figures = held_out_figures(table, result["held_out"])
    if np.isfinite(figures.get("mfu_mape_ge10", np.nan)):
        console.print(
            escape(
                f"held out by {group_by}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items())
            ),
            highlight=False,
        )
    console.print(f"wrote {escape(str(out))}", highlight=False)
    return 0
