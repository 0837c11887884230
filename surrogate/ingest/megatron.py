"""Megatron-LM training logs.

Megatron prints its arguments at start-up (``megatron/training/arguments.py``
``_print_args``)::

    ------------------------ arguments ------------------------
      micro_batch_size ................................ 1
      tensor_model_parallel_size ...................... 8
      ...
    -------------------- end of arguments ---------------------

then, every ``--log-interval`` iterations (``training.py`` ``training_log``), one line::

     [2024-05-01 12:00:00] iteration       20/     100 | consumed samples:        10240 |
       elapsed time per iteration (ms): 5432.1 | throughput per GPU (TFLOP/s/GPU): 401.2 |
       learning rate: 1.000000E-05 | global batch size:   512 | lm loss: 1.023456E+01 | ...

and once a memory report (``report_memory``; "MB" there is 2**20 bytes)::

    [Rank 0] (after 20 iterations) memory (MB) | allocated: 12345.6 | max allocated: 23456.7 |
      reserved: 25000.0 | max reserved: 25000.0

The configuration comes from the arguments block, completed by ``ingest --set`` (all of it
from ``--set`` when the block is missing). Mapping: num_attention_heads -> num_heads,
num_query_groups -> num_kv_heads (with group_query_attention), swiglu False -> gated_mlp
False (GELU) with ffn_hidden_size its SwiGLU-equivalent width, 2/3 of Megatron's (a block
without ``swiglu``, an excerpt or a Megatron older than the flag, reads as SwiGLU; ``--set
gated_mlp=false`` says otherwise), padded_vocab_size ->
vocab_size, untie_embeddings_and_output_weights -> not tie_embeddings, data/tensor/pipeline/
context/expert parallel sizes -> dp/tp/pp/cp/ep, virtual_pipeline_model_parallel_size -> vpp,
grad_accum = global_batch_size / (micro_batch_size x dp), use_distributed_optimizer -> ZeRO-1,
its num_distributed_optimizer_instances (partial distributed optimizer) -> dp_replicate,
recompute_granularity -> recompute (full with recompute_method block: recompute_num_layers x
vpp -> recompute_layers; uniform units of more than one layer are skipped), fp8 -> dtype
(bf16 otherwise; fp16, whose tensor-core peak and bytes are bf16's, also reads as bf16; a run
with neither bf16 nor fp16, fp32, is skipped with the reason).
Megatron logs no tokens/s: tokens/s/GPU = global batch size x seq_length / (iteration time x
GPUs).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from surrogate.config.model import swiglu_equivalent_width
from surrogate.errors import DataError
from surrogate.ingest.logrun import LogRun, read_log, read_optional, run_row, steady
from surrogate.ingest.report import IngestReport
from surrogate.runs.sweeps import frame_from_rows

SOURCE = "megatron"
MARKERS: tuple[str, ...] = ("elapsed time per iteration (ms)", "end of arguments")
_ARGS = re.compile(r"-+ arguments -+\n(.*?)\n-+ end of arguments -+", re.DOTALL)
_ARG = re.compile(r"^\s*(\w+) \.+ (.*?)\s*$")
_ITERATION = re.compile(r"iteration\s+(\d+)/\s*(\d+)\s*\|(.*)$", re.MULTILINE)
_MEMORY = re.compile(
    r"memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+) \| "
    r"reserved: ([\d.]+) \| max reserved: ([\d.]+)"
)
_DATE = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\]")
_MIB_PER_GIB = 1024.0

_DIRECT = {
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "ffn_hidden_size": "ffn_hidden_size",
    "num_attention_heads": "num_heads",
    "padded_vocab_size": "vocab_size",
    "seq_length": "seq_len",
    "micro_batch_size": "mbs",
    "data_parallel_size": "dp",
    "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp",
    "context_parallel_size": "cp",
    "expert_model_parallel_size": "ep",
    "virtual_pipeline_model_parallel_size": "vpp",
    "num_experts": "num_experts",
    "sequence_parallel": "sequence_parallel",
}
_MOE_ONLY = {"moe_router_topk": "experts_topk", "moe_ffn_hidden_size": "moe_ffn_hidden_size"}
"""Read only when num_experts is set: Megatron prints moe_router_topk (default 2) for dense
models too."""


def _none(value: str | None) -> bool:
    return value is None or value.strip() in ("None", "")


def parse_arguments(text: str) -> dict[str, str]:
    """The ``name ..... value`` pairs of Megatron's arguments block (empty if none)."""
    m = _ARGS.search(text)
    if m is None:
        return {}
    out: dict[str, str] = {}
    for line in m.group(1).splitlines():
        a = _ARG.match(line)
        if a:
            out[a.group(1)] = a.group(2)
    return out


def config_values(args: dict[str, str]) -> tuple[dict[str, Any], int | None]:
    """Configuration columns from Megatron's arguments, and train_iters."""
    out: dict[str, Any] = {"framework": "megatron"}
    for arg, col in _DIRECT.items():
        if not _none(args.get(arg)):
            out[col] = args[arg]
    if "num_experts" in out:
        for arg, col in _MOE_ONLY.items():
            if not _none(args.get(arg)):
                out[col] = args[arg]
    if args.get("swiglu") == "False":  # Megatron's MLP without --swiglu: GELU, two matrices
        out["gated_mlp"] = False
        if "ffn_hidden_size" in out:
            out["ffn_hidden_size"] = swiglu_equivalent_width(int(out["ffn_hidden_size"]))
    if _none(args.get("padded_vocab_size")) and not _none(args.get("vocab_size")):
        out["vocab_size"] = args["vocab_size"]
    if args.get("group_query_attention") == "True" and not _none(args.get("num_query_groups")):
        out["num_kv_heads"] = args["num_query_groups"]
    if not _none(args.get("untie_embeddings_and_output_weights")):
        out["tie_embeddings"] = args["untie_embeddings_and_output_weights"] != "True"
    if not _none(args.get("use_distributed_optimizer")):
        out["zero_stage"] = 1 if args["use_distributed_optimizer"] == "True" else 0
        copies = args.get("num_distributed_optimizer_instances")
        if out["zero_stage"] == 1 and not _none(copies):
            out["dp_replicate"] = copies
    if "recompute_granularity" in args:
        gran = args["recompute_granularity"]
        out["recompute"] = "none" if _none(gran) else gran
        if gran == "full":
            out.update(_full_recompute_values(args))
    if args.get("bf16") == "False" and args.get("fp16") == "False":
        raise DataError(
            "the run trained in fp32 (bf16 and fp16 both False), which the surrogate does not model"
        )
    if "fp8" in args:
        out["dtype"] = "bf16" if _none(args["fp8"]) else "fp8"
    try:
        gbs, mbs, dp = (
            int(args[k]) for k in ("global_batch_size", "micro_batch_size", "data_parallel_size")
        )
    except (KeyError, ValueError):
        pass
    else:
        if mbs * dp and gbs % (mbs * dp) == 0:
            out["grad_accum"] = gbs // (mbs * dp)
    iters = args.get("train_iters")
    return out, None if _none(iters) else int(str(iters))


def _full_recompute_values(args: dict[str, str]) -> dict[str, Any]:
    """``recompute_layers`` of full recomputation (``TransformerBlock._checkpointed_forward``):
    the block method checkpoints the first ``recompute_num_layers`` layers of each model chunk
    (x vpp per rank; 0, every layer, where that is all of them); the uniform method with 1
    layer per unit checkpoints each layer. Uniform units of several layers (one input kept per
    unit, the unit's layers recomputed together) are not modelled: DataError. A log without
    ``recompute_method`` (Megatron-LM before it, whose --checkpoint-activations checkpointed
    every layer) reads as every layer."""
    method = args.get("recompute_method")
    count = args.get("recompute_num_layers")
    if _none(method) or _none(count):
        return {}
    try:
        n = int(str(count))
    except ValueError:
        raise DataError(f"recompute_num_layers must be an integer, got {count!r}") from None
    if method == "uniform":
        if n > 1:
            raise DataError(
                f"recompute_method uniform with recompute_num_layers {n} checkpoints units of "
                f"{n} layers, which is not modelled; the surrogate models every layer "
                "(uniform, 1) and the first N layers of each stage (block, N)"
            )
        return {}
    if method != "block":
        raise DataError(f"recompute_method must be uniform or block, got {method!r}")
    virtual = args.get("virtual_pipeline_model_parallel_size")
    try:
        layers, pp = int(args["num_layers"]), int(args.get("pipeline_model_parallel_size", 1))
        vpp = 1 if _none(virtual) else int(str(virtual))
    except (KeyError, ValueError):
        raise DataError(
            "recompute_method block needs integer num_layers, "
            "pipeline_model_parallel_size and virtual_pipeline_model_parallel_size "
            "in the arguments"
        ) from None
    per_chunk = layers // (pp * vpp)
    return {} if n >= per_chunk else {"recompute_layers": n * vpp}


def _fields(tail: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in tail.split("|"):
        key, sep, value = part.rpartition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_megatron(
    path: str | Path, *, given: dict[str, Any] | None = None
) -> tuple[pd.DataFrame, IngestReport]:
    """One Megatron-LM run (its log) as a sweep row; unusable runs are counted skips."""
    log = Path(path)
    given = dict(given or {})
    report = IngestReport(files=[str(log)], rows_read=1)
    text = read_log(log)
    args = parse_arguments(text)
    try:
        found, iters = config_values(args)
    except DataError as e:
        report.skip(str(log), None, str(e))
        return frame_from_rows([]), report
    step_s: list[float] = []
    tflops: list[float] = []
    batch_seqs: list[int] = []
    last, expected = 0, iters
    for m in _ITERATION.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        fields = _fields(m.group(3))
        try:
            ms = float(fields["elapsed time per iteration (ms)"])
        except (KeyError, ValueError):
            report.skip(
                str(log),
                line,
                "iteration line without a readable 'elapsed time per iteration (ms)'",
            )
            continue
        last = max(last, int(m.group(1)))
        expected = expected if expected is not None else int(m.group(2))
        step_s.append(ms / 1000)
        if "throughput per GPU (TFLOP/s/GPU)" in fields:
            tflops.append(float(fields["throughput per GPU (TFLOP/s/GPU)"]))
        if "global batch size" in fields:
            batch_seqs.append(int(float(fields["global batch size"])))
    mem = [tuple(map(float, g)) for g in _MEMORY.findall(text)]
    date = _DATE.search(text)
    seq_len = found.get("seq_len", given.get("seq_len"))
    batch_tokens = None
    if batch_seqs and seq_len is not None:
        batch_tokens = batch_seqs[-1] * int(seq_len)
    run = LogRun(
        path=log,
        log_text=text,
        default_source=SOURCE,
        run_id=f"{log.parent.name}/{log.stem}",
        found=found,
        iterations_logged=last,
        iterations_expected=expected,
        status_file_text=read_optional(log.parent / "status.txt"),
        step_time_s=steady(step_s),
        global_batch_tokens=batch_tokens,
        measurements={
            "tflops_per_gpu_reported": steady(tflops),
            "peak_mem_allocated_gib": max(r[1] for r in mem) / _MIB_PER_GIB if mem else None,
            "peak_mem_reserved_gib": max(r[3] for r in mem) / _MIB_PER_GIB if mem else None,
        },
        date=date.group(1) if date else None,
    )
    row = run_row(run, given, report)
    return frame_from_rows([row] if row else [], where=str(log)), report
