"""One name per quantity, and the older names a table may still carry.

A measured quantity has one column name (:data:`surrogate.runs.sweeps.MEASUREMENT_COLUMNS`:
``peak_mem_reserved_gib``, ``tokens_per_s_per_gpu``, ``step_time_s``, ``mfu``) and its prediction
is ``pred_<the same name>`` (an interval's ends insert ``lo``/``hi`` before the unit:
``pred_peak_mem_reserved_lo_gib``); a :class:`~surrogate.prediction.predict.Prediction`'s
attribute and ``--json`` key is the measured name itself. The device's peak, the reserved peak
plus the CUDA context (what must fit in the GPU's memory), is another quantity and keeps its own
name, ``peak_device_mem_gib`` (``pred_peak_device_mem_gib``).

Outputs use these names only. The measured columns of a sweep table keep their names; the
older names are those of predictions. A table written under them (a ``predict --from-csv``
output given back to it, or to :func:`surrogate.prediction.predict.predict_frame`) still
reads: its columns are renamed by :data:`RENAMED_COLUMNS` on input (:func:`current_names`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from surrogate.errors import DataError

if TYPE_CHECKING:
    import pandas as pd

RENAMED_COLUMNS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "pred_peak_mem_gib": "pred_peak_mem_reserved_gib",
        "pred_peak_mem_lo_gib": "pred_peak_mem_reserved_lo_gib",
        "pred_peak_mem_hi_gib": "pred_peak_mem_reserved_hi_gib",
        "pred_device_mem_gib": "pred_peak_device_mem_gib",
        "peak_reserved_gib": "peak_mem_reserved_gib",
        "peak_reserved_lo_gib": "peak_mem_reserved_lo_gib",
        "peak_reserved_hi_gib": "peak_mem_reserved_hi_gib",
        "peak_mem_gib": "peak_device_mem_gib",
    }
)
"""Older column name -> its current name (the quantity is the same; only the name changed)."""


def current_name(name: str) -> str:
    """``name`` as the package now names its quantity (itself unless it is an older name)."""
    return RENAMED_COLUMNS.get(name, name)


def current_names(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with each column of an older name renamed to its current one (``df`` itself when
    none is). A table holding both names of one quantity is ambiguous: a DataError saying
    which to drop."""
    old = [str(c) for c in df.columns if str(c) in RENAMED_COLUMNS]
    if not old:
        return df
    _check_no_both(old, {str(c) for c in df.columns})
    return df.rename(columns={c: current_name(c) for c in old})


def known_names(names: Iterable[str]) -> set[str]:
    """``names`` and every older name of them."""
    wanted = set(names)
    return wanted | {old for old, new in RENAMED_COLUMNS.items() if new in wanted}


def _check_no_both(old: Iterable[str], columns: set[str]) -> None:
    both = [c for c in old if RENAMED_COLUMNS[c] in columns]
    if both:
        pairs = ", ".join(f"{c!r} and {RENAMED_COLUMNS[c]!r}" for c in both)
        raise DataError(
            f"a table has each quantity under one name; this one has both {pairs} "
            f"(the first is the older name of the second): drop one"
        )
