"""Fabric efficiency over node count: measured medians, a law chosen on held-out counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from surrogate.analytic.perf import bus_factor
from surrogate.errors import DataError
from surrogate.hardware.fabric import (
    Fabric,
    ScaleCurve,
    fit_fabric,
    fit_scale_curve,
    law_scores,
    run_scales,
)

NODES = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0])


def _synthetic_rows(eff_of_nodes, runs_per_count: int = 3) -> pd.DataFrame:
    """Synthetic whole-job all-reduce rows (256 MiB, 8 GPUs a node, 50 GB/s NICs)."""
    rows = []
    size = 256 * 2**20
    for n in NODES:
        for r in range(runs_per_count):
            g = 8 * n
            busbw = eff_of_nodes(n) * 8 * 50e9 * (1 + 0.01 * (r - 1))
            rows.append(
                {
                    "op": "all_reduce",
                    "size_bytes": size,
                    "group_size": g,
                    "nodes": n,
                    "time_s": size * float(bus_factor("all_reduce", g)) / busbw,
                    "run_id": f"run{n:g}-{r}",
                    "source": "synthetic",
                    "file": "synthetic",
                }
            )
    return pd.DataFrame(rows)


def test_law_selected_on_held_out_node_counts():
    halving = 0.9 / (1 + 0.5 * (NODES - 1))  # a per-node cost: ring_latency exactly
    curve = fit_scale_curve("all_reduce", NODES, halving, np.ones(6))
    assert curve.law == "ring_latency"
    assert curve.law_scores["ring_latency"] < 1e-6 < curve.law_scores["flat"]
    far = curve(np.array([128.0, 1024.0]))
    assert far[0] == pytest.approx(0.9 / (1 + 0.5 * 127), rel=1e-6)
    assert far[1] < far[0]
    flat = fit_scale_curve("all_reduce", NODES, np.full(6, 0.8), np.ones(6))
    assert flat(np.array([4096.0]))[0] == pytest.approx(0.8)


def test_few_node_counts_hold_flat_and_below_the_first_the_edge_holds():
    curve = fit_scale_curve("all_reduce", np.array([2.0]), np.array([0.7]), np.array([5.0]))
    assert curve.law == "flat" and law_scores(np.array([2.0]), np.array([0.7])) == {}
    assert curve(np.array([1.0, 2.0, 1024.0])).tolist() == pytest.approx([0.7, 0.7, 0.7])


def test_fit_fabric_recovers_efficiency_and_per_run_scale():
    rows = _synthetic_rows(lambda n: 0.85 / n * 2)
    fabric = fit_fabric(rows, 50e9, 25e-6)
    assert fabric is not None
    assert fabric.efficiency("all_reduce", NODES) == pytest.approx(0.85 / NODES * 2, rel=1e-3)
    # ops without a curve use all_reduce's
    assert fabric.efficiency("all_gather", NODES) == pytest.approx(
        fabric.efficiency("all_reduce", NODES)
    )
    scales = run_scales(rows, fabric)
    assert scales["run2-0"] == pytest.approx(0.99, rel=1e-3)
    assert scales["run64-2"] == pytest.approx(1.01, rel=1e-3)


def test_time_uses_the_nics_of_the_ranks_on_each_node():
    curve = ScaleCurve(
        op="all_reduce",
        nodes=np.array([2.0]),
        efficiency=np.array([0.5]),
        points=np.array([1.0]),
        law="flat",
        law_params=(0.5, 0.0),
    )
    fabric = Fabric(nic_bw_bytes_per_s=50e9, latency_s=0.0, curves={"all_reduce": curve})
    size = np.array([1e9, 1e9])
    t = fabric.time_s("all_reduce", size, np.array([16.0, 2.0]), np.array([8.0, 1.0]), {})
    assert t[0] == pytest.approx(1e9 * 2 * 15 / 16 / (8 * 50e9 * 0.5))
    assert t[1] == pytest.approx(1e9 * 1 / (50e9 * 0.5))
    slow = fabric.time_s(
        "all_reduce", size[:1], np.array([16.0]), np.array([8.0]), {"net_scale": np.array([0.5])}
    )
    assert slow[0] == pytest.approx(2 * t[0])


def test_an_all_to_all_sends_its_remote_rows_by_each_ranks_nic():
    """At ep 16 and 32 over 8-GPU nodes an all-to-all takes g (N - g) / (N - 1) = 4.3 and 6.2
    times the ring's time at the same bus factor: each rank's rows for other nodes, size x
    (N - 8) / N, over its own NIC; with one rank a node the two agree."""
    curve = ScaleCurve(
        op="all_reduce",
        nodes=np.array([2.0]),
        efficiency=np.array([0.5]),
        points=np.array([1.0]),
        law="flat",
        law_params=(0.5, 0.0),
    )
    fabric = Fabric(nic_bw_bytes_per_s=50e9, latency_s=0.0, curves={"all_reduce": curve})
    size, n = np.full(3, 1e9), np.array([16.0, 32.0, 4.0])
    g = np.array([8.0, 8.0, 1.0])
    a2a = fabric.time_s("all_to_all", size, n, g, {})
    ring = fabric.time_s("all_gather", size, n, g, {})
    assert a2a[0] == pytest.approx(1e9 * 8 / 16 / (50e9 * 0.5))
    assert a2a[1] == pytest.approx(1e9 * 24 / 32 / (50e9 * 0.5))
    assert (a2a / ring).tolist() == pytest.approx([64 / 15, 192 / 31, 1.0])


def test_round_trip_and_bad_json():
    rows = _synthetic_rows(lambda n: 0.8)
    fabric = fit_fabric(rows, 50e9, 25e-6)
    assert fabric is not None
    again = Fabric.from_json(fabric.to_json())
    assert again.efficiency("all_reduce", NODES) == pytest.approx(
        fabric.efficiency("all_reduce", NODES), rel=1e-5
    )
    bad = fabric.to_json()
    bad["curves"][0]["law"] = "magic"
    with pytest.raises(DataError, match="law must be one of flat"):
        Fabric.from_json(bad)
    with pytest.raises(DataError, match="needs an all_reduce"):
        Fabric.from_json({**fabric.to_json(), "curves": []})


def test_no_bandwidth_bound_rows_no_fabric():
    rows = _synthetic_rows(lambda n: 0.8).assign(size_bytes=1024.0)
    assert fit_fabric(rows, 50e9, 25e-6) is None


def test_the_spread_between_jobs_is_interpolated_in_log_nodes_and_none_once_measured():
    fabric = fit_fabric(_synthetic_rows(lambda n: 0.9 / np.sqrt(n)), 50e9, 1e-5)
    assert fabric is not None
    spread = {
        4.0: {"runs": 10.0, "p10_gbps": 50.0, "median_gbps": 100.0, "p90_gbps": 200.0},
        16.0: {"runs": 10.0, "p10_gbps": 25.0, "median_gbps": 100.0, "p90_gbps": 100.0},
    }
    fabric = Fabric(nic_bw_bytes_per_s=50e9, latency_s=1e-5, curves=fabric.curves, spread=spread)
    down, up = fabric.log_spread(np.array([1.0, 2.0, 4.0, 8.0, 16.0, 64.0]))
    np.testing.assert_allclose(
        down, [0.0, np.log(2), np.log(2), np.log(2) * 1.5, np.log(4), np.log(4)]
    )
    np.testing.assert_allclose(up, [0.0, np.log(2), np.log(2), np.log(2) / 2, 0.0, 0.0], atol=1e-12)
    measured = Fabric(
        nic_bw_bytes_per_s=50e9,
        latency_s=1e-5,
        curves=fabric.curves,
        spread=spread,
        net_scale=1.3,
        measured=True,
    )
    assert not measured.log_spread(np.array([8.0]))[0].any()
    bare = Fabric(nic_bw_bytes_per_s=50e9, latency_s=1e-5, curves=fabric.curves)
    assert not bare.log_spread(np.array([8.0]))[1].any()
