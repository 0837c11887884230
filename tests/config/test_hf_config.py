"""Hugging Face config.json files, family by family: shapes, published sizes, refusals.

The fixtures in ``fixtures/hf_configs`` carry the shape keys of the published config.json of
each model (Hugging Face Hub model cards); the published parameter counts are the cards'.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from surrogate.analytic import flops
from surrogate.analytic.inputs import to_cols
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.hf_config import model_from_hf_config
from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.presets import PRESETS
from surrogate.config.training import TrainingConfig
from surrogate.errors import ConfigError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "hf_configs"

PUBLISHED = [
    # fixture, total, active (None: dense), source
    ("llama3-8b", 8.03e9, None),  # Dubey et al. 2024; checkpoint 8.03B
    ("mistral-7b-v0.1", 7.24e9, None),  # Mistral-7B-v0.1 card: 7.24B
    ("mixtral-8x7b", 46.7e9, 12.9e9),  # Jiang et al. 2024: 46.7B total, 12.9B active
    ("qwen2-7b", 7.62e9, None),  # Qwen2-7B card: 7.62B
    ("qwen2-57b-a14b", 57.4e9, 14e9),  # Qwen2 tech report: 57B total, 14B activated
    ("qwen3-8b", 8.2e9, None),  # Qwen3-8B card: 8.2B
    ("qwen3-30b-a3b", 30.5e9, 3.3e9),  # Qwen3-30B-A3B card: 30.5B total, 3.3B activated
    ("deepseek-v2", 236e9, 21e9),  # DeepSeek-V2 paper: 236B total, 21B activated
    ("deepseek-v3", 671e9, 37e9),  # DeepSeek-V3 report: 671B (MTP excluded), 37B
    ("gemma-7b", 8.54e9, None),  # Gemma report, Table 2 (7B: 8.54B with embeddings)
]


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


LLAMA = fixture("llama3-8b")


def write(tmp_path: Path, data: dict | str, name: str = "config.json") -> Path:
    d = tmp_path / "my-model"
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def cols_of(model):
    cfg = TrainingConfig(
        model=model,
        cluster=ClusterConfig(num_nodes=1),
        layout=LayoutConfig(framework="nanotron", dp=8),
    )
    return to_cols([cfg], shipped_parameter_sets())


@pytest.mark.parametrize("name,total,active", PUBLISHED)
def test_parameter_counts_match_the_published_ones(name, total, active):
    c = cols_of(model_from_hf_config(FIXTURES / f"{name}.json", seq_len=4096))
    got = float(flops.total_params(c)[0])
    err = abs(got - total) / total
    print(f"{name}: {got / 1e9:.2f}B params vs published {total / 1e9:.2f}B ({err:.2%})")
    assert err < 0.02
    if active is not None:  # cards round the active count (14B, 3.3B): 3%
        got_active = float(flops.active_params(c)[0])
        err = abs(got_active - active) / active
        print(
            f"{name}: {got_active / 1e9:.2f}B active vs published {active / 1e9:.1f}B ({err:.2%})"
        )
        assert err < 0.03


def test_llama_reads_as_the_preset(tmp_path):
    m = model_from_hf_config(FIXTURES / "llama3-8b.json")
    assert m.name == "meta-llama/Meta-Llama-3-8B"
    assert m == replace(PRESETS["llama3-8b"], name=m.name)
    # an explicit head_dim of hidden / heads, or a null num_key_value_heads, read as HF does
    assert model_from_hf_config(write(tmp_path, dict(LLAMA, head_dim=128))) == m
    mha = model_from_hf_config(write(tmp_path, dict(LLAMA, num_key_value_heads=None)))
    assert mha.num_kv_heads == 32 and not mha.tie_embeddings
    assert model_from_hf_config(write(tmp_path, LLAMA), seq_len=4096).seq_len == 4096
    # without _name_or_path the name is the config's own (its architecture, else its family),
    # never the folder's ("my-model"), which predict and search would read differently
    assert (
        model_from_hf_config(write(tmp_path, dict(LLAMA, _name_or_path=""))).name
        == "LlamaForCausalLM"
    )
    assert (
        model_from_hf_config(
            write(tmp_path, dict(LLAMA, _name_or_path="", architectures=None))
        ).name
        == "llama"
    )


def test_family_shapes(tmp_path):
    gemma = model_from_hf_config(FIXTURES / "gemma-7b.json")
    assert (gemma.head_dim, gemma.attention_head_dim, gemma.tie_embeddings) == (256, 256, True)
    assert gemma.num_heads * gemma.head_dim != gemma.hidden_size
    qwen_moe = model_from_hf_config(FIXTURES / "qwen2-57b-a14b.json")
    assert (
        qwen_moe.num_experts,
        qwen_moe.experts_topk,
        qwen_moe.moe_ffn_hidden_size,
        qwen_moe.shared_expert_ffn_hidden_size,
        qwen_moe.num_dense_layers,
    ) == (64, 8, 2560, 20480, 0)
    qwen3 = model_from_hf_config(FIXTURES / "qwen3-30b-a3b.json")
    assert qwen3.attention_head_dim == 128 and qwen3.hidden_size == 2048
    assert qwen3.shared_expert_ffn_hidden_size == 0
    v3 = model_from_hf_config(FIXTURES / "deepseek-v3.json")
    assert v3.is_mla and (
        v3.q_lora_rank,
        v3.kv_lora_rank,
        v3.attention_head_dim,
        v3.value_head_dim,
    ) == (1536, 512, 192, 128)
    assert (
        v3.num_experts,
        v3.experts_topk,
        v3.shared_expert_ffn_hidden_size,
        v3.num_dense_layers,
        v3.ffn_hidden_size,
    ) == (256, 8, 2048, 3, 18432)
    lite = write(tmp_path, dict(fixture("deepseek-v2"), q_lora_rank=None))
    assert model_from_hf_config(lite).q_lora_rank == 0
    mixtral = model_from_hf_config(FIXTURES / "mixtral-8x7b.json")
    assert mixtral == replace(PRESETS["mixtral-8x7b"], name="mistralai/Mixtral-8x7B-v0.1")
    # no model_type: the architectures name the family
    no_type = {k: v for k, v in fixture("gemma-7b").items() if k != "model_type"}
    assert model_from_hf_config(write(tmp_path, no_type)).head_dim == 256


def test_sliding_window_covering_the_sequence_is_read(tmp_path):
    path = FIXTURES / "mistral-7b-v0.1.json"
    assert model_from_hf_config(path, seq_len=4096).seq_len == 4096
    with pytest.raises(ConfigError, match=r"seq_len must be <= sliding_window=4096, got 32768"):
        model_from_hf_config(path)


@pytest.mark.parametrize(
    "content,match",
    [
        ("{not json", r"config\.json: not valid JSON \(.* at line 1\)"),
        ("[1, 2]", r"config\.json: a Hugging Face config\.json holds a JSON object"),
        (
            '{"model_type": "llama", "model_type": "gemma"}',
            r"each key must appear once, got 'model_type' twice",
        ),
        ({"hidden_size": 8}, r"must name its family: model_type one of llama, "),
        (dict(LLAMA, model_type="gpt2"), r"model_type must be one of llama, .*got 'gpt2'"),
        (
            dict(LLAMA, model_type="gemma2"),
            r"model_type 'gemma2' is not supported: it "
            r"alternates sliding-window and global attention",
        ),
        (
            dict(LLAMA, model_type="mixtral"),
            r"model_type 'mixtral' disagrees with "
            r"architectures \['LlamaForCausalLM'\]",
        ),
        (
            {"model_type": "llama", "hidden_size": 8},
            r"a llama config needs the keys "
            r"num_hidden_layers, intermediate_size, num_attention_heads, vocab_size",
        ),
        (
            dict(LLAMA, tie_word_embeddings="false"),
            r"tie_word_embeddings must be true or false \(a JSON boolean\), got 'false'",
        ),
        (dict(LLAMA, hidden_size=4096.7), r"hidden_size must be an integer >= 1, got 4096\.7"),
        (dict(LLAMA, hidden_size="4096"), r"hidden_size must be an integer >= 1, got '4096'"),
        (
            dict(LLAMA, num_hidden_layers=True),
            r"num_hidden_layers must be an integer >= 1, "
            r"got True",
        ),
        (
            dict(LLAMA, num_key_value_heads=0),
            r"num_key_value_heads must be an integer >= 1, "
            r"got 0",
        ),
        (dict(LLAMA, num_key_value_heads=5), r"num_heads must be divisible by num_kv_heads"),
        (
            {k: v for k, v in LLAMA.items() if k != "max_position_embeddings"},
            r"no max_position_embeddings; give the sequence length \(--seq-len\)",
        ),
        (
            {k: v for k, v in fixture("gemma-7b").items() if k != "head_dim"},
            r"a gemma config needs the key head_dim",
        ),
        (
            {k: v for k, v in fixture("deepseek-v3").items() if k != "kv_lora_rank"},
            r"a deepseek_v3 config needs the key kv_lora_rank",
        ),
        (dict(fixture("deepseek-v3"), moe_layer_freq=2), r"moe_layer_freq must be 1"),
        (
            dict(fixture("qwen2-57b-a14b"), decoder_sparse_step=2),
            r"only leading dense layers are modelled: .* got \[0, 2, 4",
        ),
        (
            dict(fixture("qwen3-30b-a3b"), mlp_only_layers="0"),
            r"mlp_only_layers must be a list of layer indices",
        ),
        (
            dict(fixture("mixtral-8x7b"), num_local_experts=1),
            r"num_local_experts must be an integer >= 2, got 1",
        ),
    ],
)
def test_errors(tmp_path, content, match):
    with pytest.raises(ConfigError, match=match):
        model_from_hf_config(write(tmp_path, content))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"--hf-config must name an existing file, got '.*nope"):
        model_from_hf_config(tmp_path / "nope.json")
