"""SQLite store URLs: the database file, and its directory made before MLflow or optuna open it."""

from __future__ import annotations

from pathlib import Path

from surrogate.stores import ensure_sqlite_dir, sqlite_path


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
