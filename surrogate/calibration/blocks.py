"""Measured runs in blocks, as the fits of the free parameters read them: each block holds runs
that share one PerfModel and parameter set (:func:`blocks_for_runs`), with their analytic
columns and measured step time, memory and out-of-memory, and the analytic model's answers
for them under given parameter values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from surrogate.analytic.inputs import FRAMEWORK_VERSIONS, Array, to_cols
from surrogate.analytic.memory import (
    logged_reserved_bytes,
    memory_breakdown,
    torch_reserved_bytes,
)
from surrogate.analytic.params import ParameterSets
from surrogate.analytic.perf import PerfModel
from surrogate.analytic.step import step_breakdown
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.gpus import GIB
from surrogate.config.training import config_from_flat
from surrogate.hardware.perf_models import resolve_perf_model
from surrogate.runs.context import run_context


@dataclass
class Block:
    """Runs that share one PerfModel: their columns and their measured targets (NaN where not
    measured)."""

    cols: dict[str, Array]
    perf: PerfModel
    step_time_s: Array
    reserved_bytes: Array
    oom: Array | None = None
    """1 where the run ran out of memory, 0 where it completed, NaN otherwise (None: unknown)."""

    def take(self, mask: np.ndarray) -> Block:
        return Block(
            {k: v[mask] for k, v in self.cols.items()},
            self.perf,
            self.step_time_s[mask],
            self.reserved_bytes[mask],
            None if self.oom is None else self.oom[mask],
        )

    def __len__(self) -> int:
        return len(self.step_time_s)


def with_values(cols: dict[str, Array], values: dict[str, float]) -> dict[str, Array]:
    n = len(next(iter(cols.values())))
    return {**cols, **{f"p_{k}": np.full(n, v) for k, v in values.items()}}


def predicted_breakdown(block: Block, values: dict[str, float]) -> dict[str, Array]:
    """:func:`~surrogate.analytic.step.step_breakdown` of the block's runs with ``values``."""
    return step_breakdown(with_values(block.cols, values), block.perf)


def predicted_step_s(block: Block, values: dict[str, float]) -> Array:
    return predicted_breakdown(block, values)["step_time_s"]


def values_in_use(block: Block) -> dict[str, float]:
    """The free parameters the block's columns carry: those of its framework version in the
    sets the block was built under (:func:`blocks_for_runs`)."""
    return {k[2:]: float(v[0]) for k, v in block.cols.items() if k.startswith("p_")}


def predicted_reserved(block: Block, values: dict[str, float]) -> Array:
    """Peak reserved memory of the most loaded rank (what runs out of memory)."""
    return torch_reserved_bytes(memory_breakdown(with_values(block.cols, values)))


def predicted_logged_reserved(block: Block, values: dict[str, float]) -> Array:
    """Peak reserved memory of the rank each run's measurement was logged on
    (:func:`~surrogate.analytic.memory.logged_reserved_bytes`): what memory is fitted to."""
    c = with_values(block.cols, values)
    return logged_reserved_bytes(c, memory_breakdown(c))


Predictor = Callable[[Block, dict[str, float]], Array]


MIN_FIT_MFU = 0.10
"""The runs the MFU MAPE target counts (completed, measured MFU >= 10%), and the runs time
parameters are fitted on with ``fit_on="healthy"``. The default fits on every completed run:
with the pipelined floor (``pp_layer_floor_s``, ``pp_layer_floor_per_tp_s``) the physics
describes the Playbook's slow pipelines too, and fitting on them no longer bends healthy
predictions (leave-one-model-out MFU MAPE on runs of MFU >= 10%: 15.9% fitted on all runs vs
15.4% on these; Spearman over all completed runs 0.94 vs 0.71; without the floor it was 26.5%
vs 21.7% and 0.92 vs 0.70; ``python benchmarks/analytic_vs_playbook.py --fit-on
healthy|all`` prints both)."""


def blocks_for_runs(
    runs: Any,
    profile: Any = None,
    *,
    sets: ParameterSets | None = None,
    own_memory_from: int | None = None,
) -> tuple[list[Block], list[np.ndarray]]:
    """Blocks of ``runs`` (a sweep table) explained under their own clusters
    (:func:`surrogate.runs.context.run_context`), one per (PerfModel, parameter set: the
    framework
    version, or the set its layout takes, ``FrameworkTraits.parameter_set``), and the row
    indices of ``runs`` each block holds; their columns carry the values of ``sets`` (None:
    the shipped sets). ``own_memory_from``: the sets whose runs hold that many completed runs
    with a peak memory explain them as their own (``ParameterSets.as_own``: a fit of their
    memory is about to make them so, and a framework's stated memory values give way)."""
    sets = shipped_parameter_sets() if sets is None else sets

    profiles, extra = run_context(runs, profile)
    records = runs.to_dict("records")
    configs = [config_from_flat(r) for r in records]
    keyed: dict[tuple[str, str, str], list[int]] = {}
    for i, cfg in enumerate(configs):
        key = (cfg.cluster.gpu, str(profiles[i]), cfg.layout.parameter_set())
        keyed.setdefault(key, []).append(i)
    if own_memory_from is not None:
        measured = (runs["status"] == "completed").to_numpy() & np.isfinite(
            runs["peak_mem_reserved_gib"].to_numpy(dtype=np.float64)
        )
        counts: dict[str, int] = {}
        for (_, _, fv), idx in keyed.items():
            counts[fv] = counts.get(fv, 0) + int(measured[idx].sum())
        sets = sets.as_own(fv for fv, n in counts.items() if n >= own_memory_from)
    blocks, rows = [], []
    for (gpu, _, _), idx in keyed.items():
        sel = np.array(idx)
        c = to_cols([configs[i] for i in idx], sets)
        for name, values in extra.items():
            c[name] = np.asarray(values, dtype=np.float64)[sel]
        sub = runs.iloc[sel]
        done = (sub["status"] == "completed").to_numpy()
        tokens = c["dp"] * c["grad_accum"] * c["mbs"] * c["seq_len"]
        gpus = c["gpus_per_node"] * c["num_nodes"]
        tps = sub["tokens_per_s_per_gpu"].to_numpy(dtype=np.float64)
        step = np.where(done, tokens / (tps * gpus), np.nan)
        reserved = np.where(
            done, sub["peak_mem_reserved_gib"].to_numpy(dtype=np.float64) * GIB, np.nan
        )
        status = sub["status"].to_numpy()
        oom = np.where(status == "oom", 1.0, np.where(done, 0.0, np.nan))
        perf = resolve_perf_model(gpu, profiles[idx[0]])
        blocks.append(Block(sets.cluster_scoped(c, perf.name), perf, step, reserved, oom))
        rows.append(sel)
    return blocks, rows


def framework_version_of(block: Block) -> str:
    """The ``framework/version`` whose parameter set the block's runs take."""
    return FRAMEWORK_VERSIONS[int(block.cols["parameter_code"][0])]


def healthy(block: Block, mfu: np.ndarray) -> Block:
    """The block with step times only for runs of measured MFU >= :data:`MIN_FIT_MFU`."""
    keep = np.isfinite(mfu) & (mfu >= MIN_FIT_MFU)
    return Block(
        block.cols,
        block.perf,
        np.where(keep, block.step_time_s, np.nan),
        block.reserved_bytes,
        block.oom,
    )
