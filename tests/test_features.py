"""FEATURE_NAMES is public and ordered; features of real configurations are finite."""

from __future__ import annotations

import numpy as np

from surrogate.config import config_from_flat
from surrogate.features import ANALYTIC_FEATURES, CONFIG_FEATURES, FEATURE_NAMES, build_features


def test_feature_names_order():
    assert FEATURE_NAMES == CONFIG_FEATURES + ANALYTIC_FEATURES
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    assert FEATURE_NAMES[:3] == ("num_layers", "hidden_size", "ffn_hidden_size")
    for name in ("tp", "pp", "dp", "cp", "ep", "mem_total_frac", "analytic_mfu", "bubble_frac",
                 "tp_inter_node", "log_tokens_per_s_per_gpu"):
        assert name in FEATURE_NAMES


def test_playbook_features_are_finite_and_in_order(playbook_runs):
    configs = [config_from_flat(r) for r in playbook_runs.to_dict("records")]
    X, out = build_features(configs)
    assert list(X.columns) == list(FEATURE_NAMES)
    assert len(X) == len(playbook_runs)
    values = X.to_numpy(dtype=float)
    assert not np.isnan(values).any()
    assert np.isfinite(values).all()
    assert (out["tokens_per_s_per_gpu"] > 0).all()
