"""`surrogate microbench` and `surrogate calibrate` through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from surrogate.cli import main

FIX = Path(__file__).resolve().parents[1] / "ingest" / "fixtures"


def test_print_commands(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["microbench", "--print-commands", "--quick", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "-m microbench.gemm" in out.out and "-m microbench.collectives" in out.out
    assert "estimated" in out.err


def test_unknown_op_is_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["microbench", "--print-commands", "--ops", "allreduce"]) == 2
    assert "--ops must be among" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_cpu_run(tmp_path: Path) -> None:
    code = main(
        ["microbench", "--quick", "--ops", "all_reduce", "--no-gemm", "--out-dir", str(tmp_path)]
    )
    assert code == 0
    lines = (tmp_path / "collectives.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(ln)["status"] == "ok" for ln in lines)


def test_calibrate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.json"
    code = main(
        [
            "calibrate",
            str(FIX / "mbench_xla_matmul_excerpt.txtpb"),
            str(FIX / "mbench_nccl_2node_excerpt.log"),
            "--gpu",
            "H100",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    prof = json.loads(out.read_text())
    assert prof["gpu"] == "H100-SXM-80GB" and prof["gemm"]["bf16"]["provenance"] == "measured"
    err = capsys.readouterr().err
    assert "extrapolated" in err and "attention not measured (the GEMM proxy)" in err
    assert prof["attention"] is None


def test_calibrate_with_our_attention_timings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = Path(__file__).resolve().parents[2] / "datasets" / "h100" / "2026-11-23"
    out = tmp_path / "p.json"
    assert (
        main(
            [
                "calibrate",
                str(FIX / "mbench_xla_matmul_excerpt.txtpb"),
                str(own / "attention.jsonl"),
                "--gpu",
                "H100",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "attention measured (28 points)" in capsys.readouterr().err
    assert json.loads(out.read_text())["attention"]["provenance"] == "measured"


def test_calibrate_wrong_gpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(
        [
            "calibrate",
            str(FIX / "mbench_nccl_2node_excerpt.log"),
            "--gpu",
            "A100",
            "--out",
            str(tmp_path / "p.json"),
        ]
    )
    assert code == 2 and "no rows for hardware A100-SXM-80GB" in capsys.readouterr().err
