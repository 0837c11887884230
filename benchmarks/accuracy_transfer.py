"""The transfer protocols of ``benchmarks/accuracy.py`` (``--across``, ``--transfer``): hold out a
whole framework or cluster (``training/across.py``), MosaicML's MPT runs zero-shot and k-shot,
and the Llama 3 405B layouts of the Llama 3 paper (``training/transfer.py``). Run through
``python benchmarks/accuracy.py --across`` or ``--transfer``; this module has no command of its
own."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from surrogate.learned.model import SurrogateModel
from training.evaluate import accuracy_metrics, format_metric
from training.transfer import llama3_figures, mpt_runs, without_default

RECALIBRATED = ("interval_coverage_recalibrated", "memory_interval_coverage_recalibrated")
"""The coverages as a trained model ships them (recalibrated on the protocol's held-out runs,
held out in turn), shown for the Playbook's protocols only."""


def across(
    data_dir: Path | None,
    summary: dict[str, dict[str, float]] | None = None,
    *,
    published: bool = False,
) -> dict[str, float]:
    """``--across``: hold out each framework, then each cluster (``training.across``); print
    the table and the intervals the held-out errors give; return the figures by MLflow name
    (``across_<grouping>_<held out>/<variant>/<figure>``); add each held-out case's coverage
    and error (tokens/s as MFU's) to ``summary``."""
    from training.across import GROUPINGS, all_runs, leave_one_out, transfer_intervals

    measured = leave_one_out(all_runs(data_dir, published=published))
    table = measured.table
    out: dict[str, float] = {}
    for grouping, part in table.groupby("grouping", sort=False):
        shown = part.drop(columns="grouping").copy()
        for col in ("tps_mape_ge10", "tps_median_ape", "memory_mape"):
            shown[col] = [format_metric("mfu_mape_ge10", v) for v in shown[col]]
        shown["tps_ratio_median"] = shown["tps_ratio_median"].round(2)
        print(
            f"\n{GROUPINGS[str(grouping)]}: the analytic model fitted on every other run, "
            "predicting the held-out runs (tokens/s predicted / measured; memory MAPE where "
            "measured)"
        )
        print(shown.to_string(index=False))
        for row in part.to_dict("records"):
            variant = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(row["variant"])).strip("_")
            key = f"across_{grouping}_{row['held_out']}/{variant}"
            out |= {
                f"{key}/{k}": float(row[k])
                for k in ("tps_ratio_median", "tps_mape_ge10", "tps_median_ape", "memory_mape")
            }
    intervals = transfer_intervals(measured.errors)
    for column, label in (("log_tps", "tokens/s"), ("log_memory", "peak memory")):
        if column not in intervals:
            continue
        q = intervals[column]
        print(
            f"\n{label}: the 80% interval off the data, x/ {np.exp(q):.2f} (hi / lo "
            f"{np.exp(2 * q):.2f}), each held-out case weighing alike; held out of that "
            "quantile in turn, each case's coverage and width:"
        )
        check = pd.DataFrame(intervals[f"{column}_check"])
        out[f"across_interval/{column}_half_width"] = q
        out[f"across_interval/{column}_min_coverage"] = float(check["coverage"].min())
        if summary is not None:
            for case in intervals[f"{column}_check"]:
                grouping, held = str(case["held_out"]).split(" ", 1)
                row = table[
                    (table["grouping"] == grouping)
                    & (table["held_out"] == held)
                    & (table["variant"] == intervals["variant"])
                ].iloc[0]
                figures = summary.setdefault(f"held out: {case['held_out']}", {})
                if column == "log_tps":
                    figures |= {
                        "mfu_mape_ge10": float(row["tps_mape_ge10"]),
                        "interval_coverage": float(case["coverage"]),
                    }
                else:
                    figures |= {
                        "memory_mape": float(row["memory_mape"]),
                        "memory_interval_coverage": float(case["coverage"]),
                    }
        check["coverage"] = [f"{100 * v:.0f}%" for v in check["coverage"]]
        check["width"] = check["width"].round(2)
        print(check.to_string(index=False))
    return out


def analytic_transfer(data_dir: Path | None) -> dict[str, float]:
    """The analytic model alone, zero-shot, on the other cluster (all its runs, and per GPU)
    and the Llama 3 405B layouts; printed, and returned by MLflow name."""
    from training.transfer import LLAMA3_405B_VPP, llama3_405b_table, zero_shot_analytic

    other = mpt_runs(data_dir)
    scored = zero_shot_analytic(other, without_default())
    rows = {"all": accuracy_metrics(scored)}
    rows |= {gpu: accuracy_metrics(part) for gpu, part in scored.groupby("gpu")}
    keys = ("runs", "completed", "mfu_mape_ge10", "mfu_median_ape", "mfu_spearman")
    print(
        f"\nother cluster, zero-shot: {len(other)} MPT runs (llm-foundry FSDP), the analytic "
        "model alone under the parameter sets that ship less the default set, which saw "
        "these runs (llm-foundry at its priors; --across holds the default out properly)"
    )
    print(
        pd.DataFrame(
            {g: {k: format_metric(k, m[k]) for k in keys} for g, m in rows.items()}
        ).to_string()
    )
    out = {f"other_cluster_zero-shot/{k}": rows["all"][k] for k in keys}
    table = pd.concat([llama3_405b_table(None, v) for v in LLAMA3_405B_VPP], ignore_index=True)
    print(
        "\nLlama 3 405B, Table 4 of the Llama 3 paper (reported MFU: Meta's; predicted: the "
        "analytic model alone); vpp 2 and 4: the interleaved schedule the paper describes "
        "(sec. 3.3.2), whose V it does not publish"
    )
    shown = table[
        [
            "gpus",
            "dp",
            "cp",
            "seq_len",
            "vpp",
            "mfu_reported",
            "analytic_mfu",
            "analytic_err",
            "analytic_peak_mem_reserved_gib",
        ]
    ].copy()
    for col in ("mfu_reported", "analytic_mfu", "analytic_err"):
        shown[col] = [f"{100 * v:.1f}%" for v in shown[col]]
    shown["analytic_peak_mem_reserved_gib"] = shown["analytic_peak_mem_reserved_gib"].round(1)
    print(shown.to_string(index=False))
    return out | llama3_figures(table, "analytic_err")


BY_METRICS = (
    "completed",
    "mfu_mape_ge10",
    "mfu_median_ape",
    "interval_coverage",
    "memory_mape",
    "memory_interval_coverage",
)
"""The learned model's figures that ``--by`` prints per value."""
BY_ANALYTIC = ("mfu_mape_ge10", "mfu_median_ape", "memory_mape")
"""The analytic model's figures printed beside them."""


def by_column(
    predictions: pd.DataFrame, analytic: pd.DataFrame | None, column: str
) -> pd.DataFrame:
    """:data:`BY_METRICS` of the held-out ``predictions`` per value of their ``column`` (or
    per combination of values of several, comma-separated), and :data:`BY_ANALYTIC` of the
    ``analytic`` predictions of the same runs (``analytic ...``)."""
    columns = [c.strip() for c in column.split(",")]
    for c in columns:
        if c not in predictions:
            raise SystemExit(f"--by {c}: not a column of the runs table")
    rows = {}
    for value, part in predictions.groupby(columns if len(columns) > 1 else columns[0]):
        m = accuracy_metrics(part)
        rows[value] = {k: format_metric(k, m[k]) for k in BY_METRICS}
        if analytic is not None:
            a = accuracy_metrics(analytic.loc[part.index])
            rows[value] |= {f"analytic {k}": format_metric(k, a[k]) for k in BY_ANALYTIC}
    table = pd.DataFrame(rows).T
    table.index.names = columns
    return table


def transfer(
    runs: pd.DataFrame,
    params: dict[str, Any] | None,
    data_dir: Path | None,
    seed: int,
    summary: dict[str, dict[str, float]] | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """Print and return the other-cluster and Llama 3 405B figures: learned, analytic (and
    add the learned ones to ``summary``, per setting)."""
    from training.transfer import LLAMA3_405B_VPP, llama3_405b_table, other_cluster

    p = params or {}
    model = SurrogateModel(
        status_params=p.get("status"), mfu_params=p.get("mfu"), mem_params=p.get("mem"), seed=seed
    ).fit(runs)
    other = mpt_runs(data_dir)
    out: dict[str, float] = {}
    analytic: dict[str, float] = {}
    print(
        f"\nother cluster: {len(other)} MPT runs (llm-foundry FSDP; "
        + ", ".join(f"{g} {n}" for g, n in other["gpu"].value_counts().items())
        + "); k-shot: mean of 3 draws, scored on the runs not drawn"
    )
    tables: dict[str, dict[str, dict[str, str]]] = {}
    results = other_cluster(
        runs, other, params=params, seed=seed, fitted=model, sets=without_default()
    )
    for r in results:
        if summary is not None:
            # no "recal": recalibrated on these held-out runs' own errors, which no model a
            # user trains has seen, it would flatter the intervals
            summary[f"MPT {r.setting}" + ("" if r.scales == "any" else ", from one node")] = (
                r.metrics | dict.fromkeys(RECALIBRATED, float("nan"))
            )
        rows = tables.setdefault(r.scales, {})
        for k in ("mfu_mape_ge10", "mfu_median_ape", "mfu_spearman", "interval_coverage"):
            rows.setdefault(k, {})[f"{r.setting} learned"] = format_metric(k, r.metrics[k])
            rows[k][f"{r.setting} analytic"] = format_metric(k, r.analytic_metrics[k])
            if r.own_physics_metrics is not None:
                rows[k][f"{r.setting} analytic, own physics"] = format_metric(
                    k, r.own_physics_metrics[k]
                )
            key = "other_cluster_" + r.setting.replace("=", "").replace(" ", "_")  # MLflow's names
            key += "" if r.scales == "any" else "_from_one_node"
            out[f"{key}/{k}"] = r.metrics[k]
            analytic[f"{key}/{k}"] = r.analytic_metrics[k]
            if r.own_physics_metrics is not None:
                analytic[f"{key}_own_physics/{k}"] = r.own_physics_metrics[k]
    for scales, rows in tables.items():
        if scales != "any":
            n_one = int((other["num_nodes"] == 1).sum())
            print(
                f"\nthe same, as a user who ran on one node only: k of its {n_one} one-node "
                f"runs added, scored on its {len(other) - n_one} runs of more nodes"
            )
        print(pd.DataFrame(rows).T.to_string())
    table = pd.concat([llama3_405b_table(model, v) for v in LLAMA3_405B_VPP], ignore_index=True)
    print(
        "\nLlama 3 405B, Table 4 of the Llama 3 paper (reported MFU: Meta's; predicted: ours)."
        "\nvpp 1: the layouts as Table 4 gives them; vpp 2 and 4: with the interleaved "
        "schedule the paper describes (sec. 3.3.2), whose V it does not publish."
        "\nanalytic_peak_mem_reserved_gib: the predicted peak reserved memory of the most "
        "loaded rank (80 GB H100s)"
    )
    shown = table.drop(columns="extrapolation").copy()
    for col in (
        "mfu_reported",
        "learned_mfu",
        "learned_lo",
        "learned_hi",
        "analytic_mfu",
        "learned_err",
        "analytic_err",
    ):
        shown[col] = [f"{100 * v:.1f}%" for v in shown[col]]
    shown["analytic_peak_mem_reserved_gib"] = shown["analytic_peak_mem_reserved_gib"].round(1)
    print(shown.to_string(index=False))
    print("extrapolates along (each layout, every vpp alike):")
    for (gpus, dp, cp), part in table.groupby(["gpus", "dp", "cp"], sort=False):
        print(f"  {gpus} GPUs, dp {dp}, cp {cp}: " + " | ".join(sorted(set(part["extrapolation"]))))
    out |= llama3_figures(table, "learned_err")
    analytic |= llama3_figures(table, "analytic_err")
    return out, analytic
