"""Real training steps of Llama-style models on one GPU: step time, peak memory, and the largest
micro-batch that fits, found by trying (out-of-memory errors recorded as such).

Run: ``python -m microbench.train_step --out steps.jsonl`` (the standard cases on the first GPU)
or ``python -m microbench.train_step --device cpu --models tiny --seqs 64 --max-mbs 2`` (tests).

What runs is a plain PyTorch training step in the single-GPU configuration of torchtitan
(``maybe_enable_amp``: no FSDP on one GPU, so the parameters stay fp32 and the forward and
backward run under ``torch.autocast`` in bf16): fp32 parameters, gradients and AdamW moments
(``fused=True``), flash attention through ``F.scaled_dot_product_attention`` (the flash backend
forced on a GPU, so nothing falls back silently to the s x s math path), grouped-query heads
repeated before attention (torchtitan's ``repeat_kv``), RMSNorm, rotary embeddings, a SwiGLU MLP,
and a cross entropy over the full vocabulary. ``--recompute full`` checkpoints every block
(``torch.utils.checkpoint``, non-reentrant). Each optimizer step runs ``--grad-accum``
micro-batches.

``--mode fsdp2`` runs the same model as torchtitan runs it under FSDP (``apply_fsdp``) over a
mesh of this one rank: ``fully_shard`` on the embeddings, each block, the final norm with the
output projection and the root, ``MixedPrecisionPolicy`` with bf16 parameters and fp32
reduction, no autocast (framework ``pytorch-fsdp2``, ZeRO-3: each block's gathered parameters
freed after its forward); ``fsdp2-no-reshard`` keeps them until the backward (ZeRO-2). Over one
rank the collectives move nothing across a link: what it measures is FSDP2's own cost (its
copies, casts and hooks) and memory, beside the kernels; the communication of a real sharded
run comes from the cluster's profile.

Method per case (model, sequence length, recomputation): micro-batch 1, 2, 4, ... until one runs
out of memory (or ``--max-mbs``), then bisection between the largest that fit and the smallest
that did not, so the boundary is exact. Every try builds the model afresh, runs ``--warmup``
steps (the first allocates the optimizer states), resets the allocator's peak counters and
times ``--steps`` steps with CUDA events; the record keeps the median step time, tokens/s and
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` over the timed steps (and over the
whole try). A try that raises ``torch.OutOfMemoryError`` is recorded with status ``oom``; one that
overruns ``--timeout-s`` is recorded as ``timeout`` and ends the process. ``--budget-s`` stops
starting new tries when the time is spent: every record written before stays (one JSON line per
try, flushed at once).

Records (schema ``surrogate.train_step/1``, read by ``surrogate ingest``): ``status`` (``ok``,
``oom``, ``timeout``, ``error``), ``message``, ``config`` (every column of the sweep table's
configuration, ``surrogate.config.training.CONFIG_COLUMNS``), ``model_name``, the outcome
(``step_time_s``, ``step_times_s``, ``tokens_per_s_per_gpu``, ``peak_mem_allocated_gib``,
``peak_mem_reserved_gib``, ``try_peak_mem_allocated_gib``, ``try_peak_mem_reserved_gib``),
``device_memory_gib`` (the device's total) and ``free_at_start_gib`` (free before the try: the
total less the CUDA context and what this process still holds), and ``fingerprint``.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from microbench.attention import flash_only
from microbench.fingerprint import Fingerprint, collect
from microbench.gemm import int_list, resolve_device
from microbench.records import JsonlWriter
from microbench.watchdog import Watchdog
from surrogate.config.model import ModelConfig
from surrogate.config.presets import PRESETS
from surrogate.config.training import MODEL_FIELDS
from surrogate.runs.microbench_table import hardware_from_device_name

RECORD_SCHEMA = "surrogate.train_step/1"
GIB = 2.0**30
MODES: dict[str, tuple[str, str, int]] = {
    "autocast": ("pytorch", "autocast", 0),
    "fsdp2": ("pytorch-fsdp2", "bf16", 3),
    "fsdp2-no-reshard": ("pytorch-fsdp2", "bf16", 2),
}
"""``--mode`` -> the framework, version and ZeRO stage its records carry: torchtitan's
single-GPU configuration (``torch.autocast``, fp32 parameters), or its FSDP2 sharding over a
mesh of one rank, resharding the blocks' parameters after their forward (ZeRO-3) or keeping
them until their backward (ZeRO-2, torchtitan's ``reshard_after_forward = "never"``)."""


MODELS: dict[str, ModelConfig] = {
    m.name: m
    for m in (
        # For tests on a CPU.
        ModelConfig(
            name="tiny",
            num_layers=2,
            hidden_size=64,
            ffn_hidden_size=128,
            num_heads=4,
            num_kv_heads=2,
            vocab_size=256,
            seq_len=64,
            tie_embeddings=False,
        ),
        # GPT-2-small-sized Llama block, multi-head attention.
        ModelConfig(
            name="bench-0.15b",
            num_layers=12,
            hidden_size=768,
            ffn_hidden_size=2048,
            num_heads=12,
            num_kv_heads=12,
            vocab_size=32000,
            seq_len=4096,
            tie_embeddings=False,
        ),
        # Grouped-query attention (4 key-value heads of 16).
        ModelConfig(
            name="bench-0.5b",
            num_layers=24,
            hidden_size=1024,
            ffn_hidden_size=4096,
            num_heads=16,
            num_kv_heads=4,
            vocab_size=32000,
            seq_len=4096,
            tie_embeddings=False,
        ),
        # The Playbook's two smallest models (tied embeddings).
        PRESETS["playbook-1.34b"],
        PRESETS["playbook-3.57b"],
    )
}
STANDARD_MODELS = ("bench-0.15b", "bench-0.5b", "playbook-1.34b", "playbook-3.57b")
STANDARD_SEQS = (1024, 2048, 4096)


def build_model(shape: ModelConfig, *, device: str, recompute: str) -> Any:
    """The model as a ``torch.nn.Module`` with fp32 parameters on ``device``; on a GPU its
    attention runs on the flash backend only, in the forward and in a recomputed forward."""

    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    hd = shape.attention_head_dim
    rep = shape.num_heads // shape.num_kv_heads
    flash = flash_only(device)

    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h, f = shape.hidden_size, shape.ffn_hidden_size
            self.attn_norm = nn.RMSNorm(h, eps=1e-5)
            self.wq = nn.Linear(h, shape.num_heads * hd, bias=False)
            self.wk = nn.Linear(h, shape.num_kv_heads * hd, bias=False)
            self.wv = nn.Linear(h, shape.num_kv_heads * hd, bias=False)
            self.wo = nn.Linear(shape.num_heads * hd, h, bias=False)
            self.mlp_norm = nn.RMSNorm(h, eps=1e-5)
            self.w1 = nn.Linear(h, f, bias=False)
            self.w3 = nn.Linear(h, f, bias=False)
            self.w2 = nn.Linear(f, h, bias=False)

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            y = self.attn_norm(x)
            q = self.wq(y).view(b, t, shape.num_heads, hd)
            k = self.wk(y).view(b, t, shape.num_kv_heads, hd)
            v = self.wv(y).view(b, t, shape.num_kv_heads, hd)
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            if rep > 1:
                k = k.repeat_interleave(rep, dim=2)
                v = v.repeat_interleave(rep, dim=2)
            with flash():
                o = F.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
                )
            x = x + self.wo(o.transpose(1, 2).reshape(b, t, -1))
            y = self.mlp_norm(x)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(shape.vocab_size, shape.hidden_size)
            self.blocks = nn.ModuleList(Block() for _ in range(shape.num_layers))
            self.norm = nn.RMSNorm(shape.hidden_size, eps=1e-5)
            self.head = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False)
            if shape.tie_embeddings:
                self.head.weight = self.embed.weight

        def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            pos = torch.arange(t, device=tokens.device, dtype=torch.float32)
            inv = 1.0 / (
                500000.0 ** (torch.arange(0, hd, 2, device=tokens.device, dtype=torch.float32) / hd)
            )
            ang = torch.outer(pos, inv)[None, :, None, :]
            cos, sin = ang.cos(), ang.sin()
            x = self.embed(tokens)
            for blk in self.blocks:
                if recompute == "full":
                    x = checkpoint(blk, x, cos, sin, use_reentrant=False)
                else:
                    x = blk(x, cos, sin)
            logits = self.head(self.norm(x))
            # in fp32, as torchtitan's loss casts it (what autocast does to cross_entropy)
            return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    with torch.device(device):
        return Decoder()


def param_count(shape: ModelConfig) -> int:
    """Parameters of :func:`build_model` (tied embeddings counted once)."""
    h, f, hd = shape.hidden_size, shape.ffn_hidden_size, shape.attention_head_dim
    layer = h * hd * (2 * shape.num_heads + 2 * shape.num_kv_heads) + 3 * h * f + 2 * h
    emb = shape.vocab_size * h * (1 if shape.tie_embeddings else 2)
    return shape.num_layers * layer + emb + h


def config_row(
    shape: ModelConfig,
    *,
    gpu: str,
    seq_len: int,
    mbs: int,
    grad_accum: int,
    recompute: str,
    mode: str = "autocast",
) -> dict[str, Any]:
    """The sweep table's configuration columns for one try (one GPU, no parallelism)."""
    model = replace(shape, seq_len=seq_len)
    framework, version, zero_stage = MODES[mode]
    return {
        **{f: getattr(model, f) for f in MODEL_FIELDS},
        "gpu": gpu,
        "gpus_per_node": 1,
        "num_nodes": 1,
        "dp": 1,
        "tp": 1,
        "pp": 1,
        "cp": 1,
        "ep": 1,
        "vpp": 1,
        "pp_schedule": "1f1b",
        "mbs": mbs,
        "grad_accum": grad_accum,
        "zero_stage": zero_stage,
        "recompute": recompute,
        "sequence_parallel": False,
        "dtype": "bf16",
        "framework": framework,
        "framework_version": version,
    }


def shard(model: Any, shape: ModelConfig, *, device: str, reshard_after_forward: bool) -> None:
    """FSDP2 over a mesh of this one rank, as torchtitan 0.2.2's ``apply_fsdp`` shards its
    Llama (``MixedPrecisionPolicy``: bf16 parameters, fp32 reduction): the embeddings, each
    block, the final norm with the output projection (never resharded after forward), the
    root. Tied embeddings stay with the root (one group holds the shared weight). Starts a
    one-rank process group (NCCL on a GPU, gloo on a CPU) if none is."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    cuda = device.startswith("cuda")
    if not dist.is_initialized():
        if cuda:
            index = torch.device(device).index
            torch.cuda.set_device(torch.cuda.current_device() if index is None else index)
        dist.init_process_group(
            "nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1
        )
    mesh = init_device_mesh("cuda" if cuda else "cpu", (1,))
    kw: dict[str, Any] = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
    }
    if not shape.tie_embeddings:
        fully_shard(model.embed, **kw, reshard_after_forward=reshard_after_forward)
    for block in model.blocks:
        fully_shard(block, **kw, reshard_after_forward=reshard_after_forward)
    if not shape.tie_embeddings:
        fully_shard([model.norm, model.head], **kw, reshard_after_forward=False)
    fully_shard(model, **kw)


@dataclass(frozen=True, kw_only=True)
class Settings:
    device: str
    mode: str = "autocast"
    grad_accum: int = 1
    warmup: int = 2
    steps: int = 3
    timeout_s: float = 300.0


def _free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def measure(
    shape: ModelConfig, *, seq_len: int, mbs: int, recompute: str, s: Settings
) -> dict[str, Any]:
    """Run one try; returns the outcome fields (raises ``torch.OutOfMemoryError`` on OOM)."""
    import torch

    cuda = s.device.startswith("cuda")
    model = build_model(shape, device=s.device, recompute=recompute)
    autocast = s.mode == "autocast"
    if not autocast:
        shard(model, shape, device=s.device, reshard_after_forward=MODES[s.mode][2] == 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    g = torch.Generator(device=s.device).manual_seed(0)
    data = torch.randint(
        shape.vocab_size, (s.grad_accum, mbs, seq_len + 1), device=s.device, generator=g
    )
    amp_device = "cuda" if cuda else "cpu"

    def step() -> None:
        for i in range(s.grad_accum):
            with torch.autocast(device_type=amp_device, dtype=torch.bfloat16, enabled=autocast):
                loss = model(data[i, :, :-1], data[i, :, 1:])
            (loss / s.grad_accum).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(s.warmup):
        step()
    sync()
    if cuda:
        try_alloc = torch.cuda.max_memory_allocated() / GIB
        try_reserved = torch.cuda.max_memory_reserved() / GIB
        torch.cuda.reset_peak_memory_stats()
    times: list[float] = []
    for _ in range(s.steps):
        t0 = time.perf_counter()
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        else:
            step()
            times.append(time.perf_counter() - t0)
    out: dict[str, Any] = {"step_times_s": times, "step_time_s": statistics.median(times)}
    out["tokens_per_s_per_gpu"] = s.grad_accum * mbs * seq_len / out["step_time_s"]
    if cuda:
        alloc = torch.cuda.max_memory_allocated() / GIB
        reserved = torch.cuda.max_memory_reserved() / GIB
        out.update(
            peak_mem_allocated_gib=alloc,
            peak_mem_reserved_gib=reserved,
            try_peak_mem_allocated_gib=max(alloc, try_alloc),
            try_peak_mem_reserved_gib=max(reserved, try_reserved),
        )
    return out


def run_case(
    shape: ModelConfig,
    *,
    gpu: str,
    seq_len: int,
    recompute: str,
    max_mbs: int,
    s: Settings,
    writer: JsonlWriter,
    fingerprint: Fingerprint,
    dog: Watchdog,
    deadline: float,
    on_timeout: list[Any],
) -> bool:
    """Doubling then bisection of the micro-batch for one case; False once the budget is spent
    (the case may then be unfinished). A try that fails otherwise than by running out of memory
    ends the case: its boundary is then unknown."""
    import torch

    fits: dict[int, bool] = {}

    def attempt(mbs: int) -> str:
        if time.monotonic() > deadline:
            return "budget"
        rec: dict[str, Any] = {
            "schema": RECORD_SCHEMA,
            "status": "ok",
            "message": "",
            "model_name": shape.name,
            "config": config_row(
                shape,
                gpu=gpu,
                seq_len=seq_len,
                mbs=mbs,
                grad_accum=s.grad_accum,
                recompute=recompute,
                mode=s.mode,
            ),
            "params": param_count(shape),
        }
        if s.device.startswith("cuda"):
            free, total = torch.cuda.mem_get_info()
            rec.update(device_memory_gib=total / GIB, free_at_start_gib=free / GIB)
        label = f"{shape.name} seq={seq_len} mbs={mbs} recompute={recompute} mode={s.mode}"
        dog.arm(label, s.timeout_s)

        def on_timeout_record() -> None:
            writer.write(
                {
                    **rec,
                    "status": "timeout",
                    "message": f"{label} did not finish within {s.timeout_s:g} s",
                    "fingerprint": fingerprint.to_dict(),
                }
            )

        on_timeout[0] = on_timeout_record
        oom_message = ""
        try:
            out = measure(shape, seq_len=seq_len, mbs=mbs, recompute=recompute, s=s)
        except torch.OutOfMemoryError as e:
            oom_message = str(e).splitlines()[0][:300]
            out = None
        except (RuntimeError, ValueError) as e:
            dog.disarm()
            writer.write(
                {
                    **rec,
                    "status": "error",
                    "message": f"{label}: {e}"[:500],
                    "fingerprint": fingerprint.to_dict(),
                }
            )
            _free_memory()
            print(f"error  {label}: {str(e)[:200]}", file=sys.stderr, flush=True)
            return "error"
        finally:
            dog.disarm()
        _free_memory()
        if out is None:
            writer.write(
                {
                    **rec,
                    "status": "oom",
                    "message": oom_message,
                    "fingerprint": fingerprint.to_dict(),
                }
            )
            print(f"oom    {label}", file=sys.stderr, flush=True)
            return "oom"
        writer.write({**rec, **out, "fingerprint": fingerprint.to_dict()})
        print(
            f"ok     {label}: {out['step_time_s'] * 1e3:.1f} ms/step, "
            f"{out.get('peak_mem_reserved_gib', math.nan):.2f} GiB reserved",
            file=sys.stderr,
            flush=True,
        )
        return "fit"

    mbs = 1
    while mbs <= max_mbs:
        r = attempt(mbs)
        if r in ("budget", "error"):
            return r == "error"
        fits[mbs] = r == "fit"
        if r == "oom":
            break
        mbs *= 2
    ok = [m for m, f in fits.items() if f]
    bad = [m for m, f in fits.items() if not f]
    if not ok or not bad:
        return True
    lo, hi = max(ok), min(bad)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        r = attempt(mid)
        if r in ("budget", "error"):
            return r == "error"
        lo, hi = (mid, hi) if r == "fit" else (lo, mid)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m microbench.train_step",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", default="-", help="JSON-lines file to append to (- = stdout)")
    ap.add_argument("--device", default="auto", help="auto (cuda if present), cpu, cuda:N")
    ap.add_argument(
        "--models",
        default=",".join(STANDARD_MODELS),
        help=f"comma-separated, among {', '.join(MODELS)}",
    )
    ap.add_argument("--seqs", default=",".join(map(str, STANDARD_SEQS)))
    ap.add_argument("--recompute", default="none,full", help="comma-separated: none, full")
    ap.add_argument(
        "--mode",
        default="autocast",
        choices=tuple(MODES),
        help="autocast: fp32 parameters under torch.autocast (torchtitan on one "
        "GPU); fsdp2: FSDP2 as torchtitan shards, bf16 parameters, ZeRO-3; "
        "fsdp2-no-reshard: the same, ZeRO-2",
    )
    ap.add_argument("--max-mbs", type=int, default=64)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument(
        "--budget-s", type=float, default=math.inf, help="start no try after this many seconds"
    )
    args = ap.parse_args(argv)

    import torch

    device = resolve_device(args.device)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"--models must be among {', '.join(MODELS)}, got {', '.join(unknown)}")
    recomputes = [r.strip() for r in args.recompute.split(",") if r.strip()]
    if not set(recomputes) <= {"none", "full"}:
        ap.error(f"--recompute must be none and/or full, got {args.recompute!r}")
    seqs = int_list(args.seqs)
    for name, v in (
        ("--max-mbs", args.max_mbs),
        ("--grad-accum", args.grad_accum),
        ("--steps", args.steps),
    ):
        if v < 1:
            ap.error(f"{name} must be >= 1, got {v}")
    gpu = (
        hardware_from_device_name(torch.cuda.get_device_name(device))
        if device.startswith("cuda")
        else "cpu"
    )
    s = Settings(
        device=device,
        mode=args.mode,
        grad_accum=args.grad_accum,
        warmup=args.warmup,
        steps=args.steps,
        timeout_s=args.timeout_s,
    )
    fingerprint = collect()
    writer = JsonlWriter(args.out)
    on_timeout: list[Any] = [lambda: None]  # the record of the try under way
    dog = Watchdog(lambda label, limit_s: on_timeout[0]())
    deadline = time.monotonic() + args.budget_s
    complete = True
    try:
        for recompute in recomputes:
            for name in models:
                for seq in seqs:
                    if not run_case(
                        MODELS[name],
                        gpu=gpu,
                        seq_len=seq,
                        recompute=recompute,
                        max_mbs=args.max_mbs,
                        s=s,
                        writer=writer,
                        fingerprint=fingerprint,
                        dog=dog,
                        deadline=deadline,
                        on_timeout=on_timeout,
                    ):
                        complete = False
                        break
                if not complete:
                    break
            if not complete:
                break
    finally:
        dog.close()
        writer.close()
    if not complete:
        print(
            f"stopped: the budget of {args.budget_s:g} s was spent; the records written so "
            "far are kept",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
