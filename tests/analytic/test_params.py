"""Free parameters: one typed place, columns per framework version, priors where none fitted."""

from __future__ import annotations

import numpy as np
import pytest

from surrogate.analytic import params, step
from surrogate.analytic.inputs import to_cols
from surrogate.analytic.perf import SpecPerfModel
from surrogate.calibration.parameter_files import shipped_parameter_sets


def test_every_parameter_has_a_prior_inside_its_bounds_and_a_source():
    for p in params.FREE_PARAMETERS:
        assert p.lower <= p.prior <= p.upper, p.name
        assert p.source and p.unit, p.name
        if p.kind != "error":
            assert p.prior_width > 0, p.name


@pytest.mark.parametrize("p", params.FREE_PARAMETERS, ids=lambda p: p.name)
def test_free_space_round_trips(p):
    v = np.array([p.prior, (p.prior + p.upper) / 2])
    np.testing.assert_allclose(p.from_free(p.to_free(v)), v, rtol=1e-9)


def test_columns_carry_the_fitted_set_of_each_framework_version(config):
    shipped = shipped_parameter_sets().as_dict()
    assert "nanotron/pp-fix" in shipped  # fitted on the Playbook (surrogate calibrate --runs)
    c = to_cols(
        [
            config("playbook-1.34b", dp=8, framework="nanotron"),
            config("playbook-1.34b", dp=4, tp=2, framework="torchtitan", zero_stage=3),
        ],
        shipped_parameter_sets(),
    )
    fitted = shipped["nanotron/pp-fix"]["values"]
    assert c["p_layer_overhead_s"][0] == pytest.approx(fitted["layer_overhead_s"])
    # no torchtitan run with tensor parallelism was fitted: the default set
    default = shipped[params.DEFAULT_SET]["values"]
    assert c["p_layer_overhead_s"][1] == pytest.approx(default["layer_overhead_s"])


def test_torchtitan_takes_the_sets_measured_as_it_trains(config):
    """On one GPU or under DDP (ZeRO-0, tp = pp = cp = 1) torchtitan trains under
    torch.autocast: pytorch/autocast's set; under FSDP alone (ZeRO-2 or 3, tp = pp = cp = 1)
    pytorch-fsdp2's; with tp, pp or cp, its own (here the default set: none is fitted)."""
    sets = shipped_parameter_sets().as_dict()
    autocast = sets["pytorch/autocast"]["values"]["layer_overhead_s"]
    fsdp = sets["pytorch-fsdp2/bf16"]["values"]["layer_overhead_s"]
    c = to_cols(
        [
            config("playbook-1.34b", dp=1, framework="torchtitan"),
            config("playbook-1.34b", dp=8, framework="torchtitan"),
            config("playbook-1.34b", dp=8, framework="torchtitan", zero_stage=2),
            config("playbook-1.34b", dp=8, framework="torchtitan", zero_stage=3),
            config("playbook-1.34b", dp=4, tp=2, framework="torchtitan", zero_stage=3),
        ],
        shipped_parameter_sets(),
    )
    default = sets[params.DEFAULT_SET]["values"]["layer_overhead_s"]
    np.testing.assert_allclose(c["p_layer_overhead_s"], [autocast, autocast, fsdp, fsdp, default])


def test_absent_columns_take_the_prior(config):
    c = to_cols([config("playbook-1.34b", dp=8)], shipped_parameter_sets())
    bare = {k: v for k, v in c.items() if not k.startswith("p_")}
    priors = {**bare, **{f"p_{k}": np.array([v]) for k, v in params.PRIORS.items()}}
    perf = SpecPerfModel()
    assert step.step_breakdown(bare, perf)["step_time_s"] == pytest.approx(
        step.step_breakdown(priors, perf)["step_time_s"]
    )


def test_fixed_costs_add_per_layer_and_micro_batch(config):
    c = to_cols([config("playbook-1.34b", dp=8, grad_accum=4)], shipped_parameter_sets())
    perf = SpecPerfModel()
    no_floor = {**c, "p_layer_floor_s": np.array([1e-6])}  # a maximum, not a cost
    base = step.step_breakdown(
        {
            **no_floor,
            "p_layer_overhead_s": np.array([0.0]),
            "p_microbatch_overhead_s": np.array([0.0]),
        },
        perf,
    )
    more = step.step_breakdown(
        {
            **no_floor,
            "p_layer_overhead_s": np.array([1e-3]),
            "p_microbatch_overhead_s": np.array([1e-2]),
        },
        perf,
    )
    layers, m = c["num_layers"][0], c["grad_accum"][0]
    assert more["step_time_s"][0] - base["step_time_s"][0] == pytest.approx(
        m * (layers * 1e-3 + 1e-2)
    )


def test_columns_take_the_sets_given_and_the_shipped_ones_stay(config):
    cfgs = [
        config("playbook-1.34b", dp=8, framework="nanotron"),
        config("playbook-1.34b", dp=4, tp=2, framework="torchtitan", zero_stage=3),
    ]
    shipped = to_cols(cfgs, shipped_parameter_sets())["p_layer_overhead_s"]
    titan = f"torchtitan/{cfgs[1].layout.framework_version}"
    given = params.ParameterSets({titan: {"values": {"layer_overhead_s": 0.05}}})
    inside = to_cols(cfgs, given)["p_layer_overhead_s"]
    assert set(given.sets) == {titan}
    # a version the sets leave out takes its priors; the named one its given value
    assert inside[0] == params.PRIORS["layer_overhead_s"]
    assert inside[1] == 0.05
    np.testing.assert_array_equal(
        to_cols(cfgs, shipped_parameter_sets())["p_layer_overhead_s"], shipped
    )


def test_the_columns_take_the_set_parameter_set_names() -> None:
    """The vectorised rule of ``cols_from_table`` is FrameworkTraits.parameter_set's."""
    from surrogate.analytic.inputs import FRAMEWORK_VERSIONS
    from surrogate.config.presets import get_preset
    from surrogate.layouts.space import LayoutSpace

    space = LayoutSpace(
        model=get_preset("8b"),
        node_counts=(1,),
        global_batch_seqs=64,
        frameworks=("torchtitan", "megatron", "nanotron"),
    )
    cfgs = list(space.enumerate())
    codes = to_cols(cfgs, shipped_parameter_sets())["parameter_code"]
    want = [FRAMEWORK_VERSIONS.index(c.layout.parameter_set()) for c in cfgs]
    np.testing.assert_array_equal(codes, want)
    assert FRAMEWORK_VERSIONS.index("pytorch/autocast") in codes
    assert FRAMEWORK_VERSIONS.index("pytorch-fsdp2/bf16") in codes


def test_a_framework_without_a_set_takes_the_default_then_the_priors():
    default = {"values": {"layer_overhead_s": 7e-4}}
    sets = params.ParameterSets({params.DEFAULT_SET: default})
    assert sets.values_for("torchtitan/main")["layer_overhead_s"] == 7e-4
    # what the default does not hold: the prior
    assert sets.values_for("torchtitan/main")["dp_overlap"] == params.PRIORS["dp_overlap"]
    assert params.ParameterSets().values_for("torchtitan/main") == params.PRIORS


def test_cluster_scoped_parameters_hold_on_their_own_cluster_only(config):
    """A set fitted on one cluster keeps its framework-scoped values everywhere, and its
    cluster-scoped ones (host floors, network latency) on that cluster's profile only."""
    assert "layer_floor_s" in params.CLUSTER_SCOPED
    assert "layer_overhead_s" not in params.CLUSTER_SCOPED
    sets = params.ParameterSets(
        {
            "nanotron/pp-fix": {
                "values": {"layer_floor_s": 0.01, "layer_overhead_s": 5e-4},
                "clusters": ["hf-playbook-cluster"],
            },
            params.DEFAULT_SET: {"values": {"layer_overhead_s": 9e-4}},
        }
    )
    c = to_cols([config("playbook-1.34b", dp=8, framework="nanotron")], sets)
    home = sets.cluster_scoped(c, "hf-playbook-cluster: the Playbook's cluster")
    away = sets.cluster_scoped(c, "H100-SXM-80GB healthy fabric")
    assert home["p_layer_floor_s"][0] == 0.01
    assert away["p_layer_floor_s"][0] == params.PRIORS["layer_floor_s"]
    assert home["p_layer_overhead_s"][0] == away["p_layer_overhead_s"][0] == 5e-4


def test_a_set_that_names_no_cluster_holds_everywhere(config):
    sets = params.ParameterSets({"nanotron/pp-fix": {"values": {"layer_floor_s": 0.01}}})
    c = to_cols([config("playbook-1.34b", dp=8, framework="nanotron")], sets)
    assert sets.cluster_scoped(c, "anywhere")["p_layer_floor_s"][0] == 0.01


def test_the_profile_a_prediction_uses_scopes_the_sets(config):
    """analytic_for: the Playbook's nanotron floor on the Playbook's profile, not on the
    public H100 one."""
    from surrogate.analytic.run import analytic_for
    from surrogate.hardware.perf_models import resolve_perf_model

    sets = params.ParameterSets(
        {
            "nanotron/pp-fix": {
                "values": {"layer_floor_s": 0.05},
                "clusters": ["hf-playbook-cluster"],
            }
        }
    )
    cfg = [config("playbook-1.34b", dp=8, framework="nanotron")]
    home, _, _ = analytic_for(cfg, "hf-playbook-cluster", sets=sets, resolve=resolve_perf_model)
    away, _, _ = analytic_for(cfg, None, sets=sets, resolve=resolve_perf_model)
    assert home["p_layer_floor_s"][0] == 0.05
    assert away["p_layer_floor_s"][0] == params.PRIORS["layer_floor_s"]
