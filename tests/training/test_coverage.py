"""Interval coverage and p_oom reliability of held-out runs, on hand-made (synthetic)
tables with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from surrogate.learned.recalibration import measured_needed
from training.coverage import (
    RELIABILITY_BINS,
    coverage_by_group,
    interval_hits,
    oom_reliability,
    recalibrated_hits,
)


def test_the_oom_probability_has_a_reliability_table():
    """Synthetic held-out runs: p_oom 0.9 where runs ran out, 0.1 where they completed; the
    table bins what was said against what happened."""
    n = 40
    res = pd.DataFrame(
        {
            "status": ["oom"] * 10 + ["completed"] * (n - 10) + ["fail"],
            "p_oom": [0.9] * 10 + [0.1] * (n - 10) + [0.5],
        }
    )
    table = oom_reliability(res)
    assert len(table) == len(RELIABILITY_BINS) - 1
    assert table["runs"].sum() == n  # a failed run is neither
    high = table[table["runs"] == 10].iloc[0]
    assert high["said"] == pytest.approx(0.9) and high["ran_out"] == 1.0
    low = table[table["runs"] == n - 10].iloc[0]
    assert low["said"] == pytest.approx(0.1) and low["ran_out"] == 0.0


def test_coverage_per_group_reports_groups_of_enough_runs_and_flags_the_low_ones():
    """Synthetic held-out runs: 20 on one node, all inside their intervals; 20 on 32 nodes
    with a pipeline, 10 of them outside; 5 on 8 nodes (too few to judge)."""
    nodes = [1] * 20 + [32] * 20 + [8] * 5
    mfu = np.full(len(nodes), 0.4)
    hi = np.where(np.arange(len(nodes)) >= 30, 0.3, 0.5)  # runs 30-39 (32 nodes) missed
    res = pd.DataFrame(
        {
            "num_nodes": nodes,
            "pp": [1] * 20 + [4] * 25,
            "framework": "nanotron",
            "framework_version": "pp-fix",
            "status": "completed",
            "mfu": mfu,
            "pred_mfu_lo": 0.2,
            "pred_mfu_hi": hi,
            "peak_mem_reserved_gib": 40.0,
            "pred_peak_mem_reserved_gib": 40.0,
            "pred_peak_mem_reserved_lo_gib": 35.0,
            "pred_peak_mem_reserved_hi_gib": 45.0,
        }
    )
    res.loc[40:, "pred_mfu_hi"] = 0.5
    table = coverage_by_group(res).set_index(["grouping", "group"])
    assert table.loc[("nodes", "1 node"), "mfu_coverage"] == 1.0
    assert table.loc[("nodes", "32-127 nodes"), "mfu_coverage"] == 0.5
    assert table.loc[("nodes", "32-127 nodes"), "below"] == "mfu"
    assert math.isnan(table.loc[("nodes", "8-31 nodes"), "mfu_coverage"])  # 5 runs
    assert table.loc[("nodes", "8-31 nodes"), "mfu_runs"] == 5
    assert table.loc[("pipeline", "pp>1"), "mfu_coverage"] == pytest.approx(15 / 25)
    assert table.loc[("framework", "nanotron/pp-fix"), "memory_coverage"] == 1.0
    assert table.loc[("framework", "nanotron/pp-fix"), "below"] == ""


def test_recalibration_scales_each_group_to_its_own_held_out_errors():
    """Synthetic held-out runs in 20 cells: without a pipeline the measured MFU lies at 0.2
    to 1.8 times the interval's half-width off the prediction (half of them outside), with
    one at 0.05 to 0.2 times it (all inside, too wide); the recalibrated intervals hold about
    80% of each, each fold scaled by the other folds' factors."""
    rng = np.random.default_rng(0)
    n = 400
    pp = np.where(np.arange(n) % 2 == 0, 1, 4)
    factor = np.where(pp == 1, rng.uniform(0.2, 1.8, n), rng.uniform(0.05, 0.2, n))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    half = 0.2  # log half-width of every interval
    res = pd.DataFrame(
        {
            "num_nodes": 1,
            "pp": pp,
            "framework": "nanotron",
            "status": "completed",
            "hidden_size": 4096,
            "num_layers": 32 + np.arange(n) % 20,  # 20 cells
            "pred_mfu": 0.4,
            "pred_mfu_lo": 0.4 * np.exp(-half),
            "pred_mfu_hi": 0.4 * np.exp(half),
            "mfu": 0.4 * np.exp(sign * factor * half),
            "peak_mem_reserved_gib": 0.0,
        }
    )
    needed = measured_needed(res)[0]
    np.testing.assert_allclose(needed.to_numpy(), factor)
    before = interval_hits(res)[0]
    after = recalibrated_hits(res)[0]
    for p, low, high in ((1, 0.4, 0.6), (4, 1.0, 1.0)):
        mine = res.index[res["pp"] == p]
        assert low <= before.loc[mine].mean() <= high
        assert 0.7 <= after.loc[mine].mean() <= 0.9
    # fitted on another prediction of the same runs: factors from its errors, applied to
    # these intervals (as a shipped recalibration fitted under the measured network is
    # applied to profile-network predictions); fitted on itself, the default
    pd.testing.assert_series_equal(recalibrated_hits(res, fitted_on=res)[0], after)
    narrow = res.assign(mfu=0.4 * np.exp(sign * factor * half / 4))  # 4x closer
    assert recalibrated_hits(res, fitted_on=narrow)[0].mean() < after.mean()
