"""What a training framework does, as data (:class:`FrameworkTraits`): the layouts it runs, the
pipeline schedules and splits, recomputation modes and sharding it offers, and how it keeps
optimizer state and gradients. The frameworks themselves are
:data:`surrogate.config.frameworks.FRAMEWORKS`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Recompute = Literal["none", "selective", "full"]
FrameworkName = Literal[
    "nanotron", "torchtitan", "megatron", "llm-foundry", "pytorch", "pytorch-fsdp2"
]
"""The frameworks whose runs are described (:data:`surrogate.config.frameworks.FRAMEWORKS`)."""
ZeroStage = Literal[0, 1, 2, 3]
"""ZeRO stage (Rajbhandari et al. 2020): 0 none, 1 optimizer states, 2 and gradients, 3 and
parameters sharded over the data-parallel ranks."""
ZERO_STAGES: tuple[int, ...] = get_args(ZeroStage)


RECOMPUTE_MODES: tuple[str, ...] = get_args(Recompute)
"""Activation recomputation: none, selective (Korthikanti et al. 2022: the attention core) or
full (each layer's forward again in the backward)."""


PipelineSchedule = Literal["1f1b", "afab"]


PIPELINE_SCHEDULES: tuple[str, ...] = get_args(PipelineSchedule)
"""Pipeline schedules (:mod:`surrogate.analytic.pipeline`): one-forward-one-backward
(PipeDream-Flush, Narayanan et al. 2021; interleaved when vpp > 1) and all-forward-all-backward
(GPipe, Huang et al. 2019: every micro-batch's forward, then every backward)."""


PipelineSplit = Literal["even", "cost", "weighted", "megatron"]


PIPELINE_SPLITS: tuple[str, ...] = get_args(PipelineSplit)
"""How a framework assigns layers to pipeline stages (:mod:`surrogate.analytic.pipeline`):
``even``, ceil(L / p) layers per rank, and an interleaved pipeline needs L divisible by
pp x vpp (Megatron-LM); ``cost``, nanotron's greedy balance of a compute cost per block;
``weighted``, torchtitan's: the embedding and the output head count as one layer each, and
L + 2 layer slots are spread evenly over the pp x vpp (virtual) stages, the first ones taking
one more where they do not divide, so any layer count fits; ``megatron``, Megatron-Core's:
even where L divides by pp x vpp, and otherwise, where L + 2 does, the embedding and the loss
count as one layer each (``account_for_embedding_in_pipeline_split``,
``account_for_loss_in_pipeline_split``: megatron-core 0.16.1
``transformer/transformer_block.py`` ``get_num_layers_to_build``, which builds (L + 2) / (pp x
vpp) layers per model chunk and one fewer on the first chunk of the first rank and the last
chunk of the last rank; ``transformer/transformer_config.py`` checks that L + 2 divides), the
split Megatron-Bridge's Llama 3.1 405B recipe sets (megatron-bridge 0.3.1
``recipes/llama/llama3.py`` ``llama31_405b_pretrain_config``: 126 layers on pp 8 x vpp 8)."""


SCALED_MM_FP8_SPEEDUP = 1.84
"""An fp8 GEMM's speed over the same shape's bf16 GEMM on an H100: the median over the 301
shapes with every side of at least 2048 of our own H100's fp8 (``torch._scaled_mm``, e4m3,
cuBLASLt) and bf16 GEMMs (``datasets/h100/2026-11-23/gemm.jsonl``; 10th-90th percentile
1.68-1.96; the datasheet's 2.0 is the bound), where the public profile's fp8 curve is its bf16
curve at twice the peak (no public fp8 H100 table: 0.80 of the measured fp8 time in median,
``docs/measurements.md``)."""

UNFUSED_CE_LOGIT_BYTES = 12.0
"""Bytes per logit alive at the loss under PyTorch's unfused cross entropy in fp32 with the
bf16 logits freed before the backward (``FrameworkTraits.logit_bytes``): torchtitan 0.2.2's
``cross_entropy_loss`` is ``F.cross_entropy(pred.flatten(0, 1).float(), labels)`` and its
trainer deletes ``pred`` before ``loss.backward()`` (``components/loss.py``, ``train.py``); the
project's own training step returns the same loss from its forward (``microbench.train_step``).
In the forward the bf16 logits (2), their fp32 copy (4) and its log-softmax (4) coexist; in
the backward the log-softmax's saved output (4), the gradient coming in (4) and the one going
out (4): 12. Measured on a CPU, 12.0-12.1 (``python -m microbench.loss_peak``); the sets fitted
on such runs agree (``pytorch/autocast`` 11.49, ``pytorch-fsdp2/bf16`` 11.42). Range 10-12
(the forward's peak to the backward's)."""

BF16_ACTIVATION_SCALE = 1.08
"""Stored activations over the derived count (``FrameworkTraits.activation_scale``) of a
framework whose layer keeps what the count derives, with a bf16 residual stream, where no set
is fitted on its own layouts' memory: 1.08, the value every set fitted on runs whose activations
are bf16 agrees on (nanotron pp-fix 1.080 and pre-pp-fix 1.093 on the Playbook's cluster,
``pytorch-fsdp2/bf16`` 1.075 on our H100: ``surrogate/data/analytic_params.json``). The
default set (1.20) pools runs whose residual stream is fp32 (PyTorch autocast's set fits 1.29:
an fp32-parameter model under autocast keeps fp32 residuals, ``docs/measurements.md``). Range
1.075-1.093 (those sets). A documented prior, fitted on none of the frameworks that take it."""


@dataclass(frozen=True, kw_only=True)
class FrameworkTraits:
    name: FrameworkName
    fp32_grad_accumulation: bool
    """Keeps a persistent fp32 gradient-accumulation buffer beside the bf16 gradients
    (+4 bytes per parameter, sharded like the gradients)."""
    keeps_bf16_gradients: bool = True
    """Keeps each parameter's bf16 gradient until the optimizer step (2 bytes per parameter,
    beside an fp32 accumulation buffer where :attr:`fp32_grad_accumulation`). False:
    Megatron-Core's data parallelism adds each gradient into the parameter's ``main_grad``
    buffer as the backward makes it and frees it (megatron-core 0.16.1
    ``distributed/distributed_data_parallel.py``, the backward hook: ``param.main_grad.add_(
    param.grad.data)``, ``param.grad = None``; with ``gradient_accumulation_fusion``, on
    wherever the fused kernel is available in Megatron-Bridge 0.3.1's ``GPTModelProvider``,
    Transformer Engine's weight-gradient GEMM writes into ``main_grad`` itself), so the
    ``main_grad`` buffer is its only gradient: 4 bytes per parameter in fp32
    (``grad_reduce_in_fp32``, which Megatron-LM forces with ``--bf16`` and Megatron-Bridge's
    Llama recipes set), the "6 + 12 / d" bytes per parameter of its distributed optimizer
    (bf16 parameter, fp32 gradient, fp32 main parameter and two moments sharded over d)."""
    zero_stages: tuple[ZeroStage, ...]
    """ZeRO stages the framework implements."""
    versions: tuple[str, ...]
    """Known implementation versions, oldest first; the last is the default."""
    tensor_parallel: bool
    """Has tensor parallelism (tp > 1)."""
    pipeline_schedules: dict[str, str] = field(hash=False)  # traits stay hashable
    """Its (non-interleaved) pipeline schedules: each of :data:`PIPELINE_SCHEDULES` it has,
    with the name its configuration gives it; empty: no pipeline parallelism (pp must be 1)."""
    schedule_without_pipeline: bool = False
    """Runs its pipeline schedule with pp = 1 too (nanotron's engine drives every step, so
    all-forward-all-backward holds every micro-batch's activations even without a pipeline);
    False: with pp = 1 micro-batches run one after the other, as under 1F1B."""
    interleaved_schedule: str | None
    """Its interleaved (virtual-stage) pipeline schedule, as its configuration names it; None:
    vpp must be 1."""
    context_parallel: bool
    """Has context parallelism (cp > 1)."""
    expert_parallel: bool
    """Has expert parallelism (ep > 1)."""
    recompute_modes: tuple[str, ...]
    """Recomputation modes its configuration expresses. All four frameworks run flash
    attention, which recomputes the attention scores anyway (what selective recomputation
    saves), so where a framework has no selective mode a 'selective' layout runs as 'none'."""
    sequence_parallel_with_tp: tuple[bool, ...]
    """The sequence_parallel settings its tensor parallelism runs with: (False, True) where it
    is an option, (True,) where its tensor-parallel plans always shard the sequence."""
    source: str
    pipeline_split: PipelineSplit = "even"
    """How it splits the layers into pipeline stages (:data:`PIPELINE_SPLITS`)."""
    flash_attention_2: bool = True
    """Runs attention with a FlashAttention-2-class kernel (flash-attn 2, PyTorch SDPA's flash
    backend, or a faster fused one): the analytic model times it by the profile's measured
    flash-attention curve where the profile has one. False: a kernel nobody measured here,
    timed by the GEMM proxy (``surrogate.analytic.step``)."""
    hopper_attention_speedup: float = 1.0
    """How many times faster than the measured FlashAttention-2-class curve (PyTorch SDPA's
    flash backend on our H100, every shipped H100 profile's ``attention``) its attention
    kernel runs on Hopper GPUs (H100, H200). Megatron-Core runs Transformer Engine's
    ``DotProductAttention``, which on Hopper prefers cuDNN's fused attention ("Disabling
    FlashAttention to give FusedAttention preference on Hopper+ for performance reasons":
    TE 2.20.2 ``pytorch/attention/dot_product_attention/utils.py``), a kernel of
    FlashAttention-3's class, which Shah et al. 2024 ("FlashAttention-3", sec. 4.1, with cuDNN
    plotted beside it) measure 1.5-2.0x faster than FlashAttention-2 forward and 1.5-1.75x
    backward in bf16 on H100. Not measured here: the lower end of that range, 1.5, as the
    prior. 1: the measured curve as it is (the others)."""
    fp8_gemm_speedup: float = 0.0
    """Its fp8 GEMMs' speed over the same shape's bf16 GEMM: an fp8 GEMM takes the profile's
    bf16 time divided by this. :data:`SCALED_MM_FP8_SPEEDUP` (1.84) for Megatron-Core, whose
    Transformer Engine GEMMs run on cuBLASLt as ``torch._scaled_mm`` does, and for torchtitan,
    whose Float8 linears (torchao 0.14.1 ``float8/float8_linear.py``) call
    ``torch._scaled_mm`` itself (``float8/float8_ops.py``), the output head's too. The
    measurement holds for any framework's fp8 GEMMs; it is scoped to those two so that the
    sets fitted on llm-foundry's fp8 runs stay valid (moving them is a refit). 0: the
    profile's fp8 curve (the others)."""
    activation_scale: float = 0.0
    """Stored activations over the derived count (the free parameter ``activation_scale``) for
    this framework where no set of the layout's own kind is at hand (its framework version's,
    or the measured set it takes, :attr:`autocast_parameters`, :attr:`fsdp_parameters`: the
    default set or the priors stand in) and the layout's residual stream is bf16 (not under
    autocast with fp32 parameters); 0: the set's value. :data:`BF16_ACTIVATION_SCALE` (1.08)
    for the frameworks whose layer keeps the derived count with a bf16 residual stream:
    torchtitan under FSDP2's bf16 ``param_dtype`` (sharded, or with tp, pp or cp:
    ``mixed_precision_needs_sharding``), whose embedding, ``nn.RMSNorm`` outputs and residual
    adds are bf16 (0.2.2 ``models/llama3/model/model.py``) and whose block saves the derived
    count with the gathered TP inputs (:attr:`saves_gathered_tp_inputs`, measured on 0.2.2's
    block); the project's FSDP2 step (bf16 parameters, ``microbench.train_step``); and the two
    whose runs measure no memory:
    Megatron-Core trains bf16 parameters with a bf16 residual stream
    (``fp32_residual_connection`` off by default in megatron-core 0.16.1
    ``transformer_config.py``), and its layer's saved tensors match the derived count
    (``tests/analytic/test_memory_measured_saves.py``); llm-foundry computes in bf16
    parameters under Composer's FSDP ``mixed_precision: DEFAULT`` (mosaicml 0.15.1
    ``trainer/mosaic_fsdp.py`` ``get_mixed_precision``: ``param_dtype`` and ``buffer_dtype``
    the run's precision, bf16 under ``amp_bf16``), so its embedding, residual adds and
    ``LPLayerNorm`` (which casts its input to the autocast dtype, ``layers/norm.py``) keep bf16,
    and its ``MPTBlock`` saves the derived count: 16 T x h bf16 tensors with a GELU MLP
    (llm-foundry 0.2.0-0.4.0 ``layers/blocks.py``, ``attention.py``, ``ffn.py``; measured on
    0.3.0's block, ``tests/analytic/test_memory_measured_saves.py``)."""
    logit_bytes: float = 0.0
    """Bytes per logit at the loss (the free parameter ``logit_bytes``) where no set of the
    layout's own kind is at hand, as :attr:`activation_scale`, and tp is 1; 0: the set's value.
    :data:`UNFUSED_CE_LOGIT_BYTES` (12) for the frameworks whose loss is PyTorch's unfused fp32
    cross entropy with the logits freed before the backward: torchtitan and the project's own
    training steps. With tp > 1 torchtitan's loss parallel runs DTensor's vocab-parallel cross
    entropy, not measured: the set's value there."""
    saves_gathered_tp_inputs: bool = False
    """Under sequence parallelism its column-parallel projections (QKV, the MLP's gate and up)
    keep their all-gathered, unsharded input for the weight gradient: two T x h bf16 tensors
    per layer whatever tp is. False: they keep their 1 / tp shard and gather it again in the
    backward (Megatron-LM's sequence parallelism, Korthikanti et al. 2022 sec. 4.2.2; nanotron
    with ``tp_linear_async_communication``, which the Playbook's runs log). Measured for
    torchtitan by ``microbench/saved_activations.py`` (``surrogate.analytic.memory``)."""
    fused_swiglu: bool = False
    """Its SwiGLU is one autograd function that keeps only its input (the gate and up
    projections' output) and recomputes SiLU in the backward, so the MLP keeps three T x ffn
    tensors per layer, not four (gate and up outputs, SiLU(gate), the product). Measured for
    Megatron-Core by ``microbench/saved_activations.py`` (``surrogate.analytic.memory``)."""
    fused_cross_entropy: bool = False
    """Its loss is a fused cross-entropy kernel that keeps the logits in their own dtype (bf16)
    and writes their gradient into one tensor of that dtype, the fp32 softmax held in registers
    only: 4 bytes per logit at the loss (``surrogate.analytic.memory.FUSED_LOGIT_BYTES``), not
    the fitted ``logit_bytes`` of a loss that copies the logits to fp32. llm-foundry's MPT
    defaults to flash-attn's ``CrossEntropyLoss`` (``ComposerMPTCausalLM``: ``loss_fn``
    ``fused_crossentropy``; flash-attn 2.5.6 ``flash_attn/ops/triton/cross_entropy.py`` saves
    the logits and an fp32 log-sum-exp per token, and its backward allocates the gradient
    with ``torch.empty_like(logits)``), read from their sources, not measured here.
    Megatron-Core as Megatron-Bridge 0.3.1's Llama recipes run it (``cross_entropy_loss_fusion
    = True``, ``cross_entropy_fusion_impl = "te"``: megatron-core 0.16.1
    ``models/common/language_module/language_module.py`` calls Transformer Engine's
    ``parallel_cross_entropy``) keeps the same: TE 2.20.2 ``pytorch/triton/cross_entropy.py``
    writes the logits' gradient into one bf16 tensor of their shape in the forward and saves
    it, with fp32 statistics per token only."""
    selective_per_op: bool = False
    """Its 'selective' recomputation is per-operator activation checkpointing (torchtitan's
    ``selective_ac_option = "op"``, what its Llama 3 8B configuration runs): each block keeps
    its input and the outputs of every other matmul (query, value, MLP gate, down projection
    before its reduce-scatter), of the attention kernel and of the reduce-scatters, and runs
    the other matmuls (key, attention output, MLP up) again in its backward. Measured on
    torchtitan 0.2.2 by ``python -m microbench.saved_activations --recompute``. False: its
    selective mode recomputes the attention core (Korthikanti et al. 2022), which flash
    attention recomputes anyway (measured on Megatron-Core: only the log-sum-exp is not
    kept)."""
    fp8_saves_quantized_inputs: bool = False
    """Under fp8 its linear layers keep their GEMM input for the weight gradient in FP8, one
    byte an element, and no bf16 copy of it: Transformer Engine's ``Linear`` saves the
    quantized input with one usage only (row- or column-wise; 2.20.2
    ``pytorch/module/linear.py``, "Discard row-wise data since it is not needed in backward
    pass") and ``LayerNormLinear`` its quantized normed output (``layernorm_linear.py``,
    ``ln_out_to_save``, with the norm's bf16 input), so a layer keeps the QKV and MLP-in
    projections' inputs (the norms' outputs) and the MLP-out projection's input in FP8, and
    the attention output projection keeps an FP8 copy of the attention output beside the bf16
    one the flash-attention kernel saves. Megatron-Core runs its linear layers on Transformer
    Engine (``transformer_impl = "transformer_engine"`` in Megatron-Bridge 0.3.1's recipes).
    False: a bf16 copy as without fp8 (torchtitan's Float8 linears, nanotron)."""
    tp_comm_overlap: bool = False
    """Overlaps each tensor-parallel collective of a layer with the GEMM it feeds or follows
    by splitting both into chunks (Transformer Engine's userbuffers: ring-exchange all-gathers
    before the QKV and MLP-in projections and in the output projections' data gradients,
    pipelined reduce-scatters after the output projections, bulk overlap of the data-gradient
    reduce-scatters with the weight-gradient GEMMs; megatron-bridge 0.3.1
    ``training/comm_overlap.py``, the ``userbuffers_*_h100_*`` configurations its Llama 3 70B
    and 3.1 405B recipes set with ``tp_comm_overlap=True``; megatron-core 0.16.1
    ``extensions/transformer_engine.py`` passes ``ub_overlap_ag`` / ``ub_overlap_rs`` to TE's
    linear layers). Within a node only (userbuffers map the NVLink peers' memory), and with
    sequence parallelism only (Megatron-Bridge turns it off without: ``comm_overlap.py``,
    "Disabling tensor parallel communication overlap due to sequence_parallel=False"). The model
    exposes what no chunk of GEMM can cover: the first of the tp chunks a ring of tp ranks
    moves (1 / tp of the collective), or the part longer than the layer's GEMMs; the rest runs
    under the GEMMs and takes NCCL's SM share from them (``surrogate.analytic.step``). False:
    the fitted ``tp_comm_scale`` prices it (nanotron's asynchronous TP is in that fit)."""
    tp_comm_synchronous: bool = False
    """Its tensor-parallel collectives run synchronously, between the GEMMs, so a TP group
    within a node pays the profile's time for them, not the fitted ``tp_comm_scale`` (which
    carries nanotron's asynchronous TP). torchtitan: DTensor's collectives, and async TP only
    with ``compile.enable_async_tensor_parallel``, off by default and refused without
    ``compile.enable`` (torchtitan 0.3.0 ``config/configs.py``, ``CompileConfig``); the
    surrogate's layouts do not say that a run compiles, so the default holds."""
    pipeline_keeps_fsdp_unsharded: bool = False
    """Under pipeline parallelism its sharded data parallelism keeps every parameter of the
    stage unsharded in bf16 for the whole step, and each one's gradient unsharded in fp32
    until the last micro-batch's backward: torchtitan does not reshard after the forward when
    pp > 1 (``fsdp_reshard_after_forward`` "default": torchtitan 0.3.0
    ``distributed/fsdp.py``, ``get_fsdp_reshard_after_forward_policy``), and PyTorch's
    pipeline schedules run every backward but the last with ``set_reshard_after_backward(False)``
    and ``set_requires_gradient_sync(False)`` (torch 2.13 ``distributed/pipelining/stage.py``,
    ``backward_maybe_with_nosync``), under which FSDP2 accumulates the unsharded gradient in
    its reduce dtype, fp32 in torchtitan (``distributed/fsdp/_fully_shard/_fsdp_param.py``,
    ``to_accumulated_grad_if_needed``). So with pp > 1 and ZeRO-2 or 3 a rank holds 2 + 4
    bytes per parameter of its stage unsharded, where the ZeRO count shards them; and it
    gathers the parameters once a step (the first micro-batch's forward) and reduce-scatters
    once (after the last backward), so its ZeRO-3 communicates as its ZeRO-2 there
    (``surrogate.analytic.comm.dp_times_s``), not every micro-batch."""
    reduces_gradients_in_fp32: bool = False
    """Its data parallelism moves fp32 gradients, 4 bytes per parameter on the wire, without an
    fp32 accumulation buffer (:attr:`fp32_grad_accumulation` implies the same on the wire):
    torchtitan's FSDP2 reduce-scatters and HSDP all-reduces in ``reduce_dtype``, which its
    ``training.mixed_precision_reduce`` fixes at float32 (0.2.2 ``config/job_config.py``; the
    ``MixedPrecisionPolicy`` of ``models/llama3/infra/parallelize.py``), and under DDP its
    parameters, so their gradients, are fp32 (autocast). False: bf16 gradients on the wire
    unless it accumulates in fp32 (llm-foundry's FSDP ``mixed_precision: DEFAULT`` leaves
    ``reduce_dtype`` unset, which FSDP takes as the bf16 ``param_dtype``)."""
    reduces_every_microbatch: bool = False
    """Without a pipeline its sharded data parallelism reduce-scatters the gradients after
    every micro-batch's backward, not once a step: torchtitan 0.3.0's trainer runs each
    gradient-accumulation step's ``forward_backward_step`` with FSDP's gradient
    synchronisation on (``trainer.py``; only its chunked loss turns it off for the head,
    ``components/loss.py``). Under ZeRO-2 the model then charges a reduce-scatter per
    micro-batch, hidden under that micro-batch's compute where shorter (as ZeRO-3's are);
    ZeRO-3's are counted so already. With a pipeline the schedule defers it
    (:attr:`pipeline_keeps_fsdp_unsharded`)."""
    fused_wgrad_accumulation: bool = False
    """Accumulates weight gradients into its fp32 buffer inside the weight-gradient GEMM
    (the GEMM's epilogue adds to ``main_grad``: megatron-core's ``gradient_accumulation_fusion``,
    on by default in Megatron-Bridge 0.3.1's ``GPTModelProvider`` wherever the fused kernel is
    available; TE's ``fuse_wgrad_accumulation``), so no separate kernel reads the bf16
    gradient and rewrites the fp32 buffer each micro-batch (the 10 bytes per parameter
    ``surrogate.analytic.step`` charges otherwise): that traffic runs inside compute-bound
    GEMMs."""
    overlaps_dp_with_compute: bool = False
    """Its data-parallel gradient reduction and ZeRO-1 weight gather overlap compute by design:
    Megatron-Core's ``overlap_grad_reduce`` launches each bucket's reduce-scatter as soon as
    the backward has filled it (so the reduction runs under the last micro-batch's backward),
    and ``overlap_param_gather`` launches the distributed optimizer's all-gathers after the
    step and waits for each bucket in the forward pre-hook of the first module that needs it
    (so the gather runs under the first micro-batch's forward): megatron-core 0.16.1
    ``distributed/distributed_data_parallel.py`` and ``param_and_grad_buffer.py``; both on in
    every Megatron-Bridge 0.3.1 pre-training recipe (``cfg.ddp.overlap_grad_reduce``,
    ``overlap_param_gather``). The model hides the reduction under the whole backward of the
    last micro-batch (``dp_overlap`` 1 for it, not the fitted value) and the gather under the
    forward of the first (a third of a slot), each paying NCCL's SM share where hidden.
    False: the fitted ``dp_overlap`` hides part of the reduction and the gather is exposed."""
    overlaps_interleaved_pp_comm: bool = False
    """Under its interleaved schedule (vpp > 1) the pipeline's sends and receives run while the
    next model chunk computes: Megatron-Bridge 0.3.1 sets ``overlap_p2p_comm`` (and not
    ``batch_p2p_comm``) wherever pp > 1 and vpp > 1 (``training/comm_overlap.py``), and
    megatron-core 0.16.1's interleaved schedule then posts each chunk's send and receive
    before the next chunk's compute and waits for them after it
    (``pipeline_parallel/schedules.py``). The model exposes none of the transfer time there
    (the handshake waits across nodes stay), and charges NCCL's SM share for the hidden part.
    False, or vpp 1: the transfers lie on the critical path (``pp_comm_scale``)."""
    fp8_head_in_bf16: bool = False
    """Under fp8 its output head runs in bf16: Megatron-Core's output layer is its own
    ``tensor_parallel.ColumnParallelLinear`` (megatron-core 0.16.1 ``models/gpt/gpt_model.py``),
    not a Transformer Engine module, so ``fp8_autocast`` leaves it in bf16. False: the head's
    GEMM is timed at the fp8 peak like the layers' (the model's behaviour before this trait)."""
    moe_routed_bytes: float = 2.0
    """Bytes an MoE layer keeps per routed token (each of its top-k copies) and hidden unit
    beside its experts' MLP activations: 2 for the bf16 copy of the tokens in expert order that
    the experts' first GEMM saves (every dropless implementation gathers one); torchtitan
    (0.2.2, measured by ``python -m microbench.saved_activations --moe``) keeps 4 more, the
    fp32 copy its routing scores weigh (before the experts, or their outputs after them).
    Megatron-Core (0.16.1, measured by ``python -m microbench.saved_activations --framework
    megatron --moe``) keeps the 2 alone: its scores weigh the experts' SwiGLU inside the fused
    function, which keeps one bf16 score per routed token. With ``moe_apply_probs_on_input``
    (top-1 only; not modelled) it keeps 2 more, the tokens before the scores weigh them.
    nanotron's weighting is not measured."""
    moe_token_group_align: int = 0
    """Rows its grouped GEMM pads each local expert's token group to: torchtitan (0.2.2) orders
    the routed tokens into a buffer of round_up(routed tokens, 8) + 8 x local experts rows
    (``TOKEN_GROUP_ALIGN_SIZE_M``, 8 in bf16; a static size, without a host sync), and its
    experts keep every row (measured by ``python -m microbench.saved_activations --moe``, also
    with ``--ep 2``). 0: no padding: Megatron-Core's dropless experts run one by one
    (``SequentialMLP``, measured on 0.16.1 without and with expert parallelism; its GPU
    path's grouped GEMM, Transformer Engine's ``TEGroupedMLP``, is not) on the routed tokens
    alone; nanotron's are not measured."""
    moe_unfused_permutation: bool = False
    """Its MoE layer orders the routed tokens by expert and back with separate PyTorch
    gathers, scatters, copies and casts, each a memory-bound kernel of its own, which the
    model counts op by op (``surrogate.analytic.moe_passes``: 106-176 bytes per routed token
    and hidden unit, forward and backward, with the residual stream in bf16 or fp32) in place
    of the generic elementwise traffic of the routed copies. torchtitan 0.2.2
    ``models/moe/moe.py`` ``MoE.forward`` (the gather ``x[token_indices_experts_sorted //
    top_k]``, the fp32 score multiply, the scatter ``routed_output_unsorted[...] =``, the sum
    over top-k, the router's input cast), ``_run_experts_grouped_mm`` (``x.bfloat16()`` per
    GEMM, ``.type_as(x)``) and ``models/moe/utils.py`` ``_permute`` / ``_unpermute`` (the
    padded groups' ``vstack``, gather and scatter). False: the routed copies take the generic
    traffic (Megatron-Core fuses its permutation; nanotron's is not read)."""
    moe_dispatch_from_shard: bool = False
    """Under tp (with sequence parallelism) an MoE layer routes its rank's sequence shard: the
    all-to-all over ep moves T / tp x k tokens, and the tokens received are then gathered over
    the tp group for the experts split by tp (and reduce-scattered back after them):
    Megatron-Core's all-to-all dispatcher (``output_splits_tp``; measured at tp 2 with and
    without ep 2 by ``python -m microbench.saved_activations --framework megatron --moe``: each
    rank routes its shard and its experts receive the tp group's tokens). False: every rank
    of a tp group routes the whole sequence and sends it over ep (torchtitan's
    ``apply_moe_ep_tp``, which all-gathers the layer's input; measured likewise)."""
    moe_parallel_folding: bool = False
    """Its expert layers take their own parallel mapping with expert tensor parallelism 1
    (Megatron-Core's MoE "parallel folding": ETP x EP x EDP = TP x CP x DP on each pipeline
    stage; megatron-core 0.16.1 ``parallel_state.initialize_model_parallel`` builds the
    expert ranks from ``expert_tensor_parallel_size``, which defaults to tp, and
    megatron-bridge 0.3.1's MoE recipes, ``recipes/qwen/qwen3_moe.py``, set it to 1, as the
    published tables' runs do). Then ep divides tp x dp x cp; each rank holds num_experts /
    ep experts whole (not split by tp) and runs their GEMMs on the tokens it routes, T / tp
    x k rows of the full expert width; the expert gradients and optimizer states shard over
    the expert data-parallel group, tp x dp x cp / ep ranks; the all-to-all runs over ep
    consecutive ranks (across nodes where ep > gpus_per_node) with no gather over tp. Load
    balance: routing is taken as even over the experts (the aux-loss balanced, dropless
    routing of the recipes; a 'tokendrop' row's capacity factor caps, and does not add,
    expert rows). False: the experts are split by tp (ETP = TP) and ep divides dp x cp."""
    moe_flex_dispatch: bool = False
    """Its expert all-to-alls are DeepEP's (``flex``: megatron-core 0.16.1 ``transformer/moe/
    token_dispatcher.py``, ``fused_a2a.py``; megatron-bridge 0.3.1's MoE recipes on Hopper): a
    token goes once to each rank, and over the network to each node, its experts reach
    (``comm.ep_time_per_layer_s``). False: every routed copy (``alltoall``, torchtitan)."""
    moe_grouped_gemm: bool = False
    """One GEMM per local expert at its own rows' (TE ``GroupedLinear``; ``torch._grouped_mm``)."""
    fp8_experts_in_bf16: bool = False
    """Under fp8 its routed experts' GEMMs run in bf16: torchtitan's Float8 training converts
    ``nn.Linear`` modules only (0.2.2 ``components/quantization/utils.py``,
    ``module_filter_fn``), and its routed experts hold their weights as plain parameters of
    ``GroupedExperts`` (``models/moe/moe.py``) run by ``torch._grouped_mm``; their fp8 grouped
    GEMM is a separate prototype (``quantize.grouped_mm.float8``), off by default. Its shared
    expert and router are ``nn.Linear`` and take fp8. False: every expert GEMM in fp8 (Megatron-
    Core's Transformer Engine ``GroupedLinear``)."""
    moe_tp_needs_sequence_parallel: bool = False
    """Its MoE layer refuses tensor parallelism without sequence parallelism in training
    (megatron-core 0.16.1's ``MoELayer.forward`` raises a ValueError), so an MoE model's layout
    with tp > 1 needs sequence_parallel."""
    shards_over_cp: bool = False
    """Its data parallelism shards the parameters over every sharded data-parallel rank and
    every cp rank (torchtitan's FSDP over data_parallel_shard_degree x cp, ``ParallelDims``),
    and its expert parallelism borrows from those ranks (the experts split over tp too, with
    ``expert_tensor_parallel_degree`` = tp, which the surrogate's launch files write): with cp
    > 1 or ep > 1 the parameters are sharded whatever the configuration says, so zero_stage 0
    (data-parallel replicas alone) needs cp = ep = 1. False: context and expert parallelism
    run with unsharded states too."""
    partial_recompute: bool = False
    """Its full recomputation can checkpoint only some layers of each pipeline stage
    (``LayoutConfig.recompute_layers``): Megatron-LM's ``--recompute-method block
    --recompute-num-layers N`` (the first N layers of each model chunk), torchtitan's
    ``selective_ac_option = "n"`` (every n-th block of a pipeline rank). False: every layer or
    none."""
    hybrid_sharding_stages: tuple[int, ...] = ()
    """ZeRO stages it runs with several copies of the shards (``LayoutConfig.dp_replicate`` >
    1: sharded over dp x cp / dp_replicate ranks, all-reduced over the copies): torchtitan's
    HSDP (``data_parallel_replicate_degree`` beside ``data_parallel_shard_degree``, FSDP2
    ZeRO-2 and 3), Megatron-LM's partial distributed optimizer
    (``--num-distributed-optimizer-instances``, ZeRO-1). Empty: one copy only."""
    mixed_precision_needs_sharding: bool = False
    """Beside tensor or pipeline parallelism it trains in bf16 mixed precision only under
    sharded data parallelism: torchtitan takes its mixed precision from FSDP's policy
    (``training.mixed_precision_param``, where data_parallel_shard_degree or cp is above 1) or
    from ``torch.autocast``, which it enables only under DDP or on one GPU; with tp or pp > 1
    and neither, mixed precision is disabled and the run trains in fp32 (0.2.2
    ``distributed/utils.py`` ``maybe_enable_amp``, the pipeline's step runs without it; 0.3.0
    ``config/configs.py``, ``Training.mixed_precision_param``). So zero_stage 0 needs tp = pp =
    1. False: its bf16 holds at every layout."""
    autocast_parameters: str | None = None
    """The ``framework/version`` whose fitted free parameters (:mod:`surrogate.analytic.params`)
    it takes where it trains under ``torch.autocast``: ZeRO-0 (one GPU or DDP) at tp = pp = cp
    = 1, where torchtitan's ``maybe_enable_amp`` runs what ``pytorch/autocast`` measured (fp32
    parameters and gradients, bf16 autocast, fused AdamW, flash attention). Checked on 28 real
    torchtitan 0.2.2 runs on one H100 that set was not fitted on
    (``datasets/h100/2026-11-24/torchtitan``, ``python benchmarks/h100_own.py``). None: its
    own set at every layout (:meth:`parameter_set`)."""
    fsdp_parameters: str | None = None
    """The ``framework/version`` whose fitted free parameters it takes where it trains under
    FSDP2's ``fully_shard`` alone: ZeRO-2 or 3 at tp = pp = cp = 1, where torchtitan's
    ``apply_fsdp`` (bf16 parameters and fp32 reduction by ``MixedPrecisionPolicy``, one group
    per block) runs what ``pytorch-fsdp2`` measured on one GPU. The communication comes from
    the cluster's profile as at every layout; what was measured is the rest (kernels, fixed
    costs, memory). None: its own set (:meth:`parameter_set`)."""
    partial_recompute_every_nth: bool = False
    """How its partial counts are written (:meth:`checkpointed_layer_counts`): every n-th block
    of a pipeline rank, floor(layers / n) of them (torchtitan); False: the first N layers of
    each model chunk, N x vpp of a rank's (Megatron-LM's block method)."""

    @staticmethod
    def replicated_unsplit(zero_stage: Any, tp: Any, pp: Any, cp: Any) -> Any:
        """ZeRO-0 at tp = pp = cp = 1 (one GPU or DDP), where :attr:`autocast_parameters`
        holds; element-wise on arrays."""
        return (zero_stage == 0) & (tp == 1) & (pp == 1) & (cp == 1)

    @staticmethod
    def sharded_unsplit(zero_stage: Any, tp: Any, pp: Any, cp: Any) -> Any:
        """ZeRO-2 or 3 at tp = pp = cp = 1 (FSDP alone), where :attr:`fsdp_parameters` holds;
        element-wise on arrays."""
        return (zero_stage >= 2) & (tp == 1) & (pp == 1) & (cp == 1)

    def parameter_set(
        self, version: str | None, *, zero_stage: int, tp: int, pp: int, cp: int
    ) -> str:
        """The ``framework/version`` whose free parameters a layout of this framework takes:
        :attr:`autocast_parameters` where it trains under autocast, :attr:`fsdp_parameters`
        under FSDP alone, else its own."""
        if self.autocast_parameters and self.replicated_unsplit(zero_stage, tp, pp, cp):
            return self.autocast_parameters
        if self.fsdp_parameters and self.sharded_unsplit(zero_stage, tp, pp, cp):
            return self.fsdp_parameters
        return f"{self.name}/{version or self.versions[-1]}"

    def checkpointed_layer_counts(self, stage_layers: int, vpp: int = 1) -> tuple[int, ...]:
        """The counts of checkpointed layers short of all (0 < k < ``stage_layers``) that its
        full recomputation expresses on a pipeline rank of ``stage_layers`` layers in ``vpp``
        model chunks, ascending; none without :attr:`partial_recompute`."""
        if not self.partial_recompute or stage_layers < 2:
            return ()
        if self.partial_recompute_every_nth:
            counts = {stage_layers // n for n in range(2, stage_layers + 1)}
        else:
            counts = {n * vpp for n in range(1, stage_layers // vpp)}
        return tuple(sorted(k for k in counts if 0 < k < stage_layers))

    @property
    def pipeline_parallel(self) -> bool:
        """Has pipeline parallelism (pp > 1)."""
        return bool(self.pipeline_schedules)

    @property
    def always_sequence_parallel(self) -> bool:
        """Its tensor parallelism always shards the sequence: the default of
        ``sequence_parallel`` with tp > 1 (:func:`surrogate.config.training.config_from_flat`)."""
        return self.sequence_parallel_with_tp == (True,)

    @property
    def interleaved_pipeline(self) -> bool:
        """Has an interleaved pipeline schedule, i.e. allows vpp > 1."""
        return self.interleaved_schedule is not None

    def unsupported(
        self,
        *,
        tp: int,
        pp: int,
        cp: int,
        ep: int,
        vpp: int,
        zero_stage: int,
        pp_schedule: str = "1f1b",
        dp_replicate: int = 1,
    ) -> str | None:
        """What of the layout the framework does not implement, or None."""
        if zero_stage not in self.zero_stages:
            return (
                f"framework {self.name} implements zero_stage "
                f"{' or '.join(map(str, self.zero_stages))}, got {zero_stage}"
            )
        if dp_replicate > 1 and zero_stage not in self.hybrid_sharding_stages:
            stages = " or ".join(map(str, self.hybrid_sharding_stages))
            return (
                f"framework {self.name} "
                + (
                    f"copies ZeRO's shards (dp_replicate > 1) with zero_stage {stages} only"
                    if stages
                    else "shards over every data-parallel rank: dp_replicate must be 1"
                )
                + f", got dp_replicate={dp_replicate} zero_stage={zero_stage}"
            )
        for degree, value, has in (
            ("tp", tp, self.tensor_parallel),
            ("pp", pp, self.pipeline_parallel),
            ("cp", cp, self.context_parallel),
            ("ep", ep, self.expert_parallel),
        ):
            if value > 1 and not has:
                return (
                    f"framework {self.name} has no {_NAMES[degree]}: {degree} must be 1, "
                    f"got {degree}={value}"
                )
        if vpp > 1 and not self.interleaved_pipeline:
            return (
                f"framework {self.name} has no interleaved pipeline schedule: vpp must be 1, "
                f"got vpp={vpp}"
            )
        if pp_schedule != "1f1b":
            if pp_schedule not in self.pipeline_schedules:
                return (
                    f"framework {self.name} has no pipeline schedule {pp_schedule!r}: "
                    f"pp_schedule must be one of {', '.join(self.pipeline_schedules) or '1f1b'}"
                    f", got {pp_schedule!r}"
                )
            if vpp > 1:
                return (
                    f"pp_schedule {pp_schedule!r} has no interleaved form here: vpp must be "
                    f"1, got vpp={vpp}"
                )
            if pp == 1 and not self.schedule_without_pipeline:
                return (
                    f"framework {self.name} runs a pipeline schedule only with pp > 1: "
                    f"pp_schedule must be '1f1b' when pp=1, got {pp_schedule!r}"
                )
        return None

    def runs_as_another(
        self,
        *,
        dp: int,
        tp: int,
        pp: int,
        cp: int,
        ep: int,
        vpp: int,
        zero_stage: int,
        recompute: str,
        sequence_parallel: bool,
        pp_schedule: str = "1f1b",
        recompute_layers: int = 0,
        dp_replicate: int = 1,
        moe: bool = False,
    ) -> str | None:
        """Why the framework cannot run the layout as described (what it does not implement,
        or the other layout it would run instead), or None: the layouts a search proposes and
        launch files are written for. ``moe``: the model has experts."""
        problem = self.unsupported(
            tp=tp,
            pp=pp,
            cp=cp,
            ep=ep,
            vpp=vpp,
            zero_stage=zero_stage,
            pp_schedule=pp_schedule,
            dp_replicate=dp_replicate,
        )
        if problem:
            return problem
        if zero_stage > 0 and self.shards_over_cp and dp * cp == 1:
            return (
                f"zero_stage > 0 needs dp x cp > 1 ({self.name} shards over its data- and "
                f"context-parallel ranks; one has nothing to shard), got dp=1 cp=1 "
                f"zero_stage={zero_stage}"
            )
        if zero_stage > 0 and not self.shards_over_cp and dp == 1:
            return (
                f"zero_stage > 0 needs dp > 1 (one replica has nothing to shard), got dp=1 "
                f"zero_stage={zero_stage}"
            )
        if self.shards_over_cp and zero_stage == 0 and max(cp, ep) > 1:
            return (
                f"{self.name} shards the parameters over its cp ranks and borrows expert "
                f"parallelism from its sharded ranks: zero_stage 0 (data-parallel replicas, "
                f"nothing sharded) needs cp = 1 and ep = 1, got cp={cp} ep={ep}"
            )
        if self.mixed_precision_needs_sharding and zero_stage == 0 and max(tp, pp) > 1:
            return (
                f"{self.name} runs bf16 mixed precision beside tensor or pipeline "
                f"parallelism only under sharded data parallelism (FSDP); zero_stage 0 with "
                f"tp={tp} pp={pp} trains in fp32: zero_stage 0 needs tp = pp = 1"
            )
        if sequence_parallel and tp == 1:
            return "sequence_parallel needs tp > 1, got tp=1"
        if moe and tp > 1 and not sequence_parallel and self.moe_tp_needs_sequence_parallel:
            return (
                f"{self.name}'s MoE layer refuses tensor parallelism without sequence "
                f"parallelism in training: an MoE model with tp={tp} needs "
                f"sequence_parallel, got sequence_parallel=False"
            )
        if tp > 1 and sequence_parallel not in self.sequence_parallel_with_tp:
            always = "always" if self.always_sequence_parallel else "never"
            return (
                f"{self.name}'s tensor parallelism {always} runs with sequence parallelism, "
                f"got tp={tp} sequence_parallel={sequence_parallel}"
            )
        if recompute not in self.recompute_modes:
            return (
                f"framework {self.name} expresses recompute "
                f"{' or '.join(self.recompute_modes)}, got {recompute!r}"
            )
        if recompute_layers > 0 and not self.partial_recompute:
            return (
                f"framework {self.name} recomputes every layer or none: recompute_layers "
                f"must be 0, got {recompute_layers}"
            )
        return None


_NAMES = {
    "tp": "tensor parallelism",
    "pp": "pipeline parallelism",
    "cp": "context parallelism",
    "ep": "expert parallelism",
}
