"""One name per quantity: older column names read as the current ones, outputs carry only
the current ones."""

from __future__ import annotations

import pandas as pd
import pytest

from surrogate.errors import DataError
from surrogate.runs.names import RENAMED_COLUMNS, current_name, current_names, known_names
from surrogate.runs.sweeps import MEASUREMENT_COLUMNS, SWEEP_COLUMNS


def test_older_names_read_as_the_current_ones() -> None:
    old = pd.DataFrame({name: [float(i)] for i, name in enumerate(RENAMED_COLUMNS)} | {"tp": [2]})
    got = current_names(old)
    assert list(got.columns) == [*RENAMED_COLUMNS.values(), "tp"]
    assert got.iloc[0].tolist() == old.iloc[0].tolist()  # the values are untouched
    assert current_name("pred_peak_mem_gib") == "pred_peak_mem_reserved_gib"
    assert current_name("tp") == "tp"


def test_a_table_of_current_names_is_returned_as_it_is() -> None:
    df = pd.DataFrame({"peak_mem_reserved_gib": [1.0], "pred_peak_mem_reserved_gib": [2.0]})
    assert current_names(df) is df


def test_a_table_with_both_names_of_one_quantity_is_refused() -> None:
    df = pd.DataFrame({"pred_peak_mem_gib": [1.0], "pred_peak_mem_reserved_gib": [1.0]})
    with pytest.raises(DataError, match="'pred_peak_mem_gib' and 'pred_peak_mem_reserved_gib'"):
        current_names(df)


def test_known_names_add_the_older_ones() -> None:
    assert known_names(["pred_peak_device_mem_gib", "tp"]) == {
        "pred_peak_device_mem_gib",
        "pred_device_mem_gib",
        "tp",
    }


def test_the_scheme_measured_name_and_pred_of_it() -> None:
    """A current name is a measured column, ``pred_`` of one (an interval end inserting
    lo/hi before the unit), or the device's peak, a quantity of its own."""
    assert "peak_mem_reserved_gib" in MEASUREMENT_COLUMNS
    assert not set(RENAMED_COLUMNS) & set(SWEEP_COLUMNS)  # no table column is an older name
    for new in RENAMED_COLUMNS.values():
        base = new.removeprefix("pred_").replace("_lo_gib", "_gib").replace("_hi_gib", "_gib")
        assert base in (*MEASUREMENT_COLUMNS, "peak_device_mem_gib"), new
