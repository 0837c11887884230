"""Opening a user's file: regular files only, opened without blocking, read up to a cap."""

from __future__ import annotations

import os
import socket
import threading
from contextlib import suppress
from pathlib import Path

import pytest

from surrogate.errors import ConfigError, DataError
from surrogate.io import input_files
from surrogate.io.input_files import check_input_file, read_input_bytes, read_input_text


def _fifo(tmp_path: Path) -> Path:
    p = tmp_path / "pipe.csv"
    os.mkfifo(p)
    return p


def _socket(tmp_path: Path) -> Path:
    p = tmp_path / "s.yaml"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()
    return p


def _dev_link(tmp_path: Path) -> Path:
    p = tmp_path / "zero.json"
    p.symlink_to("/dev/zero")
    return p


NOT_REGULAR = [
    (_fifo, r"pipe\.csv' must be a regular file, but it is a FIFO \(named pipe\)$"),
    (
        lambda _: Path("/dev/zero"),
        r"/dev/zero' must be a regular file, but it is a character "
        r"device$",
    ),
    (lambda _: Path("/dev/null"), r"/dev/null' must be a regular file, but it is a character"),
    (
        _dev_link,
        r"zero\.json' must be a regular file, but it is a character device \(through "
        r"a symbolic link\)",
    ),
    (lambda t: t, r"must be a regular file, but it is a directory"),
    (_socket, r"s\.yaml' must be a regular file, but it is a socket"),
]


@pytest.mark.parametrize(("make", "match"), NOT_REGULAR)
def test_what_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, make, match) -> None:
    """A FIFO with no writer would block a plain open for ever, /dev/zero never ends: both
    are refused before a byte is read (a watchdog writer ends the test if open blocks)."""
    path = make(tmp_path)
    if path.is_fifo():  # were the open to block, this writer unblocks it and the test fails

        def unblock() -> None:
            with suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

        watchdog = threading.Timer(5, unblock)
        watchdog.daemon = True
        watchdog.start()
    for read in (read_input_bytes, read_input_text, check_input_file):
        with pytest.raises(DataError, match=match):
            read(path, what="--from-csv", kind="table")


def test_the_error_type_is_the_callers(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--hf-config '/dev/zero' must be a regular file"):
        read_input_text("/dev/zero", what="--hf-config", kind="config", error=ConfigError)
    with pytest.raises(ConfigError, match=r"--config '.*nope\.yaml' does not exist"):
        read_input_text(tmp_path / "nope.yaml", what="--config", kind="config", error=ConfigError)


def test_a_file_over_its_kinds_cap_is_refused_naming_the_cap(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    with open(p, "wb") as f:  # sparse: 17 MiB that take no disk
        f.truncate((16 << 20) + 1)
    for read in (read_input_bytes, check_input_file):
        with pytest.raises(
            DataError,
            match=r"config\.json' holds 16 MiB; a config file is "
            r"read up to 16 MiB",
        ):
            read(p, what="--config", kind="config")
    assert len(read_input_bytes(p, what="table", kind="table")) == (16 << 20) + 1


def test_a_file_that_holds_more_than_its_size_says_is_cut_at_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/proc files say they are empty and hold text: the read itself stops at the cap."""
    monkeypatch.setitem(input_files.CAP_BYTES, "config", 16)
    with pytest.raises(
        DataError,
        match=r"holds more than 16 bytes; a config file is read up "
        r"to 16 bytes",
    ):
        read_input_bytes("/proc/self/status", what="--config", kind="config")


def test_text_drops_a_byte_order_mark_and_refuses_bytes_that_are_not_text(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    p.write_bytes(b"\xef\xbb\xbf{}\r\n")
    assert read_input_text(p, what="JSON", kind="config") == "{}\n"
    p.write_bytes(b"ok\xff")
    with pytest.raises(DataError, match=r"a\.json' must be UTF-8 text; byte 2 is not"):
        read_input_text(p, what="JSON", kind="config")
    assert read_input_text(p, what="log", kind="log", errors="replace") == "ok\ufffd"


def test_a_file_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    p = tmp_path / "secret.yaml"
    p.write_text("a: 1")
    p.chmod(0)
    if os.access(p, os.R_OK):  # root reads anything: make it a dangling link instead
        p.unlink()
        p.symlink_to(tmp_path / "gone")
        with pytest.raises(DataError, match=r"secret\.yaml' does not exist"):
            read_input_bytes(p, what="--config", kind="config")
        return
    with pytest.raises(DataError, match=r"cannot open --config .*secret\.yaml': Permission"):
        read_input_bytes(p, what="--config", kind="config")


# ----------------------------------------------------------- every file argument of the CLI
PREDICT = ["predict", "--model", "8b", "--nodes", "4", "--dp", "8", "--tp", "4", "--analytic"]
SHAPE = ["--gpu", "H100-SXM-80GB", "--nodes", "4", "--dp", "8", "--tp", "4", "--analytic"]
GOAL = [
    "--model",
    "8b",
    "--gpu",
    "H100-SXM-80GB",
    "--nodes",
    "4",
    "--global-batch-tokens",
    "4194304",
]
FILE_ARGUMENTS = {
    "--from-csv": lambda f: ["predict", "--from-csv", f],
    "--config": lambda f: ["predict", "--config", f, *SHAPE],
    "--hf-config": lambda f: ["predict", "--hf-config", f, *SHAPE],
    "--profile": lambda f: [*PREDICT, "--profile", f],
    "ingest": lambda f: ["ingest", f, "--into", "t.parquet"],
    "ingest --format torchtitan": lambda f: [
        "ingest",
        f,
        "--into",
        "t.parquet",
        "--format",
        "torchtitan",
    ],
    "ingest --format nccl-tests": lambda f: [
        "ingest",
        f,
        "--into",
        "t.parquet",
        "--format",
        "nccl-tests",
    ],
    "calibrate": lambda f: ["calibrate", f, "--gpu", "H100", "--out", "p.json"],
    "calibrate --runs": lambda f: ["calibrate", "--runs", f, "--gpu", "H100", "--out", "p.json"],
    "propose --runs": lambda f: ["propose", "--runs", f, *GOAL, "--round", "r1"],
    "heatmap --measured": lambda f: ["heatmap", "--measured", f, "--out", "h"],
    "data summary --sweeps": lambda f: ["data", "summary", "--sweeps", f],
}


def _hostile(tmp_path: Path, kind: str, suffix: str) -> str:
    p = tmp_path / f"in{suffix}"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dir":
        p.mkdir()
    elif kind == "device link":
        p.symlink_to("/dev/zero")
    elif kind == "device":
        return "/dev/zero"
    return str(p)


SUFFIX = {
    "--from-csv": ".csv",
    "--config": ".yaml",
    "--hf-config": ".json",
    "--profile": ".json",
    "ingest": ".log",
    "ingest --format torchtitan": ".log",
    "ingest --format nccl-tests": ".log",
    "calibrate": ".jsonl",
    "calibrate --runs": ".csv",
    "propose --runs": ".csv",
    "heatmap --measured": ".csv",
    "data summary --sweeps": ".parquet",
}


@pytest.mark.parametrize("kind", ["fifo", "device", "device link", "dir"])
@pytest.mark.parametrize("where", list(FILE_ARGUMENTS))
def test_every_file_argument_refuses_what_is_not_a_regular_file_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    kind: str,
) -> None:
    """Used to hang (a FIFO, /dev/zero read whole), or fail in a traceback. (ingest reads the
    logs under a directory; calibrate takes /dev/zero's missing suffix first.)"""
    from surrogate.cli import main

    if kind == "dir" and where.startswith("ingest"):
        pytest.skip("ingest DIRECTORY reads the logs under it")
    monkeypatch.chdir(tmp_path)
    path = _hostile(tmp_path, kind, SUFFIX[where])
    if kind == "fifo":  # were an open to block, this writer would unblock it (and fail it)

        def unblock() -> None:
            with suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

        watchdog = threading.Timer(20, unblock)
        watchdog.daemon = True
        watchdog.start()
    assert main(FILE_ARGUMENTS[where](path)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    what = {
        "fifo": "a FIFO",
        "device": "a character device",
        "device link": "a character device (through a symbolic link)",
        "dir": "a directory",
    }[kind]
    assert path in err, err
    assert (
        what in err
        or (kind == "dir" and "the directory" in err)
        or (where == "calibrate" and "got 'no suffix'" in err)
    ), err
