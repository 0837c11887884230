"""SurrogateModel on a real subset of the Playbook sweep: determinism, persistence, errors,
scikit-learn's estimator conventions, and fitting on training data prepared once."""

from __future__ import annotations

import json

import numpy as np
import pytest

from surrogate.errors import DataError, NoModelError, SurrogateError
from surrogate.learned.boosters import STATUS_CLASSES
from surrogate.learned.domain import DEFAULT_SHRINK_DOUBLINGS, UNSEEN_SHAPE_WEIGHT
from surrogate.learned.features import build_features_cols
from surrogate.learned.intervals import by_framework, stratum_key
from surrogate.learned.model import SurrogateModel
from surrogate.learned.training_data import cell_groups, training_data
from tests.conftest import SMALL_BOOSTERS, same_predictions, small_model


def test_same_data_and_seed_give_identical_predictions(fitted, playbook_subset, configs):
    again = small_model()
    assert again.fit(playbook_subset) is again  # fit returns the model
    same_predictions(fitted.predict(configs), again.predict(configs))
    assert again.data_hash_ == fitted.data_hash_


def test_save_load_round_trip(fitted, configs, tmp_path):
    fitted.metrics_ = {"cv": {"mfu_mape_ge10": 0.1}}
    fitted.save(tmp_path / "m")
    loaded = SurrogateModel.load(tmp_path / "m")
    same_predictions(fitted.predict(configs), loaded.predict(configs))
    assert loaded.metrics_ == {"cv": {"mfu_mape_ge10": 0.1}}
    assert loaded.get_params() == fitted.get_params()
    assert loaded.lightgbm_params == {
        "status": fitted.status_params,
        "mfu": fitted.mfu_params,
        "mem": fitted.mem_params,
    }
    assert not list((tmp_path / "m").glob("*.pkl"))


def test_predictions_are_coherent(fitted, configs):
    p = fitted.predict(configs)
    np.testing.assert_allclose(p["p_completed"] + p["p_oom"] + p["p_fail"], 1.0, atol=1e-9)
    assert set(p["pred_status"]) <= set(STATUS_CLASSES)
    assert (p["pred_mfu_lo"] <= p["pred_mfu"]).all()
    assert (p["pred_mfu"] <= p["pred_mfu_hi"]).all()
    assert (p["pred_mfu_lo"] < p["pred_mfu_hi"]).all()
    assert (p["pred_peak_mem_reserved_gib"] > 0).all() and (p["pred_step_time_s"] > 0).all()
    assert 0 < fitted.mem_conformal_q_ < 1
    assert (p["pred_peak_mem_reserved_lo_gib"] < p["pred_peak_mem_reserved_gib"]).all()
    assert (p["pred_peak_mem_reserved_gib"] < p["pred_peak_mem_reserved_hi_gib"]).all()


def test_unfitted_model_raises_scikit_learns_and_the_projects_error(configs, tmp_path):
    from sklearn.exceptions import NotFittedError as SklearnNotFittedError
    from sklearn.utils.validation import check_is_fitted

    from surrogate.learned.model import NotFittedError

    assert issubclass(NotFittedError, SklearnNotFittedError)
    assert issubclass(NotFittedError, NoModelError) and issubclass(NotFittedError, SurrogateError)
    model = SurrogateModel()
    X, out, cols = build_features_cols(configs[:2])
    for call in (
        lambda: model.predict([]),
        lambda: model.predict_from_features(X, out, cols),
        lambda: model.explain(X),
        lambda: model.save(tmp_path / "m"),
    ):
        with pytest.raises(NotFittedError, match="not fitted: call fit"):
            call()
    with pytest.raises(SklearnNotFittedError):
        check_is_fitted(model)
    assert not (tmp_path / "m").exists()


def test_fitted_model_passes_scikit_learns_check(fitted):
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(fitted)


def test_get_params_round_trips_and_clone_gives_an_unfitted_copy(fitted):
    from sklearn.base import clone

    params = fitted.get_params()
    assert params == {
        "status_params": SMALL_BOOSTERS,
        "mfu_params": SMALL_BOOSTERS,
        "mem_params": SMALL_BOOSTERS,
        "coverage": 0.8,
        "n_folds": 5,
        "seed": 3,
        "shrink_doublings": DEFAULT_SHRINK_DOUBLINGS,
        "unseen_shape_weight": UNSEEN_SHAPE_WEIGHT,
        "balance_sources": True,
        "censored_memory": True,
    }
    assert SurrogateModel(**params).get_params() == params
    copy = clone(fitted)
    assert type(copy) is SurrogateModel and copy.get_params() == params
    assert not hasattr(copy, "status_model_") and not hasattr(copy, "conformal_q_")
    changed = SurrogateModel().set_params(seed=7, coverage=0.9)
    assert changed.seed == 7 and changed.coverage == 0.9
    assert repr(changed) == "SurrogateModel(coverage=0.9, seed=7)"
    with pytest.raises(ValueError, match="no setting 'n_trees'; its settings are status_params"):
        SurrogateModel().set_params(n_trees=3)


def test_fit_takes_no_separate_targets(playbook_subset):
    with pytest.raises(DataError, match="y must be None: the targets are the runs' own columns"):
        small_model().fit(playbook_subset, playbook_subset["tokens_per_s_per_gpu"])


def test_fit_on_prepared_data_is_fit_on_the_table(fitted, playbook_subset, configs):
    data = training_data(playbook_subset)
    again = small_model().fit(data)
    same_predictions(fitted.predict(configs), again.predict(configs))
    assert again.data_hash_ == fitted.data_hash_
    with pytest.raises(ValueError, match="profile must be None when X is a TrainingData"):
        small_model().fit(data, profile="other.json")


def test_missing_directory_raises(tmp_path):
    with pytest.raises(NoModelError, match=r"model\.json missing"):
        SurrogateModel.load(tmp_path / "nowhere")


def test_broken_sidecars_raise(fitted, tmp_path):
    d = fitted.save(tmp_path / "m")
    side = d / "model.json"
    meta = json.loads(side.read_text())
    side.write_text(json.dumps(meta | {"format": "other/9"}))
    with pytest.raises(DataError, match="format must be"):
        SurrogateModel.load(d)
    side.write_text(json.dumps(meta | {"feature_names": ["a", "b"]}))
    with pytest.raises(DataError, match="other features"):
        SurrogateModel.load(d)
    side.write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        SurrogateModel.load(d)
    side.write_text(json.dumps(meta))
    (d / "mem.txt").unlink()
    with pytest.raises(DataError, match=r"mem\.txt missing"):
        SurrogateModel.load(d)


def test_feature_mismatch_raises(fitted, configs):
    X, out, cols = build_features_cols(configs)
    with pytest.raises(DataError, match="features do not match"):
        fitted.predict_from_features(X[list(X.columns)[::-1]], out, cols)


def test_bad_training_tables_raise(playbook_subset):
    with pytest.raises(DataError, match="empty"):
        small_model().fit(playbook_subset.iloc[:0])
    bad = playbook_subset.copy()
    bad.loc[0, "status"] = "crashed"
    with pytest.raises(DataError, match="status must be one of"):
        small_model().fit(bad)
    with pytest.raises(DataError, match="completed runs"):
        small_model().fit(playbook_subset[playbook_subset["status"] != "completed"].head(50))
    cells = cell_groups(playbook_subset)
    biggest = playbook_subset[cells == max(set(cells), key=list(cells).count)]
    model = small_model()
    with pytest.raises(DataError, match=r"at least two \(model, nodes\) cells"):
        model.fit(biggest)
    assert not model.__sklearn_is_fitted__()  # refused before anything was fitted


def test_unseen_framework_falls_back_to_the_analytic_answer(fitted, configs):
    """Off its data the learned prediction is the physics, widened and labelled."""
    from dataclasses import replace

    from surrogate.analytic.params import DEFAULT_SET, ParameterSets
    from surrogate.calibration.parameter_files import shipped_parameter_sets

    titan = [
        replace(
            c,
            layout=replace(c.layout, framework="torchtitan", framework_version=None, zero_stage=0),
        )  # torchtitan has no ZeRO-1
        for c in configs[:5]
    ]
    sets = ParameterSets(
        {k: v for k, v in shipped_parameter_sets().sets.items() if k != DEFAULT_SET}
    )  # no default set, so no measured transfer error
    X, out, cols = build_features_cols(titan, sets=sets)
    pred = fitted.predict_from_features(X, out, cols, sets=sets)
    assert (pred["domain_weight"] == 0).all()
    assert pred["pred_mfu"] == pytest.approx(out["mfu"])
    assert (pred["pred_mfu_lo"] <= out["mfu"]).all() and (out["mfu"] <= pred["pred_mfu_hi"]).all()
    mem = out["mem_reserved"] / 2**30
    assert pred["pred_peak_mem_reserved_gib"] == pytest.approx(mem)
    # the memory interval widens by 1 + the distance (at most 5x) around the physics
    half = np.log(pred["pred_peak_mem_reserved_hi_gib"] / mem)
    np.testing.assert_allclose(half, np.log(mem / pred["pred_peak_mem_reserved_lo_gib"]))
    assert (half > fitted.mem_conformal_q_).all()
    assert (half <= 5 * fitted.mem_conformal_q_ * (1 + 1e-9)).all()  # the cap may bind
    assert all("framework torchtitan/main never seen" in r for r in pred["extrapolation"])
    inside = fitted.predict_from_features(*build_features_cols(configs[:5]))
    assert (inside["domain_weight"] == 1).all() and not any(inside["extrapolation"])


def test_an_unseen_framework_takes_the_width_transfer_measured(fitted, configs):
    """Where the default set carries the error measured on held-out frameworks and clusters,
    an unseen framework's interval is the physics times / divided by it, and no MFU interval
    passes the hardware's ceiling."""
    from dataclasses import replace

    from surrogate.analytic.params import DEFAULT_SET
    from surrogate.calibration.parameter_files import shipped_parameter_sets

    titan = [
        replace(
            c,
            layout=replace(c.layout, framework="torchtitan", framework_version=None, zero_stage=0),
        )
        for c in configs[:5]
    ]
    default = {"values": {}, "transfer": {"log_tps": 0.3, "log_memory": 0.1}}
    sets = shipped_parameter_sets().with_more({DEFAULT_SET: default})
    X, out, cols = build_features_cols(titan, sets=sets)
    pred = fitted.predict_from_features(X, out, cols, sets=sets)
    np.testing.assert_allclose(pred["pred_mfu_lo"], out["mfu"] * np.exp(-0.3))
    np.testing.assert_allclose(
        pred["pred_mfu_hi"], np.minimum(out["mfu"] * np.exp(0.3), out["mfu_ceiling"])
    )
    mem = out["mem_reserved"] / 2**30
    np.testing.assert_allclose(pred["pred_peak_mem_reserved_hi_gib"], mem * np.exp(0.1))
    np.testing.assert_allclose(pred["pred_peak_mem_reserved_lo_gib"], mem * np.exp(-0.1))
    assert (pred["pred_mfu_hi"] <= np.maximum(out["mfu_ceiling"], pred["pred_mfu"])).all()


def test_rows_off_the_domain_skip_boosters_without_changing_any_row(fitted, configs):
    """Where the domain weight is 0 the status and memory boosters are not run; a batch that
    mixes such rows with rows on the domain gives every row what it gets in its own batch."""
    from dataclasses import replace

    titan = [
        replace(
            c,
            layout=replace(c.layout, framework="torchtitan", framework_version=None, zero_stage=0),
        )
        for c in configs[:6]
    ]
    mixed = [c for pair in zip(configs[:6], titan, strict=True) for c in pair]
    pred = fitted.predict_from_features(*build_features_cols(mixed))
    inside = fitted.predict_from_features(*build_features_cols(configs[:6]))
    X, out, cols = build_features_cols(titan)
    outside = fitted.predict_from_features(X, out, cols)
    assert (outside["domain_weight"] == 0).all() and (inside["domain_weight"] > 0).all()
    for k in pred:
        for part, rows in ((inside, slice(0, None, 2)), (outside, slice(1, None, 2))):
            if pred[k].dtype == object:
                assert list(pred[k][rows]) == list(part[k]), k
            else:
                np.testing.assert_allclose(pred[k][rows], part[k], rtol=1e-12, err_msg=k)
    assert outside["p_oom"] == pytest.approx(out["p_oom"])  # the physics' own
    assert (outside["p_fail"] == 0).all()
    assert outside["pred_peak_mem_reserved_gib"] == pytest.approx(out["mem_reserved"] / 2**30)


def test_sample_weight_must_match_the_runs(playbook_subset):
    with pytest.raises(DataError, match="one positive number per run"):
        SurrogateModel().fit(playbook_subset, sample_weight=np.ones(3))


def test_learned_correction_never_passes_100_percent_mfu(fitted, configs):
    X, out, cols = build_features_cols(configs)
    unbounded = fitted.predict_from_features(X, out, cols)["pred_mfu"] / out["mfu"]
    assert (unbounded > 1.001).any()  # corrections that raise the analytic answer exist
    # where the correction raises, put the analytic MFU just below 100% / correction: the
    # corrected MFU would reach 100.1% and must stop at 100%
    near_mfu = np.where(unbounded > 1.001, np.minimum(1.0, 1.001 / unbounded), 0.5)
    near = {**out, "mfu": near_mfu}
    pred = fitted.predict_from_features(X, near, cols)
    raised = pred["pred_tokens_per_s_per_gpu"] / out["tokens_per_s_per_gpu"]
    assert (pred["pred_mfu"] <= 1 + 1e-12).all()
    assert np.isclose(pred["pred_mfu"], 1.0)[unbounded > 1.001].all()
    np.testing.assert_allclose(pred["pred_mfu"], near_mfu * raised)  # throughput bounded alike
    assert (pred["pred_mfu_lo"] <= pred["pred_mfu"]).all()


def test_a_certain_oom_keeps_the_physics_status(fitted, configs):
    """Where the analytic p_oom reaches CERTAIN_P_OOM the classifier is not consulted: the
    status is the physics' (oom), and the other rows are what they were."""
    from surrogate.learned.blend import CERTAIN_P_OOM

    X, out, cols = build_features_cols(configs)
    base = fitted.predict_from_features(X, out, cols)
    # the rows the classifier calls completed, most confidently first
    done = np.flatnonzero(base["pred_status"] == "completed")[:5]
    assert len(done) == 5
    forced = out["p_oom"].copy()
    forced[done] = CERTAIN_P_OOM
    pred = fitted.predict_from_features(X, {**out, "p_oom": forced}, cols)
    assert list(pred["pred_status"][done]) == ["oom"] * 5
    np.testing.assert_allclose(pred["p_oom"][done], CERTAIN_P_OOM)
    assert (pred["p_fail"][done] == 0).all()
    rest = np.setdiff1d(np.arange(len(configs)), done)
    for k in ("p_oom", "p_fail", "pred_mfu", "pred_peak_mem_reserved_gib"):
        np.testing.assert_allclose(pred[k][rest], base[k][rest], rtol=1e-12, err_msg=k)
    np.testing.assert_allclose(pred["pred_mfu"], base["pred_mfu"], rtol=1e-12)


def test_memory_correction_reads_runs_out_of_memory_as_censored():
    """Synthetic runs (generated here) where the physics is right: the need is the analytic
    estimate times noise, and a run whose need passes the capacity runs out of memory. Fitted
    on the survivors alone the correction learns "less memory past the capacity" (those that
    fit are the ones the estimate over-stated), so the predicted memory falls where the
    estimate crosses the capacity; with the runs out of memory as censored targets it stays
    near the physics and rises with the estimate."""
    import pandas as pd

    from surrogate.learned.boosters import fit_memory

    rng = np.random.default_rng(0)
    frac = rng.uniform(0.3, 3.0, 3000)  # analytic estimate / capacity
    noise = rng.normal(0.0, 0.1, frac.size)
    oom = frac * np.exp(noise) > 1.0
    X = pd.DataFrame({"framework_code": np.zeros(frac.size), "mem_reserved_frac": frac})
    y = np.where(oom, np.nan, noise)
    floor = np.where(oom, -np.log(frac), np.nan)
    grid = np.linspace(0.3, 3.0, 55)
    at = pd.DataFrame({"framework_code": np.zeros(grid.size), "mem_reserved_frac": grid})
    near = (grid > 0.95) & (grid < 1.3)
    settings = {**SMALL_BOOSTERS, "min_child_samples": 20, "verbose": -1}

    survivors = fit_memory(X, y, ~oom, np.full(frac.size, np.nan), np.ones(frac.size), settings)
    assert survivors.predict(at)[near].mean() < -0.1
    censored = fit_memory(X, y, ~oom, floor, np.ones(frac.size), settings)
    correction = censored.predict(at)
    assert abs(correction[near].mean()) < 0.05 and abs(correction[grid > 1.5]).max() < 0.05
    memory = grid * np.exp(correction)
    assert (np.diff(memory) > -0.02).all()


def test_status_init_score_is_the_physics_log_probabilities():
    from scipy.special import expit, softmax

    from surrogate.learned.boosters import status_init_score

    p_oom = np.array([0.0, 0.3, 0.9, 1.0])
    po = np.clip(p_oom, 1e-4, 1 - 1e-4)
    three = softmax(status_init_score(p_oom, 0.1, [0, 1, 2]), axis=1)
    np.testing.assert_allclose(three, np.column_stack([(1 - po) * 0.9, po * 0.9, np.full(4, 0.1)]))
    np.testing.assert_allclose(expit(status_init_score(p_oom, 0.1, [0, 1])), po)


def test_a_status_model_that_learned_nothing_is_the_physics(playbook_subset, configs):
    """The status classifier is boosted from the analytic verdict: with a learning rate of
    nothing its p_oom is the analytic p_oom times the share of runs that did not fail
    otherwise (inside the domain, where w = 1), and the physics' own where it is certain."""
    from surrogate.learned.blend import CERTAIN_P_OOM
    from surrogate.prediction.scoring import score

    still = SurrogateModel(
        status_params={**SMALL_BOOSTERS, "learning_rate": 1e-9},
        mfu_params=SMALL_BOOSTERS,
        mem_params=SMALL_BOOSTERS,
        seed=3,
    )
    still.fit(playbook_subset)
    assert still.status_fail_rate_ == pytest.approx(
        np.mean(playbook_subset["status"].isin(["fail", "timeout"])), rel=0.2
    )
    learned = score(configs, model=still, agree=False)  # the classifier's own p_oom
    analytic = score(configs, model=None)
    physics = analytic.columns["p_oom"]
    p = np.where(
        physics >= CERTAIN_P_OOM,
        physics,
        np.clip(physics, 1e-4, 1 - 1e-4) * (1 - still.status_fail_rate_),
    )
    np.testing.assert_allclose(learned.columns["p_oom"], p, atol=1e-6)


def test_a_model_saved_before_the_physics_start_still_loads(fitted, configs, tmp_path):
    """Sidecars written before the status model's start have no failure share: their
    boosters' own probabilities are used."""
    fitted.save(tmp_path / "m")
    side = tmp_path / "m" / "model.json"
    meta = json.loads(side.read_text())
    assert 0 < meta.pop("status_fail_rate") < 1
    from surrogate.learned.model_files import write_sidecar

    write_sidecar(
        tmp_path / "m",
        {k: v for k, v in meta.items() if k not in ("file_sha256", "sidecar_sha256")},
    )
    old = SurrogateModel.load(tmp_path / "m")
    assert old.status_fail_rate_ is None
    p = old.predict(configs)
    np.testing.assert_allclose(p["p_completed"] + p["p_oom"] + p["p_fail"], 1.0, atol=1e-9)


def test_a_model_saved_before_the_memory_interval_loads_without_one(fitted, configs, tmp_path):
    """Sidecars written before the memory had an interval load with NaN bounds (and as fitted
    on the completed runs alone), the rest of their predictions unchanged."""
    from surrogate.learned.model_files import write_sidecar

    fitted.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta.pop("mem_conformal_q") > 0 and meta.pop("censored_memory") is True
    meta.pop("mem_conformal_q_unseen_shape")
    meta.pop("conformal_q_by_framework")
    meta.pop("mem_conformal_q_by_framework")
    write_sidecar(
        tmp_path / "m",
        {k: v for k, v in meta.items() if k not in ("file_sha256", "sidecar_sha256")},
    )
    old = SurrogateModel.load(tmp_path / "m")
    assert np.isnan(old.mem_conformal_q_) and old.censored_memory is False
    p, now = old.predict(configs), fitted.predict(configs)
    assert np.isnan(p["pred_peak_mem_reserved_lo_gib"]).all()
    assert np.isnan(p["pred_peak_mem_reserved_hi_gib"]).all()
    np.testing.assert_array_equal(
        p["pred_peak_mem_reserved_gib"], now["pred_peak_mem_reserved_gib"]
    )


def test_an_unseen_shape_gets_the_memory_width_of_shapes_held_out(fitted, configs):
    """A model shape no training run had gets the memory interval of the folds that held
    shapes out (never narrower than a seen shape's); a model without that width (saved before
    it, or trained on too few shapes) keeps the seen-shape width."""
    import copy
    from dataclasses import replace

    seen = configs[:5]
    # 24 layers of the 1.34G's width: between the subset's two sizes, a shape it never had
    unseen = [replace(c, model=replace(c.model, num_layers=24)) for c in seen]

    def half_widths(model: SurrogateModel, cfgs: list) -> np.ndarray:
        X, out, cols = build_features_cols(cfgs)
        pred = model.predict_from_features(X, out, cols)
        assert (pred["domain_weight"] > 0).all()
        return np.log(pred["pred_peak_mem_reserved_hi_gib"] / pred["pred_peak_mem_reserved_gib"])

    # the subset's two shapes: each held out lies beyond the other's range, so no width
    assert np.isnan(fitted.mem_conformal_q_unseen_shape_)
    seen_cols = build_features_cols(seen)[2]
    q = by_framework(
        fitted.mem_conformal_q_by_framework_,
        fitted.mem_conformal_q_,
        seen_cols["framework_code"],
        seen_cols["pp"],
    )  # a seen shape's
    np.testing.assert_allclose(half_widths(fitted, unseen), q)
    wide = 3 * q.max()
    for q_unseen, expect in ((wide, wide), (q.min() / 2, q)):
        model = copy.copy(fitted)
        model.mem_conformal_q_unseen_shape_ = q_unseen
        np.testing.assert_allclose(half_widths(model, unseen), expect)
        np.testing.assert_allclose(half_widths(model, seen), q)


def test_the_memory_interval_widens_by_each_frameworks_own_quantile(fitted, configs):
    import copy

    X, out, cols = build_features_cols(configs[:20])
    assert set(fitted.domain_.frameworks) <= set(fitted.mem_conformal_q_by_framework_)
    pooled_model = copy.copy(fitted)
    pooled_model.mem_conformal_q_by_framework_ = {}  # as loaded from a sidecar before them
    base = fitted.predict_from_features(X, out, cols)
    pooled = pooled_model.predict_from_features(X, out, cols)
    own = by_framework(
        fitted.mem_conformal_q_by_framework_, -1.0, cols["framework_code"], cols["pp"]
    )
    assert (own > 0).all()
    np.testing.assert_allclose(
        np.log(base["pred_peak_mem_reserved_hi_gib"] / base["pred_peak_mem_reserved_gib"]), own
    )
    np.testing.assert_allclose(
        np.log(pooled["pred_peak_mem_reserved_hi_gib"] / pooled["pred_peak_mem_reserved_gib"]),
        fitted.mem_conformal_q_,
    )


def test_the_unseen_shape_width_is_fitted_on_shapes_between_the_others(playbook_runs, tmp_path):
    """With four model sizes, the middle two held out lie inside the others' ranges and give
    the unseen-shape width (it needs two such folds), which the sidecar keeps."""
    four = playbook_runs[playbook_runs["hidden_size"].isin([2048, 3072, 4096, 8192])]
    model = small_model().fit(four.sample(500, random_state=1).reset_index(drop=True))
    assert 0 < model.mem_conformal_q_unseen_shape_ < 1
    model.save(tmp_path / "m")
    loaded = SurrogateModel.load(tmp_path / "m")
    assert loaded.mem_conformal_q_unseen_shape_ == model.mem_conformal_q_unseen_shape_


def test_the_mfu_interval_widens_by_each_frameworks_own_quantile():
    """Mondrian conformal: each framework version with enough runs (4 at 80%) gets the
    conformal quantile of its own runs' scores; one with fewer keeps the pooled one."""
    from surrogate.analytic.inputs import FRAMEWORK_VERSIONS
    from surrogate.learned.intervals import conformal_quantile, framework_quantiles

    rng = np.random.default_rng(0)  # synthetic conformity scores
    codes = np.array([0] * 50 + [1] * 10 + [2] * 3)
    scores = np.concatenate(
        [rng.uniform(0, 0.1, 50), rng.uniform(0.5, 1.0, 10), rng.uniform(2, 3, 3)]
    )
    q = framework_quantiles(scores, codes, 0.8)
    assert set(q) == {FRAMEWORK_VERSIONS[0], FRAMEWORK_VERSIONS[1]}
    assert q[FRAMEWORK_VERSIONS[0]] == conformal_quantile(scores[:50], 0.8) < 0.1
    assert 0.5 < q[FRAMEWORK_VERSIONS[1]] == conformal_quantile(scores[50:60], 0.8)
    assert len(framework_quantiles(scores[:4], codes[:4], 0.8)) == 1  # 4 runs suffice


def test_runs_with_and_without_a_pipeline_get_their_own_quantiles():
    """Mondrian per framework version and pipeline or none: a category of 4 runs or more has
    its own quantile; a configuration of a smaller one reads its version's, else the pooled."""
    from surrogate.analytic.inputs import FRAMEWORK_VERSIONS
    from surrogate.learned.intervals import conformal_quantile, framework_quantiles

    rng = np.random.default_rng(1)  # synthetic conformity scores
    codes = np.array([0] * 60 + [1] * 6)
    pp = np.array([1] * 20 + [4] * 40 + [1] * 3 + [2] * 3)
    scores = np.concatenate(
        [rng.uniform(0.5, 1.0, 20), rng.uniform(0, 0.1, 40), rng.uniform(0, 1, 6)]
    )
    q = framework_quantiles(scores, codes, 0.8, pp)
    first, second = FRAMEWORK_VERSIONS[0], FRAMEWORK_VERSIONS[1]
    assert set(q) == {first, stratum_key(first, False), stratum_key(first, True), second}
    assert q[stratum_key(first, False)] == conformal_quantile(scores[:20], 0.8) > 0.5
    assert q[stratum_key(first, True)] == conformal_quantile(scores[20:60], 0.8) < 0.1
    got = by_framework(q, -1.0, np.array([0, 0, 1, 1, 2]), np.array([1, 8, 1, 2, 1]))
    np.testing.assert_array_equal(
        got, [q[stratum_key(first, False)], q[stratum_key(first, True)], q[second], q[second], -1.0]
    )
    # without pp, the framework versions' quantiles alone
    np.testing.assert_array_equal(by_framework(q, -1.0, np.array([0, 1])), [q[first], q[second]])


def test_predictions_read_their_frameworks_widening(fitted, configs):
    """The fitted model's own per-framework widenings, against the pooled one for all."""
    import copy

    from surrogate.analytic.inputs import FRAMEWORK_VERSIONS

    X, out, cols = build_features_cols(configs[:20])
    names = [FRAMEWORK_VERSIONS[int(c)] for c in cols["framework_code"]]
    assert set(names) <= set(fitted.conformal_q_by_framework_)
    assert {stratum_key(n, p > 1) for n, p in zip(names, cols["pp"], strict=True)} <= set(
        fitted.conformal_q_by_framework_
    )
    own = np.array(
        [
            fitted.conformal_q_by_framework_[stratum_key(n, p > 1)]
            for n, p in zip(names, cols["pp"], strict=True)
        ]
    )
    assert (own != fitted.conformal_q_).all()
    base = fitted.predict_from_features(X, out, cols)
    pooled_model = copy.copy(fitted)
    pooled_model.conformal_q_by_framework_ = {}  # as loaded from a sidecar before them
    pooled = pooled_model.predict_from_features(X, out, cols)
    free = (base["pred_mfu_hi"] < 1) & (pooled["pred_mfu_hi"] < 1)  # not capped at 100%
    assert free.any()
    np.testing.assert_allclose(
        np.log(base["pred_mfu_hi"] / pooled["pred_mfu_hi"])[free],
        (own - fitted.conformal_q_)[free],
        atol=1e-9,
    )
    np.testing.assert_array_equal(base["pred_mfu"], pooled["pred_mfu"])


def _mpt_runs():
    from surrogate.ingest.llmfoundry import parse_llmfoundry
    from surrogate.io.datasource import data_dir

    path = data_dir() / "sweeps/llmfoundry_mpt/benchmarking_README.md"
    if not path.exists():
        pytest.skip(f"the shared MPT tables are absent ({path})")
    return parse_llmfoundry(path)[0]


def test_a_users_framework_gets_its_physics_fitted_and_carried(playbook_subset, tmp_path):
    """Runs of a framework without shipped parameters (llm-foundry) calibrate its physics
    before the correction learns; the model carries those parameters, saved and loaded, and
    predicts under them."""
    import pandas as pd

    from surrogate.calibration.parameter_files import shipped_parameter_sets
    from surrogate.prediction.scoring import score_runs

    mine = _mpt_runs().sample(40, random_state=0)
    data = training_data(pd.concat([playbook_subset, mine], ignore_index=True))
    (version,) = data.physics_sets  # the Playbook's versions ship theirs
    assert version not in shipped_parameter_sets()
    assert data.take(np.arange(10)).physics_sets == data.physics_sets
    model = small_model().fit(data)
    assert model.physics_sets_ == data.physics_sets
    model.save(tmp_path / "m")
    loaded = SurrogateModel.load(tmp_path / "m")
    assert loaded.physics_sets_ == model.physics_sets_
    sets = shipped_parameter_sets().with_more(model.physics_sets_)
    calibrated = score_runs(mine, sets=sets)["pred_mfu"].to_numpy()  # the analytic model alone
    np.testing.assert_allclose(score_runs(mine, model=loaded)["analytic_mfu"], calibrated)
    assert not np.allclose(score_runs(mine)["pred_mfu"], calibrated)
    # without them (own_physics=False, or the runs of shipped versions alone) none is carried
    assert training_data(playbook_subset).physics_sets == {}
    assert training_data(mine, own_physics=False).physics_sets == {}
    from surrogate.prediction.predict import DEFAULT_MODEL_DIR

    assert SurrogateModel.load(DEFAULT_MODEL_DIR).physics_sets_ == {}  # Playbook runs alone


def test_a_correction_its_frameworks_held_out_runs_do_not_bear_out_gives_way():
    """framework_weights: the least-squares share of the out-of-fold correction, in [0, 1];
    at 0 the prediction is the physics', its interval holding it and the learned one."""

    from surrogate.analytic.inputs import FRAMEWORK_VERSIONS
    from surrogate.learned.intervals import framework_weights

    rng = np.random.default_rng(2)  # synthetic corrections
    oof = rng.normal(0, 0.3, 60)
    y = np.concatenate(
        [
            0.6 * oof[:20],  # borne out in part: better than none, kept whole
            rng.normal(0, 0.3, 20),  # unrelated: worse than none, gives way
            0.3 * oof[40:],
        ]
    )  # over-corrected: its least-squares share, 0.3
    w = framework_weights(y, oof, np.repeat([0, 1, 2], 20))
    assert w[FRAMEWORK_VERSIONS[0]] == 1.0
    assert w[FRAMEWORK_VERSIONS[1]] < 0.5
    assert w[FRAMEWORK_VERSIONS[2]] == pytest.approx(0.3)
    assert framework_weights(-oof, oof, np.zeros(60)) == {FRAMEWORK_VERSIONS[0]: 0.0}
    assert framework_weights(y[:3], oof[:3], np.zeros(3)) == {}  # too few runs: none


def test_predictions_give_way_where_the_correction_was_not_borne_out(fitted, configs):
    import copy

    X, out, cols = build_features_cols(configs[:20])
    full = fitted.predict_from_features(X, out, cols)
    assert (full["domain_weight"] == 1).any()
    none = copy.copy(fitted)
    none.correction_weight_by_framework_ = {k: 0.0 for k in fitted.domain_.frameworks}
    p = none.predict_from_features(X, out, cols)
    np.testing.assert_allclose(p["pred_mfu"], out["mfu"])
    assert (p["pred_mfu_lo"] <= p["pred_mfu"]).all() and (p["pred_mfu"] <= p["pred_mfu_hi"]).all()
    assert (p["pred_mfu_lo"] <= full["pred_mfu"] + 1e-12).all()
    assert (full["pred_mfu"] <= p["pred_mfu_hi"] + 1e-12).all()
    assert set(fitted.correction_weight_by_framework_) == set(fitted.domain_.frameworks)
