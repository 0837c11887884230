"""Active learning: propose writes a round (files, record, launch scripts), refuses to overwrite,
spreads its picks; score-round measures the proposing model on the round's runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from surrogate.active import (
    Acquisition,
    layout_vector,
    load_round_model,
    log_round,
    propose,
    read_round,
    score_round,
    select,
)
from surrogate.config import config_from_flat
from surrogate.errors import ConfigError, DataError
from surrogate.presets import get_preset
from surrogate.search import score_configs
from surrogate.space import LayoutSpace


def space() -> LayoutSpace:
    return LayoutSpace(model=get_preset("8b"), global_batch_seqs=32, node_counts=(1,),
                       frameworks=("torchtitan",), max_cp=2, max_vpp=1, max_mbs=4)


def test_propose_writes_a_round_and_refuses_to_overwrite(tmp_path: Path) -> None:
    out = propose(space(), tmp_path / "round-1", k=4)
    proposals = pd.read_csv(out / "proposals.csv")
    assert len(proposals) == 4
    record = read_round(out)
    assert record["round"] == 1
    assert record["model"]["data_hash"]  # the bundled model's identity
    assert record["goal"]["global_batch_seqs"] == 32
    assert {p["reason"] for p in record["proposals"]} <= {"expected-improvement",
                                                         "oom-boundary"}
    for name in proposals["name"]:
        run = out / "logs" / name
        assert (run / "config.toml").exists() and (run / "job.sbatch").exists()
        assert (run / "launch.sh").exists()
    with pytest.raises(ConfigError, match="a round is never overwritten"):
        propose(space(), out, k=4)
    second = propose(space(), tmp_path / "round-2", k=2)
    assert read_round(second)["round"] == 2


def test_picks_are_diverse_not_near_copies() -> None:
    configs = space().enumerate()
    scored = score_configs(configs)
    picks = select(scored, configs, 6, acquisition=Acquisition(boundary_frac=0.0))
    vecs = np.stack([layout_vector(configs[i]) for i, _, _ in picks])
    d = np.sqrt(((vecs[:, None] - vecs[None]) ** 2).sum(-1))
    assert len({i for i, _, _ in picks}) == 6
    no_penalty = select(scored, configs, 6,
                        acquisition=Acquisition(boundary_frac=0.0, diversity_scale=0.0))
    vecs0 = np.stack([layout_vector(configs[i]) for i, _, _ in no_penalty])
    d0 = np.sqrt(((vecs0[:, None] - vecs0[None]) ** 2).sum(-1))
    assert d[np.triu_indices(6, 1)].min() >= d0[np.triu_indices(6, 1)].min()
    assert d[np.triu_indices(6, 1)].min() >= 1.0  # at least one doubling apart


def test_already_run_layouts_are_not_proposed_again() -> None:
    configs = space().enumerate()
    scored = score_configs(configs)
    first = [i for i, _, _ in select(scored, configs, 3)]
    again = [i for i, _, _ in select(scored, configs, 3,
                                     already_run=[configs[i] for i in first])]
    assert not set(first) & set(again)


def test_score_round_on_synthetic_measurements(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    out = propose(space(), tmp_path / "r1", k=3)
    record = read_round(out)
    rows = []
    for i, p in enumerate(record["proposals"]):  # synthetic outcomes, made up by this test
        status = "oom" if i == 2 else "completed"
        rows.append({**p["config"], "run_id": f"{p['name']}/train-1", "status": status,
                     "mfu": 0.3 + 0.05 * i if status == "completed" else np.nan,
                     "source": "synthetic"})
    runs = pd.DataFrame(rows)
    model = load_round_model(record)
    metrics, matched = score_round(record, runs, model=model)
    assert metrics["measured"] == 3 and metrics["proposed"] == 3
    assert metrics["best_mfu_so_far"] == pytest.approx(0.35)
    assert 0 <= metrics["status_accuracy"] <= 1 and metrics["mfu_mape"] >= 0
    assert set(matched["name"]) == {p["name"] for p in record["proposals"]}
    config_from_flat(matched.iloc[0].to_dict())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = log_round(record, metrics)
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    history = client.get_metric_history(run_id, "best_mfu_so_far")
    assert [(h.step, h.value) for h in history] == [(1, pytest.approx(0.35))]


def test_a_retrained_model_cannot_score_an_old_round(tmp_path: Path) -> None:
    record = read_round(propose(space(), tmp_path / "r1", k=1))
    record["model"]["data_hash"] = "0" * 64
    with pytest.raises(DataError, match="is not the one that proposed round 1"):
        load_round_model(record)
    with pytest.raises(DataError, match=r"round\.json missing"):
        read_round(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "round.json").write_text("{")
    with pytest.raises(DataError, match="not valid JSON"):
        read_round(tmp_path / "bad")
    json.dumps(record)
