"""The saved-activations command: its records, its usage errors, and the message when
torchtitan or megatron-core is not installed."""

from __future__ import annotations

import importlib.util

import pytest

from microbench.dense_blocks import Saved, megatron_block, torchtitan_block
from microbench.kept_activations import KEPT_SCHEMA, Kept
from microbench.saved_activations import SCHEMA, kept_record, main, record

torch = pytest.importorskip("torch")


def test_kept_record_sums_bytes():
    kept = [
        Kept("aten.mm.default", (2,), "bfloat16", 4),
        Kept("aten.mul.Tensor", (2,), "float32", 8),
    ]
    rec = kept_record(
        "megatron", "0.16.1", {"tp": 2, "recompute": "full"}, kept, {"backend": "fake"}
    )
    assert rec["schema"] == KEPT_SCHEMA and rec["kept_bytes"] == 12
    assert rec["kept"][0] == {
        "op": "aten.mm.default",
        "shape": (2,),
        "dtype": "bfloat16",
        "bytes": 4,
    }


def test_record_sums_bytes_by_module():
    saved = [
        Saved("a", (2,), "bfloat16", 4),
        Saved("b", (2,), "float32", 8),
        Saved("a", (4,), "bfloat16", 8),
    ]
    rec = record("torchtitan", "0.2.2", {"tp": 2}, saved, {"backend": "fake"})
    assert rec["schema"] == SCHEMA and rec["bytes_by_module"] == {"a": 12, "b": 8}
    assert rec["saved"][1] == {"module": "b", "shape": (2,), "dtype": "float32", "bytes": 8}


@pytest.mark.parametrize(
    ("framework", "block", "module", "install"),
    [
        ("torchtitan", torchtitan_block, "torchtitan", r"pip install torchtitan==0\.2\.2"),
        ("megatron", megatron_block, "megatron", r"pip install megatron-core==0\.16\.1"),
    ],
)
def test_without_the_framework_it_says_what_to_install(framework, block, module, install):
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    with pytest.raises(SystemExit, match=install):
        block(hidden_size=64, num_heads=4, num_kv_heads=4, seq_len=16, mbs=1, tp=2)
    with pytest.raises(SystemExit, match=install):
        main(["--framework", framework, "--out", "-"])
    with pytest.raises(SystemExit, match=install):
        main(["--framework", framework, "--recompute", "--out", "-"])


@pytest.mark.parametrize(
    ("framework", "module", "install"),
    [
        ("torchtitan", "torchtitan", r"pip install torchtitan==0\.2\.2"),
        ("megatron", "megatron", r"pip install megatron-core==0\.16\.1"),
    ],
)
def test_moe_without_the_framework_says_what_to_install(framework, module, install):
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    with pytest.raises(SystemExit, match=install):
        main(["--framework", framework, "--moe", "--out", "-"])


def test_moe_blocks_are_measured_under_recomputation_by_torchtitan(capsys, monkeypatch):
    with pytest.raises(SystemExit) as e:
        main(["--framework", "megatron", "--moe", "--recompute", "--out", "-"])
    assert e.value.code == 2
    assert "--moe --recompute measures torchtitan's MoE blocks, got --framework megatron" in (
        capsys.readouterr().err
    )
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit, match=r"--tp 2 runs under torchrun --nproc-per-node 2"):
        main(["--moe", "--recompute", "--tp", "2", "--out", "-"])


def test_expert_parallelism_splits_the_moe_layer_under_torchrun(capsys, monkeypatch):
    with pytest.raises(SystemExit) as e:
        main(["--ep", "2", "--out", "-"])
    assert e.value.code == 2 and "--ep must be >= 1 and splits the experts of --moe" in (
        capsys.readouterr().err
    )
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(
        SystemExit,
        match=r"--ep 2 runs under torchrun --nproc-per-node 2 "
        r"\(WORLD_SIZE is unset\)",
    ):
        main(["--moe", "--ep", "2", "--out", "-"])


@pytest.mark.parametrize("args", [["--tp", "2"], ["--moe", "--tp", "0"]])
def test_tensor_parallelism_splits_the_moe_layer_alone(args, capsys):
    with pytest.raises(SystemExit) as e:
        main([*args, "--out", "-"])
    assert e.value.code == 2 and "--tp must be >= 1 and splits the layer of --moe" in (
        capsys.readouterr().err
    )


def test_tensor_parallel_moe_runs_under_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(
        SystemExit,
        match=r"--tp 2 runs under torchrun --nproc-per-node 2 "
        r"\(WORLD_SIZE is unset\)",
    ):
        main(["--moe", "--tp", "2", "--out", "-"])
    with pytest.raises(
        SystemExit,
        match=r"--tp 2 --ep 2 runs under torchrun --nproc-per-node 4 "
        r"\(WORLD_SIZE is unset\)",
    ):
        main(["--moe", "--tp", "2", "--ep", "2", "--out", "-"])


def test_an_unknown_framework_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--framework", "deepspeed"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_llm_foundry_is_measured_by_its_block_alone(capsys):
    for extra in (["--moe"], ["--recompute"]):
        with pytest.raises(SystemExit) as e:
            main(["--framework", "llm-foundry", *extra, "--out", "-"])
        assert e.value.code == 2
        assert "--framework llm-foundry: its block alone, without --moe or --recompute" in (
            capsys.readouterr().err
        )


def test_without_llm_foundry_it_says_what_to_install():
    if importlib.util.find_spec("llmfoundry") is not None:
        pytest.skip("llm-foundry is installed here")
    install = r"pip install --no-deps llm-foundry==0\.3\.0 einops"
    with pytest.raises(SystemExit, match=install):
        main(["--framework", "llm-foundry", "--out", "-"])


@pytest.mark.parametrize(("kv", "tp"), [(4, 1), (8, 2)])
def test_mpts_block_has_multi_head_attention_and_no_tensor_parallelism(kv, tp):
    from microbench.llmfoundry_block import llmfoundry_block

    with pytest.raises(ValueError, match=r"num_kv_heads = num_heads\), tp 1"):
        llmfoundry_block(hidden_size=64, num_heads=8, num_kv_heads=kv, seq_len=16, mbs=1, tp=tp)
