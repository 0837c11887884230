"""Every valid layout of a space as a flat table: the enumerated layouts, in their order."""

from __future__ import annotations

import pandas as pd
import pytest

from surrogate.config.presets import get_preset
from surrogate.config.table import validate_table
from surrogate.config.training import CONFIG_COLUMNS, config_to_flat
from surrogate.errors import ConfigError
from surrogate.layouts.grid import space_table
from surrogate.layouts.labels import layout_label, layout_labels
from surrogate.layouts.space import LayoutSpace, layout_key, layout_keys


@pytest.mark.parametrize(("model", "nodes", "frameworks"), [
    ("llama3-8b", (1, 2), ("nanotron", "torchtitan", "megatron")),
    ("mixtral-8x7b", (2,), ("megatron", "torchtitan")),
])
def test_the_table_holds_the_enumerated_layouts_in_order(model, nodes, frameworks) -> None:
    space = LayoutSpace(model=get_preset(model), global_batch_seqs=256, node_counts=nodes,
                        frameworks=frameworks, max_mbs=4, max_vpp=2)
    every = space.enumerate()
    table = space_table(space)
    assert len(table["dp"]) == len(every) > 100
    flats = [config_to_flat(cfg) for cfg in every]
    for k in CONFIG_COLUMNS:
        assert table[k].tolist() == [f[k] for f in flats], k
    assert layout_keys(table) == [layout_key(cfg) for cfg in every]
    assert layout_labels(table) == [layout_label(cfg) for cfg in every]


def test_a_space_without_layouts_gives_an_empty_table() -> None:
    space = LayoutSpace(frameworks=("nanotron",),
                        model=get_preset("llama3-8b"), global_batch_seqs=3, node_counts=(1,),
                        fixed={"tp": 8, "pp": 2})  # tp x pp = 16 does not divide 8 GPUs
    assert space.enumerate() == [] and len(space_table(space)["dp"]) == 0


def test_a_space_over_the_limit_is_refused() -> None:
    space = LayoutSpace(frameworks=("nanotron",),
                        model=get_preset("llama3-8b"), global_batch_seqs=256, node_counts=(1, 2))
    with pytest.raises(ConfigError, match="more than the enumeration limit"):
        space_table(space, limit=10)


def test_text_as_categoricals_reads_as_text() -> None:
    """The table's text columns go to the validation as categoricals, read by their codes:
    the same canonical table as the same cells as text, missing ones included."""
    space = LayoutSpace(model=get_preset("mixtral-8x7b"), global_batch_seqs=64, node_counts=(2,),
                        frameworks=("megatron", "torchtitan"), max_mbs=2)
    table = space_table(space)
    text = pd.DataFrame({k: pd.Series(v, dtype=object) if v.dtype == object else v
                         for k, v in table.items()})
    coded = text.assign(**{k: text[k].astype("category")
                           for k in ("gpu", "framework", "recompute", "dtype")},
                        framework_version=pd.Categorical([None] * len(text)))
    coded.loc[coded.index[:3], "recompute"] = None  # missing: the field's default
    text.loc[text.index[:3], "recompute"] = None
    got, want = validate_table(coded), validate_table(text)
    assert got.errors == want.errors and len(got.rows) == len(want.rows)
    for k in CONFIG_COLUMNS:
        assert got.table[k].tolist() == want.table[k].tolist(), k
