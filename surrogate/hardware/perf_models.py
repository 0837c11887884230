"""The hardware model of a GPU for the analytic model: a calibration profile read from a file,
the GPU's default profile where one ships, else the datasheet
(:class:`~surrogate.analytic.perf.SpecPerfModel`)."""

from __future__ import annotations

from pathlib import Path

from surrogate.analytic.perf import PerfModel, SpecPerfModel
from surrogate.config.gpus import canonical_gpu_name
from surrogate.errors import ConfigError
from surrogate.hardware import profile as profiles


def resolve_perf_model(gpu: str, profile: str | Path | PerfModel | None = None) -> PerfModel:
    """The PerfModel for ``gpu``: ``profile`` (a path, a shipped profile's name or an object)
    if given, else the GPU's default calibration profile if one ships, else the datasheet.
    ConfigError if a profile read by name or path was measured on another GPU."""
    if profile is not None and not isinstance(profile, str | Path):
        return profile
    if profile is not None:
        loaded = profiles.load_profile(profile)
        if canonical_gpu_name(loaded.gpu) != canonical_gpu_name(gpu):
            raise ConfigError(
                f"calibration profile {str(profile)!r} was measured on {loaded.gpu}, but the "
                f"configuration runs on {canonical_gpu_name(gpu)}: give a profile of that GPU "
                f"(surrogate calibrate), or no profile for the GPU's default")
        return loaded
    default: PerfModel | None = profiles.default_profile(gpu)
    return default if default is not None else SpecPerfModel()
