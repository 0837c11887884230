"""What one layer keeps for one micro-batch on one rank: its activations, in bytes.

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
  ``microbench/saved_activations.py``). A two-matrix MLP (``ModelConfig.gated_mlp`` False:
  GELU, as MPT's ``MPTMLP``), described by its SwiGLU-equivalent width, keeps the GELU's input
  and output, 2 x 2 T x 4 h = 3 x 2 T ffn bytes.

FP8 (``FrameworkTraits.fp8_saves_quantized_inputs``: Megatron-Core on Transformer Engine, whose
linear layers save their GEMM inputs quantized; TE 2.20.2 ``pytorch/module/linear.py`` and
``layernorm_linear.py``): the QKV and MLP-in projections' normed inputs and the MLP-out
projection's input at 1 byte an element instead of 2, and the attention output projection's FP8
copy of the attention output (T x heads x v_head_dim bytes) beside flash attention's bf16 one.
The attention core (Q, K, V, output) stays bf16 (TE's ``fp8_dot_product_attention`` off, the
Megatron-Bridge default).

Sequence parallelism (Korthikanti sec. 4.2.2) splits the replicated part by tp too, the
projections' inputs as shards that each projection gathers again in its backward. A framework
whose projections keep the gathered input instead (``FrameworkTraits.saves_gathered_tp_inputs``:
torchtitan, whose DTensor plan gathers the norms' outputs before the column-parallel QKV and
MLP projections; measured by ``microbench/saved_activations.py``) keeps those two whole. Full
recomputation keeps only each layer's input (2 T h, / tp with sequence parallelism) plus one
layer's activations while it is recomputed; where it checkpoints only ``recompute_layers`` of
a stage's layers (Megatron-LM's block method, torchtitan's every n-th block), the others keep
everything (``memory.stage_activation_bytes``; torchtitan's "2" measured on a stack of four).
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
"""

from __future__ import annotations

import numpy as np

from surrogate.analytic.flops import expert_tp, folded, moe_layers, per_op_recompute
from surrogate.analytic.inputs import Array, Cols

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
    attn = np.where(
        mla,
        2 * 2 * tokens * q + 2 * 2 * tokens * o,
        2 * tokens * q + 2 * tokens * o + 2 * 2 * tokens * kv,
    )
    # MLA's latents, replicated like the projection inputs (assumption: Megatron keeps the
    # down projections unsplit): the query latent and its norm, the key-value latent with the
    # shared rotary key, and its norm.
    latents = np.where(
        mla,
        2 * tokens * (2 * c["q_lora_rank"] + 2 * c["kv_lora_rank"] + c["qk_rope_head_dim"]),
        0.0,
    )
    moe = c["num_experts"] >= 2
    # MoE: top-k routed experts plus the shared expert per token; leading dense layers are
    # averaged in (DeepSeek-V2/V3 size them equal: ffn = (top-k + shared) x expert width).
    moe_ffn = c["experts_topk"] * c["moe_ffn_hidden_size"] + c["shared_expert_ffn_hidden_size"]
    moe_frac = moe_layers(c) / c["num_layers"]
    ffn = np.where(
        moe, moe_frac * moe_ffn + (1 - moe_frac) * c["ffn_hidden_size"], c["ffn_hidden_size"]
    )
    # The tokens in expert order, each of its top-k copies (FrameworkTraits.moe_routed_bytes).
    # Experts split by tp take every token their tp group routes to them (torchtitan gathers
    # the layer's input, Megatron the routed tokens), so the copies are not split by tp.
    # Folded experts (expert tensor parallelism 1, flops.folded) take the T / tp x k rows
    # their rank routes, whole: the copies split by tp, the padding rows full width.
    fold = folded(c)
    rows = np.where(fold, tokens * c["experts_topk"] / tp, tokens * c["experts_topk"])
    routed = rows * h * c["moe_routed_bytes"]
    # The rows that pad the experts' token groups on this rank, each kept like a routed
    # token's GEMM input and expert activations (FrameworkTraits.moe_token_group_align).
    unfused = 4 - (c["fused_swiglu"] > 0)
    padding = moe_padding_rows(c, rows) * (
        2 * h + unfused * 2 * c["moe_ffn_hidden_size"] / expert_tp(c)
    )
    sp = (c["sequence_parallel"] > 0) & (tp > 1)
    norms = 2 * 2 * tokens * h
    # Under fp8 a framework on Transformer Engine keeps its linear layers' inputs in FP8
    # (FrameworkTraits.fp8_saves_quantized_inputs): the normed inputs of the QKV and MLP-in
    # projections and the MLP-out projection's input at one byte, and an FP8 copy of the
    # attention output beside the bf16 one flash attention keeps.
    q8 = (np.asarray(c.get("fp8", 0.0)) > 0) & (
        np.asarray(c.get("fp8_saves_quantized_inputs", 0.0)) > 0
    )
    projections = np.where(q8, 1.0, 2.0) * 2 * tokens * h + latents
    attn = attn + np.where(q8, tokens * o, 0.0)
    # Under sequence parallelism a projection keeps its shard and gathers it again in the
    # backward (Megatron-LM, Korthikanti sec. 4.2.2), or keeps the gathered input whole
    # (PyTorch's DTensor plans: FrameworkTraits.saves_gathered_tp_inputs).
    gathered = c["saves_gathered_tp_inputs"] > 0
    return {
        "norm_inputs": np.where(sp, norms / tp, norms),
        "projection_inputs": np.where(sp & ~gathered, projections / tp, projections),
        "attention": attn / tp,
        # a two-matrix MLP (gated_mlp False, dense only) keeps its activation's input and
        # output, 2 x 4 h wide = 3 of its SwiGLU-equivalent ffn, as a fused SwiGLU does
        "mlp": (np.where(c["gated_mlp"] > 0, unfused, 3.0) * 2 - q8) * tokens * ffn / tp
        + np.where(moe, moe_frac * (routed + padding), 0.0),
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
    moe_mlp = np.where(shared > 0, 2 * tokens * shared / tp + 2 * tokens * h, 0.0) + np.where(
        c["ep"] > 1, 2 * 2 * tokens * c["experts_topk"] * h, 0.0
    )
    moe_frac = moe_layers(c) / c["num_layers"]
    mlp = np.where(
        c["num_experts"] >= 2, moe_frac * moe_mlp + (1 - moe_frac) * dense_mlp, dense_mlp
    )
    reduce_scatters = np.where(tp > 1, 2 * 2 * tokens * h / tp, 0.0)
    return attention + mlp + reduce_scatters


def activation_bytes_per_layer(c: Cols, unrecomputed: Array | None = None) -> Array:
    """Bytes one layer keeps for one micro-batch on one rank (module docstring): the sum of
    :func:`activation_terms_per_layer`; with full recomputation the layer's input alone; with
    per-operator selective checkpointing its input and :func:`per_op_checkpoint_bytes`.
    ``unrecomputed``: that sum where the caller has it (:func:`unrecomputed_activation_bytes`)."""
    full = unrecomputed_activation_bytes(c) if unrecomputed is None else unrecomputed
    per_op = per_op_recompute(c)
    recomputed = (c["recompute"] == 2) | per_op
    if not np.any(recomputed):
        return np.where(recomputed, 0.0, full)
    sp = (c["sequence_parallel"] > 0) & (c["tp"] > 1)
    tokens = c["mbs"] * c["seq_len"] / c["cp"]
    layer_input = np.where(
        sp, 2 * tokens * c["hidden_size"] / c["tp"], 2 * tokens * c["hidden_size"]
    )
    checkpointed = (
        np.where(per_op, layer_input + per_op_checkpoint_bytes(c), layer_input)
        if np.any(per_op)
        else layer_input
    )
    return np.where(recomputed, checkpointed, full)


def unrecomputed_activation_bytes(c: Cols) -> Array:
    """:func:`activation_bytes_per_layer` without recomputation: the sum of
    :func:`activation_terms_per_layer`."""
    return np.asarray(np.sum(list(activation_terms_per_layer(c).values()), axis=0))
