"""Training frameworks whose runs the surrogate describes: every rule a framework imposes.

A framework changes what a layout costs (which optimizer-state layout it keeps, whether it
accumulates gradients in fp32) and which layouts exist at all (ZeRO stages, pipeline schedules,
context and expert parallelism, recomputation modes, sequence parallelism). All of it lives in
:class:`FrameworkTraits`, each framework's entry naming its source; the rest of the package
reads the traits and keeps no list of its own. The rules apply at two levels:

- :meth:`FrameworkTraits.unsupported`: what the framework does not implement (ZeRO-1 in
  torchtitan, tensor parallelism in llm-foundry). :class:`~surrogate.config.layout.LayoutConfig`
  raises it: such a configuration describes no run.
- :meth:`FrameworkTraits.runs_as_another`: a layout the framework would run as another one
  (torchtitan's tensor parallelism without sequence parallelism, or its tensor or pipeline
  parallelism without FSDP, which trains in fp32; ZeRO sharding over a single replica; a
  recomputation mode its configuration cannot express). A configuration may still
  describe it (the analytic model computes it, old tables hold it), but the layout space
  (:mod:`surrogate.layouts.space`) proposes only the layout that actually runs and the launch files
  (:mod:`surrogate.loop.launch`) are written only for it.
"""

from __future__ import annotations

from surrogate.config.framework_traits import (
    BF16_ACTIVATION_SCALE,
    SCALED_MM_FP8_SPEEDUP,
    UNFUSED_CE_LOGIT_BYTES,
    FrameworkName,
    FrameworkTraits,
)
from surrogate.errors import ConfigError

DEFAULT_FRAMEWORK: FrameworkName = "torchtitan"
"""The framework of a layout that names none, everywhere: ``LayoutConfig``, a table's row
without a ``framework`` cell (``surrogate.predict`` and ``predict --from-csv`` alike), a
``LayoutSpace`` and every command. torchtitan: the framework of the runs ``propose`` and
``search --launch-dir`` write launch files for. The bundled learned model was trained mostly on
nanotron runs (the Playbook's) and torchtitan has no fitted parameter set of its own, so its
predictions say so; the Playbook's runs name nanotron (``--framework nanotron``)."""

FRAMEWORKS: dict[str, FrameworkTraits] = {
    t.name: t
    for t in (
        FrameworkTraits(
            name="nanotron",
            fp32_grad_accumulation=True,
            zero_stages=(0, 1),
            versions=("pre-pp-fix", "pp-fix"),
            tensor_parallel=True,
            pipeline_schedules={"1f1b": "1f1b", "afab": "afab"},
            schedule_without_pipeline=True,
            interleaved_schedule=None,
            context_parallel=True,
            expert_parallel=True,
            recompute_modes=("none", "full"),
            sequence_parallel_with_tp=(False, True),
            pipeline_split="cost",
            source=(
                "huggingface/nanotron: FP32GradientAccumulator (accumulate_grad_in_fp32=True in "
                "every Playbook run), ZeROs 0 and 1 (optim/zero.py); 'pp-fix' marks the pipeline "
                "engine optimisation of the Playbook's after_pp_fix column; its pipeline "
                "engines are all-forward-all-backward and 1F1B "
                "(parallel/pipeline_parallel/engine.py; ParallelismArgs.pp_engine 'afab' or "
                "'1f1b'), which drive every training step, pp = 1 included; no interleaved "
                "schedule; "
                "ParallelismArgs: tp_mode ALL_REDUCE or REDUCE_SCATTER (sequence parallelism), "
                "recompute_layer (full recomputation, no selective mode), "
                "context_parallel_size, expert_parallel_size"
            ),
        ),
        FrameworkTraits(
            name="megatron",
            fp32_grad_accumulation=True,
            keeps_bf16_gradients=False,
            zero_stages=(0, 1, 3),
            versions=("core",),
            tensor_parallel=True,
            pipeline_schedules={"1f1b": "1F1B"},
            interleaved_schedule="interleaved 1F1B",
            context_parallel=True,
            expert_parallel=True,
            recompute_modes=("none", "selective", "full"),
            sequence_parallel_with_tp=(False, True),
            pipeline_split="megatron",
            source=(
                "NVIDIA/Megatron-LM arguments.py: accumulate_allreduce_grads_in_fp32 is forced on "
                "with --bf16; --use-distributed-optimizer is ZeRO-1, Megatron-FSDP ZeRO-3; "
                "--num-layers-per-virtual-pipeline-stage selects the interleaved 1F1B schedule; "
                "--context-parallel-size, --expert-model-parallel-size, "
                "--recompute-granularity selective|full (full with --recompute-method block "
                "--recompute-num-layers N: the first N layers of each model chunk), "
                "--sequence-parallel; "
                "--account-for-embedding-in-pipeline-split and "
                "--account-for-loss-in-pipeline-split (the embedding and the loss take a layer "
                "slot each where the layers alone do not divide by pp x vpp: megatron-core "
                "0.16.1 transformer/transformer_block.py get_num_layers_to_build); "
                "--swiglu trains with bias_swiglu_fusion on (--no-bias-swiglu-fusion turns it "
                "off; Megatron-LM's megatron/training/arguments.py, not in the megatron-core "
                "package), whose SwiGLUFunction (megatron/core/fusions/fused_bias_swiglu.py) "
                "saves only its input (measured on megatron-core 0.16.1's GPT layer: "
                "datasets/saved_activations/; unfused it keeps five T x ffn tensors)"
            ),
            fused_swiglu=True,
            fp8_saves_quantized_inputs=True,
            tp_comm_overlap=True,
            fused_wgrad_accumulation=True,
            fp8_head_in_bf16=True,
            overlaps_dp_with_compute=True,
            overlaps_interleaved_pp_comm=True,
            hopper_attention_speedup=1.5,
            fp8_gemm_speedup=SCALED_MM_FP8_SPEEDUP,
            activation_scale=BF16_ACTIVATION_SCALE,
            fused_cross_entropy=True,
            partial_recompute=True,
            hybrid_sharding_stages=(1,),
            moe_dispatch_from_shard=True,
            moe_parallel_folding=True,
            moe_tp_needs_sequence_parallel=True,
            moe_flex_dispatch=True,
            moe_grouped_gemm=True,
        ),
        FrameworkTraits(
            name="torchtitan",
            fp32_grad_accumulation=False,
            zero_stages=(0, 2, 3),
            versions=("main",),
            tensor_parallel=True,
            pipeline_schedules={"1f1b": "1F1B", "afab": "GPipe"},
            interleaved_schedule="Interleaved1F1B",
            context_parallel=True,
            expert_parallel=True,
            recompute_modes=("none", "selective", "full"),
            sequence_parallel_with_tp=(True,),
            pipeline_split="weighted",
            source=(
                "pytorch/torchtitan: FSDP2 keeps sharded fp32 parameters and reduces gradients "
                "into them (no extra accumulation buffer); data_parallel_shard_degree with "
                "fsdp_reshard_after_forward 'always' is ZeRO-3, 'never' ZeRO-2, and FSDP2 has "
                "no ZeRO-1 mode; pipeline_parallel_schedule '1F1B' / 'GPipe' / "
                "'Interleaved1F1B' (torch.distributed.pipelining, used only with pp > 1), "
                "stages split by distributed/pipeline_parallel.py "
                "_generate_llm_fqn_per_model_part with pipeline_parallel_first_stage_less_layers "
                "and _last_stage_less_layers 1 (the defaults of torchtitan 0.2.2 and 0.3.0); "
                "context_parallel_degree, expert_parallel_degree; activation_checkpoint mode "
                "none / selective (selective_ac_option 'op', per operator; an integer n, "
                "every n-th block of a pipeline rank in full) / full; its "
                "tensor-parallel plans (parallelize.py) always "
                "shard the norms' sequence (SequenceParallel) and gather the norms' outputs "
                "(PrepareModuleInput to Replicate) before the column-parallel QKV and MLP "
                "projections, whose DTensor autograd keeps that gathered input (measured on "
                "torchtitan 0.2.2's Llama block: datasets/saved_activations/)"
            ),
            saves_gathered_tp_inputs=True,
            tp_comm_synchronous=True,
            pipeline_keeps_fsdp_unsharded=True,
            reduces_every_microbatch=True,
            selective_per_op=True,
            shards_over_cp=True,
            partial_recompute=True,
            partial_recompute_every_nth=True,
            hybrid_sharding_stages=(2, 3),
            mixed_precision_needs_sharding=True,
            autocast_parameters="pytorch/autocast",
            fsdp_parameters="pytorch-fsdp2/bf16",
            moe_routed_bytes=6.0,
            moe_token_group_align=8,
            # torchtitan 0.2.2 models/moe/moe.py (0.3.0 models/common/moe.py): use_grouped_mm
            # True by default, the routed experts' three GEMMs one torch._grouped_mm each over
            # the local experts' token groups (offsets), a CUTLASS sm90 grouped kernel
            moe_grouped_gemm=True,
            moe_unfused_permutation=True,
            fp8_gemm_speedup=SCALED_MM_FP8_SPEEDUP,
            fp8_experts_in_bf16=True,
            reduces_gradients_in_fp32=True,
            activation_scale=BF16_ACTIVATION_SCALE,
            logit_bytes=UNFUSED_CE_LOGIT_BYTES,
        ),
        FrameworkTraits(
            name="llm-foundry",
            fp32_grad_accumulation=False,
            zero_stages=(0, 2, 3),
            versions=("composer-fsdp1",),
            tensor_parallel=False,
            pipeline_schedules={},
            interleaved_schedule=None,
            context_parallel=False,
            expert_parallel=True,
            recompute_modes=("none", "full"),
            sequence_parallel_with_tp=(False, True),
            source=(
                "mosaicml/llm-foundry (scripts/train/benchmarking) on mosaicml/composer's "
                "PyTorch FSDP (FSDP1) wrapper: with amp the sharded parameters stay fp32 and "
                "gradients are reduced into fp32 sharded gradients, with no separate "
                "accumulation buffer; sharding_strategy NO_SHARD / SHARD_GRAD_OP / FULL_SHARD "
                "are ZeRO 0 / 2 / 3; activation_checkpointing on or off; no tensor, pipeline "
                "or context parallelism; MoE layers through MegaBlocks shard experts over the "
                "data-parallel ranks (moe_world_size). Attention: not FlashAttention-2. The "
                "benchmark tables (scripts/train/benchmarking/README.md) predate torch 2.0 (the "
                "README's own TODO) and so FlashAttention-2 (July 2023, ALiBi only from v2.4), "
                "so MPT's ALiBi ran on one of llm-foundry's other attention implementations "
                "(its Triton flash attention, attn_impl: triton, or plain torch; the README "
                "does not say which), neither measured here; its MPT model's loss is "
                "flash-attn's fused cross entropy (llm-foundry's ComposerMPTCausalLM, "
                "loss_fn fused_crossentropy by default). What its block keeps: Composer's FSDP "
                "mixed_precision DEFAULT (the tables' MP Mode) computes in bf16 parameters "
                "(mosaicml 0.15.1 trainer/mosaic_fsdp.py get_mixed_precision: param_dtype and "
                "buffer_dtype bf16 under amp_bf16), so the residual stream is bf16 and "
                "LPLayerNorm (layers/norm.py) keeps its bf16 input; MPTBlock (llm-foundry "
                "0.2.0-0.4.0 layers/blocks.py, attention.py, ffn.py; dropout 0, which saves no "
                "mask) saves its two norms' inputs, the QKV and MLP-in projections' inputs, "
                "the fused QKV output (the triton FlashAttnFunc saves q, k and v as views of "
                "it, with o, the log-sum-exp and the ALiBi bias: flash_attn_triton.py), the "
                "attention output (the out projection's input), the GELU's input and output: "
                "16 T x h bf16 tensors, the derived count (measured on llm-foundry 0.3.0's block "
                "on a CPU, with a stand-in kernel saving what FlashAttnFunc saves: "
                "datasets/saved_activations/2026-12-02/; the log-sum-exp and the norms' "
                "statistics add 0.12-0.13%)"
            ),
            flash_attention_2=False,
            fused_cross_entropy=True,
            activation_scale=BF16_ACTIVATION_SCALE,
        ),
        FrameworkTraits(
            name="pytorch",
            fp32_grad_accumulation=False,
            zero_stages=(0,),
            versions=("autocast",),
            tensor_parallel=False,
            pipeline_schedules={},
            interleaved_schedule=None,
            context_parallel=False,
            expert_parallel=False,
            recompute_modes=("none", "full"),
            sequence_parallel_with_tp=(False,),
            source=(
                "a plain PyTorch training step on one GPU (microbench/train_step.py, the "
                "project's own measurements): torchtitan's single-GPU configuration "
                "(maybe_enable_amp: fp32 parameters and gradients, torch.autocast bf16, fused "
                "AdamW), no data, tensor, pipeline, context or expert parallelism; full "
                "recomputation by torch.utils.checkpoint per block"
            ),
            logit_bytes=UNFUSED_CE_LOGIT_BYTES,
        ),
        FrameworkTraits(
            name="pytorch-fsdp2",
            fp32_grad_accumulation=False,
            zero_stages=(2, 3),
            versions=("bf16",),
            tensor_parallel=False,
            pipeline_schedules={},
            interleaved_schedule=None,
            context_parallel=False,
            expert_parallel=False,
            recompute_modes=("none", "full"),
            sequence_parallel_with_tp=(False,),
            source=(
                "the same plain PyTorch training step on one GPU under FSDP2 "
                "(microbench/train_step.py --mode fsdp2, the project's own measurements), "
                "sharded as torchtitan's apply_fsdp shards (fully_shard per block, the "
                "embeddings, the final norm and output together, the root; "
                "MixedPrecisionPolicy: bf16 parameters, fp32 reduction; fp32 sharded "
                "parameters, gradients and fused AdamW moments) over a mesh of one rank: "
                "ZeRO-3 (reshard after forward) or ZeRO-2 (not); no tensor, pipeline, context "
                "or expert parallelism"
            ),
            reduces_gradients_in_fp32=True,
            activation_scale=BF16_ACTIVATION_SCALE,
            logit_bytes=UNFUSED_CE_LOGIT_BYTES,
        ),
    )
}


FRAMEWORK_ALIASES: dict[str, str] = {
    "nemo": "megatron",
    "megatron-bridge": "megatron",
    "megatron-core": "megatron",
    "megatron-lm": "megatron",
    "mcore": "megatron",
}
"""Other names users give a framework: NeMo and Megatron-Bridge train through Megatron-Core
(NVIDIA-NeMo/Megatron-Bridge builds its models with megatron.core), so their runs are
Megatron-Core's (``megatron``)."""


def get_framework(name: str) -> FrameworkTraits:
    """Traits of ``name`` (a framework or an alias of :data:`FRAMEWORK_ALIASES`); raises
    ConfigError naming the known frameworks."""
    key = name.strip().lower()
    try:
        return FRAMEWORKS[FRAMEWORK_ALIASES.get(key, key)]
    except KeyError:
        raise ConfigError(
            f"framework must be one of {', '.join(sorted(FRAMEWORKS))}, got {name!r} "
            f"(aliases: {', '.join(f'{a} = {t}' for a, t in FRAMEWORK_ALIASES.items())})"
        ) from None
