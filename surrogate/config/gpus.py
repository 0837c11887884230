"""The hardware table: one row per GPU, every number with its cited source.

Peaks are *dense* tensor-core throughputs (NVIDIA datasheets quote sparse figures at twice
these; we never use the sparse ones). Bandwidths are per GPU, per direction, in bytes/s:
NVLink figures in datasheets are bidirectional totals and are halved here; network figures
are the NIC line rate of one NIC per GPU (the usual 1:1 rail design of these systems).

Latencies are not datasheet figures: they are the defaults of the analytic model for a
collective's fixed cost (alpha), of the order that nccl-tests shows for small messages
(about 10 us inside an NVLink node, 20-30 us across nodes; see
``../shared/data/microbench/nccl-tests``). A calibration profile (``surrogate.hardware.profile``)
replaces them with fitted values.

Power limits (:attr:`GPUSpec.power_limit_w`): a part's datasheet peaks are quoted at its rated
board power (:attr:`GPUSpec.rated_power_w`). A part run below it (a data centre's cap, e.g.
``--gpu H100-SXM-80GB@500W``, or a part sold at a lower limit) sustains lower tensor-core clocks.
NVIDIA publishes no clock-versus-power curve for these parts, so the relation is an explicit
**assumption** (:func:`power_cap_scale`): dynamic power goes as C V^2 f and, near the top of
the voltage-frequency curve, the voltage follows the clock, so power goes as f^3 and the
sustained clock as (limit / rated)^(1/3) (:data:`POWER_CAP_EXPONENT`). Its range: the exponent
1 (the voltage at its floor: power proportional to the clock) bounds the loss from the other
side, so 500 W of 700 W sustains 0.714-0.894 of the clock; the model takes the upper end, the
better of the two for a GEMM-bound step whose board power sits near the limit. Only the tensor
throughput (GEMMs, attention) scales; HBM and link bandwidths do not. Caps from half the rated
power up to it are accepted; MFU stays measured against the datasheet peak.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from surrogate.errors import ConfigError

GIB = 2**30
"""Bytes in a GiB."""


@dataclass(frozen=True, kw_only=True)
class GPUSpec:
    """One GPU model as the analytic model sees it."""

    name: str
    """Canonical name, the key of the table (e.g. ``H100-SXM-80GB``)."""
    memory_gib: float
    """Device memory the driver exposes, GiB (2**30 bytes): ``nvidia-smi``'s total where known
    (H100 80GB: 81,559 MiB = 79.65 GiB), else the nominal capacity."""
    bf16_dense_flops: float
    """Dense BF16 tensor-core peak, FLOP/s. MFU is measured against this peak."""
    fp8_dense_flops: float | None
    """Dense FP8 tensor-core peak, FLOP/s; None where the GPU has no FP8 tensor cores."""
    hbm_bw_bytes_per_s: float
    """HBM bandwidth (memory-bound kernels: norms, activations, optimizer step)."""
    intra_node_bw_bytes_per_s: float
    """GPU-to-GPU bandwidth inside a node (NVLink, or PCIe where none), per direction."""
    inter_node_bw_bytes_per_s: float
    """Network bandwidth per GPU between nodes, per direction."""
    intra_node_latency_s: float = 10e-6
    """Default fixed cost of one intra-node collective step (model assumption, see module doc)."""
    inter_node_latency_s: float = 25e-6
    """Default fixed cost of one inter-node collective step (model assumption, see module doc)."""
    source: str = ""
    """Where the numbers come from."""
    sm_count: int | None = None
    """Streaming multiprocessors (the tensor-core clock the peak implies:
    :attr:`tensor_clock_mhz`); None where not recorded."""
    rated_power_w: float | None = None
    """Board power (maximum TDP) the datasheet peaks are quoted at; None where not recorded."""
    power_limit_w: float | None = None
    """Board power limit the part runs at; None or >= ``rated_power_w``: the datasheet's."""
    assumed: str = ""
    """Which figures of this entry are assumptions rather than datasheet values (flagged)."""
    profile_from: str | None = None
    """The GPU whose shipped calibration profile (measured GEMM, attention and collective
    speeds) this part takes by default: the same die on the same node design; None: its own,
    where one ships, else the datasheet."""

    @property
    def tensor_clock_mhz(self) -> float | None:
        """The clock the dense BF16 peak implies: peak / (SMs x 4,096 dense FLOP per clock per
        SM, Hopper's fourth-generation tensor cores; NVIDIA H100 Tensor Core GPU Architecture
        whitepaper, 2022); None without an SM count."""
        if self.sm_count is None:
            return None
        return self.bf16_dense_flops / (self.sm_count * 4096) / 1e6

    @property
    def sustained_scale(self) -> float:
        """Sustained tensor throughput under :attr:`power_limit_w` over the datasheet's
        (:func:`power_cap_scale`); 1 at the rated power or without a limit."""
        if self.power_limit_w is None or self.rated_power_w is None:
            return 1.0
        return power_cap_scale(self.power_limit_w, self.rated_power_w)

    @property
    def hopper(self) -> bool:
        """A Hopper part (H100, H200): where Transformer Engine prefers cuDNN's fused attention
        (``FrameworkTraits.hopper_attention_speedup``)."""
        return self.name.startswith(("H100-", "H200-"))

    def peak_flops(self, dtype: str) -> float:
        """Dense peak for ``dtype`` ('bf16' or 'fp8'); raises ConfigError if the GPU lacks it."""
        if dtype == "bf16":
            return self.bf16_dense_flops
        if dtype == "fp8":
            if self.fp8_dense_flops is None:
                raise ConfigError(
                    f"dtype 'fp8' needs a GPU with FP8 tensor cores, got gpu={self.name}"
                )
            return self.fp8_dense_flops
        raise ConfigError(f"dtype must be one of 'bf16', 'fp8', got {dtype!r}")


POWER_CAP_EXPONENT = 1 / 3
"""Sustained clock ~ (power limit / rated power) ** this: an assumption (module docstring),
range 1/3 (taken: voltage following the clock) to 1 (voltage at its floor)."""
MIN_POWER_FRACTION = 0.5
"""The lowest power limit accepted, as a fraction of the rated power: below it the assumed
relation is not claimed to hold."""


def power_cap_scale(limit_w: float, rated_w: float, exponent: float = POWER_CAP_EXPONENT) -> float:
    """Sustained tensor throughput at a power limit over the rated one: (limit / rated) **
    ``exponent``, 1 at or above the rated power (an assumption: module docstring)."""
    if limit_w >= rated_w:
        return 1.0
    return float((limit_w / rated_w) ** exponent)


_H100_SXM_SRC = (
    "NVIDIA H100 Tensor Core GPU datasheet (2023): SXM BF16 1,979 TFLOPS and FP8 3,958 TFLOPS "
    "with sparsity (dense: half), 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s bidirectional; DGX "
    "H100 datasheet: "
    "8x ConnectX-7 400 Gb/s, one per GPU"
)

GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec(
            name="H100-SXM-80GB",
            hbm_bw_bytes_per_s=3.35e12,
            memory_gib=81559 / 1024,
            bf16_dense_flops=989.4e12,
            fp8_dense_flops=1978.9e12,
            intra_node_bw_bytes_per_s=450e9,
            inter_node_bw_bytes_per_s=50e9,
            source=_H100_SXM_SRC + "; up to 700 W; 132 SMs (H100 architecture whitepaper)",
            sm_count=132,
            rated_power_w=700.0,
            power_limit_w=700.0,
        ),
        GPUSpec(
            name="H100-PCIe-80GB",
            hbm_bw_bytes_per_s=2.0e12,
            memory_gib=81559 / 1024,
            bf16_dense_flops=756.5e12,
            fp8_dense_flops=1513e12,
            intra_node_bw_bytes_per_s=64e9,
            inter_node_bw_bytes_per_s=50e9,
            source=(
                "NVIDIA H100 datasheet (2023): PCIe BF16 1,513 / FP8 3,026 TFLOPS with sparsity, "
                "80 GB HBM2e at 2.0 TB/s; PCIe Gen5 x16 128 GB/s bidirectional (NVLink bridges "
                "pair GPUs "
                "only, so a node-wide group is bounded by PCIe); 400 Gb/s NIC per GPU assumed; "
                "max TDP 300-350 W; 114 SMs (H100 architecture whitepaper)"
            ),
            sm_count=114,
            rated_power_w=350.0,
            power_limit_w=350.0,
        ),
        GPUSpec(
            name="H200-SXM-141GB",
            hbm_bw_bytes_per_s=4.8e12,
            memory_gib=141.0,
            bf16_dense_flops=989.4e12,
            fp8_dense_flops=1978.9e12,
            intra_node_bw_bytes_per_s=450e9,
            inter_node_bw_bytes_per_s=50e9,
            source=(
                "NVIDIA H200 Tensor Core GPU datasheet (2024): SXM BF16 1,979 / FP8 3,958 TFLOPS "
                "with sparsity, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s bidirectional; DGX "
                "H200: 8x 400 Gb/s; max TDP up to 700 W; the H100's GH100 die, 132 SMs"
            ),
            sm_count=132,
            rated_power_w=700.0,
            power_limit_w=700.0,
        ),
        GPUSpec(
            name="A100-SXM-40GB",
            hbm_bw_bytes_per_s=1.555e12,
            memory_gib=40.0,
            bf16_dense_flops=312e12,
            fp8_dense_flops=None,
            intra_node_bw_bytes_per_s=300e9,
            inter_node_bw_bytes_per_s=25e9,
            source=(
                "NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS dense, 40 GB HBM2 "
                "at 1,555 GB/s, "
                "NVLink 600 GB/s bidirectional; DGX A100: 8x HDR 200 Gb/s, one per GPU"
            ),
        ),
        GPUSpec(
            name="A100-SXM-80GB",
            hbm_bw_bytes_per_s=2.039e12,
            memory_gib=80.0,
            bf16_dense_flops=312e12,
            fp8_dense_flops=None,
            intra_node_bw_bytes_per_s=300e9,
            inter_node_bw_bytes_per_s=25e9,
            source=(
                "NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS dense, 80 GB "
                "HBM2e at 2,039 GB/s, NVLink 600 GB/s bidirectional; DGX A100 80GB: 8x HDR 200 Gb/s"
            ),
        ),
        GPUSpec(
            name="B200-SXM-180GB",
            hbm_bw_bytes_per_s=8.0e12,
            memory_gib=180.0,
            bf16_dense_flops=2250e12,
            fp8_dense_flops=4500e12,
            intra_node_bw_bytes_per_s=900e9,
            inter_node_bw_bytes_per_s=50e9,
            source=(
                "NVIDIA HGX B200 specifications (2024): BF16 4.5 / FP8 9 PFLOPS with sparsity "
                "(dense: half), 180 GB HBM3e per GPU in DGX B200 (1,440 GB for 8) at 8 TB/s, "
                "NVLink 5 "
                "1.8 TB/s bidirectional; DGX B200: 8x ConnectX-7 400 Gb/s"
            ),
        ),
        GPUSpec(
            name="H100-NVL-94GB",
            hbm_bw_bytes_per_s=3.9e12,
            memory_gib=94.0,
            bf16_dense_flops=835.5e12,
            fp8_dense_flops=1670.5e12,
            intra_node_bw_bytes_per_s=64e9,
            inter_node_bw_bytes_per_s=50e9,
            source=(
                "NVIDIA H100 NVL datasheet (2024): BF16 1,671 / FP8 3,341 TFLOPS with sparsity "
                "(dense: half), 94 GB HBM3 at 3.9 TB/s, max TDP 350-400 W, NVLink bridge "
                "600 GB/s bidirectional between a pair of GPUs, PCIe Gen5 128 GB/s "
                "bidirectional (a node-wide group is bounded by PCIe, as the PCIe H100's); "
                "132 SMs; 400 Gb/s NIC per GPU assumed"
            ),
            sm_count=132,
            rated_power_w=400.0,
            power_limit_w=400.0,
        ),
        GPUSpec(
            name="H200-NVL-141GB",
            hbm_bw_bytes_per_s=4.8e12,
            memory_gib=141.0,
            bf16_dense_flops=835.5e12,
            fp8_dense_flops=1670.5e12,
            intra_node_bw_bytes_per_s=64e9,
            inter_node_bw_bytes_per_s=50e9,
            source=(
                "NVIDIA H200 NVL datasheet (2024): BF16 1,671 / FP8 3,341 TFLOPS with sparsity "
                "(dense: half), 141 GB HBM3e at 4.8 TB/s, max TDP up to 600 W, NVLink bridge "
                "(2- or 4-way) 900 GB/s, PCIe Gen5 128 GB/s bidirectional (a node-wide group "
                "of more than four is bounded by PCIe); 132 SMs; 400 Gb/s NIC per GPU assumed"
            ),
            sm_count=132,
            rated_power_w=600.0,
            power_limit_w=600.0,
        ),
        GPUSpec(
            name="H100-SXM-96GB",
            hbm_bw_bytes_per_s=2.46e12,
            memory_gib=96.0,
            bf16_dense_flops=989.4e12,
            fp8_dense_flops=1978.9e12,
            intra_node_bw_bytes_per_s=450e9,
            inter_node_bw_bytes_per_s=50e9,
            source=(
                "the SXM5 H100 with 94-96 GB of HBM2e that Meta's training clusters run "
                "(pytorch/torchtitan docs/performance.md: 96 GB HBM2e, power limited to 500 W; "
                "--gpu H100-SXM-96GB@500W): the GH100 die of the 80 GB SXM5 part (its BF16 / "
                "FP8 peaks, 132 SMs, NVLink 4, one 400 Gb/s NIC per GPU)"
            ),
            sm_count=132,
            rated_power_w=700.0,
            power_limit_w=700.0,
            profile_from="H100-SXM-80GB",
            assumed=(
                "no NVIDIA datasheet: HBM bandwidth 2.46 TB/s assumed (six HBM2e stacks at the "
                "PCIe H100's 3.2 Gb/s per pin; range 2.0-3.35 TB/s); 96 GB nominal as the "
                "capacity; rated power 700 W as the 80 GB SXM5 part's"
            ),
        ),
    )
}

GPU_ALIASES: dict[str, str] = {
    "H100": "H100-SXM-80GB",
    "H100-SXM": "H100-SXM-80GB",
    "H100-80GB": "H100-SXM-80GB",
    "H100-PCIE": "H100-PCIe-80GB",
    "H200": "H200-SXM-141GB",
    "A100": "A100-SXM-80GB",
    "A100-40GB": "A100-SXM-40GB",
    "A100-80GB": "A100-SXM-80GB",
    "B200": "B200-SXM-180GB",
    "H100-NVL": "H100-NVL-94GB",
    "H200-NVL": "H200-NVL-141GB",
    "H100-96GB": "H100-SXM-96GB",
    "H100-94GB": "H100-SXM-96GB",
}


_CAP = re.compile(r"^(?P<base>.+?)\s*@\s*(?P<watts>[0-9]+(?:\.[0-9]+)?)\s*W$", re.IGNORECASE)


def _base_name(name: str) -> str:
    """The table key of a name without a power limit (a key or an alias, case-insensitive)."""
    by_upper = {k.upper(): k for k in GPUS}
    key = name.strip().upper()
    if key in by_upper:
        return by_upper[key]
    if key in GPU_ALIASES:
        return GPU_ALIASES[key]
    known = ", ".join(sorted(GPUS))
    raise ConfigError(
        f"gpu must be one of {known} (or an alias such as H100), got {name!r} "
        f"(a power limit: NAME@WATTSW, e.g. H100-SXM-80GB@500W)"
    )


def canonical_gpu_name(name: str) -> str:
    """The table key for ``name`` (a key or an alias, case-insensitive), with its power limit
    where one is given (``H100@500w`` -> ``H100-SXM-80GB@500W``; the part's own limit or more
    is no limit, and drops). ConfigError for an unknown GPU or a limit outside
    :data:`MIN_POWER_FRACTION` of the rated power up to it."""
    m = _CAP.match(name.strip())
    if m is None:
        return _base_name(name)
    base = _base_name(m.group("base"))
    watts = float(m.group("watts"))
    spec = GPUS[base]
    if spec.rated_power_w is None:
        raise ConfigError(
            f"a power limit needs the GPU's rated power, which the table does not "
            f"record for {base}, got {name!r}"
        )
    lowest = MIN_POWER_FRACTION * spec.rated_power_w
    if watts < lowest:
        raise ConfigError(
            f"the power limit of {base} must be at least {lowest:g} W (half its "
            f"rated {spec.rated_power_w:g} W: the assumed clock-power relation is "
            f"not claimed below), got {watts:g} W"
        )
    if watts >= spec.rated_power_w:
        return base
    return f"{base}@{watts:g}W"


@functools.cache
def _capped(name: str) -> GPUSpec:
    base, _, watts = name.partition("@")
    return replace(GPUS[base], power_limit_w=float(watts.rstrip("W")))


def get_gpu(name: str) -> GPUSpec:
    """The :class:`GPUSpec` for ``name``; raises ConfigError naming the known GPUs. A power
    limit (``NAME@WATTSW``) gives the part's spec under that limit: same name, peaks and
    bandwidths, :attr:`GPUSpec.power_limit_w` set (its :attr:`GPUSpec.sustained_scale` is what
    the hardware model applies, ``surrogate.hardware.perf_models``)."""
    key = canonical_gpu_name(name)
    return _capped(key) if "@" in key else GPUS[key]
