"""Features of the learned models: the configuration and what the analytic model says of it.

The learned models correct the analytic model rather than replace it, so besides the raw
configuration they see the analytic memory breakdown (and its ratio to capacity), the step
time split into compute, exposed communication per dimension and bubble, the analytic
throughput and MFU, and where each parallel group sits (inside a node or across nodes).
:data:`FEATURE_NAMES` is the public, tested order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from surrogate.analytic.comm import spans_nodes
from surrogate.analytic.flops import active_params, total_params
from surrogate.analytic.perf import PerfModel
from surrogate.analytic.step import STEP_TERMS
from surrogate.config import TrainingConfig

if TYPE_CHECKING:
    import pandas as pd

CONFIG_FEATURES: tuple[str, ...] = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_heads", "num_kv_heads", "vocab_size",
    "seq_len", "tie_embeddings", "num_experts", "experts_topk", "gpus_per_node", "num_nodes",
    "dp", "tp", "pp", "cp", "ep", "vpp", "mbs", "grad_accum", "zero_stage", "recompute",
    "sequence_parallel", "fp8", "is_nanotron", "fp32_grad_accumulation", "framework_version_rank",
    "peak_flops", "memory_bytes",
)
"""Configuration columns (strings encoded as in :mod:`surrogate.analytic.inputs`)."""

ANALYTIC_FEATURES: tuple[str, ...] = (
    "log_total_params", "log_active_params", "log_batch_tokens", "log_tokens_per_rank",
    "mem_weights_frac", "mem_gradients_frac", "mem_optimizer_frac", "mem_activations_frac",
    "mem_logits_frac", "mem_total_frac", "mem_reserved_frac",
    *(f"time_{k}_frac" for k in STEP_TERMS),
    "log_step_time_s", "log_tokens_per_s_per_gpu", "analytic_mfu", "bubble_frac",
    "tp_inter_node", "cp_inter_node", "dp_inter_node", "pp_inter_node",
)
"""Analytic outputs: memory terms as fractions of capacity, step terms as fractions of the
step, logs of sizes and rates, and which groups span nodes."""

FEATURE_NAMES: tuple[str, ...] = CONFIG_FEATURES + ANALYTIC_FEATURES


def features_from_analytic(
    c: dict[str, np.ndarray], out: dict[str, np.ndarray]
) -> pd.DataFrame:
    """The feature frame (columns :data:`FEATURE_NAMES`) of analytic columns and outputs."""
    import pandas as pd

    cap = c["memory_bytes"]
    step = out["step_time_s"]
    tokens_rank = c["mbs"] * c["seq_len"] / c["cp"]
    span = spans_nodes(c)
    f: dict[str, np.ndarray] = {name: c[name] for name in CONFIG_FEATURES}
    f.update(
        log_total_params=np.log(total_params(c)),
        log_active_params=np.log(active_params(c)),
        log_batch_tokens=np.log(c["dp"] * c["grad_accum"] * c["mbs"] * c["seq_len"]),
        log_tokens_per_rank=np.log(tokens_rank),
        mem_reserved_frac=out["mem_reserved"] / cap,
        log_step_time_s=np.log(step),
        log_tokens_per_s_per_gpu=np.log(out["tokens_per_s_per_gpu"]),
        analytic_mfu=out["mfu"],
        bubble_frac=out["bubble_frac"],
        tp_inter_node=span["tp"],
        cp_inter_node=span["cp"],
        dp_inter_node=span["dp"],
        pp_inter_node=span["pp"],
    )
    for term in ("weights", "gradients", "optimizer", "activations", "logits", "total"):
        f[f"mem_{term}_frac"] = out[f"mem_{term}"] / cap
    for term in STEP_TERMS:
        f[f"time_{term}_frac"] = out[f"time_{term}"] / step
    return pd.DataFrame({name: f[name] for name in FEATURE_NAMES})


def build_features(
    configs: Sequence[TrainingConfig], profile: str | Path | PerfModel | None = None
) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Features of ``configs`` and the analytic outputs they came from (same order)."""
    from surrogate.prediction import analytic_for

    c, out, _ = analytic_for(configs, profile)
    return features_from_analytic(c, out), out
