"""Configuration from files plus --set values: parsing, presets, conflicts, node placement."""

from __future__ import annotations

from typing import Any

import pytest

from surrogate.errors import ConfigError, DataError
from surrogate.ingest.runconfig import (
    build_config,
    expand_model,
    merge,
    parse_assignments,
    place_on_nodes,
    same_value,
)


def test_parse_assignments() -> None:
    assert parse_assignments(["tp=8", " model = 8b "]) == {"tp": "8", "model": "8b"}
    assert parse_assignments(["profile=my.json", "peak_mem_stage=0", "net_scale=0.7"]) == {
        "profile": "my.json",
        "peak_mem_stage": "0",
        "net_scale": "0.7",
    }


@pytest.mark.parametrize(
    ("items", "match"),
    [
        (["tp"], "--set takes KEY=VALUE, got 'tp'"),
        (["tp="], "--set takes KEY=VALUE"),
        (["tensor=8"], "--set key must be one of .* got 'tensor'"),
        (["tp=8", "tp=4"], "--set tp given twice: '8' and '4'"),
        (["dp=abc"], "--set dp must be an integer, got 'abc'"),  # was reported as a conflict
        (["sequence_parallel=maybe"], "--set sequence_parallel must be true or false"),
        (["net_scale=0"], r"--set net_scale must be a finite number > 0, got '0'"),
        (["net_scale=inf"], "--set net_scale must be a finite number > 0"),
        (["peak_mem_stage=1.5"], "--set peak_mem_stage must be a pipeline stage, a whole number"),
        (["peak_mem_stage=last"], "--set peak_mem_stage must be a pipeline stage"),
    ],
)
def test_parse_assignments_errors(items: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_assignments(items)


def test_expand_model_fills_shape_and_name() -> None:
    out = expand_model({"model": "8b", "tp": "2"})
    assert out["num_layers"] == 32 and out["num_kv_heads"] == 8 and out["tp"] == "2"
    assert out["model_name"] == "llama3-8b" and "model" not in out


def test_expand_model_conflict() -> None:
    with pytest.raises(ConfigError, match="model=8b has num_layers=32, but num_layers=30"):
        expand_model({"model": "8b", "num_layers": 30})


def test_a_preset_sequence_length_is_a_default() -> None:
    # a run of a preset at another sequence length (torchtitan's flavour 8B at 2,048 tokens)
    assert expand_model({"model": "8b", "seq_len": 2048})["seq_len"] == 2048
    assert merge({"model": "8b", "seq_len": 2048}, {}, where="f")["seq_len"] == 2048
    assert merge({"seq_len": 2048}, {"model": "8b"}, where="f")["seq_len"] == 2048
    assert merge({}, {"model": "8b"}, where="f")["seq_len"] == 8192
    with pytest.raises(DataError, match="seq_len"):
        merge({"seq_len": 2048}, {"model": "8b", "seq_len": 4096}, where="f")


def test_merge_fills_and_checks() -> None:
    assert merge({"tp": 8}, {"tp": "8", "num_nodes": "2"}, where="f") == {"tp": 8, "num_nodes": "2"}
    with pytest.raises(DataError, match="f: --set tp=4 conflicts with the file's tp=8"):
        merge({"tp": 8}, {"tp": "4"}, where="f")


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (8, "8", True),
        (8, "8.0", True),
        (True, "true", True),
        (False, "1", False),
        ("bf16", "BF16", True),
    ],
)
def test_same_value(a: Any, b: Any, same: bool) -> None:
    assert same_value(a, b) is same


def test_place_on_nodes() -> None:
    v: dict[str, Any] = {}
    place_on_nodes(v, 16)
    assert v == {"num_nodes": 2}
    v = {}
    place_on_nodes(v, 4)
    assert v == {"gpus_per_node": 4, "num_nodes": 1}
    v = {"num_nodes": 3}
    place_on_nodes(v, 24)
    assert v == {"num_nodes": 3}
    with pytest.raises(
        DataError,
        match=r"world size \(12 GPUs\) must be a multiple of "
        "gpus_per_node=8",
    ):
        place_on_nodes({}, 12)


def test_build_config_names_the_file() -> None:
    with pytest.raises(DataError, match=r"run.log: a configuration needs the model columns"):
        build_config({"tp": 1}, where="run.log")
