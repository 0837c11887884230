"""The hardware model of a GPU for the analytic model: a calibration profile read from a file,
the GPU's default profile where one ships, else the datasheet
(:class:`~surrogate.analytic.perf.SpecPerfModel`)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from surrogate.analytic.inputs import Array, Cols
from surrogate.analytic.perf import PerfModel, SpecPerfModel, best_gemm_efficiency
from surrogate.config.gpus import POWER_CAP_EXPONENT, canonical_gpu_name, get_gpu
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
        if canonical_gpu_name(loaded.gpu) != get_gpu(gpu).name:
            raise ConfigError(
                f"calibration profile {str(profile)!r} was measured on {loaded.gpu}, but the "
                f"configuration runs on {canonical_gpu_name(gpu)}: give a profile of that GPU "
                f"(surrogate calibrate), or no profile for the GPU's default"
            )
        return loaded
    spec = get_gpu(gpu)
    default: PerfModel | None = profiles.default_profile(spec.profile_from or spec.name)
    base = default if default is not None else SpecPerfModel()
    if spec.sustained_scale < 1:
        return PowerCapped(base, spec.sustained_scale, float(spec.power_limit_w or 0))
    return base


class PowerCapped:
    """A GPU's default hardware model under a power limit below its rated power: GEMM and
    attention efficiencies times the sustained clock ratio (``surrogate.config.gpus``:
    :func:`~surrogate.config.gpus.power_cap_scale`, an assumption); collectives and memory
    bandwidth as the base model's. A profile a user gives is not scaled: it measured its
    machine as that machine runs, power limit included."""

    def __init__(self, base: PerfModel, scale: float, watts: float) -> None:
        self.base = base
        self.scale = scale
        self.name = (
            f"{base.name}; at {watts:g} W: tensor throughput x{scale:.3f} (assumed "
            f"sustained clock ~ power^{POWER_CAP_EXPONENT:.2f})"
        )

    def __str__(self) -> str:
        return self.name

    @cached_property
    def best_gemm_efficiency(self) -> float:
        return best_gemm_efficiency(self)

    def gemm_efficiency(self, m: Array, n: Array, k: Array, c: Cols) -> Array:
        return self.base.gemm_efficiency(m, n, k, c) * self.scale

    def attention_efficiency(
        self, rows: Array, seq: Array, head_dim: Array, c: Cols
    ) -> Array | None:
        eff = self.base.attention_efficiency(rows, seq, head_dim, c)
        return None if eff is None else eff * self.scale

    def collective_time_s(
        self,
        op: str,
        size_bytes: Array,
        group_size: Array,
        inter_node: Array,
        c: Cols,
        ranks_per_node: Array | None = None,
    ) -> Array:
        return self.base.collective_time_s(
            op, size_bytes, group_size, inter_node, c, ranks_per_node
        )
