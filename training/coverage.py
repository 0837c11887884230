"""Coverage of the held-out runs' 80% intervals and reliability of their p_oom.

- :func:`interval_hits`: whether each measured run lies inside its MFU and peak memory
  interval; :func:`coverage_by_group` pools them per node band, framework and pipeline
  (:func:`coverage_groups`).
- :func:`recalibrated_hits`: the hits after the conformal recalibration a trained model ships
  (the factor on each interval's width that would hold its run:
  :func:`surrogate.learned.recalibration.measured_needed`), held out.
- :func:`oom_reliability`: how often runs ran out of memory against the probability said.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.learned.recalibration import (
    MIN_CATEGORY_RUNS,
    factors_for,
    fit_factors,
    logged_memory,
    measured_needed,
    measured_runs,
    node_bands,
    pipeline_labels,
    run_categories,
)
from surrogate.learned.training_data import cell_groups

if TYPE_CHECKING:
    import pandas as pd


def interval_hits(res: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Whether each measured run lies inside its 80% interval: MFU over the completed runs
    (the step time's interval is the same one, step time = FLOPs / MFU), peak memory over
    those with a measured memory, against the rank its memory was logged on (empty without
    memory intervals); indexed like ``res``."""
    import pandas as pd

    done, mem = measured_runs(res)
    inside = (done["pred_mfu_lo"] <= done["mfu"]) & (done["mfu"] <= done["pred_mfu_hi"])
    logged = logged_memory(mem)
    if logged is None:
        return inside, pd.Series([], dtype=bool)
    measured, _, lo, hi = logged
    return inside, pd.Series((lo <= measured) & (measured <= hi), index=mem.index)


COVERAGE_TARGET = 0.8
"""The intervals' nominal coverage."""
COVERAGE_FLOOR = 0.7
"""The least coverage a group of held-out runs should see (:func:`coverage_by_group`)."""
MIN_GROUP_RUNS = 15
"""The fewest measured runs of a group whose coverage :func:`coverage_by_group` reports: a
coverage over fewer is too noisy to judge (at 80% over 15 runs its standard error is 10
points)."""


def coverage_groups(res: pd.DataFrame) -> dict[str, pd.Series]:
    """The groupings :func:`coverage_by_group` reports, one label per run: the node-count
    band, the framework (its version, where the runs carry one) and pipeline or none."""
    import pandas as pd

    framework = res["framework"].astype(str)
    if "framework_version" in res:
        version = res["framework_version"].fillna("").astype(str)
        framework = framework.where(version == "", framework + "/" + version)
    return {
        "nodes": pd.Series(node_bands(res["num_nodes"].to_numpy()), index=res.index),
        "framework": framework,
        "pipeline": pd.Series(pipeline_labels(res["pp"].to_numpy()), index=res.index),
    }


def _band_order(label: str) -> tuple[int, str]:
    """Sort key: a node band by its first node count, any other label after none."""
    head = label.split(" ")[0].split("-")[0].rstrip("+")
    return (int(head) if head.isdigit() else 0, label)


def coverage_by_group(
    res: pd.DataFrame,
    *,
    min_runs: int = MIN_GROUP_RUNS,
    floor: float = COVERAGE_FLOOR,
    hits: tuple[pd.Series, pd.Series] | None = None,
) -> pd.DataFrame:
    """Coverage of the 80% MFU (and step time) and peak memory intervals of held-out runs per
    group of :func:`coverage_groups` with at least ``min_runs`` measured runs of that
    quantity (NaN with fewer): columns grouping, group, mfu_runs, mfu_coverage, memory_runs,
    memory_coverage, and ``below``: which of the two fall under ``floor`` (``hits``: whether
    each run is inside, :func:`interval_hits` by default)."""
    import pandas as pd

    inside, mem_inside = interval_hits(res) if hits is None else hits
    rows = []
    for grouping, labels in coverage_groups(res).items():
        # node bands in order of their node counts, the rest alphabetically
        for group in sorted(labels.unique(), key=_band_order):
            row: dict[str, Any] = {"grouping": grouping, "group": group}
            below = []
            for name, hits in (("mfu", inside), ("memory", mem_inside)):
                mine = hits[labels.loc[hits.index] == group] if len(hits) else hits
                row[f"{name}_runs"] = len(mine)
                row[f"{name}_coverage"] = (
                    float(mine.mean()) if len(mine) >= min_runs else float("nan")
                )
                if row[f"{name}_coverage"] < floor:
                    below.append(name)
            row["below"] = ", ".join(below)
            rows.append(row)
    return pd.DataFrame(rows)


def recalibrated_hits(
    res: pd.DataFrame,
    *,
    n_folds: int = 5,
    coverage: float = 0.8,
    min_runs: int = MIN_CATEGORY_RUNS,
    fitted_on: pd.DataFrame | None = None,
) -> tuple[pd.Series, pd.Series]:
    """Whether each measured run lies inside its interval after the recalibration a trained
    model ships, held out (:func:`recalibrated_factors`, whose arguments these are)."""
    factors = recalibrated_factors(
        res, n_folds=n_folds, coverage=coverage, min_runs=min_runs, fitted_on=fitted_on
    )
    needed = measured_needed(res)
    return (needed[0] <= factors[0]), (needed[1] <= factors[1])


def recalibrated_widths(res: pd.DataFrame, **kwargs: Any) -> pd.Series:
    """Per completed run with an MFU, its MFU interval's width (hi / lo) after the
    recalibration a trained model ships, held out (:func:`recalibrated_factors`): the log
    half-widths scaled by k make the width (hi / lo)^k."""
    k = recalibrated_factors(res, **kwargs)[0]
    done = res.loc[k.index]
    return (done["pred_mfu_hi"] / done["pred_mfu_lo"]) ** k


def recalibrated_factors(
    res: pd.DataFrame,
    *,
    n_folds: int = 5,
    coverage: float = 0.8,
    min_runs: int = MIN_CATEGORY_RUNS,
    fitted_on: pd.DataFrame | None = None,
) -> tuple[pd.Series, pd.Series]:
    """The factor on each measured run's MFU and memory interval (log half-widths) of the
    recalibration a trained model ships
    (:mod:`surrogate.learned.recalibration`: factors per node band, pipeline or none and
    framework version, else per pipeline or none and framework version, else pooled) fitted
    on the protocol's own held-out runs, itself held out: the held-out runs' (model, nodes)
    cells in ``n_folds`` grouped folds, each fold's intervals scaled by the factors the
    other folds' runs needed. What the shipped widths cover on runs they were not fitted
    on. ``fitted_on``: the same runs predicted otherwise (e.g. under each run's measured
    network), whose needed factors the recalibration is fitted on instead (applied to
    ``res``'s intervals: a shipped recalibration used on predictions made another way)."""
    import pandas as pd
    from sklearn.model_selection import GroupKFold

    out = []
    basis = measured_needed(res if fitted_on is None else fitted_on)
    for needed, fit_on in zip(measured_needed(res), basis, strict=True):
        fit_values = fit_on.reindex(needed.index).to_numpy()
        k = np.ones(len(needed))
        cells = cell_groups(res.loc[needed.index])
        n = min(n_folds, len(np.unique(cells)))
        if n >= 2:
            fine, coarse = run_categories(res.loc[needed.index])
            for train, test in GroupKFold(n_splits=n).split(fit_values, groups=cells):
                table = fit_factors(
                    fit_values[train],
                    fine[train],
                    coarse[train],
                    coverage=coverage,
                    min_runs=min_runs,
                )
                k[test] = factors_for(table, fine[test], coarse[test])
        out.append(pd.Series(k, index=needed.index))
    return out[0], out[1]


def unknown_network_factors(
    profile: pd.DataFrame,
    curve: pd.DataFrame,
    measured: pd.DataFrame,
    *,
    n_folds: int = 5,
    coverage: float = 0.8,
    min_runs: int = MIN_CATEGORY_RUNS,
) -> tuple[pd.Series, pd.Series, pd.Series]:
    """For the completed runs with an MFU, the MFU interval a trained model ships for an
    unknown network, held out as in :func:`recalibrated_factors`: per fold of cells, the
    known network's factors fitted on the other folds' ``measured`` runs and applied to
    ``curve``'s intervals (the same predictions, the network known), and the unknown
    network's fitted on the other folds' ``profile`` runs beyond what those hold
    (``surrogate.learned.recalibration.beyond_known``): (whether the run is inside either,
    the unknown network's factor, the known network's), indexed by run."""
    import pandas as pd
    from sklearn.model_selection import GroupKFold

    from surrogate.learned.recalibration import beyond_known

    need_p = measured_needed(profile)[0]
    index = need_p.index
    need_c = measured_needed(curve)[0].reindex(index).to_numpy()
    need_m = measured_needed(measured)[0].reindex(index).to_numpy()
    values = need_p.to_numpy()
    k_p, k_k = np.ones(len(index)), np.ones(len(index))
    cells = cell_groups(profile.loc[index])
    n = min(n_folds, len(np.unique(cells)))
    if n >= 2:
        fine, coarse = run_categories(profile.loc[index])
        for train, test in GroupKFold(n_splits=n).split(values, groups=cells):
            known = fit_factors(
                need_m[train], fine[train], coarse[train], coverage=coverage, min_runs=min_runs
            )
            effective = beyond_known(
                values[train], need_c[train], factors_for(known, fine[train], coarse[train])
            )
            unknown = fit_factors(
                effective, fine[train], coarse[train], coverage=coverage, min_runs=min_runs
            )
            k_p[test] = factors_for(unknown, fine[test], coarse[test])
            k_k[test] = factors_for(known, fine[test], coarse[test])
    hits = (values <= k_p) | (need_c <= k_k)
    return (pd.Series(hits, index=index), pd.Series(k_p, index=index), pd.Series(k_k, index=index))


RELIABILITY_BINS: tuple[float, ...] = (0.0, 0.05, 0.2, 0.5, 0.8, 0.95, 1.0)
"""Edges of the p_oom bins of :func:`oom_reliability`: finer near 0 and 1, where most
predictions fall."""


def oom_reliability(res: pd.DataFrame) -> pd.DataFrame:
    """How often runs ran out of memory against the probability said (completed and out-of-
    memory runs): per bin of p_oom, the runs, the mean p_oom said and the share that ran out.
    Calibrated where the two agree."""
    import pandas as pd

    judged = res[res["status"].isin(["completed", "oom"])]
    p = judged["p_oom"].to_numpy(float)
    oom = (judged["status"] == "oom").to_numpy()
    edges = np.asarray(RELIABILITY_BINS)
    which = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, len(edges) - 2)
    rows = []
    for b in range(len(edges) - 1):
        sel = which == b
        rows.append(
            {
                "p_oom": f"{edges[b]:.2f}-{edges[b + 1]:.2f}",
                "runs": int(sel.sum()),
                "said": float(p[sel].mean()) if sel.any() else float("nan"),
                "ran_out": float(oom[sel].mean()) if sel.any() else float("nan"),
            }
        )
    return pd.DataFrame(rows)
