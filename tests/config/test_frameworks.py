"""Framework traits and their effect on validation."""

from __future__ import annotations

import re

import numpy as np
import pytest

from surrogate.config.frameworks import FRAMEWORKS, get_framework
from surrogate.config.layout import LayoutConfig
from surrogate.errors import ConfigError


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_traits_are_complete_and_cited(name):
    t = FRAMEWORKS[name]
    assert t.name == name
    assert t.source.strip()
    assert t.versions, "the newest version is the default, so there must be one"
    assert t.zero_stages and set(t.zero_stages) <= {0, 1, 2, 3}
    # ZeRO-0 is the layout's default: only a framework measured sharded lacks it
    assert 0 in t.zero_stages or name == "pytorch-fsdp2"


def test_known_traits():
    assert get_framework("nanotron").fp32_grad_accumulation
    assert get_framework("megatron").fp32_grad_accumulation
    assert not get_framework("torchtitan").fp32_grad_accumulation
    assert get_framework("nanotron").zero_stages == (0, 1)
    assert get_framework("torchtitan").zero_stages == (0, 2, 3)  # FSDP2 has no ZeRO-1
    assert get_framework("torchtitan").sequence_parallel_with_tp == (True,)
    assert get_framework("torchtitan").interleaved_schedule == "Interleaved1F1B"
    assert get_framework("nanotron").recompute_modes == ("none", "full")
    assert not get_framework("nanotron").interleaved_pipeline
    assert not get_framework("llm-foundry").tensor_parallel
    assert not get_framework("llm-foundry").pipeline_parallel
    assert get_framework("nanotron").versions == ("pre-pp-fix", "pp-fix")


def test_lookup_is_case_and_space_insensitive():
    assert get_framework("  NanoTron ") is FRAMEWORKS["nanotron"]


def test_unknown_framework():
    with pytest.raises(
        ConfigError,
        match=r"framework must be one of llm-foundry, megatron, "
        r"nanotron, pytorch, pytorch-fsdp2, torchtitan, "
        r"got 'colossal'",
    ):
        get_framework("colossal")


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_layout_accepts_exactly_the_implemented_zero_stages(name, zero_stage):
    if zero_stage in FRAMEWORKS[name].zero_stages:
        assert LayoutConfig(framework=name, zero_stage=zero_stage).zero_stage == zero_stage
    else:
        with pytest.raises(
            ConfigError,
            match=rf"framework {name} implements zero_stage .*, "
            rf"got {zero_stage}",
        ):
            LayoutConfig(framework=name, zero_stage=zero_stage)


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_layout_versions(name):
    versions = FRAMEWORKS[name].versions
    z = FRAMEWORKS[name].zero_stages[0]
    assert LayoutConfig(framework=name, zero_stage=z).framework_version == versions[-1]
    for v in versions:
        assert (
            LayoutConfig(framework=name, framework_version=v, zero_stage=z).framework_version == v
        )
    with pytest.raises(ConfigError, match=rf"framework_version for {name} must be one of "):
        LayoutConfig(framework=name, framework_version="no-such-version", zero_stage=z)


@pytest.mark.parametrize(
    ("layout", "match"),
    [
        (
            dict(framework="llm-foundry", dp=4, tp=2),
            r"framework llm-foundry has no tensor parallelism: tp must be 1, got tp=2",
        ),
        (
            dict(framework="llm-foundry", dp=4, pp=2),
            r"framework llm-foundry has no pipeline parallelism: pp must be 1, got pp=2",
        ),
        (
            dict(framework="llm-foundry", dp=4, cp=2),
            r"framework llm-foundry has no context parallelism: cp must be 1, got cp=2",
        ),
        (
            dict(framework="torchtitan", zero_stage=1),
            r"framework torchtitan implements zero_stage 0 or 2 or 3, got 1",
        ),
    ],
)
def test_layout_refuses_what_the_framework_does_not_implement(layout, match):
    with pytest.raises(ConfigError, match=match):
        LayoutConfig(**layout)


_LAYOUT = dict(
    dp=4, tp=2, pp=1, cp=1, ep=1, vpp=1, zero_stage=0, recompute="none", sequence_parallel=True
)
_RUNS = {"torchtitan": dict(zero_stage=2)}
"""Changes to ``_LAYOUT`` a framework runs as described (torchtitan: bf16 beside tp needs FSDP)."""


@pytest.mark.parametrize(
    ("name", "change", "match"),
    [
        (
            "torchtitan",
            dict(sequence_parallel=False),
            r"torchtitan's tensor parallelism always runs with sequence parallelism, got tp=2 "
            r"sequence_parallel=False",
        ),
        (
            "torchtitan",
            dict(dp=1, tp=8, zero_stage=2),
            r"zero_stage > 0 needs dp x cp > 1 \(torchtitan shards over its data- and "
            r"context-parallel ranks; one has nothing to shard\), got dp=1 cp=1",
        ),
        (
            "torchtitan",
            dict(zero_stage=0),
            r"torchtitan runs bf16 mixed precision beside tensor or pipeline parallelism only "
            r"under sharded data parallelism \(FSDP\); zero_stage 0 with tp=2 pp=1 trains in "
            r"fp32",
        ),
        (
            "torchtitan",
            dict(zero_stage=0, tp=1, pp=2, sequence_parallel=False),
            r"zero_stage 0 with tp=1 pp=2 trains in fp32: zero_stage 0 needs tp = pp = 1",
        ),
        ("megatron", dict(tp=1, dp=8), r"sequence_parallel needs tp > 1, got tp=1"),
        (
            "nanotron",
            dict(recompute="selective"),
            r"framework nanotron expresses recompute none or full, got 'selective'",
        ),
        (
            "nanotron",
            dict(pp=2, vpp=2),
            r"framework nanotron has no interleaved pipeline schedule: vpp must be 1, got vpp=2",
        ),
    ],
)
def test_runs_as_another_says_why(name, change, match):
    runs = {**_LAYOUT, **_RUNS.get(name, {})}
    assert FRAMEWORKS[name].runs_as_another(**runs) is None
    problem = FRAMEWORKS[name].runs_as_another(**{**runs, **change})
    assert problem is not None
    assert re.search(match, problem), problem


def test_pipeline_schedules_each_framework_runs():
    assert get_framework("nanotron").pipeline_schedules == {"1f1b": "1f1b", "afab": "afab"}
    assert get_framework("torchtitan").pipeline_schedules == {"1f1b": "1F1B", "afab": "GPipe"}
    assert get_framework("megatron").pipeline_schedules == {"1f1b": "1F1B"}
    assert LayoutConfig(framework="nanotron", pp=2, pp_schedule="afab").pp_schedule == "afab"
    # nanotron's engine
    assert LayoutConfig(framework="nanotron", pp=1, pp_schedule="afab").pp_schedule == "afab"
    assert LayoutConfig(pp=4, framework="torchtitan", pp_schedule="afab").pp_schedule == "afab"


@pytest.mark.parametrize(
    "layout,message",
    [
        (
            dict(pp=2, framework="megatron", pp_schedule="afab"),
            "framework megatron has no pipeline schedule 'afab': pp_schedule must be one of 1f1b, "
            "got 'afab'",
        ),
        (
            dict(pp=1, framework="torchtitan", pp_schedule="afab"),
            "framework torchtitan runs a pipeline schedule only with pp > 1: pp_schedule must be "
            "'1f1b' when pp=1, got 'afab'",
        ),
        (
            dict(pp=2, vpp=2, framework="torchtitan", pp_schedule="afab"),
            "pp_schedule 'afab' has no interleaved form here: vpp must be 1, got vpp=2",
        ),
        (
            dict(framework="llm-foundry", pp_schedule="afab"),
            "framework llm-foundry has no pipeline schedule 'afab': "
            "pp_schedule must be one of 1f1b",
        ),
        (dict(pp_schedule="gpipe"), "pp_schedule must be one of 1f1b, afab, got 'gpipe'"),
    ],
)
def test_schedules_a_framework_does_not_run_are_refused(layout, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        LayoutConfig(**layout)


def test_traits_are_hashable_values():
    """Frozen traits can key a cache or a set (the schedule table is left out of the hash)."""
    assert len({*FRAMEWORKS.values(), *FRAMEWORKS.values()}) == len(FRAMEWORKS)


def test_checkpointed_layer_counts_are_what_each_framework_writes():
    """Megatron's block method checkpoints the first N layers of each model chunk (N x vpp of
    a rank's); torchtitan every n-th block of a rank (floor(layers / n)); nanotron all or
    none."""
    megatron, titan = get_framework("megatron"), get_framework("torchtitan")
    assert megatron.checkpointed_layer_counts(8) == (1, 2, 3, 4, 5, 6, 7)
    assert megatron.checkpointed_layer_counts(8, vpp=2) == (2, 4, 6)
    assert titan.checkpointed_layer_counts(8) == (1, 2, 4)  # n = 8..5, 4..3, 2
    assert titan.checkpointed_layer_counts(9) == (1, 2, 3, 4)
    assert get_framework("nanotron").checkpointed_layer_counts(8) == ()
    assert megatron.checkpointed_layer_counts(1) == titan.checkpointed_layer_counts(1) == ()


def test_megatron_moe_with_tp_needs_sequence_parallelism():
    """megatron-core's MoE layer raises in training under tp without sequence parallelism:
    such a layout of an MoE model is not one Megatron runs (a dense model's is), and no
    Megatron MoE layout of a search has it."""
    from surrogate.config.presets import get_preset
    from surrogate.layouts.grid import space_table
    from surrogate.layouts.space import LayoutSpace

    layout = dict(
        dp=4, tp=2, pp=1, cp=1, ep=2, vpp=1, zero_stage=0, recompute="none", sequence_parallel=False
    )
    megatron = get_framework("megatron")
    assert megatron.runs_as_another(**{**layout, "ep": 1}) is None
    assert megatron.runs_as_another(**layout, moe=True) == (
        "megatron's MoE layer refuses tensor parallelism without sequence parallelism in "
        "training: an MoE model with tp=2 needs sequence_parallel, got sequence_parallel=False"
    )
    assert megatron.runs_as_another(**{**layout, "sequence_parallel": True}, moe=True) is None
    assert get_framework("nanotron").runs_as_another(**layout, moe=True) is None
    for model, no_sp in (("mixtral-8x7b", False), ("8b", True)):
        space = LayoutSpace(
            model=get_preset(model),
            global_batch_seqs=64,
            node_counts=(1,),
            frameworks=("megatron",),
            max_cp=1,
            max_mbs=1,
        )
        table = space_table(space)
        assert bool(((table["tp"] > 1) & ~table["sequence_parallel"].astype(bool)).any()) == no_sp


@pytest.mark.parametrize("alias", ["nemo", "megatron-bridge", "Megatron-Core", " NeMo "])
def test_megatron_aliases(alias: str) -> None:
    assert get_framework(alias) is FRAMEWORKS["megatron"]
    from surrogate.config.layout import LayoutConfig

    assert LayoutConfig(framework=alias, tp=2).framework == "megatron"


MEGATRON_TERMS = (
    "keeps_bf16_gradients",
    "fp8_saves_quantized_inputs",
    "tp_comm_overlap",
    "fused_wgrad_accumulation",
    "fp8_head_in_bf16",
    "overlaps_dp_with_compute",
    "hopper_attention_speedup",
    "overlaps_interleaved_pp_comm",
)


def test_a_stated_activation_scale_is_the_bf16_prior_of_megatron_llm_foundry_and_torchtitan():
    """activation_scale: 1.08 (BF16_ACTIVATION_SCALE) for the frameworks whose layer keeps the
    derived count with a bf16 residual stream where they take the default set, within the
    range of the sets fitted on bf16 runs; every other framework takes its parameter set's
    (0), so the sets fitted on their runs do not move."""
    from surrogate.analytic.params import ParameterSets
    from surrogate.calibration.parameter_files import shipped_parameter_sets
    from surrogate.config.framework_traits import BF16_ACTIVATION_SCALE

    stated = {name: fw.activation_scale for name, fw in FRAMEWORKS.items() if fw.activation_scale}
    assert stated == {
        "megatron": BF16_ACTIVATION_SCALE,
        "llm-foundry": BF16_ACTIVATION_SCALE,
        "torchtitan": BF16_ACTIVATION_SCALE,
        "pytorch-fsdp2": BF16_ACTIVATION_SCALE,
    }
    sets: ParameterSets = shipped_parameter_sets()
    bf16 = [
        sets.values_for(v)["activation_scale"] for v in ("nanotron/pp-fix", "pytorch-fsdp2/bf16")
    ]
    assert min(bf16) - 0.01 <= BF16_ACTIVATION_SCALE <= max(bf16) + 0.01


def test_megatron_terms_are_scoped_to_megatron():
    """Each framework term read from Megatron-Core's and Transformer Engine's sources is
    Megatron's alone: every other framework keeps the field's default, so their predictions
    (and the sets fitted on their runs) do not move."""
    from dataclasses import fields

    from surrogate.config.framework_traits import FrameworkTraits

    defaults = {f.name: f.default for f in fields(FrameworkTraits) if f.name in MEGATRON_TERMS}
    assert set(defaults) == set(MEGATRON_TERMS)
    megatron = FRAMEWORKS["megatron"]
    assert all(getattr(megatron, name) != default for name, default in defaults.items())
    for name, fw in FRAMEWORKS.items():
        if name != "megatron":
            assert {k: getattr(fw, k) for k in defaults} == defaults, name
    assert megatron.pipeline_split == "megatron"
    for term in (
        "tp_comm_synchronous",
        "pipeline_keeps_fsdp_unsharded",
        "reduces_every_microbatch",
        "fp8_experts_in_bf16",
    ):
        assert getattr(FRAMEWORKS["torchtitan"], term), term
        assert not any(getattr(fw, term) for n, fw in FRAMEWORKS.items() if n != "torchtitan")
    # FSDP2 with an fp32 reduce_dtype: torchtitan's and the project's own FSDP2 step's
    fp32 = {n for n, fw in FRAMEWORKS.items() if fw.reduces_gradients_in_fp32}
    assert fp32 == {"torchtitan", "pytorch-fsdp2"}


def test_the_measured_fp8_speed_up_is_that_of_the_frameworks_calling_scaled_mm():
    """fp8_gemm_speedup: the H100's measured fp8 over bf16 GEMM speed (SCALED_MM_FP8_SPEEDUP)
    for Megatron-Core (Transformer Engine on cuBLASLt) and torchtitan (torchao's Float8
    linears call torch._scaled_mm); every other framework keeps the profile's fp8 curve (0), so
    the sets fitted on llm-foundry's fp8 runs do not move."""
    from surrogate.config.framework_traits import SCALED_MM_FP8_SPEEDUP

    stated = {name: fw.fp8_gemm_speedup for name, fw in FRAMEWORKS.items() if fw.fp8_gemm_speedup}
    assert stated == {"megatron": SCALED_MM_FP8_SPEEDUP, "torchtitan": SCALED_MM_FP8_SPEEDUP}
    assert 1.0 < SCALED_MM_FP8_SPEEDUP <= 2.0  # the datasheet's fp8 / bf16 peak is the bound


def test_stated_memory_values_hold_where_no_set_fitted_on_memory_is_at_hand(config):
    """torchtitan's bf16 activation prior and 12 bytes per logit hold on its tp / pp / cp
    layouts (the default set); on one GPU or under FSDP alone it takes the measured sets'
    values while they are at hand, and the stated ones once they are not (a user who never
    measured them): the activation prior where the residual stream is bf16 (not under
    autocast), the logit bytes at tp 1."""
    from surrogate.analytic.inputs import to_cols
    from surrogate.analytic.memory import activation_scale, logits_bytes
    from surrogate.analytic.params import DEFAULT_SET, ParameterSets
    from surrogate.calibration.parameter_files import shipped_parameter_sets
    from surrogate.config.framework_traits import BF16_ACTIVATION_SCALE, UNFUSED_CE_LOGIT_BYTES

    shipped = shipped_parameter_sets()
    without = ParameterSets({k: v for k, v in shipped.sets.items() if k == DEFAULT_SET})
    layouts = [dict(dp=1), dict(dp=8, zero_stage=3), dict(dp=4, tp=2, zero_stage=3)]
    configs = [config("llama3-8b", framework="torchtitan", **kw) for kw in layouts]
    c, bare = to_cols(configs, shipped), to_cols(configs, without)
    assert activation_scale(c).tolist() == [
        shipped.values_for("pytorch/autocast")["activation_scale"],
        shipped.values_for("pytorch-fsdp2/bf16")["activation_scale"],
        BF16_ACTIVATION_SCALE,
    ]
    default = without.values_for(DEFAULT_SET)
    assert activation_scale(bare).tolist() == [
        default["activation_scale"],  # autocast: an fp32 residual stream
        BF16_ACTIVATION_SCALE,
        BF16_ACTIVATION_SCALE,
    ]
    per_logit = logits_bytes(bare) / (
        bare["mbs"] * bare["seq_len"] * bare["vocab_size"] / bare["tp"]
    )
    assert per_logit.tolist() == pytest.approx(
        [UNFUSED_CE_LOGIT_BYTES, UNFUSED_CE_LOGIT_BYTES, default["logit_bytes"]]
    )
    shipped_logit = logits_bytes(c) / (c["mbs"] * c["seq_len"] * c["vocab_size"] / c["tp"])
    assert shipped_logit[0] == pytest.approx(shipped.values_for("pytorch/autocast")["logit_bytes"])
    # the OOM margin: the measured sets' own where they are at hand, the prior's elsewhere
    assert c["memory_fitted"].tolist() == [1.0, 1.0, 0.0]
    assert bare["memory_fitted"].tolist() == [0.0, 0.0, 0.0]


def test_a_set_fitted_without_memory_leaves_the_stated_values():
    """A set fitted on runs that measured no memory (its ``runs`` record says 0, or a set
    without a record: values given by hand or saved before the record) keeps its memory
    parameters at the priors, so the stated values hold beside it; one fitted on memory
    stands, and so does one a fit marks as its own (ParameterSets.as_own)."""
    from surrogate.analytic.inputs import FRAMEWORK_VERSIONS
    from surrogate.analytic.params import ParameterSets

    code = FRAMEWORK_VERSIONS.index("megatron/core")
    for entry, own in (
        ({"values": {}, "runs": {"time": 26, "memory": 0}}, False),
        ({"values": {}, "runs": {"time": 26, "memory": 40}}, True),
        ({"values": {}}, False),
    ):
        sets = ParameterSets({"megatron/core": entry})
        assert sets.memory_fitted_codes(np.array([code])).tolist() == [own]
    for sets in (ParameterSets(), ParameterSets({"megatron/core": {"values": {}}})):
        marked = sets.as_own(["megatron/core"])
        assert marked.memory_fitted_codes(np.array([code])).tolist() == [True]
        assert marked.values_for("megatron/core") == sets.values_for("megatron/core")


def test_torchtitans_activation_scale_holds_where_it_takes_the_default_set(config):
    """torchtitan's bf16 prior holds on its tp / pp / cp layouts (the default set); on one GPU
    or under FSDP alone it takes the measured sets' own value (autocast's fp32 residuals,
    FSDP2's bf16)."""
    from surrogate.analytic.inputs import to_cols
    from surrogate.analytic.memory import activation_scale
    from surrogate.calibration.parameter_files import shipped_parameter_sets
    from surrogate.config.framework_traits import BF16_ACTIVATION_SCALE

    sets = shipped_parameter_sets()
    layouts = [dict(dp=1), dict(dp=8, zero_stage=3), dict(dp=4, tp=2, zero_stage=3)]
    c = to_cols([config("llama3-8b", framework="torchtitan", **kw) for kw in layouts], sets)
    got = activation_scale(c).tolist()
    assert got[0] == sets.values_for("pytorch/autocast")["activation_scale"]
    assert got[1] == sets.values_for("pytorch-fsdp2/bf16")["activation_scale"]
    assert got[2] == BF16_ACTIVATION_SCALE
