"""`surrogate train` and `surrogate evaluate`: JSON output, saved model, errors as one line."""

from __future__ import annotations

import io
import json

import pytest

from surrogate.cli import main
from surrogate.learned.model import SurrogateModel
from surrogate.runs.sweep_files import write_sweeps


@pytest.fixture
def sweep_file(playbook_subset, tmp_path):
    path = tmp_path / "runs.parquet"
    write_sweeps(playbook_subset, path)
    return path


def test_train_json(sweep_file, tmp_path, capsys):
    out_dir = tmp_path / "model"
    argv = [
        "train",
        "--no-playbook",
        "--sweeps",
        str(sweep_file),
        "--out",
        str(out_dir),
        "--n-trials",
        "1",
        "--max-estimators",
        "15",
        "--protocol",
        "nodes",
        "--no-track",
        "--storage",
        f"sqlite:///{tmp_path}/optuna.db",
        "--json",
    ]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["out_dir"] == str(out_dir) and report["mlflow"] is None
    assert report["own_physics"] == []  # the Playbook's versions ship theirs
    shares = report["correction_share"]  # per framework version, from its held-out runs
    assert shares and all(0 <= w <= 1 for w in shares.values())
    assert shares == SurrogateModel.load(out_dir).correction_weight_by_framework_
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
    base = [
        "train",
        "--no-playbook",
        "--sweeps",
        str(sweep_file),
        "--n-trials",
        "0",
        "--max-estimators",
        "15",
        "--protocol",
        "nodes",
        "--no-track",
        "--json",
    ]
    assert main([*base, "--out", str(first)]) == 0
    capsys.readouterr()
    assert main([*base, "--out", str(again), "--settings-from", str(first)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tuning"] == {}
    a, b = SurrogateModel.load(first), SurrogateModel.load(again)
    assert (b.status_params, b.mfu_params, b.mem_params) == (
        a.status_params,
        a.mfu_params,
        a.mem_params,
    )
    tuned = [
        *base[:4],
        "--n-trials",
        "3",
        "--no-track",
        "--out",
        str(tmp_path / "x"),
        "--settings-from",
        str(first),
    ]
    assert main(tuned) == 2
    err = capsys.readouterr().err
    assert "--settings-from replaces tuning: give --n-trials 0, got 3" in err
    assert err.count("\n") == 1


def test_a_trained_framework_physics_serves_analytic_predictions(playbook_subset, tmp_path, capsys):
    """Runs of llm-foundry (no shipped parameters) in the training sweeps: the saved model
    carries their framework's fitted parameters, and `predict --analytic --model-dir` predicts
    under them, where `--analytic` alone keeps the shipped physics (the priors here)."""
    import pandas as pd

    from surrogate.config.training import CONFIG_COLUMNS
    from surrogate.ingest.llmfoundry import parse_llmfoundry
    from surrogate.io.datasource import data_dir

    path = data_dir() / "sweeps/llmfoundry_mpt/benchmarking_README.md"
    if not path.exists():
        pytest.skip(f"the shared MPT tables are absent ({path})")
    mine = parse_llmfoundry(path)[0].sample(40, random_state=0)
    sweeps = tmp_path / "runs.parquet"
    write_sweeps(pd.concat([playbook_subset, mine], ignore_index=True), sweeps)
    out_dir = tmp_path / "model"
    assert (
        main(
            [
                "train",
                "--no-playbook",
                "--sweeps",
                str(sweeps),
                "--out",
                str(out_dir),
                "--n-trials",
                "1",
                "--max-estimators",
                "15",
                "--protocol",
                "nodes",
                "--no-track",
                "--storage",
                f"sqlite:///{tmp_path}/optuna.db",
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["own_physics"] == ["llm-foundry/composer-fsdp1"]
    assert "llm-foundry/composer-fsdp1" in report["correction_share"]
    assert list(SurrogateModel.load(out_dir).physics_sets_) == ["llm-foundry/composer-fsdp1"]
    configs = tmp_path / "mpt.csv"
    mine.head(5)[list(CONFIG_COLUMNS)].to_csv(configs, index=False)

    def mfu(*flags: str) -> list[float]:
        assert main(["predict", "--from-csv", str(configs), *flags]) == 0
        return pd.read_csv(io.StringIO(capsys.readouterr().out))["pred_mfu"].tolist()

    shipped = mfu("--analytic")
    calibrated = mfu("--analytic", "--model-dir", str(out_dir))
    assert calibrated != pytest.approx(shipped)
    from surrogate.calibration.parameter_files import shipped_parameter_sets
    from surrogate.prediction.predict import predict_frame

    sets = shipped_parameter_sets().with_more(SurrogateModel.load(out_dir).physics_sets_)
    expect = predict_frame(pd.read_csv(configs), model=None, sets=sets)["pred_mfu"].tolist()
    assert calibrated == pytest.approx(expect)


def test_train_says_where_the_correction_gave_way(tmp_path, capsys, monkeypatch):
    """The table output names each framework version whose held-out runs bore out only part
    of the learned correction (the training itself is stubbed: its result is what is read)."""
    from types import SimpleNamespace

    import training.train

    model = SimpleNamespace(
        physics_sets_={},
        correction_weight_by_framework_={
            "nanotron/pp-fix": 1.0,
            "llm-foundry/composer-fsdp1": 0.25,
        },
    )
    result = SimpleNamespace(
        tracked=None, evaluation={}, tuning={}, model=model, out_dir=tmp_path / "m", seconds=1.0
    )
    monkeypatch.setattr(training.train, "train", lambda *a, **k: result)
    assert (
        main(
            [
                "train",
                "--no-playbook",
                "--out",
                str(tmp_path / "m"),
                "--n-trials",
                "0",
                "--no-track",
            ]
        )
        == 0
    )
    out = " ".join(capsys.readouterr().out.split())
    assert "llm-foundry/composer-fsdp1: on its held-out runs" in out and "keeps 25%" in out
    assert "nanotron/pp-fix:" not in out
