"""How well the calibration fits the public H100 measurements: printed errors and a plot.

    python benchmarks/calibration_fit.py [--data-dir ../shared/data] [--plot FILE.png]

Fits the profile exactly as ``surrogate calibrate`` does from the XLA sm_90 tables and the
nccl-tests logs, then prints, per GEMM dtype and per collective curve and source:

- in-sample: the relative error |predicted - measured| / measured of every measured point
  (for collectives this shows how far the sources disagree: the curve goes through the
  median, and made monotone);
- hold-out: the same error at points left out of the fit (GEMMs: fit on sides 256, 1024,
  4096, predict every shape with a side of 512 or 2048; collectives: fit on every other
  size, predict the others): the error of using the profile between measured points.

The plot (matplotlib, the ``bench`` extra) shows GEMM efficiency predicted against measured
and each intra-/inter-node all_reduce curve as busbw against size with its points.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from surrogate.calibration.calibrate import fit_collective_curve, fit_gemm_curve, fit_profile
from surrogate.config.gpus import get_gpu
from surrogate.hardware.profile import CalibrationProfile
from surrogate.ingest.microbench_inputs import read_microbench_inputs

GPU = "H100-SXM-80GB"


def _inputs(data_dir: Path) -> list[Path]:
    mb = data_dir / "microbench"
    return [
        mb / "xla" / "default_matmul_perf_table.txtpb",
        mb / "xla" / "default_collective_perf_table.txtpb",
        *sorted((mb / "nccl-tests").glob("*.log")),
    ]


def _stats(err: np.ndarray) -> str:
    return (
        f"n={len(err):4d}  median {100 * np.median(err):6.1f}%  "
        f"p90 {100 * np.quantile(err, 0.9):6.1f}%  max {100 * np.max(err):7.1f}%"
    )


def gemm_errors(profile: CalibrationProfile, t: pd.DataFrame) -> list[str]:
    lines = []
    spec = get_gpu(GPU)
    for dtype, curve in profile.gemm.items():
        rows = t[(t["op"] == "gemm") & (t["dtype"] == dtype) & (t["batch"] == 1)]
        if curve.provenance != "measured" or rows.empty:
            lines.append(f"gemm {dtype:5s} {curve.provenance}: {curve.derived_from}")
            continue
        m, n, k = (rows[c].to_numpy() for c in ("m", "n", "k"))
        meas = rows["flops_per_s"].to_numpy() / spec.peak_flops(dtype)
        pred = curve(m, n, k)
        smooth = curve.smooth_efficiency(m, n, k)
        lines.append(f"gemm {dtype:5s} in-sample      {_stats(np.abs(pred - meas) / meas)}")
        lines.append(f"gemm {dtype:5s} smooth model   {_stats(np.abs(smooth - meas) / meas)}")
        train_sides = {256.0, 1024.0, 4096.0}
        train = rows[rows[["m", "n", "k"]].isin(train_sides).all(axis=1)]
        test = rows.drop(train.index)
        if len(train) and len(test):
            hold = fit_gemm_curve(train, dtype, spec.peak_flops(dtype))
            tm = test["flops_per_s"].to_numpy() / spec.peak_flops(dtype)
            tp = hold(*(test[c].to_numpy() for c in ("m", "n", "k")))
            lines.append(f"gemm {dtype:5s} hold-out      {_stats(np.abs(tp - tm) / tm)}")
    return lines


def collective_errors(profile: CalibrationProfile, t: pd.DataFrame) -> list[str]:
    lines = []
    coll = t[t["op"] != "gemm"]
    for cv in profile.collectives:
        if cv.provenance != "measured":
            continue
        rows = coll[
            (coll["op"] == cv.op)
            & (coll["group_size"] == cv.group_size)
            & ((coll["nodes"] > 1) == cv.inter_node)
        ]
        where = "inter" if cv.inter_node else "intra"
        for src, r in rows.groupby("source"):
            pred = cv(r["size_bytes"].to_numpy())
            err = np.abs(pred - r["time_s"].to_numpy()) / r["time_s"].to_numpy()
            lines.append(
                f"{cv.op:14s} g={cv.group_size:<3d}{where} {src:10s} in-sample {_stats(err)}"
            )
        sizes = np.sort(rows["size_bytes"].unique())
        train = rows[rows["size_bytes"].isin(sizes[::2])]
        test = rows[rows["size_bytes"].isin(sizes[1:-1:2])]
        if len(test):
            hold = fit_collective_curve(train, cv.op, cv.group_size, cv.inter_node)
            err = (
                np.abs(hold(test["size_bytes"].to_numpy()) - test["time_s"].to_numpy())
                / test["time_s"].to_numpy()
            )
            lines.append(
                f"{cv.op:14s} g={cv.group_size:<3d}{where} {'all':10s} hold-out  {_stats(err)}"
            )
    return lines


def plot(profile: CalibrationProfile, t: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = get_gpu(GPU)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 5))
    rows = t[(t["op"] == "gemm") & (t["dtype"] == "bf16") & (t["batch"] == 1)]
    meas = rows["flops_per_s"].to_numpy() / spec.peak_flops("bf16")
    curve = profile.gemm["bf16"]
    smooth = curve.smooth_efficiency(*(rows[c].to_numpy() for c in ("m", "n", "k")))
    a1.scatter(meas, smooth, s=8, label="smooth model (fills unmeasured cells)")
    a1.plot([0, 1], [0, 1], "k--", lw=0.8)
    a1.set(
        xlabel="measured efficiency (XLA sm_90, bf16)",
        ylabel="predicted efficiency",
        title="GEMM efficiency, fraction of the 989 TFLOP/s dense peak",
    )
    a1.legend()
    coll = t[(t["op"] == "all_reduce")]
    for cv in profile.collectives:
        if cv.op != "all_reduce" or cv.provenance != "measured":
            continue
        r = coll[(coll["group_size"] == cv.group_size) & ((coll["nodes"] > 1) == cv.inter_node)]
        s = np.geomspace(r["size_bytes"].min(), r["size_bytes"].max(), 200)
        label = f"g={cv.group_size} {'inter' if cv.inter_node else 'intra'}"
        line = a2.plot(s, s * 2 * (cv.group_size - 1) / cv.group_size / cv(s), label=label)[0]
        a2.scatter(r["size_bytes"], r["busbw_bytes_per_s"], s=6, color=line.get_color())
    a2.set(
        xscale="log",
        yscale="log",
        xlabel="size (bytes)",
        ylabel="busbw (B/s)",
        title="all_reduce: fitted curve and measured points",
    )
    a2.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default = Path(
        os.environ.get(
            "SURROGATE_DATA_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data"
        )
    )
    ap.add_argument("--data-dir", type=Path, default=default)
    ap.add_argument("--plot", type=Path, default=Path("benchmarks/calibration_fit.png"))
    args = ap.parse_args(argv)
    paths = _inputs(args.data_dir)
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"public data missing: {', '.join(missing)}", file=sys.stderr)
        return 2
    table, _ = read_microbench_inputs(list(paths))
    t = table[table["hardware"] == GPU]
    profile = fit_profile(table, GPU)
    print(f"calibration fit against the public {GPU} measurements (relative error)")
    for line in gemm_errors(profile, t) + collective_errors(profile, t):
        print(line)
    try:
        plot(profile, t, args.plot)
        print(f"plot: {args.plot}")
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no plot", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
