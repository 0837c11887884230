"""Atomic writes: the target replaced whole or left as it was, no temporary file left behind,
and a write the system refuses reported as one OutputError naming the target."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from surrogate.errors import OutputError
from surrogate.io import atomic
from surrogate.io.atomic import atomic_file, atomic_path, atomic_write
from surrogate.io.tableio import TableWriter, write_table_atomic


def _left(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_a_write_replaces_the_file_whole_and_keeps_its_mode(tmp_path: Path) -> None:
    p = tmp_path / "out.json"
    atomic_write(p, "first")
    os.chmod(p, 0o640)
    atomic_write(p, b"second")
    assert p.read_text() == "second"
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    with atomic_file(p, "w") as f:
        f.write("third\n")
    assert p.read_text() == "third\n"
    assert _left(tmp_path) == ["out.json"]


@pytest.mark.parametrize("failure", [KeyboardInterrupt, ValueError, MemoryError])
def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, failure: type
) -> None:
    p = tmp_path / "t.csv"
    p.write_text("old")
    with pytest.raises(failure), atomic_path(p) as tmp:
        tmp.write_text("half")
        raise failure()
    assert p.read_text() == "old"
    assert _left(tmp_path) == ["t.csv"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS])
def test_a_refused_rename_or_sync_is_an_output_error_naming_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    def refuse(*_: object) -> None:
        raise OSError(code, os.strerror(code))

    for name in ("replace", "fsync"):
        with monkeypatch.context() as m:
            m.setattr(atomic.os, name, refuse)
            with pytest.raises(
                OutputError,
                match=rf"cannot write '.*r\.json': "
                rf"{os.strerror(code)}",
            ):
                atomic_write(tmp_path / "r.json", "{}")
        assert _left(tmp_path) == []


def test_a_full_device_is_one_output_error(tmp_path: Path, full_dir: Path) -> None:
    for write in (
        lambda p: atomic_write(p, "x" * 100_000),
        lambda p: write_table_atomic(pd.DataFrame({"a": range(50_000)}), p),
    ):
        for name in ("p.csv", "p.parquet"):
            with pytest.raises(OutputError, match=rf"cannot write '.*{name}': No space left"):
                write(full_dir / name)
    with (
        pytest.raises(OutputError, match=r"No space left"),
        TableWriter(full_dir / "w.csv") as writer,
    ):
        writer.write(pd.DataFrame({"a": range(50_000)}))
    assert _left(full_dir) == ["filler"]


def test_a_file_size_limit_is_one_output_error(tmp_path: Path) -> None:
    """``ulimit -f``: Python ignores SIGXFSZ, so the write fails with EFBIG."""
    code = (
        f"import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        f"from surrogate.io.atomic import atomic_write\n"
        f"atomic_write({str(tmp_path / 'big.txt')!r}, 'x' * 100_000)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "OutputError: cannot write" in done.stderr
    assert "File too large (the file-size limit, ulimit -f?)" in done.stderr
    assert _left(tmp_path) == []


@pytest.mark.parametrize("target", ["/dev/null", "/dev/full", "fifo.csv", "dir.csv"])
def test_a_device_fifo_or_directory_is_never_replaced(tmp_path: Path, target: str) -> None:
    """As root, renaming over /dev/null would replace the device with a file."""
    p = Path(target) if target.startswith("/") else tmp_path / target
    if target == "fifo.csv":
        os.mkfifo(p)
    elif target == "dir.csv":
        p.mkdir()
    kind = stat.S_IFMT(p.stat().st_mode)
    with pytest.raises(OutputError, match=r"an output is a regular file \(replaced whole\)"):
        atomic_write(p, "x")
    if p.suffix == ".csv":
        with pytest.raises(OutputError, match=r"an output is a regular file"):
            TableWriter(p)
    assert stat.S_IFMT(p.stat().st_mode) == kind


def test_a_symbolic_link_keeps_pointing_at_the_file_it_names(tmp_path: Path) -> None:
    real = tmp_path / "real.csv"
    real.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    write_table_atomic(pd.DataFrame({"a": [1]}), link)
    assert link.is_symlink() and real.read_text() == "a\n1\n"
