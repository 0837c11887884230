"""The cross-process append lock of a table (:func:`locked`).

An append is a read-modify-write: two processes appending at once would each write the table
they read plus their own rows, and the second rename would drop the first one's rows.
:func:`locked` serialises them with an advisory lock on a sibling file ``.NAME.lock`` (the
``filelock`` package: ``flock``, which local filesystems and NFSv4 honour); every append path
holds it around the whole read-modify-write. The holder writes its pid, host and command into
``.NAME.lock.holder``, so that a process kept waiting (by a stopped ingest, say) says who holds
the lock, and gives up after a bounded time (:func:`locked`).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from surrogate.errors import DataError, shorten
from surrogate.io.atomic import atomic_write

LOCK_TIMEOUT_S = 60.0
"""How long an append waits for another process's append to the same table before giving up
(unless :data:`LOCK_TIMEOUT_ENV` says otherwise)."""
LOCK_TIMEOUT_ENV = "SURROGATE_LOCK_TIMEOUT_S"
"""The environment variable that sets the lock wait in seconds (0: fail at once if held)."""
LOCK_NOTICE_S = 2.0
"""A wait for the lock longer than this is told, with the holder."""
LOCK_NOTICE_EVERY_S = 10.0
"""Then told again this often."""


def lock_timeout_s() -> float:
    """How long an append waits for the lock: :data:`LOCK_TIMEOUT_ENV` if set, else
    :data:`LOCK_TIMEOUT_S`. DataError for a value that is not a number of seconds >= 0."""
    text = os.environ.get(LOCK_TIMEOUT_ENV, "").strip()
    if not text:
        return LOCK_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 <= value < float("inf")):
        raise DataError(f"{LOCK_TIMEOUT_ENV} must be a number of seconds >= 0, got {text!r}")
    return value


def _holder_file(p: Path) -> Path:
    return p.with_name(f".{p.name}.lock.holder")


def _write_holder(p: Path) -> None:
    """Say in the lock's sidecar who holds it: pid, host, command line, since when."""
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join(["surrogate", *sys.argv[1:]])
        if Path(sys.argv[0]).name == "surrogate"
        else " ".join(sys.argv),
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with suppress(OSError):  # the sidecar informs; the lock holds without it
        atomic_write(_holder_file(p), json.dumps(record))


def lock_holder(path: str | Path) -> str:
    """Who holds the append lock of the table at ``path``, as its sidecar says: ``pid 123 on
    host h (surrogate ingest a.csv --into t.parquet) since 2026-01-01T00:00:00Z``; a process
    of this host that no longer runs is said to be gone (a stopped one still holds it)."""
    side = _holder_file(Path(path))
    try:
        record = json.loads(side.read_text(encoding="utf-8"))
        pid, host = int(record["pid"]), str(record["host"])
        command, since = shorten(str(record["command"]), 120), str(record["since"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"a process that did not say who it is ({side.name} missing or unreadable)"
    alive = ""
    if host == socket.gethostname():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            alive = ", which no longer runs"
        except OSError:
            pass
    return f"pid {pid} on host {host} ({command}) since {since}{alive}"


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def locked(
    path: str | Path, *, timeout_s: float | None = None, notify: Callable[[str], None] = _to_stderr
) -> Iterator[None]:
    """Hold the append lock of the table at ``path`` (module docstring) for the ``with`` body;
    the sidecar ``.NAME.lock.holder`` says who holds it (:func:`lock_holder`).

    A wait longer than :data:`LOCK_NOTICE_S` is told through ``notify`` (on stderr by
    default), naming the holder, then every :data:`LOCK_NOTICE_EVERY_S`. Not re-entrant: a
    second ``locked`` on the same table inside the body waits for the first. DataError naming
    the holder if it keeps the lock for ``timeout_s`` (None: :func:`lock_timeout_s`)."""
    from filelock import FileLock, Timeout

    limit_s = lock_timeout_s() if timeout_s is None else timeout_s
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(p.with_name(f".{p.name}.lock"))
    start = time.monotonic()
    notice_s = LOCK_NOTICE_S
    while True:
        waited = time.monotonic() - start
        try:
            lock.acquire(timeout=max(0.0, min(limit_s - waited, notice_s - waited, 1.0)))
            break
        except Timeout:
            waited = time.monotonic() - start
            if waited >= limit_s:
                raise DataError(
                    f"the table {str(p)!r} is locked by {lock_holder(p)}; gave up after "
                    f"{limit_s:g} s ({LOCK_TIMEOUT_ENV} sets how long to wait; a stopped "
                    f"process holds the lock until it resumes or is killed)"
                ) from None
            if waited >= notice_s:
                notify(
                    f"waiting for the lock of {str(p)!r}, held by {lock_holder(p)} "
                    f"({waited:.0f} s of at most {limit_s:g} s)"
                )
                notice_s += LOCK_NOTICE_EVERY_S
    try:
        _write_holder(p)
        yield
    finally:
        with suppress(OSError):
            _holder_file(p).unlink()
        lock.release()
