"""bench_cluster / nanotron logs (fixtures in nanotron's log format)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from surrogate.errors import DataError
from surrogate.ingest.logrun import human_number, steady
from surrogate.ingest.nanotron import parse_nanotron

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "sweeps_bench_cluster"
DONE = RUNS / "dp-2_tp-4_pp-1_mbz-4" / "log_13490827.out"
OOM = RUNS / "dp-8_tp-1_pp-1_mbz-32" / "log_13490828.out"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4.72K", 4720.0),
        ("1.05M", 1.05e6),
        ("256", 256.0),
        ("6,530", 6530.0),
        ("9.53e-05", 9.53e-5),
    ],
)
def test_human_number(text: str, value: float) -> None:
    assert human_number(text) == pytest.approx(value)


def test_human_number_rejects_text() -> None:
    with pytest.raises(ValueError, match="not a number: 'abc'"):
        human_number("abc")


def test_steady_drops_the_first_value() -> None:
    assert steady([10.0, 1.0, 2.0, 3.0]) == 2.0
    assert steady([5.0]) == 5.0
    assert steady([]) is None


def test_completed_run() -> None:
    df, report = parse_nanotron(DONE)
    assert report.skips == [] and len(df) == 1
    r = df.iloc[0]
    assert r["status"] == "completed"
    assert (r["dp"], r["tp"], r["pp"], r["mbs"], r["grad_accum"], r["zero_stage"]) == (
        2,
        4,
        1,
        4,
        32,
        1,
    )
    assert (r["num_nodes"], r["gpus_per_node"]) == (1, 8)
    assert r["sequence_parallel"] and r["tie_embeddings"] and r["framework"] == "nanotron"
    assert r["tokens_per_s_per_gpu"] == 3870.0  # median of 3.87K 3.88K 3.85K (first dropped)
    assert r["step_time_s"] == pytest.approx(33.9)
    assert r["tflops_per_gpu_reported"] == 37.4
    assert r["peak_mem_allocated_gib"] == pytest.approx(6612.25 / 1024)
    assert r["peak_mem_reserved_gib"] == pytest.approx(7042.0 / 1024)
    assert r["date"] == "2024-12-18 12:56:40"
    assert (r["source"], r["run_id"]) == ("bench_cluster", "dp-2_tp-4_pp-1_mbz-4/log_13490827")
    # our MFU against the log's model TFLOP/s: both are 6N + 12 L h s based
    assert r["mfu"] == pytest.approx(r["tflops_per_gpu_reported"] * 1e12 / 989.4e12, rel=0.01)


def test_oom_run_from_log_evidence() -> None:
    df, _ = parse_nanotron(OOM)
    r = df.iloc[0]
    assert r["status"] == "oom"
    assert r["tokens_per_s_per_gpu"] != r["tokens_per_s_per_gpu"]  # NaN: no iteration logged


def test_status_txt_and_flags(tmp_path: Path) -> None:
    run = tmp_path / "dp-8_tp-1_pp-1_mbz-32"
    shutil.copytree(OOM.parent, run)
    (run / "status.txt").write_text("timeout\n")
    df, _ = parse_nanotron(run / OOM.name, given={"hardware": "my cluster", "source": "mine"})
    r = df.iloc[0]
    assert (r["status"], r["hardware"], r["source"]) == ("timeout", "my cluster", "mine")


def test_unfinished_run_is_a_counted_skip(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DONE.parent, run)
    (run / "status.txt").write_text("running\n")
    df, report = parse_nanotron(run / DONE.name)
    assert df.empty
    assert report.skips[0].reason == "run not finished: status.txt says 'running'"


def test_truncated_log_is_a_counted_skip(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DONE.parent, run)
    (run / "status.txt").unlink()
    log = run / DONE.name
    log.write_text("\n".join(log.read_text().splitlines()[:6]) + "\n")
    df, report = parse_nanotron(log)
    assert df.empty
    assert "after 1 of 4 iterations" in report.skips[0].reason


def test_missing_config_needs_flags(tmp_path: Path) -> None:
    log = tmp_path / "log_1.out"
    shutil.copy(DONE, log)
    df, report = parse_nanotron(log)
    assert df.empty
    assert "no valid configuration: a configuration needs the model columns" in (
        report.skips[0].reason
    )
    df, report = parse_nanotron(
        log, given={"model": "1.34b", "dp": "2", "tp": "4", "mbs": "4", "grad_accum": "32"}
    )
    assert len(df) == 1 and df["model_name"].iloc[0] == "playbook-1.34b"


def test_conflicting_flag_is_a_counted_skip() -> None:
    df, report = parse_nanotron(DONE, given={"tp": "8"})
    assert df.empty
    assert "--set tp=8 conflicts with the file's tp=4" in report.skips[0].reason


def test_bad_yaml_and_bad_iteration_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DONE.parent, run)
    (run / "config.yaml").write_text("model: [unclosed\n")
    df, report = parse_nanotron(run / DONE.name)
    assert df.empty and "not valid YAML" in report.skips[0].reason
    shutil.copy(DONE.parent / "config.yaml", run / "config.yaml")
    log = run / DONE.name
    text = log.read_text()
    log.write_text(text.replace("tokens_per_sec_per_gpu: 3.87K", "tokens_per_sec_per_gpu: ??"))
    df, report = parse_nanotron(log)
    assert len(df) == 1
    assert report.skips[0].line == 7
    assert "iteration line without a readable" in report.skips[0].reason


def test_missing_log() -> None:
    with pytest.raises(DataError, match=r"log '.*nope.out' does not exist"):
        parse_nanotron(RUNS / "nope.out")


@pytest.mark.parametrize(
    ("engine", "schedule"), [("1f1b", "1f1b"), ("afab", "afab"), (None, "1f1b")]
)
def test_pipeline_engine_is_the_schedule(tmp_path: Path, engine, schedule) -> None:
    """``parallelism.pp_engine`` (nanotron's default, 1F1B, when absent) -> pp_schedule."""
    run = tmp_path / DONE.parent.name
    shutil.copytree(DONE.parent, run)
    text = (run / "config.yaml").read_text()
    text = text.replace("  pp_engine: 1f1b\n", "" if engine is None else f"  pp_engine: {engine}\n")
    (run / "config.yaml").write_text(text)
    df, report = parse_nanotron(run / DONE.name)
    assert report.skips == [] and df.iloc[0]["pp_schedule"] == schedule


def test_unknown_pipeline_engine_is_a_counted_skip(tmp_path: Path) -> None:
    run = tmp_path / DONE.parent.name
    shutil.copytree(DONE.parent, run)
    text = (run / "config.yaml").read_text().replace("pp_engine: 1f1b", "pp_engine: zb")
    (run / "config.yaml").write_text(text)
    df, report = parse_nanotron(run / DONE.name)
    assert len(df) == 0 and len(report.skips) == 1
    assert "pp_engine must be one of 1f1b, afab" in report.skips[0].reason


def test_a_precision_not_modelled_is_a_skip_that_says_why(tmp_path: Path) -> None:
    """A float32 run is skipped with the reason, never read as the default bf16."""
    run = tmp_path / "run"
    shutil.copytree(DONE.parent, run)
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("dtype: bfloat16", "dtype: float32"))
    df, report = parse_nanotron(run / DONE.name)
    assert df.empty and "model dtype 'float32' is not modelled" in report.skips[0].reason


def test_a_zero_throughput_is_a_counted_skip(tmp_path: Path) -> None:
    import re

    run = tmp_path / "run"
    shutil.copytree(DONE.parent, run)
    log = run / DONE.name
    log.write_text(
        re.sub(r"tokens_per_sec_per_gpu: [\d.]+K", "tokens_per_sec_per_gpu: 0", log.read_text())
    )
    df, report = parse_nanotron(log)
    assert df.empty
    assert "tokens/s per GPU must be a positive number, got 0" in report.skips[-1].reason
