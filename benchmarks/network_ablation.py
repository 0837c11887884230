"""What each Playbook run's own network measurement buys, and where the network form still errs.

    python benchmarks/network_ablation.py [--model-dir DIR] [--seed N] [--twins-only]

Three parts (about 2 minutes; ``--twins-only``: the third alone, about 6 s):

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
3. **ZeRO twins.** Completed runs whose configurations differ in their ZeRO stage alone (0
   against 1; repeats' median step): the measured ZeRO-0 / ZeRO-1 step-time ratio against the
   analytic one (shipped parameters, each run's own network), median per framework version,
   node count and tp, with the pairs' count and their measured networks (``net_scale``). A
   ratio above the analytic one is time ZeRO-0 takes that the model does not count. Beside
   it, the runs' own start-up check (256 MB, every GPU of the job): the median all-reduce over
   reduce-scatter bus bandwidth per node count, on typical networks and on fast ones
   (``net_scale`` over 2), against the profile's curves.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from surrogate.calibration.blocks import blocks_for_runs, predicted_breakdown, values_in_use
from surrogate.calibration.fit_params import fit_runs, held_out_figures
from surrogate.hardware.profile import load_profile
from surrogate.ingest.playbook import PROFILE
from surrogate.ingest.playbook_network import PLAYBOOK_PATH, parse_playbook_network, playbook_runs
from surrogate.io.datasource import data_dir
from surrogate.learned.model import SurrogateModel
from surrogate.learned.training_data import training_data
from surrogate.prediction.predict import DEFAULT_MODEL_DIR
from training.evaluate import evaluate_shrinks, format_metric

DP_BANDS = (-np.inf, 0.05, 0.2, 0.5, np.inf)
TWIN_KEYS = (
    "model_name",
    "framework_version",
    "num_nodes",
    "dp",
    "tp",
    "pp",
    "cp",
    "mbs",
    "grad_accum",
    "recompute",
)
"""What a ZeRO-0 / ZeRO-1 pair shares (the Playbook varies nothing else)."""


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


def _analytic_step(runs: pd.DataFrame) -> np.ndarray:
    """Each run's analytic step time (shipped parameters, its own network)."""
    blocks, idx = blocks_for_runs(runs)
    pred = np.full(len(runs), np.nan)
    for b, rows in zip(blocks, idx, strict=True):
        pred[rows] = predicted_breakdown(b, values_in_use(b))["step_time_s"]
    return pred


def zero_twins(runs: pd.DataFrame) -> pd.DataFrame:
    """Measured and analytic ZeRO-0 / ZeRO-1 step-time ratios of the completed runs that
    differ in their ZeRO stage alone, median per framework version, node count and tp."""
    done = runs[(runs["status"] == "completed") & runs["zero_stage"].isin([0, 1])]
    done = done.reset_index(drop=True).assign(pred=lambda t: _analytic_step(t))
    keys = list(TWIN_KEYS)
    per = (
        done.groupby([*keys, "zero_stage"], dropna=False)
        .agg(meas=("step_time_s", "median"), pred=("pred", "median"), net=("net_scale", "median"))
        .reset_index()
    )
    zero0 = per[per["zero_stage"] == 0].drop(columns="zero_stage")
    zero1 = per[per["zero_stage"] == 1].drop(columns="zero_stage")
    pairs = zero0.merge(zero1, on=keys, suffixes=("_0", "_1"))
    pairs = pairs.assign(
        measured=pairs["meas_0"] / pairs["meas_1"],
        analytic=pairs["pred_0"] / pairs["pred_1"],
        net=np.sqrt(pairs["net_0"] * pairs["net_1"]),
    )
    g = pairs.groupby(["framework_version", "num_nodes", "tp"])
    return g.agg(
        pairs=("measured", "size"),
        measured=("measured", "median"),
        analytic=("analytic", "median"),
        net_scale=("net", "median"),
    ).round(2)


def startup_ar_over_rs(runs: pd.DataFrame) -> pd.DataFrame:
    """Median all-reduce / reduce-scatter bus bandwidth of the runs' start-up checks across
    nodes, per node count, on typical (``net_scale`` <= 2) and fast networks, and the same
    ratio of the cluster profile's curves."""
    net = parse_playbook_network(data_dir() / PLAYBOOK_PATH)[0]
    net = net[net["nodes"] > 1]
    per = net.pivot_table(
        index="run_id", columns="op", values="busbw_bytes_per_s", aggfunc="first"
    ).assign(nodes=net.groupby("run_id")["nodes"].first())
    scale = runs.drop_duplicates("run_id").set_index("run_id")["net_scale"]
    per = per.assign(
        ratio=per["all_reduce"] / per["reduce_scatter"],
        network=np.where(scale.reindex(per.index) > 2, "fast", "typical"),
    )
    out = per.pivot_table(index="nodes", columns="network", values="ratio", aggfunc="median")
    fabric = load_profile(PROFILE).fabric
    if fabric is not None:
        n = out.index.to_numpy(dtype=np.float64)
        curve = fabric.efficiency("all_reduce", n) / fabric.efficiency("reduce_scatter", n)
        out["profile curves"] = curve
    return out.round(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--twins-only", action="store_true", help="print the third part alone")
    args = ap.parse_args()
    runs = playbook_runs().reset_index(drop=True)
    if args.twins_only:
        _print_twins(runs)
        return
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
    _print_twins(runs)


def _print_twins(runs: pd.DataFrame) -> None:
    print(
        "\n3. ZeRO-0 / ZeRO-1 step time of runs that differ in their ZeRO stage alone, measured "
        "and analytic (shipped parameters, each run's own network), median per framework "
        "version, node count and tp"
    )
    print(zero_twins(runs).to_string())
    print(
        "\nthe runs' start-up all-reduce over reduce-scatter bus bandwidth (256 MB, the whole "
        "job), median per node count"
    )
    print(startup_ar_over_rs(runs).to_string())


if __name__ == "__main__":
    main()
