"""The MoE layer's activations against what torchtitan's and Megatron-Core's own MoE layers
save, as measured by ``python -m microbench.saved_activations --framework torchtitan|megatron
--moe`` (and ``--ep 2``, ``--tp 2`` or ``--tp 2 --ep 2`` under torchrun;
``datasets/saved_activations/``: router, reorderer or token dispatcher, routed experts, on
torchtitan's grouped GEMM or Megatron's experts one by one, shared expert, on the CPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from surrogate.analytic import activations
from tests.analytic.conftest import measured_moe_id, measured_moe_model

DATA = Path(__file__).parents[2] / "datasets" / "saved_activations" / "2026-11-24"


def _records(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines()]


RECORDS = _records("torchtitan-0.2.2-moe")
EP_RECORDS = _records("torchtitan-0.2.2-moe-ep2")
TP_RECORDS = _records("torchtitan-0.2.2-moe-tp2")
TP_EP_RECORDS = _records("torchtitan-0.2.2-moe-tp2-ep2")
MEGATRON = _records("megatron-core-0.16.1-moe")
MEGATRON_EP = _records("megatron-core-0.16.1-moe-ep2")
MEGATRON_TP = _records("megatron-core-0.16.1-moe-tp2")
MEGATRON_TP_EP = _records("megatron-core-0.16.1-moe-tp2-ep2")


def _id(rec: dict[str, Any]) -> str:
    return measured_moe_id(rec["config"])


def _columns(cols: Any, rec: dict[str, Any], framework: str) -> Any:
    """The model's columns of the record's MoE layer, on a rank of ``ep`` = its ``ep``."""
    c = rec["config"]
    model = measured_moe_model(c, num_layers=1, ffn_hidden_size=64)
    got = cols(
        model,
        dp=c["ep"],
        ep=c["ep"],
        tp=c["tp"],
        mbs=c["mbs"],
        gpus_per_node=c["ep"] * c["tp"],
        framework=framework,
    )
    # the records ran megatron-core's default expert tensor parallelism, tp (microbench/
    # moe_blocks.py sets none): its experts split by tp, not folded
    return {**got, "moe_parallel_folding": 0.0 * got["moe_parallel_folding"]}


def _mlp(got: Any) -> float:
    return float(activations.activation_terms_per_layer(got)["mlp"][0])


def test_records_cover_the_routing_choices():
    assert len(RECORDS) == 16 and len(EP_RECORDS) == 16
    assert {
        (
            r["config"]["top_k"],
            r["config"]["num_shared_experts"],
            r["config"]["score_before_experts"],
        )
        for r in RECORDS
    } == {(k, s, b) for k in (1, 2) for s in (0, 1) for b in (True, False)}
    assert {(r["config"]["ep"], r["config"]["rank"]) for r in EP_RECORDS} == {(2, 0), (2, 1)}
    assert all(
        r["fingerprint"]["torchtitan"] == "0.2.2" and r["config"]["grouped_mm"]
        for r in RECORDS + EP_RECORDS
    )
    assert {r["fingerprint"]["backend"] for r in EP_RECORDS} == {"gloo"}
    # Expert parallelism moves tokens between ranks: each shape's two ranks received all of
    # them, though not half each.
    for a, b in zip(EP_RECORDS[::2], EP_RECORDS[1::2], strict=True):
        c = a["config"]
        assert a["config"]["routed_tokens"] + b["config"]["routed_tokens"] == (
            2 * c["mbs"] * c["seq_len"] * c["top_k"]
        )
        assert a["config"]["routed_tokens"] != b["config"]["routed_tokens"]


@pytest.mark.parametrize("records", [TP_EP_RECORDS, MEGATRON_TP_EP], ids=["torchtitan", "megatron"])
def test_under_tp_and_ep_each_rank_takes_its_tp_groups_routed_tokens(records):
    """Over 4 ranks at tp 2, ep 2 (the ranks of a tp group adjacent, each tp group routing its
    own sequence), both ranks of a tp group receive the same tokens, the copies of what the
    two sequences route to their experts: the two groups' counts add up to both sequences'
    routed tokens."""
    assert len(records) == 4 * (8 if records is TP_EP_RECORDS else 6)
    assert {r["fingerprint"]["backend"] for r in records} == {"gloo"}
    for shape in zip(*(records[i::4] for i in range(4)), strict=True):
        c = shape[0]["config"]
        assert [(r["config"]["tp"], r["config"]["ep"], r["config"]["rank"]) for r in shape] == [
            (2, 2, rank) for rank in range(4)
        ]
        got = [r["config"]["routed_tokens"] for r in shape]
        assert got[0] == got[1] and got[2] == got[3]
        assert got[0] + got[2] == 2 * c["mbs"] * c["seq_len"] * c["top_k"]


def _round_up(rows: int, align: int) -> int:
    return math.ceil(rows / align) * align


@pytest.mark.parametrize("rec", RECORDS + EP_RECORDS + TP_RECORDS + TP_EP_RECORDS, ids=_id)
def test_moe_mlp_term_is_what_torchtitan_saves_but_the_routing_bookkeeping(cols, rec):
    """The model's MLP term of an MoE layer (experts' and shared expert's MLP activations,
    the tokens in expert order in bf16 and the fp32 copy the scores weigh, the rows that pad
    the local experts' token groups, ``activations.moe_padding_rows``) is every byte the layer
    saves on a rank but the routing's bookkeeping: the router's scores (fp32, a token x
    experts) and its int64 indices and fp32 scores per routed token (4 E + 28 k bytes a
    token), the padded order's int32 indices and the groups' int32 offsets. With expert
    parallelism the model assumes balanced routing; the records add the rows a rank
    received beyond its share, each as a routed token's GEMM input and expert activations.
    Under tensor parallelism torchtitan all-gathers the layer's input and every rank routes
    the whole sequence: the copies and the padding are not split, the experts' activations
    are; the gathered input (2 T h bytes, the router's and the shared expert's GEMM input) is
    among the model's projection inputs (``FrameworkTraits.saves_gathered_tp_inputs``). Under
    tp and ep at once (``ExpertTensorParallel``) the same holds with the tokens the rank's
    experts received from every tp group over ep."""
    c = rec["config"]
    ep, tp, align = c["ep"], c["tp"], c["token_group_align"]
    got = _columns(cols, rec, "torchtitan")
    mlp = _mlp(got)
    tokens, h = c["mbs"] * c["seq_len"], c["hidden_size"]
    share, received = tokens * c["top_k"], c["routed_tokens"]
    rows = _round_up(received, align) + align * c["num_experts"] // ep  # the padded buffer
    row_bytes = 2 * h + 4 * 2 * c["moe_ffn_hidden_size"] // tp
    imbalance = (_round_up(received, align) - _round_up(share, align)) * row_bytes
    bookkeeping = (
        4 * tokens * c["num_experts"]
        + 28 * tokens * c["top_k"]
        + 4 * rows
        + 4 * c["num_experts"] // ep
    )
    gathered = 2 * tokens * h if tp > 1 else 0
    assert sum(s["bytes"] for s in rec["saved"]) == mlp + imbalance + bookkeeping + gathered
    assert float(activations.moe_padding_rows(got, share)[0]) == (
        _round_up(share, align) + align * c["num_experts"] // ep - share
    )
    if tp > 1:  # the gathered input of the MLP, beside the attention's, kept whole
        projections = activations.activation_terms_per_layer(got)["projection_inputs"][0]
        assert float(projections) == 2 * 2 * tokens * h


def test_padding_is_torchtitans_alone():
    assert (
        activations.moe_padding_rows(
            {"moe_token_group_align": 0.0, "num_experts": 8.0, "ep": 1.0}, 1000.0
        )
        == 0.0
    )
    pad = activations.moe_padding_rows(
        {"moe_token_group_align": 8.0, "num_experts": 256.0, "ep": 8.0}, 1001.0
    )
    assert pad == 7 + 8 * 32  # up to a multiple of 8, and 8 rows per local expert


def test_megatron_records_cover_its_routing_choices():
    assert len(MEGATRON) == 24 and len(MEGATRON_EP) == 12
    assert {(r["config"]["top_k"], r["config"]["score_before_experts"]) for r in MEGATRON} == {
        (1, True),
        (1, False),
        (2, False),
    }  # Megatron weighs the input at top-1 only
    assert {r["config"]["fused_swiglu"] for r in MEGATRON} == {True, False}
    assert all(
        r["fingerprint"]["megatron-core"] == "0.16.1" and not r["config"]["grouped_mm"]
        for r in MEGATRON + MEGATRON_EP
    )
    for a, b in zip(MEGATRON_EP[::2], MEGATRON_EP[1::2], strict=True):
        c = a["config"]
        assert (a["config"]["rank"], b["config"]["rank"]) == (0, 1)
        assert a["config"]["routed_tokens"] + b["config"]["routed_tokens"] == (
            2 * c["mbs"] * c["seq_len"] * c["top_k"]
        )


def _megatron_bookkeeping(c: dict[str, Any]) -> int:
    """Megatron's routing bookkeeping, per its records: per token of the rank's sequence shard
    (1 / tp of the sequence: Megatron routes the shard), the router's int64 indices (8 k
    bytes) with its fp32 scores (4 E before the top-k where its softmax comes first, top-1
    here, else 4 k after it), the routing map (bool) and scores (bf16), 3 E, and the
    permutation's int64 indices, 8 k; and one score per routed token, bf16 where it weighs
    the SwiGLU, fp32 where it weighs the input."""
    tokens, e, k = c["mbs"] * c["seq_len"] // c["tp"], c["num_experts"], c["top_k"]
    router = 8 * k + (4 * e if c["router_pre_softmax"] else 4 * k)
    score = 4 if c["score_before_experts"] else 2
    return tokens * (router + 3 * e + 8 * k) + c["routed_tokens"] * score


@pytest.mark.parametrize(
    "rec",
    [
        r
        for r in MEGATRON + MEGATRON_EP + MEGATRON_TP + MEGATRON_TP_EP
        if r["config"]["fused_swiglu"]
    ],
    ids=_id,
)
def test_moe_mlp_term_is_what_megatron_saves_but_the_routing_bookkeeping(cols, rec):
    """With the fused SwiGLU Megatron-LM trains with, Megatron-Core's MoE layer keeps what the
    model's MLP term counts: per routed token its bf16 copy in expert order (2 h bytes,
    ``FrameworkTraits.moe_routed_bytes``) and three T x ffn tensors of its expert (the fused
    SwiGLU's input and the down projection's), the shared expert's three, no padding; beside
    them only the routing's bookkeeping (:func:`_megatron_bookkeeping`). Weighing the input by
    the scores (``moe_apply_probs_on_input``, not modelled) keeps the unweighted tokens too,
    2 h bytes per routed token. Under expert parallelism the model assumes balanced routing;
    the records add the rows a rank received beyond its share; the all-to-all keeps nothing.
    Under tensor parallelism Megatron all-gathers the routed tokens of the tp group to its
    split experts: the copies are not split by tp, the experts' activations are; under tp and
    ep at once, the same after the all-to-all over ep."""
    c = rec["config"]
    share, received = c["mbs"] * c["seq_len"] * c["top_k"], c["routed_tokens"]
    row_bytes = 2 * c["hidden_size"] + 3 * 2 * c["moe_ffn_hidden_size"] // c["tp"]
    before = received * 2 * c["hidden_size"] if c["score_before_experts"] else 0
    measured = sum(s["bytes"] for s in rec["saved"])
    assert measured == (
        _mlp(_columns(cols, rec, "megatron"))
        + (received - share) * row_bytes
        + before
        + _megatron_bookkeeping(c)
    )


@pytest.mark.parametrize("rec", [r for r in MEGATRON if not r["config"]["fused_swiglu"]], ids=_id)
def test_megatron_unfused_experts_keep_more_ffn_tensors(rec):
    """Unfused, each expert and the shared expert keep SiLU(gate) and a copy of the up output
    besides, as Megatron's dense MLP does (``test_memory_measured_saves.py``), and an expert
    whose SwiGLU output the scores weigh keeps that output unweighted too: 2 x 2 ffn bytes
    more per token of the shared expert, 2 or 3 x 2 ffn per routed token; nothing else
    changes. The model counts Megatron with the fused SwiGLU Megatron-LM trains with."""
    c = rec["config"]
    fused = next(r for r in MEGATRON if r["config"] == {**c, "fused_swiglu": True})
    tokens, f = c["mbs"] * c["seq_len"], c["moe_ffn_hidden_size"]
    per_routed = 2 if c["score_before_experts"] else 3
    more = 2 * f * (per_routed * c["routed_tokens"] + 2 * tokens * c["num_shared_experts"])
    assert sum(s["bytes"] for s in rec["saved"]) == sum(s["bytes"] for s in fused["saved"]) + more
