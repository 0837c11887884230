"""Every valid layout of a space as a flat table: the layouts each point judged alone gives, in
the grid's order."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from surrogate.config.frameworks import get_framework
from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.presets import get_preset
from surrogate.config.table import validate_table
from surrogate.config.training import CONFIG_COLUMNS, TrainingConfig, config_to_flat
from surrogate.errors import ConfigError
from surrogate.layouts.degrees import node_copies, recompute_layers_for_share
from surrogate.layouts.grid import space_table
from surrogate.layouts.labels import layout_label, layout_labels
from surrogate.layouts.space import LayoutSpace, layout_key, layout_keys


def _oracle(space: LayoutSpace, point: dict[str, Any]) -> TrainingConfig | None:
    """One point judged configuration by configuration, independently of the table's
    column-wise rules: the derived degrees, the space's own rules, the framework's
    (FrameworkTraits.runs_as_another) and the configuration's (TrainingConfig)."""
    nodes, tp, pp, cp = (int(point[k]) for k in ("num_nodes", "tp", "pp", "cp"))
    world = nodes * space.gpus_per_node
    if world % (tp * pp * cp):
        return None
    dp, mbs = world // (tp * pp * cp), int(point["mbs"])
    if space.global_batch_seqs % (dp * mbs):
        return None
    framework = get_framework(point["framework"])
    zero, recompute = int(point["zero_stage"]), str(point["recompute"])
    copies = 1
    if point["sharding"] == "node":
        copies = node_copies(dp, cp, tp, space.gpus_per_node)
        if copies <= 1:
            return None
    if framework.runs_as_another(
        dp=dp,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=int(point["ep"]),
        vpp=int(point["vpp"]),
        zero_stage=zero,
        recompute=recompute,
        sequence_parallel=bool(point["sequence_parallel"]),
        dp_replicate=copies,
        moe=space.model.num_experts >= 2,
    ):
        return None
    share = float(point["recompute_share"])
    try:
        layers = (
            recompute_layers_for_share(
                framework.name, space.model.num_layers, pp, int(point["vpp"]), share
            )
            if share < 1
            else 0
        )
        return TrainingConfig(
            model=space.model,
            global_batch_seqs=space.global_batch_seqs,
            cluster=ClusterConfig(
                gpu=space.gpu, gpus_per_node=space.gpus_per_node, num_nodes=nodes
            ),
            layout=LayoutConfig(
                dp=dp,
                tp=tp,
                pp=pp,
                cp=cp,
                ep=int(point["ep"]),
                vpp=int(point["vpp"]),
                mbs=mbs,
                grad_accum=space.global_batch_seqs // (dp * mbs),
                zero_stage=zero,
                dp_replicate=copies,
                recompute=recompute,
                recompute_layers=layers,
                sequence_parallel=bool(point["sequence_parallel"]),
                dtype=space.dtype,
                framework=framework.name,
            ),
        )
    except ConfigError:
        return None


@pytest.mark.parametrize(
    ("model", "nodes", "frameworks"),
    [
        ("llama3-8b", (1, 2), ("nanotron", "torchtitan", "megatron")),
        ("mixtral-8x7b", (2,), ("megatron", "torchtitan")),
    ],
)
def test_the_table_holds_the_layouts_each_point_judged_alone_gives(
    model, nodes, frameworks
) -> None:
    """The table's column-wise rules agree with an oracle that judges every point of the grid
    as one configuration (shares that give one count are one layout, the first kept)."""
    space = LayoutSpace(
        model=get_preset(model),
        global_batch_seqs=256,
        node_counts=nodes,
        frameworks=frameworks,
        max_mbs=4,
        max_vpp=2,
    )
    oracle: dict[tuple[Any, ...], TrainingConfig] = {}
    for point in space.points():
        cfg = _oracle(space, point)
        if cfg is not None:
            oracle.setdefault(layout_key(cfg), cfg)
    every = list(oracle.values())
    table = space_table(space)
    assert len(table["dp"]) == len(every) > 100
    assert space.enumerate() == every
    flats = [config_to_flat(cfg) for cfg in every]
    for k in CONFIG_COLUMNS:
        assert table[k].tolist() == [f[k] for f in flats], k
    assert layout_keys(table) == [layout_key(cfg) for cfg in every]
    assert layout_labels(table) == [layout_label(cfg) for cfg in every]


def test_a_space_without_layouts_gives_an_empty_table() -> None:
    space = LayoutSpace(
        frameworks=("nanotron",),
        model=get_preset("llama3-8b"),
        global_batch_seqs=3,
        node_counts=(1,),
        fixed={"tp": 8, "pp": 2},
    )  # tp x pp = 16 does not divide 8 GPUs
    assert space.enumerate() == [] and len(space_table(space)["dp"]) == 0


def test_a_space_over_the_limit_is_refused() -> None:
    space = LayoutSpace(
        frameworks=("nanotron",),
        model=get_preset("llama3-8b"),
        global_batch_seqs=256,
        node_counts=(1, 2),
    )
    with pytest.raises(ConfigError, match="more than the enumeration limit"):
        space_table(space, limit=10)


def test_text_as_categoricals_reads_as_text() -> None:
    """The table's text columns go to the validation as categoricals, read by their codes:
    the same canonical table as the same cells as text, missing ones included."""
    space = LayoutSpace(
        model=get_preset("mixtral-8x7b"),
        global_batch_seqs=64,
        node_counts=(2,),
        frameworks=("megatron", "torchtitan"),
        max_mbs=2,
    )
    table = space_table(space)
    text = pd.DataFrame(
        {k: pd.Series(v, dtype=object) if v.dtype == object else v for k, v in table.items()}
    )
    coded = text.assign(
        **{k: text[k].astype("category") for k in ("gpu", "framework", "recompute", "dtype")},
        framework_version=pd.Categorical([None] * len(text)),
    )
    coded.loc[coded.index[:3], "recompute"] = None  # missing: the field's default
    text.loc[text.index[:3], "recompute"] = None
    got, want = validate_table(coded), validate_table(text)
    assert got.errors == want.errors and len(got.rows) == len(want.rows)
    for k in CONFIG_COLUMNS:
        assert got.table[k].tolist() == want.table[k].tolist(), k
