"""What an MoE layer saves for its backward, torchtitan's and Megatron-Core's, alone or split
by expert and tensor parallelism (method: :mod:`microbench.saved_activations`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from microbench.dense_blocks import (
    NEEDS_MEGATRON,
    NEEDS_TORCHTITAN,
    Saved,
    fake_world,
    megatron_on_cpu,
    saved_by_module,
)

MOE_SHAPES: tuple[dict[str, Any], ...] = tuple(
    {
        "hidden_size": 512,
        "moe_ffn_hidden_size": 256,
        "num_experts": experts,
        "top_k": k,
        "num_shared_experts": shared,
        "score_before_experts": before,
        "seq_len": 512,
        "mbs": 1,
        "tp": 1,
    }
    for experts in (8, 16)
    for k in (1, 2)
    for shared in (0, 1)
    for before in (True, False)
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
    import torchtitan.models.moe.utils as moe_utils

    kernel = moe_utils.generate_permute_indices
    moe_utils.generate_permute_indices = functools.partial(kernel, use_cpu=True)
    try:
        yield
    finally:
        moe_utils.generate_permute_indices = kernel


def check_moe_split(tp: int, ep: int) -> None:
    """An MoE layer is measured on one rank, or split by tp, by ep or by both over the
    ``tp x ep`` ranks of the initialised process group (torchrun)."""
    import torch.distributed as dist

    if tp < 1 or ep < 1:
        raise ValueError(f"tp and ep must be >= 1, got tp={tp} ep={ep}")
    if tp * ep > 1 and (not dist.is_initialized() or dist.get_world_size() != tp * ep):
        raise SystemExit(f"--tp {tp} --ep {ep} runs under torchrun --nproc-per-node {tp * ep}")


def split_moe_blocks(model: Any, *, tp: int, ep: int) -> tuple[int, list[Any], Any]:
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

    check_moe_split(tp, ep)
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
        apply_moe_ep_tp(
            model, tp_mesh=mesh["etp"], ep_mesh=mesh["ep"], etp_mesh=mesh["etp"], ep_etp_mesh=mesh
        )
    return dist.get_rank(), plans, mesh["etp"]


def torchtitan_moe(
    *,
    hidden_size: int,
    moe_ffn_hidden_size: int,
    num_experts: int,
    top_k: int,
    num_shared_experts: int,
    score_before_experts: bool,
    seq_len: int,
    mbs: int,
    tp: int,
    ep: int = 1,
) -> tuple[dict[str, Any], list[Saved]]:
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

    check_moe_split(tp, ep)
    torch.manual_seed(0)
    args = MoEArgs(
        num_experts=num_experts,
        num_shared_experts=num_shared_experts,
        top_k=top_k,
        use_grouped_mm=True,
        score_before_experts=score_before_experts,
        score_func="softmax",
        load_balance_coeff=None,
    )
    moe = MoE(args, dim=hidden_size, hidden_dim=moe_ffn_hidden_size)
    with torch.no_grad():
        moe.init_weights(0.02, torch.device("cpu"))
    for p in moe.parameters():  # FSDP2's MixedPrecisionPolicy: bf16 in the forward
        p.data = p.data.to(torch.bfloat16)
    block = torch.nn.Module()  # what torchtitan's plans walk: layers, with moe and moe_enabled
    block.moe, block.moe_enabled = moe, True
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleDict({"0": block})
    rank, plans, _tp_mesh = split_moe_blocks(model, tp=tp, ep=ep)
    if tp * ep > 1:
        torch.manual_seed(1 + rank)  # each rank's own tokens
    x = torch.randn(
        mbs, seq_len // tp, hidden_size, dtype=torch.bfloat16, requires_grad=True
    )  # this rank's sequence shard
    with integer_histc(), cpu_permute_indices():
        saved, _out = saved_by_module(moe, lambda: moe(x), leave_out=(x,))
    # under tp every rank routes the whole, gathered, sequence
    received = sum(plans[0].output_splits or ()) if plans else mbs * seq_len * top_k
    config = {
        "hidden_size": hidden_size,
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
        "grouped_mm": True,
        "token_group_align": moe_utils.TOKEN_GROUP_ALIGN_SIZE_M,
        "routed_tokens": received,
    }
    return config, saved


def megatron_moe(
    *,
    hidden_size: int,
    moe_ffn_hidden_size: int,
    num_experts: int,
    top_k: int,
    num_shared_experts: int,
    score_before_experts: bool,
    seq_len: int,
    mbs: int,
    tp: int,
    fused_swiglu: bool = True,
    ep: int = 1,
) -> tuple[dict[str, Any], list[Saved]]:
    """Megatron-Core's MoE layer (``MoELayer`` of the local GPT spec: top-k softmax router
    without load-balancing loss, its softmax after the top-k but at top-1, where Megatron
    asks for it before, the all-to-all token dispatcher, dropless, the experts one by
    one, ``SequentialMLP``, SwiGLU with its fusion on or off, an optional shared expert, the
    routing scores weighing the tokens before the experts, ``moe_apply_probs_on_input``, or
    the activations inside them) on ``mbs x seq_len`` bf16 tokens, its layer split over the
    ``tp`` ranks and its experts over the ``ep`` ranks (and over tp too) of the initialised
    (gloo) process group where they are > 1: its configuration and what its forward saves on
    this rank. Stand-ins: :func:`megatron_on_cpu`."""
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
    check_moe_split(tp, ep)
    world = fake_world(1) if tp * ep == 1 else contextlib.nullcontext()
    with world, megatron_on_cpu():
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tp,
            expert_model_parallel_size=ep,
            create_gloo_process_groups=False,
        )
        try:
            rank = dist.get_rank()
            torch.manual_seed(0)  # the router's weights alike on every rank
            shared = num_shared_experts * moe_ffn_hidden_size
            cfg = TransformerConfig(
                num_layers=1,
                hidden_size=hidden_size,
                num_attention_heads=8,
                ffn_hidden_size=moe_ffn_hidden_size,
                moe_ffn_hidden_size=moe_ffn_hidden_size,
                num_moe_experts=num_experts,
                moe_router_topk=top_k,
                moe_shared_expert_intermediate_size=shared or None,
                moe_apply_probs_on_input=score_before_experts,
                moe_router_pre_softmax=top_k == 1,  # Megatron asks for it at top-1 only
                moe_router_load_balancing_type="none",
                moe_token_dispatcher_type="alltoall",
                expert_model_parallel_size=ep,
                tensor_model_parallel_size=tp,
                sequence_parallel=tp > 1,
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
            )
            spec = get_gpt_layer_local_spec(
                num_experts=num_experts, moe_grouped_gemm=False, normalization="RMSNorm"
            )
            moe = build_module(spec.submodules.mlp, config=cfg)
            torch.manual_seed(1 + rank)  # each rank's own tokens
            x = torch.randn(
                seq_len // tp, mbs, hidden_size, dtype=torch.bfloat16, requires_grad=True
            )  # this rank's sequence shard
            saved, _out = saved_by_module(moe, lambda: moe(x), leave_out=(x,))
            dispatcher = moe.token_dispatcher
            splits = dispatcher.output_splits_tp if tp > 1 else dispatcher.output_splits
            received = mbs * seq_len * top_k if splits is None else int(sum(splits))
        finally:
            parallel_state.destroy_model_parallel()
    config = {
        "hidden_size": hidden_size,
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
        "grouped_mm": False,
        "token_group_align": 0,
        "sequence_parallel": tp > 1,
        "fused_swiglu": fused_swiglu,
        "router_pre_softmax": top_k == 1,
        "routed_tokens": received,
    }
    return config, saved


MEGATRON_MOE_SHAPES: tuple[dict[str, Any], ...] = tuple(
    {**s, "fused_swiglu": fused}
    for fused in (True, False)
    for s in MOE_SHAPES
    if s["top_k"] == 1 or not s["score_before_experts"]
)
"""Megatron-Core's MoE layer: :data:`MOE_SHAPES` but the scores before the experts with top-2
(Megatron applies them to the input only with top-1), its SwiGLU fused and not."""

MOE_BLOCKS: dict[
    str, tuple[Callable[..., tuple[dict[str, Any], list[Saved]]], tuple[dict[str, Any], ...]]
] = {
    "torchtitan": (torchtitan_moe, MOE_SHAPES),
    "megatron": (megatron_moe, MEGATRON_MOE_SHAPES),
}
"""Each framework's MoE layer and the shapes it is measured at (``--moe``)."""


def parallel_shapes(shapes: Sequence[dict[str, Any]], *, ep: int) -> tuple[dict[str, Any], ...]:
    """The shapes measured over several ranks (``--ep``, ``--tp`` or both): where the SwiGLU's
    fusion is a choice, with it on, and under expert parallelism only those without a shared
    expert (it is not split by ep)."""
    return tuple(
        s
        for s in shapes
        if s.get("fused_swiglu", True) and not (ep > 1 and s["num_shared_experts"])
    )
