"""Configurations as numeric columns: the input of every analytic function.

A :data:`Cols` maps each name of :data:`surrogate.config.training.CONFIG_COLUMNS` (strings encoded
as
numbers, below) plus the GPU's and framework's traits to a float64 array with one element per
configuration. The model-variant fields enter as the widths they give: ``qk_head_dim`` and
``v_head_dim`` (hidden_size / num_heads for a Llama block), ``moe_ffn_hidden_size`` (the
expert width in use), and the MLA ranks, shared-expert width and dense-layer count as given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from surrogate.config.framework_traits import RECOMPUTE_MODES, FrameworkTraits
from surrogate.config.frameworks import FRAMEWORKS, get_framework
from surrogate.config.gpus import GIB, GPUS, get_gpu
from surrogate.config.model import ModelConfig
from surrogate.config.table import FlatTable, flat_table, per_group, table_len
from surrogate.config.training import MODEL_FIELDS, TrainingConfig

Array = NDArray[np.float64]
Cols = Mapping[str, Array]


class ParameterColumns(Protocol):
    """What the columns read of the fitted parameter sets
    (:class:`surrogate.analytic.params.ParameterSets`, which reads this module's
    :data:`FRAMEWORK_VERSIONS`: named by what it does, so that neither module imports the other
    back)."""

    def param_columns(self, parameter_codes: Array) -> dict[str, Array]:
        """``p_<name>`` columns for configurations of the given ``parameter_code`` each."""
        ...

    def memory_fitted_codes(self, parameter_codes: Array) -> Array:
        """Per ``parameter_code``, whether that framework version has a set of its own here
        whose memory parameters were fitted (not the default set or the priors standing
        in)."""
        ...


RECOMPUTE_CODE = {name: float(i) for i, name in enumerate(RECOMPUTE_MODES)}
"""none -> 0, selective -> 1, full -> 2."""
FRAMEWORK_VERSIONS: tuple[str, ...] = tuple(
    f"{fw.name}/{v}" for fw in FRAMEWORKS.values() for v in fw.versions
)
"""Every known (framework, version) as ``name/version``; ``framework_code`` is the index."""
GPU_NAMES: tuple[str, ...] = tuple(GPUS)
"""The hardware table's GPUs; ``gpu_code`` is the index."""

_NUMERIC = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_heads",
    "num_kv_heads",
    "vocab_size",
    "seq_len",
    "num_experts",
    "experts_topk",
    "gpus_per_node",
    "num_nodes",
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "vpp",
    "mbs",
    "grad_accum",
    "zero_stage",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "shared_expert_ffn_hidden_size",
    "num_dense_layers",
    "tie_embeddings",
    "sequence_parallel",
    "recompute_layers",
    "dp_replicate",
    "gated_mlp",
)
"""Configuration columns the analytic model reads as they are."""


def _model_widths(m: ModelConfig) -> tuple[float, float, float]:
    """The widths a model's variant fields give: query/key and value head widths, expert MLP
    width (ModelConfig's properties)."""
    return (float(m.attention_head_dim), float(m.value_head_dim), float(m.expert_ffn_hidden_size))


def _gpu_traits(gpu: str, dtype: str) -> tuple[float, ...]:
    spec = get_gpu(gpu)
    return (
        spec.peak_flops(dtype),
        spec.peak_flops("bf16"),
        spec.memory_gib * GIB,
        spec.hbm_bw_bytes_per_s,
        spec.intra_node_bw_bytes_per_s,
        spec.inter_node_bw_bytes_per_s,
        spec.intra_node_latency_s,
        spec.inter_node_latency_s,
        float(GPU_NAMES.index(spec.name)),
        float(spec.hopper),
    )


_GPU_COLUMNS = (
    "peak_flops",
    "peak_flops_bf16",
    "memory_bytes",
    "hbm_bw",
    "intra_node_bw",
    "inter_node_bw",
    "intra_node_latency_s",
    "inter_node_latency_s",
    "gpu_code",
    "hopper",
)


def _framework_traits(framework: str, version: str | None) -> tuple[float, ...]:
    fw = get_framework(framework)
    v = version or fw.versions[-1]
    return (
        float(fw.fp32_grad_accumulation),
        float(fw.pipeline_split == "cost"),
        float(fw.versions.index(v)),
        float(FRAMEWORK_VERSIONS.index(f"{fw.name}/{v}")),
        float(fw.flash_attention_2),
        float(fw.pipeline_split == "weighted"),
        float(fw.pipeline_split == "megatron"),
        float(fw.keeps_bf16_gradients),
        float(fw.fp8_saves_quantized_inputs),
        float(fw.tp_comm_overlap),
        float(fw.fused_wgrad_accumulation),
        float(fw.fp8_head_in_bf16),
        float(fw.overlaps_dp_with_compute),
        float(fw.hopper_attention_speedup),
        float(fw.fp8_gemm_speedup),
        float(fw.activation_scale),
        float(fw.logit_bytes),
        float(fw.tp_comm_synchronous),
        float(fw.pipeline_keeps_fsdp_unsharded),
        float(fw.overlaps_interleaved_pp_comm),
        float(fw.reduces_every_microbatch),
        float(fw.saves_gathered_tp_inputs),
        float(fw.fused_swiglu),
        float(fw.fused_cross_entropy),
        float(fw.selective_per_op),
        float(fw.moe_routed_bytes),
        float(fw.moe_token_group_align),
        float(fw.moe_dispatch_from_shard),
        float(fw.moe_parallel_folding),
        float(fw.moe_flex_dispatch),
        float(fw.moe_grouped_gemm),
        float(fw.moe_unfused_permutation),
        float(fw.fp8_experts_in_bf16),
        float(fw.reduces_gradients_in_fp32),
        *(
            float(FRAMEWORK_VERSIONS.index(name)) if name else -1.0
            for name in (fw.autocast_parameters, fw.fsdp_parameters)
        ),
    )


_FRAMEWORK_COLUMNS = (
    "fp32_grad_accumulation",
    "cost_pipeline_split",
    "framework_version_rank",
    "framework_code",
    "flash_attention_2",
    "weighted_pipeline_split",
    "megatron_pipeline_split",
    "keeps_bf16_gradients",
    "fp8_saves_quantized_inputs",
    "tp_comm_overlap",
    "fused_wgrad_accumulation",
    "fp8_head_in_bf16",
    "overlaps_dp_with_compute",
    "hopper_attention_speedup",
    "fp8_gemm_speedup",
    "framework_activation_scale",
    "framework_logit_bytes",
    "tp_comm_synchronous",
    "pipeline_keeps_fsdp_unsharded",
    "overlaps_interleaved_pp_comm",
    "reduces_every_microbatch",
    "saves_gathered_tp_inputs",
    "fused_swiglu",
    "fused_cross_entropy",
    "selective_per_op",
    "moe_routed_bytes",
    "moe_token_group_align",
    "moe_dispatch_from_shard",
    "moe_parallel_folding",
    "moe_flex_dispatch",
    "moe_grouped_gemm",
    "moe_unfused_permutation",
    "fp8_experts_in_bf16",
    "reduces_gradients_in_fp32",
    "autocast_code",
    "fsdp_code",
)


def _traits(
    table: FlatTable, names: tuple[str, ...], fn: Any, columns: tuple[str, ...]
) -> dict[str, Array]:
    """Columns of ``fn`` evaluated once per distinct value of the table's ``names``, each a
    contiguous array (a strided column of one 2-D array makes every later pass slower)."""
    codes, answers = per_group([table[k] for k in names], fn)
    values = np.array(answers, dtype=np.float64).reshape(len(answers), len(columns)).T.copy()
    return {name: values[j][codes] for j, name in enumerate(columns)}


def cols_from_table(table: FlatTable, sets: ParameterColumns) -> dict[str, Array]:
    """The analytic model's columns of validated configurations given as a flat table
    (:mod:`surrogate.config.table`), with the free parameters of each configuration's
    framework version in ``sets`` (``p_<name>``, :mod:`surrogate.analytic.params`). Derived
    values (head widths, the GPU's and framework's traits) are computed once per distinct
    model, GPU and framework."""
    if table_len(table) == 0:
        return {}
    cols = {name: table[name].astype(np.float64) for name in _NUMERIC}
    widths = _traits(
        table,
        MODEL_FIELDS,
        lambda *m: _model_widths(ModelConfig(**dict(zip(MODEL_FIELDS, m, strict=True)))),
        ("qk_head_dim", "v_head_dim", "moe_ffn_hidden_size"),
    )
    cols.update(widths)
    cols["recompute"] = _traits(
        table, ("recompute",), lambda r: (RECOMPUTE_CODE[r],), ("recompute",)
    )["recompute"]
    cols["fp8"] = (table["dtype"] == "fp8").astype(np.float64)
    cols["pp_afab"] = (table["pp_schedule"] == "afab").astype(np.float64)
    cols.update(_traits(table, ("gpu", "dtype"), _gpu_traits, _GPU_COLUMNS))
    cols.update(
        _traits(table, ("framework", "framework_version"), _framework_traits, _FRAMEWORK_COLUMNS)
    )
    # the free-parameter set each layout takes (FrameworkTraits.parameter_set), by its index
    autocast = (cols["autocast_code"] >= 0) & FrameworkTraits.replicated_unsplit(
        cols["zero_stage"], cols["tp"], cols["pp"], cols["cp"]
    )
    fsdp = (cols["fsdp_code"] >= 0) & FrameworkTraits.sharded_unsplit(
        cols["zero_stage"], cols["tp"], cols["pp"], cols["cp"]
    )
    cols["parameter_code"] = np.where(
        autocast, cols["autocast_code"], np.where(fsdp, cols["fsdp_code"], cols["framework_code"])
    )
    # 1 where the layout trains under autocast with fp32 parameters (an fp32 residual stream)
    cols["autocast_fp32"] = autocast.astype(np.float64)
    # a framework's stated activation scale and logit bytes hold where no set of the layout's
    # own kind fitted on memory is at hand (FrameworkTraits.activation_scale, logit_bytes):
    # the scale where the residual stream is bf16, the logit bytes at tp 1
    own = np.asarray(sets.memory_fitted_codes(cols["parameter_code"]), dtype=bool)
    cols["framework_activation_scale"] = np.where(
        own | autocast, 0.0, cols["framework_activation_scale"]
    )
    cols["framework_logit_bytes"] = np.where(
        own | (cols["tp"] > 1), 0.0, cols["framework_logit_bytes"]
    )
    # 1 where that set is at hand: its OOM margin is fitted on the framework's own runs, and
    # elsewhere the prior's holds (surrogate.analytic.memory.oom_probability)
    cols["memory_fitted"] = own.astype(np.float64)
    cols.update(sets.param_columns(cols["parameter_code"]))
    return cols


def to_cols(configs: Sequence[TrainingConfig], sets: ParameterColumns) -> dict[str, Array]:
    """:func:`cols_from_table` of validated configurations."""
    return cols_from_table(flat_table(configs), sets)
