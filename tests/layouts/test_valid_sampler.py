"""The valid layouts of an enumerable space as an optuna sampler's restriction: which values of a
dimension extend a trial's choices to a valid layout, and what a proposal becomes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from surrogate.config.presets import get_preset
from surrogate.layouts.grid import space_table
from surrogate.layouts.space import LayoutSpace
from surrogate.layouts.valid_sampler import PLAIN, TRIES, ValidPoints

SPARSE = LayoutSpace(
    model=get_preset("1.34b"),
    frameworks=("torchtitan",),
    global_batch_seqs=16,
    node_counts=(1, 2),
    max_cp=1,
    max_vpp=1,
    max_mbs=2,
)
"""A synthetic space: 371 valid layouts of 6,000 points, a share and a sharding a choice for
some."""


def _points() -> tuple[ValidPoints, list[dict[str, Any]]]:
    table = space_table(SPARSE)
    columns = {d: table[d].tolist() for d in PLAIN}
    rows = [{d: columns[d][i] for d in PLAIN} for i in range(len(table["dp"]))]
    return ValidPoints(SPARSE, table), rows


def test_allowed_values_are_those_of_the_valid_layouts_that_agree() -> None:
    points, rows = _points()
    assert points.size == len(rows) <= 0.2 * SPARSE.size_bound()
    for row in rows:
        for k, d in enumerate(PLAIN):
            prefix = {e: row[e] for e in PLAIN[:k]}
            agree = {r[d] for r in rows if all(r[e] == v for e, v in prefix.items())}
            assert points.allowed(prefix, d) == [c for c in points.choices[d] if c in agree]


def test_every_conditional_value_allowed_builds() -> None:
    """The shares and shardings allowed after a valid layout's plain values each build one."""
    points, rows = _points()
    seen = set()
    for row in rows:
        shares = (
            points.allowed(row, "recompute_share")
            if points._chooses(row, "recompute_share")
            else [1.0]
        )
        for share in shares:
            point = {**row, "recompute_share": share}
            chosen = points._chooses(row, "sharding")
            for sharding in points.allowed(point, "sharding") if chosen else ["full"]:
                SPARSE.build({**point, "sharding": sharding})  # raises if invalid
                seen.add((share, sharding))
    assert {s for s, _ in seen} > {1.0} and {h for _, h in seen} == {"full", "node"}


def test_a_proposal_off_the_valid_layouts_becomes_the_nearest_valid_value() -> None:
    points, rows = _points()
    prefix = {d: rows[0][d] for d in PLAIN[:1]}  # one node: tp of at most 8 (of 16)
    allowed = points.allowed(prefix, "tp")
    assert allowed and max(allowed) < max(points.choices["tp"])
    calls = []

    def propose() -> int:
        calls.append(1)
        return max(points.choices["tp"])

    rng = np.random.default_rng(0)
    assert points.pick(prefix, "tp", propose, rng) == max(allowed)
    assert len(calls) == TRIES  # proposed again before the nearest was taken
    assert points.pick(prefix, "tp", lambda: allowed[0], rng) == allowed[0]
    with pytest.raises(ValueError, match="no valid layout extends"):
        points.pick({**prefix, "tp": max(points.choices["tp"])}, "pp", propose, rng)


def test_values_drawn_together_are_made_a_valid_layout_s() -> None:
    points, _ = _points()
    rng = np.random.default_rng(0)
    choices = SPARSE.choices()
    for _ in range(50):
        drawn = {d: v[int(rng.integers(len(v)))] for d, v in choices.items()}
        made = points.project(drawn, rng)
        assert set(made) >= set(PLAIN) - {d for d, v in choices.items() if len(v) == 1}
        point = {**{d: v[0] for d, v in choices.items() if len(v) == 1}, **made}
        SPARSE.build(point)  # raises if invalid
