"""A configuration file read into configuration columns: YAML or JSON, flat or nested under
``model:``, ``cluster:``, ``layout:``, or a torchtitan job config (``.toml``, read as its ingest
reads it). Every key is checked (:mod:`surrogate.config.files`): an unknown one is an error
naming the nearest valid one, a key given twice is refused, and a YAML file may not expand past
:data:`MAX_YAML_VALUES` values through its aliases.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from surrogate.config.files import (
    FILE_KEYS,
    SECTION_KEYS,
    check_counts,
    check_finite,
    check_keys,
)
from surrogate.errors import ConfigError, shown
from surrogate.ingest.torchtitan import job_config_columns
from surrogate.io.input_files import check_input_file, read_input_text
from surrogate.io.json_files import refuse_duplicate_keys

MAX_YAML_VALUES = 10_000
"""Most values (scalars, lists, mappings, each counted where an alias repeats it) a YAML
configuration file may expand to. A configuration is a few dozen values; nested aliases expand
a 2 KB file into billions (a "billion laughs" file), which would take minutes and gigabytes
to build, and as many characters to quote in an error."""
ANCHOR_HOLDER_PREFIX = "x-"
"""A top-level key of a YAML configuration file starting with this holds YAML anchors for merge
keys (``x-base: &base {dp: 8}`` then ``layout: {<<: *base}``), as in Docker Compose files; it
is not a configuration key, and is left out."""
_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_AMBIGUOUS_TAG = "tag:surrogate,2026:ambiguous-number"
_DIGITS = list("-+0123456789")
CORE_NUMBERS: tuple[tuple[str, re.Pattern[str], list[str]], ...] = (
    (_INT_TAG, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), _DIGITS),
    (_INT_TAG, re.compile(r"^0x[0-9a-fA-F]+$"), ["0"]),
    (
        _FLOAT_TAG,
        re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$"),
        [*_DIGITS, "."],
    ),
    (_FLOAT_TAG, re.compile(r"^[-+]?\.(?:inf|Inf|INF)$"), ["-", "+", "."]),
    (_FLOAT_TAG, re.compile(r"^\.(?:nan|NaN|NAN)$"), ["."]),
)
"""The plain scalars a YAML configuration file reads as numbers: YAML 1.2's core schema
(decimal integers without a leading zero, hexadecimal, decimal floats with an optional
exponent, ``.inf``, ``.nan``; the two last refused later as no configuration value). PyYAML
reads YAML 1.1, where ``016`` is octal 14 and ``1:00`` is sexagesimal 60."""
AMBIGUOUS_NUMBERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"^[-+]?0[0-9_]+$"),
        "a leading zero: octal under YAML 1.1 (016 is 14), decimal under YAML 1.2",
    ),
    (
        re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$"),
        "a colon: base 60 under YAML 1.1 (1:00 is 60), text under YAML 1.2",
    ),
    (
        re.compile(r"^[-+]?[0-9][0-9_]*_[0-9_]*(?:\.[0-9_]*)?$"),
        "an underscore: a digit separator under YAML 1.1 (1_000 is 1000), text under YAML 1.2",
    ),
    (re.compile(r"^[-+]?0b[01_]+$"), "binary under YAML 1.1, text under YAML 1.2"),
    (re.compile(r"^[-+]?0o[0-7]+$"), "octal under YAML 1.2, text under YAML 1.1"),
)
"""Plain scalars that YAML 1.1 and YAML 1.2 read as different values (a number under one, text
or another number under the other): a configuration file holding one is refused, with the line,
rather than read one way in silence (write the number in decimal, or quote it for text)."""


def _check_expansion(root: Any) -> None:
    """ConfigError if the YAML node graph ``root`` expands (aliases followed) to more than
    :data:`MAX_YAML_VALUES` values, or an alias refers to a node that holds it: counted on
    the graph, where each anchored node is counted once per use but never built."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise ConfigError(
                "an alias refers to a node that holds it (a recursive value); a "
                "configuration holds plain values"
            )
        open_.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_YAML_VALUES:
                raise ConfigError(
                    f"the file expands to more than {MAX_YAML_VALUES:,} values through its "
                    f"aliases (line {child.start_mark.line + 1}); a configuration is a mapping "
                    f"of a few dozen column: value pairs"
                )
        open_.discard(key)
        sizes[key] = total
        return total

    size(root)


def _yaml_loader() -> type:
    """A PyYAML safe loader that refuses a key given twice (PyYAML keeps the last) and a
    document whose aliases expand it past :data:`MAX_YAML_VALUES`; merge keys (``<<: *base``)
    merge as YAML 1.1 says (a key of the mapping itself wins over a merged one). Numbers are
    read by YAML 1.2's core rules (:data:`CORE_NUMBERS`), and a scalar YAML 1.1 would read as
    another number (:data:`AMBIGUOUS_NUMBERS`: ``016``, ``1:00``, ``1_000``) is refused."""

    class UniqueKeyLoader(yaml.SafeLoader):
        yaml_implicit_resolvers = {  # noqa: RUF012  # YAML 1.1's numbers left out
            first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }

        def construct_ambiguous(self, node: Any) -> Any:
            why = next(why for pattern, why in AMBIGUOUS_NUMBERS if pattern.match(node.value))
            raise ConfigError(
                f"line {node.start_mark.line + 1}: {node.value!r} is a number only YAML 1.1 or "
                f"only YAML 1.2 reads so ({why}); write it in plain decimal digits, or quote it "
                f"for text"
            )

        def construct_document(self, node: Any) -> Any:
            _check_expansion(node)  # before anything is built
            return super().construct_document(node)

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue  # merged by flatten_mapping below, its keys may be overridden
                key = self.construct_object(key_node, deep=deep)
                try:
                    repeated = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    continue
                if repeated:
                    raise ConfigError(
                        f"each key must appear once, got {shown(key)} twice (line "
                        f"{key_node.start_mark.line + 1})"
                    )
            return super().construct_mapping(node, deep)

    for regexp, _ in AMBIGUOUS_NUMBERS:  # first: the resolvers match in the order added
        UniqueKeyLoader.add_implicit_resolver(_AMBIGUOUS_TAG, regexp, _DIGITS)
    for tag, regexp, first in CORE_NUMBERS:
        UniqueKeyLoader.add_implicit_resolver(tag, regexp, first)
    UniqueKeyLoader.add_constructor(_AMBIGUOUS_TAG, UniqueKeyLoader.construct_ambiguous)
    return UniqueKeyLoader


def read_config_file(path: str | Path, *, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A flat mapping of configuration keys from a YAML or JSON file (``.json``: JSON), flat
    or nested under ``model:``, ``cluster:``, ``layout:``; ``model`` may name a preset. A
    ``.toml`` file is a torchtitan job config, read as its ingest reads it, completed by
    ``given`` (the columns the command line sets:
    :func:`surrogate.ingest.torchtitan.job_config_columns`).

    ConfigError if the file is missing or unparsable, a key is unknown (with the nearest valid
    one), or a key is given twice (in the file, or in two sections).
    """
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"--config must name an existing file, got {str(p)!r}")
    check_input_file(p, what="--config", kind="config", error=ConfigError)
    if p.suffix.lower() == ".toml":
        columns = job_config_columns(p, given or {})
        check_finite(columns, where=str(p))
        check_counts(columns, where=str(p))
        return columns
    text = read_input_text(p, what="--config", kind="config", error=ConfigError)
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text, object_pairs_hook=refuse_duplicate_keys)
        else:
            data = yaml.load(text, Loader=_yaml_loader())  # a SafeLoader subclass
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
    except Exception as e:  # parsers raise many types; name the file
        raise ConfigError(f"{p}: cannot parse ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a configuration file holds a mapping of column: value")
    if p.suffix.lower() != ".json":  # anchors of merge keys only
        data = {
            k: v
            for k, v in data.items()
            if not (isinstance(k, str) and k.startswith(ANCHOR_HOLDER_PREFIX))
        }
    check_keys(data, FILE_KEYS, where=str(p))
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTION_KEYS and isinstance(value, Mapping):
            for k in value:
                home = [s for s, keys in SECTION_KEYS.items() if k in keys]
                if home and key not in home:
                    raise ConfigError(f"{p}: {k!r} belongs under {home[0]}:, not {key}:")
            check_keys(value, SECTION_KEYS[key], where=f"{p} ({key})")
            items = list(value.items())
        elif key in ("cluster", "layout"):
            raise ConfigError(f"{p}: {key} must be a mapping of {key} columns, got {shown(value)}")
        else:
            items = [(key, value)]
        for k, v in items:
            if k in flat:
                raise ConfigError(f"{p}: {k!r} is given twice (once under a section)")
            flat[k] = v
    check_finite(flat, where=str(p))
    check_counts(flat, where=str(p))
    return flat
