"""Every valid layout of a :class:`~surrogate.layouts.space.LayoutSpace` as a flat table
(:mod:`surrogate.config.table`), without one TrainingConfig per point: the one place the
space's rules are written.

The points are the space's grid of choices (:meth:`LayoutSpace.choices`). The rules that
need one or two choices only (the batch divides, virtual stages fit, a share or a sharding
only where it is a choice) are judged on the grid itself, its indices broadcast one axis each;
the points kept are then carried as their indices into the choices, text choices included,
and each step gathers only the columns it reads: the derived degrees (dp = GPUs / (tp x pp x
cp), grad_accum, the layers a share checkpoints), shares that give the same count made one
layout, hybrid sharding that would be full, the framework's own rules (each distinct
signature judged once, :func:`~surrogate.layouts.degrees.runs_as_described`). Every column is
gathered once, at the end, and the table validated column-wise, its text columns as
categoricals (read by their codes).

One point (:func:`point_config`, ``LayoutSpace.build``, an optuna trial) is judged by the same
steps on the space of that point alone; the first step that drops it says why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from surrogate.config.frameworks import get_framework
from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.table import FlatTable, per_group, table_len, validate_table
from surrogate.config.training import (
    CONFIG_COLUMNS,
    LAYOUT_FIELDS,
    MODEL_FIELDS,
    TrainingConfig,
    accounted_split,
    weighted_split,
)
from surrogate.errors import ConfigError
from surrogate.layouts.degrees import (
    node_copies,
    partial_frameworks,
    recompute_layers_for_share,
    runs_as_described,
)
from surrogate.layouts.dimensions import DIMENSIONS, REST_DIMENSIONS, SHARDINGS

if TYPE_CHECKING:
    from surrogate.config.model import ModelConfig


class SpaceView(Protocol):
    """What the table reads of a space (:class:`surrogate.layouts.space.LayoutSpace`, which
    builds its points from this module: a protocol here keeps the import one way)."""

    @property
    def model(self) -> ModelConfig: ...
    @property
    def global_batch_seqs(self) -> int: ...
    @property
    def gpu(self) -> str: ...
    @property
    def gpus_per_node(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def fixed(self) -> Mapping[str, Any]: ...
    def choices(self) -> dict[str, list[Any]]: ...
    def chooses_share(self, recompute: str, framework: str) -> bool: ...
    def chooses_sharding(self, zero_stage: int, framework: str) -> bool: ...
    def check_bound(self, limit: int, *, optuna: bool = True) -> None: ...
    def pinned_to(self, point: Mapping[str, Any]) -> SpaceView:
        """The space of ``point`` alone (its dimensions fixed, its node count the only one)."""
        ...


TABLE_LIMIT = 10_000_000
"""Points :func:`space_table` (and so a search) generates by default. Mixtral 8x7B on 1-64
nodes with torchtitan at a 4M-token batch, 9,408,000 points and 287,480 valid layouts, is
generated and scored whole by ``surrogate search`` in 10.3 s of wall time at 0.95 GB
of peak memory on a 2-core machine (docs/speed.md)."""

_HEADS: tuple[str, ...] = DIMENSIONS[:4]
"""The degrees of a point's head: num_nodes, tp, pp, cp (the GPU count must divide by them)."""

_TEXT: tuple[str, ...] = ("recompute", "framework", "sharding")
"""The dimensions whose choices are text: carried as codes, their index in the choices."""


class _Points:
    """The points of a space's grid kept so far: each one's flat index into the grid (C
    order over the head, then :data:`REST_DIMENSIONS`), a dimension's index into its choices
    computed from it where read."""

    def __init__(
        self,
        space: SpaceView,
        ch: dict[str, list[Any]],
        heads: list[tuple[int, int, int, int]],
        skip: tuple[str, ...] = (),
    ) -> None:
        self.ch = ch
        self.heads = np.array(heads, dtype=np.int64)
        names = ("head", *REST_DIMENSIONS)
        axes = dict(
            zip(
                names,
                np.meshgrid(
                    np.arange(len(heads)),
                    *(np.arange(len(ch[k])) for k in REST_DIMENSIONS),
                    indexing="ij",
                    sparse=True,
                ),
                strict=True,
            )
        )
        self.shape = (len(heads), *(len(ch[k]) for k in REST_DIMENSIONS))
        self.size = dict(zip(names, self.shape, strict=True))
        self.stride = dict(
            zip(names, np.cumprod((1, *self.shape[:0:-1]))[::-1].tolist(), strict=True)
        )
        keep: Any = True
        self.dropped = ""
        """The first rule of :func:`_grid_rules` that leaves no point (else '')."""
        for name, passes in _grid_rules(space, ch, self.heads, axes).items():
            if name in skip:
                continue
            keep = keep & passes
            if not self.dropped and not np.any(keep):
                self.dropped = name
        self.flat = np.flatnonzero(np.broadcast_to(keep, self.shape))

    def index(self, name: str, flat: np.ndarray) -> np.ndarray:
        """The index into dimension ``name``'s choices of the points at grid positions
        ``flat``."""
        out = flat // self.stride[name] if self.stride[name] > 1 else flat
        return out % self.size[name] if name != "head" else out

    def without(self, names: tuple[str, ...], flat: np.ndarray) -> np.ndarray:
        """The grid positions ``flat`` in the grid without dimensions ``names``: equal where
        two points differ in ``names`` alone."""
        out, dropped = flat, 1
        for name in sorted(names, key=self.stride.__getitem__):  # the innermost first
            stride = self.stride[name] // dropped
            out = out // (stride * self.size[name]) * stride + out % stride
            dropped *= self.size[name]
        return out

    def at(self, rows: np.ndarray | slice, *names: str) -> dict[str, np.ndarray]:
        """The columns ``names`` at positions ``rows`` of the points kept: counts and flags as
        values, text as codes."""
        flat = self.flat[rows]
        out = {}
        for k in names:
            if k == "head":
                out[k] = self.index(k, flat)
            elif k in _HEADS:
                out[k] = self.heads[:, _HEADS.index(k)][self.index("head", flat)]
            elif k in _TEXT:
                out[k] = self.index(k, flat)
            else:
                out[k] = np.asarray(self.ch[k])[self.index(k, flat)]
        return out


def _grid_rules(
    space: SpaceView, ch: dict[str, list[Any]], heads: np.ndarray, axes: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Where the points of the grid (``axes``: each dimension's index, broadcastable) pass
    the rules of one or two choices, per rule: ``batch``, ``dp x mbs`` divides the batch;
    ``vpp``, virtual stages the configuration's validation would refuse anyway (vpp > 1 needs
    pp > 1 and a layer per virtual stage, and pp x vpp dividing the layers unless the
    framework's split is torchtitan's); ``conditional``, the share a choice only where
    recomputation is full on a framework that checkpoints some layers, the sharding only where
    the framework copies shards at the point's ZeRO stage (elsewhere only their first value,
    1 or 'full'); ``replicas``, copies of ZeRO's shards ('node' sharding) the validation would
    refuse anyway (:func:`_copies_hold`)."""
    head = axes["head"]
    pp = heads[:, 2][head]
    dp = heads[:, 0] * space.gpus_per_node // np.prod(heads[:, 1:], axis=1)
    copies = node_copies(dp, heads[:, 3], heads[:, 1], space.gpus_per_node)
    vpp, mbs, ep = (np.asarray(ch[k])[axes[k]] for k in ("vpp", "mbs", "ep"))
    node = (np.asarray(ch["sharding"], dtype=object) == "node")[axes["sharding"]]
    layers, stages = space.model.num_layers, pp * vpp
    weighted = np.array([weighted_split(f) for f in ch["framework"]], dtype=bool)[axes["framework"]]
    accounted = np.array([accounted_split(f) for f in ch["framework"]], dtype=bool)[
        axes["framework"]
    ]
    partial = _chooses_share(space, ch)[axes["recompute"], axes["framework"]]
    hybrid = np.array(
        [[space.chooses_sharding(z, f) for f in ch["framework"]] for z in ch["zero_stage"]],
        dtype=bool,
    )
    return {
        "batch": space.global_batch_seqs % (dp[head] * mbs) == 0,
        "vpp": (vpp == 1)
        | (
            (pp > 1)
            & (stages <= layers)
            & (weighted | (layers % stages == 0) | (accounted & ((layers + 2) % stages == 0)))
        ),
        "conditional": (
            (partial | (axes["recompute_share"] == 0))
            & (hybrid[axes["zero_stage"], axes["framework"]] | (axes["sharding"] == 0))
        ),
        "replicas": ~node | _copies_hold(dp[head], heads[:, 3][head], copies[head], ep),
    }


def _copies_hold(dp: np.ndarray, cp: np.ndarray, copies: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """Where ``copies`` copies of ZeRO's shards (arrays broadcast together) make a layout the
    validation keeps: more than one, dividing dp, fewer than dp x cp, the ranks of each copy
    divisible by ep."""
    ranks = dp * cp // np.maximum(copies, 1)
    holds: np.ndarray = (
        (copies > 1)
        & (dp % np.maximum(copies, 1) == 0)
        & (dp * cp > copies)
        & ((ep <= 1) | (ranks % ep == 0))
    )
    return holds


def _chooses_share(space: SpaceView, ch: dict[str, list[Any]]) -> np.ndarray:
    """Per recompute choice and framework choice: whether its points choose a share."""
    return np.array(
        [[space.chooses_share(r, f) for f in ch["framework"]] for r in ch["recompute"]], dtype=bool
    )


def space_table(space: SpaceView, limit: int = TABLE_LIMIT) -> FlatTable:
    """Every valid layout of ``space`` as a flat table (module docstring); ConfigError if the
    space holds more than ``limit`` points."""
    return _table(space, limit, None)


def _table(space: SpaceView, limit: int, why: list[str] | None) -> FlatTable:
    """:func:`space_table`; with ``why`` (a space of one point, :func:`point_config`), the
    grid's rule of the validation's own then judges that point, and ``why`` gets the reason
    a step drops it."""
    import pandas as pd

    space.check_bound(limit)
    ch = space.choices()
    heads = [
        (n, tp, pp, cp)
        for n in ch["num_nodes"]
        for tp in ch["tp"]
        for pp in ch["pp"]
        for cp in ch["cp"]
        if (n * space.gpus_per_node) % (tp * pp * cp) == 0
    ]
    if not heads:
        _dropped(why, space, "heads")
        return _empty()
    points = _Points(space, ch, heads, skip=() if why is None else ("vpp", "replicas"))
    if why is not None and points.dropped:
        _dropped(why, space, points.dropped)
        return _empty()
    p = points.at(slice(None), "framework", "pp", "vpp", "recompute", "recompute_share")
    share = np.where(
        _chooses_share(space, ch)[p["recompute"], p["framework"]], p["recompute_share"], 1.0
    )
    checkpointed = _checkpointed(space, {**p, "recompute_share": share}, ch["framework"])
    # Shares that give the same count are one layout: the first of them is kept.
    others = points.without(("recompute_share",), points.flat)
    _, first = np.unique(others * (space.model.num_layers + 1) + checkpointed, return_index=True)
    rows = np.sort(first)
    dp_head, copies_head = _head_degrees(space, points.heads)
    p = points.at(rows, "head", "sharding")
    node = (np.asarray(ch["sharding"], dtype=object) == "node")[p["sharding"]]
    dp, copies = dp_head[p["head"]], np.where(node, copies_head[p["head"]], 1)
    whole = ~node | (copies > 1)  # else it would be 'full' (build refuses it)
    rows, dp, copies = rows[whole], dp[whole], copies[whole]
    if not len(rows):
        _dropped(why, space, "copies")
        return _empty()
    runs = _runs(space, ch, points, dp_head, copies_head)[
        points.without(("mbs", "recompute_share"), points.flat[rows])
    ]
    rows = rows[runs]
    if not len(rows):
        _dropped(why, space, "framework", dp=int(dp[0]), copies=int(copies[0]))
        return _empty()
    p = points.at(rows, *(k for k in DIMENSIONS if k not in ("recompute_share", "sharding")))
    p.update(recompute_layers=checkpointed[rows], dp=dp[runs], dp_replicate=copies[runs])
    p["grad_accum"] = space.global_batch_seqs // (p["dp"] * p["mbs"])
    # copy=False: one block per column, none stacked (the columns are this table's own)
    checked = validate_table(
        pd.DataFrame(_frame(space, p, ch), copy=False), messages=why is not None
    )
    if why is not None and checked.errors and checked.errors[0]:
        why.append(checked.errors[0])
    return checked.table


def _head_degrees(space: SpaceView, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per head (num_nodes, tp, pp, cp): dp, and dp_replicate under the 'node' sharding."""
    nodes, tp, pp, cp = heads.T
    dp = nodes * space.gpus_per_node // (tp * pp * cp)
    return dp, node_copies(dp, cp, tp, space.gpus_per_node)


def _runs(
    space: SpaceView, ch: dict[str, list[Any]], points: _Points, dp: np.ndarray, copies: np.ndarray
) -> np.ndarray:
    """Per cell of the grid without mbs and recompute_share (no framework rule reads them;
    C order, ``dp`` and ``copies`` per head): whether its framework runs it as described
    (:func:`~surrogate.layouts.degrees.runs_as_described`)."""
    names = tuple(k for k in points.size if k not in ("mbs", "recompute_share"))
    shape = tuple(points.size[k] for k in names)
    axes = dict(
        zip(
            names,
            np.meshgrid(*(np.arange(n) for n in shape), indexing="ij", sparse=True),
            strict=True,
        )
    )
    head = axes["head"]
    node = (np.asarray(ch["sharding"], dtype=object) == "node")[axes["sharding"]]
    cols = {k: points.heads[:, _HEADS.index(k)][head] for k in _HEADS[1:]}
    cols.update(
        {k: np.asarray(ch[k])[axes[k]] for k in ("ep", "vpp", "zero_stage", "sequence_parallel")}
    )
    cols.update(
        recompute=axes["recompute"],
        framework=axes["framework"],
        dp=dp[head],
        dp_replicate=np.where(node, copies[head], 1),
    )
    return runs_as_described(
        {k: np.broadcast_to(v, shape).ravel() for k, v in cols.items()},
        moe=space.model.num_experts >= 2,
        names={k: ch[k] for k in ("framework", "recompute")},
    )


def _empty() -> FlatTable:
    import pandas as pd

    return validate_table(pd.DataFrame(columns=list(CONFIG_COLUMNS))).table


def point_config(space: SpaceView, point: Mapping[str, Any]) -> TrainingConfig:
    """The configuration of one point of ``space`` (a value per :data:`DIMENSIONS`, ``fixed``
    applied), judged by the rules of :func:`space_table` (a space of that point alone);
    ConfigError naming the first rule it breaks."""
    p = _pinned(space, point)
    one = space.pinned_to(p)
    why: list[str] = []
    table = _table(one, 1, why)
    if table_len(table):
        return table_configs(space, table)[0]
    raise ConfigError(why[0] if why else f"the point {dict(point)} is not a layout of the space")


def _pinned(space: SpaceView, point: Mapping[str, Any]) -> dict[str, Any]:
    """``point`` with the space's fixed dimensions, its framework's canonical name, and its
    share and sharding where they are not a choice (a pinned share or sharding holds where it
    is one; a point's own holds everywhere and is refused where it means nothing)."""
    p = {**point, **space.fixed}
    missing = [d for d in DIMENSIONS[:-2] if d not in p]
    if missing:
        raise ConfigError(
            f"a point gives a value per dimension ({', '.join(DIMENSIONS)}), "
            f"missing {', '.join(missing)}"
        )
    framework = get_framework(str(p["framework"]))
    zero, recompute = int(p["zero_stage"]), str(p["recompute"])
    hybrid = space.chooses_sharding(zero, framework.name)
    sharding = str((p if hybrid else point).get("sharding", "full"))
    if sharding not in SHARDINGS:
        raise ConfigError(f"sharding must be one of {', '.join(SHARDINGS)}, got {sharding!r}")
    if sharding == "node" and not hybrid:
        stages = " or ".join(map(str, framework.hybrid_sharding_stages))
        raise ConfigError(
            f"sharding 'node' copies ZeRO's shards, which {framework.name} does "
            + (
                f"with zero_stage {stages} only, got zero_stage={zero}"
                if stages
                else "not: its sharding must be 'full'"
            )
        )
    partial = space.chooses_share(recompute, framework.name)
    share = float((p if partial else point).get("recompute_share", 1.0))
    if share != 1.0 and not partial:
        raise ConfigError(
            f"recompute_share below 1 needs full recomputation on a framework that "
            f"checkpoints some layers ({', '.join(partial_frameworks())}), got "
            f"recompute={recompute!r} framework={framework.name} recompute_share={share}"
        )
    if not 0.0 < share <= 1.0:
        raise ConfigError(f"recompute_share must lie in (0, 1], got {share}")
    return {**p, "framework": framework.name, "recompute_share": share, "sharding": sharding}


def table_configs(space: SpaceView, table: FlatTable) -> list[TrainingConfig]:
    """The configurations of the rows of a table of ``space`` (:func:`space_table`), each with
    the space's model and batch."""
    cols = {k: table[k].tolist() for k in ("gpu", "gpus_per_node", "num_nodes", *LAYOUT_FIELDS)}
    out = []
    for i in range(table_len(table)):
        cluster = ClusterConfig(
            gpu=cols["gpu"][i],
            gpus_per_node=cols["gpus_per_node"][i],
            num_nodes=cols["num_nodes"][i],
        )
        layout = LayoutConfig(**{k: cols[k][i] for k in LAYOUT_FIELDS})
        out.append(
            TrainingConfig(
                model=space.model,
                cluster=cluster,
                layout=layout,
                global_batch_seqs=space.global_batch_seqs,
            )
        )
    return out


def _dropped(why: list[str] | None, space: SpaceView, step: str, **derived: int) -> None:
    """Record in ``why`` (when given) why the one point of ``space`` fails ``step``: the
    rule's message, with what was given."""
    if why is None:
        return
    p = space.fixed
    nodes, tp, pp, cp, mbs = (int(p[k]) for k in ("num_nodes", "tp", "pp", "cp", "mbs"))
    world = nodes * space.gpus_per_node
    dp = derived.get("dp", world // (tp * pp * cp) if world % (tp * pp * cp) == 0 else 0)
    if step == "heads":
        why.append(
            f"tp * pp * cp must divide the number of GPUs ({world}), got tp={tp} "
            f"pp={pp} cp={cp} ({tp * pp * cp})"
        )
    elif step == "batch":
        why.append(
            f"dp * mbs must divide the global batch ({space.global_batch_seqs} "
            f"sequences), got dp={dp} mbs={mbs} ({dp * mbs})"
        )
    elif step == "copies":
        why.append(
            f"sharding 'node' needs the data- and context-parallel ranks to span whole "
            f"nodes, and more than one (dp={dp} cp={cp} tp={tp} on "
            f"{space.gpus_per_node} GPUs a node): it would be 'full'"
        )
    elif step == "framework":
        problem = get_framework(str(p["framework"])).runs_as_another(
            dp=dp,
            tp=tp,
            pp=pp,
            cp=cp,
            ep=int(p["ep"]),
            vpp=int(p["vpp"]),
            zero_stage=int(p["zero_stage"]),
            recompute=str(p["recompute"]),
            sequence_parallel=bool(p["sequence_parallel"]),  # under 1F1B (space's docstring)
            dp_replicate=derived["copies"],
            moe=space.model.num_experts >= 2,
        )
        why.append(problem or f"{p['framework']} does not run this layout as described")
    else:  # a pinned conditional dimension: checked by point_config before
        why.append(f"the point breaks the space's rule {step!r}")


def _frame(space: SpaceView, p: dict[str, np.ndarray], ch: dict[str, list[Any]]) -> dict[str, Any]:
    """The columns of the configurations of points ``p``: the model's, the cluster's and the
    layouts', text as categoricals."""
    import pandas as pd

    n = len(p["dp"])
    frame: dict[str, Any] = {k: _one_value(n, getattr(space.model, k)) for k in MODEL_FIELDS}
    frame.update(
        gpu=_one_value(n, space.gpu),
        gpus_per_node=np.full(n, space.gpus_per_node),
        dtype=_one_value(n, space.dtype),
        framework_version=_one_value(n, None),
    )
    frame.update({k: p[k] for k in ("num_nodes", *LAYOUT_FIELDS) if k in p and k not in _TEXT})
    frame.update(
        {
            k: pd.Categorical.from_codes(p[k], dtype=pd.CategoricalDtype(ch[k]))
            for k in ("framework", "recompute")
        }
    )
    return frame


def _one_value(n: int, value: Any) -> Any:
    """A column of ``n`` cells of ``value``; text (or None) as a categorical, which
    :func:`~surrogate.config.table.validate_table` reads by its codes, no cell hashed."""
    import pandas as pd

    if value is None or isinstance(value, str):
        return pd.Categorical.from_codes(
            np.full(n, -1 if value is None else 0, dtype=np.int8),
            dtype=pd.CategoricalDtype([] if value is None else [value]),
        )
    return np.full(n, value)


def _checkpointed(
    space: SpaceView, p: dict[str, np.ndarray], frameworks: Sequence[str]
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
                frameworks[f], space.model.num_layers, int(pp), int(vpp), float(s)
            ),
        )
        out[part] = np.asarray(counts, dtype=np.int64)[codes]
    return out
