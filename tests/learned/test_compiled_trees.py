"""Compiled trees (surrogate.learned.compiled_trees): the same answers as LightGBM, compiled once
per
machine into the cache, checked before use, LightGBM wherever the optional path cannot serve.
Synthetic boosters (generated here) keep compiling to a fraction of a second."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from surrogate.learned import compiled_trees
from surrogate.learned.compiled_trees import COMPILE_MIN_ROWS, CompiledForest
from surrogate.learned.model import SurrogateModel

lleaves = pytest.importorskip("lleaves")
lgb = pytest.importorskip("lightgbm")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Compiled trees on (conftest turns them off), cached in this test's directory."""
    monkeypatch.setenv("SURROGATE_COMPILED_TREES", "1")
    monkeypatch.setenv("SURROGATE_CACHE_DIR", str(tmp_path))
    return tmp_path / "compiled-trees"


def _synthetic_booster(objective: str, seed: int = 0) -> lgb.Booster:
    """A small booster fitted on synthetic data: 5 features, one of them categorical."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(500, 5))
    X[:, 4] = rng.integers(0, 4, 500)
    signal = X[:, 0] + 0.5 * X[:, 1] * (X[:, 4] > 1)
    params = {"objective": objective, "num_leaves": 7, "verbose": -1, "seed": seed}
    if objective == "multiclass":
        params["num_class"] = 3
        y = np.digitize(signal, [-0.5, 0.5])
    else:
        y = signal
    data = lgb.Dataset(X, y, categorical_feature=[4])
    return lgb.train(params, data, num_boost_round=15)


def _rows(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    X[:, 4] = rng.integers(0, 4, n)
    X[::97, 2] = np.nan  # missing values go the way LightGBM sends them
    return X


@pytest.mark.parametrize(
    ("objective", "raw"), [("regression", False), ("multiclass", False), ("multiclass", True)]
)
def test_compiled_predictions_are_lightgbm_s(objective: str, raw: bool, _cache: Path) -> None:
    booster = _synthetic_booster(objective)
    X = _rows(COMPILE_MIN_ROWS)
    got = CompiledForest(booster.model_to_string()).predict(booster, X, raw_score=raw)
    assert got is not None
    np.testing.assert_allclose(got, booster.predict(X, raw_score=raw), rtol=1e-12, atol=1e-12)
    assert len(list(_cache.glob("*/*.o"))) == 1


def test_small_batches_use_lightgbm_until_the_forest_is_cached(
    _cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    booster = _synthetic_booster("regression")
    text = booster.model_to_string()
    machine_key = compiled_trees._machine_key
    calls: list[str] = []
    monkeypatch.setattr(
        compiled_trees, "_machine_key", lambda: calls.append("key") or machine_key()
    )
    assert CompiledForest(text).predict(booster, _rows(10)) is None  # not worth compiling
    assert not _cache.exists() and not calls  # nothing written, llvmlite not even asked
    assert CompiledForest(text).predict(booster, _rows(COMPILE_MIN_ROWS)) is not None
    one = _rows(1)
    got = CompiledForest(text).predict(booster, one)  # a new process: loads the cached file
    assert got is not None
    np.testing.assert_allclose(got, booster.predict(one), rtol=1e-12)


def test_a_damaged_cache_file_is_compiled_again(
    _cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    booster = _synthetic_booster("regression")
    text = booster.model_to_string()
    X = _rows(COMPILE_MIN_ROWS)
    CompiledForest(text).predict(booster, X)
    (obj,) = _cache.glob("*/*.o")
    obj.write_bytes(b"\x7fELF not object code")
    with caplog.at_level(logging.WARNING, logger="surrogate.learned.compiled_trees"):
        got = CompiledForest(text).predict(booster, X)
    assert "do not match their recorded sha256" in caplog.text
    np.testing.assert_allclose(got, booster.predict(X), rtol=1e-12)  # type: ignore[arg-type]


def test_a_forest_that_disagrees_with_lightgbm_is_dropped(
    _cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A forest compiled from other trees than the booster's (a stale or wrong cache) fails the
    check on the first rows: LightGBM answers and the file is removed."""
    booster = _synthetic_booster("regression", seed=0)
    other = _synthetic_booster("regression", seed=5).model_to_string()
    forest = CompiledForest(other)
    with caplog.at_level(logging.WARNING, logger="surrogate.learned.compiled_trees"):
        assert forest.predict(booster, _rows(COMPILE_MIN_ROWS)) is None
    assert "disagree with LightGBM" in caplog.text
    assert not list(_cache.glob("*/*.o"))
    assert forest.predict(booster, _rows(COMPILE_MIN_ROWS)) is None  # not tried again


def test_a_failing_compiler_falls_back_to_lightgbm(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    booster = _synthetic_booster("regression")

    def broken(*args: object, **kwargs: object) -> None:
        raise AttributeError("module 'llvmlite.binding' has no attribute 'PassManagerBuilder'")

    monkeypatch.setattr(CompiledForest, "_compile_or_read", broken)
    with caplog.at_level(logging.WARNING, logger="surrogate.learned.compiled_trees"):
        assert (
            CompiledForest(booster.model_to_string()).predict(booster, _rows(COMPILE_MIN_ROWS))
            is None
        )
    assert "LightGBM predicts instead (AttributeError" in caplog.text


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert compiled_trees.enabled()
    monkeypatch.setenv("SURROGATE_COMPILED_TREES", "0")
    assert not compiled_trees.enabled()


def test_a_loaded_model_scores_alike_compiled_or_not(
    fitted: SurrogateModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    playbook_runs: pd.DataFrame,
) -> None:
    """Every score column of a saved model, loaded with and without compiled trees, on a
    batch large enough to compile: equal to rounding; and a refit drops the compiled trees."""
    from surrogate.config.training import CONFIG_COLUMNS
    from surrogate.prediction.predict import predict_frame

    monkeypatch.setattr(compiled_trees, "COMPILE_MIN_ROWS", 4096)  # a faster test
    d = fitted.save(tmp_path / "model")
    runs = playbook_runs[[c for c in CONFIG_COLUMNS if c in playbook_runs.columns]]
    frame = pd.concat([runs] * 2, ignore_index=True).head(4096 + 10)
    compiled = SurrogateModel.load(d)
    assert set(compiled._compiled) == {"status", "mfu", "mfu_lo", "mfu_hi", "mem"}
    fast = predict_frame(frame, model=compiled)
    assert len(list((tmp_path / "compiled-trees").glob("*/*.o"))) >= 4
    monkeypatch.setenv("SURROGATE_COMPILED_TREES", "0")
    plain_model = SurrogateModel.load(d)
    assert plain_model._compiled == {}
    plain = predict_frame(frame, model=plain_model)
    assert list(fast.columns) == list(plain.columns)
    for col in fast.columns:
        if not pd.api.types.is_numeric_dtype(fast[col]):
            assert fast[col].tolist() == plain[col].tolist(), col
        else:
            np.testing.assert_allclose(
                fast[col].to_numpy(float),
                plain[col].to_numpy(float),
                rtol=1e-9,
                atol=1e-12,
                err_msg=col,
            )
    compiled.fit(playbook_runs.sample(300, random_state=1))
    assert compiled._compiled == {}


def test_a_forest_pickles_without_its_native_code() -> None:
    import pickle

    booster = _synthetic_booster("regression")
    forest = CompiledForest(booster.model_to_string())
    X = _rows(COMPILE_MIN_ROWS)
    assert forest.predict(booster, X) is not None
    copy = pickle.loads(pickle.dumps(forest))
    np.testing.assert_allclose(copy.predict(booster, X), booster.predict(X), rtol=1e-12)


def _predict_in_child(
    forest: CompiledForest, booster: lgb.Booster, X: np.ndarray, queue: object
) -> None:
    queue.put(forest.predict(booster, X))  # type: ignore[attr-defined]


def test_a_forked_child_predicts_with_threads_of_its_own() -> None:
    """A process forked after a batch used the tree threads gets a pool of its own (it
    inherits none of its parent's threads: reusing their pool would wait forever)."""
    import multiprocessing

    booster = _synthetic_booster("regression")
    forest = CompiledForest(booster.model_to_string())
    X = _rows(2 * COMPILE_MIN_ROWS)
    assert forest.predict(booster, X) is not None  # the parent's pool now exists
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_predict_in_child, args=(forest, booster, X, queue))
    child.start()
    got = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    np.testing.assert_allclose(got, booster.predict(X), rtol=1e-12)
