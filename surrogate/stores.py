"""Local SQLite stores (MLflow's tracking store, optuna's studies): the file a URL names.

SQLAlchemy's ``sqlite:///PATH`` (``sqlite:////abs/path`` for an absolute one) opens a
database file but does not create its directory; MLflow and optuna then fail with an
unhelpful "unable to open database file". Every command that opens a store calls
:func:`ensure_sqlite_dir` first. Other URLs (PostgreSQL, a tracking server) pass through.
"""

from __future__ import annotations

from pathlib import Path

SQLITE_PREFIX = "sqlite:///"


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL (its query string left out); None for other
    URLs and for an in-memory database."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    path = url[len(SQLITE_PREFIX):].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def ensure_sqlite_dir(url: str) -> None:
    """Create the directory of a ``sqlite:///`` URL's database file; nothing for other URLs."""
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)


def check_storage(url: str) -> None:
    """``url`` names a database optuna can open: a SQLAlchemy URL whose dialect and driver are
    installed (``sqlite:///study.db``, ``postgresql+psycopg://...``); ConfigError otherwise,
    before any work (optuna would fail with a SQLAlchemy traceback)."""
    from surrogate.errors import ConfigError
    from surrogate.extras import require

    require("optuna")  # brings SQLAlchemy
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        make_url(url).get_dialect().import_dbapi()
    except (ArgumentError, NoSuchModuleError, ImportError, ValueError) as e:
        raise ConfigError(
            f"--storage must be a database URL optuna can open, e.g. sqlite:///study.db or "
            f"postgresql+psycopg://USER@HOST/DB, got {url!r} ({e})") from None
