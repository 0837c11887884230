"""The probability that each shown layout is the best: Monte Carlo over correlated errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from surrogate.errors import ConfigError
from surrogate.layouts.best_odds import (
    CORRELATION,
    DIMENSIONS,
    Z80,
    Correlation,
    best_set,
    correlation_matrix,
    draw_log_errors,
    log_sd,
    p_best,
)

BASE = {
    "framework": "nanotron",
    "num_nodes": 1,
    "dp": 8,
    "tp": 1,
    "pp": 1,
    "cp": 1,
    "ep": 1,
    "vpp": 1,
    "mbs": 1,
    "zero_stage": 1,
    "recompute": "none",
    "sequence_parallel": False,
}


def synthetic(rows: list[dict[str, object]]) -> pd.DataFrame:
    """Synthetic scored layouts: ``mfu`` and ``sd`` (log) give the 80% interval."""
    out = []
    for r in rows:
        mfu, sd = float(r.pop("mfu")), float(r.pop("sd"))  # type: ignore[arg-type]
        out.append(
            {
                **BASE,
                "pred_mfu": mfu,
                "pred_mfu_lo": mfu * np.exp(-Z80 * sd),
                "pred_mfu_hi": mfu * np.exp(Z80 * sd),
                "p_completed": 1.0,
                **r,
            }
        )
    return pd.DataFrame(out)


def test_log_sd_reads_the_80_percent_interval() -> None:
    assert log_sd(np.array([0.4]), np.array([0.4 * np.exp(2 * Z80 * 0.1)]))[0] == pytest.approx(0.1)
    assert np.isnan(log_sd(np.array([np.nan, 0.0]), np.array([0.5, 0.5]))).all()


def test_probabilities_sum_to_one_at_most_and_are_deterministic() -> None:
    frame = synthetic(
        [
            {"mfu": 0.40, "sd": 0.05},
            {"mfu": 0.39, "sd": 0.05, "tp": 2},
            {"mfu": 0.30, "sd": 0.05, "pp": 2},
        ]
    )
    p = p_best(frame)
    assert p.sum() == pytest.approx(1.0)
    assert (p == p_best(frame)).all()
    assert p[0] > p[1] > p[2]
    frame["p_completed"] = [0.5, 0.9, 0.9]  # a layout that may OOM is less likely the best
    q = p_best(frame)
    assert q.sum() < 1.0 and q[0] < p[0]


def test_a_clear_leader_is_almost_surely_the_best_and_twins_split() -> None:
    clear = p_best(synthetic([{"mfu": 0.5, "sd": 0.01}, {"mfu": 0.3, "sd": 0.01, "tp": 2}]))
    assert clear[0] > 0.999
    twins = p_best(synthetic([{"mfu": 0.4, "sd": 0.1}, {"mfu": 0.4, "sd": 0.1, "tp": 2}]))
    assert twins == pytest.approx([0.5, 0.5], abs=0.03)


def test_no_interval_no_probability() -> None:
    frame = synthetic([{"mfu": 0.4, "sd": 0.1}, {"mfu": 0.3, "sd": 0.1}])
    frame.loc[0, "pred_mfu_lo"] = np.nan
    assert np.isnan(p_best(frame)).all()
    assert len(p_best(frame.iloc[:0])) == 0


def test_drawn_errors_have_the_modelled_correlation() -> None:
    """Same cell: a + b lambda^d for d differing dimensions; another cell: 0; variance 1."""
    corr = Correlation(cell=0.1, neighbours=0.6, decay=0.5)
    frame = synthetic(
        [
            {"mfu": 0.4, "sd": 0.1},
            {"mfu": 0.4, "sd": 0.1, "mbs": 2},
            {"mfu": 0.4, "sd": 0.1, "tp": 2, "pp": 2, "mbs": 2, "dp": 2},
            {"mfu": 0.4, "sd": 0.1, "num_nodes": 2},
        ]
    )
    z = draw_log_errors(frame, 200_000, correlation=corr)
    c = np.corrcoef(z.T)
    assert z.std(axis=0) == pytest.approx(np.ones(4), abs=0.01)
    assert c[0, 1] == pytest.approx(0.1 + 0.6 * 0.5, abs=0.01)
    assert c[0, 2] == pytest.approx(0.1 + 0.6 * 0.5**4, abs=0.01)
    assert c[0, 3] == pytest.approx(0.0, abs=0.01)
    assert correlation_matrix(frame, corr) == pytest.approx(c, abs=0.01)


def test_the_correlation_matrix_is_valid_for_every_layout_set() -> None:
    """A product kernel over the dimensions: positive semi-definite, whatever the layouts."""
    rng = np.random.default_rng(0)
    rows = [
        {
            "mfu": 0.4,
            "sd": 0.1,
            **{d: int(rng.integers(0, 3)) for d in DIMENSIONS},
            "num_nodes": int(rng.integers(1, 3)),
        }
        for _ in range(40)
    ]
    corr = Correlation(cell=0.2, neighbours=0.8, decay=0.3)
    assert np.linalg.eigvalsh(correlation_matrix(synthetic(rows), corr)).min() > -1e-9


def test_correlated_errors_make_a_small_lead_surer() -> None:
    """A lead of 2% over a near neighbour (errors mostly shared) is surer than over a layout
    that differs in every dimension."""
    corr = Correlation(cell=0.0, neighbours=0.9, decay=0.5)
    near = synthetic([{"mfu": 0.408, "sd": 0.02}, {"mfu": 0.40, "sd": 0.02, "mbs": 2}])
    far = synthetic(
        [
            {"mfu": 0.408, "sd": 0.02},
            {
                "mfu": 0.40,
                "sd": 0.02,
                "mbs": 2,
                "tp": 2,
                "pp": 2,
                "dp": 2,
                "zero_stage": 0,
                "recompute": "full",
            },
        ]
    )
    assert p_best(near, correlation=corr)[0] > p_best(far, correlation=corr)[0] + 0.05


def test_an_incumbent_above_every_layout_leaves_little_chance() -> None:
    frame = synthetic([{"mfu": 0.40, "sd": 0.02}, {"mfu": 0.39, "sd": 0.02, "tp": 2}])
    assert p_best(frame, incumbent=0.60).sum() < 0.01
    assert p_best(frame, incumbent=0.10).sum() == pytest.approx(1.0)


def test_the_best_set_holds_90_percent_of_p_best() -> None:
    """The fewest layouts, by P(best), that hold 90% of it: one for a clear lead, several
    for a close call (in any order of the rows), none without P(best)."""
    assert best_set(np.array([0.95, 0.04, 0.01])).tolist() == [True, False, False]
    assert best_set(np.array([0.1, 0.45, 0.05, 0.4])).tolist() == [True, True, False, True]
    assert best_set(np.array([0.5, 0.4, 0.1])).tolist() == [True, True, False]  # exactly 90%
    # the shares are of the rows' total: a chance that none completes does not widen it
    assert best_set(np.array([0.48, 0.02])).tolist() == [True, False]
    assert not best_set(np.array([np.nan, 0.5])).any()
    assert not best_set(np.zeros(3)).any() and len(best_set(np.zeros(0))) == 0
    twins = synthetic(
        [
            {"mfu": 0.4, "sd": 0.1},
            {"mfu": 0.4, "sd": 0.1, "tp": 2},
            {"mfu": 0.2, "sd": 0.05, "pp": 2},
        ]
    )
    assert best_set(p_best(twins)).tolist() == [True, True, False]
    with pytest.raises(ConfigError, match="mass must be in"):
        best_set(np.array([1.0]), mass=0.0)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"cell": 0.6, "neighbours": 0.5, "decay": 0.5}, "sum to <= 1"),
        ({"cell": 0.1, "neighbours": 0.5, "decay": 1.5}, "decay must be in"),
    ],
)
def test_correlation_weights_must_be_shares(kw: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Correlation(**kw)


def test_heavier_tails_keep_the_80_percent_interval():
    """Student t errors (a finite ``tail_df``): still 80% inside +-1.2816, more beyond 3."""
    frame = pd.DataFrame({"dp": [1, 2, 4]})
    normal = draw_log_errors(frame, 100_000)
    heavy = draw_log_errors(
        frame,
        100_000,
        correlation=Correlation(
            cell=CORRELATION.cell,
            neighbours=CORRELATION.neighbours,
            decay=CORRELATION.decay,
            tail_df=3.0,
        ),
    )
    for z in (normal, heavy):
        assert np.mean(np.abs(z) < Z80) == pytest.approx(0.8, abs=0.01)
    assert np.mean(np.abs(heavy) > 3) > 5 * np.mean(np.abs(normal) > 3)
    with pytest.raises(ConfigError, match="tail degrees of freedom"):
        Correlation(cell=0.1, neighbours=0.1, decay=0.5, tail_df=0.0)
