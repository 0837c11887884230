"""The keys a configuration is written with: YAML/JSON files of one, and columns of tables.

A misspelt key must not silently fall back to a default (``zero: 1`` read as ZeRO-0), so a
configuration file may hold only configuration columns, each once, and an unknown key is an
error naming the nearest valid one: the column a command-line flag or Hugging Face spelling
stands for (``grad-accum``, ``zero``, ``num_attention_heads``), else the closest name by
:func:`difflib.get_close_matches`. A table of configurations may carry other columns
(outcomes, notes), but not one that is a near miss of a configuration column.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.config.checks import MAX_COUNT
from surrogate.config.presets import model_values
from surrogate.config.training import CLUSTER_FIELDS, CONFIG_COLUMNS, LAYOUT_FIELDS, MODEL_FIELDS
from surrogate.errors import ConfigError, shown

if TYPE_CHECKING:
    import pandas as pd

CONFIG_KEYS: tuple[str, ...] = (*CONFIG_COLUMNS, "name", "global_batch_seqs")
"""The keys of a flat configuration: the columns, the model's ``name`` and the optional global
batch check (:func:`surrogate.config.training.config_from_flat`)."""
SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "model": (*MODEL_FIELDS, "name"),
    "cluster": CLUSTER_FIELDS,
    "layout": (*LAYOUT_FIELDS, "global_batch_seqs"),
}
"""The keys of each section of a nested configuration file."""
FILE_KEYS: tuple[str, ...] = (*CONFIG_KEYS, *SECTION_KEYS)
"""Top-level keys of a configuration file (``model`` may also name a preset)."""
KEY_ALIASES: dict[str, str] = {
    "zero": "zero_stage",
    "nodes": "num_nodes",
    "num_hidden_layers": "num_layers",
    "intermediate_size": "ffn_hidden_size",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "tie_word_embeddings": "tie_embeddings",
    "max_position_embeddings": "seq_len",
    "moe_intermediate_size": "moe_ffn_hidden_size",
    "num_experts_per_tok": "experts_topk",
    "num_local_experts": "num_experts",
    # Megatron-LM arguments
    "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp",
    "context_parallel_size": "cp",
    "expert_model_parallel_size": "ep",
    "micro_batch_size": "mbs",
    "global_batch_size": "global_batch_seqs",
    "seq_length": "seq_len",
    "num_query_groups": "num_kv_heads",
    "moe_router_topk": "experts_topk",
    "recompute_granularity": "recompute",
    # torchtitan's parallelism degrees
    "tensor_parallel_degree": "tp",
    "pipeline_parallel_degree": "pp",
    "context_parallel_degree": "cp",
    "expert_parallel_degree": "ep",
    # nanotron, the Playbook table, DeepSpeed and common spellings
    "batch_accumulation_per_replica": "grad_accum",
    "batch_accum": "grad_accum",
    "sequence_length": "seq_len",
    "gradient_accumulation_steps": "grad_accum",
    "train_micro_batch_size_per_gpu": "mbs",
    "micro_batch": "mbs",
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "data_parallel_size": "dp",
    "max_seq_len": "seq_len",
    "zero_optimization_stage": "zero_stage",
    # GPT-2 style Hugging Face keys
    "n_layer": "num_layers",
    "n_embd": "hidden_size",
    "n_head": "num_heads",
    "n_inner": "ffn_hidden_size",
    "n_positions": "seq_len",
    "n_ctx": "seq_len",
    # names of the same setting in other tools and in prose
    "recompute_mode": "recompute",
    "recompute_method": "recompute",
    "activation_checkpointing": "recompute",
    "activation_checkpoint": "recompute",
    "gradient_checkpointing": "recompute",
    "activation_recomputation": "recompute",
    "checkpoint_activations": "recompute",
    "ac_mode": "recompute",
    "precision": "dtype",
    "mixed_precision": "dtype",
    "compute_dtype": "dtype",
    "train_dtype": "dtype",
    "fp8": "dtype",
    "bf16": "dtype",
    "gpu_type": "gpu",
    "gpu_name": "gpu",
    "gpu_model": "gpu",
    "device": "gpu",
    "accelerator": "gpu",
    "hardware_type": "gpu",
    "sequence_parallelism": "sequence_parallel",
    "sp": "sequence_parallel",
    "n_nodes": "num_nodes",
    "node_count": "num_nodes",
    "nnodes": "num_nodes",
    "nproc_per_node": "gpus_per_node",
    "gpus": "gpus_per_node",
    "zero_optimization": "zero_stage",
    "zero_level": "zero_stage",
}
"""Spellings of a column elsewhere: the CLI flags that differ from it, Hugging Face keys, and
the frameworks' names for the same setting; a file key or table column spelt so is refused
with the column it means (in a table it would otherwise be ignored and the column
defaulted)."""


_DEGREES = ("dp", "tp", "pp", "cp", "ep", "vpp")
_DEGREE_SUFFIXES = (
    "_parallel_degree",
    "_parallel_size",
    "_parallelism",
    "_parallel",
    "_degree",
    "_size",
    "_deg",
)


def nearest_key(key: str, valid: Sequence[str], *, cutoff: float = 0.6) -> str | None:
    """The valid key ``key`` most likely means: its flag spelling with dashes, an alias of
    :data:`KEY_ALIASES`, else the closest by difflib (similarity >= ``cutoff``); None if none."""
    plain = key.strip().lower().replace("-", "_").replace(" ", "_")
    if plain in valid:
        return plain
    alias = KEY_ALIASES.get(plain)
    if alias in valid:
        return alias
    for suffix in _DEGREE_SUFFIXES:  # tp_degree, cp_size, ep_parallel_size -> tp, cp, ep
        if plain.endswith(suffix) and plain[: -len(suffix)] in _DEGREES:
            degree = plain[: -len(suffix)]
            return degree if degree in valid else None
    close = difflib.get_close_matches(plain, list(valid), n=1, cutoff=cutoff)
    return close[0] if close else None


def check_keys(keys: Iterable[Any], valid: Sequence[str], *, where: str) -> None:
    """ConfigError for the first of ``keys`` not in ``valid``, naming the nearest valid one."""
    for key in keys:
        if key in valid:
            continue
        hint = nearest_key(str(key), valid)
        if hint is not None:
            raise ConfigError(
                f"{where}: unknown key {shown(key)}; did you mean {hint!r}? (keys "
                "must be configuration columns)"
            )
        raise ConfigError(
            f"{where}: unknown key {shown(key)}; keys must be configuration "
            f"columns: {', '.join(valid)}"
        )


def check_table_columns(columns: Iterable[Any], *, where: str) -> None:
    """ConfigError if a table of configurations has a column that is a near miss of a
    configuration column (``zero``, ``grad-accum``, ``num_layer``): it would be ignored and
    the column's default used. Other extra columns pass through."""
    names = [str(c) for c in columns]
    for name in names:
        if name in CONFIG_KEYS:
            continue
        hint = nearest_key(name, CONFIG_KEYS, cutoff=0.85)
        if hint is not None and hint not in names:
            raise ConfigError(
                f"{where}: column {name!r} is not a configuration column; did "
                f"you mean {hint!r}? (it would be ignored and {hint} defaulted)"
            )


OWN_COLUMN_PREFIX = "_"
"""A column of a ``--from-csv`` table whose name starts with this is the user's own (a note, a
label): carried through to the predictions, never read."""


def expand_model_column(table: pd.DataFrame, *, where: str, first_row: int = 1) -> pd.DataFrame:
    """``table`` with the preset each row's ``model`` cell names filled into the model's
    columns where the row leaves them empty (a configuration file's ``model: 8b``, row by row:
    the preset < the row's own columns); the table itself when it has no ``model`` column.
    ConfigError naming the first row (``first_row`` = the first under the header; a later
    chunk of a table passes its own) whose cell names no preset.

    Linear in the rows: each distinct cell is looked up once and each column filled where its
    rows name that preset (a table of 60,000 rows took 56 s when every row copied every
    column it filled)."""
    import pandas as pd

    if "model" not in table.columns:
        return table
    out = table.copy()
    cells = table["model"].to_numpy(dtype=object)
    rows_of: dict[str, list[int]] = {}  # each named preset's rows, in the order first named
    for row, cell in enumerate(cells):
        if cell is None or (isinstance(cell, float) and cell != cell):
            continue
        text = str(cell)
        if text.strip() != "":
            rows_of.setdefault(text, []).append(row)
    filled: dict[str, np.ndarray] = {}
    empty: dict[str, np.ndarray] = {}  # per column, where its own cell is empty
    for text, rows in rows_of.items():
        try:
            values = model_values(text, None)
        except ConfigError as e:
            raise ConfigError(f"{where}, row {rows[0] + first_row}: {e}") from None
        at = np.asarray(rows, dtype=np.int64)
        for key, value in values.items():
            if key not in filled:
                column = (
                    out[key].to_numpy(dtype=object, copy=True)
                    if key in out.columns
                    else np.full(len(out), None, dtype=object)
                )
                filled[key], empty[key] = column, _empty_cells(column)
            fill = at[empty[key][at]]
            column = filled[key]
            if np.ndim(value) == 0:
                column[fill] = value
            else:  # a sequence, which numpy would spread over the rows: each row its own
                for i in fill:
                    column[i] = value
    for key, column in filled.items():
        out[key] = pd.Series(column, index=out.index, dtype=object)
    return out


def _empty_cells(column: np.ndarray) -> np.ndarray:
    """Where an object column holds None, a float NaN, pandas' NA or the empty text (what a
    row leaves to the preset)."""
    import pandas as pd

    return np.fromiter(
        (
            v is None
            or v is pd.NA
            or (isinstance(v, float) and v != v)
            or (isinstance(v, str) and v == "")
            for v in column
        ),
        dtype=bool,
        count=len(column),
    )


def _too_large(key: str, value: Any) -> str | None:
    """Why the integer ``value`` of ``key`` is refused (above 2**53), or None."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        return None
    number = int(value)
    if abs(number) <= MAX_COUNT:
        return None
    owner = next(
        (
            f"{cls}."
            for cls, names in (
                ("ModelConfig", MODEL_FIELDS),
                ("ClusterConfig", CLUSTER_FIELDS),
                ("LayoutConfig", LAYOUT_FIELDS),
            )
            if key in names
        ),
        "",
    )
    try:
        given = f"{number:,}"
        if len(given) > 60:
            given = f"an integer of {len(str(abs(number))):,} digits"
    except ValueError:  # beyond Python's limit on converting integers to text
        given = f"an integer of about {math.log10(abs(number)):,.0f} digits"
    return (
        f"{owner}{key} must be at most 2**53 = {MAX_COUNT:,} (counts are exact in float64 "
        f"up to there), got {given}"
    )


def check_counts(values: Mapping[str, Any], *, where: str | None = None) -> None:
    """ConfigError for an integer above 2**53 (``mbs: 10^400``, ``--vocab-size 2**53+1``,
    from a file or a flag). The configuration reads counts through float64, which would round
    2**53 + 1 down to an accepted 2**53 and fail with an OverflowError beyond 10^308, instead
    of saying what must hold."""
    for key, value in values.items():
        why = _too_large(str(key), value)
        if why is not None:
            raise ConfigError(f"{where}: {why}" if where else why)


def check_finite(values: Mapping[str, Any], *, where: str | None = None) -> None:
    """ConfigError for a value that is a number but not a finite one (JSON's ``NaN`` and
    ``Infinity``, YAML's ``.nan`` and ``.inf``, a ``1e999`` that overflows): in a table an empty
    cell reads as NaN and takes the column's default, but a configuration file that writes
    ``mbs: NaN`` means something else than the default, and no configuration value is
    infinite."""
    for key, value in values.items():
        if isinstance(value, float | np.floating) and not math.isfinite(value):
            given = "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
            why = (
                f"{key} must be a finite value, got {given} (no configuration value is NaN "
                "or infinite; leave the key out for its default)"
            )
            raise ConfigError(f"{where}: {why}" if where else why)


def check_table_counts(table: pd.DataFrame, *, where: str, first_row: int = 1) -> None:
    """:func:`check_counts` for every cell of a table's configuration columns, naming the
    row (``first_row`` = the first under the header; a later chunk of a table passes its
    own). A column the CSV reader made float64 is left to the configuration's own checks (its
    values are already what float64 holds); an integer column is checked column-wise, text
    cell by cell only where the column holds other objects than text."""
    import pandas as pd

    for column in table.columns:
        if column not in CONFIG_KEYS:
            continue
        cells = table[column]
        dtype = cells.dtype
        if pd.api.types.is_float_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
            continue
        if pd.api.types.is_integer_dtype(dtype):
            present = cells.notna().to_numpy()
            values = cells[present].to_numpy()
            big = np.flatnonzero((values > MAX_COUNT) | (values < -MAX_COUNT))
            if len(big):
                row = int(np.flatnonzero(present)[big[0]]) + first_row
                raise ConfigError(f"{where}, row {row}: {_too_large(str(column), values[big[0]])}")
            continue
        if pd.api.types.is_string_dtype(dtype) and pd.api.types.infer_dtype(cells, skipna=True) in (
            "string",
            "empty",
        ):
            continue  # text only: no integer to check
        for row, value in enumerate(cells.tolist(), start=first_row):
            why = _too_large(str(column), value)
            if why is not None:
                raise ConfigError(f"{where}, row {row}: {why}")
