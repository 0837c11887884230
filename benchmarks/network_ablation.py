"""What each Playbook run's own network measurement buys, and where the network form still errs.

    python benchmarks/network_ablation.py [--model-dir DIR] [--seed N]

Two parts (about 2 minutes):

1. **Ablation.** Every Playbook run is explained under its cluster's profile and the bandwidth
   it measured at start-up (``net_scale``, ``surrogate.runs.context``). Without that column
   every
   run gets the cluster's median curve at its node count instead. Both ways, the script prints
   the analytic model alone with its free parameters fitted with each node count held out in
   turn (``surrogate.calibration.fit_params.fit_runs``), and the learned model's ``nodes`` protocol
   (train
   on <= 16 nodes, test on 32 and 64, the physics refitted on the training part;
   ``training.evaluate``), with the LightGBM settings of ``--model-dir`` (default: the bundled
   model's).
2. **Where the network form errs** (shipped parameters, in-sample): the median log(predicted /
   measured) step time by node count and by the share of the predicted step that is exposed
   data-parallel communication, for ZeRO-0 (gradients all-reduced) and ZeRO-1 (reduce-scattered,
   then the weights all-gathered) apart.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from surrogate.calibration.blocks import blocks_for_runs, predicted_breakdown, values_in_use
from surrogate.calibration.fit_params import fit_runs, held_out_figures
from surrogate.ingest.playbook_network import playbook_runs
from surrogate.learned.model import SurrogateModel
from surrogate.learned.training_data import training_data
from surrogate.prediction.predict import DEFAULT_MODEL_DIR
from training.evaluate import evaluate_shrinks, format_metric

DP_BANDS = (-np.inf, 0.05, 0.2, 0.5, np.inf)


def ablation(runs: pd.DataFrame, params: dict[str, object], seed: int) -> pd.DataFrame:
    """Analytic held out by node count and the learned nodes protocol, with and without the
    runs' own bandwidth."""
    rows = {}
    for name, table in (
        ("own bandwidth per run", runs),
        ("cluster median curve only", runs.drop(columns=["net_scale"])),
    ):
        held = fit_runs(table, group_by="num_nodes")["held_out"]
        analytic = held_out_figures(table, held)
        nodes = evaluate_shrinks(training_data(table), "nodes", (None,), params=params, seed=seed)[
            None
        ]
        rows[name] = {
            "analytic held out by nodes: MFU MAPE": analytic["mfu_mape_ge10"],
            "analytic held out by nodes: Spearman": analytic["spearman"],
            "nodes protocol, learned: MFU MAPE": nodes.metrics["mfu_mape_ge10"],
            "nodes protocol, analytic (refitted): MFU MAPE": nodes.analytic_metrics[
                "mfu_mape_ge10"
            ],
            "nodes protocol, learned: Spearman": nodes.metrics["mfu_spearman"],
        }
    return pd.DataFrame(rows)


def dp_bias(runs: pd.DataFrame) -> pd.DataFrame:
    """Median log(predicted / measured) step and run counts by ZeRO stage, node count and the
    predicted share of exposed DP communication (shipped parameters)."""
    blocks, idx = blocks_for_runs(runs)
    pred, dp, meas = (np.full(len(runs), np.nan) for _ in range(3))
    for b, rows in zip(blocks, idx, strict=True):
        br = predicted_breakdown(b, values_in_use(b))
        pred[rows], dp[rows], meas[rows] = br["step_time_s"], br["dp_comm"], b.step_time_s
    t = runs.assign(
        err=np.log(pred / meas),
        dp_share=pd.cut(dp / pred, DP_BANDS, labels=["DP < 5%", "5-20%", "20-50%", "> 50%"]),
    )
    t = t[np.isfinite(t["err"])]
    g = t.groupby(["zero_stage", "num_nodes", "dp_share"], observed=True)["err"]
    cell = g.median().map("{:+.2f}".format) + " (" + g.size().astype(str) + ")"
    return cell.unstack("dp_share").fillna("")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    runs = playbook_runs().reset_index(drop=True)
    params = SurrogateModel.load(args.model_dir).lightgbm_params
    done = runs[runs["status"] == "completed"]
    print(
        f"{len(runs)} Playbook runs, {len(done)} completed; "
        f"{int((done['net_scale'] > 3).sum())} of them measured more than 3x their node "
        "count's median bandwidth"
    )
    print("\n1. with and without each run's own bandwidth measurement")
    table = ablation(runs, params, args.seed)
    print(
        table.apply(
            lambda col: [
                format_metric("mfu_spearman" if "Spearman" in k else "mfu_mape_ge10", v)
                for k, v in col.items()
            ]
        ).to_string()
    )
    print(
        "\n2. median log(predicted / measured) step, shipped parameters, by ZeRO stage, node "
        "count and exposed DP share of the predicted step (runs in brackets)"
    )
    print(dp_bias(runs).to_string())


if __name__ == "__main__":
    main()
