"""nccl-tests output (``all_reduce_perf`` and its siblings) -> microbenchmark table.

The format (NVIDIA/nccl-tests, doc/PERFORMANCE.md): a ``#`` header naming every rank
(``Rank r Group g Pid p on HOST device d [bus] NAME``), then one row per message size:
``size count type redop root`` followed by out-of-place ``time algbw busbw #wrong`` and in-place
``time algbw busbw #wrong`` (time in us, bandwidths in GB/s = 1e9 B/s). Each row gives two
measurements here, ``in_place`` False and True.

nccl-tests prints algbw with two decimals (``0.00`` for small messages), so we recompute
algbw = size / time from the time (four significant digits) and busbw = algbw x the op's bus
factor. The op is not printed in the table: it comes from the ``op`` argument, else the
``*_perf`` command quoted in the file, else the file name.

Published copies often carry markdown around the table; every line that is not a table row is
skipped and counted with its line number. Blank lines carry nothing and are passed over.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path

import pandas as pd

from surrogate.analytic.perf import bus_factor
from surrogate.errors import DataError
from surrogate.ingest.report import IngestReport
from surrogate.io.input_files import read_input_text
from surrogate.runs.microbench_table import hardware_from_device_name, rows_to_microbench

SOURCE = "nccl-tests"

_OP_NAMES: dict[str, str] = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "all_to_all": "all_to_all",
    "broadcast": "broadcast",
    "sendrecv": "send_recv",
    "send_recv": "send_recv",
}
_RANK = re.compile(
    r"Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$"
)
_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"
    r"\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$"
)
_DTYPES = {
    "float": "f32",
    "half": "f16",
    "bfloat16": "bf16",
    "double": "f64",
    "int8": "i8",
    "uint8": "u8",
    "int32": "i32",
    "uint32": "u32",
    "int64": "i64",
    "uint64": "u64",
}
_BYTES_PER_ELEMENT = {
    "f32": 4,
    "f16": 2,
    "bf16": 2,
    "f64": 8,
    "i8": 1,
    "u8": 1,
    "i32": 4,
    "u32": 4,
    "i64": 8,
    "u64": 8,
}


def _op_from_text(text: str) -> str | None:
    m = re.search(r"\b(\w+?)_perf\b", text)
    if m and m.group(1) in _OP_NAMES:
        return _OP_NAMES[m.group(1)]
    return None


def _op_from_name(name: str) -> str | None:
    low = name.lower()
    for key in sorted(_OP_NAMES, key=len, reverse=True):
        if key in low:
            return _OP_NAMES[key]
    return None


def _ranks(lines: list[str], p: Path) -> dict[int, tuple[str, str]]:
    """Each rank's (host, device) from the ``Rank r ... on HOST device ...`` lines; DataError
    without any (the group size and hardware would be unknown)."""
    ranks: dict[int, tuple[str, str]] = {}
    for ln in lines:
        m = _RANK.search(ln)
        if m:
            ranks[int(m.group(1))] = (m.group(2), m.group(3))
    if not ranks:
        raise DataError(
            f"{p}: no 'Rank r ... on HOST device ...' lines, so the group size "
            "and hardware are unknown"
        )
    return ranks


def _not_a_row(ln: str) -> str:
    """Why a line that is not a row of the table was skipped."""
    if _RANK.search(ln):
        return "device line (used for group size and hardware), not a table row"
    if ln.strip().startswith("#"):
        return "comment or header line, not a table row"
    return "not a table row (text around the table)"


def parse_nccl_tests(
    path: str | Path, *, op: str | None = None, hardware: str | None = None
) -> tuple[pd.DataFrame, IngestReport]:
    """Read one nccl-tests output file.

    ``op`` (all_reduce, all_gather, ...) overrides the op found in the file; ``hardware``
    overrides the GPU named in the rank lines. Raises DataError if the file is missing, names
    no op, or holds no table row (e.g. truncated before the table).
    """
    p = Path(path)
    lines = read_input_text(p, what="nccl-tests file", kind="log", errors="replace").splitlines()
    report = IngestReport(files=[str(p)])
    text = "\n".join(lines)
    the_op = op or _op_from_text(text) or _op_from_name(p.name)
    if the_op is None or the_op not in _OP_NAMES.values():
        raise DataError(
            f"{p}: cannot tell which collective this nccl-tests output measures (no '*_perf' "
            f"command in the file, no op in its name); give op= one of "
            f"{', '.join(sorted(set(_OP_NAMES.values())))}, got {op!r}"
        )
    ranks = _ranks(lines, p)
    group_size = len(ranks)
    nodes = len({host for host, _ in ranks.values()})
    device_names = {dev for _, dev in ranks.values()}
    hw = hardware or hardware_from_device_name(sorted(device_names)[0])
    run_id = hashlib.sha256(text.encode()).hexdigest()[:12]
    factor = float(bus_factor(the_op, group_size))

    rows: list[dict[str, object]] = []
    for lineno, ln in enumerate(lines, start=1):
        if not ln.strip():
            continue
        m = _ROW.match(ln)
        if m is None:
            report.skip(str(p), lineno, _not_a_row(ln))
            continue
        size = int(m.group(1))
        dtype = _DTYPES.get(m.group(3), m.group(3))
        halves = ((False, m.group(6), m.group(9)), (True, m.group(10), m.group(13)))
        for in_place, time_us_s, wrong_s in halves:
            which = "in-place" if in_place else "out-of-place"
            try:
                time_us = float(time_us_s)
                wrong = int(wrong_s) if wrong_s not in ("N/A", "-") else 0
            except ValueError:
                report.skip(str(p), lineno, f"{which} columns not numeric ({time_us_s!r})")
                continue
            if not (time_us > 0 and math.isfinite(time_us)):
                report.skip(str(p), lineno, f"{which} time not positive ({time_us_s!r})")
                continue
            if wrong != 0:
                report.skip(str(p), lineno, f"{which} result had #wrong={wrong}")
                continue
            time_s = time_us * 1e-6
            algbw = size / time_s
            rows.append(
                {
                    "op": the_op,
                    "dtype": dtype,
                    "size_bytes": float(size),
                    "group_size": float(group_size),
                    "nodes": float(nodes),
                    "layout": "contiguous",
                    "in_place": in_place,
                    "time_s": time_s,
                    "algbw_bytes_per_s": algbw,
                    "busbw_bytes_per_s": algbw * factor,
                    "hardware": hw,
                    "source": SOURCE,
                    "run_id": run_id,
                    "file": p.name,
                    "detail": f"redop={m.group(4)} root={m.group(5)} "
                    f"bytes_per_element={_BYTES_PER_ELEMENT.get(dtype, 'unknown')}",
                }
            )
            report.rows_read += 1
    if not rows:
        raise DataError(
            f"{p}: no nccl-tests table row (size count type redop root time algbw "
            "busbw #wrong ...); is the file truncated?"
        )
    return rows_to_microbench(rows), report
