"""Active learning: propose writes a round (files, record, launch scripts), refuses to overwrite,
spreads its picks; score-round measures the proposing model on the round's runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from surrogate.config.presets import get_preset
from surrogate.config.training import config_from_flat
from surrogate.errors import ConfigError, DataError
from surrogate.layouts.search import score_configs
from surrogate.layouts.space import DEFAULT_ENUMERATION_LIMIT, LayoutSpace, layout_key
from surrogate.loop.active import load_round_model, propose, score_round
from surrogate.loop.round_files import read_round
from surrogate.loop.round_log import log_round


def space() -> LayoutSpace:
    return LayoutSpace(
        model=get_preset("8b"),
        global_batch_seqs=32,
        node_counts=(1,),
        frameworks=("torchtitan",),
        max_cp=2,
        max_vpp=1,
        max_mbs=4,
    )


def test_propose_writes_a_round_and_refuses_to_overwrite(tmp_path: Path) -> None:
    out = propose(space(), tmp_path / "round-1", k=4)
    proposals = pd.read_csv(out / "proposals.csv")
    assert len(proposals) == 4
    record = read_round(out)
    assert record["round"] == 1
    assert record["model"]["data_hash"]  # the bundled model's identity
    assert record["goal"]["global_batch_seqs"] == 32
    assert {p["reason"] for p in record["proposals"]} <= {
        "best-predicted",
        "probability-best",
        "oom-boundary",
    }
    for name in proposals["name"]:
        run = out / "logs" / name
        assert (run / "config.toml").exists() and (run / "job.sbatch").exists()
        assert (run / "launch.sh").exists()
    with pytest.raises(ConfigError, match="a round is never overwritten"):
        propose(space(), out, k=4)
    second = propose(space(), tmp_path / "round-2", k=2)
    assert read_round(second)["round"] == 2


def test_propose_lists_its_runs_by_the_rank_with_their_odds(tmp_path: Path) -> None:
    mean = pd.read_csv(propose(space(), tmp_path / "r1", k=4) / "proposals.csv")
    assert mean["pred_mfu"].is_monotonic_decreasing
    assert 0 < mean["p_best"].sum() <= 1 + 1e-9
    safe = propose(space(), tmp_path / "r2", k=4, rank="safe")
    listed = pd.read_csv(safe / "proposals.csv")
    assert listed["pred_mfu_lo"].is_monotonic_decreasing
    assert read_round(safe)["goal"]["rank"] == "safe"
    assert set(listed["layout"]) == set(mean["layout"])  # the same picks, listed otherwise
    with pytest.raises(ConfigError, match="rank must be mean or safe"):
        propose(space(), tmp_path / "r3", k=4, rank="best")  # type: ignore[arg-type]


@pytest.mark.slow
def test_score_round_on_synthetic_measurements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = propose(space(), tmp_path / "r1", k=3)
    record = read_round(out)
    model = load_round_model(record)
    configs = [config_from_flat(p["config"]) for p in record["proposals"]]
    predicted = score_configs(configs, model=model)
    # Synthetic outcomes, made up so the figures are known: the first two runs end as the
    # model said (oom where p_oom >= 0.5), the third the other way; a completed run measures
    # 1.25 x the predicted MFU, an error of 0.25 / 1.25 = 20% of the measurement.
    said_oom = (predicted["p_oom"] >= 0.5).to_numpy()
    rows = []
    for i, p in enumerate(record["proposals"]):
        oom = bool(said_oom[i]) != (i == 2)
        mfu = np.nan if oom else 1.25 * float(predicted["pred_mfu"].iloc[i])
        rows.append(
            {
                **p["config"],
                "run_id": f"{p['name']}/train-1",
                "status": "oom" if oom else "completed",
                "mfu": mfu,
                "source": "synthetic",
            }
        )
    runs = pd.DataFrame(rows)
    assert (runs["status"] == "completed").any()
    metrics, matched = score_round(record, runs, model=model)
    assert metrics["measured"] == 3 and metrics["proposed"] == 3
    assert metrics["status_accuracy"] == pytest.approx(2 / 3)
    assert metrics["mfu_mape"] == pytest.approx(0.2)
    assert metrics["oom_rate"] == pytest.approx((runs["status"] == "oom").mean())
    best = float(runs["mfu"].max())
    assert metrics["best_mfu_so_far"] == metrics["best_mfu_round"] == pytest.approx(best)
    assert set(matched["name"]) == {p["name"] for p in record["proposals"]}
    config_from_flat(matched.iloc[0].to_dict())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = log_round(
        record,
        metrics,
        campaign="test",
        matched=matched,
        analytic=score_round(record, runs, model=None),
    )
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    history = client.get_metric_history(run_id, "best/mfu_so_far")
    assert [(h.step, h.value) for h in history] == [(1, pytest.approx(best))]
    run = client.get_run(run_id)
    assert run.info.run_name == "round 01"
    assert run.data.tags["proposing_model.data_hash"] == record["model"]["data_hash"]
    assert "round/prospective_mfu_mape" in run.data.metrics
    assert not any("analytic" in k for k in run.data.metrics)  # the baseline is its own run
    files = {f.path for f in client.list_artifacts(run_id, "plots")}
    assert files == {
        "plots/predicted_vs_measured.png",
        "plots/interval_coverage.png",
        "plots/layout_space.png",
    }
    assert (tmp_path / "artifacts").is_dir()  # beside the database, not ./mlruns
    # scoring again updates the same run; the trend run holds one value per round
    assert log_round(record, metrics, campaign="test", matched=matched) == run_id
    exp = client.get_experiment_by_name("active learning: test")
    names = sorted(r.info.run_name for r in client.search_runs([exp.experiment_id]))
    assert names == ["accuracy over rounds", "analytic baseline", "round 01"]
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"


def test_a_round_is_proposed_and_scored_on_its_cluster_profile(tmp_path: Path) -> None:
    """The profile a round was proposed on (the cluster's microbenchmarks and its parameter
    sets' cluster-scoped terms) is recorded, and its runs are scored on it again."""
    profile = "hf-playbook-cluster"
    two_nodes = LayoutSpace(
        model=get_preset("8b"),
        global_batch_seqs=32,
        node_counts=(2,),
        frameworks=("torchtitan",),
        max_cp=1,
        max_vpp=1,
        max_mbs=2,
    )
    out = propose(two_nodes, tmp_path / "r1", k=3, profile=profile)
    record = read_round(out)
    assert record["goal"]["profile"] == profile
    model = load_round_model(record)
    configs = [config_from_flat(p["config"]) for p in record["proposals"]]
    on_cluster = score_configs(configs, model=model, profile=profile)
    default = score_configs(configs, model=model)
    assert not np.allclose(on_cluster["pred_mfu"], default["pred_mfu"])  # the profile counts
    listed = [p["predicted"]["pred_mfu"] for p in record["proposals"]]
    assert listed == pytest.approx(on_cluster["pred_mfu"].tolist())
    # synthetic outcomes: each run measures exactly what the cluster's profile predicts
    runs = pd.DataFrame(
        [
            {
                **p["config"],
                "run_id": f"{p['name']}/train-1",
                "status": "completed",
                "mfu": float(on_cluster["pred_mfu"].iloc[i]),
                "source": "synthetic",
            }
            for i, p in enumerate(record["proposals"])
        ]
    )
    metrics, _ = score_round(record, runs, model=model)
    assert metrics["mfu_mape"] == pytest.approx(0.0, abs=1e-9)
    assert propose(space(), tmp_path / "r2", k=2).joinpath("round.json").exists()
    assert read_round(tmp_path / "r2")["goal"]["profile"] is None


def test_a_profile_file_is_recorded_by_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """score-round may run from another directory than propose did."""
    import shutil

    import surrogate

    shipped = Path(surrogate.__file__).parent / "data" / "profiles" / "hf-playbook-cluster.json"
    shutil.copy(shipped, tmp_path / "mine.json")
    monkeypatch.chdir(tmp_path)
    record = read_round(propose(space(), "r1", k=2, profile="mine.json"))
    assert record["goal"]["profile"] == str(tmp_path / "mine.json")


def test_the_incumbent_is_a_run_of_the_same_model(tmp_path: Path) -> None:
    """A sweep table holding another model's runs: they are not the incumbent, and their
    layouts are proposed again for this model (synthetic runs, made up by this test)."""
    first = read_round(propose(space(), tmp_path / "r1", k=2, rank="mean"))
    other = [
        {
            **p["config"],
            **{
                k: v
                for k, v in get_preset("1.34b").__dict__.items()
                if k in p["config"] and k != "name"
            },
            "status": "completed",
            "mfu": 0.99,
            "source": "synthetic",
        }
        for p in first["proposals"]
    ]
    again = read_round(propose(space(), tmp_path / "r2", k=2, runs=pd.DataFrame(other)))
    assert again["goal"]["best_measured_mfu"] is None  # 0.99 was another model's
    assert [p["config"] for p in again["proposals"]] == [p["config"] for p in first["proposals"]]


def test_a_retrained_model_cannot_score_an_old_round(tmp_path: Path) -> None:
    record = read_round(propose(space(), tmp_path / "r1", k=1))
    record["model"]["data_hash"] = "0" * 64
    with pytest.raises(DataError, match="is not the one that proposed round 1"):
        load_round_model(record)
    with pytest.raises(DataError, match=r"round\.json missing"):
        read_round(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "round.json").write_text("{")
    with pytest.raises(DataError, match="not valid JSON"):
        read_round(tmp_path / "bad")
    json.dumps(record)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[]", "holds a JSON object, got list"),
        ('{"round": "one", "proposals": [], "model": {}}', "round must be an integer >= 1"),
        ('{"round": 0, "proposals": [], "model": {}}', "round must be an integer >= 1"),
        ('{"round": 1, "proposals": [{"name": "a"}], "model": {}}', "proposals must be"),
        ('{"round": 1, "proposals": [{"name": "a", "config": {}}]}', "names no proposing model"),
    ],
)
def test_read_round_refuses_what_is_not_a_round(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "round.json").write_text(text)
    with pytest.raises(DataError, match=match):
        read_round(tmp_path)


def _analytic_round(tmp_path: Path) -> dict:
    return read_round(propose(space(), tmp_path / "r1", k=2, model=None))  # type: ignore[arg-type]


def test_scoring_a_round_with_no_matching_run_is_an_error(tmp_path: Path) -> None:
    record = _analytic_round(tmp_path)
    other = {
        **record["proposals"][0]["config"],
        "grad_accum": 999,
        "run_id": "x/1",
        "status": "completed",
        "mfu": 0.4,
        "source": "synthetic",
    }  # another layout's run
    with pytest.raises(DataError, match=r"none of the 1 runs matches a proposal of round 1"):
        score_round(record, pd.DataFrame([other]), model=None)


def test_scoring_a_table_without_outcomes_is_an_error(tmp_path: Path) -> None:
    record = _analytic_round(tmp_path)
    runs = pd.DataFrame(
        [{**p["config"], "run_id": f"{p['name']}/1", "mfu": 0.3} for p in record["proposals"]]
    )
    with pytest.raises(DataError, match=r"columns status and mfu .* got no status among"):
        score_round(record, runs, model=None)


def test_the_proposer_is_checked_by_its_own_hash_not_only_its_data(
    tmp_path: Path, playbook_subset: pd.DataFrame
) -> None:
    from surrogate.learned.model import SurrogateModel

    small = {"n_estimators": 10, "num_leaves": 7}
    model = SurrogateModel(status_params=small, mfu_params=small, mem_params=small)
    model.fit(playbook_subset).save(tmp_path / "m")
    record = read_round(propose(space(), tmp_path / "r1", k=1, model=tmp_path / "m"))
    assert record["model"]["model_sha256"] == model.saved_sha256_
    assert load_round_model(record).saved_sha256_ == model.saved_sha256_
    model.conformal_q_ += 0.1  # the same training data, another model
    model.save(tmp_path / "m")
    with pytest.raises(DataError, match=r"is not the one that proposed round 1 \(model sha256"):
        load_round_model(record)


def test_propose_checks_its_round_directory_before_scoring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import surrogate.layouts.search

    def never(*a: object, **k: object) -> None:
        raise AssertionError("scored before checking the round directory")

    monkeypatch.setattr(surrogate.layouts.search, "score_configs", never)
    (tmp_path / "r1").write_text("x")
    with pytest.raises(ConfigError, match=r"--round must be a new directory, got the file"):
        propose(space(), tmp_path / "r1", k=2, model=None)  # type: ignore[arg-type]


def test_propose_takes_spaces_of_millions_of_points(tmp_path: Path) -> None:
    """Candidates are generated as columns (surrogate.layouts.grid), so a space beyond what
    enumerating one configuration per point tries is proposed from whole."""
    big = LayoutSpace(
        model=get_preset("8b"),
        global_batch_seqs=8,
        node_counts=(1, 2, 4, 8, 16, 32, 64),
        frameworks=("torchtitan",),
    )
    assert big.size_bound() > DEFAULT_ENUMERATION_LIMIT
    record = read_round(propose(big, tmp_path / "r", k=4))
    assert len(record["proposals"]) == 4 and record["goal"]["candidates"] > 10_000


def test_propose_says_how_to_narrow_a_space_beyond_its_limit(tmp_path: Path) -> None:
    huge = LayoutSpace(
        model=get_preset("mixtral-8x7b"),
        global_batch_seqs=512,
        node_counts=(1, 2, 4, 8, 16, 32, 64),
        frameworks=("torchtitan", "megatron", "nanotron"),
    )
    with pytest.raises(
        ConfigError,
        match=r"more than the enumeration limit \(10,000,000\); "
        r"narrow it \(fewer node counts",
    ) as raised:
        propose(huge, tmp_path / "r", k=4)
    assert "optuna" not in str(raised.value)  # propose has no optuna to fall back on
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("k", [0, -3, 1001, 10**9])
def test_k_is_capped_before_any_scoring(tmp_path: Path, k: int) -> None:
    from surrogate.loop.active import MAX_K

    with pytest.raises(ConfigError, match="k must be" + (" at most 1,000" if k > MAX_K else "")):
        propose(space(), tmp_path / "r", k=k)
    assert not (tmp_path / "r").exists()


def tiny_space() -> LayoutSpace:
    """Three launchable layouts of 8B on one node (dp8, dp4 tp2, dp2 tp4; ZeRO-2)."""
    return LayoutSpace(
        model=get_preset("8b"),
        global_batch_seqs=32,
        node_counts=(1,),
        frameworks=("torchtitan",),
        max_cp=1,
        max_vpp=1,
        max_mbs=1,
        recompute_modes=("none",),
        zero_stages=(2,),
        sequence_parallel=(True,),
        shardings=("full",),
    )


def measured(
    record: dict[str, object], statuses: tuple[str, ...] = ("completed", "oom")
) -> pd.DataFrame:
    """A sweep table of a round's proposals as if they had run (synthetic outcomes, made up
    by this test)."""
    from surrogate.runs.sweeps import sweep_row, validate_sweeps

    rows = [
        sweep_row(
            config_from_flat(p["config"]),
            status=statuses[i % len(statuses)],
            source="synthetic",
            run_id=f"{p['name']}/1",
            mfu=0.4 if statuses[i % len(statuses)] == "completed" else None,
        )
        for i, p in enumerate(record["proposals"])
    ]  # type: ignore[attr-defined]
    return validate_sweeps(pd.DataFrame(rows))


def test_a_layout_that_was_run_is_never_proposed_again(tmp_path: Path) -> None:
    first = read_round(propose(space(), tmp_path / "r1", k=6))
    runs = measured(first)
    again = read_round(propose(space(), tmp_path / "r2", k=1000, runs=runs))
    ran = {layout_key(config_from_flat(p["config"])) for p in first["proposals"]}
    proposed = {layout_key(config_from_flat(p["config"])) for p in again["proposals"]}
    assert ran and proposed and not ran & proposed
    assert len(proposed) == again["goal"]["candidates"] - len(ran)  # every other one


def test_a_space_whose_every_layout_was_run_is_an_error(tmp_path: Path) -> None:
    first = read_round(propose(tiny_space(), tmp_path / "r1", k=50))
    assert len(first["proposals"]) == first["goal"]["candidates"]
    with pytest.raises(ConfigError, match=r"was run already .*nothing is left to propose"):
        propose(tiny_space(), tmp_path / "r2", k=2, runs=measured(first))
    assert not (tmp_path / "r2").exists()


@pytest.mark.parametrize(
    ("max_p_oom", "margin", "match"),
    [
        (0.0, 0.0, r"no candidate is left .* above --max-p-oom 0; .*raise --max-p-oom to 0\.01"),
        (0.5, 0.95, r"none keeps 95% of the GPU's memory free .* lower --memory-margin"),
    ],
)
def test_no_candidate_within_the_limits_says_which_to_relax(
    tmp_path: Path, max_p_oom: float, margin: float, match: str
) -> None:
    from surrogate.layouts.search import Limits

    with pytest.raises(ConfigError, match=match):
        propose(
            space(),
            tmp_path / "r",
            k=2,
            limits=Limits(max_p_oom=max_p_oom, memory_margin_frac=margin),
        )
    assert not (tmp_path / "r").exists()


def test_runs_that_are_no_sweep_table_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="status column"):
        propose(space(), tmp_path / "r", k=2, runs=pd.DataFrame({"dp": [8], "tp": [1]}))
    bad = measured(read_round(propose(tiny_space(), tmp_path / "r1", k=1)))
    bad["dp"] = 3  # no layout of one node
    with pytest.raises(DataError, match="runs, row 0: not a configuration"):
        propose(space(), tmp_path / "r2", k=2, runs=bad)


def test_read_measured_runs_says_what_the_table_is_instead(tmp_path: Path) -> None:
    from surrogate.loop.measured import read_measured_runs

    first = propose(tiny_space(), tmp_path / "r1", k=2)
    with pytest.raises(DataError, match=r"is a round's proposals\.csv .*surrogate ingest"):
        read_measured_runs(first / "proposals.csv")
    proposals = pd.read_csv(first / "proposals.csv")
    cases = {
        "predictions.csv": (proposals.drop(columns=["name", "reason"]), "a table of predictions"),
        "layouts.csv": (proposals[["num_layers", "dp", "tp"]], "configurations without outcomes"),
        "other.csv": (pd.DataFrame({"a": [1], "b": [2]}), r"no sweep table: its columns \(a, b\)"),
        "both.csv": (
            pd.concat(
                [measured(read_round(first)), pd.DataFrame({"pred_mfu": [0.3, 0.4]})], axis=1
            ),
            "a sweep table with predictions added",
        ),
    }
    for name, (table, match) in cases.items():
        table.to_csv(tmp_path / name, index=False)
        with pytest.raises(DataError, match=match):
            read_measured_runs(tmp_path / name)
    runs = measured(read_round(first))
    runs.to_parquet(tmp_path / "runs.parquet")
    runs.to_csv(tmp_path / "runs.csv", index=False)
    assert len(read_measured_runs(tmp_path / "runs.parquet")) == 2
    assert len(read_measured_runs(tmp_path / "runs.csv")) == 2


def test_the_round_records_what_it_costs(tmp_path: Path) -> None:
    out = propose(space(), tmp_path / "r1", k=4, steps=20)
    record, proposals = read_round(out), pd.read_csv(out / "proposals.csv")
    cost = record["cost"]
    hours = proposals["num_nodes"] * 8 * 20 * proposals["pred_step_time_s"] / 3600
    assert proposals["gpu_hours"].to_numpy() == pytest.approx(hours.to_numpy())
    assert cost["gpu_hours"] == pytest.approx(hours.sum())
    assert cost["steps_per_run"] == 20 and "[training] steps" in cost["steps_from"]
    assert cost["expected_ooms"] == pytest.approx(proposals["p_oom"].sum())
    assert cost["gpus"] == 4 * 8 and cost["gpu_hours_at_time_limit"] == pytest.approx(16.0)
    assert cost["budget_gpu_hours"] is None and cost["left_out_over_budget"] == 0


def test_a_budget_keeps_the_picks_within_it_and_says_what_it_left_out(tmp_path: Path) -> None:
    free = read_round(propose(space(), tmp_path / "r1", k=4))
    hours = [p["predicted"]["gpu_hours"] for p in free["proposals"]]
    budget = sum(hours) * 0.6
    capped = read_round(propose(space(), tmp_path / "r2", k=4, budget_gpu_hours=budget))
    spent = [p["predicted"]["gpu_hours"] for p in capped["proposals"]]
    assert sum(spent) <= budget and capped["cost"]["gpu_hours"] == pytest.approx(sum(spent))
    cost = capped["cost"]
    assert cost["budget_gpu_hours"] == budget
    if len(spent) < 4:
        assert cost["left_out_over_budget"] >= 1 and cost["left_out"][0]["gpu_hours"] > 0
    with pytest.raises(ConfigError, match="no candidate fits --budget-gpu-hours"):
        propose(space(), tmp_path / "r3", k=4, budget_gpu_hours=min(hours) / 1000)
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="budget_gpu_hours must be"):
            propose(space(), tmp_path / "r4", k=4, budget_gpu_hours=bad)


def test_a_round_of_no_run_is_never_written(tmp_path: Path) -> None:
    from surrogate.loop.acquisition import Acquisition
    from surrogate.loop.round_files import write_round

    with pytest.raises(ConfigError, match="at least one run"):
        write_round(tmp_path / "r", [], model_info={}, goal={}, acquisition=Acquisition())
    assert not (tmp_path / "r").exists()


def test_of_proposes_into_one_new_round_at_once_exactly_one_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another propose writes the round between this one's check and its rename: this one is
    refused in one line, the winner's round stays whole, no temporary directory is left."""
    from surrogate.loop import active, round_files

    final = tmp_path / "r1"
    real = round_files.check_new_round_dir
    calls = []

    def and_meanwhile_another_writes_it(round_dir: str | Path) -> Path:
        out = real(round_dir)
        calls.append(round_dir)
        if len(calls) == 2:  # write_round's own check, after the scoring
            final.mkdir()
            (final / "round.json").write_text('{"round": 1}')
        return out

    monkeypatch.setattr(active, "check_new_round_dir", and_meanwhile_another_writes_it)
    monkeypatch.setattr(round_files, "check_new_round_dir", and_meanwhile_another_writes_it)
    with pytest.raises(
        ConfigError,
        match=r"round directory .*r1' was written by another "
        r"propose meanwhile",
    ):
        propose(space(), final, k=2)
    assert (final / "round.json").read_text() == '{"round": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r1"]


def test_a_round_on_a_full_disk_is_one_error_naming_it_and_leaves_nothing(full_dir: Path) -> None:
    from surrogate.errors import OutputError

    with pytest.raises(OutputError, match=r"cannot write the round '.*r1': No space left"):
        propose(space(), full_dir / "r1", k=2)
    assert sorted(p.name for p in full_dir.iterdir()) == ["filler"]
