"""Evaluation protocols and metrics: splits as documented, metrics on hand-made (synthetic)
tables with known answers, one protocol end to end on real runs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from surrogate.errors import DataError
from training.evaluate import (
    PRED_KEYS,
    accuracy_metrics,
    evaluate,
    evaluate_analytic,
    evaluate_protocol,
    format_metric,
    model_key,
    splits,
)

SMALL = {"n_estimators": 15, "num_leaves": 7}


def test_cv_covers_every_run_once(playbook_subset):
    tests = [t for _, t in splits(playbook_subset, "cv")]
    assert len(tests) == 5
    assert sorted(np.concatenate(tests)) == list(range(len(playbook_subset)))


def test_lomo_holds_out_each_model_size(playbook_subset):
    key = model_key(playbook_subset)
    held = []
    for train, test in splits(playbook_subset, "lomo"):
        assert len(set(key[test])) == 1 and key[test][0] not in set(key[train])
        held.append(key[test][0])
    assert sorted(held) == sorted(set(key))


def test_nodes_trains_small_tests_large(playbook_subset):
    ((train, test),) = list(splits(playbook_subset, "nodes"))
    nodes = playbook_subset["num_nodes"].to_numpy()
    assert nodes[train].max() <= 16 and set(nodes[test]) <= {32, 64}


def test_cv_cells_never_splits_a_cell(playbook_subset):
    from surrogate.learned.training_data import cell_groups

    groups = cell_groups(playbook_subset)
    for train, test in splits(playbook_subset, "cv_cells"):
        assert not set(groups[train]) & set(groups[test])


def test_unknown_protocol_raises(playbook_subset):
    with pytest.raises(ValueError, match="protocol must be one of"):
        list(splits(playbook_subset, "random"))
    with pytest.raises(DataError, match="protocols must be among"):
        evaluate(playbook_subset, ["random"])


def _synthetic_runs() -> pd.DataFrame:
    """Synthetic: one (model, nodes) cell of three completed runs, one oom, one fail."""
    return pd.DataFrame(
        {
            "hidden_size": 4096,
            "num_layers": 32,
            "num_nodes": 1,
            "status": ["completed", "completed", "completed", "oom", "fail"],
            "mfu": [0.40, 0.30, 0.05, np.nan, np.nan],
            "peak_mem_reserved_gib": [50.0, 60.0, 70.0, np.nan, np.nan],
        }
    )


def test_metrics_of_perfect_predictions():
    res = _synthetic_runs()
    res["pred_mfu"] = res["mfu"].fillna(0.2)
    res["pred_mfu_lo"] = res["pred_mfu"] * 0.9
    res["pred_mfu_hi"] = res["pred_mfu"] * 1.1
    res["pred_status"] = ["completed", "completed", "completed", "oom", "completed"]
    res["p_oom"] = [0.0, 0.0, 0.0, 1.0, 0.0]
    res["pred_peak_mem_reserved_gib"] = res["peak_mem_reserved_gib"]
    res["pred_peak_mem_reserved_lo_gib"] = res["pred_peak_mem_reserved_gib"] - 1.0
    res["pred_peak_mem_reserved_hi_gib"] = res["pred_peak_mem_reserved_gib"] + 1.0
    m = accuracy_metrics(res)
    assert m["memory_interval_coverage"] == 1
    # scored against the rank each run's memory was logged on: a logged rank at half the
    # most loaded one's memory has half its interval
    res["pred_logged_mem_gib"] = res["pred_peak_mem_reserved_gib"]
    res["pred_peak_mem_reserved_gib"] *= 2
    res["pred_peak_mem_reserved_lo_gib"] *= 2
    res["pred_peak_mem_reserved_hi_gib"] *= 2
    assert accuracy_metrics(res)["memory_interval_coverage"] == 1
    res["pred_peak_mem_reserved_hi_gib"] = res["pred_peak_mem_reserved_gib"] * 1.01
    # 52.5, 59, 75 logged
    res["pred_peak_mem_reserved_lo_gib"] = [105.0, 118.0, 150.0, np.nan, np.nan]
    assert accuracy_metrics(res)["memory_interval_coverage"] == pytest.approx(1 / 3)
    assert m["completed"] == 3 and m["runs"] == 5
    assert m["mfu_mape_ge10"] == 0 and m["mfu_median_ape"] == 0 and m["mfu_mae_points"] == 0
    assert m["mfu_spearman"] == pytest.approx(1.0)
    assert m["regret_median"] == 0 and m["regret_max"] == 0 and m["regret_cells"] == 1
    assert m["oom_recall"] == 1 and m["oom_precision"] == 1
    assert m["memory_mape"] == 0 and m["interval_coverage"] == 1


def test_metrics_of_wrong_predictions():
    res = _synthetic_runs()
    res["pred_mfu"] = [0.20, 0.45, 0.05, 0.1, 0.1]  # picks the 0.30 run as best
    res["pred_mfu_lo"] = np.nan
    res["pred_mfu_hi"] = np.nan
    res["pred_status"] = ["oom", "completed", "completed", "completed", "oom"]
    res["p_oom"] = [1.0, 0.0, 0.0, 0.0, 1.0]
    res["pred_peak_mem_reserved_gib"] = res["peak_mem_reserved_gib"] * 1.1
    m = accuracy_metrics(res)
    assert m["mfu_mape_ge10"] == pytest.approx((0.5 + 0.5) / 2)  # the 0.05 run is excluded
    assert m["mfu_median_ape"] == pytest.approx(0.5)
    assert m["mfu_mae_points"] == pytest.approx(100 * (0.20 + 0.15 + 0) / 3)
    assert m["regret_max"] == pytest.approx((0.40 - 0.30) / 0.40)
    assert m["oom_recall"] == 0 and m["oom_precision"] == 0  # the failed run is not judged
    assert m["memory_mape"] == pytest.approx(0.1)
    assert math.isnan(m["interval_coverage"]) and math.isnan(m["memory_interval_coverage"])


def test_format_metric():
    assert format_metric("runs", 12.0) == "12"
    assert format_metric("mfu_spearman", 0.91234) == "0.912"
    assert format_metric("memory_mape", 0.0512) == "5.1%"
    assert format_metric("oom_recall", float("nan")) == "-"


def test_nodes_protocol_end_to_end(playbook_subset):
    params = {"status": SMALL, "mfu": SMALL, "mem": SMALL}
    r = evaluate_protocol(playbook_subset, "nodes", params=params)
    large = playbook_subset["num_nodes"].isin([32, 64])
    assert r.n_splits == 1 and len(r.predictions) == int(large.sum())
    for k in PRED_KEYS:
        assert k in r.predictions
    assert 0 < r.metrics["mfu_median_ape"] < 1
    assert 0 <= r.metrics["interval_coverage"] <= 1
    assert math.isnan(r.analytic_metrics["interval_coverage"])
    assert 0 < r.metrics["memory_interval_coverage"] <= 1
    assert math.isnan(r.analytic_metrics["memory_interval_coverage"])
    heard = []  # the progress a command draws: each split, then done
    again = evaluate_protocol(
        playbook_subset, "nodes", params=params, progress=lambda *a: heard.append(a)
    )
    assert again.metrics == r.metrics
    assert heard == [
        ("evaluating nodes: one refit per split", 0, 1),
        ("evaluating nodes: one refit per split", 1, 1),
    ]


def test_shrinkages_share_one_fit_and_bracket_learned_and_analytic(playbook_subset):
    """No shrinking keeps the learned answer beyond the data; a tiny scale returns the
    analytic one there; the default equals evaluate_protocol's."""
    from training.evaluate import evaluate_shrinks

    params = {"status": SMALL, "mfu": SMALL, "mem": SMALL}
    by = evaluate_shrinks(playbook_subset, "nodes", (None, math.inf, 1e-9), params=params)
    assert by[None].metrics == evaluate_protocol(playbook_subset, "nodes", params=params).metrics
    assert (by[math.inf].predictions["domain_weight"] == 1).all()
    tiny = by[1e-9].predictions
    outside = tiny["domain_weight"] < 1e-6
    assert outside.any()
    assert by[None].analytic_metrics == by[1e-9].analytic_metrics


def test_physics_of_a_split_is_fitted_on_its_training_rows_alone(playbook_subset):
    """The sets of a split do not move when the test runs' measurements change; versions the
    runs do not hold keep the shipped sets."""
    from surrogate.calibration.parameter_files import shipped_parameter_sets
    from surrogate.learned.training_data import training_data
    from training.evaluate import physics_of

    ((train, test),) = list(splits(playbook_subset, "nodes"))
    sets = physics_of(training_data(playbook_subset), train)
    altered = playbook_subset.copy()
    altered.loc[test, "tokens_per_s_per_gpu"] *= 3.0
    altered.loc[test, "peak_mem_reserved_gib"] *= 0.5
    again = physics_of(training_data(altered), train)
    for fv in ("nanotron/pp-fix", "nanotron/pre-pp-fix"):
        assert sets[fv]["values"] == again[fv]["values"]
        assert sets[fv]["runs"]["time"] <= len(train)
    assert sets["pytorch/autocast"] == shipped_parameter_sets().as_dict()["pytorch/autocast"]


def test_refit_physics_keeps_the_shipped_fit_out_of_held_out_figures(playbook_subset):
    """With the physics refit per split, the shipped parameters of the versions evaluated
    play no part: replacing them changes nothing. Kept, they do."""
    from surrogate.analytic.params import ParameterSets
    from surrogate.learned.training_data import training_data

    params = {"status": SMALL, "mfu": SMALL, "mem": SMALL}
    odd = {
        fv: {"values": {"gemm_time_scale": 2.5}}
        for fv in ("nanotron/pp-fix", "nanotron/pre-pp-fix")
    }
    refit = evaluate_protocol(playbook_subset, "nodes", params=params)
    assert refit.refit_physics

    def same(a: dict[str, float], b: dict[str, float]) -> bool:
        return pd.Series(a).equals(pd.Series(b))  # NaN equals NaN

    under_odd = training_data(playbook_subset, sets=ParameterSets(odd))
    assert same(
        evaluate_protocol(under_odd, "nodes", params=params).analytic_metrics,
        refit.analytic_metrics,
    )
    kept = evaluate_protocol(under_odd, "nodes", params=params, refit_physics=False)
    assert not kept.refit_physics
    shipped = evaluate_protocol(playbook_subset, "nodes", params=params, refit_physics=False)
    assert not same(kept.analytic_metrics, shipped.analytic_metrics)


def test_analytic_alone_gives_the_protocols_analytic_baseline(playbook_subset):
    """evaluate_analytic fits no learned model and gives, run for run, the analytic baseline
    evaluate_protocol prints beside the learned figures, physics refit per split or not."""
    params = {"status": SMALL, "mfu": SMALL, "mem": SMALL}
    for refit in (True, False):
        full = evaluate_protocol(playbook_subset, "nodes", params=params, refit_physics=refit)
        alone = evaluate_analytic(playbook_subset, "nodes", refit_physics=refit)
        assert alone.refit_physics is refit
        assert alone.n_splits == full.n_splits == 1
        assert pd.Series(alone.metrics).equals(pd.Series(full.analytic_metrics))
        assert alone.analytic_metrics is alone.metrics
        assert full.analytic_predictions is not None
        cols = list(PRED_KEYS)
        pd.testing.assert_frame_equal(alone.predictions[cols], full.analytic_predictions[cols])


def test_analytic_alone_reports_progress_and_refuses_an_empty_protocol(playbook_subset):
    seen: list[tuple[str, int, int]] = []
    evaluate_analytic(playbook_subset, "lomo", progress=lambda s, d, t: seen.append((s, d, t)))
    n = len(np.unique(model_key(playbook_subset)))
    assert [d for _, d, _ in seen] == list(range(n + 1))
    assert {t for _, _, t in seen} == {n}
    one_size = playbook_subset[model_key(playbook_subset) == model_key(playbook_subset)[0]]
    with pytest.raises(DataError, match="no split with both training and test runs"):
        evaluate_analytic(one_size, "lomo")


def test_profile_network_predicts_the_held_out_runs_without_their_measurement(playbook_subset):
    """network="profile" scores each held-out run under its cluster profile's curve alone (no
    net_scale: what a user has before the run), from the same fits as "measured", which is
    the default; the held-out table keeps the runs' own columns."""
    from surrogate.ingest.playbook_network import playbook_runs
    from surrogate.runs.context import as_predicted
    from training.evaluate import analytic_predictions, evaluate_grid

    params = {"status": SMALL, "mfu": SMALL, "mem": SMALL}
    scales = playbook_runs().set_index("run_id")["net_scale"]
    playbook_subset = playbook_subset.assign(net_scale=playbook_subset["run_id"].map(scales))
    grid = evaluate_grid(
        playbook_subset,
        "nodes",
        (None,),
        ("measured", "profile"),
        params=params,
        refit_physics=False,
    )
    measured, profile = grid[None, "measured"], grid[None, "profile"]
    assert (measured.network, profile.network) == ("measured", "profile")
    default = evaluate_protocol(playbook_subset, "nodes", params=params, refit_physics=False)
    assert pd.Series(default.metrics).equals(pd.Series(measured.metrics))
    assert (profile.predictions.index == measured.predictions.index).all()
    test = profile.predictions.index
    runs = playbook_subset.loc[test]
    assert runs["net_scale"].notna().any()
    pd.testing.assert_series_equal(profile.predictions["net_scale"], runs["net_scale"])
    assert profile.analytic_predictions is not None
    expected = analytic_predictions(as_predicted(runs, "profile"))
    pd.testing.assert_frame_equal(
        profile.analytic_predictions[list(PRED_KEYS)], expected[list(PRED_KEYS)]
    )
    assert not profile.predictions["pred_mfu"].equals(measured.predictions["pred_mfu"])
    alone = evaluate_analytic(playbook_subset, "nodes", refit_physics=False, network="profile")
    assert pd.Series(alone.metrics).equals(pd.Series(profile.analytic_metrics))
    with pytest.raises(ValueError, match="network must be one of measured, profile"):
        as_predicted(runs, "median")
