"""Build the three calibration profiles the package ships, from the public measurements and
the project's own.

    python -m training.profiles [--data-dir DIR] [--out-dir surrogate/data/profiles]

- ``H100-SXM-80GB.json``, "a healthy H100 fabric", the default for H100 predictions: GEMMs and
  intra-node collectives from XLA's sm_90 tables and nccl-tests on one DGX H100; the network
  from nccl-tests all-reduce over 2 GCP a3-mega nodes (one node count, so the fabric
  efficiency is held flat beyond it: the non-blocking ideal) and the datasheet NIC rate.
- ``hf-playbook-cluster.json``, "the Playbook's cluster as measured": the same GEMM and
  intra-node data plus the collective bandwidths every completed Playbook run measured at its
  start (1 to 64 nodes of 8 H100 on AWS EFA; ``surrogate.ingest.playbook_network``), whose
  whole-job all-reduce falls from about 340 GB/s busbw on 2 nodes to 13 GB/s on 64; beyond 64
  nodes, the law that best forecast held-out larger node counts.
- ``h100-own-measured.json``: the GEMMs this project measured on one H100 SXM
  (``datasets/h100/2026-11-23``), with the public intra-node collectives; the profile under
  which the project's own single-GPU training steps are explained (their ``profile`` column,
  ``surrogate.ingest.train_step.OWN_H100_PROFILE``).

Why the healthy fabric is the default: the Playbook cluster's collapse with scale is one
cluster's network (a user's is better described by their own nccl-tests or
``surrogate microbench`` runs, and the published large-scale runs of other clusters, such as
Llama 3's 16,384 H100s, are incompatible with it); the learned model is trained with each run
explained under its own cluster's profile, so the default profile does not bias it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from microbench.gemm import GRID_SIDES
from surrogate.calibration.calibrate import fit_profile
from surrogate.hardware.profile import CalibrationProfile
from surrogate.ingest.microbench_jsonl import parse_microbench_jsonl
from surrogate.ingest.nccl_tests import parse_nccl_tests
from surrogate.ingest.playbook_network import parse_playbook_network
from surrogate.ingest.xla_tables import parse_xla_table
from surrogate.io.datasource import data_dir as resolve_data_dir
from surrogate.runs.microbench_table import GEMM_OP

PROFILES_DIR = Path(__file__).resolve().parents[1] / "surrogate" / "data" / "profiles"
PLAYBOOK_PROFILE = "hf-playbook-cluster"
OWN_PROFILE = "h100-own-measured"
OWN_DATA = Path(__file__).resolve().parents[1] / "datasets" / "h100" / "2026-11-23"
OWN_GEMMS = OWN_DATA / "gemm.jsonl"
"""The project's own GEMM measurements on one H100 SXM (``datasets/h100/2026-11-23``)."""
OWN_ATTENTION = OWN_DATA / "attention.jsonl"
"""The project's own flash-attention measurements there: every H100 profile's attention."""
_PLAYBOOK_CSV = Path("sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv")
_NOTES_COMMON = (
    "GEMM: XLA default_matmul_perf_table.txtpb key sm_90 (openxla/xla @ dc660322), unbatched "
    "bf16 shapes m,n,k in 256..4096; efficiency = FLOP/s / 989.4e12 dense BF16 peak",
    "Intra-node collectives: XLA default_collective_perf_table.txtpb key sm_90, F32, "
    "1 KiB..2 GiB, one 8-GPU node split into concurrent groups of 2/4/8 (value = bytes / median "
    "runtime), plus nccl-tests all_reduce on one DGX H100 (8 GPUs, 8 B..16 GiB)",
    "Broadcast is not in the public data: its curves are extrapolated from all_reduce busbw",
    "Attention: this project's microbench.attention on one NVIDIA H100 80GB HBM3 (PyTorch "
    "SDPA's flash backend, FlashAttention-2; datasets/h100/2026-11-23/attention.jsonl)",
)


def _public_tables(root: Path, *, gcp: bool) -> list[pd.DataFrame]:
    mb = root / "microbench"
    frames = [parse_xla_table(p)[0] for p in sorted((mb / "xla").glob("*.txtpb"))]
    logs = sorted((mb / "nccl-tests").glob("*.log"))
    frames += [parse_nccl_tests(p)[0] for p in logs if gcp or "1node" in p.name]
    return frames


def _own_attention() -> pd.DataFrame:
    return parse_microbench_jsonl(OWN_ATTENTION)[0]


def healthy_profile(root: Path) -> CalibrationProfile:
    table = pd.concat([*_public_tables(root, gcp=True), _own_attention()], ignore_index=True)
    return fit_profile(
        table,
        "H100-SXM-80GB",
        name="H100-SXM-80GB healthy fabric (public XLA sm_90 + nccl-tests; our flash attention)",
        notes=(
            *_NOTES_COMMON,
            "Network: nccl-tests all_reduce over 16 GPUs on 2 GCP "
            "a3-megagpu-8g nodes (GPUDirect-TCPXO), the only public "
            "multi-node H100 measurement; one node count, so the fabric "
            "efficiency holds at every scale (non-blocking ideal)",
        ),
    )


def playbook_profile(root: Path) -> CalibrationProfile:
    network = parse_playbook_network(root / _PLAYBOOK_CSV)[0]
    table = pd.concat(
        [*_public_tables(root, gcp=False), network, _own_attention()], ignore_index=True
    )
    return fit_profile(
        table,
        "H100-SXM-80GB",
        name=f"{PLAYBOOK_PROFILE}: the Playbook's H100 + AWS EFA cluster as measured",
        notes=(
            *_NOTES_COMMON,
            "Network: the AllReduce / AllGather / ReduceScatter bandwidths "
            "(whole job and intra-node, 256 MiB, busbw) that nanotron "
            "measured at the start of every completed Ultra-Scale Playbook "
            "run, 1 to 64 nodes of 8x H100 on AWS EFA",
        ),
    )


def own_profile(root: Path) -> CalibrationProfile:
    gemms = parse_microbench_jsonl(OWN_GEMMS)[0]
    # The regular grid only: the preset models' shapes would multiply the curve's axes (its
    # table is the product of the distinct m, n and k), and they stay a held-out check of the
    # curve (benchmarks/h100_own.py).
    gemms = gemms[gemms[["m", "n", "k"]].isin(GRID_SIDES).all(axis=1)]
    public = pd.concat(_public_tables(root, gcp=False), ignore_index=True)
    table = pd.concat([gemms, public[public["op"] != GEMM_OP], _own_attention()], ignore_index=True)
    return fit_profile(
        table,
        "H100-SXM-80GB",
        name=f"{OWN_PROFILE}: GEMMs measured by this project on one H100 SXM",
        notes=(
            "GEMM: this project's microbench.gemm on one NVIDIA H100 80GB HBM3 "
            "(driver 580.159.04, CUDA 13.0, torch 2.11.0; "
            "datasets/h100/2026-11-23/gemm.jsonl), bf16 and fp8 "
            "(torch._scaled_mm), unbatched, the 6^3 grid of m, n, k in 256..8192 "
            "(the preset models' shapes, also measured, are left out of the fit "
            "as its check); efficiency = FLOP/s / dense peak",
            *_NOTES_COMMON[1:],
            "Network: none measured here (one GPU); the datasheet model",
        ),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--out-dir", type=Path, default=PROFILES_DIR)
    args = ap.parse_args()
    root = resolve_data_dir(args.data_dir)
    for name, build in (
        ("H100-SXM-80GB", healthy_profile),
        (PLAYBOOK_PROFILE, playbook_profile),
        (OWN_PROFILE, own_profile),
    ):
        prof = build(root)
        prof.save(args.out_dir / f"{name}.json")
        print(f"{name}: {prof.name}")
        if prof.fabric is not None:
            for cv in prof.fabric.curves.values():
                eff = ", ".join(
                    f"{n:g}: {e:.3f}" for n, e in zip(cv.nodes, cv.efficiency, strict=True)
                )
                print(
                    f"  {cv.op}: efficiency by nodes {eff}; beyond: {cv.law} "
                    f"{dict(sorted(cv.law_scores.items(), key=lambda kv: kv[1]))}"
                )


if __name__ == "__main__":
    main()
