"""Megatron-LM logs (fixture in Megatron's arguments / iteration / memory format)."""

from __future__ import annotations

from pathlib import Path

import pytest

from surrogate.ingest.megatron import config_values, parse_arguments, parse_megatron

LOG = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "sweeps_megatron"
    / "gpt_8b"
    / ("train_2nodes.log")
)


def test_arguments_block() -> None:
    args = parse_arguments(LOG.read_text())
    assert args["tensor_model_parallel_size"] == "2" and args["fp8"] == "None"
    values, iters = config_values(args)
    assert iters == 30
    assert values["grad_accum"] == 32 and values["zero_stage"] == 1
    assert values["tie_embeddings"] is False and values["num_kv_heads"] == "8"
    assert "experts_topk" not in values  # moe_router_topk is printed for dense models too


def test_completed_run() -> None:
    df, report = parse_megatron(LOG)
    assert report.skips == []
    r = df.iloc[0]
    assert r["status"] == "completed"
    assert (r["dp"], r["tp"], r["pp"], r["num_nodes"], r["grad_accum"]) == (4, 2, 2, 2, 32)
    assert r["sequence_parallel"] and r["recompute"] == "none" and r["dtype"] == "bf16"
    assert r["step_time_s"] == pytest.approx(8.8723)  # median of 8,875.0 and 8,869.6 ms
    assert r["tokens_per_s_per_gpu"] == pytest.approx(128 * 8192 / (8.8723 * 16))
    assert r["tflops_per_gpu_reported"] == pytest.approx(372.9)
    assert r["peak_mem_allocated_gib"] == pytest.approx(43812.27 / 1024)
    assert r["peak_mem_reserved_gib"] == pytest.approx(47018.0 / 1024)
    assert r["date"] == "2024-11-20 09:15:31"


def test_without_arguments_block_flags_give_the_config(tmp_path: Path) -> None:
    text = LOG.read_text()
    start, end = text.index("---"), text.index("end of arguments")
    log = tmp_path / "run.log"
    log.write_text(text[:start] + text[text.index("\n", end) + 1 :])
    df, report = parse_megatron(log)
    assert df.empty and "needs the model columns" in report.skips[0].reason
    given = {
        "model": "8b",
        "dp": "4",
        "tp": "2",
        "pp": "2",
        "grad_accum": "32",
        "framework": "megatron",
    }
    df, report = parse_megatron(log, given=given)
    assert report.skips == [] and len(df) == 1
    assert df["status"].iloc[0] == "completed"  # 30 of 30 iterations from the lines


@pytest.mark.parametrize(
    ("swiglu", "gated", "ffn"), [("True", True, 14336), ("False", False, 9557), (None, True, 14336)]
)
def test_an_mlp_without_swiglu_is_gelu_at_its_equivalent_width(
    tmp_path: Path, swiglu: str | None, gated: bool, ffn: int
) -> None:
    """Megatron without --swiglu trains a GELU MLP of width ffn_hidden_size: two matrices,
    read at the SwiGLU width of the same FLOPs (2 x 14336 / 3 = 9557); a block that does
    not print the flag reads as SwiGLU."""
    text = LOG.read_text()
    if swiglu is not None:
        text = text.replace(
            "  hidden_size ....",
            f"  swiglu .......................... {swiglu}\n  hidden_size ....",
            1,
        )
    log = tmp_path / "run.log"
    log.write_text(text)
    df, report = parse_megatron(log)
    assert report.skips == []
    assert (bool(df["gated_mlp"].iloc[0]), int(df["ffn_hidden_size"].iloc[0])) == (gated, ffn)


def test_batch_disagreeing_with_config_is_a_counted_skip(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text(LOG.read_text().replace("global batch size:   128", "global batch size:   256"))
    df, report = parse_megatron(log)
    assert df.empty and "must equal dp x grad_accum x mbs x seq_len" in report.skips[0].reason


def test_oom_run(tmp_path: Path) -> None:
    text = LOG.read_text()
    cut = text.index(" [2024-11-20 09:17:00]")
    log = tmp_path / "run.log"
    log.write_text(
        text[:cut] + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    df, _ = parse_megatron(log)
    assert df["status"].iloc[0] == "oom"


def _recomputing(
    tmp_path: Path, method: str | None, layers: int | str | None, vpp: int | None = None
) -> Path:
    """The fixture's run with full recomputation by ``method`` over ``layers`` (lines that
    Megatron prints; absent where None)."""
    extra = "".join(
        f"  {name} {'.' * 20} {value}\n"
        for name, value in (("recompute_method", method), ("recompute_num_layers", layers))
        if value is not None
    )
    text = LOG.read_text().replace(
        "  recompute_granularity ........................... None\n",
        "  recompute_granularity ........................... full\n" + extra,
    )
    if vpp is not None:
        text = text.replace(
            "virtual_pipeline_model_parallel_size ............ None",
            f"virtual_pipeline_model_parallel_size ............ {vpp}",
        )
    log = tmp_path / "run.log"
    log.write_text(text)
    return log


@pytest.mark.parametrize(
    ("method", "layers", "vpp", "checkpointed"),
    [
        ("block", 4, None, 4),  # the first 4 of the stage's 16 layers
        ("block", 3, 2, 6),  # the first 3 of each of the rank's two chunks of 8
        ("block", 16, None, 0),  # all of them: every layer
        ("uniform", 1, None, 0),  # each layer its own unit: every layer
        (None, None, None, 0),  # older logs: --checkpoint-activations, every layer
    ],
)
def test_full_recomputation_by_method(
    tmp_path: Path, method: str | None, layers: int | None, vpp: int | None, checkpointed: int
) -> None:
    df, report = parse_megatron(_recomputing(tmp_path, method, layers, vpp))
    assert report.skips == []
    assert (df.iloc[0]["recompute"], df.iloc[0]["recompute_layers"]) == ("full", checkpointed)


@pytest.mark.parametrize(
    ("method", "layers", "said"),
    [
        ("uniform", 2, "checkpoints units of 2 layers"),
        ("block", "some", "recompute_num_layers must be an integer, got 'some'"),
        ("random", 1, "recompute_method must be uniform or block, got 'random'"),
    ],
)
def test_recomputation_the_surrogate_cannot_read_is_a_skip_that_says_why(
    tmp_path: Path, method: str, layers: int | str, said: str
) -> None:
    """Uniform units of 2 layers keep one input per unit and recompute the unit together: not
    the model's full recomputation, so not read as it; unreadable settings say what must
    hold."""
    df, report = parse_megatron(_recomputing(tmp_path, method, layers))
    assert df.empty and said in report.skips[0].reason


@pytest.mark.parametrize(("instances", "copies"), [("2", 2), ("1", 1), (None, 1)])
def test_distributed_optimizer_instances_are_copies_of_the_shards(
    tmp_path: Path, instances: str | None, copies: int
) -> None:
    """Megatron's partial distributed optimizer (``num_distributed_optimizer_instances``)
    shards over dp / instances ranks, a copy per instance: dp_replicate."""
    text = LOG.read_text()
    if instances is not None:
        line = next(s for s in text.splitlines() if "use_distributed_optimizer" in s)
        text = text.replace(
            line, line + f"\n  num_distributed_optimizer_instances ............ {instances}"
        )
    log = tmp_path / "run.log"
    log.write_text(text)
    df, report = parse_megatron(log)
    assert report.skips == []
    assert (df.iloc[0]["zero_stage"], df.iloc[0]["dp_replicate"]) == (1, copies)


@pytest.mark.parametrize(
    ("bf16", "fp16", "dtype"),
    [("True", "False", "bf16"), ("False", "True", "bf16"), ("False", "False", None)],
)
def test_precision(tmp_path: Path, bf16: str, fp16: str, dtype: str | None) -> None:
    """fp16 has bf16's tensor-core peak and bytes, so it reads as bf16; fp32 is not modelled:
    skipped with the reason, never read as bf16."""
    text = LOG.read_text().replace(
        "  bf16 ............................................ True\n",
        f"  bf16 ............................................ {bf16}\n"
        f"  fp16 ............................................ {fp16}\n",
    )
    log = tmp_path / "run.log"
    log.write_text(text)
    df, report = parse_megatron(log)
    if dtype is None:
        assert df.empty and "trained in fp32" in report.skips[0].reason
    else:
        assert report.skips == [] and df.iloc[0]["dtype"] == dtype


@pytest.mark.parametrize("ms", ["0.0", "0"])
def test_a_zero_iteration_time_is_a_counted_skip(tmp_path: Path, ms: str) -> None:
    """Megatron logs no tokens/s: they are derived from the iteration time, which must not
    be 0."""
    import re

    log = tmp_path / LOG.name
    log.write_text(
        re.sub(
            r"elapsed time per iteration \(ms\): [\d.]+",
            f"elapsed time per iteration (ms): {ms}",
            LOG.read_text(),
        )
    )
    df, report = parse_megatron(log)
    assert df.empty
    assert report.skips[-1].reason == "the log's step time must be a positive number, got 0"
