"""`surrogate ingest`, `surrogate data fetch`, `surrogate data summary` (datasets issue).

Thin: parse options, call :mod:`surrogate.ingest.dispatch` / :mod:`surrogate.io.datasource` /
:mod:`surrogate.runs.sweeps`, print. pandas and the parsers are imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from surrogate.cli.app import app, data_app
from surrogate.errors import DataError


@app.command("ingest")
def ingest_cmd(
    paths: Annotated[list[Path], typer.Argument(help="Log or table files, or directories.")],
    into: Annotated[Path, typer.Option("--into", help="Table to append to (.parquet or .csv).")],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="Force a format: playbook, nanotron, torchtitan, "
            "megatron, llm-foundry, nccl-tests, xla, microbench-jsonl, train-step-jsonl, "
            "published (a Megatron-Bridge performance table).",
        ),
    ] = None,
    set_values: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="KEY=VALUE for what a log lacks (a configuration column, "
            "model=PRESET, source, hardware, date; profile, peak_mem_stage, net_scale: "
            "how training explains the runs). Repeatable.",
        ),
    ] = None,
    network: Annotated[
        bool,
        typer.Option(
            "--network",
            help="Read a Playbook table's per-run network measurements "
            "(all-reduce, all-gather, reduce-scatter bandwidths) into a microbenchmark "
            "table instead of its runs into a sweep table.",
        ),
    ] = False,
) -> int:
    """Parse training logs, sweep tables or microbenchmark output into a table."""
    from surrogate.ingest.dispatch import ingest
    from surrogate.ingest.runconfig import parse_assignments

    given = parse_assignments(set_values or [])
    result = ingest(paths, into, fmt=fmt, given=given, network=network)
    typer.echo(result.report.summary())
    typer.echo(result.append_summary)
    return 0


@data_app.command("fetch")
def fetch_cmd(
    dest: Annotated[
        Path | None,
        typer.Option("--dest", help="Directory to fetch into (default: the user cache)."),
    ] = None,
    sources: Annotated[
        Path | None,
        typer.Option(
            "--sources",
            help="Sources TOML (default: the list shipped with surrogate, "
            "surrogate/data/sources.toml).",
        ),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Fetch only the named sources. Repeatable."),
    ] = None,
) -> int:
    """Download the public data files, verifying each sha256."""
    from surrogate.io.datasource import SOURCES_TOML, cache_dir, fetch, load_sources

    entries = load_sources(sources or SOURCES_TOML)
    if only:
        names = {s.name for s in entries}
        unknown = [n for n in only if n not in names]
        if unknown:
            raise DataError(
                f"--only must name sources of the TOML ({', '.join(sorted(names))}), "
                f"got {', '.join(unknown)}"
            )
        entries = [s for s in entries if s.name in only]
    target = dest or cache_dir()
    fetch(
        entries,
        target,
        on_result=lambda r: typer.echo(f"{r.action:>10}  {r.name}  {r.size_bytes} bytes  {r.path}"),
    )
    return 0


@data_app.command("summary")
def summary_cmd(
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help="Public data directory (default: SURROGATE_DATA_DIR, "
            "../shared/data, or the user cache).",
        ),
    ] = None,
    sweeps: Annotated[
        Path | None,
        typer.Option(
            "--sweeps",
            help="A sweep table to summarise instead of the Playbook file of the data directory.",
        ),
    ] = None,
    microbench: Annotated[
        Path | None,
        typer.Option("--microbench", help="A microbenchmark table to summarise."),
    ] = None,
) -> int:
    """What data is available: runs by source, model, nodes and status; microbenchmark
    coverage by op and size."""
    from surrogate.io.datasource import data_dir as resolve_data_dir
    from surrogate.io.datasource import load_sources
    from surrogate.runs.sweep_files import read_sweeps
    from surrogate.runs.sweeps import sweep_summary

    if sweeps is not None:
        df = read_sweeps(sweeps, flagged=True)  # a summary counts every run it holds
        from surrogate.runs.sweeps import flagged_mask

        flagged = int(flagged_mask(df).sum())
        typer.echo(
            f"sweep table {sweeps}: {len(df)} runs"
            + (
                f", {flagged} flagged (a layout the configuration validator rejects: kept as data, "
                "left out of training and calibration)"
                if flagged
                else ""
            )
        )
    else:
        from surrogate.ingest.playbook import parse_playbook

        root = resolve_data_dir(data_dir)
        typer.echo(f"data directory: {root}")
        for s in load_sources():
            mark = "present" if (root / s.path).exists() else "missing"
            typer.echo(f"  {mark:>8}  {s.name}  {s.path}")
        playbook = root / load_sources()[0].path
        if not playbook.exists():
            typer.echo("no sweep data: run `surrogate data fetch` or give --sweeps")
            df = None
        else:
            df, report = parse_playbook(playbook)
            typer.echo(report.summary(max_lines=0))
    if df is not None:
        typer.echo(sweep_summary(df).to_string(index=False))
    if microbench is not None:
        typer.echo(_microbench_coverage(microbench))
    return 0


def _microbench_coverage(path: Path) -> str:
    """Rows per op with the size range, from whatever size column the table has."""
    from surrogate.io.tableio import read_table

    df = read_table(path)
    if "op" not in df.columns:
        raise DataError(f"{path}: a microbenchmark table needs an 'op' column")
    size_cols = [c for c in df.columns if c.endswith("_bytes") or c in ("size", "m", "n", "k")]
    agg = df.groupby("op").size().rename("rows").to_frame()
    for c in size_cols:
        agg[f"{c} min"] = df.groupby("op")[c].min()
        agg[f"{c} max"] = df.groupby("op")[c].max()
    summary = agg.reset_index().to_string(index=False)
    return f"microbenchmark table {path}: {len(df)} rows\n{summary}"
