"""What a block saves for its backward: the counting on a toy block whose saves are known, the
record, and the message when torchtitan or megatron-core is not installed."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from microbench.dense_blocks import Saved, megatron_block, saved_by_module, torchtitan_block
from microbench.kept_activations import (
    KEPT_SCHEMA,
    Kept,
    kept_after_forward,
    torchtitan_moe_kept,
)
from microbench.moe_blocks import (
    MEGATRON_MOE_SHAPES,
    MOE_SHAPES,
    integer_histc,
    megatron_moe,
    parallel_shapes,
    torchtitan_moe,
)
from microbench.saved_activations import SCHEMA, kept_record, main, record

torch = pytest.importorskip("torch")


class Toy(torch.nn.Module):
    """up -> SiLU -> down: SiLU (the block's own code) saves up's output; down saves SiLU's."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, 16, bias=False, dtype=torch.bfloat16)
        self.down = torch.nn.Linear(16, 8, bias=False, dtype=torch.bfloat16)

    def forward(self, x: Any) -> Any:
        return self.down(torch.nn.functional.silu(self.up(x)))


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


def test_kept_after_forward_sees_what_autograd_saves():
    """Without checkpointing, what stays alive is what the ops saved: up's output (SiLU
    keeps it) and SiLU's (down keeps it); the input and the result are aside."""
    block = Toy()
    x = torch.randn(4, 8, dtype=torch.bfloat16, requires_grad=True)
    kept, out = kept_after_forward(lambda: block(x), leave_out=(x, *block.parameters()))
    assert sorted(k.bytes for k in kept) == [4 * 16 * 2, 4 * 16 * 2]
    out.sum().backward()
    assert x.grad is not None


def test_kept_after_forward_sees_what_a_checkpoint_keeps():
    """A checkpointed block keeps its input and nothing of its own; two of them in a row keep
    the first one's output, the second one's input."""
    from torch.utils.checkpoint import checkpoint

    first, second = Toy(), Toy()
    x = torch.randn(4, 8, dtype=torch.bfloat16, requires_grad=True)

    def run():
        y = checkpoint(first, x, use_reentrant=False)
        return checkpoint(second, y, use_reentrant=False)

    kept, out = kept_after_forward(
        run, leave_out=(x, *first.parameters(), *second.parameters()))
    assert [(k.shape, k.bytes) for k in kept] == [((4, 8), 4 * 8 * 2)]
    out.sum().backward()
    assert x.grad is not None


def test_kept_record_sums_bytes():
    kept = [Kept("aten.mm.default", (2,), "bfloat16", 4), Kept("aten.mul.Tensor", (2,),
                                                                 "float32", 8)]
    rec = kept_record("megatron", "0.16.1", {"tp": 2, "recompute": "full"}, kept,
                      {"backend": "fake"})
    assert rec["schema"] == KEPT_SCHEMA and rec["kept_bytes"] == 12
    assert rec["kept"][0] == {"op": "aten.mm.default", "shape": (2,), "dtype": "bfloat16",
                              "bytes": 4}


def test_record_sums_bytes_by_module():
    saved = [Saved("a", (2,), "bfloat16", 4), Saved("b", (2,), "float32", 8),
             Saved("a", (4,), "bfloat16", 8)]
    rec = record("torchtitan", "0.2.2", {"tp": 2}, saved, {"backend": "fake"})
    assert rec["schema"] == SCHEMA and rec["bytes_by_module"] == {"a": 12, "b": 8}
    assert rec["saved"][1] == {"module": "b", "shape": (2,), "dtype": "float32", "bytes": 8}


@pytest.mark.parametrize(("framework", "block", "module", "install"), [
    ("torchtitan", torchtitan_block, "torchtitan", r"pip install torchtitan==0\.2\.2"),
    ("megatron", megatron_block, "megatron", r"pip install megatron-core==0\.16\.1"),
])
def test_without_the_framework_it_says_what_to_install(framework, block, module, install):
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    with pytest.raises(SystemExit, match=install):
        block(hidden_size=64, num_heads=4, num_kv_heads=4, seq_len=16, mbs=1, tp=2)
    with pytest.raises(SystemExit, match=install):
        main(["--framework", framework, "--out", "-"])
    with pytest.raises(SystemExit, match=install):
        main(["--framework", framework, "--recompute", "--out", "-"])


@pytest.mark.parametrize(("framework", "module", "install"), [
    ("torchtitan", "torchtitan", r"pip install torchtitan==0\.2\.2"),
    ("megatron", "megatron", r"pip install megatron-core==0\.16\.1"),
])
def test_moe_without_the_framework_says_what_to_install(framework, module, install):
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    with pytest.raises(SystemExit, match=install):
        main(["--framework", framework, "--moe", "--out", "-"])


def test_moe_blocks_are_measured_under_recomputation_by_torchtitan(capsys, monkeypatch):
    with pytest.raises(SystemExit) as e:
        main(["--framework", "megatron", "--moe", "--recompute", "--out", "-"])
    assert e.value.code == 2
    assert "--moe --recompute measures torchtitan's MoE blocks, got --framework megatron" in (
        capsys.readouterr().err)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit, match=r"--tp 2 runs under torchrun --nproc-per-node 2"):
        main(["--moe", "--recompute", "--tp", "2", "--out", "-"])


def test_torchtitan_moe_stack_is_measured_where_torchtitan_is_installed():
    """Runs only where torchtitan is installed (not a project dependency): per operator, four
    small MoE blocks keep no output of the experts' grouped GEMMs, which full recomputation
    drops too, keeping each block's input."""
    pytest.importorskip("torchtitan")
    shape = dict(hidden_size=64, num_heads=4, num_kv_heads=4, moe_ffn_hidden_size=32,
                 num_experts=4, top_k=2, num_shared_experts=0, score_before_experts=False,
                 seq_len=32, mbs=1)
    config, kept = torchtitan_moe_kept(recompute="selective-op", **shape)
    assert config["routed_tokens"] == [64] * 4 and config["ep"] == 1
    assert kept and not any("grouped_mm" in k.op for k in kept)
    _config, full = torchtitan_moe_kept(recompute="full", **shape)
    assert [k.bytes for k in full] == [2 * 32 * 64] * 3
    with pytest.raises(SystemExit, match=r"--tp 2 --ep 1 runs under torchrun"):
        torchtitan_moe_kept(recompute="full", tp=2, **shape)


def test_expert_parallelism_splits_the_moe_layer_under_torchrun(capsys, monkeypatch):
    with pytest.raises(SystemExit) as e:
        main(["--ep", "2", "--out", "-"])
    assert e.value.code == 2 and "--ep must be >= 1 and splits the experts of --moe" in (
        capsys.readouterr().err)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit, match=r"--ep 2 runs under torchrun --nproc-per-node 2 "
                                         r"\(WORLD_SIZE is unset\)"):
        main(["--moe", "--ep", "2", "--out", "-"])


@pytest.mark.parametrize("layer", [torchtitan_moe, megatron_moe])
def test_moe_layer_split_needs_positive_degrees(layer):
    if importlib.util.find_spec("torchtitan" if layer is torchtitan_moe else "megatron") is None:
        pytest.skip("the framework is not installed here")
    with pytest.raises(ValueError, match="tp and ep must be >= 1, got tp=2 ep=0"):
        layer(hidden_size=64, moe_ffn_hidden_size=32, num_experts=4, top_k=2,
              num_shared_experts=1, score_before_experts=True, seq_len=16, mbs=1, tp=2, ep=0)


@pytest.mark.parametrize("args", [["--tp", "2"], ["--moe", "--tp", "0"]])
def test_tensor_parallelism_splits_the_moe_layer_alone(args, capsys):
    with pytest.raises(SystemExit) as e:
        main([*args, "--out", "-"])
    assert e.value.code == 2 and "--tp must be >= 1 and splits the layer of --moe" in (
        capsys.readouterr().err)


def test_tensor_parallel_moe_runs_under_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit, match=r"--tp 2 runs under torchrun --nproc-per-node 2 "
                                         r"\(WORLD_SIZE is unset\)"):
        main(["--moe", "--tp", "2", "--out", "-"])
    with pytest.raises(SystemExit, match=r"--tp 2 --ep 2 runs under torchrun --nproc-per-node 4 "
                                         r"\(WORLD_SIZE is unset\)"):
        main(["--moe", "--tp", "2", "--ep", "2", "--out", "-"])


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


def test_an_unknown_framework_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--framework", "deepspeed"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_megatron_layer_is_measured_where_megatron_core_is_installed():
    """Runs only where megatron-core is installed (not a project dependency): a small layer at
    tp 2 keeps its MLP input's shard and, fused, three T x ffn / tp tensors in its MLP."""
    pytest.importorskip("megatron.core")
    config, saved = megatron_block(hidden_size=128, num_heads=4, num_kv_heads=2, seq_len=64,
                                   mbs=1, tp=2, fused_swiglu=True)
    by_module = record("megatron", "test", config, saved, {})["bytes_by_module"]
    tokens, ffn = 64 / 2, config["ffn_hidden_size"]
    assert by_module["mlp.linear_fc1"] == 2 * tokens * 128  # bf16, its sequence shard
    assert by_module["mlp"] + by_module["mlp.linear_fc2"] == 3 * 2 * 64 * ffn / 2


def test_megatron_moe_is_measured_where_megatron_core_is_installed():
    """Runs only where megatron-core is installed (not a project dependency): a small MoE
    layer keeps its experts' input in expert order, 2 h bytes per routed token, and its fused
    SwiGLU's three T x ffn tensors per routed token; the CPU stand-ins are gone after it."""
    pytest.importorskip("megatron.core")
    current_device = torch.cuda.current_device
    config, saved = megatron_moe(hidden_size=64, moe_ffn_hidden_size=32, num_experts=4,
                                 top_k=2, num_shared_experts=0, score_before_experts=False,
                                 seq_len=32, mbs=1, tp=1)
    assert torch.cuda.current_device is current_device
    by_module = record("megatron", "test", config, saved, {})["bytes_by_module"]
    routed = config["routed_tokens"]
    experts = sum(v for k, v in by_module.items() if k.startswith("experts"))
    assert routed == 64 and experts == routed * (2 * 64 + 3 * 2 * 32 + 2)  # + a bf16 score
