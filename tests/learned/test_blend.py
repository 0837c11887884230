"""How the learned answer and its intervals blend with the physics off the data
(``surrogate.learned.blend``): the widening beyond the data, and the interval around the shrunk
and the analytic answers, bounded by the transfer width."""

from __future__ import annotations

import numpy as np
import pytest

from surrogate.learned.blend import memory_half_width, mfu_bounds, widened


def test_widening_stops_at_the_transfer_width_unless_already_wider():
    half = np.array([0.05, 0.05, 0.2, 0.6])
    widen = np.array([1.0, 3.0, 5.0, 2.0])
    np.testing.assert_allclose(widened(half, widen, None), half * widen)
    # 0.05 x 3 = 0.15 stays under 0.4; 0.2 x 5 = 1.0 stops at 0.4; 0.6, already wider, stays
    np.testing.assert_allclose(widened(half, widen, 0.4), [0.05, 0.15, 0.4, 0.6])


def test_the_mfu_interval_beyond_the_data_holds_the_physics_within_the_transfer_width():
    f = np.array([0.1, 0.1])
    q_lo, q_hi = f - 0.2, f + 0.2
    center = np.array([0.05, 0.05])  # the correction shrunk toward the physics (0)
    shared = np.array([True, False])
    widen = np.array([4.0, 4.0])
    lo, hi = mfu_bounds(f, q_lo, q_hi, center, shared, widen, 0.4)
    # off the data: center -/+ min(0.2 x 4, max(0.2, 0.4)), and the physics (0) inside
    assert (lo[0], hi[0]) == pytest.approx((0.05 - 0.4, 0.05 + 0.4))
    unbounded = mfu_bounds(f, q_lo, q_hi, center, shared, widen)
    assert (unbounded[0][0], unbounded[1][0]) == pytest.approx((0.05 - 0.8, 0.05 + 0.8))
    # inside the data nothing widens
    assert lo[1] == q_lo[1] and hi[1] == q_hi[1]


def test_an_unshrunk_extrapolation_reaches_no_further_than_the_transfer_width():
    # the trees extrapolate a correction of x e^-1.2 off the data; shrunk, e^-0.7 remains
    f, center = np.array([-1.2]), np.array([-0.7])
    q_lo, q_hi = f - 0.1, f + 0.1
    lo, hi = mfu_bounds(f, q_lo, q_hi, center, np.array([True]), np.array([2.0]), 0.4)
    # from the shrunk answer less 0.4 (not the unshrunk -1.3) up to the physics (0)
    assert (lo[0], hi[0]) == pytest.approx((-0.7 - 0.4, 0.0))
    unbounded = mfu_bounds(f, q_lo, q_hi, center, np.array([True]), np.array([2.0]))
    assert unbounded[0][0] == pytest.approx(-1.3)  # without a cap it still holds it
    # a conformal half-width wider than the cap is kept: the shrunk answer less 0.6
    wide = mfu_bounds(f, f - 0.6, f + 0.6, center, np.array([True]), np.array([2.0]), 0.4)
    assert (wide[0][0], wide[1][0]) == pytest.approx((-0.7 - 0.6, 0.0))
    # inside the domain (a framework's share of the correction) its interval is kept whole
    inside = mfu_bounds(f, q_lo, q_hi, center, np.array([True]), np.array([1.0]), 0.4)
    assert (inside[0][0], inside[1][0]) == pytest.approx((-1.3, 0.0))


def test_the_memory_half_width_beyond_the_data_is_bounded_alike():
    q = np.array([0.05, 0.05])
    got = memory_half_width(q, float("nan"), None, np.array([2.0, 5.0]), 0.133)
    np.testing.assert_allclose(got, [0.1, 0.133])


def test_the_network_spread_adds_to_the_interval_in_quadrature_under_the_ceiling():
    from surrogate.learned.blend import with_network_spread

    columns = {
        "pred_mfu": np.full(3, 0.4),
        "pred_mfu_lo": np.full(3, 0.4 * np.exp(-0.3)),
        "pred_mfu_hi": np.full(3, 0.4 * np.exp(0.3)),
    }
    out = {
        "net_spread_lo": np.array([0.0, 0.4, 0.4]),
        "net_spread_hi": np.array([0.0, 0.4, 2.0]),
        "mfu_ceiling": np.full(3, 0.75),
    }
    wider = with_network_spread(columns, out)
    assert wider["pred_mfu_lo"][0] == columns["pred_mfu_lo"][0]  # no spread: as it was
    assert wider["pred_mfu_hi"][0] == columns["pred_mfu_hi"][0]
    assert np.log(0.4 / wider["pred_mfu_lo"][1]) == pytest.approx(0.5)  # hypot(0.3, 0.4)
    assert np.log(wider["pred_mfu_hi"][1] / 0.4) == pytest.approx(0.5)
    assert wider["pred_mfu_hi"][2] == pytest.approx(0.75)  # the hardware's ceiling
    assert with_network_spread(columns, {}) is columns  # no recorded spread at all
