"""`surrogate search`, `propose`, `score-round` and `heatmap` from the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from surrogate.cli import main
from surrogate.cli.search import parse_nodes
from surrogate.errors import ConfigError

SMALL = [
    "--model",
    "1.34b",
    "--nodes",
    "1",
    "--global-batch-seqs",
    "16",
    "--max-cp",
    "1",
    "--max-vpp",
    "1",
    "--max-mbs",
    "2",
    "--recompute",
    "none",
]


def test_search_json_has_top_rules_and_enumeration(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        [
            "search",
            *SMALL,
            "--json",
            "--top-k",
            "3",
            "--framework",
            "torchtitan",
            "--launch-dir",
            str(tmp_path / "launch"),
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["top"]) == 3
    assert out["top"][0]["pred_mfu"] >= out["top"][-1]["pred_mfu"]
    assert out["space"]["enumerated_valid"] > 0
    assert out["optuna"] is None  # scored whole: no trial
    assert "Playbook" in out["rules_of_thumb"]["source"]
    assert any((tmp_path / "launch").rglob("config.toml"))


def test_search_with_a_storage_runs_optuna_trials(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--storage takes the optuna path (a shared study) though the space could be enumerated;
    it needs at least one trial."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    args = [
        "search",
        *SMALL,
        "--framework",
        "torchtitan",
        "--analytic",
        "--storage",
        url,
        "--study-name",
        "s1",
    ]
    assert main([*args, "--trials", "60", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["optuna"]["trials"] == 60 and out["optuna"]["study"] == "s1"
    assert out["space"]["enumerated_valid"] is None
    assert main([*args, "--trials", "0"]) == 2
    assert "--trials must be >= 1, got 0" in capsys.readouterr().err


def test_search_table(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["search", *SMALL, "--trials", "0"]) == 0
    text = capsys.readouterr().out
    assert "Best predicted layouts" in text and "Rules of thumb" in text
    assert "prediction: learned model (bundled" in text and "hardware speed:" in text
    assert "extrapolates:" in text and "gives way" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "┃ tokens/s/GPU" not in text and "--wide" in text  # fewer columns at 80
    assert "peak 80%" not in text
    assert "…" not in text  # nothing cut
    assert main(["search", *SMALL, "--trials", "0", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "┃ tokens/s/GPU" in wide and "peak 80%" in wide


def test_search_ranks_safe_and_shows_the_odds(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["search", *SMALL, "--trials", "0", "--json", "--rank", "safe"]) == 0
    top = json.loads(capsys.readouterr().out)["top"]
    lows = [r["pred_mfu_lo"] for r in top]
    assert lows == sorted(lows, reverse=True)
    assert 0 < sum(r["p_best"] for r in top) <= 1 + 1e-9
    held = [r["p_best"] for r in top if r["best_set"]]  # the layouts it cannot tell apart
    assert held and sum(held) >= 0.9 * sum(r["p_best"] for r in top) - 1e-9
    assert all(r["pred_tokens_per_s_per_gpu_lo"] <= r["pred_tokens_per_s_per_gpu"] for r in top)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["search", *SMALL, "--trials", "0"]) == 0
    text = capsys.readouterr().out
    assert "P(best)" in text and max(len(line) for line in text.splitlines()) <= 80
    assert ("close call: #" in text) != ("clear lead: #" in text)
    assert "*: the layouts" in text
    assert main(["search", *SMALL, "--trials", "0", "--rank", "best"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rank must be mean or safe" in err
    assert main(["search", *SMALL, "--trials", "0", "--rank", "safe", "--analytic"]) == 2
    assert "rank safe" in capsys.readouterr().err


def test_search_says_where_the_correction_gave_way(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import copy

    from surrogate.prediction import predict as prediction

    bundled = prediction.resolve_model("default")
    assert bundled is not None
    gave_way = copy.copy(bundled)
    gave_way.correction_weight_by_framework_ = {"nanotron/pp-fix": 0.5}
    monkeypatch.setattr(prediction, "_bundled_model", lambda: gave_way)
    assert main(["search", *SMALL, "--trials", "0", "--wide", "--framework", "nanotron"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "gives way" in text and "nanotron/pp-fix keeps 50%" in text


def test_user_errors_are_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "--model", "1.34b", "--nodes", "1"]) == 2
    assert "give the global batch" in capsys.readouterr().err
    assert main(["search", *SMALL, "--objective", "speed"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--objective must be" in err
    assert main(["search", "--nodes", "1", "--global-batch-seqs", "8"]) == 2
    assert "give a model" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--nodes must be"):
        parse_nodes("a-b")
    assert parse_nodes("1-8") == (1, 2, 4, 8)
    assert parse_nodes("3,1") == (1, 3)
    assert main(["search", *SMALL, "--recompute-shares", "0.5"]) == 2
    assert "recompute shares must lie in (0, 1] and include 1" in capsys.readouterr().err
    assert main(["search", *SMALL, "--recompute-shares", "half,1"]) == 2
    assert "--recompute-shares must be comma-separated numbers" in capsys.readouterr().err


def test_search_checkpoints_a_share_of_layers_and_names_frameworks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With several frameworks each layout names its own; full recomputation of some layers
    shows as rc-full-kN (N layers of each stage)."""
    args = [
        "search",
        "--model",
        "8b",
        "--nodes",
        "1",
        "--global-batch-seqs",
        "8",
        "--max-cp",
        "1",
        "--max-vpp",
        "1",
        "--max-mbs",
        "1",
        "--recompute",
        "full",
        "--framework",
        "megatron,nanotron",
        "--trials",
        "0",
        "--json",
        "--top-k",
        "50",
        "--analytic",
    ]
    assert main(args) == 0
    top = json.loads(capsys.readouterr().out)["top"]
    assert any(r["recompute_layers"] and "rc-full-k" in r["layout"] for r in top)
    assert {r["framework"] for r in top if r["recompute_layers"]} == {"megatron"}
    assert main([*args[:-4], "--analytic", "--top-k", "3", "--wide"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "rc-full-k8 (megatron)" in text
    assert "rc-full-k8: full recomputation of 8 layers of each pipeline stage" in text


@pytest.mark.slow
def test_propose_then_score_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    rnd = tmp_path / "round-1"
    args = ["propose", "--round", str(rnd), "--k", "3", *SMALL, "--num-layers", "12"]
    assert main(args) == 0
    assert (pd.read_csv(rnd / "proposals.csv")["num_layers"] == 12).all()  # the flag's model
    table = capsys.readouterr().out
    assert "round-1: 3 proposed runs" in table and "why" in table
    assert "best of all: " in table or "OOM edge" in table
    # said what it is
    assert (
        "best of all: the odds that the run completes" in " ".join(table.split())
        or "best of all: " not in table
    )
    assert "prediction: learned model" in table and "extrapolates:" in table
    assert main(args) == 2
    assert "never overwritten" in capsys.readouterr().err
    proposals = pd.read_csv(rnd / "proposals.csv")  # synthetic outcomes, made up by this test
    lo, mid, hi = (proposals[f"pred_peak_mem_reserved{end}_gib"] for end in ("_lo", "", "_hi"))
    assert (lo < mid).all()
    assert (mid < hi).all()
    runs = proposals.assign(
        run_id=proposals["name"] + "/train-1", status="completed", mfu=0.3, source="synthetic"
    )
    runs.to_csv(tmp_path / "runs.csv", index=False)
    capsys.readouterr()
    assert (
        main(
            [
                "score-round",
                "--round",
                str(rnd),
                "--runs",
                str(tmp_path / "runs.csv"),
                "--no-mlflow",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["metrics"]["measured"] == 3 and out["metrics"]["best_mfu_so_far"] == 0.3
    assert out["analytic_metrics"]["measured"] == 3
    assert main(["score-round", "--round", str(rnd), "--runs", str(tmp_path / "runs.csv")]) == 0
    text = capsys.readouterr().out
    assert "proposing model" in text and "analytic model" in text and "mfu_mape" in text
    assert "MLflow: run " in text and "mlflow ui --backend-store-uri" in text


def test_every_layout_command_takes_every_shape_flag() -> None:
    import typer.main

    from surrogate.cli.app import app
    from surrogate.cli.options import SHAPE_FLAGS

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for name in ("predict", "search", "propose"):
        params = {p.name for p in commands[name].params}
        assert set(SHAPE_FLAGS) <= params, (name, set(SHAPE_FLAGS) - params)


def test_search_shape_flags_override_the_preset(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "search",
        "--model",
        "mixtral",
        "--nodes",
        "1",
        "--global-batch-seqs",
        "8",
        "--max-cp",
        "1",
        "--max-vpp",
        "1",
        "--max-mbs",
        "1",
        "--recompute",
        "full",
        "--trials",
        "0",
        "--analytic",
        "--json",
        "--top-k",
        "1",
    ]
    assert main(args) == 0
    preset = json.loads(capsys.readouterr().out)["top"][0]
    assert (
        main([*args, "--num-layers", "8", "--moe-ffn-hidden-size", "4096", "--tie-embeddings"]) == 0
    )
    custom = json.loads(capsys.readouterr().out)["top"][0]
    assert (preset["num_layers"], custom["num_layers"]) == (32, 8)
    assert custom["moe_ffn_hidden_size"] == 4096 and custom["tie_embeddings"]


def test_heatmap_png_and_html(tmp_path: Path) -> None:
    runs = pd.DataFrame(
        {  # synthetic measured table
            "model_name": ["playbook-1.34b"],
            "num_nodes": [1],
            "status": ["completed"],
            "mfu": [0.3],
            "num_layers": [16],
            "hidden_size": [2048],
            "ffn_hidden_size": [8192],
            "num_heads": [32],
            "vocab_size": [131072],
            "seq_len": [4096],
            "dp": [8],
            "mbs": [2],
            "grad_accum": [1],
            "source": ["synthetic"],
        }
    )
    runs.to_csv(tmp_path / "measured.csv", index=False)
    assert (
        main(
            [
                "heatmap",
                "--out",
                str(tmp_path / "fig"),
                "--model",
                "1.34b",
                "--nodes",
                "1,2",
                "--global-batch-seqs",
                "16",
                "--measured",
                str(tmp_path / "measured.csv"),
                "--profile",
                "hf-playbook-cluster",
            ]
        )
        == 0
    )
    assert (tmp_path / "fig.png").stat().st_size > 1000
    page = (tmp_path / "fig.html").read_text()
    assert "measured" in page and "dp8" in page and "<table>" in page


def test_heatmap_takes_model_as_every_command_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--model`` as in predict, search and propose; ``--models``, its former name, still
    works (hidden), and both at once is refused."""
    from surrogate.cli.heatmap import PLAYBOOK_MODELS

    assert main(["heatmap", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--model" in text and "--models" not in text and PLAYBOOK_MODELS in text
    args = [
        "heatmap",
        "--out",
        str(tmp_path / "fig"),
        "--nodes",
        "1",
        "--global-batch-seqs",
        "16",
        "--analytic",
    ]
    assert main([*args, "--models", "1.34b"]) == 0
    assert (tmp_path / "fig.png").exists()
    capsys.readouterr()
    assert main([*args, "--model", "1.34b", "--models", "3.57b"]) == 2
    assert capsys.readouterr().err == (
        "error: give --model (--models is its former name), not both\n"
    )


def test_search_and_propose_take_the_cluster_profile(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--profile, as predict takes it: a shipped profile by name (or a file); the line under
    the title names it; an unknown one is a one-line error before any scoring."""
    args = [*SMALL, "--trials", "0", "--profile", "hf-playbook-cluster"]
    assert main(["search", *args]) == 0
    assert "hardware speed: hf-playbook-cluster" in capsys.readouterr().out.replace("\n", "")
    assert main(["search", *args, "--json"]) == 0
    space = json.loads(capsys.readouterr().out)["space"]
    assert space["hardware_speed"].startswith("hf-playbook-cluster")
    rnd = tmp_path / "r1"
    assert main(["propose", "--round", str(rnd), "--k", "2", *args[:-4], *args[-2:]]) == 0
    assert json.loads((rnd / "round.json").read_text())["goal"]["profile"] == "hf-playbook-cluster"
    for command in (
        ["search", *SMALL],
        ["propose", "--round", str(tmp_path / "r2"), *SMALL],
        ["predict", "--model", "1.34b"],
    ):
        assert main([*command, "--profile", "no-such-cluster"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "shipped profiles" in err and "hf-playbook" in err
    assert not (tmp_path / "r2").exists()


def test_score_round_without_matching_runs_exits_2_and_logs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from surrogate.config.presets import get_preset
    from surrogate.layouts.space import LayoutSpace
    from surrogate.loop.active import propose

    db = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    space = LayoutSpace(
        model=get_preset("1.34b"),
        global_batch_seqs=16,
        node_counts=(1,),
        frameworks=("torchtitan",),
        max_cp=1,
        max_vpp=1,
        max_mbs=2,
    )
    rnd = propose(space, tmp_path / "round-1", k=2, model=None)  # type: ignore[arg-type]
    pd.DataFrame(
        {"run_id": ["elsewhere/1"], "status": ["completed"], "mfu": [0.3], "source": ["synthetic"]}
    ).to_csv(tmp_path / "runs.csv", index=False)
    assert main(["score-round", "--round", str(rnd), "--runs", str(tmp_path / "runs.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: none of the 1 runs matches a proposal of round 1")
    assert err.count("\n") == 1 and not db.exists()


def test_score_round_without_mlflow_names_the_extra_before_scoring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ``pip install -e .`` (no tracking extra), score-round's default MLflow record
    costs one line naming the extra, before the scoring; --no-mlflow scores without it."""
    from surrogate.config.presets import get_preset
    from surrogate.layouts.space import LayoutSpace
    from surrogate.loop.active import propose

    space = LayoutSpace(
        model=get_preset("1.34b"),
        global_batch_seqs=16,
        node_counts=(1,),
        frameworks=("torchtitan",),
        max_cp=1,
        max_vpp=1,
        max_mbs=2,
    )
    rnd = propose(space, tmp_path / "round-1", k=2, model=None)  # type: ignore[arg-type]
    proposals = pd.read_csv(rnd / "proposals.csv")  # synthetic outcomes, made up by this test
    proposals.assign(
        run_id=proposals["name"] + "/train-1", status="completed", mfu=0.3, source="synthetic"
    ).to_csv(tmp_path / "runs.csv", index=False)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # an import of it now fails
    args = ["score-round", "--round", str(rnd), "--runs", str(tmp_path / "runs.csv")]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "error: score-round's MLflow record (--no-mlflow scores without it) needs mlflow, "
        "which is not installed: pip install 'surrogate[tracking]'"
    ]
    assert captured.out == "" and not (rnd / "scores.json").exists()
    assert main([*args, "--no-mlflow"]) == 0


def test_names_with_rich_markup_print_as_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hf = {
        "model_type": "llama",
        "_name_or_path": "evil[/]model[red]",
        "num_hidden_layers": 16,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_attention_heads": 32,
        "vocab_size": 131072,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    argv = ["search", "--hf-config", str(path), *SMALL[2:], "--trials", "0", "--analytic"]
    assert main(argv) == 0
    assert "evil[/]model[red] on 1 x 8" in capsys.readouterr().out


def test_search_unknown_gpu_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    """Used to say "loosen the limits"."""
    assert main(["search", *SMALL, "--gpu", "H900", "--analytic"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: gpu must be one of A100-SXM-40GB") and "got 'H900'" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("top_k", ["1001", "1000000", str(10**30)])
def test_search_top_k_is_capped_saying_why(top_k: str, capsys: pytest.CaptureFixture[str]) -> None:
    from surrogate.layouts.search import MAX_TOP_K

    assert main(["search", *SMALL, "--trials", "0", "--top-k", top_k]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --top-k must be at most {MAX_TOP_K:,}") and "odds" in err
    assert err.count("\n") == 1


def test_search_and_propose_take_the_network_of_the_day(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--network, as predict takes it: the search says which network it assumed and ranks
    under it; a round records its scale; a bandwidth over several node counts is a one-line
    error."""
    two = [*SMALL[:2], "--nodes", "2", *SMALL[4:], "--profile", "hf-playbook-cluster"]
    assert main(["search", *two, "--trials", "0", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["space"]["network"]["assumed"] == "profile curve"
    assert main(["search", *two, "--trials", "0", "--json", "--network", "20GBps"]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert slow["space"]["network"]["busbw_gbps"] == 20.0
    assert slow["top"][0]["pred_mfu"] <= plain["top"][0]["pred_mfu"]
    assert main(["search", *two, "--trials", "0", "--network", "20GBps"]) == 0
    assert (
        "network: measured: 20.0 GB/s all-reduce busbw at 2 nodes"
        in capsys.readouterr().out.replace("\n", " ")
    )
    rnd = tmp_path / "r1"
    assert main(["propose", "--round", str(rnd), "--k", "2", *two, "--network", "20GBps"]) == 0
    goal = json.loads((rnd / "round.json").read_text())["goal"]
    assert goal["profile"] == "hf-playbook-cluster" and 0 < goal["network_scale"] < 1
    assert "network: measured: 20.0 GB/s" in capsys.readouterr().out.replace("\n", " ")
    several = [*SMALL[:2], "--nodes", "2,4", *SMALL[4:], "--profile", "hf-playbook-cluster"]
    assert main(["search", *several, "--trials", "0", "--network", "20GBps"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a bandwidth at one node count" in err


def test_the_line_under_the_top_says_clear_lead_or_close_call() -> None:
    """Which layouts the model cannot tell apart, numbered as in the table (synthetic
    P(best)); nothing without P(best)."""
    from surrogate.cli.display import best_set_line, odds_cell
    from surrogate.layouts.best_odds import best_set

    def top(p: list[float]) -> pd.DataFrame:
        return pd.DataFrame({"p_best": p, "best_set": best_set(np.array(p))})

    assert best_set_line(top([0.95, 0.03, 0.02])) == (
        "clear lead: #1 holds 95% of P(best); the model tells it apart from the others shown"
    )
    assert best_set_line(top([0.5, 0.05, 0.4, 0.05])) == (
        "close call: #1 and #3 hold 90% of P(best) together; the model cannot tell which is fastest"
    )
    assert "cannot tell the 2 shown apart" in str(best_set_line(top([0.5, 0.5])))
    assert best_set_line(top([float("nan")] * 2)) is None
    assert best_set_line(pd.DataFrame({"p_best": [0.4]})) is None
    assert odds_cell({"p_best": 0.4, "best_set": True}) == "40%*"
    assert odds_cell({"p_best": 0.4, "best_set": False}) == "40%"


def test_search_takes_the_precision_of_its_layouts(capsys: pytest.CaptureFixture[str]) -> None:
    """--dtype fp8 searches fp8 layouts (each framework's FP8 recipe, faster than bf16 here);
    another precision is one error line naming those there are."""
    base = ["search", *SMALL, "--json", "--top-k", "1", "--framework", "megatron", "--analytic"]
    tops = {}
    for dtype in ("bf16", "fp8"):
        assert main([*base, "--dtype", dtype]) == 0
        tops[dtype] = json.loads(capsys.readouterr().out)["top"][0]
    assert tops["fp8"]["dtype"] == "fp8" and tops["bf16"]["dtype"] == "bf16"
    assert tops["fp8"]["pred_tokens_per_s_per_gpu"] > tops["bf16"]["pred_tokens_per_s_per_gpu"]
    assert main(["search", *SMALL, "--dtype", "fp16"]) == 2
    assert "dtype must be one of bf16, fp8, got 'fp16'" in capsys.readouterr().err
