"""Writing measurements as JSON lines, one per measurement, flushed as soon as it exists.

The schema is the library's (``surrogate.ingest.microbench_jsonl``), so what we write is
exactly what ``surrogate ingest`` reads.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, TextIO

from microbench.fingerprint import Fingerprint
from surrogate.ingest.microbench_jsonl import RECORD_SCHEMA
from surrogate.runs.microbench_table import MEASUREMENT_FIELDS


def make_record(
    fingerprint: Fingerprint, *, status: str = "ok", message: str = "", **measurement: Any
) -> dict[str, Any]:
    """A record of the schema; measurement fields not given are null."""
    unknown = set(measurement) - set(MEASUREMENT_FIELDS)
    if unknown:
        raise ValueError(
            f"measurement fields must be among {', '.join(MEASUREMENT_FIELDS)}, "
            f"got {', '.join(sorted(unknown))}"
        )
    rec: dict[str, Any] = {"schema": RECORD_SCHEMA, "status": status, "message": message}
    for name in MEASUREMENT_FIELDS:
        v = measurement.get(name)
        rec[name] = None if isinstance(v, float) and not math.isfinite(v) else v
    rec["fingerprint"] = fingerprint.to_dict()
    return rec


class JsonlWriter:
    """Appends one JSON object per line and fsyncs it, so a crash or a kill keeps every line
    written before it. ``path`` None or ``-`` writes to stdout."""

    def __init__(self, path: str | Path | None) -> None:
        self._own = path not in (None, "-")
        if self._own:
            p = Path(str(path))
            p.parent.mkdir(parents=True, exist_ok=True)
            self._f: TextIO = p.open("a", encoding="utf-8")
        else:
            import sys

            self._f = sys.stdout

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record, sort_keys=False) + "\n")
        self._f.flush()
        if self._own:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._own:
            self._f.close()
