"""Model presets, aliases, Playbook run names and Hugging Face config.json files."""

from __future__ import annotations

import json

import pytest

from surrogate.errors import ConfigError
from surrogate.presets import ALIASES, PRESETS, get_preset, model_from_hf_config, playbook_model

LLAMA3_8B_HF = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "tie_word_embeddings": False, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
}
MIXTRAL_HF = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
    "num_local_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": False,
}


def write(tmp_path, data, name="config.json"):
    d = tmp_path / "my-model"
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def test_presets_named_by_the_issue_exist():
    for name in ("playbook-1.34b", "playbook-3.57b", "playbook-8.86b", "playbook-80b",
                 "playbook-469b", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b"):
        assert PRESETS[name].name == name


@pytest.mark.parametrize("alias,target", sorted(ALIASES.items()))
def test_aliases(alias, target):
    assert get_preset(alias) is PRESETS[target]
    assert get_preset(alias.upper()) is PRESETS[target]


def test_playbook_shapes_follow_the_manifest():
    m = get_preset("1.34b")
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_heads) == (16, 2048, 8192, 32)
    assert m.tie_embeddings and get_preset("3.57b").tie_embeddings
    assert not get_preset("8.86b").tie_embeddings
    for name in ("1.34b", "3.57b", "8.86b", "80b", "469b"):
        p = get_preset(name)
        assert (p.vocab_size, p.seq_len, p.num_kv_heads) == (131072, 4096, p.num_heads)


def test_unknown_preset():
    with pytest.raises(ConfigError, match=r"model must be one of playbook-1.34b, .*got '7b'"):
        get_preset("7b")


def test_playbook_run_names():
    m = playbook_model("8.86G_dp8_tp1_pp1_acc4_mbs2_seq4096_zero1_l32_r1")
    assert m is PRESETS["playbook-8.86b"]
    g = playbook_model("80G_dp4_tp8_pp1_acc1_mbs1_seq4096_zero1_gqa8")
    assert g.num_kv_heads == 8 and g.num_heads == 64 and g.num_layers == 80
    with pytest.raises(ConfigError, match=r"model must be one of .*got '12G'"):
        playbook_model("12G_dp1")


def test_hf_config_llama(tmp_path):
    m = model_from_hf_config(write(tmp_path, LLAMA3_8B_HF))
    ref = PRESETS["llama3-8b"]
    assert m.name == "my-model"
    for f in ("num_layers", "hidden_size", "ffn_hidden_size", "num_heads", "num_kv_heads",
              "vocab_size", "seq_len", "tie_embeddings", "num_experts"):
        assert getattr(m, f) == getattr(ref, f), f
    assert model_from_hf_config(write(tmp_path, LLAMA3_8B_HF), seq_len=4096).seq_len == 4096


def test_hf_config_mixtral(tmp_path):
    m = model_from_hf_config(write(tmp_path, dict(MIXTRAL_HF, _name_or_path="mistralai/x")))
    assert m.name == "mistralai/x"
    assert (m.num_experts, m.experts_topk, m.expert_ffn_hidden_size) == (8, 2, 14336)
    assert m.is_moe and m.seq_len == 32768


def test_hf_config_defaults(tmp_path):
    cfg = {k: v for k, v in LLAMA3_8B_HF.items() if k != "num_key_value_heads"}
    m = model_from_hf_config(write(tmp_path, dict(cfg, tie_word_embeddings=True)))
    assert m.num_kv_heads == m.num_heads and m.tie_embeddings and not m.is_moe


@pytest.mark.parametrize(
    "content,match",
    [
        ("{not json", r"config\.json: not valid JSON \(.* at line 1\)"),
        ("[1, 2]", r"config\.json: a Hugging Face config\.json holds a JSON object"),
        ({"hidden_size": 8}, r"a Hugging Face config needs the keys num_hidden_layers, "
                             r"intermediate_size, num_attention_heads, vocab_size"),
        ({k: v for k, v in LLAMA3_8B_HF.items() if k != "max_position_embeddings"},
         r"no max_position_embeddings; give the sequence length \(--seq-len\)"),
        (dict(LLAMA3_8B_HF, num_key_value_heads=5), r"num_heads must be divisible by num_kv_heads"),
    ],
)
def test_hf_config_errors(tmp_path, content, match):
    with pytest.raises(ConfigError, match=match):
        model_from_hf_config(write(tmp_path, content))


def test_hf_config_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"--hf-config must name an existing file, got '.*nope"):
        model_from_hf_config(tmp_path / "nope.json")
