"""Values made ready for JSON: the one place where NaN and infinity become null.

JSON has no NaN or infinity (Python's ``json`` writes the non-standard ``NaN``, which strict
readers such as browsers' ``JSON.parse`` refuse), and numpy scalars are not JSON types. A
missing or undefined figure is therefore written as ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def json_safe(value: Any) -> Any:
    """``value`` with numpy scalars and arrays as Python values and non-finite floats as None,
    through dicts, lists and tuples (tuples become lists); other values are returned as they
    are. Usable as ``json.dumps(..., default=json_safe)`` too."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
