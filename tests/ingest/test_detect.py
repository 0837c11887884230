"""Format detection and the ingest dispatcher."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from surrogate.errors import DataError
from surrogate.ingest.detect import check_format, detect_format
from surrogate.ingest.dispatch import ingest
from surrogate.runs.sweep_files import read_sweeps

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PLAYBOOK = FIXTURES / "sweeps_playbook_excerpt.csv"
NANOTRON = FIXTURES / "sweeps_bench_cluster" / "dp-2_tp-4_pp-1_mbz-4" / "log_13490827.out"
TORCHTITAN = FIXTURES / "sweeps_torchtitan" / "llama3_8b" / "train.log"
MEGATRON = FIXTURES / "sweeps_megatron" / "gpt_8b" / "train_2nodes.log"
NCCL = FIXTURES / "sweeps_nccl_all_reduce_excerpt.log"
"""A few lines cut from ../shared/data/microbench/nccl-tests/dgx_h100_1node_8gpu_all_reduce.log."""


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        (PLAYBOOK, "playbook"),
        (NANOTRON, "nanotron"),
        (TORCHTITAN, "torchtitan"),
        (MEGATRON, "megatron"),
    ],
)
def test_detects_fixtures(path: Path, fmt: str) -> None:
    assert detect_format(path) == fmt


def test_detects_microbench_by_name_and_content(tmp_path: Path) -> None:
    (tmp_path / "t.txtpb").write_text("entries {}\n")
    (tmp_path / "m.jsonl").write_text("{}\n")
    assert detect_format(tmp_path / "t.txtpb") == "xla"
    assert detect_format(tmp_path / "m.jsonl") == "microbench-jsonl"
    assert detect_format(NCCL) == "nccl-tests"


def test_unknown_missing_and_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(DataError, match=r"cannot tell the format of .*notes.txt.*give --format"):
        detect_format(tmp_path / "notes.txt")
    with pytest.raises(DataError, match="does not exist"):
        detect_format(tmp_path / "none.log")
    with pytest.raises(DataError, match="is a directory"):
        detect_format(tmp_path)


def test_check_format() -> None:
    assert check_format("megatron") == "megatron"
    with pytest.raises(DataError, match=r"--format must be one of playbook, .* got 'slurm'"):
        check_format("slurm")


def test_ingest_directory_of_runs(tmp_path: Path) -> None:
    runs = tmp_path / "results"
    shutil.copytree(FIXTURES / "sweeps_bench_cluster", runs)
    (runs / "README.txt").write_text("not a log\n")
    into = tmp_path / "sweeps.parquet"
    result = ingest([runs], into)
    assert result.kind == "sweep"
    assert sorted(result.frame["status"]) == ["completed", "oom"]
    assert [s.reason.startswith("unknown format") for s in result.report.skips] == [True]
    assert "added 2, replaced 0" in result.append_summary
    assert len(read_sweeps(into)) == 2


def test_ingest_many_formats_into_one_table(tmp_path: Path) -> None:
    into = tmp_path / "sweeps.parquet"
    ingest([PLAYBOOK], into)
    ingest([NANOTRON, MEGATRON], into)
    result = ingest([TORCHTITAN], into, given={"num_nodes": "1"})
    table = read_sweeps(into)
    assert len(table) == 8 + 2 + 1
    assert set(table["source"]) == {
        "hf_ultrascale_playbook",
        "bench_cluster",
        "megatron",
        "torchtitan",
    }
    # the Playbook excerpt's run with a pipeline deeper than its layers is kept, flagged
    everything = read_sweeps(into, flagged=True)
    assert len(everything) == 12 and everything["layout_problem"].notna().sum() == 1
    assert "table now holds 12 rows" in result.append_summary


def test_ingest_errors(tmp_path: Path) -> None:
    into = tmp_path / "t.parquet"
    with pytest.raises(DataError, match="does not exist"):
        ingest([tmp_path / "none.log"], into)
    with pytest.raises(DataError, match="the Playbook table carries its own configuration"):
        ingest([PLAYBOOK], into, given={"tp": "2"})
    with pytest.raises(DataError, match="one ingest writes one table"):
        ingest([PLAYBOOK, NCCL], into)
    assert not into.exists()
