"""Held-out accuracy of the learned surrogate, per evaluation protocol, against the analytic
model alone (protocols and metrics: ``training/evaluate.py``).

    python benchmarks/accuracy.py [--protocol cv --protocol lomo ...] [--model-dir DIR]
                                  [--sweeps TABLE ...] [--no-playbook] [--data-dir DIR]

Without ``--model-dir`` the LightGBM settings are the library defaults; with it, the settings
stored in that model's sidecar (e.g. those ``surrogate train`` tuned).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import pandas as pd

from surrogate.learned import SurrogateModel
from training.evaluate import DEFAULT_PROTOCOLS, PROTOCOLS, evaluate, format_metric
from training.train import load_runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--protocol", action="append", choices=list(PROTOCOLS), default=None)
    ap.add_argument("--model-dir", type=Path, default=None)
    ap.add_argument("--sweeps", type=Path, action="append", default=[])
    ap.add_argument("--no-playbook", action="store_true")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    runs = load_runs(args.sweeps, playbook=not args.no_playbook, data_dir=args.data_dir)
    params: dict[str, Any] | None = None
    if args.model_dir is not None:
        m = SurrogateModel.load(args.model_dir)
        params = {"status": m.status_params, "mfu": m.mfu_params, "mem": m.mem_params}
    print(f"{len(runs)} runs; LightGBM settings: "
          f"{'from ' + str(args.model_dir) if params else 'library defaults'}")
    start = time.perf_counter()
    results = evaluate(runs, tuple(args.protocol or DEFAULT_PROTOCOLS), params=params,
                       seed=args.seed)
    for name, r in results.items():
        table = pd.DataFrame({
            "learned": {k: format_metric(k, v) for k, v in r.metrics.items()},
            "analytic": {k: format_metric(k, v) for k, v in r.analytic_metrics.items()},
        })
        print(f"\n{name}: {PROTOCOLS[name]} ({r.n_splits} splits, held-out runs)")
        print(table.to_string())
    print(f"\nevaluated in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
