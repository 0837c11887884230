"""The layout space: every valid parallel layout of one model on one cluster for one batch.

A :class:`LayoutSpace` fixes the model, the GPU, the GPUs per node, the allowed node counts and
the global batch (sequences), and spans the free choices: tp, pp, cp, ep (MoE), vpp, mbs,
zero_stage, recompute, sequence_parallel, framework and, for full recomputation on a framework
that checkpoints some layers (megatron, torchtitan), the share of each pipeline stage's layers it
checkpoints (``recompute_share``, :data:`RECOMPUTE_SHARES`), and, where the framework copies
ZeRO's shards at the point's stage (torchtitan, megatron), whether it shards over every
data-parallel rank or over one node's (``sharding``, :data:`SHARDINGS`: ``dp_replicate`` from
:func:`node_copies`). The rest is derived, following the
conventions of :mod:`surrogate.config.training`: dp = GPUs / (tp x pp x cp), grad_accum = global
batch / (dp x mbs), which must both be integers, and ``recompute_layers`` from the share
(:func:`recompute_layers_for_share`). The space's rules exist once, on columns, in its table
(:func:`surrogate.layouts.grid.space_table`): every valid layout is a row of it,
:meth:`LayoutSpace.enumerate` gives them as configurations, and :meth:`LayoutSpace.build`
judges one point by the same rules (ConfigError naming the rule it breaks;
:mod:`surrogate.layouts.search` treats that as an optuna constraint).

Beyond :class:`~surrogate.config.training.TrainingConfig`'s rules, the space holds only layouts that
their framework runs as described
(:meth:`~surrogate.config.framework_traits.FrameworkTraits.runs_as_another`:
ZeRO sharding needs dp > 1 (dp x cp > 1 for torchtitan, which shards over both, and
whenever cp or ep is above 1), sequence parallelism needs tp > 1 and is paired with tp as the
framework pairs it, recomputation modes the framework expresses), so every torchtitan layout
of the space can be written as launch files (:mod:`surrogate.loop.launch`). Its choices per
dimension are narrowed to what some allowed framework implements.

Pipelines run 1F1B (interleaved where vpp > 1). All-forward-all-backward
(``LayoutConfig.pp_schedule``) is not a choice of the space: under the analytic model it takes
the same time (the same bubble) and holds more micro-batches' activations, so it never ranks
above the 1F1B layout it shares everything else with; ``surrogate predict --pp-schedule afab``
weighs one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from surrogate.config.checks import DTYPES, Dtype
from surrogate.config.framework_traits import Recompute, ZeroStage
from surrogate.config.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS, get_framework
from surrogate.config.gpus import canonical_gpu_name
from surrogate.config.model import ModelConfig
from surrogate.config.table import FlatTable
from surrogate.config.training import TrainingConfig
from surrogate.errors import ConfigError
from surrogate.layouts.degrees import (
    choice_product,
    divisors,
    expressed_recompute_modes,
)
from surrogate.layouts.dimensions import DIMENSIONS, REST_DIMENSIONS, SHARDINGS, Sharding
from surrogate.layouts.grid import point_config, space_table, table_configs

_CONDITIONAL: tuple[str, ...] = ("recompute_share", "sharding")
"""The dimensions that are a choice only for some values of the others."""

KEY_FIELDS: tuple[str, ...] = (
    *(d for d in DIMENSIONS if d not in _CONDITIONAL),
    "recompute_layers",
    "dp_replicate",
    "dp",
    "grad_accum",
)
"""What tells two layouts apart (:func:`layout_key`): the point with its share as the count it
becomes, its sharding as the copies of the shards, and the derived degrees."""

RECOMPUTE_SHARES: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
"""Shares of each pipeline stage's layers that full recomputation checkpoints, where the
framework checkpoints some layers (``FrameworkTraits.partial_recompute``): a quarter to all.
Each becomes the nearest count the framework writes (:func:`recompute_layers_for_share`), so
shares that round to the same count are one layout."""

DEFAULT_ENUMERATION_LIMIT = 500_000
"""Points :meth:`LayoutSpace.enumerate` tries by default, one TrainingConfig each (a search
generates its space as columns, up to :data:`surrogate.layouts.grid.TABLE_LIMIT`)."""


@dataclass(frozen=True, kw_only=True)
class LayoutSpace:
    """Every layout of ``model`` on ``gpus_per_node`` x ``node_counts`` GPUs for one batch."""

    model: ModelConfig
    global_batch_seqs: int
    """Sequences per optimizer step (dp x grad_accum x mbs)."""
    gpu: str = "H100-SXM-80GB"
    gpus_per_node: int = 8
    node_counts: tuple[int, ...] = (1,)
    """Allowed node counts; more than one makes the GPU count a choice."""
    frameworks: tuple[str, ...] = (DEFAULT_FRAMEWORK,)
    zero_stages: tuple[ZeroStage, ...] | None = None
    """Allowed ZeRO stages; None: every stage some allowed framework implements."""
    recompute_modes: tuple[Recompute, ...] | None = None
    """Allowed recompute modes; None: every mode some allowed framework expresses."""
    sequence_parallel: tuple[bool, ...] = (False, True)
    max_cp: int | None = None
    """Upper bound on cp (None: no bound beyond the rules)."""
    max_vpp: int = 4
    max_mbs: int = 64
    recompute_shares: tuple[float, ...] = RECOMPUTE_SHARES
    """Shares of a stage's layers full recomputation may checkpoint where the framework
    checkpoints some layers (:data:`RECOMPUTE_SHARES`); 1 (every layer) must be one."""
    shardings: tuple[Sharding, ...] = SHARDINGS
    """ZeRO shardings a point may take where its framework copies shards at its stage
    (:data:`SHARDINGS`); 'full' must be one."""
    dtype: Dtype = "bf16"
    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Dimensions pinned to one value (e.g. {"tp": 8})."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu", canonical_gpu_name(self.gpu))  # unknown: say which exist
        if self.gpus_per_node < 1:
            raise ConfigError(f"gpus_per_node must be >= 1, got {self.gpus_per_node}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.global_batch_seqs < 1:
            raise ConfigError(f"global batch must be >= 1 sequence, got {self.global_batch_seqs}")
        if not self.node_counts or any(n < 1 for n in self.node_counts):
            raise ConfigError(f"node counts must be >= 1, got {list(self.node_counts)}")
        object.__setattr__(self, "node_counts", tuple(sorted(set(self.node_counts))))
        names = tuple(dict.fromkeys(get_framework(f).name for f in self.frameworks))  # each once
        if not names:
            raise ConfigError(f"give at least one framework ({', '.join(FRAMEWORKS)})")
        object.__setattr__(self, "frameworks", names)
        if self.recompute_modes is not None:
            expressed = expressed_recompute_modes(names)
            if not self.recompute_modes or not set(self.recompute_modes) <= set(expressed):
                raise ConfigError(
                    f"recompute modes must be among those of {', '.join(names)} "
                    f"({', '.join(expressed)}), got {list(self.recompute_modes)}"
                )
        if self.zero_stages is not None:
            implemented = {s for f in names for s in get_framework(f).zero_stages}
            if not self.zero_stages or not set(self.zero_stages) <= implemented:
                raise ConfigError(
                    f"zero stages must be among those of {', '.join(names)} "
                    f"({sorted(implemented)}), got {list(self.zero_stages)}"
                )
        unknown = set(self.fixed) - set(DIMENSIONS)
        if unknown:
            raise ConfigError(
                f"fixed dimensions must be among {', '.join(DIMENSIONS)}, got {sorted(unknown)}"
            )
        shares = tuple(sorted({float(x) for x in self.recompute_shares}))
        if not shares or shares[0] <= 0.0 or shares[-1] != 1.0:
            raise ConfigError(
                f"recompute shares must lie in (0, 1] and include 1 (every layer), got "
                f"{list(self.recompute_shares)}"
            )
        object.__setattr__(self, "recompute_shares", shares)
        shardings = tuple(x for x in SHARDINGS if x in set(self.shardings))
        if "full" not in shardings or len(shardings) != len(set(self.shardings)):
            raise ConfigError(
                f"shardings must be among {', '.join(SHARDINGS)} and include 'full', got "
                f"{list(self.shardings)}"
            )
        object.__setattr__(self, "shardings", shardings)
        if self.max_mbs < 1 or self.max_vpp < 1:
            raise ConfigError(
                f"max_mbs and max_vpp must be >= 1, got {self.max_mbs}, {self.max_vpp}"
            )

    # ------------------------------------------------------------ dimensions
    @property
    def allowed_zero_stages(self) -> tuple[int, ...]:
        if self.zero_stages is not None:
            return tuple(sorted(set(self.zero_stages)))
        return tuple(sorted({s for f in self.frameworks for s in get_framework(f).zero_stages}))

    @property
    def allowed_recompute_modes(self) -> tuple[str, ...]:
        if self.recompute_modes is not None:
            return tuple(dict.fromkeys(self.recompute_modes))
        return expressed_recompute_modes(self.frameworks)

    def chooses_share(self, recompute: str, framework: str) -> bool:
        """Whether points of this recompute mode and framework choose a share."""
        return recompute == "full" and get_framework(framework).partial_recompute

    def chooses_sharding(self, zero_stage: int, framework: str) -> bool:
        """Whether points of this ZeRO stage and framework choose a sharding."""
        return zero_stage in get_framework(framework).hybrid_sharding_stages

    def choices(self) -> dict[str, list[Any]]:
        """Per dimension the values a point may take (a superset of the valid ones: a given
        combination may still be invalid). Fixed dimensions have one value."""
        worlds = [n * self.gpus_per_node for n in self.node_counts]
        world_divs = sorted({d for w in worlds for d in divisors(w)})
        m = self.model
        traits = [get_framework(f) for f in self.frameworks]

        tp = [
            d
            for d in world_divs
            if m.num_heads % d == 0
            and m.num_kv_heads % d == 0
            and (d == 1 or any(t.tensor_parallel for t in traits))
        ]
        pp = [
            d
            for d in world_divs
            if d <= m.num_layers and (d == 1 or any(t.pipeline_parallel for t in traits))
        ]
        cp = [
            d
            for d in world_divs
            if m.seq_len % d == 0
            and (self.max_cp is None or d <= self.max_cp)
            and (d == 1 or any(t.context_parallel for t in traits))
        ]
        ep = (
            [
                d
                for d in divisors(m.num_experts)
                if d in world_divs and (d == 1 or any(t.expert_parallel for t in traits))
            ]
            if m.is_moe
            else [1]
        )
        vpp = [
            v
            for v in range(1, self.max_vpp + 1)
            if v == 1
            or any(
                t.interleaved_pipeline
                and (
                    m.num_layers % v == 0
                    or t.pipeline_split == "weighted"
                    or (t.pipeline_split == "megatron" and (m.num_layers + 2) % v == 0)
                )
                for t in traits
            )
        ]
        mbs = [d for d in divisors(self.global_batch_seqs) if d <= self.max_mbs]
        out: dict[str, list[Any]] = {
            "num_nodes": list(self.node_counts),
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "ep": ep,
            "vpp": vpp,
            "mbs": mbs,
            "zero_stage": list(self.allowed_zero_stages),
            "recompute": list(self.allowed_recompute_modes),
            "sequence_parallel": list(self.sequence_parallel),
            "framework": list(self.frameworks),
            "recompute_share": list(self.recompute_shares)
            if any(
                self.chooses_share(r, f)
                for r in self.allowed_recompute_modes
                for f in self.frameworks
            )
            else [1.0],
            "sharding": list(self.shardings)
            if any(
                self.chooses_sharding(z, f)
                for z in self.allowed_zero_stages
                for f in self.frameworks
            )
            else ["full"],
        }
        for name, value in self.fixed.items():
            out[name] = [value]
        return out

    # ----------------------------------------------------------------- points
    def build(self, point: Mapping[str, Any]) -> TrainingConfig:
        """The configuration of one point (a value per :data:`DIMENSIONS`); ConfigError when
        the point breaks a rule, saying which. The rules are the space's table's
        (:func:`surrogate.layouts.grid.point_config`)."""
        return point_config(self, point)

    def share_choices(
        self, recompute: str, framework: str, ch: Mapping[str, list[Any]] | None = None
    ) -> list[float]:
        """The shares a point of this recompute mode and framework takes (``ch``: the
        choices, computed when not given): a choice only for full recomputation on a
        framework that checkpoints some layers, else 1."""
        if not self.chooses_share(recompute, framework):
            return [1.0]
        return list((ch or self.choices())["recompute_share"])

    def sharding_choices(
        self, zero_stage: int, framework: str, ch: Mapping[str, list[Any]] | None = None
    ) -> list[str]:
        """The shardings a point of this ZeRO stage and framework takes (``ch``: the choices,
        computed when not given): a choice only where the framework copies shards at that
        stage, else 'full'."""
        if not self.chooses_sharding(zero_stage, framework):
            return ["full"]
        return list((ch or self.choices())["sharding"])

    def size_bound(self) -> int:
        """The number of points of :meth:`choices` (an upper bound on the valid layouts): the
        share and the sharding counted only where they are a choice."""
        ch = self.choices()
        combos = sum(
            len(self.share_choices(r, f, ch)) * len(self.sharding_choices(z, f, ch))
            for r in ch["recompute"]
            for f in ch["framework"]
            for z in ch["zero_stage"]
        )
        return combos * math.prod(
            len(v)
            for k, v in ch.items()
            if k not in ("recompute", "framework", "zero_stage", *_CONDITIONAL)
        )

    def points(self) -> Iterator[dict[str, Any]]:
        """Every point of the product of :meth:`choices` (the share only where it is a
        choice), skipping combinations that cannot multiply to the GPU count (the cheap rule)
        before anything else is tried."""
        ch = self.choices()
        for nodes in ch["num_nodes"]:
            world = nodes * self.gpus_per_node
            for tp in ch["tp"]:
                for pp in ch["pp"]:
                    for cp in ch["cp"]:
                        if world % (tp * pp * cp):
                            continue
                        for rest in choice_product(ch, REST_DIMENSIONS[:-2]):
                            shardings = self.sharding_choices(
                                rest["zero_stage"], rest["framework"], ch
                            )
                            for share in self.share_choices(
                                rest["recompute"], rest["framework"], ch
                            ):
                                for sharding in shardings:
                                    yield {
                                        "num_nodes": nodes,
                                        "tp": tp,
                                        "pp": pp,
                                        "cp": cp,
                                        **rest,
                                        "recompute_share": share,
                                        "sharding": sharding,
                                    }

    def check_bound(self, limit: int, *, optuna: bool = True) -> None:
        """ConfigError if the space has more than ``limit`` points, saying how to narrow it
        (and, with ``optuna``, that optuna searches it whole)."""
        bound = self.size_bound()
        if bound > limit:
            raise ConfigError(
                f"the space has up to {bound:,} points, more than the enumeration limit "
                f"({limit:,}); narrow it (fewer node counts or frameworks, a smaller largest "
                f"micro-batch, cp or vpp)" + (" or search it with optuna" if optuna else "")
            )

    def enumerate(self, limit: int = DEFAULT_ENUMERATION_LIMIT) -> list[TrainingConfig]:
        """Every valid layout, once (shares that give the same count are one layout), as
        configurations: the rows of :func:`surrogate.layouts.grid.space_table`; ConfigError if
        the space holds more than ``limit`` points."""
        return table_configs(self, space_table(self, limit))

    def is_enumerable(self, limit: int = DEFAULT_ENUMERATION_LIMIT) -> bool:
        return self.size_bound() <= limit

    def pinned_to(self, point: Mapping[str, Any]) -> LayoutSpace:
        """The space of ``point`` alone: its dimensions fixed, its node count the only one."""
        return replace(self, fixed=point, node_counts=(int(point["num_nodes"]),))

    def with_nodes(self, node_counts: Sequence[int]) -> LayoutSpace:
        return replace(self, node_counts=tuple(node_counts))


def layout_key(cfg: TrainingConfig) -> tuple[Any, ...]:
    """A hashable identity of a layout (:data:`KEY_FIELDS`)."""
    lay = cfg.layout
    return (cfg.cluster.num_nodes, *(getattr(lay, k) for k in KEY_FIELDS[1:]))


def layout_keys(table: FlatTable) -> list[tuple[Any, ...]]:
    """:func:`layout_key` of every configuration of a flat table."""
    return list(zip(*(table[k].tolist() for k in KEY_FIELDS), strict=True))
