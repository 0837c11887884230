"""SQLite store URLs: the database file, and its directory made before MLflow or optuna open it."""

from __future__ import annotations

from pathlib import Path

import pytest

from surrogate.io.stores import ensure_sqlite_dir, sqlite_path


def test_sqlite_path() -> None:
    assert sqlite_path("sqlite:///mlruns/mlflow.db") == Path("mlruns/mlflow.db")
    assert sqlite_path("sqlite:////abs/x.db?timeout=30") == Path("/abs/x.db")
    assert sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path("sqlite:///") is None
    assert sqlite_path("postgresql+psycopg://u@h/db") is None
    assert sqlite_path("http://127.0.0.1:5000") is None


def test_ensure_sqlite_dir(tmp_path: Path) -> None:
    ensure_sqlite_dir(f"sqlite:///{tmp_path}/a/b/study.db")
    assert (tmp_path / "a" / "b").is_dir()
    assert not (tmp_path / "a" / "b" / "study.db").exists()
    ensure_sqlite_dir("postgresql+psycopg://u@h/db")  # nothing to make


@pytest.mark.parametrize("url", ["not a url", "nosuchdb://x", "postgresql+nosuchdriver://u@h/db"])
def test_check_storage_refuses_what_optuna_cannot_open(url: str) -> None:
    from surrogate.errors import ConfigError
    from surrogate.io.stores import check_storage

    with pytest.raises(ConfigError, match="--storage must be a database URL optuna can open"):
        check_storage(url)


def test_check_storage_accepts_sqlite(tmp_path) -> None:
    from surrogate.io.stores import check_storage

    check_storage(f"sqlite:///{tmp_path}/study.db")
