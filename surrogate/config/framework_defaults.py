"""What a framework does when its user does not say: one table of documented defaults per
framework, each with the file and release it is read from.

A published performance table (``surrogate.ingest.published``) states a layout (tp, pp, cp, ep,
vp, micro-batch, global batch, precision) and leaves the rest to the framework: whether the
optimizer is distributed, whether tensor parallelism shards the sequence, what is recomputed,
which FP8 recipe runs, whether communication overlaps, how layers are split into pipeline
stages. ``surrogate predict --framework megatron`` leaves the same settings to the same
framework. Both read them here, so the assumptions a prediction makes and the ones a published
run is ingested with are the same, and both say them (:func:`assumed`, :func:`assumptions_text`).

Settings that are configuration columns (``zero_stage``, ``sequence_parallel``, ``recompute``)
enter the configuration; the others (overlap, FP8 recipe, pipeline split) are recorded as
assumptions only: the analytic model's framework terms (``surrogate.analytic``,
``surrogate.config.framework_traits``) say what it does with them.

Megatron-Core's entries are read from megatron-bridge 0.3.1 (PyPI wheel; the library recipes
under ``megatron/bridge/recipes/`` and ``megatron/bridge/training/``) and megatron-core 0.16.1
(``megatron/core/transformer/transformer_config.py``). NVIDIA's performance scripts
(``scripts/performance/`` of the Megatron-Bridge repository) are not in the wheel: where they
set something else for a published run, the table does not say and neither can we.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from surrogate.config.frameworks import get_framework
from surrogate.errors import ConfigError

BRIDGE = "megatron-bridge 0.3.1"
CORE = "megatron-core 0.16.1"
TITAN = "torchtitan 0.2.2"


@dataclass(frozen=True, kw_only=True)
class Default:
    """One documented default: ``setting`` takes ``value`` when the user does not say;
    ``when`` (a configuration's tp, dtype, ... as keyword arguments) says where it applies
    (None: always); ``source`` names the file and release."""

    setting: str
    value: str
    source: str
    when: Callable[..., bool] | None = None
    condition: str = ""
    """``when`` in words, for the docs."""
    column: str = ""
    """The configuration column the setting is, where it is one ('' for an assumption the
    configuration does not hold, e.g. overlap)."""
    column_value: Any = None
    """That column's value under this default."""

    def applies(self, **cfg: Any) -> bool:
        return self.when is None or bool(self.when(**cfg))


def _tp(**cfg: Any) -> bool:
    return int(cfg.get("tp", 1)) > 1


def _fp8(**cfg: Any) -> bool:
    return cfg.get("dtype") == "fp8"


def _pp(**cfg: Any) -> bool:
    return int(cfg.get("pp", 1)) > 1


def _ep(**cfg: Any) -> bool:
    return int(cfg.get("ep", 1)) > 1


FRAMEWORK_DEFAULTS: dict[str, tuple[Default, ...]] = {
    "megatron": (
        Default(
            setting="distributed_optimizer",
            value="on (zero_stage 1)",
            column="zero_stage",
            column_value=1,
            source=f"{BRIDGE} recipes/llama/llama3.py, recipes/qwen/qwen3_moe.py: "
            "cfg.ddp.use_distributed_optimizer = True in every pre-training recipe",
        ),
        Default(
            setting="overlap_grad_reduce",
            value="on",
            source=f"{BRIDGE} recipes/*: cfg.ddp.overlap_grad_reduce = True",
        ),
        Default(
            setting="overlap_param_gather",
            value="on",
            source=f"{BRIDGE} recipes/*: cfg.ddp.overlap_param_gather = True",
        ),
        Default(
            setting="grad_reduce_in_fp32",
            value="on",
            source=f"{BRIDGE} training/mixed_precision.py: MixedPrecisionConfig."
            "grad_reduce_in_fp32 = True",
        ),
        Default(
            setting="sequence_parallel",
            value="on",
            when=_tp,
            condition="tp > 1",
            column="sequence_parallel",
            column_value=True,
            source=f"{BRIDGE} recipes/llama/llama3.py (70B, 405B), recipes/qwen/"
            "qwen3_moe.py: cfg.model.sequence_parallel = True with tp > 1",
        ),
        Default(
            setting="tp_comm_overlap",
            value="on",
            when=_tp,
            condition="tp > 1",
            source=f"{BRIDGE} recipes/llama/llama3.py: CommOverlapConfig(tp_comm_overlap="
            "True, userbuffers_*_h100_*) for 70B and 405B",
        ),
        Default(
            setting="recompute",
            value="none",
            column="recompute",
            column_value="none",
            source=f"{BRIDGE} recipes/llama/llama3.py: cfg.model.recompute_granularity = None",
        ),
        Default(
            setting="fp8_recipe",
            value="tensorwise (current scaling)",
            when=_fp8,
            condition="dtype fp8",
            source=f"{BRIDGE} training/mixed_precision.py: MixedPrecisionConfig.fp8_recipe "
            "= 'tensorwise'; bf16_with_fp8_current_scaling_mixed: fp8 'hybrid', "
            "first_last_layers_bf16 True, fp8_param_gather True",
        ),
        Default(
            setting="expert_tensor_parallel",
            value="1 (each expert whole on a rank)",
            when=_ep,
            condition="ep > 1",
            source=f"{BRIDGE} recipes/qwen/qwen3_moe.py: cfg.model.expert_tensor_parallel_"
            f"size = 1 in every MoE recipe ({CORE} transformer_config.py leaves it "
            "None, i.e. tp; FrameworkTraits.moe_parallel_folding)",
        ),
        Default(
            setting="moe_dispatcher",
            value="flex (DeepEP), grouped GEMM",
            when=_ep,
            condition="ep > 1",
            source=f"{BRIDGE} recipes/qwen/qwen3_moe.py: moe_flex_dispatcher_backend "
            "'deepep', moe_grouped_gemm True; training/flex_dispatcher_backend.py "
            "apply_flex_dispatcher_backend sets moe_token_dispatcher_type 'flex' on "
            "Ampere and Hopper (FrameworkTraits.moe_flex_dispatch, moe_grouped_gemm)",
        ),
        Default(
            setting="pipeline_split",
            value="even (where the layers do not divide by pp x vpp, the embedding and the "
            "loss count as a layer each)",
            when=_pp,
            condition="pp > 1",
            source=f"{CORE} transformer/transformer_config.py: "
            "account_for_embedding_in_pipeline_split = False, "
            "account_for_loss_in_pipeline_split = False; where the layers do not "
            "divide, both on, as the Llama 3.1 405B recipe sets them "
            "(transformer/transformer_block.py get_num_layers_to_build; "
            "surrogate.analytic.pipeline.slot_split)",
        ),
    ),
    "torchtitan": (
        Default(
            setting="gradient_reduction",
            value="fp32",
            source=f"{TITAN} config/job_config.py: Training.mixed_precision_reduce = "
            "'float32', FSDP2's MixedPrecisionPolicy reduce_dtype (models/llama3/infra/"
            "parallelize.py); under DDP the parameters are fp32 "
            "(FrameworkTraits.reduces_gradients_in_fp32)",
        ),
        Default(
            setting="async_tp",
            value="off",
            when=_tp,
            condition="tp > 1",
            source=f"{TITAN} config/job_config.py: Parallelism.enable_async_tensor_parallel"
            " = False, and it needs compile (FrameworkTraits.tp_comm_synchronous)",
        ),
        Default(
            setting="float8",
            value="tensorwise dynamic scaling, routed experts in bf16, bf16 all-gathers",
            when=_fp8,
            condition="dtype fp8",
            source=f"{TITAN} config/job_config.py: Float8Linear.recipe_name = None "
            "(tensorwise), enable_fsdp_float8_all_gather = False; "
            "components/quantization/utils.py module_filter_fn converts nn.Linear only "
            "(FrameworkTraits.fp8_experts_in_bf16); torchao 0.14.1 float8/float8_ops.py "
            "torch._scaled_mm (FrameworkTraits.fp8_gemm_speedup)",
        ),
    ),
    "llm-foundry": (
        Default(
            setting="attention",
            value="not FlashAttention-2 (triton or torch)",
            source="mosaicml/llm-foundry 4952183 scripts/train/benchmarking/README.md "
            "(predates FlashAttention-2 with ALiBi; surrogate.config.frameworks)",
        ),
        Default(
            setting="loss",
            value="fused cross entropy",
            source="llm-foundry ComposerMPTCausalLM loss_fn 'fused_crossentropy'",
        ),
    ),
}
"""Documented defaults per framework (canonical names, ``surrogate.config.frameworks``)."""


def defaults_for(framework: str) -> tuple[Default, ...]:
    """The documented defaults of ``framework`` (a name or an alias); empty where the table
    has none."""
    return FRAMEWORK_DEFAULTS.get(get_framework(framework).name, ())


DOCUMENTED_COLUMNS: frozenset[str] = frozenset(
    d.column for entries in FRAMEWORK_DEFAULTS.values() for d in entries if d.column
)
"""The configuration columns some framework's documented default sets."""


def defaults_for_columns(framework: str) -> tuple[Default, ...]:
    """The defaults of ``framework`` that set a configuration column (none for an unknown
    name)."""
    try:
        return tuple(d for d in defaults_for(framework) if d.column)
    except ConfigError:
        return ()


def config_defaults(framework: str, **cfg: Any) -> dict[str, Any]:
    """The configuration columns ``framework``'s documented defaults set for a configuration
    (``cfg``: tp, pp, dtype, ... as keywords): what a configuration that names the framework but
    not the column takes (:func:`surrogate.config.training.config_from_flat`)."""
    try:
        entries = defaults_for(framework)
    except ConfigError:  # an unknown framework is reported where the layout is built
        return {}
    return {d.column: d.column_value for d in entries if d.column and d.applies(**cfg)}


def assumed(
    framework: str, overrides: dict[str, str] | None = None, **cfg: Any
) -> list[tuple[str, str, str]]:
    """(setting, value, source) of every default of ``framework`` that applies to a
    configuration (``cfg``: tp, pp, dtype, ... as keywords), ``overrides`` (setting -> value,
    with its own source after a ``|``) replacing the table's value."""
    out = []
    for d in defaults_for(framework):
        if d.setting in (overrides or {}):
            value, _, source = (overrides or {})[d.setting].partition("|")
            out.append((d.setting, value, source or d.source))
        elif d.applies(**cfg):
            out.append((d.setting, d.value, d.source))
    return out


def assumed_for(layout: Any) -> list[tuple[str, str, str]]:
    """(setting, value, source) of the documented defaults a layout
    (:class:`~surrogate.config.layout.LayoutConfig`) is predicted under: every default that
    applies to it, those that are configuration columns only where the layout holds the
    default's value (``--zero 0`` is not the distributed optimizer)."""
    out = []
    cfg = {"tp": layout.tp, "pp": layout.pp, "dtype": layout.dtype, "ep": layout.ep}
    for d in defaults_for(layout.framework):
        if d.applies(**cfg) and (not d.column or getattr(layout, d.column) == d.column_value):
            out.append((d.setting, d.value, d.source))
    return out


def defaults_line(layout: Any) -> str:
    """One line naming the documented defaults :func:`assumed_for` gives, with their
    releases; '' for a framework without a table."""
    items = assumed_for(layout)
    if not items:
        return ""
    releases = sorted({r for r in (BRIDGE, CORE, TITAN) if any(r in src for _, _, src in items)})
    where = f" ({', '.join(releases)})" if releases else ""
    return f"{layout.framework} defaults assumed{where}: " + ", ".join(
        f"{s.replace('_', ' ')} {v}" for s, v, _ in items
    )


def space_defaults_line(framework: str) -> str:
    """One line naming the documented defaults of ``framework`` that a layout search assumes
    (those that are not configuration columns: the search enumerates the columns), each with
    the layouts it applies to; '' for a framework without any."""
    items = [d for d in defaults_for(framework) if not d.column]
    if not items:
        return ""
    releases = sorted({r for r in (BRIDGE, CORE, TITAN) if any(r in d.source for d in items)})
    where = f" ({', '.join(releases)})" if releases else ""
    name = _canonical(framework)
    return f"{name} defaults assumed{where}: " + ", ".join(
        f"{d.setting.replace('_', ' ')} {d.value}" + (f" [{d.condition}]" if d.condition else "")
        for d in items
    )


def _canonical(framework: str) -> str:
    return get_framework(framework).name


def assumptions_text(items: list[tuple[str, str, str]]) -> str:
    """``setting=value`` pairs joined by ``;`` (values' spaces as ``_``): a short,
    machine-readable record of what was assumed."""
    return ";".join(f"{s}={v.split(' (')[0].replace(' ', '_')}" for s, v, _ in items)
