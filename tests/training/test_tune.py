"""optuna tuning: grouped scores, pruning, determinism for a seed, resuming from storage."""

from __future__ import annotations

import optuna
import pytest

from surrogate.learned.training_data import TrainingData, training_data
from training.tune import cv_score, study_name_for, tune

SMALL = {"n_estimators": 10, "num_leaves": 7}


@pytest.fixture(scope="module")
def data(playbook_subset) -> TrainingData:
    return training_data(playbook_subset)


@pytest.mark.parametrize("target", ["mfu", "status"])
def test_cv_score_is_deterministic_and_positive(data, target):
    a = cv_score(target, SMALL, data, seed=1)
    assert a == cv_score(target, SMALL, data, seed=1)
    assert a > 0


class _PruneNow:
    """A trial whose pruner always says stop."""

    def __init__(self) -> None:
        self.reported: list[tuple[float, int]] = []

    def report(self, value: float, step: int) -> None:
        self.reported.append((value, step))

    def should_prune(self) -> bool:
        return True


def test_cv_score_reports_each_fold_and_prunes(data):
    trial = _PruneNow()
    with pytest.raises(optuna.TrialPruned):
        cv_score("mfu", SMALL, data, trial=trial)  # type: ignore[arg-type]
    assert trial.reported[0][1] == 0 and len(trial.reported) == 1


def test_same_seed_same_study(data):
    a = tune(data, "mfu", n_trials=3, seed=5, storage=None, max_estimators=15, progress=False)
    b = tune(data, "mfu", n_trials=3, seed=5, storage=None, max_estimators=15, progress=False)
    assert a.best_params == b.best_params and a.best_value == b.best_value
    assert [t["params"] for t in a.top_trials] == [t["params"] for t in b.top_trials]
    assert a.best_params["n_estimators"] <= 15


def test_resumes_from_its_storage(data, tmp_path):
    storage = f"sqlite:///{tmp_path}/sub/optuna.db"
    first = tune(
        data, "status", n_trials=2, seed=0, storage=storage, max_estimators=10, progress=False
    )
    assert first.n_complete + first.n_pruned == 2
    resumed = tune(
        data, "status", n_trials=3, seed=0, storage=storage, max_estimators=10, progress=False
    )
    assert resumed.study_name == first.study_name
    assert resumed.n_complete + resumed.n_pruned == 3
    study = optuna.load_study(study_name=first.study_name, storage=storage)
    assert len(study.trials) == 3
    assert resumed.best_value <= first.best_value


def test_bad_arguments_raise(data):
    with pytest.raises(ValueError, match="target must be one of"):
        tune(data, "speed", n_trials=1, storage=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_trials must be at least 1"):
        tune(data, "mfu", n_trials=0, storage=None)


def test_a_change_of_physics_is_a_new_study(data):
    """Same runs under other analytic parameters: other targets, so not the same study."""
    from surrogate.analytic.params import ParameterSets
    from surrogate.calibration.parameter_files import shipped_parameter_sets

    assert study_name_for("mfu", training_data(data.runs), 0) == study_name_for("mfu", data, 0)
    slower = {
        fv: {"values": {**s["values"], "gemm_time_scale": 2.0}}
        for fv, s in shipped_parameter_sets().sets.items()
    }
    other = training_data(data.runs, sets=ParameterSets(slower))
    assert other.data_hash == data.data_hash
    assert study_name_for("mfu", other, 0) != study_name_for("mfu", data, 0)
