"""Transfer: the Llama 3 405B layouts, runs explained under their own cluster."""

from __future__ import annotations

import pytest

import surrogate


def test_far_outside_the_data_the_bundled_model_says_so_and_keeps_to_physics():
    """Llama 3 405B on 8,192 GPUs with torchtitan: a framework and a scale never seen."""
    from training.transfer import llama3_405b_configs

    cfg = llama3_405b_configs()[0]
    learned = surrogate.predict(cfg, model="default")
    analytic = surrogate.predict(cfg, model=None)
    assert learned.domain_weight == 0.0
    assert learned.mfu == pytest.approx(analytic.mfu)
    assert "num_gpus 8192 > 512, the largest in the training runs" in learned.extrapolation
    assert "framework torchtitan/main never seen" in learned.extrapolation
    assert learned.mfu_lo <= analytic.mfu <= learned.mfu_hi
    d = learned.to_dict()
    assert d["extrapolates"] is True and d["domain_weight"] == 0.0


def test_llama3_table_lists_the_reported_figures():
    from training.transfer import LLAMA3_405B_REPORTED, llama3_405b_configs, llama3_405b_table

    table = llama3_405b_table(None)
    assert table["mfu_reported"].tolist() == [r["mfu_reported"] for r in LLAMA3_405B_REPORTED]
    assert (table["learned_mfu"] == table["analytic_mfu"]).all()
    assert [c.cluster.num_gpus for c in llama3_405b_configs()] == [8192, 16384, 16384]


def test_llama3_table_with_the_interleaved_schedule():
    """126 layers in 16 x 2 virtual stages: torchtitan's split takes them, and interleaving
    halves the idle part of the bubble."""
    from surrogate.analytic import pipeline
    from surrogate.analytic.inputs import to_cols
    from surrogate.calibration.parameter_files import shipped_parameter_sets
    from training.transfer import LLAMA3_405B_VPP, llama3_405b_configs, llama3_405b_table

    assert LLAMA3_405B_VPP[0] == 1
    plain, interleaved = llama3_405b_table(None, 1), llama3_405b_table(None, 2)
    assert interleaved["vpp"].tolist() == [2, 2, 2]
    c = to_cols(llama3_405b_configs(2), shipped_parameter_sets())
    assert [float(pipeline.stage_layers(c, i)[0]) for i in (0, 1, 15)] == [7.0, 8.0, 7.0]
    assert (interleaved["analytic_mfu"] > plain["analytic_mfu"]).all()


def test_means_over_draws_skip_what_a_draw_lacks_without_a_warning():
    import math
    import warnings

    from training.transfer import _mean

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = _mean(
            [
                {"a": 1.0, "b": float("nan")},
                {"a": 3.0, "b": float("nan")},
                {"a": float("nan"), "b": float("nan")},
            ]
        )
    assert m["a"] == 2.0 and math.isnan(m["b"])


def test_a_user_with_one_node_of_runs_is_scored_on_their_larger_scales(playbook_subset, fitted):
    """The one-node setting draws its k runs from the other cluster's one-node runs and
    scores every run of more nodes, the learned model and the analytic one alike."""
    from surrogate.ingest.llmfoundry import parse_llmfoundry
    from surrogate.io.datasource import data_dir
    from tests.conftest import SMALL_BOOSTERS
    from training.transfer import other_cluster

    path = data_dir() / "sweeps/llmfoundry_mpt/benchmarking_README.md"
    if not path.exists():
        pytest.skip(f"the shared MPT tables are absent ({path})")
    other = parse_llmfoundry(path)[0]
    small = {"status": SMALL_BOOSTERS, "mfu": SMALL_BOOSTERS, "mem": SMALL_BOOSTERS}
    results = other_cluster(playbook_subset, other, ks=(10,), draws=1, params=small, fitted=fitted)
    assert [(r.scales, r.setting) for r in results] == [
        ("any", "zero-shot"),
        ("any", "k=10"),
        ("any", "k=10 unweighted"),
        ("one node -> more", "zero-shot"),
        ("one node -> more", "k=10"),
    ]
    more = int((other["num_nodes"] > 1).sum())
    for r in results[3:]:
        assert r.metrics["runs"] == r.analytic_metrics["runs"] == more
    assert results[1].metrics["runs"] == len(other) - 10
    # k >= OWN_MIN_RUNS: the physics alone under the parameters training fitted on the k runs
    for r in (results[1], results[2], results[4]):
        assert r.own_physics_metrics is not None
        assert r.own_physics_metrics["runs"] == r.analytic_metrics["runs"]
    same = results[1].own_physics_metrics, results[2].own_physics_metrics  # one draw, one fit
    assert same[0]["mfu_mape_ge10"] == same[1]["mfu_mape_ge10"]
    # the zero-shot analytic baseline alone, as ``accuracy.py --analytic --transfer`` prints it
    import pandas as pd

    from training.evaluate import accuracy_metrics
    from training.transfer import zero_shot_analytic

    alone = accuracy_metrics(zero_shot_analytic(other))
    assert pd.Series(alone).equals(pd.Series(results[0].analytic_metrics))
    assert alone["runs"] == len(other)
