"""The analytic model alone against every run of the Playbook sweep.

For each run of ``sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv`` (under the data
directory: ``--data-dir``, ``SURROGATE_DATA_DIR``, or ``../shared/data`` beside the
repository) it compares the analytic peak memory (what ``torch.cuda.max_memory_reserved``
would report) with the measured peak reserved memory of completed runs, the analytic
fits/OOM verdict with the measured status (completed vs oom; failed runs are left out), and the
analytic MFU with the measured one. Prints memory MAPE, OOM recall and precision, MFU MAPE
(runs with MFU >= 10%), median APE over all completed runs and Spearman's rank correlation.

    python benchmarks/analytic_vs_playbook.py [--data-dir DIR] [--by model|nodes|tp|pp]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd
from scipy.stats import spearmanr

from surrogate.analytic.inputs import to_cols
from surrogate.config import config_from_flat
from surrogate.hardware import GIB
from surrogate.ingest.playbook import parse_playbook
from surrogate.prediction import analytic_columns, resolve_perf_model

PLAYBOOK = Path("sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv")


def default_data_dir() -> Path:
    env = os.environ.get("SURROGATE_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"


def evaluate(runs: pd.DataFrame) -> pd.DataFrame:
    """Add analytic predictions (pred_reserved_gib, pred_oom, pred_mfu) to the sweep rows."""
    configs = [config_from_flat(r) for r in runs.to_dict("records")]
    c = to_cols(configs)
    perf = resolve_perf_model(configs[0].cluster.gpu)
    out = analytic_columns(c, perf)
    res = runs.copy()
    res["pred_reserved_gib"] = out["mem_reserved"] / GIB
    res["pred_oom"] = out["p_oom"] > 0.5
    res["pred_mfu"] = out["mfu"]
    res.attrs["perf_model"] = perf.name
    return res


def metrics(res: pd.DataFrame) -> dict[str, float]:
    done = res[res["status"] == "completed"]
    mem_ape = (done["pred_reserved_gib"] - done["peak_mem_reserved_gib"]).abs() / done[
        "peak_mem_reserved_gib"
    ]
    judged = res[res["status"].isin(["completed", "oom"])]
    true_oom = judged["status"] == "oom"
    pred_oom = judged["pred_oom"]
    tp = float((true_oom & pred_oom).sum())
    mfu_ape = (done["pred_mfu"] - done["mfu"]).abs() / done["mfu"]
    big = done["mfu"] >= 0.10
    return {
        "runs": float(len(res)),
        "completed": float(len(done)),
        "memory_mape": float(mem_ape.mean()),
        "memory_median_ape": float(mem_ape.median()),
        "oom_recall": tp / max(float(true_oom.sum()), 1.0),
        "oom_precision": tp / max(float(pred_oom.sum()), 1.0),
        "mfu_mape_ge10": float(mfu_ape[big].mean()),
        "mfu_median_ape": float(mfu_ape.median()),
        "mfu_spearman": float(spearmanr(done["pred_mfu"], done["mfu"]).statistic),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--by", choices=["model", "nodes", "tp", "pp"], default=None)
    args = ap.parse_args()
    path = (args.data_dir or default_data_dir()) / PLAYBOOK
    runs, report = parse_playbook(path)
    print(report.summary(max_lines=3))
    res = evaluate(runs)
    print(f"hardware speed: {res.attrs['perf_model']}")
    for k, v in metrics(res).items():
        print(f"{k:>20}: {v:.4f}" if k not in ("runs", "completed") else f"{k:>20}: {v:.0f}")
    if args.by:
        key = {"model": "hidden_size", "nodes": "num_nodes", "tp": "tp", "pp": "pp"}[args.by]
        rows = {
            g: metrics(part)
            for g, part in res.groupby(key)
            if (part.status == "completed").any()
        }
        print(pd.DataFrame(rows).T.round(3).to_string())


if __name__ == "__main__":
    main()
