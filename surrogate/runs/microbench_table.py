"""The microbenchmark table: one row per measurement of a GEMM or a collective.

Every parser of measured speeds (nccl-tests logs, XLA's perf tables, the project's own
``microbench`` JSON lines) produces this table, and calibration
(``surrogate.calibration.calibrate``) reads
it. Sizes follow the nccl-tests conventions documented in ``surrogate.analytic.perf``:
``size_bytes`` is one rank's buffer for all_reduce, broadcast and send_recv, and the total
gathered / scattered buffer for all_gather, reduce_scatter and all_to_all; algbw = size / time,
busbw = algbw x ``bus_factor(op, group_size)``.

Missing values are NaN (GEMM rows have no size or group; collective rows no shape).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pandas as pd

from surrogate.analytic.perf import COLLECTIVE_OPS
from surrogate.errors import DataError
from surrogate.io.locks import locked
from surrogate.io.tableio import failure_cases, read_table, table_format, write_table_atomic

if TYPE_CHECKING:  # pandera is imported where a table is checked: `surrogate predict` needs none
    import pandera.pandas as pa

GEMM_OP: Final = "gemm"
ATTENTION_OPS: Final[tuple[str, ...]] = (
    "sdpa_fwd",
    "sdpa_fwd_bwd",
    "sdpa_causal_fwd",
    "sdpa_causal_fwd_bwd",
)
"""Flash attention (``microbench.attention``): m = n = sequence, k = head width, batch =
sequences x heads, flops_per_s counted without causal discount."""
MEMORY_BOUND_OPS: Final[tuple[str, ...]] = (
    "rmsnorm_fwd_bwd",
    "swiglu_fwd_bwd",
    "rope_fwd_bwd",
    "cross_entropy_fwd_bwd",
    "adamw_step",
)
"""Memory-bound kernels (``microbench.membound``): m x n problem, size_bytes the bytes they
must move, algbw_bytes_per_s = size_bytes / time_s."""
MICROBENCH_OPS: Final[tuple[str, ...]] = (
    GEMM_OP,
    *COLLECTIVE_OPS,
    *ATTENTION_OPS,
    *MEMORY_BOUND_OPS,
)
LAYOUTS: Final[tuple[str, ...]] = ("contiguous", "strided")
"""How a sub-group's ranks are laid out: consecutive ranks (tp-like) or every world/g-th
rank (dp-like, spanning nodes first)."""

FLOAT_COLUMNS: Final[tuple[str, ...]] = (
    "m",
    "n",
    "k",
    "batch",
    "size_bytes",
    "group_size",
    "nodes",
    "time_s",
    "flops_per_s",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
)
STRING_COLUMNS: Final[tuple[str, ...]] = (
    "op",
    "dtype",
    "hardware",
    "source",
    "run_id",
    "file",
    "date",
    "detail",
)
MEASUREMENT_FIELDS: Final[tuple[str, ...]] = (
    "op",
    "dtype",
    "m",
    "n",
    "k",
    "batch",
    "size_bytes",
    "group_size",
    "nodes",
    "layout",
    "in_place",
    "time_s",
    "flops_per_s",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
)
"""What one measurement is: the operation, its shape or message, and its time and rates (a
microbenchmark record's ``measurement``, ``surrogate.ingest.microbench_jsonl``)."""
MICROBENCH_COLUMNS: Final[tuple[str, ...]] = (
    *MEASUREMENT_FIELDS,
    "hardware",
    "source",
    "run_id",
    "file",
    "date",
    "detail",
)
"""Column order. ``nodes`` is the number of nodes the measured group spans (1: inside a node),
so calibration can tell intra- from inter-node collectives. Provenance: ``source`` (xla,
nccl-tests, microbench), ``run_id`` (one
measurement campaign), ``file`` (the file it was read from), ``date`` (ISO date when known,
else empty), ``detail`` (what distinguishes rows that share a shape, e.g. XLA's dtype key)."""

DEDUP_KEY: Final[tuple[str, ...]] = (
    "source",
    "run_id",
    "op",
    "dtype",
    "m",
    "n",
    "k",
    "batch",
    "size_bytes",
    "group_size",
    "nodes",
    "layout",
    "in_place",
    "detail",
)
"""Rows equal on these columns are one measurement; an append keeps the newer one."""


def hardware_from_device_name(name: str) -> str:
    """The hardware table key (``surrogate.config.gpus``) of a device name as drivers print it.

    ``NVIDIA H100 80GB HBM3`` is the SXM part (the PCIe H100 has HBM2e and says PCIe);
    names we cannot place are returned stripped, so they are kept rather than guessed.
    """
    u = name.upper()
    if "H100" in u:
        return "H100-PCIe-80GB" if "PCIE" in u else "H100-SXM-80GB"
    if "H200" in u:
        return "H200-SXM-141GB"
    if "A100" in u:
        return "A100-SXM-40GB" if "40GB" in u else "A100-SXM-80GB"
    if "B200" in u:
        return "B200-SXM-180GB"
    return name.strip()


def empty_microbench() -> pd.DataFrame:
    """A table with the schema's columns and no rows."""
    return normalise_microbench(pd.DataFrame({c: [] for c in MICROBENCH_COLUMNS}))


def rows_to_microbench(rows: list[dict[str, object]]) -> pd.DataFrame:
    """A normalised table from row dicts; columns a row leaves out are missing (NaN or empty)."""
    if not rows:
        return empty_microbench()
    df = pd.DataFrame(rows)
    for c in MICROBENCH_COLUMNS:
        if c not in df.columns:
            df[c] = (
                float("nan") if c in FLOAT_COLUMNS else None if c in ("layout", "in_place") else ""
            )
    return normalise_microbench(df[list(MICROBENCH_COLUMNS)])


def normalise_microbench(df: pd.DataFrame) -> pd.DataFrame:
    """Coerce column types (floats, strings, nullable layout and in_place) and order columns.

    Raises DataError naming the missing columns. Extra columns are an error too: the table
    is one schema, and a column we would not write back must not vanish silently.
    """
    missing = [c for c in MICROBENCH_COLUMNS if c not in df.columns]
    extra = [c for c in df.columns if c not in MICROBENCH_COLUMNS]
    if missing or extra:
        raise DataError(
            f"a microbenchmark table has exactly the columns {', '.join(MICROBENCH_COLUMNS)}; "
            f"missing {missing or 'none'}, unexpected {extra or 'none'}"
        )
    out = pd.DataFrame(index=df.index)
    for c in MICROBENCH_COLUMNS:
        col = df[c]
        if c in FLOAT_COLUMNS:
            try:
                out[c] = pd.to_numeric(col, errors="raise").astype("float64")
            except (ValueError, TypeError) as e:
                raise DataError(f"column {c!r} must be numeric (NaN where missing): {e}") from e
        elif c == "layout":
            out[c] = col.astype("object").where(col.notna(), None)
        elif c == "in_place":
            out[c] = col.astype("boolean") if len(col) else pd.Series([], dtype="boolean")
        else:
            out[c] = col.fillna("").astype(str)
    return out.reset_index(drop=True)


@dataclass(frozen=True)
class _Rule:
    """One rule of the table: ``must`` says what must hold (it is also the pandera check's
    name); ``holds`` is True on the rows where it does."""

    column: str | None
    """The column checked, or None for a check of whole rows."""
    must: str
    holds: Callable[[Any], pd.Series]


def _gemm(t: pd.DataFrame) -> pd.Series:
    return t["op"] == GEMM_OP


def _compute(t: pd.DataFrame) -> pd.Series:
    """Rows timed as FLOPs over a shape: GEMMs and attention."""
    return _gemm(t) | t["op"].isin(ATTENTION_OPS)


def _collective(t: pd.DataFrame) -> pd.Series:
    return t["op"].isin(COLLECTIVE_OPS)


def _memory_bound(t: pd.DataFrame) -> pd.Series:
    return t["op"].isin(MEMORY_BOUND_OPS)


def _shape(t: pd.DataFrame) -> pd.DataFrame:
    return t[["m", "n", "k", "batch"]]


_RULES: Final[tuple[_Rule, ...]] = (
    _Rule("op", f"op must be one of {', '.join(MICROBENCH_OPS)}", lambda s: s.isin(MICROBENCH_OPS)),
    _Rule("dtype", "dtype must be given", lambda s: s != ""),
    _Rule("source", "source must be given", lambda s: s != ""),
    _Rule("hardware", "hardware must be given", lambda s: s != ""),
    _Rule("time_s", "time_s must be a positive number of seconds", lambda s: s > 0),
    _Rule(
        None,
        "a GEMM or attention row needs m, n, k, batch >= 1",
        lambda t: ~(_compute(t) & ~(_shape(t) >= 1).all(axis=1)),
    ),
    _Rule(
        None,
        "a GEMM or attention row needs flops_per_s > 0",
        lambda t: ~(_compute(t) & ~(t["flops_per_s"] > 0)),
    ),
    _Rule(
        None,
        "a GEMM or attention row has no size_bytes (NaN)",
        lambda t: ~(_compute(t) & t["size_bytes"].notna()),
    ),
    _Rule(
        None,
        "a collective or memory-bound kernel needs size_bytes > 0",
        lambda t: _compute(t) | (t["size_bytes"] > 0),
    ),
    _Rule(
        None,
        "a collective needs group_size >= 2",
        lambda t: ~_collective(t) | (t["group_size"] >= 2),
    ),
    _Rule(
        None,
        "a collective has no m, n, k, batch (NaN)",
        lambda t: ~_collective(t) | _shape(t).isna().all(axis=1),
    ),
    _Rule(
        None,
        "a memory-bound kernel needs m, n >= 1",
        lambda t: ~_memory_bound(t) | (t[["m", "n"]] >= 1).all(axis=1),
    ),
    _Rule(
        None,
        "a collective or memory-bound kernel needs algbw_bytes_per_s > 0",
        lambda t: _compute(t) | (t["algbw_bytes_per_s"] > 0),
    ),
    _Rule("nodes", "nodes must be >= 1", lambda s: s >= 1),
    _Rule(
        "layout",
        f"layout must be one of {', '.join(LAYOUTS)} or missing",
        lambda s: s.isna() | s.isin(LAYOUTS),
    ),
)
"""The rules of :func:`validate_microbench`, in the order they are reported."""


@functools.cache
def microbench_schema() -> pa.DataFrameSchema:
    """The rules of :func:`validate_microbench` as a pandera schema, for a table that
    :func:`normalise_microbench` has typed. Built on first use, as importing pandera takes a
    while and ``surrogate predict`` needs none of it."""
    import pandera.pandas as pa

    def check(rule: _Rule) -> pa.Check:
        return pa.Check(rule.holds, name=rule.must, ignore_na=False)

    return pa.DataFrameSchema(
        {
            c: pa.Column(checks=[check(r) for r in _RULES if r.column == c], nullable=True)
            for c in MICROBENCH_COLUMNS
            if any(r.column == c for r in _RULES)
        },
        checks=[check(r) for r in _RULES if r.column is None],
    )


def validate_microbench(df: pd.DataFrame) -> pd.DataFrame:
    """Normalise ``df`` and check the schema's rules (:func:`microbench_schema`); raises
    DataError naming the first broken rule (in :data:`_RULES`'s order) and its first offending
    row. Returns the normalised table."""
    t = normalise_microbench(df)
    order = {rule.must: k for k, rule in enumerate(_RULES)}
    cases = failure_cases(microbench_schema(), t)
    first = min(
        (
            (
                order.get(str(check), len(_RULES)) if pd.notna(row) else -1,
                int(row) if pd.notna(row) else -1,
                f"{column}: {check} ({case})",
            )
            for check, column, row, case in zip(
                cases["check"], cases["column"], cases["index"], cases["failure_case"], strict=True
            )
        ),
        default=None,
    )
    if first is None:
        return t
    rule, i, what = first
    if rule < 0 or rule == len(_RULES):  # a check raised, or a failure no rule of ours names
        raise DataError(f"microbenchmark table: could not check {what}")
    row = t.iloc[i]
    raise DataError(
        f"microbenchmark row {i}: {_RULES[rule].must}; got op={row['op']!r} "
        f"dtype={row['dtype']!r} m={row['m']} n={row['n']} k={row['k']} "
        f"size_bytes={row['size_bytes']} group_size={row['group_size']} time_s={row['time_s']} "
        f"(source={row['source']!r} file={row['file']!r})"
    )


@dataclass(frozen=True, kw_only=True)
class MicrobenchAppend:
    """What :func:`append_microbench` did."""

    path: str
    rows_before: int
    rows_given: int
    rows_replaced: int
    """Stored rows that a given row replaced (same :data:`DEDUP_KEY`)."""
    rows_after: int
    table: pd.DataFrame = field(repr=False)

    def summary(self) -> str:
        dup_given = self.rows_given - (self.rows_after - self.rows_before + self.rows_replaced)
        return (
            f"{self.path}: {self.rows_before} rows before, {self.rows_given} given "
            f"({self.rows_replaced} replaced stored rows, {dup_given} repeated within the "
            f"input and kept once), {self.rows_after} rows now"
        )


def append_microbench(df: pd.DataFrame, path: str | Path) -> MicrobenchAppend:
    """Append ``df`` to the table at ``path`` (created if absent), atomically.

    Rows equal on :data:`DEDUP_KEY` are one measurement: the newly appended one replaces the
    stored one (and within ``df`` the last one wins). The whole read-modify-write holds the
    table's lock (:func:`surrogate.io.locks.locked`), so concurrent appends from several
    processes all land.
    """

    new = validate_microbench(df)
    p = Path(path)
    table_format(p)
    with locked(p):
        old = validate_microbench(read_table(p)) if p.exists() else empty_microbench()
        both = pd.concat([old, new], ignore_index=True) if len(old) else new
        keep = ~both.duplicated(subset=list(DEDUP_KEY), keep="last")  # NaN equals NaN here
        out = both.loc[keep].reset_index(drop=True)
        write_table_atomic(out, p)
    replaced = int((~keep.iloc[: len(old)]).sum()) if len(old) else 0
    return MicrobenchAppend(
        path=str(p),
        rows_before=len(old),
        rows_given=len(new),
        rows_replaced=replaced,
        rows_after=len(out),
        table=out,
    )
