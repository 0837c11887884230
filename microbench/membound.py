"""Memory-bound kernels of a training step: the bandwidth they reach on the GPU.

Run: ``python -m microbench.membound --out membound.jsonl`` (standard suite on the first GPU) or
``python -m microbench.membound --device cpu --tokens 256 --widths 64``.

Each kernel runs over a (tokens x width) bf16 activation, as PyTorch executes it in the training
step of ``microbench.train_step``: RMSNorm forward plus backward (``torch.nn.functional.rms_norm``),
SiLU(gate) x up forward plus backward, rotary embedding forward plus backward, cross entropy over
a (tokens x vocabulary) bf16 logit matrix forward plus backward, and one fused AdamW step over
``width`` x ``width`` fp32 parameters. Records (the microbenchmark schema): op = the kernel
(``rmsnorm_fwd_bwd``, ``swiglu_fwd_bwd``, ``rope_fwd_bwd``, ``cross_entropy_fwd_bwd``,
``adamw_step``), dtype, ``m`` = tokens (parameter rows for AdamW), ``n`` = width, ``size_bytes``
= the bytes the kernel must at least read and write (its inputs, outputs and gradients once),
``time_s`` (median window, :func:`microbench.gemm.time_call_s`) and ``algbw_bytes_per_s`` =
size_bytes / time_s: the achieved memory bandwidth.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from microbench.fingerprint import collect
from microbench.gemm import int_list, resolve_device, time_call_s
from microbench.records import JsonlWriter, make_record
from surrogate.runs.microbench_table import MEMORY_BOUND_OPS

STANDARD_TOKENS = (4096, 16384)
STANDARD_WIDTHS = (2048, 4096, 8192)
STANDARD_VOCABS = (32000, 131072)
KERNELS = MEMORY_BOUND_OPS


def kernel(name: str, m: int, n: int, *, device: str) -> tuple[Callable[[], Any], float]:
    """A closure running kernel ``name`` once on an (m x n) problem, and its minimal bytes."""
    import torch
    import torch.nn.functional as F

    bf = torch.bfloat16

    def grad(out: Any, inputs: tuple[Any, ...], g: Any) -> Any:
        """Input gradients without accumulating into ``.grad`` (no extra read and write)."""
        return torch.autograd.grad(out, inputs, g)

    def leaf(*shape: int, dtype: Any = bf) -> Any:
        return torch.randn(*shape, device=device, dtype=dtype, requires_grad=True)

    if name == "rmsnorm_fwd_bwd":
        x, w = leaf(m, n), leaf(n)
        g = torch.randn(m, n, device=device, dtype=bf)
        # read x, write y; backward reads x, dy, writes dx
        return (lambda: grad(F.rms_norm(x, (n,), w, 1e-5), (x, w), g)), 5.0 * 2 * m * n
    if name == "swiglu_fwd_bwd":
        a, b = leaf(m, n), leaf(m, n)
        g = torch.randn(m, n, device=device, dtype=bf)
        # forward reads a, b, writes y; backward reads a, b, dy, writes da, db
        return (lambda: grad(F.silu(a) * b, (a, b), g)), 8.0 * 2 * m * n
    if name == "rope_fwd_bwd":
        x = leaf(m, n)
        ang = torch.rand(m, n // 2, device=device)
        cos, sin = ang.cos().to(bf), ang.sin().to(bf)
        g = torch.randn(m, n, device=device, dtype=bf)

        def rope() -> None:
            x1, x2 = x.chunk(2, dim=-1)
            grad(torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1), (x,), g)

        # forward reads x, cos, sin, writes y; backward reads dy, cos, sin, writes dx
        return rope, 2.0 * (4 * m * n + 2 * m * n)
    if name == "cross_entropy_fwd_bwd":
        logits = leaf(m, n)
        target = torch.randint(n, (m,), device=device)
        # read logits (bf16), write their gradient (bf16); the fp32 upcast is the kernel's own
        return (lambda: grad(F.cross_entropy(logits, target), (logits,), None)), 2.0 * 2 * m * n
    if name == "adamw_step":
        p = torch.nn.Parameter(torch.randn(m, n, device=device))
        p.grad = torch.randn(m, n, device=device)
        opt = torch.optim.AdamW([p], lr=1e-4, fused=device.startswith("cuda"))
        opt.step()  # allocates the moments
        # read p, grad, m, v; write p, m, v (fp32)
        return opt.step, 7.0 * 4 * m * n
    raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m microbench.membound",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", default="-")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tokens", default=",".join(map(str, STANDARD_TOKENS)))
    ap.add_argument("--widths", default=",".join(map(str, STANDARD_WIDTHS)))
    ap.add_argument("--vocabs", default=",".join(map(str, STANDARD_VOCABS)))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)

    import torch

    device = resolve_device(args.device)
    fingerprint = collect()
    writer = JsonlWriter(args.out)
    failures = 0
    try:
        for name in KERNELS:
            widths = int_list(args.vocabs if name == "cross_entropy_fwd_bwd" else args.widths)
            rows = int_list(args.widths if name == "adamw_step" else args.tokens)
            for m in rows:
                for n in widths:
                    dtype = "f32" if name == "adamw_step" else "bf16"
                    try:
                        fn, size = kernel(name, m, n, device=device)
                        t = time_call_s(fn, device=device, warmup=args.warmup, repeats=args.repeats)
                    except (RuntimeError, ValueError) as e:
                        failures += 1
                        writer.write(
                            make_record(
                                fingerprint,
                                status="error",
                                op=name,
                                dtype=dtype,
                                m=m,
                                n=n,
                                message=f"{name} m={m} n={n}: {e}"[:500],
                            )
                        )
                        continue
                    finally:
                        if device.startswith("cuda"):
                            torch.cuda.empty_cache()
                    writer.write(
                        make_record(
                            fingerprint,
                            op=name,
                            dtype=dtype,
                            m=m,
                            n=n,
                            size_bytes=size,
                            time_s=t,
                            algbw_bytes_per_s=size / t,
                        )
                    )
    finally:
        writer.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
