"""Configurations as a table of columns: many validated at once, without one
:class:`~surrogate.config.training.TrainingConfig` per row.

A :data:`FlatTable` maps each name of :data:`~surrogate.config.training.CONFIG_COLUMNS` to an array
(int64 counts, bool flags, object text) holding, per configuration, what
:func:`~surrogate.config.training.config_to_flat` writes for it. :func:`validate_table` builds one
from
a DataFrame of configurations and gives each row exactly the answer
:func:`~surrogate.config.training.config_from_flat` would, by applying the rules of
:mod:`surrogate.config.training` once, not restating them:

- each distinct model, cluster and GPU/dtype pair in the table is checked by building its
  dataclass once; each distinct layout too, with every degree ``d`` replaced by ``min(d, 2)``
  (a layout's own rules compare degrees with 1 only; the rest are cross rules);
- the rules between model, cluster and layout (:data:`~surrogate.config.training.CROSS_RULES`) are
  evaluated on columns;
- a row the columns cannot settle exactly (text in a number column, a count beyond 2**31, a
  product beyond 2**52, a ``global_batch_seqs``, or any broken rule) goes through
  ``config_from_flat`` itself, which gives its canonical values or its error message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.config.framework_defaults import DOCUMENTED_COLUMNS, defaults_for_columns
from surrogate.config.frameworks import get_framework
from surrogate.config.gpus import get_gpu
from surrogate.config.layout import RUNS_AS_FIELDS, ClusterConfig, LayoutConfig
from surrogate.config.model import ModelConfig
from surrogate.config.training import (
    CONFIG_COLUMNS,
    CROSS_COUNTS,
    CROSS_RULES,
    INT_FIELD_TYPES,
    MODEL_FIELDS,
    TrainingConfig,
    accounted_split,
    always_sequence_parallel,
    config_from_flat,
    config_to_flat,
    folds_experts,
    moe_needs_sequence_parallel,
    weighted_split,
)
from surrogate.errors import DataError, SurrogateError

if TYPE_CHECKING:
    import pandas as pd

FlatTable = dict[str, np.ndarray]
"""CONFIG_COLUMNS -> one array each, one element per configuration (module docstring)."""

_FIELDS = {f.name: f for cls in (ModelConfig, ClusterConfig, LayoutConfig) for f in fields(cls)}
_INT = tuple(n for n in CONFIG_COLUMNS if _FIELDS[n].type in INT_FIELD_TYPES)
_BOOL = tuple(n for n in CONFIG_COLUMNS if _FIELDS[n].type in ("bool", bool))
_TEXT = tuple(n for n in CONFIG_COLUMNS if n not in _INT and n not in _BOOL)
_REQUIRED = MODEL_FIELDS[:7]
"""Model columns without a default (config_from_flat requires them)."""
_CLUSTER = ("gpu", "gpus_per_node", "num_nodes")
_DEGREES = ("dp", "tp", "pp", "cp", "ep", "vpp", "mbs", "grad_accum", "dp_replicate")
_LAYOUT_TEXT = (
    "zero_stage",
    "recompute",
    "sequence_parallel",
    "dtype",
    "framework",
    "framework_version",
    "pp_schedule",
)
_EXACT_COUNT = 2**31
"""Counts up to here take the column path: their products below stay exact in float64."""
_EXACT_PRODUCT = 2.0**52


def _default(name: str) -> Any:
    default = _FIELDS[name].default
    return None if default is MISSING else default


def flat_table(configs: Sequence[TrainingConfig]) -> FlatTable:
    """The flat table of already validated configurations."""
    rows = [config_to_flat(cfg) for cfg in configs]
    return {name: _array(name, [r[name] for r in rows]) for name in CONFIG_COLUMNS}


def _array(name: str, values: Sequence[Any]) -> np.ndarray:
    if name in _INT:
        return np.array(values, dtype=np.int64)
    if name in _BOOL:
        return np.array(values, dtype=bool)
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def table_frame(table: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """A DataFrame of a flat table's columns, text (Python objects or numpy strings) kept as
    Python objects: pandas' default string dtype would copy every cell into Arrow and back
    (seconds for a search's million rows). The columns are not copied (nor stacked into
    blocks): the frame shares the table's arrays."""
    import pandas as pd

    return pd.DataFrame(
        {
            k: pd.Series(v if v.dtype == object else v.astype(object), dtype=object, copy=False)
            if v.dtype.kind in "OUS"
            else v
            for k, v in table.items()
        },
        copy=False,
    )


def table_len(table: FlatTable) -> int:
    return len(table[CONFIG_COLUMNS[0]])


def take(table: FlatTable, rows: np.ndarray) -> FlatTable:
    """The configurations at positions ``rows``."""
    return {k: v[rows] for k, v in table.items()}


def concat(first: FlatTable, then: FlatTable) -> FlatTable:
    """The configurations of ``first``, then those of ``then``."""
    return {k: np.concatenate([first[k], then[k]]) for k in first}


def group_codes(
    arrays: Sequence[np.ndarray], keys: Sequence[np.ndarray] | None = None
) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """Codes 0..k-1 of the distinct rows of ``arrays`` (in order of first appearance) and the
    distinct rows themselves, as tuples of Python values. ``keys``, one per array, tell the
    rows apart in their place where given: integer codes of a text column computed once
    (each code standing for one value; two codes may stand for the same value, which then
    appears in two rows)."""
    n = len(arrays[0])
    if n <= 256:  # a dict is quicker than pandas for a handful
        seen: dict[tuple[Any, ...], int] = {}
        codes = np.empty(n, dtype=np.int64)
        rows = list(zip(*(a.tolist() for a in arrays), strict=True))
        for i, key in enumerate(rows):
            codes[i] = seen.setdefault(key, len(seen))
        return codes, list(seen)
    codes, first = distinct_rows(arrays if keys is None else keys)
    values = [a[first].tolist() for a in arrays]  # the rows' own values (None stays None)
    return codes, list(zip(*values, strict=True))


def distinct_rows(arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the number (0..k-1, by first appearance) of its distinct combination of the
    values of ``arrays`` (columns of equal length), and the index of each combination's
    first row. Each column becomes small integers (an integer column its offset from its
    minimum, any other its ``pandas.factorize`` codes), combined into one mixed-radix key per
    row, renumbered only when the next column would overflow 62 bits: one hash pass over the
    rows at the end, instead of a factorize or a sort per column."""
    import pandas as pd

    n = len(arrays[0])
    key = np.zeros(n, dtype=np.int64)
    radix = 1  # every key is < radix
    for a in arrays:
        lo = int(a.min()) if a.dtype.kind in "iub" and n else 0
        if a.dtype.kind in "iub" and (size := int(a.max()) - lo + 1 if n else 1) < 2**31:
            if size <= 1:
                continue  # one value (a search space's model columns): it splits no group
            column = a.astype(np.int64) - lo
        else:  # missing cells (-1) become one more value: no separate pass for them
            column, uniques = pd.factorize(a)
            size = len(uniques) + 1
            column[column < 0] = size - 1
        if radix * size >= 2**62:
            key, uniq = pd.factorize(key)
            radix = len(uniq)
        key = key * size + column
        radix *= size
    codes, uniq = pd.factorize(key)  # numbered by first appearance
    first = np.full(len(uniq), n, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(n, dtype=np.int64))
    return np.asarray(codes, dtype=np.int64), first


def per_group(
    arrays: Sequence[np.ndarray], fn: Any, keys: Sequence[np.ndarray] | None = None
) -> tuple[np.ndarray, list[Any]]:
    """``fn(*distinct row)`` once for each distinct row of ``arrays`` (told apart by
    ``keys`` where given: :func:`group_codes`): the rows' codes and the answers
    (``answers[codes]`` is every row's)."""
    codes, uniques = group_codes(arrays, keys)
    return codes, [fn(*u) for u in uniques]


def _attribute(
    codes: np.ndarray, objects: list[Any], name: str, fallback: np.ndarray
) -> np.ndarray:
    """``object.name`` of each row's object, ``fallback`` where it is None."""
    values = np.empty(len(objects), dtype=object)
    values[:] = [None if o is None else getattr(o, name) for o in objects]
    none = np.array([o is None for o in objects], dtype=bool)
    if not none.any():  # every row's object built: no pass over the fallback
        return np.asarray(values[codes])
    return np.where(none[codes], fallback, values[codes])


@dataclass(frozen=True)
class CheckedTable:
    """:func:`validate_table`'s answer."""

    table: FlatTable
    """Canonical values of the valid rows, in input order."""
    rows: np.ndarray
    """Positions (0-based, in the input) of the valid rows."""
    errors: list[str]
    """Per input row: '' or why it is not a configuration (config_from_flat's message)."""


def _cells(
    df: pd.DataFrame, name: str, slow: np.ndarray, keys: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The column ``name`` in its field's type and where it is missing (None, NaN, ''); rows
    whose cells the column path cannot read exactly are marked in ``slow``. Missing cells
    hold the field's default (0 for a required count). A text column read through its
    distinct cells leaves their codes in ``keys`` (:func:`group_codes`' keys)."""
    import pandas as pd

    n = len(df)
    default = _default(name)
    if name not in df.columns:
        fill = 0 if default is None and name in _INT else default
        return np.full(
            n, fill, dtype=np.int64 if name in _INT else bool if name in _BOOL else object
        ), np.ones(n, dtype=bool)
    col = df[name]
    dtype = col.dtype
    if (
        name in _INT
        and pd.api.types.is_integer_dtype(dtype)
        and dtype.kind in "iu"
        and not col.hasnans
    ):  # a nullable Int64 column with NA reads as floats, below
        raw = col.to_numpy()
        if n == 0 or (int(raw.max()) <= _EXACT_COUNT and int(raw.min()) >= -_EXACT_COUNT):
            return raw.astype(np.int64), np.zeros(n, dtype=bool)  # a copy: v is written to
        big = (raw > _EXACT_COUNT) | (raw < -_EXACT_COUNT)
        slow |= big
        return np.where(big, 0, raw).astype(np.int64), np.zeros(n, dtype=bool)
    if name in _INT and (
        pd.api.types.is_float_dtype(dtype)
        or (pd.api.types.is_integer_dtype(dtype) and dtype.kind in "iu")
    ):
        f = col.to_numpy(dtype=np.float64, na_value=np.nan)
        missing = np.isnan(f)
        with np.errstate(invalid="ignore"):
            exact = np.isfinite(f) & (np.floor(f) == f) & (np.abs(f) <= _EXACT_COUNT)
        slow |= ~missing & ~exact
        fill = 0 if default is None else default
        return np.where(exact, f, fill).astype(np.int64), missing
    if name in _BOOL and pd.api.types.is_bool_dtype(dtype):
        return col.to_numpy(dtype=bool, copy=True), np.zeros(n, dtype=bool)
    categories = col.cat.categories if isinstance(dtype, pd.CategoricalDtype) else None
    if (
        name in _TEXT
        and n > 64
        and pd.api.types.infer_dtype(col if categories is None else categories, skipna=True)
        in ("string", "empty")
    ):
        # text and missing cells only: judge each distinct one once (a categorical's
        # categories, read by its codes). A missing cell: -1, the last of the cells below.
        codes, uniques = (
            pd.factorize(col) if categories is None else (col.cat.codes.to_numpy(), categories)
        )
        cells = [
            *uniques,
            np.nan
            if categories is not None  # the dtype's own missing value
            else getattr(dtype, "na_value", np.nan),
        ]
        odd = np.zeros(len(cells), dtype=bool)
        values, missing = _object_cells(cells, name, default, odd)
        if not (odd[:-1].any() or (odd[-1] and bool((codes < 0).any()))):
            keys[name] = codes  # else (pd.NA, say) cell by cell below, as config_from_flat
            return values[codes], missing[codes]  # reads it
    return _object_cells(col.tolist(), name, default, slow)


def _object_cells(
    cells: list[Any], name: str, default: Any, slow: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Cell by cell: exact Python values of the field's type pass, missing ones default, any
    other cell sends its row to config_from_flat."""
    out: list[Any] = []
    missing = np.zeros(len(cells), dtype=bool)
    fill = 0 if default is None and name in _INT else default
    for i, v in enumerate(cells):
        if v is None or (isinstance(v, float) and v != v) or (isinstance(v, str) and v == ""):
            missing[i] = True
            out.append(fill)
        elif name in _INT and type(v) is int and abs(v) <= _EXACT_COUNT:
            out.append(v)
        elif (name in _BOOL and type(v) is bool) or (name in _TEXT and isinstance(v, str)):
            out.append(v.strip() if isinstance(v, str) else v)
        else:
            slow[i] = True
            out.append(0 if name in _INT else False if name in _BOOL else default)
    return _array(name, out), missing


def _builds(cls: type, names: Sequence[str]) -> Any:
    """A function of one distinct row that builds ``cls`` from it: the object, or None if a
    rule of ``cls`` breaks."""

    def build(*values: Any) -> Any:
        try:
            return cls(**dict(zip(names, values, strict=True)))
        except SurrogateError:
            return None

    return build


def _gpu_has_dtype(gpu: str, dtype: str) -> bool:
    try:
        get_gpu(gpu).peak_flops(dtype)
    except SurrogateError:
        return False
    return True


def validate_table(df: pd.DataFrame, *, messages: bool = True) -> CheckedTable:
    """Validate every row of ``df`` (columns among :data:`CONFIG_COLUMNS`, optional ones
    defaulted, others ignored) as :func:`~surrogate.config.training.config_from_flat` would, and
    give
    the valid rows' canonical values as columns (module docstring). ``messages=False`` skips
    the row-by-row message of a row that breaks a rule (its error is :data:`BROKEN`): a
    generated table (a layout space) needs the verdicts only."""
    n = len(df)
    slow = np.zeros(n, dtype=bool)  # rows config_from_flat settles
    broken = np.zeros(n, dtype=bool)  # rows that break a rule
    v: dict[str, np.ndarray] = {}
    keys: dict[str, np.ndarray] = {}  # text columns' codes, each column factorised once
    sp_missing = np.zeros(n, dtype=bool)
    documented_missing = np.zeros(n, dtype=bool)  # a framework default applies: row by row
    for name in CONFIG_COLUMNS:
        v[name], missing = _cells(df, name, slow, keys)
        if name in DOCUMENTED_COLUMNS:
            documented_missing |= missing
        if name in _REQUIRED and name != "num_kv_heads":
            slow |= missing
        elif name == "num_kv_heads":  # config_from_flat: as many as num_heads when missing
            v[name] = np.where(missing, v["num_heads"], v[name])
        elif name == "sequence_parallel":
            sp_missing = missing
    if documented_missing.any():  # config_from_flat: the framework's documented defaults
        slow |= documented_missing & _per_framework(
            v["framework"], lambda f: bool(defaults_for_columns(f)), keys.get("framework")
        )
    if sp_missing.any():  # config_from_flat: the framework's default, for the model
        framework = v["framework"]
        default = (v["tp"] > 1) & (
            _per_framework(framework, always_sequence_parallel, keys.get("framework"))
            | (
                (v["num_experts"] >= 2)
                & _per_framework(framework, moe_needs_sequence_parallel, keys.get("framework"))
            )
        )
        v["sequence_parallel"] = np.where(sp_missing, default, v["sequence_parallel"])
    if "global_batch_seqs" in df.columns:  # checked by config_from_flat, row by row
        _, missing = _object_cells(
            df["global_batch_seqs"].tolist(), "global_batch_seqs", None, np.zeros(n, dtype=bool)
        )
        slow |= ~missing
    fast = np.flatnonzero(~slow)
    if len(fast):
        sub = v if len(fast) == n else {k: a[fast] for k, a in v.items()}
        sub_keys = keys if len(fast) == n else {k: a[fast] for k, a in keys.items()}
        bad, canonical = _canonical(sub, sub_keys)
        cross, inexact = _cross_rules(sub, sub_keys.get("framework"))
        broken[fast[bad | cross]] = True
        slow[fast[inexact & ~(bad | cross)]] = True
        for k, a in canonical.items():
            v[k][fast] = a
    errors = [""] * n
    valid = np.ones(n, dtype=bool)
    if messages:
        slow |= broken
    else:
        for pos in np.flatnonzero(broken).tolist():
            errors[pos] = BROKEN
        valid &= ~broken
    slow_rows = np.flatnonzero(slow)
    records = df.iloc[slow_rows].to_dict("records") if len(slow_rows) else []
    for pos, record in zip(slow_rows.tolist(), records, strict=True):
        try:
            flat = config_to_flat(config_from_flat(record))
        except SurrogateError as e:
            errors[pos] = str(e)
            valid[pos] = not errors[pos]
            continue
        for k in CONFIG_COLUMNS:  # counts are at most 2**53 (MAX_COUNT): they fit int64
            v[k][pos] = flat[k]
    rows = np.flatnonzero(valid)
    return CheckedTable(table=v if len(rows) == n else take(v, rows), rows=rows, errors=errors)


def _per_framework(
    framework: np.ndarray, flag: Callable[[str], bool], key: np.ndarray | None = None
) -> np.ndarray:
    """Per row, ``flag`` of its framework name, evaluated once per distinct name (False where
    the cell is missing); ``key``: the column's codes, where computed (:func:`group_codes`)."""
    codes, names = group_codes([framework], None if key is None else [key])
    flags = np.array([f is not None and f == f and flag(str(f)) for (f,) in names], dtype=bool)
    return np.asarray(flags[codes], dtype=bool)


BROKEN = "breaks a rule of surrogate.config.training"
"""The error of a row :func:`validate_table` judged without its message."""


def valid_table(df: pd.DataFrame, *, where: str) -> FlatTable:
    """The flat table of a DataFrame every row of which must be a valid configuration (a
    sweep table's runs); DataError naming the first row that is not."""
    checked = validate_table(df)
    bad = next(((i, e) for i, e in enumerate(checked.errors) if e), None)
    if bad is not None:
        raise DataError(f"{where} must be valid configurations, got row {bad[0]}: {bad[1]}")
    return checked.table


def runs_as_another(table: FlatTable) -> np.ndarray:
    """Per row of a valid table: why its framework would run it as another layout
    (:meth:`~surrogate.config.layout.LayoutConfig.runs_as_another`), '' where it runs as given;
    judged once per distinct layout."""

    def why(framework: str, moe: bool, *values: Any) -> str:
        kwargs = {
            name: v.item() if isinstance(v, np.generic) else v  # ints in the message
            for name, v in zip(RUNS_AS_FIELDS, values, strict=True)
        }
        return get_framework(framework).runs_as_another(**kwargs, moe=bool(moe)) or ""

    codes, answers = per_group(
        [table["framework"], table["num_experts"] >= 2, *(table[f] for f in RUNS_AS_FIELDS)], why
    )
    out = np.empty(len(answers), dtype=object)
    out[:] = answers
    return np.asarray(out[codes], dtype=object)


def _cross_rules(v: FlatTable, framework_key: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Where a cross rule breaks, and where a product leaves the range in which float64
    columns are exact (config_from_flat then decides); ``framework_key``: the framework
    column's codes, where computed."""
    c = SimpleNamespace(**{k: v[k].astype(np.float64) for k in CROSS_COUNTS})
    c.weighted_split = _per_framework(v["framework"], weighted_split, framework_key).astype(
        np.float64
    )
    c.accounted_split = _per_framework(v["framework"], accounted_split, framework_key).astype(
        np.float64
    )
    c.folds_experts = _per_framework(v["framework"], folds_experts, framework_key).astype(
        np.float64
    )
    inexact = np.zeros(len(c.dp), dtype=bool)
    for product in (
        c.dp * c.tp * c.pp * c.cp,
        c.gpus_per_node * c.num_nodes,
        c.dp * v["grad_accum"] * v["mbs"] * c.seq_len,
        c.pp * c.vpp,
        c.dp * c.cp,
    ):
        inexact |= product >= _EXACT_PRODUCT
    broken = np.zeros(len(c.dp), dtype=bool)
    with np.errstate(all="ignore"):  # a degree of 0 breaks a layout rule anyway
        for rule in CROSS_RULES:
            broken |= np.asarray(rule.broken(c), dtype=bool)
    return broken & ~inexact, inexact


def _canonical(
    v: FlatTable, keys: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Each distinct model, cluster, layout and GPU/dtype built once: where one breaks a rule,
    and the canonical ``gpu``, ``framework`` and ``framework_version``; ``keys``: codes of
    text columns (:func:`group_codes`)."""
    bad = np.zeros(table_len(v), dtype=bool)

    def build(
        cls: type, arrays: list[np.ndarray], names: Sequence[str]
    ) -> tuple[np.ndarray, list[Any]]:
        stand_in = [keys.get(k, a) for k, a in zip(names, arrays, strict=True)]
        codes, objects = per_group(arrays, _builds(cls, names), stand_in)
        bad[:] |= np.array([o is None for o in objects], dtype=bool)[codes]
        return codes, objects

    build(ModelConfig, [v[k] for k in MODEL_FIELDS], MODEL_FIELDS)
    codes_of_clusters, clusters = build(ClusterConfig, [v[k] for k in _CLUSTER], _CLUSTER)
    gpu = _attribute(codes_of_clusters, clusters, "gpu", v["gpu"])
    names = (*_DEGREES, "recompute_layers", *_LAYOUT_TEXT)
    degrees = [np.minimum(v[k], 2) for k in _DEGREES]  # a layout's own rules compare with 1
    checkpointed = np.minimum(v["recompute_layers"], 1)  # and this count with 0
    codes, layouts = build(
        LayoutConfig, [*degrees, checkpointed, *(v[k] for k in _LAYOUT_TEXT)], names
    )
    canonical = {
        "gpu": gpu,
        "framework": _attribute(codes, layouts, "framework", v["framework"]),
        "framework_version": _attribute(
            codes, layouts, "framework_version", v["framework_version"]
        ),
    }
    codes, has = per_group(
        [gpu, v["dtype"]],
        _gpu_has_dtype,  # one canonical GPU a cluster
        [codes_of_clusters, keys.get("dtype", v["dtype"])],
    )
    bad |= ~np.array(has, dtype=bool)[codes]
    return bad, canonical


__all__ = [
    "BROKEN",
    "CheckedTable",
    "FlatTable",
    "concat",
    "distinct_rows",
    "flat_table",
    "group_codes",
    "per_group",
    "runs_as_another",
    "take",
    "valid_table",
    "validate_table",
]
