"""The memory interval, p_oom and the verdict agree
(``surrogate.prediction.memory_verdict``):
on any columns the rule is applied to, and on random layouts predicted by the bundled model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from surrogate.errors import ConfigError
from surrogate.prediction.memory_verdict import TAIL, agree, disagreements
from surrogate.prediction.predict import predict, resolve_model
from surrogate.prediction.scoring import score
from tests.conftest import build_config

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
probability = st.floats(0.0, 1.0)


@st.composite
def answers(draw: Any) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One configuration's columns as a learned model's parts may give them, unreconciled."""
    p_oom = draw(probability)
    p_fail = draw(st.floats(0.0, 1.0 - p_oom))
    mem = draw(st.floats(1.0, 200.0))
    half = draw(st.floats(0.0, 1.0))
    status = draw(st.sampled_from(["completed", "oom", "fail"]))
    columns = {
        "p_oom": np.array([p_oom]),
        "p_fail": np.array([p_fail]),
        "p_completed": np.array([1.0 - p_oom - p_fail]),
        "pred_status": np.array([status], dtype=object),
        "pred_peak_mem_reserved_lo_gib": np.array([mem * np.exp(-half)]),
        "pred_peak_mem_reserved_hi_gib": np.array([mem * np.exp(half)]),
        "capacity_gib": np.array([draw(st.sampled_from([40.0, 80.0, 141.0]))]),
    }
    return columns, np.array([draw(st.floats(0.0, 2.0))])


@SETTINGS
@given(answers())
def test_agree_leaves_no_disagreement_and_probabilities_that_sum_to_one(drawn):
    columns, context = drawn
    out = agree(columns, context)
    assert not disagreements(out, context).any()
    total = out["p_oom"] + out["p_fail"] + out["p_completed"]
    np.testing.assert_allclose(total, 1.0, atol=1e-12)
    assert (out["p_completed"] >= -1e-12).all() and (out["p_fail"] >= 0).all()
    again = agree(out, context)  # the rule is a fixed point
    np.testing.assert_array_equal(again["p_oom"], out["p_oom"])
    np.testing.assert_array_equal(again["pred_status"], out["pred_status"])


@SETTINGS
@given(answers())
def test_agree_keeps_p_oom_and_stretches_the_interval_to_the_capacity(drawn):
    columns, context = drawn
    out = agree(columns, context)
    np.testing.assert_array_equal(out["p_oom"], columns["p_oom"])
    lo, hi = out["pred_peak_mem_reserved_lo_gib"], out["pred_peak_mem_reserved_hi_gib"]
    assert (lo <= columns["pred_peak_mem_reserved_lo_gib"]).all()  # only ever wider
    assert (hi >= columns["pred_peak_mem_reserved_hi_gib"]).all()
    cap = columns["capacity_gib"] - context
    p = columns["p_oom"]
    if (
        p[0] > TAIL
        and columns["pred_peak_mem_reserved_hi_gib"][0] + context[0] <= columns["capacity_gib"][0]
    ):
        assert hi[0] == pytest.approx(cap[0])  # reaches the capacity, no further
    else:
        assert hi[0] == columns["pred_peak_mem_reserved_hi_gib"][0]
    if (
        p[0] < 1 - TAIL
        and columns["pred_peak_mem_reserved_lo_gib"][0] + context[0] > columns["capacity_gib"][0]
    ):
        assert lo[0] == pytest.approx(cap[0])
    else:
        assert lo[0] == columns["pred_peak_mem_reserved_lo_gib"][0]


def test_without_an_interval_only_the_verdict_rule_applies():
    columns = {
        "p_oom": np.array([0.3, 0.7]),
        "p_fail": np.array([np.nan, np.nan]),
        "p_completed": np.array([0.7, 0.3]),
        "pred_status": np.array(["oom", "completed"], dtype=object),
        "pred_peak_mem_reserved_lo_gib": np.full(2, np.nan),
        "pred_peak_mem_reserved_hi_gib": np.full(2, np.nan),
        "capacity_gib": np.full(2, 80.0),
    }
    out = agree(columns, np.zeros(2))
    np.testing.assert_array_equal(out["p_oom"], [0.3, 0.7])
    assert list(out["pred_status"]) == ["completed", "oom"]


@st.composite
def layouts(draw: Any) -> dict[str, Any]:
    """A layout of 1 to 4,096 GPUs of one of three frameworks, as a ``build_config`` call."""
    framework = draw(st.sampled_from(["nanotron", "megatron", "torchtitan"]))
    return {
        "model": draw(
            st.sampled_from(["playbook-1.34b", "playbook-8.86b", "llama3-8b", "llama3-70b"])
        ),
        "framework": framework,
        "dp": draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64])),
        "tp": draw(st.sampled_from([1, 2, 4, 8])),
        "pp": draw(st.sampled_from([1, 2, 4])),
        "zero_stage": draw(st.sampled_from([0, 1, 3] if framework == "torchtitan" else [0, 1])),
        "mbs": draw(st.sampled_from([1, 2, 4, 8])),
        "grad_accum": draw(st.sampled_from([1, 4, 16])),
        "recompute": draw(st.sampled_from(["none", "selective", "full"])),
    }


@pytest.fixture(scope="module")
def bundled():
    model = resolve_model("default")
    if model is None:
        pytest.skip("no bundled model")
    return model


@SETTINGS
@given(layout=layouts())
def test_predictions_of_random_layouts_agree(bundled, layout):
    layout = dict(layout)
    try:
        cfg = build_config(layout.pop("model"), **layout)
    except (ConfigError, ValueError):
        assume(False)
    s = score([cfg], model=bundled)
    assume(not s.columns["error"][0])
    context = s.analytic["mem_cuda_context"] / 2**30
    assert not disagreements(s.columns, context).any()
    p = predict(cfg, model=bundled)
    assert p.fits == (p.status != "oom")
    if p.peak_mem_reserved_hi_gib + context[0] <= p.capacity_bytes / 2**30:
        assert p.p_oom <= TAIL
    if p.peak_mem_reserved_lo_gib + context[0] > p.capacity_bytes / 2**30:
        assert p.p_oom >= 1 - TAIL and not p.fits
