"""Step time, tokens/s per GPU and MFU: compute, exposed communication, bubble, optimizer.

Step (1F1B, Narayanan et al. 2021): the slowest stage runs m + (p - 1) / v micro-batch slots;
each slot costs the stage's compute for one micro-batch plus its exposed TP, CP and EP
communication, its memory-bound kernels and the gradient accumulation. Once per step add the
pipeline sends on the critical path and their handshake waits across nodes, the part of the
DP gradient reduction the last backward does not hide, ZeRO-1/2's weight all-gather, and the
optimizer step.

Compute: GEMM FLOPs at the efficiency the :class:`~surrogate.analytic.perf.PerfModel` gives
for each projection's shape (QKV, attention output, MLP in and out, output head). The flash
attention core runs at the profile's measured causal flash-attention efficiency (for T x
heads / tp query rows over seq keys, counted at the full FLOPs) where the profile has one and
the framework runs a FlashAttention-2-class kernel (``FrameworkTraits.flash_attention_2``);
otherwise at the efficiency of a T x seq x head_dim GEMM, a proxy.

Memory-bound kernels (assumptions, documented): norms, rotary, SwiGLU, residual adds move
about 3 x the layer's activation bytes through HBM per micro-batch (forward and backward),
a third of it forward, which recomputation runs again (full: in the share of the layers it
recomputes; per operator: all of it, since torch's checkpoint replays the block's whole forward
and takes only the saved operators' outputs from its cache);
an MoE layer whose framework permutes its tokens with unfused gathers and scatters
(``FrameworkTraits.moe_unfused_permutation``, torchtitan) moves what :mod:`moe_passes` counts
op by op, in place of the routed copies' share of that traffic;
fp32 gradient accumulation reads and writes 10 bytes per parameter per micro-batch (none where
the weight-gradient GEMM accumulates in its epilogue: ``FrameworkTraits.fused_wgrad_accumulation``,
Megatron-Core's ``gradient_accumulation_fusion``); the AdamW
step reads and writes about 30 bytes per parameter it updates (bf16 weight, fp32 gradient,
master weight and two moments).

Overlap assumptions: TP (except where the framework overlaps it with its GEMMs,
``FrameworkTraits.tp_comm_overlap``: Megatron-Core's userbuffers) and EP are exposed; CP is
hidden under the attention core where it is shorter; the DP gradient reduction is hidden under
``dp_overlap`` of the last micro-batch's backward (2/3 of its compute); ZeRO-3 gathers are
hidden under each micro-batch's compute where shorter. Compute that runs beside a hidden
collective loses the SMs NCCL occupies: it takes 1 / (1 - ``nccl_sm_share``) as long for as
long as the collective runs (the ``overhead`` term).

Free parameters (``surrogate.analytic.params``, fitted per framework version by ``surrogate
calibrate --runs``): ``gemm_time_scale`` multiplies every GEMM and attention time,
``tp_comm_scale`` / ``tp_inter_comm_scale`` the TP collectives within / across nodes,
``tp_inter_step_latency_s`` is the latency of each step of a TP ring across nodes,
``pp_comm_scale`` the pipeline sends, ``pp_slot_latency_s`` is the wait of each handshake
across a node boundary (``pipeline.cross_node_waits``); ``layer_overhead_s`` per layer and
``microbatch_overhead_s`` per micro-batch slot are fixed costs (launches, host work), part of
``overhead`` and of every bubble slot.

Pipelined floor: in a pipelined run a stage's slot lasts at least ``stage layers x
(pp_layer_floor_s + tp x pp_layer_floor_per_tp_s)``, a maximum, not a sum: once the work of a
micro-batch is shorter, the slot stops shrinking with it. The Playbook's nanotron pipelines
show it (pp-fix: a slot flat in micro-batch size from 4 to 8 at tp 8, about 23 ms per layer
at hidden 4096 and 8192 alike, 15 ms at tp 4, 8 ms at tp 2; runs without a pipeline go down
to 4.5 ms per layer). A likely cause, not verified: a stage's host blocks on its send/receive
every slot, so it cannot run ahead of the GPU and the slot is the longer of the host's issue
time and the GPU's work. The excess over the work is reported as ``overhead``.

Host floor without a pipeline: a micro-batch lasts at least ``stage layers x layer_floor_s x
(1 + r / 3)``, r the share of the forward run again (recomputation), likewise a maximum. The
project's single-H100 steps show it (``microbench.train_step``, ``benchmarks/h100_own.py``):
the step time stays flat as the micro-batch doubles from 1 to 4 or 8, then grows with the
work; under FSDP2 the flat part is about twice autocast's (its per-block copies, casts and
hooks). At its prior (0.1 ms) it binds none of the Playbook's runs (pre-pp-fix keeps the
prior, and its fitted set did not move when the floor came in).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from surrogate.analytic import activations, comm, memory, moe_passes, pipeline
from surrogate.analytic.flops import (
    LayerParams,
    folded,
    full_recompute_share,
    model_flops_per_token,
    moe_layers,
    per_op_recompute,
)
from surrogate.analytic.inputs import Array, Cols
from surrogate.analytic.params import param
from surrogate.analytic.perf import PerfModel

ELEMENTWISE_TRAFFIC_FACTOR = 3.0
"""HBM bytes moved by memory-bound kernels per byte of stored activation (assumption)."""
GRAD_ACCUM_BYTES_PER_PARAM = 10.0
"""fp32 accumulation: read the bf16 gradient (2) and the fp32 buffer (4), write it back (4)."""
OPTIMIZER_BYTES_PER_PARAM = 30.0
"""AdamW: read and write master weight and two moments (24), read the gradient (4), write the
bf16 weight (2)."""
BACKWARD_SHARE = 2.0 / 3.0
"""Backward share of a micro-batch's compute (2 of 3 matmuls per weight)."""


def _recompute_factor(c: Cols) -> Array:
    """4/3 for a layer recomputed in full (its forward again), averaged over the layers
    where only some are (``flops.full_recompute_share``)."""
    return 1.0 + full_recompute_share(c) / 3.0


def layer_compute_s(c: Cols, perf: PerfModel) -> tuple[Array, Array]:
    """(seconds, attention-core seconds) of one layer, one micro-batch, forward + backward.

    GEMM shapes per rank (tp splits heads and MLP widths; the shapes of
    :mod:`surrogate.analytic.flops`): GQA's fused QKV and output projections, or MLA's down
    projections (unsplit, every tp rank computes them) and up projections; the SwiGLU MLP, for
    MoE layers the top-k routed experts plus the shared expert, with an MoE model's leading
    dense layers averaged in.
    """
    T = comm.tokens_per_rank(c)
    h, tp, s = c["hidden_size"], c["tp"], c["seq_len"]
    q = c["num_heads"] * c["qk_head_dim"]
    kv = c["num_kv_heads"] * c["qk_head_dim"]
    o = c["num_heads"] * c["v_head_dim"]
    moe = c["num_experts"] >= 2
    ffn = np.where(moe, c["moe_ffn_hidden_size"], c["ffn_hidden_size"])
    # MoE: each token visits top-k experts; with ep the experts (and their tokens) are spread
    # over ep ranks, so a rank still processes T x k expert-token rows per micro-batch.
    ffn_tokens = np.where(moe, T * c["experts_topk"], T)
    # Folded experts (expert tensor parallelism 1, flops.folded) are whole on a rank, which
    # runs them on the T / tp x k rows it routes.
    fold = folded(c)
    ffn_tp = np.where(fold, 1.0, tp)
    ffn_tokens = np.where(fold, T * c["experts_topk"] / tp, ffn_tokens)
    # MLA's and MoE's extra GEMMs are evaluated only when some row has them (their values are
    # discarded on the other rows): a dense batch has 5 shapes per row instead of 14.
    mla = c["kv_lora_rank"] > 0
    any_mla, any_moe = bool(mla.any()), bool(np.any(moe))
    shapes = {
        "qkv": (T, (q + 2 * kv) / tp, h),  # QKV projection
        "out": (T, h, o / tp),  # attention output projection
        "gate_up": (ffn_tokens, 2 * ffn / ffn_tp, h),  # gate and up projections
        "down": (ffn_tokens, h, ffn / ffn_tp),  # down projection
        **(_mla_shapes(c) if any_mla else {}),
        **(_moe_extra_shapes(c) if any_moe else {}),
        "attention": (T, s, c["qk_head_dim"]),  # the attention core's efficiency
    }
    g, peak, attention_eff = _gemm_seconds(shapes, perf, c)
    # MLA's query, key-value and their up projections (flops.py) replace the QKV projection;
    # rows without MLA get placeholder widths of 1 (their value is discarded).
    qkv = g["qkv"]
    if any_mla:
        queries = np.where(c["q_lora_rank"] > 0, g["mla_q_down"] + g["mla_q_up"], g["mla_q"])
        qkv = np.where(mla, queries + g["mla_kv_down"] + g["mla_kv_up"], qkv)
    routed = g["gate_up"] + g["down"]
    if any_moe:
        routed = _grouped_expert_gemms_s(c, perf, shapes, routed)
    seconds = qkv + g["out"] + routed
    mlp_again = g["gate_up"] / 2  # the up projection, half the gate-and-up GEMM
    if any_moe:
        seconds, mlp_again = _with_moe_layers(c, g, moe, routed, seconds, mlp_again)
    attn_s = _attention_core_s(c, perf, T, q + o, peak, attention_eff)
    # Per-operator selective checkpointing (torchtitan's 'op') runs every other matmul's
    # forward again: the key projection (its share of the QKV GEMM), the attention output
    # projection and the MLP's up projection (half of the gate-and-up GEMM); in an MoE layer
    # the routed experts whole and the shared expert's up projection.
    again = np.where(per_op_recompute(c), (qkv * kv / (q + 2 * kv) + g["out"] + mlp_again) / 3, 0.0)
    scale = param(c, "gemm_time_scale")
    return ((seconds + attn_s) * _recompute_factor(c) + again) * scale, attn_s * scale


def _gemm_seconds(
    shapes: dict[str, Shape], perf: PerfModel, c: Cols
) -> tuple[dict[str, Array], Array, Array]:
    """Forward + backward seconds of every GEMM of ``shapes`` (6 x m n k FLOPs each), with the
    peak FLOP/s and the attention core's efficiency they were computed with.

    fp8 GEMMs run at the bf16 curve times the framework's measured fp8 speed-up where it has
    one (``FrameworkTraits.fp8_gemm_speedup``), else on the profile's fp8 curve."""
    peak = c["peak_flops"]
    speedup = np.asarray(c.get("fp8_gemm_speedup", 0.0))
    by_bf16 = (np.asarray(c.get("fp8", 0.0)) > 0) & (speedup > 0)
    if np.any(by_bf16):
        eff = _gemm_efficiencies(shapes, perf, {**c, "fp8": np.where(by_bf16, 0.0, c["fp8"])})
        peak = np.where(by_bf16, c["peak_flops_bf16"] * speedup, peak)
    else:
        eff = _gemm_efficiencies(shapes, perf, c)
    # 6 x (m n k) FLOPs per GEMM for forward + backward.
    g = {name: 6 * m * n * k / (peak * eff[name]) for name, (m, n, k) in shapes.items()}
    # the attention core's efficiency where the shapes hold its proxy (NaN elsewhere)
    return g, peak, eff.get("attention", np.full(np.shape(peak), np.nan))


def _grouped_expert_gemms_s(
    c: Cols, perf: PerfModel, shapes: dict[str, Shape], routed: Array
) -> Array:
    """The routed experts' GEMMs of a framework that runs them as one GEMM per local expert
    (``FrameworkTraits.moe_grouped_gemm``): each at the efficiency of its own rows, the
    rank's routed rows over its num_experts / ep local experts (balanced routing)."""
    grouped = (np.asarray(c.get("moe_grouped_gemm", 0.0)) > 0) & (c["num_experts"] >= 2)
    if not np.any(grouped):
        return routed
    local = np.maximum(c["num_experts"] / c["ep"], 1.0)
    per = {
        name: (np.maximum(shapes[name][0] / local, 1.0), *shapes[name][1:])
        for name in ("gate_up", "down")
    }
    # in bf16 under fp8 where the framework's fp8 leaves them out (torchtitan)
    g = _gemm_seconds(per, perf, _in_bf16(c, "fp8_experts_in_bf16"))[0]
    return np.where(grouped, local * (g["gate_up"] + g["down"]), routed)


def _in_bf16(c: Cols, trait: str) -> Cols:
    """``c`` with its fp8 rows whose framework has ``trait`` (a GEMM its fp8 leaves in bf16)
    run as bf16: the bf16 curve at the bf16 peak."""
    bf16 = (np.asarray(c.get("fp8", 0.0)) > 0) & (np.asarray(c.get(trait, 0.0)) > 0)
    if not np.any(bf16):
        return c
    return {
        **c,
        "fp8": np.where(bf16, 0.0, c["fp8"]),
        "peak_flops": np.where(bf16, c["peak_flops_bf16"], c["peak_flops"]),
    }


def _with_moe_layers(
    c: Cols,
    g: dict[str, Array],
    moe: NDArray[np.bool_],
    routed: Array,
    seconds: Array,
    mlp_again: Array,
) -> tuple[Array, Array]:
    """An MoE model's layer ``seconds`` and per-operator recomputed MLP ``mlp_again``, the
    shared expert and the leading dense layers accounted for (``g``: :func:`_gemm_seconds`)."""
    # An MoE layer adds the shared expert to its routed experts, and its leading dense
    # layers have a dense MLP in place of experts, averaged over the layers.
    shared = np.where(
        c["shared_expert_ffn_hidden_size"] > 0, g["shared_gate_up"] + g["shared_down"], 0.0
    )
    dense_frac = 1 - moe_layers(c) / c["num_layers"]
    extra = shared + dense_frac * (g["dense_gate_up"] + g["dense_down"] - routed - shared)
    seconds = seconds + np.where(moe, extra, 0.0)
    # Per operator, an MoE layer runs its routed experts again whole and its shared
    # expert's up projection (activations.per_op_checkpoint_bytes: what it keeps).
    moe_again = routed + np.where(
        c["shared_expert_ffn_hidden_size"] > 0, g["shared_gate_up"] / 2, 0.0
    )
    mlp_again = np.where(
        moe, (1 - dense_frac) * moe_again + dense_frac * g["dense_gate_up"] / 2, mlp_again
    )
    return seconds, mlp_again


def _attention_core_s(
    c: Cols, perf: PerfModel, T: Array, qo: Array, peak: Array, eff: Array
) -> Array:
    """Seconds of the attention core of one layer, forward + backward, for ``T`` tokens per
    rank; ``qo``: the query and output widths summed; ``eff``: the GEMM proxy's efficiency
    at ``peak`` FLOP/s."""
    tp, s = c["tp"], c["seq_len"]
    # Attention core: 12 h s FLOPs per token over tp ranks (flops.attention_flops_per_token).
    attn_flops = 6 * T * s * qo / tp
    attn_s = attn_flops / (peak * eff)
    # A measured flash-attention curve replaces the proxy for frameworks that run such a
    # kernel (in bf16 under fp8 too): T x heads / tp query rows over s keys.
    measured = perf.attention_efficiency(T * c["num_heads"] / tp, s, c["qk_head_dim"], c)
    if measured is not None:
        # the curve is our H100's FlashAttention-2-class kernel; a framework whose Hopper
        # kernel is faster (FrameworkTraits.hopper_attention_speedup) divides it
        # on a Hopper GPU only: elsewhere its kernel is not the one measured to be faster
        speedup = np.where(
            np.asarray(c.get("hopper", 0.0)) > 0,
            np.asarray(c.get("hopper_attention_speedup", 1.0)),
            1.0,
        )
        flash = attn_flops / (c["peak_flops_bf16"] * measured * speedup)
        attn_s = np.where(c["flash_attention_2"] > 0, flash, attn_s)
    return attn_s


Shape = tuple[Array, Array, Array]


def _gemm_efficiencies(shapes: dict[str, Shape], perf: PerfModel, c: Cols) -> dict[str, Array]:
    """The PerfModel's efficiency of every GEMM shape, in one call over the stacked shapes."""
    names = list(shapes)
    m, n, k = (np.stack(np.broadcast_arrays(*(shapes[g][j] for g in names))) for j in range(3))
    eff = perf.gemm_efficiency(m, n, k, c)
    return {name: eff[i] for i, name in enumerate(names)}


def _mla_shapes(c: Cols) -> dict[str, Shape]:
    """MLA's projections (flops.py): the query down and up projections (or the direct query
    projection without a query rank), the key-value down and up projections. Rows without MLA
    get placeholder widths of 1."""
    T, h, tp = comm.tokens_per_rank(c), c["hidden_size"], c["tp"]
    q_rank = np.maximum(c["q_lora_rank"], 1.0)
    kv_rank = np.maximum(c["kv_lora_rank"], 1.0)
    rope = c["qk_rope_head_dim"]
    q = c["num_heads"] * c["qk_head_dim"]
    kv_up = c["num_heads"] * (c["qk_head_dim"] - rope + c["v_head_dim"])
    return {
        "mla_q_down": (T, q_rank, h),
        "mla_q_up": (T, q / tp, q_rank),
        "mla_q": (T, q / tp, h),
        "mla_kv_down": (T, kv_rank + rope, h),
        "mla_kv_up": (T, kv_up / tp, kv_rank),
    }


def _moe_extra_shapes(c: Cols) -> dict[str, Shape]:
    """The shared expert's MLP (placeholder width 1 without one) and a dense layer's MLP."""
    T, h, tp = comm.tokens_per_rank(c), c["hidden_size"], c["tp"]
    width = np.maximum(c["shared_expert_ffn_hidden_size"], 1.0)
    ffn = c["ffn_hidden_size"]
    return {
        "shared_gate_up": (T, 2 * width / tp, h),
        "shared_down": (T, h, width / tp),
        "dense_gate_up": (T, 2 * ffn / tp, h),
        "dense_down": (T, h, ffn / tp),
    }


def lm_head_compute_s(c: Cols, perf: PerfModel) -> Array:
    """Output head of one micro-batch, forward + backward (not recomputed), timed as the
    layers' GEMMs are (:func:`_gemm_seconds`); under fp8 in bf16 where the framework keeps it
    there (``FrameworkTraits.fp8_head_in_bf16``)."""
    T = comm.tokens_per_rank(c)
    head = {"head": (T, c["vocab_size"] / c["tp"], c["hidden_size"])}
    g = _gemm_seconds(head, perf, _in_bf16(c, "fp8_head_in_bf16"))[0]
    return g["head"] * param(c, "gemm_time_scale")


def step_breakdown(
    c: Cols, perf: PerfModel, layer_params: LayerParams | None = None
) -> dict[str, Array]:
    """Seconds per step by term, plus ``step_time_s``, ``tokens_per_s_per_gpu``, ``mfu``,
    ``bubble_frac`` and ``stage_compute_s`` (one micro-batch on the slowest stage).
    ``layer_params``: :meth:`LayerParams.of` ``c``, where already computed."""
    layer_s, attn_s = layer_compute_s(c, perf)
    stage = _slowest_stage(c, layer_s, lm_head_compute_s(c, perf))
    spans = comm.spans_nodes(c)
    mb = _microbatch_terms(c, perf, stage, layer_s, attn_s, spans)
    dense, experts = _stage_params(
        c,
        stage.layers,
        stage.is_last,
        stage.is_middle,
        LayerParams.of(c) if layer_params is None else layer_params,
    )
    params = dense + experts
    mb["memory_bound"] = _memory_bound_s(c, stage.layers, params)
    dp = comm.dp_times_s(c, perf, dense, experts)
    compute_mb = stage.compute_s
    mb["zero3_comm"] = np.maximum(dp["zero3_per_microbatch"] - compute_mb, 0.0)
    # NCCL kernels that overlap compute take SMs from it (module docstring).
    share = np.asarray(param(c, "nccl_sm_share"))
    slowdown = share / (1.0 - np.minimum(share, 0.9))
    hidden_mb = np.minimum(dp["zero3_per_microbatch"], compute_mb) + stage.layers * (
        np.minimum(mb.pop("cp_layer"), attn_s) + mb.pop("tp_hidden_layer")
    )
    fixed_mb = stage.layers * param(c, "layer_overhead_s") + param(c, "microbatch_overhead_s")
    overhead_mb = fixed_mb + slowdown * hidden_mb
    work = (
        compute_mb
        + mb["tp_comm"]
        + mb["cp_comm"]
        + mb["ep_comm"]
        + mb["memory_bound"]
        + mb["zero3_comm"]
        + overhead_mb
    )
    # A pipelined stage takes at least its host floor per layer (module docstring); the time
    # the floor adds is reported as overhead.
    again = full_recompute_share(c) + per_op_recompute(c)
    floor_mb = stage.layers * np.where(
        stage.piped,
        param(c, "pp_layer_floor_s") + c["tp"] * param(c, "pp_layer_floor_per_tp_s"),
        param(c, "layer_floor_s") * (1.0 + again / 3.0),
    )
    slot = np.maximum(work, floor_mb)
    mb["overhead"] = overhead_mb + (slot - work)
    # the reduction hides under the last micro-batch's backward, which lasts as long as its
    # compute, or as the host floor where that binds (the GPU then idles between kernels)
    # (a framework whose buckets reduce as the backward fills them hides it under the whole
    # backward: FrameworkTraits.overlaps_dp_with_compute)
    overlapped = np.asarray(c.get("overlaps_dp_with_compute", 0.0)) > 0
    window = (
        np.where(overlapped, 1.0, param(c, "dp_overlap"))
        * BACKWARD_SHARE
        * np.maximum(compute_mb, floor_mb)
    )
    # ZeRO-1/2's weight gather: exposed, or under the first micro-batch's forward where the
    # framework waits for each bucket in the forward (a third of the slot)
    gather_window = np.where(overlapped, (1.0 - BACKWARD_SHARE) * slot, 0.0)
    return _step_totals(c, perf, mb, slot, spans, dp, window, slowdown, params, gather_window)


@dataclass(frozen=True)
class _Stage:
    """The slowest pipeline stage: its layers, one micro-batch's compute on it, which stage
    it is (the last, stage 1, else the first) and whether the run is pipelined."""

    layers: Array
    compute_s: Array
    is_last: NDArray[np.bool_]
    is_middle: NDArray[np.bool_]
    piped: NDArray[np.bool_]


def _slowest_stage(c: Cols, layer_s: Array, head_s: Array) -> _Stage:
    """The stage whose micro-batch computes longest: the first (with the output head where
    the run is not pipelined), the last (with the head), or stage 1."""
    first_layers = pipeline.first_stage_layers(c)
    last_layers = pipeline.last_stage_layers(c)
    piped = c["pp"] > 1
    first_s = first_layers * layer_s + np.where(piped, 0.0, head_s)
    last_s = last_layers * layer_s + head_s
    slow_is_last = piped & (last_s > first_s)
    stage_layers = np.where(slow_is_last, last_layers, first_layers)
    compute_mb = np.where(slow_is_last, last_s, first_s)
    # torchtitan's split can give stage 1 the most layers (``pipeline``); under the others no
    # middle stage has more than the first, and this picks none.
    middle_layers = np.where(c["pp"] >= 3, pipeline.stage_layers(c, 1.0), 0.0)
    slow_is_middle = middle_layers * layer_s > compute_mb
    stage_layers = np.where(slow_is_middle, middle_layers, stage_layers)
    compute_mb = np.where(slow_is_middle, middle_layers * layer_s, compute_mb)
    return _Stage(stage_layers, compute_mb, slow_is_last & ~slow_is_middle, slow_is_middle, piped)


def _microbatch_terms(
    c: Cols, perf: PerfModel, stage: _Stage, layer_s: Array, attn_s: Array, spans: dict[str, Array]
) -> dict[str, Array]:
    """Per micro-batch on the slowest stage: its compute and exposed TP, CP and EP
    communication, ``cp_layer``, a layer's CP time, hidden or not, and ``tp_hidden_layer``, a
    layer's TP time that runs under its GEMMs.

    A framework that overlaps its TP collectives with their GEMMs within a node
    (``FrameworkTraits.tp_comm_overlap``) exposes the longer of 1 / tp of each layer's TP
    time (the first chunk of a ring of tp ranks, which no GEMM chunk covers) and the part
    longer than the layer's GEMMs, at the profile's time (the fitted ``tp_comm_scale``
    carries other frameworks' overlap and is not applied); the rest is hidden. Elsewhere the
    fitted scale prices it all as exposed."""
    layers = stage.layers
    # a framework whose TP runs synchronously pays the profile's time within a node
    # (FrameworkTraits.tp_comm_synchronous: torchtitan without async TP)
    intra = np.where(
        np.asarray(c.get("tp_comm_synchronous", 0.0)) > 0, 1.0, param(c, "tp_comm_scale")
    )
    tp_scale = np.where(spans["tp"] > 0, param(c, "tp_inter_comm_scale"), intra)
    tp_latency = spans["tp"] * comm.tp_ring_steps_per_layer(c) * param(c, "tp_inter_step_latency_s")
    tp_layer = comm.tp_time_per_layer_s(c, perf)
    overlapped = (
        (np.asarray(c.get("tp_comm_overlap", 0.0)) > 0)
        & (spans["tp"] == 0)
        & (c["tp"] > 1)
        & (c["sequence_parallel"] > 0)
    )
    exposed = np.maximum(tp_layer / np.maximum(c["tp"], 1.0), tp_layer - (layer_s - attn_s))
    tp_exposed = np.where(overlapped, exposed, tp_layer * tp_scale + tp_latency)
    cp_layer = comm.cp_time_per_layer_s(c, perf)
    moe_layers = np.where(c["num_experts"] >= 2, layers, 0.0)
    return {
        "compute": stage.compute_s,
        "tp_comm": layers * tp_exposed,
        "tp_hidden_layer": np.where(overlapped, tp_layer - exposed, 0.0),
        "cp_comm": layers * np.maximum(cp_layer - attn_s, 0.0),
        "ep_comm": moe_layers * comm.ep_time_per_layer_s(c, perf),
        "cp_layer": cp_layer,
    }


def _memory_bound_s(c: Cols, layers: Array, params: Array) -> Array:
    """One micro-batch's memory-bound kernels on a stage of ``layers`` layers holding
    ``params`` parameters (module docstring)."""
    # The elementwise kernels' traffic scales with the activations as computed; a framework
    # that keeps the gathered projection inputs whole holds more bytes, it moves no more, and
    # one that recomputes SiLU holds fewer but reads the gate and up outputs again to do so.
    # An unfused MoE permutation is counted op by op (moe_passes), in place of its routed
    # copies' generic traffic.
    none = np.zeros_like(c["recompute"])
    unfused = np.asarray(c.get("moe_unfused_permutation", 0.0)) > 0
    act_bytes = layers * activations.activation_bytes_per_layer(
        {
            **c,
            "recompute": none,
            "saves_gathered_tp_inputs": none,
            "fused_swiglu": none,
            "fp8_saves_quantized_inputs": none,
            "moe_routed_bytes": np.where(unfused, 0.0, c["moe_routed_bytes"]),
        }
    )
    again = full_recompute_share(c) + per_op_recompute(c)
    return (
        (ELEMENTWISE_TRAFFIC_FACTOR * act_bytes + moe_passes.permutation_bytes(c, layers))
        * (1.0 + again / 3.0)
        + GRAD_ACCUM_BYTES_PER_PARAM
        * params
        * c["fp32_grad_accumulation"]
        * (1.0 - np.asarray(c.get("fused_wgrad_accumulation", 0.0)))
    ) / c["hbm_bw"]


def _step_totals(
    c: Cols,
    perf: PerfModel,
    mb: dict[str, Array],
    slot: Array,
    spans: dict[str, Array],
    dp: dict[str, Array],
    window: Array,
    slowdown: Array,
    params: Array,
    gather_window: Array,
) -> dict[str, Array]:
    """The step's terms from one micro-batch's (``mb``) and the slot's: the micro-batches,
    the bubble, the pipeline sends, the exposed DP reduction and the optimizer; and the
    headline outputs."""
    slots = pipeline.step_slots(c)
    m = pipeline.microbatches(c)
    # handshakes across a node boundary wait a fixed time each (pipeline.cross_node_waits)
    waits = pipeline.cross_node_waits(c) * spans["pp"]
    transfers = slots * comm.pp_time_per_slot_s(c, perf) * param(c, "pp_comm_scale")
    # under an interleaved schedule that overlaps its sends with the next chunk's compute
    # (FrameworkTraits.overlaps_interleaved_pp_comm) the transfers are hidden
    hidden_pp = np.where(
        (np.asarray(c.get("overlaps_interleaved_pp_comm", 0.0)) > 0) & (c["vpp"] > 1),
        transfers,
        0.0,
    )
    pp_s = transfers - hidden_pp + waits * param(c, "pp_slot_latency_s")
    dp_exposed = np.maximum(dp["grad_reduce"] - window, 0.0)
    gather_exposed = np.maximum(dp["param_gather"] - gather_window, 0.0)
    dp_contention = slowdown * (
        np.minimum(dp["grad_reduce"], window) + np.minimum(dp["param_gather"], gather_window)
    )
    updated = np.where(c["zero_stage"] >= 1, params / memory.zero_shard_ranks(c), params)
    out = {
        "compute": m * mb["compute"],
        "tp_comm": m * mb["tp_comm"],
        "cp_comm": m * mb["cp_comm"],
        "ep_comm": m * mb["ep_comm"],
        "memory_bound": m * mb["memory_bound"],
        "zero3_comm": m * mb["zero3_comm"],
        "overhead": m * mb["overhead"] + dp_contention + slowdown * hidden_pp,
        "bubble": (slots - m) * slot,
        "pp_comm": pp_s,
        "dp_comm": dp_exposed + gather_exposed,
        "optimizer": OPTIMIZER_BYTES_PER_PARAM * updated / c["hbm_bw"],
    }
    step = np.asarray(sum(out.values()), dtype=np.float64)
    tokens = c["dp"] * c["grad_accum"] * c["mbs"] * c["seq_len"]
    gpus = c["gpus_per_node"] * c["num_nodes"]
    out["step_time_s"] = step
    out["tokens_per_s_per_gpu"] = tokens / step / gpus
    out["mfu"] = out["tokens_per_s_per_gpu"] * model_flops_per_token(c) / c["peak_flops"]
    out["bubble_frac"] = pipeline.bubble_fraction(c)
    out["stage_compute_s"] = mb["compute"]
    return out


def _stage_params(
    c: Cols,
    layers: Array,
    is_last: NDArray[np.bool_],
    is_middle: NDArray[np.bool_],
    params: LayerParams,
) -> tuple[Array, Array]:
    """(dense, expert) parameters of the slowest stage's rank (the first, the last or
    stage 1)."""
    first = memory.stage_params(c, layers, first=True, last=False, per_layer=params)
    last = memory.stage_params(c, layers, first=False, last=True, per_layer=params)
    single = memory.stage_params(c, layers, first=True, last=True, per_layer=params)
    middle = (
        memory.stage_params(
            c, layers, first=False, last=False, start=pipeline.stage_start(c, 1.0), per_layer=params
        )
        if is_middle.any()
        else first
    )
    piped = c["pp"] > 1
    pick = [
        np.where(piped, np.where(is_middle, mt, np.where(is_last, lt, ft)), st)
        for ft, lt, st, mt in zip(first, last, single, middle, strict=True)
    ]
    return pick[0], pick[1]


STEP_TERMS: tuple[str, ...] = (
    "compute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "memory_bound",
    "zero3_comm",
    "overhead",
    "bubble",
    "pp_comm",
    "dp_comm",
    "optimizer",
)
"""Keys of :func:`step_breakdown` that sum to ``step_time_s``, in display order."""
