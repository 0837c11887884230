"""HBM bytes an MoE layer's unfused permutation moves, forward and backward
(``FrameworkTraits.moe_unfused_permutation``: torchtitan 0.2.2, ``models/moe/moe.py`` and
``models/moe/utils.py``), counted op by op for one micro-batch on one rank.

With e the residual stream's bytes per element (4 where torchtitan trains under autocast with
fp32 parameters, one GPU or DDP; 2 under FSDP's bf16 parameters), per routed token (each of
its top-k copies) and hidden unit:

- forward, 12 e: the gather into expert order ``x[token_indices_experts_sorted // top_k]``
  (read and write, 2 e), ``_permute``'s ``vstack`` with a zero row (2 e) and its gather into
  the padded token groups (2 e), ``_unpermute``'s scatter back (2 e), the zeros and scatter of
  ``routed_output_unsorted[token_indices_experts_sorted] = routed_output`` (3 e), the sum over
  top-k reading them (e);
- backward, 17 e: the first gather's gradient accumulated into x's shape (read the gradient,
  read and write the rows, 3 e), ``_permute`` gather's gradient accumulated into zeros (4 e),
  ``_unpermute``'s gradient (a gather, 2 e) and its slice ``[:-1]`` (zeros and a copy, 3 e),
  the unsort's gradient (a gather, 2 e), and the sum of the two expert GEMMs' input gradients
  (3 e);
- the fp32 score multiply (``score_before_experts``): 8 bytes forward, 16 backward (the
  input's gradient and the score's), and where e = 2 the casts to fp32 and back around each
  (24 more);
- where e = 4: ``_run_experts_grouped_mm``'s ``x.bfloat16()`` before each of its two first
  GEMMs and ``.type_as(x)`` after the last (6 bytes each), and their gradients' casts back
  (36 in all).

So 176 bytes with an fp32 residual stream, 106 with a bf16 one. Per token and hidden unit: the
sum over top-k's write (e), the zeros the first gather's gradient accumulates into (e), one
gradient addition into x per extra consumer (the router, the routed path, and the shared
expert where there is one: 3 e each beyond the first) and the addition of the shared expert's
output to the routed one (3 e), and where e = 4 the router's input cast to bf16 and its
gradient's back (12 bytes). The routing itself (scores, top-k, the histograms and the argsort)
moves T x num_experts elements and is left out; so are the padding rows (``moe_padding_rows``),
which the generic traffic keeps, and the expert weights' casts under autocast (as every layer's
weights, in the fitted set). Checked against one profiled step of three MoE models on our H100
(``datasets/h100/2026-11-24/torchtitan-profiles``): the count at the HBM bandwidth is below
the measured time of the gather, scatter, copy, fill and add kernels
(``docs/analytic-model.md``)."""

from __future__ import annotations

import numpy as np

from surrogate.analytic.flops import folded, moe_layers
from surrogate.analytic.inputs import Array, Cols

ROUTED_PASSES = 29
"""Passes of e bytes per routed token and hidden unit, forward (12) and backward (17)."""
SCORE_BYTES = 24.0
"""The fp32 score multiply, forward (8) and backward (16), per routed token and hidden unit."""
SCORE_CAST_BYTES = 24.0
"""With a bf16 residual stream, the score multiply's casts to fp32 and back, both ways."""
EXPERT_CAST_BYTES = 36.0
"""With an fp32 residual stream, the experts' input casts to bf16 (two) and output cast back,
forward and their gradients' backward."""
ROUTER_CAST_BYTES = 12.0
"""With an fp32 residual stream, the router's input cast to bf16 and its gradient's back, per
token and hidden unit."""


def residual_bytes(c: Cols) -> Array:
    """Bytes per element of the residual stream: 4 where the framework trains under autocast
    with fp32 parameters (``FrameworkTraits.autocast_parameters``, at ZeRO-0 with tp = pp =
    cp = 1: the column ``autocast_fp32`` of ``surrogate.analytic.inputs.cols_from_table``),
    else 2."""
    return np.where(np.asarray(c.get("autocast_fp32", 0.0)) > 0, 4.0, 2.0)


def bytes_per_routed_element(e: Array) -> Array:
    """HBM bytes per routed token and hidden unit, forward and backward (module docstring)."""
    fp32 = e >= 4
    return ROUTED_PASSES * e + SCORE_BYTES + np.where(fp32, EXPERT_CAST_BYTES, SCORE_CAST_BYTES)


def bytes_per_token_element(e: Array, shared: Array) -> Array:
    """HBM bytes per token and hidden unit, forward and backward (module docstring);
    ``shared``: 1 with a shared expert, else 0."""
    return (5.0 + 6.0 * shared) * e + np.where(e >= 4, ROUTER_CAST_BYTES, 0.0)


def permutation_bytes(c: Cols, layers: Array) -> Array:
    """HBM bytes the unfused permutation moves for one micro-batch on a stage of ``layers``
    layers (the MoE layers among them, averaged); 0 where the framework has none
    (``FrameworkTraits.moe_unfused_permutation``) or the model has no experts."""
    on = (np.asarray(c.get("moe_unfused_permutation", 0.0)) > 0) & (c["num_experts"] >= 2)
    if not np.any(on):
        return np.zeros_like(np.asarray(layers, dtype=np.float64))
    tokens = c["mbs"] * c["seq_len"] / c["cp"]
    k = c["experts_topk"]
    rows = np.where(folded(c), tokens * k / c["tp"], tokens * k)
    e = residual_bytes(c)
    shared = np.where(c["shared_expert_ffn_hidden_size"] > 0, 1.0, 0.0)
    per_layer = c["hidden_size"] * (
        rows * bytes_per_routed_element(e) + tokens * bytes_per_token_element(e, shared)
    )
    frac = moe_layers(c) / c["num_layers"]
    return np.where(on, layers * frac * per_layer, 0.0)
