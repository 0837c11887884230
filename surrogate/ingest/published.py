"""Published performance tables as runs: each row a completed run with its layout as the
framework's user states it, and what the table leaves unsaid taken from the framework's
documented defaults (:mod:`surrogate.config.framework_defaults`), recorded on the row.

Two published tables go through this concept:

- NVIDIA's Megatron-Bridge performance summary, DGX-H100 rows
  (``published/megatron_bridge_h100.csv``, :func:`parse_published`; MANIFEST.md section
  ``published/megatron_bridge_h100.csv``);
- MosaicML's llm-foundry MPT tables (``sweeps/llmfoundry_mpt/benchmarking_README.md``, parsed by
  :mod:`surrogate.ingest.llmfoundry`, whose rows are kept as they are; :func:`published_runs`
  adds the shared columns).

:func:`parse_published` returns a sweep table (``surrogate.runs.sweeps``), what ``surrogate
ingest`` writes; :func:`published_runs` returns it with :data:`PUBLISHED_COLUMNS` beside:

- ``assumptions``: ``setting=value`` pairs joined by ``;``, every setting the table does not
  state (distributed optimizer, overlap, sequence parallelism, recomputation, FP8 recipe,
  pipeline split, expert tensor parallelism, the precision where a table has no column),
  from the framework's defaults or the model's recipe (:data:`RECIPES`); their sources are in
  :func:`assumption_sources` and ``docs/data.md``;
- ``peak_memory_upper_bound_gib``: the run completed on its GPU, so its peak memory was below
  the GPU's capacity (:attr:`surrogate.config.gpus.GPUSpec.memory_gib`): a bound, not a
  measurement;
- ``task`` and ``container_version`` (Megatron-Bridge) as the table gives them.

Mapping of a Megatron-Bridge row (Megatron-Core's conventions; ``megatron-core 0.16.1``
``parallel_state.py``: the expert-parallel group is carved out of data x context (x tensor
with ``expert_tensor_parallel_size`` 1) parallel ranks, so ep does not multiply the world):

- dp = ``num_gpus`` / (tp x pp x cp); grad_accum = ``gbs`` / (``mbs`` x dp), a row where
  it is not a whole number is a counted skip; vpp = ``vp`` (empty: 1), ep = ``ep`` (empty: 1),
  ``seq_len``; gpus_per_node from the table (8), num_nodes = num_gpus / 8;
- framework ``megatron`` (Megatron-Bridge trains through Megatron-Core);
- ``precision``: ``BF16`` -> bf16; ``FP8`` and ``FP8-CS`` -> fp8 (the recipe: ``FP8-CS``
  current scaling as stated, ``FP8`` the framework's default recipe, recorded); empty (the
  25.09 tables have no precision column; the MANIFEST: TFLOP/s above the BF16 peak on
  Blackwell in the same tables imply FP8) -> fp8, recorded as inferred;
- ``fsdp`` > 0 -> Megatron-FSDP, zero_stage 3; otherwise the distributed optimizer
  (zero_stage 1, the framework's default);
- sequence parallelism with tp > 1, recomputation and the pipeline split: the framework's
  defaults, replaced by the model's own recipe where it sets them (:data:`RECIPES`);
- the model: :data:`MODELS` (presets, or the public ``config.json`` values, cited); a model the
  analytic model cannot represent is a counted skip with its reason (:data:`UNREPRESENTED`);
- SFT and LoRA rows are counted skips (:data:`TASKS`): LoRA trains adapters only (frozen
  weights: no gradients or optimizer states for them, a third of the backward), and NVIDIA's
  SFT runs train on packed variable-length samples (attention within each sample, not across
  the 4,096-token window), neither of which is a pre-training step of the stated layout;
- the value in parentheses (``variant`` alt_in_parens: another FP8 scaling recipe) gives
  TFLOP/s only, no tokens/s: a counted skip.

A row whose layout the project's rules refuse is kept flagged (``layout_problem``) with the
rule's message: the run trained, and that is data. (Llama 3.1 405B's 126 layers at pp 8 x vp 8,
Megatron's embedding and loss counted as pipeline stages, and Qwen3 235B's ep 32 over tp 2 x
dp 16, Megatron's experts folded with expert tensor parallelism 1,
``FrameworkTraits.moe_parallel_folding``, are layouts of the project's rules.)

Measurements: tokens_per_s_per_gpu as given; step_time_s = gbs x seq_len / (tokens/s/GPU x
num_gpus); tflops_per_gpu_reported as given; mfu recomputed under the project's definition;
no memory. Provenance: source ``megatron_bridge``, run_id ``<container>/<task>/<line>`` (the
line of ``path`` at ``commit``), model_name as the table names it, hardware
``<system> (<container>)``.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from surrogate.config.framework_defaults import assumed, assumptions_text, defaults_for
from surrogate.config.gpus import get_gpu
from surrogate.config.model import ModelConfig
from surrogate.config.presets import get_preset
from surrogate.config.training import config_from_flat
from surrogate.errors import ConfigError, DataError
from surrogate.ingest.llmfoundry import parse_llmfoundry
from surrogate.ingest.report import IngestReport
from surrogate.io.datasource import data_dir as resolve_data_dir
from surrogate.io.input_files import read_input_text
from surrogate.runs.sweeps import flagged_row, frame_from_rows, sweep_row

SOURCE = "megatron_bridge"
FRAMEWORK = "megatron"
HEADER_MARKERS: tuple[str, ...] = (
    "source_repo",
    "container_version",
    "tokens_per_s_per_gpu",
    "raw_row",
)
"""Header cells that identify the format (used by :mod:`surrogate.ingest.detect`)."""
REQUIRED_COLUMNS: tuple[str, ...] = (
    "source_line",
    "table",
    "container_version",
    "task",
    "system",
    "gpu",
    "num_gpus",
    "gpus_per_node",
    "model",
    "precision",
    "seq_len",
    "gbs",
    "mbs",
    "tp",
    "pp",
    "cp",
    "vp",
    "ep",
    "fsdp",
    "tokens_per_s_per_gpu",
    "tflops_per_gpu",
    "variant",
    "notes",
)
PUBLISHED_COLUMNS: tuple[str, ...] = (
    "assumptions",
    "peak_memory_upper_bound_gib",
    "task",
    "container_version",
)
"""Columns :func:`published_runs` adds to the sweep columns."""

TASKS: dict[str, str | None] = {
    "pre-train": None,
    "SFT": (
        "SFT: NVIDIA's fine-tuning runs train on packed variable-length samples "
        "(attention within each sample), not a pre-training step of the stated layout"
    ),
    "LoRA": (
        "LoRA: adapters only (frozen weights keep no gradients or optimizer states and "
        "skip their weight gradients), not modelled"
    ),
}
"""Each task of the tables and why it is skipped (None: taken)."""

BRIDGE = "megatron-bridge 0.3.1"


def _qwen3_moe(
    name: str, layers: int, hidden: int, ffn: int, heads: int, moe_ffn: int, seq_len: int
) -> ModelConfig:
    return ModelConfig(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        ffn_hidden_size=ffn,
        num_heads=heads,
        num_kv_heads=4,
        head_dim=128,
        vocab_size=151936,
        seq_len=seq_len,
        tie_embeddings=False,
        num_experts=128,
        experts_topk=8,
        moe_ffn_hidden_size=moe_ffn,
    )


MODELS: dict[str, tuple[str, Callable[[int], ModelConfig]]] = {
    "LLAMA3_8B": (
        "llama3-8b preset (Llama 3 config.json)",
        lambda s: _at(get_preset("llama3-8b"), s),
    ),
    "LLAMA3_70B": (
        "llama3-70b preset (Llama 3 config.json)",
        lambda s: _at(get_preset("llama3-70b"), s),
    ),
    "LLAMA3.1_405B": (
        "llama3-405b preset (Llama 3.1 405B config.json: the same shape, vocabulary 128,256)",
        lambda s: _at(get_preset("llama3-405b"), s),
    ),
    "QWEN3_30B_A3B": (
        "Qwen/Qwen3-30B-A3B config.json: 48 layers, hidden 2048, 32 heads, 4 kv heads, "
        "head_dim 128, 128 experts top-8 of width 768, vocab 151,936, untied",
        lambda s: _qwen3_moe("qwen3-30b-a3b", 48, 2048, 6144, 32, 768, s),
    ),
    "QWEN3_235B_A22B": (
        "Qwen/Qwen3-235B-A22B config.json: 94 layers, hidden 4096, 64 heads, 4 kv heads, "
        "head_dim 128, 128 experts top-8 of width 1536, vocab 151,936, untied",
        lambda s: _qwen3_moe("qwen3-235b-a22b", 94, 4096, 12288, 64, 1536, s),
    ),
}
"""The models of the tables (key: the table's name, upper case, qualifier removed): where the
shape comes from, and the shape at a sequence length."""

UNREPRESENTED: dict[str, str] = {
    "GPT OSS 120B": (
        "GPT-OSS 120B (openai/gpt-oss-120b config.json): every other layer attends over a "
        "128-token sliding window (layer_types, sliding_window 128) with attention sinks; the "
        "analytic model's attention spans the whole sequence"
    ),
    "DEEPSEEKV3": (
        f"DeepSeek-V3: {BRIDGE} recipes/deepseek/deepseek_v3.py trains it with a "
        "multi-token-prediction layer (mtp_num_layers 1) and its own pipeline layout "
        "(pipeline_model_parallel_layout), neither modelled"
    ),
    "NEMOTRON_3_NANO": (
        "Nemotron 3 Nano: a hybrid Mamba-Transformer mixture of experts "
        f"({BRIDGE} recipes/nemotronh/nemotron_3_nano.py); the analytic model has no Mamba "
        "layers"
    ),
}
"""Models of the tables the analytic model cannot represent, and why (counted skips)."""

_BOTH_SPLIT = (
    "embedding and loss counted as stages|{src}: "
    "account_for_embedding_in_pipeline_split = account_for_loss_in_pipeline_split "
    "= True"
)
_QWEN3_DISPATCHER = (
    f"flex (DeepEP)|{BRIDGE} recipes/qwen/qwen3_moe.py: moe_token_dispatcher_type 'alltoall', "
    "moe_grouped_gemm True, then apply_flex_dispatcher_backend(cfg.model, 'deepep') "
    "(training/flex_dispatcher_backend.py) sets moe_token_dispatcher_type 'flex' on Hopper; "
    "the analytic model times it as DeepEP's dispatch, a row per rank and per node a token's "
    "experts reach (FrameworkTraits.moe_flex_dispatch)"
)
RECIPES: dict[str, dict[str, str]] = {
    "LLAMA3.1_405B": {
        "pipeline_split": _BOTH_SPLIT.format(
            src=f"{BRIDGE} recipes/llama/llama3.py llama31_405b_pretrain_config"
        ),
    },
    "QWEN3_30B_A3B": {
        "recompute": (
            f"full (uniform, 1 layer)|{BRIDGE} recipes/qwen/qwen3_moe.py "
            "qwen3_30b_a3b_pretrain_config: recompute_granularity 'full', "
            "recompute_method 'uniform', recompute_num_layers 1"
        ),
        "expert_tensor_parallel": (
            f"1|{BRIDGE} recipes/qwen/qwen3_moe.py: expert_tensor_parallel_size = 1"
        ),
        "moe_dispatcher": _QWEN3_DISPATCHER,
    },
    "QWEN3_235B_A22B": {
        "pipeline_split": _BOTH_SPLIT.format(
            src=f"{BRIDGE} recipes/qwen/qwen3_moe.py qwen3_235b_a22b_pretrain_config"
        ),
        "expert_tensor_parallel": (
            f"1|{BRIDGE} recipes/qwen/qwen3_moe.py: expert_tensor_parallel_size = 1"
        ),
        "moe_dispatcher": _QWEN3_DISPATCHER,
    },
}
"""What a model's own recipe sets instead of the framework's default (``value|source``)."""

_EXTRA: dict[str, str] = {
    "precision": "the precision the table does not state",
    "megatron_fsdp": "the table's FSDP column",
    "moe_dispatch": "the table's qualifier of the model name ((tokendrop), (dropless))",
    "moe_load_balance": "the analytic model routes tokens evenly over the experts",
}
"""Assumptions the parser adds beside the framework's table, and where they come from."""


def _at(model: ModelConfig, seq_len: int) -> ModelConfig:
    from dataclasses import replace

    return replace(model, seq_len=seq_len)


def model_key(name: str) -> tuple[str, str | None]:
    """The table's model name without its qualifier, upper case, and the qualifier
    (``DeepSeekV3 (dropless)`` -> ``("DEEPSEEKV3", "dropless")``)."""
    m = re.fullmatch(r"\s*(.*?)\s*(?:\((\w+)\))?\s*", name)
    base, qualifier = (m.group(1), m.group(2)) if m else (name.strip(), None)
    return base.upper(), qualifier


def is_published_head(first_line: str) -> bool:
    """Whether a CSV header line is a published table of this module's format."""
    return all(m in first_line for m in HEADER_MARKERS)


def _int(row: dict[str, str], name: str, *, empty: int | None = None) -> int:
    value = row[name].strip()
    if not value and empty is not None:
        return empty
    try:
        out = int(value)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    return out


def _positive(row: dict[str, str], name: str) -> float | None:
    value = row[name].strip()
    if not value:
        return None
    try:
        out = float(value)
    except ValueError:
        out = math.nan
    if not math.isfinite(out) or out <= 0:
        raise ConfigError(f"{name} must be a positive number or empty, got {value!r}")
    return out


_DTYPES: dict[str, tuple[str, str | None]] = {
    "BF16": ("bf16", None),
    "FP8": ("fp8", None),
    "FP8-CS": ("fp8", "current scaling (tensorwise)|the table's precision FP8-CS"),
    "": ("fp8", None),
}
"""The table's precision -> dtype and the FP8 recipe it states (None: the framework's)."""


@dataclass
class _Mapped:
    values: dict[str, Any]
    overrides: dict[str, str]
    extra: list[tuple[str, str, str]]


def _map_row(row: dict[str, str]) -> _Mapped:
    """The configuration columns of a row and what is assumed; ConfigError (a skip) names
    what is not represented."""
    task = row["task"].strip()
    if task not in TASKS:
        raise ConfigError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    if TASKS[task]:
        raise ConfigError(str(TASKS[task]))
    key, qualifier = model_key(row["model"])
    if key in UNREPRESENTED:
        raise ConfigError(UNREPRESENTED[key])
    if key not in MODELS:
        raise ConfigError(
            f"model must be one of {', '.join(MODELS)} (or an unrepresented "
            f"one: {', '.join(UNREPRESENTED)}), got {row['model']!r}"
        )
    precision = row["precision"].strip().upper()
    if precision not in _DTYPES:
        raise ConfigError(
            f"precision must be one of BF16, FP8, FP8-CS or empty, got {row['precision']!r}"
        )
    dtype, recipe = _DTYPES[precision]
    num_gpus, per_node = _int(row, "num_gpus"), _int(row, "gpus_per_node")
    tp, pp, cp = _int(row, "tp"), _int(row, "pp"), _int(row, "cp", empty=1)
    mbs, gbs = _int(row, "mbs"), _int(row, "gbs")
    if min(num_gpus, per_node, tp, pp, cp, mbs, gbs) < 1:
        raise ConfigError("num_gpus, gpus_per_node, tp, pp, cp, mbs and gbs must be >= 1")
    if num_gpus % per_node or num_gpus % (tp * pp * cp):
        raise ConfigError(
            f"num_gpus must be a multiple of gpus_per_node and of tp x pp x cp, "
            f"got num_gpus={num_gpus} gpus_per_node={per_node} tp={tp} pp={pp} "
            f"cp={cp}"
        )
    dp = num_gpus // (tp * pp * cp)
    if gbs % (mbs * dp):
        raise ConfigError(
            f"gbs must be a multiple of mbs x dp (dp = num_gpus / (tp x pp x "
            f"cp) = {dp}), got gbs={gbs} mbs={mbs}"
        )
    fsdp = _int(row, "fsdp", empty=0)
    overrides = dict(RECIPES.get(key, {}))
    extra: list[tuple[str, str, str]] = []
    if recipe:
        overrides["fp8_recipe"] = recipe
    if not precision:
        extra.append(("precision", "fp8_inferred", _EXTRA["precision"]))
    if fsdp > 0:
        overrides["distributed_optimizer"] = "off (Megatron-FSDP, zero_stage 3)|the table's FSDP"
        extra.append(("megatron_fsdp", str(fsdp), _EXTRA["megatron_fsdp"]))
    ep = _int(row, "ep", empty=1)
    moe = MODELS[key][1](1).num_experts >= 2
    if moe:
        # the recipe's MoE settings, no framework default's (the analytic model folds
        # Megatron's experts with expert tensor parallelism 1: FrameworkTraits.moe_parallel_folding)
        for setting in ("expert_tensor_parallel", "moe_dispatcher"):
            if setting in overrides:
                value, _, source = overrides.pop(setting).partition("|")
                extra.append((setting, value, source))
        extra.append(("moe_dispatch", qualifier or "dropless", _EXTRA["moe_dispatch"]))
        extra.append(("moe_load_balance", "uniform", _EXTRA["moe_load_balance"]))
    recompute = overrides.get("recompute", "none").split(" ")[0].split("|")[0]
    values = {
        **_model_values(MODELS[key][1](_int(row, "seq_len"))),
        "gpu": row["gpu"].strip(),
        "gpus_per_node": per_node,
        "num_nodes": num_gpus // per_node,
        "dp": dp,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": ep,
        "vpp": _int(row, "vp", empty=1),
        "mbs": mbs,
        "grad_accum": gbs // (mbs * dp),
        "zero_stage": 3 if fsdp > 0 else 1,
        "recompute": recompute,
        "sequence_parallel": tp > 1,
        "dtype": dtype,
        "framework": FRAMEWORK,
    }
    return _Mapped(values, overrides, extra)


def _model_values(model: ModelConfig) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: v for k, v in asdict(model).items() if k != "name"}


def _measurements(row: dict[str, str], values: dict[str, Any]) -> dict[str, float | None]:
    tps = _positive(row, "tokens_per_s_per_gpu")
    if tps is None:
        raise ConfigError(
            "tokens_per_s_per_gpu is empty (the table gives this variant's TFLOP/s only)"
        )
    gpus = values["gpus_per_node"] * values["num_nodes"]
    tokens = values["dp"] * values["grad_accum"] * values["mbs"] * values["seq_len"]
    return {
        "tokens_per_s_per_gpu": tps,
        "step_time_s": tokens / (tps * gpus),
        "tflops_per_gpu_reported": _positive(row, "tflops_per_gpu"),
    }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def _read_csv(path: Path) -> pd.DataFrame:
    text = read_input_text(path, what="published table", kind="table")
    try:
        table = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise DataError(f"{path}: not a CSV table ({e})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in table.columns]
    if missing:
        raise DataError(
            f"{path}: a published table needs the columns "
            f"{', '.join(REQUIRED_COLUMNS)}; missing {', '.join(missing)}"
        )
    return table


def parse_published_annotated(
    path: str | Path, *, flagged: bool = True
) -> tuple[pd.DataFrame, IngestReport]:
    """The runs of a Megatron-Bridge performance table (module docstring) as a sweep table
    with :data:`PUBLISHED_COLUMNS` beside; every row not taken is a counted skip with its
    file:line (the CSV's line) and reason. ``flagged``: keep the runs whose layout the
    project's rules refuse, flagged (else they are counted skips)."""
    p = Path(path)
    report = IngestReport(files=[str(p)])
    table = _read_csv(p)
    rows: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    refused = 0
    for index, record in enumerate(table.to_dict("records")):
        raw = {str(k): str(v) for k, v in record.items()}
        line = index + 2
        report.rows_read += 1
        try:
            mapped = _map_row(raw)
            measured = _measurements(raw, mapped.values)
        except ConfigError as e:
            report.skip(str(p), line, str(e))
            continue
        container = raw["container_version"].strip()
        variant = raw["variant"].strip()
        run_id = f"{_slug(container)}/{_slug(raw['task'])}/{raw['source_line'].strip()}"
        if variant and variant != "main":
            run_id += f"/{_slug(variant)}"
        cfg_args = {k: mapped.values[k] for k in ("tp", "pp", "dtype")}
        items = assumed(FRAMEWORK, mapped.overrides, **cfg_args) + mapped.extra
        hardware = f"{raw['system'].strip()} ({container})"
        model_name = raw["model"].strip()
        try:
            cfg = config_from_flat(mapped.values)
        except ConfigError as e:
            if not flagged:
                report.skip(str(p), line, f"layout refused: {e}")
                continue
            refused += 1
            rows.append(
                flagged_row(
                    mapped.values,
                    str(e),
                    status="completed",
                    source=SOURCE,
                    run_id=run_id,
                    date=None,
                    hardware=hardware,
                    model_name=model_name,
                    **measured,
                )
            )
        else:
            rows.append(
                sweep_row(
                    cfg,
                    status="completed",
                    source=SOURCE,
                    run_id=run_id,
                    date=None,
                    hardware=hardware,
                    model_name=model_name,
                    **measured,
                )
            )
        notes.append(
            {
                "assumptions": assumptions_text(items),
                "peak_memory_upper_bound_gib": get_gpu(mapped.values["gpu"]).memory_gib,
                "task": raw["task"].strip(),
                "container_version": container,
            }
        )
    if refused:
        report.note(
            f"kept {refused} run(s) whose layout the project's rules refuse, flagged "
            "(layout_problem)"
        )
    frame = frame_from_rows(rows, where=str(p))
    extra = pd.DataFrame(notes, columns=list(PUBLISHED_COLUMNS), index=frame.index)
    return pd.concat([frame, extra], axis=1), report


def parse_published(path: str | Path, *, flagged: bool = True) -> tuple[pd.DataFrame, IngestReport]:
    """:func:`parse_published_annotated` as a sweep table only (what ``surrogate ingest``
    writes)."""
    frame, report = parse_published_annotated(path, flagged=flagged)
    return frame.drop(columns=list(PUBLISHED_COLUMNS)), report


def annotate_mpt(runs: pd.DataFrame) -> pd.DataFrame:
    """llm-foundry's MPT runs (:func:`surrogate.ingest.llmfoundry.parse_llmfoundry`, unchanged)
    with :data:`PUBLISHED_COLUMNS`: the framework's documented defaults the tables leave unsaid,
    ``mp_mode`` (not kept: it changes only the dtypes of FSDP's reductions and buffers), and
    the memory bound of a completed run."""
    text = assumptions_text([*assumed("llm-foundry"), ("mp_mode", "not kept", "")])
    return runs.assign(
        assumptions=text,
        peak_memory_upper_bound_gib=[get_gpu(g).memory_gib for g in runs["gpu"]],
        task="pre-train",
        container_version=None,
    )


PUBLISHED_TABLES: dict[str, str] = {
    "megatron_bridge": "published/megatron_bridge_h100.csv",
    "llmfoundry_mpt": "sweeps/llmfoundry_mpt/benchmarking_README.md",
}
"""The published tables under the data folder (``$SURROGATE_DATA_DIR``), by source."""


def published_runs(
    source: str, data_dir: str | Path | None = None, *, flagged: bool = False
) -> pd.DataFrame:
    """The runs of a published table (``source``: a key of :data:`PUBLISHED_TABLES`) with
    :data:`PUBLISHED_COLUMNS`; ``flagged``: with the runs whose layout is refused."""
    if source not in PUBLISHED_TABLES:
        raise DataError(f"source must be one of {', '.join(PUBLISHED_TABLES)}, got {source!r}")
    path = resolve_data_dir(data_dir) / PUBLISHED_TABLES[source]
    if source == "llmfoundry_mpt":
        return annotate_mpt(parse_llmfoundry(path)[0])
    return parse_published_annotated(path, flagged=flagged)[0]


def assumption_sources() -> dict[str, str]:
    """setting -> where its value comes from: the framework's defaults, the models' recipes,
    and the parser's own (for the docs)."""
    out = {d.setting: d.source for d in defaults_for(FRAMEWORK)}
    for key, recipe in RECIPES.items():
        for setting, text in recipe.items():
            out[f"{setting} ({key})"] = text.partition("|")[2]
    out.update(_EXTRA)
    return out
