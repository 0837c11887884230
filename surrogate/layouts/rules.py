"""The Ultra-Scale Playbook's rules of thumb for choosing a layout, as a baseline.

Source: Tazi et al. 2025, "The Ultra-Scale Playbook: Training LLMs on GPU Clusters" (Hugging
Face), section "Finding the best training configuration":

1. *Fit a training step in memory*: a model that does not fit is useless, whatever its speed.
2. *Reach the target global batch size* with data parallelism and gradient accumulation.
3. *Optimise throughput*: "scale up tensor parallelism to the node size to leverage the fast
   intra-node bandwidth", "increase data parallelism with ZeRO while keeping the target batch
   size", "use pipeline parallelism when data parallelism communication becomes a
   bottleneck", and "experiment with micro-batch sizes".

As an order over candidate layouts (:func:`rule_key`, lower is preferred): layouts that fit in
memory (analytic model, no learned correction: the rules know nothing of measurements) before
those that do not; tensor parallelism inside a node before across nodes; then the largest tp;
then the fewest pipeline stages (PP only when needed); no cp or vpp unless needed; ZeRO-1
(sharding the optimizer states costs no extra communication over the all-reduce), then ZeRO-2,
ZeRO-3, then none; no recomputation before selective before full; the largest micro-batch
that fits; sequence parallelism with tp. The rules' pick is the first layout in this order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.run import analytic_for
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.training import TrainingConfig
from surrogate.errors import ConfigError
from surrogate.hardware.perf_models import resolve_perf_model
from surrogate.layouts.space import LayoutSpace

if TYPE_CHECKING:
    from surrogate.analytic.perf import PerfModel

CITATION = (
    "Tazi et al. 2025, The Ultra-Scale Playbook: Training LLMs on GPU Clusters, "
    "'Finding the best training configuration'"
)
_ZERO_PREFERENCE = {1: 0, 2: 1, 3: 2, 0: 3}
_RECOMPUTE_PREFERENCE = {"none": 0, "selective": 1, "full": 2}


def rule_key(cfg: TrainingConfig, fits: bool) -> tuple[Any, ...]:
    """The rules' preference of one layout (lower first); ``fits``: the analytic memory verdict."""
    lay = cfg.layout
    return (
        not fits,  # step 1: fit in memory
        lay.tp > cfg.cluster.gpus_per_node,  # step 3: TP inside a node ...
        -lay.tp,  # ... as large as the node allows
        lay.pp,  # PP only when needed
        lay.cp,
        lay.vpp,
        -lay.ep,
        _ZERO_PREFERENCE[lay.zero_stage],  # then ZeRO/DP
        _RECOMPUTE_PREFERENCE[lay.recompute],
        -lay.mbs,  # the largest micro-batch that fits
        not (lay.sequence_parallel or lay.tp == 1),  # sequence parallelism with TP
        cfg.cluster.num_nodes,
    )


def analytic_fits(
    configs: Sequence[TrainingConfig], profile: str | Path | PerfModel | None = None
) -> np.ndarray:
    """Whether each configuration fits in memory by the analytic model alone."""
    if not configs:
        return np.zeros(0, dtype=bool)
    c, out, _ = analytic_for(
        configs, profile, sets=shipped_parameter_sets(), resolve=resolve_perf_model
    )
    return np.asarray(out["mem_total"] <= c["memory_bytes"], dtype=bool)


def rules_order(
    configs: Sequence[TrainingConfig], profile: str | Path | PerfModel | None = None
) -> list[int]:
    """Indices of ``configs`` in the rules' order of preference (the first is their pick)."""
    fits = analytic_fits(configs, profile)
    keys = [rule_key(cfg, bool(f)) for cfg, f in zip(configs, fits, strict=True)]
    return sorted(range(len(configs)), key=lambda i: keys[i])


def rules_pick(space: LayoutSpace, profile: str | Path | PerfModel | None = None) -> TrainingConfig:
    """The layout the rules of thumb choose in ``space``.

    Only the corner of the space the rules can reach is enumerated (cp = 1 and vpp = 1 when
    allowed, the fewest nodes of a range), so this works on spaces too large to enumerate."""
    fixed = dict(space.fixed)
    choices = space.choices()
    for dim in ("cp", "vpp"):
        if 1 in choices[dim]:
            fixed.setdefault(dim, 1)
    fixed.setdefault("recompute_share", 1.0)  # the rules know every layer or none
    corner = replace(space, fixed=fixed, node_counts=space.node_counts[:1])
    configs = corner.enumerate()
    if not configs:
        raise ConfigError("the space holds no valid layout for the rules of thumb")
    return configs[rules_order(configs, profile)[0]]
