"""Speed of the surrogate: cold CLI start, in-process latency, batch throughput, training.

    python benchmarks/speed.py [--model-dir DIR] [--rows 20000] [--n-trials 5] [--skip-train]

Prints: the wall time of a cold ``surrogate predict`` of one configuration (a fresh process,
median of 5); the in-process latency of ``surrogate.predict(TrainingConfig)`` and of the
learned model's ``SurrogateModel.predict([config])`` (median over repeats); the throughput of
``surrogate.prediction.predict_frame`` and of the vectorised features + learned model on
``--rows`` configurations (Playbook rows repeated); and the wall time of a full training
(tuning with ``--n-trials`` per study and the final fit, no evaluation, no tracking). Without
``--model-dir`` a model is fitted with the library defaults first. Aims (issue 5): cold CLI
< 1.5 s, one configuration < 5 ms, batch > 100,000 configurations/s on 2 cores.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from surrogate.config import CONFIG_COLUMNS, config_from_flat
from surrogate.features import build_features
from surrogate.learned import SurrogateModel
from surrogate.prediction import predict, predict_frame
from training.train import load_runs, train

CLI = ["predict", "--model", "8b", "--gpu", "H100-SXM-80GB", "--nodes", "4", "--dp", "8",
       "--tp", "4", "--pp", "1", "--mbs", "2", "--grad-accum", "16", "--zero", "1", "--json"]


def median_s(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, default=None)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--n-trials", type=int, default=5)
    ap.add_argument("--skip-train", action="store_true")
    args = ap.parse_args()

    exe = shutil.which("surrogate") or str(Path(sys.executable).parent / "surrogate")
    cold = median_s(lambda: subprocess.run([exe, *CLI], check=True, capture_output=True), 5)
    print(f"cold `surrogate predict` (one config, fresh process, median of 5): {cold:.3f} s")

    runs = load_runs()
    cfg = config_from_flat(runs.iloc[0].to_dict())
    predict(cfg)
    one = median_s(lambda: predict(cfg), 200)
    print(f"in-process surrogate.predict(TrainingConfig): {1e3 * one:.2f} ms")

    if args.model_dir is not None:
        model = SurrogateModel.load(args.model_dir)
    else:
        t = time.perf_counter()
        model = SurrogateModel().fit(runs)
        print(f"(fitted a model with the library defaults in {time.perf_counter() - t:.1f} s)")
    model.predict([cfg])
    learned_one = median_s(lambda: model.predict([cfg]), 200)
    print(f"in-process SurrogateModel.predict([config]): {1e3 * learned_one:.2f} ms")

    reps = -(-args.rows // len(runs))
    table = pd.concat([runs] * reps, ignore_index=True).head(args.rows)
    frame = table[[c for c in CONFIG_COLUMNS if c in table.columns]]
    t_frame = median_s(lambda: predict_frame(frame), 3)
    print(f"predict_frame on {len(frame):,} rows: {len(frame) / t_frame:,.0f} configs/s "
          f"({t_frame:.2f} s)")
    configs = [config_from_flat(r) for r in frame.to_dict("records")]
    t_model = median_s(lambda: model.predict_from_features(*build_features(configs)), 3)
    print(f"build_features + learned model on {len(configs):,} TrainingConfigs: "
          f"{len(configs) / t_model:,.0f} configs/s ({t_model:.2f} s; configs built beforehand)")
    t_cfg = median_s(lambda: [config_from_flat(r) for r in frame.to_dict("records")], 3)
    print(f"  building the {len(configs):,} TrainingConfigs from rows: {t_cfg:.2f} s")

    if not args.skip_train:
        t = time.perf_counter()
        result = train(runs=runs, out_dir=Path("mlruns/speed_model"), n_trials=args.n_trials,
                       storage=None, protocols=(), track=False, progress=False)
        pruned = sum(r.n_pruned for r in result.tuning.values())
        print(f"training with tuning ({args.n_trials} trials per study, {pruned} pruned; "
              f"{len(runs)} runs) and the final fit: {time.perf_counter() - t:.0f} s")

if __name__ == "__main__":
    main()
