"""Where MLflow records go (the real-server tests are in ``tests/integration``)."""

from __future__ import annotations

from surrogate.io.tracking import artifact_location
from training.tracking import DEFAULT_TRACKING_URI, data_label, rounds_in, tracking_uri


def test_tracking_uri_honours_the_environment(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri() == DEFAULT_TRACKING_URI
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    assert tracking_uri() == "http://127.0.0.1:1"


def test_sqlite_artifacts_live_beside_the_database(tmp_path):
    assert (
        artifact_location(f"sqlite:///{tmp_path}/x/mlflow.db")
        == (tmp_path / "x" / "artifacts").as_uri()
    )
    assert artifact_location("http://127.0.0.1:5000") is None  # the server decides


def test_run_names_say_what_the_data_was():
    assert data_label(["hf_ultrascale_playbook"]) == "playbook"
    assert data_label(["hf_ultrascale_playbook", "torchtitan"], ["runs/mine.parquet"]) == (
        "playbook+mine"
    )
    assert data_label(["llmfoundry"]) == "llmfoundry"
    assert rounds_in(["r01-00-n1-dp8_tp1/train-1", "r03-02-n2-x", "other", 4]) == [1, 3]
