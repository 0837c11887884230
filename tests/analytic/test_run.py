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
    _, out, _ = analytic_for(cfgs, None, sets=shipped_parameter_sets(),
                             resolve=resolve_perf_model)
    assert (out["mfu"] < out["mfu_ceiling"]).all()
    assert (out["mfu_ceiling"] < 1.0).all()  # the shipped H100 profile: about 0.79
