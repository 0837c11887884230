"""The analytic model run over configurations: the hardware's MFU ceiling."""

from __future__ import annotations

import numpy as np
import pytest

from surrogate.analytic.perf import SpecPerfModel
from surrogate.analytic.run import analytic_for, mfu_ceiling
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.hardware.perf_models import resolve_perf_model


def test_the_mfu_ceiling_is_the_best_gemm_efficiency_of_the_counted_flops(cols):
    tied = cols("playbook-1.34b", dp=8)  # tied embeddings: every counted FLOP executes
    assert tied["tie_embeddings"][0] == 1
    assert mfu_ceiling(tied, SpecPerfModel())[0] == pytest.approx(0.70)
    untied = {**tied, "tie_embeddings": np.zeros(1)}
    # an untied lookup's counted FLOPs execute none: the ceiling rises by their share
    assert mfu_ceiling(untied, SpecPerfModel())[0] > 0.70


def test_every_prediction_carries_its_ceiling_above_its_mfu(config):
    cfgs = [config("llama3-8b", dp=8), config("playbook-1.34b", dp=2, tp=4)]
    _, out, _ = analytic_for(cfgs, None, sets=shipped_parameter_sets(), resolve=resolve_perf_model)
    assert (out["mfu"] < out["mfu_ceiling"]).all()
    assert (out["mfu_ceiling"] < 1.0).all()  # the shipped H100 profile: about 0.79


def test_the_network_moves_a_layout_by_its_exposed_communication_across_nodes(config):
    """Without a measured network, the cluster's spread moves each layout's MFU by the share
    of its step that is exposed communication across nodes: none on one node, and at most
    the bandwidth's own spread (all of the step exposed)."""
    from surrogate.analytic.comm import spans_nodes
    from surrogate.analytic.run import NETWORK_TERMS, network_widening

    cfgs = [config("playbook-1.34b", dp=8), config("playbook-1.34b", dp=32, tp=4, grad_accum=8)]
    cols, out, _ = analytic_for(
        cfgs, "hf-playbook-cluster", sets=shipped_parameter_sets(), resolve=resolve_perf_model
    )
    assert (out["net_known"] == 0).all()
    assert out["net_spread_lo"][0] == 0.0 and out["net_spread_hi"][0] == 0.0  # one node
    step = {k[len("time_") :]: v for k, v in out.items() if k.startswith("time_")}
    step["step_time_s"] = out["step_time_s"]
    spans = spans_nodes(cols)
    share = sum(step[t] * spans[d] for t, d in NETWORK_TERMS.items()) / out["step_time_s"]
    assert share[1] > 0 and out["net_spread_lo"][1] > 0 and out["net_spread_hi"][1] > 0
    down, up = np.array([0.0, np.log(2.0)]), np.array([0.0, np.log(3.0)])
    whole = {**step, "step_time_s": share * out["step_time_s"]}  # all of it exposed
    slower, faster = network_widening(cols, whole, down, up)
    assert slower[1] == pytest.approx(np.log(2.0)) and faster[1] == pytest.approx(np.log(3.0))
    none = {k: np.zeros(2) if k in NETWORK_TERMS else v for k, v in step.items()}
    assert not np.any(network_widening(cols, none, down, up))
    measured = analytic_for(
        cfgs,
        "hf-playbook-cluster",
        sets=shipped_parameter_sets(),
        resolve=resolve_perf_model,
        extra={"net_scale": np.ones(2), "net_measured": np.ones(2)},
    )[1]
    assert (measured["net_known"] == 1).all() and not measured["net_spread_hi"].any()
    np.testing.assert_array_equal(measured["mfu"], out["mfu"])
