"""Per-GPU memory of the most loaded rank, as a breakdown in bytes.

Model states (Rajbhandari et al. 2020, "ZeRO", sec. 3 and Fig. 1): mixed-precision AdamW
keeps bf16 weights (2 bytes/param), bf16 gradients (2), and fp32 master weights plus two
fp32 moments (12): 16 bytes per parameter. Frameworks that accumulate gradients in fp32
(nanotron, Megatron; ``surrogate.config.frameworks``) keep 4 more; Megatron-Core keeps no bf16
gradient beside its fp32 ``main_grad`` buffer (``FrameworkTraits.keeps_bf16_gradients``), so
its gradients take 4 bytes per parameter. ZeRO-1 shards the optimizer
states, ZeRO-2 also the gradients, ZeRO-3 also the weights, over the dp x cp ranks (over
dp x cp / ep for expert weights); with hybrid sharding (``dp_replicate`` copies of the
shards: PyTorch FSDP's HSDP, Zhao et al. 2023, "PyTorch FSDP", sec. 3.2.1) over dp x cp /
dp_replicate of them. Seed figures: 7B with ZeRO-3 on 8 GPUs = 14 GB; 80B on
32 GPUs = 40 GB (Playbook).

Activations: what one layer keeps for one micro-batch, :mod:`surrogate.analytic.activations`;
a stage keeps its layers' (:func:`stage_activation_bytes`) for each micro-batch in flight.

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
splits the layers (``docs/design-decisions.md`` compares the shapes); which
tensors they are in nanotron's engine is not identified.

Logits: at the start of the backward, the output head's T x V / tp logits in bf16 (2 bytes),
their fp32 copy (4), the fp32 softmax the vocab-parallel cross entropy saves (4), its fp32
gradient (4) and that gradient cast to bf16 (2) can coexist: at most 16 bytes per logit, the
prior of the free parameter ``logit_bytes``; frameworks free some before others are made, so
it is fitted per framework version (``surrogate.analytic.params``). A fused cross entropy
(``FrameworkTraits.fused_cross_entropy``: llm-foundry's) keeps the bf16 logits and their bf16
gradient only, ``FUSED_LOGIT_BYTES`` (4) per logit, derived rather than fitted.

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

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from surrogate.analytic import pipeline
from surrogate.analytic.activations import (
    activation_bytes_per_layer,
    unrecomputed_activation_bytes,
)
from surrogate.analytic.flops import (
    LayerParams,
    checkpointed_layers,
    embedding_params,
    folded,
    per_op_recompute,
)
from surrogate.analytic.inputs import Array, Cols
from surrogate.analytic.params import PARAMETERS, param
from surrogate.config.gpus import GIB

CUDA_CONTEXT_BYTES = 1.0 * GIB
"""CUDA context + cuBLAS workspace + NCCL buffers, outside torch's allocator."""
DDP_BUCKET_BYTES = 2 * 25 * 2**20 * 4
"""Two 25 MiB gradient buckets in fp32 (torch DDP ``bucket_cap_mb`` default)."""
SAVED_LOGIT_BYTES = 4.0
"""Bytes per logit the vocab-parallel cross entropy saves for its backward: the fp32 softmax
(module docstring)."""
FUSED_LOGIT_BYTES = 4.0
"""Bytes per logit at a fused cross entropy's backward (``FrameworkTraits.fused_cross_entropy``):
the bf16 logits it saved and their bf16 gradient; it saves the logits themselves (2 bytes)
for a micro-batch's backward where the fp32 softmax would be."""

BREAKDOWN_TERMS: tuple[str, ...] = (
    "weights",
    "gradients",
    "optimizer",
    "activations",
    "transient",
    "logits",
    "buffers",
    "allocator",
    "cuda_context",
)
"""Keys of :func:`memory_breakdown`, in display order; they sum to ``total``."""


def zero_shard_ranks(c: Cols) -> Array:
    """Ranks over which ZeRO shards the dense states: dp x cp over the copies of the shards
    (``LayoutConfig.dp_replicate``, hybrid sharding; 1 copy where the column is absent)."""
    return c["dp"] * c["cp"] / np.asarray(c.get("dp_replicate", 1.0), dtype=np.float64)


def _sharding(c: Cols) -> tuple[Array, Array]:
    """Ranks over which dense and expert states are sharded by ZeRO: :func:`zero_shard_ranks`
    and that over ep; folded experts (:func:`~surrogate.analytic.flops.folded`) over
    tp x dp x cp / ep."""
    dense = zero_shard_ranks(c)
    # folded experts (expert tensor parallelism 1) shard over the expert data-parallel
    # group, tp x dp x cp / ep ranks (megatron-core parallel_state: ETP x EP x EDP = TP x CP x DP)
    return dense, np.where(folded(c), dense * c["tp"] / c["ep"], dense / c["ep"])


def stage_params(
    c: Cols,
    layers: Array,
    *,
    first: bool,
    last: bool,
    start: Array | None = None,
    per_layer: LayerParams | None = None,
) -> tuple[Array, Array]:
    """(dense, expert) parameters held by one rank of a stage with ``layers`` layers.

    Matrices are split by tp (Megatron-style column/row parallel linears, vocab-parallel
    embedding and head); norm weights and the MoE router are replicated. Experts are split by
    ep x tp, or by ep alone where folded (:func:`~surrogate.analytic.flops.folded`); a shared
    expert is split by tp like a dense MLP (Megatron ``SharedExpertMLP``).
    An MoE model's leading dense layers (``num_dense_layers``) sit on the first stages. With
    pp > 1 the last stage holds its own output head even when the embeddings are tied
    (nanotron and Megatron untie them across stages). ``start``: the stage's first layer
    (default: 0 for the first stage, L - layers otherwise). ``per_layer``: the layers'
    parameters (:meth:`LayerParams.of`, computed once per table where given).
    """
    p = LayerParams.of(c) if per_layer is None else per_layer
    h, tp = c["hidden_size"], c["tp"]
    moe = c["num_experts"] >= 2
    split = p.attention + np.where(moe, 0.0, p.mlp)
    replicated = 2 * h + p.router
    dense = layers * (split / tp + replicated)
    # MoE variants: a shared expert on each MoE layer; a dense MLP instead of the router (and
    # experts) on each leading dense layer. Adds exactly 0 for dense models.
    if start is None:
        start = np.zeros_like(layers) if first else c["num_layers"] - layers
    n_dense = _dense_mlp_layers_on_stage(c, layers, start)
    n_moe = layers - n_dense
    dense = dense + np.where(
        moe, n_moe * p.shared_expert / tp + n_dense * (p.mlp / tp - p.router), 0.0
    )
    vocab = embedding_params(c) / tp
    if first:
        dense = dense + vocab
    if last:
        tied_here = np.where(c["pp"] > 1, 0.0, c["tie_embeddings"])
        dense = dense + (1 - tied_here) * vocab + h
    experts = np.where(folded(c), n_moe * p.experts / c["ep"], n_moe * p.experts / (c["ep"] * tp))
    return dense, experts


def _dense_mlp_layers_on_stage(c: Cols, layers: Array, start: Array) -> Array:
    """Leading dense layers of an MoE model among a stage's ``layers``, model layers
    ``start`` .. ``start + layers - 1``."""
    k = np.where(c["num_experts"] >= 2, c["num_dense_layers"], 0.0)
    return np.clip(k - start, 0.0, layers)


def pipeline_unsharded(c: Cols) -> NDArray[np.bool_]:
    """Where the framework keeps a pipeline stage's FSDP parameters (bf16) and accumulated
    gradients (fp32) unsharded all step: pp > 1 under ZeRO-2 or 3 with
    ``FrameworkTraits.pipeline_keeps_fsdp_unsharded`` (torchtitan)."""
    return np.asarray(
        (np.asarray(c.get("pipeline_keeps_fsdp_unsharded", 0.0)) > 0)
        & (c["pp"] > 1)
        & (c["zero_stage"] >= 2),
        dtype=bool,
    )


def model_state_bytes(c: Cols, dense: Array, experts: Array) -> dict[str, Array]:
    """Weights, gradients and optimizer states of ``dense`` + ``experts`` parameters on a rank."""
    shard_dense, shard_expert = _sharding(c)
    z = c["zero_stage"]

    def sharded(bytes_per_param: Array | float, from_stage: int) -> Array:
        on = z >= from_stage
        return bytes_per_param * (
            np.where(on, dense / shard_dense, dense) + np.where(on, experts / shard_expert, experts)
        )

    # a bf16 gradient where the framework keeps one, and an fp32 accumulation buffer
    # (Megatron-Core keeps the fp32 buffer alone: FrameworkTraits.keeps_bf16_gradients)
    grad_bytes = (
        2 * np.asarray(c.get("keeps_bf16_gradients", 1.0)) + 4 * c["fp32_grad_accumulation"]
    )
    # under a pipeline a framework may keep the stage's FSDP states unsharded all step: bf16
    # parameters and fp32 accumulated gradients (FrameworkTraits.pipeline_keeps_fsdp_unsharded)
    unsharded = pipeline_unsharded(c)
    whole = dense + experts
    return {
        "weights": np.where(unsharded, 2.0 * whole, sharded(2.0, 3)),
        "gradients": np.where(unsharded, 4.0 * whole, sharded(grad_bytes, 2)),
        "optimizer": sharded(12.0, 1),
    }


@dataclass(frozen=True)
class LayerBytes:
    """What every stage of a configuration keeps per layer alike, computed once per
    :func:`memory_breakdown`: a layer's activations as recomputation leaves them (``kept``)
    and without recomputation (``whole``), the backward's working set (``transient``: one
    layer's activation gradients, and where the layer is recomputed, in full or per
    operator, also its recomputed activations) and the logits (bytes); with the layer's
    parameters (``params``), which every stage's weights are made of."""

    kept: Array
    whole: Array
    transient: Array
    logits: Array
    buffers: Array
    params: LayerParams

    @classmethod
    def of(cls, c: Cols, params: LayerParams | None = None) -> LayerBytes:
        """``params``: :meth:`LayerParams.of` ``c`` where already computed."""
        params = LayerParams.of(c) if params is None else params
        whole = unrecomputed_activation_bytes(c)
        recomputed = (c["recompute"] == 2) | per_op_recompute(c)
        layer_weights = (params.attention + params.mlp) / c["tp"]
        # (no gather buffers where the stage's parameters stay unsharded all step)
        zero3_gather = np.where(
            (c["zero_stage"] >= 3) & ~pipeline_unsharded(c), 2 * 2 * layer_weights, 0.0
        )
        return cls(
            kept=activation_bytes_per_layer(c, whole),
            whole=whole,
            transient=np.where(recomputed, 2 * whole, whole),
            logits=logits_bytes(c),
            buffers=DDP_BUCKET_BYTES + zero3_gather,
            params=params,
        )

    def rows(self, rows: np.ndarray) -> LayerBytes:
        """The same of the configurations at positions ``rows``."""
        return LayerBytes(
            self.kept[rows],
            self.whole[rows],
            self.transient[rows],
            self.logits[rows],
            self.buffers[rows],
            self.params.rows(rows),
        )


def stage_activation_bytes(c: Cols, layers: Array, per_layer: LayerBytes | None = None) -> Array:
    """Bytes a stage of ``layers`` layers keeps for one micro-batch: where full recomputation
    checkpoints only some of them (``recompute_layers``), those keep their input and the rest
    everything (:func:`activation_bytes_per_layer` under each)."""
    kept = activation_bytes_per_layer(c) if per_layer is None else per_layer.kept
    checkpointed = checkpointed_layers(c, layers)
    partial = (c["recompute"] == 2) & (checkpointed < layers)
    if not np.any(partial):
        return layers * kept
    whole = unrecomputed_activation_bytes(c) if per_layer is None else per_layer.whole
    mixed = checkpointed * kept + (layers - checkpointed) * whole
    return np.where(partial, mixed, layers * kept)


def activation_scale(c: Cols) -> Array:
    """Stored activations over the derived count: the framework's own value where it states
    one (``FrameworkTraits.activation_scale``: Megatron-Core's), else the parameter set's."""
    own = np.asarray(c.get("framework_activation_scale", 0.0), dtype=np.float64)
    return np.where(own > 0, own, param(c, "activation_scale"))


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
    fused = c["fused_cross_entropy"] > 0
    saved = np.where(c["pp_afab"] > 0, pipeline.microbatches(c) - 1, 0.0) * np.where(
        fused, FUSED_LOGIT_BYTES / 2, SAVED_LOGIT_BYTES
    )
    # the framework's derived count where it states one (FrameworkTraits.logit_bytes)
    stated = np.asarray(c.get("framework_logit_bytes", 0.0), dtype=np.float64)
    per_byte = np.where(
        fused, FUSED_LOGIT_BYTES, np.where(stated > 0, stated, param(c, "logit_bytes"))
    )
    return np.asarray((per_byte + saved) * per_logit, dtype=np.float64)


def _stage_breakdown(
    c: Cols, per_layer: LayerBytes, *, first: bool, last: bool, stage: Array | float | None = None
) -> dict[str, Array]:
    """The breakdown of the first or the last stage, or of stage index ``stage`` (neither),
    from what every stage keeps per layer alike (``per_layer``: :meth:`LayerBytes.of`)."""
    if stage is not None:
        layers = pipeline.stage_layers(c, stage)
        start: Array | None = pipeline.stage_start(c, stage)
        inflight = pipeline.stage_inflight(c, stage)
    else:
        layers = pipeline.first_stage_layers(c) if first else pipeline.last_stage_layers(c)
        start = None
        inflight = (
            pipeline.first_stage_inflight(c) if first else pipeline.stage_inflight(c, c["pp"] - 1)
        )
    dense, experts = stage_params(
        c, layers, first=first, last=last, start=start, per_layer=per_layer.params
    )
    out = model_state_bytes(c, dense, experts)
    out["activations"] = inflight * stage_activation_bytes(c, layers, per_layer) * activation_scale(
        c
    ) + inflight_hidden_bytes(c, inflight)
    out["transient"] = per_layer.transient
    out["logits"] = per_layer.logits if last else np.zeros_like(layers)
    out["buffers"] = per_layer.buffers
    held = np.sum([out[k] for k in BREAKDOWN_TERMS[:7]], axis=0)
    out["allocator"] = param(c, "allocator_overhead_frac") * held
    out["cuda_context"] = np.full_like(layers, CUDA_CONTEXT_BYTES)
    out["total"] = held + out["allocator"] + out["cuda_context"]
    return out


def memory_breakdown(c: Cols, params: LayerParams | None = None) -> dict[str, Array]:
    """Bytes per term on the most loaded rank of every pipeline stage, plus ``total`` and
    ``stage`` (its position: 0 = first stage, 1 = last stage, i / (pp - 1) for stage i).

    The first stage holds the most micro-batches and the embedding, the last one the logits;
    a stage between them can hold more when its layers weigh more: an MoE model's leading
    dense layers sit on the first stage, so the next stages' experts outweigh it, and with few
    micro-batches in flight a stage with one layer more than the first wins
    (:func:`_heaviest_middle_stage`; so can stage 1 under torchtitan's split, which gives it a
    layer more than the first; ``tests/analytic/test_memory.py`` checks the answer against
    every stage's). ``params``: :meth:`LayerParams.of` ``c``, where already computed."""
    per_layer = LayerBytes.of(c, params)
    first = _stage_breakdown(c, per_layer, first=True, last=False)
    last = _stage_breakdown(c, per_layer, first=False, last=True)
    single = _stage_breakdown(c, per_layer, first=True, last=True)
    index = _heaviest_middle_stage(c, per_layer)
    has_middle = index >= 1
    pick_last = last["total"] > first["total"]
    edge = {k: np.where(pick_last, last[k], first[k]) for k in first}
    middle = edge  # none: most batches (dense models without torchtitan's split)
    rows = np.flatnonzero(has_middle)
    if len(rows):  # weighed only where a middle stage can win
        part = _stage_breakdown(
            _rows(c, rows), per_layer.rows(rows), first=False, last=False, stage=index[rows]
        )
        middle = {k: v.copy() for k, v in edge.items()}
        for k, v in part.items():
            middle[k][rows] = v
    pick_middle = has_middle & (middle["total"] > edge["total"])
    piped = c["pp"] > 1
    out = {k: np.where(piped, np.where(pick_middle, middle[k], edge[k]), single[k]) for k in first}
    position = np.where(
        pick_middle, index / np.maximum(c["pp"] - 1, 1.0), np.where(pick_last, 1.0, 0.0)
    )
    out["stage"] = np.where(piped, position, 0.0)
    return out


def _rows(c: Cols, rows: np.ndarray) -> Cols:
    """The columns of the configurations at positions ``rows`` (scalars kept)."""
    return {k: np.asarray(v)[rows] if np.ndim(v) else v for k, v in c.items()}


def _heaviest_middle_stage(c: Cols, per_layer: LayerBytes) -> Array:
    """Per configuration, the heaviest stage strictly between the first and the last, or -1
    where none can outweigh the first: where pp < 3, and where every layer weighs the same (no
    MoE model with leading dense layers) and the split is even or nanotron's, since no middle
    stage then holds more layers than the first (an even split's are equal; nanotron's greedy
    rule gives stage i floor((i + 1) x) - floor(i x) <= floor(x) + 1 = the first's), nor more
    micro-batches, nor the embedding. Under torchtitan's weighted split stage 1 can hold one
    layer more than the first, and it is the heaviest middle stage: layers and micro-batches in
    flight do not grow down the pipeline (``pipeline``)."""
    p = c["pp"]
    index = np.where((p >= 3) & (pipeline.slot_split(c) > 0), 1.0, -1.0)
    rows = np.flatnonzero((p >= 3) & (c["num_experts"] >= 2) & (c["num_dense_layers"] > 0))
    if len(rows) == 0:
        return index
    sub, sub_layer = _rows(c, rows), per_layer.rows(rows)
    best = np.full(len(rows), -np.inf)
    for i in range(1, int(np.max(sub["pp"])) - 1):
        total = _stage_breakdown(sub, sub_layer, first=False, last=False, stage=i)["total"]
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
    per_layer = LayerBytes.of(c)
    first = _stage_breakdown(c, per_layer, first=True, last=False, stage=stage)
    middle = _stage_breakdown(c, per_layer, first=False, last=False, stage=stage)
    last = _stage_breakdown(c, per_layer, first=False, last=True, stage=stage)
    single = _stage_breakdown(c, per_layer, first=True, last=True, stage=stage)
    out = {
        k: np.where(
            p == 1,
            single[k],
            np.where(stage == 0, first[k], np.where(stage == last_stage, last[k], middle[k])),
        )
        for k in first
    }
    return {k: np.where(stage < p, v, np.nan) for k, v in out.items()}


def torch_reserved_bytes(breakdown: dict[str, Array]) -> Array:
    """What ``torch.cuda.max_memory_reserved`` would report: everything but the CUDA context."""
    return breakdown["total"] - breakdown["cuda_context"]


LOGGED_STAGE_COLUMN = "peak_mem_stage"
"""The analytic column of the 0-based pipeline stage of the rank whose log a run's measured peak
memory comes from (NaN or absent: the most loaded rank's, the maximum over ranks); training and
calibration read it from the run's own column of that name
(``surrogate.runs.context.run_context``)."""


def logged_breakdown(c: Cols, breakdown: dict[str, Array]) -> dict[str, Array]:
    """The breakdown of the rank whose log a run's measured memory comes from: of stage
    ``c[LOGGED_STAGE_COLUMN]`` where it is given and a stage of the run (the Playbook's table
    is written by world rank 0, on the first stage: ``surrogate.ingest.playbook.LOGGED_STAGE``),
    else ``breakdown`` (:func:`memory_breakdown`: the most loaded stage, which is what runs out
    of memory and what ``predict`` reports)."""
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
    measured runs of the framework ran out of memory (``surrogate.calibration.fit_params``).

    The margin is where one framework's runs ran out of memory against this model's estimate
    (its allocator, its buffers outside it, the estimate's bias near capacity), so it holds
    only where a set fitted on the framework's own memory is at hand (``memory_fitted``, as
    ``FrameworkTraits.activation_scale``); elsewhere, with the default set or the priors
    standing in, the prior's 0 holds: out of memory where the estimate reaches capacity."""
    from scipy.special import ndtr

    sd = np.asarray(param(c, "memory_log_sd"), dtype=np.float64)
    fitted = np.asarray(c.get("memory_fitted", 1.0), dtype=np.float64) > 0
    margin = np.where(
        fitted, param(c, "oom_log_margin"), PARAMETERS["oom_log_margin"].prior
    ).astype(np.float64)
    z = (np.log(breakdown["total"] / c["memory_bytes"]) + margin) / np.maximum(sd, 1e-6)
    return np.asarray(ndtr(z), dtype=np.float64)
