"""The activation terms against what torchtitan's own block saves for its backward, as measured
by ``microbench/saved_activations.py`` (``datasets/saved_activations/``; the method and why the
norms are compared apart are in that module's docstring)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from surrogate.analytic import memory
from surrogate.config import ModelConfig

MEASURED = (Path(__file__).parents[2] / "datasets" / "saved_activations" / "2026-11-24"
            / "torchtitan-0.2.2.jsonl")
TERM_OF_MODULE = {  # torchtitan 0.2.2 Llama block: the module that saves -> the model's term
    "attention_norm": "norm_inputs", "ffn_norm": "norm_inputs",
    "attention.wq": "projection_inputs", "attention.wk": "projection_inputs",
    "attention.wv": "projection_inputs", "feed_forward.w1": "projection_inputs",
    "feed_forward.w3": "projection_inputs",
    "attention": "attention", "attention.inner_attention": "attention", "attention.wo": "attention",
    "feed_forward": "mlp", "feed_forward.w2": "mlp",
}
RECORDS = [json.loads(line) for line in MEASURED.read_text().splitlines()]


def _measured_terms(rec: dict[str, Any]) -> dict[str, float]:
    out = dict.fromkeys(memory.ACTIVATION_TERMS, 0.0)
    for module, n in rec["bytes_by_module"].items():
        out[TERM_OF_MODULE[module]] += n  # KeyError: a module the mapping does not know
    return out


def _model_terms(cols: Any, rec: dict[str, Any], framework: str) -> dict[str, float]:
    c = rec["config"]
    model = ModelConfig(num_layers=2, hidden_size=c["hidden_size"],
                        ffn_hidden_size=c["ffn_hidden_size"], num_heads=c["num_heads"],
                        num_kv_heads=c["num_kv_heads"], vocab_size=256, seq_len=c["seq_len"])
    got = cols(model, dp=1, tp=c["tp"], mbs=c["mbs"], framework=framework,
               sequence_parallel=c["sequence_parallel"])
    return {k: float(v[0]) for k, v in memory.activation_terms_per_layer(got).items()}


def test_records_cover_the_standard_shapes():
    assert len(RECORDS) == 16
    assert {r["config"]["tp"] for r in RECORDS} == {1, 2, 4, 8}
    assert {r["config"]["num_kv_heads"] for r in RECORDS} == {8, 16}
    assert all(r["fingerprint"]["torchtitan"] == "0.2.2" for r in RECORDS)


@pytest.mark.parametrize("rec", RECORDS, ids=lambda r: "tp{tp}-kv{num_kv_heads}-mbs{mbs}"
                         .format(**r["config"]))
def test_torchtitan_terms_match_its_block(cols, rec):
    """Projection inputs, attention and MLP: the model's torchtitan terms are exactly what its
    block saves, but for the attention's log-sum-exp (fp32 per head and token; 0.8-1.0% of
    the attention's bytes in these records, head width 64), which the model leaves out."""
    measured = _measured_terms(rec)
    c = rec["config"]
    measured["attention"] -= 4 * c["mbs"] * c["seq_len"] * c["num_heads"] / c["tp"]
    model = _model_terms(cols, rec, "torchtitan")
    for term in ("projection_inputs", "attention", "mlp"):
        assert model[term] == pytest.approx(measured[term], rel=1e-9), term


@pytest.mark.parametrize("rec", [r for r in RECORDS if r["config"]["tp"] > 1],
                         ids=lambda r: "tp{tp}-kv{num_kv_heads}-mbs{mbs}".format(**r["config"]))
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
    for rec in RECORDS:
        c = rec["config"]
        ratio = _measured_terms(rec)["norm_inputs"] / _model_terms(cols, rec, "torchtitan")[
            "norm_inputs"]
        rstd = 2 * 4 * c["mbs"] * c["seq_len"] / c["tp"]  # two norms, fp32 per token
        assert ratio == pytest.approx(4.0 + rstd / (2 * 2 * c["mbs"] * c["seq_len"]
                                                    * c["hidden_size"] / c["tp"]), rel=1e-9)


def test_torchtitan_keeps_more_than_megatron_only_under_tensor_parallelism(cols):
    for tp in (1, 2, 8):
        kw = dict(dp=1, mbs=1, sequence_parallel=tp > 1)
        tt = float(memory.activation_bytes_per_layer(cols("8b", tp=tp, framework="torchtitan",
                                                          **kw))[0])
        mg = float(memory.activation_bytes_per_layer(cols("8b", tp=tp, framework="megatron",
                                                          **kw))[0])
        assert (tt > mg) == (tp > 1) and tt >= mg
        full = float(memory.activation_bytes_per_layer(cols(
            "8b", tp=tp, framework="torchtitan", recompute="full", **kw))[0])
        assert full == float(memory.activation_bytes_per_layer(cols(
            "8b", tp=tp, framework="megatron", recompute="full", **kw))[0])


def test_terms_sum_to_the_activations(cols):
    for fw, tp in (("torchtitan", 4), ("megatron", 4), ("nanotron", 2)):
        c = cols("8b", dp=1, tp=tp, framework=fw, sequence_parallel=True)
        terms = memory.activation_terms_per_layer(c)
        assert tuple(terms) == memory.ACTIVATION_TERMS
        np.testing.assert_allclose(sum(terms.values()), memory.activation_bytes_per_layer(c))
