"""Communication per step: which groups span nodes, which terms vanish, ring costs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from surrogate.analytic import comm, flops
from surrogate.analytic.inputs import to_cols
from surrogate.analytic.perf import SpecPerfModel
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.frameworks import FRAMEWORKS
from surrogate.config.presets import get_preset

PERF = SpecPerfModel()


@pytest.mark.parametrize(
    "layout,expected",
    [
        (dict(dp=8), dict(tp=0, cp=0, dp=0, pp=0)),
        (dict(dp=16), dict(tp=0, cp=0, dp=1, pp=1)),
        (dict(dp=2, tp=8), dict(tp=0, cp=0, dp=1, pp=1)),
        (dict(dp=1, tp=4, cp=2, pp=2), dict(tp=0, cp=0, dp=0, pp=1)),
        (dict(dp=1, tp=2, cp=2, pp=2), dict(tp=0, cp=0, dp=0, pp=0)),
        # stride 4: stages 0-1 on one node, 2-3 on the next
        (dict(dp=1, tp=2, cp=2, pp=4), dict(tp=0, cp=0, dp=0, pp=1)),
        (dict(dp=1, tp=8, cp=2), dict(tp=0, cp=1, dp=1, pp=1)),
    ],
)
def test_groups_span_nodes_by_rank_order(config, layout, expected):
    c = to_cols([config("llama3-8b", **layout)], shipped_parameter_sets())
    spans = comm.spans_nodes(c)
    assert {k: int(spans[k][0]) for k in expected} == expected


def test_tokens_per_rank(cols):
    assert comm.tokens_per_rank(cols("llama3-8b", dp=4, cp=2, mbs=3))[0] == 3 * 8192 / 2


def test_terms_vanish_without_their_dimension(cols):
    c = cols("llama3-8b", dp=8)
    assert comm.tp_time_per_layer_s(c, PERF)[0] == 0
    assert comm.cp_time_per_layer_s(c, PERF)[0] == 0
    assert comm.ep_time_per_layer_s(c, PERF)[0] == 0
    assert comm.pp_time_per_slot_s(c, PERF)[0] == 0
    one = cols("llama3-8b", dp=1, tp=1)
    dense, experts = flops.total_params(one), np.zeros(1)
    assert all(v[0] == 0 for v in comm.dp_times_s(one, PERF, dense, experts).values())


def test_terms_appear_with_their_dimension(cols):
    c = cols("mixtral-8x7b", dp=4, tp=2, pp=2, cp=2, ep=4)
    for f in (
        comm.tp_time_per_layer_s,
        comm.cp_time_per_layer_s,
        comm.ep_time_per_layer_s,
        comm.pp_time_per_slot_s,
    ):
        assert f(c, PERF)[0] > 0, f.__name__


def test_tp_all_reduce_by_hand(cols):
    # 4 all-reduces of 2 T h bytes over tp=4 inside a node: ring 2(n-1) steps and 2(n-1)/n bytes
    c = cols("llama3-8b", dp=2, tp=4, mbs=1)
    size = 2 * 8192 * 4096
    one = 6 * 10e-6 + size * 1.5 / 450e9
    assert comm.tp_time_per_layer_s(c, PERF)[0] == pytest.approx(4 * one)
    sp = cols("llama3-8b", dp=2, tp=4, mbs=1, sequence_parallel=True)
    ag_rs = 2 * (3 * 10e-6 + size * 0.75 / 450e9)
    assert comm.tp_time_per_layer_s(sp, PERF)[0] == pytest.approx(4 * ag_rs)


@pytest.mark.parametrize("sp", [False, True])
def test_tp_rings_take_8_steps_per_layer_per_extra_rank(cols, sp):
    """Four all-reduces (2 (n - 1) steps each) or four all-gather + reduce-scatter pairs."""
    for tp, steps in ((1, 0), (2, 8), (8, 56), (32, 248)):
        c = cols("playbook-8.86b", dp=1, tp=tp, sequence_parallel=sp and tp > 1)
        assert comm.tp_ring_steps_per_layer(c)[0] == steps


def test_sequence_parallel_shrinks_pp_sends(cols):
    plain = comm.pp_time_per_slot_s(cols("llama3-8b", dp=1, tp=4, pp=2), PERF)[0]
    sp = comm.pp_time_per_slot_s(cols("llama3-8b", dp=1, tp=4, pp=2, sequence_parallel=True), PERF)[
        0
    ]
    assert 0 < sp < plain


@pytest.mark.parametrize("framework", ["nanotron", "torchtitan"])
def test_dp_terms_by_zero_stage(config, framework):
    stages = FRAMEWORKS[framework].zero_stages
    c = to_cols(
        [config("llama3-8b", dp=8, zero_stage=z, framework=framework) for z in stages],
        shipped_parameter_sets(),
    )
    n = flops.total_params(c)
    dp = comm.dp_times_s(c, PERF, n, np.zeros_like(n))
    z = c["zero_stage"]
    assert np.all((dp["param_gather"] > 0) == ((z == 1) | (z == 2)))
    assert np.all((dp["zero3_per_microbatch"] > 0) == (z == 3))
    assert dp["grad_reduce"][0] > dp["grad_reduce"][1]  # all-reduce moves twice a scatter
    # fp32 gradients on the wire (nanotron accumulates in fp32, torchtitan reduces in fp32):
    # twice the bytes of llm-foundry's bf16 reduction
    foundry = to_cols(
        [config("llama3-8b", dp=8, framework="llm-foundry")], shipped_parameter_sets()
    )
    bf16 = comm.dp_times_s(foundry, PERF, n[:1], np.zeros(1))["grad_reduce"][0]
    assert dp["grad_reduce"][0] > 1.9 * bf16


def test_inter_node_groups_are_slower(config):
    """A dp group with one rank per node drives one NIC per node: far slower than NVLink.
    A group filling its nodes drives all their NICs (NCCL runs a ring channel per NIC), so
    crossing nodes costs it less, but never makes it faster."""
    c = to_cols(
        [config("llama3-8b", dp=8), config("llama3-8b", dp=16), config("llama3-8b", dp=2, tp=8)],
        shipped_parameter_sets(),
    )
    n = flops.total_params(c)
    t = comm.dp_times_s(c, PERF, n, np.zeros_like(n))["grad_reduce"] / n
    assert t[1] >= t[0]
    assert t[2] > 5 * t[0]


def test_copies_of_the_shards_reduce_in_their_group_then_across(config):
    """Hybrid sharding: the gradients are reduce-scattered over one copy's consecutive ranks
    (here within a node), the shard all-reduced over the copies (one rank a node), the
    weights all-gathered in the copy; with one copy the collectives are those of the whole
    dp x cp group. ZeRO-3 runs the same per micro-batch."""
    c = to_cols(
        [
            config("llama3-8b", dp=32, tp=2, zero_stage=1, framework="megatron", dp_replicate=r)
            for r in (1, 8)
        ]
        + [config("llama3-8b", dp=32, tp=2, zero_stage=3, framework="torchtitan", dp_replicate=8)],
        shipped_parameter_sets(),
    )
    (shard, shard_inter, shard_local), (copies, copy_inter, copy_local) = comm.zero_groups(c)
    assert shard.tolist() == [32, 4, 4] and copies.tolist() == [1, 8, 8]
    assert shard_inter.tolist() == [1, 0, 0] and copy_inter.tolist() == [1, 1, 1]
    assert shard_local.tolist() == [4, 4, 4] and copy_local.tolist() == [1, 1, 1]
    n = flops.total_params(c)
    got = comm.dp_times_s(c, PERF, n, np.zeros_like(n))
    grads = 4 * n  # fp32 gradient bytes: Megatron's accumulation, torchtitan's reduce_dtype

    def coll(op: str, nbytes: float, size: float, inter: float, local: float, i: int) -> float:
        one = {k: v[i : i + 1] for k, v in c.items()}
        return float(
            PERF.collective_time_s(
                op, np.array([nbytes]), np.array([size]), np.array([inter]), one, np.array([local])
            )[0]
        )

    assert got["grad_reduce"][0] == pytest.approx(coll("reduce_scatter", grads[0], 32, 1, 4, 0))
    assert got["grad_reduce"][1] == pytest.approx(
        coll("reduce_scatter", grads[1], 4, 0, 4, 1) + coll("all_reduce", grads[1] / 4, 8, 1, 1, 1)
    )
    assert got["param_gather"][1] == pytest.approx(coll("all_gather", 2 * n[1], 4, 0, 4, 1))
    assert got["zero3_per_microbatch"][2] == pytest.approx(
        2 * coll("all_gather", 2 * n[2], 4, 0, 4, 2)
        + coll("reduce_scatter", grads[2], 4, 0, 4, 2)
        + coll("all_reduce", grads[2] / 4, 8, 1, 1, 2)
    )


def test_ranks_per_node_follow_the_rank_order(config):
    c = to_cols(
        [
            config("llama3-8b", dp=16),
            config("llama3-8b", dp=2, tp=8),
            config("llama3-8b", dp=4, tp=4),
        ],
        shipped_parameter_sets(),
    )
    local = comm.ranks_per_node(c)
    assert local["dp"].tolist() == [8, 1, 2]
    cp = comm.ranks_per_node(
        to_cols([config("llama3-8b", dp=8, tp=2, cp=2)], shipped_parameter_sets())
    )
    assert cp["dp"].tolist() == [4]  # the dp x cp group's collectives, tp apart
    assert local["tp"].tolist() == [1, 8, 4]
    assert local["pp"].tolist() == [1, 1, 1]


def test_recomputation_runs_the_forward_collectives_again(config):
    """Full recomputation adds the forward's TP, CP and EP traffic (half of TP's and EP's, a
    third of CP's: its backward moves K, V and their gradients), in proportion to the layers
    it recomputes; torchtitan's per-operator checkpointing gathers the two projection inputs
    again."""
    kw = dict(dp=4, tp=2, cp=2, ep=4, framework="megatron", sequence_parallel=True)
    c = to_cols(
        [
            config("mixtral-8x7b", **kw, recompute=r, recompute_layers=k)
            for r, k in (("none", 0), ("full", 0), ("full", 8))
        ],  # 8 of 32 layers
        shipped_parameter_sets(),
    )
    for f, full in (
        (comm.tp_time_per_layer_s, 1.5),
        (comm.cp_time_per_layer_s, 4 / 3),
        (comm.ep_time_per_layer_s, 1.5),
    ):
        t = f(c, PERF)
        assert t[1] / t[0] == pytest.approx(full), f.__name__
        assert t[2] / t[0] == pytest.approx(1 + (full - 1) / 4), f.__name__
    assert list(comm.tp_ring_steps_per_layer(c)) == [8, 12, 9]
    titan = dict(dp=4, tp=2, framework="torchtitan", sequence_parallel=True)
    c = to_cols(
        [config("llama3-8b", **titan, recompute=r) for r in ("none", "selective")],
        shipped_parameter_sets(),
    )
    size = 2 * 8192 * 4096
    t = comm.tp_time_per_layer_s(c, PERF)
    ag = PERF.collective_time_s(
        "all_gather", np.array([size]), np.array([2.0]), np.zeros(1), c, np.array([2.0])
    )
    assert t[1] - t[0] == pytest.approx(2 * ag[0])
    assert list(comm.tp_ring_steps_per_layer(c)) == [8, 10]


def test_ep_all_to_alls_of_the_sequence_or_of_its_shard(config):
    """torchtitan sends the whole sequence's routed tokens from every rank of a tp group;
    Megatron routes its shard (T / tp x k tokens): with its experts folded (expert tensor
    parallelism 1, ``FrameworkTraits.moe_parallel_folding``) its experts take them whole;
    with expert tensor parallelism tp (megatron-core's default, the column set to 0) it
    gathers what it received over tp, then reduce-scatters it back: four of each per layer,
    forward and backward. Without tp they agree."""
    kw = dict(dp=8, tp=2, ep=4, zero_stage=3, sequence_parallel=True)
    c = to_cols(
        [config("mixtral-8x7b", **kw, framework=f) for f in ("torchtitan", "megatron")]
        + [
            config(
                "mixtral-8x7b", **{**kw, "dp": 16, "tp": 1, "sequence_parallel": False}, framework=f
            )
            for f in ("torchtitan", "megatron")
        ]
        + [config("mixtral-8x7b", **kw, framework="megatron")],
        shipped_parameter_sets(),
    )
    assert c["moe_parallel_folding"].tolist() == [0, 1, 0, 1, 1]
    c["moe_parallel_folding"][4] = 0.0
    c["moe_flex_dispatch"] = np.zeros(5)  # the alltoall dispatcher (DeepEP's: below)
    size = 2 * 32768 * 2 * 4096  # the preset's sequence, top-2, hidden 4096, bf16
    got = comm.ep_time_per_layer_s(c, PERF)
    inter, local = comm.spans_nodes(c), comm.ranks_per_node(c)

    def coll(op: str, nbytes: float, group: str, i: int) -> float:
        n = c[group][i]
        return float(
            PERF.collective_time_s(
                op,
                np.array([nbytes]),
                np.array([n]),
                inter[group][i : i + 1],
                {k: v[i : i + 1] for k, v in c.items()},
                local[group][i : i + 1],
            )[0]
        )

    assert got[0] == pytest.approx(4 * coll("all_to_all", size, "ep", 0))
    assert got[1] == pytest.approx(4 * coll("all_to_all", size / 2, "ep", 1))
    assert got[4] == pytest.approx(
        4 * (coll("all_to_all", size / 2, "ep", 4) + coll("all_gather", size, "tp", 4))
    )
    assert got[2] == pytest.approx(got[3])


def test_folded_expert_groups_are_ep_consecutive_ranks(config):
    """Folded (expert tensor parallelism 1), the ep group is ep consecutive ranks: ep 8
    fills one 8-GPU node whatever tp is, ep 16 spans two with 8 ranks on each; experts split
    by tp (torchtitan) are tp apart, so tp 2 x ep 8 spans two nodes, 4 ranks on each."""
    kw = dict(dp=8, tp=2, sequence_parallel=True)
    c = to_cols(
        [config("mixtral-8x7b", **kw, ep=8, framework=f) for f in ("megatron", "torchtitan")]
        + [
            config(
                replace(get_preset("mixtral-8x7b"), num_experts=16),
                **kw,
                ep=16,
                framework="megatron",
            )
        ],
        shipped_parameter_sets(),
    )
    assert comm.spans_nodes(c)["ep"].tolist() == [0, 1, 1]
    assert comm.ranks_per_node(c)["ep"].tolist() == [8, 4, 8]


def test_reached_groups_of_a_tokens_experts():
    """Under balanced routing a token's k distinct experts reach G (1 - C(E - E/G, k) /
    C(E, k)) of G equal groups: one group where there is one, one where k is 1, k where each
    expert is its own group, and never more than min(k, G)."""
    got = comm.reached(
        np.array([128.0, 128, 128, 128, 128, 8]),
        np.array([8.0, 1, 8, 8, 8, 2]),
        np.array([1.0, 32, 128, 4, 2, 4]),
    )
    assert got[:3] == pytest.approx([1.0, 1.0, 8.0])
    miss4 = np.prod([(96 - i) / (128 - i) for i in range(8)])
    assert got[3] == pytest.approx(4 * (1 - miss4))  # Qwen3 235B-A22B's ep 32 on 4 nodes
    assert 1.99 < got[4] <= 2.0
    assert got[5] == pytest.approx(4 * (1 - 15 / 28))  # C(6, 2) / C(8, 2)


def test_flex_dispatch_sends_a_row_per_rank_and_per_node_reached(config):
    """Megatron-Core's DeepEP dispatcher (FrameworkTraits.moe_flex_dispatch) sends one row per
    rank a token's experts reach within a node, and across nodes the longer of the NVLink leg
    and the network leg (one row per node reached, one rank a node on its own NIC);
    torchtitan's all-to-all sends every routed copy."""
    model = replace(get_preset("mixtral-8x7b"), num_experts=64, experts_topk=8)
    c = to_cols(
        [
            config(model, dp=8, ep=8, framework="megatron"),
            config(model, dp=16, ep=16, framework="megatron"),
            config(model, dp=8, ep=8, framework="torchtitan", zero_stage=3),
        ],
        shipped_parameter_sets(),
    )
    assert c["moe_flex_dispatch"].tolist() == [1, 1, 0]
    got = comm.ep_time_per_layer_s(c, PERF)
    row = 2 * 32768 * 4096  # the preset's sequence, hidden 4096, bf16

    def a2a(nbytes: float, n: float, inter: float, local: float) -> float:
        one = {k: v[:1] for k, v in c.items()}
        return float(
            PERF.collective_time_s(
                "all_to_all",
                np.array([nbytes]),
                np.array([n]),
                np.array([inter]),
                one,
                np.array([local]),
            )[0]
        )

    on_ranks = comm.reached(np.array([64.0, 64]), np.array([8.0, 8]), np.array([8.0, 16]))
    on_nodes = comm.reached(np.array([64.0]), np.array([8.0]), np.array([2.0]))
    assert got[0] == pytest.approx(4 * a2a(row * on_ranks[0], 8, 0, 8))
    assert got[1] == pytest.approx(
        4 * max(a2a(row * on_ranks[1], 8, 0, 8), a2a(row * on_nodes[0], 2, 1, 1))
    )
    assert got[2] == pytest.approx(4 * a2a(8 * row, 8, 0, 8))
    assert got[0] < got[2]


def test_an_all_to_all_across_nodes_leaves_by_each_ranks_nic(config):
    """torchtitan's expert all-to-all at ep 16 over two 8-GPU nodes: each rank sends the half
    of its routed copies bound for the other node over its own NIC (perf.nic_share), not over
    the node's eight NICs as a ring would, four all-to-alls a layer."""
    model = replace(get_preset("mixtral-8x7b"), num_experts=64, experts_topk=8)
    c = to_cols(
        [config(model, dp=16, ep=16, framework="torchtitan", zero_stage=3)],
        shipped_parameter_sets(),
    )
    assert comm.spans_nodes(c)["ep"][0] == 1 and comm.ranks_per_node(c)["ep"][0] == 8
    routed = 2 * 32768 * 8 * 4096  # the preset's sequence, top-8, hidden 4096, bf16
    lat, nic = c["inter_node_latency_s"][0], c["inter_node_bw"][0]
    got = comm.ep_time_per_layer_s(c, PERF)[0]
    assert got == pytest.approx(4 * (15 * lat + routed * 8 / 16 / nic))
