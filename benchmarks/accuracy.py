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
``surrogate.runs.context``), which no user has before a run; ``profile``, the cluster
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
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from accuracy_transfer import across, analytic_transfer, by_column, transfer

from surrogate.learned.model import SurrogateModel
from surrogate.learned.training_data import training_data
from surrogate.runs.context import NETWORKS
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
    evaluate_analytic,
    evaluate_grid,
    format_metric,
)
from training.train import load_runs


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
    ap.add_argument("--network", choices=("both", "measured", "profile"), default="both")
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
    print(
        f"{len(runs)} runs; LightGBM settings: "
        f"{'from ' + str(args.model_dir) if params else 'library defaults'}"
    )
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
    return ("measured", "profile") if args.network == "both" else (args.network,)


def learned_protocols(
    data: Any,
    args: argparse.Namespace,
    params: dict[str, Any] | None,
    summary: dict[str, dict[str, float]],
) -> tuple[dict[str, float], dict[str, float]]:
    """Print the learned and the analytic model's figures per protocol and shrinkage (adding
    them to ``summary``); return both by MLflow name."""
    logged: dict[str, float] = {}
    baseline: dict[str, float] = {}
    shrinks: list[float | None] = list(args.shrink or [None])
    settings: dict[str, Any] = (
        {} if args.shape_weight is None else {"unseen_shape_weight": args.shape_weight}
    )
    if args.survivors_only_memory:
        settings["censored_memory"] = False
    for name in args.protocol or DEFAULT_PROTOCOLS:
        # one fit per split serves every shrinkage and network (both act at prediction time)
        # both: the curve too, as if measured (the known network's interval, which the
        # shipped interval of an unknown network also holds: shipped_coverage)
        nets = networks(args) + (("curve",) if args.network == "both" else ())
        grid = evaluate_grid(
            data,
            name,
            shrinks,
            nets,
            params=params,
            seed=args.seed,
            settings=settings,
            refit_physics=not args.shipped_physics,
        )
        for (shrink, net), r in grid.items():
            if net == "curve":
                continue
            tag = "" if shrink is None else f" (shrink_doublings {shrink:g})"
            tag += (
                " (shipped physics: fitted on every run)"
                if args.shipped_physics
                else " (physics refit per split)"
            )
            table = pd.DataFrame(
                {
                    "learned": {k: format_metric(k, v) for k, v in r.metrics.items()},
                    "analytic": {k: format_metric(k, v) for k, v in r.analytic_metrics.items()},
                }
            )
            print(
                f"\n{name}: {PROTOCOLS[name]} ({r.n_splits} splits, held-out runs){tag}"
                f"\nnetwork: {NETWORKS[net]}"
            )
            print(table.to_string())
            print(reliability(r.predictions, r.analytic_predictions))
            summary.setdefault(
                name + ("" if shrink is None else f" shrink {shrink:g}") + NET_LABEL[net],
                dict(r.metrics),
            )
            print(coverage_table(r.predictions))
            if net == "profile" and (shrink, "measured") in grid:
                print(
                    shipped_coverage(
                        r.predictions,
                        grid[shrink, "measured"].predictions,
                        grid[shrink, "curve"].predictions,
                    )
                )
            if args.by is not None:
                print(by_column(r.predictions, r.analytic_predictions, args.by).to_string())
            key = name if shrink is None else f"{name}_shrink{shrink:g}"
            key += "_shipped_physics" if args.shipped_physics else ""
            key += NET_KEY[net]
            logged |= {f"{key}/{k}": v for k, v in r.metrics.items()}
            baseline |= {f"{key}/{k}": v for k, v in r.analytic_metrics.items()}
    return logged, baseline


def finish(
    args: argparse.Namespace,
    runs: pd.DataFrame,
    summary: dict[str, dict[str, float]],
    start: float,
    logged: dict[str, float],
    baseline: dict[str, float],
) -> None:
    """Print the summary and the time taken; with ``--track``, log the figures to MLflow."""
    print_summary(summary)
    print(f"\nevaluated in {time.perf_counter() - start:.0f} s")
    if args.track:
        from surrogate.learned.training_data import data_hash
        from training.tracking import data_label

        track(
            logged,
            baseline,
            label=data_label(runs["source"], args.sweeps),
            data_hash=data_hash(runs),
        )


def analytic_only(data: Any, args: argparse.Namespace) -> dict[str, float]:
    """``--analytic``: print the analytic model's figures per protocol (and, with
    ``--transfer``, on the other cluster and Llama 3 405B); return them by MLflow name."""
    logged: dict[str, float] = {}
    for name in args.protocol or DEFAULT_PROTOCOLS:
        for net in networks(args):
            r = evaluate_analytic(
                data, name, seed=args.seed, refit_physics=not args.shipped_physics, network=net
            )
            tag = (
                " (shipped physics: fitted on every run)"
                if args.shipped_physics
                else " (physics refit per split)"
            )
            print(
                f"\n{name}: {PROTOCOLS[name]} ({r.n_splits} splits, held-out runs), the "
                f"analytic model alone{tag}\nnetwork: {NETWORKS[net]}"
            )
            print(
                pd.DataFrame(
                    {"analytic": {k: format_metric(k, v) for k, v in r.metrics.items()}}
                ).to_string()
            )
            print(reliability(None, r.predictions))
            if args.by is not None:
                print(by_column(r.predictions, None, args.by).to_string())
            key = name + ("_shipped_physics" if args.shipped_physics else "") + NET_KEY[net]
            logged |= {f"{key}/{k}": v for k, v in r.metrics.items()}
    if args.transfer:
        logged |= analytic_transfer(args.data_dir)
    return logged


SUMMARY = (
    ("mfu_mape_ge10", "MFU MAPE"),
    ("interval_coverage", "MFU/step 80% coverage"),
    ("interval_coverage_recalibrated", "recal"),
    ("memory_mape", "memory MAPE"),
    ("memory_interval_coverage", "memory 80% coverage"),
    ("memory_interval_coverage_recalibrated", "recal "),
    ("oom_brier", "p_oom Brier"),
)
"""The figures :func:`print_summary` shows per protocol: each interval's coverage beside the
error of the value it surrounds."""


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
            mark = "*" if "coverage" in key and value == value and not 0.76 <= value <= 0.84 else ""
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
    shown = table[
        ["grouping", "group", "mfu_runs", "mfu_coverage", "memory_runs", "memory_coverage", "below"]
    ].copy()
    shown.insert(4, "mfu_recal", recal["mfu_coverage"])
    shown.insert(7, "memory_recal", recal["memory_coverage"])
    shown["below, recal"] = recal["below"]
    for col in ("mfu_coverage", "mfu_recal", "memory_coverage", "memory_recal"):
        shown[col] = [format_metric("share", v) for v in shown[col]]
    flagged = int((table["below"] != "").sum())
    flagged_recal = int((recal["below"] != "").sum())
    return (
        f"80% interval coverage per group (>= {MIN_GROUP_RUNS} measured runs; "
        f"{flagged} group(s) under {100 * COVERAGE_FLOOR:.0f}%, {flagged_recal} after "
        "the recalibration a trained model ships, held out by cells):\n"
        + shown.to_string(index=False)
    )


def shipped_coverage(profile: pd.DataFrame, measured: pd.DataFrame, curve: pd.DataFrame) -> str:
    """Per node count, the 80% MFU intervals' coverage of the held-out runs predicted under
    the profile's curve alone (``profile``; their intervals widened by the cluster's spread of
    the network, ``surrogate.learned.blend.with_network_spread``): as the protocol's model
    gives them; after a recalibration fitted on runs predicted under their own measured
    network (``measured``, the same runs: how models were recalibrated before); and as a
    trained model ships them: recalibrated on profile-network predictions
    (``surrogate.learned.recalibration``'s ``mfu_profile``) and holding the interval of the
    same prediction with its network known (``curve``, recalibrated as ``measured``'s:
    ``Recalibration.apply``'s ``unwidened``;
    ``training.coverage.unknown_network_factors``; ``profile recal alone``: without the
    known network's interval), with their widths (hi / lo, median and 90th
    percentile) and those of ``measured`` as shipped (``with --network``); per node count,
    pipeline or none and over all; every recalibration held out by cells
    (``training.coverage.recalibrated_factors``)."""
    from training.coverage import interval_hits, recalibrated_widths, unknown_network_factors

    hull, k_profile, k_known = unknown_network_factors(profile, curve, measured)
    shipped = "as shipped (recal fit: profile network)"
    columns = {
        "model": interval_hits(profile)[0],
        "recal fit: measured network": recalibrated_hits(profile, fitted_on=measured)[0],
        "profile recal alone": recalibrated_hits(profile)[0],
        shipped: hull,
    }
    done = profile.loc[k_profile.index]
    own = (done["pred_mfu_hi"] / done["pred_mfu_lo"]) ** k_profile
    base = curve.loc[k_profile.index]
    lo = np.minimum(
        done["pred_mfu"] * (done["pred_mfu_lo"] / done["pred_mfu"]) ** k_profile,
        base["pred_mfu"] * (base["pred_mfu_lo"] / base["pred_mfu"]) ** k_known,
    )
    hi = np.maximum(
        done["pred_mfu"] * (done["pred_mfu_hi"] / done["pred_mfu"]) ** k_profile,
        base["pred_mfu"] * (base["pred_mfu_hi"] / base["pred_mfu"]) ** k_known,
    )
    width = (hi / lo).where(np.isfinite(hi / lo), own)
    known = recalibrated_widths(measured).reindex(width.index)
    rows: dict[Any, dict[str, str]] = {}
    nodes = profile.loc[width.index, "num_nodes"].astype(int)
    pipelined = np.where(profile.loc[width.index, "pp"] > 1, "pp>1", "pp=1")
    for value, part in [*width.groupby(nodes), *width.groupby(pipelined), ("all", width)]:
        row = rows.setdefault(value, {"runs": str(len(part))})
        for label, hits in columns.items():
            row[f"MFU {label}"] = format_metric("share", float(hits.loc[part.index].mean()))
        for label, w in (("width median / p90", part), ("with --network", known[part.index])):
            row[label] = f"{float(w.median()):.2f} / {float(w.quantile(0.9)):.2f}"
    table = pd.DataFrame(rows).T.fillna("")
    table.index.name = "num_nodes"
    return (
        "80% MFU interval coverage of the runs predicted under the profile's curve, per "
        "node count (completed runs with an MFU):\n" + table.to_string()
    )


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


def track(
    metrics: dict[str, float], baseline: dict[str, float], *, label: str, data_hash: str
) -> None:
    """Log the figures as a run of the experiment ``surrogate-accuracy`` and the analytic
    model's as that data's ``analytic baseline`` run (updated in place); no learned run where
    ``metrics`` is empty (``--analytic``)."""
    from datetime import UTC, datetime

    from surrogate.io import tracking

    exp_id = tracking.experiment(
        "surrogate-accuracy",
        description="One run per `python benchmarks/accuracy.py --track`; the analytic model's "
        "figures on the same data are the `analytic baseline` runs.",
    )
    client = tracking.client()
    if metrics:
        run = client.create_run(
            exp_id,
            run_name=f"accuracy {datetime.now(UTC):%Y-%m-%d} {label}",
            tags={tracking.KIND_TAG: "accuracy", "data_hash": data_hash, "data_label": label},
        )
        tracking.log_metrics(run.info.run_id, metrics)
        client.set_terminated(run.info.run_id)
    base_id, _ = tracking.run_for(
        exp_id,
        f"analytic baseline {label}",
        {tracking.KIND_TAG: "analytic-baseline", "data_label": label, "data_hash": data_hash},
    )
    tracking.log_metrics(base_id, baseline)
    client.set_terminated(base_id)
    print(
        f"logged {len(metrics)} figures and {len(baseline)} baseline figures to MLflow at "
        f"{tracking.tracking_uri()}"
    )


if __name__ == "__main__":
    main()
