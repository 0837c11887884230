"""The documented defaults per framework: which apply to a configuration, overrides, the
machine-readable record."""

from __future__ import annotations

from surrogate.config.framework_defaults import (
    FRAMEWORK_DEFAULTS,
    assumed,
    assumptions_text,
    defaults_for,
)
from surrogate.config.frameworks import FRAMEWORKS


def test_every_entry_is_a_framework_with_sources() -> None:
    assert set(FRAMEWORK_DEFAULTS) <= set(FRAMEWORKS)
    for entries in FRAMEWORK_DEFAULTS.values():
        assert all(d.source and d.value for d in entries)
        assert len({d.setting for d in entries}) == len(entries)


def test_conditional_defaults_and_aliases() -> None:
    assert defaults_for("nemo") == defaults_for("megatron-bridge") == defaults_for("megatron")
    assert defaults_for("nanotron") == ()
    bf16 = {s for s, _, _ in assumed("megatron", tp=1, pp=1, dtype="bf16")}
    assert "sequence_parallel" not in bf16 and "fp8_recipe" not in bf16
    assert "distributed_optimizer" in bf16
    fp8 = dict((s, v) for s, v, _ in assumed("megatron", tp=4, pp=8, dtype="fp8"))
    assert fp8["sequence_parallel"] == "on" and fp8["fp8_recipe"].startswith("tensorwise")
    assert fp8["pipeline_split"].startswith("even")
    assert "expert_tensor_parallel" not in fp8
    moe = dict((s, v) for s, v, _ in assumed("megatron", tp=2, pp=1, ep=8, dtype="fp8"))
    assert moe["expert_tensor_parallel"].startswith("1") and "DeepEP" in moe["moe_dispatcher"]


def test_overrides_and_text() -> None:
    items = assumed("megatron", {"recompute": "full|a recipe"}, tp=2, pp=1, dtype="bf16")
    recompute = [i for i in items if i[0] == "recompute"]
    assert recompute == [("recompute", "full", "a recipe")]
    text = assumptions_text(items)
    assert "recompute=full" in text and "distributed_optimizer=on" in text
    assert " " not in text


def test_the_lines_predict_and_search_print():
    from surrogate.config.framework_defaults import defaults_line, space_defaults_line
    from surrogate.config.layout import LayoutConfig

    line = defaults_line(
        LayoutConfig(
            framework="nemo", tp=4, pp=2, dp=1, zero_stage=1, sequence_parallel=True, dtype="fp8"
        )
    )
    assert line.startswith("megatron defaults assumed (megatron-bridge 0.3.1, megatron-core")
    assert "distributed optimizer on" in line and "sequence parallel on" in line
    assert "distributed optimizer" not in defaults_line(LayoutConfig(framework="megatron"))
    assert defaults_line(LayoutConfig(framework="nanotron")) == ""
    space = space_defaults_line("megatron-bridge")
    assert "tp comm overlap on [tp > 1]" in space and "distributed optimizer" not in space
    assert space_defaults_line("nanotron") == ""
    titan = space_defaults_line("torchtitan")
    assert titan.startswith("torchtitan defaults assumed (torchtitan 0.2.2)")
    assert "gradient reduction fp32" in titan and "routed experts in bf16" in titan


def test_torchtitan_states_its_fp32_reduction_and_float8_recipe():
    from surrogate.config.framework_defaults import defaults_line
    from surrogate.config.layout import LayoutConfig

    bf16 = defaults_line(LayoutConfig(framework="torchtitan", dp=8, zero_stage=3))
    assert bf16 == "torchtitan defaults assumed (torchtitan 0.2.2): gradient reduction fp32"
    fp8 = dict((s, v) for s, v, _ in assumed("torchtitan", tp=2, pp=1, dtype="fp8"))
    assert fp8["float8"].startswith("tensorwise") and fp8["async_tp"] == "off"
