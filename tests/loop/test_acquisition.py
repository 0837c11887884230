"""Acquisition: which candidates the loop picks (gain, diversity, what was already run)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from surrogate.config.framework_traits import RECOMPUTE_MODES
from surrogate.config.presets import get_preset
from surrogate.config.table import flat_table
from surrogate.config.training import TrainingConfig
from surrogate.errors import ConfigError
from surrogate.layouts.labels import point_of
from surrogate.layouts.search import score_configs
from surrogate.layouts.space import LayoutSpace
from surrogate.loop.acquisition import (
    Acquisition,
    layout_vector,
    layout_vectors,
    probability_best,
    problem_codes,
    select,
)


def space(model: str = "8b") -> LayoutSpace:
    return LayoutSpace(
        model=get_preset(model),
        global_batch_seqs=32,
        node_counts=(1,),
        frameworks=("torchtitan",),
        max_cp=2,
        max_vpp=1,
        max_mbs=4,
    )


def test_probability_best_picks_likely_winners_above_the_incumbent() -> None:
    """The other gain: each pick's value is its probability of being the best candidate and
    above the incumbent; none can beat an incumbent far above every prediction."""
    configs = space().enumerate()
    scored = score_configs(configs)
    acq = Acquisition(boundary_frac=0.0, gain="probability-best", open_with_best=False)
    picks = select(scored, configs, 3, acquisition=acq)
    assert {reason for _, reason, _ in picks} == {"probability-best"}
    values = [v for _, _, v in picks]
    assert 0 < sum(values) <= 1 and values[0] == max(values)
    # no diversity penalty: the correlated draws already share the odds between neighbours
    odds = probability_best(scored, 0.2)
    top = [int(i) for i in np.argsort(-odds, kind="stable")[:3]]
    assert [i for i, _, _ in select(scored, configs, 3, best_measured=0.2, acquisition=acq)] == top
    high = select(scored, configs, 1, best_measured=10.0, acquisition=acq)
    assert 0.0 < high[0][2] < 1e-5  # a millionth of the odds without the incumbent
    assert high[0][0] == int(np.argmax(probability_best(scored, None)))
    with pytest.raises(ConfigError, match="gain must be"):
        Acquisition(gain="luck")  # type: ignore[arg-type]


def test_probability_best_draws_only_the_layouts_not_run() -> None:
    """A layout already run has a measured outcome: it gets no odds and takes none from the
    others (they are those of the other layouts drawn alone), and select passes its runs."""
    configs = space().enumerate()
    scored = score_configs(configs)
    odds = probability_best(scored, None)
    ran = int(np.argmax(odds))
    free = np.arange(len(scored)) != ran
    after = probability_best(scored, None, free)
    others = np.flatnonzero(free)
    assert after[ran] == 0.0
    assert after[others] == pytest.approx(probability_best(scored.iloc[others], None))
    assert after.sum() > odds[others].sum()
    acq = Acquisition(boundary_frac=0.0, open_with_best=False)
    picks = select(
        scored, configs, 2, best_measured=0.01, already_run=[configs[ran]], acquisition=acq
    )
    assert [i for i, _, _ in picks] == [
        int(i) for i in np.argsort(-probability_best(scored, 0.01, free), kind="stable")[:2]
    ]


def test_probability_best_draws_a_shortlist_and_needs_intervals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the rows of the highest upper end x p_completed are drawn (the rest have no
    odds); without intervals the value is the ranking's, predicted MFU x p_completed."""
    import surrogate.loop.acquisition as acquisition

    configs = space().enumerate()
    scored = score_configs(configs)
    monkeypatch.setattr(acquisition, "SHORTLIST", 5)
    odds = probability_best(scored, None)
    upper = (scored["pred_mfu_hi"] * scored["p_completed"]).to_numpy()
    assert set(np.flatnonzero(odds > 0)) <= set(np.argsort(-upper, kind="stable")[:5])
    assert 0 < odds.sum() <= 1 + 1e-9
    bare = scored.assign(pred_mfu_lo=np.nan, pred_mfu_hi=np.nan)
    assert probability_best(bare, None) == pytest.approx(
        (bare["pred_mfu"] * bare["p_completed"]).to_numpy()
    )


def test_picks_are_diverse_not_near_copies() -> None:
    """Expected improvement's picks are spread by the diversity penalty (probability-best's
    by its correlated draws)."""
    configs = space().enumerate()
    scored = score_configs(configs)
    ei = Acquisition(boundary_frac=0.0, gain="expected-improvement")
    picks = select(scored, configs, 6, acquisition=ei)
    vecs = np.stack([layout_vector(configs[i]) for i, _, _ in picks])
    d = np.sqrt(((vecs[:, None] - vecs[None]) ** 2).sum(-1))
    assert len({i for i, _, _ in picks}) == 6
    no_penalty = select(scored, configs, 6, acquisition=replace(ei, diversity_scale=0.0))
    vecs0 = np.stack([layout_vector(configs[i]) for i, _, _ in no_penalty])
    d0 = np.sqrt(((vecs0[:, None] - vecs0[None]) ** 2).sum(-1))
    assert d[np.triu_indices(6, 1)].min() >= d0[np.triu_indices(6, 1)].min()
    assert d[np.triu_indices(6, 1)].min() >= 1.0  # at least one doubling apart


def test_already_run_layouts_are_not_proposed_again() -> None:
    configs = space().enumerate()
    scored = score_configs(configs)
    first = [i for i, _, _ in select(scored, configs, 3)]
    again = [i for i, _, _ in select(scored, configs, 3, already_run=[configs[i] for i in first])]
    assert not set(first) & set(again)


def test_runs_of_another_model_are_neither_run_nor_neighbours() -> None:
    """The same layout run for another model shape: not "already run" for this one, and no
    diversity penalty from it; the same shape under another name is the same problem."""
    configs = space().enumerate()
    scored = score_configs(configs)
    first = [i for i, _, _ in select(scored, configs, 3)]
    small = {layout_vector(c).tobytes(): c for c in space("1.34b").enumerate()}
    elsewhere = [
        small[layout_vector(configs[i]).tobytes()]
        for i in first
        if layout_vector(configs[i]).tobytes() in small
    ]
    assert elsewhere  # the small model has the same layouts
    again = [i for i, _, _ in select(scored, configs, 3, already_run=elsewhere)]
    assert again == first
    renamed = replace(configs[0], model=replace(configs[0].model, name="my-8b"))
    assert problem_codes([configs[0], renamed]).tolist() == [0, 0]
    assert problem_codes([configs[0], elsewhere[0]]).tolist() == [0, 1]


def test_a_campaign_opens_with_the_best_predicted_layout() -> None:
    """Before any completed run, the first pick is the model's own best (predicted MFU x
    p_completed) and the rest explore; once a run has completed, every slot explores."""
    configs = space().enumerate()
    scored = score_configs(configs)
    picks = select(scored, configs, 3, acquisition=Acquisition(boundary_frac=0.0))
    ranked = (scored["pred_mfu"] * scored["p_completed"]).to_numpy()
    assert picks[0][:2] == (int(np.argmax(ranked)), "best-predicted")
    assert {reason for _, reason, _ in picks[1:]} == {"probability-best"}
    later = select(
        scored, configs, 3, best_measured=0.2, acquisition=Acquisition(boundary_frac=0.0)
    )
    assert {reason for _, reason, _ in later} == {"probability-best"}
    ei = Acquisition(boundary_frac=0.0, gain="expected-improvement")  # still selectable
    assert {reason for _, reason, _ in select(scored, configs, 3, acquisition=ei)[1:]} == {
        "expected-improvement"
    }


def test_candidates_as_a_table_are_picked_as_configurations() -> None:
    """select on the candidates' flat table (what propose hands it) picks what it picks on
    their configurations, runs of this problem and of another one included; the vectors of
    the table are each configuration's point (its recomputation share from point_of)."""
    configs = LayoutSpace(
        model=get_preset("8b"),
        global_batch_seqs=32,
        node_counts=(1, 2),
        frameworks=("torchtitan", "megatron"),
        max_mbs=2,
    ).enumerate()
    table = flat_table(configs)
    scored = score_configs(configs)
    ran = [configs[i] for i, _, _ in select(scored, configs, 2)] + space("1.34b").enumerate()[:5]
    for run in ([], ran):
        assert select(scored, table, 4, already_run=run, best_measured=0.3) == select(
            scored, configs, 4, already_run=run, best_measured=0.3
        )

    def point(c: TrainingConfig) -> list[float]:
        lay = c.layout
        logs = np.log2(
            [
                lay.dp,
                lay.tp,
                lay.pp,
                lay.cp,
                lay.ep,
                lay.vpp,
                lay.mbs,
                lay.grad_accum,
                c.cluster.num_nodes,
            ]
        )
        step = RECOMPUTE_MODES.index(lay.recompute) - (1.0 - point_of(c)["recompute_share"])
        return [*logs, lay.zero_stage, step, float(lay.sequence_parallel)]

    assert any(c.layout.recompute_layers for c in configs)
    assert np.array_equal(layout_vectors(table), np.array([point(c) for c in configs]))
    assert problem_codes(table).tolist() == problem_codes(configs).tolist()


def test_a_budget_passes_over_picks_too_dear_for_what_is_left() -> None:
    """Synthetic costs: the picks sum to at most the budget, a pick that would exceed what is
    left goes to the next best, and the ones passed over are reported."""
    configs = space().enumerate()
    scored = score_configs(configs)
    free = select(scored, configs, 4)
    cost = np.ones(len(configs))
    dear = free[1][0]
    cost[dear] = 10.0  # the second pick, too dear
    cost[free[2][0]] = np.nan  # the third, of unknown cost
    skipped: list[int] = []
    picks = select(scored, configs, 4, cost=cost, budget=4.0, skipped=skipped)
    rows = [i for i, _, _ in picks]
    assert dear not in rows and free[2][0] not in rows and rows[0] == free[0][0]
    assert dear in skipped and all(not cost[i] <= 1.0 for i in skipped)
    assert cost[rows].sum() <= 4.0 and len(rows) == 4
    assert [i for i, _, _ in select(scored, configs, 4, cost=cost)] == [i for i, _, _ in free]
    few: list[int] = []
    assert len(select(scored, configs, 4, cost=cost, budget=2.5, skipped=few)) == 2
    assert few  # the third slot's pick, which nothing left could pay for
    assert select(scored, configs, 4, cost=cost, budget=0.5) == []
    with pytest.raises(ConfigError, match="a budget needs the cost"):
        select(scored, configs, 4, budget=1.0)
