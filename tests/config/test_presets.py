"""Model presets, aliases and Playbook run names (config.json files: test_hf_config.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from surrogate.config.presets import ALIASES, PRESETS, get_preset, model_values, playbook_model
from surrogate.errors import ConfigError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "hf_configs"


def test_presets_named_by_the_issue_exist():
    for name in (
        "playbook-1.34b",
        "playbook-3.57b",
        "playbook-8.86b",
        "playbook-80b",
        "playbook-469b",
        "llama3-8b",
        "llama3-70b",
        "llama3-405b",
        "mixtral-8x7b",
    ):
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


def test_model_values_takes_the_hf_config_over_the_preset(tmp_path):
    path = tmp_path / "config.json"
    path.write_text((FIXTURES / "gemma-7b.json").read_text())
    values = model_values("8b", path, seq_len=4096)
    assert values["head_dim"] == 256 and values["hidden_size"] == 3072
    assert model_values("8b", None)["hidden_size"] == 4096 and model_values(None, None) == {}
