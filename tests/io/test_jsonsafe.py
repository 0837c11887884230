"""JSON-ready values: NaN and infinity become null, numpy values plain Python, through nesting."""

from __future__ import annotations

import json
import math

import numpy as np

from surrogate.io.jsonsafe import json_safe


def test_non_finite_become_null_through_nesting() -> None:
    value = {
        "a": math.nan,
        "b": [1.5, np.float64("inf"), (np.int64(3), -math.inf)],
        "c": {"d": np.array([1.0, np.nan])},
        "e": "text",
        "f": None,
        "g": True,
    }
    out = json_safe(value)
    assert out == {
        "a": None,
        "b": [1.5, None, [3, None]],
        "c": {"d": [1.0, None]},
        "e": "text",
        "f": None,
        "g": True,
    }
    assert type(out["b"][2][0]) is int
    json.dumps(out, allow_nan=False)  # strict JSON


def test_as_a_json_default() -> None:
    assert json.loads(json.dumps({"x": np.float32(0.5)}, default=json_safe)) == {"x": 0.5}
