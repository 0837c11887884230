"""`surrogate propose` from the command line: what its round costs and its budget, --runs read
as a sweep table only, and a round with no candidate left refused before anything is
written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from surrogate.cli import main

SMALL = [
    "--model",
    "8b",
    "--nodes",
    "1",
    "--global-batch-seqs",
    "32",
    "--max-cp",
    "1",
    "--max-vpp",
    "1",
    "--max-mbs",
    "2",
]


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], match: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert re.search(match, err), err
    return err


def test_propose_prints_and_records_what_the_round_costs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    rnd = tmp_path / "r1"
    assert main(["propose", "--round", str(rnd), "--k", "3", "--steps", "40", *SMALL]) == 0
    out = " ".join(capsys.readouterr().out.split())
    cost = json.loads((rnd / "round.json").read_text())["cost"]
    assert (
        f"cost: 3 runs on 24 GPUs in all, {cost['gpu_hours']:,.1f} GPU-hours at the "
        "predicted step times (40 steps per run: --steps" in out
    )
    assert "expected OOMs:" in out and "the sum of p_oom" in out
    assert "budget" not in out


def test_a_budget_bounds_the_round_and_says_what_it_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["propose", "--round", str(tmp_path / "r1"), "--k", "4", *SMALL]) == 0
    capsys.readouterr()
    hours = pd.read_csv(tmp_path / "r1" / "proposals.csv")["gpu_hours"]
    budget = f"{hours.sum() / 2:.4f}"
    assert (
        main(
            [
                "propose",
                "--round",
                str(tmp_path / "r2"),
                "--k",
                "4",
                *SMALL,
                "--budget-gpu-hours",
                budget,
            ]
        )
        == 0
    )
    out = " ".join(capsys.readouterr().out.split())
    spent = pd.read_csv(tmp_path / "r2" / "proposals.csv")["gpu_hours"].sum()
    assert spent <= float(budget)
    assert f"budget: {float(budget):,.1f} GPU-hours" in out
    one_line_error(
        capsys,
        ["propose", "--round", str(tmp_path / "r3"), *SMALL, "--budget-gpu-hours", "1e-9"],
        r"no candidate fits --budget-gpu-hours 1e-09: the cheapest run costs",
    )
    for bad in ("0", "-5", "nan", "inf"):
        one_line_error(
            capsys,
            ["propose", "--round", str(tmp_path / "r4"), *SMALL, "--budget-gpu-hours", bad],
            "--budget-gpu-hours must be",
        )
    assert not (tmp_path / "r3").exists() and not (tmp_path / "r4").exists()


@pytest.mark.parametrize("max_p_oom", ["0", "0.0", "1e-300"])
def test_no_candidate_left_is_one_line_and_nothing_written(
    tmp_path: Path, max_p_oom: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-p-oom 0 wrote an empty round, then crashed reading it."""
    rnd = tmp_path / "r"
    one_line_error(
        capsys,
        ["propose", "--round", str(rnd), *SMALL, "--max-p-oom", max_p_oom],
        r"no candidate is left to propose \(nothing was written\).*raise --max-p-oom",
    )
    assert not rnd.exists()
    assert not list(tmp_path.iterdir())  # no temporary directory left either


def test_runs_that_are_no_sweep_table_are_refused_saying_what_they_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "r1"
    assert main(["propose", "--round", str(first), "--k", "2", *SMALL]) == 0
    capsys.readouterr()
    (tmp_path / "junk.csv").write_text("hello world\nnot a table\n")
    (tmp_path / "empty.csv").write_text("")
    pd.DataFrame({"model": ["8b"], "num_nodes": [1], "dp": [8]}).to_csv(
        tmp_path / "layouts.csv", index=False
    )
    for runs, match in (
        (first / "proposals.csv", r"is a round's proposals\.csv"),
        (tmp_path / "layouts.csv", "configurations without outcomes"),
        (tmp_path / "junk.csv", "no sweep table"),
        (tmp_path / "empty.csv", "--runs"),
    ):
        one_line_error(
            capsys, ["propose", "--round", str(tmp_path / "r2"), *SMALL, "--runs", str(runs)], match
        )
        assert not (tmp_path / "r2").exists()


@pytest.mark.parametrize(("flag", "value"), [("--k", "1001"), ("--k", "99999999")])
def test_k_is_capped_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    one_line_error(
        capsys,
        ["propose", "--round", str(tmp_path / "r"), *SMALL, flag, value],
        r"--k must be at most 1,000, got .*: a round is runs to launch",
    )


def test_the_gain_is_chosen_and_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--gain probability-best values runs by their odds of being the best (the close calls);
    an unknown gain is one line, before any work; the default is the acquisition's."""
    from surrogate.loop.acquisition import Acquisition

    rnd = tmp_path / "r1"
    assert (
        main(
            [
                "propose",
                "--round",
                str(rnd),
                "--k",
                "3",
                "--boundary-frac",
                "0",
                "--gain",
                "probability-best",
                *SMALL,
            ]
        )
        == 0
    )
    capsys.readouterr()
    record = json.loads((rnd / "round.json").read_text())
    assert "probability-best" in json.dumps(record["acquisition"])
    picked = pd.read_csv(rnd / "proposals.csv")
    assert set(picked["reason"]) <= {"best-predicted", "probability-best"}
    held = picked.loc[picked["best_set"], "p_best"]  # the picks the model cannot tell apart
    assert len(held) and held.sum() >= 0.9 * picked["p_best"].sum() - 1e-9
    one_line_error(
        capsys,
        ["propose", "--round", str(tmp_path / "r2"), *SMALL, "--gain", "random"],
        r"--gain must be expected-improvement or "
        r"probability-best, got 'random'",
    )
    assert not (tmp_path / "r2").exists()
    assert main(["propose", "--round", str(tmp_path / "r3"), "--k", "1", *SMALL]) == 0
    default = json.loads((tmp_path / "r3" / "round.json").read_text())["acquisition"]["gain"]
    assert default == Acquisition().gain
