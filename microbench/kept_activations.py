"""What a stack of layers keeps after its forward under recomputation, dense and MoE
(method: :mod:`microbench.saved_activations`)."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from microbench.dense_blocks import (
    NEEDS_TORCHTITAN,
    STANDARD_SHAPES,
    bf16_model,
    checkpointed,
    megatron_stack,
    torchtitan_stack,
)
from microbench.moe_blocks import (
    MOE_SHAPES,
    cpu_permute_indices,
    integer_histc,
    split_moe_blocks,
)

KEPT_SCHEMA = "surrogate.kept_activations/1"
KEPT_LAYERS = 4
"""Layers per measured stack under recomputation: torchtitan's default selective mode
checkpoints every second one."""
TORCHTITAN_AC: dict[str, tuple[str, str] | None] = {
    "none": None,
    "selective": ("selective", "2"),
    "selective-op": ("selective", "op"),
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


def kept_after_forward(
    run: Callable[[], Any], *, leave_out: Sequence[Any] = ()
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
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
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
                made[ptr] = (
                    when,
                    StorageWeakRef(st),
                    Kept(
                        op=str(func),
                        shape=tuple(local.shape),
                        dtype=str(local.dtype).removeprefix("torch."),
                        bytes=st.nbytes(),
                    ),
                )
            return out

    with Track():
        out = run()
    aside = {
        storage(t).data_ptr()
        for t in (*leave_out, *tree_flatten(out)[0])
        if isinstance(t, torch.Tensor)
    }
    alive = sorted(
        (when, k) for ptr, (when, ref, k) in made.items() if ptr not in aside and not ref.expired()
    )
    return [k for _, k in alive], out


def torchtitan_kept(*, recompute: str, **shape: int) -> tuple[dict[str, Any], list[Kept]]:
    """What a stack of :data:`KEPT_LAYERS` torchtitan blocks keeps after its forward under the
    activation checkpointing ``recompute`` names (:data:`TORCHTITAN_AC`)."""
    ac = TORCHTITAN_AC[recompute]
    with torchtitan_stack(**shape, num_layers=KEPT_LAYERS, ac=ac) as s:
        kept, _out = kept_after_forward(s.run, leave_out=s.aside())
        option = {} if ac is None else {"mode": ac[0], "selective_ac_option": ac[1]}
        return {
            **s.config,
            "num_layers": KEPT_LAYERS,
            "recompute": recompute,
            "activation_checkpoint": option,
        }, kept


MOE_KEPT_SHAPES: tuple[dict[str, Any], ...] = tuple(
    {**s, "num_heads": 8, "num_kv_heads": 8, "recompute": r}
    for r in ("none", "selective-op", "full")
    for s in MOE_SHAPES
)
"""torchtitan's stack of MoE blocks at :data:`MOE_SHAPES` under no, per-operator and full
recomputation (``--moe --recompute``; tp and ep from the command line)."""


def torchtitan_moe_kept(
    *,
    recompute: str,
    hidden_size: int,
    num_heads: int,
    num_kv_heads: int,
    moe_ffn_hidden_size: int,
    num_experts: int,
    top_k: int,
    num_shared_experts: int,
    score_before_experts: bool,
    seq_len: int,
    mbs: int,
    tp: int = 1,
    ep: int = 1,
) -> tuple[dict[str, Any], list[Kept]]:
    """What a stack of :data:`KEPT_LAYERS` torchtitan Llama 4 blocks, every one an MoE block
    (``interleave_moe_layer_step`` 1; attention as Llama 3's, the experts on the grouped
    GEMM), keeps after its forward under the activation checkpointing ``recompute`` names
    (:data:`TORCHTITAN_AC`), with Llama 4's own list of operators per-operator checkpointing
    saves (its all-to-alls among them) and the CPU flash kernel standing in for CUDA's, on one
    rank, or split over the ``tp x ep`` ranks of the initialised (gloo) process group as
    torchtitan splits them before it checkpoints (:func:`split_moe_blocks`, and under tp its
    plan for the attention and norms, ``apply_non_moe_tp``), each rank given its own sequence
    shard. Stand-ins: :func:`integer_histc`, :func:`cpu_permute_indices`."""
    import torch
    import torch.distributed as dist

    try:
        from torchtitan.models.llama4.infra.parallelize import (
            _op_sac_save_list,
            apply_non_moe_tp,
        )
    except ImportError as e:
        raise SystemExit(f"{NEEDS_TORCHTITAN}: {e}") from None
    ac = TORCHTITAN_AC[recompute]
    torch.manual_seed(0)
    model = _llama4_moe_stack(
        hidden_size=hidden_size,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        moe_ffn_hidden_size=moe_ffn_hidden_size,
        num_experts=num_experts,
        top_k=top_k,
        num_shared_experts=num_shared_experts,
        score_before_experts=score_before_experts,
        seq_len=seq_len,
    )
    rank, plans, tp_mesh = split_moe_blocks(model, tp=tp, ep=ep)
    if tp_mesh is not None:  # the attention's and norms' plan (torchtitan applies it first;
        apply_non_moe_tp(
            model,
            tp_mesh,
            loss_parallel=True,  # their modules are apart)
            enable_float8_tensorwise_tp=False,
        )
    if tp * ep > 1:
        torch.manual_seed(1 + rank)  # each rank's own tokens
    if ac is not None:
        checkpointed(model, ac, _op_sac_save_list)
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
        kept, _out = kept_after_forward(
            run, leave_out=(x, model.freqs_cis, *model.parameters(), *model.buffers())
        )
    option = {} if ac is None else {"mode": ac[0], "selective_ac_option": ac[1]}
    config = {
        "hidden_size": hidden_size,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "moe_ffn_hidden_size": moe_ffn_hidden_size,
        "num_experts": num_experts,
        "top_k": top_k,
        "num_shared_experts": num_shared_experts,
        "score_before_experts": score_before_experts,
        "seq_len": seq_len,
        "mbs": mbs,
        "tp": tp,
        "ep": ep,
        "rank": rank,
        "sequence_parallel": tp > 1,
        "grouped_mm": True,
        "num_layers": KEPT_LAYERS,
        "recompute": recompute,
        "activation_checkpoint": option,
        # the rows each block's experts received on this rank (balanced: T k, the
        # whole sequence's under tp)
        "routed_tokens": [sum(plan.output_splits or ()) for plan in plans]
        or [mbs * seq_len * top_k] * KEPT_LAYERS,
    }
    return config, kept


def _llama4_moe_stack(
    *,
    hidden_size: int,
    num_heads: int,
    num_kv_heads: int,
    moe_ffn_hidden_size: int,
    num_experts: int,
    top_k: int,
    num_shared_experts: int,
    score_before_experts: bool,
    seq_len: int,
) -> Any:
    """:func:`torchtitan_moe_kept`'s model: torchtitan's Llama 4 of :data:`KEPT_LAYERS` MoE
    blocks, in bf16; an error if its experts' width is not ``moe_ffn_hidden_size``."""
    from torchtitan.models.llama4.model.args import TransformerModelArgs
    from torchtitan.models.llama4.model.model import Transformer
    from torchtitan.models.moe.moe import MoEArgs

    moe = MoEArgs(
        num_experts=num_experts,
        num_shared_experts=num_shared_experts,
        top_k=top_k,
        use_grouped_mm=True,
        score_before_experts=score_before_experts,
        score_func="softmax",
        load_balance_coeff=None,
    )
    # the experts' width: int(8 h / 3 x multiplier), rounded up to a multiple of 256
    args = TransformerModelArgs(
        dim=hidden_size,
        n_layers=KEPT_LAYERS,
        n_heads=num_heads,
        n_kv_heads=num_kv_heads,
        vocab_size=256,
        max_seq_len=seq_len,
        multiple_of=moe_ffn_hidden_size,
        ffn_dim_multiplier=moe_ffn_hidden_size / (3 * hidden_size),
        auto_scale_hidden_dim=False,
        interleave_moe_layer_step=1,
        moe_args=moe,
    )
    model = bf16_model(Transformer, args)
    width = int(model.layers["0"].moe.experts.w1.shape[1])
    if width != moe_ffn_hidden_size:
        raise ValueError(f"the experts' width came out {width}, not {moe_ffn_hidden_size}")
    return model


MOE_STACKS: dict[
    str, tuple[Callable[..., tuple[dict[str, Any], list[Kept]]], tuple[dict[str, Any], ...]]
] = {
    "torchtitan": (torchtitan_moe_kept, MOE_KEPT_SHAPES),
}
"""Each framework's stack of MoE blocks under recomputation and its settings (``--moe
--recompute``)."""


def megatron_kept(*, recompute: str, **shape: int) -> tuple[dict[str, Any], list[Kept]]:
    """What a Megatron-Core block of :data:`KEPT_LAYERS` layers keeps after its forward, with
    ``recompute`` none, selective (its core attention) or full (every layer)."""
    with megatron_stack(
        **shape, num_layers=KEPT_LAYERS, recompute=None if recompute == "none" else recompute
    ) as s:
        kept, _out = kept_after_forward(s.run, leave_out=s.aside())
        return {**s.config, "num_layers": KEPT_LAYERS, "recompute": recompute}, kept


STACKS: dict[
    str, tuple[Callable[..., tuple[dict[str, Any], list[Kept]]], tuple[dict[str, Any], ...]]
] = {
    "torchtitan": (
        torchtitan_kept,
        tuple({**shape, "recompute": r} for r in TORCHTITAN_AC for shape in STANDARD_SHAPES),
    ),
    "megatron": (
        megatron_kept,
        tuple(
            {**shape, "recompute": r}
            for r in ("none", "selective", "full")
            for shape in STANDARD_SHAPES
        ),
    ),
}
"""Each framework's stack under recomputation and the settings it is measured at
(``--recompute``)."""
