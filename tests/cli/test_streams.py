"""Where a command's answer cannot be written (a closed, full or broken stdout, a full disk, a
file-size or address-space limit) it fails in one ``error:`` line, never in a traceback or an
empty answer with exit 0; a width of 0 falls back to a readable one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from surrogate.cli import address_space_error, main

PREDICT = ["predict", "--model", "8b", "--nodes", "4", "--dp", "8", "--tp", "4", "--analytic"]
CSV = "model,num_nodes,dp,tp\n8b,4,8,4\n"
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _surrogate(
    args: list[str],
    *,
    redirect: str = "",
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``surrogate ARGS REDIRECT`` as a shell runs it (``>&-`` closes stdout)."""
    entry = f"{sys.executable} -c 'from surrogate.cli import entry; entry()'"
    quoted = " ".join(f"'{a}'" for a in args)
    return subprocess.run(
        f"{entry} {quoted} {redirect}",
        shell=True,
        capture_output=True,
        text=True,
        env=env or ENV,
        cwd=cwd,
        check=False,
        timeout=120,
    )


def _one_error_line(done: subprocess.CompletedProcess[str], match: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert re.search(match, done.stderr), done.stderr


@pytest.mark.parametrize("args", [PREDICT, [*PREDICT, "--json"], ["data", "summary"]])
def test_a_closed_stdout_is_an_error_not_a_silent_exit_0(args: list[str]) -> None:
    _one_error_line(
        _surrogate(args, redirect=">&-"), r"cannot write the answer: standard output is closed"
    )


@pytest.mark.parametrize("args", [PREDICT, [*PREDICT, "--json"], ["--help"], ["predict", "--help"]])
def test_a_full_stdout_is_one_error_line(args: list[str]) -> None:
    _one_error_line(
        _surrogate(args, redirect="> /dev/full"),
        r"cannot write the answer to standard output: No space left on device",
    )


def test_a_table_to_a_full_stdout_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "in.csv").write_text(CSV)
    _one_error_line(
        _surrogate(
            ["predict", "--from-csv", "in.csv", "--analytic"], redirect="> /dev/full", cwd=tmp_path
        ),
        r"No space left on device",
    )


@pytest.mark.parametrize("columns", ["0", "1", "-5", "abc", ""])
def test_a_width_of_nothing_prints_the_answer_at_a_readable_width(
    columns: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    assert main(PREDICT) == 0
    out = capsys.readouterr().out
    assert "tokens/s per GPU" in out and "MFU" in out
    assert max(len(line) for line in out.splitlines()) <= 200
    assert os.environ.get("COLUMNS") == columns  # put back for the caller


def test_a_full_disk_under_out_is_one_error_line_and_leaves_nothing(
    tmp_path: Path, full_dir: Path
) -> None:
    (tmp_path / "in.csv").write_text(CSV)
    for out in ("p.csv", "p.parquet"):
        _one_error_line(
            _surrogate(
                ["predict", "--from-csv", "in.csv", "--analytic", "--out", str(full_dir / out)],
                cwd=tmp_path,
            ),
            rf"cannot write '.*{out}': No space left on device",
        )
    assert sorted(p.name for p in full_dir.iterdir()) == ["filler"]


def test_a_file_size_limit_is_one_error_line(tmp_path: Path) -> None:
    """``ulimit -f``: SIGXFSZ is ignored by Python, the write fails with EFBIG."""
    (tmp_path / "in.csv").write_text("model,num_nodes,dp,tp\n" + "8b,4,8,4\n" * 2000)
    done = subprocess.run(
        f"ulimit -f 8; {sys.executable} -c 'from surrogate.cli import entry; entry()' predict "
        "--from-csv in.csv --analytic --out out.csv",
        shell=True,
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )
    _one_error_line(done, r"cannot write 'out\.csv': File too large \(the file-size limit")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_an_address_space_limit_too_small_to_start_is_refused_at_once() -> None:
    done = subprocess.run(
        f"ulimit -v 600000; {sys.executable} -c 'from surrogate.cli import entry; entry()' "
        + " ".join(PREDICT),
        shell=True,
        capture_output=True,
        text=True,
        env=ENV,
        check=False,
        timeout=120,
    )
    _one_error_line(
        done,
        r"the address-space limit \(ulimit -v\) is 586 MiB; surrogate needs "
        r"at least 1,024 MiB",
    )
    assert address_space_error() is None  # none here


def test_running_out_of_memory_is_one_error_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import surrogate.cli.predict as predict_cli

    def exhausted(*_: object, **__: object) -> None:
        raise MemoryError

    monkeypatch.setattr(predict_cli, "_predict_one", exhausted)
    assert main(PREDICT) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: out of memory (is an address-space limit set, ulimit -v?")


def test_every_output_on_a_full_disk_is_one_error_line_and_leaves_nothing(
    tmp_path: Path,
    full_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ingest --into, search --launch-dir (which left a .tmp file), propose --round, calibrate
    --out: one line naming what could not be written, and nothing half-written left."""
    playbook = Path(__file__).resolve().parents[1] / "fixtures" / "sweeps_playbook_excerpt.csv"
    goal = [
        "--model",
        "8b",
        "--gpu",
        "H100-SXM-80GB",
        "--nodes",
        "4",
        "--global-batch-tokens",
        "4194304",
    ]
    monkeypatch.chdir(tmp_path)
    for argv, names in [
        (["ingest", str(playbook), "--into", str(full_dir / "t.parquet")], "t.parquet"),
        (["ingest", str(playbook), "--into", str(full_dir / "t.csv")], "t.csv"),
        (
            ["search", *goal, "--analytic", "--launch-dir", str(full_dir / "launch")],
            "launch/top01-",
        ),
        (["propose", *goal, "--round", str(full_dir / "r1")], "the round '.*r1'"),
        (
            ["calibrate", "--runs", "playbook", "--gpu", "H100", "--out", str(full_dir / "p.json")],
            "p.json",
        ),
    ]:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and re.search(
            rf"^error: cannot write .*{names}.*: No "
            r"space left on device$",
            err,
        ), err
        assert sorted(p.name for p in full_dir.iterdir() if not p.name.endswith(".lock")) == [
            "filler"
        ], argv


@pytest.mark.parametrize("args", [["data", "summary"], PREDICT])
def test_a_reader_that_leaves_ends_the_command_quietly(args: list[str], tmp_path: Path) -> None:
    """``surrogate ... | head``: the reader asked for no more; no traceback, no message."""
    entry = f"{sys.executable} -c 'from surrogate.cli import entry; entry()'"
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"{entry} {' '.join(args)} 2>err | head -c 1 >/dev/null;"
            " echo ${PIPESTATUS[0]}; cat err",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )
    status, *err = done.stdout.splitlines()
    assert status in ("0", "1") and err == [], done.stdout
