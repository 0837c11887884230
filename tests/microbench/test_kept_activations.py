"""What stays alive after a forward: on a toy block, with and without checkpointing, and
torchtitan's MoE stack where torchtitan is installed."""

from __future__ import annotations

import pytest

from microbench.kept_activations import kept_after_forward, torchtitan_moe_kept
from tests.microbench.conftest import Toy

torch = pytest.importorskip("torch")


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

    kept, out = kept_after_forward(run, leave_out=(x, *first.parameters(), *second.parameters()))
    assert [(k.shape, k.bytes) for k in kept] == [((4, 8), 4 * 8 * 2)]
    out.sum().backward()
    assert x.grad is not None


def test_torchtitan_moe_stack_is_measured_where_torchtitan_is_installed():
    """Runs only where torchtitan is installed (not a project dependency): per operator, four
    small MoE blocks keep no output of the experts' grouped GEMMs, which full recomputation
    drops too, keeping each block's input."""
    pytest.importorskip("torchtitan")
    shape = dict(
        hidden_size=64,
        num_heads=4,
        num_kv_heads=4,
        moe_ffn_hidden_size=32,
        num_experts=4,
        top_k=2,
        num_shared_experts=0,
        score_before_experts=False,
        seq_len=32,
        mbs=1,
    )
    config, kept = torchtitan_moe_kept(recompute="selective-op", **shape)
    assert config["routed_tokens"] == [64] * 4 and config["ep"] == 1
    assert kept and not any("grouped_mm" in k.op for k in kept)
    _config, full = torchtitan_moe_kept(recompute="full", **shape)
    assert [k.bytes for k in full] == [2 * 32 * 64] * 3
    with pytest.raises(SystemExit, match=r"--tp 2 --ep 1 runs under torchrun"):
        torchtitan_moe_kept(recompute="full", tp=2, **shape)
