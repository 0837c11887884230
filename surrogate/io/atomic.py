"""Writing a file atomically, and saying in one line why a write failed.

Every file the project writes (a table, a prediction, a round's proposals and record, a launch
script, a profile, a model's files) goes through :func:`atomic_path`: the content is written
to a temporary file in the target's directory (``.NAME.PID.RANDOM.tmp``, so that a rename
cannot cross filesystems), flushed to disk (``fsync``), and renamed over the target
(``os.replace``, atomic on POSIX). A crash, a full disk, a file-size limit (``ulimit -f``:
Python ignores SIGXFSZ, so the write fails with EFBIG) or an interrupt leaves the target as it
was and no temporary file behind. The new file keeps the mode bits of the one it replaces (a
new one gets 0666 less the umask, as a plain ``open`` would give it).

A write that fails for a reason of the system (no space, quota, a read-only filesystem, a
file-size limit, an I/O error) raises :class:`~surrogate.errors.OutputError` naming the
target: the CLI prints it as one ``error:`` line.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from surrogate.errors import OutputError
from surrogate.io.input_files import NOT_REGULAR as _NOT_REGULAR

WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EPIPE, errno.EBADF}
)
"""The errors of a write that say the system refused it, not that the program is wrong (a
permission refused is named where the temporary file is created: :func:`new_temporary`)."""


def output_error(target: str | Path, e: OSError) -> OutputError:
    """The OutputError of a write of ``target`` that failed with ``e``."""
    code = e.errno
    if code is None and (m := re.search(r"\[[Ee]rrno (\d+)\]", str(e))):  # pyarrow's text
        code = int(m.group(1))
    why = os.strerror(code) if code else (e.strerror or str(e))
    if code == errno.EFBIG:
        why += " (the file-size limit, ulimit -f?)"
    error = OutputError(f"cannot write {str(target)!r}: {why}")
    error.reason = why
    return error


def is_write_failure(e: OSError) -> bool:
    """Whether ``e`` says the system refused a write (:data:`WRITE_ERRNOS`); pyarrow's errors
    carry no errno, only ``[Errno N]`` in their text."""
    if e.errno is not None:
        return e.errno in WRITE_ERRNOS
    return any(f"[{word} {n}]" in str(e) for n in WRITE_ERRNOS for word in ("Errno", "errno"))


def target_of(path: str | Path) -> Path:
    """The file a write of ``path`` replaces: ``path``, or the file a symbolic link names (the
    link stays). OutputError if that exists and is not a regular file: renaming over a device,
    a FIFO or a directory (``--out /dev/stdout`` as root) would replace it."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return p
    except OSError as e:
        raise output_error(p, e) from None
    if not stat.S_ISREG(st.st_mode):
        fmt = stat.S_IFMT(st.st_mode)
        is_a = next((name for mode, name in _NOT_REGULAR if mode == fmt), "not a regular file")
        raise OutputError(
            f"cannot write {str(p)!r}: it is {is_a}; an output is a regular file "
            "(replaced whole) or a new one"
        )
    return p.resolve() if p.is_symlink() else p


def new_temporary(path: str | Path) -> Path:
    """A new empty file in the directory of ``path`` (created if missing), to be renamed over
    it by :func:`commit_temporary`: the mode bits of ``path`` if it exists, else 0666 less the
    umask. OutputError naming ``path`` if it cannot be created. ``path`` must be a
    :func:`target_of`."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        # os.open applies the umask to 0o666, as creating the file by name would (mkstemp: 0600)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        with suppress(FileNotFoundError):  # a new file keeps the umask's mode
            os.chmod(tmp, stat.S_IMODE(os.stat(p).st_mode))
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise output_error(p, e) from None
    return tmp


def commit_temporary(tmp: Path, path: str | Path) -> None:
    """Sync ``tmp`` to disk and rename it over ``path``; ``tmp`` removed if that fails
    (OutputError naming ``path`` for a refusal of the system)."""
    try:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and is_write_failure(e):
            raise output_error(path, e) from None
        raise


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for the ``with`` body to write (by any writer that
    takes a path: pyarrow, LightGBM, a compiler); synced and renamed over ``path`` when the
    body ends, removed if it raises (module docstring).

    Raises:
        OutputError: the directory cannot be created, or the file cannot be written, synced or
            renamed, for a reason of the system (:data:`WRITE_ERRNOS`), naming ``path``.
    """
    target = target_of(path)
    tmp = new_temporary(target)
    try:
        yield tmp
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and not isinstance(e, OutputError) and is_write_failure(e):
            raise output_error(path, e) from None
        raise
    commit_temporary(tmp, target)


@contextmanager
def atomic_file(
    path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8"
) -> Iterator[IO]:  # type: ignore[type-arg]  # text or bytes by ``mode``
    """The temporary file of :func:`atomic_path`, open for writing (``"w"`` text, ``"wb"``
    bytes), closed, synced and renamed over ``path`` when the ``with`` body ends."""
    with atomic_path(path) as tmp:
        binary = "b" in mode
        with open(
            tmp, mode, encoding=None if binary else encoding, newline=None if binary else ""
        ) as f:
            yield f


def atomic_write(path: str | Path, data: bytes | str | Callable[[Path], object]) -> None:
    """Write ``data`` (bytes, UTF-8 text, or a function that writes a given path) to ``path``
    atomically (:func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        elif isinstance(data, str):
            tmp.write_bytes(data.encode("utf-8"))
        else:
            data(tmp)
