"""surrogate: predict how an LLM training layout will run before spending the GPU hours.

Importing this package does no I/O and imports nothing heavy; the public API is loaded lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from surrogate.version import __version__

__all__ = [
    "ClusterConfig",
    "ConfigError",
    "LayoutConfig",
    "ModelConfig",
    "SurrogateError",
    "SurrogateModel",
    "TrainingConfig",
    "__version__",
    "predict",
    "search",
]

_LAZY = {
    "ClusterConfig": "surrogate.config.training",
    "LayoutConfig": "surrogate.config.training",
    "ModelConfig": "surrogate.config.training",
    "TrainingConfig": "surrogate.config.training",
    "ConfigError": "surrogate.errors",
    "SurrogateError": "surrogate.errors",
    "predict": "surrogate.prediction.predict",
    "search": "surrogate.layouts.search",
    "SurrogateModel": "surrogate.learned.model",
}

if TYPE_CHECKING:
    from surrogate.config.layout import ClusterConfig, LayoutConfig
    from surrogate.config.model import ModelConfig
    from surrogate.config.training import TrainingConfig
    from surrogate.errors import ConfigError, SurrogateError
    from surrogate.layouts.search import search
    from surrogate.learned.model import SurrogateModel
    from surrogate.prediction.predict import predict


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'surrogate' has no attribute {name!r}")
