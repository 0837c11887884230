"""Collective timings with torch.distributed (NCCL on GPUs, gloo on CPU).

Run on one node::

    torchrun --nproc-per-node 8 -m microbench.collectives --out coll.jsonl
    torchrun --nproc-per-node 2 -m microbench.collectives --max-bytes 64KiB --out c.jsonl  # CPU

and on several nodes with ``microbench/collectives.sbatch`` (Slurm).

For every group size g (2, 4, 8, ... up to the world size) and layout, the world is split into
world/g concurrent sub-groups: ``contiguous`` groups hold consecutive ranks (as tp lays them
out, inside a node first), ``strided`` groups every (world/g)-th rank (as dp lays them out,
across nodes first). Every op then runs on every sub-group at once, for each message size
(powers of two), ``--warmup`` times untimed and ``--iters`` times in one timed window
(CUDA events on GPU, ``time.perf_counter`` on CPU). The recorded time per op is the window
divided by iters, the maximum over all ranks, as nccl-tests does with its (slowest-rank)
timing. Sizes, algbw and busbw follow the nccl-tests conventions (``surrogate.analytic.perf``):
all_gather and reduce_scatter count the whole gathered / scattered buffer, all_to_all the whole
buffer of a rank, all_reduce, broadcast and send_recv one rank's buffer. send_recv exchanges
a buffer in both directions between the two ranks of each pair (g = 2 only).

Every measurement is written (by rank 0) as soon as it is taken. A measurement that does not
finish within ``--timeout-s`` is recorded with status ``timeout`` and every rank exits with
code 124; an op that raises is recorded with status ``error`` and the next op runs.
Fault injection for tests: ``MICROBENCH_FAULT=hang:OP:RANK`` makes RANK sleep instead of
running OP, as a dead peer would.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from microbench.fingerprint import collect
from microbench.records import JsonlWriter, make_record
from microbench.watchdog import TIMEOUT_EXIT_CODE, Watchdog
from surrogate.analytic.perf import bus_factor

OPS: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "send_recv",
)
LAYOUTS: tuple[str, ...] = ("contiguous", "strided")
_UNITS = {
    "": 1,
    "B": 1,
    "K": 2**10,
    "KB": 2**10,
    "KIB": 2**10,
    "M": 2**20,
    "MB": 2**20,
    "MIB": 2**20,
    "G": 2**30,
    "GB": 2**30,
    "GIB": 2**30,
}


def parse_bytes(text: str) -> int:
    """``4096``, ``64KiB``, ``1M``, ``2GiB`` -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if m is None or m.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"a size is a number with an optional unit (KiB, MiB, GiB), got {text!r}"
        )
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from ``min_bytes`` to ``max_bytes`` (both rounded to powers of two)."""
    if not 0 < min_bytes <= max_bytes:
        raise ValueError(f"need 0 < min_bytes <= max_bytes, got {min_bytes} and {max_bytes}")
    out, s = [], 1 << (min_bytes - 1).bit_length()
    while s <= max_bytes:
        out.append(s)
        s *= 2
    return out


def subgroups(world: int, group_size: int, layout: str) -> list[list[int]]:
    """The world/g sub-groups of ``layout`` (see the module doc)."""
    if group_size < 2 or world % group_size:
        raise ValueError(
            f"group_size must be >= 2 and divide the world size ({world}), got {group_size}"
        )
    count = world // group_size
    if layout == "contiguous":
        return [list(range(i * group_size, (i + 1) * group_size)) for i in range(count)]
    if layout == "strided":
        return [list(range(i, world, count)) for i in range(count)]
    raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")


def group_sizes(world: int, asked: Sequence[int] | None) -> list[int]:
    """The asked group sizes that divide the world; default 2, 4, 8, ... up to the world."""
    if asked:
        return [g for g in asked if 2 <= g <= world and world % g == 0]
    out, g = [], 2
    while g <= world:
        if world % g == 0:
            out.append(g)
        g *= 2
    return out


def _fault(op: str, rank: int) -> bool:
    spec = os.environ.get("MICROBENCH_FAULT", "")
    parts = spec.split(":")
    return len(parts) == 3 and parts[0] == "hang" and parts[1] == op and parts[2] == str(rank)


def _make_op(
    op: str, size_bytes: int, members: list[int], group: Any, rank: int, device: str, dtype: Any
) -> tuple[Callable[[], None], int]:
    """A closure running ``op`` once on this rank's sub-group, and the size it really moves
    (``size_bytes`` rounded down to whole elements per rank)."""
    import torch
    import torch.distributed as dist

    g = len(members)
    elt = torch.tensor([], dtype=dtype).element_size()
    per_rank = op in ("all_gather", "reduce_scatter", "all_to_all")
    count = size_bytes // elt
    if per_rank:
        count -= count % g
    count = max(count, g if per_rank else 1)
    real_size = count * elt

    def buf(n: int) -> Any:
        return torch.ones(n, dtype=dtype, device=device)

    if op == "all_reduce":
        t = buf(count)
        return (lambda: dist.all_reduce(t, group=group)), real_size
    if op == "all_gather":
        out, inp = buf(count), buf(count // g)
        return (lambda: dist.all_gather_into_tensor(out, inp, group=group)), real_size
    if op == "reduce_scatter":
        out, inp = buf(count // g), buf(count)
        return (lambda: dist.reduce_scatter_tensor(out, inp, group=group)), real_size
    if op == "all_to_all":
        out, inp = buf(count), buf(count)
        return (lambda: dist.all_to_all_single(out, inp, group=group)), real_size
    if op == "broadcast":
        t, src = buf(count), members[0]
        return (lambda: dist.broadcast(t, src=src, group=group)), real_size
    if op == "send_recv":
        if g != 2:
            raise ValueError(f"send_recv runs between pairs (group size 2), got {g}")
        peer = members[1] if members[0] == rank else members[0]
        send, recv = buf(count), buf(count)

        def exchange() -> None:
            reqs = dist.batch_isend_irecv(
                [
                    dist.P2POp(dist.isend, send, peer, group=group),
                    dist.P2POp(dist.irecv, recv, peer, group=group),
                ]
            )
            for r in reqs:
                r.wait()

        return exchange, real_size
    raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")


def _time_window_s(fn: Callable[[], None], *, iters: int, cuda: bool) -> float:
    import torch

    if cuda:
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) * 1e-3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="torchrun ... -m microbench.collectives",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", default="-", help="JSON-lines file rank 0 appends to (- = stdout)")
    ap.add_argument(
        "--ops", default=",".join(OPS), help="comma-separated subset of " + ", ".join(OPS)
    )
    ap.add_argument("--min-bytes", type=parse_bytes, default=parse_bytes("4KiB"))
    ap.add_argument("--max-bytes", type=parse_bytes, default=parse_bytes("1GiB"))
    ap.add_argument("--group-sizes", default="", help="comma-separated, default 2,4,8,...")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument(
        "--dtype",
        choices=("f32", "bf16"),
        default="f32",
        help="element type (nccl-tests and XLA use f32)",
    )
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument(
        "--timeout-s",
        type=float,
        default=60.0,
        help="limit for one measurement (warm-up, timed window, rank reduction)",
    )
    ap.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    return ap


@dataclass
class _Session:
    """What every measurement of one run shares: the settings, this rank and its device, the
    writer (rank 0's), the watchdog and the fields of the measurement under way."""

    args: argparse.Namespace
    rank: int
    device: str
    cuda: bool
    dtype: Any
    fp: Any
    writer: JsonlWriter | None
    dog: Watchdog
    current: dict[str, Any]


def main(argv: Sequence[str] | None = None) -> int:
    # torch 2.13 renames the *_tensor collectives; the old names still work everywhere
    warnings.filterwarnings("ignore", message=r".*_tensor` is deprecated", category=FutureWarning)
    ap = _parser()
    args = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = [o for o in ops if o not in OPS]
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    bad += [x for x in layouts if x not in LAYOUTS]
    if bad:
        ap.error(
            f"unknown op or layout {', '.join(bad)}; ops are {', '.join(OPS)}, layouts "
            f"{', '.join(LAYOUTS)}"
        )
    backend = (
        args.backend
        if args.backend != "auto"
        else ("nccl" if torch.cuda.is_available() else "gloo")
    )
    cuda = backend == "nccl"
    device = "cpu"
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    # the process-group timeout is a backstop; the watchdog below fires first
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout_s * 2 + 60))
    rank, world = dist.get_rank(), dist.get_world_size()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))  # ranks per node
    run_id: list[Any] = [collect().run_id if rank == 0 else None]
    dist.broadcast_object_list(run_id, src=0)
    fp = collect(world_size=world, backend=backend, run_id=str(run_id[0]))
    writer = JsonlWriter(args.out) if rank == 0 else None
    tdtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    sizes = message_sizes(args.min_bytes, args.max_bytes)
    asked = [int(x) for x in args.group_sizes.split(",") if x.strip()]
    current: dict[str, Any] = {}

    def on_timeout(label: str, limit_s: float) -> None:
        if writer is not None:
            writer.write(
                make_record(
                    fp,
                    status="timeout",
                    message=(
                        f"{label} did not finish within {limit_s:g} s on rank {rank} "
                        f"(a hung or dead peer?); measurements before it are kept"
                    ),
                    **current,
                )
            )
        print(f"microbench.collectives: rank {rank}: timeout: {label}", file=sys.stderr)

    session = _Session(
        args=args,
        rank=rank,
        device=device,
        cuda=cuda,
        dtype=tdtype,
        fp=fp,
        writer=writer,
        dog=Watchdog(on_timeout),
        current=current,
    )
    errors = 0
    for g in group_sizes(world, asked):
        for layout in layouts if g < world else layouts[:1]:
            groups = subgroups(world, g, layout)
            handles = [dist.new_group(members) for members in groups]  # every rank, same order
            mine = next(i for i, members in enumerate(groups) if rank in members)
            spans = max(len({r // local_world for r in members}) for members in groups)
            for op in ops:
                if op == "send_recv" and g != 2:
                    continue
                for size in sizes:
                    if not _measure(
                        session, op, size, g, layout, groups[mine], handles[mine], spans
                    ):
                        errors += 1
                        break  # the other sizes of this op would fail alike
    session.dog.close()
    if writer is not None:
        writer.close()
    dist.destroy_process_group()
    return 1 if errors else 0


def _measure(
    s: _Session,
    op: str,
    size: int,
    g: int,
    layout: str,
    group: Sequence[int],
    handle: Any,
    spans: int,
) -> bool:
    """Time ``op`` on messages of ``size`` bytes in this rank's group, the slowest rank's time;
    rank 0 records it, or the error it raised (then False)."""
    import torch
    import torch.distributed as dist

    s.current.clear()
    s.current.update(
        op=op,
        dtype=s.args.dtype,
        group_size=g,
        layout=layout,
        size_bytes=size,
        in_place=op in ("all_reduce", "broadcast"),
        nodes=spans,
    )
    label = f"{op} size={size} B group={g} {layout}"
    # other ranks wait a little longer, so that rank 0 (the writer) records
    # the timeout before a peer's exit turns it into a connection error
    s.dog.arm(label, s.args.timeout_s + (0 if s.rank == 0 else 5))
    try:
        fn, real = _make_op(op, size, group, handle, s.rank, s.device, s.dtype)
        s.current["size_bytes"] = real
        if _fault(op, s.rank):
            time.sleep(10 * s.args.timeout_s)
        for _ in range(s.args.warmup):
            fn()
        dist.barrier()
        t = _time_window_s(fn, iters=max(1, s.args.iters), cuda=s.cuda)
        worst = torch.tensor([t], dtype=torch.float64, device=s.device)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        t = float(worst.item())
    except (RuntimeError, ValueError) as e:
        s.dog.disarm()
        if s.writer is not None:
            s.writer.write(make_record(s.fp, status="error", message=f"{label}: {e}", **s.current))
        return False
    s.dog.disarm()
    if s.writer is not None:
        algbw = real / t
        s.writer.write(
            make_record(
                s.fp,
                time_s=t,
                algbw_bytes_per_s=algbw,
                busbw_bytes_per_s=algbw * float(bus_factor(op, g)),
                **s.current,
            )
        )
    return True


if __name__ == "__main__":
    code = main()
    sys.exit(code if code != TIMEOUT_EXIT_CODE else 1)
