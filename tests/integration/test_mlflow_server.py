"""MLflow as the dashboard, against a real ``mlflow server`` read back over its REST API: a
training and a two-round active-learning campaign, named and organised for a person."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import get_json, post_json

pytestmark = pytest.mark.integration


def _runs(url: str, exp_id: str) -> dict[str, dict[str, Any]]:
    runs = post_json(
        f"{url}/api/2.0/mlflow/runs/search", {"experiment_ids": [exp_id], "max_results": 100}
    )["runs"]
    return {r["info"]["run_name"]: r for r in runs}


def _kv(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {i["key"]: i["value"] for i in items}


def test_training_is_one_named_run_beside_its_analytic_baseline(populated_server):
    url, result = populated_server["url"], populated_server["train"]
    tracked = result.tracked
    assert tracked is not None and tracked.tracking_uri == url
    exp = populated_server["experiments"]["surrogate-training"]
    assert _kv(exp["tags"])["mlflow.experimentKind"] == "custom_model_development"
    runs = _runs(url, exp["experiment_id"])
    run = runs[tracked.run_name]
    assert tracked.run_name.startswith("train 20") and tracked.run_name.endswith("playbook")
    metrics = _kv(run["data"]["metrics"])
    learned = result.evaluation["nodes"].metrics
    assert metrics["nodes/mfu_median_ape"] == pytest.approx(learned["mfu_median_ape"])
    assert metrics["nodes/oom_recall"] == pytest.approx(learned["oom_recall"])
    assert "optuna/mfu_best_value" in metrics
    assert not any("analytic" in k for k in metrics)
    baseline = _kv(runs["analytic baseline playbook"]["data"]["metrics"])
    analytic = result.evaluation["nodes"].analytic_metrics
    assert baseline["nodes/memory_mape"] == pytest.approx(analytic["memory_mape"])
    params = _kv(run["data"]["params"])
    assert params["data.runs"] == "400" and params["seed"] == "0"
    assert _kv(run["data"]["tags"])["data_hash"] == result.model.data_hash_
    artifacts = get_json(f"{url}/api/2.0/mlflow/artifacts/list?run_id={tracked.run_id}&path=model")
    assert "model/model.json" in {f["path"] for f in artifacts.get("files", [])}


def test_a_campaign_is_one_experiment_with_one_run_per_round(populated_server):
    url = populated_server["url"]
    tracked = populated_server["train"].tracked
    scored = populated_server["scored"]
    exp = populated_server["experiments"]["active learning: demo"]
    runs = _runs(url, exp["experiment_id"])
    # round 1 was scored twice: still one run, updated
    assert sorted(runs) == ["accuracy over rounds", "analytic baseline", "round 01", "round 02"]
    assert scored[0]["mlflow_run_id"] == scored[2]["mlflow_run_id"]
    round1 = runs["round 01"]
    tags = _kv(round1["data"]["tags"])
    assert tags["proposing_model.version"] == tracked.model_version
    assert tags["proposing_model.data_hash"] == populated_server["train"].model.data_hash_
    metrics = _kv(round1["data"]["metrics"])
    assert metrics["best/mfu_so_far"] == pytest.approx(scored[2]["metrics"]["best_mfu_so_far"])
    files = get_json(
        f"{url}/api/2.0/mlflow/artifacts/list?run_id={round1['info']['run_id']}&path=plots"
    )["files"]
    assert {f["path"] for f in files} == {
        "plots/predicted_vs_measured.png",
        "plots/interval_coverage.png",
        "plots/layout_space.png",
    }
    # accuracy against rounds: one value per round, the re-scored one replaced
    trend = runs["accuracy over rounds"]["info"]["run_id"]
    for key in ("round/prospective_mfu_mape", "best/mfu_so_far"):
        history = get_json(
            f"{url}/api/2.0/mlflow/metrics/get-history?run_id={trend}&metric_key={key}"
        )["metrics"]
        assert sorted(m["step"] for m in history) == [1, 2]
    best = get_json(
        f"{url}/api/2.0/mlflow/metrics/get-history?run_id={trend}&metric_key=best/mfu_so_far"
    )["metrics"]
    assert {m["step"]: m["value"] for m in best}[1] == pytest.approx(
        scored[2]["metrics"]["best_mfu_so_far"]
    )
    baseline = runs["analytic baseline"]["info"]["run_id"]
    history = get_json(
        f"{url}/api/2.0/mlflow/metrics/get-history?run_id={baseline}"
        "&metric_key=round/prospective_mfu_mape"
    )["metrics"]
    assert sorted(m["step"] for m in history) == [1, 2]
    # lineage on the registered model version
    version = get_json(
        f"{url}/api/2.0/mlflow/model-versions/get?name=surrogate&version={tracked.model_version}"
    )["model_version"]
    vtags = _kv(version["tags"])
    assert vtags["data_hash"] == populated_server["train"].model.data_hash_
    assert vtags["training_run"] == tracked.run_id
    assert vtags["proposed_rounds"] == "demo round 01; demo round 02"
