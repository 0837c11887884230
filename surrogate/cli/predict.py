"""`surrogate predict`: one configuration from flags or a YAML/JSON file, or a CSV of them."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from surrogate.analytic.params import cluster_key, set_clusters
from surrogate.cli.app import app
from surrogate.cli.shape_options import (
    ExpertsOpt,
    FfnOpt,
    HeadsOpt,
    HiddenOpt,
    KvHeadsOpt,
    LayersOpt,
    MoeFfnOpt,
    TieOpt,
    TopkOpt,
    VocabOpt,
)
from surrogate.errors import ConfigError


def _load_config_file(path: Path, given: dict[str, Any]) -> dict[str, Any]:
    """A flat mapping of configuration columns (``model`` may name a preset) from YAML/JSON,
    or a torchtitan job TOML completed by ``given``; unknown or repeated keys are errors
    (:func:`surrogate.configfile.read_config_file`)."""
    from surrogate.ingest.config_file import read_config_file

    return read_config_file(path, given=given)


def _physics(analytic: bool, model_dir: Path | None) -> AbstractContextManager[None]:
    """``--analytic --model-dir DIR``: the analytic model under the parameters that model was
    trained under (those its training runs fitted for a framework without shipped ones,
    ``SurrogateModel.physics``); otherwise nothing to change."""
    if not analytic or model_dir is None:
        return nullcontext()
    from surrogate.prediction.predict import resolve_model

    model = resolve_model(model_dir)
    return nullcontext() if model is None else model.physics()


def build_config(
    preset: str | None, hf_config: Path | None, file_values: dict[str, Any], flags: dict[str, Any]
) -> Any:
    """Merge preset < config file < flags into one TrainingConfig."""
    from surrogate.config.files import check_counts
    from surrogate.config.presets import model_values, require_model_shape
    from surrogate.config.training import coerce_column, config_from_flat

    check_counts(flags)
    preset = preset or file_values.pop("model", None)
    seq = flags.get("seq_len")
    file_seq = file_values.get("seq_len")
    if seq is None and file_seq not in (None, "") and file_seq == file_seq:  # not NaN
        seq = coerce_column("seq_len", file_seq)  # as config_from_flat reads the file's
    values = model_values(preset, hf_config, seq_len=seq)
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
            raise ConfigError(f"--out writes the predictions of --from-csv TABLE; give "
                              f"--from-csv, or drop --out (one configuration prints to stdout, "
                              f"--json for JSON), got --out {str(out)!r}")
        return
    given = [k for k, v in options.items() if v is not None]
    if given:
        flag = "--" + given[0].replace("_", "-").replace("num-nodes", "nodes").replace(
            "zero-stage", "zero")
        key = given[0]
        if key in ("json", "explain"):
            why = "the predictions are a CSV table (--out FILE, else stdout)"
        elif key in ("config", "hf_config"):
            why = "each row of the table is a whole configuration (a model column may name a preset)"
        else:
            why = f"each row of the table is a whole configuration: give {key} as a column"
        raise ConfigError(f"{flag} does not apply with --from-csv: {why}")


def _rate(tokens_per_s: float) -> str:
    """Thousands separated, with significant digits below 10 (0.0294, never a bare 0)."""
    return f"{tokens_per_s:,.0f}" if tokens_per_s >= 10 else f"{tokens_per_s:.3g}"


def _mem_interval(pred: Any) -> str:
    """' (80% interval LO - HI GiB)' of the learned peak memory, '' without one."""
    if pred.peak_reserved_lo_gib != pred.peak_reserved_lo_gib:  # NaN
        return ""
    return f" (80% interval {pred.peak_reserved_lo_gib:.1f} - {pred.peak_reserved_hi_gib:.1f})"


def _print_table(pred: Any) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from surrogate.config.frameworks import get_framework
    from surrogate.config.gpus import GIB

    cfg = pred.config
    m, c, lay = cfg.model, cfg.cluster, cfg.layout
    console = Console()
    console.print(
        f"[bold]{escape(m.name)}[/] on {c.num_nodes} x {c.gpus_per_node} {c.gpu}: dp={lay.dp} tp={lay.tp} "
        f"pp={lay.pp}{'' if lay.pp_schedule == '1f1b' else ' (' + lay.pp_schedule + ')'} "
        f"cp={lay.cp} ep={lay.ep} vpp={lay.vpp} mbs={lay.mbs} "
        f"grad_accum={lay.grad_accum} zero={lay.zero_stage}"
        f"{f' (sharded over dp x cp / {lay.dp_replicate}, {lay.dp_replicate} copies)' if lay.dp_replicate > 1 else ''} "
        f"recompute={lay.recompute}"
        f"{f' ({lay.recompute_layers} layers per stage)' if lay.recompute_layers else ''} "
        f"sp={lay.sequence_parallel} {lay.dtype} {lay.framework}/{lay.framework_version}; "
        f"global batch {cfg.batch_seqs} seqs x {m.seq_len:,} tokens = {cfg.batch_tokens:,} tokens"
    )
    runs_as = cfg.runs_as_another()
    if runs_as:
        console.print(f"[yellow]note[/]: {escape(lay.framework)} would not run this layout as "
                      f"described ({escape(runs_as)}); it is predicted as given", highlight=False)
    console.print(f"prediction: {pred.source} model, hardware speed: {escape(str(pred.perf_model))}")
    pset, _ = pred.parameter_set
    own = f"{lay.framework}/{lay.framework_version}"
    how = ("trains under torch.autocast here"
           if pset == get_framework(lay.framework).autocast_parameters
           else "shards with FSDP2 alone here")
    which = {"fitted": f"{escape(pset)}'s fitted set",
             "priors": f"{escape(pset)}'s priors (no fitted set)",
             "default": f"the default set ({escape(pset)} has none of its own; fitted on "
                        "every framework's runs)"}[pred.parameter_source]
    console.print(f"analytic parameters: {which}"
                  + ("" if pset == own else f" ({escape(own)} {how})"), highlight=False)
    clusters = set_clusters(pset)
    if clusters and cluster_key(str(pred.perf_model)) not in clusters:
        console.print(f"  (cluster-scoped terms: the default set's, not "
                      f"{escape(', '.join(clusters))}'s)", highlight=False)
    if pred.source == "learned":
        console.print(
            f"learned correction: analytic MFU {pred.analytic_mfu:.1%} -> {pred.mfu:.1%} "
            f"(x{pred.mfu / pred.analytic_mfu:.2f}); peak reserved memory "
            f"{pred.peak_reserved_gib:.1f} GiB learned{_mem_interval(pred)} vs "
            f"{(pred.memory_bytes['total'] - pred.memory_bytes['cuda_context']) / GIB:.1f} GiB "
            "analytic; the tables below are the analytic breakdown"
        )
        if pred.extrapolation:
            console.print(
                f"[yellow]extrapolates[/]: {escape(pred.extrapolation)}; the learned "
                f"correction keeps {pred.domain_weight:.0%} of itself (the rest is the "
                "analytic answer) and the interval is widened", highlight=False)
        elif pred.domain_weight < 1:
            console.print(
                "inside the learned model's ranges (no extrapolation), but no training run had "
                f"this model shape: the learned correction keeps {pred.domain_weight:.0%} of "
                "itself (the rest is the analytic answer)", highlight=False)
        else:
            console.print("inside the learned model's data (no extrapolation)")
        if pred.correction_share < 1:
            from surrogate.cli.display import GAVE_WAY

            console.print(
                f"[yellow]gives way[/]: on the held-out training runs of "
                f"{escape(lay.framework)}/{escape(lay.framework_version)} {GAVE_WAY}, so it "
                f"keeps {pred.correction_share:.0%} of itself there (the rest is the analytic "
                "answer) and the interval holds both", highlight=False)
    elif pred.extrapolation:
        console.print(f"[yellow]extrapolates[/]: {escape(pred.extrapolation)}", highlight=False)
    mem = Table(title="Memory of the most loaded GPU (GiB)")
    mem.add_column("term")
    mem.add_column("GiB", justify="right")
    for k, v in pred.memory_bytes.items():
        if k != "total":
            mem.add_row(k, f"{v / GIB:.2f}")
    mem.add_row("[bold]total[/]", f"[bold]{pred.memory_bytes['total'] / GIB:.2f}[/]")
    mem.add_row("capacity", f"{pred.capacity_bytes / GIB:.2f}")
    console.print(mem)
    verdict = {"completed": "[green]fits[/]", "oom": "[red]OOM[/]"}.get(pred.status, "[red]fails[/]")
    p_fail = "" if pred.p_fail != pred.p_fail else f", p_fail={pred.p_fail:.2f}"
    console.print(f"verdict: {verdict} (p_oom={pred.p_oom:.2f}{p_fail})")
    analytic_step = sum(pred.step_s.values())
    step = Table(title="Step time, analytic breakdown (s)")
    step.add_column("term")
    step.add_column("s", justify="right")
    step.add_column("share", justify="right")
    for k, v in pred.step_s.items():
        if v > 0:
            step.add_row(k, f"{v:.4f}", f"{v / analytic_step:.1%}")
    step.add_row("[bold]step[/]", f"[bold]{analytic_step:.4f}[/]", "100%")
    console.print(step)
    if pred.source == "learned":
        console.print(f"step time, learned: {pred.step_time_s:.4f} s")
    interval = ""
    if pred.mfu_lo == pred.mfu_lo:  # not NaN
        interval = f" (80% interval {pred.mfu_lo:.1%} - {pred.mfu_hi:.1%})"
    if pred.status != "completed":  # its speed still shows, said to be conditional
        console.print("its speed if it ran (the verdict says it would not):")
    console.print(
        f"tokens/s per GPU: {_rate(pred.tokens_per_s_per_gpu)}   MFU: {pred.mfu:.1%}{interval}   "
        f"bubble: {pred.bubble_frac:.1%}"
    )
    if pred.explanation:
        why = Table(title="Largest contributions to log(measured / analytic throughput)")
        why.add_column("feature")
        why.add_column("contribution", justify="right")
        for name, value in pred.explanation.items():
            why.add_row(name, f"{value:+.3f}")
        console.print(why)


def _predict_table(from_csv: Path, out: Path | None, profile: Path | None,
                   model_arg: Path | str | None, physics: AbstractContextManager[Any]) -> None:
    """``--from-csv``: every check that needs no prediction first (the output's place, the
    file's kind, its header), then the table streamed a chunk at a time (``surrogate.batch``),
    each chunk's model column expanded and its counts checked before it is predicted."""
    from surrogate.cli.lean_imports import import_lightgbm_for_prediction
    from surrogate.config.files import check_table_counts, expand_model_column
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
        chunk = expand_model_column(chunk, where=where)
        check_table_counts(chunk, where=where, first_row=first_row)
        return chunk

    import_lightgbm_for_prediction()  # after the checks: a refusal needs no LightGBM
    from surrogate.prediction.batch import predict_file
    from surrogate.progress import bars

    with physics, bars() as progress:
        done = predict_file(from_csv, out, profile=profile, model=model_arg, check=check,
                            progress=progress)
    if done.errors and done.errors == done.rows:  # written first: nothing computed is lost
        raise ConfigError(
            f"every one of the {done.rows} rows of {from_csv} failed (row 1: "
            f"{done.first_error}); the table with each row's error went to {out or 'stdout'}")
    if out is not None:
        typer.echo(f"wrote {done.rows} rows to {out} ({done.errors} with an error)", err=True)


@app.command("predict")
def predict_cmd(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model preset, e.g. 8b, 70b, 1.34b, mixtral.")] = None,
    hf_config: Annotated[Path | None, typer.Option(help="A Hugging Face config.json to read the model from.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML/JSON file of configuration columns, or a torchtitan job TOML.")] = None,
    from_csv: Annotated[Path | None, typer.Option(help="Table of configurations, one per row: CSV, or Parquet (.parquet, .pq); read and predicted in chunks.")] = None,
    out: Annotated[Path | None, typer.Option(help="Output table for --from-csv, CSV or Parquet by its suffix (default: CSV on stdout).")] = None,
    profile: Annotated[Path | None, typer.Option(help="Calibration profile JSON (default: the GPU's own, else datasheet).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    analytic: Annotated[bool, typer.Option("--analytic", help="The analytic model alone, without the learned correction.")] = False,
    model_dir: Annotated[Path | None, typer.Option(help="A trained model directory (default: the bundled model).")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="Show the learned correction and its largest contributions.")] = False,
    num_layers: LayersOpt = None,
    hidden_size: HiddenOpt = None,
    ffn_hidden_size: FfnOpt = None,
    num_heads: HeadsOpt = None,
    num_kv_heads: KvHeadsOpt = None,
    vocab_size: VocabOpt = None,
    seq_len: Annotated[int | None, typer.Option(help="Sequence length (default: the model's).")] = None,
    tie_embeddings: TieOpt = None,
    num_experts: ExpertsOpt = None,
    experts_topk: TopkOpt = None,
    moe_ffn_hidden_size: MoeFfnOpt = None,
    gpu: Annotated[str | None, typer.Option(help="GPU, e.g. H100-SXM-80GB, H100, A100-40GB, B200.")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node (default 8).")] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", "--num-nodes", help="Nodes (default 1).")] = None,
    dp: Annotated[int | None, typer.Option(help="Data-parallel degree (default 1).")] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel degree (default 1).")] = None,
    pp: Annotated[int | None, typer.Option(help="Pipeline stages (default 1).")] = None,
    cp: Annotated[int | None, typer.Option(help="Context-parallel degree (default 1).")] = None,
    ep: Annotated[int | None, typer.Option(help="Expert-parallel degree, dividing dp x cp (default 1).")] = None,
    vpp: Annotated[int | None, typer.Option(help="Virtual stages per pipeline rank, interleaved 1F1B (default 1).")] = None,
    pp_schedule: Annotated[str | None, typer.Option(help="Pipeline schedule: 1f1b (default; interleaved with vpp > 1) or afab (all forwards, then all backwards).")] = None,
    mbs: Annotated[int | None, typer.Option(help="Micro-batch size (sequences).")] = None,
    grad_accum: Annotated[int | None, typer.Option(help="Micro-batches per step, gradient accumulation (default 1).")] = None,
    zero: Annotated[int | None, typer.Option("--zero", "--zero-stage", help="ZeRO stage 0-3 (default 0).")] = None,
    dp_replicate: Annotated[int | None, typer.Option(help="Copies of ZeRO's shards (hybrid sharding: torchtitan's HSDP, Megatron's distributed optimizer instances); 1: ZeRO over every data-parallel rank.")] = None,
    recompute: Annotated[str | None, typer.Option(help="none, selective or full.")] = None,
    recompute_layers: Annotated[int | None, typer.Option(help="With --recompute full: layers of each pipeline stage checkpointed (Megatron's block method, torchtitan's every n-th block); 0: all.")] = None,
    sequence_parallel: Annotated[bool | None, typer.Option("--sequence-parallel/--no-sequence-parallel", "--sp/--no-sp", help="Sequence parallelism with tp > 1 (default: the framework's).")] = None,
    dtype: Annotated[str | None, typer.Option(help="bf16 or fp8.")] = None,
    framework: Annotated[str | None, typer.Option(help="nanotron, torchtitan or megatron.")] = None,
    framework_version: Annotated[str | None, typer.Option(help="Framework version where it matters (nanotron: pre-pp-fix or pp-fix; default the newest).")] = None,
    global_batch_seqs: Annotated[int | None, typer.Option(help="Check the layout yields this global batch (sequences).")] = None,
) -> None:
    """Predict memory, OOM, step time, tokens/s and MFU of one configuration (or a CSV of them)."""
    from surrogate.cli.lean_imports import import_lightgbm_for_prediction

    flags = dict(
        num_layers=num_layers, hidden_size=hidden_size, ffn_hidden_size=ffn_hidden_size,
        num_heads=num_heads, num_kv_heads=num_kv_heads, vocab_size=vocab_size, seq_len=seq_len,
        tie_embeddings=tie_embeddings, num_experts=num_experts, experts_topk=experts_topk,
        moe_ffn_hidden_size=moe_ffn_hidden_size, gpu=gpu, gpus_per_node=gpus_per_node,
        num_nodes=nodes, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, pp_schedule=pp_schedule, mbs=mbs,
        grad_accum=grad_accum, zero_stage=zero, dp_replicate=dp_replicate, recompute=recompute,
        recompute_layers=recompute_layers, sequence_parallel=sequence_parallel, dtype=dtype, framework=framework,
        framework_version=framework_version, global_batch_seqs=global_batch_seqs,
    )
    _check_mode(from_csv, out, flags | {"model": model, "hf_config": hf_config, "config": config,
                                        "json": as_json or None, "explain": explain or None})
    model_arg: Path | str | None = None if analytic else (model_dir or "default")
    physics = _physics(analytic, model_dir)
    if from_csv is not None:
        _predict_table(from_csv, out, profile, model_arg, physics)
        return
    given = {k: v for k, v in flags.items() if v is not None} | ({"model": model} if model else {})
    file_values = _load_config_file(config, given) if config is not None else {}
    cfg = build_config(model, hf_config, file_values, flags)
    import_lightgbm_for_prediction()  # this process only predicts: 1.4 s less to start
    from surrogate.prediction.predict import predict

    with physics:
        pred = predict(cfg, profile=profile, model=model_arg, explain=explain)
    if as_json:
        typer.echo(json.dumps(pred.to_dict(), indent=2))
    else:
        _print_table(pred)
        from surrogate.cli.display import seq_len_note

        file_seq = file_values.get("seq_len") if isinstance(file_values, dict) else None
        if note := seq_len_note(hf_config, seq_len if file_seq is None else file_seq, cfg.model):
            typer.echo(f"note: {note}")
