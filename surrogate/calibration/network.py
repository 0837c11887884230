"""The network of the day: a collective measured before a job, as an input to prediction.

A cluster's profile holds the median inter-node bandwidth at each node count
(``surrogate.hardware.fabric``), but a job sees its own: the Playbook's runs at one node count
measured anywhere from 26 to 199 GB/s of all-reduce bus bandwidth at their start. A user can
measure it before a launch (an nccl-tests ``all_reduce_perf`` over the job's nodes, a minute)
and predict under it: ``--network`` of ``predict``, ``search`` and ``propose`` takes

- the path of an nccl-tests log (``surrogate.ingest.nccl_tests``; its node count is the
  number of hosts its rank lines name), or
- a measured all-reduce bus bandwidth at the job's node count, in GB/s (1e9 B/s, nccl-tests'
  unit): ``120GBps``, ``120GB/s`` or ``120gbps``.

The measurement becomes a scale of the profile's curve exactly as a Playbook run's start-up
measurement does in training: :func:`surrogate.hardware.fabric.run_scales` (the geometric
mean of measured efficiency / the curve at the measurement's node count, over the
bandwidth-bound all-reduce rows, messages >= 64 MiB), then
:meth:`surrogate.hardware.fabric.Fabric.time_s` multiplies every inter-node efficiency by it
(a training run's ``net_scale`` column; here the fabric's own ``net_scale``). Without
``--network`` nothing changes: the profile's curve (scale 1).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.perf import bus_factor
from surrogate.errors import ConfigError, DataError
from surrogate.hardware.fabric import MIN_BANDWIDTH_BYTES, run_scales
from surrogate.hardware.perf_models import resolve_perf_model
from surrogate.hardware.profile import CalibrationProfile

if TYPE_CHECKING:
    import pandas as pd

BUSBW = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*gb(?:ps|/s)\s*$", re.IGNORECASE)
"""A bus bandwidth in GB/s as ``--network`` takes it (``120GBps``, ``120 GB/s``)."""
MESSAGE_BYTES = 256 * 2**20
"""The message a bandwidth given as a number stands for (the Playbook's start-up check, and
``surrogate.ingest.playbook_network``'s rows): large enough that latency is negligible."""


@dataclass(frozen=True)
class Network:
    """A measured inter-node all-reduce, and the scale of the profile's curve it gives."""

    busbw_gbps: float
    """The all-reduce bus bandwidth measured (GB/s; an nccl-tests log: the geometric mean
    over its bandwidth-bound rows)."""
    nodes: int
    """The node count it was measured at."""
    scale: float
    """Measured over the profile's curve at that node count (``run_scales``)."""
    profile_gbps: float
    """The profile's all-reduce bus bandwidth at that node count."""
    source: str
    """Where it came from: the log's path, or the value as given."""

    def describe(self) -> str:
        """``measured: X GB/s all-reduce busbw at N nodes (x S of the profile's Y GB/s)``."""
        return (
            f"measured: {self.busbw_gbps:.1f} GB/s all-reduce busbw at {self.nodes} nodes "
            f"(x{self.scale:.2f} of the profile curve's {self.profile_gbps:.1f} GB/s; "
            f"{self.source})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "assumed": "measured",
            "busbw_gbps": self.busbw_gbps,
            "nodes": self.nodes,
            "scale": self.scale,
            "profile_busbw_gbps": self.profile_gbps,
            "source": self.source,
        }


def profile_network(profile: Any, nodes: int, gpus_per_node: int) -> dict[str, Any]:
    """What a prediction without ``--network`` assumes: the profile's curve, and its
    all-reduce bus bandwidth at ``nodes`` (None where the profile has no inter-node curve or
    the job is one node), with the spread the cluster's runs measured at that node count
    where the profile records it (``measured_spread``, ``Fabric.spread``)."""
    fabric = getattr(profile, "fabric", None)
    gbps = None
    out: dict[str, Any] = {"assumed": "profile curve", "busbw_gbps": gbps, "nodes": nodes}
    if fabric is not None and nodes >= 2:
        out["busbw_gbps"] = (
            float(
                gpus_per_node
                * fabric.nic_bw_bytes_per_s
                * fabric.efficiency("all_reduce", np.array([float(nodes)]))[0]
            )
            / 1e9
        )
        if float(nodes) in fabric.spread:  # the cluster's measured spread there
            out["measured_spread"] = dict(fabric.spread[float(nodes)])
    return out


def describe_profile_network(profile: Any, nodes: int, gpus_per_node: int) -> str:
    """``profile curve (X GB/s all-reduce busbw at N nodes)``."""
    d = profile_network(profile, nodes, gpus_per_node)
    if d["busbw_gbps"] is None:
        return "profile curve"
    spread = ""
    if "measured_spread" in d:
        q = d["measured_spread"]
        spread = (
            f"; the cluster's runs measured {q['p10_gbps']:.0f}-{q['p90_gbps']:.0f} GB/s "
            f"there, 10th-90th percentile of {q['runs']:.0f}: --network gives yours"
        )
    return f"profile curve ({d['busbw_gbps']:.1f} GB/s all-reduce busbw at {nodes} nodes{spread})"


def busbw_rows(
    busbw_gbps: float, nodes: int, gpus_per_node: int, run_id: str = "given"
) -> pd.DataFrame:
    """One all-reduce over ``nodes`` x ``gpus_per_node`` GPUs of :data:`MESSAGE_BYTES` at bus
    bandwidth ``busbw_gbps``, as microbenchmark rows (the columns ``run_scales`` reads, as
    ``surrogate.ingest.playbook_network`` writes them)."""
    import pandas as pd

    group = float(nodes * gpus_per_node)
    busbw = busbw_gbps * 1e9
    algbw = busbw / float(bus_factor("all_reduce", group))
    return pd.DataFrame(
        {
            "op": ["all_reduce"],
            "size_bytes": [float(MESSAGE_BYTES)],
            "group_size": [group],
            "nodes": [float(nodes)],
            "time_s": [MESSAGE_BYTES / algbw],
            "busbw_bytes_per_s": [busbw],
            "run_id": [run_id],
        }
    )


def measure(
    text: str | Path,
    profile: CalibrationProfile,
    *,
    nodes: int,
    gpus_per_node: int,
    flag: str = "--network",
) -> Network:
    """The :class:`Network` that ``--network text`` gives under ``profile`` for a job of
    ``nodes`` x ``gpus_per_node`` GPUs. ConfigError for a value that is neither a bandwidth
    nor a file, a job of one node, or a profile without an inter-node curve; DataError for a
    log that measured no inter-node all-reduce of >= 64 MiB."""
    fabric = profile.fabric
    if fabric is None:
        raise ConfigError(
            f"{flag} scales the calibration profile's inter-node curve, and profile "
            f"{profile.name!r} has none: give a --profile measured across nodes (e.g. "
            "hf-playbook-cluster, or `surrogate calibrate` with multi-node nccl-tests logs)"
        )
    if nodes < 2:
        raise ConfigError(
            f"{flag} measures the network between nodes, and the job runs on "
            f"{nodes} node: drop {flag}, or give --nodes 2 or more"
        )
    s = str(text)
    m = BUSBW.match(s)
    if m is not None:
        gbps = float(m.group(1))
        if not gbps > 0:
            raise ConfigError(f"{flag} must be a positive bus bandwidth, got {s!r}")
        rows = busbw_rows(gbps, nodes, gpus_per_node)
        at, source = nodes, f"--network {s.strip()}"
    elif Path(s).is_file():
        # here, not at the top: the ingest package's readers, only for a log
        from surrogate.ingest.nccl_tests import parse_nccl_tests

        try:
            table, _ = parse_nccl_tests(s)
        except DataError as e:  # no op named in the file: all_reduce_perf, as documented
            if "cannot tell which collective" not in str(e):
                raise
            table, _ = parse_nccl_tests(s, op="all_reduce")
        rows = table[
            (table["op"] == "all_reduce")
            & (table["nodes"] >= 2)
            & (table["size_bytes"] >= MIN_BANDWIDTH_BYTES)
        ]
        if rows.empty:
            raise DataError(
                f"{flag} {s}: no all-reduce across nodes with messages of 64 MiB or more "
                "(run all_reduce_perf over the job's nodes, e.g. -b 64M -e 1G)"
            )
        rows = rows.assign(run_id="log")
        at = int(rows["nodes"].iloc[0])
        gbps = float(np.exp(np.log(rows["busbw_bytes_per_s"]).mean())) / 1e9
        source = f"nccl-tests log {s}"
    else:
        raise ConfigError(
            f"{flag} must be an nccl-tests all_reduce_perf log (a file) or a measured "
            f"all-reduce bus bandwidth at the job's node count such as 120GBps, got {s!r}"
        )
    scale = float(run_scales(rows, fabric).iloc[0])
    local = float(rows["group_size"].iloc[0]) / at
    expected = (
        local
        * fabric.nic_bw_bytes_per_s
        * float(fabric.efficiency("all_reduce", np.array([float(at)]))[0])
        / 1e9
    )
    return Network(busbw_gbps=gbps, nodes=at, scale=scale, profile_gbps=expected, source=source)


def under_network(profile: CalibrationProfile, network: Network) -> CalibrationProfile:
    """``profile`` with its inter-node curve scaled by ``network`` (the fabric's
    ``net_scale``); its name, and so the parameter sets scoped to it, unchanged."""
    assert profile.fabric is not None  # measure() said so
    return dataclasses.replace(
        profile, fabric=dataclasses.replace(profile.fabric, net_scale=network.scale, measured=True)
    )


def scaled_profile(profile: Any, gpu: str, scale: float | None) -> Any:
    """``profile`` (as ``surrogate.predict`` takes it) under a network ``scale`` recorded
    earlier (a round's ``network_scale``): unchanged where ``scale`` is None."""
    if scale is None:
        return profile
    resolved = resolve_perf_model(gpu, profile)
    fabric = resolved.fabric if isinstance(resolved, CalibrationProfile) else None
    if fabric is None or not isinstance(resolved, CalibrationProfile):
        raise ConfigError(
            f"a network scale needs a profile with an inter-node curve; {resolved.name!r} has none"
        )
    return dataclasses.replace(
        resolved, fabric=dataclasses.replace(fabric, net_scale=scale, measured=True)
    )


__all__ = [
    "BUSBW",
    "MESSAGE_BYTES",
    "Network",
    "busbw_rows",
    "describe_profile_network",
    "measure",
    "profile_network",
    "scaled_profile",
    "under_network",
]
