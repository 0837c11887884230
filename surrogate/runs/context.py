"""How each measured run is explained: under the calibration profile of the cluster it ran on,
with the network it measured, against the memory of the rank that logged it.

A learned correction must learn what physics misses, not what one cluster's network did. So
every run's analytic prediction uses what its row carries (:data:`~surrogate.runs.sweeps.
CONTEXT_COLUMNS`, written by the parser of its source): its cluster's ``profile`` (the
Playbook's runs carry the shipped ``hf-playbook-cluster``, whose fabric efficiency is that
cluster's measured curve over node count; the project's own single-H100 training steps
``h100-own-measured``, the GEMMs measured on that GPU), its measured collective bandwidth
(``net_scale``: its efficiency over the profile's curve at its node count) and the pipeline
stage whose rank logged its peak memory (``peak_mem_stage``). A run without a profile uses the
profile given to training (a user's own calibration), else its GPU's default one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.memory import LOGGED_STAGE_COLUMN

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd

    from surrogate.analytic.perf import PerfModel


def run_context(
    runs: pd.DataFrame, profile: str | Path | PerfModel | None = None
) -> tuple[list[Any], dict[str, np.ndarray]]:
    """Per run: the profile to explain it with (its ``profile`` column, else ``profile``), and
    extra analytic columns: ``net_scale`` (1 where the run measured nothing), ``net_measured``
    (1 where it measured its network: the cluster's spread between jobs then no longer widens
    its interval) and the pipeline stage its peak memory was logged on
    (``LOGGED_STAGE_COLUMN``; NaN: the most loaded stage)."""
    profiles: list[Any] = [profile] * len(runs)
    if "profile" in runs:
        profiles = [profile if _missing(own) else own for own in runs["profile"].tolist()]
    scale, measured = np.ones(len(runs)), np.zeros(len(runs))
    if "net_scale" in runs:
        given = runs["net_scale"].to_numpy(dtype=np.float64)
        measured = (np.isfinite(given) & (given > 0)).astype(np.float64)
        scale = np.where(measured > 0, given, 1.0)
    stage = np.full(len(runs), np.nan)
    if LOGGED_STAGE_COLUMN in runs:
        stage = runs[LOGGED_STAGE_COLUMN].to_numpy(dtype=np.float64)
    return profiles, {"net_scale": scale, "net_measured": measured, LOGGED_STAGE_COLUMN: stage}


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


NETWORKS: dict[str, str] = {
    "measured": "each run's network as it measured it at its start (net_scale)",
    "profile": "the cluster profile's curve alone, as a user predicts before the run",
    "curve": "the cluster profile's curve as if the run had measured it (--network at the "
    "curve's own bandwidth: the interval of a known network)",
}
"""The networks a held-out run can be predicted under (``training.evaluate``)."""


def as_predicted(runs: pd.DataFrame, network: str) -> pd.DataFrame:
    """``runs`` as they are scored at prediction time under ``network`` (:data:`NETWORKS`):
    as they are (``measured``), or with no ``net_scale`` (``profile``: each run under its
    cluster profile's curve at its node count, what a user has before the run), or with a
    measured scale of 1 (``curve``: the same prediction, with a known network's interval)."""
    if network not in NETWORKS:
        raise ValueError(f"network must be one of {', '.join(NETWORKS)}, got {network!r}")
    if network == "measured" or ("net_scale" not in runs and network == "profile"):
        return runs
    out = runs.copy()
    out["net_scale"] = np.nan if network == "profile" else 1.0
    return out
