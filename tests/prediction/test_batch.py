"""A table file predicted a chunk at a time: the whole table's answer, in order, in the
format of the output's suffix, and nothing written on failure."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.presets import get_preset
from surrogate.config.training import CONFIG_COLUMNS, TrainingConfig, config_to_flat
from surrogate.errors import ConfigError
from surrogate.io.tableio import read_table, write_table_atomic
from surrogate.prediction.batch import check_batch_columns, predict_file
from surrogate.prediction.predict import PRED_COLUMNS, RUNS_AS_ANOTHER, predict_frame
from surrogate.runs.names import RENAMED_COLUMNS
from surrogate.runs.sweeps import SWEEP_COLUMNS


def _synthetic_rows() -> pd.DataFrame:
    """Generated: valid layouts of two models on 1 to 4 nodes, and rows each configuration
    rule refuses (dp not dividing the GPUs, a fractional degree)."""
    rows = []
    for model in ("8b", "1.34b"):
        for nodes in (1, 2, 4):
            for tp in (1, 2, 4):
                for mbs in (1, 2):
                    cfg = TrainingConfig(
                        model=get_preset(model),
                        cluster=ClusterConfig(num_nodes=nodes),
                        layout=LayoutConfig(
                            framework="nanotron", dp=8 * nodes // tp, tp=tp, mbs=mbs, zero_stage=1
                        ),
                    )
                    rows.append(config_to_flat(cfg))
    good = rows[0]
    rows += [dict(good, tp=3), dict(good, dp=8.5)]
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0).reset_index(drop=True)


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns)
    for name in want.columns:
        a, b = got[name], want[name]
        if b.dtype.kind == "f":
            np.testing.assert_array_equal(a.to_numpy(dtype=float), b.to_numpy(), err_msg=name)
        else:
            assert _text(a) == _text(b), name


def _text(column: pd.Series) -> list[str]:
    """The cells as a CSV holds them (missing: empty; an all-empty text column reads back as
    float NaN)."""
    return ["" if pd.isna(v) else str(v) for v in column]


@pytest.mark.parametrize(
    "source,target",
    [(".csv", ".csv"), (".parquet", ".parquet"), (".csv", ".parquet"), (".parquet", ".csv")],
)
def test_chunks_give_the_whole_tables_answer(tmp_path: Path, source: str, target: str) -> None:
    table = _synthetic_rows()
    src, dst = tmp_path / f"in{source}", tmp_path / f"out{target}"
    write_table_atomic(table, src)
    done = predict_file(src, dst, model=None, chunk_rows=5)
    assert done.chunks > 1 if source == ".parquet" else done.chunks >= 1
    assert (done.rows, done.errors) == (len(table), 2)
    out = read_table(dst)
    assert list(out.columns) == [*CONFIG_COLUMNS, *PRED_COLUMNS, RUNS_AS_ANOTHER, "error"]
    numbers = [c for c in PRED_COLUMNS if c not in ("pred_status", "extrapolation")]
    assert all(out[c].dtype.kind == "f" for c in numbers)  # whole-number floats stay floats
    assert out["dp"].dtype.kind == "f" and out["tp"].dtype.kind == "i"  # dp=8.5: floats
    _same(out, predict_frame(read_table(src), model=None))
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_csv_chunks_give_the_whole_tables_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from surrogate.io import tableio

    monkeypatch.setattr(tableio, "CSV_BLOCK_BYTES", 512)  # a few rows per block
    table = _synthetic_rows()
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    write_table_atomic(table, src)
    done = predict_file(src, dst, model="default", chunk_rows=4)
    assert done.chunks > 2
    _same(read_table(dst), predict_frame(read_table(src), model="default"))


def test_stdout_gets_the_table_as_csv(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    write_table_atomic(_synthetic_rows(), src)
    buf = io.StringIO()
    predict_file(src, None, model=None, stdout=buf, chunk_rows=7)
    out = pd.read_csv(io.StringIO(buf.getvalue()))
    _same(
        out[["pred_mfu"]],
        read_table(tmp_path / "in.parquet").pipe(predict_frame, model=None)[["pred_mfu"]],
    )


def test_a_refused_chunk_leaves_no_output(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.parquet", tmp_path / "out.csv"
    write_table_atomic(_synthetic_rows(), src)

    def check(chunk: pd.DataFrame, first_row: int) -> None:
        if first_row > 1:
            raise ConfigError(f"refused at row {first_row}")

    with pytest.raises(ConfigError, match="refused at row 6"):
        predict_file(src, dst, model=None, chunk_rows=5, check=check)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_a_ragged_csv_is_predicted_whole(tmp_path: Path) -> None:
    table = _synthetic_rows().head(3)
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text(table.to_csv(index=False).replace("\n", ",\n").replace(",\n", "\n", 1))
    done = predict_file(src, dst, model=None, chunk_rows=1)
    assert (done.rows, done.chunks) == (3, 1)
    _same(read_table(dst), predict_frame(table, model=None))


def test_a_sweep_tables_columns_are_read_and_carried() -> None:
    """A sweep table (here with how its runs are explained) predicts as it is."""
    check_batch_columns(SWEEP_COLUMNS, where="runs.parquet")
    with pytest.raises(ConfigError, match="not a column predict reads"):
        check_batch_columns([*SWEEP_COLUMNS, "cluster_name"], where="runs.parquet")


def test_a_table_of_predictions_under_older_names_predicts_again(tmp_path: Path) -> None:
    """A ``predict --from-csv`` output written under the older column names (e.g.
    ``pred_peak_mem_gib``) is read, its columns renamed, and predicted again: the output
    carries the current names only, with the same answer as the table under them."""
    first = predict_frame(_synthetic_rows(), model=None)
    older = {new: old for old, new in RENAMED_COLUMNS.items() if new in first.columns}
    assert "pred_peak_mem_reserved_gib" in older
    renamed = first.rename(columns=older)
    check_batch_columns(renamed.columns, where="old.csv")
    src, dst = tmp_path / "old.csv", tmp_path / "again.csv"
    renamed.to_csv(src, index=False)
    predict_file(src, dst, model=None)
    again = read_table(dst)
    assert not set(older.values()) & set(again.columns)
    _same(again, read_table(_written(tmp_path / "want.csv", predict_frame(first, model=None))))


def _written(path: Path, df: pd.DataFrame) -> Path:
    df.to_csv(path, index=False)
    return path
