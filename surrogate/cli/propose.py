"""`surrogate propose`: the runs that would teach the surrogate most, with their launch files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

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

if TYPE_CHECKING:
    from surrogate.layouts.search import RankBy

_ROUND = "Round"


def _opt(help: str, *names: str, metavar: str | None = None) -> Any:
    return typer.Option(*names, help=help, metavar=metavar, rich_help_panel=_ROUND)


@app.command("propose")
@with_options
def propose_cmd(
    round_dir: Annotated[
        Path, _opt("New round directory to write (refused if it exists).", "--round", metavar="DIR")
    ],
    model: ModelOptions,
    space_options: SpaceOptions,
    k: Annotated[
        int,
        _opt(
            "Runs to propose, at most 1,000 (the picking's cost grows faster "
            "than the square of k).",
            "--k",
            metavar="N",
        ),
    ] = 16,
    max_p_oom: Annotated[
        float, _opt("Drop candidates above this OOM risk (1: keep all).", metavar="X")
    ] = 1.0,
    runs: Annotated[
        Path | None,
        _opt(
            "Your sweep table of measured runs so far (what `surrogate ingest` writes; its layouts "
            "are not proposed again, its best MFU is the incumbent).",
            metavar="TABLE",
        ),
    ] = None,
    boundary_frac: Annotated[
        float, _opt("Share of runs near the OOM boundary.", metavar="X")
    ] = 0.25,
    gain: Annotated[
        str,
        _opt(
            "How the other runs are valued: probability-best (the odds of being the best, where "
            "the model cannot tell layouts apart) or expected-improvement.",
            metavar="NAME",
        ),
    ] = "probability-best",
    model_dir: ModelDirOpt = None,
    round_number: Annotated[
        int | None, _opt("Round number (default: next after the sibling rounds).", metavar="N")
    ] = None,
    steps: Annotated[
        int,
        _opt(
            "Training steps per proposed run (its config.toml's [training] steps; the round's "
            "cost counts them).",
            metavar="N",
        ),
    ] = 50,
    budget_gpu_hours: Annotated[
        float | None,
        _opt(
            "Most GPU-hours the round may cost at its predicted step times (GPUs x steps x step "
            "time); a pick that would exceed what is left is passed over for the next best.",
            metavar="H",
        ),
    ] = None,
    wide: WideOpt = False,
    rank: RankOpt = "mean",
    profile: ProfileOpt = None,
    network: NetworkOpt = None,
) -> None:
    """Propose the k runs that would teach the surrogate most; write launch files and
    round.json."""
    acquisition = _checked(
        round_dir,
        k=k,
        steps=steps,
        round_number=round_number,
        boundary_frac=boundary_frac,
        budget_gpu_hours=budget_gpu_hours,
        profile=profile,
        gain=gain,
    )
    table = None if runs is None else _measured_runs(runs)  # before the space is scored
    m = model.config()
    space = space_options.space(m)
    from surrogate.cli.network import under_network

    _, assumed, network_line = under_network(
        network, profile, space.gpu, space.node_counts, space.gpus_per_node
    )
    from surrogate.loop.active import propose
    from surrogate.progress import bars

    with bars() as report:
        out = propose(
            space,
            round_dir,
            k=k,
            model=model_dir or "default",
            limits=space_options.limits(max_p_oom),
            acquisition=acquisition,
            runs=table,
            round_number=round_number,
            steps=steps,
            progress=report,
            rank=cast("RankBy", rank),  # propose checks it, saying which
            profile=profile,
            budget_gpu_hours=budget_gpu_hours,
            network_scale=assumed.get("scale"),
        )
    _print_proposals(out, space, model, m, model_dir=model_dir, wide=wide, profile=profile)
    typer.echo(network_line)
    _print_cost(out, k, wide=wide)
    _print_next_steps(out)


def _checked(
    round_dir: Path,
    *,
    k: int,
    steps: int,
    round_number: int | None,
    boundary_frac: float,
    budget_gpu_hours: float | None,
    profile: Any,
    gain: str,
) -> Any:
    """The options checked before any scoring; the acquisition they ask for."""
    at_least(1, round_number=round_number, k=k, steps=steps)  # before any scoring
    from surrogate.loop.acquisition import GAINS, Acquisition
    from surrogate.loop.active import check_k
    from surrogate.loop.cost import check_budget
    from surrogate.loop.round_files import check_new_round_dir

    check_k(k, "--k")
    check_budget(budget_gpu_hours, "--budget-gpu-hours")
    if not 0 <= boundary_frac <= 1:
        raise ConfigError(f"--boundary-frac must be in [0, 1], got {boundary_frac}")
    if gain not in GAINS:
        raise ConfigError(f"--gain must be {' or '.join(GAINS)}, got {gain!r}")
    acquisition = Acquisition(boundary_frac=boundary_frac, gain=gain)  # type: ignore[arg-type]
    check_new_round_dir(round_dir)
    check_profile(profile)
    return acquisition


def _print_next_steps(out: Path) -> None:
    """What was written, and what to do with it."""
    import shlex

    logs, where = shlex.quote(f"{out}/logs"), shlex.quote(str(out))  # a path with spaces
    typer.echo(
        f"wrote {out}/proposals.csv, round.json and launch files under {out}/logs; run "
        f"them, then `surrogate ingest {logs}` and `surrogate score-round --round "
        f"{where} --runs TABLE` before `surrogate train`"
    )


def _measured_runs(runs: Path) -> Any:
    """``--runs`` read as a sweep table of measured runs, before the space is scored: a table
    that is no runs costs one line, not a scoring."""
    from surrogate.io.table_files import check_table_file
    from surrogate.loop.measured import read_measured_runs

    check_table_file(runs, flag="--runs")
    return read_measured_runs(runs, flag="--runs")


def _print_proposals(
    out: Path,
    space: Any,
    model: ModelOptions,
    m: Any,
    *,
    model_dir: Path | None,
    wide: bool,
    profile: Any,
) -> None:
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
    from surrogate.loop.round_files import PROPOSALS_FILE

    console = make_console(wide=wide)
    if note := seq_len_note(model.hf_config, model.seq_len, m):
        console.print(f"[yellow]{escape(note)}[/]", highlight=False)
    picked = pd.read_csv(out / PROPOSALS_FILE, keep_default_na=False, na_values=[""])
    console.print(
        escape(model_line(model_dir or "default", space.gpu, model_dir, profile)), highlight=False
    )
    console.print(
        layout_table(
            f"{out.name}: {len(picked)} proposed runs",
            picked,
            narrow=is_narrow(console, wide),
            full=is_full(console, wide),
            reasons=True,
            frameworks=len(space.frameworks) > 1,
        )
    )
    print_correction_lines(console, picked)


def _runs(n: int) -> str:
    return f"{n} run has" if n == 1 else f"{n} runs have"


def _print_cost(out: Path, k: int, *, wide: bool) -> None:
    """What the round costs, as round.json records it (:func:`surrogate.loop.cost.round_cost`),
    and what its budget left out."""
    from surrogate.loop.round_files import read_round

    cost = read_round(out).get("cost") or {}
    if not cost:
        return
    lines = [
        f"cost: {cost['runs']} runs on {cost['gpus']:,} GPUs in all, "
        f"{cost['gpu_hours']:,.1f} GPU-hours at the predicted step times "
        f"({cost['steps_per_run']} steps per run: {cost['steps_from']}; start-up not "
        f"counted); each job.sbatch may hold its GPUs {cost['sbatch_time_limit']}, "
        f"{cost['gpu_hours_at_time_limit']:,.1f} GPU-hours at most"
    ]
    if cost["runs_without_step_time"]:
        lines.append(
            f"  {_runs(cost['runs_without_step_time'])} no predicted step time, not counted"
        )
    if cost["runs_past_time_limit"]:
        lines.append(
            f"  {_runs(cost['runs_past_time_limit'])} a predicted time past the "
            f"time limit {cost['sbatch_time_limit']}: Slurm would stop it (fewer "
            "--steps)"
        )
    other = cost.get("expected_other_failures")
    lines.append(
        f"  expected OOMs: {cost['expected_ooms']:.1f} (the sum of p_oom)"
        + ("" if other is None else f"; other failures: {other:.1f} (the sum of p_fail)")
    )
    if cost["runs"] < k:
        lines.append(
            f"  {cost['runs']} runs proposed of the {k} asked: no other candidate was "
            "left" + (" within the budget" if cost["budget_gpu_hours"] else "")
        )
    budget = cost.get("budget_gpu_hours")
    if budget is not None:
        lines.append(f"  budget: {budget:,.1f} GPU-hours, {budget - cost['gpu_hours']:,.1f} left")
        if cost["left_out_over_budget"]:
            named = ", ".join(
                f"{r['layout']} on {r['num_nodes']} nodes ({r['gpu_hours']:,.1f} GPU-h)"
                for r in cost["left_out"][:3]
            )
            lines.append(
                f"  left out over the budget: {cost['left_out_over_budget']} "
                f"layout(s) the picking preferred, e.g. {named} (round.json lists "
                f"{len(cost['left_out'])})"
            )
    from rich.markup import escape

    from surrogate.cli.display import console as make_console

    console = make_console(wide=wide)
    for line in lines:
        console.print(escape(line), highlight=False)
