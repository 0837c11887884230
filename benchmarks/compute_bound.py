"""Does any measured run beat the MFU its GEMMs alone allow?

    python benchmarks/compute_bound.py

The compute-only MFU of a run is its analytic MFU with the step reduced to the compute term:
every GEMM at the calibration profile's measured efficiency for its shape, attention at the
measured flash-attention throughput, no communication, memory-bound kernel, bubble or
overhead. It takes ``gemm_time_scale`` at 1 (the profile's speed, not a framework's fitted
slowdown). A bound on MFU would need every measured run at or under it. Per data set (the
Playbook's completed runs, MosaicML's MPT tables per GPU, our own H100 steps), this prints the
runs, the largest and the 99th percentile of measured / compute-only MFU, and the runs above 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from accuracy import mpt_runs
from h100_own import FSDP2, load_steps

from surrogate.clusters import playbook_runs
from surrogate.fit_params import blocks_for_runs, predicted_breakdown, values_in_use


def compute_only_mfu(runs: pd.DataFrame) -> np.ndarray:
    """Per run, the analytic MFU if the step took its compute term alone, at the profile's
    measured GEMM speed (``gemm_time_scale`` = 1)."""
    out = np.full(len(runs), np.nan)
    blocks, rows = blocks_for_runs(runs)
    for block, idx in zip(blocks, rows, strict=True):
        values = {**values_in_use(block), "gemm_time_scale": 1.0}
        b = predicted_breakdown(block, values)
        out[idx] = b["mfu"] * b["step_time_s"] / b["compute"]
    return out


def ratios(runs: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Measured / compute-only MFU of the completed runs: runs, max, 99th percentile, above 1
    (over all and per value of ``by``)."""
    done = runs[runs["status"] == "completed"].reset_index(drop=True)
    ratio = pd.Series(done["mfu"].to_numpy(float) / compute_only_mfu(done))
    groups = [("all", ratio)]
    if by is not None:
        groups += [(str(k), ratio[part.index]) for k, part in done.groupby(by)]
    return pd.DataFrame([{"runs": int(r.notna().sum()), "max": r.max(),
                          "q99": r.quantile(0.99), "above 1": int((r > 1).sum())}
                         for _, r in groups], index=[name for name, _ in groups])


def own_steps() -> pd.DataFrame:
    """Our single-GPU H100 steps: autocast (``h100_own`` section 4) and FSDP2 (section 6)."""
    return pd.concat([load_steps(), load_steps(sorted(FSDP2.glob("train_steps_fsdp2_*.jsonl")))],
                     ignore_index=True)


def main() -> None:
    for title, runs, by in (("Playbook (nanotron, H100)", playbook_runs(), None),
                            ("MPT (llm-foundry), per GPU", mpt_runs(None), "gpu"),
                            ("our H100 steps, per framework", own_steps(), "framework")):
        print(f"\n{title}: measured / compute-only MFU")
        print(ratios(runs, by).round(3).to_string())


if __name__ == "__main__":
    main()
