"""The analytic model run over configurations: columns in, memory and step-time terms out.

One pass for any number of configurations, grouped by (GPU, calibration profile) so each group
uses its own hardware speed (:class:`~surrogate.analytic.perf.PerfModel`). Everything that
predicts (``surrogate.prediction.scoring``) and the learned model's features
(``surrogate.learned.features``)
start here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from surrogate.analytic.comm import spans_nodes
from surrogate.analytic.flops import LayerParams, active_params, embedding_params
from surrogate.analytic.inputs import Cols, cols_from_table
from surrogate.analytic.memory import (
    LOGGED_STAGE_COLUMN,
    logged_reserved_bytes,
    memory_breakdown,
    oom_probability,
    torch_reserved_bytes,
)
from surrogate.analytic.params import ParameterSets
from surrogate.analytic.perf import PerfModel
from surrogate.analytic.step import STEP_TERMS, step_breakdown
from surrogate.config.table import FlatTable, flat_table, group_codes, table_len, take
from surrogate.config.training import TrainingConfig


def analytic_columns(c: Cols, perf: PerfModel) -> dict[str, np.ndarray]:
    """Run the analytic model on columns: memory terms (``mem_*`` bytes), step terms
    (``time_*`` seconds) and the headline outputs; where the columns say which pipeline stage
    a run's memory was logged on (``surrogate.analytic.memory.LOGGED_STAGE_COLUMN``), also
    ``mem_reserved_logged``, the reserved memory of that stage."""
    params = LayerParams.of(c)  # once for the memory and the step time
    mem = memory_breakdown(c, params)
    step = step_breakdown(c, perf, params)
    out: dict[str, np.ndarray] = {f"mem_{k}": v for k, v in mem.items()}
    out.update({f"time_{k}": step[k] for k in STEP_TERMS})
    out["mem_reserved"] = torch_reserved_bytes(mem)
    if LOGGED_STAGE_COLUMN in c:  # runs scored against their measurements
        out["mem_reserved_logged"] = logged_reserved_bytes(c, mem)
    out["p_oom"] = oom_probability(c, mem)
    for k in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "bubble_frac"):
        out[k] = step[k]
    out["mfu_ceiling"] = mfu_ceiling(c, perf)
    spread = getattr(perf, "network_spread", None)  # a calibration profile's, where recorded
    if spread is not None:
        down, up, known = spread(c)
        out["net_spread_lo"], out["net_spread_hi"] = network_widening(c, step, down, up)
        out["net_known"] = known
    return out


NETWORK_TERMS: dict[str, str] = {
    "tp_comm": "tp",
    "cp_comm": "cp",
    "ep_comm": "ep",
    "pp_comm": "pp",
    "dp_comm": "dp",
    "zero3_comm": "dp",
}
"""The exposed communication terms of the step time and the dimension whose group decides
whether each crosses nodes (``surrogate.analytic.comm.spans_nodes``)."""


def network_widening(
    c: Cols, step: dict[str, np.ndarray], down: np.ndarray, up: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """How far the network between jobs moves each configuration's MFU, as log factors
    (down, up): its exposed communication across nodes takes a share e of the step time
    (:data:`NETWORK_TERMS`), and at a bandwidth b' against the curve's b the step takes
    1 + e (b / b' - 1) of its time (every transfer's time is its bytes over the bandwidth,
    ``surrogate.hardware.fabric``); at the cluster's 10th and 90th percentile of bandwidth
    (``down``: log(median / p10), ``up``: log(p90 / median)) that is log(1 + e (e^down - 1))
    slower and -log(1 - e (1 - e^-up)) faster. Bounded by the share: a layout without
    exposed communication across nodes is not moved; the slower side counts only the
    communication exposed at the curve's bandwidth (a lower bound: at a slower network more of
    it may stop hiding under compute)."""
    spans = spans_nodes(c)
    exposed = sum(step[term] * spans[dim] for term, dim in NETWORK_TERMS.items())
    share = np.clip(exposed / np.maximum(step["step_time_s"], 1e-300), 0.0, 1.0)
    slower = np.log1p(share * np.expm1(down))
    faster = -np.log1p(share * np.expm1(-up))
    return np.asarray(slower, dtype=np.float64), np.asarray(faster, dtype=np.float64)


def mfu_ceiling(c: Cols, perf: PerfModel) -> np.ndarray:
    """The highest MFU the hardware allows each configuration: every counted FLOP at the best
    GEMM efficiency the calibration profile measured (the datasheet model: its assumed 70%)
    over square-to-slab shapes of 1,024 to 16,384 (``perf.best_gemm_efficiency``), times the
    counted over the executed FLOPs, since the MFU convention counts an untied input
    embedding's lookup as 6 FLOPs per parameter that execute none (``impossible``). No interval
    reaches past it."""
    best = perf.best_gemm_efficiency  # computed once per PerfModel, by the model
    share = (1.0 - c["tie_embeddings"]) * embedding_params(c) / active_params(c)
    return np.asarray(best / np.maximum(1.0 - share, 0.05), dtype=np.float64)


def mfu_bound(ceiling: np.ndarray | float, pred: np.ndarray) -> np.ndarray:
    """The highest an MFU interval may reach: the hardware's :func:`mfu_ceiling`, or the
    prediction where that is higher, and 100%."""
    return np.asarray(np.minimum(np.maximum(ceiling, pred), 1.0), dtype=np.float64)


def impossible(c: Cols, out: Mapping[str, np.ndarray]) -> list[str]:
    """Per configuration: '' or why its analytic answer is physically impossible (an MFU above
    100% of the dense peak, no positive finite throughput), saying what must hold.

    An MFU above 100% comes from the MFU convention (6 N + 12 L h s FLOPs per token,
    ``surrogate.analytic.flops``): N counts an untied input embedding's vocab_size x hidden_size
    parameters at 6 FLOPs each although a lookup executes none, so where the embedding
    dominates N (a vocabulary of 10^12) the counted FLOPs are up to twice those executed and
    the MFU up to twice the GEMM efficiency. Such a configuration is refused, not clamped."""
    mfu, tps, step = out["mfu"], out["tokens_per_s_per_gpu"], out["step_time_s"]
    share = (1.0 - c["tie_embeddings"]) * embedding_params(c) / active_params(c)
    reasons = [""] * len(mfu)
    for k in np.flatnonzero(mfu > 1.0).tolist():
        why = (
            (
                f"the untied input embedding (vocab_size={int(c['vocab_size'][k]):,} x "
                f"hidden_size={int(c['hidden_size'][k]):,}) is {share[k]:.0%} of the parameters "
                "N, whose 6 N FLOPs per token count a lookup that executes none; the vocabulary "
                "must be small against the rest of the model"
            )
            if share[k] > 0.25
            else (
                "the step time is shorter than the counted FLOPs allow (please report this "
                "configuration)"
            )
        )
        reasons[k] = (
            f"MFU must be at most 100% of the dense peak, but this configuration "
            f"would reach {mfu[k]:.0%}: {why}"
        )
    for k in np.flatnonzero(~(np.isfinite(tps) & (tps > 0))).tolist():
        reasons[k] = (
            f"tokens/s per GPU must be positive and finite, but the analytic model "
            f"gives {tps[k]!r} (step time {step[k]!r} s)"
        )
    return reasons


def analytic_for(
    configs: Sequence[TrainingConfig] | FlatTable,
    profile: str | Path | PerfModel | Sequence[Any] | None = None,
    *,
    sets: ParameterSets,
    resolve: Callable[[str, Any], PerfModel],
    extra: Mapping[str, np.ndarray] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[str]]:
    """Columns, analytic outputs and the PerfModel name of each configuration, in order.

    ``configs``: validated configurations, or their flat table (``surrogate.config.table``).
    ``profile`` is one profile for every configuration or a sequence of one per
    configuration, each turned into a PerfModel by ``resolve(gpu, profile)``
    (``surrogate.hardware.perf_models.resolve_perf_model`` reads profile files; nothing here
    does);
    ``sets``: the free parameters' fitted sets; ``extra`` adds per-configuration columns the
    PerfModel may read (e.g. ``net_scale``). Configurations are grouped by (GPU, profile) so
    that each group uses its own PerfModel."""
    table = configs if isinstance(configs, dict) else flat_table(configs)
    n = table_len(table)
    per_config = not isinstance(profile, str | Path | None) and isinstance(profile, Sequence)
    if per_config and len(profile) != n:  # type: ignore[arg-type]
        raise ValueError(f"one profile per configuration: got {len(profile)} for {n}")  # type: ignore[arg-type]
    keys: dict[int, Any] = {}
    profiles = list(profile) if per_config else [profile]  # type: ignore[arg-type]
    for prof in profiles:
        keys[_profile_key(prof)] = prof
    key_of = np.array([_profile_key(p) for p in profiles], dtype=np.int64)
    key_col = key_of if per_config else np.full(n, key_of[0])
    codes, groups = group_codes([table["gpu"], key_col])
    cols: dict[str, np.ndarray] = {}
    outs: dict[str, np.ndarray] = {}
    names = np.empty(n, dtype=object)
    whole = len(groups) == 1
    for g, (gpu, key) in enumerate(groups):
        idx = np.arange(n) if whole else np.flatnonzero(codes == g)
        perf = resolve(gpu, keys[key])
        # a set's cluster-scoped parameters hold on the cluster it was fitted on only
        c = sets.cluster_scoped(
            cols_from_table(table if whole else take(table, idx), sets), perf.name
        )
        for name, values in (extra or {}).items():
            c[name] = np.asarray(values, dtype=np.float64)[idx]
        out = analytic_columns(c, perf)
        if whole:
            cols, outs = c, out
        else:
            for target, part in ((cols, c), (outs, out)):
                for k, v in part.items():
                    target.setdefault(k, np.full(n, np.nan))[idx] = v
        names[idx] = perf.name
    return cols, outs, names.tolist()


def _profile_key(prof: Any) -> int:
    """One key per profile: its path's text, or the object itself."""
    return hash(str(prof)) if isinstance(prof, str | Path) else id(prof)
