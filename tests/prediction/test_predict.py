"""``surrogate.predict`` on one configuration and on a DataFrame."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import surrogate
from surrogate.analytic.memory import BREAKDOWN_TERMS
from surrogate.analytic.perf import SpecPerfModel
from surrogate.analytic.step import STEP_TERMS
from surrogate.config.gpus import GIB
from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.presets import get_preset
from surrogate.config.training import (
    CONFIG_COLUMNS,
    TrainingConfig,
    config_from_flat,
    config_to_flat,
)
from surrogate.hardware.perf_models import resolve_perf_model
from surrogate.loop.active import PROPOSAL_COLUMNS
from surrogate.prediction.predict import PRED_COLUMNS, RUNS_AS_ANOTHER, Prediction, predict_frame
from surrogate.prediction.scoring import SCORE_COLUMNS
from surrogate.runs.names import RENAMED_COLUMNS


@pytest.fixture(autouse=True)
def analytic_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pin the analytic model's behaviour; the learned path has its own tests."""
    monkeypatch.setattr("surrogate.prediction.predict.resolve_model", lambda model: None)


def cfg(model="8b", nodes=4, **layout) -> TrainingConfig:
    layout = {
        "dp": 8,
        "tp": 4,
        "mbs": 2,
        "grad_accum": 16,
        "zero_stage": 1,
        "framework": "nanotron",
        **layout,
    }
    return TrainingConfig(
        model=get_preset(model),
        cluster=ClusterConfig(num_nodes=nodes),
        layout=LayoutConfig(**layout),
    )


def test_pred_columns_are_the_issue_columns():
    assert PRED_COLUMNS == (
        "p_oom",
        "pred_status",
        "pred_mfu",
        "pred_mfu_lo",
        "pred_mfu_hi",
        "pred_tokens_per_s_per_gpu",
        "pred_step_time_s",
        "pred_peak_mem_reserved_gib",
        "pred_peak_mem_reserved_lo_gib",
        "pred_peak_mem_reserved_hi_gib",
        "extrapolation",
        "domain_weight",
        "correction_share",
    )


def test_outputs_carry_one_name_per_quantity():
    """No output uses an older name (surrogate.runs.names); a Prediction's attribute and JSON
    key for a quantity is the name of the measured column its ``pred_`` column predicts."""
    p = surrogate.predict(cfg())
    for names in (PRED_COLUMNS, SCORE_COLUMNS, PROPOSAL_COLUMNS, p.to_dict()):
        assert not set(names) & set(RENAMED_COLUMNS), names
    for name in ("peak_mem_reserved_gib", "tokens_per_s_per_gpu", "mfu"):
        assert f"pred_{name}" in PRED_COLUMNS and name in p.to_dict()
        assert getattr(p, name) == p.to_dict()[name]


def test_predict_one_config():
    p = surrogate.predict(cfg())
    assert isinstance(p, Prediction)
    assert set(p.memory_bytes) == {*BREAKDOWN_TERMS, "total"}
    assert p.memory_bytes["total"] == pytest.approx(sum(p.memory_bytes[k] for k in BREAKDOWN_TERMS))
    assert tuple(p.step_s) == STEP_TERMS
    assert sum(p.step_s.values()) == pytest.approx(p.step_time_s)
    assert 0 < p.mfu < 1 and p.fits and p.status == "completed" and p.p_oom < 0.5
    assert math.isnan(p.mfu_lo) and math.isnan(p.mfu_hi)
    assert p.capacity_bytes == pytest.approx(cfg().cluster.spec.memory_gib * GIB)
    assert p.peak_device_mem_gib == pytest.approx(p.memory_bytes["total"] / GIB)
    assert p.peak_mem_reserved_gib == pytest.approx(p.peak_device_mem_gib - 1.0)
    assert p.tokens_per_s_per_gpu * 32 * p.step_time_s == pytest.approx(cfg().batch_tokens)
    # the GPU's shipped calibration profile if there is one, else the datasheet
    assert p.perf_model == resolve_perf_model("H100-SXM-80GB").name and p.source == "analytic"


def test_predict_oom():
    p = surrogate.predict(cfg("70b", nodes=1, dp=8, tp=1, zero_stage=0))
    assert p.p_oom == 1 and not p.fits and p.status == "oom"
    assert p.peak_device_mem_gib > 80


def test_to_dict_is_json_ready():
    d = surrogate.predict(cfg()).to_dict()
    back = json.loads(json.dumps(d))
    assert back["config"] == config_to_flat(cfg())
    assert {"memory_gib", "step_time_s", "mfu", "p_oom", "pred_status", "fits"} <= set(back)
    assert back["step_time_s"]["total"] == pytest.approx(
        sum(v for k, v in back["step_time_s"].items() if k != "total")
    )
    assert back["mfu_lo"] is None and back["mfu_hi"] is None


def test_a_given_perf_model_is_used():
    slow = SpecPerfModel(gemm_efficiency_frac=0.35)
    slow.name = "half-speed"
    fast = surrogate.predict(cfg())
    p = surrogate.predict(cfg(), profile=slow)
    assert p.perf_model == "half-speed" and p.mfu < fast.mfu
    assert resolve_perf_model("H100-SXM-80GB", slow) is slow


def frame() -> pd.DataFrame:
    rows = [config_to_flat(cfg()), config_to_flat(cfg("70b", nodes=1, dp=8, tp=1, zero_stage=0))]
    bad = dict(rows[0], tp=3)
    odd = dict(rows[0], dp=8.5)
    return pd.DataFrame([rows[0], bad, rows[1], odd])


def test_predict_frame_keeps_inputs_and_reports_errors_per_row():
    df = frame()
    out = surrogate.predict(df)
    assert list(out.columns) == [*df.columns, *PRED_COLUMNS, RUNS_AS_ANOTHER, "error"]
    pd.testing.assert_frame_equal(out[list(df.columns)], df)
    assert list(out[RUNS_AS_ANOTHER]) == ["", "", "", ""]
    assert out["error"].iloc[0] == "" and out["error"].iloc[2] == ""
    assert out["error"].iloc[1].startswith("dp * tp * pp * cp must equal the number of GPUs")
    assert out["error"].iloc[3] == "dp must be an integer, got 8.5"
    assert list(out["pred_status"]) == ["completed", None, "oom", None]
    assert out.loc[[1, 3], ["p_oom", "pred_mfu", "pred_peak_mem_reserved_gib"]].isna().all().all()
    single = surrogate.predict(cfg())
    assert out["pred_mfu"].iloc[0] == pytest.approx(single.mfu)
    assert out["pred_step_time_s"].iloc[0] == pytest.approx(single.step_time_s)
    assert out["pred_peak_mem_reserved_gib"].iloc[0] == pytest.approx(single.peak_mem_reserved_gib)
    assert out["p_oom"].iloc[2] == 1
    assert out[["pred_mfu_lo", "pred_mfu_hi"]].isna().all().all()


def test_predict_frame_says_which_layouts_run_as_another_like_predict():
    """The column holds what one prediction's ``runs_as_another`` says, row by row: here
    torchtitan told not to shard the sequence, ZeRO over one replica, and Megatron's MoE
    under tp without sequence parallelism (the model's, not the layout's, trait)."""
    titan = dict(
        config_to_flat(cfg()),
        framework="torchtitan",
        framework_version="main",
        zero_stage=2,
        sequence_parallel=None,
    )  # missing: the framework's default
    megatron = dict(
        config_to_flat(
            cfg(
                nodes=1,
                dp=4,
                tp=2,
                zero_stage=0,
                mbs=1,
                grad_accum=4,
                framework="megatron",
                sequence_parallel=False,
            )
        )
    )
    rows = [
        titan,
        dict(titan, sequence_parallel=False),
        config_to_flat(cfg(nodes=1, dp=1, tp=8, zero_stage=1)),
        titan,
        megatron,
        config_to_flat(
            cfg(
                "mixtral-8x7b",
                nodes=1,
                dp=4,
                tp=2,
                zero_stage=0,
                mbs=1,
                grad_accum=4,
                framework="megatron",
                sequence_parallel=False,
            )
        ),
    ]
    out = predict_frame(pd.DataFrame(rows), model=None)
    assert (out["error"] == "").all()
    assert out[RUNS_AS_ANOTHER].iloc[0] == out[RUNS_AS_ANOTHER].iloc[3] == ""
    assert "always runs with sequence parallelism" in out[RUNS_AS_ANOTHER].iloc[1]
    assert out[RUNS_AS_ANOTHER].iloc[2].startswith("zero_stage > 0 needs dp > 1")
    assert out[RUNS_AS_ANOTHER].iloc[4] == ""
    assert "MoE layer refuses tensor parallelism without" in out[RUNS_AS_ANOTHER].iloc[5]
    for j, row in enumerate(rows):
        single = surrogate.predict(config_from_flat(row), model=None)
        assert out[RUNS_AS_ANOTHER].iloc[j] == single.to_dict()["runs_as_another"]


def test_predict_frame_mixed_gpus_keep_row_order():
    rows = [
        config_to_flat(cfg()),
        dict(config_to_flat(cfg()), gpu="A100-SXM-80GB"),
        config_to_flat(cfg(mbs=1)),
    ]
    out = predict_frame(pd.DataFrame(rows))
    assert (out["error"] == "").all()
    expected = [
        surrogate.predict(cfg()).mfu,
        surrogate.predict(
            TrainingConfig(
                model=get_preset("8b"),
                cluster=ClusterConfig(gpu="A100", num_nodes=4),
                layout=cfg().layout,
            )
        ).mfu,
        surrogate.predict(cfg(mbs=1)).mfu,
    ]
    np.testing.assert_allclose(out["pred_mfu"], expected)


def test_predict_frame_all_rows_bad_and_empty():
    out = predict_frame(pd.DataFrame([{"num_layers": 2}]))
    assert out["error"].iloc[0].startswith("a configuration needs the model columns")
    assert out["pred_mfu"].isna().all()
    empty = predict_frame(pd.DataFrame(columns=list(CONFIG_COLUMNS)))
    assert len(empty) == 0 and "error" in empty.columns


def test_predict_frame_reads_a_model_column_as_from_csv_does(tmp_path, capsys):
    """A ``model`` column naming a preset, the row's own model columns over the preset's: the
    Python table and ``predict --from-csv`` read it alike and answer alike."""
    from surrogate.cli import main
    from surrogate.errors import ConfigError

    rows = pd.DataFrame(
        [
            {
                "model": "8b",
                "num_nodes": 4,
                "dp": 8,
                "tp": 4,
                "mbs": 2,
                "grad_accum": 16,
                "zero_stage": 1,
                "framework": "nanotron",
                "num_layers": None,
            },
            {
                "model": "70b",
                "num_nodes": 8,
                "dp": 2,
                "tp": 8,
                "pp": 4,
                "mbs": 1,
                "grad_accum": 64,
                "zero_stage": 1,
                "framework": "megatron",
                "num_layers": 40,
            },
        ]
    )
    out = surrogate.predict(rows)
    assert list(out["error"]) == ["", ""]
    assert list(out["num_layers"]) == [32, 40]  # the preset's where empty, else the row's
    src, dst = tmp_path / "configs.csv", tmp_path / "predictions.csv"
    rows.to_csv(src, index=False)
    assert main(["predict", "--from-csv", str(src), "--out", str(dst), "--analytic"]) == 0
    from_csv = pd.read_csv(dst)
    for column in ("pred_mfu", "pred_peak_mem_reserved_gib", "p_oom", "pred_step_time_s"):
        np.testing.assert_allclose(out[column].astype(float), from_csv[column], rtol=1e-9)
    one = surrogate.predict(
        TrainingConfig(
            model=get_preset("8b"),
            cluster=ClusterConfig(num_nodes=4),
            layout=LayoutConfig(
                framework="nanotron", dp=8, tp=4, mbs=2, grad_accum=16, zero_stage=1
            ),
        )
    )
    assert out["pred_mfu"].iloc[0] == pytest.approx(one.mfu)
    with pytest.raises(ConfigError, match=r"^the configuration table, row 2: .*'nope'"):
        surrogate.predict(rows.assign(model=["8b", "nope"]))


@pytest.mark.parametrize(
    "given", [{"model": "8b", "num_nodes": 4, "dp": 8, "tp": 4}, [{"model": "8b"}], "8b"]
)
def test_predict_says_what_it_takes(given):
    match = r"^predict takes a TrainingConfig \(one configuration\) or a pandas DataFrame"
    if isinstance(given, dict):
        match += r".*got dict: for one configuration's columns, predict\(pd.DataFrame"
    with pytest.raises(TypeError, match=match):
        surrogate.predict(given)


def test_import_is_lazy():
    assert surrogate.TrainingConfig is TrainingConfig
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = surrogate.nope  # type: ignore[attr-defined]


def test_an_impossible_mfu_is_refused_with_its_cause():
    """A vocabulary of 10^12 used to give an MFU of 146% (the 6 N convention counts the input
    embedding lookup as matmul FLOPs)."""
    from dataclasses import replace

    from surrogate.errors import ConfigError

    huge = cfg()
    huge = replace(huge, model=replace(huge.model, vocab_size=10**12))
    with pytest.raises(
        ConfigError,
        match=r"MFU must be at most 100% of the dense peak, but this "
        r"configuration would reach \d+%: the untied input "
        r"embedding \(vocab_size=1,000,000,000,000",
    ):
        surrogate.predict(huge)
    frame = predict_frame(pd.DataFrame([config_to_flat(cfg()), config_to_flat(huge)]))
    assert frame["error"].iloc[0] == "" and frame["pred_mfu"].iloc[0] < 1
    assert frame["error"].iloc[1].startswith("MFU must be at most 100%")
    assert math.isnan(frame["pred_mfu"].iloc[1]) and frame["pred_status"].iloc[1] is None


def test_far_out_but_possible_configs_are_predicted_with_a_warning():
    p = surrogate.predict(cfg(nodes=10**6, dp=2 * 10**6))
    assert p.extrapolation.startswith(
        "num_gpus 8e+06 > 2.621e+05, beyond any published training run; batch_tokens 5.243e+11"
    )
    assert 0 < p.mfu < 1 and p.tokens_per_s_per_gpu > 0
    assert surrogate.predict(cfg()).extrapolation == ""
    frame = predict_frame(pd.DataFrame([config_to_flat(cfg(mbs=10**8))]))
    assert frame["extrapolation"].iloc[0].startswith("batch_tokens")
    assert frame["pred_status"].iloc[0] == "oom"  # a memory no GPU has: the answer is OOM


def test_predict_frame_answers_by_position_whatever_the_index():
    df = frame()
    plain = surrogate.predict(df)
    df.index = [5, 5, 7, 7]  # repeated labels: answers still go to their own rows
    out = surrogate.predict(df)
    assert list(out["error"]) == list(plain["error"])
    np.testing.assert_array_equal(out["pred_mfu"].to_numpy(), plain["pred_mfu"].to_numpy())
    assert list(out["pred_status"]) == list(plain["pred_status"])
