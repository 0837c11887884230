"""Check the ingested Playbook table against its source and print the figures.

    python benchmarks/playbook_ingest.py [--data-dir DIR]

Prints: rows read, ingested and skipped (with reasons); the status mapping; the MFU agreement
(ours vs the source's ``mfu`` column, and why they differ); the evidence that the memory
columns are GiB; what ``Mem Alloc (GB)`` holds (allocated after the step, not a peak), as bytes
per parameter. The same checks are asserted by ``tests/ingest/test_playbook.py``.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from surrogate.analytic.flops import total_params
from surrogate.analytic.inputs import to_cols
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.gpus import GIB
from surrogate.config.training import CONFIG_COLUMNS, config_from_flat
from surrogate.ingest.playbook import parse_playbook
from surrogate.io.datasource import data_dir

SOURCE_PEAK_FLOPS = 989e12


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    path = data_dir(args.data_dir) / "sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv"
    src = pd.read_csv(path)
    df, report = parse_playbook(path)
    print(f"{path}\n{report.summary(max_lines=0)}")
    print(f"ingested {len(df)} runs; {src['job_id'].nunique()} distinct job_ids in "
          f"{len(src)} source rows ({src['job_id'].duplicated().sum()} rows repeat a job_id)")
    src["run_id"] = src["job_id"].astype(str) + "/" + src["name"]
    m = df.merge(src, on="run_id", suffixes=("", "_src"))
    print("\nstatus mapping (source -> ours):")
    print(pd.crosstab(m["status_src"], m["status"]).to_string())

    done = m[m["status"] == "completed"]
    cols = to_cols([config_from_flat(r) for r in done[list(CONFIG_COLUMNS)].to_dict("records")],
                   shipped_parameter_sets())
    n_ours = total_params(cols)
    n_src = done["Total Params Numeric"].to_numpy() * 1e9
    attn = (12 * done["num_layers"] * done["hidden_size"] * done["seq_len"]).to_numpy()
    reported = done["mfu_src"].to_numpy() / 100
    ours = done["mfu"].to_numpy()
    rel = ours / reported - 1
    src_formula = done["tok/s/gpu"].to_numpy() * (6 * n_src + attn) / SOURCE_PEAK_FLOPS
    print(f"\nMFU over {len(done)} completed runs")
    print(f"  source formula (rounded Total Params, 989e12) vs its mfu column: max rel err "
          f"{np.max(np.abs(src_formula / reported - 1)):.1e}")
    rounded = np.array([float(f"{n / 1e9:.3g}") for n in n_ours]) * 1e9
    coincide = np.isclose(n_src, rounded, rtol=0, atol=1.0)
    tied_pp = (done["tie_embeddings"] & (done["pp"] > 1)).to_numpy()
    other = ~coincide & ~tied_pp
    adjusted = ours * (6 * rounded + attn) / (6 * n_ours + attn) * 989.4e12 / SOURCE_PEAK_FLOPS
    print(f"  coincide (source N = ours to 3 significant digits): {coincide.sum()} runs, "
          f"ours/reported - 1 in [{rel[coincide].min():+.2e}, {rel[coincide].max():+.2e}]; "
          f"after undoing the rounding and 989 vs 989.4 TFLOP/s: max rel err "
          f"{np.max(np.abs(adjusted[coincide] / reported[coincide] - 1)):.1e}")
    for label, mask in (("tied model, pp > 1 (embedding counted twice)", tied_pp),
                        ("other (source N above ours, all tp >= 16)", other)):
        sub = done[mask]
        tps = sorted(int(t) for t in sub["tp"].unique())
        print(f"  {label}: {mask.sum()} runs, ours/reported - 1 in "
              f"[{rel[mask].min():+.4f}, {rel[mask].max():+.4f}]; source Total Params "
              f"{sorted(sub['Total Params'].unique())}, tp {tps}")

    z0 = done[(done["model_name"] == "1.34G") & (done["zero_stage"] == 0) & (done["tp"] == 1)
              & (done["pp"] == 1)]
    n = float(total_params(to_cols([config_from_flat(
        z0[list(CONFIG_COLUMNS)].to_dict("records")[0])], shipped_parameter_sets()))[0])
    print("\nmemory unit: 1.34G, ZeRO-0, tp=pp=1 (20 B/parameter at the optimizer-step peak:")
    print("  bf16 weights 2 + bf16 grads 2 + fp32 master 4 + fp32 grad accumulator 4 + Adam 8)")
    seen = sorted(float(v) for v in z0["peak_mem_allocated_gib"].unique())
    print(f"  N = {n:,.0f}; 20 N = {20 * n / GIB:.2f} GiB = {20 * n / 1e9:.2f} GB; "
          f"'Mem Alloc (GB)' = {seen} over {len(z0)} "
          "runs -> GiB")
    allocated_bytes_per_param(done)


def allocated_bytes_per_param(done: pd.DataFrame) -> None:
    """'Mem Alloc (GB)' of completed runs without a pipeline, as bytes per parameter of a
    rank, by least squares per ZeRO stage and version: a + b / dp (ZeRO-1 shards over dp),
    plus c unsharded T x h bf16 tensors per micro-batch (T its tokens), beside the memory
    model's model states (``surrogate.analytic.memory.model_state_bytes``)."""
    from surrogate.analytic.memory import memory_breakdown

    flat = done[done["pp"] == 1]
    cols = to_cols([config_from_flat(r) for r in flat[list(CONFIG_COLUMNS)].to_dict("records")],
                   shipped_parameter_sets())
    parts = memory_breakdown(cols)
    per_rank = parts["weights"] / 2  # bf16 weights, unsharded below ZeRO-3: the rank's params
    th2 = 2.0 * cols["mbs"] * cols["seq_len"] * cols["hidden_size"]
    states = parts["weights"] + parts["gradients"] + parts["optimizer"]
    y = flat["peak_mem_allocated_gib"].to_numpy() * GIB
    print("\n'Mem Alloc (GB)' (allocated after the step, GiB) of completed runs without a "
          "pipeline, fitted as bytes per parameter of a rank (least squares in relative error):")
    for (version, zero), idx in flat.reset_index(drop=True).groupby(
            ["framework_version", "zero_stage"]).groups.items():
        i = np.asarray(idx)
        dp = flat["dp"].to_numpy()[i]
        x = (np.c_[per_rank[i], th2[i]] if zero == 0
             else np.c_[per_rank[i], per_rank[i] / dp, th2[i]])
        coef = np.linalg.lstsq(x / y[i, None], np.ones(len(i)), rcond=None)[0]
        fit = np.abs(x @ coef / y[i] - 1).mean()
        model = np.abs(states[i] / y[i] - 1).mean()
        terms = (f"{coef[0]:.1f} B/param" if zero == 0
                 else f"{coef[0]:.1f} + {coef[1]:.1f} / dp B/param")
        print(f"  {version} ZeRO-{zero} ({len(i)} runs): {terms} + {coef[-1]:.1f} T x h "
              f"tensors; fit off by {fit:.1%}, the model's states by {model:.1%}")


if __name__ == "__main__":
    main()
