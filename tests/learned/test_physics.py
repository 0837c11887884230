"""The physics step of the learned model: the analytic parameter sets fitted before any
booster, named by their hash, and the warnings where a model predicts under other sets."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from surrogate.analytic.params import DEFAULT_SET, PRIORS, ParameterSets
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.learned.physics import (
    Physics,
    PhysicsWarning,
    check_physics,
    fit_physics,
    plain_sets,
    sets_sha256,
    unrecorded_physics,
)
from surrogate.learned.training_data import training_data


def _moved(sets: ParameterSets, name: str = "gemm_time_scale", by: float = 1.1) -> ParameterSets:
    """``sets`` with one value scaled in every set (synthetic physics)."""
    plain = plain_sets(sets)
    plain.setdefault(DEFAULT_SET, {})
    for entry in plain.values():
        values = entry.setdefault("values", {})
        values[name] = float(values.get(name, PRIORS[name])) * by
    return ParameterSets(plain)


def test_the_playbooks_versions_take_the_shipped_sets_and_fit_none(playbook_subset):
    physics = fit_physics(playbook_subset)
    assert physics.own == {}
    assert physics.base.as_dict() == shipped_parameter_sets().as_dict()
    assert physics.sets is physics.base


def test_training_data_computes_every_target_under_the_physics_given(playbook_subset):
    moved = _moved(shipped_parameter_sets())
    given = training_data(playbook_subset, physics=Physics(base=moved))
    assert given.parameter_sets is moved and given.physics.sets is moved
    same = training_data(playbook_subset, sets=moved, own_physics=False)
    assert given.targets_hash == same.targets_hash
    assert given.targets_hash != training_data(playbook_subset).targets_hash
    np.testing.assert_array_equal(given.y_mfu, same.y_mfu)
    with pytest.raises(ValueError, match="not both"):
        training_data(playbook_subset, physics=Physics(base=moved), sets=moved)


def test_the_hash_names_the_sets_by_their_content():
    shipped = shipped_parameter_sets()
    assert sets_sha256(shipped) == sets_sha256(ParameterSets(plain_sets(shipped)))
    assert sets_sha256(shipped) != sets_sha256(_moved(shipped))
    assert len(sets_sha256(ParameterSets())) == 64


def test_other_sets_than_a_models_own_are_warned_about():
    shipped = shipped_parameter_sets()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_physics(shipped, ParameterSets(plain_sets(shipped)))  # the same content
    with pytest.warns(PhysicsWarning, match=r"trained against.*surrogate train"):
        check_physics(shipped, _moved(shipped))


def test_a_model_that_records_no_sets_takes_the_shipped_ones_with_a_warning():
    with pytest.warns(PhysicsWarning, match="records no analytic parameter sets"):
        sets = unrecorded_physics("old-model")
    assert sets.as_dict() == shipped_parameter_sets().as_dict()
