"""What llm-foundry's ``MPTBlock`` saves for its backward, on the CPU (method:
:mod:`microbench.saved_activations`).

Run: ``python -m microbench.saved_activations --framework llm-foundry --out saved.jsonl``; needs
``pip install --no-deps llm-foundry==0.3.0 einops`` (the block's modules need torch, einops and
packaging alone; :func:`llmfoundry_layers` loads them without the package's ``__init__``, which
imports Composer and the rest of the training stack).

The block as MPT's pretraining yamls build it (``attn_impl: triton``, ALiBi, LayerNorm
``low_precision_layernorm``, no biases, a GELU MLP of 4 h, dropouts 0), in bf16 (what Composer's
FSDP ``mixed_precision: DEFAULT`` computes in), with one stand-in: the Triton flash attention
(``layers/flash_attn_triton.py`` ``FlashAttnFunc``, which needs a GPU) is replaced by a function
that saves exactly what ``FlashAttnFunc.forward`` saves (``ctx.save_for_backward(q, k, v, o,
lse, bias)``: the query, key and value as given, its output, the fp32 log-sum-exp of
ceil(seq / 128) x 128 per head, the bias) and computes its output with PyTorch's attention; and
``attention.check_valid_inputs`` (the triton path's CUDA and dtype check) is skipped. The
block's input, which ``norm_1`` saves, is left out as for the other frameworks, and so is the
ALiBi bias, which ``MPTModel._attn_bias`` makes once per forward for every layer.
"""

from __future__ import annotations

import functools
import math
import sys
import types
from collections.abc import Callable
from typing import Any

from microbench.dense_blocks import Saved, saved_by_module

NEEDS_LLMFOUNDRY = (
    "measuring llm-foundry's MPT block needs its layers "
    "(pip install --no-deps llm-foundry==0.3.0 einops)"
)
MPT_SHAPES: tuple[dict[str, int], ...] = tuple(
    {"hidden_size": 1024, "num_heads": 8, "num_kv_heads": 8, "seq_len": s, "mbs": mbs, "tp": 1}
    for s in (512, 576)
    for mbs in (1, 2)
)
"""Multi-head attention of head width 128 (MPT's yamls keep 128), two micro-batches, two
sequence lengths (576 is not a multiple of 128: the log-sum-exp's rounding shows); no tensor
parallelism (llm-foundry has none)."""


def _flash_stand_in() -> Callable[..., Any]:
    """``flash_attn_func`` saving what llm-foundry's ``FlashAttnFunc`` saves (module
    docstring), its output from PyTorch's attention (without the bias: the values do not
    matter to what is saved)."""
    import torch

    class FlashAttnFunc(torch.autograd.Function):
        @staticmethod
        def forward(  # type: ignore[override]
            ctx: Any,
            q: Any,
            k: Any,
            v: Any,
            bias: Any = None,
            causal: bool = False,
            scale: Any = None,
        ) -> Any:
            q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
            batch, seq, heads, _ = q.shape
            with torch.no_grad():
                o = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
                )
            o = o.transpose(1, 2).contiguous()
            lse = torch.empty((batch, heads, math.ceil(seq / 128) * 128), dtype=torch.float32)
            ctx.save_for_backward(q, k, v, o, lse, bias)
            return o

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:  # pragma: no cover - forward only
            raise NotImplementedError("the measurement runs the forward only")

    return FlashAttnFunc.apply  # type: ignore[no-any-return]


@functools.cache
def llmfoundry_layers() -> tuple[Any, Any, str]:
    """llm-foundry's ``layers.blocks`` and ``layers.attention`` modules, loaded once from the
    installed distribution without its package ``__init__`` (stand-in parent packages), the
    Triton attention replaced (module docstring); and the distribution's version."""
    import importlib
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    try:
        fw_version = version("llm-foundry")
        spec = importlib.util.find_spec("llmfoundry")
    except PackageNotFoundError:
        raise SystemExit(f"{NEEDS_LLMFOUNDRY}: it is not installed") from None
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{NEEDS_LLMFOUNDRY}: its package is not found")
    root = next(iter(spec.submodule_search_locations))
    for name, path in (
        ("llmfoundry", root),
        ("llmfoundry.models", f"{root}/models"),
        ("llmfoundry.models.layers", f"{root}/models/layers"),
    ):
        package = types.ModuleType(name)
        package.__path__ = [path]
        sys.modules[name] = package
    triton = types.ModuleType("llmfoundry.models.layers.flash_attn_triton")
    triton.flash_attn_func = _flash_stand_in()  # type: ignore[attr-defined]
    sys.modules[triton.__name__] = triton
    attention = importlib.import_module("llmfoundry.models.layers.attention")
    attention.check_valid_inputs = lambda *_, **__: None  # the triton path's CUDA check
    blocks = importlib.import_module("llmfoundry.models.layers.blocks")
    return blocks, attention, fw_version


def llmfoundry_block(
    *, hidden_size: int, num_heads: int, num_kv_heads: int, seq_len: int, mbs: int, tp: int
) -> tuple[dict[str, Any], list[Saved]]:
    """llm-foundry's ``MPTBlock`` (module docstring): its configuration and what its forward
    saves. ``num_kv_heads`` must equal ``num_heads`` and ``tp`` be 1 (MPT's attention)."""
    import torch

    if num_kv_heads != num_heads or tp != 1:
        raise ValueError("MPT's block: multi-head attention (num_kv_heads = num_heads), tp 1")
    blocks, attention, fw_version = llmfoundry_layers()
    attn_config = {
        "attn_type": "multihead_attention",
        "attn_pdrop": 0.0,
        "attn_impl": "triton",
        "qk_ln": False,
        "clip_qkv": None,
        "softmax_scale": None,
        "prefix_lm": False,
        "attn_uses_sequence_id": False,
        "alibi": True,
        "alibi_bias_max": 8,
    }
    block = blocks.MPTBlock(
        d_model=hidden_size,
        n_heads=num_heads,
        expansion_ratio=4,
        attn_config=attn_config,
        resid_pdrop=0.0,
        norm_type="low_precision_layernorm",
        no_bias=True,
    ).to(torch.bfloat16)
    block.train()
    shape = attention.attn_bias_shape(
        "triton", num_heads, seq_len, True, prefix_lm=False, causal=True, use_sequence_id=False
    )
    bias = attention.build_attn_bias(
        "triton",
        torch.zeros(shape, dtype=torch.bfloat16),
        num_heads,
        seq_len,
        causal=True,
        alibi=True,
        alibi_bias_max=8,
    )
    x = torch.randn(mbs, seq_len, hidden_size, dtype=torch.bfloat16, requires_grad=True)
    saved, _out = saved_by_module(
        block, lambda: block(x, attn_bias=bias, is_causal=True), leave_out=(x, bias)
    )
    config = {
        "hidden_size": hidden_size,
        "ffn_hidden_size": 4 * hidden_size,
        "gelu_mlp": True,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "seq_len": seq_len,
        "mbs": mbs,
        "tp": 1,
        "sequence_parallel": False,
        "llm_foundry": fw_version,
    }
    return config, saved
