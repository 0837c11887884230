"""The MoE blocks: their split across tp and ep, the shapes measured in parallel, the CPU
stand-in for integer histograms, and Megatron-Core's MoE layer where megatron-core is
installed."""

from __future__ import annotations

import importlib.util

import pytest

from microbench.moe_blocks import (
    MEGATRON_MOE_SHAPES,
    MOE_SHAPES,
    integer_histc,
    megatron_moe,
    parallel_shapes,
    torchtitan_moe,
)
from microbench.saved_activations import record

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("layer", [torchtitan_moe, megatron_moe])
def test_moe_layer_split_needs_positive_degrees(layer):
    if importlib.util.find_spec("torchtitan" if layer is torchtitan_moe else "megatron") is None:
        pytest.skip("the framework is not installed here")
    with pytest.raises(ValueError, match="tp and ep must be >= 1, got tp=2 ep=0"):
        layer(
            hidden_size=64,
            moe_ffn_hidden_size=32,
            num_experts=4,
            top_k=2,
            num_shared_experts=1,
            score_before_experts=True,
            seq_len=16,
            mbs=1,
            tp=2,
            ep=0,
        )


def test_parallel_shapes_leave_out_the_unfused_swiglu_and_under_ep_the_shared_expert():
    assert len(parallel_shapes(MEGATRON_MOE_SHAPES, ep=2)) == 6
    assert len(parallel_shapes(MEGATRON_MOE_SHAPES, ep=1)) == 12  # under tp: shared too
    assert all(s["fused_swiglu"] for s in parallel_shapes(MEGATRON_MOE_SHAPES, ep=1))
    assert len(parallel_shapes(MOE_SHAPES, ep=2)) == 8  # torchtitan's: no SwiGLU choice
    assert len(parallel_shapes(MOE_SHAPES, ep=1)) == 16


def test_integer_histc_counts_integers_as_cuda_does():
    """The CPU refuses integer histograms (torchtitan's router counts expert indices so); the
    stand-in counts them and returns the input's dtype, and leaves floats and the function as
    they were."""
    indices = torch.tensor([0, 1, 1, 3], dtype=torch.int64)
    original = torch.histc
    with integer_histc():
        counts = torch.histc(indices, bins=4, min=0, max=4)
        assert counts.dtype == torch.int64 and counts.tolist() == [1, 2, 0, 1]
        assert torch.histc(indices.float(), bins=4, min=0, max=4).dtype == torch.float32
    assert torch.histc is original


def test_megatron_moe_is_measured_where_megatron_core_is_installed():
    """Runs only where megatron-core is installed (not a project dependency): a small MoE
    layer keeps its experts' input in expert order, 2 h bytes per routed token, and its fused
    SwiGLU's three T x ffn tensors per routed token; the CPU stand-ins are gone after it."""
    pytest.importorskip("megatron.core")
    current_device = torch.cuda.current_device
    config, saved = megatron_moe(
        hidden_size=64,
        moe_ffn_hidden_size=32,
        num_experts=4,
        top_k=2,
        num_shared_experts=0,
        score_before_experts=False,
        seq_len=32,
        mbs=1,
        tp=1,
    )
    assert torch.cuda.current_device is current_device
    by_module = record("megatron", "test", config, saved, {})["bytes_by_module"]
    routed = config["routed_tokens"]
    experts = sum(v for k, v in by_module.items() if k.startswith("experts"))
    assert routed == 64 and experts == routed * (2 * 64 + 3 * 2 * 32 + 2)  # + a bf16 score
