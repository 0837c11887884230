"""Searching a layout space: every valid layout scored and ranked where the space can be
enumerated; optuna (constraints, RDB storage) where it cannot, or for a shared study."""

from __future__ import annotations

from pathlib import Path

import pytest

from surrogate.config.presets import get_preset
from surrogate.errors import ConfigError
from surrogate.layouts.grid import TABLE_LIMIT, space_table
from surrogate.layouts.labels import layout_label
from surrogate.layouts.search import TOP_COLUMNS, Limits, rank, score_configs, search
from surrogate.layouts.space import DEFAULT_ENUMERATION_LIMIT, LayoutSpace

TINY = dict(
    model=get_preset("1.34b"),
    frameworks=("nanotron",),
    global_batch_seqs=16,
    node_counts=(1,),
    max_cp=1,
    max_vpp=1,
    max_mbs=2,
    recompute_modes=("none",),
    sequence_parallel=(True,),
)


def tiny() -> LayoutSpace:
    return LayoutSpace(**TINY)  # type: ignore[arg-type]


def test_score_configs_is_one_vectorised_pass_with_intervals() -> None:
    configs = tiny().enumerate()
    scored = score_configs(configs)
    assert len(scored) == len(configs)
    done = scored.dropna(subset=["pred_mfu_lo"])
    assert len(done) == len(scored)
    assert (done["pred_mfu_lo"] <= done["pred_mfu"]).all()
    assert (done["pred_mfu"] <= done["pred_mfu_hi"]).all()
    ranked = rank(scored)
    feasible = ranked[ranked["feasible"]]
    assert feasible["pred_mfu"].is_monotonic_decreasing


def test_no_configuration_scores_to_the_columns_of_some() -> None:
    """An empty input answers an empty table with every score column a scored one has."""
    scored = score_configs(tiny().enumerate(), model=None)
    empty = score_configs([], model=None)
    assert len(empty) == 0
    assert set(empty.columns) <= set(scored.columns)
    assert {
        "layout",
        "num_gpus",
        "pred_status",
        "pred_mfu",
        "pred_peak_mem_reserved_hi_gib",
        "analytic_fits",
        "feasible",
        "key",
    } <= set(empty.columns)


def test_search_labels_the_rows_it_shows() -> None:
    """The enumeration is scored without labels (a search of millions of layouts shows a
    handful); the rows shown carry them, where score_configs puts them."""
    space = LayoutSpace(**{**TINY, "node_counts": (1, 2)})  # type: ignore[arg-type]
    assert "layout" not in score_configs(space.enumerate(), labels=False)
    result = search(space, model=None, objective="mfu-vs-gpus")
    labelled = score_configs(space.enumerate(), model=None)
    for frame in (result.top, result.pareto):
        assert frame is not None and len(frame) >= 1
        extra = TOP_COLUMNS if frame is result.top else ()
        assert list(frame.columns) == [*labelled.columns, *extra]
        assert list(frame["layout"]) == [layout_label(result.configs[k]) for k in frame["key"]]
    assert result.method == "enumerate" and result.n_trials == 0


def test_an_enumerable_space_is_scored_whole_and_ranked_without_optuna() -> None:
    """The search's top is the ranked scores of every valid layout; no trial runs."""
    space = tiny()
    configs = space.enumerate()
    result = search(space, n_trials=200, seed=0)
    assert result.method == "enumerate" and result.enumerated == len(configs)
    assert result.n_trials == 0 and result.study_name is None
    ranked = rank(score_configs(configs))
    assert list(result.top["key"]) == list(ranked[ranked["feasible"]]["key"].head(5))


def test_optuna_finds_the_best_of_a_small_space() -> None:
    """Among the valid layouts alone where the space can be enumerated; over every point of
    the grid where it cannot, the invalid ones met and handled as constraints."""
    space = tiny()
    exact = search(space)
    bound = space.size_bound()
    result = search(space, n_trials=4 * bound, seed=0, method="optuna")
    assert result.method == "optuna" and result.enumerated is None
    assert result.top["key"].iloc[0] == exact.top["key"].iloc[0]
    assert result.n_invalid == 0
    grid = search(space, n_trials=4 * bound, seed=0, method="optuna", enumerate_limit=bound - 1)
    assert grid.top["key"].iloc[0] == exact.top["key"].iloc[0]
    assert grid.n_invalid > 0


def test_a_storage_or_a_space_too_large_takes_optuna(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    assert search(tiny(), n_trials=20, storage=url).method == "optuna"
    big = LayoutSpace(
        frameworks=("nanotron",), model=get_preset("8b"), global_batch_seqs=1024, node_counts=(64,)
    )
    assert search(big, model=None, n_trials=20, enumerate_limit=100).method == "optuna"
    with pytest.raises(ConfigError, match="at least one trial, got n_trials=0"):
        search(tiny(), n_trials=0, method="optuna")
    with pytest.raises(ConfigError, match="search it with method optuna"):
        search(tiny(), storage=url, method="enumerate")
    with pytest.raises(ConfigError, match="method must be one of auto, enumerate, optuna"):
        search(tiny(), method="grid")  # type: ignore[arg-type]


def test_rdb_storage_is_shared_by_workers(tmp_path: Path) -> None:
    """Two searches on one sqlite study: the second resumes it (as parallel workers would)."""
    import optuna

    url = f"sqlite:///{tmp_path / 'study.db'}"
    search(tiny(), n_trials=6, storage=url, study_name="shared", seed=1)
    search(tiny(), n_trials=5, storage=url, study_name="shared", seed=2)
    study = optuna.load_study(study_name="shared", storage=url)
    assert len(study.trials) == 11


def test_limits_make_layouts_infeasible() -> None:
    strict = search(tiny(), limits=Limits(memory_margin_frac=0.99), n_trials=0, method="enumerate")
    assert not strict.top["feasible"].any()
    assert strict.notes and "no layout meets the limits" in strict.notes[0]


def test_multi_objective_pareto_front() -> None:
    space = LayoutSpace(**{**TINY, "node_counts": (1, 2)})  # type: ignore[arg-type]
    result = search(space, objective="mfu-vs-gpus", n_trials=30, seed=0, method="optuna")
    front = result.pareto
    assert front is not None and len(front) >= 1
    # along the front, more MFU costs more GPUs (no point dominates another)
    assert front["num_gpus"].is_monotonic_decreasing
    with pytest.raises(ConfigError, match="needs a range of node counts"):
        search(tiny(), objective="mfu-vs-gpus", n_trials=1)


def test_errors() -> None:
    with pytest.raises(ConfigError, match="max_p_oom must be between 0 and 1"):
        Limits(max_p_oom=2.0)
    big = LayoutSpace(
        frameworks=("nanotron",), model=get_preset("8b"), global_batch_seqs=1024, node_counts=(64,)
    )
    with pytest.raises(ConfigError, match="enumeration limit"):
        search(big, method="enumerate", enumerate_limit=100)
    with pytest.raises(ConfigError, match="more than the enumeration limit"):  # not "no layout"
        search(big, n_trials=0, enumerate_limit=100)


def test_pareto_front_covers_every_scored_layout() -> None:
    """An enumerated space's front is drawn from every valid layout."""
    from surrogate.layouts.search import _pareto

    space = LayoutSpace(**{**TINY, "node_counts": (1, 2)})  # type: ignore[arg-type]
    result = search(space, model=None, objective="mfu-vs-gpus", n_trials=3, seed=0)
    exact = _pareto(rank(score_configs(space.enumerate(), model=None)), "mfu-vs-gpus")
    assert result.pareto is not None and len(result.pareto) >= 1
    assert list(result.pareto["key"]) == list(exact["key"])


def test_an_unknown_gpu_or_an_empty_space_says_why() -> None:
    with pytest.raises(ConfigError, match=r"gpu must be one of A100-SXM-40GB, .* got 'H900'"):
        LayoutSpace(**{**TINY, "gpu": "H900"})  # type: ignore[arg-type]
    odd = LayoutSpace(
        **{**TINY, "global_batch_seqs": 3, "frameworks": ("torchtitan",), "zero_stages": (3,)}
    )  # type: ignore[arg-type]  # ZeRO needs dp > 1
    with pytest.raises(
        ConfigError,
        match=r"the space holds no valid layout of playbook-1\.34b on "
        r"1 x 8 H100-SXM-80GB for a global batch of 3 sequences "
        r"\(e\.g\. .+ must .+\): widen it",
    ):
        search(odd, model=None)
    with pytest.raises(ConfigError, match=r"the space holds no valid layout .+: widen it"):
        search(odd, model=None, n_trials=5, method="optuna")  # enumerated: no trial runs
    with pytest.raises(
        ConfigError,
        match=r"none of optuna's 5 trials was a valid layout of "
        r"playbook-1\.34b .+ \(e\.g\. .+\): run more trials",
    ):
        search(odd, model=None, n_trials=5, method="optuna", enumerate_limit=1)


def test_optuna_chooses_the_share_only_where_it_is_a_choice(tmp_path: Path) -> None:
    """The share of layers full recomputation checkpoints is a conditional parameter: optuna
    suggests it only for full recomputation on a framework that checkpoints some layers."""
    import optuna

    space = LayoutSpace(
        **{
            **TINY,
            "frameworks": ("megatron", "nanotron"),  # type: ignore[arg-type]
            "recompute_modes": ("none", "full"),
            "sequence_parallel": (False, True),
        }
    )
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    result = search(space, model=None, n_trials=60, storage=storage, study_name="shares", seed=0)
    trials = optuna.load_study(study_name="shares", storage=storage).trials
    chosen = [t for t in trials if "recompute_share" in t.params]
    assert chosen and all(
        t.params["recompute"] == "full" and t.params["framework"] == "megatron" for t in chosen
    )
    # the sharding likewise, only for Megatron's ZeRO-1 (its distributed optimizer instances)
    sharded = [t for t in trials if "sharding" in t.params]
    assert sharded and all(
        t.params["zero_stage"] == 1 and t.params["framework"] == "megatron" for t in sharded
    )
    partial = [c for c in result.configs.values() if c.layout.recompute_layers]
    assert all(c.layout.framework == "megatron" for c in partial)
    assert result.method == "optuna" and result.enumerated is None


def test_safe_ranks_by_the_lower_end_of_the_interval() -> None:
    """rank safe sorts the feasible layouts by pred_mfu_lo; the top carries p_best (at most 1
    in sum, the same on a second search) and the tokens/s interval around the prediction."""
    scored = score_configs(tiny().enumerate())
    safe = rank(scored, "safe")
    assert safe[safe["feasible"]]["pred_mfu_lo"].is_monotonic_decreasing
    result = search(tiny(), top_k=4, rank="safe")
    assert result.top["pred_mfu_lo"].is_monotonic_decreasing
    assert list(result.top["key"]) == list(safe[safe["feasible"]]["key"].head(4))
    assert 0 < result.top["p_best"].sum() <= 1 + 1e-9
    again = search(tiny(), top_k=4, rank="safe")
    assert list(again.top["p_best"]) == list(result.top["p_best"])
    held = result.top.loc[result.top["best_set"], "p_best"]  # those it cannot tell apart
    assert len(held) and held.sum() >= 0.9 * result.top["p_best"].sum() - 1e-9
    top = result.top
    assert (top["pred_tokens_per_s_per_gpu_lo"] <= top["pred_tokens_per_s_per_gpu"]).all()
    assert (top["pred_tokens_per_s_per_gpu"] <= top["pred_tokens_per_s_per_gpu_hi"]).all()


def test_safe_needs_intervals_and_rank_names_its_choices() -> None:
    with pytest.raises(ConfigError, match="rank safe"):
        search(tiny(), model=None, rank="safe")
    with pytest.raises(ConfigError, match="mean or safe"):
        search(tiny(), rank="best")  # type: ignore[arg-type]


def test_a_space_of_millions_of_points_is_searched_whole() -> None:
    """By default a search generates and scores up to TABLE_LIMIT points as columns, far more
    than enumerating one configuration per point would try."""
    space = LayoutSpace(
        model=get_preset("8b"),
        global_batch_seqs=8,
        node_counts=(1, 2, 4, 8, 16, 32, 64),
        frameworks=("torchtitan",),
    )
    assert DEFAULT_ENUMERATION_LIMIT < space.size_bound() <= TABLE_LIMIT
    result = search(space, model=None)
    assert result.enumerated == len(space_table(space)["dp"]) > 10_000


def test_top_k_is_capped_before_any_scoring() -> None:
    from surrogate.layouts.search import MAX_TOP_K, check_top_k

    check_top_k(MAX_TOP_K)
    for bad in (0, -1, MAX_TOP_K + 1, 10**9, True):
        with pytest.raises(ConfigError, match="top_k must be"):
            search(tiny(), top_k=bad, n_trials=0)


SPARSE = {
    **TINY,
    "frameworks": ("torchtitan",),
    "node_counts": (1, 2),
    "recompute_modes": None,
    "sequence_parallel": (False, True),
}
"""A synthetic space where few points are valid layouts: 371 of 6,000 (6%), a share and a
sharding a choice for some of them."""


def _trial_layouts(storage: str, name: str) -> tuple[list[object], set[tuple[object, ...]]]:
    """The study's trials, and the keys of the layouts they built (each trial's parameters
    built again by the space's rules)."""
    import optuna

    from surrogate.layouts.space import layout_key

    trials = optuna.load_study(study_name=name, storage=storage).trials
    space = LayoutSpace(**SPARSE)  # type: ignore[arg-type]
    keys = {layout_key(space.build(t.params)) for t in trials}  # raises on an invalid point
    return trials, keys


def test_a_sparse_enumerable_space_s_trials_are_all_valid_layouts(tmp_path: Path) -> None:
    space = LayoutSpace(**SPARSE)  # type: ignore[arg-type]
    valid = len(space_table(space)["dp"])
    assert valid <= 0.2 * space.size_bound()
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    result = search(space, model=None, n_trials=30, storage=storage, study_name="s", seed=0)
    assert result.n_trials == 30 and result.n_invalid == 0
    trials, keys = _trial_layouts(storage, "s")
    assert all(not t.user_attrs.get("invalid") for t in trials)  # type: ignore[attr-defined]
    assert keys <= set(score_configs(space.enumerate(), model=None)["key"])
    assert len(keys) > 10  # spread over the space, not one layout again and again
    # NSGA-II's children (drawn together, then made valid) as well
    pareto = search(space, model=None, objective="mfu-vs-oom", n_trials=30, method="optuna")
    assert pareto.n_trials == 30 and pareto.n_invalid == 0


def test_two_workers_share_a_study_of_valid_layouts_only(tmp_path: Path) -> None:
    """Two sequential workers on one sqlite study: the second reads the first's trials, every
    trial is a valid layout, and the study's best is the best of both workers' tops."""
    import optuna

    space = LayoutSpace(**SPARSE)  # type: ignore[arg-type]
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    first = search(space, model=None, n_trials=8, storage=storage, study_name="w", seed=1)
    second = search(space, model=None, n_trials=8, storage=storage, study_name="w", seed=2)
    trials, _ = _trial_layouts(storage, "w")
    assert len(trials) == 16
    study = optuna.load_study(study_name="w", storage=storage)
    assert study.best_trial.user_attrs["constraints"][0] == 0  # a valid layout
    tops = [first.top["pred_mfu"].iloc[0], second.top["pred_mfu"].iloc[0]]
    assert study.best_value == pytest.approx(max(tops))


def test_a_study_of_another_space_is_refused(tmp_path: Path) -> None:
    import optuna

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(storage=storage, study_name="made", direction="maximize")  # the recipe
    search(tiny(), model=None, n_trials=3, storage=storage, study_name="made")
    wider = LayoutSpace(**{**TINY, "max_mbs": 4})  # type: ignore[arg-type]
    with pytest.raises(
        ConfigError,
        match=r"study 'made' searches another layout space than this search's: "
        r"max_mbs \(2 there, 4 here\); every search of a study gives the same space",
    ):
        search(wider, model=None, n_trials=3, storage=storage, study_name="made")
    old = optuna.create_study(storage=storage, study_name="old", direction="maximize")
    old.add_trial(optuna.trial.create_trial(value=0.0))  # a trial, and no record of its space
    with pytest.raises(ConfigError, match=r"study 'old' holds 1 trial but no record"):
        search(tiny(), model=None, n_trials=3, storage=storage, study_name="old")
