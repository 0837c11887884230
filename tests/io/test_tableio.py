"""Tables: atomic writes that keep permissions, known suffixes only, chunked reads and
writes (appends safe across processes: tests/io/test_locks.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from surrogate.errors import DataError
from surrogate.ingest.dispatch import ingest
from surrogate.io import tableio
from surrogate.io.tableio import (
    NotStreamable,
    TableWriter,
    iter_table,
    read_table,
    table_format,
    write_table_atomic,
)

PLAYBOOK = Path(__file__).resolve().parents[1] / "fixtures" / "sweeps_playbook_excerpt.csv"


def test_rewritten_table_keeps_its_permissions(tmp_path: Path) -> None:
    p = tmp_path / "t.parquet"
    write_table_atomic(pd.DataFrame({"a": [1]}), p)
    os.chmod(p, 0o640)
    write_table_atomic(pd.DataFrame({"a": [1, 2]}), p)
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert len(pd.read_parquet(p)) == 2


def test_new_table_gets_the_umask_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_table_atomic(pd.DataFrame({"a": [1]}), tmp_path / "t.csv")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "t.csv").stat().st_mode) == 0o644
    assert [f.name for f in tmp_path.iterdir()] == ["t.csv"]  # no temporary file left


def test_unknown_table_suffix_is_refused(tmp_path: Path) -> None:
    assert table_format("a.PARQUET") == "parquet" and table_format("a.csv") == "csv"
    with pytest.raises(
        DataError,
        match=r"a table file must end in \.parquet, \.pq, \.csv, "
        r"got '.*t\.xlsx' \(\.xlsx\)",
    ):
        write_table_atomic(pd.DataFrame({"a": [1]}), tmp_path / "t.xlsx")
    with pytest.raises(DataError, match=r"must end in .*\(no suffix\)"):
        ingest([PLAYBOOK], tmp_path / "table")
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------ pyarrow's readers
def _mixed_frame() -> pd.DataFrame:
    """Synthetic: every kind of column a configuration table holds, missing cells included,
    and text that must be quoted."""
    return pd.DataFrame(
        {
            "dp": [8, 16, 4, 2, 1],
            "share": [0.5, float("nan"), 1 / 3, 2.5e-7, 1e300],
            "sequence_parallel": [True, False, True, False, True],
            "gpu": ["H100-SXM-80GB", "a,b", 'say "x"', "line\rbreak", None],
            "note": ["", "x", "y", "z", "w"],
        }
    )


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_table_reads_back_as_written(tmp_path: Path, suffix: str) -> None:
    df = _mixed_frame()
    write_table_atomic(df, tmp_path / f"t{suffix}")
    back = read_table(tmp_path / f"t{suffix}")
    assert list(back.columns) == list(df.columns)
    assert back["dp"].dtype == np.int64 and back["sequence_parallel"].dtype == bool
    np.testing.assert_array_equal(back["share"].to_numpy(), df["share"].to_numpy())
    assert back["gpu"].iloc[:4].tolist() == df["gpu"].iloc[:4].tolist()
    assert pd.isna(back["gpu"].iloc[4])


def test_a_csv_without_special_text_is_written_without_quotes(tmp_path: Path) -> None:
    write_table_atomic(
        pd.DataFrame(
            {
                "gpu": ["H100", "A100"],
                "dp": [8, 4],
                "sp": [True, False],
                "w": [1.0, float("nan")],
                "x": [0.5, 2.0],
            }
        ),
        tmp_path / "t.csv",
    )
    assert (tmp_path / "t.csv").read_text() == (
        "gpu,dp,sp,w,x\nH100,8,true,1.0,0.5\nA100,4,false,,2\n"
    )
    back = read_table(tmp_path / "t.csv")
    assert [back[c].dtype.kind for c in ["dp", "sp", "w", "x"]] == ["i", "b", "f", "f"]


def test_whole_number_floats_are_written_as_floats(tmp_path: Path) -> None:
    write_table_atomic(
        pd.DataFrame({"w": [3.0, -0.0, 12.0], "x": [1.0, 2.0, 0.25]}), tmp_path / "t.csv"
    )
    assert (tmp_path / "t.csv").read_text() == "w,x\n3.0,1\n-0.0,2\n12.0,0.25\n"
    back = read_table(tmp_path / "t.csv")
    assert [back[c].dtype.kind for c in ["w", "x"]] == ["f", "f"]


def test_csv_columns_are_typed_as_pandas_reads_them(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("a,b,c,d,e,f\n 8,8.5,true,x,,1\n2,nan,False,y,,\n")
    ours, theirs = read_table(p), pd.read_csv(p)
    for name in "abcde":
        assert ours[name].dtype.kind == theirs[name].dtype.kind, name
    assert ours["a"].tolist() == [8, 2] and ours["f"].isna().tolist() == [False, True]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_chunks_of_a_table_are_the_whole_table(
    tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tableio, "CSV_BLOCK_BYTES", 1 << 16)
    rng = np.random.default_rng(1)
    df = pd.DataFrame(
        {
            "dp": rng.integers(1, 64, 20_000),
            "x": rng.random(20_000),
            "gpu": rng.choice(["H100", "A100"], 20_000),
        }
    )
    write_table_atomic(df, tmp_path / f"t{suffix}")
    chunks = list(iter_table(tmp_path / f"t{suffix}", chunk_rows=3_000))
    assert len(chunks) > 1
    joined = pd.concat(chunks, ignore_index=True)
    pd.testing.assert_frame_equal(joined, read_table(tmp_path / f"t{suffix}"))
    np.testing.assert_array_equal(joined["x"].to_numpy(), df["x"].to_numpy())


def test_a_ragged_csv_is_not_streamed_but_read_whole(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("a,b\n1,2,\n3,4,,\n")  # a spreadsheet's trailing commas
    with pytest.raises(NotStreamable):
        list(iter_table(p))
    assert read_table(p).to_dict("list") == {"a": [1, 3], "b": [2, 4]}


def test_a_table_writer_leaves_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "t.parquet"
    with pytest.raises(RuntimeError), TableWriter(target) as writer:
        writer.write(pd.DataFrame({"a": [1]}))
        raise RuntimeError("stopped")
    assert not list(tmp_path.iterdir())
    with TableWriter(target) as writer:
        writer.write(pd.DataFrame({"a": [1], "b": [None]}))
        writer.write(pd.DataFrame({"a": [2], "b": ["x"]}))  # b: text from its first value
    back = read_table(target)
    assert back["a"].tolist() == [1, 2] and pd.isna(back["b"].iloc[0])
    assert back["b"].iloc[1] == "x"
