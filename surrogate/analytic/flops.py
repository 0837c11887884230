"""Parameter counts and FLOPs per token.

Model: Llama-style decoder (Touvron et al. 2023; Dubey et al. 2024): per layer a GQA attention
block (q and o projections h x h, k and v projections h x (kv_heads x head_dim), no biases),
a SwiGLU MLP (three h x ffn matrices; Shazeer 2020) or, for MoE layers, ``num_experts`` such
MLPs of width ``moe_ffn_hidden_size`` plus an h x num_experts router (Jiang et al. 2024), two
RMSNorm weight vectors; a final RMSNorm; an input embedding V x h and an output head V x h
unless tied.

MFU definition (the Ultra-Scale Playbook's, after llm-foundry): model FLOPs per token
= 6 x N + 12 x num_layers x hidden_size x seq_len, with N the parameters a token uses
(all of them for a dense model; for MoE the shared ones plus top-k experts). The second term is
the attention score and value products (2 x 2 x s x h per layer forward, x3 for forward and
backward), counted without a causal discount. MFU = tokens/s/GPU x FLOPs per token / dense peak.
"""

from __future__ import annotations

import numpy as np

from surrogate.analytic.inputs import Array, Cols


def attention_params_per_layer(c: Cols) -> Array:
    """q, k, v, o projections with GQA: 2 h^2 + 2 h (kv_heads x head_dim)."""
    h = c["hidden_size"]
    kv_dim = c["num_kv_heads"] * h / c["num_heads"]
    return 2 * h * h + 2 * h * kv_dim


def mlp_params_per_layer(c: Cols) -> Array:
    """Dense SwiGLU MLP: gate, up and down projections, 3 h ffn."""
    return 3 * c["hidden_size"] * c["ffn_hidden_size"]


def expert_params_per_layer(c: Cols) -> Array:
    """All routed experts of one MoE layer (3 h moe_ffn each); 0 for a dense model."""
    return np.where(
        c["num_experts"] >= 2, c["num_experts"] * 3 * c["hidden_size"] * c["moe_ffn_hidden_size"],
        0.0,
    )


def dense_params_per_layer(c: Cols) -> Array:
    """Parameters of one layer outside the experts: attention, MLP or router, two norms."""
    h = c["hidden_size"]
    moe = c["num_experts"] >= 2
    ffn_or_router = np.where(moe, h * c["num_experts"], mlp_params_per_layer(c))
    return attention_params_per_layer(c) + ffn_or_router + 2 * h


def embedding_params(c: Cols) -> Array:
    """Input embedding V x h."""
    return c["vocab_size"] * c["hidden_size"]


def lm_head_params(c: Cols) -> Array:
    """Output head V x h, or 0 when tied to the embedding."""
    return (1.0 - c["tie_embeddings"]) * c["vocab_size"] * c["hidden_size"]


def total_params(c: Cols) -> Array:
    """All parameters, every expert included."""
    per_layer = dense_params_per_layer(c) + expert_params_per_layer(c)
    return c["num_layers"] * per_layer + embedding_params(c) + lm_head_params(c) + c["hidden_size"]


def active_params(c: Cols) -> Array:
    """Parameters one token uses: as total_params but with top-k of the experts."""
    experts_used = np.where(
        c["num_experts"] >= 2, c["experts_topk"] * 3 * c["hidden_size"] * c["moe_ffn_hidden_size"],
        0.0,
    )
    per_layer = dense_params_per_layer(c) + experts_used
    return c["num_layers"] * per_layer + embedding_params(c) + lm_head_params(c) + c["hidden_size"]


def model_flops_per_token(c: Cols) -> Array:
    """6 N + 12 L h s: the Playbook / llm-foundry MFU numerator (module docstring)."""
    return 6 * active_params(c) + 12 * c["num_layers"] * c["hidden_size"] * c["seq_len"]


def hardware_flops_per_token(c: Cols) -> Array:
    """FLOPs executed, counting recomputation.

    Full recomputation reruns each layer's forward (1/3 of 6 N + 12 L h s): a 4/3 factor
    (Korthikanti et al. 2022, sec. 5, and the Playbook). Selective recomputation
    (Korthikanti et al. 2022, sec. 4.2) recomputes only the attention scores, which flash
    attention (assumed throughout) recomputes in its backward anyway: no extra FLOPs here.
    """
    base = model_flops_per_token(c)
    return np.where(c["recompute"] == 2, base * 4 / 3, base)


def mfu(tokens_per_s_per_gpu: Array, c: Cols) -> Array:
    """Model FLOPs utilisation, a fraction of the dense peak of the configuration's dtype."""
    return tokens_per_s_per_gpu * model_flops_per_token(c) / c["peak_flops"]
