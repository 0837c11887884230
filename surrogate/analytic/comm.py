"""Communication per training step, for each parallel dimension: bytes and time.

Rank order (Megatron-LM ``parallel_state``; torchtitan ``ParallelDims``): tp innermost, then
cp, then dp (ep inside dp x cp; ep consecutive ranks where the experts are folded), then pp
outermost. A group spans nodes when its stride times its size exceeds the GPUs of a node: tp
when tp > gpus_per_node, cp when tp cp > g, dp when tp cp dp > g, and the pipeline when
tp cp dp pp > g. Pipeline neighbours are tp cp dp ranks
apart: with a stride below g several stages share a node, and the pipeline still crosses a node
boundary between two of them wherever its pp stages fill more than one node (nanotron's
``ParallelContext`` orders its ranks the same way, pp outside dp outside tp). A pipeline slot
waits on its slowest link, so one boundary puts every slot on the network.

Per micro-batch of T = mbs x seq_len / cp tokens on a rank (bf16 activations, 2 bytes):

- TP (Shoeybi et al. 2019 sec. 3; Korthikanti et al. 2022 sec. 4.2.2): per layer, two
  all-reduces of 2 T h bytes forward and two backward; with sequence parallelism each becomes
  an all-gather plus a reduce-scatter of the same total size. Not overlapped (exposed). Across
  nodes, each of these rings also pays a latency per step (:func:`tp_ring_steps_per_layer`).
- CP (ring attention, Liu et al. 2023): per layer, cp - 1 exchanges of the K and V chunks
  (2 x 2 T h_kv / tp bytes, h_kv = kv_heads x head_dim) forward and twice that backward (K, V
  and their gradients); overlapped with the attention computation, exposed only where longer.
- EP (Lepikhin et al. 2020, GShard): per MoE layer, two all-to-alls (dispatch, combine) of
  2 T k h bytes forward and two backward, T the whole sequence's tokens on every rank of a tp
  group (torchtitan gathers the layer's input first); where the framework routes the
  sequence shard (Megatron-Core, ``FrameworkTraits.moe_dispatch_from_shard``) 2 T k h / tp,
  then a gather over tp of the tokens received and a reduce-scatter back (measured where the
  tokens go: ``microbench/saved_activations.py --moe --tp 2``), except where the experts are
  folded with expert tensor parallelism 1 (``FrameworkTraits.moe_parallel_folding``,
  Megatron-Core: the ep group is ep consecutive ranks, its experts take the tokens whole, no
  gather). Exposed; per-operator checkpointing keeps the all-to-alls' outputs, so it runs
  them once.
- Recomputation runs the forward's collectives again in the backward (Korthikanti et al. 2022
  sec. 5: the recomputed forward is the whole forward, its communication included): full
  recomputation adds a share (``flops.full_recompute_share``) of each layer's forward TP, CP
  and EP traffic; torchtitan's per-operator checkpointing keeps the reduce-scatters' outputs
  but not the all-gathers' (measured, ``surrogate.analytic.memory``), so with sequence
  parallelism it gathers the two projection inputs again.
- PP (Narayanan et al. 2021): per micro-batch each stage boundary sends the activation
  (2 T h, / tp with sequence parallelism) forward and its gradient backward; on the critical
  path once per pipeline slot.
- DP (Li et al. 2020, PyTorch DDP; Rajbhandari et al. 2020, ZeRO): once per step the
  gradients (4 bytes per parameter when accumulated in fp32, else 2) are all-reduced (ZeRO-0)
  or reduce-scattered (ZeRO >= 1), overlapped with the last micro-batch's backward; ZeRO-1/2
  then all-gather the updated bf16 weights (exposed). ZeRO-3 all-gathers each layer's weights
  forward and backward every micro-batch and reduce-scatters its gradients, prefetched under
  the compute (exposed only where longer). With ``dp_replicate`` copies of the shards (hybrid
  sharding) ZeRO's collectives run over one copy's ranks, and each reduced shard is then
  all-reduced over the copies (:func:`dp_times_s`).
"""

from __future__ import annotations

import numpy as np

from surrogate.analytic.flops import expert_tp, folded, full_recompute_share, per_op_recompute
from surrogate.analytic.inputs import Array, Cols
from surrogate.analytic.memory import zero_shard_ranks
from surrogate.analytic.perf import PerfModel


def tokens_per_rank(c: Cols) -> Array:
    """Tokens of one micro-batch on one rank: mbs x seq_len / cp."""
    return c["mbs"] * c["seq_len"] / c["cp"]


def spans_nodes(c: Cols) -> dict[str, Array]:
    """1.0 where the group of each dimension spans nodes (module docstring)."""
    g = c["gpus_per_node"]
    tp, cp, dp = c["tp"], c["cp"], c["dp"]
    return {
        "tp": (tp > g).astype(np.float64),
        "cp": (tp * cp > g).astype(np.float64),
        "ep": (expert_tp(c) * c["ep"] > g).astype(np.float64),
        "dp": (tp * cp * dp > g).astype(np.float64),
        "pp": (tp * cp * dp * c["pp"] > g).astype(np.float64),
    }


def ranks_per_node(c: Cols) -> dict[str, Array]:
    """Ranks of one group of each dimension that share a node (their NICs carry the group's
    inter-node traffic): the group size, capped by the node's GPUs over the dimension's stride
    (rank order in the module docstring); a pipeline pair across nodes has one rank a node.
    The data-parallel group is that of ZeRO's collectives: one copy of the shards, dp x cp /
    dp_replicate ranks tp apart (:func:`zero_groups`)."""
    g, tp = c["gpus_per_node"], c["tp"]
    return {
        "tp": np.minimum(tp, g),
        "cp": _on_a_node(c["cp"], tp, g),
        "ep": _on_a_node(c["ep"], expert_tp(c), g),
        "dp": _on_a_node(zero_shard_ranks(c), tp, g),
        "pp": np.ones_like(tp),
    }


def _on_a_node(size: Array, stride: Array, gpus_per_node: Array) -> Array:
    """Ranks of a group of ``size`` ranks ``stride`` apart that share a node (at least 1)."""
    return np.asarray(np.maximum(np.minimum(size, gpus_per_node / stride), 1.0))


def _regathered(c: Cols) -> Array:
    """1 where the backward gathers the two projection inputs again (torchtitan's per-operator
    checkpointing under sequence parallelism, module docstring), else 0."""
    again = np.logical_and(per_op_recompute(c), c["sequence_parallel"] > 0)
    return np.asarray(again, dtype=np.float64)


def tp_time_per_layer_s(c: Cols, perf: PerfModel) -> Array:
    """Exposed TP communication of one layer, one micro-batch, forward and backward, and what
    recomputation runs again (module docstring)."""
    size = 2 * tokens_per_rank(c) * c["hidden_size"]
    inter = spans_nodes(c)["tp"]
    local = ranks_per_node(c)["tp"]
    ar = perf.collective_time_s("all_reduce", size, c["tp"], inter, c, local)
    ag = perf.collective_time_s("all_gather", size, c["tp"], inter, c, local)
    rs = perf.collective_time_s("reduce_scatter", size, c["tp"], inter, c, local)
    sp = c["sequence_parallel"] > 0
    forward = 2 * np.where(sp, ag + rs, ar)
    again = _regathered(c) * 2 * ag
    return np.asarray((2 + full_recompute_share(c)) * forward + again, dtype=np.float64)


def tp_ring_steps_per_layer(c: Cols) -> Array:
    """Ring steps of one layer's TP collectives, one micro-batch, forward and backward:
    8 (tp - 1), with or without sequence parallelism, plus 4 (tp - 1) for a layer recomputed
    in full and 2 (tp - 1) for the all-gathers per-operator checkpointing runs again.

    A ring all-gather or reduce-scatter over n ranks takes n - 1 steps and a ring all-reduce
    2 (n - 1) (Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective Communication
    Operations in MPICH", sec. 4: time (n - 1) alpha + (n - 1) / n x bytes x beta), so the four
    all-reduces, or four all-gather plus reduce-scatter pairs, of a layer take 8 (n - 1). Every
    step of a ring moves all its links at once, so where the ring crosses nodes each step waits
    on a network link: alpha is the inter-node latency (``tp_inter_step_latency_s``)."""
    rings = 8.0 + 4.0 * full_recompute_share(c) + 2.0 * _regathered(c)
    return np.where(c["tp"] > 1, rings * (c["tp"] - 1.0), 0.0)


def cp_time_per_layer_s(c: Cols, perf: PerfModel) -> Array:
    """Ring-attention K/V exchange of one layer, one micro-batch, forward and backward (and
    the forward's again where the layer is recomputed in full)."""
    # K and V of the rank's tokens: kv_heads x (qk_head_dim + v_head_dim) wide (2 x h_kv for
    # a Llama block; with MLA the keys and values of every head)
    kv = c["num_kv_heads"] * (c["qk_head_dim"] + c["v_head_dim"])
    chunk = 2 * tokens_per_rank(c) * kv / c["tp"]
    pair = perf.collective_time_s(
        "send_recv", chunk, np.full_like(chunk, 2.0), spans_nodes(c)["cp"], c, np.ones_like(chunk)
    )
    exchanges = 3 + full_recompute_share(c)
    return np.where(c["cp"] > 1, exchanges * (c["cp"] - 1) * pair, 0.0)


def ep_time_per_layer_s(c: Cols, perf: PerfModel) -> Array:
    """Expert all-to-alls of one MoE layer, one micro-batch, forward and backward (and the
    forward's again where the layer is recomputed in full): every rank of a tp group sends
    the whole sequence's routed tokens (T x k, torchtitan), or where the framework routes its
    sequence shard (``FrameworkTraits.moe_dispatch_from_shard``, Megatron) T / tp x k of them,
    and the tokens received are gathered over tp before the experts and reduce-scattered
    after them, unless the experts are folded (:func:`~surrogate.analytic.flops.folded`:
    whole on each rank, the ep group ep consecutive ranks)."""
    size = 2 * tokens_per_rank(c) * c["experts_topk"] * c["hidden_size"]
    tp = c["tp"]
    shard = (c["moe_dispatch_from_shard"] > 0) & (tp > 1)
    t = perf.collective_time_s(
        "all_to_all",
        np.where(shard, size / tp, size),
        c["ep"],
        spans_nodes(c)["ep"],
        c,
        ranks_per_node(c)["ep"],
    )
    gather = perf.collective_time_s(
        "all_gather", size, tp, spans_nodes(c)["tp"], c, ranks_per_node(c)["tp"]
    )
    # folded experts (expert tensor parallelism 1, flops.folded) take the routed tokens whole
    t = t + np.where(shard & ~folded(c), gather, 0.0)
    flex = (
        (np.asarray(c.get("moe_flex_dispatch", 0.0)) > 0)
        & (expert_tp(c) == 1)
        & (c["ep"] > 1)
        & (c["num_experts"] >= 2)
    )
    if np.any(flex):
        t = np.where(flex, _flex_all_to_all_s(c, perf, np.where(shard, size / tp, size)), t)
    return np.where(
        (c["ep"] > 1) & (c["num_experts"] >= 2), (4 + 2 * full_recompute_share(c)) * t, 0.0
    )


def reached(num_experts: Array, topk: Array, groups: Array) -> Array:
    """Expected groups, of ``groups`` equal groups of the experts (ranks, or nodes), that one
    token's top-k experts fall in, its experts distinct and uniform over all (balanced
    routing): groups x (1 - C(E - E / groups, k) / C(E, k))."""
    E, k, groups = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.float64) for a in (num_experts, topk, groups))
    )
    outside = E - E / np.maximum(groups, 1.0)
    miss = np.ones(E.shape)
    for i in range(int(np.max(k, initial=0.0))):  # C(a, k) / C(E, k), one factor a step
        step = np.clip((outside - i) / np.maximum(E - i, 1.0), 0.0, 1.0)
        miss = miss * np.where(i < k, step, 1.0)
    return np.asarray(groups * (1.0 - miss), dtype=np.float64)


def _flex_all_to_all_s(c: Cols, perf: PerfModel, routed_bytes: Array) -> Array:
    """One dispatch (or combine) of DeepEP's flex dispatcher (``FrameworkTraits.
    moe_flex_dispatch``) for a rank whose routed copies weigh ``routed_bytes`` (k rows a
    token): a row to each rank (NVLink leg) and to each node (network leg, one rank a node
    by its own NIC) that the token's experts reach (:func:`reached`); the longer leg."""
    g, ep = c["gpus_per_node"], c["ep"]
    row = routed_bytes / np.maximum(c["experts_topk"], 1.0)
    local = np.minimum(ep, g)
    nodes = np.maximum(ep / g, 1.0)
    nvlink = perf.collective_time_s(
        "all_to_all",
        row * reached(c["num_experts"], c["experts_topk"], ep),
        local,
        np.zeros_like(ep),
        c,
        local,
    )
    network = perf.collective_time_s(
        "all_to_all",
        row * reached(c["num_experts"], c["experts_topk"], nodes),
        nodes,
        (nodes > 1).astype(np.float64),
        c,
        np.ones_like(ep),
    )
    return np.asarray(np.maximum(nvlink, network), dtype=np.float64)


def pp_time_per_slot_s(c: Cols, perf: PerfModel) -> Array:
    """Activation send forward plus gradient send backward of one micro-batch slot."""
    size = 2 * tokens_per_rank(c) * c["hidden_size"]
    size = np.where((c["sequence_parallel"] > 0) & (c["tp"] > 1), size / c["tp"], size)
    t = perf.collective_time_s(
        "send_recv", size, np.full_like(size, 2.0), spans_nodes(c)["pp"], c, np.ones_like(size)
    )
    return np.where(c["pp"] > 1, 2 * t, 0.0)


def dp_times_s(
    c: Cols, perf: PerfModel, dense_params: Array, expert_params: Array
) -> dict[str, Array]:
    """Gradient reduction and weight gathers of ZeRO, per step (ZeRO-3: per micro-batch too).

    With ``dp_replicate`` copies of the shards (hybrid sharding) ZeRO's reduce-scatters and
    all-gathers run over one copy's dp x cp / dp_replicate consecutive ranks (:func:`zero_groups`),
    and each rank's reduced shard is then all-reduced over the copies (PyTorch FSDP's HSDP,
    Zhao et al. 2023 sec. 3.2.1; Megatron-Core's partial distributed optimizer,
    ``param_and_grad_buffer``: a reduce-scatter in the instance, then an all-reduce across).

    Returns ``grad_reduce`` (overlappable with the last backward), ``param_gather`` (ZeRO-1/2,
    exposed), ``zero3_per_microbatch`` (prefetched under compute: ZeRO-3's gathers and
    reduction, and the earlier micro-batches' reductions of a framework that reduces every
    micro-batch under ZeRO-2).
    """
    (shard, shard_inter, shard_local), (copies, copy_inter, copy_local) = zero_groups(c)
    # Expert gradients really reduce over dp x cp / ep replicas; one group is an approximation.
    params = dense_params + expert_params
    # fp32 gradients on the wire where the framework accumulates or reduces in fp32
    # (FrameworkTraits.reduces_gradients_in_fp32: torchtitan's reduce_dtype)
    fp32 = (c["fp32_grad_accumulation"] > 0) | (
        np.asarray(c.get("reduces_gradients_in_fp32", 0.0)) > 0
    )
    grad_bytes = params * np.where(fp32, 4.0, 2.0)
    z = c["zero_stage"]  # ZeRO-0 has one copy: its all-reduce runs over the whole group
    # A pipeline that keeps FSDP's states unsharded between micro-batches
    # (FrameworkTraits.pipeline_keeps_fsdp_unsharded: torchtitan) gathers once, at the first
    # forward, and reduces once, after the last backward: its ZeRO-3 runs as its ZeRO-2.
    keeps = (np.asarray(c.get("pipeline_keeps_fsdp_unsharded", 0.0)) > 0) & (c["pp"] > 1)
    z = np.where(keeps & (z >= 3), 2.0, z)
    ar = perf.collective_time_s("all_reduce", grad_bytes, shard, shard_inter, c, shard_local)
    rs = perf.collective_time_s("reduce_scatter", grad_bytes, shard, shard_inter, c, shard_local)
    across = np.where(
        copies > 1,
        perf.collective_time_s("all_reduce", grad_bytes / shard, copies, copy_inter, c, copy_local),
        0.0,
    )
    ag = perf.collective_time_s("all_gather", 2 * params, shard, shard_inter, c, shard_local)
    # a framework that reduce-scatters after every micro-batch's backward under ZeRO-2
    # (FrameworkTraits.reduces_every_microbatch: torchtitan without a pipeline) pays the
    # m - 1 earlier ones beside the step's last, each under its micro-batch's compute
    m = np.maximum(c["grad_accum"], 1.0)
    every = (np.asarray(c.get("reduces_every_microbatch", 0.0)) > 0) & (z == 2) & (c["pp"] == 1)
    return {
        "grad_reduce": np.where(z == 0, ar, rs + across),
        "param_gather": np.where((z == 1) | (z == 2), ag, 0.0),
        "zero3_per_microbatch": np.where(
            z >= 3, 2 * ag + rs + across, np.where(every, (rs + across) * (m - 1) / m, 0.0)
        ),
    }


def zero_groups(c: Cols) -> tuple[tuple[Array, Array, Array], tuple[Array, Array, Array]]:
    """(size, spans nodes, ranks per node) of the group ZeRO shards over, and of the group of
    its copies. The shard group is dp x cp / dp_replicate consecutive data-parallel ranks
    (stride tp; torchtitan's mesh puts ``dp_shard`` inside ``dp_replicate``, Megatron-Core's
    instances are consecutive slices of the dp x cp group); the copies are that many times tp
    apart. One copy: the shard group is the whole dp x cp group, and the copies' group is one
    rank."""
    g = c["gpus_per_node"]
    shard = zero_shard_ranks(c)
    copies = c["dp"] * c["cp"] / shard
    stride = c["tp"] * shard
    return (
        (shard, (stride > g).astype(np.float64), ranks_per_node(c)["dp"]),
        (copies, (stride * copies > g).astype(np.float64), _on_a_node(copies, stride, g)),
    )
