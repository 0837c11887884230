"""Scoring a search's table (surrogate.layouts.scored)."""

from __future__ import annotations

import pytest

from surrogate.config.presets import get_preset
from surrogate.layouts import scored
from surrogate.layouts.grid import space_table
from surrogate.layouts.space import LayoutSpace


def test_a_table_scored_in_chunks_gives_the_answers_of_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    space = LayoutSpace(
        model=get_preset("mixtral-8x7b"),
        global_batch_seqs=64,
        node_counts=(1, 2),
        frameworks=("megatron", "torchtitan"),
    )
    table = space_table(space)
    whole = scored.rank(scored.score_configs(table, model=None))
    monkeypatch.setattr(scored, "SCORE_CHUNK", 97)
    assert len(whole) > 3 * 97
    chunked = scored.rank(scored.score_configs(table, model=None))
    assert chunked.equals(whole)
    assert list(chunked.dtypes) == list(whole.dtypes)
