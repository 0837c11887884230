"""Flash attention throughput: ``F.scaled_dot_product_attention`` forward, and forward plus
backward, over sequence length, heads, head width and causality.

Run: ``python -m microbench.attention --out attention.jsonl`` (standard suite on the first GPU;
the flash backend is forced, so a shape it cannot run is recorded as an error, never timed on
another backend) or ``python -m microbench.attention --device cpu --seqs 64 --tokens 256``.

Records (the microbenchmark schema): op ``sdpa_fwd`` / ``sdpa_fwd_bwd`` (``sdpa_causal_*`` for a
causal mask), dtype ``bf16``, ``m`` = ``n`` = sequence length (queries, keys), ``k`` = head
width, ``batch`` = sequences x heads, ``time_s`` (median window, timed as
:func:`microbench.gemm.time_call_s`) and ``flops_per_s`` counted without any causal discount:
4 x batch x s^2 x d for the forward (two GEMMs) and 3x that for forward plus backward, the count
of the analytic model (``surrogate.analytic.flops``). The causal rows' rate against the full
rows' then says how much of the full work a causal kernel costs.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from microbench.fingerprint import collect
from microbench.gemm import int_list, resolve_device, time_call_s
from microbench.records import JsonlWriter, make_record

STANDARD_SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
STANDARD_HEADS = (8, 32)
STANDARD_HEAD_DIMS = (64, 128)
TOKENS_PER_HEAD = 16384
"""Sequences per measurement: enough for ``TOKENS_PER_HEAD`` tokens (at least one)."""


def attention_ops(causal: bool) -> tuple[str, str]:
    pre = "sdpa_causal" if causal else "sdpa"
    return f"{pre}_fwd", f"{pre}_fwd_bwd"


def flash_only(device: str) -> Callable[[], Any]:
    """A context-manager factory: on a GPU, attention on the flash backend only (a shape it
    cannot run raises instead of running on another backend); on the CPU, no constraint."""
    if not device.startswith("cuda"):
        return contextlib.nullcontext
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)


def sdpa_calls(
    b: int, heads: int, s: int, d: int, *, causal: bool, device: str
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """Closures running the attention of ``b`` sequences once: forward, and forward plus
    backward (input gradients, nothing accumulated); operands allocated now. On a GPU the flash
    backend is forced: a shape it cannot run raises instead of running on another backend."""
    import torch
    import torch.nn.functional as F

    backend = flash_only(device)
    q, k, v = (
        torch.randn(b, heads, s, d, device=device, dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(b, heads, s, d, device=device, dtype=torch.bfloat16)

    def fwd() -> Any:
        with backend():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def fwd_bwd() -> Any:
        return torch.autograd.grad(fwd(), (q, k, v), grad)

    return fwd, fwd_bwd


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m microbench.attention",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", default="-")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--seqs", default=",".join(map(str, STANDARD_SEQS)))
    ap.add_argument("--heads", default=",".join(map(str, STANDARD_HEADS)))
    ap.add_argument("--head-dims", default=",".join(map(str, STANDARD_HEAD_DIMS)))
    ap.add_argument("--tokens", type=int, default=TOKENS_PER_HEAD)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)

    import torch

    device = resolve_device(args.device)
    cuda = device.startswith("cuda")
    fingerprint = collect()
    writer = JsonlWriter(args.out)
    failures = 0
    try:
        for d in int_list(args.head_dims):
            for heads in int_list(args.heads):
                for s in int_list(args.seqs):
                    b = max(1, args.tokens // s)
                    for causal in (False, True):
                        fwd_op, both_op = attention_ops(causal)
                        fields = dict(dtype="bf16", m=s, n=s, k=d, batch=b * heads)
                        try:
                            flops = 4.0 * b * heads * s * s * d
                            fwd, fwd_bwd = sdpa_calls(b, heads, s, d, causal=causal, device=device)
                            for op, fn, work in (
                                (fwd_op, fwd, flops),
                                (both_op, fwd_bwd, 3 * flops),
                            ):
                                t = time_call_s(
                                    fn, device=device, warmup=args.warmup, repeats=args.repeats
                                )
                                writer.write(
                                    make_record(
                                        fingerprint, op=op, time_s=t, flops_per_s=work / t, **fields
                                    )
                                )
                        except (RuntimeError, ValueError) as e:
                            failures += 1
                            writer.write(
                                make_record(
                                    fingerprint,
                                    status="error",
                                    op=fwd_op,
                                    **fields,
                                    message=f"sdpa s={s} heads={heads} d={d} causal={causal}: {e}"[
                                        :500
                                    ],
                                )
                            )
                        finally:
                            fwd = fwd_bwd = None  # type: ignore[assignment]
                            if cuda:
                                torch.cuda.empty_cache()
    finally:
        writer.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
