"""Model presets, and where a command's model comes from (a preset or a Hugging Face
``config.json``, read by :mod:`surrogate.config.hf_config`).

Sources:
- Playbook models: nanotron ``scripts/scaling_benchmarks.py`` as listed in
  ``../shared/data/MANIFEST.md`` (vocabulary 131,072, sequence 4,096; 1.34B and 3.57B tie
  their embeddings).
- Llama 3: Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3, and the released
  ``config.json`` files (vocabulary 128,256, 8 key-value heads, context 8,192).
- Mixtral 8x7B: Jiang et al. 2024, "Mixtral of Experts", Table 1 (8 experts, top-2,
  context 32,768, vocabulary 32,000).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from surrogate.config.hf_config import model_from_hf_config
from surrogate.config.model import ModelConfig
from surrogate.errors import ConfigError

__all__ = [
    "ALIASES",
    "MODEL_SHAPE_FIELDS",
    "PRESETS",
    "get_preset",
    "model_from_hf_config",
    "model_values",
    "playbook_model",
    "require_model_shape",
]


def _playbook(name: str, layers: int, hidden: int, ffn: int, heads: int, tied: bool) -> ModelConfig:
    return ModelConfig(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        ffn_hidden_size=ffn,
        num_heads=heads,
        num_kv_heads=heads,
        vocab_size=131072,
        seq_len=4096,
        tie_embeddings=tied,
    )


def _llama3(name: str, layers: int, hidden: int, ffn: int, heads: int) -> ModelConfig:
    return ModelConfig(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        ffn_hidden_size=ffn,
        num_heads=heads,
        num_kv_heads=8,
        vocab_size=128256,
        seq_len=8192,
        tie_embeddings=False,
    )


PRESETS: dict[str, ModelConfig] = {
    m.name: m
    for m in (
        _playbook("playbook-1.34b", 16, 2048, 8192, 32, True),
        _playbook("playbook-3.57b", 28, 3072, 8192, 32, True),
        _playbook("playbook-8.86b", 32, 4096, 14336, 32, False),
        _playbook("playbook-80b", 80, 8192, 28672, 64, False),
        _playbook("playbook-469b", 126, 16384, 53248, 128, False),
        _llama3("llama3-8b", 32, 4096, 14336, 32),
        _llama3("llama3-70b", 80, 8192, 28672, 64),
        _llama3("llama3-405b", 126, 16384, 53248, 128),
        ModelConfig(
            name="mixtral-8x7b",
            num_layers=32,
            hidden_size=4096,
            ffn_hidden_size=14336,
            num_heads=32,
            num_kv_heads=8,
            vocab_size=32000,
            seq_len=32768,
            tie_embeddings=False,
            num_experts=8,
            experts_topk=2,
            moe_ffn_hidden_size=14336,
        ),
    )
}

ALIASES: dict[str, str] = {
    "1.34b": "playbook-1.34b",
    "1.34g": "playbook-1.34b",
    "3.57b": "playbook-3.57b",
    "3.57g": "playbook-3.57b",
    "8.86b": "playbook-8.86b",
    "8.86g": "playbook-8.86b",
    "80b": "playbook-80b",
    "80g": "playbook-80b",
    "469b": "playbook-469b",
    "469g": "playbook-469b",
    "8b": "llama3-8b",
    "70b": "llama3-70b",
    "405b": "llama3-405b",
    "mixtral": "mixtral-8x7b",
}


def get_preset(name: str) -> ModelConfig:
    """The preset called ``name`` (or an alias such as ``8b`` or ``1.34G``)."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in PRESETS:
        raise ConfigError(
            f"model must be one of {', '.join(PRESETS)} (or an alias: {', '.join(ALIASES)}), "
            f"got {name!r}"
        )
    return PRESETS[key]


def playbook_model(run_name: str) -> ModelConfig:
    """The model of a Playbook run name such as ``8.86G_dp8_..._gqa8`` (MANIFEST.md shapes)."""
    prefix = run_name.split("_", 1)[0]
    base = get_preset(prefix)
    if run_name.endswith("_gqa8"):
        base = replace(base, num_kv_heads=8)
    return base


MODEL_SHAPE_FIELDS: tuple[str, ...] = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_heads",
    "vocab_size",
    "seq_len",
)
"""The model columns that have no default (num_kv_heads defaults to num_heads)."""


def model_values(
    preset: str | None, hf_config: str | Path | None, *, seq_len: int | None = None
) -> dict[str, Any]:
    """The model columns of a Hugging Face config (which wins) or a preset, as a dict that
    flags can then override; empty when neither is given."""
    if hf_config is not None:
        return asdict(model_from_hf_config(hf_config, seq_len=seq_len))
    if preset is not None:
        return asdict(get_preset(str(preset)))
    return {}


def require_model_shape(values: dict[str, Any], *, sources: str) -> None:
    """Raise ConfigError naming the missing shape flags; ``sources`` lists where a model can
    come from (e.g. '--model PRESET, --hf-config FILE')."""
    missing = [n for n in MODEL_SHAPE_FIELDS if n not in values]
    if missing:
        raise ConfigError(
            f"give a model: {sources} or the shape flags "
            f"(missing {', '.join('--' + m.replace('_', '-') for m in missing)})"
        )


TORCHTITAN_FLAVOURS: dict[str, tuple[str, str]] = {
    "llama3-8b": ("llama3", "8B"),
    "llama3-70b": ("llama3", "70B"),
    "llama3-405b": ("llama3", "405B"),
}
"""Presets torchtitan ships as model flavours (``[model] name, flavor``)."""
