"""The sweep table: schema validation, canonical form, atomic de-duplicated appends."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from surrogate.config import ARCHITECTURE_FIELDS, CONFIG_COLUMNS, LayoutConfig, TrainingConfig
from surrogate.errors import DataError
from surrogate.presets import get_preset
from surrogate.sweeps import (
    STATUSES,
    SWEEP_COLUMNS,
    append_sweeps,
    empty_sweeps,
    frame_from_rows,
    read_sweeps,
    recompute_mfu,
    sweep_row,
    sweep_summary,
    validate_sweeps,
    write_sweeps,
)


def _row(run_id: str = "r1", status: str = "completed", **meas: Any) -> dict[str, Any]:
    cfg = TrainingConfig(model=get_preset("8b"), layout=LayoutConfig(dp=8))
    meas.setdefault("tokens_per_s_per_gpu", 1000.0)
    return sweep_row(cfg, status=status, source="test", run_id=run_id, **meas)


def _table(*rows: dict[str, Any]) -> pd.DataFrame:
    return frame_from_rows(rows or [_row()])


def test_columns_are_config_then_outcome_then_provenance() -> None:
    assert SWEEP_COLUMNS[: len(CONFIG_COLUMNS)] == CONFIG_COLUMNS
    assert {"status", "mfu", "mfu_reported", "peak_mem_reserved_gib", "source", "run_id",
            "date", "hardware"} <= set(SWEEP_COLUMNS)
    assert set(STATUSES) == {"completed", "oom", "fail", "timeout"}
    assert list(empty_sweeps().columns) == list(SWEEP_COLUMNS)


def test_row_missing_measurements_are_nan_and_mfu_is_recomputed() -> None:
    df = _table()
    assert math.isnan(df["peak_mem_allocated_gib"].iloc[0])
    cfg_mfu = recompute_mfu(df).iloc[0]
    assert df["mfu"].iloc[0] == pytest.approx(cfg_mfu)
    # 6N + 12 L h s for Llama 3 8B at 8,192 tokens over 989.4 TFLOP/s
    assert 0.05 < cfg_mfu < 0.07


def test_sweep_row_rejects_unknown_measurement() -> None:
    with pytest.raises(DataError, match=r"measurements must be among .* got tokens_per_s"):
        _row(tokens_per_s=3.0)


@pytest.mark.parametrize(
    ("column", "value", "match"),
    [
        ("status", "crashed", "status must be one of completed, oom, fail, timeout, got 'crashed'"),
        ("mfu", 38.0, r"mfu must be a fraction in \(0, 1\], got 38.0"),
        ("peak_mem_reserved_gib", 0.0, r"must be > 0 or missing \(NaN, never 0 or -1\)"),
        ("step_time_s", -1.0, r"must be > 0 or missing \(NaN, never 0 or -1\), got -1.0"),
        ("tokens_per_s_per_gpu", "fast", "must be a number or missing"),
        ("run_id", "", "run_id must be a non-empty string"),
        ("tp", 3, r"dp \* tp \* pp \* cp must equal the number of GPUs \(8"),
        ("date", 20240101, "date must be text or missing"),
    ],
)
def test_validation_says_what_must_hold(column: str, value: Any, match: str) -> None:
    df = _table().astype({column: object})
    df.loc[0, column] = value
    with pytest.raises(DataError, match=match):
        validate_sweeps(df)


def test_validation_rejects_missing_and_unknown_columns() -> None:
    df = _table().drop(columns=["status"]).assign(extra=1)
    with pytest.raises(DataError, match="missing status; unknown extra"):
        validate_sweeps(df)


def test_validation_rejects_duplicate_keys() -> None:
    df = pd.concat([_table(), _table()], ignore_index=True)
    with pytest.raises(DataError, match=r"\(source, run_id\) must be unique"):
        validate_sweeps(df)


def test_validation_canonicalises_config(tmp_path: Path) -> None:
    df = _table()
    df.loc[0, "gpu"] = "h100"
    out = validate_sweeps(df)
    assert out["gpu"].iloc[0] == "H100-SXM-80GB"


def test_write_read_round_trip_parquet_and_csv(tmp_path: Path) -> None:
    df = _table(_row("a"), _row("b", status="oom", tokens_per_s_per_gpu=None))
    for name in ("t.parquet", "t.csv"):
        write_sweeps(df, tmp_path / name)
        back = read_sweeps(tmp_path / name)
        pd.testing.assert_frame_equal(back, df, check_dtype=False)


def test_tables_from_before_the_model_variant_columns_read_as_llama_blocks(
        tmp_path: Path) -> None:
    df = _table()
    old = df.drop(columns=list(ARCHITECTURE_FIELDS))
    old.to_csv(tmp_path / "old.csv", index=False)
    pd.testing.assert_frame_equal(read_sweeps(tmp_path / "old.csv"), df, check_dtype=False)


def test_a_csv_naming_a_column_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    _table().to_csv(path, index=False)
    header, body = path.read_text().split("\n", 1)
    path.write_text(header + ",status\n" + body.replace("\n", ",oom\n", 1))
    with pytest.raises(DataError, match=r"t\.csv: each column must appear once in the header, "
                                        r"got 'status' again"):
        read_sweeps(path)


def test_write_is_refused_without_leaving_a_file(tmp_path: Path) -> None:
    df = _table()
    df.loc[0, "status"] = "maybe"
    with pytest.raises(DataError, match="status must be one of"):
        write_sweeps(df, tmp_path / "t.parquet")
    assert list(tmp_path.iterdir()) == []


def test_append_counts_added_replaced_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "sweeps.parquet"
    first = append_sweeps(_table(_row("a"), _row("b")), path)
    assert (first.added, first.replaced, first.unchanged, first.total) == (2, 0, 0, 2)
    again = append_sweeps(_table(_row("a"), _row("b", tokens_per_s_per_gpu=2000.0), _row("c")),
                          path)
    assert (again.added, again.replaced, again.unchanged, again.total) == (1, 1, 1, 3)
    assert again.replaced_keys == (("test", "b"),)
    assert "added 1, replaced 1, unchanged 1" in again.summary()
    table = read_sweeps(path)
    assert table.set_index("run_id").loc["b", "tokens_per_s_per_gpu"] == 2000.0


def test_append_refuses_repeated_keys_in_new_rows(tmp_path: Path) -> None:
    df = pd.concat([_table(), _table()], ignore_index=True)
    with pytest.raises(DataError, match=r"rows to append: .*must be unique"):
        append_sweeps(df, tmp_path / "s.parquet")
    assert not (tmp_path / "s.parquet").exists()


def test_read_missing_table() -> None:
    with pytest.raises(DataError, match="does not exist"):
        read_sweeps("/nonexistent/sweeps.parquet")


def test_summary_counts_by_status() -> None:
    df = _table(_row("a"), _row("b", status="oom"), _row("c", status="oom"))
    s = sweep_summary(df)
    assert s[["completed", "oom", "fail", "timeout", "runs"]].iloc[0].tolist() == [1, 2, 0, 0, 3]
