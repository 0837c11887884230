"""The microbenchmark table: validation messages, atomic de-duplicating appends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandera.pandas as pa
import pytest

from surrogate.errors import DataError
from surrogate.runs.microbench_table import (
    append_microbench,
    empty_microbench,
    hardware_from_device_name,
    microbench_schema,
    rows_to_microbench,
    validate_microbench,
)


def _coll(size: float, t: float, run: str = "a") -> dict[str, object]:
    return {
        "op": "all_reduce",
        "dtype": "f32",
        "size_bytes": size,
        "group_size": 8.0,
        "nodes": 1.0,
        "layout": "contiguous",
        "in_place": True,
        "time_s": t,
        "algbw_bytes_per_s": size / t,
        "busbw_bytes_per_s": size / t * 1.75,
        "hardware": "H100-SXM-80GB",
        "source": "test",
        "run_id": run,
    }


def test_append_is_deduplicated_and_keeps_the_newest(tmp_path: Path) -> None:
    p = tmp_path / "mb.parquet"
    r1 = append_microbench(rows_to_microbench([_coll(1024, 1e-5), _coll(2048, 2e-5)]), p)
    assert r1.rows_after == 2
    r2 = append_microbench(rows_to_microbench([_coll(1024, 3e-5), _coll(1024, 3e-5, "b")]), p)
    assert (r2.rows_before, r2.rows_replaced, r2.rows_after) == (2, 1, 3)
    assert "3 rows now" in r2.summary()
    stored = validate_microbench(__import__("pandas").read_parquet(p))
    assert (
        stored.loc[(stored["run_id"] == "a") & (stored["size_bytes"] == 1024), "time_s"].item()
        == 3e-5
    )
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"op": "allreduce"}, "op must be one of"),
        ({"time_s": 0.0}, "time_s must be a positive"),
        ({"group_size": 1.0}, "group_size >= 2"),
        ({"layout": "diagonal"}, "layout must be one of"),
        ({"m": 5.0}, "a collective has no m, n, k"),
        ({"op": "rmsnorm_fwd_bwd"}, "a memory-bound kernel needs m, n >= 1"),
        ({"op": "sdpa_causal_fwd"}, "a GEMM or attention row needs m, n, k, batch >= 1"),
    ],
)
def test_validation_says_what_must_hold(change: dict[str, object], match: str) -> None:
    row = _coll(1024, 1e-5)
    row.update(change)
    with pytest.raises(DataError, match=match):
        validate_microbench(rows_to_microbench([row]))


def test_the_first_broken_rule_is_reported_with_its_first_row() -> None:
    rows = [_coll(1024, 1e-5, run) for run in "abcd"]
    rows[1].update(layout="diagonal")  # the last rule, in an earlier row
    rows[2].update(group_size=1.0)
    rows[3].update(group_size=1.0, op="allreduce")  # the first rule, in the last row
    with pytest.raises(DataError) as e:
        validate_microbench(rows_to_microbench(rows))
    assert str(e.value) == (
        "microbenchmark row 3: op must be one of gemm, all_reduce, all_gather, reduce_scatter, "
        "all_to_all, broadcast, send_recv, sdpa_fwd, sdpa_fwd_bwd, sdpa_causal_fwd, "
        "sdpa_causal_fwd_bwd, rmsnorm_fwd_bwd, swiglu_fwd_bwd, rope_fwd_bwd, "
        "cross_entropy_fwd_bwd, adamw_step; got op='allreduce' dtype='f32' m=nan n=nan k=nan "
        "size_bytes=1024.0 group_size=1.0 time_s=1e-05 (source='test' file='')"
    )
    rows[3].update(op="all_reduce")
    with pytest.raises(DataError, match=r"^microbenchmark row 2: a collective needs group_size"):
        validate_microbench(rows_to_microbench(rows))


def test_rules_are_a_pandera_schema_and_a_large_clean_table_passes() -> None:
    assert isinstance(microbench_schema(), pa.DataFrameSchema)
    assert microbench_schema() is microbench_schema()  # built once
    table = rows_to_microbench([_coll(1024.0 * (i + 1), 1e-5) for i in range(3000)])
    assert validate_microbench(table).equals(table)


def test_importing_the_module_leaves_pandera_unimported() -> None:
    code = "import sys, surrogate.runs.microbench_table; print('pandera' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_schema_columns_are_exact() -> None:
    df = empty_microbench().assign(extra=[])
    with pytest.raises(DataError, match="unexpected"):
        validate_microbench(df)
    gemm = rows_to_microbench(
        [
            {
                "op": "gemm",
                "dtype": "bf16",
                "m": 1.0,
                "n": 1.0,
                "k": 1.0,
                "batch": 1.0,
                "nodes": 1.0,
                "time_s": 1.0,
                "flops_per_s": 2.0,
                "hardware": "x",
                "source": "s",
            }
        ]
    )
    assert np.isnan(validate_microbench(gemm)["size_bytes"].iloc[0])


def test_hardware_names() -> None:
    assert hardware_from_device_name("NVIDIA H100 80GB HBM3") == "H100-SXM-80GB"
    assert hardware_from_device_name("NVIDIA H100 PCIe") == "H100-PCIe-80GB"
    assert hardware_from_device_name(" Mystery GPU ") == "Mystery GPU"
