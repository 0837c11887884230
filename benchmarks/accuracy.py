"""Held-out accuracy of the learned surrogate, per evaluation protocol, against the analytic
model alone (protocols and metrics: ``training/evaluate.py``).

    python benchmarks/accuracy.py [--protocol cv --protocol lomo ...] [--model-dir DIR]
                                  [--sweeps TABLE ...] [--no-playbook] [--data-dir DIR]
                                  [--shrink 0.5 --shrink 2 ...] [--shape-weight W]
                                  [--survivors-only-memory] [--transfer] [--track]
                                  [--shipped-physics] [--by COLUMN] [--analytic]
                                  [--across [--published]] [--network both|measured|profile]

``--transfer`` adds the other cluster (MosaicML's MPT runs, under the shipped sets less the
default set, which saw them: zero-shot, then k = 10 and 50 of
them added to training, 3 draws each; then as a user who ran on one node only: k of its
one-node runs added, scored on its runs of more nodes) and the three Llama 3 405B layouts of
the Llama 3 paper's Table 4 against the MFU Meta reported (``training/transfer.py``).
``--shrink`` runs the
protocols once per value of the domain shrinkage (``surrogate.learned.domain``; ``inf``: none).
``--shape-weight`` sets the share of the correction kept for an unseen model shape
(``surrogate.learned.domain.UNSEEN_SHAPE_WEIGHT`` by default; 1: the full correction).
``--survivors-only-memory`` fits the memory correction on the completed runs alone, as before
the runs out of memory were censored targets (``surrogate.learned.boosters.fit_memory``).
Each split refits the analytic model's free parameters on its training part as well
(``training.evaluate.physics_of``), so no held-out run reaches the physics either;
``--shipped-physics`` keeps the shipped parameters instead, which were fitted on every Playbook
run (the held-out ones among them).

``--by COLUMN`` adds, per protocol, the learned model's held-out figures, and the analytic
model's MAPE and median APE, per value of a run column (e.g. ``--by model_name``: per held-out
size under lomo), or per combination of several (``--by pp,num_nodes``).

``--analytic`` scores the analytic model alone and fits no learned model (a minute, where the
learned protocols take several): per protocol its figures with the physics refit per split (the
same as the ``analytic`` column of a full run), and with ``--transfer`` its zero-shot figures on
the other cluster (per GPU too) and the Llama 3 405B table: the targets of the analytic model
alone.

``--across`` adds the protocols that hold out a whole framework or a whole cluster (the
Playbook's, MPT on H100, MPT on A100, the project's own H100 runs; ``training/across.py``): the
analytic model fitted on everything else, a held-out framework version at its priors and at the
default set fitted on the rest (each set's runs weighed alike, or each run once). The learned
model adds nothing there: a framework or GPU outside its data keeps the analytic answer
(``surrogate.learned.domain``). About 8 minutes on two cores. ``--published`` adds NVIDIA's
Megatron-Bridge runs (``surrogate.ingest.published``: framework megatron, cluster
megatron-bridge-h100) to the runs held out and fitted on; ``benchmarks/frameworks_at_scale.py``
prints the same held-out predictions per source as a user gets them (OOM calls included).

``--network`` (default ``both``): the network each held-out Playbook run is predicted under:
``measured``, the all-reduce bandwidth the run measured at its own start (its ``net_scale``,
``surrogate.calibration.clusters``), which no user has before a run; ``profile``, the cluster
profile's curve at the run's node count alone, as a user predicts; ``both`` prints every
protocol under each, from the same fits (training always explains its runs under their own
measured network). The profile's figures are labelled ``profile network``.

``--track`` logs every figure to MLflow (experiment ``surrogate-accuracy``: a run ``accuracy
DATE DATA`` with ``<protocol>/<metric>``, and the analytic model's figures under the same names
in the run ``analytic baseline DATA``).

Without ``--model-dir`` the LightGBM settings are the library defaults; with it, the settings
stored in that model's sidecar (e.g. those ``surrogate train`` tuned).
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from surrogate.calibration.clusters import NETWORKS
from surrogate.learned.model import SurrogateModel
from surrogate.learned.training_data import training_data
from training.coverage import (
    COVERAGE_FLOOR,
    MIN_GROUP_RUNS,
    coverage_by_group,
    oom_reliability,
    recalibrated_hits,
)
from training.evaluate import (
    DEFAULT_PROTOCOLS,
    PROTOCOLS,
    accuracy_metrics,
    evaluate_analytic,
    evaluate_grid,
    format_metric,
)
from training.train import load_runs
from training.transfer import llama3_figures, mpt_runs, without_default


def parse_args() -> argparse.Namespace:
    """The command line (module docstring); an error for flags ``--analytic`` has no use for."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--protocol", action="append", choices=list(PROTOCOLS), default=None)
    ap.add_argument("--model-dir", type=Path, default=None)
    ap.add_argument("--sweeps", type=Path, action="append", default=[])
    ap.add_argument("--no-playbook", action="store_true")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shrink", type=float, action="append", default=None)
    ap.add_argument("--shape-weight", type=float, default=None)
    ap.add_argument("--survivors-only-memory", action="store_true")
    ap.add_argument("--transfer", action="store_true")
    ap.add_argument("--shipped-physics", action="store_true")
    ap.add_argument("--track", action="store_true")
    ap.add_argument("--by", default=None, metavar="COLUMN")
    ap.add_argument("--analytic", action="store_true")
    ap.add_argument("--across", action="store_true")
    ap.add_argument("--published", action="store_true")
    ap.add_argument("--network", choices=("both", *NETWORKS), default="both")
    args = ap.parse_args()
    if args.published and not args.across:
        ap.error("--published adds NVIDIA's Megatron-Bridge runs to --across: give --across")
    if args.analytic:
        for flag in ("shrink", "shape_weight", "model_dir"):
            if getattr(args, flag) is not None:
                ap.error(f"--analytic fits no learned model: drop --{flag.replace('_', '-')}")
        if args.survivors_only_memory:
            ap.error("--analytic fits no learned model: drop --survivors-only-memory")
    return args


def main() -> None:
    args = parse_args()
    runs = load_runs(args.sweeps, playbook=not args.no_playbook, data_dir=args.data_dir)
    params: dict[str, Any] | None = None
    if args.model_dir is not None:
        params = SurrogateModel.load(args.model_dir).lightgbm_params
    print(f"{len(runs)} runs; LightGBM settings: "
          f"{'from ' + str(args.model_dir) if params else 'library defaults'}")
    start = time.perf_counter()
    data = training_data(runs)  # features and targets once, sliced per split
    summary: dict[str, dict[str, float]] = {}  # per protocol run: its figures
    if args.analytic:
        logged = analytic_only(data, args)
        if args.across:
            logged |= across(args.data_dir, summary, published=args.published)
        finish(args, runs, summary, start, {}, logged)
        return
    logged, baseline = learned_protocols(data, args, params, summary)
    if args.transfer:
        more, more_baseline = transfer(runs, params, args.data_dir, args.seed, summary)
        logged |= more
        baseline |= more_baseline
    if args.across:
        baseline |= across(args.data_dir, summary, published=args.published)
    finish(args, runs, summary, start, logged, baseline)


NET_LABEL = {"measured": "", "profile": " (profile network)"}
"""What a protocol's summary row adds to its name per network (the measured one: nothing, as
before both were printed)."""
NET_KEY = {"measured": "", "profile": "_profile_network"}
"""The same in MLflow's figure names."""


def networks(args: argparse.Namespace) -> tuple[str, ...]:
    """The networks ``--network`` asks for, in :data:`NETWORKS`' order."""
    return tuple(NETWORKS) if args.network == "both" else (args.network,)


def learned_protocols(data: Any, args: argparse.Namespace, params: dict[str, Any] | None,
                      summary: dict[str, dict[str, float]]
                      ) -> tuple[dict[str, float], dict[str, float]]:
    """Print the learned and the analytic model's figures per protocol and shrinkage (adding
    them to ``summary``); return both by MLflow name."""
    logged: dict[str, float] = {}
    baseline: dict[str, float] = {}
    shrinks: list[float | None] = list(args.shrink or [None])
    settings: dict[str, Any] = ({} if args.shape_weight is None
                                else {"unseen_shape_weight": args.shape_weight})
    if args.survivors_only_memory:
        settings["censored_memory"] = False
    for name in args.protocol or DEFAULT_PROTOCOLS:
        # one fit per split serves every shrinkage and network (both act at prediction time)
        grid = evaluate_grid(data, name, shrinks, networks(args), params=params, seed=args.seed,
                             settings=settings, refit_physics=not args.shipped_physics)
        for (shrink, net), r in grid.items():
            tag = "" if shrink is None else f" (shrink_doublings {shrink:g})"
            tag += (" (shipped physics: fitted on every run)" if args.shipped_physics
                    else " (physics refit per split)")
            table = pd.DataFrame({
                "learned": {k: format_metric(k, v) for k, v in r.metrics.items()},
                "analytic": {k: format_metric(k, v) for k, v in r.analytic_metrics.items()},
            })
            print(f"\n{name}: {PROTOCOLS[name]} ({r.n_splits} splits, held-out runs){tag}"
                  f"\nnetwork: {NETWORKS[net]}")
            print(table.to_string())
            print(reliability(r.predictions, r.analytic_predictions))
            summary.setdefault(
                name + ("" if shrink is None else f" shrink {shrink:g}") + NET_LABEL[net],
                dict(r.metrics))
            print(coverage_table(r.predictions))
            if net == "profile" and (shrink, "measured") in grid:
                print(shipped_coverage(r.predictions, grid[shrink, "measured"].predictions))
            if args.by is not None:
                print(by_column(r.predictions, r.analytic_predictions, args.by).to_string())
            key = name if shrink is None else f"{name}_shrink{shrink:g}"
            key += "_shipped_physics" if args.shipped_physics else ""
            key += NET_KEY[net]
            logged |= {f"{key}/{k}": v for k, v in r.metrics.items()}
            baseline |= {f"{key}/{k}": v for k, v in r.analytic_metrics.items()}
    return logged, baseline


def finish(args: argparse.Namespace, runs: pd.DataFrame, summary: dict[str, dict[str, float]],
           start: float, logged: dict[str, float], baseline: dict[str, float]) -> None:
    """Print the summary and the time taken; with ``--track``, log the figures to MLflow."""
    print_summary(summary)
    print(f"\nevaluated in {time.perf_counter() - start:.0f} s")
    if args.track:
        from surrogate.learned.training_data import data_hash
        from training.tracking import data_label

        track(logged, baseline, label=data_label(runs["source"], args.sweeps),
              data_hash=data_hash(runs))


def analytic_only(data: Any, args: argparse.Namespace) -> dict[str, float]:
    """``--analytic``: print the analytic model's figures per protocol (and, with
    ``--transfer``, on the other cluster and Llama 3 405B); return them by MLflow name."""
    logged: dict[str, float] = {}
    for name in args.protocol or DEFAULT_PROTOCOLS:
        for net in networks(args):
            r = evaluate_analytic(data, name, seed=args.seed,
                                  refit_physics=not args.shipped_physics, network=net)
            tag = (" (shipped physics: fitted on every run)" if args.shipped_physics
                   else " (physics refit per split)")
            print(f"\n{name}: {PROTOCOLS[name]} ({r.n_splits} splits, held-out runs), the "
                  f"analytic model alone{tag}\nnetwork: {NETWORKS[net]}")
            print(pd.DataFrame({"analytic": {k: format_metric(k, v)
                                             for k, v in r.metrics.items()}}).to_string())
            print(reliability(None, r.predictions))
            if args.by is not None:
                print(by_column(r.predictions, None, args.by).to_string())
            key = name + ("_shipped_physics" if args.shipped_physics else "") + NET_KEY[net]
            logged |= {f"{key}/{k}": v for k, v in r.metrics.items()}
    if args.transfer:
        logged |= analytic_transfer(args.data_dir)
    return logged


SUMMARY = (("mfu_mape_ge10", "MFU MAPE"), ("interval_coverage", "MFU/step 80% coverage"),
           ("interval_coverage_recalibrated", "recal"),
           ("memory_mape", "memory MAPE"), ("memory_interval_coverage", "memory 80% coverage"),
           ("memory_interval_coverage_recalibrated", "recal "), ("oom_brier", "p_oom Brier"))
"""The figures :func:`print_summary` shows per protocol: each interval's coverage beside the
error of the value it surrounds."""
RECALIBRATED = ("interval_coverage_recalibrated", "memory_interval_coverage_recalibrated")
"""The coverages as a trained model ships them (recalibrated on the protocol's held-out runs,
held out in turn), shown for the Playbook's protocols only."""


def print_summary(summary: dict[str, dict[str, float]]) -> None:
    """Every protocol run, coverage beside error (:data:`SUMMARY`; ``recal``: as a trained
    model ships them, :func:`training.coverage.recalibrated_hits`); a coverage outside 76-84%
    marked ``*``."""
    if not summary:
        return
    rows = {}
    for name, m in summary.items():
        row = {}
        for key, label in SUMMARY:
            value = m.get(key, float("nan"))
            mark = ("*" if "coverage" in key and value == value
                    and not 0.76 <= value <= 0.84 else "")
            row[label] = format_metric(key, value) + mark
        rows[name] = row
    print("\nheld-out coverage beside error, every protocol run (* coverage outside 76-84%):")
    print(pd.DataFrame(rows).T.to_string())


def coverage_table(predictions: pd.DataFrame) -> str:
    """The held-out runs' interval coverage per node band, framework and pipeline or none
    (``training.coverage.coverage_by_group``: groups of 15 measured runs or more; ``below``:
    what falls under 70%), as the protocol's model gives the intervals and as a trained model
    ships them, recalibrated on the protocol's own held-out runs, held out by cells
    (``training.coverage.recalibrated_hits``; ``recal``)."""
    table = coverage_by_group(predictions)
    recal = coverage_by_group(predictions, hits=recalibrated_hits(predictions))
    shown = table[["grouping", "group", "mfu_runs", "mfu_coverage", "memory_runs",
                   "memory_coverage", "below"]].copy()
    shown.insert(4, "mfu_recal", recal["mfu_coverage"])
    shown.insert(7, "memory_recal", recal["memory_coverage"])
    shown["below, recal"] = recal["below"]
    for col in ("mfu_coverage", "mfu_recal", "memory_coverage", "memory_recal"):
        shown[col] = [format_metric("share", v) for v in shown[col]]
    flagged = int((table["below"] != "").sum())
    flagged_recal = int((recal["below"] != "").sum())
    return (f"80% interval coverage per group (>= {MIN_GROUP_RUNS} measured runs; "
            f"{flagged} group(s) under {100 * COVERAGE_FLOOR:.0f}%, {flagged_recal} after "
            "the recalibration a trained model ships, held out by cells):\n"
            + shown.to_string(index=False))


def shipped_coverage(profile: pd.DataFrame, measured: pd.DataFrame) -> str:
    """Per node count, the 80% intervals' coverage of the held-out runs predicted under the
    profile's curve alone (``profile``): as the protocol's model gives them, after the
    recalibration a trained model ships fitted as it is fitted today, on runs predicted under
    their own measured network (``measured``, the same runs), and after one fitted on
    profile-network predictions (what intervals calibrated for a user's use would cover);
    both held out by cells (``training.coverage.recalibrated_hits``)."""
    from training.coverage import interval_hits

    columns = {"model": interval_hits(profile),
               "shipped recal (fit: measured network)":
                   recalibrated_hits(profile, fitted_on=measured),
               "recal fit on profile network": recalibrated_hits(profile)}
    rows: dict[Any, dict[str, str]] = {}
    for label, (mfu, mem) in columns.items():
        nodes = profile.loc[mfu.index, "num_nodes"]
        for value, part in mfu.groupby(nodes):
            row = rows.setdefault(int(value), {"runs": str(len(part))})
            row[f"MFU {label}"] = format_metric("share", float(part.mean()))
        rows.setdefault("all", {"runs": str(len(mfu))})[f"MFU {label}"] = format_metric(
            "share", float(mfu.mean()))
        if len(mem):
            rows["all"][f"memory {label}"] = format_metric("share", float(mem.mean()))
    table = pd.DataFrame(rows).T.fillna("")
    table.index.name = "num_nodes"
    return ("80% interval coverage of the runs predicted under the profile's curve, per node "
            "count (completed runs with an MFU):\n" + table.to_string())


def reliability(learned: pd.DataFrame | None, analytic: pd.DataFrame | None) -> str:
    """The held-out p_oom's reliability table (``training.coverage.oom_reliability``), learned
    and analytic side by side: per bin the runs, the mean p_oom said and the share that ran
    out of memory."""
    parts = []
    for label, res in (("learned", learned), ("analytic", analytic)):
        if res is None:
            continue
        t = oom_reliability(res).set_index("p_oom")
        t.columns = [f"{label} {c}" for c in t.columns]
        parts.append(t)
    table = pd.concat(parts, axis=1)
    for col in table.columns:
        if col.endswith(("said", "ran_out")):
            table[col] = [format_metric("share", v) for v in table[col]]
    return "p_oom reliability (held-out completed and out-of-memory runs):\n" + table.to_string()


def across(data_dir: Path | None,
           summary: dict[str, dict[str, float]] | None = None, *,
           published: bool = False) -> dict[str, float]:
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
        print(f"\n{GROUPINGS[str(grouping)]}: the analytic model fitted on every other run, "
              "predicting the held-out runs (tokens/s predicted / measured; memory MAPE where "
              "measured)")
        print(shown.to_string(index=False))
        for row in part.to_dict("records"):
            variant = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(row["variant"])).strip("_")
            key = f"across_{grouping}_{row['held_out']}/{variant}"
            out |= {f"{key}/{k}": float(row[k]) for k in
                    ("tps_ratio_median", "tps_mape_ge10", "tps_median_ape", "memory_mape")}
    intervals = transfer_intervals(measured.errors)
    for column, label in (("log_tps", "tokens/s"), ("log_memory", "peak memory")):
        if column not in intervals:
            continue
        q = intervals[column]
        print(f"\n{label}: the 80% interval off the data, x/ {np.exp(q):.2f} (hi / lo "
              f"{np.exp(2 * q):.2f}), each held-out case weighing alike; held out of that "
              "quantile in turn, each case's coverage and width:")
        check = pd.DataFrame(intervals[f"{column}_check"])
        out[f"across_interval/{column}_half_width"] = q
        out[f"across_interval/{column}_min_coverage"] = float(check["coverage"].min())
        if summary is not None:
            for case in intervals[f"{column}_check"]:
                grouping, held = str(case["held_out"]).split(" ", 1)
                row = table[(table["grouping"] == grouping) & (table["held_out"] == held)
                            & (table["variant"] == intervals["variant"])].iloc[0]
                figures = summary.setdefault(f"held out: {case['held_out']}", {})
                if column == "log_tps":
                    figures |= {"mfu_mape_ge10": float(row["tps_mape_ge10"]),
                                "interval_coverage": float(case["coverage"])}
                else:
                    figures |= {"memory_mape": float(row["memory_mape"]),
                                "memory_interval_coverage": float(case["coverage"])}
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
    print(f"\nother cluster, zero-shot: {len(other)} MPT runs (llm-foundry FSDP), the analytic "
          "model alone under the parameter sets that ship less the default set, which saw "
          "these runs (llm-foundry at its priors; --across holds the default out properly)")
    print(pd.DataFrame({g: {k: format_metric(k, m[k]) for k in keys}
                        for g, m in rows.items()}).to_string())
    out = {f"other_cluster_zero-shot/{k}": rows["all"][k] for k in keys}
    table = pd.concat([llama3_405b_table(None, v) for v in LLAMA3_405B_VPP], ignore_index=True)
    print("\nLlama 3 405B, Table 4 of the Llama 3 paper (reported MFU: Meta's; predicted: the "
          "analytic model alone); vpp 2 and 4: the interleaved schedule the paper describes "
          "(sec. 3.3.2), whose V it does not publish")
    shown = table[["gpus", "dp", "cp", "seq_len", "vpp", "reported_mfu", "analytic_mfu",
                   "analytic_err", "peak_gib"]].copy()
    for col in ("reported_mfu", "analytic_mfu", "analytic_err"):
        shown[col] = [f"{100 * v:.1f}%" for v in shown[col]]
    shown["peak_gib"] = shown["peak_gib"].round(1)
    print(shown.to_string(index=False))
    return out | llama3_figures(table, "analytic_err")


BY_METRICS = ("completed", "mfu_mape_ge10", "mfu_median_ape", "interval_coverage",
              "memory_mape", "memory_interval_coverage")
"""The learned model's figures that ``--by`` prints per value."""
BY_ANALYTIC = ("mfu_mape_ge10", "mfu_median_ape", "memory_mape")
"""The analytic model's figures printed beside them."""


def by_column(predictions: pd.DataFrame, analytic: pd.DataFrame | None,
              column: str) -> pd.DataFrame:
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


def transfer(runs: pd.DataFrame, params: dict[str, Any] | None, data_dir: Path | None,
             seed: int, summary: dict[str, dict[str, float]] | None = None
             ) -> tuple[dict[str, float], dict[str, float]]:
    """Print and return the other-cluster and Llama 3 405B figures: learned, analytic (and
    add the learned ones to ``summary``, per setting)."""
    from training.transfer import LLAMA3_405B_VPP, llama3_405b_table, other_cluster

    p = params or {}
    model = SurrogateModel(status_params=p.get("status"), mfu_params=p.get("mfu"),
                           mem_params=p.get("mem"), seed=seed).fit(runs)
    other = mpt_runs(data_dir)
    out: dict[str, float] = {}
    analytic: dict[str, float] = {}
    print(f"\nother cluster: {len(other)} MPT runs (llm-foundry FSDP; "
          + ", ".join(f"{g} {n}" for g, n in other["gpu"].value_counts().items())
          + "); k-shot: mean of 3 draws, scored on the runs not drawn")
    tables: dict[str, dict[str, dict[str, str]]] = {}
    results = other_cluster(runs, other, params=params, seed=seed, fitted=model,
                            sets=without_default())
    for r in results:
        if summary is not None:
            # no "recal": recalibrated on these held-out runs' own errors, which no model a
            # user trains has seen, it would flatter the intervals
            summary[f"MPT {r.setting}" + ("" if r.scales == "any" else ", from one node")] = (
                r.metrics | dict.fromkeys(RECALIBRATED, float("nan")))
        rows = tables.setdefault(r.scales, {})
        for k in ("mfu_mape_ge10", "mfu_median_ape", "mfu_spearman", "interval_coverage"):
            rows.setdefault(k, {})[f"{r.setting} learned"] = format_metric(k, r.metrics[k])
            rows[k][f"{r.setting} analytic"] = format_metric(k, r.analytic_metrics[k])
            if r.own_physics_metrics is not None:
                rows[k][f"{r.setting} analytic, own physics"] = format_metric(
                    k, r.own_physics_metrics[k])
            key = "other_cluster_" + r.setting.replace("=", "").replace(" ", "_")  # MLflow's names
            key += "" if r.scales == "any" else "_from_one_node"
            out[f"{key}/{k}"] = r.metrics[k]
            analytic[f"{key}/{k}"] = r.analytic_metrics[k]
            if r.own_physics_metrics is not None:
                analytic[f"{key}_own_physics/{k}"] = r.own_physics_metrics[k]
    for scales, rows in tables.items():
        if scales != "any":
            n_one = int((other["num_nodes"] == 1).sum())
            print(f"\nthe same, as a user who ran on one node only: k of its {n_one} one-node "
                  f"runs added, scored on its {len(other) - n_one} runs of more nodes")
        print(pd.DataFrame(rows).T.to_string())
    table = pd.concat([llama3_405b_table(model, v) for v in LLAMA3_405B_VPP],
                      ignore_index=True)
    print("\nLlama 3 405B, Table 4 of the Llama 3 paper (reported MFU: Meta's; predicted: ours)."
          "\nvpp 1: the layouts as Table 4 gives them; vpp 2 and 4: with the interleaved "
          "schedule the paper describes (sec. 3.3.2), whose V it does not publish."
          "\npeak_gib: the predicted peak memory of the most loaded rank (80 GB H100s)")
    shown = table.drop(columns="extrapolation").copy()
    for col in ("reported_mfu", "learned_mfu", "learned_lo", "learned_hi", "analytic_mfu",
                "learned_err", "analytic_err"):
        shown[col] = [f"{100 * v:.1f}%" for v in shown[col]]
    shown["peak_gib"] = shown["peak_gib"].round(1)
    print(shown.to_string(index=False))
    print("extrapolates along (each layout, every vpp alike):")
    for (gpus, dp, cp), part in table.groupby(["gpus", "dp", "cp"], sort=False):
        print(f"  {gpus} GPUs, dp {dp}, cp {cp}: "
              + " | ".join(sorted(set(part["extrapolation"]))))
    out |= llama3_figures(table, "learned_err")
    analytic |= llama3_figures(table, "analytic_err")
    return out, analytic


def track(metrics: dict[str, float], baseline: dict[str, float], *, label: str,
          data_hash: str) -> None:
    """Log the figures as a run of the experiment ``surrogate-accuracy`` and the analytic
    model's as that data's ``analytic baseline`` run (updated in place); no learned run where
    ``metrics`` is empty (``--analytic``)."""
    from datetime import UTC, datetime

    from surrogate.io import tracking

    exp_id = tracking.experiment(
        "surrogate-accuracy",
        description="One run per `python benchmarks/accuracy.py --track`; the analytic model's "
                    "figures on the same data are the `analytic baseline` runs.")
    client = tracking.client()
    if metrics:
        run = client.create_run(exp_id,
                                run_name=f"accuracy {datetime.now(UTC):%Y-%m-%d} {label}",
                                tags={tracking.KIND_TAG: "accuracy", "data_hash": data_hash,
                                      "data_label": label})
        tracking.log_metrics(run.info.run_id, metrics)
        client.set_terminated(run.info.run_id)
    base_id, _ = tracking.run_for(exp_id, f"analytic baseline {label}",
                                  {tracking.KIND_TAG: "analytic-baseline", "data_label": label,
                                   "data_hash": data_hash})
    tracking.log_metrics(base_id, baseline)
    client.set_terminated(base_id)
    print(f"logged {len(metrics)} figures and {len(baseline)} baseline figures to MLflow at "
          f"{tracking.tracking_uri()}")


if __name__ == "__main__":
    main()
