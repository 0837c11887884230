"""Every valid layout of a :class:`~surrogate.layouts.space.LayoutSpace` as a flat table
(:mod:`surrogate.config.table`), in the order of :meth:`LayoutSpace.enumerate`, without one
TrainingConfig per point.

The points are the space's grid of choices (:meth:`LayoutSpace.choices`). The rules that
need one or two choices only (the batch divides, virtual stages fit, a share or a sharding
only where it is a choice) are judged on the grid itself, its indices broadcast one axis each;
the points kept are then carried as their indices into the choices, text choices included,
and each step gathers only the columns it reads: :meth:`LayoutSpace.build`'s derivations,
shares that give the same count made one layout, hybrid sharding that would be full, the
framework's own rules (each distinct signature judged once,
:func:`~surrogate.layouts.degrees.runs_as_described`). Every column is gathered once, at the
end, and the table validated column-wise, its text columns as categoricals (read by their
codes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from surrogate.config.table import FlatTable, per_group, validate_table
from surrogate.config.training import (
    CONFIG_COLUMNS,
    LAYOUT_FIELDS,
    MODEL_FIELDS,
    accounted_split,
    weighted_split,
)
from surrogate.layouts.degrees import node_copies, recompute_layers_for_share, runs_as_described
from surrogate.layouts.space import DIMENSIONS, REST_DIMENSIONS, LayoutSpace

TABLE_LIMIT = 10_000_000
"""Points :func:`space_table` (and so a search) generates by default. Mixtral 8x7B on 1-64
nodes with torchtitan at a 4M-token batch, 9,408,000 points and 287,480 valid layouts, is
generated and scored whole by ``surrogate search --trials 0`` in 10.3 s of wall time at 0.95 GB
of peak memory on a 2-core machine (docs/speed.md)."""

_HEADS: tuple[str, ...] = DIMENSIONS[:4]
"""The degrees of a point's head: num_nodes, tp, pp, cp (the GPU count must divide by them)."""

_TEXT: tuple[str, ...] = ("recompute", "framework", "sharding")
"""The dimensions whose choices are text: carried as codes, their index in the choices."""


class _Points:
    """The points of a space's grid kept so far: each dimension's index into its choices."""

    def __init__(self, space: LayoutSpace, ch: dict[str, list[Any]],
                 heads: list[tuple[int, int, int, int]]) -> None:
        self.ch = ch
        self.heads = np.array(heads, dtype=np.int64)
        axes = dict(zip(("head", *REST_DIMENSIONS), np.meshgrid(
            np.arange(len(heads)), *(np.arange(len(ch[k])) for k in REST_DIMENSIONS),
            indexing="ij", sparse=True), strict=True))
        self.shape = (len(heads), *(len(ch[k]) for k in REST_DIMENSIONS))
        keep = np.broadcast_to(_cheap_rules(space, ch, self.heads, axes), self.shape)
        self.index = dict(zip(axes, np.nonzero(keep), strict=True))

    def at(self, rows: np.ndarray | slice, *names: str) -> dict[str, np.ndarray]:
        """The columns ``names`` at positions ``rows`` of the points kept: counts and flags as
        values, text as codes."""
        out = {}
        for k in names:
            if k in _HEADS:
                out[k] = self.heads[self.index["head"][rows], _HEADS.index(k)]
            elif k in _TEXT:
                out[k] = self.index[k][rows]
            else:
                out[k] = np.asarray(self.ch[k])[self.index[k][rows]]
        return out


def _cheap_rules(space: LayoutSpace, ch: dict[str, list[Any]], heads: np.ndarray,
                 axes: dict[str, np.ndarray]) -> np.ndarray:
    """Where the points of the grid (``axes``: each dimension's index, broadcastable) pass
    the rules of one or two choices: ``dp x mbs`` divides the batch; virtual stages the
    validation would refuse anyway (vpp > 1 needs pp > 1 and a layer per virtual stage, and
    pp x vpp dividing the layers unless the framework's split is torchtitan's); the share a
    choice only where recomputation is full on a framework that checkpoints some layers, the
    sharding only where the framework copies shards at the point's ZeRO stage (elsewhere only
    their first value, 1 or 'full')."""
    pp = heads[:, 2][axes["head"]]
    dp = heads[:, 0] * space.gpus_per_node // np.prod(heads[:, 1:], axis=1)
    vpp, mbs = (np.asarray(ch[k])[axes[k]] for k in ("vpp", "mbs"))
    keep = space.global_batch_seqs % (dp[axes["head"]] * mbs) == 0
    layers, stages = space.model.num_layers, pp * vpp
    weighted = np.array([weighted_split(f) for f in ch["framework"]],
                        dtype=bool)[axes["framework"]]
    accounted = np.array([accounted_split(f) for f in ch["framework"]],
                         dtype=bool)[axes["framework"]]
    keep = keep & ((vpp == 1) | ((pp > 1) & (stages <= layers)
                                 & (weighted | (layers % stages == 0)
                                    | (accounted & ((layers + 2) % stages == 0)))))
    partial = _chooses_share(space, ch)[axes["recompute"], axes["framework"]]
    hybrid = np.array([[space.chooses_sharding(z, f) for f in ch["framework"]]
                       for z in ch["zero_stage"]], dtype=bool)
    return np.asarray(keep & ((partial | (axes["recompute_share"] == 0))
                              & (hybrid[axes["zero_stage"], axes["framework"]]
                                 | (axes["sharding"] == 0))), dtype=bool)


def _chooses_share(space: LayoutSpace, ch: dict[str, list[Any]]) -> np.ndarray:
    """Per recompute choice and framework choice: whether its points choose a share."""
    return np.array([[space.chooses_share(r, f) for f in ch["framework"]]
                     for r in ch["recompute"]], dtype=bool)


def space_table(space: LayoutSpace, limit: int = TABLE_LIMIT) -> FlatTable:
    """Every valid layout of ``space`` as a flat table (module docstring); ConfigError if the
    space holds more than ``limit`` points."""
    import pandas as pd

    space.check_bound(limit)
    ch = space.choices()
    heads = [(n, tp, pp, cp) for n in ch["num_nodes"] for tp in ch["tp"]
             for pp in ch["pp"] for cp in ch["cp"]
             if (n * space.gpus_per_node) % (tp * pp * cp) == 0]
    if not heads:
        return validate_table(pd.DataFrame(columns=list(CONFIG_COLUMNS))).table
    points = _Points(space, ch, heads)
    p = points.at(slice(None), "framework", "pp", "vpp", "recompute", "recompute_share")
    share = np.where(_chooses_share(space, ch)[p["recompute"], p["framework"]],
                     p["recompute_share"], 1.0)
    checkpointed = _checkpointed(space, {**p, "recompute_share": share}, ch["framework"])
    # Shares that give the same count are one layout: the first of them is kept.
    others = np.ravel_multi_index(
        [i for k, i in points.index.items() if k != "recompute_share"],
        [n for k, n in zip(points.index, points.shape, strict=True) if k != "recompute_share"])
    _, first = np.unique(others * (space.model.num_layers + 1) + checkpointed,
                         return_index=True)
    rows = np.sort(first)
    p = points.at(rows, *_HEADS, "mbs", "sharding")
    dp = p["num_nodes"] * space.gpus_per_node // (p["tp"] * p["pp"] * p["cp"])
    node = (np.asarray(ch["sharding"], dtype=object) == "node")[p["sharding"]]
    copies = np.where(node, node_copies(dp, p["cp"], p["tp"], space.gpus_per_node), 1)
    whole = ~node | (copies > 1)  # else it would be 'full' (build refuses it)
    rows, dp, copies = rows[whole], dp[whole], copies[whole]
    runs = runs_as_described(
        {**points.at(rows, *_HEADS[1:], "ep", "vpp", "zero_stage", "recompute",
                     "sequence_parallel", "framework"), "dp": dp, "dp_replicate": copies},
        moe=space.model.num_experts >= 2, names={k: ch[k] for k in ("framework", "recompute")})
    rows = rows[runs]
    p = points.at(rows, *(k for k in DIMENSIONS if k not in ("recompute_share", "sharding")))
    p.update(recompute_layers=checkpointed[rows], dp=dp[runs], dp_replicate=copies[runs])
    p["grad_accum"] = space.global_batch_seqs // (p["dp"] * p["mbs"])
    return validate_table(pd.DataFrame(_frame(space, p, ch)), messages=False).table


def _frame(space: LayoutSpace, p: dict[str, np.ndarray], ch: dict[str, list[Any]]
           ) -> dict[str, Any]:
    """The columns of the configurations of points ``p``: the model's, the cluster's and the
    layouts', text as categoricals."""
    import pandas as pd

    n = len(p["dp"])
    frame: dict[str, Any] = {k: _one_value(n, getattr(space.model, k)) for k in MODEL_FIELDS}
    frame.update(gpu=_one_value(n, space.gpu), gpus_per_node=np.full(n, space.gpus_per_node),
                 dtype=_one_value(n, space.dtype), framework_version=_one_value(n, None))
    frame.update({k: p[k] for k in ("num_nodes", *LAYOUT_FIELDS) if k in p and k not in _TEXT})
    frame.update({k: pd.Categorical.from_codes(p[k], dtype=pd.CategoricalDtype(ch[k]))
                  for k in ("framework", "recompute")})
    return frame


def _one_value(n: int, value: Any) -> Any:
    """A column of ``n`` cells of ``value``; text (or None) as a categorical, which
    :func:`~surrogate.config.table.validate_table` reads by its codes, no cell hashed."""
    import pandas as pd

    if value is None or isinstance(value, str):
        return pd.Categorical.from_codes(
            np.full(n, -1 if value is None else 0, dtype=np.int8),
            dtype=pd.CategoricalDtype([] if value is None else [value]))
    return np.full(n, value)


def _checkpointed(space: LayoutSpace, p: dict[str, np.ndarray], frameworks: Sequence[str]
                  ) -> np.ndarray:
    """``recompute_layers`` of each point of columns ``p`` (its framework the code of one of
    ``frameworks``; :func:`recompute_layers_for_share`), judged once per distinct framework,
    pipeline and share."""
    share = p["recompute_share"].astype(np.float64)
    out = np.zeros(len(share), dtype=np.int64)
    part = np.flatnonzero(share < 1.0)
    if part.size:
        codes, counts = per_group(
            [p["framework"][part], p["pp"][part], p["vpp"][part], share[part]],
            lambda f, pp, vpp, s: recompute_layers_for_share(
                frameworks[f], space.model.num_layers, int(pp), int(vpp), float(s)))
        out[part] = np.asarray(counts, dtype=np.int64)[codes]
    return out
