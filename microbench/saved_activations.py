"""What a framework's transformer block keeps for its backward: the bytes autograd saves, by
the module that saves them.

Run: ``python -m microbench.saved_activations --framework torchtitan --out saved.jsonl``
(torchtitan's Llama block at the standard shapes; needs ``pip install torchtitan==0.2.2
triton``) or ``--framework megatron`` (Megatron-Core's GPT layer, with its fused SwiGLU on and
off; needs ``pip install megatron-core==0.16.1``); the project depends on neither. No GPU is
needed: the block runs on the CPU, its tensor parallelism on PyTorch's fake process group
(``torch.testing._internal.distributed.fake_pg``: one process plays rank 0 of ``tp``;
collectives return tensors of the right shape and move no data).

Method per shape: build the model with one layer, cast its parameters to bf16 (what FSDP2's
``MixedPrecisionPolicy`` does in the forward), apply the framework's own tensor-parallel plan
(torchtitan's ``apply_tp``: sequence-parallel norms, the norms' outputs gathered before the
column-parallel QKV and MLP projections, row-parallel outputs reduce-scattered), run one block's
forward on a bf16 input of ``mbs x seq_len / tp`` tokens, and record every tensor autograd saves
(``torch.autograd.graph.saved_tensors_hooks``), once per storage, with the innermost module
whose forward saved it; parameters, buffers and the block's input are left out. The bytes are
those of the tensors' storages: what the rank would hold until the backward.

What is device-independent and what is not: which tensors a module's autograd saves, and their
shapes and dtypes, do not depend on the device, with two exceptions. RMSNorm runs PyTorch's
composite ``rms_norm`` on a CPU (it keeps an fp32 copy of its input and its fp32 normalised
output: 8 bytes per element), where a GPU build may run a fused kernel that keeps less; and the
attention kernel is the CPU flash kernel, which keeps what the GPU flash kernels keep (query,
key, value, output, log-sum-exp). So the records split the bytes by module, and
``surrogate.analytic.activations.activation_terms_per_layer`` is compared with them term by term
(``tests/analytic/test_memory_measured_saves.py``), the norms apart.

Megatron-Core's layer (``TransformerLayer`` of the local GPT spec, RMSNorm, SwiGLU, rotary
embeddings, sequence parallelism with tp > 1) runs with three stand-ins, none of which changes
what its projections or its MLP save: its tensor-parallel code allocates its buffers on
``torch.cuda.current_device()``, pointed at the CPU while the block runs; its norms are
PyTorch's ``RMSNorm`` (Megatron's CPU fallback refuses sequence parallelism; on a GPU it runs
Transformer Engine's); and its core attention, which on a GPU is Transformer Engine's fused
attention and here the local spec's unfused one (it keeps the s x s scores), is a
FlashAttention-class stand-in (PyTorch's SDPA on the same query, key and value views). What the
core attention keeps therefore belongs to the stand-in: its value is a view into the fused QKV
projection's output, so the whole of that output stays alive, beside the rotated query and
key; whether a GPU kernel does the same depends on whether it copies its inputs first.

Under recomputation (``--recompute``): saved-tensor hooks do not see what activation
checkpointing keeps (a checkpoint's inputs, a per-operator checkpoint's cache), so
:func:`kept_after_forward` tracks every storage the forward's operators make (a
``TorchDispatchMode`` holding weak references to their storages) and counts those still alive
after it, over a stack of :data:`KEPT_LAYERS` layers (torchtitan's default checkpoints every
second one): torchtitan under each setting of :data:`TORCHTITAN_AC`, Megatron-Core's
``TransformerBlock`` under none, selective (its core attention) and full recomputation. Two
more stand-ins: torchtitan's per-operator save list gets the CPU flash kernel beside the CUDA
one it names, and Megatron's checkpointing saves the CPU generator's state where it saves the
CUDA one's. Without recomputation both methods count the same bytes.

An MoE layer (``--moe``, torchtitan's ``models/moe`` without tensor parallelism, at
:data:`MOE_SHAPES`): the same hooks on the layer alone, its experts on torchtitan's GPU path,
the grouped GEMM (``torch._grouped_mm``, whose forward the CPU runs) over token groups padded
to ``TOKEN_GROUP_ALIGN_SIZE_M`` rows, with two stand-ins: :func:`integer_histc` for CUDA's
integer histogram, and :func:`cpu_permute_indices` for the Triton kernel that orders and pads
the token groups (torchtitan's own CPU implementation of it). With ``--ep N`` under ``torchrun
--nproc-per-node N`` (gloo), the experts are split by torchtitan's ``ExpertParallel`` (tokens
sent to their experts' rank by all-to-all), at :func:`parallel_shapes`, each rank's own
tokens drawn from its own seed: one record per rank, with the routed tokens it received.
``--framework megatron --moe``: Megatron-Core's ``MoELayer`` (:func:`megatron_moe`; the
all-to-all token dispatcher, the experts one by one, its GPU path's grouped GEMM being
Transformer Engine's, which needs a GPU) at :data:`MEGATRON_MOE_SHAPES`, on the stand-ins of
:func:`_megatron_on_cpu`, and with ``--ep N`` split by its own expert parallelism. With
``--tp N`` (either framework, under torchrun, gloo), the layer is split by the framework's
own tensor parallelism, each rank given its own sequence shard: torchtitan's
``apply_moe_ep_tp`` with a tp mesh, Megatron's ``tensor_model_parallel_size`` with sequence
parallelism. With both, ``--tp N --ep M`` over N x M ranks, the experts are split by both, as
each framework splits them when ep and tp meet (torchtitan's ``ExpertTensorParallel`` with
the expert tp degree equal to tp, Megatron's expert tp size defaulting to tp).

MoE blocks under recomputation (``--moe --recompute``, torchtitan): a stack of
:data:`KEPT_LAYERS` Llama 4 blocks, every one an MoE block, at :data:`MOE_KEPT_SHAPES`
(:func:`torchtitan_moe_kept`), with Llama 4's per-operator save list (its all-to-alls among
it), and with ``--tp N``, ``--ep M`` or both under torchrun split as torchtitan splits them
(:func:`_split_moe_blocks`; each rank waits at a barrier and collects garbage after the
forward, so that gloo's finished collectives let go of their tensors before the count).

Records (schema ``surrogate.saved_activations/1``, one JSON line per shape): ``framework``,
``framework_version``, ``config`` (hidden_size, ffn_hidden_size, num_heads, num_kv_heads,
seq_len, mbs, tp, sequence_parallel; Megatron's also fused_swiglu), ``saved`` (module, shape,
dtype, bytes per storage), ``bytes_by_module`` and ``fingerprint``
(:mod:`microbench.fingerprint`, backend ``fake``, or ``gloo`` with ``--ep``, plus the
framework's version). An MoE record's config has the layer's shape, ``ep``, ``rank``,
``token_group_align`` and ``routed_tokens`` (the rows its experts received, before padding). Under
recomputation (schema ``surrogate.kept_activations/1``): the config also has ``num_layers``
and ``recompute`` (torchtitan's also its ``activation_checkpoint`` section), and ``kept`` (op,
shape, dtype, bytes per storage) and ``kept_bytes`` replace ``saved`` and ``bytes_by_module``;
an MoE stack's config has ``routed_tokens`` per block.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from microbench.fingerprint import collect
from microbench.records import JsonlWriter

SCHEMA = "surrogate.saved_activations/1"
NEEDS_TORCHTITAN = ("measuring torchtitan's block needs torchtitan 0.2.x "
                    "(pip install torchtitan==0.2.2 triton)")
NEEDS_MEGATRON = ("measuring Megatron-Core's layer needs megatron-core "
                  "(pip install megatron-core==0.16.1)")
PACKAGES = {"torchtitan": ("torchtitan", NEEDS_TORCHTITAN),
            "megatron": ("megatron-core", NEEDS_MEGATRON)}
"""Each framework's distribution and what to install when it is missing."""
STANDARD_SHAPES: tuple[dict[str, int], ...] = tuple(
    {"hidden_size": 1024, "num_heads": 16, "num_kv_heads": kv, "seq_len": 512, "mbs": mbs,
     "tp": tp}
    for kv in (16, 8) for mbs in (1, 2) for tp in (1, 2, 4, 8)
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


def saved_by_module(block: Any, run: Callable[[], Any], *, leave_out: Sequence[Any] = ()
                    ) -> tuple[list[Saved], Any]:
    """The storages autograd saves while ``run()`` runs ``block``'s forward, each once, with
    the innermost submodule of ``block`` running when it was saved (``(block)`` for the block's
    own code); tensors sharing a storage with the block's parameters and buffers or with
    ``leave_out`` are not counted. Returns them and ``run()``'s result (keep it alive: the
    graph holds the saved tensors)."""
    import torch

    def local(t: Any) -> Any:  # a DTensor's shard on this rank
        return getattr(t, "_local_tensor", t)

    skip = {local(t).untyped_storage().data_ptr()
            for t in (*block.parameters(), *block.buffers(), *leave_out)}
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
            seen[st.data_ptr()] = Saved(module=stack[-1], shape=tuple(shard.shape),
                                        dtype=str(shard.dtype).removeprefix("torch."),
                                        bytes=st.nbytes())
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


def _bf16_model(model_class: Any, args: Any) -> Any:
    """torchtitan's ``model_class(args)``, its weights initialised and cast to bf16 (what
    FSDP2's ``MixedPrecisionPolicy`` does in the forward)."""
    import torch

    model = model_class(args)
    with torch.no_grad():
        model.init_weights()
    for p in model.parameters():
        p.data = p.data.to(torch.bfloat16)
    return model


def _checkpointed(model: Any, ac: tuple[str, str], save_list: set[Any]) -> None:
    """torchtitan's activation checkpointing ``ac`` = (mode, selective_ac_option) on
    ``model``'s blocks, its per-operator ``save_list`` with the CPU flash kernel beside the
    CUDA ones it names (module docstring)."""
    import torch
    import torchtitan.distributed.activation_checkpoint as titan_ac
    from torchtitan.config.job_config import ActivationCheckpoint

    titan_ac._layer_sac_count = 0  # what a fresh process counts from
    save = {*save_list, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}
    titan_ac.apply_ac(model, ActivationCheckpoint(mode=ac[0], selective_ac_option=ac[1]),
                      op_sac_save_list=save)


@contextmanager
def _torchtitan_stack(*, hidden_size: int, num_heads: int, num_kv_heads: int, seq_len: int,
                      mbs: int, tp: int, num_layers: int = 1,
                      ac: tuple[str, str] | None = None) -> Iterator[Stack]:
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
        args = TransformerModelArgs(dim=hidden_size, n_layers=num_layers, n_heads=num_heads,
                                    n_kv_heads=num_kv_heads, vocab_size=256,
                                    max_seq_len=seq_len)
        model = _bf16_model(Transformer, args)
        if tp > 1:
            apply_tp(model, init_device_mesh("cpu", (tp,)), loss_parallel=True,
                     enable_float8_tensorwise_tp=False)
        ffn = int(model.layers["0"].feed_forward.w1.weight.shape[0])
        if ac is not None:
            _checkpointed(model, ac, _op_sac_save_list)
        x = torch.randn(mbs, seq_len // tp, hidden_size, dtype=torch.bfloat16,
                        requires_grad=True)

        def run() -> Any:
            y = x
            for i in range(num_layers):
                y = model.layers[str(i)](y, model.freqs_cis, None)
            return y

        config = {"hidden_size": hidden_size, "ffn_hidden_size": ffn, "num_heads": num_heads,
                  "num_kv_heads": num_kv_heads, "seq_len": seq_len, "mbs": mbs, "tp": tp,
                  "sequence_parallel": tp > 1}
        yield Stack(run=run, inputs=(x, model.freqs_cis), modules=model, config=config)


def torchtitan_block(*, hidden_size: int, num_heads: int, num_kv_heads: int, seq_len: int,
                     mbs: int, tp: int) -> tuple[dict[str, Any], list[Saved]]:
    """torchtitan's Llama 3 block under its tensor-parallel plan on a fake process group of
    ``tp`` ranks: its configuration and what its forward saves."""
    with _torchtitan_stack(hidden_size=hidden_size, num_heads=num_heads,
                           num_kv_heads=num_kv_heads, seq_len=seq_len, mbs=mbs, tp=tp) as s:
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
def _megatron_on_cpu() -> Iterator[None]:
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
    import contextlib

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
        padded[:tensor.shape[0]] = tensor
        gathered = [torch.empty_like(padded) for _ in outputs]
        all_gather(gathered, padded, group=group)
        for out, got in zip(outputs, gathered, strict=True):
            out.copy_(got[:out.shape[0]])

    def uneven_reduce_scatter(output: Any, inputs: list[Any], group: Any = None) -> None:
        # NCCL reduce-scatters chunks of different counts; gloo reduces each, keeps its own
        for i, chunk in enumerate(inputs):
            summed = chunk.clone()
            all_reduce(summed, group=group)
            if i == torch.distributed.get_rank(group):
                output.copy_(summed)

    stream = _OneStream()
    patches = [(torch.cuda, "current_device", lambda: "cpu"),
               (megatron_random, "_get_all_rng_states",
                lambda: (torch.get_rng_state(), None, {})),
               (torch.cuda, "Stream", lambda *_, **__: stream),
               (torch.cuda, "current_stream", lambda *_, **__: stream),
               (torch.cuda, "stream", lambda *_: contextlib.nullcontext()),
               (moe_utils, "te_general_gemm", None),
               (token_dispatcher, "maybe_move_tensor_to_cpu", to_host),
               (torch.distributed, "all_gather", uneven_all_gather),
               (torch.distributed, "reduce_scatter", uneven_reduce_scatter)]
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
def _megatron_stack(*, hidden_size: int, num_heads: int, num_kv_heads: int, seq_len: int,
                    mbs: int, tp: int, fused_swiglu: bool = True, num_layers: int | None = None,
                    recompute: str | None = None) -> Iterator[Stack]:
    """Megatron-Core's GPT layer (local spec, RMSNorm, SwiGLU with its fusion on or off, rotary
    embeddings, sequence parallelism with tp > 1) on a fake process group of ``tp`` ranks, with
    the stand-ins of the module docstring: one ``TransformerLayer`` (``num_layers`` None) or a
    ``TransformerBlock`` of ``num_layers`` under ``recompute`` (None, ``selective``: its core
    attention, or ``full``: every layer, Megatron-LM's ``--recompute-method uniform
    --recompute-num-layers 1``)."""
    import contextlib

    import torch
    import torch.nn.functional as F

    try:
        from megatron.core import parallel_state
        from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.tensor_parallel import random as megatron_random
        from megatron.core.transformer.transformer_block import TransformerBlock
        from megatron.core.transformer.transformer_config import TransformerConfig
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
    with fake_world(tp), _megatron_on_cpu():
        try:
            parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp,
                                                     create_gloo_process_groups=False)
            head_dim = hidden_size // num_heads
            ffn = 256 * ((int(8 * hidden_size / 3) + 255) // 256)  # torchtitan's SwiGLU width
            recomputing: dict[str, Any] = {}
            if recompute == "selective":
                recomputing = {"recompute_granularity": "selective"}
            elif recompute == "full":
                recomputing = {"recompute_granularity": "full", "recompute_method": "uniform",
                               "recompute_num_layers": 1}
            cfg = TransformerConfig(
                num_layers=num_layers or 1, hidden_size=hidden_size,
                num_attention_heads=num_heads, num_query_groups=num_kv_heads,
                ffn_hidden_size=ffn, gated_linear_unit=True, activation_func=F.silu,
                normalization="RMSNorm", add_bias_linear=False,
                bias_activation_fusion=fused_swiglu, use_cpu_initialization=True,
                params_dtype=torch.bfloat16, bf16=True, hidden_dropout=0.0,
                attention_dropout=0.0, sequence_parallel=tp > 1, tensor_model_parallel_size=tp,
                **recomputing)
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
                    lambda *_, **__: contextlib.nullcontext())
            for layer in layers:
                layer.self_attention.core_attention = FlashCore()
            freqs = RotaryEmbedding(kv_channels=head_dim, rotary_percent=1.0,
                                    use_cpu_initialization=True).get_freqs_non_repeated(seq_len)
            rotary = torch.cat((freqs, freqs), dim=-1)[:, None, None, :]  # what get_emb returns
            x = torch.randn(seq_len // tp, mbs, hidden_size, dtype=torch.bfloat16,
                            requires_grad=True)
            config = {"hidden_size": hidden_size, "ffn_hidden_size": ffn,
                      "num_heads": num_heads, "num_kv_heads": num_kv_heads, "seq_len": seq_len,
                      "mbs": mbs, "tp": tp, "sequence_parallel": tp > 1,
                      "fused_swiglu": fused_swiglu}
            yield Stack(run=lambda: modules(x, attention_mask=None, rotary_pos_emb=rotary),
                        inputs=(x, rotary), modules=modules, config=config)
        finally:
            tracker.__dict__.pop("fork", None)  # the class's own again
            parallel_state.destroy_model_parallel()


def megatron_block(*, hidden_size: int, num_heads: int, num_kv_heads: int, seq_len: int,
                   mbs: int, tp: int, fused_swiglu: bool = True
                   ) -> tuple[dict[str, Any], list[Saved]]:
    """Megatron-Core's GPT layer (:func:`_megatron_stack`): its configuration and what its
    forward saves."""
    with _megatron_stack(hidden_size=hidden_size, num_heads=num_heads,
                         num_kv_heads=num_kv_heads, seq_len=seq_len, mbs=mbs, tp=tp,
                         fused_swiglu=fused_swiglu) as s:
        saved, _out = saved_by_module(s.modules, s.run, leave_out=s.inputs)
        return s.config, saved


BLOCKS: dict[str, tuple[Callable[..., tuple[dict[str, Any], list[Saved]]],
                        tuple[dict[str, Any], ...]]] = {
    "torchtitan": (torchtitan_block, STANDARD_SHAPES),
    "megatron": (megatron_block, tuple({**shape, "fused_swiglu": fused}
                                       for fused in (True, False) for shape in STANDARD_SHAPES)),
}
"""Each framework's block and the shapes it is measured at (Megatron-LM trains with its fused
SwiGLU on, ``--no-bias-swiglu-fusion`` turns it off; Megatron-Core's own default is off)."""


MOE_SHAPES: tuple[dict[str, Any], ...] = tuple(
    {"hidden_size": 512, "moe_ffn_hidden_size": 256, "num_experts": experts, "top_k": k,
     "num_shared_experts": shared, "score_before_experts": before, "seq_len": 512, "mbs": 1,
     "tp": 1}
    for experts in (8, 16) for k in (1, 2) for shared in (0, 1) for before in (True, False)
)
"""torchtitan's MoE layer: experts, top-k, a shared expert or none, and where the routing
scores weigh the tokens (before the experts, llama4's choice, or after them, DeepSeek-V3's)."""


@contextmanager
def integer_histc() -> Iterator[None]:
    """``torch.histc`` of integer tensors, which CUDA counts and the CPU refuses: counted as
    floats, returned in the input's dtype (torchtitan's router and reorderer count tokens per
    expert with it)."""
    import torch

    histc = torch.histc

    def counted(t: Any, *args: Any, **kwargs: Any) -> Any:
        if t.is_floating_point():
            return histc(t, *args, **kwargs)
        return histc(t.float(), *args, **kwargs).to(t.dtype)

    torch.histc = counted  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.histc = histc  # type: ignore[assignment]


@contextmanager
def cpu_permute_indices() -> Iterator[None]:
    """torchtitan's ordering and padding of the token groups
    (``models/moe/kernels.generate_permute_indices``) on its own CPU implementation
    (``use_cpu=True``) in place of its Triton kernel: the same indices and group sizes."""
    import functools

    import torchtitan.models.moe.utils as moe_utils

    kernel = moe_utils.generate_permute_indices
    moe_utils.generate_permute_indices = functools.partial(kernel, use_cpu=True)
    try:
        yield
    finally:
        moe_utils.generate_permute_indices = kernel


def _check_moe_split(tp: int, ep: int) -> None:
    """An MoE layer is measured on one rank, or split by tp, by ep or by both over the
    ``tp x ep`` ranks of the initialised process group (torchrun)."""
    import torch.distributed as dist

    if tp < 1 or ep < 1:
        raise ValueError(f"tp and ep must be >= 1, got tp={tp} ep={ep}")
    if tp * ep > 1 and (not dist.is_initialized() or dist.get_world_size() != tp * ep):
        raise SystemExit(f"--tp {tp} --ep {ep} runs under torchrun --nproc-per-node {tp * ep}")


def _split_moe_blocks(model: Any, *, tp: int, ep: int) -> tuple[int, list[Any], Any]:
    """torchtitan's split of the MoE blocks of ``model`` (its ``layers``, each with ``moe`` and
    ``moe_enabled``) over the ``tp x ep`` ranks of the initialised (gloo) process group: by
    ``ExpertParallel`` on the experts alone under ep, by its plan for MoE under tensor
    parallelism (``apply_moe_ep_tp``) under tp, with ``ExpertTensorParallel`` on an (ep, etp)
    mesh under both (etp = tp, the ranks of a tp group adjacent as in ``ParallelDims``).
    Returns this rank, each block's expert-parallel plan (for the tokens it received; none
    without ep) and the tp mesh (None without tp)."""
    from unittest import mock

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    from torchtitan.distributed.expert_parallel import ExpertParallel, ExpertTensorParallel
    from torchtitan.models.llama4.infra import parallelize as llama4_parallelize
    from torchtitan.models.llama4.infra.parallelize import apply_moe_ep_tp

    _check_moe_split(tp, ep)
    if tp * ep == 1:
        return 0, [], None
    plans: list[Any] = []
    if tp == 1:
        mesh = init_device_mesh("cpu", (ep,), mesh_dim_names=("ep",))
        for block in model.layers.values():
            plans.append(ExpertParallel())
            parallelize_module(block.moe.experts, mesh, plans[-1])
        return dist.get_rank(), plans, None
    if ep == 1:
        tp_mesh = init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",))
        apply_moe_ep_tp(model, tp_mesh=tp_mesh, ep_mesh=None, etp_mesh=None, ep_etp_mesh=None)
        return dist.get_rank(), plans, tp_mesh
    mesh = init_device_mesh("cpu", (ep, tp), mesh_dim_names=("ep", "etp"))

    class Recorded(ExpertTensorParallel):  # the plans, for the tokens they received
        def __init__(self) -> None:
            super().__init__()
            plans.append(self)

    with mock.patch.object(llama4_parallelize, "ExpertTensorParallel", Recorded):
        apply_moe_ep_tp(model, tp_mesh=mesh["etp"], ep_mesh=mesh["ep"], etp_mesh=mesh["etp"],
                        ep_etp_mesh=mesh)
    return dist.get_rank(), plans, mesh["etp"]


def torchtitan_moe(*, hidden_size: int, moe_ffn_hidden_size: int, num_experts: int, top_k: int,
                   num_shared_experts: int, score_before_experts: bool, seq_len: int, mbs: int,
                   tp: int, ep: int = 1) -> tuple[dict[str, Any], list[Saved]]:
    """torchtitan's MoE layer (``models/moe``: router, reorderer, routed experts, shared
    expert) on ``mbs x seq_len`` bf16 tokens, its experts on the grouped GEMM, split over the
    ``ep`` ranks of the initialised (gloo) process group when ``ep`` > 1 (``ExpertParallel``),
    or over its ``tp`` ranks by torchtitan's own plan for an MoE layer under tensor
    parallelism (``apply_moe_ep_tp``: the sequence shard all-gathered into the layer, the
    experts and the shared expert split), or over ``ep x tp`` ranks by the same plan with
    ``ExpertTensorParallel`` (the tokens sent over ep, each expert split over tp, the ranks of
    a tp group adjacent as in torchtitan's ``ParallelDims``): its configuration and what its
    forward saves on this rank. Stand-ins: :func:`integer_histc`, :func:`cpu_permute_indices`."""
    import torch

    try:
        from torchtitan.models.moe import utils as moe_utils
        from torchtitan.models.moe.moe import MoE, MoEArgs
    except ImportError as e:
        raise SystemExit(f"{NEEDS_TORCHTITAN}: {e}") from None

    _check_moe_split(tp, ep)
    torch.manual_seed(0)
    args = MoEArgs(num_experts=num_experts, num_shared_experts=num_shared_experts, top_k=top_k,
                   use_grouped_mm=True, score_before_experts=score_before_experts,
                   score_func="softmax", load_balance_coeff=None)
    moe = MoE(args, dim=hidden_size, hidden_dim=moe_ffn_hidden_size)
    with torch.no_grad():
        moe.init_weights(0.02, torch.device("cpu"))
    for p in moe.parameters():  # FSDP2's MixedPrecisionPolicy: bf16 in the forward
        p.data = p.data.to(torch.bfloat16)
    block = torch.nn.Module()  # what torchtitan's plans walk: layers, with moe and moe_enabled
    block.moe, block.moe_enabled = moe, True
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleDict({"0": block})
    rank, plans, _tp_mesh = _split_moe_blocks(model, tp=tp, ep=ep)
    if tp * ep > 1:
        torch.manual_seed(1 + rank)  # each rank's own tokens
    x = torch.randn(mbs, seq_len // tp, hidden_size, dtype=torch.bfloat16,
                    requires_grad=True)  # this rank's sequence shard
    with integer_histc(), cpu_permute_indices():
        saved, _out = saved_by_module(moe, lambda: moe(x), leave_out=(x,))
    # under tp every rank routes the whole, gathered, sequence
    received = sum(plans[0].output_splits or ()) if plans else mbs * seq_len * top_k
    config = {"hidden_size": hidden_size, "moe_ffn_hidden_size": moe_ffn_hidden_size,
              "num_experts": num_experts, "top_k": top_k,
              "num_shared_experts": num_shared_experts,
              "score_before_experts": score_before_experts, "seq_len": seq_len, "mbs": mbs,
              "tp": tp, "ep": ep, "rank": rank, "grouped_mm": True,
              "token_group_align": moe_utils.TOKEN_GROUP_ALIGN_SIZE_M,
              "routed_tokens": received}
    return config, saved


def megatron_moe(*, hidden_size: int, moe_ffn_hidden_size: int, num_experts: int, top_k: int,
                 num_shared_experts: int, score_before_experts: bool, seq_len: int, mbs: int,
                 tp: int, fused_swiglu: bool = True, ep: int = 1
                 ) -> tuple[dict[str, Any], list[Saved]]:
    """Megatron-Core's MoE layer (``MoELayer`` of the local GPT spec: top-k softmax router
    without load-balancing loss, its softmax after the top-k but at top-1, where Megatron
    asks for it before, the all-to-all token dispatcher, dropless, the experts one by
    one, ``SequentialMLP``, SwiGLU with its fusion on or off, an optional shared expert, the
    routing scores weighing the tokens before the experts, ``moe_apply_probs_on_input``, or
    the activations inside them) on ``mbs x seq_len`` bf16 tokens, its layer split over the
    ``tp`` ranks and its experts over the ``ep`` ranks (and over tp too) of the initialised
    (gloo) process group where they are > 1: its configuration and what its forward saves on
    this rank. Stand-ins: :func:`_megatron_on_cpu`."""
    import contextlib

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    try:
        from megatron.core import parallel_state
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.transformer.spec_utils import build_module
        from megatron.core.transformer.transformer_config import TransformerConfig
    except ImportError as e:
        raise SystemExit(f"{NEEDS_MEGATRON}: {e}") from None
    _check_moe_split(tp, ep)
    world = fake_world(1) if tp * ep == 1 else contextlib.nullcontext()
    with world, _megatron_on_cpu():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp,
                                                 expert_model_parallel_size=ep,
                                                 create_gloo_process_groups=False)
        try:
            rank = dist.get_rank()
            torch.manual_seed(0)  # the router's weights alike on every rank
            shared = num_shared_experts * moe_ffn_hidden_size
            cfg = TransformerConfig(
                num_layers=1, hidden_size=hidden_size, num_attention_heads=8,
                ffn_hidden_size=moe_ffn_hidden_size, moe_ffn_hidden_size=moe_ffn_hidden_size,
                num_moe_experts=num_experts, moe_router_topk=top_k,
                moe_shared_expert_intermediate_size=shared or None,
                moe_apply_probs_on_input=score_before_experts,
                moe_router_pre_softmax=top_k == 1,  # Megatron asks for it at top-1 only
                moe_router_load_balancing_type="none", moe_token_dispatcher_type="alltoall",
                expert_model_parallel_size=ep, tensor_model_parallel_size=tp,
                sequence_parallel=tp > 1, gated_linear_unit=True, activation_func=F.silu,
                normalization="RMSNorm", add_bias_linear=False,
                bias_activation_fusion=fused_swiglu, use_cpu_initialization=True,
                params_dtype=torch.bfloat16, bf16=True, hidden_dropout=0.0,
                attention_dropout=0.0)
            spec = get_gpt_layer_local_spec(num_experts=num_experts, moe_grouped_gemm=False,
                                            normalization="RMSNorm")
            moe = build_module(spec.submodules.mlp, config=cfg)
            torch.manual_seed(1 + rank)  # each rank's own tokens
            x = torch.randn(seq_len // tp, mbs, hidden_size, dtype=torch.bfloat16,
                            requires_grad=True)  # this rank's sequence shard
            saved, _out = saved_by_module(moe, lambda: moe(x), leave_out=(x,))
            dispatcher = moe.token_dispatcher
            splits = dispatcher.output_splits_tp if tp > 1 else dispatcher.output_splits
            received = mbs * seq_len * top_k if splits is None else int(sum(splits))
        finally:
            parallel_state.destroy_model_parallel()
    config = {"hidden_size": hidden_size, "moe_ffn_hidden_size": moe_ffn_hidden_size,
              "num_experts": num_experts, "top_k": top_k,
              "num_shared_experts": num_shared_experts,
              "score_before_experts": score_before_experts, "seq_len": seq_len, "mbs": mbs,
              "tp": tp, "ep": ep, "rank": rank, "grouped_mm": False, "token_group_align": 0,
              "sequence_parallel": tp > 1, "fused_swiglu": fused_swiglu,
              "router_pre_softmax": top_k == 1,
              "routed_tokens": received}
    return config, saved


MEGATRON_MOE_SHAPES: tuple[dict[str, Any], ...] = tuple(
    {**s, "fused_swiglu": fused} for fused in (True, False) for s in MOE_SHAPES
    if s["top_k"] == 1 or not s["score_before_experts"])
"""Megatron-Core's MoE layer: :data:`MOE_SHAPES` but the scores before the experts with top-2
(Megatron applies them to the input only with top-1), its SwiGLU fused and not."""

MOE_BLOCKS: dict[str, tuple[Callable[..., tuple[dict[str, Any], list[Saved]]],
                            tuple[dict[str, Any], ...]]] = {
    "torchtitan": (torchtitan_moe, MOE_SHAPES),
    "megatron": (megatron_moe, MEGATRON_MOE_SHAPES),
}
"""Each framework's MoE layer and the shapes it is measured at (``--moe``)."""


def parallel_shapes(shapes: Sequence[dict[str, Any]], *, ep: int) -> tuple[dict[str, Any], ...]:
    """The shapes measured over several ranks (``--ep``, ``--tp`` or both): where the SwiGLU's
    fusion is a choice, with it on, and under expert parallelism only those without a shared
    expert (it is not split by ep)."""
    return tuple(s for s in shapes if s.get("fused_swiglu", True)
                 and not (ep > 1 and s["num_shared_experts"]))


KEPT_SCHEMA = "surrogate.kept_activations/1"
KEPT_LAYERS = 4
"""Layers per measured stack under recomputation: torchtitan's default selective mode
checkpoints every second one."""
TORCHTITAN_AC: dict[str, tuple[str, str] | None] = {
    "none": None, "selective": ("selective", "2"), "selective-op": ("selective", "op"),
    "full": ("full", "2"),
}
"""torchtitan's ``[activation_checkpoint]`` (mode, selective_ac_option) for each measured
setting: ``selective`` is its default (every second block checkpointed in full),
``selective-op`` its per-operator policy (it keeps the outputs of every other matmul, of the
attention kernel and of the reduce-scatters, and recomputes the rest)."""


@dataclass(frozen=True)
class Kept:
    """One storage alive after the forward: the last operator whose output it was."""

    op: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int


def kept_after_forward(run: Callable[[], Any], *, leave_out: Sequence[Any] = ()
                       ) -> tuple[list[Kept], Any]:
    """The storages that operators created while ``run()`` ran and that are still alive after
    it (``leave_out``'s and the result's aside), each once: what the forward keeps for the
    backward, whatever holds it (autograd's saved tensors, a checkpoint's inputs, a per-operator
    checkpoint's cache, a framework's persistent buffers). Unlike :func:`saved_by_module` it
    sees what activation checkpointing keeps. Returns them and ``run()``'s result."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def storage(t: Any) -> Any:
        return getattr(t, "_local_tensor", t).untyped_storage()

    made: dict[int, tuple[int, Any, Kept]] = {}  # address -> (when made, weak ref, what)
    clock = itertools.count()

    class Track(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor):
                    continue
                try:  # an async collective's wrapper has no storage; its wait's output has
                    st = storage(t)
                    ptr = st.data_ptr()
                except RuntimeError:
                    continue
                local = getattr(t, "_local_tensor", t)
                # a storage seen again keeps when it was made; an address a freed storage
                # left may hold a new one, made now
                seen = made.get(ptr)
                when = seen[0] if seen and not seen[1].expired() else next(clock)
                made[ptr] = (when, StorageWeakRef(st), Kept(
                    op=str(func), shape=tuple(local.shape),
                    dtype=str(local.dtype).removeprefix("torch."), bytes=st.nbytes()))
            return out

    with Track():
        out = run()
    aside = {storage(t).data_ptr() for t in (*leave_out, *tree_flatten(out)[0])
             if isinstance(t, torch.Tensor)}
    alive = sorted((when, k) for ptr, (when, ref, k) in made.items()
                   if ptr not in aside and not ref.expired())
    return [k for _, k in alive], out


def torchtitan_kept(*, recompute: str, **shape: int) -> tuple[dict[str, Any], list[Kept]]:
    """What a stack of :data:`KEPT_LAYERS` torchtitan blocks keeps after its forward under the
    activation checkpointing ``recompute`` names (:data:`TORCHTITAN_AC`)."""
    ac = TORCHTITAN_AC[recompute]
    with _torchtitan_stack(**shape, num_layers=KEPT_LAYERS, ac=ac) as s:
        kept, _out = kept_after_forward(s.run, leave_out=s.aside())
        option = {} if ac is None else {"mode": ac[0], "selective_ac_option": ac[1]}
        return {**s.config, "num_layers": KEPT_LAYERS, "recompute": recompute,
                "activation_checkpoint": option}, kept


MOE_KEPT_SHAPES: tuple[dict[str, Any], ...] = tuple(
    {**s, "num_heads": 8, "num_kv_heads": 8, "recompute": r}
    for r in ("none", "selective-op", "full") for s in MOE_SHAPES)
"""torchtitan's stack of MoE blocks at :data:`MOE_SHAPES` under no, per-operator and full
recomputation (``--moe --recompute``; tp and ep from the command line)."""


def torchtitan_moe_kept(*, recompute: str, hidden_size: int, num_heads: int,
                        num_kv_heads: int, moe_ffn_hidden_size: int, num_experts: int,
                        top_k: int, num_shared_experts: int, score_before_experts: bool,
                        seq_len: int, mbs: int, tp: int = 1, ep: int = 1
                        ) -> tuple[dict[str, Any], list[Kept]]:
    """What a stack of :data:`KEPT_LAYERS` torchtitan Llama 4 blocks, every one an MoE block
    (``interleave_moe_layer_step`` 1; attention as Llama 3's, the experts on the grouped
    GEMM), keeps after its forward under the activation checkpointing ``recompute`` names
    (:data:`TORCHTITAN_AC`), with Llama 4's own list of operators per-operator checkpointing
    saves (its all-to-alls among them) and the CPU flash kernel standing in for CUDA's, on one
    rank, or split over the ``tp x ep`` ranks of the initialised (gloo) process group as
    torchtitan splits them before it checkpoints (:func:`_split_moe_blocks`, and under tp its
    plan for the attention and norms, ``apply_non_moe_tp``), each rank given its own sequence
    shard. Stand-ins: :func:`integer_histc`, :func:`cpu_permute_indices`."""
    import gc

    import torch
    import torch.distributed as dist

    try:
        from torchtitan.models.llama4.infra.parallelize import (
            _op_sac_save_list,
            apply_non_moe_tp,
        )
        from torchtitan.models.llama4.model.args import TransformerModelArgs
        from torchtitan.models.llama4.model.model import Transformer
        from torchtitan.models.moe.moe import MoEArgs
    except ImportError as e:
        raise SystemExit(f"{NEEDS_TORCHTITAN}: {e}") from None
    ac = TORCHTITAN_AC[recompute]
    torch.manual_seed(0)
    moe = MoEArgs(num_experts=num_experts, num_shared_experts=num_shared_experts, top_k=top_k,
                  use_grouped_mm=True, score_before_experts=score_before_experts,
                  score_func="softmax", load_balance_coeff=None)
    # the experts' width: int(8 h / 3 x multiplier), rounded up to a multiple of 256
    args = TransformerModelArgs(dim=hidden_size, n_layers=KEPT_LAYERS, n_heads=num_heads,
                                n_kv_heads=num_kv_heads, vocab_size=256, max_seq_len=seq_len,
                                multiple_of=moe_ffn_hidden_size,
                                ffn_dim_multiplier=moe_ffn_hidden_size / (3 * hidden_size),
                                auto_scale_hidden_dim=False, interleave_moe_layer_step=1,
                                moe_args=moe)
    model = _bf16_model(Transformer, args)
    width = int(model.layers["0"].moe.experts.w1.shape[1])
    if width != moe_ffn_hidden_size:
        raise ValueError(f"the experts' width came out {width}, not {moe_ffn_hidden_size}")
    rank, plans, tp_mesh = _split_moe_blocks(model, tp=tp, ep=ep)
    if tp_mesh is not None:  # the attention's and norms' plan (torchtitan applies it first;
        apply_non_moe_tp(model, tp_mesh, loss_parallel=True,  # their modules are apart)
                         enable_float8_tensorwise_tp=False)
    if tp * ep > 1:
        torch.manual_seed(1 + rank)  # each rank's own tokens
    if ac is not None:
        _checkpointed(model, ac, _op_sac_save_list)
    # this rank's sequence shard
    x = torch.randn(mbs, seq_len // tp, hidden_size, dtype=torch.bfloat16, requires_grad=True)

    def run() -> Any:
        y = x
        for i in range(KEPT_LAYERS):
            y = model.layers[str(i)](y, model.freqs_cis, None)
        if tp * ep > 1:  # gloo's finished collectives let go of their tensors
            dist.barrier()
            gc.collect()
        return y

    with integer_histc(), cpu_permute_indices():
        kept, _out = kept_after_forward(run, leave_out=(x, model.freqs_cis,
                                                        *model.parameters(),
                                                        *model.buffers()))
    option = {} if ac is None else {"mode": ac[0], "selective_ac_option": ac[1]}
    config = {"hidden_size": hidden_size, "num_heads": num_heads, "num_kv_heads": num_kv_heads,
              "moe_ffn_hidden_size": moe_ffn_hidden_size, "num_experts": num_experts,
              "top_k": top_k, "num_shared_experts": num_shared_experts,
              "score_before_experts": score_before_experts, "seq_len": seq_len, "mbs": mbs,
              "tp": tp, "ep": ep, "rank": rank, "sequence_parallel": tp > 1,
              "grouped_mm": True, "num_layers": KEPT_LAYERS, "recompute": recompute,
              "activation_checkpoint": option,
              # the rows each block's experts received on this rank (balanced: T k, the
              # whole sequence's under tp)
              "routed_tokens": [sum(plan.output_splits or ()) for plan in plans]
              or [mbs * seq_len * top_k] * KEPT_LAYERS}
    return config, kept


MOE_STACKS: dict[str, tuple[Callable[..., tuple[dict[str, Any], list[Kept]]],
                            tuple[dict[str, Any], ...]]] = {
    "torchtitan": (torchtitan_moe_kept, MOE_KEPT_SHAPES),
}
"""Each framework's stack of MoE blocks under recomputation and its settings (``--moe
--recompute``)."""


def megatron_kept(*, recompute: str, **shape: int) -> tuple[dict[str, Any], list[Kept]]:
    """What a Megatron-Core block of :data:`KEPT_LAYERS` layers keeps after its forward, with
    ``recompute`` none, selective (its core attention) or full (every layer)."""
    with _megatron_stack(**shape, num_layers=KEPT_LAYERS,
                         recompute=None if recompute == "none" else recompute) as s:
        kept, _out = kept_after_forward(s.run, leave_out=s.aside())
        return {**s.config, "num_layers": KEPT_LAYERS, "recompute": recompute}, kept


STACKS: dict[str, tuple[Callable[..., tuple[dict[str, Any], list[Kept]]],
                        tuple[dict[str, Any], ...]]] = {
    "torchtitan": (torchtitan_kept, tuple({**shape, "recompute": r}
                                          for r in TORCHTITAN_AC for shape in STANDARD_SHAPES)),
    "megatron": (megatron_kept, tuple({**shape, "recompute": r}
                                      for r in ("none", "selective", "full")
                                      for shape in STANDARD_SHAPES)),
}
"""Each framework's stack under recomputation and the settings it is measured at
(``--recompute``)."""


def record(framework: str, version: str, config: dict[str, Any], saved: list[Saved],
           fingerprint: dict[str, Any]) -> dict[str, Any]:
    """One line of the schema."""
    by_module: dict[str, int] = {}
    for s in saved:
        by_module[s.module] = by_module.get(s.module, 0) + s.bytes
    return {"schema": SCHEMA, "status": "ok", "framework": framework,
            "framework_version": version, "config": config,
            "saved": [asdict(s) for s in saved], "bytes_by_module": by_module,
            "fingerprint": fingerprint}


def kept_record(framework: str, version: str, config: dict[str, Any], kept: list[Kept],
                fingerprint: dict[str, Any]) -> dict[str, Any]:
    """One line of :data:`KEPT_SCHEMA`."""
    return {"schema": KEPT_SCHEMA, "status": "ok", "framework": framework,
            "framework_version": version, "config": config,
            "kept": [asdict(k) for k in kept], "kept_bytes": sum(k.bytes for k in kept),
            "fingerprint": fingerprint}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--framework", choices=list(BLOCKS), default="torchtitan")
    ap.add_argument("--recompute", action="store_true",
                    help=f"what a stack of {KEPT_LAYERS} layers keeps after its forward under "
                         "each recomputation setting (schema surrogate.kept_activations/1)")
    ap.add_argument("--moe", action="store_true",
                    help="what an MoE layer (router, experts, shared expert) saves, in place "
                         "of the dense block")
    ap.add_argument("--ep", type=int, default=1,
                    help="with --moe: split the experts over this many ranks (run under "
                         "torchrun --nproc-per-node EP x TP; gloo)")
    ap.add_argument("--tp", type=int, default=1,
                    help="with --moe: split the layer over this many ranks by the framework's "
                         "tensor parallelism (run under torchrun --nproc-per-node TP x EP; "
                         "gloo)")
    ap.add_argument("--out", default="-", help="JSONL file to append to ('-': stdout)")
    args = ap.parse_args(argv)
    if args.moe and args.recompute and args.framework not in MOE_STACKS:
        ap.error(f"--moe --recompute measures {', '.join(MOE_STACKS)}'s MoE blocks, got "
                 f"--framework {args.framework}")
    if args.ep < 1 or (args.ep > 1 and not args.moe):
        ap.error(f"--ep must be >= 1 and splits the experts of --moe, got {args.ep}")
    if args.tp < 1 or (args.tp > 1 and not args.moe):
        ap.error(f"--tp must be >= 1 and splits the layer of --moe, got {args.tp}")
    if args.tp * args.ep > 1:
        return _main_distributed(args)
    from importlib.metadata import PackageNotFoundError, version

    package, needs = PACKAGES[args.framework]
    try:
        fw_version = version(package)
    except PackageNotFoundError:
        raise SystemExit(f"{needs}: it is not installed") from None
    measure, settings, write = _measurement(args)
    out = JsonlWriter(args.out)
    try:
        for i, setting in enumerate(settings, 1):
            config, found = measure(**setting)
            fp = collect(world_size=setting["tp"], backend="fake").to_dict()
            out.write(write(args.framework, fw_version, config, found,  # type: ignore[operator]
                            {**fp, package: fw_version}))
            print(f"[{i}/{len(settings)}] {setting}: "
                  f"{sum(s.bytes for s in found) / 2**20:.1f} MiB "
                  f"{'kept' if args.recompute else 'saved'}", file=sys.stderr)
    finally:
        out.close()
    return 0


def _measurement(args: argparse.Namespace) -> tuple[Callable[..., Any],
                                                     tuple[dict[str, Any], ...],
                                                     Callable[..., dict[str, Any]]]:
    """What the command line asks to measure: the function, its settings and the record it
    writes (:func:`record` of what a layer saves, :func:`kept_record` of what a stack keeps)."""
    if args.moe:
        table: dict[str, Any] = MOE_STACKS if args.recompute else MOE_BLOCKS
    else:
        table = STACKS if args.recompute else BLOCKS
    measure, settings = table[args.framework]
    return measure, settings, kept_record if args.recompute else record


def _total_bytes(rec: dict[str, Any]) -> int:
    """The bytes a record found: kept by a stack or saved by a layer."""
    return rec["kept_bytes"] if "kept_bytes" in rec else sum(s["bytes"] for s in rec["saved"])


def _main_distributed(args: argparse.Namespace) -> int:
    """``--moe [--recompute] --ep N``, ``--tp N`` or both on each of torchrun's N (x M) ranks:
    every rank measures, rank 0 writes."""
    import os
    from importlib.metadata import version

    import torch.distributed as dist

    world = args.tp * args.ep
    flag = " ".join(f"--{name} {n}" for name, n in (("tp", args.tp), ("ep", args.ep)) if n > 1)
    if int(os.environ.get("WORLD_SIZE", "1")) != world:
        raise SystemExit(f"{flag} runs under torchrun --nproc-per-node {world} "
                         f"(WORLD_SIZE is {os.environ.get('WORLD_SIZE', 'unset')})")
    dist.init_process_group("gloo")
    try:
        package = PACKAGES[args.framework][0]
        fw_version = version(package)
        fp = {**collect(world_size=world, backend="gloo").to_dict(), package: fw_version}
        measure, shapes, write = _measurement(args)
        split = parallel_shapes(shapes, ep=args.ep)
        out = JsonlWriter(args.out) if dist.get_rank() == 0 else None
        try:
            for i, shape in enumerate(split, 1):
                setting = {**shape, "tp": args.tp}
                config, found = measure(**setting, ep=args.ep)
                mine = write(args.framework, fw_version, config, found, fp)
                every: list[Any] = [None] * world if out is not None else []
                dist.gather_object(mine, every if out is not None else None, dst=0)
                if out is not None:
                    for rec in every:
                        out.write(rec)
                    print(f"[{i}/{len(split)}] {setting} {flag}: "
                          + ", ".join(f"{_total_bytes(r) / 2**20:.1f}" for r in every)
                          + f" MiB {'kept' if args.recompute else 'saved'} by rank",
                          file=sys.stderr)
        finally:
            if out is not None:
                out.close()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
