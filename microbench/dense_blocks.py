"""What a dense transformer block saves for its backward, torchtitan's and Megatron-Core's,
on the CPU (method: :mod:`microbench.saved_activations`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

NEEDS_TORCHTITAN = (
    "measuring torchtitan's block needs torchtitan 0.2.x (pip install torchtitan==0.2.2 triton)"
)
NEEDS_MEGATRON = (
    "measuring Megatron-Core's layer needs megatron-core (pip install megatron-core==0.16.1)"
)
STANDARD_SHAPES: tuple[dict[str, int], ...] = tuple(
    {"hidden_size": 1024, "num_heads": 16, "num_kv_heads": kv, "seq_len": 512, "mbs": mbs, "tp": tp}
    for kv in (16, 8)
    for mbs in (1, 2)
    for tp in (1, 2, 4, 8)
)
"""Multi-head and grouped-query attention, two micro-batches, tp 1-8: bytes scale with the
widths and tokens, so small shapes stand for large ones."""


@dataclass(frozen=True)
class Saved:
    """One storage autograd saved: the innermost module whose forward saved it first."""

    module: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int


def saved_by_module(
    block: Any, run: Callable[[], Any], *, leave_out: Sequence[Any] = ()
) -> tuple[list[Saved], Any]:
    """The storages autograd saves while ``run()`` runs ``block``'s forward, each once, with
    the innermost submodule of ``block`` running when it was saved (``(block)`` for the block's
    own code); tensors sharing a storage with the block's parameters and buffers or with
    ``leave_out`` are not counted. Returns them and ``run()``'s result (keep it alive: the
    graph holds the saved tensors)."""
    import torch

    def local(t: Any) -> Any:  # a DTensor's shard on this rank
        return getattr(t, "_local_tensor", t)

    skip = {
        local(t).untyped_storage().data_ptr()
        for t in (*block.parameters(), *block.buffers(), *leave_out)
    }
    stack = ["(block)"]

    def enter(name: str) -> Callable[..., None]:
        return lambda *_: stack.append(name)

    def leave(*_: Any) -> None:  # returns None: a hook's value would replace the output
        stack.pop()

    handles = []
    for name, sub in block.named_modules():
        if name:
            handles.append(sub.register_forward_pre_hook(enter(name)))
            handles.append(sub.register_forward_hook(leave))
    seen: dict[int, Saved] = {}

    def pack(t: Any) -> Any:
        shard = local(t)
        st = shard.untyped_storage()
        if st.data_ptr() not in skip and st.data_ptr() not in seen:
            seen[st.data_ptr()] = Saved(
                module=stack[-1],
                shape=tuple(shard.shape),
                dtype=str(shard.dtype).removeprefix("torch."),
                bytes=st.nbytes(),
            )
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = run()
    finally:
        for h in handles:
            h.remove()
    return list(seen.values()), out


@contextmanager
def fake_world(tp: int) -> Iterator[None]:
    """PyTorch's fake process group of ``tp`` ranks, this process playing rank 0."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
    try:
        yield
    finally:
        dist.destroy_process_group()


@dataclass(frozen=True)
class Stack:
    """Layers built on the fake process group. ``run()`` runs their forward, one after the
    other, on ``inputs[0]``; ``inputs`` (the input, the rotary table) are not counted."""

    run: Callable[[], Any]
    inputs: tuple[Any, ...]
    modules: Any
    """What holds the layers' parameters and buffers (not counted either)."""
    config: dict[str, Any]

    def aside(self) -> tuple[Any, ...]:
        """What :func:`kept_after_forward` does not count: the inputs and the parameters and
        buffers of the layers."""
        return (*self.inputs, *self.modules.parameters(), *self.modules.buffers())


def bf16_model(model_class: Any, args: Any) -> Any:
    """torchtitan's ``model_class(args)``, its weights initialised and cast to bf16 (what
    FSDP2's ``MixedPrecisionPolicy`` does in the forward)."""
    import torch

    model = model_class(args)
    with torch.no_grad():
        model.init_weights()
    for p in model.parameters():
        p.data = p.data.to(torch.bfloat16)
    return model


def checkpointed(model: Any, ac: tuple[str, str], save_list: set[Any]) -> None:
    """torchtitan's activation checkpointing ``ac`` = (mode, selective_ac_option) on
    ``model``'s blocks, its per-operator ``save_list`` with the CPU flash kernel beside the
    CUDA ones it names (module docstring)."""
    import torch
    import torchtitan.distributed.activation_checkpoint as titan_ac
    from torchtitan.config.job_config import ActivationCheckpoint

    titan_ac._layer_sac_count = 0  # what a fresh process counts from
    save = {*save_list, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}
    titan_ac.apply_ac(
        model, ActivationCheckpoint(mode=ac[0], selective_ac_option=ac[1]), op_sac_save_list=save
    )


@contextmanager
def torchtitan_stack(
    *,
    hidden_size: int,
    num_heads: int,
    num_kv_heads: int,
    seq_len: int,
    mbs: int,
    tp: int,
    num_layers: int = 1,
    ac: tuple[str, str] | None = None,
) -> Iterator[Stack]:
    """torchtitan's Llama 3 model with ``num_layers`` blocks under its tensor-parallel plan,
    and with ``ac`` = (mode, selective_ac_option) its activation checkpointing."""
    import torch

    try:
        from torchtitan.models.llama3.infra.parallelize import _op_sac_save_list, apply_tp
        from torchtitan.models.llama3.model.args import TransformerModelArgs
        from torchtitan.models.llama3.model.model import Transformer
    except ImportError as e:
        raise SystemExit(f"{NEEDS_TORCHTITAN}: {e}") from None
    from torch.distributed.device_mesh import init_device_mesh

    with fake_world(tp):
        args = TransformerModelArgs(
            dim=hidden_size,
            n_layers=num_layers,
            n_heads=num_heads,
            n_kv_heads=num_kv_heads,
            vocab_size=256,
            max_seq_len=seq_len,
        )
        model = bf16_model(Transformer, args)
        if tp > 1:
            apply_tp(
                model,
                init_device_mesh("cpu", (tp,)),
                loss_parallel=True,
                enable_float8_tensorwise_tp=False,
            )
        ffn = int(model.layers["0"].feed_forward.w1.weight.shape[0])
        if ac is not None:
            checkpointed(model, ac, _op_sac_save_list)
        x = torch.randn(mbs, seq_len // tp, hidden_size, dtype=torch.bfloat16, requires_grad=True)

        def run() -> Any:
            y = x
            for i in range(num_layers):
                y = model.layers[str(i)](y, model.freqs_cis, None)
            return y

        config = {
            "hidden_size": hidden_size,
            "ffn_hidden_size": ffn,
            "num_heads": num_heads,
            "num_kv_heads": num_kv_heads,
            "seq_len": seq_len,
            "mbs": mbs,
            "tp": tp,
            "sequence_parallel": tp > 1,
        }
        yield Stack(run=run, inputs=(x, model.freqs_cis), modules=model, config=config)


def torchtitan_block(
    *, hidden_size: int, num_heads: int, num_kv_heads: int, seq_len: int, mbs: int, tp: int
) -> tuple[dict[str, Any], list[Saved]]:
    """torchtitan's Llama 3 block under its tensor-parallel plan on a fake process group of
    ``tp`` ranks: its configuration and what its forward saves."""
    with torchtitan_stack(
        hidden_size=hidden_size,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        seq_len=seq_len,
        mbs=mbs,
        tp=tp,
    ) as s:
        saved, _out = saved_by_module(s.modules.layers["0"], s.run, leave_out=s.inputs)
        return s.config, saved


class _OneStream:
    """The CPU's one stream, where Megatron's MoE token dispatcher asks for a CUDA stream to
    copy its token counts to the host on, and for an event to wait on: both are no-ops."""

    def wait_stream(self, *_: Any) -> None:
        pass

    def record_event(self, *_: Any) -> _OneStream:
        return self

    def synchronize(self) -> None:
        pass


@contextmanager
def megatron_on_cpu() -> Iterator[None]:
    """Megatron-Core 0.16.1 on a CPU, with stand-ins that change no tensor it saves: its
    buffers, allocated on ``torch.cuda.current_device()``, go to the CPU; its checkpointing
    saves the CPU generator's state where it saves the CUDA one's; its MoE token dispatcher's
    side stream and events are :class:`_OneStream`, and its copy of the token counts to the
    host returns host arrays as it does from a GPU (on a CPU tensor it returns the tensor,
    which the all-to-all refuses as split sizes); and its router's GEMM, which tests a name
    bound only when Transformer Engine imports (``te_general_gemm``, a NameError without it in
    0.16.1), finds it None and runs its own fallback. Its gathers and reduce-scatters of
    uneven token counts (the dispatcher's under tp and ep at once), which NCCL runs and gloo
    refuses, run padded or chunk by chunk over gloo."""
    import megatron.core.transformer.moe.moe_utils as moe_utils
    import megatron.core.transformer.moe.token_dispatcher as token_dispatcher
    import torch
    from megatron.core.tensor_parallel import random as megatron_random

    def to_host(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
        # what its copy of a CUDA tensor returns: a host array where it asks for one
        return tensor.numpy() if as_numpy and torch.is_tensor(tensor) else tensor

    all_gather, all_reduce = torch.distributed.all_gather, torch.distributed.all_reduce

    def uneven_all_gather(outputs: list[Any], tensor: Any, group: Any = None) -> None:
        # NCCL gathers rows of different counts; gloo gathers them padded to the largest
        most = max(o.shape[0] for o in outputs)
        padded = tensor.new_zeros((most, *tensor.shape[1:]))
        padded[: tensor.shape[0]] = tensor
        gathered = [torch.empty_like(padded) for _ in outputs]
        all_gather(gathered, padded, group=group)
        for out, got in zip(outputs, gathered, strict=True):
            out.copy_(got[: out.shape[0]])

    def uneven_reduce_scatter(output: Any, inputs: list[Any], group: Any = None) -> None:
        # NCCL reduce-scatters chunks of different counts; gloo reduces each, keeps its own
        for i, chunk in enumerate(inputs):
            summed = chunk.clone()
            all_reduce(summed, group=group)
            if i == torch.distributed.get_rank(group):
                output.copy_(summed)

    stream = _OneStream()
    patches = [
        (torch.cuda, "current_device", lambda: "cpu"),
        (megatron_random, "_get_all_rng_states", lambda: (torch.get_rng_state(), None, {})),
        (torch.cuda, "Stream", lambda *_, **__: stream),
        (torch.cuda, "current_stream", lambda *_, **__: stream),
        (torch.cuda, "stream", lambda *_: contextlib.nullcontext()),
        (moe_utils, "te_general_gemm", None),
        (token_dispatcher, "maybe_move_tensor_to_cpu", to_host),
        (torch.distributed, "all_gather", uneven_all_gather),
        (torch.distributed, "reduce_scatter", uneven_reduce_scatter),
    ]
    missing = object()
    before = [(owner, name, getattr(owner, name, missing)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in before:
            if value is missing:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


@contextmanager
def megatron_stack(
    *,
    hidden_size: int,
    num_heads: int,
    num_kv_heads: int,
    seq_len: int,
    mbs: int,
    tp: int,
    fused_swiglu: bool = True,
    num_layers: int | None = None,
    recompute: str | None = None,
) -> Iterator[Stack]:
    """Megatron-Core's GPT layer (local spec, RMSNorm, SwiGLU with its fusion on or off, rotary
    embeddings, sequence parallelism with tp > 1) on a fake process group of ``tp`` ranks, with
    the stand-ins of the module docstring: one ``TransformerLayer`` (``num_layers`` None) or a
    ``TransformerBlock`` of ``num_layers`` under ``recompute`` (None, ``selective``: its core
    attention, or ``full``: every layer, Megatron-LM's ``--recompute-method uniform
    --recompute-num-layers 1``)."""
    import torch
    import torch.nn.functional as F

    try:
        from megatron.core import parallel_state
        from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.tensor_parallel import random as megatron_random
        from megatron.core.transformer.transformer_block import TransformerBlock
        from megatron.core.transformer.transformer_layer import TransformerLayer
    except ImportError as e:
        raise SystemExit(f"{NEEDS_MEGATRON}: {e}") from None

    class Norm(torch.nn.RMSNorm):  # built by Megatron's spec as (config, hidden_size, eps)
        def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5) -> None:
            super().__init__(hidden_size, eps=eps, dtype=torch.bfloat16)

    class FlashCore(torch.nn.Module):  # [s, b, heads, d] views in, [s, b, heads x d] out
        def forward(self, query: Any, key: Any, value: Any, *_: Any, **__: Any) -> Any:
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            b, n, s, d = o.shape
            return o.permute(2, 0, 1, 3).reshape(s, b, n * d)

    tracker = megatron_random.get_cuda_rng_tracker()
    with fake_world(tp), megatron_on_cpu():
        try:
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=tp, create_gloo_process_groups=False
            )
            head_dim = hidden_size // num_heads
            cfg, ffn = _megatron_config(
                hidden_size=hidden_size,
                num_heads=num_heads,
                num_kv_heads=num_kv_heads,
                tp=tp,
                fused_swiglu=fused_swiglu,
                num_layers=num_layers,
                recompute=recompute,
            )
            spec = get_gpt_layer_local_spec(normalization="RMSNorm")
            spec.submodules.input_layernorm = Norm
            spec.submodules.pre_mlp_layernorm = Norm
            if num_layers is None:
                modules = TransformerLayer(cfg, spec.submodules, layer_number=1)
                layers = [modules]
            else:
                modules = TransformerBlock(cfg, spec, post_layer_norm=False)
                layers = list(modules.layers)
                # the block forks the CUDA generator of the tensor-parallel region
                tracker.fork = (  # type: ignore[method-assign]
                    lambda *_, **__: contextlib.nullcontext()
                )
            for layer in layers:
                layer.self_attention.core_attention = FlashCore()
            freqs = RotaryEmbedding(
                kv_channels=head_dim, rotary_percent=1.0, use_cpu_initialization=True
            ).get_freqs_non_repeated(seq_len)
            rotary = torch.cat((freqs, freqs), dim=-1)[:, None, None, :]  # what get_emb returns
            x = torch.randn(
                seq_len // tp, mbs, hidden_size, dtype=torch.bfloat16, requires_grad=True
            )
            config = {
                "hidden_size": hidden_size,
                "ffn_hidden_size": ffn,
                "num_heads": num_heads,
                "num_kv_heads": num_kv_heads,
                "seq_len": seq_len,
                "mbs": mbs,
                "tp": tp,
                "sequence_parallel": tp > 1,
                "fused_swiglu": fused_swiglu,
            }
            yield Stack(
                run=lambda: modules(x, attention_mask=None, rotary_pos_emb=rotary),
                inputs=(x, rotary),
                modules=modules,
                config=config,
            )
        finally:
            tracker.__dict__.pop("fork", None)  # the class's own again
            parallel_state.destroy_model_parallel()


def _megatron_config(
    *,
    hidden_size: int,
    num_heads: int,
    num_kv_heads: int,
    tp: int,
    fused_swiglu: bool,
    num_layers: int | None,
    recompute: str | None,
) -> tuple[Any, int]:
    """:func:`megatron_stack`'s ``TransformerConfig`` and its SwiGLU width (torchtitan's)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    ffn = 256 * ((int(8 * hidden_size / 3) + 255) // 256)  # torchtitan's SwiGLU width
    recomputing: dict[str, Any] = {}
    if recompute == "selective":
        recomputing = {"recompute_granularity": "selective"}
    elif recompute == "full":
        recomputing = {
            "recompute_granularity": "full",
            "recompute_method": "uniform",
            "recompute_num_layers": 1,
        }
    cfg = TransformerConfig(
        num_layers=num_layers or 1,
        hidden_size=hidden_size,
        num_attention_heads=num_heads,
        num_query_groups=num_kv_heads,
        ffn_hidden_size=ffn,
        gated_linear_unit=True,
        activation_func=F.silu,
        normalization="RMSNorm",
        add_bias_linear=False,
        bias_activation_fusion=fused_swiglu,
        use_cpu_initialization=True,
        params_dtype=torch.bfloat16,
        bf16=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        sequence_parallel=tp > 1,
        tensor_model_parallel_size=tp,
        **recomputing,
    )
    return cfg, ffn


def megatron_block(
    *,
    hidden_size: int,
    num_heads: int,
    num_kv_heads: int,
    seq_len: int,
    mbs: int,
    tp: int,
    fused_swiglu: bool = True,
) -> tuple[dict[str, Any], list[Saved]]:
    """Megatron-Core's GPT layer (:func:`megatron_stack`): its configuration and what its
    forward saves."""
    with megatron_stack(
        hidden_size=hidden_size,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        seq_len=seq_len,
        mbs=mbs,
        tp=tp,
        fused_swiglu=fused_swiglu,
    ) as s:
        saved, _out = saved_by_module(s.modules, s.run, leave_out=s.inputs)
        return s.config, saved


BLOCKS: dict[
    str, tuple[Callable[..., tuple[dict[str, Any], list[Saved]]], tuple[dict[str, Any], ...]]
] = {
    "torchtitan": (torchtitan_block, STANDARD_SHAPES),
    "megatron": (
        megatron_block,
        tuple(
            {**shape, "fused_swiglu": fused} for fused in (True, False) for shape in STANDARD_SHAPES
        ),
    ),
}
"""Each framework's block and the shapes it is measured at (Megatron-LM trains with its fused
SwiGLU on, ``--no-bias-swiglu-fusion`` turns it off; Megatron-Core's own default is off)."""
