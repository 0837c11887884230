"""The Ultra-Scale Playbook results table (``bench_final2_mfu2.csv``) as sweep rows.

Mapping (``../shared/data/MANIFEST.md``; evidence in ``datasets/README.md``):

- ``status`` Success / OOM / Other -> completed / oom / fail (:mod:`surrogate.runs.status`).
- Model shape: the name's prefix (``8.86G``) gives the preset of
  :func:`surrogate.config.presets.playbook_model` (the table has no MLP width); hidden_size,
  num_layers, num_heads, vocab_size and seq_len come from the row and must agree with the name
  (13 runs use a 49,152 vocabulary, ``vocab49k`` in their name). ``num_kv_heads`` and
  ``tie_word_embeddings`` are empty on runs that did not complete: they come from the name
  (``_gqa8``: 8 key-value heads) and the MANIFEST (1.34G and 3.57G tie), checked against the
  row where it has them.
- Layout: dp, tp, pp, mbs, ``batch_accum`` -> grad_accum, zero_stage; ``tp_mode``
  REDUCE_SCATTER -> sequence_parallel; ``after_pp_fix`` -> framework_version ``pp-fix`` /
  ``pre-pp-fix``; ``pp_engine`` (nanotron's engine class: 1F1B on every completed run; empty
  on the runs that did not complete, read as nanotron's default, 1F1B) -> pp_schedule; nodes
  x 8 H100-SXM-80GB. The ``gbs`` column is not used: it counts sequences on completed runs and
  tokens on the others.
- Measurements: ``tok/s/gpu``; step_time_s = global batch tokens / (tok/s/gpu x GPUs), derived
  (the table has no step time); ``mfu`` (percent) -> mfu_reported; ``mTFLOPs`` ->
  tflops_per_gpu_reported; ``Mem Alloc (GB)`` / ``Mem Res (GB)`` -> peak_mem_*_gib: the values
  are GiB despite the header: every ZeRO-0 1.34G run at tp = pp = 1 says 25.07 whatever its
  dp and mbs (a static peak), and 20 bytes per parameter (bf16 weights and gradients, fp32
  master weights, fp32 accumulator, Adam) give 1,342,244,864 x 20 B = 25.00 GiB = 26.84 GB;
  in GB the 25.07 would be a fractional 18.7 bytes per parameter
  (``docs/data.md`` records the check).
  mfu is recomputed under the project's definition (:func:`surrogate.runs.sweeps.recompute_mfu`).
- run_id = ``<job_id>/<name>``: one Slurm job ran several configurations, so job_id repeats.
- date: the ``date`` column, else the timestamp in ``log_file``, else missing.
- How the runs are explained (:data:`surrogate.runs.sweeps.CONTEXT_COLUMNS`): profile
  :data:`PROFILE`, the cluster's shipped calibration; peak_mem_stage :data:`LOGGED_STAGE`;
  net_scale is the network each run measured, which
  :func:`surrogate.ingest.playbook_network.parse_playbook_runs` adds.

Rows that break a configuration rule (e.g. pp > num_layers, heads % tp != 0) are counted skips.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from surrogate.config.presets import playbook_model
from surrogate.config.training import TrainingConfig, coerce_column, config_from_flat
from surrogate.errors import ConfigError, DataError
from surrogate.ingest.nanotron import pp_schedule_of
from surrogate.ingest.report import IngestReport
from surrogate.io.input_files import check_input_file
from surrogate.io.tableio import check_csv_header
from surrogate.runs.status import status_from_label
from surrogate.runs.sweeps import (
    FLAG_COLUMN,
    flagged_row,
    frame_from_rows,
    sweep_row,
    with_context,
)

SOURCE = "hf_ultrascale_playbook"
HARDWARE = "8x H100 80GB SXM per node, NVLink inside a node, AWS EFA between nodes"
GPU = "H100-SXM-80GB"
GPUS_PER_NODE = 8
PROFILE = "hf-playbook-cluster"
"""The shipped calibration profile of the cluster the runs ran on: its fabric efficiency is
that cluster's measured curve over node count."""
LOGGED_STAGE = 0.0
"""The pipeline stage (0-based) of the rank whose peak memory the table records. The table is
written by world rank 0 alone (nanotron ``helpers.log_throughput``: ``write_to_csv`` where
``dist.get_rank(world_pg) == 0``, its ``Mem Res (GB)`` that rank's
``torch.cuda.max_memory_reserved()``), and nanotron's ``ParallelContext`` lays the world ranks
out as (ep, pp, dp, tp), so world rank 0 is on the first pipeline stage. A run whose most
loaded stage is another (the last, holding the logits) measured less than its peak: training
and calibration compare its measurement with the predicted memory of the first stage
(``surrogate.analytic.memory.logged_breakdown``), while out-of-memory and ``predict`` go by the
most loaded stage."""

REQUIRED_COLUMNS: tuple[str, ...] = (
    "job_id",
    "name",
    "nodes",
    "seq_len",
    "mbs",
    "batch_accum",
    "dp",
    "tp",
    "pp",
    "tp_mode",
    "hidden_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "vocab_size",
    "tie_word_embeddings",
    "zero_stage",
    "status",
    "tok/s/gpu",
    "mTFLOPs",
    "Mem Alloc (GB)",
    "Mem Res (GB)",
    "mfu",
    "after_pp_fix",
    "date",
    "log_file",
)
HEADER_MARKERS: tuple[str, ...] = ("job_id", "tok/s/gpu", "after_pp_fix")
"""Header fields that identify the format (used by :mod:`surrogate.ingest.detect`)."""

_LOG_TIMESTAMP = re.compile(r"-(\d{4}-\d{2}-\d{2})-(\d{2})-(\d{2})-(\d{2})-")
_MEASURED = {
    "tokens_per_s_per_gpu": "tok/s/gpu",
    "mfu_reported": "mfu",
    "tflops_per_gpu_reported": "mTFLOPs",
    "peak_mem_allocated_gib": "Mem Alloc (GB)",
    "peak_mem_reserved_gib": "Mem Res (GB)",
}


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _as_bool(name: str, value: Any) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "1", "1.0"):
        return True
    if text in ("false", "0", "0.0"):
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")


def read_table(path: Path, *, needs: tuple[str, ...], what: str, **read_csv: Any) -> pd.DataFrame:
    """The Playbook CSV at ``path`` with text-typed identity columns (``read_csv`` adds pandas
    options); DataError if it is missing, unreadable, or lacks a column of ``needs`` (``what``,
    e.g. "a Playbook table needs", opens that message)."""
    dtype = {"name": str, "log_file": str, "date": str, "status": str, **read_csv.pop("dtype", {})}
    if Path(path).exists():
        check_input_file(path, what="Playbook table", kind="table")
    try:
        header = check_csv_header(path)  # trailing commas must not shift the values
        raw: pd.DataFrame = pd.read_csv(
            path, dtype=dtype, usecols=range(len(header)) or None, **read_csv
        )
    except FileNotFoundError:
        raise DataError(f"Playbook table {str(path)!r} does not exist") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not a readable CSV table ({e})") from None
    missing = [c for c in needs if c not in raw.columns]
    if missing:
        raise DataError(f"{path}: {what} the columns {', '.join(missing)}")
    return raw


def run_date(row: dict[str, Any]) -> str | None:
    if not _missing(row["date"]) and str(row["date"]).strip():
        return str(row["date"]).strip()
    m = _LOG_TIMESTAMP.search(str(row["log_file"]))
    if m:
        return f"{m.group(1)} {m.group(2)}:{m.group(3)}:{m.group(4)}"
    return None


def _config(row: dict[str, Any]) -> TrainingConfig:
    """The row's configuration; ConfigError says which rule or which disagreement."""
    return config_from_flat(_values(row))


def _values(row: dict[str, Any]) -> dict[str, Any]:
    """The row's configuration columns, checked against its name; ConfigError says which
    disagreement (the configuration's own rules are :func:`config_from_flat`'s)."""
    name = str(row["name"])
    preset = playbook_model(name)
    for col in ("hidden_size", "num_layers", "num_heads"):
        if coerce_column(col, row[col]) != getattr(preset, col):
            raise ConfigError(
                f"{col} must match the model of the name {name!r} ({getattr(preset, col)}), "
                f"got {row[col]}"
            )
    kv_heads = preset.num_kv_heads
    if (
        not _missing(row["num_kv_heads"])
        and coerce_column("num_kv_heads", row["num_kv_heads"]) != kv_heads
    ):
        raise ConfigError(
            f"num_kv_heads must match the name {name!r} ({kv_heads}), got {row['num_kv_heads']}"
        )
    tied = preset.tie_embeddings
    if (
        not _missing(row["tie_word_embeddings"])
        and _as_bool("tie_word_embeddings", row["tie_word_embeddings"]) != tied
    ):
        raise ConfigError(
            f"tie_word_embeddings must match the model of {name!r} ({tied}), "
            f"got {row['tie_word_embeddings']}"
        )
    tp_mode = str(row["tp_mode"]).strip().upper()
    if tp_mode not in ("REDUCE_SCATTER", "ALL_REDUCE"):
        raise ConfigError(f"tp_mode must be REDUCE_SCATTER or ALL_REDUCE, got {row['tp_mode']!r}")
    return {
        "num_layers": row["num_layers"],
        "hidden_size": row["hidden_size"],
        "ffn_hidden_size": preset.ffn_hidden_size,
        "num_heads": row["num_heads"],
        "num_kv_heads": kv_heads,
        "vocab_size": row["vocab_size"],
        "seq_len": row["seq_len"],
        "tie_embeddings": tied,
        "gpu": GPU,
        "gpus_per_node": GPUS_PER_NODE,
        "num_nodes": row["nodes"],
        "dp": row["dp"],
        "tp": row["tp"],
        "pp": row["pp"],
        "mbs": row["mbs"],
        "grad_accum": row["batch_accum"],
        "zero_stage": row["zero_stage"],
        "sequence_parallel": tp_mode == "REDUCE_SCATTER",
        "pp_schedule": pp_schedule_of(row.get("pp_engine")),
        "framework": "nanotron",
        "framework_version": (
            "pp-fix" if _as_bool("after_pp_fix", row["after_pp_fix"]) else "pre-pp-fix"
        ),
    }


def parse_playbook(path: str | Path, *, flagged: bool = False) -> tuple[pd.DataFrame, IngestReport]:
    """Read the Playbook CSV into sweep rows; every row not taken is a counted skip.

    ``flagged``: a run whose layout the configuration validator rejects (a pipeline deeper than
    the layers, heads not divisible by tp) is kept, flagged with the reason
    (:data:`surrogate.runs.sweeps.FLAG_COLUMN`), instead of skipped: it was launched and it
    failed (or ran), which is data. ``surrogate ingest`` keeps them; readers that build
    configurations take the others."""
    p = Path(path)
    report = IngestReport(files=[str(p)])
    raw = read_table(p, needs=REQUIRED_COLUMNS, what="a Playbook table needs")
    rows: list[dict[str, Any]] = []
    flagged_runs = 0
    first_line: dict[str, int] = {}
    records: list[dict[str, Any]] = raw.to_dict("records")  # type: ignore[assignment]
    for i, row in enumerate(records):
        line = i + 2  # 1-based, after the header line
        report.rows_read += 1
        run_id = f"{row['job_id']}/{row['name']}"
        if run_id in first_line:
            report.skip(str(p), line, f"repeats run {run_id} of line {first_line[run_id]}")
            continue
        first_line[run_id] = line
        verdict = status_from_label(str(row["status"]), where="status")
        if verdict.status is None:
            report.skip(str(p), line, verdict.evidence)
            continue
        problem = None
        cfg: TrainingConfig | None = None
        try:
            cfg = config_from_flat(_values(row))
        except (ConfigError, ValueError, TypeError, OverflowError) as e:  # int(inf) overflows
            if not (flagged and isinstance(e, ConfigError) and _layout_rule(values_or_none(row))):
                report.skip(str(p), line, f"invalid configuration: {e}")
                continue
            cfg, problem = None, str(e)
        measured: dict[str, Any] = {}  # float or None
        bad = None
        for col, src in _MEASURED.items():
            value = pd.to_numeric(row[src], errors="coerce")
            if _missing(row[src]):
                measured[col] = None
            elif _missing(value) or not math.isfinite(value) or value <= 0:
                bad = f"{src} must be a positive number or empty, got {row[src]!r}"
                break
            else:
                measured[col] = float(value)
        if bad:
            report.skip(str(p), line, bad)
            continue
        tps = measured["tokens_per_s_per_gpu"]
        provenance: dict[str, Any] = {
            "status": verdict.status,
            "source": SOURCE,
            "run_id": run_id,
            "date": run_date(row),
            "hardware": HARDWARE,
            "model_name": str(row["name"]).split("_", 1)[0],
        }
        if cfg is None:
            assert problem is not None
            rows.append(
                with_context(
                    flagged_row(_values(row), problem, **provenance, **measured),
                    profile=PROFILE,
                    peak_mem_stage=LOGGED_STAGE,
                )
            )
            flagged_runs += 1
            continue
        if tps is not None:
            measured["step_time_s"] = cfg.batch_tokens / (tps * cfg.cluster.num_gpus)
        rows.append(
            with_context(
                sweep_row(cfg, **provenance, **measured),
                profile=PROFILE,
                peak_mem_stage=LOGGED_STAGE,
            )
        )
    if flagged_runs:
        report.note(
            f"kept {flagged_runs} run(s) whose layout the configuration validator "
            f"rejects, flagged in the {FLAG_COLUMN} column"
        )
    return frame_from_rows(rows, where=str(p)), report


def values_or_none(row: dict[str, Any]) -> dict[str, Any] | None:
    """:func:`_values` of the row, or None when the row itself is unreadable or disagrees
    with its name (a data error, never kept)."""
    try:
        return _values(row)
    except (ConfigError, ValueError, TypeError, OverflowError):
        return None


def _layout_rule(values: dict[str, Any] | None) -> bool:
    """Whether ``values`` are whole numbers that only break a rule between them (a layout the
    validator rejects), not a value that is unreadable, non-finite or out of its range."""
    if values is None:
        return False
    for key in (
        "num_layers",
        "hidden_size",
        "num_heads",
        "num_kv_heads",
        "vocab_size",
        "seq_len",
        "num_nodes",
        "dp",
        "tp",
        "pp",
        "mbs",
        "grad_accum",
        "zero_stage",
    ):
        try:
            number = float(values[key])
        except (TypeError, ValueError):
            return False
        if (
            not math.isfinite(number)
            or not number.is_integer()
            or number < (0 if key == "zero_stage" else 1)
            or number > (3 if key == "zero_stage" else 2**53)
        ):
            return False
    return True
