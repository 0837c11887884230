"""Builders shared by the analytic tests: configurations and their columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from surrogate.analytic.inputs import Array, to_cols
from surrogate.config import ModelConfig, TrainingConfig


@pytest.fixture(scope="session")
def cols(config: Callable[..., TrainingConfig]) -> Callable[..., dict[str, Array]]:
    """``cols(model, **layout)``: the columns of one configuration (``config``: the builder in
    tests/conftest.py)."""

    def make(model: str | ModelConfig = "8b", **kwargs: Any) -> dict[str, Array]:
        return to_cols([config(model, **kwargs)])

    return make
