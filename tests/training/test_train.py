"""train(): load, tune, evaluate, fit, save, and record in the local SQLite MLflow store."""

from __future__ import annotations

import numpy as np
import pytest

from surrogate.config.training import config_from_flat
from surrogate.errors import DataError
from surrogate.learned.model import SurrogateModel
from surrogate.runs.sweep_files import write_sweeps
from training.train import data_summary, load_runs, train

FAST = dict(n_trials=1, max_estimators=15, protocols=("nodes",), progress=False)


def test_train_saves_a_model_with_its_metrics(playbook_subset, tmp_path):
    result = train(
        runs=playbook_subset, out_dir=tmp_path / "m", storage=None, track=False, seed=2, **FAST
    )
    loaded = SurrogateModel.load(tmp_path / "m")
    # the held-out runs under their measured network, and under the profile's curve alone
    assert set(loaded.metrics_) == {"nodes", "nodes_profile_network"}
    assert (
        loaded.metrics_["nodes_profile_network"]["learned"] == result.as_predicted["nodes"].metrics
    )
    assert loaded.metrics_["nodes"]["learned"] == result.evaluation["nodes"].metrics
    assert set(result.tuning) == {"mfu", "status"}
    assert loaded.mfu_params == result.tuning["mfu"].best_params
    # the intervals rescaled by what the nodes protocol's held-out runs needed, beyond the data
    assert loaded.recalibration_ == result.model.recalibration_
    assert set(loaded.recalibration_.mfu) == {"beyond"}
    assert set(loaded.recalibration_.mfu_profile) == {"beyond"}
    configs = [config_from_flat(r) for r in playbook_subset.head(20).to_dict("records")]
    for column in ("pred_mfu", "pred_mfu_lo", "pred_mfu_hi", "pred_peak_mem_reserved_lo_gib"):
        np.testing.assert_array_equal(
            loaded.predict(configs)[column], result.model.predict(configs)[column]
        )
    again = train(
        runs=playbook_subset, out_dir=tmp_path / "m2", storage=None, track=False, seed=2, **FAST
    )
    np.testing.assert_array_equal(
        again.model.predict(configs)["pred_mfu"], result.model.predict(configs)["pred_mfu"]
    )


def test_keeping_a_models_trees_refits_its_recalibration_alone(playbook_subset, tmp_path):
    """``keep``: the protocols run under the kept model's settings and only its metrics and
    recalibration are refitted; its point predictions stay as they were."""
    first = train(
        runs=playbook_subset,
        out_dir=tmp_path / "m",
        storage=None,
        track=False,
        seed=2,
        **{**FAST, "n_trials": 0},
    )
    kept = SurrogateModel.load(tmp_path / "m")
    kept.recalibration_ = None
    again = train(
        runs=playbook_subset,
        out_dir=tmp_path / "k",
        storage=None,
        track=False,
        seed=2,
        keep=kept,
        **{**FAST, "n_trials": 0},
    )
    configs = [config_from_flat(r) for r in playbook_subset.head(20).to_dict("records")]
    before, after = kept.predict(configs), SurrogateModel.load(tmp_path / "k").predict(configs)
    np.testing.assert_array_equal(after["pred_mfu"], before["pred_mfu"])
    mem = "pred_peak_mem_reserved_gib"
    np.testing.assert_array_equal(after[mem], before[mem])
    assert again.model.recalibration_ == first.model.recalibration_
    assert kept.recalibration_ is None  # the kept model itself is not changed


@pytest.mark.slow
def test_train_records_in_the_default_sqlite_store(playbook_subset, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    result = train(
        runs=playbook_subset,
        out_dir="model",
        n_trials=0,
        max_estimators=15,
        protocols=("nodes",),
        progress=False,
    )
    assert result.tracked is not None and result.tracked.model_version == "1"
    assert result.tracked.tracking_uri == "sqlite:///mlruns/mlflow.db"
    assert (tmp_path / "mlruns" / "mlflow.db").exists()
    run_dir = tmp_path / "mlruns" / "artifacts" / result.tracked.run_id / "artifacts"
    assert (run_dir / "model" / "model.json").exists()
    assert (run_dir / "plots" / "feature_importance.png").exists()
    assert (run_dir / "plots" / "nodes" / "p_oom_calibration.png").exists()
    assert not result.tuning  # n_trials=0: library defaults
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri="sqlite:///mlruns/mlflow.db")
    run = client.get_run(result.tracked.run_id)
    assert run.info.run_name.startswith("train 20") and run.info.run_name.endswith(" playbook")
    assert run.data.tags["surrogate.kind"] == "training"
    assert "nodes/mfu_mape_ge10" in run.data.metrics
    assert not any("analytic" in k for k in run.data.metrics)
    baseline = client.get_run(result.tracked.baseline_run_id)
    assert baseline.info.run_name == "analytic baseline playbook"
    assert set(baseline.data.metrics) <= set(run.data.metrics)  # same names, same charts
    version = client.get_model_version("surrogate", result.tracked.model_version)
    assert version.tags["data_hash"] == result.model.data_hash_
    assert version.tags["training_run"] == result.tracked.run_id


def test_load_runs(playbook_subset, tmp_path):
    path = tmp_path / "mine.parquet"
    write_sweeps(playbook_subset.head(30), path)
    only_mine = load_runs([path], playbook=False)
    assert len(only_mine) == 30
    with pytest.raises(DataError, match="no training data"):
        load_runs([], playbook=False)
    with pytest.raises(DataError, match="Playbook sweep is not at"):
        load_runs([], data_dir=tmp_path)


def test_data_summary(playbook_subset):
    s = data_summary(playbook_subset)
    assert s["runs"] == 400
    assert s["status_completed"] + s["status_oom"] + s["status_fail"] == 400
    assert s["model_sizes"] == ["2048/16", "4096/32"] and 64 in s["node_counts"]
