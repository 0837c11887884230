"""The Playbook's rules of thumb: TP inside a node first, PP only when needed, a fitting layout."""

from __future__ import annotations

from surrogate.config.presets import get_preset
from surrogate.layouts.rules import analytic_fits, rule_key, rules_order, rules_pick
from surrogate.layouts.space import LayoutSpace


def test_pick_maximises_tp_inside_a_node_and_avoids_pp() -> None:
    space = LayoutSpace(
        frameworks=("nanotron",),
        model=get_preset("8.86b"),
        global_batch_seqs=64,
        node_counts=(2,),
        max_cp=1,
        max_vpp=1,
        recompute_modes=("none",),
    )
    cfg = rules_pick(space)
    assert cfg.layout.tp == 8  # the node size
    assert cfg.layout.pp == 1
    assert analytic_fits([cfg])[0]
    assert cfg.layout.zero_stage == 1


def test_pipeline_only_when_memory_needs_it() -> None:
    space = LayoutSpace(
        frameworks=("nanotron",),
        model=get_preset("80b"),
        global_batch_seqs=64,
        node_counts=(4,),
        max_cp=1,
        max_vpp=1,
        recompute_modes=("none",),
    )
    cfg = rules_pick(space)
    assert cfg.layout.tp == 8 and cfg.layout.pp > 1
    assert analytic_fits([cfg])[0]


def test_order_puts_fitting_layouts_first() -> None:
    space = LayoutSpace(
        frameworks=("nanotron",),
        model=get_preset("8.86b"),
        global_batch_seqs=32,
        node_counts=(1,),
        max_cp=1,
        max_vpp=1,
        recompute_modes=("none",),
    )
    configs = space.enumerate()
    order = rules_order(configs)
    fits = analytic_fits(configs)
    ranked = [bool(fits[i]) for i in order]
    assert ranked == sorted(ranked, reverse=True)
    assert rule_key(configs[order[0]], True) <= rule_key(configs[order[-1]], bool(fits[order[-1]]))
