"""Fit a :class:`~surrogate.hardware.profile.CalibrationProfile` from a microbenchmark table.

What is used, and what is not (each exclusion is counted in the profile's ``excluded``):

- Rows of other hardware than the profile's GPU.
- GEMMs: unbatched (batch = 1; the analytic model asks unbatched shapes) in bf16 or fp8
  (f32 and others are not dtypes of the analytic model). Efficiency = FLOP/s / the GPU's dense
  peak for the dtype (``surrogate.config.gpus``). A dtype any of whose measurements exceeds that
  peak is physically impossible as labelled, so the whole series is suspect and left out
  (MANIFEST.md: XLA's sm_90 fp8 values); fp8 then uses the bf16 efficiencies, labelled
  ``extrapolated``.
- Collectives: every size, layout and in/out-of-place variant; a group spanning more than one
  node is inter-node. Per (op, group size, locality) the median time per size makes a measured
  curve, made non-decreasing in size by isotonic regression of log time. Then, in each
  locality that has data, every op of the analytic model gets a curve at
  every group size measured there, derived (``extrapolated``) where it was not measured:
  from the same op at the nearest group size with equal busbw, else from all_reduce at that
  group size with equal busbw. Inter-node send_recv is a single pair over one NIC, so its
  derived bandwidth is capped at the datasheet network rate per GPU (``hardware``).
- Attention: bf16 causal flash attention forward plus backward (``sdpa_causal_fwd_bwd``,
  ``microbench.attention``), as the profile's attention curve (``surrogate.hardware.profile``):
  query
  rows x heads = sequence x batch, keys = sequence, head width; efficiency = the full-count
  FLOP/s / the dense bf16 peak. Other attention variants (non-causal, forward only) and the
  memory-bound kernels are not used by the analytic model.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from surrogate.analytic.perf import COLLECTIVE_OPS, bus_factor
from surrogate.config.gpus import GPUSpec, canonical_gpu_name, get_gpu
from surrogate.errors import DataError
from surrogate.hardware.fabric import fit_fabric
from surrogate.hardware.profile import CalibrationProfile, CollectiveCurve, GemmCurve
from surrogate.runs.microbench_table import GEMM_OP, validate_microbench

GEMM_DTYPES = ("bf16", "fp8")
ATTENTION_OP = "sdpa_causal_fwd_bwd"
"""The attention measurement the analytic model uses (module doc)."""


@dataclass
class _Exclusions:
    counts: Counter[str]

    def add(self, reason: str, n: int) -> None:
        if n:
            self.counts[reason] += int(n)

    def as_list(self) -> tuple[dict[str, Any], ...]:
        return tuple({"reason": r, "rows": n} for r, n in self.counts.most_common())


def fit_smooth_gemm(
    m: np.ndarray, n: np.ndarray, k: np.ndarray, eff: np.ndarray
) -> tuple[float, float, float, float, float]:
    """Fit eff = e / (1 + c_m/m + c_n/n + c_k/k + c_0/(m n k)), c >= 0, on relative error.

    The c_0 term is a fixed launch cost (time = t0 + FLOPs / rate gives 1/eff = 1/e + const /
    (m n k)); c_m, c_n, c_k are the per-side losses of tiling (wave and tile quantisation,
    memory-bound thin shapes). 1/eff is linear in (1, 1/m, 1/n, 1/k, 1/(m n k)); rows are
    weighted by eff so that the residual is relative. Negative coefficients are dropped and the
    fit repeated (a tiny active set: the model must not fall as a side grows).
    """
    cols = [np.ones_like(m), 1 / m, 1 / n, 1 / k, 1 / (m * n * k)]
    active = [0, 1, 2, 3, 4]
    y = 1 / eff
    coef = np.zeros(5)
    while True:
        a = np.stack([cols[i] for i in active], axis=1) * eff[:, None]
        sol, *_ = np.linalg.lstsq(a, y * eff, rcond=None)
        neg = [i for i, v in zip(active, sol, strict=True) if i > 0 and v < 0]
        if not neg:
            coef[:] = 0
            coef[active] = sol
            break
        active = [i for i in active if i not in neg]
    if not coef[0] > 0:
        raise DataError("GEMM efficiencies too irregular to fit a positive peak efficiency")
    e = 1 / coef[0]
    return (
        float(e),
        float(coef[1] * e),
        float(coef[2] * e),
        float(coef[3] * e),
        float(coef[4] * e),
    )


def fit_gemm_curve(rows: pd.DataFrame, dtype: str, peak_flops: float) -> GemmCurve:
    """The grid curve of one dtype from GEMM rows (m, n, k, flops_per_s)."""
    eff_all = rows["flops_per_s"].to_numpy() / peak_flops
    df = pd.DataFrame(
        {
            "m": rows["m"].to_numpy(),
            "n": rows["n"].to_numpy(),
            "k": rows["k"].to_numpy(),
            "eff": eff_all,
        }
    )
    med = df.groupby(["m", "n", "k"], as_index=False)["eff"].median()
    smooth = fit_smooth_gemm(*(med[c].to_numpy(dtype=np.float64) for c in ("m", "n", "k", "eff")))
    axes = [np.sort(med[c].unique()).astype(np.float64) for c in ("m", "n", "k")]
    grid = np.empty(tuple(len(a) for a in axes))
    measured = np.zeros(grid.shape, dtype=bool)
    mm, nn, kk = np.meshgrid(*axes, indexing="ij")
    e, cm, cn, ck, c0 = smooth
    grid[:] = e / (1 + cm / mm + cn / nn + ck / kk + c0 / (mm * nn * kk))
    idx = [np.searchsorted(a, med[c].to_numpy()) for a, c in zip(axes, "mnk", strict=True)]
    grid[idx[0], idx[1], idx[2]] = med["eff"].to_numpy()
    measured[idx[0], idx[1], idx[2]] = True
    return GemmCurve(
        dtype=dtype,
        m_axis=axes[0],
        n_axis=axes[1],
        k_axis=axes[2],
        efficiency=grid,
        measured=measured,
        smooth=smooth,
        provenance="measured",
        points=len(rows),
    )


def fit_latency_bandwidth(sizes: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    """t = latency + size / algbw by least squares on relative error, both >= 0."""
    a = np.stack([np.ones_like(sizes), sizes], axis=1) / times[:, None]
    sol, *_ = np.linalg.lstsq(a, np.ones_like(times), rcond=None)
    lat, inv_bw = float(sol[0]), float(sol[1])
    if lat < 0:
        lat, inv_bw = 0.0, float(np.median(times / sizes))
    if inv_bw <= 0:
        return float(np.median(times)), float("inf")
    return lat, 1 / inv_bw


def isotonic_increasing(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares non-decreasing fit of ``y`` in its order (scikit-learn's
    pool-adjacent-violators ``IsotonicRegression``).

    Used on log time against size: unlike a running maximum, one slow outlier (nccl-tests'
    68 us at 32 B among 13-17 us neighbours) is averaged with its neighbours instead of
    raising every larger size.
    """
    from sklearn.isotonic import IsotonicRegression

    order = np.arange(len(y), dtype=np.float64)
    fit = IsotonicRegression(increasing=True).fit_transform(order, y, sample_weight=w)
    return np.asarray(fit, dtype=np.float64)


def fit_collective_curve(
    rows: pd.DataFrame, op: str, group_size: int, inter_node: bool
) -> CollectiveCurve:
    """A measured curve from collective rows of one (op, group size, locality)."""
    grouped = rows.groupby("size_bytes")["time_s"]
    med, count = grouped.median().sort_index(), grouped.size().sort_index()
    sizes = med.index.to_numpy(dtype=np.float64)
    times = np.exp(
        isotonic_increasing(
            np.log(med.to_numpy(dtype=np.float64)), count.to_numpy(dtype=np.float64)
        )
    )
    lat, bw = fit_latency_bandwidth(sizes, times)
    return CollectiveCurve(
        op=op,
        group_size=group_size,
        inter_node=inter_node,
        sizes_bytes=sizes,
        times_s=times,
        provenance="measured",
        points=len(rows),
        latency_s=lat,
        algbw_bytes_per_s=bw,
    )


def _derive(
    base: CollectiveCurve,
    op: str,
    group_size: int,
    why: str,
    cap_bw_bytes_per_s: float | None = None,
) -> CollectiveCurve:
    """``op`` at ``group_size`` with the bus bandwidth of ``base`` at each size."""
    factor = float(bus_factor(op, group_size) / bus_factor(base.op, base.group_size))
    times = base.times_s * factor
    if cap_bw_bytes_per_s is not None:
        times = np.maximum(times, base.sizes_bytes / cap_bw_bytes_per_s)
        why += f"; bandwidth capped at the datasheet network rate {cap_bw_bytes_per_s:.3g} B/s"
    times = np.maximum.accumulate(times)
    lat, bw = fit_latency_bandwidth(base.sizes_bytes, times)
    return CollectiveCurve(
        op=op,
        group_size=group_size,
        inter_node=base.inter_node,
        sizes_bytes=base.sizes_bytes.copy(),
        times_s=times,
        provenance="extrapolated",
        derived_from=why,
        points=0,
        latency_s=lat,
        algbw_bytes_per_s=bw,
    )


def _complete(curves: list[CollectiveCurve], gpu: str) -> list[CollectiveCurve]:
    """Add derived curves so that each locality with data covers every op (module doc)."""
    have = {(c.op, c.group_size, c.inter_node): c for c in curves}
    out = list(curves)
    for inter in sorted({c.inter_node for c in curves}):
        where = "inter-node" if inter else "intra-node"
        groups = sorted({c.group_size for c in curves if c.inter_node == inter})
        for op in COLLECTIVE_OPS:
            for g in [2] if op == "send_recv" else groups:
                if (op, g, inter) in have:
                    continue
                same = [c for c in curves if c.op == op and c.inter_node == inter]
                cap = (
                    get_gpu(gpu).inter_node_bw_bytes_per_s if inter and op == "send_recv" else None
                )
                if same:
                    base = min(same, key=lambda c: abs(math.log2(c.group_size) - math.log2(g)))
                    why = f"{where} {op} measured at group {base.group_size}, equal busbw"
                else:
                    ar = [c for c in curves if c.op == "all_reduce" and c.inter_node == inter]
                    if not ar:
                        continue
                    base = min(ar, key=lambda c: abs(math.log2(c.group_size) - math.log2(g)))
                    why = f"{where} all_reduce measured at group {base.group_size}, equal busbw"
                d = _derive(base, op, g, why, cap)
                have[(op, g, inter)] = d
                out.append(d)
    return sorted(out, key=lambda c: (c.inter_node, COLLECTIVE_OPS.index(c.op), c.group_size))


def _gemm_curves(
    gemm: pd.DataFrame,
    spec: GPUSpec,
    gpu: str,
    ex: _Exclusions,
    used: pd.Series,
    notes_out: list[str],
) -> dict[str, GemmCurve]:
    """The GEMM efficiency curve of each dtype from the GPU's GEMM rows (batch 1, bf16 or fp8;
    a series over the dense peak is excluded as suspect); fp8 takes bf16's where it has none.
    Exclusions, the rows used and notes are recorded in ``ex``, ``used`` and ``notes_out``."""
    ex.add(
        "GEMM batch > 1 (the analytic model asks unbatched shapes)", int((gemm["batch"] != 1).sum())
    )
    gemm = gemm[gemm["batch"] == 1]
    other = ~gemm["dtype"].isin(GEMM_DTYPES)
    for d, n in gemm.loc[other, "dtype"].value_counts().items():
        ex.add(f"GEMM dtype {d} (the analytic model uses bf16 and fp8)", int(n))
    curves: dict[str, GemmCurve] = {}
    for dtype in GEMM_DTYPES:
        rows = gemm[gemm["dtype"] == dtype]
        if rows.empty:
            continue
        peak = spec.peak_flops(dtype)
        over = rows["flops_per_s"] > peak
        if over.any():
            ex.add(
                f"GEMM {dtype}: suspect series, {int(over.sum())} of {len(rows)} points exceed "
                f"the dense peak {peak:.4g} FLOP/s (max {rows['flops_per_s'].max():.4g})",
                len(rows),
            )
            notes_out.append(
                f"GEMM {dtype} measurements excluded as suspect: some exceed the "
                f"{gpu} dense {dtype} peak"
            )
            continue
        curves[dtype] = fit_gemm_curve(rows, dtype, peak)
        used[rows.index] = True
    if "bf16" in curves and "fp8" not in curves:
        b = curves["bf16"]
        curves["fp8"] = GemmCurve(
            dtype="fp8",
            m_axis=b.m_axis,
            n_axis=b.n_axis,
            k_axis=b.k_axis,
            efficiency=b.efficiency,
            measured=np.zeros_like(b.measured),
            smooth=b.smooth,
            provenance="extrapolated",
            derived_from="no trusted fp8 measurement: the bf16 efficiency (fraction of the "
            "dense peak) is assumed, applied to the fp8 peak",
        )
    if not curves:
        notes_out.append("no GEMM measurement: GEMM efficiency is the datasheet default")
    return curves


def _attention_curve(
    t: pd.DataFrame, spec: GPUSpec, ex: _Exclusions, used: pd.Series, notes_out: list[str]
) -> GemmCurve | None:
    """The causal flash attention curve from the GPU's bf16 attention rows, None without any
    (or where a point exceeds the dense peak: a suspect series, excluded)."""
    attn = t[(t["op"] == ATTENTION_OP) & (t["dtype"] == "bf16")]
    attention = None
    if not attn.empty:
        peak = spec.peak_flops("bf16")
        if (attn["flops_per_s"] > peak).any():
            ex.add(
                f"attention: suspect series, some points exceed the dense bf16 peak {peak:.4g}",
                len(attn),
            )
        else:
            # query rows x heads, keys, head width (surrogate.hardware.profile's attention axes)
            axes = pd.DataFrame(
                {
                    "m": attn["m"] * attn["batch"],
                    "n": attn["m"],
                    "k": attn["k"],
                    "flops_per_s": attn["flops_per_s"],
                }
            )
            attention = replace(
                fit_gemm_curve(axes, "bf16", peak),
                derived_from=f"{ATTENTION_OP}: causal flash attention",
            )
            used[attn.index] = True
            notes_out.append(
                f"Attention: causal flash attention forward + backward ({ATTENTION_OP}, "
                f"{len(attn)} points, head widths "
                f"{', '.join(str(int(k)) for k in sorted(attn['k'].unique()))}, sequences "
                f"{int(attn['m'].min())}..{int(attn['m'].max())}), counted at the full FLOPs"
            )
    return attention


def fit_profile(
    table: pd.DataFrame, gpu: str, *, name: str | None = None, notes: tuple[str, ...] = ()
) -> CalibrationProfile:
    """Fit a profile for ``gpu`` from a microbenchmark table (see the module doc).

    Raises DataError if the table has no usable row for the GPU.
    """
    gpu = canonical_gpu_name(gpu)
    spec = get_gpu(gpu)
    t = validate_microbench(table)
    ex = _Exclusions(Counter())
    for hw, n in t.loc[t["hardware"] != gpu, "hardware"].value_counts().items():
        ex.add(f"hardware {hw} is not {gpu}", int(n))
    t = t[t["hardware"] == gpu]
    if t.empty:
        raise DataError(
            f"the microbenchmark table has no rows for hardware {gpu}; "
            f"it has {', '.join(sorted(set(table['hardware']))) or 'no rows'}"
        )
    used = pd.Series(False, index=t.index)

    notes_out = list(notes)
    curves = _gemm_curves(t[t["op"] == GEMM_OP], spec, gpu, ex, used, notes_out)
    attention = _attention_curve(t, spec, ex, used, notes_out)

    coll = t[t["op"].isin(COLLECTIVE_OPS)]
    measured: list[CollectiveCurve] = []
    keys = pd.DataFrame(
        {"op": coll["op"], "g": coll["group_size"].astype(int), "inter": coll["nodes"] > 1}
    )
    for key in keys.drop_duplicates().itertuples(index=False):
        op, g, inter = str(key[0]), int(key[1]), bool(key[2])
        sel = (keys["op"] == op) & (keys["g"] == g) & (keys["inter"] == inter)
        rows = coll[sel]
        measured.append(fit_collective_curve(rows, op, g, inter))
        used[rows.index] = True
    all_curves = _complete(measured, gpu)
    fabric = fit_fabric(coll, spec.inter_node_bw_bytes_per_s, spec.inter_node_latency_s)
    if fabric is not None:
        laws = "; ".join(
            f"{cv.op}: {len(cv.nodes)} node counts "
            f"({', '.join(f'{n:g}' for n in cv.nodes)}), beyond them law {cv.law}"
            + (
                " (chosen by held-out node counts: "
                + ", ".join(
                    f"{k} {v:.3f}" for k, v in sorted(cv.law_scores.items(), key=lambda kv: kv[1])
                )
                + ")"
                if cv.law_scores
                else " (fewer than 3 node counts: nothing to choose on)"
            )
            for cv in fabric.curves.values()
        )
        notes_out.append(
            "Inter-node collectives: time = latency + size x bus factor / (ranks per node x "
            f"{spec.inter_node_bw_bytes_per_s:.3g} B/s per NIC x fabric efficiency by node "
            f"count) (surrogate.hardware.fabric); {laws}; ops without a curve use all_reduce's"
        )
    elif not any(c.inter_node for c in all_curves):
        notes_out.append(
            "no inter-node measurement: inter-node collectives use the datasheet model"
        )
    notes_out.append(
        "group sizes without a curve use the nearest curve of the same op and locality with "
        "equal busbw; sizes beyond the largest measured keep its algbw; below the smallest, "
        "its time"
    )
    srcs = t[used].groupby(["source", "file", "run_id"]).size().reset_index(name="rows")
    sources = tuple(
        {
            "source": str(r["source"]),
            "file": str(r["file"]),
            "run_id": str(r["run_id"]),
            "rows": int(r["rows"]),
        }
        for r in srcs.to_dict("records")
    )
    return CalibrationProfile(
        name=name or f"{gpu} calibrated",
        gpu=gpu,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        gemm=curves,
        collectives=tuple(all_curves),
        sources=sources,
        excluded=ex.as_list(),
        notes=tuple(notes_out),
        fabric=fabric,
        attention=attention,
    )
