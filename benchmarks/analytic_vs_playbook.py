"""The analytic model alone against every run of the Playbook sweep: the targets of its
calibration.

Each run is explained under its own cluster (the ``hf-playbook-cluster`` profile and the
bandwidth the run measured, ``surrogate.runs.context``). Three rows:

- ``priors``: the free parameters at their priors (``surrogate.analytic.params``), nothing
  fitted;
- ``shipped``: the parameters shipped in ``surrogate/data/analytic_params.json`` (fitted on
  these runs: in-sample);
- ``held out``: fitted per framework version with each model size left out in turn
  (``surrogate calibrate --runs``' grouped cross-validation), predicting the left-out size.

Figures: MFU MAPE over completed runs of MFU >= 10%, median APE over all completed runs,
Spearman's rank correlation of throughput (all completed runs), peak reserved memory MAPE
(all completed runs), and OOM recall / precision at p_oom > 0.5 (completed vs oom; failed runs
are left out). Targets (issue "The analytic model, calibrated"): MAPE <= 20%, Spearman >= 0.9,
memory MAPE <= 8%, OOM recall >= 97% at precision >= 95%.

    python benchmarks/analytic_vs_playbook.py [--fit-on all|healthy] [--by model|nodes|tp|pp]
                                              [--hold-out model|nodes|tp|pp]

``--hold-out`` chooses what the ``held out`` row leaves out in turn (default: each model size).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from surrogate.analytic.params import PRIORS
from surrogate.calibration.blocks import (
    blocks_for_runs,
    predicted_logged_reserved,
    predicted_reserved,
    predicted_step_s,
    values_in_use,
)
from surrogate.calibration.fit_params import fit_runs, held_out_figures
from surrogate.ingest.playbook_network import playbook_runs


def predictions(runs: pd.DataFrame, values: dict[str, float] | None) -> dict[str, np.ndarray]:
    """Step time, reserved memory (on the rank each run's measurement was logged on, and on
    the most loaded rank) and memory error of every run with ``values`` (None: the shipped
    parameters of each run's framework version)."""
    blocks, rows = blocks_for_runs(runs)
    out = {
        k: np.full(len(runs), np.nan)
        for k in (
            "step_time_s",
            "reserved_bytes",
            "peak_reserved_bytes",
            "memory_log_sd",
            "oom_log_margin",
        )
    }
    for b, idx in zip(blocks, rows, strict=True):
        vals = values if values is not None else values_in_use(b)
        out["step_time_s"][idx] = predicted_step_s(b, vals)
        out["reserved_bytes"][idx] = predicted_logged_reserved(b, vals)
        out["peak_reserved_bytes"][idx] = predicted_reserved(b, vals)
        out["memory_log_sd"][idx] = vals["memory_log_sd"]
        out["oom_log_margin"][idx] = vals["oom_log_margin"]
    return out


GROUPS = {"model": "model_name", "nodes": "num_nodes", "tp": "tp", "pp": "pp"}
"""The run columns the options name."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--fit-on",
        choices=["all", "healthy"],
        default="all",
        help="fit time parameters on all completed runs (default) or on those of MFU >= 10%%",
    )
    ap.add_argument(
        "--by", choices=list(GROUPS), default=None, help="also print the held-out figures per group"
    )
    ap.add_argument(
        "--hold-out",
        choices=list(GROUPS),
        default="model",
        help="what the held-out fits leave out in turn (default: each model size)",
    )
    args = ap.parse_args()
    runs = playbook_runs()
    print(f"{len(runs)} Playbook runs, {int((runs.status == 'completed').sum())} completed")
    held = fit_runs(runs, fit_on=args.fit_on, group_by=GROUPS[args.hold_out])["held_out"]
    rows = {
        "priors": held_out_figures(runs, predictions(runs, dict(PRIORS))),
        "shipped": held_out_figures(runs, predictions(runs, None)),
        f"held out by {args.hold_out} (fit on {args.fit_on})": held_out_figures(runs, held),
    }
    print(pd.DataFrame(rows).T.round(3).to_string())
    if args.by:
        key = GROUPS[args.by]
        per = {
            g: held_out_figures(part, {k: v[part.index] for k, v in held.items()})
            for g, part in runs.groupby(key)
        }
        print(pd.DataFrame(per).T.round(3).to_string())


if __name__ == "__main__":
    main()
