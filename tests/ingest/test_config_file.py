"""Numbers of a configuration file read strictly (:mod:`surrogate.ingest.config_file`): YAML by
YAML 1.2's core rules, a scalar YAML 1.1 reads as another number refused with its line, and
NaN or infinity refused in YAML and JSON alike."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from surrogate.config.presets import model_values
from surrogate.config.training import TrainingConfig
from surrogate.config.training import config_from_flat as from_flat
from surrogate.errors import ConfigError
from surrogate.ingest.config_file import read_config_file

BASE = "model: 8b\nnum_nodes: 4\ndp: 8\ntp: 4\nmbs: 2\nzero_stage: 1\nframework: nanotron\n"


def config_from_flat(flat: dict[str, object]) -> TrainingConfig:
    """The configuration of a file's columns, its ``model`` preset filled in as predict does."""
    return from_flat(
        {
            **model_values(str(flat["model"]), None),
            **{k: v for k, v in flat.items() if k != "model"},
        }
    )


def read(tmp_path: Path, text: str, name: str = "run.yaml") -> dict[str, object]:
    path = tmp_path / name
    path.write_text(text)
    return read_config_file(path)


@pytest.mark.parametrize(
    "value",
    [
        "016",
        "-016",
        "+016",
        "00",
        "0_16",
        "08",
        "1:00",
        "1:30:00",
        "-1:00",
        "1:00.5",
        "1_000",
        "16_",
        "1_0.5",
        "0b10000",
        "-0b1",
        "0o20",
    ],
)
@pytest.mark.parametrize("where", ["flat", "layout"])
def test_a_number_yaml_1_1_reads_otherwise_is_refused_with_its_line(
    tmp_path: Path, value: str, where: str
) -> None:
    text = (
        BASE + f"grad_accum: {value}\n"
        if where == "flat"
        else BASE.replace("dp: 8\n", "") + f"layout:\n  dp: 8\n  grad_accum: {value}\n"
    )
    line = text.splitlines().index(next(x for x in text.splitlines() if value in x)) + 1
    match = (
        rf"line {line}: '{re.escape(value)}' is a number only YAML 1\.1 or only YAML 1\.2 "
        r"reads so .*plain decimal digits"
    )
    with pytest.raises(ConfigError, match=match):
        read(tmp_path, text)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("16", 16),
        ("+16", 16),
        ("0x10", 16),
        ("16.0", 16),
        ("1.6e1", 16),
        ("160e-1", 16),
        ("'016'", 16),
        ('"1:00"', None),
        ("0", None),
    ],
)
def test_core_numbers_read_as_yaml_1_2_says(
    tmp_path: Path, value: str, expected: int | None
) -> None:
    flat = read(tmp_path, BASE + f"grad_accum: {value}\n")
    if expected is None:  # quoted text, or 0: read, and refused by the configuration's rules
        with pytest.raises(ConfigError, match="grad_accum"):
            config_from_flat(flat)
        return
    assert config_from_flat(flat).layout.grad_accum == expected


def test_an_anchor_or_key_holding_an_ambiguous_number_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'010'"):
        read(tmp_path, "x-base: &b {mbs: 010}\nlayout: {<<: *b}\n" + BASE.replace("mbs: 2\n", ""))


@pytest.mark.parametrize("value", [".nan", ".NaN", ".NAN", ".inf", "-.inf", "+.Inf", "1e400"])
@pytest.mark.parametrize("key", ["mbs", "gpu", "framework", "seq_len"])
def test_yaml_nan_and_infinity_are_refused(tmp_path: Path, value: str, key: str) -> None:
    text = "\n".join(x for x in BASE.splitlines() if not x.startswith(f"{key}:"))
    with pytest.raises(ConfigError, match=rf"{key} must be a finite value, got -?(NaN|Infinity)"):
        read(tmp_path, text + f"\n{key}: {value}\n")


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
@pytest.mark.parametrize("nested", [False, True])
def test_json_nan_and_infinity_are_refused_not_defaulted(
    tmp_path: Path, value: str, nested: bool
) -> None:
    mbs = f'"layout": {{"mbs": {value}}}' if nested else f'"mbs": {value}'
    text = f'{{"model": "8b", "num_nodes": 4, "dp": 8, "tp": 4, {mbs}, "grad_accum": 16}}'
    with pytest.raises(ConfigError, match=r"run\.json: mbs must be a finite value"):
        read(tmp_path, text, "run.json")


@pytest.mark.parametrize("text", ["mbs: true", "mbs: false", "grad_accum: yes", "pp: on"])
def test_a_boolean_is_no_integer(tmp_path: Path, text: str) -> None:
    flat = read(tmp_path, BASE.replace("mbs: 2\n", "") + text + "\n")
    with pytest.raises(ConfigError, match=r"must be an integer, got (True|False)"):
        config_from_flat(flat)
