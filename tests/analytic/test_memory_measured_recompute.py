"""The activations under recomputation against what torchtitan's and Megatron-Core's own
stacks of four layers keep after their forward, as measured by ``python -m
microbench.saved_activations --recompute`` (``datasets/saved_activations/``: every storage the
forward made that is still alive, whoever holds it; the first layer's input, the output and
the parameters aside)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from surrogate.analytic import memory
from surrogate.config import ModelConfig

MEASURED = Path(__file__).parents[2] / "datasets" / "saved_activations" / "2026-11-24"


def _load(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (MEASURED / name).read_text().splitlines()]


KEPT = {"torchtitan": _load("torchtitan-0.2.2-recompute.jsonl"),
        "megatron": _load("megatron-core-0.16.1-recompute.jsonl")}
SAVED = {"torchtitan": _load("torchtitan-0.2.2.jsonl"),
         "megatron": [r for r in _load("megatron-core-0.16.1.jsonl")
                      if r["config"]["fused_swiglu"]]}
SHAPE_KEYS = ("tp", "num_kv_heads", "mbs")


def _id(rec: dict[str, Any]) -> str:
    c = rec["config"]
    return f"{rec['framework']}-{c['recompute']}-tp{c['tp']}-kv{c['num_kv_heads']}-mbs{c['mbs']}"


def _of(framework: str, recompute: str) -> list[dict[str, Any]]:
    return [r for r in KEPT[framework] if r["config"]["recompute"] == recompute]


def _saved_per_layer(rec: dict[str, Any]) -> int:
    """What one layer of the same shape saves (the records of ``saved_by_module``)."""
    key = tuple(rec["config"][k] for k in SHAPE_KEYS)
    one = next(r for r in SAVED[rec["framework"]]
               if tuple(r["config"][k] for k in SHAPE_KEYS) == key)
    return sum(s["bytes"] for s in one["saved"])


def _cols(cols: Any, rec: dict[str, Any], **layout: Any) -> Any:
    """The model's columns of a record's stack of four layers, under ``layout``."""
    c = rec["config"]
    model = ModelConfig(num_layers=4, hidden_size=c["hidden_size"],
                        ffn_hidden_size=c["ffn_hidden_size"], num_heads=c["num_heads"],
                        num_kv_heads=c["num_kv_heads"], vocab_size=256, seq_len=c["seq_len"])
    return cols(model, dp=1, tp=c["tp"], mbs=c["mbs"], framework=rec["framework"],
                sequence_parallel=c["sequence_parallel"], **layout)


def _model_layer(cols: Any, rec: dict[str, Any], recompute: str) -> float:
    return float(memory.activation_bytes_per_layer(_cols(cols, rec, recompute=recompute))[0])


def _layer_input(c: dict[str, Any]) -> float:
    return 2 * c["mbs"] * c["seq_len"] * c["hidden_size"] / c["tp"]


def _lse(c: dict[str, Any]) -> float:
    """The attention's log-sum-exp, fp32 per head and token, which the model leaves out."""
    return 4 * c["mbs"] * c["seq_len"] * c["num_heads"] / c["tp"]


def _gather_buffer(c: dict[str, Any]) -> float:
    """Megatron-Core's persistent buffer for the sequence-parallel all-gathers: one T x h bf16
    tensor, the whole sequence, kept whatever the recomputation (not in the model: one per
    rank, not per layer)."""
    return 2 * c["mbs"] * c["seq_len"] * c["hidden_size"] if c["tp"] > 1 else 0.0


def test_records_cover_every_setting():
    assert {r["config"]["recompute"] for r in KEPT["torchtitan"]} == {
        "none", "selective", "selective-op", "full"}
    assert {r["config"]["recompute"] for r in KEPT["megatron"]} == {"none", "selective", "full"}
    for fw, package, version in (("torchtitan", "torchtitan", "0.2.2"),
                                 ("megatron", "megatron-core", "0.16.1")):
        assert len(KEPT[fw]) == 16 * len({r["config"]["recompute"] for r in KEPT[fw]})
        assert all(r["config"]["num_layers"] == 4 for r in KEPT[fw])
        assert all(r["fingerprint"][package] == version for r in KEPT[fw])
        assert all(r["kept_bytes"] == sum(k["bytes"] for k in r["kept"]) for r in KEPT[fw])


@pytest.mark.parametrize("rec", _of("torchtitan", "none") + _of("megatron", "none"), ids=_id)
def test_without_recomputation_four_layers_keep_four_layers_saves(rec):
    """The two methods agree: what stays alive is what autograd saved, four times (and
    Megatron's gather buffer)."""
    expected = 4 * _saved_per_layer(rec)
    if rec["framework"] == "megatron":
        expected += _gather_buffer(rec["config"])
    assert rec["kept_bytes"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("rec", _of("torchtitan", "full") + _of("megatron", "full"), ids=_id)
def test_full_recomputation_keeps_each_layer_input(cols, rec):
    """The model's per-layer bytes under full recomputation, for the three layers whose
    input is counted (the first one's is the stack's)."""
    c = rec["config"]
    model = _model_layer(cols, rec, "full")
    assert model == _layer_input(c)
    buffer = _gather_buffer(c) if rec["framework"] == "megatron" else 0.0
    assert rec["kept_bytes"] == pytest.approx(3 * model + buffer, rel=1e-12)


@pytest.mark.parametrize("rec", _of("torchtitan", "selective-op"), ids=_id)
def test_torchtitan_per_operator_checkpointing(cols, rec):
    """torchtitan's 'selective' as the surrogate runs it (selective_ac_option 'op'): the
    model's bytes per layer exactly, but for the log-sum-exp."""
    c = rec["config"]
    model = _model_layer(cols, rec, "selective")
    assert rec["kept_bytes"] == pytest.approx(4 * model - _layer_input(c) + 4 * _lse(c),
                                              rel=1e-12)
    # less than without it, by less as tp grows: the down projection's output is kept whole
    assert model < _model_layer(cols, rec, "none")


@pytest.mark.parametrize("rec", _of("torchtitan", "selective"), ids=_id)
def test_torchtitan_every_second_block(cols, rec):
    """torchtitan's default option ("2"): blocks 2 and 4 keep their input only, blocks 1 and
    3 all they save; the model's stage of four layers with recompute_layers = floor(4 / 2)
    (what ingest reads it as) is the same sum of its per-layer terms."""
    c = rec["config"]
    assert c["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}
    assert rec["kept_bytes"] == pytest.approx(2 * _saved_per_layer(rec) + 2 * _layer_input(c),
                                              rel=1e-12)
    got = _cols(cols, rec, recompute="full", recompute_layers=2)
    stage = float(memory.stage_activation_bytes(got, 4.0)[0])
    assert stage == 2 * _model_layer(cols, rec, "full") + 2 * _model_layer(cols, rec, "none")


@pytest.mark.parametrize("rec", _of("megatron", "selective"), ids=_id)
def test_megatron_selective_recomputation_drops_only_the_log_sum_exp(cols, rec):
    """Its selective mode checkpoints the core attention, whose query, key and value the
    layer keeps anyway, and whose output the projection after it saves: the model's count is
    the same as without recomputation. The checkpoint adds a 4-byte scalar per layer."""
    c = rec["config"]
    none = next(r for r in _of("megatron", "none")
                if r["config"] == {**c, "recompute": "none"})
    assert rec["kept_bytes"] == none["kept_bytes"] - 4 * _lse(c) + 4 * 4
    assert _model_layer(cols, rec, "selective") == _model_layer(cols, rec, "none")
