"""Framework traits and their effect on validation."""

from __future__ import annotations

import pytest

from surrogate.config import LayoutConfig
from surrogate.errors import ConfigError
from surrogate.frameworks import FRAMEWORKS, get_framework


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_traits_are_complete_and_cited(name):
    t = FRAMEWORKS[name]
    assert t.name == name
    assert t.source.strip()
    assert t.versions, "the newest version is the default, so there must be one"
    assert set(t.zero_stages) <= {0, 1, 2, 3} and 0 in t.zero_stages


def test_known_traits():
    assert get_framework("nanotron").fp32_grad_accumulation
    assert get_framework("megatron").fp32_grad_accumulation
    assert not get_framework("torchtitan").fp32_grad_accumulation
    assert get_framework("nanotron").zero_stages == (0, 1)
    assert get_framework("torchtitan").zero_stages == (0, 1, 2, 3)
    assert get_framework("nanotron").versions == ("pre-pp-fix", "pp-fix")


def test_lookup_is_case_and_space_insensitive():
    assert get_framework("  NanoTron ") is FRAMEWORKS["nanotron"]


def test_unknown_framework():
    with pytest.raises(ConfigError, match=r"framework must be one of llm-foundry, megatron, "
                                          r"nanotron, torchtitan, got 'colossal'"):
        get_framework("colossal")


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_layout_accepts_exactly_the_implemented_zero_stages(name, zero_stage):
    if zero_stage in FRAMEWORKS[name].zero_stages:
        assert LayoutConfig(framework=name, zero_stage=zero_stage).zero_stage == zero_stage
    else:
        with pytest.raises(ConfigError, match=rf"framework {name} implements zero_stage .*, "
                                              rf"got {zero_stage}"):
            LayoutConfig(framework=name, zero_stage=zero_stage)


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_layout_versions(name):
    versions = FRAMEWORKS[name].versions
    assert LayoutConfig(framework=name).framework_version == versions[-1]
    for v in versions:
        assert LayoutConfig(framework=name, framework_version=v).framework_version == v
    with pytest.raises(ConfigError, match=rf"framework_version for {name} must be one of "):
        LayoutConfig(framework=name, framework_version="no-such-version")
