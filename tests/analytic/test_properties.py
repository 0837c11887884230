"""Invariants of the analytic step-time model across the layout space (hypothesis draws the
layouts): hardware that is faster in every respect is never slower, a longer sequence at the
same tokens per micro-batch never raises tokens/s (attention costs more per token, nothing
costs less), and every shipped parameter value lies inside its physical range."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from surrogate.analytic import params, step
from surrogate.analytic.inputs import to_cols
from surrogate.analytic.perf import SpecPerfModel
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.errors import ConfigError
from tests.conftest import build_config

PERF = SpecPerfModel()
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def layouts(draw: Any) -> dict[str, Any]:
    """A layout of 1 to 64 GPUs of one of three frameworks, as a ``build_config`` call."""
    framework = draw(st.sampled_from(["nanotron", "megatron", "torchtitan"]))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 4]))
    dp = draw(st.sampled_from([1, 2, 4, 8]))
    zero = draw(st.sampled_from([0, 1, 3] if framework == "torchtitan" else [0, 1]))
    return {
        "model": draw(st.sampled_from(["playbook-1.34b", "llama3-8b"])),
        "framework": framework,
        "dp": dp,
        "tp": tp,
        "pp": pp,
        "zero_stage": zero,
        "mbs": draw(st.sampled_from([2, 4, 8])),
        "grad_accum": draw(st.sampled_from([1, 4, 16])),
        "recompute": draw(st.sampled_from(["none", "selective", "full"])),
    }


def _config(layout: dict[str, Any], **model: Any) -> Any:
    layout = dict(layout)
    name = layout.pop("model")
    try:
        cfg = build_config(name, **layout)
        if model:
            cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **model))
    except (ConfigError, ValueError):
        assume(False)
    return cfg


def _step(c: dict[str, Any]) -> float:
    return float(step.step_breakdown(c, PERF)["step_time_s"][0])


@SETTINGS
@given(layouts(), st.floats(1.1, 4.0))
def test_faster_hardware_is_never_slower(layout, factor):
    c = to_cols([_config(layout)], shipped_parameter_sets())
    base = _step(c)
    for names in (
        ("peak_flops", "peak_flops_bf16"),
        ("hbm_bw",),
        ("intra_node_bw", "inter_node_bw"),
        ("peak_flops", "peak_flops_bf16", "hbm_bw", "intra_node_bw", "inter_node_bw"),
    ):
        faster = {**c, **{n: c[n] * factor for n in names}}
        assert _step(faster) <= base * (1 + 1e-9), names


@SETTINGS
@given(layouts())
def test_a_longer_sequence_at_the_same_tokens_never_raises_tokens_per_s(layout):
    short = _config(layout, seq_len=2048)
    longer = _config({**layout, "mbs": layout["mbs"] // 2}, seq_len=4096)
    c_short, c_long = (
        to_cols([short], shipped_parameter_sets()),
        to_cols([longer], shipped_parameter_sets()),
    )
    tps_short = step.step_breakdown(c_short, PERF)["tokens_per_s_per_gpu"][0]
    tps_long = step.step_breakdown(c_long, PERF)["tokens_per_s_per_gpu"][0]
    assert tps_long <= tps_short * (1 + 1e-9)


@pytest.mark.parametrize("name", sorted(shipped_parameter_sets().sets))
def test_every_shipped_value_lies_in_its_physical_range(name):
    for key, value in shipped_parameter_sets().sets[name]["values"].items():
        p = params.PARAMETERS[key]
        assert p.lower <= value <= p.upper, (name, key, value, (p.lower, p.upper))


def test_every_parameter_states_its_mechanism_and_scope():
    for p in params.FREE_PARAMETERS:
        assert p.scope in ("framework", "cluster"), p.name
        assert len(p.source) > 60, p.name  # a mechanism and a source, not a label
    assert np.isfinite([p.upper for p in params.FREE_PARAMETERS]).all()
