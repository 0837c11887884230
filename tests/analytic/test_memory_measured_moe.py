"""The MoE layer's activations against what torchtitan's own MoE layer saves, as measured by
``python -m microbench.saved_activations --framework torchtitan --moe``
(``datasets/saved_activations/``: router, reorderer, routed experts and shared expert on the
CPU, without tensor parallelism)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from surrogate.analytic import memory
from surrogate.config import ModelConfig

RECORDS = [json.loads(line) for line in (
    Path(__file__).parents[2] / "datasets" / "saved_activations" / "2026-11-24"
    / "torchtitan-0.2.2-moe.jsonl").read_text().splitlines()]


def _id(rec: dict[str, Any]) -> str:
    c = rec["config"]
    return (f"E{c['num_experts']}-k{c['top_k']}-shared{c['num_shared_experts']}-"
            f"{'before' if c['score_before_experts'] else 'after'}")


def test_records_cover_the_routing_choices():
    assert len(RECORDS) == 16
    assert {(r["config"]["top_k"], r["config"]["num_shared_experts"],
             r["config"]["score_before_experts"]) for r in RECORDS} == {
        (k, s, b) for k in (1, 2) for s in (0, 1) for b in (True, False)}
    assert all(r["fingerprint"]["torchtitan"] == "0.2.2" for r in RECORDS)


@pytest.mark.parametrize("rec", RECORDS, ids=_id)
def test_moe_mlp_term_is_what_torchtitan_saves_but_the_routing_bookkeeping(cols, rec):
    """The model's MLP term of an MoE layer (experts' and shared expert's MLP activations,
    the tokens in expert order in bf16 and the fp32 copy the scores weigh) is every byte the
    layer saves but the router's scores (fp32, a token x experts) and its int64 indices and
    fp32 scores per routed token (4 E + 28 k bytes a token: 0.7-1.8% of the bytes here, less at real
    widths). Its input is the block's, counted with the projection inputs."""
    c = rec["config"]
    model = ModelConfig(num_layers=1, hidden_size=c["hidden_size"], ffn_hidden_size=64,
                        num_heads=8, num_kv_heads=8, vocab_size=256, seq_len=c["seq_len"],
                        num_experts=c["num_experts"], experts_topk=c["top_k"],
                        moe_ffn_hidden_size=c["moe_ffn_hidden_size"],
                        shared_expert_ffn_hidden_size=(c["num_shared_experts"]
                                                       * c["moe_ffn_hidden_size"]))
    got = cols(model, dp=1, mbs=c["mbs"], framework="torchtitan")
    mlp = float(memory.activation_terms_per_layer(got)["mlp"][0])
    tokens = c["mbs"] * c["seq_len"]
    bookkeeping = 4 * tokens * c["num_experts"] + 28 * tokens * c["top_k"]
    assert sum(s["bytes"] for s in rec["saved"]) == mlp + bookkeeping
