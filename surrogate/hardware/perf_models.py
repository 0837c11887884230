"""The hardware model of a GPU for the analytic model: a calibration profile read from a file,
the GPU's default profile where one ships, else the datasheet
(:class:`~surrogate.analytic.perf.SpecPerfModel`)."""

from __future__ import annotations

from pathlib import Path

from surrogate.analytic.perf import PerfModel, SpecPerfModel


def resolve_perf_model(gpu: str, profile: str | Path | PerfModel | None = None) -> PerfModel:
    """The PerfModel for ``gpu``: ``profile`` (a path or an object) if given, else the GPU's
    default calibration profile if one ships, else the datasheet."""
    if profile is not None and not isinstance(profile, str | Path):
        return profile
    try:
        from surrogate.hardware import profile as profiles
    except ImportError:  # calibration not installed: datasheet figures
        return SpecPerfModel()
    if profile is not None:
        loaded: PerfModel = profiles.load_profile(profile)
        return loaded
    default: PerfModel | None = profiles.default_profile(gpu)
    return default if default is not None else SpecPerfModel()
