"""`surrogate search`, `propose`, `score-round` and `heatmap`: find layouts, close the loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

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
    shape_flags,
)
from surrogate.errors import ConfigError

ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="Model preset, e.g. 8b, 70b, 1.34b, mixtral.")]
HfOpt = Annotated[Path | None, typer.Option(help="A Hugging Face config.json to read the model from.")]
SeqOpt = Annotated[int | None, typer.Option(help="Sequence length (default: the model's).")]
GpuOpt = Annotated[str, typer.Option(help="GPU, e.g. H100-SXM-80GB, A100-40GB, B200.")]
GpnOpt = Annotated[int, typer.Option(help="GPUs per node.")]
NodesOpt = Annotated[str, typer.Option("--nodes", help="Node count, list (1,2,4) or range of powers of two (1-8).")]
TokOpt = Annotated[int | None, typer.Option(help="Global batch in tokens.")]
SeqsOpt = Annotated[int | None, typer.Option(help="Global batch in sequences.")]
FwOpt = Annotated[str, typer.Option("--framework", help="Allowed frameworks, comma-separated.")]
ZeroOpt = Annotated[str | None, typer.Option("--zero", help="Allowed ZeRO stages, e.g. 0,1.")]
RcOpt = Annotated[str, typer.Option("--recompute", help="Allowed recompute modes, comma-separated.")]
ShardOpt = Annotated[str, typer.Option("--shardings", help="ZeRO shardings on torchtitan (ZeRO-2/3) and megatron (ZeRO-1): full (over every data-parallel rank) and node (hybrid: shards over one node's ranks, a copy per node), comma-separated; must include full.")]
RcShareOpt = Annotated[str, typer.Option("--recompute-shares", help="Shares of each pipeline stage's layers full recomputation may checkpoint on megatron and torchtitan (each the nearest count the framework writes), comma-separated; must include 1 (every layer).")]
MarginOpt = Annotated[float, typer.Option(help="Keep this fraction of GPU memory free (0-1).")]
OomOpt = Annotated[float, typer.Option(help="Largest acceptable predicted OOM probability.")]
CpOpt = Annotated[int | None, typer.Option(help="Largest context-parallel degree.")]
VppOpt = Annotated[int, typer.Option(help="Largest virtual pipeline degree.")]
MbsOpt = Annotated[int, typer.Option(help="Largest micro-batch (sequences).")]
ModelDirOpt = Annotated[Path | None, typer.Option(help="A trained model directory (default: the bundled model).")]
AnalyticOpt = Annotated[bool, typer.Option("--analytic", help="The analytic model alone.")]


def parse_nodes(text: str) -> tuple[int, ...]:
    """``4`` -> (4,); ``1,2,4`` -> (1, 2, 4); ``1-8`` -> the powers of two from 1 to 8."""
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            if lo < 1 or hi < lo:
                raise ValueError
            out = [n for n in (2**i for i in range(hi.bit_length() + 1)) if lo <= n <= hi]
            return tuple(sorted({lo, hi, *out}))
        return tuple(sorted({int(x) for x in text.split(",")}))
    except ValueError:
        raise ConfigError(
            f"--nodes must be a count (4), a list (1,2,4) or a range (1-8), got {text!r}"
        ) from None


def _ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"{flag} must be comma-separated integers, got {text!r}") from None


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"{flag} must be comma-separated numbers, got {text!r}") from None


def _at_least(minimum: int, **values: int | None) -> None:
    """ConfigError naming the first option below ``minimum`` (``top_k=0``: ``--top-k``)."""
    for name, value in values.items():
        if value is not None and value < minimum:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} must be >= {minimum}, got {value}")


def model_config(preset: str | None, hf_config: Path | None, seq_len: int | None,
                 shape: dict[str, Any]) -> Any:
    """The ModelConfig from a preset, a Hugging Face config or shape flags (flags win)."""
    from surrogate.config.model import ModelConfig
    from surrogate.config.presets import model_values, require_model_shape

    values = model_values(preset, hf_config, seq_len=seq_len)
    values.update({k: v for k, v in shape.items() if v is not None})
    if seq_len is not None:
        values["seq_len"] = seq_len
    require_model_shape(values, sources="--model PRESET, --hf-config FILE")
    values.setdefault("num_kv_heads", values["num_heads"])
    return ModelConfig(**values)


def build_space(model: Any, *, gpu: str, gpus_per_node: int, nodes: str,
                global_batch_tokens: int | None, global_batch_seqs: int | None, framework: str,
                zero: str | None, recompute: str, max_cp: int | None, max_vpp: int,
                max_mbs: int, recompute_shares: str = "1", shardings: str = "full") -> Any:
    from surrogate.layouts.degrees import batch_seqs_from_tokens
    from surrogate.layouts.space import LayoutSpace

    if (global_batch_tokens is None) == (global_batch_seqs is None):
        raise ConfigError("give the global batch: --global-batch-tokens or --global-batch-seqs "
                          "(one of them)")
    seqs = global_batch_seqs if global_batch_seqs is not None else batch_seqs_from_tokens(
        int(global_batch_tokens or 0), model.seq_len)
    return LayoutSpace(
        model=model, global_batch_seqs=seqs, gpu=gpu, gpus_per_node=gpus_per_node,
        node_counts=parse_nodes(nodes),
        frameworks=tuple(f.strip() for f in framework.split(",") if f.strip()),
        zero_stages=_ints(zero, "--zero"),
        recompute_modes=tuple(r.strip() for r in recompute.split(",") if r.strip()),
        recompute_shares=_floats(recompute_shares, "--recompute-shares"),
        shardings=tuple(x.strip() for x in shardings.split(",") if x.strip()),
        max_cp=max_cp, max_vpp=max_vpp, max_mbs=max_mbs,
    )


WideOpt = Annotated[bool, typer.Option("--wide", help="Every column, at least 160 characters wide (default: fewer columns below 110).")]


def _reason(r: dict[str, Any]) -> str:
    """Why ``propose`` picked a run, in words."""
    value = r.get("value")
    if r.get("reason") == "oom-boundary":
        return f"OOM edge (p_oom {r['p_oom']:.2f})"
    if r.get("reason") == "expected-improvement" and value == value and value is not None:
        return f"MFU gain {100 * float(value):.1f} pts"
    return str(r.get("reason", ""))


def _memory_interval(r: dict[str, Any]) -> str:
    """The device's peak memory interval of a scored row, in GiB ('' without one)."""
    lo, hi = r.get("pred_peak_mem_lo_gib"), r.get("pred_peak_mem_hi_gib")
    if lo is None or hi is None or lo != lo or hi != hi:
        return ""
    context = r["pred_device_mem_gib"] - r["pred_peak_mem_gib"]
    return f"{lo + context:.1f}-{hi + context:.1f}"


def _table(title: str, frame: Any, *, narrow: bool = False, full: bool = False,
           reasons: bool = False, frameworks: bool = False) -> Any:
    """Layouts with their predictions; ``narrow`` leaves out tokens/s and step time so that
    the table stays readable at 80 columns, ``full`` adds the peak memory's 80% interval;
    ``reasons`` adds why each was proposed; ``frameworks`` names each layout's framework
    (a space of several). Peak memory is the device's (the CUDA context included), its
    interval too."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title)
    cols = ["#", "nodes", "layout", "MFU", "80% interval"]
    cols += [] if narrow else ["tokens/s/GPU", "step s"]
    cols += ["peak GiB"] + (["peak 80%"] if full else [])
    cols += ["p_oom"] + (["why"] if reasons else [])
    for col in cols:
        text = col in ("layout", "why")
        t.add_column(col, justify="left" if text else "right", no_wrap=not text,
                     overflow="fold", ratio=2 if text else None)
    for i, r in enumerate(frame.to_dict("records"), start=1):
        lo, hi = r["pred_mfu_lo"], r["pred_mfu_hi"]
        interval = "" if lo != lo or lo is None else f"{100 * lo:.1f}-{100 * hi:.1f}%"
        layout = str(r["layout"]) + (f" ({r['framework']})" if frameworks else "")
        row = [str(i), str(r["num_nodes"]), escape(layout), f"{r['pred_mfu']:.1%}", interval]
        if not narrow:
            row += [f"{r['pred_tokens_per_s_per_gpu']:,.0f}", f"{r['pred_step_time_s']:.2f}"]
        row += [f"{r['pred_device_mem_gib']:.1f}"]
        if full:
            row += [_memory_interval(r)]
        row += [f"{r['p_oom']:.2f}"]
        t.add_row(*row, *([escape(_reason(r))] if reasons else []))
    return t


@app.command("search")
def search_cmd(
    model: ModelOpt = None,
    hf_config: HfOpt = None,
    seq_len: SeqOpt = None,
    num_layers: LayersOpt = None,
    hidden_size: HiddenOpt = None,
    ffn_hidden_size: FfnOpt = None,
    num_heads: HeadsOpt = None,
    num_kv_heads: KvHeadsOpt = None,
    vocab_size: VocabOpt = None,
    tie_embeddings: TieOpt = None,
    num_experts: ExpertsOpt = None,
    experts_topk: TopkOpt = None,
    moe_ffn_hidden_size: MoeFfnOpt = None,
    gpu: GpuOpt = "H100-SXM-80GB",
    gpus_per_node: GpnOpt = 8,
    nodes: NodesOpt = "1",
    global_batch_tokens: TokOpt = None,
    global_batch_seqs: SeqsOpt = None,
    framework: FwOpt = "nanotron",
    zero: ZeroOpt = None,
    recompute: RcOpt = "none,full",
    recompute_shares: RcShareOpt = "0.25,0.5,0.75,1",
    shardings: ShardOpt = "full,node",
    memory_margin: MarginOpt = 0.0,
    max_p_oom: OomOpt = 0.2,
    max_cp: CpOpt = None,
    max_vpp: VppOpt = 4,
    max_mbs: MbsOpt = 64,
    objective: Annotated[str, typer.Option(help="mfu (TPE), mfu-vs-oom or mfu-vs-gpus (NSGA-II).")] = "mfu",
    trials: Annotated[int, typer.Option(help="optuna trials (0: enumeration only).")] = 200,
    storage: Annotated[str | None, typer.Option(help="optuna storage URL, e.g. sqlite:///study.db (parallel workers share it).")] = None,
    study_name: Annotated[str | None, typer.Option(help="Study name (resumed if it exists in --storage).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of optuna's sampler.")] = 0,
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="Layouts to show (and write with --launch-dir).")] = 5,
    model_dir: ModelDirOpt = None,
    analytic: AnalyticOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    wide: WideOpt = False,
    launch_dir: Annotated[Path | None, typer.Option(help="Write torchtitan TOML + torchrun + sbatch per top layout here.")] = None,
) -> None:
    """Find the best layouts for a model, cluster and global batch (and what the rules of thumb pick)."""
    from surrogate.layouts.rules import CITATION, rules_pick
    from surrogate.layouts.search import Limits, score_configs, scored_to_records, search

    if objective not in ("mfu", "mfu-vs-oom", "mfu-vs-gpus"):
        raise ConfigError(f"--objective must be mfu, mfu-vs-oom or mfu-vs-gpus, got {objective!r}")
    _at_least(0, trials=trials)
    _at_least(1, top_k=top_k)
    if storage is not None:
        from surrogate.io.stores import check_storage

        check_storage(storage)  # before the space is built and scored
    if launch_dir is not None:
        from surrogate.io.outputs import check_writable_dir

        check_writable_dir(launch_dir, flag="--launch-dir")
    m = model_config(model, hf_config, seq_len, shape_flags(locals()))
    space = build_space(m, gpu=gpu, gpus_per_node=gpus_per_node, nodes=nodes,
                        global_batch_tokens=global_batch_tokens,
                        global_batch_seqs=global_batch_seqs, framework=framework, zero=zero,
                        recompute=recompute, max_cp=max_cp, max_vpp=max_vpp, max_mbs=max_mbs,
                        recompute_shares=recompute_shares, shardings=shardings)
    limits = Limits(max_p_oom=max_p_oom, memory_margin_frac=memory_margin)
    learned: Any = None if analytic else (model_dir or "default")
    from sqlalchemy.exc import SQLAlchemyError

    from surrogate.progress import bars

    try:
        with bars(not as_json) as report:
            result = search(space, model=learned, limits=limits, objective=objective,  # type: ignore[arg-type]
                            n_trials=trials, top_k=top_k, storage=storage,
                            study_name=study_name, seed=seed, progress=report)
    except SQLAlchemyError as e:  # the database of --storage: unreachable, refused, locked
        from surrogate.errors import DataError

        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"the optuna storage {storage!r} failed: {message}") from e
    rules_cfg = rules_pick(space)
    rules_row = score_configs([rules_cfg], model=learned, limits=limits)
    from surrogate.cli.display import seq_len_note

    notes = [n for n in (seq_len_note(hf_config, seq_len, m), *result.notes) if n]
    written: list[str] = []
    if launch_dir is not None:
        from surrogate.loop.launch import launch_problem, write_launch_files

        for i, key in enumerate(result.top["key"], start=1):
            cfg = result.configs[key]
            problem = launch_problem(cfg)
            if problem:
                written.append(f"#{i}: not written ({problem})")
                continue
            name = f"top{i:02d}-" + str(result.top["layout"].iloc[i - 1]).replace(" ", "_")
            files = write_launch_files(cfg, launch_dir / name, run_name=name)
            written.append(f"#{i}: {files.directory}")
    summary = {
        "space": {"model": m.name, "seq_len": m.seq_len,
                  "global_batch_seqs": space.global_batch_seqs,
                  "node_counts": list(space.node_counts), "points": space.size_bound(),
                  "enumerated_valid": result.enumerated},
        "optuna": {"trials": result.n_trials, "invalid": result.n_invalid,
                   "infeasible": result.n_infeasible, "study": result.study_name,
                   "found_enumerated_best": result.optuna_found_enum_best},
        "top": scored_to_records(result.top),
        "pareto": None if result.pareto is None else scored_to_records(result.pareto),
        "rules_of_thumb": {"source": CITATION, **scored_to_records(rules_row)[0]},
        "launch": written, "notes": notes,
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))
        return
    from rich.markup import escape

    from surrogate.cli.display import console as make_console
    from surrogate.cli.display import (
        extrapolation_line,
        gives_way_line,
        is_full,
        is_narrow,
        model_line,
    )

    console = make_console(wide=wide)
    narrow, full = is_narrow(console, wide), is_full(console, wide)
    console.print(f"[bold]{escape(m.name)}[/] on {','.join(map(str, space.node_counts))} x "
                  f"{gpus_per_node} {space.gpu}, global batch {space.global_batch_seqs} seqs x "
                  f"{m.seq_len} tokens; {space.size_bound():,} points"
                  + (f", {result.enumerated:,} valid layouts scored" if result.enumerated
                     is not None else ", too many to enumerate"))
    if result.n_trials:
        same = {True: "found the enumerated best", False: "did not find the enumerated best",
                None: "(no enumeration to compare)"}[result.optuna_found_enum_best]
        console.print(f"optuna: {result.n_trials} trials ({result.n_invalid} invalid, "
                      f"{result.n_infeasible} over the limits); {same}")
    console.print(escape(model_line(learned, space.gpu, model_dir)), highlight=False)
    for note in notes:
        console.print(f"[yellow]{escape(note)}[/]")
    several = len(space.frameworks) > 1
    console.print(_table("Best predicted layouts", result.top, narrow=narrow, full=full,
                         frameworks=several))
    if learned is not None:
        console.print(escape(extrapolation_line(result.top.get("extrapolation", []))),
                      highlight=False)
        if gives_way := gives_way_line(result.top):
            console.print(f"[yellow]{escape(gives_way)}[/]", highlight=False)
    if result.pareto is not None:
        console.print(_table(f"Pareto front ({objective})", result.pareto, narrow=narrow,
                             full=full, frameworks=several))
    console.print(_table("Rules of thumb pick (Playbook)", rules_row, narrow=narrow, full=full,
                         frameworks=several))
    if narrow:
        console.print("(tokens/s/GPU and step time: --wide or --json)", highlight=False)
    for line in written:
        console.print(escape(line))


@app.command("propose")
def propose_cmd(
    round_dir: Annotated[Path, typer.Option("--round", help="New round directory to write (refused if it exists).")],
    k: Annotated[int, typer.Option("--k", help="Runs to propose.")] = 16,
    model: ModelOpt = None,
    hf_config: HfOpt = None,
    seq_len: SeqOpt = None,
    num_layers: LayersOpt = None,
    hidden_size: HiddenOpt = None,
    ffn_hidden_size: FfnOpt = None,
    num_heads: HeadsOpt = None,
    num_kv_heads: KvHeadsOpt = None,
    vocab_size: VocabOpt = None,
    tie_embeddings: TieOpt = None,
    num_experts: ExpertsOpt = None,
    experts_topk: TopkOpt = None,
    moe_ffn_hidden_size: MoeFfnOpt = None,
    gpu: GpuOpt = "H100-SXM-80GB",
    gpus_per_node: GpnOpt = 8,
    nodes: NodesOpt = "1",
    global_batch_tokens: TokOpt = None,
    global_batch_seqs: SeqsOpt = None,
    framework: FwOpt = "torchtitan",
    zero: ZeroOpt = None,
    recompute: RcOpt = "none,full",
    recompute_shares: RcShareOpt = "0.25,0.5,0.75,1",
    shardings: ShardOpt = "full,node",
    memory_margin: MarginOpt = 0.0,
    max_p_oom: Annotated[float, typer.Option(help="Drop candidates above this OOM risk (1: keep all).")] = 1.0,
    max_cp: CpOpt = None,
    max_vpp: VppOpt = 4,
    max_mbs: MbsOpt = 64,
    runs: Annotated[Path | None, typer.Option(help="Your sweep table so far (not proposed again; its best MFU is the incumbent).")] = None,
    boundary_frac: Annotated[float, typer.Option(help="Share of runs near the OOM boundary.")] = 0.25,
    model_dir: ModelDirOpt = None,
    round_number: Annotated[int | None, typer.Option(help="Round number (default: next after the sibling rounds).")] = None,
    steps: Annotated[int, typer.Option(help="Training steps per proposed run.")] = 50,
    wide: WideOpt = False,
) -> None:
    """Propose the k runs that would teach the surrogate most; write launch files and round.json."""
    _at_least(1, round_number=round_number, k=k, steps=steps)  # before any scoring
    from surrogate.loop.active import Acquisition, check_new_round_dir

    if not 0 <= boundary_frac <= 1:
        raise ConfigError(f"--boundary-frac must be in [0, 1], got {boundary_frac}")
    acquisition = Acquisition(boundary_frac=boundary_frac)
    check_new_round_dir(round_dir)
    if runs is not None:
        from surrogate.io.table_files import check_table_file

        check_table_file(runs, flag="--runs")
    import pandas as pd
    from rich.markup import escape

    from surrogate.cli.display import console as make_console
    from surrogate.cli.display import (
        extrapolation_line,
        gives_way_line,
        is_full,
        is_narrow,
        model_line,
    )
    from surrogate.layouts.search import Limits
    from surrogate.loop.active import PROPOSALS_FILE, propose
    from surrogate.progress import bars

    m = model_config(model, hf_config, seq_len, shape_flags(locals()))
    space = build_space(m, gpu=gpu, gpus_per_node=gpus_per_node, nodes=nodes,
                        global_batch_tokens=global_batch_tokens,
                        global_batch_seqs=global_batch_seqs, framework=framework, zero=zero,
                        recompute=recompute, max_cp=max_cp, max_vpp=max_vpp, max_mbs=max_mbs,
                        recompute_shares=recompute_shares, shardings=shardings)
    table = None
    if runs is not None:
        from surrogate.io.tableio import read_table

        table = read_table(runs)
    with bars() as report:
        out = propose(space, round_dir, k=k, model=model_dir or "default",
                      limits=Limits(max_p_oom=max_p_oom, memory_margin_frac=memory_margin),
                      acquisition=acquisition, runs=table,
                      round_number=round_number, steps=steps, progress=report)
    console = make_console(wide=wide)
    from surrogate.cli.display import seq_len_note

    if note := seq_len_note(hf_config, seq_len, m):
        console.print(f"[yellow]{escape(note)}[/]", highlight=False)
    picked = pd.read_csv(out / PROPOSALS_FILE, keep_default_na=False, na_values=[""])
    console.print(escape(model_line(model_dir or "default", space.gpu, model_dir)),
                  highlight=False)
    console.print(_table(f"{out.name}: {len(picked)} proposed runs", picked,
                         narrow=is_narrow(console, wide), full=is_full(console, wide),
                         reasons=True, frameworks=len(space.frameworks) > 1))
    console.print(escape(extrapolation_line(picked.get("extrapolation", pd.Series(
        [""] * len(picked))).fillna(""))), highlight=False)
    if gives_way := gives_way_line(picked):
        console.print(f"[yellow]{escape(gives_way)}[/]", highlight=False)
    import shlex

    logs, where = shlex.quote(f"{out}/logs"), shlex.quote(str(out))  # a path with spaces
    typer.echo(f"wrote {out}/proposals.csv, round.json and launch files under {out}/logs; run "
               f"them, then `surrogate ingest {logs}` and `surrogate score-round --round "
               f"{where} --runs TABLE` before `surrogate train`")


@app.command("score-round")
def score_round_cmd(
    round_dir: Annotated[Path, typer.Option("--round", help="A round directory written by propose.")],
    runs: Annotated[Path, typer.Option(help="Sweep table holding the round's ingested runs (and earlier ones).")],
    model_dir: Annotated[Path | None, typer.Option(help="The proposing model's directory, if it moved.")] = None,
    mlflow: Annotated[bool, typer.Option("--mlflow/--no-mlflow", help="Log to MLflow ($MLFLOW_TRACKING_URI, else sqlite:///mlruns/mlflow.db).")] = True,
    campaign: Annotated[str | None, typer.Option(help="MLflow experiment 'active learning: CAMPAIGN' (default: the name of the directory holding the rounds).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Score a round's runs against the model that proposed them (before retraining) and log it
    (scoring a round again updates its MLflow run)."""
    from surrogate.io.tableio import read_table
    from surrogate.loop.active import load_round_model, read_round, score_round
    from surrogate.loop.round_log import campaign_of, campaign_records, log_round

    record = read_round(round_dir)
    if model_dir is not None:
        record["model"] = {**record["model"], "path": str(model_dir)}
    from surrogate.io.table_files import check_table_file
    from surrogate.progress import bars

    check_table_file(runs, flag="--runs")
    if mlflow:  # before the scoring, within seconds: an unusable store costs a line
        from surrogate.io.tracking import check_store

        check_store()
    proposer = load_round_model(record)
    table = read_table(runs)
    metrics, matched = score_round(record, table, model=proposer)
    analytic = score_round(record, table, model=None) if proposer is not None else None
    analytic_metrics = None if analytic is None else analytic[0]
    if not as_json:  # the figures first: a store failing below loses nothing
        _print_round(record, metrics, analytic_metrics)
    run_id, failure = None, None
    if mlflow:
        try:
            with bars(not as_json) as report:
                report("logging to MLflow (metrics, plots, accuracy over rounds)", 0, 1)
                run_id = log_round(record, metrics, campaign=campaign or campaign_of(round_dir),
                                   matched=matched, analytic=analytic,
                                   earlier=[r for r in campaign_records(round_dir)
                                            if int(r["round"]) < int(record["round"])])
        except Exception as e:  # any failure of the store, after the work: keep the work
            failure = e
    scores = {"round": record["round"], "metrics": metrics,
              "analytic_metrics": analytic_metrics, "mlflow_run_id": run_id}
    if as_json:
        typer.echo(json.dumps(scores, indent=2))
    elif run_id:
        _print_mlflow_line(run_id)
    if failure is not None:
        from surrogate.errors import DataError
        from surrogate.io.tableio import write_table_atomic
        from surrogate.io.tracking import store_failure, tracking_uri

        saved = round_dir / SCORES_FILE
        _write_json_atomic(saved, scores)
        if matched is not None:
            write_table_atomic(matched, round_dir / MATCHED_FILE)
        raise DataError(
            f"logging the scored round to MLflow ({tracking_uri()}) failed "
            f"({store_failure(failure)}); its figures are saved in {saved} and its matched "
            f"runs in {round_dir / MATCHED_FILE}: score it again when the store works")


SCORES_FILE = "scores.json"
"""Where score-round keeps a round's figures when the tracking store fails after scoring."""
MATCHED_FILE = "matched_runs.csv"
"""... and the proposals matched with their measured runs."""


def _write_json_atomic(path: Path, data: Any) -> None:
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, default=str)
    os.replace(tmp, path)


def _print_round(record: dict[str, Any], metrics: dict[str, float],
                 analytic: dict[str, float] | None) -> None:
    """The round's figures, the proposing model's beside the analytic model's."""
    from rich.markup import escape
    from rich.table import Table

    from surrogate.cli.display import console as make_console

    console = make_console()
    info = record.get("model", {})
    who = ("the analytic model" if info.get("kind") == "analytic" else
           f"the learned model at {info.get('path')} (data {str(info.get('data_hash'))[:8]})")
    console.print(escape(f"round {record['round']}: proposed by {who}"), highlight=False)
    t = Table(title=f"Round {record['round']}, prospective (runs the model had not seen)")
    t.add_column("figure")
    t.add_column("proposing model", justify="right")
    if analytic is not None:
        t.add_column("analytic model", justify="right")
    for k, v in metrics.items():
        row = [k, _figure(k, v)]
        if analytic is not None:
            a = analytic.get(k, float("nan"))
            row.append(_figure(k, a) if k in ("mfu_mape", "status_accuracy",
                                              "interval_coverage") else "")
        t.add_row(*row)
    console.print(t)


def _print_mlflow_line(run_id: str) -> None:
    """Where MLflow shows the round's run."""
    from rich.markup import escape

    from surrogate.cli.display import console as make_console
    from surrogate.io.tracking import client, run_url, tracking_uri

    try:
        exp = client().get_run(run_id).info.experiment_id
        where = run_url(tracking_uri(), exp, run_id)
    except Exception:  # logged; only the page's address is unknown
        where = f"run {run_id} in {tracking_uri()}"
    make_console().print(escape(f"MLflow: {where}"), highlight=False)


def _figure(name: str, value: float) -> str:
    if value != value:
        return "-"
    if name in ("proposed", "measured"):
        return f"{value:.0f}"
    return f"{value:.1%}"


@app.command("heatmap")
def heatmap_cmd(
    out: Annotated[Path, typer.Option(help="Output path without suffix: writes OUT.png and OUT.html.")],
    models: Annotated[str, typer.Option(help="Comma-separated presets.")] = "1.34b,3.57b,8.86b,80b,469b",
    nodes: Annotated[str, typer.Option(help="Node counts (list or range).")] = "1,2,4,8,16,32,64",
    global_batch_seqs: Annotated[int, typer.Option(help="Global batch (sequences); the Playbook used 256 x 4096 tokens.")] = 256,
    gpu: GpuOpt = "H100-SXM-80GB",
    gpus_per_node: GpnOpt = 8,
    framework: FwOpt = "nanotron",
    zero: ZeroOpt = None,
    recompute: Annotated[str, typer.Option(help="Allowed recompute modes (Playbook: none).")] = "none",
    max_cp: Annotated[int, typer.Option(help="Largest cp (Playbook: 1).")] = 1,
    max_vpp: Annotated[int, typer.Option(help="Largest vpp (Playbook: 1).")] = 1,
    max_p_oom: OomOpt = 0.2,
    measured: Annotated[Path | None, typer.Option(help="Sweep table (or the Playbook CSV) for the measured figure beside.")] = None,
    model_dir: ModelDirOpt = None,
    analytic: AnalyticOpt = False,
) -> None:
    """Draw the Playbook's "best configuration by model size and nodes" from the surrogate."""
    from surrogate.config.presets import get_preset
    from surrogate.io.outputs import check_output_file
    from surrogate.layouts.heatmap import draw_png, measured_grid, predicted_grid, write_html
    from surrogate.layouts.search import Limits

    for suffix in (".png", ".html"):
        check_output_file(out.with_suffix(suffix), flag="--out")
    if measured is not None:  # before minutes of searching, not after
        from surrogate.io.table_files import check_table_file

        check_table_file(measured, flag="--measured")
    presets = [get_preset(name) for name in models.split(",")]
    options = {"gpu": gpu, "gpus_per_node": gpus_per_node,
               "frameworks": tuple(framework.split(",")), "zero_stages": _ints(zero, "--zero"),
               "recompute_modes": tuple(recompute.split(",")), "max_cp": max_cp,
               "max_vpp": max_vpp}
    from surrogate.progress import bars

    with bars() as report:
        grid = predicted_grid(presets, parse_nodes(nodes), global_batch_seqs=global_batch_seqs,
                              space_options=options,
                              model=None if analytic else (model_dir or "default"),
                              limits=Limits(max_p_oom=max_p_oom), progress=report)
    grids = {"predicted (surrogate search)": grid}
    if measured is not None:
        from surrogate.ingest.playbook import REQUIRED_COLUMNS, parse_playbook
        from surrogate.ingest.sweeps import unflagged
        from surrogate.io.tableio import read_table

        table = unflagged(read_table(measured))  # a flagged run's layout cannot be drawn
        if all(c in table.columns for c in REQUIRED_COLUMNS[:3]) and "status" in table.columns \
                and "num_nodes" not in table.columns:
            table, _ = parse_playbook(measured)
        meas = measured_grid(table)
        names = {get_preset(mm).name: mm for mm in meas["model"].unique()
                 if _is_preset(mm)}
        meas["model"] = [next((p.name for p in presets if names.get(p.name) == mm), mm)
                         for mm in meas["model"]]
        grids["measured"] = meas
    out.parent.mkdir(parents=True, exist_ok=True)
    png = draw_png(grids, out.with_suffix(".png"))
    page = write_html(grids, out.with_suffix(".html"),
                      title="Best configuration by model size and number of nodes")
    from surrogate.cli.display import model_line

    typer.echo(model_line(None if analytic else (model_dir or "default"), gpu, model_dir))
    typer.echo(f"wrote {png} and {page}")


def _is_preset(name: str) -> bool:
    from surrogate.config.presets import get_preset

    try:
        get_preset(name)
    except ConfigError:
        return False
    return True
