"""Launch files: torchtitan TOML that round-trips through the torchtitan ingest reader, quoted
commands, and injection attempts rejected."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from surrogate.config.frameworks import FRAMEWORKS
from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.model import ModelConfig
from surrogate.config.presets import get_preset
from surrogate.config.table import flat_table
from surrogate.config.training import TrainingConfig
from surrogate.errors import ConfigError, DataError
from surrogate.ingest.torchtitan import config_values
from surrogate.layouts.labels import layout_label
from surrogate.layouts.space import LayoutSpace
from surrogate.loop.launch import (
    check_name,
    check_path,
    launch_problem,
    launchable,
    sbatch_script,
    torchrun_command,
    torchtitan_model_args,
    torchtitan_stage_split,
    torchtitan_toml,
    write_launch_files,
)


def cfg(**layout: object) -> TrainingConfig:
    base = dict(
        dp=8,
        tp=2,
        pp=1,
        mbs=2,
        grad_accum=4,
        zero_stage=3,
        sequence_parallel=True,
        framework="torchtitan",
        recompute="selective",
    )
    return TrainingConfig(
        model=get_preset("8b"),
        cluster=ClusterConfig(num_nodes=2),
        layout=LayoutConfig(**{**base, **layout}),
    )  # type: ignore[arg-type]


def test_toml_round_trips_through_the_torchtitan_reader() -> None:
    """Every launchable layout reads back as itself: pipeline schedules (1F1B, GPipe as
    all-forward-all-backward) and virtual stages (Interleaved1F1B) included."""
    space = LayoutSpace(
        model=get_preset("8b"),
        global_batch_seqs=32,
        node_counts=(2,),
        frameworks=("torchtitan",),
        max_cp=2,
        max_vpp=2,
        max_mbs=4,
    )
    checked = 0
    schedules: set[tuple[str, int]] = set()
    for c in space.enumerate():
        lay = c.layout
        variants = [c]
        if lay.pp > 1 and lay.vpp == 1:
            variants.append(replace(c, layout=replace(lay, pp_schedule="afab")))
        for v in variants:
            if launch_problem(v):
                continue
            values, steps = config_values(tomllib.loads(torchtitan_toml(v, run_name="r")), {})
            assert steps == 50
            assert values["model"] == "llama3-8b"
            for name in (
                "dp",
                "tp",
                "pp",
                "cp",
                "ep",
                "mbs",
                "grad_accum",
                "zero_stage",
                "recompute",
                "sequence_parallel",
            ):
                assert values[name] == getattr(v.layout, name), name
            assert values.get("vpp", 1) == v.layout.vpp
            assert values.get("pp_schedule", "1f1b") == v.layout.pp_schedule
            schedules.add((v.layout.pp_schedule, v.layout.vpp))
            checked += 1
    assert checked > 20
    assert schedules == {("1f1b", 1), ("1f1b", 2), ("afab", 1)}


def test_torchtitan_schedules_the_surrogate_does_not_model_are_refused() -> None:
    doc = tomllib.loads(torchtitan_toml(cfg(dp=4, tp=2, pp=2, zero_stage=2), run_name="p"))
    doc["parallelism"]["pipeline_parallel_schedule"] = "ZBVZeroBubble"
    with pytest.raises(
        DataError,
        match="pipeline_parallel_schedule 'ZBVZeroBubble' is not "
        "modelled; the surrogate describes 1F1B, GPipe, "
        "Interleaved1F1B",
    ):
        config_values(doc, {})
    doc["parallelism"]["pipeline_parallel_schedule"] = "Interleaved1F1B"
    del doc["parallelism"]["pipeline_parallel_layers_per_stage"]
    assert config_values(doc, {})[0]["vpp"] == 2  # torchtitan's default: 2 stages per rank
    assert "vpp" not in config_values(doc, {"vpp": 3})[0]  # given: --set decides
    doc["parallelism"]["pipeline_parallel_layers_per_stage"] = 5  # 34 slots: 7 stages
    with pytest.raises(
        DataError,
        match="needs a multiple of pp, at least 2 per rank, virtual stages, got 7 for pp=2",
    ):
        config_values(doc, {})


def test_every_torchtitan_layout_of_the_space_can_be_launched() -> None:
    """The space holds only layouts torchtitan runs as described (ZeRO 0/2/3, sequence
    parallelism with tp, its schedules), so search never ranks one that launch refuses."""
    moe = ModelConfig(
        name="tiny-moe",
        num_layers=8,
        hidden_size=512,
        ffn_hidden_size=1024,
        num_heads=8,
        num_kv_heads=8,
        vocab_size=1000,
        seq_len=1024,
        num_experts=4,
        experts_topk=2,
    )
    for model in (get_preset("8b"), moe):
        space = LayoutSpace(
            model=model,
            global_batch_seqs=16,
            node_counts=(1, 2),
            frameworks=("torchtitan",),
            max_cp=2,
            max_vpp=2,
            max_mbs=2,
        )
        configs = space.enumerate()
        assert {c.layout.zero_stage for c in configs} == {0, 2, 3}
        assert {c.layout.vpp for c in configs} == {1, 2}
        assert {c.layout.cp for c in configs} == {1, 2}
        assert any(c.layout.recompute_layers for c in configs)  # some layers checkpointed
        for c in configs:
            assert launch_problem(c) is None, (layout_label(c), launch_problem(c))
            assert tomllib.loads(torchtitan_toml(c, run_name="r"))["parallelism"]


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_the_space_of_each_framework_holds_what_it_runs(name: str) -> None:
    """For every framework the enumerated layouts are the ones it runs as described, and the
    writer accepts exactly the torchtitan ones."""
    space = LayoutSpace(
        model=get_preset("1.34b"),
        global_batch_seqs=16,
        node_counts=(1,),
        frameworks=(name,),
        max_cp=2,
        max_vpp=2,
        max_mbs=2,
    )
    traits = FRAMEWORKS[name]
    configs = space.enumerate()
    assert configs
    for c in configs:
        lay = c.layout
        assert (
            traits.runs_as_another(
                dp=lay.dp,
                tp=lay.tp,
                pp=lay.pp,
                cp=lay.cp,
                ep=lay.ep,
                vpp=lay.vpp,
                zero_stage=lay.zero_stage,
                recompute=lay.recompute,
                sequence_parallel=lay.sequence_parallel,
            )
            is None
        )
        assert (launch_problem(c) is None) == (name == "torchtitan")
    assert {c.layout.recompute for c in configs} == set(traits.recompute_modes)
    assert {c.layout.zero_stage for c in configs} == set(traits.zero_stages)
    assert (max(c.layout.tp for c in configs) > 1) == traits.tensor_parallel
    assert (max(c.layout.pp for c in configs) > 1) == traits.pipeline_parallel
    assert (max(c.layout.vpp for c in configs) > 1) == traits.interleaved_pipeline


def test_pipeline_toml_keeps_micro_batches_in_one_step() -> None:
    c = cfg(dp=4, tp=2, pp=2, vpp=2, zero_stage=2)
    doc = tomllib.loads(torchtitan_toml(c, run_name="pp"))
    par, training = doc["parallelism"], doc["training"]
    assert par["pipeline_parallel_degree"] == 2
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert par["pipeline_parallel_microbatch_size"] == 2
    assert training["local_batch_size"] == 2 * 4
    assert training["global_batch_size"] == c.batch_seqs


def test_unlaunchable_layouts_are_refused() -> None:
    with pytest.raises(
        ConfigError, match="framework torchtitan implements zero_stage 0 or 2 or 3, got 1"
    ):
        cfg(zero_stage=1)  # FSDP2 has no ZeRO-1: not even a configuration
    with pytest.raises(ConfigError, match="zero_stage > 0 needs dp x cp > 1"):
        torchtitan_toml(cfg(dp=1, tp=8, pp=2, grad_accum=64), run_name="z3")
    with pytest.raises(ConfigError, match="launch files are torchtitan configs"):
        torchtitan_toml(cfg(framework="nanotron", zero_stage=1), run_name="n")
    with pytest.raises(ConfigError, match="always runs with sequence parallelism"):
        torchtitan_toml(cfg(sequence_parallel=False), run_name="sp")


def test_launchable_rows_are_those_without_a_launch_problem() -> None:
    """The column rules give launch_problem's verdicts: layouts of every framework, with and
    without some layers checkpointed, and the unlaunchable layouts above."""
    space = LayoutSpace(
        model=get_preset("8b"),
        global_batch_seqs=64,
        node_counts=(1, 2),
        frameworks=("torchtitan", "megatron", "nanotron"),
        max_mbs=2,
        max_vpp=2,
    )
    configs = [
        *space.enumerate(),
        cfg(dp=1, tp=8, pp=2, grad_accum=64),
        cfg(sequence_parallel=False),
        cfg(recompute="full", recompute_layers=15),
        cfg(recompute="full", recompute_layers=16),
        cfg(pp=2, dp=4, recompute="full", recompute_layers=4),
    ]
    verdicts = [launch_problem(c) is None for c in configs]
    assert 0 < sum(verdicts) < len(configs) - 5
    assert launchable(flat_table(configs)).tolist() == verdicts


@pytest.mark.parametrize(
    "name", ["a;rm -rf /", "$(reboot)", "x y", "-rf", "", "a\nb", "`id`", "a'b", "../up"]
)
def test_injection_in_names_is_rejected(name: str) -> None:
    with pytest.raises(ConfigError, match="a run name must be"):
        check_name(name)
    with pytest.raises(ConfigError):
        sbatch_script(cfg(), job_name=name, config_path="config.toml")


@pytest.mark.parametrize(
    "path", ["a b.toml", "x;id", "$HOME/x", "../etc/passwd", "a\nb", "q'uote", 'd"q']
)
def test_injection_in_paths_is_rejected(path: str) -> None:
    with pytest.raises(ConfigError, match="a path written into a launch script"):
        check_path(path)
    with pytest.raises(ConfigError):
        torchrun_command(cfg(), path)


def test_commands_and_files(tmp_path: Path) -> None:
    one = torchrun_command(cfg(), "runs/config.toml")
    assert "--standalone" not in one and "--nnodes 2 --nproc_per_node 8" in one
    assert one.endswith("--job.config_file runs/config.toml")
    script = sbatch_script(
        cfg(), job_name="job-1", config_path="config.toml", time_limit="01:00:00"
    )
    assert "#SBATCH --nodes=2" in script and "#SBATCH --job-name=job-1" in script
    with pytest.raises(ConfigError, match="HH:MM:SS"):
        sbatch_script(cfg(), job_name="j", config_path="c.toml", time_limit="1h; id")
    files = write_launch_files(cfg(), tmp_path / "run-1", run_name="run-1")
    assert tomllib.loads(files.config.read_text())["job"]["description"] == "run-1"
    assert files.launch.stat().st_mode & 0o111
    assert "tee train.log" in files.launch.read_text()


@pytest.mark.parametrize(
    "layers,stages",
    [
        (32, 2),
        (32, 4),
        (32, 8),
        (32, 16),
        (126, 16),
        (126, 32),
        (126, 64),
        (61, 8),
        (6, 4),
        (80, 40),
    ],
)
def test_stage_split_gives_torchtitan_the_modelled_stages(layers: int, stages: int) -> None:
    """torchtitan 0.2.2 makes ceil((L + 2) / pipeline_parallel_layers_per_stage) virtual
    stages; where no whole number gives ``stages``, the modules of each are listed: every layer
    once, in order, with the embedding first and the head last."""
    keys = torchtitan_stage_split(layers, stages)
    assert keys["pipeline_parallel_first_stage_less_layers"] == 1
    assert keys["pipeline_parallel_last_stage_less_layers"] == 1
    if "pipeline_parallel_layers_per_stage" in keys:
        assert -(-(layers + 2) // keys["pipeline_parallel_layers_per_stage"]) == stages
        assert "module_fqns_per_model_part" not in keys
        return
    parts = keys["module_fqns_per_model_part"]
    assert len(parts) == stages
    flat = [name for part in parts for name in part]
    assert flat == ["tok_embeddings", *[f"layers.{i}" for i in range(layers)], "norm", "output"]
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= 1  # one slot each for the embedding and the head


def test_listed_stage_modules_read_back_as_the_same_virtual_stages() -> None:
    """32 layers in 2 x 8 virtual stages: no whole layers_per_stage gives 16, so the modules
    are listed, and the torchtitan reader counts them back to vpp 8."""
    c = cfg(dp=4, tp=2, pp=2, vpp=8, zero_stage=2)
    doc = tomllib.loads(torchtitan_toml(c, run_name="listed"))
    assert len(doc["parallelism"]["module_fqns_per_model_part"]) == 16
    assert "pipeline_parallel_layers_per_stage" not in doc["parallelism"]
    assert config_values(doc, {})[0]["vpp"] == 8


@pytest.mark.parametrize(
    ("recompute", "section"),
    [
        ("selective", {"mode": "selective", "selective_ac_option": "op"}),
        ("full", {"mode": "full"}),
        ("none", {"mode": "none"}),
    ],
)
def test_torchtitan_checkpointing_is_written_out(recompute: str, section: dict) -> None:
    """'selective' is per operator, what the surrogate predicts, not torchtitan's default
    option (every second block in full)."""
    doc = tomllib.loads(torchtitan_toml(cfg(recompute=recompute), run_name="r"))
    assert doc["activation_checkpoint"] == section


@pytest.mark.parametrize(
    ("layout", "option"),
    [
        (dict(recompute_layers=16), "2"),  # 32 layers: every second block
        (dict(recompute_layers=10), "3"),
        (dict(recompute_layers=5, dp=4, pp=2, zero_stage=2), "3"),  # rank 0 holds 16 of them
    ],
)
def test_some_layers_checkpointed_is_every_nth_block(layout: dict, option: str) -> None:
    """Full recomputation of some layers of a stage is torchtitan's every-n-th-block option,
    and reads back as the same count."""
    c = cfg(recompute="full", **layout)
    doc = tomllib.loads(torchtitan_toml(c, run_name="r"))
    assert doc["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": option}
    values = config_values(doc, {})[0]
    assert (values["recompute"], values["recompute_layers"]) == ("full", c.layout.recompute_layers)


def test_counts_torchtitan_cannot_checkpoint_are_refused() -> None:
    """floor(32 / n) is 16, 10, 8, 6, 5, ...: 15 layers of 32 is no n."""
    with pytest.raises(ConfigError, match="recompute_layers=15 is not one of those counts"):
        torchtitan_toml(cfg(recompute="full", recompute_layers=15), run_name="r")


TINY_MOE = ModelConfig(
    name="tiny-moe",
    num_layers=8,
    hidden_size=512,
    ffn_hidden_size=1024,
    num_heads=8,
    num_kv_heads=8,
    vocab_size=1000,
    seq_len=1024,
    num_experts=4,
    experts_topk=2,
)


def _moe(**layout: object) -> TrainingConfig:
    base = dict(
        pp=1,
        mbs=2,
        grad_accum=4,
        sequence_parallel=True,
        framework="torchtitan",
        recompute="selective",
    )
    return TrainingConfig(
        model=TINY_MOE,
        cluster=ClusterConfig(num_nodes=2),
        layout=LayoutConfig(**{**base, **layout}),
    )  # type: ignore[arg-type]


def test_moe_launch_files_split_the_experts_over_tp_as_modelled() -> None:
    """torchtitan's default expert tensor-parallel degree, 1, would lend tp to expert
    parallelism and keep each expert whole on a rank: the files set it to tp, the layout the
    surrogate models (and measured, ``microbench/saved_activations.py --moe --tp 2 --ep 2``),
    and the torchtitan reader takes no other."""
    doc = tomllib.loads(torchtitan_toml(_moe(dp=8, tp=2, ep=4, zero_stage=2), run_name="m"))
    assert doc["parallelism"]["expert_tensor_parallel_degree"] == 2
    assert config_values(doc, {})[0]["ep"] == 4
    dense = tomllib.loads(torchtitan_toml(_moe(dp=8, tp=2, ep=1, zero_stage=2), run_name="d"))
    assert "expert_tensor_parallel_degree" not in dense["parallelism"]
    doc["parallelism"]["expert_tensor_parallel_degree"] = 1
    with pytest.raises(
        DataError,
        match="expert_tensor_parallel_degree 1 with "
        "tensor_parallel_degree 2 lends tp to expert "
        "parallelism",
    ):
        config_values(doc, {})
    del doc["parallelism"]["expert_tensor_parallel_degree"]  # torchtitan's default, 1
    with pytest.raises(DataError, match="a layout the surrogate does not model"):
        config_values(doc, {})


def test_the_model_is_torchtitans_model_with_such_blocks() -> None:
    """torchtitan's llama3 has no mixture of experts: an MoE shape is a flavour of llama4 (and
    one with latent attention of deepseek_v3), to register under that name; the comment lists
    what the flavour must hold (measured this way: ``microbench/torchtitan_runs.py``)."""
    text = torchtitan_toml(_moe(dp=8, tp=2, ep=4, zero_stage=2), run_name="m")
    assert tomllib.loads(text)["model"] == {"name": "llama4", "flavor": "custom"}
    assert "num_experts=4 experts_topk=2 moe_ffn_hidden_size=1024" in text
    mla = replace(
        TINY_MOE,
        q_lora_rank=64,
        kv_lora_rank=32,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=32,
    )
    moe = _moe(dp=8, tp=2, ep=4, zero_stage=2)
    doc = tomllib.loads(torchtitan_toml(replace(moe, model=mla), run_name="x"))
    assert doc["model"]["name"] == "deepseek_v3"
    tied = replace(get_preset("playbook-1.34b"), seq_len=4096)
    text = torchtitan_toml(replace(cfg(), model=tied), run_name="t")
    assert tomllib.loads(text)["model"]["name"] == "llama3" and "tie_embeddings=true" in text
    assert tomllib.loads(torchtitan_toml(cfg(), run_name="p"))["model"] == {
        "name": "llama3",
        "flavor": "8B",
    }


def test_custom_shapes_get_their_flavour_and_a_script_that_registers_it(tmp_path: Path) -> None:
    """A shape torchtitan does not ship but its llama models can build: flavour.json with the
    model arguments and train_custom.py, which the scripts run; a shipped flavour or a shape
    they cannot build (tied embeddings) runs torchtitan's trainer (the comment gives the
    shape)."""
    import py_compile

    files = write_launch_files(_moe(dp=8, tp=2, ep=4, zero_stage=2), tmp_path / "m", run_name="m")
    spec = json.loads((files.directory / "flavour.json").read_text())
    assert spec["torchtitan_model"] == "llama4"
    assert spec["model_args"]["moe_args"] == {"num_experts": 4, "top_k": 2, "num_shared_experts": 0}
    assert "train_custom.py --job.config_file config.toml" in files.launch.read_text()
    assert "train_custom.py --job.config_file config.toml" in files.sbatch.read_text()
    script = files.directory / "train_custom.py"
    py_compile.compile(str(script), doraise=True)
    assert "surrogate" not in script.read_text().replace("surrogate's", "")
    for other, name in (
        (cfg(), "p"),
        (replace(cfg(), model=replace(get_preset("playbook-1.34b"), seq_len=4096)), "t"),
    ):
        files = write_launch_files(other, tmp_path / name, run_name=name)
        assert not (files.directory / "flavour.json").exists()
        assert "-m torchtitan.train --job.config_file" in files.launch.read_text()


@pytest.mark.parametrize(
    "model",
    [
        ModelConfig(
            name="d",
            num_layers=4,
            hidden_size=1024,
            ffn_hidden_size=2816,
            num_heads=8,
            num_kv_heads=2,
            vocab_size=32000,
            seq_len=2048,
        ),
        ModelConfig(
            name="e",
            num_layers=4,
            hidden_size=2048,
            ffn_hidden_size=512,
            num_heads=16,
            num_kv_heads=8,
            vocab_size=32000,
            seq_len=2048,
            num_experts=32,
            experts_topk=4,
            moe_ffn_hidden_size=512,
            shared_expert_ffn_hidden_size=512,
        ),
    ],
)
def test_model_args_give_torchtitan_the_widths(model: ModelConfig) -> None:
    """torchtitan sizes an MLP as multiple_of x ceil(multiplier x int(8 dim / 3) / multiple_of)
    (llama3; llama4's experts from 4 dim likewise): the arguments give the wanted widths."""
    name, args = torchtitan_model_args(model)
    base = int(2 * 4 * args["dim"] / 3)
    width = args["multiple_of"] * -(-int(args["ffn_dim_multiplier"] * base) // args["multiple_of"])
    assert width == (model.moe_ffn_hidden_size or model.ffn_hidden_size)
    assert name == ("llama4" if model.num_experts else "llama3")


def test_shapes_torchtitan_llama_cannot_build_are_named() -> None:
    m = TINY_MOE
    with pytest.raises(ValueError, match="do not tie embeddings"):
        torchtitan_model_args(replace(m, tie_embeddings=True))
    with pytest.raises(ValueError, match="heads of hidden / heads"):
        torchtitan_model_args(replace(m, head_dim=128))
    dense = replace(
        m,
        num_experts=0,
        experts_topk=0,
        moe_ffn_hidden_size=0,
        shared_expert_ffn_hidden_size=0,
        gated_mlp=False,
    )
    with pytest.raises(ValueError, match="have a SwiGLU MLP"):
        torchtitan_model_args(dense)
    with pytest.raises(ValueError, match="shared expert has the experts' width"):
        torchtitan_model_args(replace(m, shared_expert_ffn_hidden_size=64))


@pytest.mark.parametrize("zero", [2, 3])
def test_hsdp_launch_files_copy_the_shards_and_read_back(zero) -> None:
    """Copies of ZeRO's shards are torchtitan's HSDP: the replicate degree is dp_replicate,
    the shard degree the rest of dp; the file reads back as the same layout."""
    c = cfg(zero_stage=zero, dp_replicate=2)
    par = tomllib.loads(torchtitan_toml(c, run_name="h"))["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (2, 4)
    values = config_values(tomllib.loads(torchtitan_toml(c, run_name="h")), {})[0]
    assert (values["dp"], values["zero_stage"], values["dp_replicate"]) == (8, zero, 2)
    plain = tomllib.loads(torchtitan_toml(cfg(zero_stage=zero), run_name="f"))
    assert config_values(plain, {})[0]["dp_replicate"] == 1


def test_torchtitan_shards_whenever_cp_or_ep_is_above_one() -> None:
    """torchtitan's FSDP spans data_parallel_shard_degree x cp and its expert parallelism
    borrows from those ranks: a ZeRO-0 launch file (replicas, shard 1) with cp > 1 would shard
    the parameters over the cp ranks anyway, and with ep > 1 would not build. Such layouts are
    refused and not in the search space; ZeRO over cp ranks alone (dp 1) is one torchtitan
    runs, and reads back as itself. Sharding beside replicas (HSDP) reads back as copies of
    the shards (dp_replicate)."""
    assert (
        "zero_stage 0 (data-parallel replicas, nothing sharded) needs cp = 1 and ep = 1, "
        "got cp=1 ep=2" in (launch_problem(_moe(dp=8, tp=2, ep=2, zero_stage=0)) or "")
    )
    assert "got cp=2 ep=1" in (launch_problem(cfg(dp=4, tp=2, cp=2, zero_stage=0)) or "")
    over_cp = cfg(dp=1, tp=8, cp=2, zero_stage=3, grad_accum=8)
    assert launch_problem(over_cp) is None
    doc = tomllib.loads(torchtitan_toml(over_cp, run_name="cp"))
    values = config_values(doc, {})[0]
    assert (values["dp"], values["cp"], values["zero_stage"]) == (1, 2, 3)
    doc["parallelism"] |= {"data_parallel_replicate_degree": 2, "data_parallel_shard_degree": 2}
    values = config_values(doc, {})[0]
    assert (values["dp"], values["cp"], values["zero_stage"], values["dp_replicate"]) == (
        4,
        2,
        3,
        2,
    )
    space = LayoutSpace(
        model=TINY_MOE,
        global_batch_seqs=16,
        node_counts=(2,),
        frameworks=("torchtitan", "megatron"),
        max_cp=2,
        max_mbs=1,
    )
    unsharded = {
        c.layout.framework
        for c in space.enumerate()
        if c.layout.zero_stage == 0 and max(c.layout.cp, c.layout.ep) > 1
    }
    assert unsharded == {"megatron"}


def test_torchtitan_builds_the_modelled_meshes_where_it_is_installed() -> None:
    """Runs only where torchtitan is installed (not a project dependency): every launch file of
    an MoE space builds torchtitan 0.2.2's device mesh (``ParallelDims`` on a fake process
    group) with FSDP over the dp x cp ranks exactly where the layout has ZeRO, the layout's
    expert-parallel degree and, with tp, its experts split over tp; and each trains in bf16
    mixed precision, FSDP's or torch.autocast's by torchtitan's own ``maybe_enable_amp``, which
    a ZeRO-0 layout with tp or pp > 1 would not (it trains in fp32)."""
    pytest.importorskip("torchtitan")
    import torch
    from torchtitan.distributed.parallel_dims import ParallelDims
    from torchtitan.distributed.utils import maybe_enable_amp

    from microbench.dense_blocks import fake_world

    space = LayoutSpace(
        model=TINY_MOE,
        global_batch_seqs=16,
        node_counts=(2,),
        frameworks=("torchtitan",),
        max_cp=2,
        max_mbs=1,
        max_vpp=1,
    )
    checked = set()
    for c in space.enumerate():
        lay = c.layout
        key = (lay.dp, lay.tp, lay.pp, lay.cp, lay.ep, lay.zero_stage, lay.dp_replicate)
        if key in checked:
            continue
        checked.add(key)
        par = tomllib.loads(torchtitan_toml(c, run_name="r"))["parallelism"]
        with fake_world(16):
            dims = ParallelDims(
                dp_replicate=par["data_parallel_replicate_degree"],
                dp_shard=par["data_parallel_shard_degree"],
                cp=par["context_parallel_degree"],
                tp=par["tensor_parallel_degree"],
                pp=par["pipeline_parallel_degree"],
                ep=par["expert_parallel_degree"],
                etp=par.get("expert_tensor_parallel_degree", 1),
                world_size=16,
            )
            dims.build_mesh()
            assert dims.fsdp_enabled == (lay.zero_stage > 0), key
            amp = maybe_enable_amp(dims, "bfloat16", "cpu")
            assert dims.fsdp_enabled or isinstance(amp, torch.autocast), key  # bf16 either way
            if dims.fsdp_enabled:
                assert dims.get_mesh("fsdp").size() == lay.dp * lay.cp // lay.dp_replicate, key
            assert dims.dp_replicate_enabled == (
                lay.dp_replicate > 1 or (lay.zero_stage == 0 and lay.dp > 1)
            ), key
            if lay.ep > 1:
                assert dims.get_mesh("ep").size() == lay.ep, key
                if lay.tp > 1:
                    assert dims.get_mesh("etp").size() == lay.tp, key
    assert any(k[4] > 1 and k[1] > 1 for k in checked)
    assert any(k[0] == 1 and k[3] > 1 for k in checked)  # ZeRO over cp ranks alone
    assert any(k[5] == 0 and k[0] > 1 for k in checked)  # DDP alone: autocast
    with fake_world(16):  # what the rule keeps out: ZeRO-0 beside tp, which trains in fp32
        dims = ParallelDims(
            dp_replicate=8, dp_shard=1, cp=1, tp=2, pp=1, ep=1, etp=1, world_size=16
        )
        dims.build_mesh()
        amp = maybe_enable_amp(dims, "bfloat16", "cpu")
        assert not dims.fsdp_enabled and not isinstance(amp, torch.autocast)
    assert any(k[6] > 1 and k[4] > 1 for k in checked)  # HSDP beside expert parallelism


def test_train_custom_registers_the_modelled_shape_where_torchtitan_is_installed(
    tmp_path: Path,
) -> None:
    """Where torchtitan is installed (CI skips this): train_custom.py's register() builds, as
    torchtitan's flavour "custom", a model with the surrogate's parameter count."""
    pytest.importorskip("torchtitan")
    import importlib
    import runpy

    import torch

    from surrogate.analytic.flops import total_params
    from surrogate.analytic.inputs import to_cols
    from surrogate.calibration.parameter_files import shipped_parameter_sets

    for layout in (cfg(), _moe(dp=8, tp=2, ep=4, zero_stage=2)):
        model = (
            replace(layout.model, name="shape", seq_len=1024)
            if layout.model.is_moe
            else replace(layout.model, name="shape", num_layers=2)
        )
        one = replace(layout, model=model)
        files = write_launch_files(one, tmp_path / f"{model.num_layers}", run_name="r")
        script = runpy.run_path(str(files.directory / "train_custom.py"), run_name="x")
        script["register"](files.directory / "flavour.json")
        name = json.loads((files.directory / "flavour.json").read_text())["torchtitan_model"]
        module = importlib.import_module(f"torchtitan.models.{name}")
        with torch.device("meta"):
            built = module.Transformer(getattr(module, f"{name}_args")["custom"])
        counted = total_params(to_cols([one], shipped_parameter_sets()))
        assert sum(p.numel() for p in built.parameters()) == int(counted[0])


def test_an_fp8_layout_launches_torchtitans_float8_and_reads_back() -> None:
    """dtype fp8 writes torchao's Float8 converter ([model] converters), which the torchtitan
    reader takes back as fp8; bf16 writes none."""
    from surrogate.ingest.torchtitan import FLOAT8_CONVERTER, config_values

    text = torchtitan_toml(cfg(dtype="fp8"), run_name="fp8")
    doc = tomllib.loads(text)
    assert doc["model"]["converters"] == [FLOAT8_CONVERTER]
    assert "torchao" in text
    assert config_values(doc, {})[0]["dtype"] == "fp8"
    assert "converters" not in tomllib.loads(torchtitan_toml(cfg(), run_name="bf16"))["model"]
