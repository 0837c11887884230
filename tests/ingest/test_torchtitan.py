"""torchtitan logs and TOML configs (fixture in torchtitan's log format, with its colours)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from surrogate.ingest.torchtitan import parse_torchtitan

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "sweeps_torchtitan" / "llama3_8b"
LOG = RUN / "train.log"


def test_completed_run() -> None:
    df, report = parse_torchtitan(LOG, given={"num_nodes": "1"})
    assert report.skips == []
    r = df.iloc[0]
    assert r["status"] == "completed"
    assert (r["num_layers"], r["num_kv_heads"], r["vocab_size"], r["seq_len"]) == (
        32,
        8,
        128256,
        8192,
    )
    assert (r["dp"], r["tp"], r["zero_stage"], r["recompute"], r["mbs"]) == (
        8,
        1,
        3,
        "selective",
        1,
    )
    assert r["framework"] == "torchtitan"
    assert r["tokens_per_s_per_gpu"] == 6547.0  # median of 6,531 and 6,563
    assert r["mfu_reported"] == pytest.approx(38.335)
    assert r["tflops_per_gpu_reported"] == pytest.approx(379.145)
    assert r["peak_mem_reserved_gib"] == 47.57
    assert r["peak_mem_allocated_gib"] != r["peak_mem_allocated_gib"]  # not logged: NaN
    assert r["step_time_s"] == pytest.approx(8192 * 8 / (6547.0 * 8))
    assert r["date"] == "2025-03-04 10:12:01"


def test_fill_the_world_needs_the_node_count() -> None:
    df, report = parse_torchtitan(LOG)
    assert df.empty
    assert "data_parallel_shard_degree = -1" in report.skips[0].reason
    assert "--set num_nodes=N" in report.skips[0].reason


def test_fsdp_with_pp_is_zero2_and_global_batch_gives_accumulation(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    toml = run / "llama3_8b.toml"
    text = toml.read_text().replace("pipeline_parallel_degree = 1", "pipeline_parallel_degree = 2")
    text = text.replace("steps = 20", "steps = 20\nglobal_batch_size = 32")
    toml.write_text(text)
    df, _ = parse_torchtitan(run / "train.log", given={"num_nodes": "2"})
    r = df.iloc[0]
    assert (r["dp"], r["pp"], r["zero_stage"], r["grad_accum"], r["num_nodes"]) == (8, 2, 2, 4, 2)


def test_bad_toml_is_a_counted_skip(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "llama3_8b.toml").write_text("[training\n")
    df, report = parse_torchtitan(run / "train.log", given={"num_nodes": "1"})
    assert df.empty and "not valid TOML" in report.skips[0].reason


def test_unknown_flavour_needs_model_flag(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    toml = run / "llama3_8b.toml"
    toml.write_text(toml.read_text().replace('flavor = "8B"', 'flavor = "debugmodel"'))
    df, report = parse_torchtitan(run / "train.log", given={"num_nodes": "1"})
    assert df.empty and "needs the model columns" in report.skips[0].reason
    df, report = parse_torchtitan(run / "train.log", given={"num_nodes": "1", "model": "8b"})
    assert len(df) == 1


CHECKPOINTING = '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\n'


@pytest.mark.parametrize(
    ("section", "recompute"),
    [
        (CHECKPOINTING, "selective"),
        ('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "1"\n', "full"),
        ('[activation_checkpoint]\nmode = "full"\n', "full"),
        ('[activation_checkpoint]\nmode = "none"\n', "none"),
    ],
)
def test_activation_checkpointing_as_recompute(
    tmp_path: Path, section: str, recompute: str
) -> None:
    """Per-operator checkpointing is the surrogate's selective mode, every block is full."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    toml = run / "llama3_8b.toml"
    toml.write_text(toml.read_text().replace(CHECKPOINTING, section))
    df, report = parse_torchtitan(run / "train.log", given={"num_nodes": "1"})
    assert report.skips == [] and df.iloc[0]["recompute"] == recompute


EVERY_SECOND = '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"\n'


def _with(tmp_path: Path, section: str, *, pp: int = 1) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    toml = run / "llama3_8b.toml"
    text = toml.read_text().replace(CHECKPOINTING, section)
    if pp > 1:
        text = text.replace(
            "pipeline_parallel_degree = 1",
            f'pipeline_parallel_degree = {pp}\npipeline_parallel_schedule = "1F1B"',
        )
    toml.write_text(text)
    return run / "train.log"


@pytest.mark.parametrize(
    ("section", "pp", "recompute", "layers"),
    [
        (EVERY_SECOND, 1, "full", 16),
        ("", 1, "full", 16),  # no section: torchtitan's default, "2"
        (EVERY_SECOND.replace('"2"', '"3"'), 1, "full", 10),
        (EVERY_SECOND.replace('"2"', '"3"'), 2, "full", 5),  # rank 0 holds 16 of 32 (its split)
        (EVERY_SECOND.replace('"2"', '"0"'), 1, "full", 0),  # 0: every block, as torchtitan reads
        (EVERY_SECOND.replace('"2"', '"64"'), 1, "none", 0),  # more than the rank's 32: none
    ],
)
def test_every_nth_block_is_full_recomputation_of_some_layers(
    tmp_path: Path, section: str, pp: int, recompute: str, layers: int
) -> None:
    """selective_ac_option n (torchtitan's default "2") checkpoints every n-th block of a
    rank in full: floor(rank 0's layers / n) checkpointed layers per stage."""
    df, report = parse_torchtitan(_with(tmp_path, section, pp=pp), given={"num_nodes": "1"})
    assert report.skips == []
    assert (df.iloc[0]["recompute"], df.iloc[0]["recompute_layers"]) == (recompute, layers)


@pytest.mark.parametrize(
    ("section", "unknown_model", "said"),
    [
        (
            '[activation_checkpoint]\nmode = "memory_budget"\n',
            False,
            "mode 'memory_budget' is not modelled",
        ),
        (EVERY_SECOND.replace('"2"', '"two"'), False, "must be 'op' or an integer"),
        ("", True, "torchtitan's default when the config sets no mode"),
    ],
)
def test_checkpointing_the_surrogate_cannot_read_is_a_skip_that_says_why(
    tmp_path: Path, section: str, unknown_model: bool, said: str
) -> None:
    """Not mislabelled: skipped, with the reason (the layer count of every n-th block needs
    the model)."""
    log = _with(tmp_path, section)
    if unknown_model:  # an unknown flavour: no preset, so no layer count
        toml = log.parent / "llama3_8b.toml"
        toml.write_text(toml.read_text().replace('flavor = "8B"', 'flavor = "debugmodel"'))
    df, report = parse_torchtitan(log, given={"num_nodes": "1"})
    assert df.empty and said in report.skips[0].reason
    df, report = parse_torchtitan(log, given={"num_nodes": "1", "model": "8b"})
    assert len(df) == int(unknown_model)


def _edited(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """The fixture run with each (old, new) replacement made in its TOML."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    toml = run / "llama3_8b.toml"
    text = toml.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    toml.write_text(text)
    return run / "train.log"


NO_FSDP = ("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 1")
TP2 = ("tensor_parallel_degree = 1", "tensor_parallel_degree = 2")
PP2 = (
    "pipeline_parallel_degree = 1",
    'pipeline_parallel_degree = 2\npipeline_parallel_schedule = "1F1B"',
)
REPLICATE4 = ("data_parallel_replicate_degree = 1", "data_parallel_replicate_degree = 4")
REPLICATE8 = ("data_parallel_replicate_degree = 1", "data_parallel_replicate_degree = 8")


@pytest.mark.parametrize(
    ("edits", "dtype"),
    [
        ((), "bf16"),  # FSDP's mixed precision
        ((NO_FSDP, REPLICATE8), "bf16"),  # DDP alone: torch.autocast
        ((('flavor = "8B"', 'flavor = "8B"\nconverters = ["float8"]'),), "fp8"),
        (
            (
                (
                    'flavor = "8B"',
                    'flavor = "8B"\nconverters = ["quantize.linear.float8", '
                    '"quantize.grouped_mm.float8"]',
                ),
            ),
            "fp8",
        ),
    ],
)
def test_precision_the_run_trained_in(tmp_path: Path, edits: tuple, dtype: str) -> None:
    df, report = parse_torchtitan(_edited(tmp_path, *edits), given={"num_nodes": "1"})
    assert report.skips == [] and df.iloc[0]["dtype"] == dtype


@pytest.mark.parametrize(
    ("edits", "said"),
    [
        ((NO_FSDP, TP2, REPLICATE4), "tensor or pipeline parallelism without FSDP"),
        ((NO_FSDP, PP2, REPLICATE4), "trains in fp32: torchtitan disables mixed precision"),
        (
            (("seq_len = 8192", 'seq_len = 8192\nmixed_precision_param = "float32"'),),
            "mixed_precision_param = 'float32' trains in fp32",
        ),
        (
            (("seq_len = 8192", 'seq_len = 8192\ndtype = "bfloat16"'),),
            "without fp32 master weights",
        ),
        (
            (('flavor = "8B"', 'flavor = "8B"\nconverters = ["quantize.linear.mx"]'),),
            "converters ['quantize.linear.mx'] are not modelled",
        ),
        (
            (('flavor = "8B"', 'flavor = "8B"\nconverters = ["quantize.grouped_mm.float8"]'),),
            "converters ['quantize.grouped_mm.float8'] are not modelled",
        ),
    ],
)
def test_a_precision_the_surrogate_does_not_model_is_a_skip_that_says_why(
    tmp_path: Path, edits: tuple, said: str
) -> None:
    """Never read as bf16: torchtitan's tp or pp without FSDP trains in fp32 (mixed precision
    disabled), and other precisions are not modelled."""
    df, report = parse_torchtitan(_edited(tmp_path, *edits), given={"num_nodes": "1"})
    assert df.empty and said in report.skips[0].reason, report.skips


@pytest.mark.parametrize("tps", ["0", "0.0", "0K"])
def test_a_zero_throughput_is_a_counted_skip_not_a_division_by_zero(
    tmp_path: Path, tps: str
) -> None:
    """A stalled or mis-timed run logs ``tps: 0``; its step time cannot be derived from it."""
    import re

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    log = run / "train.log"
    log.write_text(re.sub(r"tps: [\d,]+", f"tps: {tps}", log.read_text()))
    df, report = parse_torchtitan(log, given={"num_nodes": "1"})
    assert df.empty
    assert [s.reason for s in report.skips] == [
        "the log's tokens/s per GPU must be a positive number, got 0"
    ]


def test_what_the_user_knows_of_the_cluster_is_written_with_the_runs() -> None:
    df, _ = parse_torchtitan(
        LOG,
        given={
            "num_nodes": "1",
            "profile": "my-cluster.json",
            "peak_mem_stage": "0",
            "net_scale": "0.7",
        },
    )
    assert df[["profile", "peak_mem_stage", "net_scale"]].iloc[0].tolist() == [
        "my-cluster.json",
        0.0,
        0.7,
    ]
    plain, _ = parse_torchtitan(LOG, given={"num_nodes": "1"})
    assert plain[["profile", "peak_mem_stage", "net_scale"]].isna().all(axis=None)
