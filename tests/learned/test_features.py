"""FEATURE_NAMES is public and ordered, dimensionless, and finite on real configurations;
the shape features of Llama 3 8B by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from surrogate.config.training import config_from_flat
from surrogate.learned.features import FEATURE_NAMES, build_features, build_features_cols


def test_feature_names_are_those_the_bundled_model_was_trained_on():
    """A saved model records its features by name and order, and loads only if they are
    :data:`FEATURE_NAMES`: renaming or reordering one retires the bundled model."""
    from surrogate.learned.boosters import CATEGORICAL
    from surrogate.prediction.predict import DEFAULT_MODEL_DIR

    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    assert set(CATEGORICAL) <= set(FEATURE_NAMES)
    side = DEFAULT_MODEL_DIR / "model.json"
    if not side.exists():
        pytest.skip("no bundled model")
    assert tuple(json.loads(side.read_text())["feature_names"]) == FEATURE_NAMES


def test_shape_features_of_llama3_8b_by_hand(config):
    """Llama 3 8B (h 4096, MLP 14336, 32 heads, 8 KV heads, 32 layers, 8,030,261,248
    parameters, sequence 8192) at tp 4, dp 4, micro-batch 2 on two 8-GPU nodes, and at tp 8,
    pp 2, dp 2, micro-batch 1, 8 micro-batches on four."""
    X, _, _ = build_features_cols(
        [
            config("8b", tp=4, dp=4, mbs=2, grad_accum=8),
            config("8b", tp=8, pp=2, dp=2, mbs=1, grad_accum=8),
        ]
    )
    a, b = X.iloc[0], X.iloc[1]
    assert a["log_tokens_per_rank"] == pytest.approx(math.log(2 * 8192))
    assert a["log_hidden_per_tp"] == pytest.approx(math.log(1024))  # 4096 / 4
    assert a["log_ffn_per_tp"] == pytest.approx(math.log(3584))  # 14336 / 4
    # MLP GEMM m=16384 (2^14), n=3584 (7 * 2^9), k=4096 (2^12): FLOPs 2mnk over bf16 bytes
    # 2(mk + kn + mn) = 7 * 2^35 / (67 * 2^21) = 114688 / 67
    assert a["log_mlp_intensity"] == pytest.approx(math.log(114688 / 67))
    assert a["kv_heads_frac"] == 0.25  # 8 / 32
    # 12 L h s of the MFU numerator 6 N + 12 L h s (Playbook) is attention
    attention = 12 * 32 * 4096 * 8192
    assert a["attention_flops_frac"] == pytest.approx(attention / (6 * 8_030_261_248 + attention))
    assert b["log_tokens_per_rank"] == pytest.approx(math.log(8192))
    assert b["log_hidden_per_tp"] == pytest.approx(math.log(512))
    # one-forward-one-backward pipeline: bubble (p - 1) / (m + p - 1) of the step = 1/9
    assert (a["bubble_frac"], b["bubble_frac"]) == (0.0, pytest.approx(1 / 9))
    # ranks in tp-major order: a tp group fills at most a node; a dp group of 4 (2) ranks
    # 4 (8) apart spans two nodes; the next pipeline stage, 16 ranks away, is another node
    assert (a["tp_inter_node"], a["dp_inter_node"]) == (0, 1)
    assert (b["tp_inter_node"], b["dp_inter_node"], b["pp_inter_node"]) == (0, 1, 1)
    assert (a["is_moe"], a["zero_stage"], a["recompute"]) == (0, 0, 0)
    # the step's terms share the whole step
    shares = [name for name in FEATURE_NAMES if name.startswith("time_")]
    np.testing.assert_allclose(X[shares].sum(axis=1), 1.0, rtol=1e-12)


def test_no_raw_counts_among_features():
    """Trees extrapolate a raw count as a constant: scale enters through physics only."""
    for raw in (
        "num_nodes",
        "dp",
        "tp",
        "pp",
        "cp",
        "ep",
        "grad_accum",
        "num_layers",
        "hidden_size",
        "vocab_size",
        "gpus_per_node",
        "peak_flops",
        "memory_bytes",
    ):
        assert raw not in FEATURE_NAMES


def test_playbook_features_are_finite_and_in_order(playbook_runs):
    configs = [config_from_flat(r) for r in playbook_runs.to_dict("records")]
    X, out = build_features(configs)
    assert list(X.columns) == list(FEATURE_NAMES)
    assert len(X) == len(playbook_runs)
    values = X.to_numpy(dtype=float)
    assert np.isfinite(values).all()
    assert (out["tokens_per_s_per_gpu"] > 0).all()


def test_features_scale_free_in_cluster_size(playbook_runs):
    """Eight times the dp (and the nodes with it) leaves the features of the work per rank
    unchanged: the cluster's size is not a feature."""
    row = playbook_runs[(playbook_runs["num_nodes"] == 2)].iloc[0].to_dict()
    big = {**row, "num_nodes": row["num_nodes"] * 8, "dp": row["dp"] * 8}
    X, _ = build_features([config_from_flat(row), config_from_flat(big)])
    for name in (
        "log_tokens_per_rank",
        "log_hidden_per_tp",
        "log_ffn_per_tp",
        "attention_flops_frac",
        "mem_weights_frac",
    ):
        assert X[name].iloc[0] == X[name].iloc[1]
