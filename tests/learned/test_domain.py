"""The learned model's domain: unseen categories fall back to physics, scale shrinks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from surrogate.analytic.inputs import to_cols
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.learned.domain import Domain
from tests.conftest import build_config


def _cols(*configs):
    return to_cols(list(configs), shipped_parameter_sets())


def test_inside_outside_and_unseen_categories():
    train = _cols(build_config("8b", dp=8), build_config("8b", dp=16))
    dom = Domain.from_cols(train, shrink_doublings=2.0)
    assert dom.gpus == ("H100-SXM-80GB",) and dom.frameworks == ("nanotron/pp-fix",)
    test = _cols(
        build_config("8b", dp=8),
        build_config("8b", dp=64),
        build_config("8b", dp=8, framework="torchtitan"),
        build_config("8b", dp=8, gpu="A100-SXM-80GB"),
    )
    a = dom.assess(test)
    assert a.weight[0] == 1.0 and a.reasons[0] == ""
    assert a.distance[1] == pytest.approx(2.0)  # 64 GPUs vs 16 seen: two doublings
    assert a.weight[1] == pytest.approx(math.exp(-1.0))
    assert "num_gpus 64 > 16, the largest in the training runs (2.0 doublings)" in a.reasons[1]
    assert a.weight[2] == 0.0 and "framework torchtitan/main never seen" in a.reasons[2]
    assert a.weight[3] == 0.0 and "GPU A100-SXM-80GB never seen" in a.reasons[3]
    unshrunk = dom.assess(test, shrink_doublings=math.inf).weight
    assert unshrunk.tolist() == [1.0, 1.0, 0.0, 0.0]


def test_an_unseen_model_shape_keeps_part_of_the_correction_and_is_no_extrapolation():
    train = _cols(build_config("playbook-1.34b", dp=8), build_config("playbook-8.86b", dp=8))
    dom = Domain.from_cols(train, shrink_doublings=2.0, unseen_shape_weight=0.5)
    # 3.57b lies between 1.34b and 8.86b on every scale axis, but no training run had its shape
    a = dom.assess(
        _cols(
            build_config("playbook-8.86b", dp=8),
            build_config("playbook-3.57b", dp=8),
            build_config("playbook-3.57b", dp=16),
        )
    )
    assert a.unseen_shape is not None and a.unseen_shape.tolist() == [False, True, True]
    assert a.weight[0] == 1.0 and a.weight[1] == 0.5 and a.reasons[1] == ""
    assert a.weight[2] == pytest.approx(0.5 * math.exp(-0.5))  # and one doubling of GPUs
    full = Domain.from_cols(train, unseen_shape_weight=1.0).assess(
        _cols(build_config("playbook-3.57b", dp=8))
    )
    assert full.weight.tolist() == [1.0]


def test_a_domain_saved_without_shapes_weighs_no_shape():
    dom = Domain.from_cols(
        _cols(build_config("playbook-1.34b", dp=8), build_config("playbook-8.86b", dp=8))
    )
    old = {k: v for k, v in dom.to_json().items() if k not in ("shapes", "unseen_shape_weight")}
    again = Domain.from_json(old)
    assert again.shapes is None
    a = again.assess(_cols(build_config("playbook-3.57b", dp=8)))
    assert a.unseen_shape is None and a.weight.tolist() == [1.0]


def test_round_trip():
    dom = Domain.from_cols(_cols(build_config("8b", dp=8)))
    again = Domain.from_json(dom.to_json())
    assert again == dom
    assert np.isfinite(list(again.ranges.values())).all()


def test_beyond_practice_names_each_unheard_of_scale():
    from dataclasses import replace

    from surrogate.learned.domain import PRACTICE_LIMITS, beyond_practice, join_reasons

    model = build_config("8b", dp=8).model
    cols = _cols(
        build_config("8b", dp=8),
        build_config("8b", dp=8, grad_accum=10**6),
        build_config(replace(model, vocab_size=2**21), dp=8),
    )
    reasons = beyond_practice(cols)
    assert reasons[0] == ""  # 8 x 8192 tokens: 8 x 8192 x 10^6 below is 6.554e+10
    assert reasons[1] == "batch_tokens 6.554e+10 > 1.342e+08, beyond any published training run"
    assert "vocab_size 2.097e+06 > 1.049e+06" in reasons[2]
    assert set(PRACTICE_LIMITS) == {
        "num_gpus",
        "total_params",
        "seq_len",
        "batch_tokens",
        "vocab_size",
    }
    assert join_reasons(["", "a", ""], ["", "b", "c"]) == ["", "a; b", "c"]


def test_unseen_shapes_match_a_row_by_row_check():
    from surrogate.learned.domain import shape_keys

    train = _cols(build_config("playbook-1.34b", dp=8), build_config("playbook-8.86b", dp=8))
    dom = Domain.from_cols(train)
    names = [
        "playbook-1.34b",
        "playbook-3.57b",
        "playbook-8.86b",
        "llama3-8b",
        "mixtral-8x7b",
        "llama3-70b",
    ]
    order = np.random.default_rng(0).integers(0, len(names), 60)
    test = _cols(*[build_config(names[i], dp=8) for i in order])
    seen = set(dom.shapes or ())
    expected = [tuple(row) not in seen for row in shape_keys(test).tolist()]
    got = dom.unseen_shapes(test)
    assert got is not None and got.tolist() == expected and any(expected) and not all(expected)


def test_a_batchs_reasons_are_each_rows_own():
    """Reasons are formatted once per distinct value and combination (a search has millions
    of rows): in a shuffled batch every row reads what it reads alone, in the same order."""
    from dataclasses import replace

    from surrogate.config.presets import get_preset
    from surrogate.learned.domain import join_reasons

    long = replace(get_preset("8b"), seq_len=16384)
    dom = Domain.from_cols(_cols(build_config("8b", dp=8), build_config("8b", dp=16)))
    kinds = [
        build_config("8b", dp=8),
        build_config("8b", dp=64),
        build_config("8b", dp=128, framework="torchtitan"),
        build_config("8b", dp=8, gpu="A100-SXM-80GB", framework="torchtitan"),
        build_config(long, dp=256, gpu="A100-SXM-80GB"),
    ]
    order = np.random.default_rng(1).integers(0, len(kinds), 40)
    batch = dom.assess(_cols(*[kinds[i] for i in order])).reasons
    alone = [dom.assess(_cols(k)).reasons[0] for k in kinds]
    assert batch == [alone[i] for i in order]
    assert alone[0] == "" and alone[4].count("; ") == 3  # num_gpus; seq_len; tokens_per_rank; GPU
    assert alone[4].index("num_gpus") < alone[4].index("seq_len") < alone[4].index("GPU")
    # the one axis that is no configuration column says what it is
    assert (
        "tokens per micro-batch per GPU (mbs x seq_len / cp) 1.638e+04 > 8192, the largest "
        "in the training runs (1.0 doublings)"
    ) in alone[4]
    assert join_reasons(batch, [""] * 40) == batch
    assert join_reasons(["a", "", "b"], ["", "", "c"]) == ["a", "", "b; c"]


def test_an_unseen_pipeline_schedule_falls_back_to_physics():
    """All-forward-all-backward is a category like a GPU: no training run had it, so the
    correction steps aside; a domain saved before schedules were recorded saw 1F1B only."""
    dom = Domain.from_cols(_cols(build_config("8b", dp=4, pp=2), build_config("8b", dp=8)))
    assert dom.schedules == ("1f1b",)
    test = _cols(
        build_config("8b", dp=4, pp=2),
        build_config("8b", dp=4, pp=2, pp_schedule="afab"),
        build_config("8b", dp=4, pp=2, pp_schedule="afab", gpu="A100-SXM-80GB"),
    )
    a = dom.assess(test)
    assert a.weight.tolist() == [1.0, 0.0, 0.0]
    assert a.reasons[1] == "pp_schedule afab never seen"
    assert a.reasons[2] == "GPU A100-SXM-80GB never seen; pp_schedule afab never seen"
    old = {k: v for k, v in dom.to_json().items() if k != "schedules"}
    assert Domain.from_json(old).schedules == ("1f1b",)
    both = Domain.from_cols(test)
    assert both.schedules == ("1f1b", "afab")
    assert Domain.from_json(both.to_json()) == both


def test_unseen_copies_of_the_shards_fall_back_to_physics():
    """Hybrid sharding (dp_replicate > 1) is a category too: runs that all shard over every
    data-parallel rank say nothing of copies; a domain saved before shardings were recorded
    saw full sharding only."""
    kw = dict(dp=8, zero_stage=2, framework="torchtitan")
    dom = Domain.from_cols(_cols(build_config("8b", **kw)))
    assert dom.shardings == ("full",)
    test = _cols(build_config("8b", **kw), build_config("8b", **kw, dp_replicate=2))
    a = dom.assess(test)
    assert a.weight.tolist() == [1.0, 0.0]
    assert a.reasons == ["", "ZeRO sharding hybrid never seen"]
    old = {k: v for k, v in dom.to_json().items() if k != "shardings"}
    assert Domain.from_json(old).shardings == ("full",)
    both = Domain.from_cols(test)
    assert both.shardings == ("full", "hybrid")
    assert Domain.from_json(both.to_json()) == both
    assert both.assess(test).weight.tolist() == [1.0, 1.0]


def test_a_framework_is_as_far_off_as_its_own_runs_say():
    """Runs of one framework up to 64 GPUs and of another on 8 alone: the other's 64-GPU
    configuration lies three doublings beyond its own runs, and says so; the domain records
    each framework's ranges, and a domain saved without them measures against all runs."""
    train = _cols(
        build_config("8b", dp=8),
        build_config("8b", dp=64),
        build_config("8b", dp=8, framework="torchtitan"),
    )
    dom = Domain.from_cols(train, shrink_doublings=2.0)
    assert dom.framework_ranges is not None
    assert dom.framework_ranges["torchtitan/main"]["num_gpus"] == (8.0, 8.0)
    test = _cols(
        build_config("8b", dp=64),
        build_config("8b", dp=64, framework="torchtitan"),
        build_config("8b", dp=128, framework="torchtitan"),
    )
    a = dom.assess(test)
    assert a.distance[0] == 0.0 and a.reasons[0] == ""
    assert a.distance[1] == pytest.approx(3.0)
    assert a.reasons[1] == (
        "num_gpus 64 > 8, the largest in its torchtitan/main runs (3.0 doublings)"
    )
    # beyond all runs too: the farther reason is its framework's, both are said
    assert a.distance[2] == pytest.approx(4.0)
    assert "num_gpus 128 > 64, the largest in the training runs (1.0 doublings)" in a.reasons[2]
    assert (
        "num_gpus 128 > 8, the largest in its torchtitan/main runs (4.0 doublings)" in a.reasons[2]
    )
    assert Domain.from_json(dom.to_json()) == dom
    old = {k: v for k, v in dom.to_json().items() if k != "framework_ranges"}
    assert Domain.from_json(old).assess(test).distance.tolist() == [0.0, 0.0, 1.0]
