"""surrogate: predict how an LLM training layout will run before spending the GPU hours.

Importing this package does no I/O and imports nothing heavy; the public API is loaded lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "ClusterConfig",
    "ConfigError",
    "LayoutConfig",
    "ModelConfig",
    "SurrogateError",
    "TrainingConfig",
    "__version__",
    "predict",
]

_LAZY = {
    "ClusterConfig": "surrogate.config",
    "LayoutConfig": "surrogate.config",
    "ModelConfig": "surrogate.config",
    "TrainingConfig": "surrogate.config",
    "ConfigError": "surrogate.errors",
    "SurrogateError": "surrogate.errors",
    "predict": "surrogate.prediction",
}

if TYPE_CHECKING:
    from surrogate.config import ClusterConfig, LayoutConfig, ModelConfig, TrainingConfig
    from surrogate.errors import ConfigError, SurrogateError
    from surrogate.prediction import predict


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'surrogate' has no attribute {name!r}")
