"""FEATURE_NAMES is public and ordered, dimensionless, and finite on real configurations."""

from __future__ import annotations

import numpy as np

from surrogate.config import config_from_flat
from surrogate.features import (
    ANALYTIC_FEATURES,
    CATEGORICAL_FEATURES,
    FEATURE_NAMES,
    build_features,
)


def test_feature_names_order():
    assert FEATURE_NAMES == CATEGORICAL_FEATURES + ANALYTIC_FEATURES
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    for name in ("mem_total_frac", "analytic_mfu", "bubble_frac", "tp_inter_node",
                 "dp_comm_to_compute", "framework_code", "log_tokens_per_rank"):
        assert name in FEATURE_NAMES


def test_no_raw_counts_among_features():
    """Trees extrapolate a raw count as a constant: scale enters through physics only."""
    for raw in ("num_nodes", "dp", "tp", "pp", "cp", "ep", "grad_accum", "num_layers",
                "hidden_size", "vocab_size", "gpus_per_node", "peak_flops", "memory_bytes"):
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
    for name in ("log_tokens_per_rank", "log_hidden_per_tp", "log_ffn_per_tp",
                 "attention_flops_frac", "mem_weights_frac"):
        assert X[name].iloc[0] == X[name].iloc[1]
