"""Builders shared by the analytic tests: configurations and their columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from surrogate.analytic.inputs import Array, to_cols
from surrogate.config import ClusterConfig, LayoutConfig, ModelConfig, TrainingConfig
from surrogate.presets import get_preset


def build_config(model: str | ModelConfig = "8b", *, gpu: str = "H100-SXM-80GB",
                 gpus_per_node: int = 8, **layout: Any) -> TrainingConfig:
    """A TrainingConfig whose cluster is sized to the layout's world (dp x tp x pp x cp)."""
    lay = LayoutConfig(**layout)
    world = lay.dp * lay.tp * lay.pp * lay.cp
    per_node = min(world, gpus_per_node)
    return TrainingConfig(
        model=get_preset(model) if isinstance(model, str) else model,
        cluster=ClusterConfig(gpu=gpu, gpus_per_node=per_node, num_nodes=world // per_node),
        layout=lay,
    )


@pytest.fixture(scope="session")
def config() -> Callable[..., TrainingConfig]:
    return build_config


@pytest.fixture(scope="session")
def cols() -> Callable[..., dict[str, Array]]:
    """``cols(model, **layout)``: the columns of one configuration."""

    def make(model: str | ModelConfig = "8b", **kwargs: Any) -> dict[str, Array]:
        return to_cols([build_config(model, **kwargs)])

    return make
