"""Speed of the surrogate: cold CLI start, in-process latency, batch throughput end to end
and in process, search, streaming memory, training.

    python benchmarks/speed.py [--model-dir DIR] [--rows 200000] [--stream-rows 0]
                               [--n-trials 5] [--skip-train] [--search-only]

Every figure is printed with its aim and as a ratio against a reference measured in the same
run on the same machine, so that runs on different (or busy) machines compare: the cold CLI
against a bare ``python -c "import pandas, lightgbm"`` (what any tool that reads a table and
evaluates LightGBM boosters pays); the batch end to end (``surrogate predict --from-csv
in.csv --out out.csv``, a fresh process, start included) against pyarrow reading the same
CSV and writing the output table (the I/O floor); in-process throughput of the whole pipeline
against its own parts (validating the table, the analytic model, the boosters on prebuilt
features: compiled by lleaves when the ``fast`` extra is installed, and LightGBM's own
predict beside them).

First, with the ``fast`` extra, the bundled model's trees are compiled for this machine (or
loaded from the cache; the time is printed and counted nowhere else). Figures: the wall time
of a cold ``surrogate predict`` (a fresh process, median of 5); the in-process latency of
``surrogate.predict(TrainingConfig)`` (median of 200); ``--rows`` configurations (Playbook
rows repeated) predicted end to end from a CSV into a CSV, and in process by
``predict_frame`` with the learned model and with the analytic model alone, the in-process
figures also per second of CPU time (best of 3: less sensitive to other processes than wall
time); with ``--stream-rows N``, the peak resident memory of ``surrogate predict --from-csv``
streaming N rows into a Parquet table (and per row); unless ``--skip-train``, the wall time of a
training (``--n-trials`` per study and the final fit; no evaluation, no tracking). Without
``--model-dir`` the bundled model is used. Then the wall time of ``search`` over enumerable
spaces of Mixtral 8x7B with cp, ep and vpp (every layout scored, no optuna): on 1,024 nodes
(about 2 x 10^6 points) and on 256, 512 or 1,024 nodes (about 5 x 10^6 points, 6 x 10^5
valid layouts), both with full recomputation of every layer only (``recompute_shares=(1,)``)
and ZeRO over every data-parallel rank (``shardings=("full",)``), then the first with the
default shares of layers (:data:`surrogate.layouts.space.RECOMPUTE_SHARES`), then with hybrid
sharding too (:data:`surrogate.layouts.dimensions.SHARDINGS`), then the second with both
(about 1.5 x 10^7 points, about 10^6 valid layouts: the aim's), with the analytic model alone
and with the learned model, in wall and in CPU time.
Aims: cold CLI no slower than ``import pandas, lightgbm``; one configuration < 5 ms; 200,000
rows end to end (CSV in, CSV out) >= 100,000 rows/s; in process >= 250,000 rows/s learned
and >= 500,000 rows/s analytic; a search of 10^6 valid layouts <= 8 s; 10^7 rows streamed in
under 4 GiB. ``--search-only`` prints the searches' figures alone.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from surrogate.analytic.run import analytic_for
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.presets import get_preset
from surrogate.config.table import validate_table
from surrogate.config.training import CONFIG_COLUMNS, config_from_flat
from surrogate.hardware.perf_models import resolve_perf_model
from surrogate.io.tableio import CHUNK_ROWS
from surrogate.layouts.dimensions import SHARDINGS
from surrogate.layouts.search import search
from surrogate.layouts.space import RECOMPUTE_SHARES, LayoutSpace
from surrogate.learned.compiled_trees import COMPILE_MIN_ROWS, cache_root
from surrogate.learned.features import build_features_cols
from surrogate.learned.model import SurrogateModel
from surrogate.prediction.predict import DEFAULT_MODEL_DIR, predict, predict_frame
from training.train import load_runs, train

CLI = [
    "predict",
    "--model",
    "8b",
    "--gpu",
    "H100-SXM-80GB",
    "--nodes",
    "4",
    "--dp",
    "8",
    "--tp",
    "4",
    "--pp",
    "1",
    "--mbs",
    "2",
    "--grad-accum",
    "16",
    "--zero",
    "1",
    "--framework",
    "nanotron",
    "--json",
]


def median_s(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cpu_best_s(fn: Callable[[], Any], repeats: int) -> float:
    """The least CPU time (``time.process_time``: every thread of this process) of
    ``repeats`` calls: less sensitive than wall time to other processes on a busy machine."""
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def _aim(value: float, aim: float, *, higher_is_better: bool = False) -> str:
    met = value >= aim if higher_is_better else value <= aim
    return f"aim {'>=' if higher_is_better else '<'} {aim:,.4g}: {'met' if met else 'not met'}"


def _warm_trees(model: SurrogateModel, runs: pd.DataFrame) -> str:
    """Which trees the learned model runs, compiling them first if they are not cached (the
    one-off cost is printed, not counted in the figures below)."""
    if not model._compiled:
        return "LightGBM (compiled trees need the `fast` extra, and SURROGATE_COMPILED_TREES not 0)"
    rows = pd.concat([runs] * -(-COMPILE_MIN_ROWS // len(runs)), ignore_index=True)
    frame = rows[[c for c in CONFIG_COLUMNS if c in rows.columns]].head(COMPILE_MIN_ROWS)
    t = time.perf_counter()
    predict_frame(frame, model=model)
    took = time.perf_counter() - t
    print(
        f"compiled trees (lleaves): compiled for this machine or loaded from "
        f"{cache_root()}, with a first learned predict_frame of {len(frame):,} rows, in "
        f"{took:.1f} s (not counted below)"
    )
    return "compiled by lleaves (surrogate.learned.compiled_trees)"


def _peak_rss_gib(argv: list[str]) -> tuple[float, float]:
    """Wall time and peak resident memory (GiB) of the command ``argv``, run as the only
    child of a fresh Python process (``getrusage``'s children's maximum is then its own)."""
    probe = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], check=True, capture_output=True); "
        "print(time.perf_counter() - t, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *argv], check=True, capture_output=True, text=True
    )
    wall, kib = done.stdout.split()
    return float(wall), int(kib) / 2**20


def _end_to_end(exe: str, frame: pd.DataFrame, scratch: Path, stream_rows: int) -> None:
    """``surrogate predict --from-csv`` on ``frame`` written as CSV, into a CSV, in a fresh
    process (median of 3), against pyarrow reading that CSV and writing the output (the I/O
    floor); then, with ``stream_rows``, the peak memory of streaming that many rows."""
    import pyarrow.csv as pcsv

    n = len(frame)
    src, dst = scratch / "in.csv", scratch / "out.csv"
    pcsv.write_csv(_arrow(frame), src)
    argv = [exe, "predict", "--from-csv", str(src), "--out", str(dst)]
    took = median_s(lambda: subprocess.run(argv, check=True, capture_output=True), 3)
    out = pcsv.read_csv(dst)
    floor = median_s(lambda: (pcsv.read_csv(src), pcsv.write_csv(out, scratch / "ref.csv")), 3)
    print(
        f"end to end, `surrogate predict --from-csv` {n:,} rows CSV in, CSV out (fresh "
        f"process, median of 3): {took:.2f} s, {n / took:,.0f} rows/s "
        f"({_aim(n / took, 100_000, higher_is_better=True)}); reference: pyarrow reading "
        f"the input and writing the output {floor:.2f} s ({n / floor:,.0f} rows/s): "
        f"x{took / floor:.1f} the time"
    )
    if stream_rows <= 0:
        return
    big = scratch / "big.csv"
    block = src.read_bytes()
    header, body = block.split(b"\n", 1)
    with big.open("wb") as f:
        f.write(header + b"\n")
        for _ in range(-(-stream_rows // n)):
            f.write(body)
    rows = -(-stream_rows // n) * n
    wall, gib = _peak_rss_gib(
        [exe, "predict", "--from-csv", str(big), "--out", str(scratch / "big.parquet")]
    )
    _, small_gib = _peak_rss_gib(argv)
    print(
        f"streamed `surrogate predict --from-csv` {rows:,} rows CSV in, Parquet out: "
        f"{wall:.0f} s ({rows / wall:,.0f} rows/s), peak resident memory {gib:.2f} GiB "
        f"({_aim(gib, 4.0)}); the {n:,}-row table above peaks at {small_gib:.2f} GiB: "
        f"memory is bounded by the chunk ({CHUNK_ROWS:,} rows), not the table"
    )


def _arrow(frame: pd.DataFrame) -> Any:
    import pyarrow as pa

    return pa.Table.from_pandas(frame, preserve_index=False)


def _lightgbm_only(model_dir: Path) -> SurrogateModel:
    """The model loaded again, its trees left to LightGBM."""
    plain = SurrogateModel.load(model_dir)
    plain._compiled = {}
    return plain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help="learned model directory (default: the bundled model)",
    )
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument(
        "--stream-rows",
        type=int,
        default=0,
        help="rows to stream through `surrogate predict --from-csv` for its peak "
        "memory (0: skip; the aim is stated for 10^7)",
    )
    ap.add_argument("--n-trials", type=int, default=5)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--search-only", action="store_true", help="only the searches' times")
    args = ap.parse_args()
    model = SurrogateModel.load(args.model_dir or DEFAULT_MODEL_DIR)
    if args.search_only:
        return search_timings(model)
    runs = load_runs()
    trees_path = _warm_trees(model, runs)
    exe = shutil.which("surrogate") or str(Path(sys.executable).parent / "surrogate")
    floor = median_s(
        lambda: subprocess.run(
            [sys.executable, "-c", "import pandas, lightgbm"], check=True, capture_output=True
        ),
        5,
    )
    cold = median_s(lambda: subprocess.run([exe, *CLI], check=True, capture_output=True), 5)
    print(
        f"cold `surrogate predict` (fresh process, median of 5): {cold:.3f} s; reference "
        f"`python -c 'import pandas, lightgbm'` {floor:.3f} s: x{cold / floor:.2f} "
        f"({_aim(cold / floor, 1.0)})"
    )

    cfg = config_from_flat(runs.iloc[0].to_dict())
    predict(cfg, model=model)
    one = median_s(lambda: predict(cfg, model=model), 200)
    alone = median_s(lambda: predict(cfg, model=None), 200)
    print(
        f"in-process surrogate.predict(TrainingConfig): {1e3 * one:.2f} ms "
        f"({_aim(1e3 * one, 5)}); the analytic model alone {1e3 * alone:.2f} ms"
    )

    reps = -(-args.rows // len(runs))
    table = pd.concat([runs] * reps, ignore_index=True).head(args.rows)
    frame = table[[c for c in CONFIG_COLUMNS if c in table.columns]]
    n = len(frame)
    with tempfile.TemporaryDirectory(prefix="surrogate-speed-") as scratch:
        _end_to_end(exe, frame, Path(scratch), args.stream_rows)
    t_frame = median_s(lambda: predict_frame(frame, model=model), 3)
    t_analytic = median_s(lambda: predict_frame(frame, model=None), 3)
    t_check = median_s(lambda: validate_table(frame), 3)
    checked = validate_table(frame)
    sets = shipped_parameter_sets()
    t_cols = median_s(lambda: analytic_for(checked.table, sets=sets, resolve=resolve_perf_model), 3)
    X, out, cols = build_features_cols(checked.table)
    t_trees = median_s(lambda: model.predict_from_features(X, out, cols), 3)
    plain = _lightgbm_only(args.model_dir or DEFAULT_MODEL_DIR)
    t_plain = median_s(lambda: plain.predict_from_features(X, out, cols), 3)
    print(
        f"predict_frame in process, learned model, {n:,} rows: {n / t_frame:,.0f} configs/s "
        f"({_aim(n / t_frame, 250_000, higher_is_better=True)})"
    )
    print(
        f"predict_frame in process, analytic model alone: {n / t_analytic:,.0f} configs/s "
        f"({_aim(n / t_analytic, 500_000, higher_is_better=True)}; "
        f"x{t_frame / t_analytic:.1f} faster than with the learned model)"
    )
    print(
        "  parts, as shares of the learned predict_frame's time: "
        f"validating the table column-wise {t_check / t_frame:.0%} "
        f"({n / t_check:,.0f} configs/s), "
        f"analytic model on it {t_cols / t_frame:.0%} ({n / t_cols:,.0f} configs/s), "
        f"learned model on prebuilt features {t_trees / t_frame:.0%} "
        f"({n / t_trees:,.0f} configs/s: the boosters' own bound)"
    )
    print(
        f"  the boosters' trees: {trees_path}; LightGBM's own predict on the same features "
        f"{n / t_plain:,.0f} configs/s (x{t_plain / t_trees:.1f} the time)"
    )
    cpu = {
        label: n / cpu_best_s(fn, 3)
        for label, fn in (
            ("learned", lambda: predict_frame(frame, model=model)),
            ("analytic model alone", lambda: predict_frame(frame, model=None)),
            ("validating", lambda: validate_table(frame)),
            (
                "analytic model on the validated table",
                lambda: analytic_for(checked.table, sets=sets, resolve=resolve_perf_model),
            ),
        )
    }
    print(
        "  per second of CPU time (best of 3, every thread of this process): predict_frame "
        + "; ".join(f"{label} {rate:,.0f} configs/s" for label, rate in cpu.items())
    )

    search_timings(model)

    if not args.skip_train:
        t = time.perf_counter()
        result = train(
            runs=runs,
            out_dir=Path("mlruns/speed_model"),
            n_trials=args.n_trials,
            storage=None,
            protocols=(),
            track=False,
            progress=False,
        )
        pruned = sum(r.n_pruned for r in result.tuning.values())
        print(
            f"training with tuning ({args.n_trials} trials per study, {pruned} pruned; "
            f"{len(runs)} runs) and the final fit: {time.perf_counter() - t:.0f} s"
        )


def search_timings(model: SurrogateModel) -> None:
    """Print how long searches of Mixtral 8x7B take that score every valid layout (2 x 10^5 to
    10^6 of them), with the analytic model alone and with ``model``."""
    # Full recomputation of every layer only and ZeRO over every data-parallel rank (the
    # spaces of the aim as first measured), then the first with the default shares of layers
    # too, then with hybrid sharding too (SHARDINGS), then the second with both: about 10^6
    # valid layouts, the aim's.
    for nodes, shares, shardings in (
        ((1024,), (1.0,), ("full",)),
        ((256, 512, 1024), (1.0,), ("full",)),
        ((1024,), RECOMPUTE_SHARES, ("full",)),
        ((1024,), RECOMPUTE_SHARES, SHARDINGS),
        ((256, 512, 1024), RECOMPUTE_SHARES, SHARDINGS),
    ):
        space = LayoutSpace(
            model=get_preset("mixtral-8x7b"),
            global_batch_seqs=4096,
            node_counts=nodes,
            frameworks=("megatron", "torchtitan"),
            recompute_shares=shares,
            shardings=shardings,
        )
        bound = space.size_bound()
        which = (
            "every layer"
            if shares == (1.0,)
            else f"shares {', '.join(f'{x:g}' for x in shares)} of layers"
        )
        if len(shardings) > 1:
            which += "; ZeRO over all or one node's data-parallel ranks"
        for label, m in (("analytic model alone", None), ("learned model", model)):
            t, cpu = time.perf_counter(), time.process_time()
            found = search(space, model=m, method="enumerate", enumerate_limit=2 * bound)
            took, cpu = time.perf_counter() - t, time.process_time() - cpu
            print(
                f"search of Mixtral 8x7B on {'/'.join(f'{n:,}' for n in nodes)} nodes x 8 "
                f"(cp, ep, vpp; megatron and torchtitan; full recomputation of {which}), "
                f"{bound:,} points, "
                f"{found.enumerated:,} valid layouts, every one scored, {label}: "
                f"{took:.1f} s of wall time ({_aim(took, 8)}; {found.enumerated / took:,.0f} "
                f"layouts/s), {cpu:.1f} s of CPU time (every thread of this process)"
            )


if __name__ == "__main__":
    main()
