"""Configurations as numeric columns: the input of every analytic function.

A :data:`Cols` maps each name of :data:`surrogate.config.CONFIG_COLUMNS` (strings encoded as
numbers, below) plus the GPU's and framework's traits to a float64 array with one element per
configuration. The model-variant fields enter as the widths they give: ``qk_head_dim`` and
``v_head_dim`` (hidden_size / num_heads for a Llama block), ``moe_ffn_hidden_size`` (the
expert width in use), and the MLA ranks, shared-expert width and dense-layer count as given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from surrogate.config import RECOMPUTE_MODES, TrainingConfig
from surrogate.frameworks import FRAMEWORKS, get_framework
from surrogate.hardware import GIB, GPUS

Array = NDArray[np.float64]
Cols = Mapping[str, Array]

RECOMPUTE_CODE = {name: float(i) for i, name in enumerate(RECOMPUTE_MODES)}
"""none -> 0, selective -> 1, full -> 2."""
FRAMEWORK_VERSIONS: tuple[str, ...] = tuple(
    f"{fw.name}/{v}" for fw in FRAMEWORKS.values() for v in fw.versions)
"""Every known (framework, version) as ``name/version``; ``framework_code`` is the index."""
GPU_NAMES: tuple[str, ...] = tuple(GPUS)
"""The hardware table's GPUs; ``gpu_code`` is the index."""

_NUMERIC = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_heads", "num_kv_heads", "vocab_size",
    "seq_len", "num_experts", "experts_topk", "gpus_per_node", "num_nodes",
    "dp", "tp", "pp", "cp", "ep", "vpp", "mbs", "grad_accum", "zero_stage",
)


def config_row(cfg: TrainingConfig) -> dict[str, float]:
    """One configuration as the numbers the analytic model reads."""
    m, c, lay = cfg.model, cfg.cluster, cfg.layout
    gpu = c.spec
    fw = get_framework(lay.framework)
    row = {name: float(getattr(m if hasattr(m, name) else c if hasattr(c, name) else lay, name))
           for name in _NUMERIC}
    row.update(
        tie_embeddings=float(m.tie_embeddings),
        moe_ffn_hidden_size=float(m.expert_ffn_hidden_size),
        # attention and MoE variants (ModelConfig): head widths as used, 0 where absent
        qk_head_dim=float(m.attention_head_dim),
        v_head_dim=float(m.value_head_dim),
        q_lora_rank=float(m.q_lora_rank),
        kv_lora_rank=float(m.kv_lora_rank),
        qk_rope_head_dim=float(m.qk_rope_head_dim),
        shared_expert_ffn_hidden_size=float(m.shared_expert_ffn_hidden_size),
        num_dense_layers=float(m.num_dense_layers),
        sequence_parallel=float(lay.sequence_parallel),
        recompute=RECOMPUTE_CODE[lay.recompute],
        fp8=float(lay.dtype == "fp8"),
        peak_flops=gpu.peak_flops(lay.dtype),
        memory_bytes=gpu.memory_gib * GIB,
        hbm_bw=gpu.hbm_bw_bytes_per_s,
        intra_node_bw=gpu.intra_node_bw_bytes_per_s,
        inter_node_bw=gpu.inter_node_bw_bytes_per_s,
        intra_node_latency_s=gpu.intra_node_latency_s,
        inter_node_latency_s=gpu.inter_node_latency_s,
        fp32_grad_accumulation=float(fw.fp32_grad_accumulation),
        is_nanotron=float(fw.name == "nanotron"),
        framework_version_rank=float(fw.versions.index(lay.framework_version or fw.versions[-1])),
        gpu_code=float(GPU_NAMES.index(c.gpu)),
        framework_code=float(FRAMEWORK_VERSIONS.index(
            f"{fw.name}/{lay.framework_version or fw.versions[-1]}")),
    )
    return row


def to_cols(configs: Sequence[TrainingConfig]) -> dict[str, Array]:
    """Stack configurations into columns (each a float64 array of len(configs)), with the
    free parameters of each configuration's framework version (``p_<name>``,
    :mod:`surrogate.analytic.params`)."""
    from surrogate.analytic.params import param_columns

    rows = [config_row(cfg) for cfg in configs]
    if not rows:
        return {}
    cols = {k: np.array([r[k] for r in rows], dtype=np.float64) for k in rows[0]}
    cols.update(param_columns([FRAMEWORK_VERSIONS[int(r["framework_code"])] for r in rows]))
    return cols
