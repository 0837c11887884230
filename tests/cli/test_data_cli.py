"""`surrogate ingest`, `surrogate data fetch`, `surrogate data summary`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from surrogate.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PLAYBOOK = FIXTURES / "sweeps_playbook_excerpt.csv"
TORCHTITAN = FIXTURES / "sweeps_torchtitan" / "llama3_8b" / "train.log"


def test_ingest_prints_report_and_appends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    into = tmp_path / "s.parquet"
    assert main(["ingest", str(PLAYBOOK), "--into", str(into)]) == 0
    out = capsys.readouterr().out
    assert "read 9 rows from 1 file(s), skipped 0" in out
    # the run whose pipeline is deeper than its layers is kept, flagged, not dropped
    assert "kept 1 run(s) whose layout the configuration validator rejects" in out
    assert "added 9, replaced 0, unchanged 0, table now holds 9 rows" in out
    assert (
        main(
            [
                "ingest",
                str(TORCHTITAN),
                "--into",
                str(into),
                "--set",
                "num_nodes=1",
                "--format",
                "torchtitan",
            ]
        )
        == 0
    )
    assert "table now holds 10 rows" in capsys.readouterr().out
    assert main(["data", "summary", "--sweeps", str(into)]) == 0
    out = capsys.readouterr().out
    assert "sweep table" in out and "torchtitan" in out and "1.34G" in out


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["ingest", "nope.log", "--into", "x.parquet"], "error: 'nope.log' does not exist"),
        (
            ["ingest", str(PLAYBOOK), "--into", "x.parquet", "--set", "tp"],
            "error: --set takes KEY=VALUE, got 'tp'",
        ),
        (
            ["ingest", str(PLAYBOOK), "--into", "x.parquet", "--format", "slurm"],
            "error: --format must be one of",
        ),
        (["data", "fetch", "--only", "nothing"], "error: --only must name sources of the TOML"),
        (
            ["data", "summary", "--data-dir", "/nonexistent"],
            "error: --data-dir must be an existing directory",
        ),
    ],
)
def test_errors_are_one_line_and_exit_2(
    args: list[str],
    match: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(match) and err.count("\n") == 1


def test_fetch_from_a_file_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payload = tmp_path / "table.csv"
    payload.write_bytes(b"a,b\n1,2\n")
    sha = hashlib.sha256(payload.read_bytes()).hexdigest()
    toml = tmp_path / "sources.toml"
    toml.write_text(
        f'[[source]]\nname = "t"\nurl = "{payload.as_uri()}"\nsha256 = "{sha}"\n'
        'path = "sweeps/t.csv"\n'
    )
    dest = tmp_path / "cache"
    assert main(["data", "fetch", "--sources", str(toml), "--dest", str(dest)]) == 0
    assert "downloaded  t  8 bytes" in capsys.readouterr().out
    assert (dest / "sweeps/t.csv").read_bytes() == b"a,b\n1,2\n"
    toml.write_text(toml.read_text().replace(sha, "f" * 64))
    (dest / "sweeps/t.csv").unlink()
    assert main(["data", "fetch", "--sources", str(toml), "--dest", str(dest)]) == 2
    assert "must be " + "f" * 64 in capsys.readouterr().err
    assert not (dest / "sweeps/t.csv").exists()


def test_summary_of_a_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "sweeps" / "hf_ultrascale_playbook" / "bench_final2_mfu2.csv"
    target.parent.mkdir(parents=True)
    target.write_bytes(PLAYBOOK.read_bytes())
    assert main(["data", "summary", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "present  hf_ultrascale_playbook" in out and "missing  xla_matmul_perf_table" in out
    assert "read 9 rows" in out and "hf_ultrascale_playbook" in out


def test_summary_of_microbench_coverage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "mb.csv"
    table.write_text(
        "op,size_bytes,time_s\nall_reduce,8,1e-5\nall_reduce,1024,2e-5\nall_gather,64,1e-5\n"
    )
    sweeps = tmp_path / "s.parquet"
    assert main(["ingest", str(PLAYBOOK), "--into", str(sweeps)]) == 0
    assert main(["data", "summary", "--sweeps", str(sweeps), "--microbench", str(table)]) == 0
    out = capsys.readouterr().out
    assert "microbenchmark table" in out and "all_reduce" in out and "1024" in out
    bad = tmp_path / "bad.csv"
    bad.write_text("x\n1\n")
    assert main(["data", "summary", "--sweeps", str(sweeps), "--microbench", str(bad)]) == 2
    assert "a microbenchmark table needs an 'op' column" in capsys.readouterr().err
