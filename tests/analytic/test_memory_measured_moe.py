"""The MoE layer's activations against what torchtitan's own MoE layer saves, as measured by
``python -m microbench.saved_activations --framework torchtitan --moe`` (and ``--ep 2`` under
torchrun; ``datasets/saved_activations/``: router, reorderer, routed experts on the grouped
GEMM, shared expert, on the CPU, without tensor parallelism)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from surrogate.analytic import memory
from surrogate.config import ModelConfig

DATA = Path(__file__).parents[2] / "datasets" / "saved_activations" / "2026-11-24"
RECORDS = [json.loads(line) for line in
           (DATA / "torchtitan-0.2.2-moe.jsonl").read_text().splitlines()]
EP_RECORDS = [json.loads(line) for line in
              (DATA / "torchtitan-0.2.2-moe-ep2.jsonl").read_text().splitlines()]


def _id(rec: dict[str, Any]) -> str:
    c = rec["config"]
    return (f"E{c['num_experts']}-k{c['top_k']}-shared{c['num_shared_experts']}-"
            f"{'before' if c['score_before_experts'] else 'after'}-ep{c['ep']}-rank{c['rank']}")


def test_records_cover_the_routing_choices():
    assert len(RECORDS) == 16 and len(EP_RECORDS) == 16
    assert {(r["config"]["top_k"], r["config"]["num_shared_experts"],
             r["config"]["score_before_experts"]) for r in RECORDS} == {
        (k, s, b) for k in (1, 2) for s in (0, 1) for b in (True, False)}
    assert {(r["config"]["ep"], r["config"]["rank"]) for r in EP_RECORDS} == {(2, 0), (2, 1)}
    assert all(r["fingerprint"]["torchtitan"] == "0.2.2" and r["config"]["grouped_mm"]
               for r in RECORDS + EP_RECORDS)
    assert {r["fingerprint"]["backend"] for r in EP_RECORDS} == {"gloo"}
    # Expert parallelism moves tokens between ranks: each shape's two ranks received all of
    # them, though not half each.
    for a, b in zip(EP_RECORDS[::2], EP_RECORDS[1::2], strict=True):
        c = a["config"]
        assert a["config"]["routed_tokens"] + b["config"]["routed_tokens"] == (
            2 * c["mbs"] * c["seq_len"] * c["top_k"])
        assert a["config"]["routed_tokens"] != b["config"]["routed_tokens"]


def _round_up(rows: int, align: int) -> int:
    return math.ceil(rows / align) * align


@pytest.mark.parametrize("rec", RECORDS + EP_RECORDS, ids=_id)
def test_moe_mlp_term_is_what_torchtitan_saves_but_the_routing_bookkeeping(cols, rec):
    """The model's MLP term of an MoE layer (experts' and shared expert's MLP activations,
    the tokens in expert order in bf16 and the fp32 copy the scores weigh, the rows that pad
    the local experts' token groups, ``memory.moe_padding_rows``) is every byte the layer
    saves on a rank but the routing's bookkeeping: the router's scores (fp32, a token x
    experts) and its int64 indices and fp32 scores per routed token (4 E + 28 k bytes a
    token), the padded order's int32 indices and the groups' int32 offsets. With expert
    parallelism the model assumes balanced routing; the records add the rows a rank
    received beyond its share, each as a routed token's GEMM input and expert activations."""
    c = rec["config"]
    ep, align = c["ep"], c["token_group_align"]
    model = ModelConfig(num_layers=1, hidden_size=c["hidden_size"], ffn_hidden_size=64,
                        num_heads=8, num_kv_heads=8, vocab_size=256, seq_len=c["seq_len"],
                        num_experts=c["num_experts"], experts_topk=c["top_k"],
                        moe_ffn_hidden_size=c["moe_ffn_hidden_size"],
                        shared_expert_ffn_hidden_size=(c["num_shared_experts"]
                                                       * c["moe_ffn_hidden_size"]))
    got = cols(model, dp=ep, ep=ep, mbs=c["mbs"], framework="torchtitan")
    mlp = float(memory.activation_terms_per_layer(got)["mlp"][0])
    tokens = c["mbs"] * c["seq_len"]
    share, received = tokens * c["top_k"], c["routed_tokens"]
    rows = _round_up(received, align) + align * c["num_experts"] // ep  # the padded buffer
    row_bytes = 2 * c["hidden_size"] + 4 * 2 * c["moe_ffn_hidden_size"]
    imbalance = (_round_up(received, align) - _round_up(share, align)) * row_bytes
    bookkeeping = (4 * tokens * c["num_experts"] + 28 * tokens * c["top_k"] + 4 * rows
                   + 4 * c["num_experts"] // ep)
    assert sum(s["bytes"] for s in rec["saved"]) == mlp + imbalance + bookkeeping
    assert float(memory.moe_padding_rows(got, share)[0]) == (
        _round_up(share, align) + align * c["num_experts"] // ep - share)


def test_padding_is_torchtitans_alone():
    assert memory.moe_padding_rows({"moe_token_group_align": 0.0, "num_experts": 8.0,
                                    "ep": 1.0}, 1000.0) == 0.0
    pad = memory.moe_padding_rows({"moe_token_group_align": 8.0, "num_experts": 256.0,
                                   "ep": 8.0}, 1001.0)
    assert pad == 7 + 8 * 32  # up to a multiple of 8, and 8 rows per local expert
