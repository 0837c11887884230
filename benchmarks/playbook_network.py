"""The Playbook sweep's per-run network measurements: counts, medians and bus-vs-alg evidence.

    python benchmarks/playbook_network.py [--data-dir DIR]

Prints: values read, ingested and skipped (with reasons); the median and 10th / 90th
percentiles of busbw per op, locality (whole job or one node) and node count; and the evidence
that the values are bus bandwidth (``surrogate/ingest/playbook_network.py`` explains it): the
intra-node medians read as algbw or busbw against the H100's NVLink bandwidth per direction
(``surrogate.config.gpus``), the nccl-tests DGX H100 8-GPU all-reduce and the XLA sm_90 8-GPU
tables at 256 MiB. ``tests/ingest/test_playbook_network.py`` asserts the counts and the fall of
the whole-job all-reduce with the node count.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd

from surrogate.analytic.perf import bus_factor
from surrogate.config.gpus import get_gpu
from surrogate.ingest.nccl_tests import parse_nccl_tests
from surrogate.ingest.playbook_network import (
    NETWORK_COLUMNS,
    SIZE_BYTES,
    parse_playbook_network,
)
from surrogate.ingest.xla_tables import parse_xla_table
from surrogate.io.datasource import data_dir

PLAYBOOK = "sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv"
NCCL_LOG = "microbench/nccl-tests/dgx_h100_1node_8gpu_all_reduce.log"
XLA_TABLE = "microbench/xla/default_collective_perf_table.txtpb"
OPS = ("all_reduce", "all_gather", "reduce_scatter")
GB = 1e9


def medians(df: pd.DataFrame) -> pd.DataFrame:
    """Median, 10th and 90th percentile of busbw (GB/s) per op, locality and run node count."""
    t = df.assign(
        locality=np.where(df["detail"].str.contains("Intra-node"), "intra-node", "whole-job"),
        run_nodes=df["group_size"].where(~df["detail"].str.contains("Intra-node")) / 8,
        busbw=df["busbw_bytes_per_s"] / GB,
    )
    # the run's node count of an intra-node row: that of its whole-job sibling
    t["run_nodes"] = t.groupby("run_id")["run_nodes"].transform("max")
    g = t.groupby(["op", "locality", "run_nodes"])["busbw"]
    out = pd.DataFrame({
        "runs": g.size(), "p10": g.quantile(0.1), "median": g.median(), "p90": g.quantile(0.9),
    }).reset_index()
    out["run_nodes"] = out["run_nodes"].astype(int)
    out["op"] = pd.Categorical(out["op"], OPS)
    return out.sort_values(["locality", "op", "run_nodes"], ascending=[False, True, True])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    root = data_dir(args.data_dir)
    path = root / PLAYBOOK
    df, report = parse_playbook_network(path)
    csv_rows = report.rows_read // len(NETWORK_COLUMNS)
    print(f"{path}\n{csv_rows} CSV rows x {len(NETWORK_COLUMNS)} network columns = "
          f"{report.rows_read} values; ingested {len(df)} rows, skipped {len(report.skips)}")
    for reason, n in report.reasons().most_common():
        print(f"  {n} x {reason}")

    table = medians(df)
    print("\nbusbw (GB/s) per op, locality and the run's node count (completed runs)")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.1f}"))

    print("\nbus or algorithm bandwidth? (intra-node columns, group of 8)")
    nvlink = get_gpu("H100-SXM-80GB").intra_node_bw_bytes_per_s / GB
    print(f"  H100 NVLink per direction: {nvlink:.0f} GB/s")
    intra = table[table["locality"] == "intra-node"]
    one = intra[intra["run_nodes"] == 1].set_index("op")["median"]
    multi = df[df["detail"].str.contains("Intra-node") & ~df["run_id"].isin(
        df.loc[(df["group_size"] == 8) & ~df["detail"].str.contains("Intra-node"), "run_id"])]
    multi_med = multi.groupby("op")["busbw_bytes_per_s"].median() / GB
    for op in OPS:
        f = float(bus_factor(op, 8))
        for label, v in (("1-node runs", one[op]), ("multi-node runs", multi_med[op])):
            print(f"  {op:<14} {label:<15} median {v:6.1f}: as busbw {v:6.1f}, "
                  f"as algbw busbw = {v:.1f} x {f:.3f} = {v * f:6.1f}"
                  f"{'  > NVLink' if v * f > nvlink else ''}")

    nccl, _ = parse_nccl_tests(root / NCCL_LOG)
    at = nccl[nccl["size_bytes"] == SIZE_BYTES]
    half = nccl[nccl["size_bytes"] == SIZE_BYTES // 2]
    big = nccl[nccl["size_bytes"] >= 2**30]
    bus_at = at["busbw_bytes_per_s"].mean() / GB
    print(f"  nccl-tests DGX H100 all_reduce, 8 GPUs, 256 MiB: busbw {bus_at:.1f}, algbw "
          f"{at['algbw_bytes_per_s'].mean() / GB:.1f} GB/s (>= 1 GiB: busbw "
          f"{big['busbw_bytes_per_s'].min() / GB:.0f}-{big['busbw_bytes_per_s'].max() / GB:.0f})")
    bus_half = half["busbw_bytes_per_s"].mean() / GB
    doublings = math.log2(SIZE_BYTES / 256e6)
    print(f"  MiB vs MB: busbw {bus_half:.1f} at 128 MiB, {bus_at:.1f} at 256 MiB; 256e6 B is "
          f"{doublings:.3f} of a doubling smaller: about {(bus_at - bus_half) * doublings:.1f} "
          f"GB/s ({(bus_at - bus_half) * doublings / bus_at:.2%}) lower")

    xla, _ = parse_xla_table(root / XLA_TABLE)
    x = xla[(xla["hardware"] == "H100-SXM-80GB") & (xla["group_size"] == 8)
            & (xla["size_bytes"] == SIZE_BYTES) & xla["op"].isin(OPS)]
    x = x.groupby("op")[["algbw_bytes_per_s", "busbw_bytes_per_s"]].median() / GB
    for op in OPS:
        print(f"  XLA sm_90 {op:<14} 8 GPUs, 256 MiB: busbw {x.loc[op, 'busbw_bytes_per_s']:.1f}, "
              f"algbw {x.loc[op, 'algbw_bytes_per_s']:.1f} GB/s")
    # all_reduce is busbw; time = size x bus factor / busbw, or size / algbw
    ratio = one["all_gather"] / one["all_reduce"]
    f_ar, f_ag = float(bus_factor("all_reduce", 8)), float(bus_factor("all_gather", 8))
    xla_ratio = x.loc["all_reduce", "algbw_bytes_per_s"] / x.loc["all_gather", "algbw_bytes_per_s"]
    print(f"  time of a 256 MiB all_gather / all_reduce (1-node medians, all_gather value = "
          f"{ratio:.3f} x all_reduce value): all_gather as busbw {f_ag / f_ar / ratio:.3f}, "
          f"as algbw {1 / (f_ar * ratio):.3f}; XLA sm_90 {xla_ratio:.3f}")


if __name__ == "__main__":
    main()
