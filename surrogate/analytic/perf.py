"""How fast the hardware runs what a training step is made of: GEMMs, flash attention and
collectives.

The analytic model asks a :class:`PerfModel`. :class:`SpecPerfModel` answers from the hardware
table alone (datasheet bandwidths, one assumed GEMM efficiency, no attention figure); a
calibration profile fitted to microbenchmarks (``surrogate.profile``) answers from
measurements.

Collective sizes follow the nccl-tests conventions (NVIDIA/nccl-tests doc/PERFORMANCE.md):
``size_bytes`` is the buffer of one rank (all_reduce, broadcast, send_recv) or the *total*
gathered/scattered buffer (all_gather output, reduce_scatter input, all_to_all buffer);
algbw = size / time and busbw = algbw x factor, factor 2(n-1)/n for all_reduce, (n-1)/n for
all_gather, reduce_scatter and all_to_all, 1 for broadcast and send_recv. With a ring the
time is therefore latency + size x factor / link bandwidth.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal, Protocol

import numpy as np

from surrogate.analytic.inputs import Array, Cols

CollectiveOp = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"
]
COLLECTIVE_OPS: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "send_recv",
)


def bus_factor(op: str, group_size: Array | float) -> Array:
    """nccl-tests busbw / algbw factor of ``op`` for groups of ``group_size`` ranks."""
    n = np.asarray(group_size, dtype=np.float64)
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "send_recv"):
        return np.ones_like(n)
    raise ValueError(f"op must be one of {', '.join(COLLECTIVE_OPS)}, got {op!r}")


CEILING_SIDES = np.array([1024.0, 2048.0, 4096.0, 8192.0, 16384.0])
"""GEMM sides whose shapes (every m, n, k among them: square to slab) the MFU ceiling takes the
best efficiency of (``surrogate.analytic.run.mfu_ceiling``)."""


def best_gemm_efficiency(perf: PerfModel) -> float:
    """The highest GEMM efficiency ``perf`` gives over the shapes of :data:`CEILING_SIDES`, in
    bf16 (what a PerfModel's ``best_gemm_efficiency`` holds, computed once per model)."""
    m, n, k = (a.ravel() for a in np.meshgrid(CEILING_SIDES, CEILING_SIDES, CEILING_SIDES))
    return float(np.max(perf.gemm_efficiency(m, n, k, {})))


def ring_steps(op: str, group_size: Array | float) -> Array:
    """Latency-bound steps of a ring implementation: 2(n-1) for all_reduce, n-1 otherwise."""
    n = np.asarray(group_size, dtype=np.float64)
    if op == "all_reduce":
        return 2 * (n - 1)
    if op in ("broadcast", "send_recv"):
        return np.ones_like(n)
    return n - 1


def nic_share(op: str, group_size: Array | float, ranks_per_node: Array | float) -> Array:
    """How many times longer a group spanning nodes takes on the network than a ring over its
    ``g = ranks_per_node`` NICs a node: g (N - g) / (N - 1) for all_to_all, 1 for the rest.

    A ring's inter-node bytes per rank are size x bus_factor spread over the node's g NICs
    (one ring channel per NIC). An all-to-all is pairwise: NCCL has no all-to-all kernel, and
    nccl-tests' ``alltoall`` (src/alltoall.cu, as NCCL's docs' point-to-point example) posts
    one ``ncclSend`` and ``ncclRecv`` per peer in a group, so each of the node's g ranks sends
    size x (N - g) / N to the ranks of other nodes, and the node's g NICs (one a GPU on a DGX
    H100: eight ConnectX-7 at 400 Gb/s) carry g times that, each at its own rate, whichever
    GPU's NIC a send leaves by. Bounded: 1 with one rank a node (g = 1, or N = g + 1), g as N
    grows; the NVLink share, size x (g - 1) / N, leaves meanwhile and is shorter."""
    n = np.asarray(group_size, dtype=np.float64)
    if op != "all_to_all":
        return np.ones_like(n)
    g = np.maximum(np.asarray(ranks_per_node, dtype=np.float64), 1.0)
    share = g * (n - g) / np.maximum(n - 1.0, 1.0)
    return np.asarray(np.clip(share, 1.0, g), dtype=np.float64)


class PerfModel(Protocol):
    """What the analytic model needs to know of the hardware's speed."""

    name: str
    """Shown by ``surrogate predict`` (which profile, or 'datasheet')."""

    @property
    def best_gemm_efficiency(self) -> float:
        """:func:`best_gemm_efficiency` of this model, computed once (the MFU ceiling's)."""
        ...

    def gemm_efficiency(self, m: Array, n: Array, k: Array, c: Cols) -> Array:
        """Achieved / dense-peak FLOP/s of an (m x k) @ (k x n) GEMM in the config's dtype."""
        ...

    def attention_efficiency(
        self, rows: Array, seq: Array, head_dim: Array, c: Cols
    ) -> Array | None:
        """Measured efficiency of causal flash attention, forward + backward, at the full
        (non-causal) FLOP count, for ``rows`` query rows x heads of one rank attending over
        ``seq`` keys with heads of ``head_dim``; None where nothing was measured (the analytic
        model then takes a GEMM proxy)."""
        ...

    def collective_time_s(
        self,
        op: str,
        size_bytes: Array,
        group_size: Array,
        inter_node: Array,
        c: Cols,
        ranks_per_node: Array | None = None,
    ) -> Array:
        """Seconds for one ``op`` of ``size_bytes`` over ``group_size`` ranks; ``inter_node``
        (0/1) says whether the group spans nodes, ``ranks_per_node`` how many of its ranks
        share a node (None: as many as fit, up to the node's GPUs). Zero where
        group_size <= 1."""
        ...


def local_ranks(group_size: Array, c: Cols, ranks_per_node: Array | None) -> Array:
    """``ranks_per_node`` or, when not given, the group packed into nodes of
    ``gpus_per_node`` (8 when the columns do not say)."""
    if ranks_per_node is not None:
        return np.asarray(ranks_per_node, dtype=np.float64)
    g = np.asarray(c.get("gpus_per_node", 8.0), dtype=np.float64)
    return np.asarray(np.minimum(np.asarray(group_size, dtype=np.float64), g), dtype=np.float64)


class SpecPerfModel:
    """Datasheet figures: a ring over the slowest link, with a fixed GEMM efficiency.

    Across nodes the slowest link of a ring is the network, and a group with g ranks on each
    node drives g NICs in parallel (NCCL runs one ring channel per NIC), so its bus bandwidth
    is g x the per-GPU network rate, at most the NVLink rate.

    ``gemm_efficiency_frac`` = 0.70 is an assumption (well-shaped BF16 GEMMs on Hopper reach
    roughly 70-80% of the dense peak; see the XLA tables in ``../shared/data/microbench/xla``);
    a calibration profile replaces it with measured, shape-dependent values.
    """

    name = "datasheet"

    def __init__(self, gemm_efficiency_frac: float = 0.70) -> None:
        self.gemm_efficiency_frac = gemm_efficiency_frac

    @cached_property
    def best_gemm_efficiency(self) -> float:
        return best_gemm_efficiency(self)

    def gemm_efficiency(self, m: Array, n: Array, k: Array, c: Cols) -> Array:
        return np.full(np.broadcast(m, n, k).shape, self.gemm_efficiency_frac)

    def attention_efficiency(
        self, rows: Array, seq: Array, head_dim: Array, c: Cols
    ) -> Array | None:
        return None  # no datasheet figure for attention kernels

    def collective_time_s(
        self,
        op: str,
        size_bytes: Array,
        group_size: Array,
        inter_node: Array,
        c: Cols,
        ranks_per_node: Array | None = None,
    ) -> Array:
        g = local_ranks(group_size, c, ranks_per_node)
        network = np.minimum(
            g * c["inter_node_bw"] / nic_share(op, group_size, g), c["intra_node_bw"]
        )
        bw = np.where(inter_node > 0, network, c["intra_node_bw"])
        lat = np.where(inter_node > 0, c["inter_node_latency_s"], c["intra_node_latency_s"])
        t = ring_steps(op, group_size) * lat + size_bytes * bus_factor(op, group_size) / bw
        return np.where(group_size > 1, t, 0.0)
