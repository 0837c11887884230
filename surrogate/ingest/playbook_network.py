"""The Playbook sweep's per-run network measurements as microbenchmark-table rows.

Every completed run of ``bench_final2_mfu2.csv`` carries six bandwidths that nanotron measured
at the start of the run with 256 MB messages (``../shared/data/MANIFEST.md``, "Run-level
network measurements inside the Playbook sweep"): ``AllReduce``, ``AllGather`` and
``ReduceScatter (GB/s)`` over all of the run's GPUs (group nodes x 8, spanning ``nodes``
nodes), and ``AR``, ``AG``, ``RS Intra-node (GB/s)`` inside one node (group 8, nodes 1). Each
(run, column) with a value becomes one row (:mod:`surrogate.runs.microbench_table`):

- op all_reduce / all_gather / reduce_scatter, layout ``contiguous`` (the whole job, or one
  node's consecutive ranks), in_place missing, dtype ``bf16`` (the runs' training dtype,
  ``torch.bfloat16`` on every completed run; the tensor dtype of the measurement itself is not
  recorded, and bytes per second do not depend on it at this size).
- size_bytes = 256 MiB = 268,435,456 B, assumed: nanotron's measuring code is not available
  here, so MiB versus 10^6-byte MB is not known. The bandwidth, which is what the rows carry,
  is insensitive to the choice: the nccl-tests 8-GPU all-reduce curve
  (``microbench/nccl-tests/dgx_h100_1node_8gpu_all_reduce.log``) gains 21.7 GB/s of busbw from
  128 to 256 MiB, so a 4.6 % smaller message (256e6 B, 0.068 of a doubling) would lower it by
  about 1.5 GB/s (0.35 %). Only time_s (= size / algbw) scales with the choice.
- busbw_bytes_per_s = the value x 1e9 (GB/s = 1e9 B/s, as nccl-tests), algbw = busbw /
  ``bus_factor(op, group_size)`` (:mod:`surrogate.analytic.perf`), time_s = size / algbw.
- provenance: source ``hf_ultrascale_playbook``, hardware ``H100-SXM-80GB``, run_id
  ``<job_id>/<name>`` and date as :mod:`surrogate.ingest.playbook`, detail names the column
  (so that a one-node run's whole-job and intra-node rows, which measure the same group, stay
  two rows under the table's de-duplication key).

Bus bandwidth, not algorithm bandwidth (the finished study that checked it is in
``docs/data.md``; ``git show 7086ef9:benchmarks/playbook_network.py`` prints the numbers):

- all_reduce, decided: the intra-node medians are 457 GB/s (1-node runs) and 425 GB/s (the
  intra-node column of multi-node runs). Read as algbw, the bus bandwidth would be 457 x 2 x 7/8
  = 800 GB/s, far above the 450 GB/s an H100 moves per direction over NVLink 4; read as busbw,
  they match nccl-tests on a DGX H100 (busbw 422 GB/s at 256 MiB, 466-480 GB/s from 1 GiB on;
  algbw there is 241 GB/s at 256 MiB, which the values are nowhere near).
- all_gather and reduce_scatter, likely but not certain: the intra-node medians are 262-263
  GB/s (1 node) and 242 GB/s (multi-node). As busbw that is 262; as algbw it would be a busbw
  of 262 x 7/8 = 230. Both are under the NVLink limit, so the limit does not decide. Two things
  favour busbw: one tool wrote all six columns, and its all-reduce is certainly busbw; and the
  ratio of the two ops' times. Per run the all-gather value is the all-reduce value / 1.75
  (medians 263 / 457); as busbw, an all-gather of the same 256 MiB takes 0.87 of the
  all-reduce's time (as algbw: 1.00, exactly as long). XLA's H100 tables
  (``microbench/xla/default_collective_perf_table.txtpb``, sm_90, 8 GPUs, 256 MiB) give 0.58
  (all-gather algbw 368 GB/s, all-reduce algbw 213 GB/s), closer to 0.87 than to 1. Either way
  these all-gather values lie below XLA's (busbw 322 GB/s).

Whole-job medians (completed runs) fall with the node count, all-reduce 458, 341, 161, 96, 53,
27, 13 GB/s at 1, 2, 4, ..., 64 nodes and all-gather / reduce-scatter about half of that from 4
nodes on; the rows carry them as measured.

A value that is empty (every run that did not complete), zero, negative or not a number is a
counted skip with its line; so is a repeat of a run_id. ``rows_read`` counts the six values of
every CSV row, so read = ingested + skipped.

:func:`parse_playbook_runs` reads the runs with the network each measured: its ``net_scale``
column (:data:`surrogate.runs.sweeps.CONTEXT_COLUMNS`), the geometric mean of its inter-node
efficiencies over the curve of the cluster's shipped profile at its node count
(:func:`surrogate.hardware.fabric.run_scales`; missing where it measured none).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from surrogate.analytic.perf import bus_factor
from surrogate.errors import DataError
from surrogate.hardware.fabric import run_scales
from surrogate.hardware.profile import load_profile
from surrogate.ingest.playbook import (
    GPU,
    GPUS_PER_NODE,
    PROFILE,
    SOURCE,
    parse_playbook,
    read_table,
    run_date,
)
from surrogate.ingest.report import IngestReport
from surrogate.io.datasource import data_dir as resolve_data_dir
from surrogate.io.tableio import check_csv_header
from surrogate.runs.microbench_table import rows_to_microbench

SIZE_BYTES: Final = 256 * 2**20
"""256 MiB, assumed (see the module docstring)."""
DTYPE: Final = "bf16"
DETAIL: Final = "nanotron start-of-run measurement"

NETWORK_COLUMNS: Final[dict[str, tuple[str, bool]]] = {
    "AllReduce (GB/s)": ("all_reduce", False),
    "AllGather (GB/s)": ("all_gather", False),
    "ReduceScatter (GB/s)": ("reduce_scatter", False),
    "AR Intra-node (GB/s)": ("all_reduce", True),
    "AG Intra-node (GB/s)": ("all_gather", True),
    "RS Intra-node (GB/s)": ("reduce_scatter", True),
}
"""Column -> (op, inside one node)."""
REQUIRED_COLUMNS: Final[tuple[str, ...]] = (
    "job_id",
    "name",
    "nodes",
    "status",
    "date",
    "log_file",
    *NETWORK_COLUMNS,
)
_COMPLETED = "success"


def _empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()


def parse_playbook_network(path: str | Path) -> tuple[pd.DataFrame, IngestReport]:
    """Microbenchmark rows from the six network columns of the Playbook CSV at ``path``.

    Raises DataError if the file is missing, unreadable or lacks a needed column; every value
    not taken is a counted skip with file:line.
    """
    p = Path(path)
    report = IngestReport(files=[str(p)])
    # only an empty field is missing: "n/a" or "NaN" in a value column is a counted skip
    raw = read_table(
        p,
        needs=REQUIRED_COLUMNS,
        what="the Playbook network measurements need",
        dtype={c: str for c in NETWORK_COLUMNS},
        keep_default_na=False,
        na_values=[""],
    )
    rows: list[dict[str, object]] = []
    first_line: dict[str, int] = {}
    records: list[dict[str, Any]] = raw.to_dict("records")  # type: ignore[assignment]
    for i, row in enumerate(records):
        line = i + 2  # 1-based, after the header line
        report.rows_read += len(NETWORK_COLUMNS)
        run_id = f"{row['job_id']}/{row['name']}"
        if run_id in first_line:
            for _ in NETWORK_COLUMNS:
                report.skip(str(p), line, f"repeats run {run_id} of line {first_line[run_id]}")
            continue
        first_line[run_id] = line
        nodes = pd.to_numeric(row["nodes"], errors="coerce")
        if _empty(nodes) or nodes < 1 or nodes != int(nodes):
            for _ in NETWORK_COLUMNS:
                report.skip(
                    str(p), line, f"nodes must be a whole number >= 1, got {row['nodes']!r}"
                )
            continue
        completed = str(row["status"]).strip().lower() == _COMPLETED
        date = run_date(row) or ""
        for col, (op, intra) in NETWORK_COLUMNS.items():
            raw_value = row[col]
            if _empty(raw_value):
                report.skip(
                    str(p),
                    line,
                    (
                        f"{col} empty on a completed run"
                        if completed
                        else "no network measurement: the run did not complete (status not Success)"
                    ),
                )
                continue
            try:
                value = float(str(raw_value).strip())
            except ValueError:
                report.skip(str(p), line, f"{col} must be a number, got {raw_value!r}")
                continue
            if not (math.isfinite(value) and value > 0):
                report.skip(str(p), line, f"{col} must be a positive number, got {raw_value!r}")
                continue
            group_size = GPUS_PER_NODE if intra else GPUS_PER_NODE * int(nodes)
            busbw = value * 1e9  # GB/s = 1e9 B/s
            algbw = busbw / float(bus_factor(op, group_size))
            rows.append(
                {
                    "op": op,
                    "dtype": DTYPE,
                    "size_bytes": float(SIZE_BYTES),
                    "group_size": float(group_size),
                    "nodes": 1.0 if intra else float(nodes),
                    "layout": "contiguous",
                    "time_s": SIZE_BYTES / algbw,
                    "algbw_bytes_per_s": algbw,
                    "busbw_bytes_per_s": busbw,
                    "hardware": GPU,
                    "source": SOURCE,
                    "run_id": run_id,
                    "file": p.name,
                    "date": date,
                    "detail": f"{DETAIL}, column {col}",
                }
            )
    return rows_to_microbench(rows), report


def measured_net_scale(network: pd.DataFrame, profile: str = PROFILE) -> pd.Series:
    """Per ``run_id`` of ``network`` (microbenchmark rows the runs measured themselves): the
    run's ``net_scale`` under ``profile``'s fabric (empty where the profile has none)."""
    fabric = load_profile(profile).fabric
    if fabric is None:
        return pd.Series(dtype=float)
    return run_scales(network, fabric)


def parse_playbook_runs(
    path: str | Path, *, flagged: bool = False
) -> tuple[pd.DataFrame, IngestReport]:
    """:func:`surrogate.ingest.playbook.parse_playbook`'s runs, each with the network it
    measured (``net_scale``, missing where it measured none, or where the table has no
    network columns)."""
    runs, report = parse_playbook(path, flagged=flagged)
    if not all(c in check_csv_header(path) for c in NETWORK_COLUMNS):
        report.note("no network columns: every run is explained under its profile's curve")
        return runs, report
    scale = runs["run_id"].map(measured_net_scale(parse_playbook_network(path)[0]))
    scale = scale.astype("float64")
    runs["net_scale"] = scale.where(np.isfinite(scale) & (scale > 0))  # else: none measured
    return runs, report


PLAYBOOK_PATH = Path("sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv")
"""The Playbook sweep under the data directory (``surrogate.io.datasource.data_dir``)."""


def playbook_runs(data_dir: str | Path | None = None) -> pd.DataFrame:
    """The Playbook's runs of the data directory, each with the network it measured."""
    path = resolve_data_dir(data_dir) / PLAYBOOK_PATH
    if not path.exists():
        raise DataError(
            f"the Playbook sweep is not at {str(path)!r}: run `surrogate data fetch`, set "
            "SURROGATE_DATA_DIR, or pass --no-playbook with --sweeps"
        )
    return parse_playbook_runs(path)[0]
