"""The integrity of a saved model directory: damaged model files and an edited sidecar are
refused before LightGBM reads them, a sidecar without hashes until its files are vouched for,
and the bundled model's files match their hashes."""

from __future__ import annotations

import json

import pytest

from surrogate.errors import DataError
from surrogate.learned.model import SurrogateModel
from tests.conftest import same_predictions


def _damage(path, how):
    text = path.read_text()
    if how == "truncate":
        path.write_text(text[: len(text) // 3])
    else:  # one leaf value edited, the file still parses
        start = text.index("leaf_value=") + len("leaf_value=")
        path.write_text(text[:start] + "9" + text[start:])


@pytest.mark.parametrize(
    ("name", "how"),
    [("status.txt", "truncate"), ("mfu.txt", "truncate"), ("mfu.txt", "edit a leaf")],
)
def test_damaged_model_files_are_refused_before_lightgbm_reads_them(fitted, tmp_path, name, how):
    """A truncated status.txt used to segfault and a truncated mfu.txt abort LightGBM; an
    edited leaf changed the MFU silently."""
    d = fitted.save(tmp_path / "m")
    _damage(d / name, how)
    with pytest.raises(DataError, match=rf"model file .*{name} is damaged: its sha256 differs"):
        SurrogateModel.load(d)


def test_edited_sidecar_is_refused(fitted, tmp_path):
    d = fitted.save(tmp_path / "m")
    meta = json.loads((d / "model.json").read_text())
    (d / "model.json").write_text(json.dumps(meta | {"conformal_q": 0.0}))
    with pytest.raises(DataError, match=r"model\.json was changed after the model was saved"):
        SurrogateModel.load(d)


def test_sidecar_without_hashes_is_refused_until_vouched_for(fitted, configs, tmp_path):
    from surrogate.learned.model_files import record_hashes

    d = fitted.save(tmp_path / "m")
    meta = json.loads((d / "model.json").read_text())
    del meta["file_sha256"], meta["sidecar_sha256"]
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"records no sha256 of the model files .* retrain"):
        SurrogateModel.load(d)
    record_hashes(d)
    same_predictions(fitted.predict(configs), SurrogateModel.load(d).predict(configs))


def test_bundled_model_files_match_their_hashes():
    from surrogate.learned.model_files import verified_texts
    from surrogate.prediction.predict import DEFAULT_MODEL_DIR

    side = DEFAULT_MODEL_DIR / "model.json"
    if not side.exists():
        pytest.skip("no bundled model")
    assert set(verified_texts(DEFAULT_MODEL_DIR, json.loads(side.read_text()))) == {
        "status",
        "mfu",
        "mfu_lo",
        "mfu_hi",
        "mem",
    }
