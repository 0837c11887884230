"""The intervals' recalibration per kind of configuration and category: the factors held-out
runs needed, their conformal quantiles with a fallback per category, the same factor at
training (labels from a runs table) and at prediction (codes), and a model that keeps them."""

import copy

import numpy as np
import pandas as pd
import pytest

from surrogate.analytic.inputs import FRAMEWORK_VERSIONS
from surrogate.learned.model import SurrogateModel
from surrogate.learned.recalibration import (
    KINDS,
    Recalibration,
    category_keys,
    factors_for,
    fit_factors,
    fit_recalibration,
    framework_versions,
    kinds_of,
    needed_scale,
    node_bands,
    rescaled,
)
from tests.conftest import same_predictions


def test_needed_scale_is_the_factor_that_just_holds_the_value():
    pred, lo, hi = np.full(5, 0.4), np.full(5, 0.2), np.full(5, 0.8)
    y = np.array([0.4, 0.2, 0.8, 0.1, 0.3])
    k = needed_scale(y, pred, lo, hi)
    np.testing.assert_allclose(k, [0.0, 1.0, 1.0, 2.0, np.log(4 / 3) / np.log(2)])
    new_lo, new_hi = rescaled(pred, lo, hi, k)
    assert np.all((new_lo <= y * (1 + 1e-12)) & (y <= new_hi * (1 + 1e-12)))
    # no width on the value's side: no factor holds it
    assert (
        needed_scale(np.array([0.5]), np.array([0.4]), np.array([0.2]), np.array([0.4]))[0]
        == np.inf
    )


def test_node_bands_cover_every_node_count():
    assert list(node_bands(np.array([1, 2, 6, 8, 31, 32, 127, 128, 4096]))) == [
        "1 node",
        "2-7 nodes",
        "2-7 nodes",
        "8-31 nodes",
        "8-31 nodes",
        "32-127 nodes",
        "32-127 nodes",
        "128+ nodes",
        "128+ nodes",
    ]


def test_factors_fall_back_from_fine_to_coarse_to_pooled():
    rng = np.random.default_rng(0)
    fine = np.array(["a x"] * 20 + ["b x"] * 5 + ["c y"] * 5)
    coarse = np.array(["x"] * 25 + ["y"] * 5)
    needed = np.concatenate([rng.uniform(0, 1, 20), rng.uniform(2, 3, 5), rng.uniform(5, 6, 5)])
    table = fit_factors(needed, fine, coarse, coverage=0.8, min_runs=15)
    assert set(table) == {"", "a x", "x"}
    k = factors_for(table, np.array(["a x", "b x", "c y", "d z"]), np.array(["x", "x", "y", "z"]))
    assert k[0] == table["a x"] and k[1] == table["x"] and k[2] == k[3] == table[""]
    assert table["a x"] < 1 < table["x"]
    assert list(factors_for({}, np.array(["a"]), np.array(["b"]))) == [1.0]


def test_held_out_coverage_is_the_nominal_one_per_category():
    """Exchangeable factors per category, scaled apart: the quantiles fitted on half the
    runs hold about 80% of the other half in every category."""
    rng = np.random.default_rng(1)
    n = 4000
    fine = rng.choice(["u p", "v p", "w q"], n)
    coarse = np.array([f.split()[1] for f in fine])
    scale = np.select([fine == "u p", fine == "v p"], [0.5, 2.0], 8.0)
    needed = scale * rng.exponential(1.0, n)
    table = fit_factors(needed[: n // 2], fine[: n // 2], coarse[: n // 2], coverage=0.8)
    hits = needed[n // 2 :] <= factors_for(table, fine[n // 2 :], coarse[n // 2 :])
    for key in ("u p", "v p", "w q"):
        assert hits[fine[n // 2 :] == key].mean() == pytest.approx(0.8, abs=0.05)


def test_prediction_codes_find_the_factor_training_labels_fitted():
    """A configuration's factor looked up by codes at prediction is the one its runs-table
    labels (framework and version) gave at training."""
    rng = np.random.default_rng(2)
    n = 300
    runs = pd.DataFrame(
        {
            "num_nodes": rng.choice([1, 2, 4, 6, 8, 32, 64, 256], n),
            "pp": rng.choice([1, 2, 4], n),
            "framework": "nanotron",
            "framework_version": rng.choice(["pp-fix", "pre-pp-fix", ""], n),
        }
    )
    names = framework_versions(runs["framework"].to_numpy(), runs["framework_version"].to_numpy())
    assert set(names) == {"nanotron/pp-fix", "nanotron/pre-pp-fix"}
    fine, coarse = category_keys(runs["num_nodes"].to_numpy(), runs["pp"].to_numpy(), names)
    table = fit_factors(rng.exponential(1.0, n), fine, coarse, coverage=0.8, min_runs=10)
    recal = Recalibration(mfu={"inside": table}, memory={})
    codes = np.array([FRAMEWORK_VERSIONS.index(x) for x in names])
    kind = np.array([0] * (n - 10) + [len(KINDS)] * 10)  # inside; an unseen framework
    got = recal.factors("mfu", kind, runs["num_nodes"].to_numpy(), runs["pp"].to_numpy(), codes)
    np.testing.assert_array_equal(got[:-10], factors_for(table, fine, coarse)[:-10])
    assert (got[-10:] == 1.0).all()  # an unseen framework, GPU or cluster: unscaled
    assert (
        recal.factors("memory", kind, runs["num_nodes"].to_numpy(), runs["pp"].to_numpy(), codes)
        == 1.0
    ).all()


def test_kinds_follow_the_domain():
    kind = kinds_of(np.array([0.0, 0.0, 1.5, np.inf]), np.array([False, True, True, False]))
    assert [([*KINDS, ""])[k] for k in kind] == ["inside", "unseen_shape", "beyond", ""]
    assert list(kinds_of(np.zeros(2), None)) == [0, 0]


def _held_out(fitted, playbook_subset, factor):
    """The subset's runs with the model's predictions as a protocol's held-out table, the
    measured MFU moved ``factor`` times the interval's log half-width from the prediction."""
    from surrogate.prediction.scoring import score_runs

    res = playbook_subset.reset_index(drop=True).copy()
    pred = score_runs(res, model=fitted)
    for col in pred.columns:
        res[col] = pred[col].to_numpy()
    done = (res["status"] == "completed") & (res["mfu"] > 0)
    up = np.log(res["pred_mfu_hi"] / res["pred_mfu"])
    res.loc[done, "mfu"] = (res["pred_mfu"] * np.exp(factor * up))[done]
    return res


def test_a_recalibrated_model_widens_as_held_out_runs_needed_and_saves_it(
    fitted, playbook_subset, configs, tmp_path
):
    model = copy.copy(fitted)
    before = model.predict(configs)
    model.recalibrate({"cv": _held_out(model, playbook_subset, 2.0)})
    after = model.predict(configs)
    inside = model.recalibration_.mfu["inside"][""]
    assert inside == pytest.approx(2.0)
    wide = before["pred_mfu_lo"] < before["pred_mfu"]
    assert wide.any()
    np.testing.assert_allclose(
        np.log(after["pred_mfu"] / after["pred_mfu_lo"])[wide],
        2 * np.log(before["pred_mfu"] / before["pred_mfu_lo"])[wide],
    )
    assert set(model.recalibration_.memory) == {"inside"}  # from the runs' own memory
    np.testing.assert_array_equal(after["pred_mfu"], before["pred_mfu"])
    assert (after["pred_mfu_hi"] <= 1.0).all()
    model.save(tmp_path / "m")
    loaded = SurrogateModel.load(tmp_path / "m")
    assert loaded.recalibration_ == model.recalibration_
    same_predictions(after, loaded.predict(configs))
    fitted.save(tmp_path / "plain")  # a model never recalibrated keeps its intervals
    assert SurrogateModel.load(tmp_path / "plain").recalibration_ is None


def test_fit_recalibration_skips_absent_protocols():
    recal = fit_recalibration({})
    assert recal.mfu == {} and recal.memory == {}
    assert Recalibration.from_json(recal.to_json()) == recal


def test_narrowed_intervals_still_hold_the_analytic_answer_where_they_did():
    """A factor under 1 narrows an interval; off the domain (``holds``) it still reaches the
    analytic answer, as before rescaling, and no MFU interval passes the ceiling."""
    recal = Recalibration(mfu={"beyond": {"": 0.1}}, memory={"beyond": {"": 0.1}})
    n = 4
    cols = {"num_nodes": np.full(n, 64.0), "pp": np.ones(n), "framework_code": np.zeros(n)}
    columns = {
        "pred_mfu": np.full(n, 0.4),
        "pred_mfu_lo": np.full(n, 0.2),
        "pred_mfu_hi": np.full(n, 0.78),
        "pred_peak_mem_reserved_gib": np.full(n, 50.0),
        "pred_peak_mem_reserved_lo_gib": np.full(n, 30.0),
        "pred_peak_mem_reserved_hi_gib": np.full(n, 70.0),
    }
    analytic = (np.full(n, 0.25), np.full(n, 65.0))
    holds = np.array([True, True, False, False])
    out = recal.apply(
        columns,
        np.full(n, list(KINDS).index("beyond")),
        cols,
        0.7,
        analytic=analytic,
        holds=(holds, holds),
    )
    assert (out["pred_mfu_lo"][holds] == 0.25).all()
    assert (out["pred_peak_mem_reserved_hi_gib"][holds] == 65.0).all()
    assert (out["pred_mfu_lo"][~holds] > 0.25).all()  # narrowed around the prediction
    assert (out["pred_peak_mem_reserved_hi_gib"][~holds] < 65.0).all()
    assert (out["pred_mfu_hi"] <= 0.7).all()


def test_unknown_networks_take_the_factors_fitted_on_runs_predicted_as_a_user_would(
    fitted, playbook_subset
):
    """``mfu_profile`` (fitted on held-out runs under the profile's curve alone) scales the
    MFU intervals of configurations whose network is not known, ``mfu`` those whose network
    was measured; memory has one table; both survive the JSON round trip."""
    measured = _held_out(fitted, playbook_subset, 1.0)
    recal = fit_recalibration(
        {"cv": measured}, as_predicted={"cv": _held_out(fitted, playbook_subset, 3.0)}
    )
    assert recal.mfu["inside"][""] == pytest.approx(1.0)
    assert recal.mfu_profile["inside"][""] == pytest.approx(3.0)
    assert set(recal.memory) == {"inside"}
    assert Recalibration.from_json(recal.to_json()) == recal
    n = 2
    cols = {"num_nodes": np.full(n, 16.0), "pp": np.ones(n), "framework_code": np.zeros(n)}
    columns = {
        "pred_mfu": np.full(n, 0.4),
        "pred_mfu_lo": np.full(n, 0.2),
        "pred_mfu_hi": np.full(n, 0.6),
        "pred_peak_mem_reserved_gib": np.full(n, 50.0),
        "pred_peak_mem_reserved_lo_gib": np.full(n, 40.0),
        "pred_peak_mem_reserved_hi_gib": np.full(n, 60.0),
    }
    kind = np.full(n, list(KINDS).index("inside"))
    out = recal.apply(
        columns,
        kind,
        cols,
        1.0,
        analytic=(columns["pred_mfu"], columns["pred_peak_mem_reserved_gib"]),
        holds=(np.zeros(n, bool),) * 2,
        network_known=np.array([1.0, 0.0]),
    )
    np.testing.assert_allclose(np.log(0.4 / out["pred_mfu_lo"]), [np.log(2), 3 * np.log(2)])
    older = Recalibration(mfu=recal.mfu, memory=recal.memory)  # saved before: one table
    assert "mfu_profile" not in older.to_json()
    same = older.apply(
        columns,
        kind,
        cols,
        1.0,
        analytic=(columns["pred_mfu"], columns["pred_peak_mem_reserved_gib"]),
        holds=(np.zeros(n, bool),) * 2,
        network_known=np.array([1.0, 0.0]),
    )
    assert same["pred_mfu_lo"][0] == same["pred_mfu_lo"][1]


def test_not_knowing_the_network_never_narrows_an_interval_side():
    """Where the network is unknown the interval also holds what a known network's factors
    give the interval without the spread (``unwidened``), on each side."""
    recal = Recalibration(mfu={"inside": {"": 1.0}}, memory={}, mfu_profile={"inside": {"": 0.5}})
    n = 2
    cols = {"num_nodes": np.full(n, 16.0), "pp": np.ones(n), "framework_code": np.zeros(n)}
    mem = {
        "pred_peak_mem_reserved_gib": np.full(n, 50.0),
        "pred_peak_mem_reserved_lo_gib": np.full(n, 40.0),
        "pred_peak_mem_reserved_hi_gib": np.full(n, 60.0),
    }
    raw = {
        "pred_mfu": np.full(n, 0.4),
        "pred_mfu_lo": np.full(n, 0.3),
        "pred_mfu_hi": np.full(n, 0.5),
        **mem,
    }
    widened = {**raw, "pred_mfu_lo": np.full(n, 0.28), "pred_mfu_hi": np.full(n, 0.9)}
    kind = np.full(n, list(KINDS).index("inside"))
    out = recal.apply(
        widened,
        kind,
        cols,
        1.0,
        analytic=(raw["pred_mfu"], raw["pred_peak_mem_reserved_gib"]),
        holds=(np.zeros(n, bool),) * 2,
        network_known=np.array([1.0, 0.0]),
        unwidened=raw,
    )
    assert out["pred_mfu_lo"][1] == pytest.approx(0.3)  # the known network's side
    assert out["pred_mfu_hi"][1] == pytest.approx(0.4 * np.sqrt(0.9 / 0.4))  # the spread's
    assert out["pred_mfu_hi"][0] == pytest.approx(0.9)  # known: its own factor, 1


def test_runs_the_known_networks_interval_holds_ask_nothing_of_the_unknown_ones():
    from surrogate.learned.recalibration import beyond_known

    needed = np.array([2.0, 3.0, 0.5, 4.0])
    got = beyond_known(needed, np.array([0.9, 1.5, np.nan, 1.0]), np.full(4, 1.0))
    np.testing.assert_array_equal(got, [0.0, 3.0, 0.5, 0.0])
