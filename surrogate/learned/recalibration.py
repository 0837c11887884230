"""The intervals' recalibration per kind of configuration and category, from the errors of
held-out runs (Mondrian conformal prediction, Vovk et al. 2005, "Algorithmic Learning in a
Random World", ch. 4).

The learned model's conformal widths come from its out-of-fold errors inside its training
data, widened by the distance off it; runs held out by a protocol (an unseen cell, an unseen
model size, more nodes than trained on) err differently per group. Per held-out run, the
factor k on its interval's log half-widths that would just hold its measurement
(:func:`needed_scale`); per kind of configuration and category, the conformal quantile of
those factors (:func:`fit_factors`); a prediction's half-widths scaled by the factor of its
kind and category (:meth:`Recalibration.apply`).

- **Kinds** (:data:`KINDS`), each measured by the protocol that holds such configurations
  out: ``inside`` the data (an unseen cell: the cv protocol), an ``unseen_shape`` inside the
  data's ranges (leave one model size out), ``beyond`` the data's ranges (more nodes than
  trained on). Configurations of an unseen framework, GPU or cluster keep the width
  transfer to held-out ones measured (``surrogate.learned.blend.unseen_widths``), unscaled.
- **Categories**: node band x pipeline or none x framework version where that category
  holds :data:`MIN_CATEGORY_RUNS` held-out runs, else pipeline or none x framework version,
  else all the kind's runs.
- **Networks**: the MFU factors twice, from the same protocols' held-out runs predicted
  under each run's measured network (``mfu``: for a configuration whose network is known,
  ``--network`` or a run's start-up measurement) and under the cluster profile's curve alone,
  their intervals widened by the cluster's spread (``mfu_profile``: for the rest, predicted as
  a user predicts before a run; ``surrogate.learned.blend.with_network_spread``). Memory does
  not depend on the network: one table.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.inputs import FRAMEWORK_VERSIONS
from surrogate.analytic.run import mfu_bound
from surrogate.config.frameworks import get_framework

if TYPE_CHECKING:
    import pandas as pd

KINDS: Mapping[str, str] = {"inside": "cv", "unseen_shape": "lomo", "beyond": "nodes"}
"""Each kind of configuration and the protocol whose held-out runs measure its factors."""
MIN_CATEGORY_RUNS = 15
"""The fewest held-out runs a category needs for a factor of its own (at 80% a conformal
quantile over 15 runs has a standard error of about 10 points of coverage)."""
NODE_BANDS: tuple[int, ...] = (1, 2, 8, 32, 128)
"""The first node count of each node-count band of the categories and of the coverage
tables: 1, 2-7, 8-31, 32-127, 128 and more."""


def band_index(num_nodes: np.ndarray) -> np.ndarray:
    """Each node count's band: its index in :data:`NODE_BANDS` (0 below the first)."""
    band = np.searchsorted(NODE_BANDS, np.asarray(num_nodes), side="right") - 1
    return np.asarray(np.maximum(band, 0), dtype=np.int64)


def node_bands(num_nodes: np.ndarray) -> np.ndarray:
    """Each node count's band by name: ``'1 node'``, ``'2-7 nodes'``, ..., ``'128+ nodes'``."""
    names = [
        f"{lo}+ nodes"
        if hi is None
        else f"{lo} node{'s' if lo > 1 else ''}"
        if hi == lo + 1
        else f"{lo}-{hi - 1} nodes"
        for lo, hi in zip(NODE_BANDS, [*NODE_BANDS[1:], None], strict=True)
    ]
    return np.asarray(np.array(names, dtype=object)[band_index(num_nodes)])


def pipeline_labels(pp: np.ndarray) -> np.ndarray:
    """``'pp>1'`` for a pipeline, ``'pp=1'`` for none."""
    return np.where(np.asarray(pp) > 1, "pp>1", "pp=1").astype(object)


def framework_versions(framework: np.ndarray, version: np.ndarray | None) -> np.ndarray:
    """``name/version`` per run, an empty or missing version read as the framework's
    latest (as the analytic model reads it)."""
    out = np.empty(len(framework), dtype=object)
    versions = (
        np.full(len(framework), "", dtype=object)
        if version is None
        else np.asarray(version, dtype=object)
    )
    for i, (name, v) in enumerate(zip(framework, versions, strict=True)):
        fw = get_framework(str(name))
        given = "" if v is None or v != v else str(v)  # None or NaN: missing
        out[i] = f"{fw.name}/{given or fw.versions[-1]}"
    return out


def category_keys(
    num_nodes: np.ndarray, pp: np.ndarray, framework: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration, its fine category (node band, pipeline or none, framework version)
    and its coarse one (pipeline or none, framework version)."""
    coarse = pipeline_labels(pp) + " " + np.asarray(framework, dtype=object)
    return node_bands(num_nodes) + " " + coarse, coarse


def needed_scale(y: np.ndarray, pred: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per measured value ``y``, the factor k on the log half-widths of the interval
    [``lo``, ``hi``] around ``pred`` that would just hold it: [pred (lo / pred)^k,
    pred (hi / pred)^k] holds ``y`` exactly where k >= this (0 at ``pred``; inf where the
    interval has no width on ``y``'s side)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        below = np.log(pred / y) / np.log(pred / lo)
        above = np.log(y / pred) / np.log(hi / pred)
    k = np.where(y < pred, below, np.where(y > pred, above, 0.0))
    return np.asarray(np.where(np.isnan(k), np.inf, k), dtype=np.float64)


def conformal_level(n: int, coverage: float) -> float:
    """The split-conformal quantile level for ``n`` scores: ceil((n + 1) coverage) / n, at
    most 1."""
    return min(1.0, float(np.ceil((n + 1) * coverage)) / n)


def fit_factors(
    needed: np.ndarray,
    fine: np.ndarray,
    coarse: np.ndarray,
    *,
    coverage: float,
    min_runs: int = MIN_CATEGORY_RUNS,
) -> dict[str, float]:
    """The conformal ``coverage`` quantile of the factors ``needed`` per fine category, per
    coarse one, and over all (key ``''``), for each with ``min_runs`` runs or more (all:
    with any). Infinite factors count as the largest."""
    needed = np.asarray(needed, dtype=np.float64)
    out: dict[str, float] = {}
    if not len(needed):
        return out
    out[""] = float(np.quantile(needed, conformal_level(len(needed), coverage)))
    for keys in (coarse, fine):
        keys = np.asarray(keys, dtype=object)
        for key in np.unique(keys):
            mine = needed[keys == key]
            if len(mine) >= min_runs:
                out[str(key)] = float(np.quantile(mine, conformal_level(len(mine), coverage)))
    return out


def factors_for(table: Mapping[str, float], fine: np.ndarray, coarse: np.ndarray) -> np.ndarray:
    """Per configuration, the factor of its fine category in ``table`` (:func:`fit_factors`),
    else of its coarse one, else the pooled one, else 1 (nothing measured)."""
    pooled = table.get("", 1.0)
    values = {}
    for f, c in set(zip(fine, coarse, strict=True)):
        values[(f, c)] = table.get(f, table.get(c, pooled))
    return np.array([values[(f, c)] for f, c in zip(fine, coarse, strict=True)], dtype=np.float64)


def rescaled(
    pred: np.ndarray, lo: np.ndarray, hi: np.ndarray, k: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The interval [``lo``, ``hi``] around ``pred`` with its log half-widths times ``k``
    (``lo`` and ``hi`` positive and either side of ``pred``; where they are not, or ``k`` is
    1, the interval as given)."""
    lo, hi = np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64)
    rows = np.flatnonzero(k != 1.0)
    if len(rows):
        p, kk = pred[rows], k[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            new_lo = p * (lo[rows] / p) ** kk
            new_hi = p * (hi[rows] / p) ** kk
        lo[rows] = np.where(np.isfinite(new_lo), new_lo, lo[rows])
        hi[rows] = np.where(np.isfinite(new_hi), new_hi, hi[rows])
    return lo, hi


@dataclass(frozen=True)
class Recalibration:
    """The factors per kind (:data:`KINDS`) and category of the MFU (and step-time) and the
    peak-memory intervals (:func:`fit_factors` tables; a kind without a table keeps 1)."""

    mfu: dict[str, dict[str, float]] = field(default_factory=dict)
    memory: dict[str, dict[str, float]] = field(default_factory=dict)
    coverage: float = 0.8
    mfu_profile: dict[str, dict[str, float]] = field(default_factory=dict)
    """The MFU factors for a configuration whose network is not known (module doc); empty:
    ``mfu``'s."""

    def factors(
        self,
        quantity: str,
        kind: np.ndarray,
        num_nodes: np.ndarray,
        pp: np.ndarray,
        framework_code: np.ndarray,
    ) -> np.ndarray:
        """Per configuration, the factor on the log half-widths of ``quantity`` (``'mfu'``,
        ``'mfu_profile'`` or ``'memory'``) for its ``kind`` (:func:`kinds_of`: an index into
        :data:`KINDS`, or ``len(KINDS)``: unscaled) and its category (its framework version
        by its index in ``FRAMEWORK_VERSIONS``), from a table of every kind and category
        computed once."""
        table = self._lookups[quantity]
        code = (
            (np.asarray(kind, dtype=np.int64) * len(NODE_BANDS) + band_index(num_nodes)) * 2
            + (np.asarray(pp) > 1)
        ) * len(FRAMEWORK_VERSIONS) + np.asarray(framework_code).astype(np.int64)
        return np.asarray(table[code], dtype=np.float64)

    @functools.cached_property
    def _lookups(self) -> dict[str, np.ndarray]:
        """:meth:`_lookup` of each quantity, computed once per recalibration (not per call: a
        one-layout prediction would pay it every time)."""
        return {
            "mfu": self._lookup(self.mfu),
            "memory": self._lookup(self.memory),
            "mfu_profile": self._lookup(self.mfu_profile or self.mfu),
        }

    @staticmethod
    def _lookup(tables: dict[str, dict[str, float]]) -> np.ndarray:
        """The factor of every (kind, node band, pipeline or none, framework version) of one
        quantity's ``tables``, in the order of the codes of :meth:`factors`; 1 for the kind
        that is not scaled."""
        names = list(KINDS)
        fw = np.array(FRAMEWORK_VERSIONS, dtype=object)
        values = []
        for k in range(len(names) + 1):
            table = tables.get(names[k]) if k < len(names) else None
            for first in NODE_BANDS:
                for pipelined in (False, True):
                    if not table:
                        values.append(np.ones(len(fw)))
                        continue
                    fine, coarse = category_keys(
                        np.full(len(fw), first), np.full(len(fw), 2 if pipelined else 1), fw
                    )
                    values.append(factors_for(table, fine, coarse))
        return np.concatenate(values)

    def apply(
        self,
        columns: Mapping[str, np.ndarray],
        kind: np.ndarray,
        cols: Mapping[str, np.ndarray],
        ceiling: np.ndarray | float,
        *,
        analytic: tuple[np.ndarray, np.ndarray],
        holds: tuple[np.ndarray, np.ndarray],
        network_known: np.ndarray | None = None,
        unwidened: Mapping[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """The predicted ``columns`` (``surrogate.learned.blend.prediction_columns``) with
        their MFU and memory intervals rescaled by :meth:`factors` (the analytic columns
        ``cols`` give each configuration's category); where ``holds`` (MFU, memory) they still
        hold the ``analytic`` answer (MFU, memory in GiB), as before rescaling (off the domain,
        and for MFU where the answer is shared with the physics); the MFU interval still under
        the hardware's ``ceiling`` (or the prediction, where that is higher) and 100%. The MFU
        factors are ``mfu``'s where ``network_known`` (1: a measured network), else
        ``mfu_profile``'s (None: the network of none is known); there the interval also holds
        the one a known network would give, ``unwidened`` (the columns before the network's
        spread was added) under ``mfu``'s factors: not knowing the network never makes the
        interval narrower on either side."""
        where = (kind, cols["num_nodes"], cols["pp"], cols["framework_code"])
        known = (
            np.zeros(len(kind), dtype=bool)
            if network_known is None
            else np.asarray(network_known) > 0
        )
        mfu = measured = self.factors("mfu", *where)
        if not known.all():
            mfu = np.where(known, mfu, self.factors("mfu_profile", *where))
        out = dict(columns)
        for (center, lo, hi), factors, physics, mask in (
            (("pred_mfu", "pred_mfu_lo", "pred_mfu_hi"), mfu, analytic[0], holds[0]),
            (
                (
                    "pred_peak_mem_reserved_gib",
                    "pred_peak_mem_reserved_lo_gib",
                    "pred_peak_mem_reserved_hi_gib",
                ),
                self.factors("memory", *where),
                analytic[1],
                holds[1],
            ),
        ):
            new_lo, new_hi = rescaled(columns[center], columns[lo], columns[hi], factors)
            out[lo] = np.where(mask, np.minimum(new_lo, physics), new_lo)
            out[hi] = np.where(mask, np.maximum(new_hi, physics), new_hi)
        if unwidened is not None and not known.all():  # at least a known network's
            base_lo, base_hi = rescaled(
                unwidened["pred_mfu"], unwidened["pred_mfu_lo"], unwidened["pred_mfu_hi"], measured
            )
            out["pred_mfu_lo"] = np.where(
                known, out["pred_mfu_lo"], np.minimum(out["pred_mfu_lo"], base_lo)
            )
            out["pred_mfu_hi"] = np.where(
                known, out["pred_mfu_hi"], np.maximum(out["pred_mfu_hi"], base_hi)
            )
        pred = columns["pred_mfu"]
        out["pred_mfu_hi"] = np.minimum(out["pred_mfu_hi"], mfu_bound(ceiling, pred))
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mfu": self.mfu, "memory": self.memory, "coverage": self.coverage}
        if self.mfu_profile:
            out["mfu_profile"] = self.mfu_profile
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recalibration:
        def tables(d: Mapping[str, Any]) -> dict[str, dict[str, float]]:
            return {str(kind): {str(k): float(v) for k, v in t.items()} for kind, t in d.items()}

        return cls(
            mfu=tables(data["mfu"]),
            memory=tables(data["memory"]),
            coverage=float(data["coverage"]),
            mfu_profile=tables(data.get("mfu_profile", {})),
        )


def kinds_of(distance: np.ndarray, unseen_shape: np.ndarray | None) -> np.ndarray:
    """Each configuration's kind as an index into :data:`KINDS`: ``beyond`` the data's ranges
    (a finite distance off the domain), else an ``unseen_shape``, else ``inside``;
    ``len(KINDS)`` for an unseen framework, GPU or cluster (an infinite distance), which is
    not scaled."""
    d = np.asarray(distance, dtype=np.float64)
    names = list(KINDS)
    kind = np.full(len(d), names.index("inside"), dtype=np.int64)
    if unseen_shape is not None:
        kind[np.asarray(unseen_shape, dtype=bool)] = names.index("unseen_shape")
    kind[d > 0] = names.index("beyond")
    kind[~np.isfinite(d)] = len(names)
    return kind


def measured_runs(res: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The completed runs with an MFU, and those of them with a measured peak memory."""
    done = res[(res["status"] == "completed") & (res["mfu"] > 0)]
    return done, done[done["peak_mem_reserved_gib"] > 0]


def logged_memory(mem: pd.DataFrame) -> tuple[np.ndarray, ...] | None:
    """The measured peak memory of runs and their predicted memory and interval on the rank
    the memory was logged on (``pred_logged_mem_gib`` where given, the interval scaled by its
    share of the peak rank's): ``(measured, pred, lo, hi)``, or None without memory
    intervals."""
    if (
        "pred_peak_mem_reserved_lo_gib" not in mem
        or not mem["pred_peak_mem_reserved_lo_gib"].notna().any()
    ):
        return None
    pred = mem[
        "pred_logged_mem_gib" if "pred_logged_mem_gib" in mem else "pred_peak_mem_reserved_gib"
    ].to_numpy(float)
    logged = pred / mem["pred_peak_mem_reserved_gib"].to_numpy(float)  # the logged rank's share
    return (
        mem["peak_mem_reserved_gib"].to_numpy(float),
        pred,
        mem["pred_peak_mem_reserved_lo_gib"].to_numpy(float) * logged,
        mem["pred_peak_mem_reserved_hi_gib"].to_numpy(float) * logged,
    )


def measured_needed(res: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per held-out run with a measurement, :func:`needed_scale` of its MFU interval (the
    completed runs with an MFU; the step time's interval is the same one) and of its peak
    memory interval (those with a measured peak memory and memory intervals, against the
    rank the memory was logged on: ``pred_logged_mem_gib`` where given); indexed like
    ``res``."""
    import pandas as pd

    done, mem = measured_runs(res)
    mfu = pd.Series(
        needed_scale(
            *(done[c].to_numpy(float) for c in ("mfu", "pred_mfu", "pred_mfu_lo", "pred_mfu_hi"))
        ),
        index=done.index,
    )
    logged = logged_memory(mem)
    memory = (
        pd.Series([], dtype=float)
        if logged is None
        else pd.Series(needed_scale(*logged), index=mem.index)
    )
    return mfu, memory


def run_categories(res: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """:func:`category_keys` of a runs table's rows (``num_nodes``, ``pp``, ``framework``
    and ``framework_version`` where it has one)."""
    framework = framework_versions(
        res["framework"].to_numpy(),
        res["framework_version"].to_numpy() if "framework_version" in res else None,
    )
    return category_keys(res["num_nodes"].to_numpy(), res["pp"].to_numpy(), framework)


def fit_recalibration(
    held_out: Mapping[str, pd.DataFrame],
    *,
    coverage: float = 0.8,
    min_runs: int = MIN_CATEGORY_RUNS,
    as_predicted: Mapping[str, pd.DataFrame] | None = None,
    known: Mapping[str, pd.DataFrame] | None = None,
) -> Recalibration:
    """The factors of each kind from its protocol's held-out predictions (``held_out``: a
    table of runs with prediction columns per protocol name, as ``training.evaluate``
    gives them, under each run's measured network; ``as_predicted``: the same runs under the
    profile's curve alone, which give ``mfu_profile``; ``known``: the same predictions with
    the network taken as known, whose interval an unknown network's also holds
    (:meth:`Recalibration.apply`), so that the runs it holds ask nothing of ``mfu_profile``:
    :func:`beyond_known`); a kind whose protocol is absent keeps 1."""
    tables: dict[str, dict[str, dict[str, float]]] = {"mfu": {}, "memory": {}, "mfu_profile": {}}
    for kind, protocol in KINDS.items():
        res = held_out.get(protocol)
        if res is None or not len(res):
            continue
        for quantity, needed in zip(("mfu", "memory"), measured_needed(res), strict=True):
            if len(needed):
                fine, coarse = run_categories(res.loc[needed.index])
                tables[quantity][kind] = fit_factors(
                    needed.to_numpy(), fine, coarse, coverage=coverage, min_runs=min_runs
                )
        user = (as_predicted or {}).get(protocol)
        if user is None or not len(user):
            continue
        needed = measured_needed(user)[0]
        fine, coarse = run_categories(user.loc[needed.index])
        values = needed.to_numpy()
        curve = (known or {}).get(protocol)
        if curve is not None:
            values = beyond_known(
                values,
                measured_needed(curve)[0].reindex(needed.index),
                factors_for(tables["mfu"].get(kind, {}), fine, coarse),
            )
        tables["mfu_profile"][kind] = fit_factors(
            values, fine, coarse, coverage=coverage, min_runs=min_runs
        )
    return Recalibration(
        mfu=tables["mfu"],
        memory=tables["memory"],
        coverage=coverage,
        mfu_profile=tables["mfu_profile"],
    )


def beyond_known(needed: np.ndarray, needed_known: Any, factors: np.ndarray) -> np.ndarray:
    """The factors an unknown network's interval needs (``needed``) where the known
    network's interval, scaled by its ``factors``, does not already hold the run
    (``needed_known`` over them; NaN: not known), else 0: the interval shipped for an
    unknown network holds both (:meth:`Recalibration.apply`)."""
    held = np.asarray(needed_known, dtype=np.float64) <= factors
    return np.asarray(np.where(held, 0.0, needed), dtype=np.float64)
