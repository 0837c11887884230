"""surrogate.predict with the bundled learned model, and its fallback to the analytic model."""

from __future__ import annotations

import json
import warnings

import pandas as pd
import pytest

import surrogate
from surrogate.cli import main
from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.presets import get_preset
from surrogate.config.training import TrainingConfig, config_to_flat
from surrogate.prediction import predict as prediction

pytestmark = pytest.mark.skipif(
    not (prediction.DEFAULT_MODEL_DIR / "model.json").exists(), reason="no bundled model"
)


def cfg(**layout: int) -> TrainingConfig:
    base = dict(dp=8, tp=4, mbs=2, grad_accum=16, zero_stage=1, framework="nanotron")
    return TrainingConfig(
        model=get_preset("8b"),
        cluster=ClusterConfig(num_nodes=4),
        layout=LayoutConfig(**{**base, **layout}),
    )


def test_default_is_the_learned_model_with_an_interval():
    p = surrogate.predict(cfg())
    assert p.source == "learned"
    assert p.mfu_lo <= p.mfu <= p.mfu_hi
    assert 0 <= p.p_oom <= 1 and 0 <= p.p_fail <= 1
    assert p.status in ("completed", "oom", "fail")
    analytic = surrogate.predict(cfg(), model=None)
    assert analytic.source == "analytic" and p.analytic_mfu == pytest.approx(analytic.mfu)


def test_frame_has_intervals_for_valid_rows():
    rows = [config_to_flat(cfg()), dict(config_to_flat(cfg()), tp=3)]
    out = surrogate.predict(pd.DataFrame(rows))
    assert out["error"].iloc[1].startswith("dp * tp * pp * cp")
    first = out.iloc[0]
    assert first["pred_mfu_lo"] <= first["pred_mfu"] <= first["pred_mfu_hi"]
    assert first["pred_mfu"] == pytest.approx(surrogate.predict(cfg()).mfu)


def test_explain_gives_contributions():
    p = surrogate.predict(cfg(), explain=True)
    assert p.explanation is not None and "bias" in p.explanation
    assert len(p.explanation) == 9


def test_falls_back_to_analytic_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(prediction, "DEFAULT_MODEL_DIR", tmp_path)
    prediction._bundled_model.cache_clear()
    try:
        with pytest.warns(UserWarning, match="no learned model is bundled"):
            p = surrogate.predict(cfg())
        assert p.source == "analytic"
    finally:
        prediction._bundled_model.cache_clear()


def test_cli_learned_analytic_and_explain(capsys):
    flags = [
        "predict",
        "--model",
        "8b",
        "--nodes",
        "4",
        "--dp",
        "8",
        "--tp",
        "4",
        "--mbs",
        "2",
        "--grad-accum",
        "16",
        "--zero",
        "1",
        "--framework",
        "nanotron",
    ]
    assert main([*flags, "--json"]) == 0
    learned = json.loads(capsys.readouterr().out)
    assert learned["source"] == "learned" and learned["mfu_lo"] <= learned["mfu"]
    assert main([*flags, "--json", "--analytic"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "analytic"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main([*flags, "--explain"]) == 0
    out = capsys.readouterr().out
    assert "learned correction" in out and "Largest contributions" in out


def test_an_unseen_model_shape_between_the_data_keeps_half_the_correction(tmp_path, capsys):
    """A 3.57B-like model with a wider MLP: inside every range of the bundled model's data but
    a shape no training run had (``surrogate.learned.domain.UNSEEN_SHAPE_WEIGHT``)."""
    import yaml

    from surrogate.learned.domain import UNSEEN_SHAPE_WEIGHT

    model = {
        "num_layers": 28,
        "hidden_size": 3072,
        "ffn_hidden_size": 10240,
        "num_heads": 32,
        "num_kv_heads": 32,
        "vocab_size": 128256,
        "seq_len": 4096,
    }
    layout = {
        "dp": 4,
        "tp": 2,
        "mbs": 2,
        "grad_accum": 16,
        "zero_stage": 1,
        "framework": "nanotron",
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model": model, "cluster": {"num_nodes": 1}, "layout": layout}))
    assert main(["predict", "--config", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["source"] == "learned" and not d["extrapolates"]
    assert d["domain_weight"] == pytest.approx(UNSEEN_SHAPE_WEIGHT)
    assert main(["predict", "--config", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"keeps {UNSEEN_SHAPE_WEIGHT:.0%} of itself" in out and "model shape" in out


def test_a_correction_that_gave_way_says_so(monkeypatch, capsys):
    """A framework version whose held-out runs bore out only part of the throughput correction
    (``SurrogateModel.correction_weight_by_framework_``): predict, --json and search say so."""
    import copy

    from surrogate.cli.display import gives_way_line

    bundled = prediction.resolve_model("default")
    assert bundled is not None
    assert set(bundled.correction_weight_by_framework_.values()) == {1.0}
    whole = surrogate.predict(cfg())
    assert whole.correction_share == 1.0
    gave_way = copy.copy(bundled)
    gave_way.correction_weight_by_framework_ = {
        **bundled.correction_weight_by_framework_,
        "nanotron/pp-fix": 0.25,
    }
    monkeypatch.setattr(prediction, "_bundled_model", lambda: gave_way)
    p = surrogate.predict(cfg())
    assert p.correction_share == 0.25 and p.to_dict()["correction_share"] == 0.25
    assert p.mfu / p.analytic_mfu == pytest.approx((whole.mfu / whole.analytic_mfu) ** 0.25)
    assert p.mfu_lo <= min(p.mfu, p.analytic_mfu) and p.mfu_hi >= max(p.mfu, p.analytic_mfu)
    flags = [
        "predict",
        "--model",
        "8b",
        "--nodes",
        "4",
        "--dp",
        "8",
        "--tp",
        "4",
        "--mbs",
        "2",
        "--grad-accum",
        "16",
        "--zero",
        "1",
        "--framework",
        "nanotron",
    ]
    assert main(flags) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "gives way" in out and "nanotron/pp-fix" in out and "keeps 25% of itself" in out
    rows = pd.DataFrame(
        {
            "correction_share": [1.0, 0.25],
            "framework": ["nanotron"] * 2,
            "framework_version": ["pre-pp-fix", "pp-fix"],
        }
    )
    assert "nanotron/pp-fix keeps 25%" in gives_way_line(rows)
    assert "pre-pp-fix" not in gives_way_line(rows)
    assert gives_way_line(rows.iloc[:1]) == ""
    assert "?/? keeps 25%" in gives_way_line(rows[["correction_share"]])
