"""MosaicML llm-foundry's MPT throughput tables (``scripts/train/benchmarking/README.md``) as
sweep rows: another cluster, another framework (Composer on PyTorch FSDP).

Source and shapes: ``../shared/data/MANIFEST.md``, section ``sweeps/llmfoundry_mpt``
(mosaicml/llm-foundry at commit 4952183, Apache-2.0). Every Markdown table whose header holds
:data:`REQUIRED_COLUMNS` is read; the ``##`` heading above it names the hardware (e.g. "A100
80GB with 1600 Gbps node-node interconnect (RoCE)") and becomes ``hardware``.

Mapping (also in ``datasets/README.md``, section "llm-foundry MPT tables"):

- Model: ``Model`` (125m ... 70b) gives d_model / n_layers / n_heads (:data:`MPT_SHAPES`: the
  MANIFEST's, 125m 768/12/12 and 350m 1024/24/16 and 760m 1536/24/12 from the
  ``mpt-*.yaml`` files), vocab 50,368, tied embeddings, num_kv_heads = num_heads, seq_len =
  ``SeqLen (T)``. MPT's MLP is GELU with width 4 h in two matrices (8 h^2 parameters); the
  analytic model's is SwiGLU (three matrices, 3 h f). The equivalent SwiGLU width is
  f = round(8 h / 3) (:func:`equivalent_ffn`): same parameters and FLOPs per token up to the
  rounding, at most 0.012 % of the MLP (h = 1024) and < 0.01 % of the model. ALiBi instead of
  rotary and LayerNorm instead of RMSNorm differ only in element-wise work that neither MFU
  definition counts (the README: "All FLOP calculations exclude the operations required for
  normalization, activation, and residuals"), so they are negligible in FLOPs. The rows say
  ``gated_mlp`` False: the GELU MLP keeps two 4 h-wide activations per token, not SwiGLU's
  four of the equivalent width (:class:`surrogate.config.model.ModelConfig`).
- Parameter check (done for every row, :func:`param_check`): the table's ``NumParams`` is
  exactly V h + L (12 h^2 + 13 h) + 2 h + s h for every row of the file: the 13 h per layer are
  the biases of the yamls of that commit (qkv 3 h, out h, up 4 h, down h) and two LayerNorms
  with bias (4 h), 2 h the final LayerNorm, and s h a learned position table of seq_len rows
  (``NumParams`` grows by exactly d_model per token of seq_len within one model; it is an
  embedding lookup, no matmul FLOPs). The mapped configuration's
  :func:`surrogate.analytic.flops.total_params` is compared with ``NumParams - seq_len x h``;
  they agree within 0.09 % on all 216 rows of the pinned file (the biases; mpt-125m is the
  farthest), and a row off by more than :data:`PARAM_TOLERANCE` (2 %) is a counted skip. The
  README's MFU counts the whole ``NumParams`` (position table and biases included), so it is
  at most 3.8 % above ours (mpt-125m at 65,536 tokens; median 0.3 %); ``mfu`` is recomputed
  under the project's definition (:func:`surrogate.runs.sweeps.recompute_mfu`), ``MFU`` is kept
  as ``mfu_reported``.
- Cluster: ``GPU`` h100_80gb / a100_80gb / a100_40gb -> H100-SXM-80GB / A100-SXM-80GB /
  A100-SXM-40GB; gpus_per_node = min(8, ``# GPUs``), num_nodes = ``# GPUs`` / gpus_per_node.
- Layout: dp = ``# GPUs``, tp = pp = cp = ep = 1 (FSDP only); mbs = ``MicroBatchSize``,
  grad_accum = ``GradAccum`` (``GlobalBatchSize`` must equal mbs x grad_accum x GPUs, else a
  counted skip: Composer allows micro-batches that do not divide the batch); ``Sharding
  Strategy`` FULL_SHARD / SHARD_GRAD_OP / NO_SHARD -> zero_stage 3 / 2 / 0; ``Activation
  Checkpointing`` True -> recompute full, else none; ``Activation CPUOffload`` True -> skipped
  (the analytic model has no CPU offload); ``Precision`` amp_bf16 and bf16 -> dtype bf16,
  amp_fp8 -> fp8. ``MP Mode`` (DEFAULT with amp_*, PURE with the older pure-bf16 runs of the
  A100 tables) changes only the dtypes of FSDP's reductions and buffers, not the FLOPs, and is
  not kept; framework llm-foundry (:mod:`surrogate.config.frameworks`).
- Measurements: tokens_per_s_per_gpu = ``Throughput (T/s/GPU)``; step_time_s =
  ``GlobalBatchSize (T)`` / ``Throughput (T/s)``; mfu_reported = ``MFU`` (percent);
  tflops_per_gpu_reported = ``Model TFLOP`` (model TFLOP/s per GPU); memory NaN (the source
  has none). Every run completed (the tables list no failures).
- Provenance: source ``llmfoundry_mpt``, run_id ``<heading slug>/<line>`` (the file is pinned
  by its sha256, so line numbers are stable), model_name ``mpt-<size>``, no date.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from surrogate.analytic.flops import total_params
from surrogate.analytic.inputs import to_cols
from surrogate.analytic.params import ParameterSets
from surrogate.config.model import swiglu_equivalent_width
from surrogate.config.training import TrainingConfig, config_from_flat
from surrogate.errors import ConfigError, DataError
from surrogate.ingest.report import IngestReport
from surrogate.io.input_files import read_input_text
from surrogate.runs.sweeps import frame_from_rows, sweep_row

SOURCE = "llmfoundry_mpt"
VOCAB_SIZE = 50368
PARAM_TOLERANCE = 0.02
"""Largest relative difference between the mapped configuration's parameters and the table's
``NumParams`` (position table removed) for a row to be taken."""

MPT_SHAPES: dict[str, tuple[int, int, int]] = {
    # size: (d_model, n_layers, n_heads), scripts/train/yamls/pretrain/mpt-<size>.yaml
    "125m": (768, 12, 12),
    "350m": (1024, 24, 16),
    "760m": (1536, 24, 12),
    "1b": (2048, 24, 16),
    "3b": (2560, 32, 20),
    "7b": (4096, 32, 32),
    "13b": (5120, 40, 40),
    "30b": (7168, 48, 56),
    "70b": (8192, 80, 64),
}
GPUS: dict[str, str] = {
    "h100_80gb": "H100-SXM-80GB",
    "a100_80gb": "A100-SXM-80GB",
    "a100_40gb": "A100-SXM-40GB",
}
ZERO_STAGES: dict[str, int] = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}
DTYPES: dict[str, str] = {"amp_bf16": "bf16", "bf16": "bf16", "amp_fp8": "fp8"}
MP_MODES: tuple[str, ...] = ("DEFAULT", "PURE")

REQUIRED_COLUMNS: tuple[str, ...] = (
    "Model",
    "SeqLen (T)",
    "# GPUs",
    "GPU",
    "MFU",
    "Model TFLOP",
    "MicroBatchSize",
    "GradAccum",
    "GlobalBatchSize",
    "Throughput (T/s)",
    "Throughput (T/s/GPU)",
    "GlobalBatchSize (T)",
    "Precision",
    "MP Mode",
    "Sharding Strategy",
    "Activation Checkpointing",
    "Activation CPUOffload",
    "NumParams",
)
HEADER_MARKERS: tuple[str, ...] = ("Throughput (T/s/GPU)", "Sharding Strategy")
"""Header cells that identify the format (used by :mod:`surrogate.ingest.detect`)."""

_SEPARATOR = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")


def is_table_header(line: str) -> bool:
    """A Markdown table header line of the llm-foundry throughput tables."""
    return line.lstrip().startswith("|") and all(m in line for m in HEADER_MARKERS)


def equivalent_ffn(hidden_size: int) -> int:
    """SwiGLU width with the parameters and FLOPs of a GELU MLP of width 4 h:
    3 h f = 8 h^2, f = round(8 h / 3)."""
    return swiglu_equivalent_width(4 * hidden_size)


def _cells(line: str) -> list[str]:
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|"):
        text = text[:-1]
    return [c.strip() for c in text.split("|")]


def _slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-") or "table"


def _int(name: str, value: str) -> int:
    try:
        out = int(value)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    return out


def _positive(name: str, value: str) -> float:
    try:
        out = float(value)
    except ValueError:
        out = math.nan
    if not math.isfinite(out) or out <= 0:
        raise ConfigError(f"{name} must be a positive number, got {value!r}")
    return out


def _bool(name: str, value: str) -> bool:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"{name} must be True or False, got {value!r}")


def _choice(name: str, value: str, table: dict[str, object]) -> object:
    if value not in table:
        raise ConfigError(f"{name} must be one of {', '.join(table)}, got {value!r}")
    return table[value]


def _config(row: dict[str, str]) -> TrainingConfig:
    """The row's configuration; ConfigError says which value is unknown or which rule fails."""
    size = row["Model"].lower()
    if size not in MPT_SHAPES:
        raise ConfigError(f"Model must be one of {', '.join(MPT_SHAPES)}, got {row['Model']!r}")
    hidden, layers, heads = MPT_SHAPES[size]
    gpu = str(_choice("GPU", row["GPU"], dict(GPUS)))
    num_gpus = _int("# GPUs", row["# GPUs"])
    if num_gpus < 1:
        raise ConfigError(f"# GPUs must be >= 1, got {num_gpus}")
    per_node = min(8, num_gpus)
    if num_gpus % per_node:
        raise ConfigError(f"# GPUs must fill whole 8-GPU nodes (a multiple of 8), got {num_gpus}")
    mbs = _int("MicroBatchSize", row["MicroBatchSize"])
    accum = _int("GradAccum", row["GradAccum"])
    batch = _int("GlobalBatchSize", row["GlobalBatchSize"])
    if batch != mbs * accum * num_gpus:
        raise ConfigError(
            "GlobalBatchSize must equal MicroBatchSize x GradAccum x # GPUs "
            f"({mbs} x {accum} x {num_gpus} = {mbs * accum * num_gpus}), got {batch}"
        )
    if _bool("Activation CPUOffload", row["Activation CPUOffload"]):
        raise ConfigError(
            "Activation CPUOffload must be False: the analytic model has no CPU offload"
        )
    _choice("MP Mode", row["MP Mode"], dict.fromkeys(MP_MODES))
    return config_from_flat(
        {
            "num_layers": layers,
            "hidden_size": hidden,
            "ffn_hidden_size": equivalent_ffn(hidden),
            "num_heads": heads,
            "num_kv_heads": heads,
            "vocab_size": VOCAB_SIZE,
            "seq_len": _int("SeqLen (T)", row["SeqLen (T)"]),
            "tie_embeddings": True,
            "gated_mlp": False,
            "gpu": gpu,
            "gpus_per_node": per_node,
            "num_nodes": num_gpus // per_node,
            "dp": num_gpus,
            "tp": 1,
            "pp": 1,
            "cp": 1,
            "ep": 1,
            "mbs": mbs,
            "grad_accum": accum,
            "zero_stage": _choice("Sharding Strategy", row["Sharding Strategy"], dict(ZERO_STAGES)),
            "recompute": (
                "full"
                if _bool("Activation Checkpointing", row["Activation Checkpointing"])
                else "none"
            ),
            "dtype": _choice("Precision", row["Precision"], dict(DTYPES)),
            "framework": "llm-foundry",
        }
    )


def param_check(cfg: TrainingConfig, num_params: int) -> float:
    """Relative difference between the parameters of ``cfg`` (the project's count) and the
    table's ``NumParams`` less its learned position table (seq_len x hidden_size)."""
    ours = float(total_params(to_cols([cfg], ParameterSets()))[0])
    theirs = num_params - cfg.model.seq_len * cfg.model.hidden_size
    return (ours - theirs) / theirs


def _measurements(row: dict[str, str]) -> dict[str, float | None]:
    return {
        "tokens_per_s_per_gpu": _positive("Throughput (T/s/GPU)", row["Throughput (T/s/GPU)"]),
        "step_time_s": (
            _positive("GlobalBatchSize (T)", row["GlobalBatchSize (T)"])
            / _positive("Throughput (T/s)", row["Throughput (T/s)"])
        ),
        "mfu_reported": _positive("MFU", row["MFU"]),
        "tflops_per_gpu_reported": _positive("Model TFLOP", row["Model TFLOP"]),
    }


def parse_llmfoundry(path: str | Path) -> tuple[pd.DataFrame, IngestReport]:
    """Read every throughput table of the README into sweep rows; every table row not taken
    (and every table without the needed columns) is a counted skip with file:line."""
    p = Path(path)
    report = IngestReport(files=[str(p)])
    lines = read_input_text(p, what="llm-foundry README", kind="log").splitlines()
    rows = []
    heading = ""
    header: list[str] | None = None
    header_line = 0
    problem: str | None = None  # why the rows of the current table cannot be read
    tables = 0
    fenced = False
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if text.startswith("```"):
            fenced = not fenced
        if fenced or not text.startswith("|"):
            header = None
            if text.startswith("#") and not fenced:
                heading = text.lstrip("#").strip()
            continue
        if header is None:
            header, header_line, problem = _cells(text), number, None
            if not all(m in header for m in HEADER_MARKERS):
                report.skip(
                    str(p),
                    number,
                    "a Markdown table without the columns "
                    f"{' and '.join(HEADER_MARKERS)}: not a throughput table",
                )
                header = []
                continue
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                problem = f"its table (line {number}) lacks the column(s) {', '.join(missing)}"
            tables += 1
            continue
        if not header or _SEPARATOR.match(text):
            continue  # a row of a foreign table reported above, or the header's separator
        report.rows_read += 1
        if problem:
            report.skip(str(p), number, problem)
            continue
        cells = _cells(text)
        if len(cells) != len(header):
            report.skip(
                str(p),
                number,
                f"row has {len(cells)} cells, the header of line {header_line} has {len(header)}",
            )
            continue
        row = dict(zip(header, cells, strict=True))
        try:
            cfg = _config(row)
            measured = _measurements(row)
            num_params = _int("NumParams", row["NumParams"])
        except (ConfigError, ValueError, TypeError) as e:
            report.skip(str(p), number, f"invalid row: {e}")
            continue
        diff = param_check(cfg, num_params)
        if abs(diff) > PARAM_TOLERANCE:
            report.skip(
                str(p),
                number,
                (
                    f"mpt-{row['Model'].lower()} maps to parameters {diff:+.1%} off NumParams "
                    f"{num_params} less the position table (tolerance {PARAM_TOLERANCE:.0%})"
                ),
            )
            continue
        rows.append(
            sweep_row(
                cfg,
                status="completed",
                source=SOURCE,
                run_id=f"{_slug(heading)}/{number}",
                date=None,
                hardware=heading or None,
                model_name=f"mpt-{row['Model'].lower()}",
                **measured,
            )
        )
    if tables == 0 and report.rows_read == 0:
        raise DataError(
            f"{p}: holds no llm-foundry throughput table (a Markdown table with "
            f"the columns {', '.join(REQUIRED_COLUMNS)})"
        )
    return frame_from_rows(rows, where=str(p)), report
