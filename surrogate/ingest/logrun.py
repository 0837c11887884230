"""What the three training-log parsers share: reading a log, steady-state figures, and turning
one run's configuration, status and measurements into a sweep row (or a counted skip).

Steady state: frameworks log per iteration (or per logging interval); the first logged one
carries warm-up (allocator growth, compilation, NCCL setup), so a run's throughput and step
time are the median over the logged iterations after the first (the only one if just one).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from surrogate.errors import DataError
from surrogate.ingest.report import IngestReport
from surrogate.ingest.runconfig import build_config, merge, place_on_nodes
from surrogate.io.input_files import read_input_bytes, read_input_text
from surrogate.runs.status import run_status
from surrogate.runs.sweeps import sweep_row, with_context

_HUMAN = re.compile(r"^\s*(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*([KMGTPE]?)\s*$")
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def human_number(text: str) -> float:
    """``"4.72K"`` -> 4720.0: nanotron's ``human_format`` (3 significant digits, powers of
    1000), also plain numbers with thousands separators (``"6,530"``)."""
    m = _HUMAN.match(text.replace(",", ""))
    if m is None:
        raise ValueError(f"not a number: {text!r}")
    return float(m.group(1)) * _SCALE[m.group(2)]


def steady(values: Sequence[float]) -> float | None:
    """Median of the values after the first (warm-up); the one value if only one; None if
    none."""
    if not values:
        return None
    return float(statistics.median(values[1:] if len(values) > 1 else values))


def read_log(path: Path) -> str:
    """The log's text, ANSI colour codes removed; DataError if it cannot be read."""
    raw = read_input_bytes(path, what="log", kind="log")
    return ANSI.sub("", raw.decode("utf-8", errors="replace"))


def read_optional(path: Path) -> str | None:
    """A small side file's text (status.txt), or None if absent."""
    if not path.exists():
        return None
    return read_input_text(path, what="status file", kind="config", errors="replace")


@dataclass(kw_only=True)
class LogRun:
    """What a parser found about one run."""

    path: Path
    log_text: str
    run_id: str
    default_source: str
    found: dict[str, Any]
    """Configuration values the run's files state (CONFIG_COLUMNS names, or ``model``)."""
    iterations_logged: int
    iterations_expected: int | None = None
    status_file_text: str | None = None
    tokens_per_s_per_gpu: float | None = None
    step_time_s: float | None = None
    measurements: dict[str, float | None] = field(default_factory=dict)
    """Other measurements (:data:`surrogate.runs.sweeps.MEASUREMENT_COLUMNS` names)."""
    date: str | None = None
    global_batch_tokens: int | None = None
    """Tokens per optimizer step as the log states it, when it does (checked)."""


def run_row(run: LogRun, given: Mapping[str, Any], report: IngestReport) -> dict[str, Any] | None:
    """The sweep row of ``run``, or None after recording a skip that says why."""
    where = str(run.path)
    try:
        values = merge(run.found, given, where=where)
        world = 1
        for degree in ("dp", "tp", "pp", "cp"):
            world *= int(values.get(degree, 1))
        place_on_nodes(values, world)
        cfg = build_config(values, where=where)
    except (DataError, ValueError) as e:
        message = str(e).removeprefix(f"{where}: ")
        report.skip(where, None, f"no valid configuration: {message}")
        return None
    if run.global_batch_tokens is not None and run.global_batch_tokens != cfg.batch_tokens:
        report.skip(
            where,
            None,
            (
                f"the log's global batch ({run.global_batch_tokens} tokens) must equal dp x "
                f"grad_accum x mbs x seq_len of the configuration ({cfg.batch_tokens})"
            ),
        )
        return None
    verdict = run_status(
        log_text=run.log_text,
        iterations_logged=run.iterations_logged,
        iterations_expected=run.iterations_expected,
        status_file_text=run.status_file_text,
    )
    if verdict.status is None:
        report.skip(where, None, verdict.evidence)
        return None
    tps, step = run.tokens_per_s_per_gpu, run.step_time_s
    for name, value in (("tokens/s per GPU", tps), ("step time", step)):
        if value is not None and not (math.isfinite(value) and value > 0):
            # a zero throughput (a stalled or mis-timed run) is no measurement, and the other
            # figure cannot be derived from it
            report.skip(where, None, f"the log's {name} must be a positive number, got {value:g}")
            return None
    gpus = cfg.cluster.num_gpus
    if tps is None and step is not None:
        tps = cfg.batch_tokens / (step * gpus)
    if step is None and tps is not None:
        step = cfg.batch_tokens / (tps * gpus)
    source = str(given.get("source") or run.default_source)
    row = sweep_row(
        cfg,
        status=verdict.status,
        source=source,
        run_id=run.run_id,
        date=str(given.get("date") or run.date) if (given.get("date") or run.date) else None,
        hardware=str(
            given.get("hardware") or f"{cfg.cluster.gpus_per_node}x {cfg.cluster.gpu} per node"
        ),
        model_name=str(values["model_name"]) if values.get("model_name") else None,
        tokens_per_s_per_gpu=tps,
        step_time_s=step,
        **run.measurements,
    )
    stage, scale = given.get("peak_mem_stage"), given.get("net_scale")
    return with_context(
        row,
        profile=given.get("profile"),  # what the user knows: --set
        peak_mem_stage=None if stage is None else float(stage),
        net_scale=None if scale is None else float(scale),
    )
