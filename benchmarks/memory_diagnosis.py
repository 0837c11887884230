"""Where the analytic memory model misses the Playbook's measured peak reserved memory.

    python benchmarks/memory_diagnosis.py

With the shipped parameters (``surrogate/data/analytic_params.json``), over the completed
Playbook runs, seven tables:

1. mean log(predicted / measured) reserved memory by framework version, tp and pp, and
   beneath it pre-pp-fix's without a pipeline by tp within each job batch;
2. without a pipeline, per model, tp, ZeRO stage and version (three micro-batch sizes or
   more): the measured and predicted GiB added per sequence of micro-batch (least-squares
   slopes over the median of each micro-batch size). Activations do not depend on the ZeRO
   stage, so the two stages' measured slopes of one model, tp and version should agree;
3. the floor set by the runs themselves: ZeRO-0 runs without a pipeline that differ only in
   dp and gradient accumulation (neither changes a ZeRO-0 rank's memory: the same weights,
   gradients, optimizer states and micro-batch on every rank), as the mean absolute
   percentage error against the median of their group, next to the model's error on them;
4. the memory MAPE by tp (up to 8, one node; 16 and more, across nodes) and pipeline, each
   band's share of the summed error and the MAPE over all runs were the band predicted as well
   as its twins agree (table 5), and per tp the floor of table 3 over every pp: where the
   model misses beyond what the runs themselves scatter;
5. the replicate floor: every run with a twin (the same model shape, tp, pp, micro-batch, ZeRO
   stage and version, and under ZeRO >= 1 the same dp: nothing else changes a rank's memory)
   predicted by the median of its twins, leaving itself out, by tp band and pipeline beside the
   model's error on the same runs, and the twins that disagree most. No model of the layout
   columns can beat, on these runs, what their own repeats scatter;
6. the best rescaling of the model's own terms: per framework version and pipeline (pp = 1,
   pp > 1), every term of the breakdown (model states, activations, logits, backward working
   set, buffers) multiplied by its own non-negative factor, the factors fitted on those runs
   themselves (soft-L1 on log reserved memory, as ``surrogate calibrate`` fits). In-sample and
   with 20 factors where calibration fits 3 per version, it bounds what refitting the scales of
   the existing terms can reach: below it, the model needs terms it does not have;
7. with a pipeline, the activations the runs imply: (measured - the model's other terms) /
   its activation term (the allocator's share spread over both), median per version, tp and
   pp, over the runs whose activations are at least half of the prediction. The first stage
   holds about L / pp layers for pp micro-batches, so a per-layer miscount would not change
   with pp at one tp, and would show in both versions (one code, one activation count).

Two finished studies that chose the in-flight term's shape and rejected terms at the loss that
tp does not split (tables 8 and 9) are out of the tree: ``git show
7086ef9:benchmarks/memory_diagnosis.py``; ``docs/design-decisions.md`` gives their figures.

Groups are keyed on the model's shape (:data:`SHAPE`), not its name: the sweep's "80G" is three
shapes (64 or 8 key-value heads, vocabulary 131,072 or 49,152).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from analytic_vs_playbook import predictions
from scipy.optimize import least_squares

from surrogate.analytic.memory import (
    logged_breakdown,
    memory_breakdown,
)
from surrogate.calibration.blocks import blocks_for_runs
from surrogate.ingest.playbook_network import playbook_runs

GIB = 2.0**30
SHAPE = ["num_layers", "hidden_size", "num_heads", "num_kv_heads", "vocab_size", "tie_embeddings"]
"""The columns that fix a model's shape (``model_name`` alone does not)."""


def measured_and_predicted(runs: pd.DataFrame) -> pd.DataFrame:
    """Completed runs with a measured reserved memory: ``meas_gib``, ``pred_gib``, ``log_err``."""
    measured = runs["peak_mem_reserved_gib"].to_numpy(float)
    predicted = predictions(runs, None)["reserved_bytes"] / GIB
    out = runs.assign(meas_gib=measured, pred_gib=predicted, log_err=np.log(predicted / measured))
    return out[(out["status"] == "completed") & np.isfinite(out["log_err"])]


def slopes(runs: pd.DataFrame) -> pd.DataFrame:
    """GiB per sequence of micro-batch, measured and predicted, for runs without a pipeline."""
    rows = []
    keys = ["model_name", "tp", "zero_stage", "framework_version"]
    for key, group in runs[runs["pp"] == 1].groupby([*SHAPE, *keys]):
        key = key[len(SHAPE) :]
        per_mbs = group.groupby("mbs")[["meas_gib", "pred_gib"]].median()
        if len(per_mbs) < 3:
            continue
        mbs = per_mbs.index.to_numpy(dtype=np.float64)
        measured = np.polyfit(mbs, per_mbs["meas_gib"], 1)[0]
        predicted = np.polyfit(mbs, per_mbs["pred_gib"], 1)[0]
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                "mbs_sizes": len(per_mbs),
                "measured_gib_per_seq": measured,
                "predicted_gib_per_seq": predicted,
                "ratio": measured / predicted,
            }
        )
    return pd.DataFrame(rows)


def same_memory_groups(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """ZeRO-0 runs in groups of two or more that share ``keys`` (dp and gradient accumulation
    aside, nothing then changes a rank's memory), with ``floor``: each run's absolute
    deviation from its group's median, and ``model``: the model's absolute error on it."""
    same = runs[runs["zero_stage"] == 0]
    grouped = same.groupby(keys)["meas_gib"]
    same = same.assign(n=grouped.transform("count"), median=grouped.transform("median"))
    same = same[same["n"] >= 2]
    return same.assign(
        floor=(same["meas_gib"] / same["median"] - 1).abs(),
        model=(np.exp(same["log_err"]) - 1).abs(),
    )


def repeat_floor(runs: pd.DataFrame) -> tuple[int, int, float, float]:
    """(runs, groups, MAPE against the group median, the model's MAPE on the same runs)."""
    keys = [*SHAPE, "tp", "mbs", "framework_version"]
    same = same_memory_groups(runs[runs["pp"] == 1], keys)
    return (
        len(same),
        same.groupby(keys).ngroups,
        float(same["floor"].mean()),
        float(same["model"].mean()),
    )


def tp_pipe_bands(runs: pd.DataFrame) -> list[np.ndarray]:
    """Per run, its tp band (up to 8: one node; 16 and more: across nodes) and pipeline."""
    return [
        np.where(runs["tp"] >= 16, "tp >= 16", "tp <= 8"),
        np.where(runs["pp"] > 1, "pp > 1", "pp = 1"),
    ]


def by_tp_band(runs: pd.DataFrame, least_twins: int = 30) -> pd.DataFrame:
    """Memory MAPE per tp band and pipeline: runs, MAPE, the band's share of the summed
    absolute percentage error, and the MAPE over all runs if every run of the band were
    predicted as well as its runs with a twin agree with their twins (:func:`twin_floor`;
    the other runs as they are): an assumption that the band's twins scatter as its other
    runs would, left empty where fewer than ``least_twins`` of its runs have a twin."""
    ape = np.abs(np.exp(runs["log_err"]) - 1)
    table = ape.groupby(tp_pipe_bands(runs)).agg(runs="size", mape="mean")
    summed = table["runs"] * table["mape"]
    table["share of error"] = summed / ape.sum()
    floor = twin_floor(runs).reindex(table.index)
    twins_mape = floor["twins"].where(floor["runs"] >= least_twins)
    table["all, band at its twins"] = (ape.sum() - summed + table["runs"] * twins_mape) / len(ape)
    return table


def floor_by_tp(runs: pd.DataFrame) -> pd.DataFrame:
    """Per tp: ZeRO-0 runs of one model, tp, pp, micro-batch and version (any dp, gradient
    accumulation): their MAPE against their group's median, and the model's on them."""
    same = same_memory_groups(runs, [*SHAPE, "tp", "pp", "mbs", "framework_version"])
    return same.groupby("tp").agg(
        runs=("floor", "size"), floor=("floor", "mean"), model=("model", "mean")
    )


def twins(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs with at least one twin (module doc, table 5), with ``twin_median``: the median
    measured memory of the others, ``twin``: the run's absolute percentage error against it,
    and ``model``: the model's absolute percentage error on the run."""
    dp_key = np.where(runs["zero_stage"] >= 1, runs["dp"], 0)
    keys = [*SHAPE, "tp", "pp", "mbs", "zero_stage", "framework_version", "dp_key"]
    runs = runs.assign(dp_key=dp_key)
    rows = []
    for _, group in runs.groupby(keys):
        if len(group) < 2:
            continue
        meas = group["meas_gib"].to_numpy()
        others = [np.median(np.delete(meas, i)) for i in range(len(meas))]
        rows.append(group.assign(twin_median=others))
    if not rows:
        return runs.iloc[:0].assign(twin_median=[], twin=[], model=[])
    out = pd.concat(rows)
    return out.assign(
        twin=(out["twin_median"] / out["meas_gib"] - 1).abs(),
        model=(np.exp(out["log_err"]) - 1).abs(),
    )


def twin_floor(runs: pd.DataFrame) -> pd.DataFrame:
    """:func:`twins` per tp band and pipeline, and over all: runs, the twins' MAPE, the
    model's MAPE on the same runs."""
    t = twins(runs)
    table = t.groupby(tp_pipe_bands(t)).agg(
        runs=("twin", "size"), twins=("twin", "mean"), model=("model", "mean")
    )
    table.loc[("all", ""), :] = [len(t), t["twin"].mean(), t["model"].mean()]
    return table.astype({"runs": int})


TERMS = {
    "model states": ("weights", "gradients", "optimizer"),
    "activations": ("activations",),
    "logits": ("logits",),
    "backward working set": ("transient",),
    "buffers": ("buffers",),
}
"""The breakdown terms table 6 rescales (the allocator's share scales with all of them)."""


def term_bytes(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run, the bytes of each of :data:`TERMS` under the shipped parameters, with the
    allocator's overhead spread over them in proportion (it is a fraction of their sum)."""
    return terms_and_growth(runs)[0]


def terms_and_growth(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """:func:`term_bytes`, and per run the factor the allocator's overhead multiplies every
    term by (1 + ``allocator_overhead_frac``)."""
    out = pd.DataFrame(index=runs.index, columns=list(TERMS), dtype=np.float64)
    growth = pd.Series(np.nan, index=runs.index)
    blocks, rows = blocks_for_runs(runs)
    for block, idx in zip(blocks, rows, strict=True):
        # the block's columns hold the shipped sets; the rank each run's memory was logged on
        parts = logged_breakdown(block.cols, memory_breakdown(block.cols))
        grow = 1 + block.cols["p_allocator_overhead_frac"]
        growth.iloc[idx] = grow
        for name, keys in TERMS.items():
            out.iloc[idx, out.columns.get_loc(name)] = grow * np.sum(
                [parts[k] for k in keys], axis=0
            )
    return out, growth


def best_rescaling(runs: pd.DataFrame) -> pd.DataFrame:
    """Table 6 (module docstring): per version and pipeline, the fitted factor of each term,
    the runs, the model's MAPE and the rescaled terms' MAPE on them."""
    terms = term_bytes(runs)
    rows = []
    pipe = np.where(runs["pp"] > 1, "pp > 1", "pp = 1")
    for (version, piped), part in runs.groupby([runs["framework_version"], pipe]):
        a = terms.loc[part.index].to_numpy(np.float64)
        y = part["meas_gib"].to_numpy() * GIB

        def log_residuals(x: np.ndarray, a: np.ndarray = a, y: np.ndarray = y) -> np.ndarray:
            return np.log(np.maximum(a @ x, 1.0) / y)

        fit = least_squares(
            log_residuals, np.ones(a.shape[1]), bounds=(0, np.inf), loss="soft_l1", f_scale=0.2
        )
        rows.append(
            {
                "version": version,
                "pipeline": piped,
                "runs": len(part),
                **dict(zip(TERMS, fit.x.round(2), strict=True)),
                "model": float(np.mean(np.abs(np.exp(part["log_err"]) - 1))),
                "rescaled": float(np.mean(np.abs(np.exp(log_residuals(fit.x)) - 1))),
            }
        )
    table = pd.DataFrame(rows)
    n = table["runs"].sum()
    table.loc[len(table)] = {
        "version": "all",
        "pipeline": "",
        "runs": n,
        "model": (table["model"] * table["runs"]).sum() / n,
        "rescaled": (table["rescaled"] * table["runs"]).sum() / n,
    }
    return table


def implied_activation_factor(runs: pd.DataFrame) -> pd.DataFrame:
    """Table 7 (module docstring): per pipelined run, (measured - the other terms) /
    activations, the allocator's share spread over both (:func:`term_bytes`)."""
    piped = runs[runs["pp"] > 1]
    terms = term_bytes(piped)
    act = terms["activations"]
    others = terms.drop(columns="activations").sum(axis=1)
    held = piped.assign(factor=(piped["meas_gib"] * GIB - others) / act)
    return held[act >= 0.5 * piped["pred_gib"] * GIB]


def trend_by_batch(runs: pd.DataFrame, least: int = 30) -> pd.DataFrame:
    """Mean log error by tp (rows) over ``runs`` and within each job batch (the run id's first
    four digits) of at least ``least`` of them (columns): whether a trend in tp is the job
    batches of table 5 or holds inside one."""
    batch = runs["run_id"].str[:4] + "xxxx"
    table = runs.groupby("tp")["log_err"].mean().rename("all").to_frame()
    for name, part in runs.groupby(batch):
        if len(part) >= least:
            table[name] = part.groupby("tp")["log_err"].mean()
    return table


def print_tp_by_pp(runs: pd.DataFrame, value: str, how: str) -> None:
    """Per framework version, ``value`` aggregated by ``how`` over tp (rows) and pp (columns),
    with the runs per cell in brackets."""
    for version, part in runs.groupby("framework_version"):
        table = part.pivot_table(index="tp", columns="pp", values=value, aggfunc=how)
        counts = part.pivot_table(index="tp", columns="pp", values=value, aggfunc="count")
        print(f"\n{version} (runs per cell in brackets)")
        cells = table.round(2).astype(str) + " (" + counts.fillna(0).astype(int).astype(str) + ")"
        print(cells.where(table.notna(), "").to_string())


def main() -> None:
    runs = measured_and_predicted(playbook_runs())
    mape = float(np.mean(np.abs(np.exp(runs["log_err"]) - 1)))
    print(
        f"{len(runs)} completed Playbook runs with measured reserved memory; shipped "
        f"parameters: memory MAPE {mape:.1%}"
    )
    print("\n1. mean log(predicted / measured) by framework version, tp (rows) and pp (columns)")
    print_tp_by_pp(runs, "log_err", "mean")
    print(
        "pre-pp-fix without a pipeline, mean log(predicted / measured) by tp, over all runs "
        "and within each job batch (run ids by their first four digits) of 30 runs or more:"
    )
    print(
        trend_by_batch(runs[(runs["framework_version"] == "pre-pp-fix") & (runs["pp"] == 1)])
        .round(2)
        .to_string(na_rep="")
    )
    print("\n2. without a pipeline: GiB per sequence of micro-batch, measured vs predicted")
    print(slopes(runs).round(3).to_string(index=False))
    n, groups, floor, model = repeat_floor(runs)
    print(
        f"\n3. ZeRO-0 runs without a pipeline differing only in dp and gradient accumulation: "
        f"{n} runs in {groups} groups; MAPE against their group's median {floor:.1%} "
        f"(the model on the same runs: {model:.1%})"
    )
    print(
        "\n4. memory MAPE by tp and pipeline, each band's share of the summed error, and the "
        "MAPE over all runs were the band's runs predicted as well as its runs with a twin "
        "agree with their twins (table 5; empty under 30 such runs); then per tp the floor of "
        "ZeRO-0 runs of one model, tp, pp, micro-batch and version (MAPE against their "
        "group's median) beside the model's error on them"
    )
    print(by_tp_band(runs).round(3).to_string())
    print(floor_by_tp(runs).round(3).to_string())
    t = twins(runs)
    print(
        f"\n5. replicate floor: {len(t)} runs with a twin (same shape, tp, pp, micro-batch, "
        "ZeRO stage, version, and dp under ZeRO >= 1), each predicted by the median of its "
        "twins (leaving itself out), MAPE beside the model's on the same runs"
    )
    print(twin_floor(runs).round(3).to_string())
    worst = (
        t.sort_values("twin", ascending=False)
        .drop_duplicates([*SHAPE, "tp", "pp", "mbs", "zero_stage", "framework_version", "dp_key"])
        .head(5)
    )
    print("the twins that disagree most:")
    print(
        worst[
            [
                "model_name",
                "tp",
                "pp",
                "mbs",
                "zero_stage",
                "dp",
                "num_nodes",
                "run_id",
                "meas_gib",
                "twin_median",
                "pred_gib",
            ]
        ]
        .round(2)
        .to_string(index=False)
    )
    print(
        "\n6. the best rescaling of the model's own terms (factors per version and pipeline, "
        "fitted in-sample on those runs), MAPE beside the model's"
    )
    print(best_rescaling(runs).round(3).to_string(index=False, na_rep=""))
    print(
        "\n7. pipelines: (measured - the model's other terms) / its activations, median by "
        "version, tp (rows) and pp (columns), runs whose activations are >= half the "
        "prediction"
    )
    print_tp_by_pp(implied_activation_factor(runs), "factor", "median")


if __name__ == "__main__":
    main()
