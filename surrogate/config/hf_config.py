"""Reading a Hugging Face ``config.json`` into a :class:`~surrogate.config.model.ModelConfig`.

A config is read by its ``model_type`` (or, without one, its ``architectures``), family by
family, with the keys and defaults of the Hugging Face transformers configuration and modeling
files (``src/transformers/models/<model_type>/configuration_<model_type>.py`` and
``modeling_<model_type>.py``; DeepSeek's also ship with the checkpoints as remote code):

- ``llama``, ``mistral``: GQA (``num_key_value_heads``, absent or null: multi-head), SwiGLU of
  width ``intermediate_size``, optional ``head_dim`` (absent or null: hidden_size / heads,
  as ``LlamaAttention`` and ``MistralAttention`` take it).
- ``mixtral``: as mistral, with ``num_local_experts`` experts of width ``intermediate_size``,
  ``num_experts_per_tok`` per token (Jiang et al. 2024).
- ``qwen2``, ``qwen3``: as llama; Qwen3 always gives ``head_dim`` (32 x 128 = 4,096 heads wide
  on a 2,048-wide Qwen3-30B-A3B). Qwen2's q/k/v biases and Qwen3's per-head q/k norms are not
  counted (under 0.01% of the parameters).
- ``qwen2_moe``, ``qwen3_moe``: ``num_experts`` experts of width ``moe_intermediate_size``;
  Qwen2-MoE adds one shared expert of width ``shared_expert_intermediate_size``
  (``Qwen2MoeSparseMoeBlock``). A layer is dense when it is in ``mlp_only_layers`` or
  (index + 1) is not a multiple of ``decoder_sparse_step``; leading dense layers are modelled,
  dense layers between MoE layers are refused.
- ``deepseek_v2``, ``deepseek_v3``: multi-head latent attention (``q_lora_rank``, null for
  none, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``;
  DeepSeek-AI 2024, "DeepSeek-V2", sec. 2.1), ``n_routed_experts`` of width
  ``moe_intermediate_size``, ``n_shared_experts`` of the same width (one MLP of
  n_shared x that width, ``DeepseekV3MoE.shared_experts``), and ``first_k_dense_replace``
  leading dense layers of width ``intermediate_size``; ``moe_layer_freq`` other than 1 is
  refused. DeepSeek-V3's multi-token-prediction module (``num_nextn_predict_layers``) is not
  modelled: transformers does not build it and the published 671B excludes it.
- ``gemma``: GQA with an explicit ``head_dim`` (gemma-7b: 16 x 256 = 4,096 on a 3,072-wide
  model), GeGLU (the SwiGLU shapes), embeddings tied unless ``tie_word_embeddings`` is false.

Sliding-window attention (Mistral 7B v0.1's 4,096-token window; Qwen with
``use_sliding_window``) is modelled only where the window covers the sequence: a longer
sequence is refused. Every key read is type-checked: an integer must be a JSON integer (not
4096.7, not "4096", not true), a flag a JSON boolean; heads, layers and widths are >= 1. An
unknown or unsupported ``model_type`` is refused, never read as a Llama.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from surrogate.config.model import ModelConfig
from surrogate.errors import ConfigError
from surrogate.io.input_files import read_input_text
from surrogate.io.json_files import refuse_duplicate_keys

ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GemmaForCausalLM": "gemma",
}
"""The causal-LM class of each supported ``model_type`` (the config's ``architectures``)."""
MODEL_TYPES: tuple[str, ...] = tuple(dict.fromkeys(ARCHITECTURES.values()))
"""The supported ``model_type`` values."""
REFUSED: dict[str, str] = {
    "gemma2": "it alternates sliding-window and global attention layers, soft-caps logits and "
    "has four norms per layer",
    "gemma3": "it interleaves sliding-window and global attention layers and has four norms "
    "per layer",
    "gemma3_text": "it interleaves sliding-window and global attention layers and has four "
    "norms per layer",
    "llama4": "it interleaves MoE and dense layers and chunked and global attention",
    "qwen3_next": "it mixes linear (gated DeltaNet) and full attention layers",
}
"""Families close to a supported one whose shapes the analytic model does not cover, and why."""

_TIED_BY_DEFAULT = frozenset({"gemma"})
"""Families whose config class defaults ``tie_word_embeddings`` to true (others: false)."""
_HEAD_DIM_REQUIRED = frozenset({"gemma", "qwen3", "qwen3_moe"})
"""Families whose config class default for ``head_dim`` is not hidden_size / heads."""
_COMMON_KEYS: tuple[str, ...] = (
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "vocab_size",
)
"""Keys every supported family needs (the family's own are checked as they are read)."""
_REQUIRED = object()


class _Keys:
    """Typed access to the keys of one config.json (messages name the file)."""

    def __init__(self, cfg: dict[str, Any], path: Path) -> None:
        self.cfg, self.path = cfg, path

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {message}")

    def integer(self, key: str, *, minimum: int = 1, default: Any = _REQUIRED) -> int:
        value = self.cfg.get(key, default)
        if value is _REQUIRED:
            raise self.error(f"a {self.family_name()} config needs the key {key}")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"{key} must be an integer >= {minimum}, got {value!r}")
        return value

    def optional_integer(self, key: str, *, minimum: int = 1) -> int | None:
        """None when the key is absent or null (the config class's 'derive it' default)."""
        if self.cfg.get(key) is None:
            return None
        return self.integer(key, minimum=minimum)

    def nullable_integer(self, key: str, *, minimum: int = 1) -> int | None:
        """None when the key is null; the key must be there (its class default varies)."""
        if key in self.cfg and self.cfg[key] is None:
            return None
        return self.integer(key, minimum=minimum)

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if not isinstance(value, bool):
            raise self.error(f"{key} must be true or false (a JSON boolean), got {value!r}")
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.cfg.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value
        ):
            raise self.error(
                f"{key} must be a list of layer indices (integers >= 0), got {value!r}"
            )
        return value

    def family_name(self) -> str:
        return str(self.cfg.get("model_type") or "Hugging Face")


def read_json_object(path: str | Path) -> dict[str, Any]:
    """The JSON object in ``path``; ConfigError if missing, malformed, not an object, or a key
    appears twice (JSON parsers otherwise keep the last silently)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"--hf-config must name an existing file, got {str(p)!r}")
    text = read_input_text(p, what="--hf-config", kind="config", error=ConfigError)
    try:
        cfg = json.loads(text, object_pairs_hook=refuse_duplicate_keys)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{p}: a Hugging Face config.json holds a JSON object")
    return cfg


def model_type_of(cfg: dict[str, Any], path: Path) -> str:
    """The supported ``model_type`` of ``cfg``, checked against its ``architectures``."""
    model_type = cfg.get("model_type")
    archs = cfg.get("architectures")
    if model_type is not None and not isinstance(model_type, str):
        raise ConfigError(f"{path}: model_type must be a string, got {model_type!r}")
    if archs is not None and (
        not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)
    ):
        raise ConfigError(f"{path}: architectures must be a list of class names, got {archs!r}")
    from_archs = sorted({ARCHITECTURES[a] for a in archs or () if a in ARCHITECTURES})
    if model_type is None:
        if len(from_archs) != 1:
            raise ConfigError(
                f"{path}: a Hugging Face config must name its family: model_type one of "
                f"{', '.join(MODEL_TYPES)} (or architectures such as LlamaForCausalLM), got "
                f"model_type=None architectures={archs!r}"
            )
        model_type = from_archs[0]
    if model_type in REFUSED:
        raise ConfigError(
            f"{path}: model_type {model_type!r} is not supported: "
            f"{REFUSED[model_type]}; supported: {', '.join(MODEL_TYPES)}"
        )
    if model_type not in MODEL_TYPES:
        raise ConfigError(
            f"{path}: model_type must be one of {', '.join(MODEL_TYPES)}, got {model_type!r}"
        )
    if from_archs and from_archs != [model_type]:
        raise ConfigError(
            f"{path}: model_type {model_type!r} disagrees with architectures {archs!r}"
        )
    return model_type


def model_from_hf_config(path: str | Path, *, seq_len: int | None = None) -> ModelConfig:
    """The model of a Hugging Face ``config.json`` (families and rules: module docstring).

    ``seq_len`` (an integer >= 1, else a ConfigError) defaults to ``max_position_embeddings``.
    """
    p = Path(path)
    if seq_len is not None and (
        isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1
    ):
        raise ConfigError(f"seq_len must be an integer >= 1, got {seq_len!r}")
    cfg = read_json_object(p)
    family = model_type_of(cfg, p)
    cfg = {**cfg, "model_type": family}
    keys = _Keys(cfg, p)
    missing = [k for k in _COMMON_KEYS if k not in cfg]
    if missing:
        raise keys.error(f"a {family} config needs the keys {', '.join(missing)}")
    values: dict[str, Any] = {
        "num_layers": keys.integer("num_hidden_layers"),
        "hidden_size": keys.integer("hidden_size"),
        "ffn_hidden_size": keys.integer("intermediate_size"),
        "num_heads": keys.integer("num_attention_heads"),
        "vocab_size": keys.integer("vocab_size"),
        "tie_embeddings": keys.boolean("tie_word_embeddings", default=family in _TIED_BY_DEFAULT),
    }
    kv_heads = keys.optional_integer("num_key_value_heads")
    values["num_kv_heads"] = values["num_heads"] if kv_heads is None else kv_heads
    if seq_len is None:
        if cfg.get("max_position_embeddings") is None:
            raise keys.error("no max_position_embeddings; give the sequence length (--seq-len)")
        seq_len = keys.integer("max_position_embeddings")
    values["seq_len"] = seq_len
    _check_window(keys, family, seq_len)
    if family.startswith("deepseek"):
        values.update(_deepseek(keys))
    else:
        values["head_dim"] = _head_dim(keys, family, values["hidden_size"], values["num_heads"])
        values.update(_experts(keys, family, values["num_layers"]))
    name = cfg.get("_name_or_path")
    if name is not None and not isinstance(name, str):
        raise keys.error(f"_name_or_path must be a string, got {name!r}")
    values["name"] = name or config_name(cfg, family)
    try:
        return ModelConfig(**values)
    except ConfigError as e:
        raise keys.error(str(e)) from None


def config_name(cfg: dict[str, Any], family: str) -> str:
    """The model's name from what the config itself says (never the folder it sits in, which
    ``predict`` and ``search`` would read differently): its first architecture
    (``LlamaForCausalLM``), else its family (``llama``)."""
    architectures = cfg.get("architectures")
    if (
        isinstance(architectures, list)
        and architectures
        and isinstance(architectures[0], str)
        and architectures[0].strip()
    ):
        return architectures[0].strip()
    return family


def _head_dim(keys: _Keys, family: str, hidden: int, heads: int) -> int:
    """``head_dim`` as ModelConfig stores it: 0 when it is hidden / heads."""
    if family in _HEAD_DIM_REQUIRED:
        head_dim: int | None = keys.integer("head_dim")
    else:
        head_dim = keys.optional_integer("head_dim")
    if head_dim is None or head_dim * heads == hidden:
        return 0
    return head_dim


def _check_window(keys: _Keys, family: str, seq_len: int) -> None:
    """Refuse sliding-window attention whose window is shorter than the sequence: Mistral's
    ``sliding_window``; Qwen's with ``use_sliding_window`` on layers from
    ``max_window_layers``; any layer of ``layer_types`` marked ``sliding_attention``."""
    layer_types = keys.cfg.get("layer_types")
    marked = isinstance(layer_types, list) and "sliding_attention" in layer_types
    if marked or family in ("mistral", "mixtral"):
        windowed = True
    elif family.startswith("qwen") and keys.boolean("use_sliding_window", default=False):
        first = keys.optional_integer("max_window_layers", minimum=0)
        windowed = first is None or first < keys.integer("num_hidden_layers")
    else:
        windowed = False
    window = keys.optional_integer("sliding_window") if windowed else None
    if window is not None and window < seq_len:
        raise keys.error(
            f"sliding-window attention is modelled only where the window covers the sequence: "
            f"seq_len must be <= sliding_window={window}, got {seq_len} (give --seq-len)"
        )


def _experts(keys: _Keys, family: str, layers: int) -> dict[str, Any]:
    """MoE fields of the Mixtral and Qwen MoE families; none for the dense ones."""
    if family == "mixtral":  # experts as wide as intermediate_size (MixtralBlockSparseTop2MLP)
        return {
            "num_experts": keys.integer("num_local_experts", minimum=2),
            "experts_topk": keys.integer("num_experts_per_tok"),
            "moe_ffn_hidden_size": keys.integer("intermediate_size"),
        }
    if family not in ("qwen2_moe", "qwen3_moe"):
        return {}
    out = {
        "num_experts": keys.integer("num_experts", minimum=2),
        "experts_topk": keys.integer("num_experts_per_tok"),
        "moe_ffn_hidden_size": keys.integer("moe_intermediate_size"),
    }
    if family == "qwen2_moe":
        out["shared_expert_ffn_hidden_size"] = keys.integer(
            "shared_expert_intermediate_size", minimum=0
        )
    step = keys.integer("decoder_sparse_step", default=1)
    mlp_only = set(keys.int_list("mlp_only_layers"))
    dense = [i for i in range(layers) if i in mlp_only or (i + 1) % step]
    if dense != list(range(len(dense))):
        raise keys.error(
            f"only leading dense layers are modelled: the dense layers (mlp_only_layers, "
            f"decoder_sparse_step={step}) must be 0 .. k-1, got {dense}"
        )
    out["num_dense_layers"] = len(dense)
    return out


def _deepseek(keys: _Keys) -> dict[str, Any]:
    """MLA and MoE fields of DeepSeek-V2/V3 (module docstring)."""
    if keys.integer("moe_layer_freq", default=1) != 1:
        raise keys.error(
            f"moe_layer_freq must be 1 (MoE layers between dense ones are not "
            f"modelled), got {keys.cfg['moe_layer_freq']!r}"
        )
    expert_width = keys.integer("moe_intermediate_size")
    keys.integer("num_nextn_predict_layers", minimum=0, default=0)  # type-checked, not modelled
    return {
        "num_experts": keys.integer("n_routed_experts", minimum=2),
        "experts_topk": keys.integer("num_experts_per_tok"),
        "moe_ffn_hidden_size": expert_width,
        "shared_expert_ffn_hidden_size": (keys.nullable_integer("n_shared_experts", minimum=0) or 0)
        * expert_width,
        "num_dense_layers": keys.integer("first_k_dense_replace", minimum=0),
        "q_lora_rank": keys.nullable_integer("q_lora_rank") or 0,
        "kv_lora_rank": keys.integer("kv_lora_rank"),
        "qk_nope_head_dim": keys.integer("qk_nope_head_dim"),
        "qk_rope_head_dim": keys.integer("qk_rope_head_dim"),
        "v_head_dim": keys.integer("v_head_dim"),
    }
