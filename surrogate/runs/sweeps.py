"""The sweep table: one row per training run, its full configuration, outcome and provenance.

Columns (documented in ``datasets/README.md``):

- every name of :data:`surrogate.config.training.CONFIG_COLUMNS`, checked per row by
  :func:`surrogate.config.training.config_from_flat` (so the layout invariants hold) and stored in
  the
  canonical form :func:`surrogate.config.training.config_to_flat` gives back;
- the outcome :data:`OUTCOME_COLUMNS` (``status`` from :data:`STATUSES`; measurements are
  NaN when missing, never 0 or -1);
- the provenance :data:`PROVENANCE_COLUMNS` (``framework_version`` is a configuration column);
- how the run is explained, :data:`CONTEXT_COLUMNS`: the calibration profile of the cluster it
  ran on, the pipeline stage its peak memory was logged on and the network it measured
  (optional in a table given to the package: missing where absent, their documented defaults).

Rows are unique on (source, run_id). Validation runs on every read and write; appends are
atomic (:func:`surrogate.io.tableio.write_table_atomic`) and say what they added and replaced.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
import pandas as pd

from surrogate.analytic.flops import mfu
from surrogate.analytic.inputs import cols_from_table
from surrogate.analytic.memory import LOGGED_STAGE_COLUMN
from surrogate.analytic.params import ParameterSets
from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.model import ARCHITECTURE_FIELDS, ModelConfig
from surrogate.config.table import valid_table, validate_table
from surrogate.config.training import (
    CONFIG_COLUMNS,
    INT_FIELD_TYPES,
    TrainingConfig,
    config_to_flat,
)
from surrogate.errors import DataError
from surrogate.io.tableio import failure_cases

if TYPE_CHECKING:  # pandera is imported where a table is checked: `surrogate predict` needs none
    import pandera.pandas as pa

Status = Literal["completed", "oom", "fail", "timeout"]
STATUSES: tuple[str, ...] = get_args(Status)

MEASUREMENT_COLUMNS: tuple[str, ...] = (
    "tokens_per_s_per_gpu",
    "step_time_s",
    "mfu",
    "mfu_reported",
    "tflops_per_gpu_reported",
    "peak_mem_allocated_gib",
    "peak_mem_reserved_gib",
)
"""Measured values, float, NaN when the source lacks them.

- ``mfu``: a fraction of the GPU's dense peak for the run's dtype, recomputed under the
  project's definition (:func:`surrogate.analytic.flops.mfu`, 6N + 12 L h s per token).
- ``mfu_reported``: the source's own MFU, as given (the Playbook and torchtitan write percent).
- ``tflops_per_gpu_reported``: the source's model TFLOP/s per GPU, as given.
- memory: GiB (2**30 bytes), peaks over the run as the framework's allocator reports them.
"""
OUTCOME_COLUMNS: tuple[str, ...] = ("status", *MEASUREMENT_COLUMNS)
PROVENANCE_COLUMNS: tuple[str, ...] = ("source", "run_id", "date", "hardware", "model_name")
"""``source``: where the row comes from (e.g. ``hf_ultrascale_playbook``); ``run_id``: the run's
name within the source; ``date``: ISO-8601 text or missing; ``hardware``: free text;
``model_name``: the model as the source names it (e.g. ``8.86G``), or missing."""
FLAG_COLUMN = "layout_problem"
"""Why the configuration validator rejects a run's layout (pp deeper than the layers, heads not
divisible by tp), or missing. Such a run was really launched and really failed (or, rarely,
ran): it is kept as data, flagged, with its configuration columns as the source gave them,
rather than dropped at ingestion. :func:`read_sweeps` leaves flagged runs out unless asked
(``flagged=True``): nothing that builds a configuration from a row can take them."""
CONTEXT_COLUMNS: tuple[str, ...] = ("profile", LOGGED_STAGE_COLUMN, "net_scale")
"""How a run is explained (:func:`surrogate.runs.context.run_context`), written by the parser
of its source; each is missing where the source does not know it:

- ``profile``: the calibration profile of the cluster it ran on, a shipped profile's name or a
  profile file's path (missing: the profile given to training, else the GPU's default one);
- ``peak_mem_stage``: the 0-based pipeline stage of the rank whose peak memory the row records,
  a whole number below ``pp`` (missing: the most loaded stage, the maximum over ranks);
- ``net_scale``: the run's measured network efficiency over its profile's curve at its node
  count, a number > 0 (missing: 1, the profile's curve)."""
SWEEP_COLUMNS: tuple[str, ...] = (
    *CONFIG_COLUMNS,
    *OUTCOME_COLUMNS,
    *PROVENANCE_COLUMNS,
    *CONTEXT_COLUMNS,
    FLAG_COLUMN,
)
KEY_COLUMNS: tuple[str, str] = ("source", "run_id")

_MAX_ERRORS_SHOWN = 5


def empty_sweeps() -> pd.DataFrame:
    """A sweep table with no rows and every column."""
    return pd.DataFrame({c: pd.Series([], dtype=_dtype(c)) for c in SWEEP_COLUMNS})


def _config_dtypes() -> dict[str, str]:
    return {
        f.name: (
            "int64"
            if f.type in INT_FIELD_TYPES
            else "bool"
            if f.type in ("bool", bool)
            else "object"
        )
        for cls in (ModelConfig, ClusterConfig, LayoutConfig)
        for f in fields(cls)
    }


_CONFIG_DTYPES = _config_dtypes()

_FLOAT_COLUMNS = (*MEASUREMENT_COLUMNS, LOGGED_STAGE_COLUMN, "net_scale")


def _dtype(column: str) -> str:
    if column in _FLOAT_COLUMNS:
        return "float64"
    return _CONFIG_DTYPES.get(column, "object")


def sweep_row(
    cfg: TrainingConfig,
    *,
    status: str,
    source: str,
    run_id: str,
    date: str | None = None,
    hardware: str | None = None,
    model_name: str | None = None,
    **measurements: float | None,
) -> dict[str, Any]:
    """One row of the table from a validated configuration, a status, measurements and
    provenance. Unknown measurement names raise, so a typo cannot silently drop a value."""
    unknown = sorted(set(measurements) - set(MEASUREMENT_COLUMNS))
    if unknown:
        raise DataError(
            f"measurements must be among {', '.join(MEASUREMENT_COLUMNS)}, got {', '.join(unknown)}"
        )
    return _with_outcomes(
        config_to_flat(cfg),
        status,
        measurements,
        source=source,
        run_id=run_id,
        date=date,
        hardware=hardware,
        model_name=model_name,
    )


def _with_outcomes(
    row: dict[str, Any], status: str, measurements: Mapping[str, float | None], **provenance: Any
) -> dict[str, Any]:
    """``row`` (configuration columns) with the status, every measurement column (NaN where
    not measured) and the provenance."""
    row["status"] = status
    for name in MEASUREMENT_COLUMNS:
        value = measurements.get(name)
        row[name] = math.nan if value is None else float(value)
    row.update(provenance)
    return row


def with_context(
    row: dict[str, Any],
    *,
    profile: str | None = None,
    peak_mem_stage: float | None = None,
    net_scale: float | None = None,
) -> dict[str, Any]:
    """``row`` (:func:`sweep_row`, :func:`flagged_row`) with what its source knows of how the
    run is explained (:data:`CONTEXT_COLUMNS`; None: missing, the column's default)."""
    row.update(profile=profile, peak_mem_stage=peak_mem_stage, net_scale=net_scale)
    return row


def recompute_mfu(df: pd.DataFrame) -> pd.Series:
    """MFU (fraction) of every row from ``tokens_per_s_per_gpu`` under the project's
    definition: tokens/s/GPU x (6 N + 12 L h s) / dense peak of the row's dtype
    (:mod:`surrogate.analytic.flops`). NaN where the throughput is missing."""
    if df.empty:
        return pd.Series([], dtype="float64", index=df.index)
    table = valid_table(df[list(CONFIG_COLUMNS)], where="runs whose MFU is recomputed")
    tps = df["tokens_per_s_per_gpu"].to_numpy(dtype=np.float64)
    cols = cols_from_table(table, ParameterSets())  # no free parameter enters the MFU
    return pd.Series(mfu(tps, cols), index=df.index, dtype="float64")


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _numbers(s: pd.Series) -> pd.Series:
    """``s`` as float64, NaN where a value is missing or not a number."""
    return pd.to_numeric(s, errors="coerce").astype("float64")


def _each(test: Callable[[Any], bool]) -> Callable[[pd.Series], pd.Series]:
    """A column check that applies ``test`` to every value, missing ones included."""
    return lambda s: s.map(test).astype(bool)


@dataclass(frozen=True)
class _Rule:
    """One check of a column and what its message says: ``must`` is formatted with the value
    as given (``raw``) and as a number (``number``)."""

    column: str
    name: str
    holds: Callable[[pd.Series], pd.Series]
    """True where a value is fine; missing values are the rule's to judge."""
    must: str


def _rules() -> tuple[_Rule, ...]:
    """The column checks, in the order their problems are listed."""
    rules: list[_Rule] = []
    for col in MEASUREMENT_COLUMNS:
        rules += [
            _Rule(
                col,
                f"{col} is a number",
                lambda s: ~(_numbers(s).isna() & s.notna()),
                "must be a number or missing (NaN), got {raw!r}",
            ),
            _Rule(
                col,
                f"{col} > 0",
                lambda s: ~(_numbers(s) <= 0),
                "must be > 0 or missing (NaN, never 0 or -1), got {number!r}",
            ),
            _Rule(
                col,
                f"{col} is finite",
                lambda s: ~np.isinf(_numbers(s)),
                "must be finite, got {number!r}",
            ),
        ]
    rules.append(
        _Rule(
            "mfu",
            "mfu <= 1",
            lambda s: ~(_numbers(s) > 1),
            "must be a fraction in (0, 1], got {number!r} (a percentage belongs in mfu_reported)",
        )
    )
    rules.append(
        _Rule(
            "status",
            "status is known",
            _each(lambda v: v in STATUSES),
            f"must be one of {', '.join(STATUSES)}, got {{raw!r}}",
        )
    )
    for col in ("source", "run_id"):
        rules.append(
            _Rule(
                col,
                f"{col} is text",
                _each(lambda v: isinstance(v, str) and bool(v.strip())),
                "must be a non-empty string, got {raw!r}",
            )
        )
    rules += [
        _Rule(
            "profile",
            "profile is text",
            _each(lambda v: is_missing(v) or (isinstance(v, str) and bool(v.strip()))),
            "must be a profile's name or path, or missing, got {raw!r}",
        ),
        _Rule(
            LOGGED_STAGE_COLUMN,
            "peak_mem_stage is a stage",
            lambda s: s.isna() | ((_numbers(s) >= 0) & (_numbers(s) % 1 == 0)),
            "must be a pipeline stage, a whole number >= 0, or missing, got {raw!r}",
        ),
        _Rule(
            "net_scale",
            "net_scale > 0",
            lambda s: s.isna() | ((_numbers(s) > 0) & np.isfinite(_numbers(s))),
            "must be a finite number > 0 or missing, got {raw!r}",
        ),
    ]
    for col in ("date", "hardware", "model_name", FLAG_COLUMN):
        rules.append(
            _Rule(
                col,
                f"{col} is text",
                _each(lambda v: is_missing(v) or isinstance(v, str)),
                "must be text or missing, got {raw!r}",
            )
        )
    return tuple(rules)


_RULES = _rules()


@functools.cache
def sweep_schema() -> pa.DataFrameSchema:
    """The column checks of :func:`validate_sweeps` and the uniqueness of (source, run_id) as a
    pandera schema. It judges values only: columns, configurations and dtypes are
    :func:`validate_sweeps`'s. Built on first use, as importing pandera takes a while."""
    import pandera.pandas as pa

    checks: dict[str, list[pa.Check]] = {c: [] for c in SWEEP_COLUMNS}
    for rule in _RULES:
        checks[rule.column].append(pa.Check(rule.holds, name=rule.name, ignore_na=False))
    return pa.DataFrameSchema(
        {c: pa.Column(checks=checks[c], nullable=True) for c in SWEEP_COLUMNS if checks[c]},
        unique=list(KEY_COLUMNS),
        report_duplicates="exclude_first",
    )


_UNIQUE = "multiple_fields_uniqueness"
"""pandera's name for a failure of ``DataFrameSchema(unique=...)``."""


def _value_problems(out: pd.DataFrame) -> list[tuple[int, int, str]]:
    """(rule, row, what) of every failed check of :func:`sweep_schema`, in message order: rule
    by rule as :data:`_RULES` lists them, then the uniqueness of (source, run_id) (rule
    ``len(_RULES)``), then failures no rule names (one above), each rule's rows ascending.
    ``what`` describes a failure no rule names; row -1: the check raised, ``what`` says how."""
    order = {rule.name: k for k, rule in enumerate(_RULES)}
    order[_UNIQUE] = len(_RULES)
    cases = failure_cases(sweep_schema(), out)
    found = set()  # a check of several columns reports each of them; one problem per row
    for check, column, row, case in zip(
        cases["check"], cases["column"], cases["index"], cases["failure_case"], strict=True
    ):
        if pd.isna(row):  # the check raised: pandera gives the error instead of rows
            found.add((len(_RULES) + 1, -1, f"{column}: {check} ({case})"))
        elif str(check) in order:
            found.add((order[str(check)], int(row), ""))
        else:
            found.add((len(_RULES) + 1, int(row), f"{column}: {check}"))
    return sorted(found)


def _describe(out: pd.DataFrame, rule: int, row: int, what: str) -> str:
    """The message of one problem from :func:`_value_problems`."""
    if rule < len(_RULES):
        r = _RULES[rule]
        raw = out[r.column].iloc[row]
        number = float(_numbers(out[r.column]).iloc[row]) if "{number" in r.must else None
        return f"row {row}: {r.column} {r.must.format(raw=raw, number=number)}"
    if rule == len(_RULES):
        return (
            f"row {row}: (source, run_id) must be unique, got a second "
            f"({out['source'].iloc[row]!r}, {out['run_id'].iloc[row]!r})"
        )
    return f"row {row}: {what} does not hold" if row >= 0 else f"could not check {what}"


def validate_sweeps(df: pd.DataFrame, *, where: str = "sweep table") -> pd.DataFrame:
    """Check ``df`` against the schema and return it in canonical form (column order, dtypes,
    configuration columns as :func:`config_to_flat` writes them). A table that lacks the
    model-variant columns (:data:`surrogate.config.model.ARCHITECTURE_FIELDS`, added later) gets
    their defaults, 0, and ``gated_mlp`` True: it was written when every model was a Llama
    block; one that lacks
    ``pp_schedule`` (added later) gets '1f1b', the only schedule then described, and one that
    lacks ``recompute_layers`` (added later) 0: every layer, the only recomputation then
    described, and one that lacks ``dp_replicate`` (added later) 1: ZeRO over every data- and
    context-parallel rank, the only sharding then described.

    Values are checked by :func:`sweep_schema` (pandera), each row's configuration by
    :func:`surrogate.config.training.config_from_flat`. Raises DataError saying what must hold,
    what was
    given and in which rows (the first few problems, configurations first, and how many in all).
    """
    absent = [c for c in ARCHITECTURE_FIELDS if c not in df.columns]
    if absent:  # a table written before these columns existed holds Llama blocks (their 0)
        df = df.assign(**dict.fromkeys(absent, 0))
    if "gated_mlp" not in df.columns:  # written when every MLP was SwiGLU
        df = df.assign(gated_mlp=True)
    if "pp_schedule" not in df.columns:
        df = df.assign(pp_schedule="1f1b")
    if "recompute_layers" not in df.columns:
        df = df.assign(recompute_layers=0)
    if "dp_replicate" not in df.columns:
        df = df.assign(dp_replicate=1)
    if FLAG_COLUMN not in df.columns:  # a table written before runs were flagged
        df = df.assign(**{FLAG_COLUMN: None})
    absent = [c for c in CONTEXT_COLUMNS if c not in df.columns]
    if absent:  # optional: a source that knows none of them
        df = df.assign(**dict.fromkeys(absent, None))
    missing = [c for c in SWEEP_COLUMNS if c not in df.columns]
    extra = [c for c in df.columns if c not in SWEEP_COLUMNS]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(map(str, missing))}")
        if extra:
            parts.append(f"unknown {', '.join(map(str, extra))}")
        raise DataError(
            f"{where}: the columns must be those of the sweep schema; {'; '.join(parts)}"
        )
    out = df.reset_index(drop=True).copy()
    out[FLAG_COLUMN] = out[FLAG_COLUMN].map(
        lambda v: None if is_missing(v) or (isinstance(v, str) and not v.strip()) else v
    )
    flagged = flagged_mask(out)
    checked = validate_table(out[list(CONFIG_COLUMNS)].loc[~flagged].reset_index(drop=True))
    valid_rows = np.flatnonzero(~flagged)
    errors = [f"row {valid_rows[i]}: {e}" for i, e in enumerate(checked.errors) if e]
    errors += _stages_beyond(out, valid_rows)
    raw_config = _flagged_configs(out, flagged, errors)
    problems = _value_problems(out)
    if errors or problems:
        count = len(errors) + len(problems)
        shown = errors[:_MAX_ERRORS_SHOWN] + [
            _describe(out, *p) for p in problems[: max(0, _MAX_ERRORS_SHOWN - len(errors))]
        ]
        more = f" (and {count - _MAX_ERRORS_SHOWN} more)" if count > _MAX_ERRORS_SHOWN else ""
        raise DataError(f"{where}: {count} problem(s): {'; '.join(shown)}{more}")
    for col in _FLOAT_COLUMNS:
        out[col] = _numbers(out[col])
    for col in CONFIG_COLUMNS:
        values = np.empty(len(out), dtype=object)
        values[valid_rows] = list(checked.table[col])
        values[np.flatnonzero(flagged)] = raw_config[col]
        out[col] = values
    for col in ("date", "hardware", "model_name", "profile"):
        out[col] = out[col].map(lambda v: None if is_missing(v) else v).astype("object")
    for col in SWEEP_COLUMNS:
        out[col] = out[col].astype(_dtype(col))  # type: ignore[call-overload]
    return out[list(SWEEP_COLUMNS)]


def _stages_beyond(out: pd.DataFrame, rows: np.ndarray) -> list[str]:
    """A problem per row of ``rows`` whose ``peak_mem_stage`` is not a stage of its pipeline."""
    stage = _numbers(out[LOGGED_STAGE_COLUMN]).to_numpy()[rows]
    pp = _numbers(out["pp"]).to_numpy()[rows]
    return [
        f"row {r}: {LOGGED_STAGE_COLUMN} must be a stage of the run's pipeline, below pp "
        f"= {p:g}, got {s:g}"
        for r, s, p in zip(rows.tolist(), stage, pp, strict=True)
        if s >= p
    ]


def flagged_mask(df: pd.DataFrame) -> np.ndarray:
    """True for the runs flagged with a :data:`FLAG_COLUMN` (none when the column is absent)."""
    if FLAG_COLUMN not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return np.array(
        [not is_missing(v) and bool(str(v).strip()) for v in df[FLAG_COLUMN]], dtype=bool
    )


def unflagged(df: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``df`` whose configuration the validator accepts (every run that is not
    flagged), indexed 0..n-1."""
    flagged = flagged_mask(df)
    return df if not flagged.any() else df.loc[~flagged].reset_index(drop=True)


def _flagged_configs(
    out: pd.DataFrame, flagged: np.ndarray, errors: list[str]
) -> dict[str, list[Any]]:
    """The configuration columns of the flagged rows as given, each value of an integer or
    boolean column checked to be one (a problem appended to ``errors`` otherwise): a flagged
    run's layout breaks a rule, but its values are still the numbers the source gave."""
    values: dict[str, list[Any]] = {c: [] for c in CONFIG_COLUMNS}
    for row in np.flatnonzero(flagged).tolist():
        for col in CONFIG_COLUMNS:
            v = out[col].iloc[row]
            kind = _CONFIG_DTYPES.get(col, "object")
            if kind == "int64":
                number = pd.to_numeric(pd.Series([v]), errors="coerce").iloc[0]
                if is_missing(number) or not float(number).is_integer() or isinstance(v, bool):
                    errors.append(f"row {row}: {col} must be an integer, got {v!r}")
                    number = 0
                v = int(number)
            elif kind == "bool":
                if not isinstance(v, bool | np.bool_):
                    errors.append(f"row {row}: {col} must be true or false, got {v!r}")
                v = bool(v)
            values[col].append(v)
    return values


def flagged_row(
    values: Mapping[str, Any],
    reason: str,
    *,
    status: str,
    source: str,
    run_id: str,
    date: str | None = None,
    hardware: str | None = None,
    model_name: str | None = None,
    **measurements: float | None,
) -> dict[str, Any]:
    """One row of a run whose layout the validator rejects (``reason``), kept as data with its
    configuration ``values`` as given (the columns it lacks at their defaults) and flagged:
    :func:`sweep_row`'s counterpart for a configuration that cannot be built."""
    row: dict[str, Any] = {}
    for cls in (ModelConfig, ClusterConfig, LayoutConfig):
        for f in fields(cls):
            if f.name in CONFIG_COLUMNS and f.default is not MISSING:
                row[f.name] = f.default
    row.update({k: v for k, v in values.items() if k in CONFIG_COLUMNS})
    return _with_outcomes(
        row,
        status,
        measurements,
        source=source,
        run_id=run_id,
        date=date,
        hardware=hardware,
        model_name=model_name,
        **{FLAG_COLUMN: reason},
    )


def frame_from_rows(rows: Iterable[Mapping[str, Any]], *, where: str = "rows") -> pd.DataFrame:
    """A validated sweep table from rows made by :func:`sweep_row`, with ``mfu`` recomputed
    from each row's throughput (:func:`recompute_mfu`)."""
    records = list(rows)
    if not records:
        return empty_sweeps()
    df = validate_sweeps(
        pd.DataFrame.from_records(records, columns=list(SWEEP_COLUMNS)), where=where
    )
    ok = ~flagged_mask(df)
    mfu = np.full(len(df), np.nan)
    if ok.any():
        mfu[ok] = recompute_mfu(df.loc[ok]).to_numpy()
    df["mfu"] = mfu
    return df


def sweep_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Runs per (source, model, nodes) and status, one column per status plus the total."""
    model = df["model_name"].where(
        df["model_name"].notna(),
        "L" + df["num_layers"].astype(str) + "-h" + df["hidden_size"].astype(str),
    )
    counts = (
        df.assign(model=model)
        .groupby(["source", "model", "num_nodes", "status"])
        .size()
        .unstack("status", fill_value=0)
    )
    for s in STATUSES:
        if s not in counts.columns:
            counts[s] = 0
    counts = counts[list(STATUSES)]
    counts["runs"] = counts.sum(axis=1)
    return counts.reset_index()
