"""Parameter counts and FLOPs per token.

Model: Llama-style decoder (Touvron et al. 2023; Dubey et al. 2024): per layer a GQA attention
block (q and o projections h x (heads x head_dim), k and v projections h x (kv_heads x
head_dim), no biases; head_dim = h / heads unless the model gives it, as Gemma and Qwen3 do), a
SwiGLU MLP (three h x ffn matrices; Shazeer 2020; Gemma's GeGLU has the same three) or, for MoE
layers, ``num_experts`` such MLPs of width ``moe_ffn_hidden_size`` plus an h x num_experts
router (Jiang et al. 2024), two RMSNorm weight vectors; a final RMSNorm; an input embedding
V x h and an output head V x h unless tied.

Variants, as the Hugging Face transformers modeling files build them
(``src/transformers/models/<family>/modeling_<family>.py``):

- shared experts: one always-active MLP beside the routed experts of every MoE layer, as wide
  as the shared experts together (``Qwen2MoeSparseMoeBlock.shared_expert``, width
  ``shared_expert_intermediate_size``; ``DeepseekV3MoE.shared_experts``, width
  ``moe_intermediate_size x n_shared_experts``);
- leading dense layers: the first ``num_dense_layers`` layers of an MoE model have a dense MLP
  of width ffn_hidden_size and no router (DeepSeek ``first_k_dense_replace``);
- multi-head latent attention, MLA (DeepSeek-AI 2024, "DeepSeek-V2", sec. 2.1.2-2.1.3, eq.
  9-14; ``DeepseekV3Attention``): queries h -> q_lora_rank (RMSNorm) -> heads x (nope + rope),
  or h -> heads x (nope + rope) when q_lora_rank = 0; keys and values h -> kv_lora_rank + rope
  (the rope part is one key shared by all heads), RMSNorm, kv_lora_rank -> heads x
  (nope + v); output heads x v -> h.

Not counted, each under 0.01% of the parameters: Qwen2's q/k/v biases, Qwen3's per-head q/k
RMSNorms, Qwen2-MoE's shared-expert gate (h x 1), DeepSeek-V3's expert-score correction bias.

MFU definition (the Ultra-Scale Playbook's, after llm-foundry): model FLOPs per token
= 6 x N + 12 x num_layers x hidden_size x seq_len, with N the parameters a token uses
(all of them for a dense model; for MoE the shared ones plus top-k experts). The second term is
the attention score and value products (2 x 2 x s x h per layer forward, x3 for forward and
backward), counted without a causal discount. Where the heads are not h wide in all (Gemma,
Qwen3, MLA) it is 6 x L x s x heads x (qk_head_dim + v_head_dim): the scores over the
query/key width, the values over the value width; with heads x head_dim = h both are 12 L h s.
MFU = tokens/s/GPU x FLOPs per token / dense peak.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from surrogate.analytic.inputs import Array, Cols
from surrogate.analytic.pipeline import weighted_rank_layers


def attention_params_per_layer(c: Cols) -> Array:
    """GQA: q and o projections 2 h (heads x head_dim), k and v 2 h (kv_heads x head_dim)
    (2 h^2 + 2 h kv_dim for a Llama block). MLA: the projections and latent norms of the
    module docstring."""
    h, heads = c["hidden_size"], c["num_heads"]
    q_dim = heads * c["qk_head_dim"]
    gqa = 2 * h * q_dim + 2 * h * (c["num_kv_heads"] * c["qk_head_dim"])
    q_rank, kv_rank, rope = c["q_lora_rank"], c["kv_lora_rank"], c["qk_rope_head_dim"]
    if not np.any(kv_rank > 0):  # no MLA: its terms would all be discarded
        return np.asarray(gqa, dtype=np.float64)
    mla_q = np.where(q_rank > 0, h * q_rank + q_rank + q_rank * q_dim, h * q_dim)
    mla_kv_down = h * (kv_rank + rope) + kv_rank  # W_DKV and W_KR, then the latent RMSNorm
    mla_kv_up = kv_rank * heads * (c["qk_head_dim"] - rope + c["v_head_dim"])  # W_UK, W_UV
    mla_out = heads * c["v_head_dim"] * h
    return np.where(kv_rank > 0, mla_q + mla_kv_down + mla_kv_up + mla_out, gqa)


def mlp_params_per_layer(c: Cols) -> Array:
    """Dense SwiGLU MLP: gate, up and down projections, 3 h ffn."""
    return 3 * c["hidden_size"] * c["ffn_hidden_size"]


def shared_expert_params_per_layer(c: Cols) -> Array:
    """The shared-expert MLP of one MoE layer, 3 h shared_ffn; 0 without one."""
    return 3 * c["hidden_size"] * c["shared_expert_ffn_hidden_size"]


def router_params_per_layer(c: Cols) -> Array:
    """The h x num_experts router of one MoE layer; 0 for a dense model."""
    return np.where(c["num_experts"] >= 2, c["hidden_size"] * c["num_experts"], 0.0)


def moe_layers(c: Cols) -> Array:
    """Layers with experts: all but the leading ``num_dense_layers`` of an MoE model."""
    return np.where(c["num_experts"] >= 2, c["num_layers"] - c["num_dense_layers"], 0.0)


def folded(c: Cols) -> NDArray[np.bool_]:
    """Where the framework folds its experts over tp x dp x cp with expert tensor parallelism 1
    (``FrameworkTraits.moe_parallel_folding``, Megatron-Core) on an MoE model with tp > 1."""
    fold = np.asarray(c.get("moe_parallel_folding", 0.0)) > 0
    return np.asarray(fold & (c["num_experts"] >= 2) & (c["tp"] > 1), dtype=bool)


def expert_tp(c: Cols) -> Array:
    """Ranks that split each expert's matrices: 1 where the experts are folded
    (:func:`folded`), else tp."""
    return np.where(folded(c), 1.0, c["tp"])


def expert_params_per_layer(c: Cols) -> Array:
    """All routed experts of one MoE layer (3 h moe_ffn each); 0 for a dense model."""
    return np.where(
        c["num_experts"] >= 2,
        c["num_experts"] * 3 * c["hidden_size"] * c["moe_ffn_hidden_size"],
        0.0,
    )


@dataclass(frozen=True)
class LayerParams:
    """The parameters of one layer of each configuration, by part, computed once per table
    (:meth:`of`) for every stage's weights and the step's: attention (with its norms, for
    MLA), a dense MLP, an MoE layer's shared expert, router and routed experts (all of
    them)."""

    attention: Array
    mlp: Array
    shared_expert: Array
    router: Array
    experts: Array

    @classmethod
    def of(cls, c: Cols) -> LayerParams:
        return cls(
            attention=attention_params_per_layer(c),
            mlp=mlp_params_per_layer(c),
            shared_expert=shared_expert_params_per_layer(c),
            router=router_params_per_layer(c),
            experts=expert_params_per_layer(c),
        )

    def rows(self, rows: np.ndarray) -> LayerParams:
        """The same of the configurations at positions ``rows``."""
        return LayerParams(
            self.attention[rows],
            self.mlp[rows],
            self.shared_expert[rows],
            self.router[rows],
            self.experts[rows],
        )


def _layer_stack_params(c: Cols, experts_per_moe_layer: Array) -> Array:
    """All layers: attention and two norms each, a dense MLP on the dense layers, router,
    shared expert and ``experts_per_moe_layer`` on the MoE layers."""
    n_moe = moe_layers(c)
    per_moe_layer = (
        router_params_per_layer(c) + shared_expert_params_per_layer(c) + experts_per_moe_layer
    )
    return (
        c["num_layers"] * (attention_params_per_layer(c) + 2 * c["hidden_size"])
        + (c["num_layers"] - n_moe) * mlp_params_per_layer(c)
        + n_moe * per_moe_layer
    )


def embedding_params(c: Cols) -> Array:
    """Input embedding V x h."""
    return c["vocab_size"] * c["hidden_size"]


def lm_head_params(c: Cols) -> Array:
    """Output head V x h, or 0 when tied to the embedding."""
    return (1.0 - c["tie_embeddings"]) * c["vocab_size"] * c["hidden_size"]


def total_params(c: Cols) -> Array:
    """All parameters, every expert included."""
    stack = _layer_stack_params(c, expert_params_per_layer(c))
    return stack + embedding_params(c) + lm_head_params(c) + c["hidden_size"]


def active_params(c: Cols) -> Array:
    """Parameters one token uses: as total_params but with top-k of the experts."""
    experts_used = np.where(
        c["num_experts"] >= 2,
        c["experts_topk"] * 3 * c["hidden_size"] * c["moe_ffn_hidden_size"],
        0.0,
    )
    stack = _layer_stack_params(c, experts_used)
    return stack + embedding_params(c) + lm_head_params(c) + c["hidden_size"]


def attention_flops_per_token(c: Cols) -> Array:
    """Attention scores and values, forward and backward: 6 L s heads (qk_head_dim +
    v_head_dim), which is 12 L h s for a Llama block (module docstring)."""
    widths = c["num_heads"] * (c["qk_head_dim"] + c["v_head_dim"])
    return 6 * c["num_layers"] * c["seq_len"] * widths


def model_flops_per_token(c: Cols) -> Array:
    """6 N + 12 L h s: the Playbook / llm-foundry MFU numerator (module docstring)."""
    return 6 * active_params(c) + attention_flops_per_token(c)


def per_op_recompute(c: Cols) -> Array:
    """Whether a configuration's recomputation is per-operator selective checkpointing
    (``FrameworkTraits.selective_per_op``: torchtitan's 'selective')."""
    return np.asarray((c["recompute"] == 1) & (c["selective_per_op"] > 0))


def checkpointed_layers(c: Cols, layers: Array) -> Array:
    """How many of a stage's ``layers`` full recomputation checkpoints: all of them, or
    ``recompute_layers`` where that is given (``LayoutConfig.recompute_layers``, at most the
    stage's layers); none without full recomputation. Under torchtitan's split the count is
    its every-n-th block's on each rank, floor(layers / n), with the n that gives the first
    rank ``recompute_layers`` (:func:`every_nth_block`): a rank with a layer more than the
    first can checkpoint one more."""
    k = c["recompute_layers"]
    n = every_nth_block(c)
    some = np.where(k > 0, np.minimum(k, layers), layers)
    some = np.where(n > 0, np.floor(layers / np.maximum(n, 1.0)), some)
    return np.where(c["recompute"] == 2, some, 0.0)


def every_nth_block(c: Cols) -> Array:
    """torchtitan's ``selective_ac_option`` n for ``recompute_layers`` k: the smallest n >= 2
    with floor(l / n) = k, l the first rank's layers (what launch files write and ingest
    reads); 0 where the split is not torchtitan's, k is 0 or no n gives k."""
    k = c["recompute_layers"]
    counted = (k > 0) & (c["weighted_pipeline_split"] > 0)
    if not np.any(counted):  # the common case, on the step model's hot path
        return np.zeros_like(k, dtype=np.float64)
    first = weighted_rank_layers(c, 0)
    n = np.maximum(np.floor(first / (k + 1.0)) + 1.0, 2.0)
    gives = counted & (np.floor(first / n) == k)
    return np.where(gives, n, 0.0)


def full_recompute_share(c: Cols) -> Array:
    """The share of the layers that full recomputation runs forward again: 1 without
    ``recompute_layers``, else recompute_layers x pp / num_layers (the count per stage over a
    stage's average layers), 0 without full recomputation."""
    per_stage = c["num_layers"] / c["pp"]
    return checkpointed_layers(c, per_stage) / per_stage


def hardware_flops_per_token(c: Cols) -> Array:
    """FLOPs executed, counting recomputation.

    Full recomputation reruns each layer's forward (1/3 of 6 N + 12 L h s): a 4/3 factor
    (Korthikanti et al. 2022, sec. 5, and the Playbook), 1 + share / 3 where it checkpoints
    only a share of the layers (:func:`full_recompute_share`). Selective recomputation
    (Korthikanti et al. 2022, sec. 4.2) recomputes only the attention scores, which flash
    attention (assumed throughout) recomputes in its backward anyway: no extra FLOPs here.
    Per-operator selective checkpointing (``FrameworkTraits.selective_per_op``, torchtitan's
    'op') runs the forward of every other matmul of a block again: the key, attention output
    and MLP up projections (2 h (kv + o + ffn) FLOPs per token and layer); in an MoE layer
    also its routed experts whole, whose grouped GEMMs it does not keep, and its shared
    expert's up projection (2 h (3 k moe_ffn + shared ffn); measured by what it keeps,
    ``activations.per_op_checkpoint_bytes``), leading dense layers averaged in.
    """
    base = model_flops_per_token(c)
    moe_frac = moe_layers(c) / c["num_layers"]
    moe_mlp = 3 * c["experts_topk"] * c["moe_ffn_hidden_size"] + c["shared_expert_ffn_hidden_size"]
    mlp = np.where(
        c["num_experts"] >= 2,
        moe_frac * moe_mlp + (1 - moe_frac) * c["ffn_hidden_size"],
        c["ffn_hidden_size"],
    )
    widths = c["num_kv_heads"] * c["qk_head_dim"] + c["num_heads"] * c["v_head_dim"] + mlp
    again = np.where(per_op_recompute(c), 2 * c["num_layers"] * c["hidden_size"] * widths, 0.0)
    return base * (1 + full_recompute_share(c) / 3) + again


def mfu(tokens_per_s_per_gpu: Array, c: Cols) -> Array:
    """Model FLOPs utilisation, a fraction of the dense peak of the configuration's dtype."""
    return tokens_per_s_per_gpu * model_flops_per_token(c) / c["peak_flops"]
