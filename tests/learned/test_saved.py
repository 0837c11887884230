"""A saved model's sidecar: it records the analytic parameter sets its boosters were trained
against, and a loaded model predicts under them whatever sets ship."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.learned.model import SurrogateModel
from surrogate.learned.model_files import write_sidecar
from surrogate.learned.physics import PhysicsWarning, plain_sets, sets_sha256
from surrogate.prediction.scoring import score
from tests.learned.test_physics import _moved


def _resign(directory, meta):
    """Write ``meta`` as the sidecar of ``directory``, its hashes recomputed."""
    write_sidecar(
        directory, {k: v for k, v in meta.items() if k not in ("file_sha256", "sidecar_sha256")}
    )


def test_a_saved_model_records_the_sets_it_was_trained_against(fitted, tmp_path):
    fitted.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["parameter_sets"] == plain_sets(fitted.base_parameter_sets_)
    assert meta["parameter_sets_sha256"] == sets_sha256(fitted.base_parameter_sets_)


def test_a_loaded_model_predicts_under_its_recorded_sets_not_the_shipped(fitted, configs, tmp_path):
    fitted.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    moved = _moved(shipped_parameter_sets(), by=1.25)
    meta["parameter_sets"] = plain_sets(moved)
    _resign(tmp_path / "m", meta)
    loaded = SurrogateModel.load(tmp_path / "m")
    assert loaded.parameter_sets().as_dict() == moved.as_dict()
    under_moved = score(configs, sets=moved).columns["analytic_mfu"]
    np.testing.assert_array_equal(score(configs, model=loaded).columns["analytic_mfu"], under_moved)
    assert not np.allclose(under_moved, score(configs).columns["analytic_mfu"])


def test_a_model_saved_before_the_sets_were_recorded_warns_and_takes_the_shipped(
    fitted, configs, tmp_path
):
    fitted.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    del meta["parameter_sets"], meta["parameter_sets_sha256"]
    _resign(tmp_path / "m", meta)
    with pytest.warns(PhysicsWarning, match=r"records no analytic parameter sets.*retrain"):
        old = SurrogateModel.load(tmp_path / "m")
    assert old.parameter_sets().as_dict() == shipped_parameter_sets().as_dict()


def test_scoring_a_model_under_other_sets_warns(fitted, configs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        score(configs, model=fitted, sets=fitted.base_parameter_sets_)
    with pytest.warns(PhysicsWarning, match="predicts under others"):
        score(configs, model=fitted, sets=_moved(fitted.base_parameter_sets_))


def test_the_bundled_model_records_the_shipped_sets():
    """Refitting the shipped sets leaves the bundled model on the ones it was trained
    against: retrain it with them (surrogate train --settings-from
    surrogate/data/models/default), which records them."""
    from surrogate.prediction.predict import DEFAULT_MODEL_DIR

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bundled = SurrogateModel.load(DEFAULT_MODEL_DIR)
    assert sets_sha256(bundled.base_parameter_sets_) == sets_sha256(shipped_parameter_sets()), (
        "the shipped parameter sets changed: retrain the bundled model on them"
    )


def test_a_loaded_model_predicts_the_same_columns_for_none_and_for_some(fitted, configs, tmp_path):
    fitted.save(tmp_path / "m")
    loaded = SurrogateModel.load(tmp_path / "m")
    none, some = loaded.predict([]), loaded.predict(configs)
    assert none.keys() == some.keys()
    assert all(len(v) == 0 and v.dtype == some[k].dtype for k, v in none.items())
