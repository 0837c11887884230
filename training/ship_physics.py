"""Fit the analytic model's parameter sets that ship (``surrogate/data/analytic_params.json``).

    python -m training.ship_physics [--out PATH] [--data-dir DIR]

- Each framework version with runs of its own, on those runs
  (``surrogate.calibration.fit_params.fit_runs``,
  leave-one-model-out spread): nanotron's two versions on the Playbook's runs, ``pytorch/
  autocast`` and ``pytorch-fsdp2/bf16`` on the project's single-H100 training steps. Each set
  records the cluster it was fitted on, where its cluster-scoped values hold.
- The default set (``surrogate.calibration.fit_params.fit_default``, each parameter set's runs
  weighed
  alike) on every run of every framework together: those, MosaicML's MPT runs (llm-foundry on
  H100 and A100) and the project's torchtitan runs. The balance was chosen by the protocols that
  hold out a framework or a cluster (``python benchmarks/accuracy.py --across``).

- The default set's ``transfer``: the half-width of an 80% interval (log tokens/s, log memory)
  for a framework or cluster no set was fitted on, measured on the held-out frameworks and
  clusters (``training.across.transfer_intervals``).

MPT's and torchtitan's runs fit no set of their own here: MPT is the cluster the transfer
protocols measure a user's first runs on (``training.transfer``), and torchtitan's single-GPU
runs take ``pytorch/autocast``'s set, whose runs they are not.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from surrogate.analytic.params import DEFAULT_SET, ParameterSets
from surrogate.calibration.fit_params import fit_default, fit_runs, write_sets
from training.across import all_runs, leave_one_out, transfer_intervals

SHIPPED = Path(__file__).resolve().parents[1] / "surrogate" / "data" / "analytic_params.json"
OWN_SETS_FROM = ("playbook", "own-h100")
"""The clusters whose runs fit sets of their own (the rest feed the default set only)."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=SHIPPED)
    ap.add_argument("--data-dir", type=Path, default=None)
    args = ap.parse_args()
    start = time.perf_counter()
    runs = all_runs(args.data_dir)
    own = runs[runs["cluster"].isin(OWN_SETS_FROM) & (runs["framework"] != "torchtitan")]
    print(
        f"{len(runs)} runs; own sets from {len(own)} ({', '.join(OWN_SETS_FROM)}, "
        "torchtitan's aside)"
    )
    result = fit_runs(own.reset_index(drop=True), group_by="model_name")
    print(f"own sets fitted: {', '.join(result['sets'])} ({time.perf_counter() - start:.0f} s)")
    result["sets"][DEFAULT_SET] = fit_default(
        runs, balance="sets", sets=ParameterSets(result["sets"])
    )
    print(
        f"default set fitted on {result['sets'][DEFAULT_SET]['runs']} runs "
        f"({time.perf_counter() - start:.0f} s)"
    )
    measured = leave_one_out(runs, balances=("sets",))
    print(measured.table.to_string(index=False))
    transfer = transfer_intervals(measured.errors)
    for key in ("log_tps_check", "log_memory_check"):
        for row in transfer.get(key, []):
            print(f"  {key}: {row}")
    result["sets"][DEFAULT_SET]["transfer"] = {
        k: v for k, v in transfer.items() if not k.endswith("_check")
    }
    print(
        f"transfer intervals measured ({time.perf_counter() - start:.0f} s): "
        + ", ".join(f"{k} {v:.3f}" for k, v in transfer.items() if isinstance(v, float))
    )
    sources = (
        "playbook, datasets/h100/2026-11-23/train_steps_*.jsonl, "
        "datasets/h100/2026-11-24/fsdp2/train_steps_*.jsonl; default set also: "
        "llmfoundry_mpt benchmarking README, datasets/h100/2026-11-24/torchtitan"
    )
    write_sets(result, args.out, source=sources)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
