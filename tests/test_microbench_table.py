"""The microbenchmark table: validation messages, atomic de-duplicating appends."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from surrogate.errors import DataError
from surrogate.microbench_table import (
    append_microbench,
    empty_microbench,
    hardware_from_device_name,
    rows_to_microbench,
    validate_microbench,
)


def _coll(size: float, t: float, run: str = "a") -> dict[str, object]:
    return {"op": "all_reduce", "dtype": "f32", "size_bytes": size, "group_size": 8.0,
            "nodes": 1.0, "layout": "contiguous", "in_place": True, "time_s": t,
            "algbw_bytes_per_s": size / t, "busbw_bytes_per_s": size / t * 1.75,
            "hardware": "H100-SXM-80GB", "source": "test", "run_id": run}


def test_append_is_deduplicated_and_keeps_the_newest(tmp_path: Path) -> None:
    p = tmp_path / "mb.parquet"
    r1 = append_microbench(rows_to_microbench([_coll(1024, 1e-5), _coll(2048, 2e-5)]), p)
    assert r1.rows_after == 2
    r2 = append_microbench(rows_to_microbench([_coll(1024, 3e-5), _coll(1024, 3e-5, "b")]), p)
    assert (r2.rows_before, r2.rows_replaced, r2.rows_after) == (2, 1, 3)
    assert "3 rows now" in r2.summary()
    stored = validate_microbench(__import__("pandas").read_parquet(p))
    assert stored.loc[(stored["run_id"] == "a") & (stored["size_bytes"] == 1024),
                      "time_s"].item() == 3e-5
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left


@pytest.mark.parametrize(("change", "match"), [
    ({"op": "allreduce"}, "op must be one of"),
    ({"time_s": 0.0}, "time_s must be a positive"),
    ({"group_size": 1.0}, "group_size >= 2"),
    ({"layout": "diagonal"}, "layout must be one of"),
    ({"m": 5.0}, "a collective has no m, n, k"),
])
def test_validation_says_what_must_hold(change: dict[str, object], match: str) -> None:
    row = _coll(1024, 1e-5)
    row.update(change)
    with pytest.raises(DataError, match=match):
        validate_microbench(rows_to_microbench([row]))


def test_schema_columns_are_exact() -> None:
    df = empty_microbench().assign(extra=[])
    with pytest.raises(DataError, match="unexpected"):
        validate_microbench(df)
    gemm = rows_to_microbench([{"op": "gemm", "dtype": "bf16", "m": 1.0, "n": 1.0, "k": 1.0,
                                "batch": 1.0, "nodes": 1.0, "time_s": 1.0, "flops_per_s": 2.0,
                                "hardware": "x", "source": "s"}])
    assert np.isnan(validate_microbench(gemm)["size_bytes"].iloc[0])


def test_hardware_names() -> None:
    assert hardware_from_device_name("NVIDIA H100 80GB HBM3") == "H100-SXM-80GB"
    assert hardware_from_device_name("NVIDIA H100 PCIe") == "H100-PCIe-80GB"
    assert hardware_from_device_name(" Mystery GPU ") == "Mystery GPU"
