"""surrogate.config.table: a table of configurations validated column-wise answers every row
exactly as config_from_flat does, one row at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from surrogate.analytic.inputs import cols_from_table, to_cols
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.hf_config import model_from_hf_config
from surrogate.config.presets import get_preset
from surrogate.config.table import concat, flat_table, group_codes, valid_table, validate_table
from surrogate.config.training import CONFIG_COLUMNS, config_from_flat, config_to_flat
from surrogate.errors import DataError, SurrogateError

BASE = [
    dict(
        config_to_flat(
            config_from_flat({**get_preset(name).__dict__, "gpu": "H100", "num_nodes": 1, "dp": 8})
        )
    )
    for name in ("llama3-8b", "playbook-1.34b")
]
FIXTURES = Path(__file__).parents[1] / "fixtures" / "hf_configs"


def row_by_row(df: pd.DataFrame) -> tuple[list[str], list[dict]]:
    """config_from_flat's verdict and canonical values of each row."""
    errors, flats = [], []
    for record in df.to_dict("records"):
        try:
            flats.append(config_to_flat(config_from_flat(record)))
            errors.append("")
        except SurrogateError as e:
            flats.append({})
            errors.append(str(e))
    return errors, flats


def assert_same_as_rows(df: pd.DataFrame) -> None:
    checked = validate_table(df)
    errors, flats = row_by_row(df)
    assert checked.errors == errors
    assert checked.rows.tolist() == [i for i, e in enumerate(errors) if not e]
    quiet = validate_table(df, messages=False)  # verdicts alone: the same rows
    assert quiet.rows.tolist() == checked.rows.tolist()
    assert [bool(e) for e in quiet.errors] == [bool(e) for e in errors]
    for j, i in enumerate(checked.rows):
        got = {k: checked.table[k][j] for k in CONFIG_COLUMNS}
        got = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in got.items()}
        assert got == flats[i], i


CHANGES = {
    "dp": [0, -1, 1, 2, 3, 8, 16, 2**40, 8.0, 8.5, "8", "x", None, True],
    "tp": [1, 2, 3, 4, 8, 16, np.nan],
    "pp": [1, 2, 4, 64],
    "cp": [1, 2, 3],
    "ep": [1, 2],
    "vpp": [1, 2, 3],
    "mbs": [0, 1, 4],
    "grad_accum": [1, 2**52],
    "zero_stage": [0, 1, 2, 3, 4],
    "dp_replicate": [1, 2, 3, 4, 8, 0, None],
    "num_nodes": [1, 2, 4],
    "num_heads": [32, 30, 1],
    "num_kv_heads": [8, 3, None, np.nan],
    "num_experts": [0, 1, 8],
    "experts_topk": [0, 2],
    "recompute": ["none", "full", " selective ", "some", None, ""],
    "recompute_layers": [0, 1, 4, 40, -1, 2.5, None],
    "sequence_parallel": [True, False, "true", 1, None],  # None: the framework's default
    "dtype": ["bf16", "fp8", "fp16"],
    "gpu": ["H100", "h100-sxm-80gb", "A100", "V100", 7],
    "framework": ["nanotron", "torchtitan", "megatron", " Megatron ", "jax", None],
    "framework_version": [None, "pp-fix", "pre-pp-fix", "0.1"],
    "seq_len": [4096, 4095, 2.5],
    "num_layers": [32, 1, 3],
    "global_batch_seqs": [None, 64, 65],
    "pp_schedule": ["1f1b", "afab", " afab ", "AFAB", "gpipe", None, ""],
}


def mutated(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        row = dict(BASE[i % len(BASE)])
        for name in rng.choice(list(CHANGES), size=int(rng.integers(0, 4)), replace=False):
            values = CHANGES[name]
            row[name] = values[int(rng.integers(len(values)))]
        rows.append(row)
    return pd.DataFrame(rows, columns=[*CONFIG_COLUMNS, "global_batch_seqs"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mixed_cells_answer_as_config_from_flat(seed):
    assert_same_as_rows(mutated(600, seed))  # > 256 rows: the pandas grouping


def test_a_few_rows_answer_as_config_from_flat():
    assert_same_as_rows(mutated(40, 3))  # <= 256 rows: the dict grouping


def test_numeric_columns_of_every_dtype():
    df = pd.DataFrame([BASE[0]] * 300)
    assert_same_as_rows(df)  # int64 columns
    df["dp"] = df["dp"].astype("float64")
    df.loc[5, "dp"] = np.nan  # missing: the default, 1 (then the world size breaks)
    df.loc[6, "dp"] = 4.5
    df.loc[7, "dp"] = np.inf
    df["tp"] = df["tp"].astype("uint16")
    assert_same_as_rows(df)


def test_missing_columns_take_defaults_and_a_missing_model_column_is_an_error():
    df = pd.DataFrame([BASE[0]] * 3).drop(columns=["num_kv_heads", "framework", "cp"])
    assert_same_as_rows(df)
    errors = validate_table(df.drop(columns=["vocab_size"])).errors
    assert errors == ["a configuration needs the model columns vocab_size"] * 3


def test_mla_and_moe_models():
    model = model_from_hf_config(FIXTURES / "deepseek-v2.json", seq_len=4096)
    row = config_to_flat(config_from_flat({**model.__dict__, "num_nodes": 8, "dp": 64, "ep": 8}))
    mixtral = config_to_flat(
        config_from_flat({**get_preset("mixtral-8x7b").__dict__, "num_nodes": 1, "dp": 8, "ep": 8})
    )
    df = pd.DataFrame(
        [
            row,
            dict(row, ep=3),
            dict(row, qk_rope_head_dim=0),
            dict(row, head_dim=64),
            mixtral,
            dict(mixtral, experts_topk=9),
        ]
    )
    assert_same_as_rows(df)


def test_megatron_folds_experts_in_a_table_as_one_row_at_a_time():
    """ep dividing tp x dp x cp but not dp x cp: a layout under Megatron-Core's parallel
    folding, refused under the other frameworks, column-wise as row by row."""
    mixtral = config_to_flat(
        config_from_flat(
            {
                **get_preset("mixtral-8x7b").__dict__,
                "num_nodes": 2,
                "dp": 2,
                "tp": 4,
                "pp": 2,
                "ep": 8,
                "framework": "megatron",
                "sequence_parallel": True,
            }
        )
    )
    df = pd.DataFrame(
        [
            mixtral,
            dict(mixtral, framework="torchtitan"),
            dict(mixtral, tp=2, dp=4, ep=8, framework="nanotron"),
            dict(mixtral, tp=1, dp=8, pp=2, ep=8),
        ]
    )
    assert_same_as_rows(df)
    assert validate_table(df).rows.tolist() == [0, 3]


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    st.lists(
        st.fixed_dictionaries({k: st.sampled_from(v) for k, v in list(CHANGES.items())[:12]}),
        min_size=1,
        max_size=6,
    )
)
def test_any_changes_answer_as_config_from_flat(changes):
    assert_same_as_rows(pd.DataFrame([dict(BASE[0], **c) for c in changes]))


def test_valid_table_names_the_first_bad_row():
    df = pd.DataFrame([BASE[0], dict(BASE[0], tp=3)])
    with pytest.raises(DataError, match=r"runs must be valid configurations, got row 1: dp \* tp"):
        valid_table(df, where="runs")


def test_the_analytic_columns_of_a_table_are_those_of_its_configurations():
    configs = [config_from_flat(r) for r in BASE]
    from_table = cols_from_table(validate_table(pd.DataFrame(BASE)).table, shipped_parameter_sets())
    from_configs = to_cols(configs, shipped_parameter_sets())
    assert from_table.keys() == from_configs.keys()
    for k in from_table:
        np.testing.assert_array_equal(from_table[k], from_configs[k], err_msg=k)
    assert flat_table(configs)["framework_version"].tolist() == [
        r["framework_version"] for r in BASE
    ]


def test_group_codes_keep_none_and_agree_between_small_and_large_tables():
    text = np.array([None, "a", None, "b"] * 100, dtype=object)
    counts = np.array([1, 2, 1, 2] * 100)
    codes, rows = group_codes([text, counts])
    assert rows == [(None, 1), ("a", 2), ("b", 2)]
    assert codes[:4].tolist() == [0, 1, 0, 2]
    small_codes, small_rows = group_codes([text[:4], counts[:4]])
    assert small_rows == rows and small_codes.tolist() == codes[:4].tolist()


def test_group_codes_told_apart_by_keys_give_every_row_its_values():
    """Keys (codes of raw cells, computed once) may split a value in two: every row still
    gets its own values."""
    raw = np.array([" a", "a", None, "b"] * 100, dtype=object)
    keys = pd.factorize(raw)[0]
    text = np.array([None if v is None else v.strip() for v in raw], dtype=object)
    counts = np.array([1, 1, 1, 2] * 100)
    codes, rows = group_codes([text, counts], [keys, counts])
    assert [rows[k] for k in codes] == list(zip(text.tolist(), counts.tolist(), strict=True))


def test_text_cells_of_every_kind_answer_as_config_from_flat():
    """Object text columns holding None, NaN, pd.NA, blanks, padding and a number, over
    enough rows (more than 64) that each column is read through its distinct cells."""
    df = pd.DataFrame([BASE[0], BASE[1]] * 40)
    odd = [None, np.nan, pd.NA, "", " torchtitan ", " none"]
    for col in ("framework", "recompute", "gpu", "framework_version"):
        cells = df[col].astype(object).to_numpy(copy=True)
        cells[[3 + 7 * j for j in range(len(odd))]] = odd
        if col == "gpu":
            cells[60] = 3  # not text: this column cell by cell
        df[col] = pd.Series(cells, dtype=object)
    assert_same_as_rows(df)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 6))
def test_distinct_rows_number_rows_by_first_appearance(seed: int, width: int) -> None:
    """Against a dict of row tuples, over columns that force the key's renumbering: integers
    spanning 2^40 (factorized) or 2^30 (three overflow 62 bits), floats with NaN, text with
    None, booleans."""
    from surrogate.config.table import distinct_rows

    rng = np.random.default_rng(seed)
    n = 300
    makers = [
        lambda: rng.integers(0, 2**40, n) // rng.choice([1, 2**39], n),
        lambda: rng.integers(0, 2**30, n),  # three of them overflow 62 bits
        lambda: rng.choice(np.array([0.5, np.nan, 2.0]), n),
        lambda: rng.choice(np.array([None, "a", "b"], dtype=object), n),
        lambda: rng.integers(0, 2, n).astype(bool),
        lambda: rng.integers(-3, 3, n).astype(np.int32),
    ]
    arrays = [makers[int(rng.integers(len(makers)))]() for _ in range(width)]
    seen: dict[tuple[object, ...], int] = {}
    firsts: list[int] = []
    expected = []
    for i, row in enumerate(zip(*(a.tolist() for a in arrays), strict=True)):
        key = tuple("nan" if isinstance(v, float) and v != v else v for v in row)
        if key not in seen:
            seen[key] = len(seen)
            firsts.append(i)
        expected.append(seen[key])
    codes, first = distinct_rows(arrays)
    assert codes.tolist() == expected
    assert first.tolist() == firsts


def test_nullable_columns_read_their_missing_cells_as_missing():
    df = pd.DataFrame([BASE[0]] * 3)
    df["dp"] = df["dp"].astype("Int64")
    df["gpu"] = df["gpu"].astype("string")
    assert_same_as_rows(df)
    df.loc[1, "dp"] = pd.NA  # the default dp (1) then breaks the world size
    df.loc[2, "gpu"] = pd.NA  # the default GPU
    assert_same_as_rows(df)
    assert validate_table(df).errors[1].startswith("dp * tp * pp * cp must equal")


def test_table_frame_keeps_text_as_python_objects():
    """A flat table's DataFrame keeps text columns as objects (no copy into Arrow strings) and
    every value as it was."""
    from surrogate.config.table import table_frame

    table = {
        "framework": np.array(["megatron", "torchtitan"], dtype=object),
        "dp": np.array([8, 16]),
        "sequence_parallel": np.array([True, False]),
    }
    frame = table_frame(table)
    assert frame["framework"].dtype == object
    assert frame.to_dict("list") == {k: v.tolist() for k, v in table.items()}
    numpy_text = table_frame({"dtype": np.full(3, "bf16")})  # a numpy string column
    assert numpy_text["dtype"].dtype == object and numpy_text["dtype"].tolist() == ["bf16"] * 3


def test_concat_holds_the_first_table_then_the_second() -> None:
    configs = [config_from_flat(row) for row in BASE]
    joined = concat(flat_table(configs[:1]), flat_table(configs[1:]))
    whole = flat_table(configs)
    assert all(joined[k].tolist() == whole[k].tolist() for k in CONFIG_COLUMNS)
    assert joined.keys() == whole.keys()
