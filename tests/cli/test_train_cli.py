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


def test_train_checks_its_output_before_any_work(tmp_path, capsys):
    """Used to fail with a traceback after 38 s of training."""
    argv = ["train", "--no-playbook", "--no-track", "--out"]  # no data: the work would fail too
    (tmp_path / "file").write_text("x")
    assert main([*argv, str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out must be a directory, got the file") and err.count("\n") == 1
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "model.json").write_text("{}")
    assert main([*argv, str(tmp_path / "old")]) == 2
    assert "already holds model.json: give --force" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "old"), "--force"]) == 2
    assert capsys.readouterr().err.startswith("error: no training data")


def test_train_can_take_a_saved_models_settings_instead_of_tuning(sweep_file, tmp_path, capsys):
    first, again = tmp_path / "first", tmp_path / "again"
    base = ["train", "--no-playbook", "--sweeps", str(sweep_file), "--n-trials", "0",
            "--max-estimators", "15", "--protocol", "nodes", "--no-track", "--json"]
    assert main([*base, "--out", str(first)]) == 0
    capsys.readouterr()
    assert main([*base, "--out", str(again), "--settings-from", str(first)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tuning"] == {}
    a, b = SurrogateModel.load(first), SurrogateModel.load(again)
    assert (b.status_params, b.mfu_params, b.mem_params) == (
        a.status_params, a.mfu_params, a.mem_params)
    tuned = [*base[:4], "--n-trials", "3", "--no-track", "--out", str(tmp_path / "x"),
             "--settings-from", str(first)]
    assert main(tuned) == 2
    err = capsys.readouterr().err
    assert "--settings-from replaces tuning: give --n-trials 0, got 3" in err
    assert err.count("\n") == 1
