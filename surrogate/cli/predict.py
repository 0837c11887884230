"""`surrogate predict`: one configuration from flags or a YAML/JSON file, or a CSV of them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from surrogate.analytic.params import ParameterSets, cluster_key
from surrogate.cli.app import app
from surrogate.cli.lean_imports import import_lightgbm_for_prediction
from surrogate.cli.options import (
    DEFAULT_FRAMEWORK,
    OUTPUT,
    AnalyticOpt,
    JsonOpt,
    LayoutOptions,
    ModelDirOpt,
    ModelOptions,
    NetworkOpt,
    ProfileOpt,
    check_profile,
    with_options,
)
from surrogate.config.files import check_counts, check_table_counts, expand_model_column
from surrogate.config.framework_defaults import defaults_line
from surrogate.config.frameworks import get_framework
from surrogate.config.gpus import GIB
from surrogate.config.presets import model_values, require_model_shape
from surrogate.config.training import coerce_column, config_from_flat
from surrogate.errors import ConfigError
from surrogate.prediction.predict import predict


def _load_config_file(path: Path, given: dict[str, Any]) -> dict[str, Any]:
    """A flat mapping of configuration columns (``model`` may name a preset) from YAML/JSON,
    or a torchtitan job TOML completed by ``given``; unknown or repeated keys are errors
    (:func:`surrogate.ingest.config_file.read_config_file`)."""
    from surrogate.ingest.config_file import read_config_file

    return read_config_file(path, given=given)


def _physics(analytic: bool, model_dir: Path | None) -> ParameterSets | None:
    """``--analytic --model-dir DIR``: the parameters that model was trained under, for the
    analytic model (those its training runs fitted for a framework without shipped ones,
    ``SurrogateModel.parameter_sets``); otherwise None (the default)."""
    if not analytic or model_dir is None:
        return None
    from surrogate.prediction.predict import resolve_model

    model = resolve_model(model_dir)
    return None if model is None else model.parameter_sets()


def build_config(
    preset: str | None, hf_config: Path | None, file_values: dict[str, Any], flags: dict[str, Any]
) -> Any:
    """Merge the default framework < preset < config file < flags into one TrainingConfig."""
    check_counts(flags)
    preset = preset or file_values.pop("model", None)
    seq = flags.get("seq_len")
    file_seq = file_values.get("seq_len")
    if seq is None and file_seq not in (None, "") and file_seq == file_seq:  # not NaN
        seq = coerce_column("seq_len", file_seq)  # as config_from_flat reads the file's
    values: dict[str, Any] = {"framework": DEFAULT_FRAMEWORK}
    values.update(model_values(preset, hf_config, seq_len=seq))
    values.update(file_values)
    values.update({k: v for k, v in flags.items() if v is not None})
    require_model_shape(values, sources="--model PRESET, --hf-config FILE, --config FILE")
    return config_from_flat(values)


def _check_mode(from_csv: Path | None, out: Path | None, options: dict[str, Any]) -> None:
    """ConfigError for an option the mode does not read, before any work: ``--out`` writes the
    table of ``--from-csv``, and a table's rows are whole configurations, so an option that
    sets one configuration (or how it prints) would be ignored silently."""
    if from_csv is None:
        if out is not None:
            raise ConfigError(
                f"--out writes the predictions of --from-csv TABLE; give "
                f"--from-csv, or drop --out (one configuration prints to stdout, "
                f"--json for JSON), got --out {str(out)!r}"
            )
        return
    given = [k for k, v in options.items() if v is not None]
    if given:
        flag = "--" + given[0].replace("_", "-").replace("num-nodes", "nodes").replace(
            "zero-stage", "zero"
        )
        key = given[0]
        if key in ("json", "explain"):
            why = "the predictions are a CSV table (--out FILE, else stdout)"
        elif key == "network":
            why = "it is one job's network: predict that job's configuration"
        elif key in ("config", "hf_config"):
            why = (
                "each row of the table is a whole configuration (a model column may name a preset)"
            )
        else:
            why = f"each row of the table is a whole configuration: give {key} as a column"
        raise ConfigError(f"{flag} does not apply with --from-csv: {why}")


def _rate(tokens_per_s: float) -> str:
    """Thousands separated, with significant digits below 10 (0.0294, never a bare 0)."""
    return f"{tokens_per_s:,.0f}" if tokens_per_s >= 10 else f"{tokens_per_s:.3g}"


def _mem_interval(pred: Any) -> str:
    """' (80% interval LO - HI GiB)' of the learned peak memory, '' without one."""
    if pred.peak_mem_reserved_lo_gib != pred.peak_mem_reserved_lo_gib:  # NaN
        return ""
    return (
        f" (80% interval {pred.peak_mem_reserved_lo_gib:.1f} - {pred.peak_mem_reserved_hi_gib:.1f})"
    )


def _print_layout(pred: Any, console: Any) -> None:
    """The configuration in one sentence, and what would run it otherwise."""
    from rich.markup import escape

    cfg = pred.config
    m, c, lay = cfg.model, cfg.cluster, cfg.layout
    schedule = "" if lay.pp_schedule == "1f1b" else f" ({lay.pp_schedule})"
    copies = (
        f" (sharded over dp x cp / {lay.dp_replicate}, {lay.dp_replicate} copies)"
        if lay.dp_replicate > 1
        else ""
    )
    layers = f" ({lay.recompute_layers} layers per stage)" if lay.recompute_layers else ""
    console.print(
        f"[bold]{escape(m.name)}[/] on {c.num_nodes} x {c.gpus_per_node} {c.gpu}: "
        f"dp={lay.dp} tp={lay.tp} pp={lay.pp}{schedule} cp={lay.cp} ep={lay.ep} vpp={lay.vpp} "
        f"mbs={lay.mbs} grad_accum={lay.grad_accum} zero={lay.zero_stage}{copies} "
        f"recompute={lay.recompute}{layers} sp={lay.sequence_parallel} {lay.dtype} "
        f"{lay.framework}/{lay.framework_version}; global batch {cfg.batch_seqs} seqs x "
        f"{m.seq_len:,} tokens = {cfg.batch_tokens:,} tokens"
    )
    defaults = defaults_line(lay)
    if defaults:
        console.print(escape(defaults), highlight=False)
    runs_as = cfg.runs_as_another()
    if runs_as:
        console.print(
            f"[yellow]note[/]: {escape(lay.framework)} would not run this layout as "
            f"described ({escape(runs_as)}); it is predicted as given",
            highlight=False,
        )


def _print_sources(pred: Any, console: Any) -> None:
    """Which model, hardware speed and analytic parameters answered."""
    from rich.markup import escape

    lay = pred.config.layout
    console.print(
        f"prediction: {pred.source} model, hardware speed: {escape(str(pred.perf_model))}"
    )
    pset, _ = pred.parameter_set
    own = f"{lay.framework}/{lay.framework_version}"
    how = (
        "trains under torch.autocast here"
        if pset == get_framework(lay.framework).autocast_parameters
        else "shards with FSDP2 alone here"
    )
    which = {
        "fitted": f"{escape(pset)}'s fitted set",
        "priors": f"{escape(pset)}'s priors (no fitted set)",
        "default": f"the default set ({escape(pset)} has none of its own; fitted on "
        "every framework's runs)",
    }[pred.parameter_source]
    stated = get_framework(lay.framework).activation_scale
    console.print(
        f"analytic parameters: {which}"
        + ("" if pset == own else f" ({escape(own)} {how})")
        + (f"; activation_scale {stated:g}, {escape(lay.framework)}'s own" if stated > 0 else ""),
        highlight=False,
    )
    clusters = pred.parameter_sets.clusters(pset)
    if clusters and cluster_key(str(pred.perf_model)) not in clusters:
        console.print(
            f"  (cluster-scoped terms: the default set's, not {escape(', '.join(clusters))}'s)",
            highlight=False,
        )


def _print_learned(pred: Any, console: Any) -> None:
    """The learned correction, where it extrapolates and where it gives way."""
    from rich.markup import escape

    if pred.source != "learned":
        if pred.extrapolation:
            console.print(f"[yellow]extrapolates[/]: {escape(pred.extrapolation)}", highlight=False)
        return
    analytic_gib = (pred.memory_bytes["total"] - pred.memory_bytes["cuda_context"]) / GIB
    console.print(
        f"learned correction: analytic MFU {pred.analytic_mfu:.1%} -> {pred.mfu:.1%} "
        f"(x{pred.mfu / pred.analytic_mfu:.2f}); peak reserved memory "
        f"{pred.peak_mem_reserved_gib:.1f} GiB learned{_mem_interval(pred)} vs "
        f"{analytic_gib:.1f} GiB analytic; the tables below are the analytic breakdown"
    )
    keeps = (
        f"the learned correction keeps {pred.domain_weight:.0%} of itself (the rest is "
        "the analytic answer)"
    )
    if pred.extrapolation:
        console.print(
            f"[yellow]extrapolates[/]: {escape(pred.extrapolation)}; {keeps} and the "
            "interval is widened",
            highlight=False,
        )
    elif pred.domain_weight < 1:
        console.print(
            "inside the learned model's ranges (no extrapolation), but no training "
            f"run had this model shape: {keeps}",
            highlight=False,
        )
    else:
        console.print("inside the learned model's data (no extrapolation)")
    if pred.correction_share < 1:
        from surrogate.cli.display import GAVE_WAY

        lay = pred.config.layout
        console.print(
            f"[yellow]gives way[/]: on the held-out training runs of "
            f"{escape(lay.framework)}/{escape(lay.framework_version)} {GAVE_WAY}, so it "
            f"keeps {pred.correction_share:.0%} of itself there (the rest is the analytic "
            "answer) and the interval holds both",
            highlight=False,
        )


def _breakdown(title: str, columns: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> Any:
    """A table of named terms, their values right-aligned; the last row in bold."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column(columns[0])
    for col in columns[1:]:
        table.add_column(col, justify="right")
    for i, row in enumerate(rows):
        bold = i == len(rows) - 1 and row[0] in ("total", "step")
        table.add_row(*(f"[bold]{c}[/]" if bold and j < 2 else c for j, c in enumerate(row)))
    return table


def _print_memory_and_time(pred: Any, console: Any) -> None:
    """The memory breakdown, the verdict, the step time breakdown and the speed."""
    mem = [(k, f"{v / GIB:.2f}") for k, v in pred.memory_bytes.items() if k != "total"]
    mem.append(("total", f"{pred.memory_bytes['total'] / GIB:.2f}"))
    table = _breakdown("Memory of the most loaded GPU (GiB)", ("term", "GiB"), mem)
    table.add_row("capacity", f"{pred.capacity_bytes / GIB:.2f}")
    console.print(table)
    verdict = {"completed": "[green]fits[/]", "oom": "[red]OOM[/]"}.get(
        pred.status, "[red]fails[/]"
    )
    p_fail = "" if pred.p_fail != pred.p_fail else f", p_fail={pred.p_fail:.2f}"
    console.print(f"verdict: {verdict} (p_oom={pred.p_oom:.2f}{p_fail})")
    total = sum(pred.step_s.values())
    step = [(k, f"{v:.4f}", f"{v / total:.1%}") for k, v in pred.step_s.items() if v > 0]
    step.append(("step", f"{total:.4f}", "100%"))
    console.print(_breakdown("Step time, analytic breakdown (s)", ("term", "s", "share"), step))
    if pred.source == "learned":
        console.print(f"step time, learned: {pred.step_time_s:.4f} s")
    interval = ""
    if pred.mfu_lo == pred.mfu_lo:  # not NaN
        interval = f" (80% interval {pred.mfu_lo:.1%} - {pred.mfu_hi:.1%})"
    if pred.status != "completed":  # its speed still shows, said to be conditional
        console.print("its speed if it ran (the verdict says it would not):")
    console.print(
        f"tokens/s per GPU: {_rate(pred.tokens_per_s_per_gpu)}   MFU: "
        f"{pred.mfu:.1%}{interval}   bubble: {pred.bubble_frac:.1%}"
    )


def _print_table(pred: Any, network: str) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    _print_layout(pred, console)
    _print_sources(pred, console)
    console.print(escape(network), highlight=False)
    _print_learned(pred, console)
    _print_memory_and_time(pred, console)
    if pred.explanation:
        rows = [(name, f"{value:+.3f}") for name, value in pred.explanation.items()]
        console.print(
            _breakdown(
                "Largest contributions to log(measured / analytic throughput)",
                ("feature", "contribution"),
                rows,
            )
        )


def _default_framework(chunk: Any) -> Any:
    """A table's chunk with :data:`DEFAULT_FRAMEWORK` where a row names no framework (the
    default of every command, as for flags)."""
    if "framework" not in chunk.columns:
        return chunk.assign(framework=DEFAULT_FRAMEWORK)
    given = chunk["framework"]
    named = given.notna() & (given.astype(str).str.strip() != "")
    return chunk.assign(framework=given.where(named, DEFAULT_FRAMEWORK))


def _predict_table(
    from_csv: Path,
    out: Path | None,
    profile: Path | None,
    model_arg: Path | str | None,
    physics: ParameterSets | None,
) -> None:
    """``--from-csv``: every check that needs no prediction first (the output's place, the
    file's kind, its header), then the table streamed a chunk at a time
    (``surrogate.prediction.batch``),
    each chunk's model column expanded and its counts checked before it is predicted."""
    from surrogate.io.table_files import check_table_file
    from surrogate.io.tableio import iter_table, table_format
    from surrogate.prediction.batch import check_batch_columns

    if out is not None:  # before predicting every row, not after
        from surrogate.io.outputs import check_output_file

        table_format(out)
        check_output_file(out, flag="--out")
    check_table_file(from_csv, flag="--from-csv")
    where = str(from_csv)
    chunks = iter_table(from_csv, chunk_rows=1)
    try:  # the header before LightGBM loads: a refusal needs none
        head = next(chunks, None)
    except Exception:  # a table pyarrow's reader refuses is read whole below, and checked
        head = None
    finally:
        getattr(chunks, "close", lambda: None)()  # a generator: its file closes now
    if head is not None:
        check_batch_columns(head.columns, where=where)

    def check(chunk: Any, first_row: int) -> Any:
        if first_row == 1:
            check_batch_columns(chunk.columns, where=where)  # names the file
        # the presets filled in here name a bad cell by its row in the whole file;
        # predict_frame's own pass then finds every cell filled
        chunk = expand_model_column(chunk, where=where, first_row=first_row)
        check_table_counts(chunk, where=where, first_row=first_row)
        return _default_framework(chunk)

    import_lightgbm_for_prediction()  # after the checks: a refusal needs no LightGBM
    from surrogate.prediction.batch import predict_file
    from surrogate.progress import bars

    with bars() as progress:
        done = predict_file(
            from_csv,
            out,
            profile=profile,
            model=model_arg,
            check=check,
            progress=progress,
            sets=physics,
        )
    if done.errors and done.errors == done.rows:  # written first: nothing computed is lost
        raise ConfigError(
            f"every one of the {done.rows} rows of {from_csv} failed (row 1: "
            f"{done.first_error}); the table with each row's error went to {out or 'stdout'}"
        )
    if out is not None:
        typer.echo(f"wrote {done.rows} rows to {out} ({done.errors} with an error)", err=True)


def _opt(help: str, *names: str, metavar: str | None = None) -> Any:
    return typer.Option(*names, help=help, metavar=metavar)


@app.command("predict")
@with_options
def predict_cmd(
    model: ModelOptions,
    layout: LayoutOptions,
    config: Annotated[
        Path | None,
        _opt(
            "YAML/JSON file of configuration columns, or a torchtitan job TOML.",
            "--config",
            "-c",
            metavar="FILE",
        ),
    ] = None,
    from_csv: Annotated[
        Path | None,
        _opt(
            "Table of configurations, one per row: CSV, or Parquet (.parquet, .pq); read and "
            "predicted in chunks.",
            metavar="TABLE",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        _opt(
            "Output table for --from-csv, CSV or Parquet by its suffix (default: CSV on stdout).",
            metavar="FILE",
        ),
    ] = None,
    profile: ProfileOpt = None,
    as_json: JsonOpt = False,
    analytic: AnalyticOpt = False,
    model_dir: ModelDirOpt = None,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Show the learned correction and its largest contributions.",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
    network: NetworkOpt = None,
) -> None:
    """Predict memory, OOM, step time, tokens/s and MFU of one configuration (or a CSV of
    them)."""
    flags = model.given() | layout.given()
    _check_mode(
        from_csv,
        out,
        flags
        | {
            "model": model.model,
            "hf_config": model.hf_config,
            "config": config,
            "json": as_json or None,
            "explain": explain or None,
            "network": network,
        },
    )
    check_profile(profile)
    model_arg: Path | str | None = None if analytic else (model_dir or "default")
    physics = _physics(analytic, model_dir)
    if from_csv is not None:
        _predict_table(from_csv, out, profile, model_arg, physics)
        return
    given = flags | ({"model": model.model} if model.model else {})
    file_values = _load_config_file(config, given) if config is not None else {}
    cfg = build_config(model.model, model.hf_config, file_values, flags)
    from surrogate.cli.network import under_network

    cluster = cfg.cluster
    speed, assumed, line = under_network(
        network, profile, cluster.gpu, [cluster.num_nodes], cluster.gpus_per_node
    )
    _predict_one(
        cfg, speed, model_arg, physics, explain=explain, as_json=as_json, network=(assumed, line)
    )
    if not as_json:
        from surrogate.cli.display import seq_len_note

        file_seq = file_values.get("seq_len")
        seq_len = model.seq_len if file_seq is None else file_seq
        if note := seq_len_note(model.hf_config, seq_len, cfg.model):
            typer.echo(f"note: {note}")


def _predict_one(
    cfg: Any,
    profile: Any,
    model_arg: Path | str | None,
    physics: ParameterSets | None,
    *,
    explain: bool,
    as_json: bool,
    network: tuple[dict[str, Any], str],
) -> None:
    """Predict one configuration; print its tables, or its JSON (``network``: what it
    assumed, as JSON and as a line, ``surrogate.cli.network.under_network``)."""
    import_lightgbm_for_prediction()  # this process only predicts: 1.4 s less to start

    pred = predict(cfg, profile=profile, model=model_arg, explain=explain, sets=physics)
    if as_json:
        typer.echo(json.dumps(pred.to_dict() | {"network": network[0]}, indent=2))
    else:
        _print_table(pred, network[1])
