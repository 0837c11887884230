"""The activations under recomputation against what torchtitan's and Megatron-Core's own
stacks of four layers (and torchtitan's of four MoE blocks) keep after their forward, as
measured by ``python -m microbench.saved_activations [--moe] --recompute``
(``datasets/saved_activations/``: every storage the forward made that is still alive, whoever
holds it; the first layer's input, the output and the parameters aside)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from surrogate.analytic import activations, memory
from surrogate.config.model import ModelConfig
from tests.analytic.conftest import measured_moe_id, measured_moe_model

MEASURED = Path(__file__).parents[2] / "datasets" / "saved_activations" / "2026-11-24"


def _load(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (MEASURED / name).read_text().splitlines()]


KEPT = {
    "torchtitan": _load("torchtitan-0.2.2-recompute.jsonl"),
    "megatron": _load("megatron-core-0.16.1-recompute.jsonl"),
}
SAVED = {
    "torchtitan": _load("torchtitan-0.2.2.jsonl"),
    "megatron": [r for r in _load("megatron-core-0.16.1.jsonl") if r["config"]["fused_swiglu"]],
}
SHAPE_KEYS = ("tp", "num_kv_heads", "mbs")


def _id(rec: dict[str, Any]) -> str:
    c = rec["config"]
    return f"{rec['framework']}-{c['recompute']}-tp{c['tp']}-kv{c['num_kv_heads']}-mbs{c['mbs']}"


def _of(framework: str, recompute: str) -> list[dict[str, Any]]:
    return [r for r in KEPT[framework] if r["config"]["recompute"] == recompute]


def _saved_per_layer(rec: dict[str, Any]) -> int:
    """What one layer of the same shape saves (the records of ``saved_by_module``)."""
    key = tuple(rec["config"][k] for k in SHAPE_KEYS)
    one = next(
        r for r in SAVED[rec["framework"]] if tuple(r["config"][k] for k in SHAPE_KEYS) == key
    )
    return sum(s["bytes"] for s in one["saved"])


def _cols(cols: Any, rec: dict[str, Any], **layout: Any) -> Any:
    """The model's columns of a record's stack of four layers, under ``layout``."""
    c = rec["config"]
    model = ModelConfig(
        num_layers=4,
        hidden_size=c["hidden_size"],
        ffn_hidden_size=c["ffn_hidden_size"],
        num_heads=c["num_heads"],
        num_kv_heads=c["num_kv_heads"],
        vocab_size=256,
        seq_len=c["seq_len"],
    )
    return cols(
        model,
        dp=1,
        tp=c["tp"],
        mbs=c["mbs"],
        framework=rec["framework"],
        sequence_parallel=c["sequence_parallel"],
        **layout,
    )


def _model_layer(cols: Any, rec: dict[str, Any], recompute: str) -> float:
    return float(activations.activation_bytes_per_layer(_cols(cols, rec, recompute=recompute))[0])


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
        "none",
        "selective",
        "selective-op",
        "full",
    }
    assert {r["config"]["recompute"] for r in KEPT["megatron"]} == {"none", "selective", "full"}
    for fw, package, version in (
        ("torchtitan", "torchtitan", "0.2.2"),
        ("megatron", "megatron-core", "0.16.1"),
    ):
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
    assert rec["kept_bytes"] == pytest.approx(4 * model - _layer_input(c) + 4 * _lse(c), rel=1e-12)
    # less than without it, by less as tp grows: the down projection's output is kept whole
    assert model < _model_layer(cols, rec, "none")


@pytest.mark.parametrize("rec", _of("torchtitan", "selective"), ids=_id)
def test_torchtitan_every_second_block(cols, rec):
    """torchtitan's default option ("2"): blocks 2 and 4 keep their input only, blocks 1 and
    3 all they save; the model's stage of four layers with recompute_layers = floor(4 / 2)
    (what ingest reads it as) is the same sum of its per-layer terms."""
    c = rec["config"]
    assert c["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}
    assert rec["kept_bytes"] == pytest.approx(
        2 * _saved_per_layer(rec) + 2 * _layer_input(c), rel=1e-12
    )
    got = _cols(cols, rec, recompute="full", recompute_layers=2)
    stage = float(memory.stage_activation_bytes(got, 4.0)[0])
    assert stage == 2 * _model_layer(cols, rec, "full") + 2 * _model_layer(cols, rec, "none")


@pytest.mark.parametrize("rec", _of("megatron", "selective"), ids=_id)
def test_megatron_selective_recomputation_drops_only_the_log_sum_exp(cols, rec):
    """Its selective mode checkpoints the core attention, whose query, key and value the
    layer keeps anyway, and whose output the projection after it saves: the model's count is
    the same as without recomputation. The checkpoint adds a 4-byte scalar per layer."""
    c = rec["config"]
    none = next(r for r in _of("megatron", "none") if r["config"] == {**c, "recompute": "none"})
    assert rec["kept_bytes"] == none["kept_bytes"] - 4 * _lse(c) + 4 * 4
    assert _model_layer(cols, rec, "selective") == _model_layer(cols, rec, "none")


MOE_KEPT = [
    r
    for split in ("", "-ep2", "-tp2", "-tp2-ep2")
    for r in _load(f"torchtitan-0.2.2-moe-recompute{split}.jsonl")
]
"""torchtitan's Llama 4 stack of four MoE blocks (``--moe --recompute``, and ``--ep 2``,
``--tp 2`` or both under torchrun: one record per rank)."""


def _moe_id(rec: dict[str, Any]) -> str:
    return f"{rec['config']['recompute']}-{measured_moe_id(rec['config'])}"


def _moe_cols(cols: Any, rec: dict[str, Any], recompute: str) -> Any:
    """The model's columns of an MoE record's stack: four MoE layers, no dense one."""
    c = rec["config"]
    model = measured_moe_model(c, num_layers=4, ffn_hidden_size=4096)
    return cols(
        model,
        dp=c["ep"],
        ep=c["ep"],
        tp=c["tp"],
        mbs=c["mbs"],
        framework="torchtitan",
        gpus_per_node=c["ep"] * c["tp"],
        sequence_parallel=c["sequence_parallel"],
        recompute=recompute,
    )


def _moe_full(rec: dict[str, Any]) -> dict[str, Any]:
    """The record of the same shape and rank under full recomputation."""
    c = rec["config"]
    return next(
        r
        for r in MOE_KEPT
        if r["config"]["recompute"] == "full"
        and {
            **r["config"],
            "recompute": c["recompute"],
            "activation_checkpoint": c["activation_checkpoint"],
        }
        == c
    )


def test_moe_records_cover_every_setting():
    assert len(MOE_KEPT) == 48 + 48 + 96 + 96
    assert {(r["config"]["recompute"], r["config"]["tp"], r["config"]["ep"]) for r in MOE_KEPT} == {
        (rc, tp, ep) for rc in ("none", "selective-op", "full") for tp in (1, 2) for ep in (1, 2)
    }
    assert all(r["config"]["sequence_parallel"] == (r["config"]["tp"] > 1) for r in MOE_KEPT)
    assert all(
        r["fingerprint"]["torchtitan"] == "0.2.2" and r["config"]["num_layers"] == 4
        for r in MOE_KEPT
    )
    assert all(r["kept_bytes"] == sum(k["bytes"] for k in r["kept"]) for r in MOE_KEPT)
    assert not any(r["config"]["num_shared_experts"] for r in MOE_KEPT if r["config"]["ep"] > 1)


@pytest.mark.parametrize(
    "rec", [r for r in MOE_KEPT if r["config"]["recompute"] == "full"], ids=_moe_id
)
def test_moe_full_recomputation_keeps_each_layer_input(cols, rec):
    """As for a dense block, the three layers' inputs; under expert parallelism beside them
    only what ``ExpertParallel`` holds between a forward and the next (the int32 order of each
    block's received rows: bookkeeping, a few KiB)."""
    c = rec["config"]
    model = float(activations.activation_bytes_per_layer(_moe_cols(cols, rec, "full"))[0])
    assert model == _layer_input(c)
    plans = rec["kept_bytes"] - 3 * model
    if c["ep"] == 1:
        assert plans == 0
    else:
        assert all(k["dtype"] == "int32" for k in rec["kept"] if k["bytes"] != model)
        assert 0 < plans < 4 * 4 * 2 * max(c["routed_tokens"])


@pytest.mark.parametrize(
    "rec", [r for r in MOE_KEPT if r["config"]["recompute"] == "selective-op"], ids=_moe_id
)
def test_moe_per_operator_checkpointing(cols, rec):
    """torchtitan's per-operator checkpointing of an MoE block, with Llama 4's list of the
    operators it saves: the model's bytes per layer exactly (the attention's projections and
    output, the shared expert's gate and down projection outputs, under tp the two
    reduce-scatters' outputs, under ep the outputs of the two all-to-alls, of the whole
    sequence's routed tokens under tp too), but for the log-sum-exp, the rows a rank
    received beyond its balanced share (its dispatch all-to-all's output), the all-to-all of
    the token counts (int64 per expert) and what full recomputation keeps besides the
    layers' inputs (``ExpertParallel``'s bookkeeping). Neither the routed experts'
    activations nor the router's are kept: less than the model's count for a dense layer of
    the experts' total width."""
    c = rec["config"]
    got = _moe_cols(cols, rec, "selective")
    model = float(activations.activation_bytes_per_layer(got)[0])
    tokens, h = c["mbs"] * c["seq_len"], c["hidden_size"]
    beyond = (sum(c["routed_tokens"]) - 4 * tokens * c["top_k"]) * 2 * h
    counts = 4 * 8 * c["num_experts"] if c["ep"] > 1 else 0
    bookkeeping = _moe_full(rec)["kept_bytes"] - 3 * _layer_input(c)
    assert rec["kept_bytes"] == (
        4 * model - _layer_input(c) + 4 * _lse(c) + beyond + counts + bookkeeping
    )
    assert model < float(activations.activation_bytes_per_layer(_moe_cols(cols, rec, "none"))[0])


def _moe_saves_beyond_the_model(c: dict[str, Any]) -> int:
    """What torchtitan's MoE layer saves that the model leaves out (its records in
    ``test_memory_measured_moe.py``): the routing's bookkeeping, and the rows a rank received
    beyond its balanced share, each kept as a routed token's copies and expert activations."""
    tokens, h, k, e, ep = (
        c["mbs"] * c["seq_len"],
        c["hidden_size"],
        c["top_k"],
        c["num_experts"],
        c["ep"],
    )
    align, total = 8, 0
    for received in c["routed_tokens"]:
        padded = -(-received // align) * align
        rows = padded + align * e // ep
        total += 4 * tokens * e + 28 * tokens * k + 4 * rows + 4 * e // ep
        total += (padded - -(-tokens * k // align) * align) * (
            2 * h + 4 * 2 * c["moe_ffn_hidden_size"] // c["tp"]
        )
    return total


def test_moe_stack_without_recomputation_differs_from_the_model_only_outside_the_moe(cols):
    """Without recomputation, once the MoE layer's bookkeeping (``ExpertParallel``'s int32
    order of the received rows among it) and its routing's imbalance are set aside, what the
    four blocks keep beyond the model's count is the same for every MoE setting and rank of a
    split, and tp divides it: it lies in the attention and the norms (the CPU's fp32 norms,
    module docstring of ``microbench/saved_activations.py``), not in the MoE layer."""
    rests: dict[tuple[int, int], set[float]] = {}
    for rec in MOE_KEPT:
        c = rec["config"]
        if c["recompute"] != "none":
            continue
        model = float(activations.activation_bytes_per_layer(_moe_cols(cols, rec, "none"))[0])
        rests.setdefault((c["tp"], c["ep"]), set()).add(
            rec["kept_bytes"]
            - (4 * model - _layer_input(c) + 4 * _lse(c) + _moe_saves_beyond_the_model(c))
        )
    assert all(len(r) == 1 for r in rests.values())
    whole = {split: r.pop() * split[0] for split, r in rests.items()}
    assert whole[1, 1] > 0 and all(
        v == pytest.approx(whole[1, 1], rel=1e-5) for v in whole.values()
    )
