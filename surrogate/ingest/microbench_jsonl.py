"""The project's own microbenchmark output (``microbench/``): JSON lines -> microbenchmark table.

One JSON object per line, written as soon as it is measured (so a crash keeps what came
before). Fields (schema ``surrogate.microbench/1``):

- ``schema``, ``status`` (``ok``, ``timeout`` or ``error``) and ``message`` (why it failed);
- the measurement: ``op``, ``dtype``, ``m``, ``n``, ``k``, ``batch`` (GEMM), ``size_bytes``,
  ``group_size``, ``nodes`` (that the group spans), ``layout``, ``in_place`` (collectives),
  ``time_s``, ``flops_per_s``,
  ``algbw_bytes_per_s``, ``busbw_bytes_per_s`` (null where they do not apply);
- ``fingerprint``: ``gpu_name``, ``gpu_count``, ``world_size``, ``nodes``, ``driver``,
  ``cuda``, ``nccl``, ``torch``, ``backend``, ``hostname_hash``, ``date``, ``run_id``.

Lines that are not valid JSON, not of this schema, or record a failure are skipped and counted
with their line number and reason (a timeout's message is kept in the reason).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pandas as pd

from surrogate.ingest.report import IngestReport
from surrogate.io.input_files import read_input_text
from surrogate.runs.microbench_table import hardware_from_device_name, rows_to_microbench

SOURCE: Final = "microbench"
RECORD_SCHEMA: Final = "surrogate.microbench/1"
FINGERPRINT_FIELDS: Final[tuple[str, ...]] = (
    "gpu_name",
    "gpu_count",
    "world_size",
    "nodes",
    "driver",
    "cuda",
    "nccl",
    "torch",
    "backend",
    "hostname_hash",
    "date",
    "run_id",
)
STATUSES: Final[tuple[str, ...]] = ("ok", "timeout", "error")


def _num(v: Any) -> float:
    return float("nan") if v is None else float(v)


def record_to_row(rec: dict[str, Any], *, file: str) -> dict[str, object]:
    """One ``ok`` record as a table row; raises KeyError/TypeError/ValueError if malformed."""
    fp = rec["fingerprint"]
    if not isinstance(fp, dict):
        raise TypeError("fingerprint must be an object")
    row: dict[str, object] = {
        "op": str(rec["op"]),
        "dtype": str(rec["dtype"]),
        "layout": rec.get("layout"),
        "in_place": rec.get("in_place"),
        "nodes": _num(rec["nodes"] if rec.get("nodes") is not None else fp["nodes"]),
        "hardware": hardware_from_device_name(str(fp["gpu_name"])),
        "source": SOURCE,
        "run_id": str(fp["run_id"]),
        "file": file,
        "date": str(fp.get("date", ""))[:10],
        "detail": f"backend={fp.get('backend')} torch={fp.get('torch')} "
        f"cuda={fp.get('cuda')} nccl={fp.get('nccl')}",
    }
    for name in (
        "m",
        "n",
        "k",
        "batch",
        "size_bytes",
        "group_size",
        "time_s",
        "flops_per_s",
        "algbw_bytes_per_s",
        "busbw_bytes_per_s",
    ):
        row[name] = _num(rec.get(name))
    return row


def parse_microbench_jsonl(path: str | Path) -> tuple[pd.DataFrame, IngestReport]:
    """Read one JSON-lines file written by ``microbench``; raises DataError if unreadable."""
    p = Path(path)
    lines = read_input_text(p, what="microbenchmark file", kind="log").splitlines()
    report = IngestReport(files=[str(p)])
    rows: list[dict[str, object]] = []
    for lineno, ln in enumerate(lines, start=1):
        if not ln.strip():
            continue
        try:
            rec = json.loads(ln)
        except json.JSONDecodeError as e:
            report.skip(str(p), lineno, f"not valid JSON ({e.msg}; truncated line?)")
            continue
        if not isinstance(rec, dict) or rec.get("schema") != RECORD_SCHEMA:
            report.skip(str(p), lineno, f"not a {RECORD_SCHEMA} record")
            continue
        status = rec.get("status")
        if status != "ok":
            what = (
                f"{rec.get('op')} size_bytes={rec.get('size_bytes')} "
                f"group_size={rec.get('group_size')}"
            )
            report.skip(str(p), lineno, f"status {status}: {what}: {rec.get('message', '')}")
            continue
        try:
            rows.append(record_to_row(rec, file=p.name))
        except (KeyError, TypeError, ValueError) as e:
            report.skip(str(p), lineno, f"record missing or bad field: {e}")
            continue
        report.rows_read += 1
    return rows_to_microbench(rows), report
