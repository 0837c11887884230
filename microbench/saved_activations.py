"""What a framework's transformer block keeps for its backward: the bytes autograd saves, by
the module that saves them.

Run: ``python -m microbench.saved_activations --framework torchtitan --out saved.jsonl``
(torchtitan's Llama block at the standard shapes; needs ``pip install torchtitan==0.2.2
triton``) or ``--framework megatron`` (Megatron-Core's GPT layer, with its fused SwiGLU on and
off; needs ``pip install megatron-core==0.16.1``) or ``--framework llm-foundry`` (MPT's block,
:mod:`microbench.llmfoundry_block`); the project depends on none of them. No GPU is
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
:func:`megatron_on_cpu`, and with ``--ep N`` split by its own expert parallelism. With
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
(:func:`split_moe_blocks`; each rank waits at a barrier and collects garbage after the
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
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from microbench.dense_blocks import BLOCKS as DENSE_BLOCKS
from microbench.dense_blocks import NEEDS_MEGATRON, NEEDS_TORCHTITAN, Saved
from microbench.fingerprint import collect
from microbench.kept_activations import KEPT_LAYERS, KEPT_SCHEMA, MOE_STACKS, STACKS, Kept
from microbench.llmfoundry_block import MPT_SHAPES, NEEDS_LLMFOUNDRY, llmfoundry_block
from microbench.moe_blocks import MOE_BLOCKS, parallel_shapes
from microbench.records import JsonlWriter

SCHEMA = "surrogate.saved_activations/1"
PACKAGES = {
    "torchtitan": ("torchtitan", NEEDS_TORCHTITAN),
    "megatron": ("megatron-core", NEEDS_MEGATRON),
    "llm-foundry": ("llm-foundry", NEEDS_LLMFOUNDRY),
}
"""Each framework's distribution and what to install when it is missing."""
BLOCKS = {**DENSE_BLOCKS, "llm-foundry": (llmfoundry_block, MPT_SHAPES)}
"""Each framework's block and the shapes it is measured at (llm-foundry's MPT block:
:mod:`microbench.llmfoundry_block`; no stack, MoE layer or tensor parallelism of it)."""


def record(
    framework: str,
    version: str,
    config: dict[str, Any],
    saved: list[Saved],
    fingerprint: dict[str, Any],
) -> dict[str, Any]:
    """One line of the schema."""
    by_module: dict[str, int] = {}
    for s in saved:
        by_module[s.module] = by_module.get(s.module, 0) + s.bytes
    return {
        "schema": SCHEMA,
        "status": "ok",
        "framework": framework,
        "framework_version": version,
        "config": config,
        "saved": [asdict(s) for s in saved],
        "bytes_by_module": by_module,
        "fingerprint": fingerprint,
    }


def kept_record(
    framework: str,
    version: str,
    config: dict[str, Any],
    kept: list[Kept],
    fingerprint: dict[str, Any],
) -> dict[str, Any]:
    """One line of :data:`KEPT_SCHEMA`."""
    return {
        "schema": KEPT_SCHEMA,
        "status": "ok",
        "framework": framework,
        "framework_version": version,
        "config": config,
        "kept": [asdict(k) for k in kept],
        "kept_bytes": sum(k.bytes for k in kept),
        "fingerprint": fingerprint,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--framework", choices=list(BLOCKS), default="torchtitan")
    ap.add_argument(
        "--recompute",
        action="store_true",
        help=f"what a stack of {KEPT_LAYERS} layers keeps after its forward under "
        "each recomputation setting (schema surrogate.kept_activations/1)",
    )
    ap.add_argument(
        "--moe",
        action="store_true",
        help="what an MoE layer (router, experts, shared expert) saves, in place "
        "of the dense block",
    )
    ap.add_argument(
        "--ep",
        type=int,
        default=1,
        help="with --moe: split the experts over this many ranks (run under "
        "torchrun --nproc-per-node EP x TP; gloo)",
    )
    ap.add_argument(
        "--tp",
        type=int,
        default=1,
        help="with --moe: split the layer over this many ranks by the framework's "
        "tensor parallelism (run under torchrun --nproc-per-node TP x EP; "
        "gloo)",
    )
    ap.add_argument("--out", default="-", help="JSONL file to append to ('-': stdout)")
    args = ap.parse_args(argv)
    if args.moe and args.recompute and args.framework not in MOE_STACKS:
        ap.error(
            f"--moe --recompute measures {', '.join(MOE_STACKS)}'s MoE blocks, got "
            f"--framework {args.framework}"
        )
    if (args.moe or args.recompute) and args.framework not in DENSE_BLOCKS:
        ap.error(f"--framework {args.framework}: its block alone, without --moe or --recompute")
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
            out.write(
                write(
                    args.framework,
                    fw_version,
                    config,
                    found,  # type: ignore[operator]
                    {**fp, package: fw_version},
                )
            )
            print(
                f"[{i}/{len(settings)}] {setting}: "
                f"{sum(s.bytes for s in found) / 2**20:.1f} MiB "
                f"{'kept' if args.recompute else 'saved'}",
                file=sys.stderr,
            )
    finally:
        out.close()
    return 0


def _measurement(
    args: argparse.Namespace,
) -> tuple[Callable[..., Any], tuple[dict[str, Any], ...], Callable[..., dict[str, Any]]]:
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
    from importlib.metadata import version

    import torch.distributed as dist

    world = args.tp * args.ep
    flag = " ".join(f"--{name} {n}" for name, n in (("tp", args.tp), ("ep", args.ep)) if n > 1)
    if int(os.environ.get("WORLD_SIZE", "1")) != world:
        raise SystemExit(
            f"{flag} runs under torchrun --nproc-per-node {world} "
            f"(WORLD_SIZE is {os.environ.get('WORLD_SIZE', 'unset')})"
        )
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
                    print(
                        f"[{i}/{len(split)}] {setting} {flag}: "
                        + ", ".join(f"{_total_bytes(r) / 2**20:.1f}" for r in every)
                        + f" MiB {'kept' if args.recompute else 'saved'} by rank",
                        file=sys.stderr,
                    )
        finally:
            if out is not None:
                out.close()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
