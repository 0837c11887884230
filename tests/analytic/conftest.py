"""Builders shared by the analytic tests: configurations and their columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from surrogate.analytic.inputs import Array, to_cols
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.model import ModelConfig
from surrogate.config.training import TrainingConfig


def measured_moe_id(c: dict[str, Any]) -> str:
    """A test id of a measured MoE record's configuration ``c``."""
    fused = {True: "-fused", False: "-unfused"}.get(c.get("fused_swiglu"), "")
    return (
        f"E{c['num_experts']}-k{c['top_k']}-shared{c['num_shared_experts']}-"
        f"{'before' if c['score_before_experts'] else 'after'}{fused}-tp{c['tp']}-"
        f"ep{c['ep']}-rank{c['rank']}"
    )


def measured_moe_model(c: dict[str, Any], *, num_layers: int, ffn_hidden_size: int) -> ModelConfig:
    """The model of a measured MoE record's configuration ``c`` (``microbench/
    saved_activations.py --moe``): ``num_layers`` MoE layers, none dense, whose dense
    ``ffn_hidden_size`` none of them uses."""
    return ModelConfig(
        num_layers=num_layers,
        hidden_size=c["hidden_size"],
        ffn_hidden_size=ffn_hidden_size,
        num_heads=c.get("num_heads", 8),
        num_kv_heads=c.get("num_kv_heads", 8),
        vocab_size=256,
        seq_len=c["seq_len"],
        num_experts=c["num_experts"],
        experts_topk=c["top_k"],
        moe_ffn_hidden_size=c["moe_ffn_hidden_size"],
        shared_expert_ffn_hidden_size=(c["num_shared_experts"] * c["moe_ffn_hidden_size"]),
    )


@pytest.fixture(scope="session")
def cols(config: Callable[..., TrainingConfig]) -> Callable[..., dict[str, Array]]:
    """``cols(model, **layout)``: the columns of one configuration (``config``: the builder in
    tests/conftest.py)."""

    def make(model: str | ModelConfig = "8b", **kwargs: Any) -> dict[str, Array]:
        return to_cols([config(model, **kwargs)], shipped_parameter_sets())

    return make
