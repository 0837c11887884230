"""SurrogateModel on a real subset of the Playbook sweep: determinism, persistence, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from surrogate.config import config_from_flat
from surrogate.errors import DataError, NoModelError
from surrogate.features import build_features_cols
from surrogate.learned import STATUS_CLASSES, SurrogateModel, cell_groups

SMALL = {"n_estimators": 20, "num_leaves": 15}  # fast fits


def _model():
    return SurrogateModel(status_params=SMALL, mfu_params=SMALL, mem_params=SMALL, seed=3)


@pytest.fixture(scope="module")
def fitted(playbook_subset):
    assert len(np.unique(cell_groups(playbook_subset))) >= 2
    return _model().fit(playbook_subset)


@pytest.fixture(scope="module")
def configs(playbook_subset):
    return [config_from_flat(r) for r in playbook_subset.head(60).to_dict("records")]


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if a[k].dtype == object:
            assert list(a[k]) == list(b[k]), k
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_same_data_and_seed_give_identical_predictions(fitted, playbook_subset, configs):
    again = _model().fit(playbook_subset)
    _same(fitted.predict(configs), again.predict(configs))
    assert again.data_hash_ == fitted.data_hash_


def test_save_load_round_trip(fitted, configs, tmp_path):
    fitted.metrics_ = {"cv": {"mfu_mape_ge10": 0.1}}
    fitted.save(tmp_path / "m")
    loaded = SurrogateModel.load(tmp_path / "m")
    _same(fitted.predict(configs), loaded.predict(configs))
    assert loaded.metrics_ == {"cv": {"mfu_mape_ge10": 0.1}}
    assert loaded.status_params == SMALL and loaded.seed == 3
    assert not list((tmp_path / "m").glob("*.pkl"))


def test_predictions_are_coherent(fitted, configs):
    p = fitted.predict(configs)
    np.testing.assert_allclose(p["p_completed"] + p["p_oom"] + p["p_fail"], 1.0, atol=1e-9)
    assert set(p["pred_status"]) <= set(STATUS_CLASSES)
    assert (p["pred_mfu_lo"] <= p["pred_mfu"]).all()
    assert (p["pred_mfu"] <= p["pred_mfu_hi"]).all()
    assert (p["pred_mfu_lo"] < p["pred_mfu_hi"]).all()
    assert (p["pred_peak_mem_gib"] > 0).all() and (p["pred_step_time_s"] > 0).all()


def test_unfitted_model_raises():
    with pytest.raises(NoModelError, match="not fitted"):
        SurrogateModel().predict([])


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
        _model().fit(playbook_subset.iloc[:0])
    bad = playbook_subset.copy()
    bad.loc[0, "status"] = "crashed"
    with pytest.raises(DataError, match="status must be one of"):
        _model().fit(bad)
    with pytest.raises(DataError, match="completed runs"):
        _model().fit(playbook_subset[playbook_subset["status"] != "completed"].head(50))


def test_unseen_framework_falls_back_to_the_analytic_answer(fitted, configs):
    """Off its data the learned prediction is the physics, widened and labelled."""
    from dataclasses import replace

    titan = [replace(c, layout=replace(c.layout, framework="torchtitan", framework_version=None))
             for c in configs[:5]]
    X, out, cols = build_features_cols(titan)
    pred = fitted.predict_from_features(X, out, cols)
    assert (pred["domain_weight"] == 0).all()
    assert pred["pred_mfu"] == pytest.approx(out["mfu"])
    assert (pred["pred_mfu_lo"] <= out["mfu"]).all() and (out["mfu"] <= pred["pred_mfu_hi"]).all()
    assert all("framework torchtitan/main never seen" in r for r in pred["extrapolation"])
    inside = fitted.predict_from_features(*build_features_cols(configs[:5]))
    assert (inside["domain_weight"] == 1).all() and not any(inside["extrapolation"])


def test_source_weights_balance_sources():
    import pandas as pd

    from surrogate.learned import source_weights

    runs = pd.DataFrame({"source": ["a"] * 6 + ["b"] * 2})
    assert source_weights(runs).tolist() == [1.0] * 6 + [3.0, 3.0]
    assert source_weights(runs.head(6)).tolist() == [1.0] * 6


def test_sample_weight_must_match_the_runs(playbook_subset):
    with pytest.raises(DataError, match="one positive number per run"):
        SurrogateModel().fit(playbook_subset, sample_weight=np.ones(3))


def _damage(path, how):
    text = path.read_text()
    if how == "truncate":
        path.write_text(text[: len(text) // 3])
    else:  # one leaf value edited, the file still parses
        start = text.index("leaf_value=") + len("leaf_value=")
        path.write_text(text[:start] + "9" + text[start:])


@pytest.mark.parametrize(("name", "how"), [("status.txt", "truncate"), ("mfu.txt", "truncate"),
                                           ("mfu.txt", "edit a leaf")])
def test_damaged_model_files_are_refused_before_lightgbm_reads_them(fitted, tmp_path, name, how):
    """A truncated status.txt used to segfault and a truncated mfu.txt abort LightGBM; an
    edited leaf changed the MFU silently."""
    d = fitted.save(tmp_path / "m")
    _damage(d / name, how)
    with pytest.raises(DataError, match=rf"model file .*{name} is damaged: its sha256 differs"):
        SurrogateModel.load(d)


def test_edited_sidecar_is_refused(fitted, tmp_path):
    d = fitted.save(tmp_path / "m")
    meta = json.loads((d / "model.json").read_text())
    (d / "model.json").write_text(json.dumps(meta | {"conformal_q": 0.0}))
    with pytest.raises(DataError, match=r"model\.json was changed after the model was saved"):
        SurrogateModel.load(d)


def test_sidecar_without_hashes_is_refused_until_vouched_for(fitted, configs, tmp_path):
    from surrogate.learned import record_hashes

    d = fitted.save(tmp_path / "m")
    meta = json.loads((d / "model.json").read_text())
    del meta["file_sha256"], meta["sidecar_sha256"]
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"records no sha256 of the model files .* retrain"):
        SurrogateModel.load(d)
    record_hashes(d)
    _same(fitted.predict(configs), SurrogateModel.load(d).predict(configs))


def test_bundled_model_files_match_their_hashes():
    from surrogate.learned import verified_texts
    from surrogate.prediction import DEFAULT_MODEL_DIR

    side = DEFAULT_MODEL_DIR / "model.json"
    if not side.exists():
        pytest.skip("no bundled model")
    assert set(verified_texts(DEFAULT_MODEL_DIR, json.loads(side.read_text()))) == {
        "status", "mfu", "mfu_lo", "mfu_hi", "mem"}


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
