"""Replay the active-learning loop on the Playbook sweep and print how fast it finds the best.

    python benchmarks/active_replay.py [--data-dir DIR] [--cells 8.86G@4,80G@16] [--max-runs 12]
                                       [--batch 2] [--seed 0] [--seeds 20] [--no-mlflow]
                                       [--profile hf-playbook-cluster] [--network typical|any]
                                       [--gain probability-best|expected-improvement]
                                       [--diversity-scale 1.0]

For each (model, nodes) cell of the Playbook table: a SurrogateModel is trained on the *other*
cells only (cheap settings, cached per cell under ``--cache-dir`` by its features and targets),
each run explained under the network it measured, as ``surrogate train`` does
(:func:`surrogate.ingest.playbook_network.playbook_runs`); the loop then proposes
``--batch`` runs per round among the cell's configurations present in the table (running one =
reading its measured outcome), adds them to the training data and retrains, until a run within
2% (relative) of the cell's best measured MFU is found or ``--max-runs`` runs are spent.

A configuration's outcome is its best completed MFU over the table's repeats (a few
configurations were run more than once), status completed if any repeat completed; the cell's
best is the best of these. With ``--network typical`` (the default) only the cell's runs on a
typical network for their node count count (:func:`typical_network`): a run that measured a
network several times faster than the cluster's usual one is the network of the day, which no
layout chooses; ``--network any`` counts every run.

Baselines: random picks (``--seeds`` permutations; also the exact expectation (N+1)/(H+1) for
N configurations with H hits), the Playbook's rules of thumb
(:func:`surrogate.layouts.rules.rules_order` walked until a hit) and the initial model's greedy
ranking without the loop (predicted MFU x p_completed), whose first pick's shortfall from the
cell's best is the cell's top-1 regret. Layouts are scored on the sweep's own cluster profile
(``--profile``, as a user of that cluster passes it to ``search`` and ``propose``): its
network and the parameter sets' cluster-scoped terms. ``--seed`` seeds the models (a replay's
spread shows over a few seeds). The shipped parameter sets the models start from were fitted
on every Playbook run, the held-out cell's included (13 physical parameters over about 3,400
runs). Prints one row per cell, the share of cells hit within 3 and 8 runs, the cells where
the loop falls more than one run behind the initial ranking, the share of the loop's proposed
runs that ran out of memory or failed (a line of its own; the Playbook's grid lost 56% of its
runs that way) and the top-1 regret; logs the table and summary to MLflow (experiment
``surrogate-active-replay``) unless ``--no-mlflow``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from surrogate.config.training import TrainingConfig, config_from_flat, config_to_flat
from surrogate.errors import NoModelError
from surrogate.ingest.playbook import PROFILE
from surrogate.ingest.playbook_network import playbook_runs
from surrogate.layouts.rules import rules_order
from surrogate.layouts.search import Limits, score_configs
from surrogate.learned.model import SurrogateModel
from surrogate.learned.training_data import training_data
from surrogate.loop.acquisition import GAINS, Acquisition, select

CHEAP = {"n_estimators": 100}
TOLERANCE = 0.02
BUDGET = 8
SHORT = 3
NETWORK_FACTOR = 2.0


def cell_key(df: pd.DataFrame) -> pd.Series:
    return df["model_name"].astype(str) + "@" + df["num_nodes"].astype(str)


def fit_cached(runs: pd.DataFrame, cache: Path | None, seed: int = 0) -> SurrogateModel:
    """A cheap SurrogateModel of ``runs``, loaded from ``cache`` when the same features and
    targets were fitted (``TrainingData.targets_hash``: they change with the runs and with the
    physics under them, so a cached model never outlives the analytic model it corrected)."""
    data = training_data(runs)
    digest = hashlib.sha256(
        (data.targets_hash + json.dumps(CHEAP) + ("" if seed == 0 else f"seed={seed}")).encode()
    ).hexdigest()[:16]
    if cache is not None:
        d = cache / digest
        try:
            return SurrogateModel.load(d)
        except NoModelError:
            pass
    model = SurrogateModel(
        status_params=CHEAP, mfu_params=CHEAP, mem_params=CHEAP, n_folds=3, seed=seed
    ).fit(data)
    if cache is not None:
        model.save(cache / digest)
    return model


def candidates_of(cell: pd.DataFrame) -> tuple[list[TrainingConfig], pd.DataFrame]:
    """One candidate per distinct configuration: best completed MFU over its repeats."""
    ids = cell.apply(
        lambda r: json.dumps(config_to_flat(config_from_flat(r)), sort_keys=True), axis=1
    )
    cell = cell.assign(_id=ids.to_numpy())
    rows = []
    for cid, group in cell.groupby("_id", sort=True):
        done = group[group["status"] == "completed"]
        status = "completed" if len(done) else group["status"].mode().iloc[0]
        rows.append(
            {"_id": cid, "status": status, "mfu": float(done["mfu"].max()) if len(done) else np.nan}
        )
    outcome = pd.DataFrame(rows)
    configs = [config_from_flat(json.loads(c)) for c in outcome["_id"]]
    return configs, outcome


def typical_network(runs: pd.DataFrame) -> np.ndarray:
    """Whether each run measured a network within a factor of :data:`NETWORK_FACTOR` of its
    cluster's curve at its node count (``net_scale``; missing on one node: typical). On 8 to
    64 nodes an eighth to a third of the Playbook's completed runs measured a network more
    than twice as fast as the curve, up to 9 times: a state of the network on the day, which
    no layout chooses."""
    scale = runs["net_scale"].to_numpy(dtype=np.float64)
    return np.asarray(~np.isfinite(scale) | (np.abs(np.log(scale)) <= np.log(NETWORK_FACTOR)))


def runs_until_hit(order: list[int], hit: np.ndarray) -> int | None:
    for n, i in enumerate(order, start=1):
        if hit[i]:
            return n
    return None


def replay_cell(
    name: str, runs: pd.DataFrame, args: argparse.Namespace, cache: Path | None
) -> dict[str, Any]:
    in_cell = cell_key(runs) == name
    cell, others = runs[in_cell], runs[~in_cell].reset_index(drop=True)
    if args.network == "typical":
        cell = cell[typical_network(cell)]
    configs, outcome = candidates_of(cell)
    best = float(outcome["mfu"].max())
    hit = (outcome["mfu"] >= (1 - TOLERANCE) * best).fillna(False).to_numpy()
    n, h = len(configs), int(hit.sum())
    row: dict[str, Any] = {"cell": name, "configs": n, "hits": h, "best_mfu": best}
    if h == 0:  # no run of the cell completed: nothing to find
        return row

    model = fit_cached(others, cache, args.seed)
    limits = Limits(max_p_oom=1.0)
    scored = score_configs(configs, model=model, limits=limits, profile=args.profile)
    greedy = np.argsort(-(scored["pred_mfu"] * scored["p_completed"]).to_numpy(), kind="stable")
    row["greedy"] = runs_until_hit([int(i) for i in greedy], hit)
    top = outcome["mfu"].iloc[int(greedy[0])]
    row["top1_regret"] = 1.0 if pd.isna(top) else 1.0 - float(top) / best
    row["rules"] = runs_until_hit(rules_order(configs), hit)
    rng = np.random.default_rng(0)
    random_counts = [runs_until_hit(list(rng.permutation(n)), hit) for _ in range(args.seeds)]
    row["random_mean"] = float(np.mean(random_counts))
    row["random_within_8"] = float(np.mean([c is not None and c <= BUDGET for c in random_counts]))
    row["random_expected"] = (n + 1) / (h + 1)

    acq = Acquisition(
        boundary_frac=args.boundary_frac,
        gain=args.gain,
        open_with_best=not args.explore_first,
        diversity_scale=args.diversity_scale,
    )
    ran: list[int] = []
    found: int | None = None
    failed = 0
    rounds = 0
    while len(ran) < args.max_runs and rounds < args.max_rounds and found is None:
        done = outcome.iloc[ran]
        done = done[done["status"] == "completed"]
        incumbent = float(done["mfu"].max()) if len(done) else None
        k = min(args.batch, args.max_runs - len(ran))
        picks = select(
            scored,
            configs,
            k,
            best_measured=incumbent,
            already_run=[configs[i] for i in ran],
            acquisition=acq,
        )
        rounds += 1
        for i, _reason, _value in picks:
            ran.append(i)
            failed += outcome["status"].iloc[i] != "completed"
            if hit[i] and found is None:
                found = len(ran)
        if found is None and len(ran) < args.max_runs:
            observed_ids = set(outcome["_id"].iloc[ran])
            ids = cell.apply(
                lambda r: json.dumps(config_to_flat(config_from_flat(r)), sort_keys=True), axis=1
            )
            seen = cell[ids.isin(observed_ids).to_numpy()]
            model = fit_cached(pd.concat([others, seen], ignore_index=True), None, args.seed)
            scored = score_configs(configs, model=model, limits=limits, profile=args.profile)
    row["loop"] = found
    row["loop_runs_spent"] = len(ran)
    row["loop_failed"] = failed
    row["loop_rounds"] = rounds
    return row


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--cells", default=None, help="comma-separated cells, e.g. 8.86G@4,80G@16")
    ap.add_argument("--max-runs", type=int, default=12)
    ap.add_argument("--max-rounds", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=2, help="runs proposed per round")
    ap.add_argument(
        "--boundary-frac",
        type=float,
        default=0.0,
        help="share of each round for OOM-boundary runs (the goal here is the best)",
    )
    ap.add_argument(
        "--gain",
        default=Acquisition().gain,
        choices=GAINS,
        help="how the loop values a candidate (surrogate.loop.acquisition.Acquisition.gain)",
    )
    ap.add_argument(
        "--diversity-scale",
        type=float,
        default=Acquisition().diversity_scale,
        help="length scale of the diversity penalty in doublings, 0: none "
        "(surrogate.loop.acquisition.Acquisition.diversity_scale)",
    )
    ap.add_argument(
        "--profile",
        default=PROFILE,
        help="calibration profile the layouts are scored on (the sweep's cluster)",
    )
    ap.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the models' seed (a replay's spread: run it with a few)",
    )
    ap.add_argument(
        "--explore-first",
        action="store_true",
        help="no opening pick of the best-ranked layout "
        "(surrogate.loop.acquisition.Acquisition.open_with_best)",
    )
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument(
        "--network",
        default="typical",
        choices=("typical", "any"),
        help="the cell's runs that count: those on a typical network for their "
        "node count (typical_network), or every run",
    )
    ap.add_argument("--cache-dir", default="benchmarks/.cache/active_replay")
    ap.add_argument("--no-mlflow", action="store_true")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    t0 = time.perf_counter()
    runs = playbook_runs(args.data_dir)
    cells = sorted(
        cell_key(runs).unique(),
        key=lambda c: (float(c.split("@")[0].rstrip("G")), int(c.split("@")[1])),
    )
    if args.cells:
        wanted = args.cells.split(",")
        unknown = set(wanted) - set(cells)
        if unknown:
            raise SystemExit(f"unknown cells {sorted(unknown)}; cells are {', '.join(cells)}")
        cells = [c for c in cells if c in wanted]
    cache = Path(args.cache_dir) if args.cache_dir else None
    rows = []
    for name in cells:
        t = time.perf_counter()
        row = replay_cell(name, runs, args, cache)
        row["seconds"] = round(time.perf_counter() - t, 1)
        rows.append(row)
        if row["hits"] == 0:
            print(f"{name:>9}: no completed run, skipped", flush=True)
            continue
        print(
            f"{name:>9}: loop {row['loop']}  rules {row['rules']}  greedy {row['greedy']}  "
            f"random {row['random_mean']:.1f}  ({row['seconds']} s)",
            flush=True,
        )
    table, metrics = summarize(pd.DataFrame(rows), args)
    elapsed = time.perf_counter() - t0
    print(f"total time {elapsed:.0f} s")
    if not args.no_mlflow:
        log_mlflow(table, metrics, vars(args), elapsed)


def summarize(
    table: pd.DataFrame,
    args: argparse.Namespace,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Print the per-cell table and the summary figures; the counted cells and the metrics."""
    skipped = table[table["hits"] == 0]["cell"].tolist()
    table = table[table["hits"] > 0].reset_index(drop=True)
    for col in ("greedy", "rules", "loop"):
        table[col] = pd.to_numeric(table[col], errors="coerce")
    within = {
        "loop": float(np.mean([not pd.isna(r) and r <= BUDGET for r in table["loop"]])),
        "greedy": float(np.mean([not pd.isna(r) and r <= BUDGET for r in table["greedy"]])),
        "rules": float(np.mean([not pd.isna(r) and r <= BUDGET for r in table["rules"]])),
        "random": float(table["random_within_8"].mean()),
    }
    pd.set_option("display.width", 200)
    print(
        f"\nruns until one within {TOLERANCE:.0%} (relative) of the cell's best measured MFU "
        f"(loop: {args.batch} per round, retrained each round, at most {args.max_runs}; "
        f"NaN: not found)"
    )
    print(table.drop(columns=["random_within_8"]).to_string(index=False, float_format="%.3f"))
    if skipped:
        print(f"cells without a completed run (not counted): {', '.join(skipped)}")
    print(
        f"\nshare of {len(table)} cells hit within {BUDGET} runs: "
        + ", ".join(f"{k} {v:.0%}" for k, v in within.items())
    )
    loop = table["loop"].fillna(np.inf)
    behind = (loop - table["greedy"].fillna(np.inf)).fillna(0.0)
    print(
        f"loop: within {SHORT} runs in {np.mean(loop <= SHORT):.0%} of cells "
        f"({int((loop <= SHORT).sum())}), within {BUDGET} in {np.mean(loop <= BUDGET):.0%} "
        f"({int((loop <= BUDGET).sum())})"
    )
    print(
        f"loop behind its initial ranking by more than one run in {int((behind > 1).sum())} "
        f"cells, by at most {behind.max():g} runs (inf: the loop missed where the ranking "
        f"found)"
    )
    spent, failed = int(table["loop_runs_spent"].sum()), int(table["loop_failed"].sum())
    print(
        f"proposed runs that ran out of memory or failed: {failed} of {spent} "
        f"({failed / max(spent, 1):.1%})"
    )
    regret = table["top1_regret"]
    print(
        f"top-1 regret (the initial ranking's first pick short of the cell's best; 1: it did "
        f"not complete): median {regret.median():.1%}, mean {regret.mean():.1%}, "
        f"max {regret.max():.1%}"
    )
    print(
        f"median runs: loop {table['loop'].median()}, rules {table['rules'].median()}, "
        f"greedy {table['greedy'].median()}, random (mean over seeds) "
        f"{table['random_mean'].median():.1f}"
    )
    return table, within | {
        f"loop_within_{SHORT}": float(np.mean(loop <= SHORT)),
        "loop_behind_cells": float((behind > 1).sum()),
        "loop_failed_share": failed / max(spent, 1),
        "top1_regret_median": float(regret.median()),
    }


def log_mlflow(
    table: pd.DataFrame, within: dict[str, float], params: dict[str, Any], elapsed: float
) -> None:
    import tempfile

    import mlflow

    from surrogate.io import tracking

    uri = tracking.connect()
    exp_id = tracking.experiment("surrogate-active-replay")
    with mlflow.start_run(
        experiment_id=exp_id, run_name="playbook replay", tags={tracking.KIND_TAG: "accuracy"}
    ):
        mlflow.log_params({k: v for k, v in params.items() if v is not None})
        mlflow.log_metrics(
            {
                (k if k.startswith(("loop_", "top1_")) else f"within_{BUDGET}/{k}"): v
                for k, v in within.items()
            }
            | {"replay/cells": float(len(table)), "replay/seconds": elapsed}
        )
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "active_replay.csv"
            table.to_csv(out, index=False)
            mlflow.log_artifact(str(out))
    print(f"logged to MLflow ({uri}, experiment surrogate-active-replay)")


if __name__ == "__main__":
    main()
