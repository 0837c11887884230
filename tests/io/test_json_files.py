"""Reading a JSON file: its value, what the caller says a missing file means, and a DataError
naming a corrupt or unreadable one; a key given twice in a JSON object refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from surrogate.errors import ConfigError, DataError, NoModelError
from surrogate.io.json_files import read_json, refuse_duplicate_keys


def test_a_json_file_reads_as_its_value(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"round": 2, "proposals": []}')
    assert read_json(path, missing=DataError("none")) == {"round": 2, "proposals": []}


def test_a_missing_file_raises_what_the_caller_says(tmp_path: Path) -> None:
    with pytest.raises(NoModelError, match="no model here"):
        read_json(tmp_path / "model.json", missing=NoModelError("no model here"))


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"{", r"r\.json: not valid JSON \(Expecting"),
        (b"\xff\xfe{}", r"r\.json. must be UTF-8 text"),
    ],
)
def test_a_corrupt_file_is_a_data_error_naming_it(
    tmp_path: Path, content: bytes, match: str
) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(content)
    with pytest.raises(DataError, match=match):
        read_json(path, missing=DataError("none"))


def test_a_directory_is_a_data_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "r.json").mkdir()
    with pytest.raises(DataError, match=r"r\.json. must be a regular file, but it is a dir"):
        read_json(tmp_path / "r.json", missing=DataError("none"))


def test_a_key_given_twice_is_refused_not_overwritten() -> None:
    assert json.loads('{"a": 1, "b": {"a": 2}}', object_pairs_hook=refuse_duplicate_keys) == {
        "a": 1,
        "b": {"a": 2},
    }  # the same key in two objects is fine
    with pytest.raises(ConfigError, match="each key must appear once, got 'a' twice"):
        json.loads('{"a": 1, "a": 2}', object_pairs_hook=refuse_duplicate_keys)
