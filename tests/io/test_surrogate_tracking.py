"""surrogate.io.tracking: experiments that open on their runs, runs found again by their tags,
metric histories over rounds that stay one value per step, artifacts beside a SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest

from surrogate.io import tracking


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/db/mlflow.db")
    return tmp_path / "db"


@pytest.mark.slow
def test_experiments_runs_and_histories(store: Path) -> None:
    exp = tracking.experiment("demo", description="what it holds")
    assert tracking.experiment("demo", description="what it holds") == exp  # found again
    c = tracking.client()
    e = c.get_experiment(exp)
    assert e.tags["mlflow.experimentKind"] == "custom_model_development"
    assert e.tags["mlflow.note.content"] == "what it holds"
    assert e.artifact_location == (store / "artifacts").resolve().as_uri()

    key = {tracking.KIND_TAG: "round", "round": "1"}
    run, created = tracking.run_for(exp, "round 01", key)
    assert created and tracking.run_for(exp, "round 01", key) == (run, False)
    assert tracking.find_run(exp, {tracking.KIND_TAG: "round", "round": "2"}) is None

    tags = {tracking.KIND_TAG: "trend"}
    trend = tracking.sync_history(exp, "trend", tags, {1: {"a/x": 1.0, "a/nan": float("nan")}})
    same = tracking.sync_history(exp, "trend", tags, {1: {"a/x": 1.0}, 2: {"a/x": 2.0}})
    assert same == trend  # appended: step 1 unchanged, step 2 new
    assert [(m.step, m.value) for m in c.get_metric_history(trend, "a/x")] == [(1, 1.0), (2, 2.0)]
    replaced = tracking.sync_history(exp, "trend", tags, {1: {"a/x": 1.5}, 2: {"a/x": 2.0}})
    assert replaced != trend  # a past value changed: one value per step, in a new run
    assert sorted((m.step, m.value) for m in c.get_metric_history(replaced, "a/x")) == [
        (1, 1.5),
        (2, 2.0),
    ]
    assert c.get_run(trend).info.lifecycle_stage == "deleted"


def test_links_open_the_model_training_view() -> None:
    assert tracking.experiment_url("http://h:5000/", "3", charts=True) == (
        "http://h:5000/#/experiments/3/runs?workflowType=machine_learning&compareRunsMode=CHART"
    )
    assert tracking.experiment_url("sqlite:///x.db", "3") is None
    assert tracking.run_url("http://h:5000", "3", "abc").endswith(
        "/#/experiments/3/runs/abc?workflowType=machine_learning"
    )
    assert "mlflow ui --backend-store-uri sqlite:///x.db" in tracking.run_url(
        "sqlite:///x.db", "3", "abc"
    )
    assert tracking.finite({"a": 1.0, "b": float("nan"), "c": float("inf")}) == {"a": 1.0}
