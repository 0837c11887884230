"""The datasheet PerfModel: nccl-tests bus factors, ring steps, a fixed GEMM efficiency."""

from __future__ import annotations

import numpy as np
import pytest

from surrogate.analytic.perf import (
    COLLECTIVE_OPS,
    SpecPerfModel,
    best_gemm_efficiency,
    bus_factor,
    nic_share,
    ring_steps,
)

# nccl-tests' PERFORMANCE.md: busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for
# all_gather, reduce_scatter and alltoall, 1 for broadcast and send/recv; a ring takes 2(n-1)
# steps for all_reduce and n-1 for the others. Worked out for each n:
#            n  all_reduce  its steps  all_gather & co  their steps
BY_HAND = [
    (2, 1.0, 2, 0.5, 1),
    (4, 1.5, 6, 0.75, 3),
    (8, 1.75, 14, 0.875, 7),
    (64, 1.96875, 126, 0.984375, 63),
]


@pytest.mark.parametrize(("n", "all_reduce", "all_reduce_steps", "gather", "gather_steps"), BY_HAND)
def test_bus_factors_and_ring_steps(n, all_reduce, all_reduce_steps, gather, gather_steps):
    assert bus_factor("all_reduce", n) == all_reduce
    assert ring_steps("all_reduce", n) == all_reduce_steps
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(op, n) == gather
        assert ring_steps(op, n) == gather_steps
    assert bus_factor("send_recv", n) == bus_factor("broadcast", n) == 1


def test_bus_factors_are_per_group():
    sizes = np.array([n for n, *_ in BY_HAND])
    np.testing.assert_array_equal(bus_factor("all_reduce", sizes), [r[1] for r in BY_HAND])
    np.testing.assert_array_equal(ring_steps("all_gather", sizes), [r[4] for r in BY_HAND])


def test_unknown_op():
    with pytest.raises(ValueError, match=r"op must be one of all_reduce, .*got 'gossip'"):
        bus_factor("gossip", 8)


def test_collective_time_by_hand():
    c = {
        "intra_node_bw": np.array([100e9]),
        "inter_node_bw": np.array([10e9]),
        "intra_node_latency_s": np.array([1e-5]),
        "inter_node_latency_s": np.array([2e-5]),
    }
    perf = SpecPerfModel()
    size = np.array([1e9])
    intra = perf.collective_time_s("all_reduce", size, np.array([4.0]), np.array([0.0]), c)
    assert intra[0] == pytest.approx(6 * 1e-5 + 1e9 * 1.5 / 100e9)
    # one rank a node: one NIC per rank; four ranks a node: four NICs (capped by NVLink)
    inter = perf.collective_time_s(
        "all_gather", size, np.array([4.0]), np.array([1.0]), c, np.array([1.0])
    )
    assert inter[0] == pytest.approx(3 * 2e-5 + 1e9 * 0.75 / 10e9)
    packed = perf.collective_time_s(
        "all_gather", size, np.array([16.0]), np.array([1.0]), c, np.array([4.0])
    )
    assert packed[0] == pytest.approx(15 * 2e-5 + 1e9 * 15 / 16 / 40e9)
    for op in COLLECTIVE_OPS:
        assert perf.collective_time_s(op, size, np.array([1.0]), np.array([0.0]), c)[0] == 0


def test_an_all_to_all_across_nodes_leaves_by_each_ranks_nic():
    """An all-to-all is pairwise: each of a node's g ranks sends size x (N - g) / N to other
    nodes over its own NIC, g (N - g) / (N - 1) times a ring's time over the g NICs; 1 with one
    rank a node, at most g; the other ops keep the ring's."""
    n, g = np.array([16.0, 32.0, 9.0, 4.0, 1024.0]), np.array([8.0, 8.0, 8.0, 1.0, 8.0])
    share = nic_share("all_to_all", n, g)
    assert share[:4] == pytest.approx([64 / 15, 192 / 31, 1.0, 1.0])
    assert 7.9 < share[4] < 8.0
    assert nic_share("all_to_all", np.array([4.0]), np.array([1.0]))[0] == 1.0  # exactly
    for op in ("all_reduce", "all_gather", "reduce_scatter", "send_recv"):
        assert nic_share(op, n, g).tolist() == [1.0] * 5
    c = {
        "intra_node_bw": np.array([450e9]),
        "inter_node_bw": np.array([50e9]),
        "intra_node_latency_s": np.array([0.0]),
        "inter_node_latency_s": np.array([0.0]),
    }
    perf, size = SpecPerfModel(), np.array([1e9])
    a2a = perf.collective_time_s(
        "all_to_all", size, np.array([16.0]), np.array([1.0]), c, np.array([8.0])
    )
    assert a2a[0] == pytest.approx(1e9 * 8 / 16 / 50e9)  # half the rows, one NIC
    ring = perf.collective_time_s(
        "all_gather", size, np.array([16.0]), np.array([1.0]), c, np.array([8.0])
    )
    assert a2a[0] / ring[0] == pytest.approx(64 / 15)


def test_gemm_efficiency_is_the_setting():
    perf = SpecPerfModel(gemm_efficiency_frac=0.5)
    eff = perf.gemm_efficiency(np.ones(3), np.ones(3), np.ones(3), {})
    np.testing.assert_array_equal(eff, 0.5)
    assert SpecPerfModel().gemm_efficiency_frac == 0.70 and SpecPerfModel.name == "datasheet"


def test_the_datasheet_best_gemm_efficiency_is_its_assumed_one():
    perf = SpecPerfModel(0.6)
    assert perf.best_gemm_efficiency == best_gemm_efficiency(perf) == 0.6
