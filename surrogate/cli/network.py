"""``--network`` of ``predict``, ``search`` and ``propose``: the profile a job is predicted
under, put under the network measured before it (``surrogate.calibration.network``), and the
line that says which network a prediction assumed."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def under_network(
    network: str | None,
    profile: Path | None,
    gpu: str,
    node_counts: tuple[int, ...] | list[int],
    gpus_per_node: int,
) -> tuple[Any, dict[str, Any], str]:
    """(the profile to predict with, what it assumes as JSON, the line saying so).

    Without ``network``: ``profile`` unchanged (the predictions are exactly those without the
    option) and the profile's curve. With it: the profile ``profile`` names (else ``gpu``'s
    default) with its inter-node curve scaled by the measurement
    (``surrogate.calibration.network.measure``). A bandwidth given as a number is measured at
    one node count: ConfigError for a search over several."""
    from surrogate.calibration.network import (
        BUSBW,
        describe_profile_network,
        measure,
        profile_network,
    )
    from surrogate.calibration.network import under_network as scaled
    from surrogate.errors import ConfigError
    from surrogate.hardware.perf_models import resolve_perf_model

    resolved = resolve_perf_model(gpu, profile)
    nodes = max(node_counts)
    if network is None:
        if len(set(node_counts)) > 1:
            return profile, {"assumed": "profile curve"}, "network: profile curve"
        return (
            profile,
            profile_network(resolved, nodes, gpus_per_node),
            "network: " + describe_profile_network(resolved, nodes, gpus_per_node),
        )
    if BUSBW.match(network) and len(set(node_counts)) > 1:
        raise ConfigError(
            f"--network {network} is a bandwidth at one node count, and the search spans "
            f"{', '.join(str(n) for n in sorted(set(node_counts)))} nodes: give one --nodes, "
            "or an nccl-tests log (it names its node count)"
        )
    from surrogate.hardware.profile import CalibrationProfile

    if not isinstance(resolved, CalibrationProfile):
        raise ConfigError(
            f"--network scales the calibration profile's inter-node curve, and {gpu} has no "
            "calibration profile: give --profile (e.g. hf-playbook-cluster, or one from "
            "`surrogate calibrate`)"
        )
    measured = measure(network, resolved, nodes=nodes, gpus_per_node=gpus_per_node)
    return scaled(resolved, measured), measured.to_dict(), "network: " + measured.describe()
