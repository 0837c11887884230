"""The ``model`` column of a table (:func:`surrogate.config.files.expand_model_column`): each
row's preset filled where the row leaves a model column empty, the same as row by row, in
time linear in the rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from surrogate.config.files import expand_model_column
from surrogate.config.presets import model_values
from surrogate.errors import ConfigError


def row_by_row(table: pd.DataFrame) -> pd.DataFrame:
    """The reference: each row's preset over its empty model cells, one row at a time."""
    if "model" not in table.columns:
        return table
    out = table.copy()
    rows = table.to_dict("records")
    keys: dict[str, None] = {}
    for row in rows:
        cell = row["model"]
        if cell is None or (isinstance(cell, float) and cell != cell) or not str(cell).strip():
            continue
        keys.update(dict.fromkeys(model_values(str(cell), None)))
    for key in keys:
        column = out[key].astype(object).tolist() if key in out.columns else [None] * len(out)
        for i, row in enumerate(rows):
            cell = row["model"]
            if cell is None or (isinstance(cell, float) and cell != cell) or not str(cell).strip():
                continue
            have = column[i]
            if have is None or (isinstance(have, float) and have != have) or have == "":
                column[i] = model_values(str(cell), None)[key]
        out[key] = pd.Series(column, index=out.index, dtype=object)
    return out


def synthetic(rows: int, seed: int) -> pd.DataFrame:
    """A generated table: presets, blanks and own shape cells, mixed at random."""
    rng = np.random.default_rng(seed)
    models = np.array(
        ["8b", "70b", "1.34b", "mixtral-8x7b", "", None, float("nan"), " "], dtype=object
    )
    layers = rng.choice(np.array([16, np.nan, 8], dtype=float), rows)
    table = pd.DataFrame(
        {
            "model": models[rng.integers(0, len(models), rows)],
            "num_layers": layers,
            "hidden_size": rng.choice(np.array(["", "2048", None], dtype=object), rows),
            "dp": rng.integers(1, 9, rows),
            "_note": [f"n{i}" for i in range(rows)],
        }
    )
    return table


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rows", [1, 7, 300])
def test_the_same_as_row_by_row(seed: int, rows: int) -> None:
    table = synthetic(rows, seed)
    pd.testing.assert_frame_equal(expand_model_column(table, where="t.csv"), row_by_row(table))


def test_a_row_of_its_own_keeps_its_cells_and_others_take_the_preset() -> None:
    table = pd.DataFrame(
        {"model": ["8b", "8b", None], "num_layers": [16, None, 4], "seq_len": [None, None, 128]}
    )
    out = expand_model_column(table, where="t.csv")
    assert out["num_layers"].tolist() == [16, 32, 4]
    assert out["seq_len"].tolist()[:2] == [8192, 8192] and out["seq_len"][2] == 128
    assert out["hidden_size"].tolist() == [4096, 4096, None]
    assert expand_model_column(table.drop(columns="model"), where="t") is not None


def test_the_first_unknown_preset_is_named_by_its_row_of_the_file() -> None:
    table = pd.DataFrame({"model": ["8b", "", "nope", "8b", "also-nope"]})
    with pytest.raises(ConfigError, match=r"t\.csv, row 3: "):
        expand_model_column(table, where="t.csv")
    with pytest.raises(ConfigError, match=r"t\.csv, row 1002: "):
        expand_model_column(table, where="t.csv", first_row=1000)


def test_linear_in_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """60,000 rows (the table that took 56 s row by row) read each distinct preset once."""
    calls: list[Any] = []
    import surrogate.config.files as files

    real = files.model_values

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(files, "model_values", counted)
    out = expand_model_column(synthetic(60_000, 0), where="t.csv")
    assert len(calls) == 4  # 8b, 70b, 1.34b, mixtral-8x7b
    assert len(out) == 60_000
