"""MLflow tracking against a real `mlflow server` on loopback, read back over its REST API."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from training.tracking import DEFAULT_TRACKING_URI, tracking_uri
from training.train import train


def test_tracking_uri_honours_the_environment(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri() == DEFAULT_TRACKING_URI
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    assert tracking_uri() == "http://127.0.0.1:1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture
def mlflow_server(tmp_path):
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path}/db.sqlite",
         "--artifacts-destination", str(tmp_path / "art"), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2).close()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("mlflow server did not start:\n"
                                + (tmp_path / "server.log").read_text()[-2000:])
                time.sleep(0.3)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its workers, started here
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_training_is_readable_over_the_rest_api(mlflow_server, playbook_subset, tmp_path,
                                                monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.chdir(tmp_path)
    result = train(runs=playbook_subset, out_dir="model", n_trials=1, storage=None,
                   max_estimators=15, protocols=("nodes",), progress=False)
    tracked = result.tracked
    assert tracked is not None and tracked.tracking_uri == mlflow_server
    run = _get(f"{mlflow_server}/api/2.0/mlflow/runs/get?run_id={tracked.run_id}")["run"]
    metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
    learned = result.evaluation["nodes"].metrics
    assert metrics["nodes.mfu_median_ape"] == pytest.approx(learned["mfu_median_ape"])
    assert metrics["nodes.oom_recall"] == pytest.approx(learned["oom_recall"])
    assert "nodes.analytic.memory_mape" in metrics
    assert "optuna.mfu.best_value" in metrics
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert params["data.runs"] == "400" and params["seed"] == "0"
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags["data_hash"] == result.model.data_hash_
    versions = _get(f"{mlflow_server}/api/2.0/mlflow/registered-models/get?name=surrogate")
    assert versions["registered_model"]["name"] == "surrogate"
    artifacts = _get(f"{mlflow_server}/api/2.0/mlflow/artifacts/list?run_id={tracked.run_id}"
                     "&path=model")
    assert "model/model.json" in {f["path"] for f in artifacts.get("files", [])}
