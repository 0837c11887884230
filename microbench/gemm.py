"""GEMM throughput: torch matmul over a grid of shapes and the shapes the preset models make.

Run: ``python -m microbench.gemm --out gemm.jsonl`` (standard suite on the first GPU) or
``python -m microbench.gemm --device cpu --shapes 64,64,64 --dtypes f32`` (CPU, for tests).

Method: operands are random; ``--warmup`` calls first (cuBLAS heuristics, clocks); then
``--repeats`` timed windows, each of enough back-to-back calls to last about a millisecond,
timed with CUDA events on a GPU (``time.perf_counter`` on the CPU); the record keeps the median
window's time per call and FLOP/s = 2 x batch x m x n x k / time. FP8 uses
``torch._scaled_mm`` (e4m3 operands, unit scales, bf16 output) on GPUs of compute capability
8.9 or newer, unbatched only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from microbench.fingerprint import Fingerprint, collect
from microbench.records import JsonlWriter, make_record
from microbench.watchdog import Watchdog
from surrogate.config.presets import PRESETS

GRID_SIDES: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192)
"""Powers of two for the regular grid (m, n, k each)."""
PRESET_TPS: tuple[int, ...] = (1, 2, 4, 8)


@dataclass(frozen=True, kw_only=True)
class GemmShape:
    """An (m x k) @ (k x n) product, ``batch`` times."""

    m: int
    n: int
    k: int
    batch: int = 1
    origin: str = "grid"
    """Why it is measured (``grid`` or the layer and model it comes from)."""

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "batch"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"GemmShape.{name} must be an integer >= 1, got {v!r}")

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def grid_shapes(sides: Sequence[int] = GRID_SIDES) -> list[GemmShape]:
    """Every (m, n, k) with each side in ``sides``."""
    return [GemmShape(m=m, n=n, k=k) for m in sides for n in sides for k in sides]


def preset_shapes(tps: Sequence[int] = PRESET_TPS, *, mbs: int = 1) -> list[GemmShape]:
    """The GEMMs of one transformer layer (and the LM head) of every preset model, per tp.

    Tokens per micro-batch T = mbs x seq_len. A linear layer Y = X W^T with X: T x in and
    W: out x in gives three GEMMs: forward (T, out, in), input gradient (T, in, out) and weight
    gradient (out, in, T). Megatron-style tp splits QKV, the MLP up/gate projection and the
    LM head by columns (out / tp) and the attention output and MLP down projection by rows
    (in / tp). Shapes that tp does not divide evenly are left out.
    """
    seen: set[tuple[int, int, int]] = set()
    out: list[GemmShape] = []
    for model in PRESETS.values():
        h, hd = model.hidden_size, model.hidden_size // model.num_heads
        ffn = model.moe_ffn_hidden_size or model.ffn_hidden_size
        t = mbs * model.seq_len
        for tp in tps:
            layers = {
                "qkv": ((model.num_heads + 2 * model.num_kv_heads) * hd, h, True),
                "attn_out": (h, h, False),
                "mlp_up_gate": (2 * ffn, h, True),
                "mlp_down": (h, ffn, False),
                "lm_head": (model.vocab_size, h, True),
            }
            for layer, (d_out, d_in, column) in layers.items():
                if (d_out if column else d_in) % tp:
                    continue
                o, i = (d_out // tp, d_in) if column else (d_out, d_in // tp)
                for kind, (m, n, k) in (
                    ("fwd", (t, o, i)),
                    ("dgrad", (t, i, o)),
                    ("wgrad", (o, i, t)),
                ):
                    if (m, n, k) in seen:
                        continue
                    seen.add((m, n, k))
                    out.append(
                        GemmShape(m=m, n=n, k=k, origin=f"{model.name} tp={tp} {layer} {kind}")
                    )
    return out


def standard_shapes() -> list[GemmShape]:
    """The standard suite: the regular grid, then the preset models' shapes."""
    return grid_shapes() + preset_shapes()


def fp8_supported() -> bool:
    """FP8 tensor cores (compute capability >= 8.9) and ``torch._scaled_mm`` available."""
    import torch

    return (
        torch.cuda.is_available()
        and torch.cuda.get_device_capability() >= (8, 9)
        and hasattr(torch, "_scaled_mm")
        and hasattr(torch, "float8_e4m3fn")
    )


def _operands(shape: GemmShape, dtype: str, device: str) -> Callable[[], Any]:
    """A closure that runs the GEMM once (operands allocated now)."""
    import torch

    if dtype == "fp8":
        if shape.batch != 1:
            raise ValueError(
                f"fp8 GEMMs are measured unbatched (torch._scaled_mm), got batch={shape.batch}"
            )
        a = torch.randn(shape.m, shape.k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(shape.n, shape.k, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    if shape.batch == 1:
        a = torch.randn(shape.m, shape.k, device=device, dtype=tdtype)
        b = torch.randn(shape.k, shape.n, device=device, dtype=tdtype)
        return lambda: torch.matmul(a, b)
    a = torch.randn(shape.batch, shape.m, shape.k, device=device, dtype=tdtype)
    b = torch.randn(shape.batch, shape.k, shape.n, device=device, dtype=tdtype)
    return lambda: torch.bmm(a, b)


def resolve_device(name: str) -> str:
    """``auto``: ``cuda`` when a GPU is visible, else ``cpu``; any other name as given."""
    import torch

    if name != "auto":
        return name
    return "cuda" if torch.cuda.is_available() else "cpu"


def int_list(text: str) -> list[int]:
    """``"512,1024"`` -> ``[512, 1024]`` (empty items skipped)."""
    return [int(x) for x in text.split(",") if x.strip()]


def time_call_s(
    fn: Callable[[], Any], *, device: str, warmup: int, repeats: int, target_window_s: float = 1e-3
) -> float:
    """Median seconds per call of ``fn`` (see the module doc for the method)."""
    import torch

    cuda = device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(max(1, warmup)):
        fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    one_s = max(time.perf_counter() - t0, 1e-9)
    inner = int(min(100, max(1, round(target_window_s / one_s))))
    windows: list[float] = []
    for _ in range(max(1, repeats)):
        if cuda:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            windows.append(start.elapsed_time(end) * 1e-3 / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            windows.append((time.perf_counter() - t0) / inner)
    return statistics.median(windows)


def run_gemms(
    shapes: Iterable[GemmShape],
    dtypes: Sequence[str],
    *,
    device: str,
    writer: JsonlWriter,
    fingerprint: Fingerprint,
    warmup: int = 5,
    repeats: int = 20,
    timeout_s: float = 120.0,
) -> int:
    """Measure every shape in every dtype, writing one record each; returns the failures.

    A GEMM that raises (out of memory, unsupported dtype) is recorded with status ``error``
    and the suite goes on; one that overruns ``timeout_s`` is recorded as ``timeout`` and the
    process exits (see :mod:`microbench.watchdog`).
    """
    import torch

    current: dict[str, Any] = {}

    def on_timeout(label: str, limit_s: float) -> None:
        writer.write(
            make_record(
                fingerprint,
                status="timeout",
                message=f"{label} did not finish within {limit_s:g} s",
                **current,
            )
        )

    dog = Watchdog(on_timeout)
    failures = 0
    try:
        for shape in shapes:
            for dtype in dtypes:
                current.clear()
                current.update(
                    op="gemm", dtype=dtype, m=shape.m, n=shape.n, k=shape.k, batch=shape.batch
                )
                label = f"gemm {dtype} m={shape.m} n={shape.n} k={shape.k} b={shape.batch}"
                dog.arm(label, timeout_s)
                try:
                    fn = _operands(shape, dtype, device)
                    t = time_call_s(fn, device=device, warmup=warmup, repeats=repeats)
                except (RuntimeError, ValueError, TypeError) as e:
                    failures += 1
                    writer.write(
                        make_record(
                            fingerprint,
                            status="error",
                            message=f"{label} ({shape.origin}): {e}",
                            **current,
                        )
                    )
                    if device.startswith("cuda"):
                        torch.cuda.empty_cache()
                    continue
                finally:
                    dog.disarm()
                writer.write(
                    make_record(fingerprint, time_s=t, flops_per_s=shape.flops / t, **current)
                )
    finally:
        dog.close()
    return failures


def _parse_shape(text: str) -> GemmShape:
    parts = [int(x) for x in text.split(",")]
    if len(parts) not in (3, 4):
        raise argparse.ArgumentTypeError(f"a shape is m,n,k or m,n,k,batch, got {text!r}")
    return GemmShape(
        m=parts[0],
        n=parts[1],
        k=parts[2],
        batch=parts[3] if len(parts) == 4 else 1,
        origin="command line",
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m microbench.gemm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", default="-", help="JSON-lines file to append to (- = stdout)")
    ap.add_argument("--device", default="auto", help="auto (cuda if present), cpu, cuda:N")
    ap.add_argument("--suite", choices=("standard", "grid", "presets"), default="standard")
    ap.add_argument(
        "--shapes",
        nargs="*",
        type=_parse_shape,
        default=None,
        help="explicit m,n,k[,batch] shapes instead of a suite",
    )
    ap.add_argument(
        "--dtypes",
        default="auto",
        help="comma-separated bf16,fp8,f32; auto = bf16 (+fp8 where supported)",
    )
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    args = ap.parse_args(argv)
    device = resolve_device(args.device)
    if args.dtypes == "auto":
        dtypes = ["bf16"] + (["fp8"] if device.startswith("cuda") and fp8_supported() else [])
    else:
        dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if args.shapes:
        shapes = list(args.shapes)
    else:
        shapes = {"standard": standard_shapes, "grid": grid_shapes, "presets": preset_shapes}[
            args.suite
        ]()
    writer = JsonlWriter(args.out)
    try:
        failures = run_gemms(
            shapes,
            dtypes,
            device=device,
            writer=writer,
            fingerprint=collect(),
            warmup=args.warmup,
            repeats=args.repeats,
            timeout_s=args.timeout_s,
        )
    finally:
        writer.close()
    if failures:
        print(
            f"{failures} GEMM measurement(s) failed; see the records with status 'error'",
            file=sys.stderr,
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
