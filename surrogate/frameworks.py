"""Training frameworks whose runs the surrogate describes, and the traits the analytic model needs.

A framework changes what a layout costs: which optimizer-state layout it keeps, whether it
accumulates gradients in fp32, which ZeRO stages it implements. Each trait names its source.
"""

from __future__ import annotations

from dataclasses import dataclass

from surrogate.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class FrameworkTraits:
    name: str
    fp32_grad_accumulation: bool
    """Keeps a persistent fp32 gradient-accumulation buffer beside the bf16 gradients
    (+4 bytes per parameter, sharded like the gradients)."""
    zero_stages: tuple[int, ...]
    """ZeRO stages the framework implements."""
    versions: tuple[str, ...]
    """Known implementation versions, oldest first; the last is the default."""
    interleaved_pipeline: bool
    """Has an interleaved (virtual-stage) pipeline schedule, i.e. allows vpp > 1."""
    source: str


FRAMEWORKS: dict[str, FrameworkTraits] = {
    t.name: t
    for t in (
        FrameworkTraits(
            name="nanotron",
            fp32_grad_accumulation=True,
            zero_stages=(0, 1),
            versions=("pre-pp-fix", "pp-fix"),
            interleaved_pipeline=False,
            source=(
                "huggingface/nanotron: FP32GradientAccumulator (accumulate_grad_in_fp32=True in "
                "every Playbook run), ZeROs 0 and 1 (optim/zero.py); 'pp-fix' marks the pipeline "
                "engine optimisation of the Playbook's after_pp_fix column; its pipeline "
                "engines are "
                "all-forward-all-backward and 1F1B (parallel/pipeline_parallel/engine.py), no "
                "interleaved schedule"
            ),
        ),
        FrameworkTraits(
            name="megatron",
            fp32_grad_accumulation=True,
            zero_stages=(0, 1, 3),
            versions=("core",),
            interleaved_pipeline=True,
            source=(
                "NVIDIA/Megatron-LM arguments.py: accumulate_allreduce_grads_in_fp32 is forced on "
                "with --bf16; --use-distributed-optimizer is ZeRO-1, Megatron-FSDP ZeRO-3"
            ),
        ),
        FrameworkTraits(
            name="torchtitan",
            fp32_grad_accumulation=False,
            zero_stages=(0, 1, 2, 3),
            versions=("main",),
            interleaved_pipeline=True,
            source=(
                "pytorch/torchtitan: FSDP2 keeps sharded fp32 parameters and reduces gradients "
                "into them (no extra accumulation buffer); reshard_after_forward=False is ZeRO-2"
            ),
        ),
        FrameworkTraits(
            name="llm-foundry",
            fp32_grad_accumulation=False,
            zero_stages=(0, 2, 3),
            versions=("composer-fsdp1",),
            interleaved_pipeline=False,
            source=(
                "mosaicml/llm-foundry (scripts/train/benchmarking) on mosaicml/composer's "
                "PyTorch FSDP (FSDP1) wrapper: with amp the sharded parameters stay fp32 and "
                "gradients are reduced into fp32 sharded gradients, with no separate "
                "accumulation buffer; sharding_strategy NO_SHARD / SHARD_GRAD_OP / FULL_SHARD "
                "are ZeRO 0 / 2 / 3; no tensor or pipeline parallelism"
            ),
        ),
    )
}


def get_framework(name: str) -> FrameworkTraits:
    """Traits of ``name``; raises ConfigError naming the known frameworks."""
    try:
        return FRAMEWORKS[name.strip().lower()]
    except KeyError:
        raise ConfigError(
            f"framework must be one of {', '.join(sorted(FRAMEWORKS))}, got {name!r}"
        ) from None
