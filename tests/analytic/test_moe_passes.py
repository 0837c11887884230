"""The unfused MoE permutation's HBM traffic (``surrogate.analytic.moe_passes``): its count per
element, where it applies, how the step takes it, and the count against one profiled step of
three torchtitan 0.2.2 MoE models on our H100 (``datasets/h100/2026-11-24/torchtitan-profiles``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from surrogate.analytic import moe_passes, step
from surrogate.analytic.inputs import to_cols
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.training import config_from_flat
from surrogate.hardware.profile import default_profile

DATA = Path(__file__).parents[2] / "datasets" / "h100" / "2026-11-24"
PROFILED = ("moe8e-s4096-mbs2", "moe16e-s4096-mbs4", "moe32e-s4096-mbs4")
PERF = default_profile("H100-SXM-80GB")


def _run_cols(run: str, **layout: Any) -> dict[str, Any]:
    """The columns of one of our torchtitan runs (its ``flavour.json`` and ``config.toml``)."""
    columns = json.loads((DATA / "torchtitan" / run / "flavour.json").read_text())["columns"]
    mbs = int(re.search(r"mbs(\d+)", run).group(1))  # type: ignore[union-attr]
    flat = {
        **columns,
        "framework": "torchtitan",
        "mbs": mbs,
        "seq_len": 4096,
        "dp": 1,
        "recompute": "none",
        **layout,
    }
    return dict(to_cols([config_from_flat(flat)], shipped_parameter_sets()))


def test_bytes_per_element_follow_the_residual_dtype():
    """176 bytes per routed element with an fp32 residual stream (autocast), 106 with bf16;
    per token 5 e + 6 e with a shared expert, plus the router's casts under autocast."""
    e = np.array([4.0, 2.0])
    np.testing.assert_array_equal(moe_passes.bytes_per_routed_element(e), [176.0, 106.0])
    np.testing.assert_array_equal(
        moe_passes.bytes_per_token_element(e, np.array([1.0, 0.0])), [56.0, 10.0]
    )


def test_residual_bytes_fp32_under_autocast_only():
    """torchtitan on one GPU trains under autocast (fp32 residual stream); under FSDP bf16."""
    assert moe_passes.residual_bytes(_run_cols("moe16e-s4096-mbs4"))[0] == 4.0
    fsdp = _run_cols("moe16e-s4096-mbs4", dp=8, zero_stage=3, gpus_per_node=8)
    assert moe_passes.residual_bytes(fsdp)[0] == 2.0


def test_permutation_applies_to_torchtitan_moe_only(cols):
    """None for a dense model, for Megatron-Core (fused permutation) or nanotron."""
    layers = np.array([4.0])
    assert moe_passes.permutation_bytes(_run_cols("moe8e-s4096-mbs2"), layers)[0] > 0
    dense = _run_cols("dense1b-s4096-mbs2")
    assert moe_passes.permutation_bytes(dense, layers)[0] == 0
    for framework, ep in (("megatron", 4), ("nanotron", 1)):
        c = cols("mixtral-8x7b", dp=8, ep=ep, zero_stage=1, framework=framework)
        assert c["moe_unfused_permutation"][0] == 0
        assert moe_passes.permutation_bytes(c, layers)[0] == 0


def test_step_counts_the_permutation_in_place_of_the_routed_copies_traffic():
    """memory_bound grows by the count less the generic traffic of the routed copies."""
    c = _run_cols("moe16e-s4096-mbs4")
    off = {**c, "moe_unfused_permutation": np.zeros(1)}
    on_s = step.step_breakdown(c, PERF)["memory_bound"][0]
    off_s = step.step_breakdown(off, PERF)["memory_bound"][0]
    L, T, h = 12, 4 * 4096, 1024
    count = L * h * (T * 176 + T * 56)
    generic = L * step.ELEMENTWISE_TRAFFIC_FACTOR * T * h * c["moe_routed_bytes"][0]
    assert on_s - off_s == pytest.approx((count - generic) / c["hbm_bw"][0], rel=1e-9)


def _kernel_ms(run: str) -> float:
    """Measured milliseconds of the profiled step's gather, scatter, index, sort, concatenate,
    reduce, copy, fill, add and multiply kernels (the permutation's and the other
    elementwise ones)."""
    lines = (DATA / "torchtitan-profiles" / f"{run}.kernels.txt").read_text().splitlines()[1:]
    pattern = re.compile(
        r"gather|index|scatter|radix|Histogram|CatArray|topk|reduce_kernel<128"
        r"|copy|Fill|CUDAFunctor_add|BinaryFunctor"
    )
    return sum(float(line.split()[0]) for line in lines if pattern.search(line))


@pytest.mark.parametrize("run", PROFILED)
def test_count_takes_less_than_the_measured_kernels(run):
    """At the HBM bandwidth the count is shorter than the kernels that run it (with the other
    elementwise ones: the count is not fitted to them)."""
    c = _run_cols(run)
    seconds = moe_passes.permutation_bytes(c, c["num_layers"])[0] / c["hbm_bw"][0]
    assert 0 < seconds * 1e3 < _kernel_ms(run)
