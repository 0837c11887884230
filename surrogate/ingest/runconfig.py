"""A run's configuration from what its files say plus what the user gave on the command line.

Logs rarely say everything: nanotron configs have no node count, torchtitan names a model
flavour instead of its shape. ``surrogate ingest --set KEY=VALUE`` fills such gaps. A value
given both ways must agree: a conflict is an error, never a silent choice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from surrogate.config.files import nearest_key
from surrogate.config.presets import get_preset
from surrogate.config.training import (
    CONFIG_COLUMNS,
    MODEL_FIELDS,
    TrainingConfig,
    coerce_column,
    config_from_flat,
)
from surrogate.errors import ConfigError, DataError
from surrogate.runs.sweeps import CONTEXT_COLUMNS

PROVENANCE_KEYS: tuple[str, ...] = ("source", "date", "hardware", "model_name")
GIVEN_KEYS: tuple[str, ...] = (*CONFIG_COLUMNS, "model", *PROVENANCE_KEYS, *CONTEXT_COLUMNS)
"""Keys ``--set`` accepts: configuration columns, ``model`` (a preset name, expanded to its
shape), provenance and how the runs are explained (``profile``, ``peak_mem_stage``,
``net_scale``: :data:`surrogate.runs.sweeps.CONTEXT_COLUMNS`)."""
_CONTEXT_NUMBERS = {
    "peak_mem_stage": "a pipeline stage, a whole number >= 0",
    "net_scale": "a finite number > 0",
}


def _check_context_number(key: str, text: str) -> None:
    """ConfigError unless ``text`` is what the context column ``key`` holds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    ok = (
        (math.isfinite(value) and value > 0)
        if key == "net_scale"
        else (math.isfinite(value) and value >= 0 and value.is_integer())
    )
    if not ok:
        raise ConfigError(f"--set {key} must be {_CONTEXT_NUMBERS[key]}, got {text!r}")


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``["tp=8", "model=8b"]`` -> ``{"tp": "8", "model": "8b"}``, keys checked."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise ConfigError(f"--set takes KEY=VALUE, got {item!r}")
        if key not in GIVEN_KEYS:
            hint = nearest_key(key, GIVEN_KEYS)
            raise ConfigError(
                f"--set key must be one of {', '.join(GIVEN_KEYS)}, got {key!r}"
                + (f"; did you mean {hint!r}?" if hint else "")
            )
        if key in CONFIG_COLUMNS:
            try:
                coerce_column(key, value.strip())
            except ConfigError as e:
                raise ConfigError(f"--set {e}") from None
        if key in _CONTEXT_NUMBERS:
            _check_context_number(key, value.strip())
        if key == "model":  # a preset name, checked before any file is parsed
            try:
                get_preset(value.strip())
            except ConfigError as e:
                raise ConfigError(f"--set {e}") from None
        if key in out and out[key] != value.strip():
            raise ConfigError(f"--set {key} given twice: {out[key]!r} and {value.strip()!r}")
        out[key] = value.strip()
    return out


def expand_model(values: Mapping[str, Any], *, fill_seq_len: bool = True) -> dict[str, Any]:
    """Replace a ``model`` preset name by its shape columns (and ``model_name``). The preset's
    ``seq_len`` is only a default (``fill_seq_len``): a run's own sequence length beside it
    (a torchtitan llama3 8B run at 2,048 tokens) is that run's, not a conflict."""
    out = dict(values)
    name = out.pop("model", None)
    if name is None:
        return out

    preset = get_preset(str(name))
    shape = {k: getattr(preset, k) for k in MODEL_FIELDS}
    for k, v in shape.items():
        if k == "seq_len":
            if fill_seq_len:
                out.setdefault(k, v)
            continue
        if k in out and not same_value(out[k], v):
            raise ConfigError(f"model={name} has {k}={v}, but {k}={out[k]} was also given")
        out.setdefault(k, v)
    out.setdefault("model_name", preset.name)
    return out


def same_value(a: Any, b: Any) -> bool:
    """Whether two spellings of a configuration value agree (8 == "8", True == "true")."""
    if isinstance(a, bool) or isinstance(b, bool):
        truth = {"true": True, "1": True, "false": False, "0": False}
        return truth.get(str(a).strip().lower()) == truth.get(str(b).strip().lower())
    try:
        fa, fb = float(a), float(b)
    except (TypeError, ValueError):
        return str(a).strip().lower() == str(b).strip().lower()
    return fa == fb


def merge(found: Mapping[str, Any], given: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """What the file says (``found``) completed by what the user gave; they must agree."""
    found = expand_model(found)
    given = expand_model(given, fill_seq_len="seq_len" not in found)
    out = {k: v for k, v in found.items() if v is not None}
    for key, value in given.items():
        if key in out and not same_value(out[key], value):
            raise DataError(
                f"{where}: --set {key}={value} conflicts with the file's {key}={out[key]}"
            )
        out.setdefault(key, value)
    return out


def place_on_nodes(values: dict[str, Any], world: int) -> None:
    """Fill ``num_nodes`` (and ``gpus_per_node`` for a run smaller than one node) from the
    world size when the file does not say; ``gpus_per_node`` defaults to 8."""
    if "num_nodes" in values:
        return
    per_node = int(values.get("gpus_per_node", 8))
    if world < per_node:
        values["gpus_per_node"], values["num_nodes"] = world, 1
    elif world % per_node == 0:
        values["num_nodes"] = world // per_node
    else:
        raise DataError(
            f"the world size ({world} GPUs) must be a multiple of gpus_per_node={per_node}; "
            "give --set gpus_per_node=... and --set num_nodes=..."
        )


def build_config(values: Mapping[str, Any], *, where: str) -> TrainingConfig:
    """A validated configuration, or a DataError naming the file and the broken rule."""
    try:
        return config_from_flat(dict(values))
    except ConfigError as e:
        raise DataError(f"{where}: {e}") from None
