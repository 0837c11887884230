"""`surrogate heatmap`: the Playbook's "best configuration by model size and nodes" figure,
drawn from the surrogate's searches (its defaults are the Playbook's: nanotron, no
recomputation, no context or virtual pipeline parallelism)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from surrogate.cli.app import app
from surrogate.cli.options import (
    AnalyticOpt,
    ModelDirOpt,
    ProfileOpt,
    check_profile,
    ints,
    names,
    parse_nodes,
)
from surrogate.config.presets import get_preset
from surrogate.errors import ConfigError


def _opt(help: str, *names: str, metavar: str | None = None) -> Any:
    return typer.Option(*names, help=help, metavar=metavar)


PLAYBOOK_MODELS = "1.34b,3.57b,8.86b,80b,469b"
"""The Playbook's model sizes, the heatmap's rows by default."""


@app.command("heatmap")
def heatmap_cmd(
    out: Annotated[
        Path, _opt("Output path without suffix: writes OUT.png and OUT.html.", metavar="OUT")
    ],
    models: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Model presets, comma-separated (one row each).",
            metavar="LIST",
            show_default=PLAYBOOK_MODELS,
        ),
    ] = None,
    models_alias: Annotated[
        str | None, typer.Option("--models", hidden=True, help="--model's former name.")
    ] = None,
    nodes: Annotated[
        str, _opt("Node counts (list or range).", metavar="LIST")
    ] = "1,2,4,8,16,32,64",
    global_batch_seqs: Annotated[
        int, _opt("Global batch (sequences); the Playbook used 256 x 4096 tokens.", metavar="N")
    ] = 256,
    gpu: Annotated[
        str, _opt("GPU, e.g. H100-SXM-80GB, A100-40GB, B200.", metavar="NAME")
    ] = "H100-SXM-80GB",
    gpus_per_node: Annotated[int, _opt("GPUs per node.", metavar="N")] = 8,
    framework: Annotated[
        str, _opt("Allowed frameworks, comma-separated (the Playbook's: nanotron).", metavar="LIST")
    ] = "nanotron",
    zero: Annotated[str | None, _opt("Allowed ZeRO stages, e.g. 0,1.", metavar="LIST")] = None,
    recompute: Annotated[
        str, _opt("Allowed recompute modes (Playbook: none).", metavar="LIST")
    ] = "none",
    max_cp: Annotated[int, _opt("Largest cp (Playbook: 1).", metavar="N")] = 1,
    max_vpp: Annotated[int, _opt("Largest vpp (Playbook: 1).", metavar="N")] = 1,
    max_p_oom: Annotated[
        float, _opt("Largest acceptable predicted OOM probability.", metavar="X")
    ] = 0.2,
    measured: Annotated[
        Path | None,
        _opt("Sweep table (or the Playbook CSV) for the measured figure beside.", metavar="TABLE"),
    ] = None,
    model_dir: ModelDirOpt = None,
    analytic: AnalyticOpt = False,
    profile: ProfileOpt = None,
) -> None:
    """Draw the Playbook's "best configuration by model size and nodes" from the surrogate."""
    from surrogate.layouts.heatmap import predicted_grid
    from surrogate.layouts.search import Limits
    from surrogate.progress import bars

    if models is not None and models_alias is not None:
        raise ConfigError("give --model (--models is its former name), not both")
    models = models or models_alias or PLAYBOOK_MODELS
    _check_files(out, measured)
    check_profile(profile)
    presets = list(
        {
            p.name: p
            for p in (
                get_preset(name)  # a preset named twice: once
                for name in names(models, "--models")
            )
        }.values()
    )
    options = _space_options(
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        framework=framework,
        zero=zero,
        recompute=recompute,
        max_cp=max_cp,
        max_vpp=max_vpp,
    )
    learned = None if analytic else (model_dir or "default")
    with bars() as report:
        grid = predicted_grid(
            presets,
            parse_nodes(nodes),
            global_batch_seqs=global_batch_seqs,
            space_options=options,
            model=learned,
            limits=Limits(max_p_oom=max_p_oom),
            progress=report,
            profile=profile,
        )
    grids = {"predicted (surrogate search)": grid}
    if measured is not None:
        grids["measured"] = _measured(measured, presets)
    png, page = _draw(grids, out)
    from surrogate.cli.display import model_line

    typer.echo(model_line(learned, gpu, model_dir, profile))
    typer.echo(f"wrote {png} and {page}")


def _space_options(
    *,
    gpu: str,
    gpus_per_node: int,
    framework: str,
    zero: str | None,
    recompute: str,
    max_cp: int,
    max_vpp: int,
) -> dict[str, Any]:
    """The options of each cell's layout space, its lists parsed."""
    return {
        "gpu": gpu,
        "gpus_per_node": gpus_per_node,
        "frameworks": names(framework, "--framework"),
        "zero_stages": ints(zero, "--zero"),
        "recompute_modes": names(recompute, "--recompute"),
        "max_cp": max_cp,
        "max_vpp": max_vpp,
    }


def _draw(grids: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """The figures drawn: OUT.png and OUT.html, their paths."""
    from surrogate.layouts.heatmap import draw_png, write_html

    out.parent.mkdir(parents=True, exist_ok=True)
    png = draw_png(grids, out.with_suffix(".png"))
    page = write_html(
        grids,
        out.with_suffix(".html"),
        title="Best configuration by model size and number of nodes",
    )
    return png, page


def _check_files(out: Path, measured: Path | None) -> None:
    """The outputs writable and the measured table readable, before minutes of searching."""
    from surrogate.io.outputs import check_output_file

    for suffix in (".png", ".html"):
        check_output_file(out.with_suffix(suffix), flag="--out")
    if measured is not None:
        from surrogate.io.table_files import check_table_file

        check_table_file(measured, flag="--measured")


def _measured(measured: Path, presets: list[Any]) -> Any:
    """The measured grid of a sweep table or the Playbook CSV, its models named as
    ``presets``."""
    from surrogate.ingest.playbook import REQUIRED_COLUMNS, parse_playbook
    from surrogate.io.tableio import read_table
    from surrogate.layouts.heatmap import measured_grid
    from surrogate.runs.sweeps import unflagged

    table = unflagged(read_table(measured))  # a flagged run's layout cannot be drawn
    if (
        all(c in table.columns for c in REQUIRED_COLUMNS[:3])
        and "status" in table.columns
        and "num_nodes" not in table.columns
    ):
        table, _ = parse_playbook(measured)
    meas = measured_grid(table)
    names = {get_preset(mm).name: mm for mm in meas["model"].unique() if _is_preset(mm)}
    meas["model"] = [
        next((p.name for p in presets if names.get(p.name) == mm), mm) for mm in meas["model"]
    ]
    return meas


def _is_preset(name: str) -> bool:
    try:
        get_preset(name)
    except ConfigError:
        return False
    return True
