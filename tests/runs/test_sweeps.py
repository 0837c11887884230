"""The sweep table: schema validation, canonical form, atomic de-duplicated appends."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pandera.pandas as pa
import pytest
from pandera.config import config_context

from surrogate.config.layout import LayoutConfig
from surrogate.config.model import ARCHITECTURE_FIELDS
from surrogate.config.presets import get_preset
from surrogate.config.training import CONFIG_COLUMNS, TrainingConfig
from surrogate.errors import DataError
from surrogate.runs.sweep_files import append_sweeps, read_sweeps, write_sweeps
from surrogate.runs.sweeps import (
    CONTEXT_COLUMNS,
    STATUSES,
    SWEEP_COLUMNS,
    empty_sweeps,
    frame_from_rows,
    recompute_mfu,
    sweep_row,
    sweep_schema,
    sweep_summary,
    validate_sweeps,
    with_context,
)


def _row(run_id: str = "r1", status: str = "completed", **meas: Any) -> dict[str, Any]:
    cfg = TrainingConfig(model=get_preset("8b"), layout=LayoutConfig(framework="nanotron", dp=8))
    meas.setdefault("tokens_per_s_per_gpu", 1000.0)
    return sweep_row(cfg, status=status, source="test", run_id=run_id, **meas)


def _table(*rows: dict[str, Any]) -> pd.DataFrame:
    return frame_from_rows(rows or [_row()])


def test_columns_are_config_then_outcome_then_provenance() -> None:
    assert SWEEP_COLUMNS[: len(CONFIG_COLUMNS)] == CONFIG_COLUMNS
    assert {
        "status",
        "mfu",
        "mfu_reported",
        "peak_mem_reserved_gib",
        "source",
        "run_id",
        "date",
        "hardware",
    } <= set(SWEEP_COLUMNS)
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
        ("profile", "  ", "profile must be a profile's name or path, or missing"),
        ("peak_mem_stage", 0.5, "peak_mem_stage must be a pipeline stage, a whole number >= 0"),
        ("peak_mem_stage", -1, "peak_mem_stage must be a pipeline stage"),
        (
            "peak_mem_stage",
            1,
            r"peak_mem_stage must be a stage of the run's pipeline, below pp "
            r"= 1, got 1",
        ),
        ("net_scale", 0.0, "net_scale must be a finite number > 0 or missing, got 0.0"),
        ("net_scale", float("inf"), "net_scale must be a finite number > 0"),
        ("net_scale", "fast", "net_scale must be a finite number > 0"),
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


def _several_problems() -> pd.DataFrame:
    df = _table(_row("a"), _row("b"), _row("c"), _row("d")).astype(object)
    df.loc[0, ["status", "step_time_s"]] = ["crashed", "slow"]
    df.loc[1, ["mfu", "run_id"]] = [38.0, ""]
    df.loc[2, "tp"] = 3
    df.loc[3, ["date", "step_time_s", "run_id"]] = [20240101, -1.0, "a"]
    return df


def test_validation_lists_the_first_problems_configurations_first_then_rule_by_rule() -> None:
    with pytest.raises(DataError) as e:
        validate_sweeps(_several_problems(), where="t.csv")
    assert str(e.value) == (
        "t.csv: 8 problem(s): "
        "row 2: dp * tp * pp * cp must equal the number of GPUs (8 = 1 nodes x 8), "
        "got dp=8 tp=3 pp=1 cp=1 (24); "
        "row 0: step_time_s must be a number or missing (NaN), got 'slow'; "
        "row 3: step_time_s must be > 0 or missing (NaN, never 0 or -1), got -1.0; "
        "row 1: mfu must be a fraction in (0, 1], got 38.0 (a percentage belongs in mfu_reported); "
        "row 0: status must be one of completed, oom, fail, timeout, got 'crashed' (and 3 more)"
    )


def test_validation_lists_text_and_key_problems_after_the_values() -> None:
    df = _several_problems()
    df.loc[:2, "status"] = "completed"
    df.loc[:3, ["step_time_s", "mfu"]] = [float("nan"), 0.5]
    df.loc[2, "tp"] = 1
    with pytest.raises(DataError) as e:
        validate_sweeps(df)
    assert str(e.value) == (
        "sweep table: 3 problem(s): row 1: run_id must be a non-empty string, got ''; "
        "row 3: date must be text or missing, got 20240101; "
        "row 3: (source, run_id) must be unique, got a second ('test', 'a')"
    )


def test_value_checks_are_a_pandera_schema_that_pandera_settings_cannot_switch_off() -> None:
    assert isinstance(sweep_schema(), pa.DataFrameSchema)
    assert sweep_schema() is sweep_schema()  # built once
    df = _table().astype({"status": object})
    df.loc[0, "status"] = "crashed"
    with config_context(validation_enabled=False), pytest.raises(DataError, match="crashed"):
        validate_sweeps(df)


def test_a_clean_table_of_thousands_of_rows_validates_unchanged() -> None:
    df = _table(
        *(
            _row(
                f"r{i}",
                status=("completed", "oom")[i % 2],
                step_time_s=1.0 + i % 7,
                date="2025-01-01",
            )
            for i in range(3000)
        )
    )
    assert len(df) == 3000
    pd.testing.assert_frame_equal(validate_sweeps(df), df)


def test_importing_the_module_leaves_pandera_unimported() -> None:
    code = "import sys, surrogate.runs.sweeps; print('pandera' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


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


def test_tables_from_before_the_model_variant_columns_read_as_llama_blocks(tmp_path: Path) -> None:
    df = _table()
    old = df.drop(columns=list(ARCHITECTURE_FIELDS))
    old.to_csv(tmp_path / "old.csv", index=False)
    pd.testing.assert_frame_equal(read_sweeps(tmp_path / "old.csv"), df, check_dtype=False)


def test_tables_from_before_the_pipeline_schedule_column_read_as_1f1b(tmp_path: Path) -> None:
    df = _table()
    assert (df["pp_schedule"] == "1f1b").all()
    df.drop(columns=["pp_schedule"]).to_csv(tmp_path / "old.csv", index=False)
    pd.testing.assert_frame_equal(read_sweeps(tmp_path / "old.csv"), df, check_dtype=False)


def test_how_a_run_is_explained_is_optional_and_read_back(tmp_path: Path) -> None:
    df = _table()
    assert df[list(CONTEXT_COLUMNS)].isna().all(axis=None)  # the test source knows none
    df.drop(columns=list(CONTEXT_COLUMNS)).to_csv(tmp_path / "plain.csv", index=False)
    pd.testing.assert_frame_equal(read_sweeps(tmp_path / "plain.csv"), df, check_dtype=False)
    cfg = TrainingConfig(model=get_preset("8b"), layout=LayoutConfig(dp=2, pp=4))
    row = sweep_row(cfg, status="completed", source="mine", run_id="r")
    mine = frame_from_rows(
        [with_context(row, profile="my-cluster.json", peak_mem_stage=3, net_scale=0.8)]
    )
    write_sweeps(mine, tmp_path / "mine.parquet")
    back = read_sweeps(tmp_path / "mine.parquet")
    assert back[list(CONTEXT_COLUMNS)].iloc[0].tolist() == ["my-cluster.json", 3.0, 0.8]


def test_a_csv_naming_a_column_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    _table().to_csv(path, index=False)
    header, body = path.read_text().split("\n", 1)
    path.write_text(header + ",status\n" + body.replace("\n", ",oom\n", 1))
    with pytest.raises(
        DataError,
        match=r"t\.csv: each column must appear once in the header, "
        r"got 'status' again",
    ):
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
    again = append_sweeps(
        _table(_row("a"), _row("b", tokens_per_s_per_gpu=2000.0), _row("c")), path
    )
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
