"""Standard output as the commands write it: closed, full, or of no width.

A command's answer is on stdout; where it cannot be written the command must fail in one line,
never answer nothing with exit 0 or end in a traceback:

- a **closed** stdout (``surrogate predict ... >&-``): Python sets ``sys.stdout`` to None and
  ``print`` and rich write nowhere without a word. :func:`prepare` puts in its place a stream
  whose every write fails (EBADF), so the command fails as it would writing to any broken file;
- a **full** one (``> /dev/full``): the write fails with ENOSPC; :func:`write_failure` turns
  it into the message, and :func:`silence` points the descriptor at ``/dev/null`` so that the
  interpreter's own flush at exit does not fail again with a second report. A pipe whose
  reader left (``| head``) ends the command quietly with exit 1, as rich does for its own
  writes: the reader asked for no more;
- a **width** of 0 (``COLUMNS=0``): rich would draw every table and line 0 columns wide, that is
  not at all. :func:`prepare` drops a ``COLUMNS`` below :data:`MIN_COLUMNS` (or not a number),
  so the terminal's width, or 80 columns, is used.
"""

from __future__ import annotations

import errno
import io
import os
import sys

from surrogate.io.atomic import is_write_failure

MIN_COLUMNS = 20
"""A ``COLUMNS`` below this is ignored (:func:`prepare`)."""


class ClosedStream(io.TextIOBase):
    """What stands for a closed stdout: every write fails with EBADF."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def isatty(self) -> bool:
        return False


def prepare() -> tuple[object, str | None]:
    """Make stdout and ``COLUMNS`` fit to write to (module docstring); returns what to put
    back with :func:`restore` (a caller in the same process, a test, finds them as they were)."""
    before = (sys.stdout, os.environ.get("COLUMNS"))
    if sys.stdout is None:
        sys.stdout = ClosedStream()
    columns = before[1]
    if columns is not None and not (columns.strip().isdigit() and int(columns) >= MIN_COLUMNS):
        del os.environ["COLUMNS"]
    return before


def restore(before: tuple[object, str | None]) -> None:
    stdout, columns = before
    sys.stdout = stdout
    if columns is not None:
        os.environ["COLUMNS"] = columns


def flush() -> None:
    """Flush stdout now, so that a failure is reported while the command can still say so."""
    if sys.stdout is not None:
        sys.stdout.flush()


def write_failure(e: OSError) -> str | None:
    """The one-line message for ``e`` if it is a write the system refused (a full disk or
    stream, a closed or broken one), else None. A failure naming no file is stdout's: every
    file the project writes goes through :mod:`surrogate.io.atomic`, which names it."""
    if not is_write_failure(e):
        return None
    why = e.strerror or str(e)
    if e.filename is not None:
        return f"cannot write {str(e.filename)!r}: {why}"
    if isinstance(sys.stdout, ClosedStream):
        return "cannot write the answer: standard output is closed"
    if e.errno == errno.EPIPE:
        return "cannot write the answer: standard output was closed by its reader (broken pipe)"
    return f"cannot write the answer to standard output: {why}"


def silence() -> None:
    """Point stdout's descriptor at /dev/null (after a failed write: what is still buffered
    would fail again when the interpreter flushes it at exit)."""
    stream = sys.stdout
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except OSError:
        pass
