"""Typed configurations: conventions, every validation rule, flat-row coercion."""

from __future__ import annotations

import dataclasses
import math

import pytest

from surrogate.config.frameworks import DEFAULT_FRAMEWORK
from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.model import ModelConfig
from surrogate.config.presets import PRESETS, get_preset
from surrogate.config.training import (
    CONFIG_COLUMNS,
    TrainingConfig,
    config_from_flat,
    config_to_flat,
)
from surrogate.errors import ConfigError, SurrogateError

SMALL = dict(
    num_layers=8,
    hidden_size=1024,
    ffn_hidden_size=4096,
    num_heads=16,
    num_kv_heads=8,
    vocab_size=32000,
    seq_len=2048,
)
MOE = dict(SMALL, num_experts=8, experts_topk=2, moe_ffn_hidden_size=1024)
MLA = dict(
    SMALL,
    num_kv_heads=16,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
)


def training(
    model: dict | None = None,
    *,
    num_nodes: int = 1,
    gpu: str = "H100",
    global_batch_seqs: int | None = None,
    **layout,
) -> TrainingConfig:
    return TrainingConfig(
        model=ModelConfig(**(model or SMALL)),
        cluster=ClusterConfig(gpu=gpu, num_nodes=num_nodes),
        layout=LayoutConfig(**{"framework": "nanotron", **layout}),
        global_batch_seqs=global_batch_seqs,
    )


# --- conventions -----------------------------------------------------------------------------


@pytest.mark.parametrize("dp,tp,pp,cp", [(8, 1, 1, 1), (2, 2, 2, 1), (1, 4, 1, 2), (2, 1, 2, 2)])
def test_world_size_is_dp_tp_pp_cp(dp, tp, pp, cp):
    cfg = training(dp=dp, tp=tp, pp=pp, cp=cp)
    assert cfg.layout.dp * cfg.layout.tp * cfg.layout.pp * cfg.layout.cp == cfg.cluster.num_gpus
    assert cfg.layout.model_parallel_size == tp * pp * cp


def test_ep_is_carved_out_of_dp_cp_and_does_not_multiply_the_world():
    # Playbook dp=2 ep=4 on 8 GPUs is our dp=8 ep=4: the world stays dp x tp x pp x cp.
    cfg = training(MOE, dp=8, ep=4)
    assert cfg.cluster.num_gpus == 8
    cfg = training(MOE, dp=4, cp=2, ep=8)  # ep may span dp x cp
    assert cfg.layout.ep == 8


def test_megatron_folds_its_experts_over_tp_dp_cp():
    """Megatron-Core's MoE parallel folding (expert tensor parallelism 1): ep divides
    tp x dp x cp, so Qwen3 235B's recipe (tp 2, dp 16, ep 32) is a layout; the other
    frameworks still need ep to divide dp x cp."""
    model = dict(MOE, num_experts=16)
    cfg = training(
        model, num_nodes=2, dp=2, tp=4, pp=2, ep=8, framework="megatron", sequence_parallel=True
    )
    assert cfg.layout.ep == 8 and cfg.layout.dp * cfg.layout.cp == 2
    with pytest.raises(ConfigError, match=r"ep must divide dp \* cp .*got dp=2 cp=1 ep=8"):
        training(model, num_nodes=2, dp=2, tp=4, pp=2, ep=8, framework="torchtitan")


@pytest.mark.parametrize("dp,cp,mbs,grad_accum", [(8, 1, 1, 1), (4, 2, 2, 8), (2, 4, 3, 5)])
def test_global_batch_tokens_is_dp_grad_accum_mbs_seq_len(dp, cp, mbs, grad_accum):
    cfg = training(dp=dp, cp=cp, mbs=mbs, grad_accum=grad_accum)
    assert cfg.batch_seqs == dp * grad_accum * mbs
    assert cfg.batch_tokens == dp * grad_accum * mbs * SMALL["seq_len"]  # cp does not multiply


def test_defaults_and_canonical_names():
    lay = LayoutConfig(framework=" TorchTitan ")
    assert lay.framework == "torchtitan"
    assert lay.framework_version == "main"
    assert LayoutConfig(framework="nanotron").framework_version == "pp-fix"  # the newest
    assert ClusterConfig(gpu="h100").gpu == "H100-SXM-80GB"
    m = ModelConfig(**MOE)
    assert m.is_moe and m.attention_head_dim == 64 and m.expert_ffn_hidden_size == 1024
    assert m.head_dim == 0 and m.value_head_dim == 64 and not m.is_mla
    mla = ModelConfig(**MLA)
    assert mla.is_mla and (mla.attention_head_dim, mla.value_head_dim) == (192, 128)
    assert ModelConfig(**dict(SMALL, head_dim=96)).attention_head_dim == 96
    assert ModelConfig(**dict(MOE, moe_ffn_hidden_size=0)).expert_ffn_hidden_size == 4096


def test_configs_are_frozen_and_keyword_only():
    lay = LayoutConfig(framework="nanotron")
    with pytest.raises(dataclasses.FrozenInstanceError):
        lay.dp = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        LayoutConfig(2)  # type: ignore[misc]


def test_config_error_is_a_value_error_and_a_surrogate_error():
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, SurrogateError)


# --- ModelConfig rules -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(num_layers=8.5), r"ModelConfig\.num_layers must be an integer >= 1, got 8\.5"),
        (dict(num_layers="8"), r"ModelConfig\.num_layers must be an integer >= 1, got '8'"),
        (dict(hidden_size=True), r"ModelConfig\.hidden_size must be an integer >= 1, got True"),
        (dict(num_layers=0), r"ModelConfig\.num_layers must be an integer >= 1, got 0"),
        (dict(seq_len=-4), r"ModelConfig\.seq_len must be an integer >= 1, got -4"),
        (dict(num_experts=-1), r"ModelConfig\.num_experts must be an integer >= 0, got -1"),
        (dict(tie_embeddings="yes"), r"ModelConfig\.tie_embeddings must be true or false"),
        (
            dict(hidden_size=1000),
            r"hidden_size must be divisible by num_heads, got "
            r"hidden_size=1000 num_heads=16",
        ),
        (
            dict(num_kv_heads=3),
            r"num_heads must be divisible by num_kv_heads, got num_heads=16 "
            r"num_kv_heads=3",
        ),
        (dict(num_experts=1), r"num_experts must be 0 \(dense\) or >= 2, got 1"),
        (
            dict(num_experts=8, experts_topk=0),
            r"experts_topk must be between 1 and "
            r"num_experts=8, got 0",
        ),
        (
            dict(num_experts=8, experts_topk=9),
            r"experts_topk must be between 1 and "
            r"num_experts=8, got 9",
        ),
        (dict(experts_topk=2), r"experts_topk and moe_ffn_hidden_size need num_experts >= 2"),
        (dict(moe_ffn_hidden_size=512), r"need num_experts >= 2, got num_experts=0"),
        # variants of the Llama block (head_dim, shared experts, dense layers, MLA)
        (dict(head_dim=-1), r"ModelConfig\.head_dim must be an integer >= 0, got -1"),
        (
            dict(shared_expert_ffn_hidden_size=512),
            r"shared_expert_ffn_hidden_size and "
            r"num_dense_layers need num_experts >= 2",
        ),
        (
            dict(MOE, num_dense_layers=8),
            r"num_dense_layers must be < num_layers .*got "
            r"num_dense_layers=8 num_layers=8",
        ),
        (
            dict(qk_rope_head_dim=64),
            r"the MLA fields need kv_lora_rank >= 1, got "
            r"kv_lora_rank=0 qk_rope_head_dim=64",
        ),
        (
            dict(kv_lora_rank=512, qk_rope_head_dim=64, v_head_dim=128),
            r"ModelConfig\.qk_nope_head_dim must be an integer >= 1, got 0",
        ),
        (dict(MLA, head_dim=128), r"head_dim must be 0 with MLA"),
        (
            dict(MOE, gated_mlp=False),
            r"gated_mlp=False \(a two-matrix MLP\) is modelled for "
            r"dense models only, got num_experts=8",
        ),
        (dict(gated_mlp="no"), r"ModelConfig\.gated_mlp must be true or false"),
        (
            dict(MLA, num_kv_heads=4),
            r"MLA has one key and value per head: num_kv_heads must "
            r"equal num_heads, got num_kv_heads=4 num_heads=16",
        ),
    ],
)
def test_model_rules(change, match):
    with pytest.raises(ConfigError, match=match):
        ModelConfig(**{**SMALL, **change})


# --- ClusterConfig and LayoutConfig rules ----------------------------------------------------


def test_unknown_gpu():
    with pytest.raises(ConfigError, match=r"gpu must be one of .*H100-SXM-80GB.*got 'V100'"):
        ClusterConfig(gpu="V100")


@pytest.mark.parametrize("name", ["gpus_per_node", "num_nodes"])
def test_cluster_counts_are_positive(name):
    with pytest.raises(ConfigError, match=rf"ClusterConfig\.{name} must be an integer >= 1, got 0"):
        ClusterConfig(**{name: 0})


@pytest.mark.parametrize(
    "name", ["dp", "tp", "pp", "cp", "ep", "vpp", "mbs", "grad_accum", "dp_replicate"]
)
@pytest.mark.parametrize("value", [0, -1, 2.5])
def test_layout_degrees_are_positive_integers(name, value):
    with pytest.raises(ConfigError, match=rf"LayoutConfig\.{name} must be an integer >= 1"):
        LayoutConfig(**{name: value})


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(zero_stage=4), r"zero_stage must be 0, 1, 2 or 3, got 4"),
        (dict(zero_stage=-1), r"LayoutConfig\.zero_stage must be an integer >= 0, got -1"),
        (
            dict(recompute="partial"),
            r"recompute must be one of none, selective, full, "
            r"got 'partial'",
        ),
        (dict(dtype="fp16"), r"dtype must be one of bf16, fp8, got 'fp16'"),
        (
            dict(recompute="selective", recompute_layers=2),
            r"recompute_layers counts the layers of a stage that full recomputation checkpoints: "
            r"it needs recompute='full', got recompute='selective' recompute_layers=2",
        ),
        (
            dict(recompute="full", recompute_layers=-1),
            r"LayoutConfig\.recompute_layers must be an integer >= 0, got -1",
        ),
        (
            dict(sequence_parallel=1),
            r"LayoutConfig\.sequence_parallel must be true or false, "
            r"got 1",
        ),
        (
            dict(framework="deepspeed"),
            r"framework must be one of llm-foundry, megatron, "
            r"nanotron, pytorch, pytorch-fsdp2, torchtitan, "
            r"got 'deepspeed'",
        ),
        (dict(zero_stage=3), r"framework nanotron implements zero_stage 0 or 1, got 3"),
        (
            dict(framework="megatron", zero_stage=2),
            r"framework megatron implements zero_stage "
            r"0 or 1 or 3, got 2",
        ),
        (
            dict(framework_version="v2"),
            r"framework_version for nanotron must be one of "
            r"pre-pp-fix, pp-fix, got 'v2'",
        ),
        (
            dict(framework="torchtitan", framework_version="pp-fix"),
            r"framework_version for torchtitan must be one of main, got 'pp-fix'",
        ),
        (dict(vpp=2), r"vpp > 1 needs pp > 1, got pp=1 vpp=2"),
        (
            dict(framework="torchtitan", dp_replicate=2),
            r"dp_replicate > 1 copies ZeRO's shards: it needs zero_stage >= 1 .*got "
            r"dp_replicate=2 zero_stage=0",
        ),
        (
            dict(zero_stage=1, dp_replicate=2),
            r"framework nanotron shards over every "
            r"data-parallel rank: dp_replicate must be 1, got "
            r"dp_replicate=2 zero_stage=1",
        ),
        (
            dict(framework="megatron", zero_stage=3, dp_replicate=2),
            r"framework megatron copies ZeRO's shards \(dp_replicate > 1\) with zero_stage 1 "
            r"only, got dp_replicate=2 zero_stage=3",
        ),
        (
            dict(pp=2, vpp=2),
            r"framework nanotron has no interleaved pipeline schedule: "
            r"vpp must be 1, got vpp=2",
        ),
    ],
)
def test_layout_rules(change, match):
    with pytest.raises(ConfigError, match=match):
        LayoutConfig(**{"framework": "nanotron", **change})


# --- TrainingConfig rules (the parts against each other) -------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            dict(dp=4, tp=4),
            r"dp \* tp \* pp \* cp must equal the number of GPUs \(8 = 1 nodes x "
            r"8\), got dp=4 tp=4 pp=1 cp=1 \(16\)",
        ),
        (dict(num_nodes=2, dp=8), r"number of GPUs \(16 = 2 nodes x 8\).*\(8\)"),
        (
            dict(model=dict(SMALL, num_heads=16, num_kv_heads=2), dp=2, tp=4),
            r"num_kv_heads must be divisible by tp, got num_kv_heads=2 tp=4",
        ),
        (
            dict(model=dict(SMALL, hidden_size=1536, num_heads=12, num_kv_heads=12), dp=1, tp=8),
            r"num_heads must be divisible by tp, got num_heads=12 tp=8",
        ),
        (
            dict(model=dict(SMALL, num_layers=2), dp=2, pp=4),
            r"num_layers must be >= pp \* vpp .*got num_layers=2 pp=4 vpp=1 \(4\)",
        ),
        (
            dict(model=dict(SMALL, num_layers=5), dp=4, pp=2, vpp=2, framework="megatron"),
            r"num_layers must be divisible by pp \* vpp for interleaved pipelines "
            r"\(Megatron's also takes num_layers \+ 2 divisible, the embedding and the loss as a "
            r"layer each; torchtitan's split takes any count\), got num_layers=5 pp=2 vpp=2 "
            r"\(4\)",
        ),
        (
            dict(model=dict(SMALL, num_layers=6), dp=4, pp=2, recompute="full", recompute_layers=4),
            r"recompute_layers counts the checkpointed layers of one pipeline stage: it must be "
            r"at most num_layers / pp, got recompute_layers=4 num_layers=6 pp=2",
        ),
        (
            dict(model=dict(SMALL, seq_len=1004), dp=1, cp=8),
            r"seq_len must be divisible by cp, got seq_len=1004 cp=8",
        ),
        (dict(dp=8, ep=2), r"ep > 1 needs an MoE model \(num_experts >= 2\), got ep=2"),
        (
            dict(model=dict(MOE, num_experts=6), dp=8, ep=4),
            r"num_experts must be divisible by ep, got num_experts=6 ep=4",
        ),
        (dict(model=MOE, dp=2, tp=4, ep=4), r"ep must divide dp \* cp .*got dp=2 cp=1 ep=4"),
        (
            dict(
                model=dict(MOE, num_experts=16),
                num_nodes=2,
                dp=1,
                tp=4,
                cp=2,
                pp=2,
                ep=16,
                framework="megatron",
                sequence_parallel=True,
            ),
            r"ep must divide tp \* dp \* cp \(Megatron-Core folds its experts over the tensor, "
            r"data and context parallel ranks, expert tensor parallelism 1\), got tp=4 dp=1 cp=2 "
            r"ep=16",
        ),
        (
            dict(dp=8, zero_stage=1, dp_replicate=3, framework="megatron"),
            r"dp_replicate must divide dp \(each copy of ZeRO's shards is dp / dp_replicate "
            r"data-parallel ranks\), got dp=8 dp_replicate=3",
        ),
        (
            dict(dp=8, zero_stage=1, dp_replicate=8, framework="megatron"),
            r"dp_replicate must be less than dp \* cp .*got dp=8 cp=1 dp_replicate=8",
        ),
        (
            dict(model=MOE, dp=8, ep=8, zero_stage=1, dp_replicate=2, framework="megatron"),
            r"ep must divide dp \* cp / dp_replicate .*got dp=8 cp=1 dp_replicate=2 ep=8",
        ),
        (
            dict(gpu="A100-SXM-80GB", dp=8, dtype="fp8"),
            r"dtype 'fp8' needs a GPU with FP8 tensor cores, got gpu=A100-SXM-80GB",
        ),
        (
            dict(dp=8, mbs=2, grad_accum=4, global_batch_seqs=32),
            r"dp \* grad_accum \* mbs must equal the global batch of 32 sequences, got dp=8 "
            r"grad_accum=4 mbs=2 \(64\)",
        ),
        (
            dict(dp=8, global_batch_seqs=0),
            r"TrainingConfig\.global_batch_seqs must be an integer >= 1, got 0",
        ),
    ],
)
def test_training_rules(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        training(**kwargs)


def test_hybrid_sharding_is_copies_of_the_shards_where_the_framework_has_them():
    """torchtitan's HSDP (ZeRO-2 and 3) and Megatron's distributed optimizer instances
    (ZeRO-1) shard over dp x cp / dp_replicate ranks; with cp the shard group takes the cp
    ranks too, so dp_replicate may equal dp."""
    for framework, zero in (("torchtitan", 2), ("torchtitan", 3), ("megatron", 1)):
        cfg = training(dp=8, zero_stage=zero, dp_replicate=4, framework=framework)
        assert cfg.layout.dp_replicate == 4 and cfg.runs_as_another() is None
    assert (
        training(
            dp=2, cp=4, zero_stage=3, dp_replicate=2, framework="torchtitan"
        ).layout.dp_replicate
        == 2
    )


def test_only_frameworks_with_partial_recomputation_run_some_layers_checkpointed():
    """nanotron's recompute_layer is all or nothing: such a layout is a configuration (a
    sweep row may hold it) that nanotron would not run as described."""
    lay = LayoutConfig(framework="nanotron", recompute="full", recompute_layers=2)
    assert lay.runs_as_another() == (
        "framework nanotron recomputes every layer or none: recompute_layers must be 0, got 2"
    )
    for name in ("megatron", "torchtitan"):
        assert (
            LayoutConfig(
                recompute="full", recompute_layers=2, framework=name, sequence_parallel=False
            ).runs_as_another()
            is None
        )


def test_torchtitan_interleaves_any_layer_count():
    """torchtitan's weighted split takes 6 layers in 2 x 2 virtual stages (Megatron's even
    split refuses them: test_training_rules)."""
    cfg = training(dict(SMALL, num_layers=6), dp=4, pp=2, vpp=2, framework="torchtitan")
    assert cfg.layout.vpp == 2
    with pytest.raises(ConfigError, match="num_layers must be >= pp"):
        training(dict(SMALL, num_layers=3), dp=4, pp=2, vpp=2, framework="torchtitan")


def test_megatron_interleaves_layers_that_divide_with_the_embedding_and_loss():
    """Llama 3.1 405B's 126 layers on pp 8 x vpp 8 (Megatron-Bridge's recipe on 1,024 H100s):
    126 + 2 slots divide by 64 (``account_for_embedding_in_pipeline_split`` and
    ``account_for_loss_in_pipeline_split``); nanotron has no interleaving, and 125 layers fit
    neither way."""
    model = dict(SMALL, num_layers=126)
    cfg = training(model, num_nodes=8, dp=1, pp=8, vpp=8, tp=8, framework="megatron")
    assert cfg.layout.vpp == 8
    with pytest.raises(ConfigError, match="num_layers must be divisible by pp"):
        training(
            dict(SMALL, num_layers=125), num_nodes=8, dp=1, pp=8, vpp=8, tp=8, framework="megatron"
        )


def test_a_matching_global_batch_and_fp8_on_hopper_are_accepted():
    cfg = training(dp=8, mbs=2, grad_accum=4, global_batch_seqs=64, dtype="fp8")
    assert cfg.batch_seqs == 64


# --- flat rows (CSV, YAML, JSON) -------------------------------------------------------------

ISSUE_COLUMNS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_heads",
    "num_kv_heads",
    "vocab_size",
    "seq_len",
    "tie_embeddings",
    "gpu",
    "gpus_per_node",
    "num_nodes",
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "vpp",
    "mbs",
    "grad_accum",
    "zero_stage",
    "recompute",
    "sequence_parallel",
    "dtype",
    "framework",
    "framework_version",
)


def test_config_columns_hold_the_issue_columns_and_moe_fields():
    assert set(ISSUE_COLUMNS) <= set(CONFIG_COLUMNS)
    assert {"num_experts", "experts_topk", "moe_ffn_hidden_size"} <= set(CONFIG_COLUMNS)
    assert len(set(CONFIG_COLUMNS)) == len(CONFIG_COLUMNS)
    assert "name" not in CONFIG_COLUMNS


def row(**change) -> dict:
    return {**SMALL, "dp": 8, **change}


def test_from_flat_coerces_strictly_and_fills_defaults():
    cfg = config_from_flat(
        row(
            num_layers=8.0,
            hidden_size="1024",
            tie_embeddings="Yes",
            sequence_parallel="0",
            num_kv_heads=float("nan"),
            status="oom",
        )
    )
    assert cfg.model.num_layers == 8 and isinstance(cfg.model.num_layers, int)
    assert cfg.model.tie_embeddings is True and cfg.layout.sequence_parallel is False
    assert cfg.model.num_kv_heads == cfg.model.num_heads  # NaN means missing -> MHA
    # a row that names no framework takes the one default, as in every command
    assert cfg.layout.framework == DEFAULT_FRAMEWORK == "torchtitan"
    assert cfg.cluster.gpu == "H100-SXM-80GB"
    assert config_from_flat(row(global_batch_seqs=8.0)).global_batch_seqs == 8


@pytest.mark.parametrize(
    "framework,tp,expected",
    [
        ("torchtitan", 2, True),  # its tensor parallelism always shards the sequence
        ("torchtitan", 1, False),
        ("nanotron", 2, False),
        ("megatron", 2, True),  # Megatron-Bridge's recipes (surrogate.config.framework_defaults)
        ("megatron", 1, False),
    ],
)
def test_a_missing_sequence_parallel_takes_the_frameworks_default(framework, tp, expected):
    zero = 2 if framework == "torchtitan" else 0  # its bf16 beside tp needs FSDP
    cfg = config_from_flat(row(framework=framework, tp=tp, dp=8 // tp, zero_stage=zero))
    assert cfg.layout.sequence_parallel is expected
    assert cfg.layout.runs_as_another() is None


def test_megatrons_documented_defaults_fill_what_is_missing_only():
    cfg = config_from_flat(row(framework="nemo", tp=2, dp=4))
    assert cfg.layout.zero_stage == 1 and cfg.layout.sequence_parallel  # distributed optimizer
    given = config_from_flat(
        row(framework="megatron", tp=2, dp=4, zero_stage=0, sequence_parallel=False)
    )
    assert given.layout.zero_stage == 0 and not given.layout.sequence_parallel
    assert config_from_flat(row(framework="nanotron", dp=8)).layout.zero_stage == 0


@pytest.mark.parametrize(
    "framework,tp,expected",
    [
        ("megatron", 2, True),  # its MoE layer refuses tp without sequence parallelism
        ("megatron", 1, False),
        ("nanotron", 2, False),
    ],
)
def test_an_moe_models_missing_sequence_parallel_is_what_its_framework_runs(
    framework, tp, expected
):
    moe = row(framework=framework, tp=tp, dp=8 // tp, num_experts=8, experts_topk=2)
    cfg = config_from_flat(moe)
    assert cfg.layout.sequence_parallel is expected
    assert cfg.runs_as_another() is None
    if expected:
        given = config_from_flat({**moe, "sequence_parallel": False})
        assert "MoE layer refuses tensor parallelism" in (given.runs_as_another() or "")
        assert given.layout.runs_as_another() is None  # the layout alone knows no model


def test_a_layout_the_framework_runs_otherwise_says_why():
    cfg = config_from_flat(
        row(framework="torchtitan", tp=2, dp=4, zero_stage=2, sequence_parallel=False)
    )
    assert cfg.layout.sequence_parallel is False  # given: predicted as given
    assert "always runs with sequence parallelism" in cfg.layout.runs_as_another()


def test_from_flat_takes_keyword_defaults_under_the_row():
    cfg = config_from_flat(row(), framework="torchtitan", zero_stage=3)
    assert (cfg.layout.framework, cfg.layout.zero_stage) == ("torchtitan", 3)
    assert config_from_flat(row(zero_stage=0), zero_stage=1).layout.zero_stage == 0


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(num_layers=8.5), r"num_layers must be an integer, got 8\.5"),
        (dict(dp="8.5"), r"dp must be an integer, got '8\.5'"),
        (dict(tp="two"), r"tp must be an integer, got 'two'"),
        (dict(mbs=True), r"mbs must be an integer, got True"),
        (dict(tie_embeddings="maybe"), r"tie_embeddings must be true or false, got 'maybe'"),
        (dict(sequence_parallel=2), r"sequence_parallel must be true or false, got 2"),
        (dict(global_batch_seqs=4.5), r"must be an integer, got 4\.5"),
        (dict(gpu="TPUv5"), r"gpu must be one of .*got 'TPUv5'"),
        (dict(framework="jax"), r"framework must be one of .*got 'jax'"),
    ],
)
def test_from_flat_errors(change, match):
    with pytest.raises(ConfigError, match=match):
        config_from_flat(row(**change))


def test_from_flat_needs_the_model_shape():
    r = row()
    del r["vocab_size"], r["seq_len"]
    with pytest.raises(
        ConfigError,
        match=r"a configuration needs the model columns "
        r"vocab_size, seq_len",
    ):
        config_from_flat(r)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_to_flat_round_trips(preset):
    model = get_preset(preset)
    layout = LayoutConfig(
        framework="nanotron",
        dp=4,
        tp=2,
        mbs=2,
        grad_accum=3,
        zero_stage=1,
        recompute="selective",
        sequence_parallel=True,
    )
    cfg = TrainingConfig(model=model, cluster=ClusterConfig(), layout=layout)
    flat = config_to_flat(cfg)
    assert tuple(flat) == CONFIG_COLUMNS
    back = config_from_flat(flat)
    assert back.layout == cfg.layout and back.cluster == cfg.cluster
    assert dataclasses.replace(back.model, name=model.name) == model
    # a row that went through a CSV arrives as strings and floats
    as_text = {
        k: (str(v) if not isinstance(v, int) or isinstance(v, bool) else float(v))
        for k, v in flat.items()
        if v is not None
    }
    assert config_from_flat(as_text).layout == cfg.layout
    assert not math.isnan(float(flat["dp"]))


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (
            lambda: training(dp=8, grad_accum=10**20),
            r"LayoutConfig\.grad_accum must be at most 2\*\*53 = 9,007,199,254,740,992 .*got "
            r"100,000,000,000,000,000,000",
        ),
        (
            lambda: training(dp=8, grad_accum=10**12),
            r"the global batch dp \* grad_accum \* mbs \* seq_len must be at most 2\*\*53 .*got "
            r"dp=8 grad_accum=1000000000000 mbs=1 seq_len=2048 \(16,384,000,000,000,000\)",
        ),
        (lambda: config_from_flat(dict(SMALL, dp=8, mbs="1e20")), r"mbs must be at most 2\*\*53"),
    ],
)
def test_counts_beyond_float64_integers_are_refused(build, match):
    """grad_accum 10^20 used to be predicted (a step of 5e19 s); such counts overflow int64
    tables and are inexact in the float64 analytic model."""
    with pytest.raises(ConfigError, match=match):
        build()


@pytest.mark.parametrize("mbs", [2**53 + 1, str(2**53 + 1), 10**400, "1" * 400])
def test_integers_past_float64_are_refused_not_rounded(mbs):
    row = {
        **config_to_flat(
            TrainingConfig(
                model=get_preset("8b"),
                cluster=ClusterConfig(num_nodes=1),
                layout=LayoutConfig(framework="nanotron", dp=8),
            )
        ),
        "mbs": mbs,
    }
    with pytest.raises(ConfigError, match=r"mbs must be at most 2\*\*53") as e:
        config_from_flat(row)
    assert "9,007,199,254,740,992)" not in str(e.value).split("got")[-1]  # not rounded
    assert len(str(e.value)) < 200


def test_exact_integers_are_kept_exactly():
    from surrogate.config.training import coerce_column

    assert coerce_column("vocab_size", str(2**53)) == 2**53
    assert coerce_column("dp", " 8 ") == 8 and coerce_column("dp", 8.0) == 8
    with pytest.raises(ConfigError, match="dp must be an integer"):
        coerce_column("dp", "8.5")
