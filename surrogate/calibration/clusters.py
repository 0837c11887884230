"""Which cluster a run ran on, so that training explains each run under its own network.

A learned correction must learn what physics misses, not what one cluster's network did. So
every training run's analytic prediction uses the calibration profile of the cluster it ran on
(:data:`SOURCE_PROFILES`: the Playbook's runs use the shipped ``hf-playbook-cluster`` profile,
whose fabric efficiency is that cluster's measured curve over node count; the project's own
single-H100 training steps use ``h100-own-measured``, the GEMMs measured on that GPU) and,
where the run measured its own collective bandwidth (a ``net_scale`` column: its measured
efficiency over the profile's curve at its node count, ``surrogate.hardware.fabric.run_scales``),
that
measurement. Runs of other sources use the profile given to training (a user's own
calibration), else their GPU's default profile.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.memory import LOGGED_STAGE_COLUMN
from surrogate.errors import DataError
from surrogate.hardware.fabric import run_scales
from surrogate.hardware.profile import load_profile
from surrogate.ingest.playbook import SOURCE, parse_playbook
from surrogate.ingest.playbook_network import parse_playbook_network
from surrogate.io.datasource import data_dir as resolve_data_dir

if TYPE_CHECKING:
    import pandas as pd

    from surrogate.analytic.perf import PerfModel

SOURCE_PROFILES: dict[str, str] = {"hf_ultrascale_playbook": "hf-playbook-cluster",
                                   "surrogate_h100": "h100-own-measured"}
"""Sweep ``source`` -> the shipped profile of the cluster its runs ran on."""

SOURCE_MEMORY_STAGES: dict[str, float] = {"hf_ultrascale_playbook": 0.0}
"""Sweep ``source`` -> the pipeline stage (0-based) of the rank whose peak memory its table
records, where that is not the most loaded rank. The Playbook's table is written by world rank
0 alone (nanotron ``helpers.log_throughput``: ``write_to_csv`` where ``dist.get_rank(world_pg)
== 0``, its ``Mem Res (GB)`` that rank's ``torch.cuda.max_memory_reserved()``), and nanotron's
``ParallelContext`` lays the world ranks out as (ep, pp, dp, tp), so world rank 0 is on the
first pipeline stage. A run whose most loaded stage is another (the last, holding the logits)
measured less than its peak: training and calibration compare its measurement with the
predicted memory of the first stage (``surrogate.analytic.memory.logged_reserved_bytes``),
while out-of-memory and ``predict`` go by the most loaded stage."""

def run_context(
    runs: pd.DataFrame, profile: str | Path | PerfModel | None = None
) -> tuple[list[Any], dict[str, np.ndarray]]:
    """Per run: the profile to explain it with, and extra analytic columns: ``net_scale``
    (1 where the run measured nothing), ``net_measured`` (1 where it measured its network:
    the cluster's spread between jobs then no longer widens its interval) and the pipeline
    stage its peak memory was logged on (``surrogate.analytic.memory.LOGGED_STAGE_COLUMN``,
    from :data:`SOURCE_MEMORY_STAGES`; NaN: the most loaded stage)."""

    sources = runs["source"].astype(str).tolist() if "source" in runs else [""] * len(runs)
    profiles: list[Any] = [SOURCE_PROFILES.get(s, profile) for s in sources]
    scale, measured = np.ones(len(runs)), np.zeros(len(runs))
    if "net_scale" in runs:
        given = runs["net_scale"].to_numpy(dtype=np.float64)
        measured = (np.isfinite(given) & (given > 0)).astype(np.float64)
        scale = np.where(measured > 0, given, 1.0)
    stage = np.array([SOURCE_MEMORY_STAGES.get(s, np.nan) for s in sources], dtype=np.float64)
    return profiles, {"net_scale": scale, "net_measured": measured, LOGGED_STAGE_COLUMN: stage}

def measured_net_scale(network: pd.DataFrame, source: str) -> pd.Series:
    """Per ``run_id`` of ``network`` (microbenchmark rows the runs of ``source`` measured
    themselves): the run's ``net_scale`` under its cluster's shipped profile."""
    import pandas as pd

    fabric = load_profile(SOURCE_PROFILES[source]).fabric
    if fabric is None:
        return pd.Series(dtype=float)
    return run_scales(network, fabric)

def attach_net_scale(runs: pd.DataFrame, network: pd.DataFrame, source: str) -> pd.DataFrame:
    """``runs`` with a ``net_scale`` column for its rows of ``source`` that measured their
    network (NaN elsewhere: the profile's curve applies)."""
    scale = measured_net_scale(network, source)
    out = runs.copy()
    mine = out["source"] == source
    prior = out.get("net_scale", np.nan)
    out["net_scale"] = np.where(mine, out["run_id"].map(scale), prior)
    return out

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

PLAYBOOK_PATH = Path("sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv")
"""The Playbook sweep under the data directory (``surrogate.io.datasource.data_dir``)."""

def playbook_runs(data_dir: str | Path | None = None) -> pd.DataFrame:
    """The Playbook's runs, each with the network bandwidth it measured (``net_scale``)."""
    path = resolve_data_dir(data_dir) / PLAYBOOK_PATH
    if not path.exists():
        raise DataError(
            f"the Playbook sweep is not at {str(path)!r}: run `surrogate data fetch`, set "
            "SURROGATE_DATA_DIR, or pass --no-playbook with --sweeps"
        )
    return attach_net_scale(parse_playbook(path)[0], parse_playbook_network(path)[0], SOURCE)
