"""The activation terms against what torchtitan's and Megatron-Core's own blocks save for their
backward, as measured by ``microbench/saved_activations.py`` (``datasets/saved_activations/``;
the method, the stand-ins and why the norms are compared apart are in that module's
docstring)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from surrogate.analytic import activations
from surrogate.config.model import ModelConfig

MEASURED = Path(__file__).parents[2] / "datasets" / "saved_activations" / "2026-11-24"
TERM_OF_MODULE = {  # the module that saves -> the model's term
    "torchtitan": {  # torchtitan 0.2.2's Llama block
        "attention_norm": "norm_inputs",
        "ffn_norm": "norm_inputs",
        "attention.wq": "projection_inputs",
        "attention.wk": "projection_inputs",
        "attention.wv": "projection_inputs",
        "feed_forward.w1": "projection_inputs",
        "feed_forward.w3": "projection_inputs",
        "attention": "attention",
        "attention.inner_attention": "attention",
        "attention.wo": "attention",
        "feed_forward": "mlp",
        "feed_forward.w2": "mlp",
    },
    "megatron": {  # Megatron-Core 0.16.1's GPT layer (local spec)
        "input_layernorm": "norm_inputs",
        "pre_mlp_layernorm": "norm_inputs",
        "self_attention.linear_qkv": "projection_inputs",
        "mlp.linear_fc1": "projection_inputs",
        "self_attention": "attention",
        "self_attention.core_attention": "attention",
        "self_attention.linear_proj": "attention",
        "mlp": "mlp",
        "mlp.linear_fc2": "mlp",
    },
    "llm-foundry": {  # llm-foundry 0.3.0's MPTBlock (microbench/llmfoundry_block.py)
        "norm_1": "norm_inputs",
        "norm_2": "norm_inputs",
        "attn.Wqkv": "projection_inputs",
        "ffn.up_proj": "projection_inputs",
        "attn": "attention",
        "attn.out_proj": "attention",
        "ffn.act": "mlp",
        "ffn.down_proj": "mlp",
    },
}
RECORDS = {
    fw: [json.loads(line) for line in (MEASURED / name).read_text().splitlines()]
    for fw, name in (
        ("torchtitan", "torchtitan-0.2.2.jsonl"),
        ("megatron", "megatron-core-0.16.1.jsonl"),
    )
}
ALL = [r for records in RECORDS.values() for r in records]
MPT = [
    json.loads(line)
    for line in (MEASURED.parent / "2026-12-02" / "llm-foundry-0.3.0.jsonl")
    .read_text()
    .splitlines()
]


def _id(rec: dict[str, Any]) -> str:
    c = rec["config"]
    fused = {True: "-fused", False: "-unfused"}.get(c.get("fused_swiglu"), "")
    return f"{rec['framework']}-tp{c['tp']}-kv{c['num_kv_heads']}-mbs{c['mbs']}{fused}"


def _measured_terms(rec: dict[str, Any]) -> dict[str, float]:
    out = dict.fromkeys(activations.ACTIVATION_TERMS, 0.0)
    for module, n in rec["bytes_by_module"].items():
        out[TERM_OF_MODULE[rec["framework"]][module]] += n  # KeyError: a module not mapped
    return out


def _model_terms(cols: Any, rec: dict[str, Any], framework: str) -> dict[str, float]:
    c = rec["config"]
    model = ModelConfig(
        num_layers=2,
        hidden_size=c["hidden_size"],
        ffn_hidden_size=c["ffn_hidden_size"],
        num_heads=c["num_heads"],
        num_kv_heads=c["num_kv_heads"],
        vocab_size=256,
        seq_len=c["seq_len"],
    )
    got = cols(
        model,
        dp=1,
        tp=c["tp"],
        mbs=c["mbs"],
        framework=framework,
        sequence_parallel=c["sequence_parallel"],
    )
    return {k: float(v[0]) for k, v in activations.activation_terms_per_layer(got).items()}


def _lse_bytes(c: dict[str, Any]) -> float:
    """The attention's log-sum-exp: fp32 per head and token, which the model leaves out."""
    return 4 * c["mbs"] * c["seq_len"] * c["num_heads"] / c["tp"]


def _ffn_tensor(c: dict[str, Any]) -> float:
    """One T x ffn / tp tensor in bf16."""
    return 2 * c["mbs"] * c["seq_len"] * c["ffn_hidden_size"] / c["tp"]


def test_records_cover_the_standard_shapes():
    assert len(RECORDS["torchtitan"]) == 16 and len(RECORDS["megatron"]) == 32
    for fw, package, version in (
        ("torchtitan", "torchtitan", "0.2.2"),
        ("megatron", "megatron-core", "0.16.1"),
    ):
        assert {r["config"]["tp"] for r in RECORDS[fw]} == {1, 2, 4, 8}
        assert {r["config"]["num_kv_heads"] for r in RECORDS[fw]} == {8, 16}
        assert all(r["fingerprint"][package] == version for r in RECORDS[fw])
    assert {r["config"]["fused_swiglu"] for r in RECORDS["megatron"]} == {True, False}


@pytest.mark.parametrize("rec", RECORDS["torchtitan"], ids=_id)
def test_torchtitan_terms_match_its_block(cols, rec):
    """Projection inputs, attention and MLP: the model's torchtitan terms are exactly what its
    block saves, but for the attention's log-sum-exp (0.8-1.0% of the attention's bytes in
    these records, head width 64)."""
    measured = _measured_terms(rec)
    measured["attention"] -= _lse_bytes(rec["config"])
    model = _model_terms(cols, rec, "torchtitan")
    for term in ("projection_inputs", "attention", "mlp"):
        assert model[term] == pytest.approx(measured[term], rel=1e-9), term


@pytest.mark.parametrize(
    "rec", [r for r in RECORDS["megatron"] if r["config"]["fused_swiglu"]], ids=_id
)
def test_megatron_terms_match_its_layer(cols, rec):
    """With the fused SwiGLU Megatron-LM trains with: the projections keep their sequence
    shard, and the MLP keeps the gate and up outputs and the down projection's input, three
    T x ffn tensors; the model's Megatron terms are exactly those."""
    measured = _measured_terms(rec)
    model = _model_terms(cols, rec, "megatron")
    for term in ("projection_inputs", "mlp"):
        assert model[term] == pytest.approx(measured[term], rel=1e-9), term
    assert measured["mlp"] == pytest.approx(3 * _ffn_tensor(rec["config"]), rel=1e-9)


@pytest.mark.parametrize(
    "rec", [r for r in RECORDS["megatron"] if not r["config"]["fused_swiglu"]], ids=_id
)
def test_megatron_without_the_fusion_keeps_two_tensors_more(cols, rec):
    """Unfused, Megatron-Core 0.16.1's ``glu`` also keeps SiLU(gate) and a copy of the up
    output (it adds ``glu_linear_offset`` to it before the product): five T x ffn tensors, two
    more than the fused function; nothing else in the layer changes."""
    c = rec["config"]
    fused = next(r for r in RECORDS["megatron"] if r["config"] == {**c, "fused_swiglu": True})
    measured, measured_fused = _measured_terms(rec), _measured_terms(fused)
    assert measured["mlp"] == pytest.approx(5 * _ffn_tensor(c), rel=1e-9)
    for term in ("norm_inputs", "projection_inputs", "attention"):
        assert measured[term] == measured_fused[term], term


@pytest.mark.parametrize("rec", RECORDS["megatron"], ids=_id)
def test_megatron_attention_stand_in_keeps_the_fused_qkv_output(cols, rec):
    """What the FlashAttention-class stand-in keeps under Megatron's attention (a record of
    the stand-in, not adopted by the model): the model's query, key, value and output, plus
    the rest of the fused QKV projection's output (its value is a view into it, so the query
    and key parts stay alive beside their rotated copies), the log-sum-exp, and the rotary
    cos and sin cast to bf16 for the query and the key (2 x 2 x seq x head_dim bytes each)."""
    c = rec["config"]
    head_dim = c["hidden_size"] // c["num_heads"]
    tokens = c["mbs"] * c["seq_len"] / c["tp"]
    measured = _measured_terms(rec)["attention"]
    rotary = 4 * 2 * c["seq_len"] * head_dim
    rest_of_qkv = 2 * tokens * (c["num_heads"] + c["num_kv_heads"]) * head_dim
    model = _model_terms(cols, rec, "megatron")["attention"]
    assert measured == pytest.approx(model + rest_of_qkv + _lse_bytes(c) + rotary, rel=1e-9)


@pytest.mark.parametrize(
    "rec", [r for r in RECORDS["torchtitan"] if r["config"]["tp"] > 1], ids=_id
)
def test_megatron_style_sequence_parallelism_would_miss_the_gathered_inputs(cols, rec):
    """The same shapes as Megatron keeps them (the shard, gathered again in the backward):
    tp times less than torchtitan's block keeps for the projections."""
    measured = _measured_terms(rec)["projection_inputs"]
    megatron = _model_terms(cols, rec, "megatron")["projection_inputs"]
    assert megatron == pytest.approx(measured / rec["config"]["tp"], rel=1e-9)


def test_norms_on_the_cpu_keep_fp32_copies(cols):
    """The CPU's composite rms_norm keeps 8 bytes per element of its shard (an fp32 copy of
    the input and the fp32 normalised output) plus its fp32 reciprocal RMS per token; the model
    counts the 2-byte input a fused GPU kernel keeps. Recorded, not fitted: the ratio is 4."""
    for rec in ALL:
        c = rec["config"]
        ratio = (
            _measured_terms(rec)["norm_inputs"]
            / _model_terms(cols, rec, rec["framework"])["norm_inputs"]
        )
        rstd = 2 * 4 * c["mbs"] * c["seq_len"] / c["tp"]  # two norms, fp32 per token
        assert ratio == pytest.approx(
            4.0 + rstd / (2 * 2 * c["mbs"] * c["seq_len"] * c["hidden_size"] / c["tp"]), rel=1e-9
        )


def test_torchtitan_keeps_more_than_megatron_only_under_tensor_parallelism(cols):
    """Beside the MLP's fourth tensor, which only Megatron's fused SwiGLU drops."""
    for tp in (1, 2, 8):
        kw = dict(dp=1, mbs=1, sequence_parallel=tp > 1)
        tt = activations.activation_terms_per_layer(cols("8b", tp=tp, framework="torchtitan", **kw))
        mg = activations.activation_terms_per_layer(cols("8b", tp=tp, framework="megatron", **kw))
        tp_terms = ("norm_inputs", "projection_inputs", "attention")
        assert (sum(tt[k] for k in tp_terms) > sum(mg[k] for k in tp_terms)) == (tp > 1)
        assert float(mg["mlp"][0]) == pytest.approx(0.75 * float(tt["mlp"][0]))
        full = float(
            activations.activation_bytes_per_layer(
                cols("8b", tp=tp, framework="torchtitan", recompute="full", **kw)
            )[0]
        )
        assert full == float(
            activations.activation_bytes_per_layer(
                cols("8b", tp=tp, framework="megatron", recompute="full", **kw)
            )[0]
        )


def test_terms_sum_to_the_activations(cols):
    for fw, tp in (("torchtitan", 4), ("megatron", 4), ("nanotron", 2)):
        c = cols("8b", dp=1, tp=tp, framework=fw, sequence_parallel=True)
        terms = activations.activation_terms_per_layer(c)
        assert tuple(terms) == activations.ACTIVATION_TERMS
        np.testing.assert_allclose(sum(terms.values()), activations.activation_bytes_per_layer(c))


def _mpt_id(rec: dict[str, Any]) -> str:
    return f"llm-foundry-s{rec['config']['seq_len']}-mbs{rec['config']['mbs']}"


@pytest.mark.parametrize("rec", MPT, ids=_mpt_id)
def test_llm_foundry_terms_match_mpts_block(cols, rec):
    """llm-foundry 0.3.0's MPTBlock keeps what the model counts for a GELU MLP
    (FrameworkTraits.activation_scale takes it as the derived count): the QKV and MLP-in
    projections' inputs, the fused QKV output (its query, key and value views) and the
    attention output, the GELU's input and output (2 x 2 T x 4 h, exactly), and the second
    norm's bf16 input (the first's is the block's input, left out); beside them only the
    log-sum-exp (fp32, ceil(seq / 128) x 128 per head) and the LayerNorms' statistics (two
    per token each, bf16 on the CPU). The model describes the MLP by its SwiGLU-equivalent
    width, round(8 h / 3) = 2,731 for h 1,024: the MLP 1.2e-4 over, the only difference."""
    from surrogate.ingest.llmfoundry import equivalent_ffn

    c = rec["config"]
    h, tokens = c["hidden_size"], c["mbs"] * c["seq_len"]
    measured = _measured_terms(rec)
    measured["attention"] -= 4 * c["mbs"] * c["num_heads"] * -(-c["seq_len"] // 128) * 128
    measured["norm_inputs"] += 2 * tokens * h - 2 * 2 * 2 * tokens  # block input; statistics
    model = ModelConfig(
        num_layers=2,
        hidden_size=h,
        ffn_hidden_size=equivalent_ffn(h),
        num_heads=c["num_heads"],
        num_kv_heads=c["num_kv_heads"],
        vocab_size=256,
        seq_len=c["seq_len"],
        gated_mlp=False,
    )
    got = activations.activation_terms_per_layer(
        cols(model, dp=8, mbs=c["mbs"], zero_stage=3, framework="llm-foundry")
    )
    assert measured["mlp"] == 2 * 2 * tokens * 4 * h
    for term in ("norm_inputs", "projection_inputs", "attention"):
        assert float(got[term][0]) == measured[term], term
    assert float(got["mlp"][0]) == pytest.approx(measured["mlp"], rel=2e-4)
    assert sum(measured.values()) == pytest.approx(16 * 2 * tokens * h, rel=1e-15)
