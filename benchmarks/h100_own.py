"""The project's own H100 measurements (``datasets/h100/``) against the models.

    python benchmarks/h100_own.py

Prints, all from measurements of one NVIDIA H100 80GB HBM3 (fingerprint in ``env.txt`` there):

1. GEMMs: the time the public profile (``H100-SXM-80GB``: XLA's sm_90 tables) predicts over the
   measured time, per dtype, on the grid shapes and on the preset models' layer shapes; and the
   same for ``h100-own-measured`` (fitted on the grid only, so the preset shapes are held out).
2. Flash attention (torch SDPA, flash backend): its throughput as a share of the dense peak
   under the analytic model's FLOP count, causal or not, the causal kernel's time over the
   full one, and the GEMM proxy (a T x s x head_dim GEMM of the public profile). The causal
   column is the attention curve of every shipped H100 profile, which times the attention
   core of frameworks running FlashAttention-2-class kernels; the proxy times the others
   (llm-foundry's unmeasured kernels).
3. Memory-bound kernels: achieved bandwidth over the HBM datasheet rate.
4. Single-GPU training steps (``microbench.train_step``, framework ``pytorch/autocast``):
   - the analytic model with its parameters fitted on the other models only (leave one
     model out, ``surrogate.calibration.fit_params.fit_runs``): peak reserved memory MAPE, step-time
     MAPE, OOM recall and precision, and the share of (model, sequence, recomputation)
     cases whose largest fitting micro-batch it predicts exactly (both tries at the measured
     boundary, the largest that fit and the smallest that did not, classified right; the
     predicted memory grows with the micro-batch, so that makes the predicted boundary
     exact);
   - the same figures in-sample with the shipped parameters, with the bundled learned model
     (the framework is outside its data, so it keeps the analytic answer) and, for
     reference, the analytic model with the priors (no fit for this framework).
5. Real torchtitan 0.2.2 runs (``datasets/h100/2026-11-24/torchtitan``), launched from the
   files ``surrogate.loop.launch`` writes: the same figures per kind of run (dense, MoE,
   per-operator selective recomputation), under the parameter set torchtitan's autocast
   layouts take (``pytorch/autocast``, fitted on section 4's runs alone), under torchtitan's
   priors, and with the bundled learned model.
6. The same training steps under FSDP2 as torchtitan shards its Llama, over a mesh of one rank
   (``microbench.train_step --mode fsdp2``, ZeRO-3, and ``fsdp2-no-reshard``, ZeRO-2;
   ``datasets/h100/2026-11-24/fsdp2``), framework ``pytorch-fsdp2/bf16``, whose set
   torchtitan's layouts under FSDP alone take: section 4's figures (the priors, torchtitan's
   own set, are what those layouts took before), the same runs under section 4's autocast
   set, and the measured step time of FSDP2 over autocast on the same cases.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from microbench.attention import TOKENS_PER_HEAD
from microbench.gemm import GRID_SIDES
from surrogate.config.gpus import GIB, get_gpu
from surrogate.config.table import validate_table
from surrogate.config.training import CONFIG_COLUMNS
from surrogate.hardware.profile import load_profile
from surrogate.ingest.dispatch import read_runs
from surrogate.ingest.microbench_jsonl import parse_microbench_jsonl

DATA = Path(__file__).resolve().parents[1] / "datasets" / "h100" / "2026-11-23"
GPU = "H100-SXM-80GB"


def _stats(ratio: np.ndarray) -> str:
    return (
        f"median {np.median(ratio):.3f}, MAPE {np.mean(np.abs(ratio - 1)):.1%}, "
        f"range {ratio.min():.2f}-{ratio.max():.2f}"
    )


def gemm_report() -> None:
    t = parse_microbench_jsonl(DATA / "gemm.jsonl")[0]
    spec = get_gpu(GPU)
    grid = t[["m", "n", "k"]].isin(GRID_SIDES).all(axis=1)
    print("1. GEMMs: predicted time / measured time (ratio < 1: the profile is too fast)")
    for name in (GPU, "h100-own-measured"):
        prof = load_profile(name)
        for dtype in ("bf16", "fp8"):
            for label, sel in (("grid", grid), ("preset shapes", ~grid)):
                rows = t[sel & (t["dtype"] == dtype)]
                eff = prof.gemm[dtype](
                    rows["m"].to_numpy(), rows["n"].to_numpy(), rows["k"].to_numpy()
                )
                pred = 2 * rows["m"] * rows["n"] * rows["k"] / (spec.peak_flops(dtype) * eff)
                ratio = (pred / rows["time_s"]).to_numpy()
                prov = prof.gemm[dtype].provenance
                print(f"   {name:18s} {dtype} ({prov}) {label:13s} {len(rows):4d}: {_stats(ratio)}")
    for dtype in ("bf16", "fp8"):
        rows = t[t["dtype"] == dtype]
        eff = rows["flops_per_s"] / spec.peak_flops(dtype)
        print(
            f"   measured {dtype} efficiency over the dense peak: median {eff.median():.3f}, "
            f"max {eff.max():.3f}"
        )


def attention_report() -> None:
    t = parse_microbench_jsonl(DATA / "attention.jsonl")[0]
    public = load_profile(GPU)
    peak = get_gpu(GPU).peak_flops("bf16")
    full = t[t["op"] == "sdpa_fwd_bwd"].set_index(["m", "k", "batch"])
    causal = t[t["op"] == "sdpa_causal_fwd_bwd"].set_index(["m", "k", "batch"])
    print(
        "\n2. Flash attention, forward + backward (torch SDPA flash backend, bf16); efficiency "
        "= the analytic count (12 T s h, no causal discount) / time / dense peak"
    )
    print(
        f"   {'seq':>6} {'hd':>4} {'heads':>5} {'full':>6} {'causal':>7} {'causal/full time':>17}"
        f" {'proxy (GEMM T x s x hd)':>24}"
    )
    for (s, d, b), row in full.iterrows():
        c = causal.loc[(s, d, b)]
        seqs = max(1, TOKENS_PER_HEAD // int(s))
        tokens, heads = seqs * int(s), int(b) // seqs
        model = float(public.gemm["bf16"](np.array([tokens]), np.array([s]), np.array([d]))[0])
        print(
            f"   {int(s):6d} {int(d):4d} {heads:5d} {row['flops_per_s'] / peak:6.3f} "
            f"{c['flops_per_s'] / peak:7.3f} {c['time_s'] / row['time_s']:17.3f} {model:24.3f}"
        )


def membound_report() -> None:
    t = parse_microbench_jsonl(DATA / "membound.jsonl")[0]
    hbm = get_gpu(GPU).hbm_bw_bytes_per_s
    print(f"\n3. Memory-bound kernels: achieved bandwidth / HBM datasheet ({hbm / 1e12:.2f} TB/s)")
    for op, rows in t.groupby("op", sort=False):
        share = rows["algbw_bytes_per_s"] / hbm
        print(
            f"   {op:22s} {len(rows):2d} shapes: median {share.median():.3f}, "
            f"range {share.min():.3f}-{share.max():.3f}"
        )


FSDP2 = DATA.parent / "2026-11-24" / "fsdp2"


def load_steps(files: list[Path] | None = None) -> pd.DataFrame:
    """The single-GPU training steps of ``files`` (default: section 4's, pytorch/autocast)."""
    paths = sorted(DATA.glob("train_steps_*.jsonl")) if files is None else files
    return pd.concat([read_runs(p) for p in paths], ignore_index=True)


def step_figures(
    runs: pd.DataFrame, reserved: np.ndarray, step_s: np.ndarray, p_oom: np.ndarray
) -> str:
    done = (runs["status"] == "completed").to_numpy()
    meas_mem = runs["peak_mem_reserved_gib"].to_numpy(float) * GIB
    tokens = (runs["grad_accum"] * runs["mbs"] * runs["seq_len"]).to_numpy(float)
    meas_step = tokens / runs["tokens_per_s_per_gpu"].to_numpy(float)
    mem = np.mean(np.abs(reserved[done] / meas_mem[done] - 1))
    time = np.abs(step_s[done] / meas_step[done] - 1)
    oom = (runs["status"] == "oom").to_numpy()
    said = p_oom > 0.5
    judged = done | oom
    recall = (said & oom).sum() / max(oom.sum(), 1)
    precision = (said & oom).sum() / max((said & judged).sum(), 1)
    exact, cases = boundary_exact(runs, said)
    return (
        f"memory MAPE {mem:.1%}; step time MAPE {time.mean():.1%} "
        f"(median {np.median(time):.1%}, within 10% {np.mean(time <= 0.10):.0%}); "
        f"OOM recall {recall:.1%} precision {precision:.1%}; "
        f"largest micro-batch exact in {exact}/{cases} cases"
    )


def boundary_exact(runs: pd.DataFrame, said_oom: np.ndarray) -> tuple[int, int]:
    """Cases (model, seq, recompute, grad_accum) with a measured boundary (largest fitting
    micro-batch L and an OOM at L + 1), and how many of them the prediction gets exactly."""
    exact = cases = 0
    keys = ["model_name", "seq_len", "recompute", "grad_accum"]
    for _, g in runs.assign(said=said_oom).groupby(keys):
        ok = g[g["status"] == "completed"]
        if ok.empty:
            continue
        top = int(ok["mbs"].max())
        above = g[(g["status"] == "oom") & (g["mbs"] == top + 1)]
        if above.empty:
            continue
        cases += 1
        at = ok[ok["mbs"] == top]
        exact += int((~at["said"]).all() and above["said"].all())
    return exact, cases


def steps_report(
    section: str = "4", files: list[Path] | None = None, framework: str = "pytorch/autocast"
) -> pd.DataFrame:
    """Prints the figures of the steps of ``files``; returns their runs."""
    from surrogate.calibration.fit_params import fit_runs, held_out_p_oom
    from surrogate.prediction.predict import resolve_model
    from surrogate.prediction.scoring import score

    runs = load_steps(files)
    n_ok = int((runs["status"] == "completed").sum())
    print(
        f"\n{section}. Single-GPU training steps: {len(runs)} tries ({n_ok} completed, "
        f"{int((runs['status'] == 'oom').sum())} out of memory) of "
        f"{runs['model_name'].nunique()} models, framework {framework}"
    )
    result = fit_runs(runs, group_by="model_name")
    held = result["held_out"]
    print(
        "   analytic, fitted leaving the run's model out: "
        + step_figures(
            runs, held["reserved_bytes"], held["step_time_s"], held_out_p_oom(runs, held)
        )
    )
    table = validate_table(runs[list(CONFIG_COLUMNS)]).table
    for label, model in (
        ("analytic, shipped fit (in-sample)", None),
        ("learned (bundled model)", resolve_model("default")),
    ):
        s = score(table, model=model, profile="h100-own-measured")
        print(
            f"   {label}: "
            + step_figures(
                runs,
                s.columns["pred_peak_mem_reserved_gib"] * GIB,
                s.columns["pred_step_time_s"],
                s.columns["p_oom"],
            )
        )
    # The priors: every parameter as if nothing had been fitted for this framework.
    from surrogate.analytic.params import PRIORS

    prior = {f"p_{name}": np.full(len(runs), value) for name, value in PRIORS.items()}
    s = score(table, profile="h100-own-measured", extra=prior)
    print(
        "   analytic, priors (no fit): "
        + step_figures(
            runs,
            s.columns["pred_peak_mem_reserved_gib"] * GIB,
            s.columns["pred_step_time_s"],
            s.columns["p_oom"],
        )
    )
    return runs


TORCHTITAN = DATA.parent / "2026-11-24" / "torchtitan"


def _ratios(pred: np.ndarray, meas: np.ndarray) -> str:
    r = pred / meas
    return (
        f"MAPE {np.mean(np.abs(r - 1)):5.1%}, median predicted / measured "
        f"{np.median(r):.2f}, range {r.min():.2f}-{r.max():.2f}"
    )


def torchtitan_report() -> None:
    """5. Real torchtitan 0.2.2 runs (``microbench/torchtitan_runs.py``) against the models:
    under the parameter set they take (``pytorch/autocast``'s, fitted on section 4's runs
    only, so these are held out) and under torchtitan's priors (no fit), by kind of run."""
    from microbench.torchtitan_runs import read_run_dirs
    from surrogate.analytic.params import PRIORS
    from surrogate.prediction.predict import resolve_model
    from surrogate.prediction.scoring import score

    runs, _ = read_run_dirs(TORCHTITAN)
    done = (runs["status"] == "completed").to_numpy()
    print(
        f"\n5. torchtitan 0.2.2 on one H100: {len(runs)} runs ({int(done.sum())} completed, "
        f"{int((~done).sum())} out of memory) of {runs['model_name'].nunique()} models, "
        "launch files of surrogate.loop.launch; predicted / measured step time and peak reserved "
        "memory over the completed runs"
    )
    table = validate_table(runs[list(CONFIG_COLUMNS)]).table
    tokens = (runs["grad_accum"] * runs["mbs"] * runs["seq_len"]).to_numpy(float)
    step = tokens / runs["tokens_per_s_per_gpu"].to_numpy(float)
    mem = runs["peak_mem_reserved_gib"].to_numpy(float)
    moe = (runs["num_experts"] > 0).to_numpy()
    selective = (runs["recompute"] == "selective").to_numpy()
    kinds = (
        ("dense, none/full recompute", done & ~moe & ~selective),
        ("MoE, none/full recompute  ", done & moe & ~selective),
        ("selective (per operator)  ", done & selective),
    )
    prior = {f"p_{name}": np.full(len(runs), value) for name, value in PRIORS.items()}
    for label, kw in (
        ("analytic, the set it takes (pytorch/autocast; held out)", {}),
        ("analytic, torchtitan's priors (no fit)", {"extra": prior}),
        ("learned (bundled model)", {"model": resolve_model("default")}),
    ):
        sc = score(table, profile="h100-own-measured", **kw)
        p_step = sc.columns["pred_step_time_s"]
        p_mem = sc.columns["pred_peak_mem_reserved_gib"]
        said = sc.columns["p_oom"] > 0.5
        oom = ~done
        print(
            f"   {label}: OOM said for {int((said & oom).sum())} of {int(oom.sum())} "
            f"out-of-memory runs and {int((said & done).sum())} of {int(done.sum())} "
            "completed ones"
        )
        for kind, sel in kinds:
            print(
                f"     {kind} ({int(sel.sum()):2d}) step time {_ratios(p_step[sel], step[sel])}; "
                f"memory {_ratios(p_mem[sel], mem[sel])}"
            )


def fsdp2_report(autocast_runs: pd.DataFrame) -> None:
    """6. The same steps under FSDP2 as torchtitan shards (``--mode fsdp2`` and
    ``fsdp2-no-reshard``), framework ``pytorch-fsdp2/bf16``, whose set torchtitan's layouts
    under FSDP alone take (its "priors" line is what those layouts took before: torchtitan's
    set is its priors); then the same runs under the autocast set of section 4, whose runs
    are ``autocast_runs``."""
    from surrogate.analytic.params import PRIORS
    from surrogate.calibration.parameter_files import shipped_parameter_sets
    from surrogate.prediction.scoring import score

    files = sorted(FSDP2.glob("train_steps_fsdp2_*.jsonl"))
    runs = steps_report("6", files, "pytorch-fsdp2/bf16 (FSDP2 over one rank)")
    table = validate_table(runs[list(CONFIG_COLUMNS)]).table
    autocast = shipped_parameter_sets().sets["pytorch/autocast"]["values"]
    extra = {f"p_{name}": np.full(len(runs), autocast[name]) for name in PRIORS}
    s = score(table, profile="h100-own-measured", extra=extra)
    print(
        "   analytic, pytorch/autocast's set (section 4's): "
        + step_figures(
            runs,
            s.columns["pred_peak_mem_reserved_gib"] * GIB,
            s.columns["pred_step_time_s"],
            s.columns["p_oom"],
        )
    )
    done = runs[runs["status"] == "completed"]
    ratio = done.merge(
        autocast_runs[autocast_runs["status"] == "completed"],
        on=["model_name", "seq_len", "recompute", "mbs", "grad_accum"],
        suffixes=("", "_autocast"),
    )
    ratio = ratio[ratio["zero_stage"] == 3]
    r = ratio["tokens_per_s_per_gpu_autocast"] / ratio["tokens_per_s_per_gpu"]
    small = (ratio["mbs"] <= 2).to_numpy()
    print(
        f"   measured step time, FSDP2 (ZeRO-3) / autocast, same model, sequence, "
        f"recomputation and micro-batch ({len(ratio)} pairs): micro-batch <= 2 median "
        f"{np.median(r[small]):.2f} (range {r[small].min():.2f}-{r[small].max():.2f}); "
        f"above, median {np.median(r[~small]):.2f} "
        f"(range {r[~small].min():.2f}-{r[~small].max():.2f})"
    )


def main() -> None:
    gemm_report()
    attention_report()
    membound_report()
    autocast_runs = steps_report()
    torchtitan_report()
    fsdp2_report(autocast_runs)


if __name__ == "__main__":
    main()
