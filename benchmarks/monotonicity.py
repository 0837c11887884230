"""Where predictions move against what physics fixes: peak memory along the micro-batch.

    python benchmarks/monotonicity.py [--model-dir DIR] [--max-mbs 64]

Every tensor a layer keeps for its backward grows with the micro-batch, so when only the
micro-batch grows a layout's peak memory cannot fall, nor its probability of running out of
memory. The analytic model holds that by construction; the learned memory correction (a ratio
learned from measured runs, ``surrogate.learned.model``) need not. Four parts (8 s):

1. **Predictions.** Every distinct layout of the Playbook sweep (its model shape, nodes, dp, tp,
   pp, gradient accumulation, ZeRO stage and version) predicted at micro-batch 1, 2, 4, ...,
   ``--max-mbs``, by the learned model of ``--model-dir`` (default: the bundled one) and by the
   analytic model alone: the steps (one micro-batch to the next) where the predicted peak
   memory falls by more than 0.5 GiB and 5% (and of them, those from under 80 GiB, where a
   verdict can change), the worst fall, and the steps where p_oom falls by more than 0.05.
   The layouts are the sweep's, the micro-batches are not all measured: this is a property of
   the predictions, not an accuracy figure. The runs' own network measurement is left out
   (every layout gets its cluster's median bandwidth).
2. **Where.** The falls of the learned memory by framework version, tp (up to 8: one node;
   16 and more: across nodes) and pipeline.
3. **The measurements themselves.** Completed Playbook runs of one layout (model shape, dp,
   tp, pp, ZeRO stage, version) that differ in micro-batch (the gradient accumulation changes
   with it to keep the global batch; with a pipeline, only runs with at least pp micro-batches,
   so that pp of them are in flight in every run): the steps, median reserved memory of one
   micro-batch size to that of the next, where the measured reserved memory falls by more than
   0.5 GiB and 5%. A learned correction can only reproduce such falls.
4. **Survivorship near the capacity.** The Playbook's runs binned by the analytic estimate of
   their peak reserved memory over the GPU's capacity: how many completed with a measured
   memory and how many ran out of memory, and the completed runs' mean log(measured /
   analytic) (the learned memory target, ``surrogate.learned.training_data``). Near the capacity
   only the runs the estimate over-stated complete, which is why the memory correction reads
   the runs out of memory as censored targets (``surrogate.learned.boosters.fit_memory``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from memory_diagnosis import SHAPE

from surrogate.ingest.playbook_network import playbook_runs
from surrogate.learned.model import SurrogateModel
from surrogate.prediction.scoring import score_runs

LAYOUT = [*SHAPE, "num_nodes", "dp", "tp", "pp", "grad_accum", "zero_stage", "framework_version"]
FALL_GIB = 0.5
FALL_FRAC = 0.05
FALL_P_OOM = 0.05
FITS_GIB = 80.0
"""An H100's memory: falls that start under it can change a verdict."""


def falls(values: pd.Series, keys: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Per step from one micro-batch size to the next within each key (rows sorted by key and
    micro-batch): the change, and whether it is a fall of more than FALL_GIB and FALL_FRAC."""
    before = values.groupby(keys).shift()
    change = values - before
    return change, (change < -FALL_GIB) & (change < -FALL_FRAC * before)


def band(table: pd.DataFrame) -> pd.Series:
    tp = np.where(table["tp"] <= 8, "tp <= 8", "tp >= 16")
    pp = np.where(table["pp"] == 1, "pp = 1", "pp > 1")
    return table["framework_version"] + " " + pd.Series(tp, index=table.index) + " " + pp


def predictions(runs: pd.DataFrame, model: SurrogateModel, max_mbs: int) -> pd.DataFrame:
    """Every distinct layout of ``runs`` at micro-batch 1, 2, 4, ..., ``max_mbs``, with the
    learned and the analytic peak memory and p_oom."""
    layouts = runs.drop_duplicates(LAYOUT).reset_index(drop=True)
    sizes = 2 ** np.arange(int(np.log2(max_mbs)) + 1)
    table = pd.concat(
        [layouts.assign(mbs=int(m), layout=layouts.index) for m in sizes], ignore_index=True
    )
    table["net_scale"] = np.nan  # the cluster's median bandwidth at each node count
    learned = score_runs(table, model=model)
    analytic = score_runs(table)
    table["mem_learned"] = learned["pred_peak_mem_reserved_gib"].to_numpy()
    table["mem_analytic"] = analytic["pred_peak_mem_reserved_gib"].to_numpy()
    table["p_oom_learned"] = learned["p_oom"].to_numpy()
    table["p_oom_analytic"] = analytic["p_oom"].to_numpy()
    return table.sort_values(["layout", "mbs"]).reset_index(drop=True)


def measured_steps(runs: pd.DataFrame) -> pd.DataFrame:
    """Median reserved memory per micro-batch size of each measured layout (part 3)."""
    done = runs[
        (runs["status"] == "completed")
        & (runs["peak_mem_reserved_gib"] > 0)
        & (runs["grad_accum"] >= runs["pp"])
    ]
    keys = [*SHAPE, "dp", "tp", "pp", "zero_stage", "framework_version"]
    med = (
        done.groupby([*keys, "mbs"])["peak_mem_reserved_gib"]
        .median()
        .reset_index()
        .sort_values([*keys, "mbs"])
    )
    med["layout"] = med.groupby(keys).ngroup()
    return med


def survivorship(runs: pd.DataFrame) -> pd.DataFrame:
    """Part 4: per bin of analytic estimate / capacity, the runs, the completed with a
    measured memory, the out-of-memory and the completed runs' mean memory target."""
    from surrogate.learned.training_data import training_data

    data = training_data(runs)
    ratio = data.analytic["mem_reserved"] / data.cols["memory_bytes"]
    edges = [0, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.5, 2, 4, np.inf]
    table = pd.DataFrame(
        {
            "estimate / capacity": pd.cut(ratio, edges),
            "y": data.y_mem,
            "completed": data.mem_ok,
            "oom": data.y_status == 1,
        }
    )
    return table.groupby("estimate / capacity", observed=True).agg(
        runs=("y", "size"),
        completed=("completed", "sum"),
        oom=("oom", "sum"),
        mean_log_measured_over_analytic=("y", "mean"),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model-dir", type=Path, default=None, help="the learned model (default: the bundled one)"
    )
    ap.add_argument("--max-mbs", type=int, default=64)
    args = ap.parse_args()
    if args.max_mbs < 2:
        ap.error("--max-mbs must be at least 2")
    from surrogate.prediction.predict import resolve_model

    model = resolve_model("default" if args.model_dir is None else args.model_dir)
    if model is None:
        ap.error("no learned model: give --model-dir")
    runs = playbook_runs()
    table = predictions(runs, model, args.max_mbs)
    steps = int(table["mbs"].gt(1).sum())
    print(
        f"1. {table['layout'].nunique()} Playbook layouts at micro-batch 1 to "
        f"{args.max_mbs}: {steps} steps to the next micro-batch size"
    )
    rows = {}
    for who in ("learned", "analytic"):
        change, fell = falls(table[f"mem_{who}"], table["layout"])
        p_change = table[f"p_oom_{who}"] - table.groupby("layout")[f"p_oom_{who}"].shift()
        rows[who] = {
            f"memory falls > {FALL_GIB} GiB and {FALL_FRAC:.0%}": int(fell.sum()),
            "layouts with one": int(table.loc[fell, "layout"].nunique()),
            f"of them from under {FITS_GIB:g} GiB": int(
                (fell & (table[f"mem_{who}"] - change < FITS_GIB)).sum()
            ),
            "worst fall (GiB)": f"{min(float(change.min()), 0.0):.1f}",
            f"p_oom falls > {FALL_P_OOM}": int((p_change < -FALL_P_OOM).sum()),
        }
    print(pd.DataFrame(rows).to_string())

    change, fell = falls(table["mem_learned"], table["layout"])
    where = pd.DataFrame({"band": band(table), "fell": fell, "step": table["mbs"] > 1})
    print("\n2. falls of the learned memory by version, tp and pipeline")
    per = where[where["step"]].groupby("band").agg(steps=("fell", "size"), falls=("fell", "sum"))
    print(per.to_string())
    worst = table.assign(change=change)[fell].nsmallest(5, "change")
    cols = [
        "model_name",
        "num_nodes",
        "dp",
        "tp",
        "pp",
        "grad_accum",
        "zero_stage",
        "framework_version",
        "mbs",
        "change",
        "mem_learned",
        "mem_analytic",
    ]
    print("the largest falls (change: GiB from the micro-batch before):")
    print(worst[cols].round(1).to_string(index=False))

    med = measured_steps(runs)
    change, fell = falls(med["peak_mem_reserved_gib"], med["layout"])
    has = med.groupby("layout")["mbs"].transform("size") >= 2
    measured = pd.DataFrame(
        {"band": band(med), "fell": fell, "step": med.groupby("layout").cumcount() > 0}
    )[has]
    print(
        f"\n3. measured: {int(measured['step'].sum())} steps between micro-batch sizes of "
        f"{int(med.loc[has, 'layout'].nunique())} measured layouts; reserved memory falls "
        f"(> {FALL_GIB} GiB and {FALL_FRAC:.0%}) in {int(measured['fell'].sum())}"
    )
    per = (
        measured[measured["step"]]
        .groupby("band")
        .agg(steps=("fell", "size"), falls=("fell", "sum"))
    )
    print(per.to_string())

    print(
        "\n4. survivorship: the Playbook's runs by analytic peak reserved memory over the "
        "capacity; the mean is over the completed runs"
    )
    print(survivorship(runs).round(3).to_string())


if __name__ == "__main__":
    main()
