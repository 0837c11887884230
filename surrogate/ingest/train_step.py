"""The project's own single-GPU training steps (``microbench/train_step.py``): JSON lines ->
sweep rows.

One JSON object per try (schema ``surrogate.train_step/1``): ``status`` (``ok``, ``oom``,
``timeout``, ``error``), ``message``, ``model_name``, ``config`` (the sweep table's
configuration columns), the outcome (``step_time_s``, ``tokens_per_s_per_gpu``,
``peak_mem_allocated_gib``, ``peak_mem_reserved_gib`` over the timed steps) and
``fingerprint`` (:mod:`microbench.fingerprint`).

Mapping: ``ok`` -> completed, ``oom`` -> oom, ``timeout`` -> timeout, ``error`` -> fail (the
message is the reason; such a try measured nothing). ``gpu`` is the fingerprint's device name
in the hardware table's key (``NVIDIA H100 80GB HBM3`` -> ``H100-SXM-80GB``). Records of the
first campaign (2026-11-23) wrote a dense model as ``num_experts`` 1, ``experts_topk`` 1; the
configuration's rule is 0 and 0 (dense), so 1 expert of top 1 is read as dense: the same model.
Provenance: source ``surrogate_h100`` for an H100 (else ``surrogate_<gpu>``), run_id
``<fingerprint run_id>/<line>``, date the fingerprint's, hardware
``<device name>, driver <driver>, CUDA <cuda>, torch <torch>``; an H100's runs are explained
under :data:`OWN_H100_PROFILE` (their ``profile`` column), the GEMMs measured on the project's
H100.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pandas as pd

from surrogate.config.training import config_from_flat
from surrogate.errors import ConfigError
from surrogate.ingest.report import IngestReport
from surrogate.io.input_files import read_input_text
from surrogate.runs.microbench_table import hardware_from_device_name
from surrogate.runs.sweeps import frame_from_rows, sweep_row, with_context

RECORD_SCHEMA: Final = "surrogate.train_step/1"
STATUS_MAP: Final[dict[str, str]] = {
    "ok": "completed",
    "oom": "oom",
    "timeout": "timeout",
    "error": "fail",
}
OWN_H100_PROFILE: Final = "h100-own-measured"
"""The shipped calibration profile of the project's own H100 (``datasets/h100``)."""
OUTCOME_FIELDS: Final[tuple[str, ...]] = (
    "step_time_s",
    "tokens_per_s_per_gpu",
    "peak_mem_allocated_gib",
    "peak_mem_reserved_gib",
)


def is_train_step_head(head: str) -> bool:
    """Whether text from the start of a file is a train-step record."""
    first = head.lstrip().split("\n", 1)[0]
    return f'"schema": "{RECORD_SCHEMA}"' in first


def source_for(gpu: str) -> str:
    """``surrogate_h100`` for an H100, else ``surrogate_<gpu key>``."""
    key = gpu.lower()
    return "surrogate_h100" if key.startswith("h100") else "surrogate_" + key


def _row(rec: dict[str, Any], *, line: int) -> dict[str, Any]:

    if rec.get("schema") != RECORD_SCHEMA:
        raise ValueError(f"schema must be {RECORD_SCHEMA!r}, got {rec.get('schema')!r}")
    status = STATUS_MAP.get(str(rec.get("status")))
    if status is None:
        raise ValueError(
            f"status must be one of {', '.join(STATUS_MAP)}, got {rec.get('status')!r}"
        )
    fp = rec["fingerprint"]
    flat = dict(rec["config"])
    if flat.get("num_experts") == 1 and flat.get("experts_topk") == 1:
        flat.update(num_experts=0, experts_topk=0)  # a dense model (module docstring)
    flat["gpu"] = hardware_from_device_name(str(fp["gpu_name"]))
    cfg = config_from_flat(flat)
    measured = {k: rec.get(k) for k in OUTCOME_FIELDS} if status == "completed" else {}
    hardware = (
        f"{fp['gpu_name']}, driver {fp.get('driver')}, CUDA {fp.get('cuda')}, "
        f"torch {fp.get('torch')}"
    )
    source = source_for(cfg.cluster.gpu)
    row = sweep_row(
        cfg,
        status=status,
        source=source,
        run_id=f"{fp['run_id']}/{line}",
        date=str(fp.get("date", ""))[:19] or None,
        hardware=hardware,
        model_name=rec.get("model_name"),
        **measured,
    )
    return with_context(row, profile=OWN_H100_PROFILE if source == "surrogate_h100" else None)


def parse_train_step_jsonl(path: str | Path) -> tuple[pd.DataFrame, IngestReport]:
    """Read one file of train-step records; malformed lines are counted skips with their line
    number and reason; raises DataError if the file cannot be read."""

    p = Path(path)
    lines = read_input_text(p, what="train-step file", kind="log").splitlines()
    report = IngestReport(files=[str(p)])
    rows = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        report.rows_read += 1
        try:
            rows.append(_row(json.loads(text), line=number))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, ConfigError) as e:
            report.skip(str(p), number, f"not a valid train-step record: {e}")
    return frame_from_rows(rows, where=str(p)), report
