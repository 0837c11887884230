"""Where a command will write, checked before it works.

A command that trains for minutes, searches thousands of layouts or parses thousands of logs
must not end in an error about its output: a file where a directory is wanted, a result that
is already there, a directory it cannot write in. Each command calls these checks with its
flag name first, so the user hears at once what must hold.
"""

from __future__ import annotations

import os
from pathlib import Path

from surrogate.errors import ConfigError


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_writable_dir(directory: str | Path, *, flag: str) -> None:
    """``directory`` exists and is writable, or can be created: its nearest existing ancestor
    is a writable directory. ConfigError naming ``flag`` otherwise."""
    d = Path(directory)
    base = _nearest_existing(d)
    if not base.is_dir():
        raise ConfigError(
            f"{flag} must be a directory or a place to create one, but "
            f"{str(base)!r} is a file (given {str(d)!r})"
        )
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{flag}: cannot write in {str(base)!r} (permission denied; given {str(d)!r})"
        )


def check_output_file(path: str | Path, *, flag: str) -> None:
    """``path`` can be written as a file: not a directory, in a writable directory (an
    existing file is replaced, as the commands that take such a flag document)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag} must name a file, got the directory {str(p)!r}")
    if p.exists() and not p.is_file():
        raise ConfigError(
            f"{flag} must name a regular file (replaced whole) or a new one, got "
            f"{str(p)!r}, which is not (a device? a FIFO?)"
        )
    check_writable_dir(p.parent, flag=flag)


def check_output_dir(directory: str | Path, *, flag: str, force: bool = False) -> None:
    """``directory`` can receive a command's files: a directory (or creatable), writable, and
    empty unless ``force`` (replace what is there)."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise ConfigError(f"{flag} must be a directory, got the file {str(d)!r}")
    if d.is_dir() and not force:
        present = sorted(f.name for f in d.iterdir())
        if present:
            shown = ", ".join(present[:3]) + (" ..." if len(present) > 3 else "")
            raise ConfigError(
                f"{flag} {str(d)!r} already holds {shown}: give --force to "
                "replace it, or another directory"
            )
    check_writable_dir(d, flag=flag)
