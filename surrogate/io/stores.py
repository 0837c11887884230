"""Local SQLite stores (MLflow's tracking store, optuna's studies): the file a URL names.

SQLAlchemy's ``sqlite:///PATH`` (``sqlite:////abs/path`` for an absolute one) opens a
database file but does not create its directory; MLflow and optuna then fail with an
unhelpful "unable to open database file". Every command that opens a store calls
:func:`ensure_sqlite_dir` first. Other URLs (PostgreSQL, a tracking server) pass through.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as Late
from pathlib import Path

from surrogate.errors import ConfigError
from surrogate.extras import require
from surrogate.io.input_files import check_input_file
from surrogate.io.outputs import check_writable_dir
from surrogate.io.table_files import file_kind

SQLITE_PREFIX = "sqlite:///"
STORE_CHECK_TIMEOUT_S = 3.0
"""How long a store's check waits for a server or a database lock before a command works."""
NETWORK_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306, "mssql": 1433}
"""The default port of each networked store's scheme (before any ``+driver``)."""


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL (its query string left out); None for other
    URLs and for an in-memory database."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    path = url[len(SQLITE_PREFIX) :].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def ensure_sqlite_dir(url: str) -> None:
    """Create the directory of a ``sqlite:///`` URL's database file; nothing for other URLs."""
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)


def check_storage(url: str, timeout_s: float = STORE_CHECK_TIMEOUT_S) -> None:
    """``url`` names a database optuna can open: a SQLAlchemy URL whose dialect and driver are
    installed (``sqlite:///study.db``, ``postgresql+psycopg://...``), whose SQLite file can be
    written or whose server accepts a connection within ``timeout_s``; ConfigError otherwise,
    before any work (optuna would fail with a SQLAlchemy traceback, or retry for minutes)."""

    require("optuna")  # brings SQLAlchemy
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        make_url(url).get_dialect().import_dbapi()
    except (ArgumentError, NoSuchModuleError, ImportError, ValueError) as e:
        raise ConfigError(
            f"--storage must be a database URL optuna can open, e.g. sqlite:///study.db or "
            f"postgresql+psycopg://USER@HOST/DB, got {url!r} ({e})"
        ) from None
    where, fix = f"--storage {url!r}", "give another --storage"
    db = sqlite_path(url)
    if db is not None:
        check_sqlite_file(db, timeout_s, where=where, fix=fix)
    elif not url.startswith("sqlite:"):
        reach(url, timeout_s, where=where, fix=fix)


def check_sqlite_file(
    db: Path, timeout_s: float = STORE_CHECK_TIMEOUT_S, *, where: str, fix: str
) -> None:
    """ConfigError unless the SQLite database file ``db`` can be created or written: its
    directory writable (a file can be created there), an existing file a database whose write
    lock is free within ``timeout_s`` (taken and released at once); nothing is left behind.
    ``where`` names the setting, ``fix`` what else would do; both go into the message."""
    import sqlite3

    try:
        check_writable_dir(db.parent, flag=where)
    except ConfigError as e:
        raise ConfigError(f"{e}; {fix}") from None
    if db.is_dir():
        raise ConfigError(f"{where}: {str(db)!r} is a directory, not a database file; {fix}")
    if (
        db.exists()
        and check_input_file(db, what=where, kind="database", error=ConfigError).stat().st_size
    ):
        with open(db, "rb") as f:
            head = f.read(16)
        if head != b"SQLite format 3\x00":
            kind = file_kind(head) or "text"
            raise ConfigError(f"{where}: {str(db)!r} holds {kind}, not an SQLite database; {fix}")
    try:
        if not db.exists():  # nothing is created before the work: a file is tried, removed
            if db.parent.is_dir():
                import tempfile

                with tempfile.TemporaryFile(dir=db.parent):
                    pass
            return
        con = sqlite3.connect(str(db), timeout=timeout_s)
        try:
            con.execute("BEGIN IMMEDIATE")
            con.rollback()
        finally:
            con.close()
    except (sqlite3.Error, OSError) as e:
        raise ConfigError(f"{where}: cannot write the database {str(db)!r} ({e}); {fix}") from None


def reach(
    url: str,
    timeout_s: float = STORE_CHECK_TIMEOUT_S,
    *,
    where: str,
    fix: str,
    http_health: bool = False,
) -> None:
    """ConfigError unless the host of ``url`` accepts a connection within ``timeout_s`` (and,
    with ``http_health``, answers ``/health`` as an MLflow server does): an unreachable server
    must cost seconds before the work, not minutes of retries after it."""
    from urllib.parse import urlsplit

    scheme = urlsplit(url).scheme.lower().split("+", 1)[0]
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or NETWORK_PORTS.get(scheme, 0)
    except ValueError as e:
        raise ConfigError(f"{where}: not a URL ({e}); {fix}") from None
    if not host:
        if http_health:
            raise ConfigError(f"{where}: the URL names no host; {fix}")
        return  # a database on a local socket: its driver connects
    try:
        _resolve(host, port, timeout_s)
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ConfigError(
            f"{where}: cannot reach {host}:{port} within {timeout_s:g} s "
            f"({why}); start the server, or {fix}"
        ) from None
    if not http_health:
        return
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout_s):
            pass
    except urllib.error.HTTPError as e:
        if e.code not in (401, 403):  # an authenticating server: MLflow says the rest
            raise ConfigError(
                f"{where}: {host}:{port} answers HTTP {e.code} at /health, "
                f"where an MLflow tracking server answers 200 (is it one?); "
                f"{fix}"
            ) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise ConfigError(
            f"{where}: {host}:{port} does not answer HTTP within "
            f"{timeout_s:g} s ({reason}); start the MLflow server, or "
            f"{fix}"
        ) from None


def _resolve(host: str, port: int, timeout_s: float) -> None:
    """Look ``host`` up within ``timeout_s`` (the resolver itself has no timeout: an
    unanswered DNS query would hold the command); OSError otherwise."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(socket.getaddrinfo, host, port).result(timeout=timeout_s)
    except Late:
        raise TimeoutError(f"no answer from the resolver for {host!r}") from None
    finally:
        pool.shutdown(wait=False)
