"""A real PostgreSQL server (started by the ``postgres`` fixture) as the shared store: several
``surrogate search`` workers in parallel on one optuna study, and an ``mlflow server`` whose
backend is PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import (
    _stop,
    create_database,
    post_json,
    run_campaign,
    start_mlflow_server,
    subprocess_env,
    surrogate_cmd,
)

pytestmark = pytest.mark.integration

SPACE = [
    "--model",
    "1.34b",
    "--nodes",
    "1-4",
    "--global-batch-seqs",
    "64",
    "--max-cp",
    "1",
    "--max-vpp",
    "1",
    "--max-mbs",
    "4",
    "--recompute",
    "none,full",
]
WORKERS, TRIALS = 3, 12
"""Trials per worker. The space can be enumerated (946 valid layouts of 13,500 points, as
``surrogate search`` with these flags and ``--json`` counts them), so its trials are drawn among
its valid layouts alone: a worker cannot end without one, whatever the count (drawn over
every point, 12 trials left a search with none for 3 seeds of 8, measured on sqlite). 12
trials: 3 drawn at random (TPE's start, a quarter of them), 9 by TPE from the trials the three
workers share."""


def test_parallel_search_workers_share_one_study(postgres: str, tmp_path: Path) -> None:
    import optuna

    storage = create_database(postgres, "optuna")
    # the documented recipe (docs/tracking.md): create the study once, then start the workers
    optuna_cli = Path(sys.executable).with_name("optuna")
    subprocess.run(
        [
            str(optuna_cli),
            "create-study",
            "--storage",
            storage,
            "--study-name",
            "layouts",
            "--direction",
            "maximize",
            "--skip-if-exists",
        ],
        check=True,
        capture_output=True,
    )
    logs = [(tmp_path / f"worker{i}.out").open("w") for i in range(WORKERS)]
    workers = [
        subprocess.Popen(
            surrogate_cmd(
                "search",
                *SPACE,
                "--trials",
                str(TRIALS),
                "--storage",
                storage,
                "--study-name",
                "layouts",
                "--seed",
                str(i),
                "--json",
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=subprocess_env(),
        )
        for i, log in enumerate(logs)
    ]
    codes = [w.wait(timeout=300) for w in workers]
    for log in logs:
        log.close()
    outputs = [(tmp_path / f"worker{i}.out").read_text() for i in range(WORKERS)]
    assert codes == [0] * WORKERS, outputs
    for out in outputs:
        assert json.loads(out[out.index("{") :])["top"]  # each worker printed its table
    study = optuna.load_study(study_name="layouts", storage=storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == WORKERS * TRIALS
    assert not [t.number for t in done if t.user_attrs.get("invalid")]  # valid layouts only
    by_worker = {t.user_attrs["worker"] for t in done}
    assert len(by_worker) == WORKERS  # every worker's trials landed in the one study


def test_mlflow_server_on_postgres(
    postgres: str, tmp_path: Path, artifacts_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = create_database(postgres, "mlflow")
    proc, url = start_mlflow_server(tmp_path, backend, artifacts_dir / "mlflow-postgres.log")
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        scored = run_campaign(tmp_path, rounds=1, campaign="on-postgres")
        exps = post_json(f"{url}/api/2.0/mlflow/experiments/search", {"max_results": 50})[
            "experiments"
        ]
        exp = next(e for e in exps if e["name"] == "active learning: on-postgres")
        runs = post_json(
            f"{url}/api/2.0/mlflow/runs/search", {"experiment_ids": [exp["experiment_id"]]}
        )["runs"]
        names = sorted(r["info"]["run_name"] for r in runs)
        assert names == ["accuracy over rounds", "analytic baseline", "round 01"]
        assert scored[0]["mlflow_run_id"] == scored[1]["mlflow_run_id"]
    finally:
        _stop(proc)
