"""nanotron run logs as huggingface/bench_cluster writes them.

A bench_cluster run directory (``results/<model>/<n>_GPUS/dp-D_tp-T_pp-P_mbz-M/``) holds the
nanotron ``config.yaml``, the Slurm log ``log_<jobid>.out`` and a ``status.txt``. The log lines
this parser reads (nanotron ``trainer.py``; values in nanotron's ``human_format``: 3
significant digits, K/M/G = powers of 1000; memory in MiB = 2**20 bytes)::

    [default0]:07/03/2024 04:09:23 [INFO|DP=0|PP=0|TP=0|ip-26-0-160-192]: iteration: 4 / 20 |
        consumed_tokens: 4.19M | elapsed_time_per_iteration_ms: 13.9K | tokens_per_sec: 302K |
        tokens_per_sec_per_gpu: 4.72K | global_batch_size: 1.02K | lm_loss: 11.8 | ... |
        model_tflops_per_gpu: 42.8 | hardware_tflops_per_gpu: 42.8 | ...
    [default0]:07/03/2024 04:09:23 [INFO|...]:  Memory usage: 11953.55MiB. Peak allocated
        49174.38MiB. Peak reserved: 52976.00MiB

(one line each in the log). The configuration comes from ``config.yaml`` beside the log
(model_config, parallelism, tokens, optimizer), completed by ``ingest --set``; the node count
is the world size over ``gpus_per_node`` (8 unless given). The status comes from ``status.txt``
when present, else from the log (:func:`surrogate.runs.status.run_status`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from surrogate.errors import ConfigError, DataError
from surrogate.ingest.logrun import LogRun, human_number, read_log, read_optional, run_row, steady
from surrogate.ingest.report import IngestReport
from surrogate.io.input_files import read_input_text
from surrogate.runs.sweeps import frame_from_rows

SOURCE = "bench_cluster"
MARKERS: tuple[str, ...] = ("elapsed_time_per_iteration_ms", "tokens_per_sec_per_gpu")
"""Text that identifies a nanotron log (used by :mod:`surrogate.ingest.detect`)."""
LOGGER_PREFIX = re.compile(r"\[(?:INFO|WARNING|ERROR|DEBUG)\|DP=\d+\|PP=\d+\|TP=\d+")
"""nanotron's log-record prefix, present even in a run that died before its first
iteration."""

_ITERATION = re.compile(r"iteration: (\d+) / (\d+) \|(.*)$", re.MULTILINE)
_MEMORY = re.compile(
    r"Memory usage: ([\d.]+)MiB\. Peak allocated:? ([\d.]+)MiB\. Peak reserved:? ([\d.]+)MiB"
)
_DATE = re.compile(r"(\d{2})/(\d{2})/(\d{4}) (\d{2}:\d{2}:\d{2})")
_MIB_PER_GIB = 1024.0


def _get(tree: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(tree, dict) or k not in tree:
            return None
        tree = tree[k]
    return tree


PP_ENGINES: dict[str, str] = {
    "1f1b": "1f1b",
    "oneforwardonebackwardpipelineengine": "1f1b",
    "afab": "afab",
    "allforwardallbackwardpipelineengine": "afab",
}
"""nanotron's pipeline engines (``ParallelismArgs.pp_engine``: the config's short name or the
engine's class name, as the Playbook table writes it) -> ``pp_schedule``. nanotron's default
(none given) is 1F1B (``ParallelismArgs.__post_init__``); the Playbook's runs that did not
complete leave the column empty."""


def pp_schedule_of(engine: Any) -> str:
    """``pp_schedule`` of a nanotron ``pp_engine`` value (:data:`PP_ENGINES`); missing: 1f1b."""
    if engine is None or (isinstance(engine, float) and engine != engine) or engine == "":
        return "1f1b"
    key = str(engine).strip().lower()
    if key not in PP_ENGINES:
        raise ConfigError(
            "pp_engine must be one of 1f1b, afab, "
            "OneForwardOneBackwardPipelineEngine or "
            f"AllForwardAllBackwardPipelineEngine, got {engine!r}"
        )
    return PP_ENGINES[key]


def config_values(config: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """Configuration columns from a nanotron config (parsed YAML), and its train_steps."""
    mc = _get(config, "model", "model_config") or {}
    par = _get(config, "parallelism") or {}
    tok = _get(config, "tokens") or {}
    names = {
        "num_layers": mc.get("num_hidden_layers"),
        "hidden_size": mc.get("hidden_size"),
        "ffn_hidden_size": mc.get("intermediate_size"),
        "num_heads": mc.get("num_attention_heads"),
        "num_kv_heads": mc.get("num_key_value_heads"),
        "vocab_size": mc.get("vocab_size"),
        "tie_embeddings": mc.get("tie_word_embeddings"),
        "seq_len": tok.get("sequence_length"),
        "mbs": tok.get("micro_batch_size"),
        "grad_accum": tok.get("batch_accumulation_per_replica"),
        "dp": par.get("dp"),
        "tp": par.get("tp"),
        "pp": par.get("pp"),
        "zero_stage": _get(config, "optimizer", "zero_stage"),
    }
    out = {k: v for k, v in names.items() if v is not None}
    if par.get("tp_mode") is not None:
        out["sequence_parallel"] = str(par["tp_mode"]).upper().endswith("REDUCE_SCATTER")
    out["pp_schedule"] = pp_schedule_of(par.get("pp_engine"))
    if par.get("recompute_layer") is not None:
        out["recompute"] = "full" if par["recompute_layer"] else "none"
    dtype = str(_get(config, "model", "dtype") or "bfloat16")
    if "bfloat16" not in dtype:
        raise ConfigError(
            f"model dtype {dtype!r} is not modelled: the surrogate models bf16 "
            f"mixed precision (nanotron's bfloat16)"
        )
    out["dtype"] = "bf16"
    out["framework"] = "nanotron"
    steps = tok.get("train_steps")
    return out, int(steps) if steps is not None else None


def _read_config(log: Path) -> tuple[dict[str, Any], int | None, str | None]:
    """Values from ``config.yaml`` beside the log; a problem is returned as a reason."""
    path = log.parent / "config.yaml"
    if not path.exists():
        return {}, None, None
    import yaml

    try:
        tree = yaml.safe_load(read_input_text(path, what="nanotron config", kind="config"))
    except DataError as e:
        return {}, None, str(e)
    except yaml.YAMLError as e:
        return {}, None, f"{path}: not valid YAML ({str(e).splitlines()[0]})"
    if not isinstance(tree, dict):
        return {}, None, f"{path}: a nanotron config holds a mapping"
    try:
        values, steps = config_values(tree)
    except ConfigError as e:
        return {}, None, f"{path}: {e}"
    return values, steps, None


def _fields(tail: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in tail.split("|"):
        key, sep, value = part.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_nanotron(
    path: str | Path, *, given: dict[str, Any] | None = None
) -> tuple[pd.DataFrame, IngestReport]:
    """One bench_cluster run (its log) as a sweep row; unusable runs are counted skips."""
    log = Path(path)
    report = IngestReport(files=[str(log)])
    text = read_log(log)
    report.rows_read = 1
    found, steps, problem = _read_config(log)
    if problem:
        report.skip(str(log), None, problem)
        return frame_from_rows([]), report
    tps: list[float] = []
    step_ms: list[float] = []
    tflops: list[float] = []
    last_iteration, expected = 0, steps
    for m in _ITERATION.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        fields = _fields(m.group(3))
        try:
            it_tps = human_number(fields["tokens_per_sec_per_gpu"])
            it_ms = human_number(fields["elapsed_time_per_iteration_ms"])
            it_tflops = (
                human_number(fields["model_tflops_per_gpu"])
                if "model_tflops_per_gpu" in fields
                else None
            )
        except (KeyError, ValueError) as e:
            report.skip(str(log), line, f"iteration line without a readable {e}")
            continue
        last_iteration = max(last_iteration, int(m.group(1)))
        expected = expected if expected is not None else int(m.group(2))
        tps.append(it_tps)
        step_ms.append(it_ms)
        if it_tflops is not None:
            tflops.append(it_tflops)
    peaks = [(float(a), float(r)) for _, a, r in _MEMORY.findall(text)]
    date = _DATE.search(text)
    step = steady(step_ms)
    run = LogRun(
        path=log,
        log_text=text,
        default_source=SOURCE,
        run_id=f"{log.parent.name}/{log.stem}",
        found=found,
        iterations_logged=last_iteration,
        iterations_expected=expected,
        status_file_text=read_optional(log.parent / "status.txt"),
        tokens_per_s_per_gpu=steady(tps),
        step_time_s=None if step is None else step / 1000,
        measurements={
            "tflops_per_gpu_reported": steady(tflops),
            "peak_mem_allocated_gib": max(a for a, _ in peaks) / _MIB_PER_GIB if peaks else None,
            "peak_mem_reserved_gib": max(r for _, r in peaks) / _MIB_PER_GIB if peaks else None,
        },
        date=f"{date.group(3)}-{date.group(1)}-{date.group(2)} {date.group(4)}" if date else None,
    )
    try:
        row = run_row(run, given or {}, report)
    except DataError as e:
        report.skip(str(log), None, str(e))
        row = None
    return frame_from_rows([row] if row else [], where=str(log)), report
