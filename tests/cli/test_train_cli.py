"""`surrogate train` and `surrogate evaluate`: JSON output, saved model, errors as one line."""

from __future__ import annotations

import json

import pytest

from surrogate.cli import main
from surrogate.learned import SurrogateModel
from surrogate.sweeps import write_sweeps


@pytest.fixture
def sweep_file(playbook_subset, tmp_path):
    path = tmp_path / "runs.parquet"
    write_sweeps(playbook_subset, path)
    return path


def test_train_json(sweep_file, tmp_path, capsys):
    out_dir = tmp_path / "model"
    argv = ["train", "--no-playbook", "--sweeps", str(sweep_file), "--out", str(out_dir),
            "--n-trials", "1", "--max-estimators", "15", "--protocol", "nodes", "--no-track",
            "--storage", f"sqlite:///{tmp_path}/optuna.db", "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["out_dir"] == str(out_dir) and report["mlflow"] is None
    assert set(report["tuning"]) == {"mfu", "status"}
    assert 0 <= report["evaluation"]["nodes"]["learned"]["oom_recall"] <= 1
    assert SurrogateModel.load(out_dir).metrics_["nodes"]["learned"]["runs"] > 0


def test_evaluate_table(sweep_file, tmp_path, capsys):
    argv = ["evaluate", "--no-playbook", "--sweeps", str(sweep_file), "--protocol", "nodes"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "train <= 16 nodes" in out and "mfu_mape_ge10" in out and "analytic" in out


def test_train_without_data_is_one_line_exit_2(capsys):
    assert main(["train", "--no-playbook", "--no-track"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no training data") and err.count("\n") == 1


def test_evaluate_unknown_protocol_is_one_line_exit_2(sweep_file, capsys):
    argv = ["evaluate", "--no-playbook", "--sweeps", str(sweep_file), "--protocol", "bogus"]
    assert main(argv) == 2
    assert "protocols must be among" in capsys.readouterr().err
