"""Per-GPU memory of the most loaded rank, as a breakdown in bytes.

Model states (Rajbhandari et al. 2020, "ZeRO", sec. 3 and Fig. 1): mixed-precision AdamW
keeps bf16 weights (2 bytes/param), bf16 gradients (2), and fp32 master weights plus two
fp32 moments (12): 16 bytes per parameter. Frameworks that accumulate gradients in fp32
(nanotron, Megatron; ``surrogate.frameworks``) keep 4 more. ZeRO-1 shards the optimizer
states, ZeRO-2 also the gradients, ZeRO-3 also the weights, over the dp x cp ranks (over
dp x cp / ep for expert weights); with hybrid sharding (``dp_replicate`` copies of the
shards: PyTorch FSDP's HSDP, Zhao et al. 2023, "PyTorch FSDP", sec. 3.2.1) over dp x cp /
dp_replicate of them. Seed figures: 7B with ZeRO-3 on 8 GPUs = 14 GB; 80B on
32 GPUs = 40 GB (Playbook).

Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", sec. 4, eq. 1-2), rederived for the Llama block with flash attention
(Dao 2022: the s x s scores are never stored, so the 5 a s / h term vanishes), GQA and a
SwiGLU MLP, in bf16, for T = mbs x seq_len / cp tokens on a rank:

- replicated across tp unless sequence parallel: the inputs of the two RMSNorms and of the
  QKV and MLP projections, 4 x 2 T h bytes;
- split by tp: Q and the attention output (2 x 2 T h), K and V (2 x 2 T h_kv), and the MLP's
  gate and up outputs, SiLU(gate) and its product with up (4 x 2 T ffn) (nanotron's
  ``GLUActivation``, torchtitan's ``FeedForward``: measured); Megatron-LM's fused SwiGLU
  (``FrameworkTraits.fused_swiglu``, on by default) keeps only its input, the gate and up
  outputs, and recomputes SiLU: 3 x 2 T ffn (measured on Megatron-Core's layer by
  ``microbench/saved_activations.py``).

Sequence parallelism (Korthikanti sec. 4.2.2) splits the replicated part by tp too, the
projections' inputs as shards that each projection gathers again in its backward. A framework
whose projections keep the gathered input instead (``FrameworkTraits.saves_gathered_tp_inputs``:
torchtitan, whose DTensor plan gathers the norms' outputs before the column-parallel QKV and
MLP projections; measured by ``microbench/saved_activations.py``) keeps those two whole. Full
recomputation keeps only each layer's input (2 T h, / tp with sequence parallelism) plus one
layer's activations while it is recomputed; where it checkpoints only ``recompute_layers`` of
a stage's layers (Megatron-LM's block method, torchtitan's every n-th block), the others keep
everything (:func:`stage_activation_bytes`; torchtitan's "2" measured on a stack of four).
Selective recomputation of the attention core (Megatron-LM's) stores what flash attention
already avoids storing, so it changes nothing here (measured on Megatron-Core's block: it
drops only the log-sum-exp). torchtitan's selective
mode as its Llama 3 8B configuration runs it, per operator, keeps the outputs of every other
matmul, of the attention kernel and of the reduce-scatters (:func:`per_op_checkpoint_bytes`,
measured), in an MoE layer of its all-to-alls too but of neither the router's matmul nor the
experts' grouped GEMMs. Both measured by ``python -m microbench.saved_activations
[--moe] --recompute``.

Variants (shapes in ``flops``): Q and the attention output are heads x head_dim wide, K and V
kv_heads x head_dim (h and h_kv for a Llama block). MLA stores Q and K of heads x
(nope + rope) and V and the output of heads x v_head_dim, split by tp, plus its latents (query
latent and its norm, key-value latent with the rotary key, and its norm), replicated like the
projection inputs. An MoE token keeps the MLP activations of its top-k experts and of the
shared expert, and each of its top-k copies in expert order (2 h bytes, the experts' GEMM
input; torchtitan also the fp32 copy its routing scores weigh, 4 h:
``FrameworkTraits.moe_routed_bytes``, measured for torchtitan and Megatron-Core; the router's
scores and indices, 4 E + 28 k bytes a token for torchtitan and 3 E + 20 k for Megatron, are
left out). Under tp the experts' activations are split and the copies are not: experts
split by tp take every token their tp group routes to them (torchtitan all-gathers the
layer's input and routes the whole sequence on every rank, Megatron routes its sequence shard
and all-gathers the routed tokens; both measured at tp 2). torchtitan's grouped GEMM also
keeps the rows that pad its local experts' token groups, each like a routed token's GEMM
input and expert activations (``moe_padding_rows``: 8 per local expert and up to a multiple of
8; measured, also under expert parallelism, where routing is taken as balanced). An MoE
model's leading dense layers are averaged in per layer (DeepSeek-V2/V3 size them alike:
ffn = (top-k + shared) x the expert width).

Pipelining: the first stage holds ``first_stage_inflight`` micro-batches (1F1B or
interleaved, see ``pipeline``); the last stage holds one under 1F1B, ((v - 1) p + 1) / v
chunk-sized ones under the interleaved schedule (``pipeline.stage_inflight``), plus the logits.
Under all-forward-all-backward every stage holds all m micro-batches, and the last stage also
keeps what the loss saved for the backward of the m - 1 micro-batches before the one at the
loss: the fp32 softmax of the vocab-parallel cross entropy (``SAVED_LOGIT_BYTES`` per logit;
Megatron-LM ``tensor_parallel/cross_entropy.py`` and nanotron ``sharded_cross_entropy`` save
``exp_logits`` in fp32). Every stage is weighed, the largest reported (``memory_breakdown``,
``stage_memory``).

Pipelined stages also keep, for each micro-batch in flight beyond the first, a fitted
number of unsharded T x h tensors in bf16 (free parameter ``inflight_hidden_tensors``). This
term is measured, not derived: the Playbook's nanotron pp-fix pipelines hold about five more
such tensors per micro-batch than the activation count, a number that does not shrink as tp
splits the layers (``benchmarks/memory_diagnosis.py`` table 8 compares the shapes); which
tensors they are in nanotron's engine is not identified.

Logits: at the start of the backward, the output head's T x V / tp logits in bf16 (2 bytes),
their fp32 copy (4), the fp32 softmax the vocab-parallel cross entropy saves (4), its fp32
gradient (4) and that gradient cast to bf16 (2) can coexist: at most 16 bytes per logit, the
prior of the free parameter ``logit_bytes``; frameworks free some before others are made, so
it is fitted per framework version (``surrogate.analytic.params``).

Backward working set: a layer's backward creates gradients of its activations about as large
as the activations themselves (``transient``: one layer's worth, Korthikanti's per-layer term).

Model selection, stated plainly: the backward working set was chosen among alternatives by
comparing with the Playbook's measured peak memory; so was rejecting the hypothesis that
nanotron keeps the all-gathered inputs of sequence-parallel projections (it overshot by 2-3x
at tp >= 16). docs/accuracy.md reports the accuracy with this caveat.

Overheads, explicit terms (assumptions, documented so they can be checked):
- ``buffers``: gradient-reduction buckets (2 x 25 MiB in fp32, the DDP default) and the
  all-gather buffer of one layer's weights under ZeRO-3 (x2 for prefetch);
- ``allocator``: the PyTorch caching allocator rounds blocks up and fragments; we count
  the free parameter ``allocator_overhead_frac`` of everything else (reserved vs allocated;
  prior 0.10, fitted per framework version: ``surrogate.analytic.params``);
- ``cuda_context``: the CUDA context, cuBLAS workspace and NCCL's own buffers, outside
  PyTorch's allocator (``CUDA_CONTEXT_BYTES``).
"""

from __future__ import annotations

import numpy as np

from surrogate.analytic import pipeline
from surrogate.analytic.flops import (
    attention_params_per_layer,
    checkpointed_layers,
    embedding_params,
    expert_params_per_layer,
    mlp_params_per_layer,
    moe_layers,
    per_op_recompute,
    router_params_per_layer,
    shared_expert_params_per_layer,
)
from surrogate.analytic.inputs import Array, Cols
from surrogate.analytic.params import param
from surrogate.config.gpus import GIB

CUDA_CONTEXT_BYTES = 1.0 * GIB
"""CUDA context + cuBLAS workspace + NCCL buffers, outside torch's allocator."""
DDP_BUCKET_BYTES = 2 * 25 * 2**20 * 4
"""Two 25 MiB gradient buckets in fp32 (torch DDP ``bucket_cap_mb`` default)."""
SAVED_LOGIT_BYTES = 4.0
"""Bytes per logit the vocab-parallel cross entropy saves for its backward: the fp32 softmax
(module docstring)."""

BREAKDOWN_TERMS: tuple[str, ...] = (
    "weights", "gradients", "optimizer", "activations", "transient", "logits", "buffers",
    "allocator", "cuda_context",
)
"""Keys of :func:`memory_breakdown`, in display order; they sum to ``total``."""


def zero_shard_ranks(c: Cols) -> Array:
    """Ranks over which ZeRO shards the dense states: dp x cp over the copies of the shards
    (``LayoutConfig.dp_replicate``, hybrid sharding; 1 copy where the column is absent)."""
    return c["dp"] * c["cp"] / np.asarray(c.get("dp_replicate", 1.0), dtype=np.float64)


def _sharding(c: Cols) -> tuple[Array, Array]:
    """Ranks over which dense and expert states are sharded by ZeRO: :func:`zero_shard_ranks`
    and that over ep."""
    dense = zero_shard_ranks(c)
    return dense, dense / c["ep"]


def stage_params(c: Cols, layers: Array, *, first: bool, last: bool,
                 start: Array | None = None) -> tuple[Array, Array]:
    """(dense, expert) parameters held by one rank of a stage with ``layers`` layers.

    Matrices are split by tp (Megatron-style column/row parallel linears, vocab-parallel
    embedding and head); norm weights and the MoE router are replicated. Experts are split by
    ep x tp; a shared expert is split by tp like a dense MLP (Megatron ``SharedExpertMLP``).
    An MoE model's leading dense layers (``num_dense_layers``) sit on the first stages. With
    pp > 1 the last stage holds its own output head even when the embeddings are tied
    (nanotron and Megatron untie them across stages). ``start``: the stage's first layer
    (default: 0 for the first stage, L - layers otherwise).
    """
    h, tp = c["hidden_size"], c["tp"]
    moe = c["num_experts"] >= 2
    split = attention_params_per_layer(c) + np.where(moe, 0.0, mlp_params_per_layer(c))
    replicated = 2 * h + router_params_per_layer(c)
    dense = layers * (split / tp + replicated)
    # MoE variants: a shared expert on each MoE layer; a dense MLP instead of the router (and
    # experts) on each leading dense layer. Adds exactly 0 for dense models.
    if start is None:
        start = np.zeros_like(layers) if first else c["num_layers"] - layers
    n_dense = _dense_mlp_layers_on_stage(c, layers, start)
    n_moe = layers - n_dense
    dense = dense + np.where(
        moe, n_moe * shared_expert_params_per_layer(c) / tp
        + n_dense * (mlp_params_per_layer(c) / tp - router_params_per_layer(c)), 0.0)
    vocab = embedding_params(c) / tp
    if first:
        dense = dense + vocab
    if last:
        tied_here = np.where(c["pp"] > 1, 0.0, c["tie_embeddings"])
        dense = dense + (1 - tied_here) * vocab + h
    experts = n_moe * expert_params_per_layer(c) / (c["ep"] * tp)
    return dense, experts


def _dense_mlp_layers_on_stage(c: Cols, layers: Array, start: Array) -> Array:
    """Leading dense layers of an MoE model among a stage's ``layers``, model layers
    ``start`` .. ``start + layers - 1``."""
    k = np.where(c["num_experts"] >= 2, c["num_dense_layers"], 0.0)
    return np.clip(k - start, 0.0, layers)


def model_state_bytes(c: Cols, dense: Array, experts: Array) -> dict[str, Array]:
    """Weights, gradients and optimizer states of ``dense`` + ``experts`` parameters on a rank."""
    shard_dense, shard_expert = _sharding(c)
    z = c["zero_stage"]

    def sharded(bytes_per_param: Array | float, from_stage: int) -> Array:
        on = z >= from_stage
        return bytes_per_param * (
            np.where(on, dense / shard_dense, dense) + np.where(on, experts / shard_expert, experts)
        )

    grad_bytes = 2 + 4 * c["fp32_grad_accumulation"]
    return {
        "weights": sharded(2.0, 3),
        "gradients": sharded(grad_bytes, 2),
        "optimizer": sharded(12.0, 1),
    }


ACTIVATION_TERMS: tuple[str, ...] = ("norm_inputs", "projection_inputs", "attention", "mlp")
"""Keys of :func:`activation_terms_per_layer`: what a layer keeps, by the code that keeps it
(``microbench/saved_activations.py`` measures the same split on a framework's own block)."""


def activation_terms_per_layer(c: Cols) -> dict[str, Array]:
    """Bytes one layer keeps for one micro-batch on one rank, by term (module docstring),
    without recomputation: the two RMSNorms' inputs, the inputs of the QKV and MLP
    projections (and MLA's latents), the attention's tensors, the MLP's."""
    tokens = c["mbs"] * c["seq_len"] / c["cp"]
    h, tp = c["hidden_size"], c["tp"]
    q = c["num_heads"] * c["qk_head_dim"]  # queries (and keys with MLA)
    o = c["num_heads"] * c["v_head_dim"]  # attention output (and values with MLA)
    kv = c["num_kv_heads"] * c["qk_head_dim"]  # keys, and values, with GQA
    mla = c["kv_lora_rank"] > 0
    attn = np.where(mla, 2 * 2 * tokens * q + 2 * 2 * tokens * o,
                    2 * tokens * q + 2 * tokens * o + 2 * 2 * tokens * kv)
    # MLA's latents, replicated like the projection inputs (assumption: Megatron keeps the
    # down projections unsplit): the query latent and its norm, the key-value latent with the
    # shared rotary key, and its norm.
    latents = np.where(mla, 2 * tokens * (2 * c["q_lora_rank"] + 2 * c["kv_lora_rank"]
                                          + c["qk_rope_head_dim"]), 0.0)
    moe = c["num_experts"] >= 2
    # MoE: top-k routed experts plus the shared expert per token; leading dense layers are
    # averaged in (DeepSeek-V2/V3 size them equal: ffn = (top-k + shared) x expert width).
    moe_ffn = c["experts_topk"] * c["moe_ffn_hidden_size"] + c["shared_expert_ffn_hidden_size"]
    moe_frac = moe_layers(c) / c["num_layers"]
    ffn = np.where(moe, moe_frac * moe_ffn + (1 - moe_frac) * c["ffn_hidden_size"],
                   c["ffn_hidden_size"])
    # The tokens in expert order, each of its top-k copies (FrameworkTraits.moe_routed_bytes).
    # Experts split by tp take every token their tp group routes to them (torchtitan gathers
    # the layer's input, Megatron the routed tokens), so the copies are not split by tp.
    routed = tokens * c["experts_topk"] * h * c["moe_routed_bytes"]
    # The rows that pad the experts' token groups on this rank, each kept like a routed
    # token's GEMM input and expert activations (FrameworkTraits.moe_token_group_align).
    unfused = 4 - (c["fused_swiglu"] > 0)
    padding = moe_padding_rows(c, tokens * c["experts_topk"]) * (
        2 * h + unfused * 2 * c["moe_ffn_hidden_size"] / tp)
    sp = (c["sequence_parallel"] > 0) & (tp > 1)
    norms = 2 * 2 * tokens * h
    projections = 2 * 2 * tokens * h + latents
    # Under sequence parallelism a projection keeps its shard and gathers it again in the
    # backward (Megatron-LM, Korthikanti sec. 4.2.2), or keeps the gathered input whole
    # (PyTorch's DTensor plans: FrameworkTraits.saves_gathered_tp_inputs).
    gathered = c["saves_gathered_tp_inputs"] > 0
    return {
        "norm_inputs": np.where(sp, norms / tp, norms),
        "projection_inputs": np.where(sp & ~gathered, projections / tp, projections),
        "attention": attn / tp,
        "mlp": unfused * 2 * tokens * ffn / tp + np.where(moe, moe_frac * (routed + padding), 0.0),
    }


def moe_padding_rows(c: Cols, routed_rows: Array | float) -> Array:
    """Rows the grouped GEMM's buffer holds beyond ``routed_rows`` (the routed tokens an MoE
    layer's experts receive on one rank): round_up(routed, a) + a x local experts - routed,
    a = ``FrameworkTraits.moe_token_group_align`` (0: none)."""
    align = c["moe_token_group_align"]
    a = np.maximum(align, 1.0)
    rows = np.ceil(np.asarray(routed_rows, dtype=np.float64) / a) * a - routed_rows
    return np.where(align > 0, rows + align * c["num_experts"] / c["ep"], 0.0)


def per_op_checkpoint_bytes(c: Cols) -> Array:
    """Bytes one layer keeps for one micro-batch under per-operator selective checkpointing
    (``FrameworkTraits.selective_per_op``; measured on torchtitan 0.2.2's Llama block at tp 1
    to 8 and its Llama 4 MoE block at tp 1 and 2, ep 1 and 2, ``python -m
    microbench.saved_activations [--moe] --recompute``): the outputs of the query and value
    projections, of the attention kernel (its log-sum-exp aside, as in
    :func:`activation_terms_per_layer`) and of the MLP's gate projection, split by tp; the
    down projection's output before its reduce-scatter, T x h whole; with tp > 1 the two
    reduce-scatters' outputs (T x h / tp each); not the layer's input (see
    :func:`activation_bytes_per_layer`). An MoE layer's MLP keeps only its shared expert's
    gate and down projection outputs (torchtitan forces its router's matmul to be recomputed
    and not counted, and the experts' grouped GEMMs are not among the operators kept) and,
    under expert parallelism, the outputs of its two all-to-alls, a T x k x h bf16 tensor
    each (routing taken as balanced; under tp the whole sequence's, as the copies in
    :func:`activation_terms_per_layer`: measured at tp 2 with and without ep 2); MoE and
    leading dense layers are averaged per layer."""
    tokens = c["mbs"] * c["seq_len"] / c["cp"]
    h, tp = c["hidden_size"], c["tp"]
    q = c["num_heads"] * c["qk_head_dim"]
    o = c["num_heads"] * c["v_head_dim"]
    kv = c["num_kv_heads"] * c["v_head_dim"]
    attention = 2 * tokens * (q + kv + o) / tp
    dense_mlp = 2 * tokens * c["ffn_hidden_size"] / tp + 2 * tokens * h
    shared = c["shared_expert_ffn_hidden_size"]
    moe_mlp = (np.where(shared > 0, 2 * tokens * shared / tp + 2 * tokens * h, 0.0)
               + np.where(c["ep"] > 1, 2 * 2 * tokens * c["experts_topk"] * h, 0.0))
    moe_frac = moe_layers(c) / c["num_layers"]
    mlp = np.where(c["num_experts"] >= 2, moe_frac * moe_mlp + (1 - moe_frac) * dense_mlp,
                   dense_mlp)
    reduce_scatters = np.where(tp > 1, 2 * 2 * tokens * h / tp, 0.0)
    return attention + mlp + reduce_scatters


def activation_bytes_per_layer(c: Cols) -> Array:
    """Bytes one layer keeps for one micro-batch on one rank (module docstring): the sum of
    :func:`activation_terms_per_layer`; with full recomputation the layer's input alone; with
    per-operator selective checkpointing its input and :func:`per_op_checkpoint_bytes`."""
    full = np.sum(list(activation_terms_per_layer(c).values()), axis=0)
    sp = (c["sequence_parallel"] > 0) & (c["tp"] > 1)
    tokens = c["mbs"] * c["seq_len"] / c["cp"]
    layer_input = np.where(sp, 2 * tokens * c["hidden_size"] / c["tp"],
                           2 * tokens * c["hidden_size"])
    per_op = per_op_recompute(c)
    checkpointed = np.where(per_op, layer_input + per_op_checkpoint_bytes(c), layer_input)
    return np.where((c["recompute"] == 2) | per_op, checkpointed, full)


def stage_activation_bytes(c: Cols, layers: Array) -> Array:
    """Bytes a stage of ``layers`` layers keeps for one micro-batch: where full recomputation
    checkpoints only some of them (``recompute_layers``), those keep their input and the rest
    everything (:func:`activation_bytes_per_layer` under each)."""
    per_layer = activation_bytes_per_layer(c)
    checkpointed = checkpointed_layers(c, layers)
    partial = (c["recompute"] == 2) & (checkpointed < layers)
    if not np.any(partial):
        return layers * per_layer
    whole = activation_bytes_per_layer({**c, "recompute": np.zeros_like(c["recompute"])})
    mixed = checkpointed * per_layer + (layers - checkpointed) * whole
    return np.where(partial, mixed, layers * per_layer)


def _backward_working_set(c: Cols) -> Array:
    """One layer's activation gradients during its backward; where the layer is recomputed
    (in full or per operator), also its recomputed activations."""
    c_none = {**c, "recompute": np.zeros_like(c["recompute"])}
    one_layer = activation_bytes_per_layer(c_none)
    return np.where((c["recompute"] == 2) | per_op_recompute(c), 2 * one_layer, one_layer)


def inflight_hidden_bytes(c: Cols, inflight: Array) -> Array:
    """What a stage holding ``inflight`` micro-batches keeps beyond the derived activations:
    ``inflight_hidden_tensors`` unsharded T x h bf16 tensors for each micro-batch in flight
    beyond the first (module docstring; none without a pipeline under 1F1B)."""
    tokens = c["mbs"] * c["seq_len"] / c["cp"]
    extra = np.maximum(inflight - 1.0, 0.0)
    return param(c, "inflight_hidden_tensors") * 2 * tokens * c["hidden_size"] * extra


def logits_bytes(c: Cols) -> Array:
    """Logits on the last stage at the loss: one micro-batch's (``logit_bytes`` each, see
    the module docstring), and under all-forward-all-backward the fp32 softmax the loss saved
    for each of the m - 1 micro-batches before it."""
    per_logit = c["mbs"] * c["seq_len"] / c["cp"] * c["vocab_size"] / c["tp"]
    saved = np.where(c["pp_afab"] > 0, pipeline.microbatches(c) - 1, 0.0) * SAVED_LOGIT_BYTES
    return (param(c, "logit_bytes") + saved) * per_logit


def _stage_breakdown(c: Cols, *, first: bool, last: bool,
                     stage: Array | float | None = None) -> dict[str, Array]:
    """The breakdown of the first or the last stage, or of stage index ``stage`` (neither)."""
    if stage is not None:
        layers = pipeline.stage_layers(c, stage)
        start: Array | None = pipeline.stage_start(c, stage)
        inflight = pipeline.stage_inflight(c, stage)
    else:
        layers = pipeline.first_stage_layers(c) if first else pipeline.last_stage_layers(c)
        start = None
        inflight = (pipeline.first_stage_inflight(c) if first
                    else pipeline.stage_inflight(c, c["pp"] - 1))
    dense, experts = stage_params(c, layers, first=first, last=last, start=start)
    out = model_state_bytes(c, dense, experts)
    out["activations"] = (inflight * stage_activation_bytes(c, layers)
                          * param(c, "activation_scale")
                          + inflight_hidden_bytes(c, inflight))
    out["transient"] = _backward_working_set(c)
    out["logits"] = logits_bytes(c) if last else np.zeros_like(layers)
    layer_weights = (attention_params_per_layer(c) + mlp_params_per_layer(c)) / c["tp"]
    zero3_gather = np.where(c["zero_stage"] >= 3, 2 * 2 * layer_weights, 0.0)
    out["buffers"] = DDP_BUCKET_BYTES + zero3_gather
    held = np.sum([out[k] for k in BREAKDOWN_TERMS[:7]], axis=0)
    out["allocator"] = param(c, "allocator_overhead_frac") * held
    out["cuda_context"] = np.full_like(layers, CUDA_CONTEXT_BYTES)
    out["total"] = held + out["allocator"] + out["cuda_context"]
    return out


def memory_breakdown(c: Cols) -> dict[str, Array]:
    """Bytes per term on the most loaded rank of every pipeline stage, plus ``total`` and
    ``stage`` (its position: 0 = first stage, 1 = last stage, i / (pp - 1) for stage i).

    The first stage holds the most micro-batches and the embedding, the last one the logits;
    a stage between them can hold more when its layers weigh more: an MoE model's leading
    dense layers sit on the first stage, so the next stages' experts outweigh it, and with few
    micro-batches in flight a stage with one layer more than the first wins
    (:func:`_heaviest_middle_stage`; so can stage 1 under torchtitan's split, which gives it a
    layer more than the first; ``tests/analytic/test_memory.py`` checks the answer against
    every stage's)."""
    first = _stage_breakdown(c, first=True, last=False)
    last = _stage_breakdown(c, first=False, last=True)
    single = _stage_breakdown(c, first=True, last=True)
    index = _heaviest_middle_stage(c)
    has_middle = index >= 1
    pick_last = last["total"] > first["total"]
    edge = {k: np.where(pick_last, last[k], first[k]) for k in first}
    middle = edge  # none: most batches (dense models without torchtitan's split)
    rows = np.flatnonzero(has_middle)
    if len(rows):  # weighed only where a middle stage can win
        part = _stage_breakdown(_rows(c, rows), first=False, last=False, stage=index[rows])
        middle = {k: v.copy() for k, v in edge.items()}
        for k, v in part.items():
            middle[k][rows] = v
    pick_middle = has_middle & (middle["total"] > edge["total"])
    piped = c["pp"] > 1
    out = {k: np.where(piped, np.where(pick_middle, middle[k], edge[k]), single[k])
           for k in first}
    position = np.where(pick_middle, index / np.maximum(c["pp"] - 1, 1.0),
                        np.where(pick_last, 1.0, 0.0))
    out["stage"] = np.where(piped, position, 0.0)
    return out


def _rows(c: Cols, rows: np.ndarray) -> Cols:
    """The columns of the configurations at positions ``rows`` (scalars kept)."""
    return {k: np.asarray(v)[rows] if np.ndim(v) else v for k, v in c.items()}


def _heaviest_middle_stage(c: Cols) -> Array:
    """Per configuration, the heaviest stage strictly between the first and the last, or -1
    where none can outweigh the first: where pp < 3, and where every layer weighs the same (no
    MoE model with leading dense layers) and the split is even or nanotron's, since no middle
    stage then holds more layers than the first (an even split's are equal; nanotron's greedy
    rule gives stage i floor((i + 1) x) - floor(i x) <= floor(x) + 1 = the first's), nor more
    micro-batches, nor the embedding. Under torchtitan's weighted split stage 1 can hold one
    layer more than the first, and it is the heaviest middle stage: layers and micro-batches in
    flight do not grow down the pipeline (``pipeline``)."""
    p = c["pp"]
    index = np.where((p >= 3) & (c["weighted_pipeline_split"] > 0), 1.0, -1.0)
    rows = np.flatnonzero((p >= 3) & (c["num_experts"] >= 2) & (c["num_dense_layers"] > 0))
    if len(rows) == 0:
        return index
    sub = _rows(c, rows)
    best = np.full(len(rows), -np.inf)
    for i in range(1, int(np.max(sub["pp"])) - 1):
        total = _stage_breakdown(sub, first=False, last=False, stage=i)["total"]
        better = (i < sub["pp"] - 1) & (total > best)
        best = np.where(better, total, best)
        index[rows] = np.where(better, float(i), index[rows])
    return index


def stage_memory(c: Cols, stage: int | Array) -> dict[str, Array]:
    """Bytes per term on a rank of pipeline stage ``stage`` (0-based; one for all or one per
    configuration) of each configuration
    (NaN where ``stage`` >= pp): what :func:`memory_breakdown` takes the largest of."""
    p = c["pp"]
    last_stage = p - 1
    first = _stage_breakdown(c, first=True, last=False, stage=stage)
    middle = _stage_breakdown(c, first=False, last=False, stage=stage)
    last = _stage_breakdown(c, first=False, last=True, stage=stage)
    single = _stage_breakdown(c, first=True, last=True, stage=stage)
    out = {k: np.where(p == 1, single[k],
                       np.where(stage == 0, first[k],
                                np.where(stage == last_stage, last[k], middle[k])))
           for k in first}
    return {k: np.where(stage < p, v, np.nan) for k, v in out.items()}


def torch_reserved_bytes(breakdown: dict[str, Array]) -> Array:
    """What ``torch.cuda.max_memory_reserved`` would report: everything but the CUDA context."""
    return breakdown["total"] - breakdown["cuda_context"]


LOGGED_STAGE_COLUMN = "peak_mem_stage"
"""The analytic column of the 0-based pipeline stage of the rank whose log a run's measured peak
memory comes from (NaN or absent: the most loaded rank's, the maximum over ranks); training and
calibration set it per run from the run's source (``surrogate.clusters.run_context``)."""


def logged_breakdown(c: Cols, breakdown: dict[str, Array]) -> dict[str, Array]:
    """The breakdown of the rank whose log a run's measured memory comes from: of stage
    ``c[LOGGED_STAGE_COLUMN]`` where it is given and a stage of the run (the Playbook's table
    is written by world rank 0, on the first stage: ``surrogate.clusters``), else
    ``breakdown`` (:func:`memory_breakdown`: the most loaded stage, which is what runs out of
    memory and what ``predict`` reports)."""
    stage = np.asarray(c.get(LOGGED_STAGE_COLUMN, np.nan), dtype=np.float64)
    stage = np.broadcast_to(stage, np.shape(breakdown["total"]))
    rows = np.flatnonzero(np.isfinite(stage) & (stage >= 0) & (stage < c["pp"]) & (c["pp"] > 1))
    if len(rows) == 0:
        return breakdown
    part = stage_memory(_rows(c, rows), stage[rows])
    out = {k: np.array(v, dtype=np.float64, copy=True) for k, v in breakdown.items()}
    for k, v in part.items():
        out[k][rows] = v
    out["stage"][rows] = stage[rows] / np.maximum(c["pp"][rows] - 1, 1.0)
    return out


def logged_reserved_bytes(c: Cols, breakdown: dict[str, Array]) -> Array:
    """What ``torch.cuda.max_memory_reserved`` reads on the rank whose log a run's
    measurement comes from (:func:`logged_breakdown`)."""
    return torch_reserved_bytes(logged_breakdown(c, breakdown))


def oom_probability(c: Cols, breakdown: dict[str, Array]) -> Array:
    """P(the run needs more than the GPU has): log(need) ~ Normal(log(predicted total) +
    ``oom_log_margin``, ``memory_log_sd``): the memory model's fitted error, and where the
    measured runs of the framework ran out of memory (``surrogate.fit_params``)."""
    from scipy.special import ndtr

    sd = np.asarray(param(c, "memory_log_sd"), dtype=np.float64)
    margin = np.asarray(param(c, "oom_log_margin"), dtype=np.float64)
    z = (np.log(breakdown["total"] / c["memory_bytes"]) + margin) / np.maximum(sd, 1e-6)
    return np.asarray(ndtr(z), dtype=np.float64)

