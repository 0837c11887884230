"""`surrogate propose`: the runs that would teach the surrogate most, with their launch files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from surrogate.cli.app import app
from surrogate.cli.options import (
    ModelDirOpt,
    ModelOptions,
    NetworkOpt,
    ProfileOpt,
    RankOpt,
    SpaceOptions,
    WideOpt,
    at_least,
    check_profile,
    with_options,
)
from surrogate.errors import ConfigError

_ROUND = "Round"


def _opt(help: str, *names: str, metavar: str | None = None) -> Any:
    return typer.Option(*names, help=help, metavar=metavar, rich_help_panel=_ROUND)


@app.command("propose")
@with_options
def propose_cmd(
    round_dir: Annotated[Path, _opt(
        "New round directory to write (refused if it exists).", "--round", metavar="DIR")],
    model: ModelOptions,
    space_options: SpaceOptions,
    k: Annotated[int, _opt("Runs to propose.", "--k", metavar="N")] = 16,
    max_p_oom: Annotated[float, _opt(
        "Drop candidates above this OOM risk (1: keep all).", metavar="X")] = 1.0,
    runs: Annotated[Path | None, _opt(
        "Your sweep table so far (not proposed again; its best MFU is the incumbent).",
        metavar="TABLE")] = None,
    boundary_frac: Annotated[float, _opt(
        "Share of runs near the OOM boundary.", metavar="X")] = 0.25,
    model_dir: ModelDirOpt = None,
    round_number: Annotated[int | None, _opt(
        "Round number (default: next after the sibling rounds).", metavar="N")] = None,
    steps: Annotated[int, _opt("Training steps per proposed run.", metavar="N")] = 50,
    wide: WideOpt = False,
    rank: RankOpt = "mean",
    profile: ProfileOpt = None,
    network: NetworkOpt = None,
) -> None:
    """Propose the k runs that would teach the surrogate most; write launch files and
    round.json."""
    at_least(1, round_number=round_number, k=k, steps=steps)  # before any scoring
    from surrogate.loop.acquisition import Acquisition
    from surrogate.loop.active import check_new_round_dir, propose

    if not 0 <= boundary_frac <= 1:
        raise ConfigError(f"--boundary-frac must be in [0, 1], got {boundary_frac}")
    acquisition = Acquisition(boundary_frac=boundary_frac)
    check_new_round_dir(round_dir)
    check_profile(profile)
    if runs is not None:
        from surrogate.io.table_files import check_table_file

        check_table_file(runs, flag="--runs")
    m = model.config()
    space = space_options.space(m)
    from surrogate.cli.network import under_network

    _, assumed, network_line = under_network(network, profile, space.gpu, space.node_counts,
                                             space.gpus_per_node)
    table = None
    if runs is not None:
        from surrogate.io.tableio import read_table

        table = read_table(runs)
    from surrogate.progress import bars

    with bars() as report:
        out = propose(space, round_dir, k=k, model=model_dir or "default",
                      limits=space_options.limits(max_p_oom), acquisition=acquisition,
                      runs=table, round_number=round_number, steps=steps, progress=report,
                      rank=rank, profile=profile,  # type: ignore[arg-type]
                      network_scale=assumed.get("scale"))
    _print_proposals(out, space, model, m, model_dir=model_dir, wide=wide, profile=profile)
    typer.echo(network_line)
    import shlex

    logs, where = shlex.quote(f"{out}/logs"), shlex.quote(str(out))  # a path with spaces
    typer.echo(f"wrote {out}/proposals.csv, round.json and launch files under {out}/logs; run "
               f"them, then `surrogate ingest {logs}` and `surrogate score-round --round "
               f"{where} --runs TABLE` before `surrogate train`")


def _print_proposals(out: Path, space: Any, model: ModelOptions, m: Any, *,
                     model_dir: Path | None, wide: bool, profile: Any) -> None:
    """The proposed runs' table, and whether any extrapolates or gives way."""
    import pandas as pd
    from rich.markup import escape

    from surrogate.cli.display import console as make_console
    from surrogate.cli.display import (
        is_full,
        is_narrow,
        layout_table,
        model_line,
        print_correction_lines,
        seq_len_note,
    )
    from surrogate.loop.active import PROPOSALS_FILE

    console = make_console(wide=wide)
    if note := seq_len_note(model.hf_config, model.seq_len, m):
        console.print(f"[yellow]{escape(note)}[/]", highlight=False)
    picked = pd.read_csv(out / PROPOSALS_FILE, keep_default_na=False, na_values=[""])
    console.print(escape(model_line(model_dir or "default", space.gpu, model_dir, profile)),
                  highlight=False)
    console.print(layout_table(f"{out.name}: {len(picked)} proposed runs", picked,
                               narrow=is_narrow(console, wide), full=is_full(console, wide),
                               reasons=True, frameworks=len(space.frameworks) > 1))
    print_correction_lines(console, picked)
