"""Features of the learned models: dimensionless physics of a configuration, not raw counts.

The learned models correct the analytic model, and must keep doing so where the data has
not been (larger clusters, other models, other networks). Trees extrapolate every feature as
a constant beyond the last split, so a raw count (nodes, dp, pp, grad_accum) seen up to 64
turns 1,024 nodes into the 64-node leaf of one cluster. The features are therefore what
physics says decides efficiency, as ratios that stay in a known range at any scale:

- where the step time goes: each analytic step term's share of the step, exposed
  communication per dimension over compute, the pipeline bubble's share, the analytic MFU;
- how full memory is: each memory term over the GPU's capacity;
- the shape of the work per rank: log tokens per micro-batch and rank (the GEMMs' m), log of
  the hidden and MLP widths per tensor-parallel rank (their n and k), the arithmetic intensity
  of the MLP GEMM, the attention share of the FLOPs, the GQA ratio;
- which groups cross nodes (0/1), and how many inter-node collectives a rank issues per
  second of analytic step time (a fabric's per-call latency costs time in proportion);
- categories: recomputation, sequence parallelism, fp8,
  ZeRO stage, MoE, and the framework with its version (``framework_code``, a LightGBM
  categorical; codes index :data:`surrogate.analytic.inputs.FRAMEWORK_VERSIONS`).

The network, the GPU and the cluster size enter only through the analytic terms they produce
(the calibration profile and, in training, each run's own measured bandwidth).
:data:`FEATURE_NAMES` is the public, tested order. :data:`DOMAIN_AXES` are the quantities on
which the learned model records its training range (``surrogate.learned.domain``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.comm import spans_nodes
from surrogate.analytic.flops import (
    attention_flops_per_token,
    model_flops_per_token,
    total_params,
)
from surrogate.analytic.params import ParameterSets
from surrogate.analytic.perf import PerfModel
from surrogate.analytic.run import analytic_for
from surrogate.analytic.step import STEP_TERMS
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.table import FlatTable, valid_table
from surrogate.config.training import TrainingConfig
from surrogate.hardware.perf_models import resolve_perf_model
from surrogate.runs.context import run_context

if TYPE_CHECKING:
    import pandas as pd

CATEGORICAL_FEATURES: tuple[str, ...] = (
    "recompute",
    "sequence_parallel",
    "fp8",
    "zero_stage",
    "is_moe",
    "framework_code",
)
"""Configuration categories (numeric codes; ``framework_code`` is a LightGBM categorical)."""

_COMM_TERMS = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "zero3_comm")

ANALYTIC_FEATURES: tuple[str, ...] = (
    "log_tokens_per_rank",
    "log_hidden_per_tp",
    "log_ffn_per_tp",
    "log_mlp_intensity",
    "attention_flops_frac",
    "kv_heads_frac",
    "mem_weights_frac",
    "mem_gradients_frac",
    "mem_optimizer_frac",
    "mem_activations_frac",
    "mem_logits_frac",
    "mem_total_frac",
    "mem_reserved_frac",
    *(f"time_{k}_frac" for k in STEP_TERMS),
    *(f"{k}_to_compute" for k in _COMM_TERMS),
    "analytic_mfu",
    "bubble_frac",
    "tp_inter_node",
    "cp_inter_node",
    "dp_inter_node",
    "pp_inter_node",
    "log_inter_node_calls_per_s",
)
"""Dimensionless outputs of the analytic model and shape ratios (module doc)."""

FEATURE_NAMES: tuple[str, ...] = CATEGORICAL_FEATURES + ANALYTIC_FEATURES

DOMAIN_AXES: tuple[str, ...] = ("num_gpus", "total_params", "seq_len", "tokens_per_rank")
"""Scale quantities whose training range the learned model records; beyond it the
correction shrinks toward the analytic answer (``surrogate.learned.domain``)."""


def features_from_analytic(c: dict[str, np.ndarray], out: dict[str, np.ndarray]) -> pd.DataFrame:
    """The feature frame (columns :data:`FEATURE_NAMES`) of analytic columns and outputs."""
    import pandas as pd

    cap = c["memory_bytes"]
    step = out["step_time_s"]
    compute = np.maximum(out["time_compute"], 1e-12)
    tokens_rank = c["mbs"] * c["seq_len"] / c["cp"]
    h, tp = c["hidden_size"], c["tp"]
    ffn = np.where(c["num_experts"] >= 2, c["moe_ffn_hidden_size"], c["ffn_hidden_size"])
    # MLP GEMM (tokens x h) @ (h x ffn/tp): FLOPs per byte of bf16 operands and result
    m, n, k = tokens_rank, ffn / tp, h
    intensity = 2 * m * n * k / (2 * (m * k + k * n + m * n))
    span = spans_nodes(c)
    m_mb = c["grad_accum"]
    slots = m_mb + c["pp"] - 1
    layers = c["num_layers"] / c["pp"]
    calls = (
        span["tp"] * 4 * layers * m_mb * (1 + c["sequence_parallel"])
        + span["cp"] * 3 * (c["cp"] - 1) * layers * m_mb
        + span["ep"] * 4 * layers * m_mb * (c["num_experts"] >= 2)
        + span["pp"] * (c["pp"] > 1) * 2 * slots
        + span["dp"] * 2
    )
    f: dict[str, np.ndarray] = {
        "recompute": c["recompute"],
        "sequence_parallel": c["sequence_parallel"],
        "fp8": c["fp8"],
        "zero_stage": c["zero_stage"],
        "is_moe": (c["num_experts"] >= 2).astype(np.float64),
        "framework_code": c["framework_code"],
        "log_tokens_per_rank": np.log(tokens_rank),
        "log_hidden_per_tp": np.log(h / tp),
        "log_ffn_per_tp": np.log(ffn / tp),
        "log_mlp_intensity": np.log(intensity),
        "attention_flops_frac": attention_flops_per_token(c) / model_flops_per_token(c),
        "kv_heads_frac": c["num_kv_heads"] / c["num_heads"],
        "mem_reserved_frac": out["mem_reserved"] / cap,
        "analytic_mfu": out["mfu"],
        "bubble_frac": out["bubble_frac"],
        "tp_inter_node": span["tp"],
        "cp_inter_node": span["cp"],
        "dp_inter_node": span["dp"],
        "pp_inter_node": span["pp"],
        "log_inter_node_calls_per_s": np.log1p(calls / step),
    }
    for term in ("weights", "gradients", "optimizer", "activations", "logits", "total"):
        f[f"mem_{term}_frac"] = out[f"mem_{term}"] / cap
    for term in STEP_TERMS:
        f[f"time_{term}_frac"] = out[f"time_{term}"] / step
    for term in _COMM_TERMS:
        f[f"{term}_to_compute"] = out[f"time_{term}"] / compute
    n = len(cap)
    block = np.column_stack(
        [np.broadcast_to(np.asarray(f[name], dtype=np.float64), n) for name in FEATURE_NAMES]
    )  # one float block: one allocation
    return pd.DataFrame(block, columns=list(FEATURE_NAMES), copy=False)


def domain_values(c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The :data:`DOMAIN_AXES` of analytic columns."""
    return {
        "num_gpus": c["gpus_per_node"] * c["num_nodes"],
        "total_params": total_params(c),
        "seq_len": c["seq_len"],
        "tokens_per_rank": c["mbs"] * c["seq_len"] / c["cp"],
    }


def build_features(
    configs: Sequence[TrainingConfig] | FlatTable,
    profile: str | Path | PerfModel | Sequence[Any] | None = None,
    *,
    extra: dict[str, np.ndarray] | None = None,
    sets: ParameterSets | None = None,
) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Features of ``configs`` and the analytic outputs they came from (same order); see
    :func:`build_features_cols` for the arguments."""
    X, out, _ = build_features_cols(configs, profile, extra=extra, sets=sets)
    return X, out


def build_features_cols(
    configs: Sequence[TrainingConfig] | FlatTable,
    profile: str | Path | PerfModel | Sequence[Any] | None = None,
    *,
    extra: dict[str, np.ndarray] | None = None,
    sets: ParameterSets | None = None,
) -> tuple[pd.DataFrame, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Features, analytic outputs and the analytic columns of ``configs`` (validated
    configurations or their flat table, ``surrogate.config.table``). ``profile`` is one
    profile for all or one per configuration; ``extra`` adds per-configuration columns the
    PerfModel reads (``net_scale``); ``sets``: the analytic parameter sets (None: the
    shipped ones)."""
    c, out, _ = analytic_for(
        configs,
        profile,
        extra=extra,
        sets=shipped_parameter_sets() if sets is None else sets,
        resolve=resolve_perf_model,
    )
    return features_from_analytic(c, out), out, c


def features_for_runs(
    runs: pd.DataFrame,
    profile: str | Path | PerfModel | None = None,
    sets: ParameterSets | None = None,
) -> tuple[pd.DataFrame, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Features of a sweep table's runs, each explained under its own cluster
    (:func:`surrogate.runs.context.run_context`), under parameter sets ``sets`` (None: the
    shipped ones)."""

    table = valid_table(runs, where="runs to explain")
    profiles, extra = run_context(runs, profile)
    return build_features_cols(table, profiles, extra=extra, sets=sets)
