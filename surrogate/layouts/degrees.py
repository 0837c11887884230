"""The arithmetic of parallel layouts the space is built from: divisors, layers per pipeline
stage, the layers a share of recomputation checkpoints, copies of a model per node, and what
each framework can express (the recomputation modes of its configuration, the layouts it runs
as described)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from surrogate.analytic.pipeline import weighted_first_rank_layers
from surrogate.config.framework_traits import RECOMPUTE_MODES
from surrogate.config.frameworks import FRAMEWORKS, get_framework
from surrogate.config.table import per_group
from surrogate.config.training import (
    weighted_split,
)
from surrogate.errors import ConfigError


def node_copies(dp: Any, cp: Any, tp: Any, gpus_per_node: int) -> Any:
    """``dp_replicate`` of the 'node' sharding (:data:`SHARDINGS`): dp x cp over the ranks of
    the data- and context-parallel group on one node (tp apart: min(dp x cp, node's GPUs /
    tp), at least 1). Integers or integer arrays; where the node's ranks do not divide dp x
    cp the result is 0 (no such layout)."""
    group = np.asarray(dp) * np.asarray(cp)
    local = np.maximum(np.minimum(group, gpus_per_node // np.asarray(tp)), 1)
    out = np.where(group % local == 0, group // local, 0)
    return int(out) if np.ndim(out) == 0 else out


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n``, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def stage_layers(framework: str, num_layers: int, pp: int, vpp: int) -> int:
    """Layers of the pipeline rank whose count ``recompute_layers`` gives: torchtitan's first
    rank under its weighted split (what its every-n-th-block option counts from), else
    num_layers / pp."""

    if weighted_split(framework):
        return weighted_first_rank_layers(num_layers, pp, vpp)
    return num_layers // pp


def recompute_layers_for_share(
    framework: str, num_layers: int, pp: int, vpp: int, share: float
) -> int:
    """``recompute_layers`` of full recomputation checkpointing ``share`` of a stage's layers
    (:func:`stage_layers`): the count the framework writes
    (``FrameworkTraits.checkpointed_layer_counts``, at most num_layers / pp:
    ``surrogate.config.training``'s rule) nearest to share x layers, the larger on a tie (it keeps
    less), 0 when that is every layer."""
    layers = stage_layers(framework, num_layers, pp, vpp)
    counts = (
        *(
            k
            for k in get_framework(framework).checkpointed_layer_counts(layers, vpp)
            if k <= num_layers // pp
        ),
        layers,
    )
    target = share * layers
    best = min(counts, key=lambda k: (abs(k - target), -k))
    return 0 if best >= layers else best


def batch_seqs_from_tokens(tokens: int, seq_len: int) -> int:
    """A global batch in tokens as whole sequences; ConfigError if it does not divide."""
    if tokens <= 0 or tokens % seq_len:
        raise ConfigError(
            f"the global batch in tokens must be a positive multiple of seq_len ({seq_len}), "
            f"got {tokens}"
        )
    return tokens // seq_len


def runs_as_described(
    p: Mapping[str, np.ndarray], *, moe: bool, names: Mapping[str, Sequence[Any]] | None = None
) -> np.ndarray:
    """Where each point's framework runs it as described
    (:meth:`~surrogate.config.framework_traits.FrameworkTraits.runs_as_another` finds nothing),
    judged once per distinct signature: it compares degrees with 1 only, so each degree d
    enters as min(d, 2). ``names``: the columns of ``p`` that hold codes, each with the values
    its codes stand for."""
    degrees = ("dp", "tp", "pp", "cp", "ep", "vpp", "dp_replicate")
    fields = (*degrees, "zero_stage", "recompute", "sequence_parallel")
    names = names or {}

    def value(name: str, v: Any) -> Any:
        return names[name][v] if name in names else v

    def runs(framework: Any, *values: Any) -> bool:
        kwargs = {k: value(k, v) for k, v in zip(fields, values, strict=True)}
        return (
            get_framework(value("framework", framework)).runs_as_another(**kwargs, moe=moe) is None
        )

    codes, answers = per_group(
        [
            p["framework"],
            *(np.minimum(p[d], 2) for d in degrees),
            p["zero_stage"],
            p["recompute"],
            p["sequence_parallel"],
        ],
        runs,
    )
    verdicts: np.ndarray = np.array(answers, dtype=bool)[codes]
    return verdicts


def partial_frameworks() -> list[str]:
    return [name for name, t in FRAMEWORKS.items() if t.partial_recompute]


def expressed_recompute_modes(frameworks: Sequence[str]) -> tuple[str, ...]:
    return tuple(
        r for r in RECOMPUTE_MODES if any(r in get_framework(f).recompute_modes for f in frameworks)
    )


def choice_product(ch: Mapping[str, list[Any]], names: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    if not names:
        yield {}
        return
    head, rest = names[0], names[1:]
    for value in ch[head]:
        for tail in choice_product(ch, rest):
            yield {head: value, **tail}
