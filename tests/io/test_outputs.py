"""Outputs are checked before the work: files where directories are wanted, results already
there, places that cannot be written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from surrogate.errors import ConfigError
from surrogate.io.outputs import check_output_dir, check_output_file, check_writable_dir


def test_output_dir_must_be_a_new_or_empty_directory(tmp_path: Path) -> None:
    check_output_dir(tmp_path / "new" / "deeper", flag="--out")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match=r"--out must be a directory, got the file .*f'"):
        check_output_dir(tmp_path / "f", flag="--out")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "model.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"--out '.*d' already holds model\.json: give --force"):
        check_output_dir(tmp_path / "d", flag="--out")
    check_output_dir(tmp_path / "d", flag="--out", force=True)


def test_output_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match=r"--launch-dir must be a directory .* is a file"):
        check_writable_dir(tmp_path / "f" / "sub", flag="--launch-dir")
    with pytest.raises(ConfigError, match=r"--out must name a file, got the directory"):
        check_output_file(tmp_path, flag="--out")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_directory_is_refused(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(ConfigError, match=r"--out: cannot write in .*ro' \(permission denied"):
        check_output_file(ro / "t.parquet", flag="--out")
