"""`surrogate search`: the best layouts for a model, a cluster and a global batch."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from surrogate.cli.app import app
from surrogate.cli.options import (
    OUTPUT,
    AnalyticOpt,
    JsonOpt,
    ModelDirOpt,
    ModelOptions,
    NetworkOpt,
    ProfileOpt,
    RankOpt,
    SpaceOptions,
    WideOpt,
    at_least,
    check_profile,
    parse_nodes,
    with_options,
)
from surrogate.errors import ConfigError, DataError
from surrogate.hardware.perf_models import resolve_perf_model

if TYPE_CHECKING:
    from surrogate.layouts.search import Objective, RankBy

__all__ = ["parse_nodes", "search_cmd"]

OBJECTIVES = ("mfu", "mfu-vs-oom", "mfu-vs-gpus")

_STUDY = "optuna study"


@dataclass(frozen=True)
class StudyOptions:
    """How optuna searches, and how many layouts are kept."""

    objective: Annotated[
        str,
        typer.Option(
            help="mfu (TPE), mfu-vs-oom or mfu-vs-gpus (NSGA-II).",
            metavar="NAME",
            rich_help_panel=_STUDY,
        ),
    ] = "mfu"
    trials: Annotated[
        int,
        typer.Option(
            help="optuna trials, where optuna searches: a space of more than 10,000,000 points, "
            "or a study in --storage (a smaller space is scored whole, without optuna).",
            metavar="N",
            rich_help_panel=_STUDY,
        ),
    ] = 200
    storage: Annotated[
        str | None,
        typer.Option(
            help="optuna storage URL, e.g. sqlite:///study.db: optuna searches, in a study that "
            "parallel workers share.",
            metavar="URL",
            rich_help_panel=_STUDY,
        ),
    ] = None
    study_name: Annotated[
        str | None,
        typer.Option(
            help="Study name (resumed if it exists in --storage).",
            metavar="NAME",
            rich_help_panel=_STUDY,
        ),
    ] = None
    seed: Annotated[
        int, typer.Option(help="Seed of optuna's sampler.", metavar="N", rich_help_panel=_STUDY)
    ] = 0
    top_k: Annotated[
        int,
        typer.Option(
            "--top-k",
            "-k",
            help="Layouts to show (and write with --launch-dir), at most 1,000 "
            "(each gets its odds of being the best of them, a cost that grows faster than the "
            "square of their count).",
            metavar="N",
            rich_help_panel=_STUDY,
        ),
    ] = 5

    def check(self) -> None:
        """ConfigError for a value no search takes; the storage reachable, before any work."""
        if self.objective not in OBJECTIVES:
            raise ConfigError(
                f"--objective must be mfu, mfu-vs-oom or mfu-vs-gpus, got {self.objective!r}"
            )
        at_least(0, trials=self.trials)
        at_least(1, top_k=self.top_k)
        from surrogate.layouts.search import check_top_k

        check_top_k(self.top_k, "--top-k")
        if self.storage is not None:  # before the space is built and scored, not after
            from surrogate.extras import require
            from surrogate.io.stores import check_storage

            require(
                "optuna",
                purpose="search --storage (a study of optuna's trials; without "
                "--storage a space that can be enumerated is scored "
                "whole, without optuna)",
            )
            check_storage(self.storage)
            if self.trials < 1:
                raise ConfigError(
                    f"--storage holds a study of optuna's trials: --trials must "
                    f"be >= 1, got {self.trials}"
                )


@app.command("search")
@with_options
def search_cmd(
    model: ModelOptions,
    space_options: SpaceOptions,
    study: StudyOptions,
    max_p_oom: Annotated[
        float,
        typer.Option(
            help="Largest acceptable predicted OOM probability.",
            metavar="X",
            rich_help_panel=_STUDY,
        ),
    ] = 0.2,
    model_dir: ModelDirOpt = None,
    analytic: AnalyticOpt = False,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    launch_dir: Annotated[
        Path | None,
        typer.Option(
            help="Write torchtitan TOML + torchrun + sbatch per top layout here.",
            metavar="DIR",
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    rank: RankOpt = "mean",
    profile: ProfileOpt = None,
    network: NetworkOpt = None,
) -> None:
    """Find the best layouts for a model, cluster and global batch (and what the rules of
    thumb pick)."""
    from surrogate.layouts.rules import CITATION, rules_pick
    from surrogate.layouts.search import score_configs, scored_to_records

    study.check()
    check_profile(profile)
    if launch_dir is not None:
        from surrogate.io.outputs import check_writable_dir

        check_writable_dir(launch_dir, flag="--launch-dir")
    m = model.config()
    space = space_options.space(m)
    limits = space_options.limits(max_p_oom)
    from surrogate.cli.network import under_network

    profile, assumed, network_line = under_network(
        network, profile, space.gpu, space.node_counts, space.gpus_per_node
    )
    learned: Any = None if analytic else (model_dir or "default")
    result = _run_search(
        space, learned, limits, study, rank=rank, progress=not as_json, profile=profile
    )
    rules_row = score_configs([rules_pick(space)], model=learned, limits=limits, profile=profile)
    from surrogate.cli.display import seq_len_note

    notes = [n for n in (seq_len_note(model.hf_config, model.seq_len, m), *result.notes) if n]
    written = [] if launch_dir is None else _write_launch(result, launch_dir)
    if as_json:
        summary = _summary(m, space, result, notes, written)
        summary["space"]["hardware_speed"] = resolve_perf_model(space.gpu, profile).name
        summary["space"]["network"] = assumed
        summary["rules_of_thumb"] = {"source": CITATION, **scored_to_records(rules_row)[0]}
        typer.echo(json.dumps(summary, indent=2, default=str))
        return
    _print_search(
        m,
        space,
        result,
        rules_row,
        learned=learned,
        model_dir=model_dir,
        objective=study.objective,
        notes=notes,
        written=written,
        wide=wide,
        profile=profile,
        network=network_line,
    )


def _run_search(
    space: Any,
    learned: Any,
    limits: Any,
    study: StudyOptions,
    *,
    rank: str,
    progress: bool,
    profile: Any,
) -> Any:
    """:func:`surrogate.layouts.search.search` with progress bars; a failing storage's error in a
    line."""
    from surrogate.layouts.search import search
    from surrogate.progress import bars

    try:
        with bars(progress) as report:
            return search(
                space,
                model=learned,
                limits=limits,
                profile=profile,
                objective=cast("Objective", study.objective),  # checked: check()
                n_trials=study.trials,
                top_k=study.top_k,
                storage=study.storage,
                study_name=study.study_name,
                seed=study.seed,
                progress=report,
                rank=cast("RankBy", rank),
            )  # search checks it, saying which
    except Exception as e:
        if not _is_storage_error(e):
            raise
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"the optuna storage {study.storage!r} failed: {message}") from e


def _is_storage_error(error: Exception) -> bool:
    """Whether ``error`` is SQLAlchemy's (the database of --storage: unreachable, refused,
    locked). SQLAlchemy comes with optuna, an extra: a search without it raised no such error,
    so it is not imported here (``sys.modules`` holds it once optuna has run)."""
    import sys

    exc = sys.modules.get("sqlalchemy.exc")
    return exc is not None and isinstance(error, exc.SQLAlchemyError)


def _write_launch(result: Any, launch_dir: Path) -> list[str]:
    """Launch files of each top layout torchtitan runs; a line per layout. If a write fails
    (a full disk), the directories this call created are removed: a rerun finds no half-written
    launch directory in its way."""
    import shutil
    from contextlib import suppress

    from surrogate.loop.launch import launch_problem, write_launch_files

    written = []
    created = [] if launch_dir.exists() else [launch_dir]
    try:
        for i, key in enumerate(result.top["key"], start=1):
            cfg = result.configs[key]
            problem = launch_problem(cfg)
            if problem:
                written.append(f"#{i}: not written ({problem})")
                continue
            name = f"top{i:02d}-" + str(result.top["layout"].iloc[i - 1]).replace(" ", "_")
            if not (launch_dir / name).exists():
                created.append(launch_dir / name)
            files = write_launch_files(cfg, launch_dir / name, run_name=name)
            written.append(f"#{i}: {files.directory}")
    except BaseException:
        for d in reversed(created):
            with suppress(OSError):
                shutil.rmtree(d)
        raise
    return written


def _summary(
    m: Any, space: Any, result: Any, notes: list[str], written: list[str]
) -> dict[str, Any]:
    """The search's JSON (the rules of thumb's pick is added by the command)."""
    from surrogate.layouts.search import scored_to_records

    return {
        "space": {
            "model": m.name,
            "seq_len": m.seq_len,
            "global_batch_seqs": space.global_batch_seqs,
            "node_counts": list(space.node_counts),
            "points": space.size_bound(),
            "enumerated_valid": result.enumerated,
        },
        "optuna": None
        if result.method == "enumerate"
        else {
            "trials": result.n_trials,
            "invalid": result.n_invalid,
            "infeasible": result.n_infeasible,
            "study": result.study_name,
        },
        "top": scored_to_records(result.top),
        "pareto": None if result.pareto is None else scored_to_records(result.pareto),
        "rules_of_thumb": None,
        "launch": written,
        "notes": notes,
    }


def _print_search(
    m: Any,
    space: Any,
    result: Any,
    rules_row: Any,
    *,
    learned: Any,
    model_dir: Path | None,
    objective: str,
    notes: list[str],
    written: list[str],
    wide: bool,
    profile: Any,
    network: str,
) -> None:
    """The search's tables: the best layouts, the Pareto front, the rules of thumb's pick."""
    from rich.markup import escape

    from surrogate.cli.display import (
        best_set_line,
        is_full,
        is_narrow,
        layout_table,
        model_line,
        print_correction_lines,
    )
    from surrogate.cli.display import console as make_console
    from surrogate.config.framework_defaults import space_defaults_line

    console = make_console(wide=wide)
    narrow, full = is_narrow(console, wide), is_full(console, wide)
    scored = (
        f", {result.enumerated:,} valid layouts scored"
        if result.enumerated is not None
        else ", searched by optuna"
    )
    console.print(
        f"[bold]{escape(m.name)}[/] on {','.join(map(str, space.node_counts))} x "
        f"{space.gpus_per_node} {space.gpu}, global batch {space.global_batch_seqs} "
        f"seqs x {m.seq_len} tokens; {space.size_bound():,} points{scored}"
    )
    if result.method == "optuna":
        console.print(
            f"optuna: {result.n_trials} trials ({result.n_invalid} invalid, "
            f"{result.n_infeasible} over the limits)"
        )
    console.print(escape(model_line(learned, space.gpu, model_dir, profile)), highlight=False)
    for framework in space.frameworks:
        line = space_defaults_line(framework)
        if line:
            console.print(escape(line), highlight=False)
    console.print(escape(network), highlight=False)
    for note in notes:
        console.print(f"[yellow]{escape(note)}[/]")
    kw = {"narrow": narrow, "full": full, "frameworks": len(space.frameworks) > 1}
    console.print(layout_table("Best predicted layouts", result.top, **kw))
    if odds := best_set_line(result.top):
        console.print(escape(odds), highlight=False)
    if learned is not None:
        print_correction_lines(console, result.top)
    if result.pareto is not None:
        console.print(layout_table(f"Pareto front ({objective})", result.pareto, **kw))
    console.print(layout_table("Rules of thumb pick (Playbook)", rules_row, **kw))
    if narrow:
        console.print("(tokens/s/GPU and step time: --wide or --json)", highlight=False)
    for line in written:
        console.print(escape(line))
