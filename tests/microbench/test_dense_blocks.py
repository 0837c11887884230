"""What a dense block saves for its backward: the counting on a toy block whose saves are known,
and Megatron-Core's layer where megatron-core is installed."""

from __future__ import annotations

import pytest

from microbench.dense_blocks import megatron_block, saved_by_module
from microbench.saved_activations import record
from tests.microbench.conftest import Toy

torch = pytest.importorskip("torch")


def test_counts_each_storage_once_with_the_module_that_saved_it():
    block = Toy()
    x = torch.randn(4, 8, dtype=torch.bfloat16, requires_grad=True)
    saved, out = saved_by_module(block, lambda: block(x), leave_out=(x,))
    # up keeps x (left out) and its weight (a parameter); no hook stays behind
    assert sorted((s.module, s.shape, s.dtype, s.bytes) for s in saved) == [
        ("(block)", (4, 16), "bfloat16", 4 * 16 * 2),
        ("down", (4, 16), "bfloat16", 4 * 16 * 2),
    ]
    assert out.shape == (4, 8) and not block.up._forward_hooks and not block._forward_pre_hooks
    out.sum().backward()  # the graph is intact
    assert x.grad is not None


def test_without_leave_out_the_input_counts():
    block = Toy()
    x = torch.randn(4, 8, dtype=torch.bfloat16, requires_grad=True)
    saved, _ = saved_by_module(block, lambda: block(x))
    assert ("up", 4 * 8 * 2) in {(s.module, s.bytes) for s in saved}


def test_megatron_layer_is_measured_where_megatron_core_is_installed():
    """Runs only where megatron-core is installed (not a project dependency): a small layer at
    tp 2 keeps its MLP input's shard and, fused, three T x ffn / tp tensors in its MLP."""
    pytest.importorskip("megatron.core")
    config, saved = megatron_block(
        hidden_size=128, num_heads=4, num_kv_heads=2, seq_len=64, mbs=1, tp=2, fused_swiglu=True
    )
    by_module = record("megatron", "test", config, saved, {})["bytes_by_module"]
    tokens, ffn = 64 / 2, config["ffn_hidden_size"]
    assert by_module["mlp.linear_fc1"] == 2 * tokens * 128  # bf16, its sequence shard
    assert by_module["mlp"] + by_module["mlp.linear_fc2"] == 3 * 2 * 64 * ffn / 2
