"""The layout space: every point it yields is valid, the derived dp and grad_accum hold, and
the space's own rules and limits are enforced with clear errors."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from surrogate.config.model import ModelConfig
from surrogate.config.presets import get_preset
from surrogate.errors import ConfigError
from surrogate.layouts.degrees import (
    batch_seqs_from_tokens,
    divisors,
    node_copies,
    recompute_layers_for_share,
    stage_layers,
)
from surrogate.layouts.grid import space_table
from surrogate.layouts.labels import layout_label, point_of
from surrogate.layouts.space import LayoutSpace, layout_key, layout_keys

SMALL = dict(
    model=get_preset("1.34b"),
    frameworks=("nanotron",),
    global_batch_seqs=32,
    node_counts=(1,),
    max_cp=2,
    max_vpp=2,
    max_mbs=4,
)


def test_divisors() -> None:
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(1) == [1]


def test_enumeration_yields_valid_layouts_with_the_batch() -> None:
    space = LayoutSpace(**SMALL)  # type: ignore[arg-type]
    configs = space.enumerate()
    assert configs
    keys = {layout_key(c) for c in configs}
    assert len(keys) == len(configs)  # no duplicates
    for cfg in configs:
        lay = cfg.layout
        assert lay.dp * lay.tp * lay.pp * lay.cp == 8
        assert lay.dp * lay.grad_accum * lay.mbs == 32
        assert lay.zero_stage == 0 or lay.dp > 1
        assert lay.tp > 1 or not lay.sequence_parallel
        assert lay.cp <= 2 and lay.vpp <= 2 and lay.mbs <= 4
        assert space.build(point_of(cfg)) == cfg


def test_every_valid_point_is_enumerated() -> None:
    """The enumeration is complete: brute force over the product agrees."""
    space = LayoutSpace(**SMALL)  # type: ignore[arg-type]
    brute = 0
    for point in space.points():
        try:
            space.build(point)
            brute += 1
        except ConfigError:
            pass
    assert brute == len(space.enumerate())


def test_moe_space_has_ep_dividing_dp_cp_and_experts() -> None:
    moe = ModelConfig(
        name="tiny-moe",
        num_layers=4,
        hidden_size=512,
        ffn_hidden_size=1024,
        num_heads=8,
        num_kv_heads=8,
        vocab_size=1000,
        seq_len=1024,
        num_experts=4,
        experts_topk=2,
    )
    configs = LayoutSpace(
        frameworks=("nanotron",),
        model=moe,
        global_batch_seqs=16,
        max_cp=1,
        max_vpp=1,
        recompute_modes=("none",),
    ).enumerate()
    eps = {c.layout.ep for c in configs}
    assert eps == {1, 2, 4}
    assert all((c.layout.dp * c.layout.cp) % c.layout.ep == 0 for c in configs)


def test_megatron_moe_space_folds_ep_over_tp() -> None:
    """Megatron-Core's parallel folding: its layouts take ep dividing tp x dp x cp (experts
    whole on each rank), torchtitan's ep dividing dp x cp."""
    moe = ModelConfig(
        name="tiny-moe",
        num_layers=4,
        hidden_size=512,
        ffn_hidden_size=1024,
        num_heads=8,
        num_kv_heads=8,
        vocab_size=1000,
        seq_len=1024,
        num_experts=8,
        experts_topk=2,
    )
    by = {
        f: LayoutSpace(
            model=moe,
            global_batch_seqs=16,
            max_cp=1,
            max_vpp=1,
            recompute_modes=("none",),
            frameworks=(f,),
        ).enumerate()
        for f in ("megatron", "torchtitan")
    }
    lay = [c.layout for c in by["megatron"]]
    assert all((x.tp * x.dp * x.cp) % x.ep == 0 for x in lay)
    assert any((x.dp * x.cp) % x.ep != 0 for x in lay)
    assert all((c.layout.dp * c.layout.cp) % c.layout.ep == 0 for c in by["torchtitan"])


def test_torchtitan_tp_always_has_sequence_parallel() -> None:
    space = LayoutSpace(**{**SMALL, "frameworks": ("torchtitan",)})  # type: ignore[arg-type]
    assert all(c.layout.sequence_parallel for c in space.enumerate() if c.layout.tp > 1)


def test_build_errors_say_what_must_hold() -> None:
    space = LayoutSpace(**SMALL)  # type: ignore[arg-type]
    point = dict(
        num_nodes=1,
        tp=4,
        pp=4,
        cp=1,
        ep=1,
        vpp=1,
        mbs=1,
        zero_stage=0,
        recompute="none",
        sequence_parallel=False,
        framework="nanotron",
    )
    with pytest.raises(ConfigError, match=r"tp \* pp \* cp must divide the number of GPUs"):
        space.build(point)
    with pytest.raises(ConfigError, match="zero_stage > 0 needs dp > 1"):
        space.build({**point, "tp": 8, "pp": 1, "zero_stage": 1})
    with pytest.raises(ConfigError, match="dp \\* mbs must divide the global batch"):
        space.build({**point, "tp": 1, "pp": 1, "mbs": 32})


def test_limits_and_size_errors() -> None:
    with pytest.raises(ConfigError, match="zero stages must be among"):
        LayoutSpace(**{**SMALL, "zero_stages": (3,)})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="recompute modes must be among"):
        LayoutSpace(**{**SMALL, "recompute_modes": ("some",)})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="framework must be one of"):
        LayoutSpace(**{**SMALL, "frameworks": ("deepspeed",)})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="more than the enumeration limit"):
        LayoutSpace(**SMALL).enumerate(limit=10)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="positive multiple of seq_len"):
        batch_seqs_from_tokens(1000, 4096)
    assert batch_seqs_from_tokens(1 << 20, 4096) == 256


def test_node_sharding_copies_the_shards_once_per_node() -> None:
    """Where the framework copies ZeRO's shards at a point's stage (torchtitan ZeRO-2/3,
    megatron ZeRO-1) the space also holds the layout sharded over one node's data- and
    context-parallel ranks, a copy per node; nowhere else, and not where those ranks fit one
    node (that is full sharding)."""
    assert node_copies(16, 1, 1, 8) == 2 and node_copies(4, 2, 2, 8) == 2
    assert node_copies(2, 1, 8, 8) == 2  # a rank a node: shards nothing, refused by the rules
    assert node_copies(np.array([16, 12]), np.array([1, 1]), np.array([1, 1]), 8).tolist() == [
        2,
        0,
    ]  # 12 ranks over nodes of 8: no whole copies
    space = LayoutSpace(
        model=get_preset("llama3-8b"),
        global_batch_seqs=64,
        node_counts=(2, 4),
        frameworks=("nanotron", "torchtitan", "megatron"),
        max_mbs=2,
        max_vpp=1,
    )
    every = space.enumerate()
    hybrid = [c.layout for c in every if c.layout.dp_replicate > 1]
    assert hybrid and {(lay.framework, lay.zero_stage) for lay in hybrid} == {
        ("torchtitan", 2),
        ("torchtitan", 3),
        ("megatron", 1),
    }
    for lay in hybrid:
        assert lay.dp_replicate == node_copies(lay.dp, lay.cp, lay.tp, 8)
        assert lay.dp * lay.cp * lay.tp // lay.dp_replicate == 8  # a copy fills one node
    assert {layout_key(c) for c in every if c.layout.dp_replicate == 1} == {
        layout_key(c) for c in replace(space, shardings=("full",)).enumerate()
    }
    assert "hsdp2" in layout_label(next(c for c in every if c.layout.dp_replicate == 2))
    with pytest.raises(
        ConfigError,
        match="sharding 'node' copies ZeRO's shards, which "
        "nanotron does not: its sharding must be 'full'",
    ):
        space.build(
            {**point_of(every[0]), "framework": "nanotron", "zero_stage": 1, "sharding": "node"}
        )
    with pytest.raises(
        ConfigError, match="shardings must be among full, node and include 'full', got \\['node'\\]"
    ):
        replace(space, shardings=("node",))


def test_torchtitan_spaces_interleave_any_layer_count():
    """Megatron interleaves only where vpp divides the layers or the layers + 2 (the embedding
    and the loss as a layer slot each); torchtitan's split takes any."""
    model = ModelConfig(
        name="odd",
        num_layers=31,
        hidden_size=512,
        ffn_hidden_size=1024,
        num_heads=8,
        num_kv_heads=8,
        vocab_size=1000,
        seq_len=1024,
    )
    for framework, expected in (("megatron", [1, 3]), ("torchtitan", [1, 2, 3, 4])):
        space = LayoutSpace(
            model=model, global_batch_seqs=16, node_counts=(1,), frameworks=(framework,), max_vpp=4
        )
        assert space.choices()["vpp"] == expected, framework


def test_full_recomputation_of_a_share_of_each_stage() -> None:
    """Where the framework checkpoints some layers, full recomputation takes each share of a
    stage's layers as the nearest count the framework writes; shares that give one count are
    one layout; elsewhere the share is 1 and nothing else is enumerated."""
    model = get_preset("8b")  # 32 layers
    space = LayoutSpace(
        model=model,
        global_batch_seqs=16,
        node_counts=(1,),
        frameworks=("megatron", "torchtitan", "nanotron"),
        max_cp=1,
        max_vpp=2,
        max_mbs=1,
        recompute_modes=("none", "full"),
    )
    configs = space.enumerate()
    ks: dict[tuple[str, int, int], set[int]] = {}
    for c in configs:
        lay = c.layout
        ks.setdefault((lay.framework, lay.pp, lay.vpp), set()).add(lay.recompute_layers)
        assert lay.recompute == "full" or lay.recompute_layers == 0
        assert space.build(point_of(c)) == c
    assert ks[("nanotron", 1, 1)] == {0}
    assert ks[("megatron", 1, 1)] == {0, 8, 16, 24}  # 32 layers x 1/4, 1/2, 3/4
    assert ks[("megatron", 2, 2)] == {0, 4, 8, 12}  # 16 a rank, in 2 chunks of 8
    assert ks[("megatron", 8, 1)] == {0, 1, 2, 3}
    # torchtitan writes floor(layers / n): 3/4 is no such count, and rounds to all.
    assert ks[("torchtitan", 1, 1)] == {0, 8, 16}
    assert len({layout_key(c) for c in configs}) == len(configs)
    assert any("rc-full-k8" in layout_label(c) for c in configs)
    # 24 of 32: torchtitan's 16 and 32 tie, and the larger (all) wins.
    assert recompute_layers_for_share("torchtitan", 32, 1, 1, 0.75) == 0
    assert recompute_layers_for_share("megatron", 32, 4, 1, 0.3) == 2  # 2.4 of 8
    assert stage_layers("torchtitan", 32, 3, 1) == 11  # 34 slots: 12, 11, 11, less 1 at ends
    assert recompute_layers_for_share("torchtitan", 32, 3, 1, 0.5) == 5  # floor(11 / 2)
    every = LayoutSpace(
        **{
            **SMALL,
            "frameworks": ("megatron",),  # type: ignore[arg-type]
            "recompute_shares": (1.0,),
        }
    )
    assert not any(c.layout.recompute_layers for c in every.enumerate())


def test_the_share_is_a_choice_only_where_it_means_something() -> None:
    space = LayoutSpace(**{**SMALL, "frameworks": ("nanotron", "megatron")})  # type: ignore[arg-type]
    ch = space.choices()
    assert ch["recompute_share"] == [0.25, 0.5, 0.75, 1.0]
    assert space.share_choices("full", "megatron") == ch["recompute_share"]
    assert space.share_choices("full", "nanotron") == [1.0]
    assert space.share_choices("none", "megatron") == [1.0]
    # The bound counts the share only where it is a choice: none, selective and full (x4)
    # for megatron, none, selective and full for nanotron; and the sharding likewise: full
    # and node for megatron's ZeRO-1, full for its ZeRO-0 and 3 and for nanotron.
    assert ch["zero_stage"] == [0, 1, 3] and ch["sharding"] == ["full", "node"]
    assert space.sharding_choices(1, "megatron") == ["full", "node"]
    assert (
        space.sharding_choices(3, "megatron") == space.sharding_choices(1, "nanotron") == ["full"]
    )
    others = math.prod(
        len(v)
        for k, v in ch.items()
        if k not in ("recompute", "framework", "zero_stage", "recompute_share", "sharding")
    )
    assert space.size_bound() == (3 * 3 + 6 * (1 + 2 + 1)) * others
    point = dict(
        point_of(space.enumerate()[0]), recompute="none", framework="megatron", recompute_share=0.5
    )
    with pytest.raises(ConfigError, match="recompute_share below 1 needs full recomputation"):
        space.build(point)
    for shares in ((), (0.5,), (0.0, 1.0), (1.5,)):
        with pytest.raises(ConfigError, match="recompute shares must lie in"):
            LayoutSpace(**{**SMALL, "recompute_shares": shares})  # type: ignore[arg-type]
    only = LayoutSpace(**{**SMALL, "frameworks": ("nanotron",)})  # type: ignore[arg-type]
    assert only.choices()["recompute_share"] == [1.0]


def test_a_fixed_share_holds_where_the_share_is_a_choice() -> None:
    """Pinning the share keeps every layout where it means nothing (no recomputation, or a
    framework that recomputes all or none) and checkpoints that share where it does."""
    base = dict(
        model=get_preset("8b"),
        global_batch_seqs=16,
        node_counts=(1,),
        frameworks=("megatron", "nanotron"),
        max_cp=1,
        max_vpp=1,
        max_mbs=1,
    )
    half = LayoutSpace(**base, fixed={"recompute_share": 0.5})  # type: ignore[arg-type]
    every = half.enumerate()
    assert layout_keys(space_table(half)) == [layout_key(c) for c in every]
    kinds = {(c.layout.framework, c.layout.recompute, c.layout.recompute_layers > 0) for c in every}
    assert ("megatron", "full", False) not in kinds  # every layer is not the pinned share
    assert {
        ("megatron", "full", True),
        ("megatron", "none", False),
        ("nanotron", "full", False),
        ("nanotron", "none", False),
    } <= kinds


def test_megatron_accepts_the_layouts_of_its_space_where_it_is_installed() -> None:
    """Runs only where megatron-core is installed (not a project dependency): every distinct
    Megatron layout of an MoE space (tp, pp, cp, ep, vpp, sequence parallelism, the layers
    its block recomputation checkpoints) passes megatron-core 0.16.1's ``TransformerConfig``
    checks and builds its process groups (``initialize_model_parallel``, on a fake process
    group)."""
    pytest.importorskip("megatron.core")
    import torch
    import torch.nn.functional as F
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_config import TransformerConfig

    from microbench.dense_blocks import fake_world

    model = ModelConfig(
        name="tiny-moe",
        num_layers=8,
        hidden_size=512,
        ffn_hidden_size=1024,
        num_heads=8,
        num_kv_heads=4,
        vocab_size=1000,
        seq_len=1024,
        num_experts=4,
        experts_topk=2,
    )
    space = LayoutSpace(
        model=model,
        global_batch_seqs=64,
        node_counts=(2,),
        frameworks=("megatron",),
        max_mbs=1,
        max_vpp=2,
        max_cp=2,
    )
    seen = set()
    for cfg in space.enumerate():
        lay = cfg.layout
        key = (
            lay.tp,
            lay.pp,
            lay.cp,
            lay.ep,
            lay.vpp,
            lay.sequence_parallel,
            lay.recompute,
            lay.recompute_layers,
            lay.dp_replicate,
        )
        if key in seen:
            continue
        seen.add(key)
        recompute: dict[str, object] = {}
        if lay.recompute == "full":  # Megatron-LM's block method: N per model chunk
            recompute = dict(
                recompute_granularity="full",
                recompute_method="block" if lay.recompute_layers else "uniform",
                recompute_num_layers=lay.recompute_layers // lay.vpp or 1,
            )
        elif lay.recompute == "selective":
            recompute = dict(recompute_granularity="selective")
        vpp = lay.vpp if lay.vpp > 1 else None
        TransformerConfig(
            num_layers=model.num_layers,
            hidden_size=model.hidden_size,
            num_attention_heads=model.num_heads,
            num_query_groups=model.num_kv_heads,
            ffn_hidden_size=model.ffn_hidden_size,
            num_moe_experts=model.num_experts,
            moe_router_topk=model.experts_topk,
            moe_token_dispatcher_type="alltoall",
            tensor_model_parallel_size=lay.tp,
            pipeline_model_parallel_size=lay.pp,
            virtual_pipeline_model_parallel_size=vpp,
            context_parallel_size=lay.cp,
            expert_model_parallel_size=lay.ep,
            expert_tensor_parallel_size=1,
            sequence_parallel=lay.sequence_parallel,
            pipeline_dtype=torch.bfloat16,
            bf16=True,
            gated_linear_unit=True,
            activation_func=F.silu,
            normalization="RMSNorm",
            add_bias_linear=False,
            **recompute,
        )  # type: ignore[arg-type]
        with fake_world(16):
            try:
                parallel_state.initialize_model_parallel(
                    tensor_model_parallel_size=lay.tp,
                    pipeline_model_parallel_size=lay.pp,
                    virtual_pipeline_model_parallel_size=vpp,
                    context_parallel_size=lay.cp,
                    expert_model_parallel_size=lay.ep,
                    expert_tensor_parallel_size=1,
                    create_gloo_process_groups=False,
                    num_distributed_optimizer_instances=lay.dp_replicate,
                )
            finally:
                parallel_state.destroy_model_parallel()
    assert any(k[0] > 1 and k[3] > 1 for k in seen) and any(k[4] > 1 for k in seen)
    assert not any(k[0] > 1 and not k[5] for k in seen)  # MoE under tp: sequence parallel
    assert any(k[8] > 1 for k in seen)  # distributed optimizer instances
    assert any(k[3] > 1 and (16 // (k[0] * k[1] * k[2]) * k[2]) % k[3] for k in seen)  # folded
