"""Single-GPU training steps: the model built, a real CPU try, and the micro-batch search."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from microbench import train_step
from microbench.train_step import MODELS, build_model, main, param_count


@pytest.mark.parametrize("name", ["tiny", "playbook-1.34b"])
def test_the_model_has_the_parameters_counted(name: str) -> None:
    model = build_model(MODELS[name], device="meta", recompute="none")
    assert sum(p.numel() for p in model.parameters()) == param_count(MODELS[name])


def test_the_playbook_model_is_the_presets() -> None:
    from surrogate.analytic.flops import total_params
    from surrogate.analytic.inputs import to_cols
    from surrogate.calibration.parameter_files import shipped_parameter_sets
    from surrogate.config.training import config_from_flat

    shape = MODELS["playbook-1.34b"]
    row = train_step.config_row(
        shape, gpu="H100-SXM-80GB", seq_len=4096, mbs=1, grad_accum=1, recompute="none"
    )
    cfg = config_from_flat(row)
    assert cfg.model.num_layers == 16 and cfg.model.tie_embeddings
    # The analytic count (no norm weights) is within the norms' 33 x 2048 parameters.
    analytic = float(total_params(to_cols([cfg], shipped_parameter_sets()))[0])
    assert abs(param_count(shape) - analytic) <= (2 * shape.num_layers + 1) * shape.hidden_size


def test_a_cpu_run_writes_one_record_per_try(tmp_path: Path) -> None:
    out = tmp_path / "steps.jsonl"
    code = main(
        [
            "--device",
            "cpu",
            "--models",
            "tiny",
            "--seqs",
            "16",
            "--max-mbs",
            "2",
            "--recompute",
            "none,full",
            "--warmup",
            "1",
            "--steps",
            "1",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["config"]["recompute"], r["config"]["mbs"]) for r in records] == [
        ("none", 1),
        ("none", 2),
        ("full", 1),
        ("full", 2),
    ]
    assert all(r["status"] == "ok" and r["step_time_s"] > 0 for r in records)
    assert records[0]["tokens_per_s_per_gpu"] == pytest.approx(16 / records[0]["step_time_s"])


def test_the_search_doubles_then_bisects_to_the_boundary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in for the GPU: micro-batches above 5 run out of memory."""
    import torch

    tried: list[int] = []

    def fake_measure(
        shape: Any, *, seq_len: int, mbs: int, recompute: str, s: Any
    ) -> dict[str, Any]:
        tried.append(mbs)
        if mbs > 5:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return {"step_times_s": [0.1], "step_time_s": 0.1, "tokens_per_s_per_gpu": 1.0}

    monkeypatch.setattr(train_step, "measure", fake_measure)
    out = tmp_path / "steps.jsonl"
    assert (
        main(
            [
                "--device",
                "cpu",
                "--models",
                "tiny",
                "--seqs",
                "16",
                "--recompute",
                "none",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert tried == [1, 2, 4, 8, 6, 5]
    status = {
        json.loads(line)["config"]["mbs"]: json.loads(line)["status"]
        for line in out.read_text().splitlines()
    }
    assert status == {1: "ok", 2: "ok", 4: "ok", 8: "oom", 6: "oom", 5: "ok"}


def test_a_spent_budget_stops_before_the_next_try(tmp_path: Path) -> None:
    out = tmp_path / "steps.jsonl"
    assert (
        main(
            [
                "--device",
                "cpu",
                "--models",
                "tiny",
                "--seqs",
                "16",
                "--budget-s",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert out.read_text() == ""


def test_bad_arguments_say_what_must_hold(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--models", "gpt-5"])
    assert "--models must be among tiny" in capsys.readouterr().err


@pytest.mark.parametrize(("mode", "zero_stage"), [("fsdp2", 3), ("fsdp2-no-reshard", 2)])
def test_an_fsdp2_run_records_its_framework_and_zero_stage(
    tmp_path: Path, mode: str, zero_stage: int
) -> None:
    """FSDP2 over a one-rank gloo group on a CPU (a subprocess: the process group outlives
    the run); its records read as framework pytorch-fsdp2, whose set torchtitan's FSDP
    layouts take."""
    import subprocess
    import sys

    from surrogate.config.training import config_from_flat
    from surrogate.ingest.train_step import parse_train_step_jsonl

    out = tmp_path / "steps.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "microbench.train_step",
            "--device",
            "cpu",
            "--models",
            "tiny",
            "--seqs",
            "16",
            "--max-mbs",
            "1",
            "--recompute",
            "full",
            "--warmup",
            "1",
            "--steps",
            "1",
            "--mode",
            mode,
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["status"] == "ok" and record["step_time_s"] > 0
    record["fingerprint"]["gpu_name"] = "NVIDIA H100 80GB HBM3"  # a CPU is no GPU here
    gpu = tmp_path / "as_on_a_gpu.jsonl"
    gpu.write_text(json.dumps(record) + "\n")
    runs, _ = parse_train_step_jsonl(gpu)
    row = runs.iloc[0].to_dict()
    assert (row["framework"], row["framework_version"], row["zero_stage"]) == (
        "pytorch-fsdp2",
        "bf16",
        zero_stage,
    )
    assert config_from_flat(row).layout.parameter_set() == "pytorch-fsdp2/bf16"
