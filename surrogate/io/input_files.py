"""Opening a file a user names: a regular file, read up to a cap for its kind.

Every file argument (a ``--config``, a ``--hf-config``, a ``--from-csv`` or ``--runs`` table,
a ``--profile``, a training log to ingest, a microbenchmark's JSON lines, an nccl-tests log, a
model's files) is opened here. A path that is not a regular file would otherwise hang or eat
memory: a FIFO blocks its reader until a writer comes, ``/dev/zero`` never ends (a config read
from it grew to 9.6 GB in 20 s), a directory or a socket fails deep in a parser. So:

- :func:`check_input_file` says, before anything is read, that the path exists and is a
  regular file (a symbolic link is followed) of at most the cap of its kind;
- :func:`read_input_bytes` and :func:`read_input_text` open it without blocking
  (``O_NONBLOCK``: opening a FIFO returns at once), check what was opened (``fstat``: no race
  with a file swapped in between) and read at most the cap, so a file that grows while it is
  read is refused too.

The caps (:data:`CAP_BYTES`) are far above any real file of the kind and far below the
machine's memory: each error names the kind's cap.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal

from surrogate.errors import DataError, SurrogateError

FileKind = Literal["config", "log", "table", "model", "database"]
CAP_BYTES: dict[FileKind, int] = {
    "config": 16 << 20,  # YAML/JSON/TOML configs, config.json, profiles, sidecars: < 100 kB
    "log": 2 << 30,  # a training log, microbench JSON lines, nccl-tests output
    "table": 16 << 30,  # a CSV or Parquet table (read in chunks where it can be)
    "model": 1 << 30,  # a learned model's booster text files (a few MB)
    "database": 1 << 40,  # an SQLite tracking store: only its header is read here
}
"""The most bytes read from a file of each kind."""

NOT_REGULAR: tuple[tuple[int, str], ...] = (
    (stat.S_IFDIR, "a directory"),
    (stat.S_IFIFO, "a FIFO (named pipe)"),
    (stat.S_IFCHR, "a character device"),
    (stat.S_IFBLK, "a block device"),
    (stat.S_IFSOCK, "a socket"),
)
"""What a path that is not a regular file is, by its ``stat`` file type."""


def size_text(n_bytes: int) -> str:
    """``16 MiB``, ``2 GiB``, ``1.5 KiB``: a byte count for a message."""
    value = float(n_bytes)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            break
        value /= 1024
    return f"{value:.3g} {unit}" if unit != "bytes" else f"{n_bytes:,} bytes"


def _what(what: str, path: Path) -> str:
    return f"{what} {str(path)!r}"


def _check_stat(
    st: os.stat_result, path: Path, *, what: str, kind: FileKind, error: type[SurrogateError]
) -> None:
    """``error`` unless ``st`` is a regular file within the cap of ``kind``."""
    cap = CAP_BYTES[kind]
    if not stat.S_ISREG(st.st_mode):
        fmt = stat.S_IFMT(st.st_mode)
        is_a = next((name for mode, name in NOT_REGULAR if mode == fmt), "not a regular file")
        link = " (through a symbolic link)" if path.is_symlink() else ""
        raise error(f"{_what(what, path)} must be a regular file, but it is {is_a}{link}")
    if st.st_size > cap:
        raise error(
            f"{_what(what, path)} holds {size_text(st.st_size)}; a {kind} file is read "
            f"up to {size_text(cap)}"
        )


def check_input_file(
    path: str | Path, *, what: str, kind: FileKind, error: type[SurrogateError] = DataError
) -> Path:
    """``path`` as a Path, once it is known to be an existing regular file (a link is followed)
    of at most :data:`CAP_BYTES` of ``kind``: for readers that take a path (pyarrow, pandas).
    ``what`` names the file in the message (``--hf-config``, ``log``).

    Raises:
        SurrogateError: ``error`` (DataError by default) saying what the path is instead.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise error(f"{_what(what, p)} does not exist") from None
    except OSError as e:
        raise error(f"cannot open {_what(what, p)}: {e.strerror or e}") from None
    _check_stat(st, p, what=what, kind=kind, error=error)
    return p


def read_input_bytes(
    path: str | Path, *, what: str, kind: FileKind, error: type[SurrogateError] = DataError
) -> bytes:
    """The bytes of the regular file ``path``, at most :data:`CAP_BYTES` of ``kind``; opened
    without blocking, so a FIFO is refused at once (module docstring).

    Raises:
        SurrogateError: ``error`` (DataError by default) if it does not exist, cannot be read,
            is not a regular file, or holds more than the cap.
    """
    p = check_input_file(path, what=what, kind=kind, error=error)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{_what(what, p)} does not exist") from None
    except OSError as e:
        raise error(f"cannot open {_what(what, p)}: {e.strerror or e}") from None
    cap = CAP_BYTES[kind]
    try:
        _check_stat(os.fstat(fd), p, what=what, kind=kind, error=error)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(cap + 1)
    except OSError as e:
        raise error(f"cannot read {_what(what, p)}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > cap:  # it grew while it was read
        raise error(
            f"{_what(what, p)} holds more than {size_text(cap)}; a {kind} file is read "
            f"up to {size_text(cap)}"
        )
    return data


def read_input_text(
    path: str | Path,
    *,
    what: str,
    kind: FileKind,
    error: type[SurrogateError] = DataError,
    encoding: str = "utf-8",
    errors: str = "strict",
) -> str:
    """The text of the regular file ``path`` (:func:`read_input_bytes`), decoded; a byte-order
    mark at the start is dropped. ``error`` if it is not text in ``encoding`` (with
    ``errors="strict"``)."""
    data = read_input_bytes(path, what=what, kind=kind, error=error)
    if data.startswith(b"\xef\xbb\xbf") and encoding.replace("-", "").lower() == "utf8":
        data = data[3:]
    try:
        text = data.decode(encoding, errors=errors)
    except UnicodeDecodeError as e:
        raise error(
            f"{_what(what, Path(path))} must be {encoding.upper()} text; byte {e.start} is not"
        ) from None
    # universal newlines, as open() in text mode reads them
    return text.replace("\r\n", "\n").replace("\r", "\n")
