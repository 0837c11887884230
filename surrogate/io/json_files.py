"""Reading a JSON file the project wrote (a round's record, a model's sidecar): a missing file
raises what its caller says it means, an unreadable or corrupt one a DataError naming the
file; and a key given twice in a JSON object a user wrote refused, not silently overwritten."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from surrogate.errors import ConfigError, DataError, SurrogateError, shown
from surrogate.io.input_files import read_input_text


def read_json(path: Path, *, missing: SurrogateError) -> Any:
    """The JSON value in ``path``.

    Raises:
        SurrogateError: ``missing``, where ``path`` does not exist (what the file's absence
            means to the caller: no round, no model).
        DataError: where ``path`` cannot be read, is not UTF-8 text or is not valid JSON.
    """
    if not path.exists():
        raise missing
    text = read_input_text(path, what="JSON file", kind="config")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e.msg})") from None


def refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads`: a key given twice is a ConfigError (the
    parser would keep the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"each key must appear once, got {shown(key)} twice")
        out[key] = value
    return out
