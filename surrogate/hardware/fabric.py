"""The network between nodes as a function of scale: fabric efficiency per collective.

A group of ``N`` ranks that spans ``n`` nodes with ``g = N / n`` of its ranks on each node moves
its inter-node bytes over ``g`` NICs per node. NCCL's rings (and trees) are then limited by
those NICs, so the bus bandwidth of a healthy non-blocking fabric is about ``g x NIC rate``,
independent of ``n`` (NVIDIA/nccl-tests doc/PERFORMANCE.md: busbw is the figure comparable
across scales). Real fabrics lose some of it, and some lose more as the job grows (congestion,
oversubscribed spines, adaptive routing limits). That loss is measured, not assumed:

    time = latency(n) + size x bus_factor(op, N) / (g x nic_bw x efficiency(op, n))

``efficiency(op, n)`` is a :class:`ScaleCurve`: the median of measured bus bandwidth over the
ideal ``g x nic_bw`` at each measured node count (messages of at least
:data:`MIN_BANDWIDTH_BYTES`, where latency is negligible), log-log interpolated between them,
and beyond the largest measured node count one of :data:`LAWS`, chosen by how well each
predicts held-out larger node counts from smaller ones (rolling origin; the scores are kept in
the curve). With fewer than three measured node counts there is nothing to choose on, and the
law is ``flat`` (the non-blocking ideal: efficiency holds). Below the smallest measured count
the smallest's value holds. ``latency(n)`` grows with log2 of the node count, as a tree's
depth (NCCL uses trees for latency-bound all-reduce), from ``latency_s`` at 2 nodes.

An all_to_all is pairwise, not a ring: each rank's rows for other nodes leave by its own NIC,
so its time is that of the formula times g (N - g) / (N - 1) (:func:`~surrogate.analytic.perf.
nic_share`; 1 with one rank a node, up to g). Ops without a curve of their own use the
all_reduce curve (labelled ``extrapolated``).
A per-configuration column ``net_scale``, if present, multiplies the efficiency: training uses
it to explain a run with the bandwidth that run itself measured. Without the column the
fabric's own ``net_scale`` (default 1) does: a profile put under the network a user measured
before a job (``surrogate.calibration.network``), the same scale of the same measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from surrogate.analytic.inputs import Array, Cols
from surrogate.analytic.perf import bus_factor, nic_share
from surrogate.errors import DataError

if TYPE_CHECKING:
    import pandas as pd

MIN_BANDWIDTH_BYTES = 64 * 2**20
"""Messages at least this large measure bandwidth (latency < a few % of their time)."""
LAWS: tuple[str, ...] = ("flat", "power", "ring_latency", "tree_latency")
"""Extrapolation laws of efficiency beyond the largest measured node count:

- ``flat``: efficiency(n) = a (non-blocking fabric, bandwidth-bound rings);
- ``power``: a n^-b, b >= 0 (a fabric that degrades by a constant factor per doubling);
- ``ring_latency``: 1 / efficiency = a + b (n - 1), b >= 0 (a per-node cost that grows with
  the ring's length, e.g. serialised hops or incast);
- ``tree_latency``: 1 / efficiency = a + b log2 n, b >= 0 (a cost that grows with tree depth).
"""
Provenance = Literal["measured", "extrapolated"]


def _fit_law(law: str, n: Array, eff: Array) -> tuple[float, ...]:
    """Least-squares parameters of ``law`` on (node count, efficiency) points."""
    if law == "flat" or len(n) < 2:
        return (float(np.exp(np.mean(np.log(eff)))), 0.0)
    if law == "power":
        b, _ = np.polyfit(np.log(n), np.log(eff), 1)
        b = min(float(b), 0.0)
        a = float(np.exp(np.mean(np.log(eff) - b * np.log(n))))
        return (a, -b)
    x = n - 1 if law == "ring_latency" else np.log2(n)
    slope, icept = np.polyfit(x, 1 / eff, 1)
    if slope < 0:
        return (float(1 / np.mean(1 / eff)), 0.0)
    return (float(icept), float(slope))


def _eval_law(law: str, params: tuple[float, ...], n: Array) -> Array:
    a, b = params[0], params[1]
    n = np.asarray(n, dtype=np.float64)
    if law == "flat":
        return np.full(n.shape, a)
    if law == "power":
        return np.asarray(a * n ** (-b), dtype=np.float64)
    x = n - 1 if law == "ring_latency" else np.log2(n)
    inv = a + b * x
    return np.asarray(1 / np.maximum(inv, 1e-9), dtype=np.float64)


def law_scores(n: Array, eff: Array) -> dict[str, float]:
    """Mean |log(predicted / measured)| of each law forecasting every larger node count from
    the smaller ones (fit on the first k counts, k >= 2, predict the rest). Empty with fewer
    than three node counts."""
    if len(n) < 3:
        return {}
    out: dict[str, float] = {}
    for law in LAWS:
        errs: list[float] = []
        for k in range(2, len(n)):
            p = _fit_law(law, n[:k], eff[:k])
            # anchored at the last fitted point, as the curve is
            anchor = eff[k - 1] / _eval_law(law, p, n[k - 1 : k])[0]
            pred = _eval_law(law, p, n[k:]) * anchor
            errs.extend(np.abs(np.log(pred / eff[k:])).tolist())
        out[law] = float(np.mean(errs))
    return out


@dataclass(frozen=True, kw_only=True, eq=False)
class ScaleCurve:
    """Fabric efficiency of one op against the number of nodes its group spans."""

    op: str
    nodes: Array
    """Measured node counts (>= 2), increasing."""
    efficiency: Array
    """Median measured busbw / (g x nic_bw) at each node count."""
    points: Array
    """Measurements behind each median."""
    law: str
    law_params: tuple[float, ...]
    law_scores: dict[str, float] = field(default_factory=dict)
    provenance: Provenance = "measured"
    derived_from: str = ""

    def __call__(self, nodes: Array) -> Array:
        n = np.maximum(np.asarray(nodes, dtype=np.float64), 1.0)
        ln, le = np.log(self.nodes), np.log(self.efficiency)
        inside = np.exp(np.interp(np.log(n), ln, le))  # the edge value below the first count
        last = self.nodes[-1]
        anchor = self.efficiency[-1] / _eval_law(self.law, self.law_params, np.array([last]))[0]
        beyond = _eval_law(self.law, self.law_params, n) * anchor
        return np.clip(np.where(n > last, beyond, inside), 1e-4, 1.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "provenance": self.provenance,
            "derived_from": self.derived_from,
            "nodes": [float(x) for x in self.nodes],
            "efficiency": [float(f"{x:.6g}") for x in self.efficiency],
            "points": [int(x) for x in self.points],
            "law": self.law,
            "law_params": [float(f"{x:.6g}") for x in self.law_params],
            "law_scores": {k: float(f"{v:.6g}") for k, v in self.law_scores.items()},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ScaleCurve:
        nodes = np.asarray(d["nodes"], dtype=np.float64)
        eff = np.asarray(d["efficiency"], dtype=np.float64)
        if (
            len(nodes) == 0
            or nodes.shape != eff.shape
            or (np.diff(nodes) <= 0).any()
            or (eff <= 0).any()
        ):
            raise DataError(
                f"scale curve {d.get('op')}: node counts must increase, with one "
                "positive efficiency each"
            )
        if d.get("law") not in LAWS:
            raise DataError(
                f"scale curve {d.get('op')}: law must be one of {', '.join(LAWS)}, "
                f"got {d.get('law')!r}"
            )
        return cls(
            op=str(d["op"]),
            nodes=nodes,
            efficiency=eff,
            points=np.asarray(d.get("points", [0] * len(nodes)), dtype=np.float64),
            law=str(d["law"]),
            law_params=tuple(float(x) for x in d["law_params"]),
            law_scores={str(k): float(v) for k, v in d.get("law_scores", {}).items()},
            provenance=d.get("provenance", "measured"),
            derived_from=str(d.get("derived_from", "")),
        )


def fit_scale_curve(
    op: str, nodes: Array, efficiency: Array, points: Array | np.ndarray[Any, Any]
) -> ScaleCurve:
    """A curve through per-node-count medians, its law chosen by :func:`law_scores`."""
    order = np.argsort(nodes)
    n, e, p = (np.asarray(a, dtype=np.float64)[order] for a in (nodes, efficiency, points))
    scores = law_scores(n, e)
    law = min(scores, key=lambda k: scores[k]) if scores else "flat"
    return ScaleCurve(
        op=op,
        nodes=n,
        efficiency=e,
        points=p,
        law=law,
        law_params=_fit_law(law, n, e),
        law_scores=scores,
    )


@dataclass(frozen=True, kw_only=True, eq=False)
class Fabric:
    """The inter-node network of a cluster (module doc)."""

    nic_bw_bytes_per_s: float
    """Network bandwidth per GPU (one NIC), the ideal of a rank's share."""
    latency_s: float
    """Latency of one inter-node collective spanning 2 nodes."""
    curves: dict[str, ScaleCurve]
    derived_from: str = ""
    spread: dict[float, dict[str, float]] = field(default_factory=dict)
    """Per measured node count, the spread of the all-reduce bus bandwidth between runs
    (:func:`busbw_spread`: runs, p10, median, p90 in GB/s); empty where not recorded."""
    net_scale: float = 1.0
    """The measured network of the day over the curves (``surrogate.calibration.network``),
    where a configuration has no ``net_scale`` column of its own (not saved: a profile is
    the cluster's, the scale one job's)."""
    measured: bool = False
    """Whether ``net_scale`` is the job's own measured network (``surrogate.calibration.network``):
    then the cluster's spread between jobs (:meth:`log_spread`) is no longer unknown (not
    saved)."""

    def efficiency(self, op: str, nodes: Array) -> Array:
        curve = self.curves.get(op) or self.curves["all_reduce"]
        return curve(nodes)

    def log_spread(self, nodes: Array) -> tuple[np.ndarray, np.ndarray]:
        """Per node count, how far the all-reduce bus bandwidth of the cluster's runs fell
        under and rose over its median there (:attr:`spread`): log(median / p10) and
        log(p90 / median), interpolated in log2 nodes between the node counts recorded (the
        nearest one's beyond them); 0 on one node, without a recorded spread, and where this
        fabric's network was measured (:attr:`measured`)."""
        n = np.asarray(nodes, dtype=np.float64)
        if self.measured or not self.spread:
            return np.zeros(n.shape), np.zeros(n.shape)
        at = sorted(self.spread)
        q = [self.spread[k] for k in at]
        x, xs = np.log2(np.maximum(n, 1.0)), np.log2(np.asarray(at, dtype=np.float64))
        down = np.interp(x, xs, [np.log(v["median_gbps"] / v["p10_gbps"]) for v in q])
        up = np.interp(x, xs, [np.log(v["p90_gbps"] / v["median_gbps"]) for v in q])
        one = n < 2
        return (
            np.asarray(np.where(one, 0.0, down), dtype=np.float64),
            np.asarray(np.where(one, 0.0, up), dtype=np.float64),
        )

    def time_s(
        self, op: str, size_bytes: Array, group_size: Array, ranks_per_node: Array, c: Cols
    ) -> Array:
        """Seconds of ``op`` over groups spanning nodes (module doc's formula)."""
        g = np.maximum(np.asarray(ranks_per_node, dtype=np.float64), 1.0)
        group = np.asarray(group_size, dtype=np.float64)
        n = np.maximum(group / g, 2.0)
        scale = np.asarray(c.get("net_scale", self.net_scale), dtype=np.float64)
        eff = np.clip(self.efficiency(op, n) * scale, 1e-4, 1.0)
        bw = g * self.nic_bw_bytes_per_s * eff
        lat = self.latency_s * (1 + np.log2(n / 2))
        # an all-to-all's remote rows leave by every rank's own NIC, not a ring's g channels
        return np.asarray(
            lat + size_bytes * bus_factor(op, group) / bw * nic_share(op, group, g),
            dtype=np.float64,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "nic_bw_bytes_per_s": self.nic_bw_bytes_per_s,
            "latency_s": self.latency_s,
            "derived_from": self.derived_from,
            "curves": [c.to_json() for c in self.curves.values()],
        }
        if self.spread:
            out["all_reduce_busbw_spread"] = [
                {"nodes": n, **{k: float(f"{v:.6g}") for k, v in q.items()}}
                for n, q in sorted(self.spread.items())
            ]
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Fabric:
        curves = {c.op: c for c in (ScaleCurve.from_json(v) for v in d["curves"])}
        if "all_reduce" not in curves:
            raise DataError("a fabric needs an all_reduce scale curve")
        spread = {
            float(q["nodes"]): {k: float(v) for k, v in q.items() if k != "nodes"}
            for q in d.get("all_reduce_busbw_spread", [])
        }
        return cls(
            nic_bw_bytes_per_s=float(d["nic_bw_bytes_per_s"]),
            latency_s=float(d["latency_s"]),
            curves=curves,
            derived_from=str(d.get("derived_from", "")),
            spread=spread,
        )


def measured_efficiency(rows: pd.DataFrame, nic_bw_bytes_per_s: float) -> pd.Series:
    """busbw / (g x nic_bw) of inter-node collective rows (g = group_size / nodes)."""
    g = rows["group_size"] / rows["nodes"]
    busbw = rows["size_bytes"] * bus_factor_series(rows) / rows["time_s"]
    return busbw / (g * nic_bw_bytes_per_s)


def bus_factor_series(rows: pd.DataFrame) -> pd.Series:
    """:func:`bus_factor` of each row's op and group size."""
    import pandas as pd

    out = pd.Series(np.nan, index=rows.index)
    for op, idx in rows.groupby("op").groups.items():
        out[idx] = bus_factor(str(op), rows.loc[idx, "group_size"].to_numpy(dtype=float))
    return out


def fit_fabric(
    coll: pd.DataFrame, nic_bw_bytes_per_s: float, default_latency_s: float
) -> Fabric | None:
    """A fabric from inter-node collective rows of the microbenchmark table (``nodes >= 2``,
    whole nodes per group); None when there is none at bandwidth-bound sizes."""
    inter = coll[
        (coll["nodes"] >= 2) & (coll["op"].isin(("all_reduce", "all_gather", "reduce_scatter")))
    ]
    big = inter[inter["size_bytes"] >= MIN_BANDWIDTH_BYTES]
    if big.empty:
        return None
    big = big.assign(eff=measured_efficiency(big, nic_bw_bytes_per_s))
    curves: dict[str, ScaleCurve] = {}
    for op, rows in big.groupby("op"):
        per = rows.groupby("nodes")["eff"]
        med = per.median()
        curves[str(op)] = fit_scale_curve(
            str(op),
            med.index.to_numpy(dtype=float),
            med.to_numpy(dtype=float),
            np.asarray(per.size().to_numpy(), dtype=np.float64),
        )
    if "all_reduce" not in curves:
        return None
    small = inter[(inter["op"] == "all_reduce") & (inter["nodes"] == inter["nodes"].min())]
    latency = (
        float(small["time_s"].min())
        if len(small) and small["size_bytes"].min() <= 2**16
        else default_latency_s
    )
    sources = sorted({f"{s}:{f}" for s, f in zip(big["source"], big["file"], strict=True)})
    return Fabric(
        nic_bw_bytes_per_s=nic_bw_bytes_per_s,
        latency_s=latency,
        curves=curves,
        derived_from=f"{len(big)} inter-node measurements >= 64 MiB from " + ", ".join(sources),
        spread=busbw_spread(big),
    )


def busbw_spread(coll: pd.DataFrame) -> dict[float, dict[str, float]]:
    """Per node count (>= 2), how the all-reduce bus bandwidth (messages >= 64 MiB) varies
    between runs: ``runs`` (distinct ``run_id``), and the 10th, 50th and 90th percentile
    over runs (``p10_gbps``, ``median_gbps``, ``p90_gbps``, GB/s) of each run's geometric
    mean, the mean :func:`run_scales` takes."""
    import pandas as pd

    rows = coll[
        (coll["op"] == "all_reduce")
        & (coll["nodes"] >= 2)
        & (coll["size_bytes"] >= MIN_BANDWIDTH_BYTES)
    ]
    out: dict[float, dict[str, float]] = {}
    if rows.empty:
        return out
    busbw = rows["size_bytes"] * bus_factor_series(rows) / rows["time_s"]
    logs = pd.Series(np.log(busbw.to_numpy(dtype=np.float64)), index=rows.index)
    per_run = logs.groupby([rows["nodes"], rows["run_id"]]).mean()
    for _, runs in per_run.groupby(level=0):
        v = np.exp(runs.to_numpy(dtype=np.float64)) / 1e9
        out[float(runs.index[0][0])] = {
            "runs": float(len(v)),
            "p10_gbps": float(np.quantile(v, 0.1)),
            "median_gbps": float(np.median(v)),
            "p90_gbps": float(np.quantile(v, 0.9)),
        }
    return out


def run_scales(coll: pd.DataFrame, fabric: Fabric) -> pd.Series:
    """Per ``run_id``: the geometric mean over its inter-node bandwidth-bound measurements of
    measured efficiency / the fabric's curve at that node count (1: a typical run)."""
    import pandas as pd

    rows = coll[
        (coll["nodes"] >= 2)
        & (coll["size_bytes"] >= MIN_BANDWIDTH_BYTES)
        & coll["op"].isin(tuple(fabric.curves))
    ]
    if rows.empty:
        return pd.Series(dtype=float)
    eff = measured_efficiency(rows, fabric.nic_bw_bytes_per_s)
    expected = pd.Series(np.nan, index=rows.index)
    for op, idx in rows.groupby("op").groups.items():
        expected[idx] = fabric.efficiency(str(op), rows.loc[idx, "nodes"].to_numpy(dtype=float))
    ratio = np.log(eff / expected)
    scales: pd.Series = np.exp(ratio.groupby(rows["run_id"]).mean())
    return scales


__all__ = [
    "LAWS",
    "Fabric",
    "ScaleCurve",
    "busbw_spread",
    "fit_fabric",
    "fit_scale_curve",
    "law_scores",
    "run_scales",
]
