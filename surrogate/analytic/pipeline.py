"""Pipeline parallelism: how layers are split into stages, the bubble, micro-batches in flight.

Sources: Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM"), sec. 2.2: 1F1B bubble (p - 1) / (m + p - 1) of the step, and the
interleaved schedule with v model chunks per rank dividing the bubble by v; Korthikanti et al.
2022, sec. 4.2.3: under 1F1B the first stage holds the activations of p micro-batches, and
under the interleaved schedule (1 + (p - 1) / (p v)) times that. Stage i of p holds p - i under
1F1B (its warm-up forwards plus one), and under the interleaved schedule 2 / v fewer chunks'
worth per stage down the pipeline (Megatron-LM ``schedules.py``: (p - i - 1) x 2 + (v - 1) x p
warm-up chunks plus one).

Stages (``surrogate.frameworks.PIPELINE_SPLITS``): Megatron-LM splits evenly, nanotron by a
compute cost per block, torchtitan by weighted slots: the embedding and the output head count as
one layer each (``pipeline_parallel_first_stage_less_layers`` and ``_last_stage_less_layers``,
1 by default), L + 2 slots are spread over the S = p v virtual stages, floor((L + 2) / S) each
and one more on the first (L + 2) mod S, and rank i runs virtual stages i, i + p, ...
(torchtitan 0.2.2 and 0.3.0, ``distributed/pipeline_parallel.py``,
``_generate_llm_fqn_per_model_part``).
Megatron-Core splits evenly where the layers divide by p v, and otherwise, where L + 2 does,
counts the embedding and the loss as one layer each (``account_for_embedding_in_pipeline_split``
and ``account_for_loss_in_pipeline_split``; megatron-core 0.16.1
``transformer/transformer_block.py`` ``get_num_layers_to_build``): (L + 2) / (p v) layers per
model chunk, one fewer on the first chunk of rank 0 and on the last chunk of rank p - 1, which
is torchtitan's weighted split where the slots divide (:func:`slot_split`). Megatron-Bridge's
Llama 3.1 405B recipe runs it (126 layers on pp 8 x vpp 8: 15, 16 x 6, 15 layers per rank).
The Llama 3 paper describes the same balance (Dubey et al. 2024, sec. 3.3.2: one layer fewer on
the first and the last stage). Under it a middle stage can hold the most layers, so the step and
the memory weigh stage 1 too (``surrogate.analytic.step``, ``surrogate.analytic.memory``).

All-forward-all-backward (GPipe, Huang et al. 2019, sec. 2.2; nanotron's
``AllForwardAllBackwardPipelineEngine``, torchtitan's ``GPipe``): every stage runs the forwards
of all m micro-batches, then their backwards. Its bubble is 1F1B's, (p - 1) / (m + p - 1) (both
fill and drain the pipeline once per step; Narayanan et al. 2021, sec. 2.2.1), but every stage
holds all m micro-batches' activations when the backwards begin (GPipe's re-materialisation is
a separate choice: ``recompute``). nanotron's engine drives every step, so with pp = 1 too
(``surrogate.frameworks``: the frameworks that allow it).
"""

from __future__ import annotations

import numpy as np

from surrogate.analytic.inputs import Array, Cols


def microbatches(c: Cols) -> Array:
    """Micro-batches per step per pipeline (the m of the bubble formula): grad_accum."""
    return c["grad_accum"]


def bubble_fraction(c: Cols) -> Array:
    """Idle fraction of a step: ((p - 1) / v) / (m + (p - 1) / v); (p-1)/(m+p-1) when v = 1."""
    idle = (c["pp"] - 1) / c["vpp"]
    return idle / (microbatches(c) + idle)


def step_slots(c: Cols) -> Array:
    """Micro-batch slots on the critical path of a step: m + (p - 1) / v."""
    return microbatches(c) + (c["pp"] - 1) / c["vpp"]


def cross_node_waits(c: Cols) -> Array:
    """Handshake waits on a step's critical path where the pipeline crosses nodes:
    min(p - 1, 2) x (m - 1) + (p - 2), for p >= 2 (0 without a pipeline).

    A stage waits once per neighbour for every micro-batch after the first, and the first
    micro-batch waits once at each inner stage on its way through. Measured, not derived: in
    the Playbook's cross-node nanotron pipelines (pre-pp-fix, 405 completed runs) the time no
    other term explains is a constant times this count at every p from 2 to 32 and m from 1 to
    256 (pp 2, m 1 loses nothing; a count of m + p - 1 slots per neighbour charged 2 waits too
    many at pp 2 and 2 p - 4 too many at depth; the diagnosis of 2026-11-23). A likely cause,
    not verified: a send that finds its receiver busy completes only after a fixed
    rendezvous delay, and only the first micro-batch finds each receiver waiting. Counted per
    micro-batch whatever the schedule: the runs that measure the wait all have v = 1, and an
    interleaved schedule's v chunks per micro-batch are not counted apart."""
    p, m = c["pp"], microbatches(c)
    waits = np.minimum(p - 1.0, 2.0) * np.maximum(m - 1.0, 0.0) + np.maximum(p - 2.0, 0.0)
    return np.where(p > 1, waits, 0.0)


def first_stage_inflight(c: Cols) -> Array:
    """Micro-batches whose activations the first stage holds at once.

    1F1B: min(p, m) (Korthikanti et al. 2022, sec. 4.2.3); interleaved: that times
    1 + (p - 1) / (p v). Without pipelining, one. All-forward-all-backward: m.
    """
    m, p, v = microbatches(c), c["pp"], c["vpp"]
    base = np.minimum(p, m)
    one_f_one_b = np.where(v > 1, base * (1 + (p - 1) / (p * v)), base)
    return np.where(c["pp_afab"] > 0, m, one_f_one_b)


def slot_split(c: Cols) -> Array:
    """1 where the layers are split by slots with the embedding and the head taking one each
    (module docstring): torchtitan's weighted split always, Megatron-Core's where L does not
    divide by p v and L + 2 does; else 0."""
    stages = c["pp"] * c["vpp"]
    L = c["num_layers"]
    accounted = (
        (c.get("megatron_pipeline_split", 0.0) > 0)
        & (np.mod(L, stages) != 0)
        & (np.mod(L + 2, stages) == 0)
    )
    return np.where((c["weighted_pipeline_split"] > 0) | accounted, 1.0, 0.0)


def _nanotron_layer_cost(c: Cols) -> tuple[Array, Array]:
    h = c["hidden_size"]
    layer_cost = 4 * h * h + 3 * h * c["ffn_hidden_size"]
    return layer_cost, c["num_layers"] * layer_cost + c["vocab_size"] * h


def _weighted_slots(c: Cols) -> tuple[Array, Array]:
    """torchtitan's split (module docstring): slots per virtual stage floor((L + 2) / S), and
    how many of the first virtual stages take one more, (L + 2) mod S."""
    stages = c["pp"] * c["vpp"]
    slots = c["num_layers"] + 2
    return np.floor(slots / stages), np.mod(slots, stages)


def weighted_rank_layers(c: Cols, i: Array | float) -> Array:
    """Layers on rank ``i`` under torchtitan's split: the slots of its virtual stages i,
    i + p, ..., i + (v - 1) p, less the embedding's on rank 0 and the head's on rank p - 1."""
    p, v = c["pp"], c["vpp"]
    j = np.asarray(i, dtype=np.float64)
    base, extra = _weighted_slots(c)
    longer = np.clip(np.ceil((extra - j) / p), 0.0, v)  # its virtual stages below ``extra``
    ends = np.where(j <= 0, 1.0, 0.0) + np.where(j >= p - 1, 1.0, 0.0)
    return np.asarray(v * base + longer - ends, dtype=np.float64)


def weighted_first_rank_layers(num_layers: int, pp: int, vpp: int) -> int:
    """Layers on the first rank under torchtitan's split (:func:`weighted_rank_layers`), for
    one configuration."""
    c = {k: np.array([float(v)]) for k, v in (("num_layers", num_layers), ("pp", pp), ("vpp", vpp))}
    return int(weighted_rank_layers(c, 0)[0])


def first_stage_layers(c: Cols) -> Array:
    """Transformer layers on the first pipeline stage.

    Megatron splits evenly (first stage: ceil(L / p)). nanotron balances a compute cost per
    block (nanotron ``get_block_compute_costs``: 4 h^2 + 3 h ffn per layer, V h for the output
    head, 0 for the embedding) and moves to the next rank once the cumulative cost exceeds
    rank/p of the total, so its first stage takes floor(total / (p c)) + 1 layers. torchtitan:
    weighted slots (module docstring).
    """
    L, p = c["num_layers"], c["pp"]
    even = np.ceil(L / p)
    layer_cost, total = _nanotron_layer_cost(c)
    nano = np.minimum(L, np.floor(total / (p * layer_cost)) + 1)
    split = np.where(
        c["cost_pipeline_split"] > 0,
        nano,
        np.where(slot_split(c) > 0, weighted_rank_layers(c, 0), even),
    )
    return np.where(p == 1, L, split)


def last_stage_layers(c: Cols) -> Array:
    """Transformer layers on the last stage.

    Even split: L - (p - 1) ceil(L / p), at least 0. nanotron: rank p - 2 closes after
    floor((p - 1) total / (p c)) + 1 layers (the same greedy rule), the last rank takes the rest.
    torchtitan: weighted slots (module docstring).
    """
    L, p = c["num_layers"], c["pp"]
    even_rest = np.maximum(L - (p - 1) * np.ceil(L / p), 0)
    layer_cost, total = _nanotron_layer_cost(c)
    before_last = np.minimum(L, np.floor((p - 1) * total / (p * layer_cost)) + 1)
    nano_rest = L - before_last
    split = np.where(
        c["cost_pipeline_split"] > 0,
        nano_rest,
        np.where(slot_split(c) > 0, weighted_rank_layers(c, p - 1), even_rest),
    )
    return np.where(p == 1, L, split)


def stage_start(c: Cols, i: Array | float) -> Array:
    """Index of the first layer of stage ``i`` (0-based): the boundaries of
    :func:`first_stage_layers` (even split, nanotron's greedy rule, or torchtitan's weighted
    slots, where it is the first layer of the rank's first virtual stage) at every stage."""
    L, p = c["num_layers"], c["pp"]
    j = np.asarray(i, dtype=np.float64)
    layer_cost, total = _nanotron_layer_cost(c)
    nano = np.minimum(L, np.floor(j * total / (p * layer_cost)) + 1)
    even = np.minimum(L, j * np.ceil(L / p))
    base, extra = _weighted_slots(c)
    weighted = np.minimum(L, j * base + np.minimum(j, extra) - 1)
    inner = np.where(
        c["cost_pipeline_split"] > 0, nano, np.where(slot_split(c) > 0, weighted, even)
    )
    return np.where(j <= 0, 0.0, np.where(j >= p, L, inner))


def stage_layers(c: Cols, i: Array | float) -> Array:
    """Transformer layers on stage ``i`` (0-based, below pp); stage 0 and stage pp - 1 are
    :func:`first_stage_layers` and :func:`last_stage_layers`."""
    j = np.asarray(i, dtype=np.float64)
    between = np.maximum(stage_start(c, j + 1) - stage_start(c, j), 0.0)
    split = np.where(slot_split(c) > 0, weighted_rank_layers(c, j), between)
    return np.where(c["pp"] == 1, c["num_layers"], split)


def stage_inflight(c: Cols, i: Array | float) -> Array:
    """Micro-batches whose activations stage ``i`` holds at once (module docstring): 1F1B
    min(p - i, m); interleaved p + (p - 1 - 2 i) / v, at most the first stage's
    (:func:`first_stage_inflight`, which stage 0 equals); all-forward-all-backward m."""
    m, p, v = microbatches(c), c["pp"], c["vpp"]
    j = np.asarray(i, dtype=np.float64)
    first = first_stage_inflight(c)
    interleaved = np.minimum(p + (p - 1 - 2 * j) / v, first)
    one_f_one_b = np.where(j <= 0, first, np.where(v > 1, interleaved, np.minimum(p - j, m)))
    return np.where(c["pp_afab"] > 0, m, one_f_one_b)
