"""The project's own H100 measurements (datasets/h100): they read whole, and their runs are
explained under the profile fitted from their GEMMs."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from surrogate.config.model import ModelConfig
from surrogate.config.training import CONFIG_COLUMNS
from surrogate.hardware.profile import load_profile, shipped_profiles
from surrogate.ingest.dispatch import read_runs
from surrogate.ingest.microbench_jsonl import parse_microbench_jsonl
from surrogate.ingest.train_step import OWN_H100_PROFILE
from surrogate.runs.context import run_context

DATA = Path(__file__).resolve().parents[1] / "datasets" / "h100" / "2026-11-23"


@pytest.mark.parametrize("name", ["gemm.jsonl", "attention.jsonl", "membound.jsonl"])
def test_microbenchmarks_read_whole(name: str) -> None:
    df, report = parse_microbench_jsonl(DATA / name)
    assert not report.skips and len(df) > 0
    assert (df["hardware"] == "H100-SXM-80GB").all()
    assert df["detail"].str.contains("torch=2.11.0+cu130 cuda=13.0", regex=False).all()


def test_training_steps_read_whole_and_use_their_profile() -> None:
    runs = read_runs(DATA / "train_steps_recompute_none.jsonl")
    assert set(runs["status"]) == {"completed", "oom"}
    assert (runs["source"] == "surrogate_h100").all()
    assert "h100-own-measured" in shipped_profiles()
    profiles, _ = run_context(runs)
    assert set(profiles) == set(runs["profile"]) == {OWN_H100_PROFILE} == {"h100-own-measured"}
    prof = load_profile("h100-own-measured")
    assert {c.provenance for c in prof.gemm.values()} == {"measured"}


TORCHTITAN = DATA.parent / "2026-11-24" / "torchtitan"


def test_torchtitan_runs_read_whole_as_their_logs_say() -> None:
    """The real torchtitan 0.2.2 runs (``microbench/torchtitan_runs.py``): every log reads
    through the torchtitan reader; the out-of-memory ones are read as such, the others
    completed all their steps; and torchtitan's own parameter count of each custom flavour
    (its log's ``size: N total parameters``) is the surrogate's count of the columns the
    reader was given, so the flavours registered were the modelled shapes."""
    from microbench.torchtitan_runs import CASES, read_run_dirs
    from surrogate.analytic.flops import total_params
    from surrogate.analytic.inputs import cols_from_table
    from surrogate.calibration.parameter_files import shipped_parameter_sets
    from surrogate.config.table import validate_table

    runs, lines = read_run_dirs(TORCHTITAN)
    assert len(runs) == len(CASES) == 28, lines
    assert (runs["status"] == "oom").sum() == 2 and (runs["status"] == "completed").sum() == 26
    assert set(runs.loc[runs["status"] == "oom", "run_id"]) == {
        "dense1b-s4096-mbs8-full/train",
        "llama3-8b-s2048-mbs1-full/train",
    }
    assert (runs["framework"] == "torchtitan").all() and (runs["dtype"] == "bf16").all()
    assert runs.loc[runs["status"] == "completed", "peak_mem_reserved_gib"].notna().all()
    table = validate_table(runs[list(CONFIG_COLUMNS)]).table
    counted = total_params(cols_from_table(table, shipped_parameter_sets()))
    for run_id, n in zip(runs["run_id"], counted, strict=True):
        log = (TORCHTITAN / run_id).with_suffix(".log").read_text(encoding="utf-8")
        size = re.search(r"size: ([\d,]+) total parameters", log)
        assert size is not None and int(size.group(1).replace(",", "")) == int(n), run_id


def test_the_runs_are_the_launch_files_surrogate_writes(tmp_path: Path) -> None:
    """The committed configurations are what plan writes today (their comment lines, which
    torchtitan ignores, may have been reworded since, and model columns added since are at
    their defaults)."""
    import tomllib

    from microbench.torchtitan_runs import plan

    for d in plan(tmp_path):
        assert tomllib.loads((d / "config.toml").read_text()) == tomllib.loads(
            (TORCHTITAN / d.name / "config.toml").read_text()
        ), d.name
        written = json.loads((d / "flavour.json").read_text())
        committed = json.loads((TORCHTITAN / d.name / "flavour.json").read_text())
        # a model column added since holds its default in a file written before it existed
        for name in written["columns"].keys() - committed["columns"].keys():
            default = next(f.default for f in fields(ModelConfig) if f.name == name)
            assert written["columns"].pop(name) == default, (d.name, name)
        assert written == committed, d.name


def test_torchtitan_autocast_runs_are_fitted_as_the_set_they_take() -> None:
    """A fit (``surrogate calibrate --runs``) of these runs would fit the set they are
    predicted with, pytorch/autocast's, not torchtitan's own (its FSDP layouts')."""
    from microbench.torchtitan_runs import read_run_dirs
    from surrogate.calibration.blocks import blocks_for_runs, framework_version_of
    from surrogate.calibration.fit_params import own_sets

    runs, _ = read_run_dirs(TORCHTITAN)
    blocks, rows = blocks_for_runs(runs, "h100-own-measured")
    assert [framework_version_of(b) for b in blocks] == ["pytorch/autocast"]
    assert sum(len(r) for r in rows) == len(runs)
    # a user's own such runs find that set shipped: nothing of their own to fit first
    assert own_sets(runs, "h100-own-measured") == {}


def test_launch_files_ran_as_written() -> None:
    """Two runs started by their launch.sh (train_custom.py registering flavour.json) read
    completed, as the same configurations did under the runner."""
    from microbench.torchtitan_runs import read_run_dirs

    again, _ = read_run_dirs(TORCHTITAN.parent / "torchtitan-launch-sh")
    first, _ = read_run_dirs(TORCHTITAN)
    assert len(again) == 2 and (again["status"] == "completed").all()
    assert set(again["run_id"]) <= set(first["run_id"])
