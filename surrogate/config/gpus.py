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
"""

from __future__ import annotations

from dataclasses import dataclass

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
            source=_H100_SXM_SRC,
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
                "only, so a node-wide group is bounded by PCIe); 400 Gb/s NIC per GPU assumed"
            ),
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
                "H200: 8x 400 Gb/s"
            ),
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
}


def canonical_gpu_name(name: str) -> str:
    """The table key for ``name`` (a key or an alias, case-insensitive)."""
    by_upper = {k.upper(): k for k in GPUS}
    key = name.strip().upper()
    if key in by_upper:
        return by_upper[key]
    if key in GPU_ALIASES:
        return GPU_ALIASES[key]
    known = ", ".join(sorted(GPUS))
    raise ConfigError(f"gpu must be one of {known} (or an alias such as H100), got {name!r}")


def get_gpu(name: str) -> GPUSpec:
    """The :class:`GPUSpec` for ``name``; raises ConfigError naming the known GPUs."""
    return GPUS[canonical_gpu_name(name)]
