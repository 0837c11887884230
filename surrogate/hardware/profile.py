"""Calibration profiles: measured GEMM, attention and collective times as a ``PerfModel``.

A profile is a small versioned JSON file named after its GPU, written by
``surrogate calibrate`` (``surrogate.calibration.calibrate``) and read here. It answers the
questions
of :class:`surrogate.analytic.perf.PerfModel`:

- GEMM efficiency (achieved / dense peak FLOP/s) per dtype: trilinear interpolation in
  (log2 m, log2 n, log2 k) on the grid of measured shapes; cells of the grid that were not
  measured hold the smooth model below. Beyond the largest measured side the edge value holds
  (efficiency saturates; we do not extrapolate a rise); below the smallest, the smooth model's
  fall-off scales the edge value, eff(x) = grid(clamp(x)) x smooth(min(x, hi)) / smooth(clamp(x)),
  with the smooth model eff = e_max / (1 + c_m/m + c_n/n + c_k/k) (fitted, monotone in each
  side), so a larger
  GEMM never gets a lower efficiency than the edge. Results are clipped to (0, 1].
- Flash attention (optional; ``attention``): the efficiency of causal flash attention,
  forward plus backward, counted at the model's full (non-causal) FLOPs, 3 x 4 x s^2 x d per
  sequence and head (what :mod:`surrogate.analytic.flops` counts), so that a kernel that skips
  the masked half shows as a higher efficiency. It is a :class:`GemmCurve` over the axes
  m = query rows x heads of one rank (tokens x heads), n = the sequence the queries attend
  over, k = the head width, with the GEMM curve's rule (interpolated inside the grid, the
  smooth model's fall-off below it, the edge value above it). Without one the analytic model
  takes the attention core's efficiency from the GEMM curve of a (tokens x sequence x head
  width) product, a proxy.
- Collective time per (op, group size, intra/inter-node): piecewise-linear interpolation of
  log time in log size through the measured medians (made non-decreasing), the smallest
  measured time below the range (latency floor) and constant algbw beyond it.
  A group size without a curve takes the nearest curve of the same op and locality with the
  same bus bandwidth (nccl-tests busbw is comparable across group sizes: time scales with
  ``bus_factor``). Curves are labelled ``measured`` or ``extrapolated`` with what they came
  from; a locality without any curve falls back to the datasheet model (``SpecPerfModel``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np

from surrogate.analytic.inputs import Array, Cols
from surrogate.analytic.perf import (
    COLLECTIVE_OPS,
    SpecPerfModel,
    best_gemm_efficiency,
    bus_factor,
    local_ranks,
)
from surrogate.config.gpus import canonical_gpu_name
from surrogate.errors import DataError, shorten, shown
from surrogate.hardware.fabric import Fabric
from surrogate.io.atomic import atomic_write
from surrogate.io.input_files import read_input_bytes
from surrogate.io.jsonsafe import json_safe

SCHEMA_VERSION = 1
Provenance = Literal["measured", "extrapolated"]


def _interp_axis(axis: Array, x: Array) -> tuple[Any, Any, Array]:
    """Lower index, upper index and weight of ``x`` (already clamped) on sorted ``axis``."""
    if len(axis) == 1:
        z = np.zeros(x.shape, dtype=np.intp)
        return z, z, np.zeros(x.shape)
    hi = np.clip(np.searchsorted(axis, x, side="right"), 1, len(axis) - 1)
    lo = hi - 1
    w = (x - axis[lo]) / (axis[hi] - axis[lo])
    return lo, hi, np.clip(w, 0.0, 1.0)


_DEDUP_MIN_SIZE = 65_536
"""From this many GEMM shapes on, a curve is evaluated once per distinct shape: a search's
millions of layouts share a few thousand shapes."""


def _distinct_shapes(
    m: Array, n: Array, k: Array
) -> tuple[tuple[Array, Array, Array], Array] | None:
    """The distinct (m, n, k) triples and, per element, the index of its triple, keyed by one
    packed int64 (``pandas.factorize``: linear in the number of shapes); None where the
    dimensions are not whole numbers that pack into 63 bits (GEMM shapes are) or fewer than half
    of them repeat: every shape is then evaluated as it is."""
    import pandas as pd

    flat = [v.ravel() for v in (m, n, k)]
    with np.errstate(invalid="ignore"):  # NaN and inf cast to garbage, then fail the test
        ints = [v.astype(np.int64) for v in flat]
    bits = [int(i.max()).bit_length() if len(i) else 0 for i in ints]
    if sum(bits) > 63 or not all(bool(np.all(i == v)) for i, v in zip(ints, flat, strict=True)):
        return None
    inverse, keys = pd.factorize((ints[0] << (bits[1] + bits[2])) | (ints[1] << bits[2]) | ints[2])
    if 2 * len(keys) > m.size:
        return None
    triple = tuple(
        np.asarray(a, dtype=np.float64)
        for a in (
            keys >> (bits[1] + bits[2]),
            (keys >> bits[2]) & (2 ** bits[1] - 1),
            keys & (2 ** bits[2] - 1),
        )
    )
    return triple, inverse  # type: ignore[return-value]


@dataclass(frozen=True, kw_only=True, eq=False)
class GemmCurve:
    """GEMM efficiency of one dtype (see the module doc for the rule)."""

    dtype: str
    m_axis: Array
    n_axis: Array
    k_axis: Array
    efficiency: Array
    """Grid of efficiencies, shape (len m, len n, len k)."""
    measured: Array
    """Boolean grid: True where the cell is a median of measurements."""
    smooth: tuple[float, float, float, float, float]
    """(e_max, c_m, c_n, c_k, c_0) of eff = e_max / (1 + c_m/m + c_n/n + c_k/k + c_0/(m n k))."""
    provenance: Provenance
    derived_from: str = ""
    points: int = 0
    """Measurements the grid is the median of."""

    def smooth_efficiency(self, m: Array, n: Array, k: Array) -> Array:
        e, cm, cn, ck, c0 = self.smooth
        return e / (1.0 + cm / m + cn / n + ck / k + c0 / (m * n * k))

    @cached_property
    def _log2_axes(self) -> list[Array]:
        return [np.log2(a) for a in (self.m_axis, self.n_axis, self.k_axis)]

    def __call__(self, m: Array, n: Array, k: Array) -> Array:
        m, n, k = (np.asarray(v, dtype=np.float64) for v in np.broadcast_arrays(m, n, k))
        m, n, k = (np.maximum(v, 1.0) for v in (m, n, k))
        if m.size >= _DEDUP_MIN_SIZE:
            distinct = _distinct_shapes(m, n, k)
            if distinct is not None:
                (um, un, uk), inverse = distinct
                return np.asarray(self._evaluate(um, un, uk)[inverse].reshape(m.shape))
        return self._evaluate(m, n, k)

    def _evaluate(self, m: Array, n: Array, k: Array) -> Array:
        axes = self._log2_axes
        xs = [np.log2(v) for v in (m, n, k)]
        clamped = [np.clip(x, a[0], a[-1]) for x, a in zip(xs, axes, strict=True)]
        (ml, mh, mw), (nl, nh, nw), (kl, kh, kw) = (
            _interp_axis(a, x) for a, x in zip(axes, clamped, strict=True)
        )
        g = self.efficiency
        out = np.zeros(m.shape)
        for mi, mwt in ((ml, 1 - mw), (mh, mw)):
            for ni, nwt in ((nl, 1 - nw), (nh, nw)):
                for ki, kwt in ((kl, 1 - kw), (kh, kw)):
                    out += mwt * nwt * kwt * g[mi, ni, ki]
        # below the grid the smooth model's fall-off applies; above it the edge value holds
        edge = [np.exp2(c) for c in clamped]
        low = [np.minimum(v, e) for v, e in zip((m, n, k), edge, strict=True)]
        trend = self.smooth_efficiency(*low) / self.smooth_efficiency(*edge)
        return np.clip(out * trend, 1e-6, 1.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "provenance": self.provenance,
            "derived_from": self.derived_from,
            "points": self.points,
            "m_axis": self.m_axis.tolist(),
            "n_axis": self.n_axis.tolist(),
            "k_axis": self.k_axis.tolist(),
            "efficiency": np.round(self.efficiency, 6).tolist(),
            "measured": self.measured.tolist(),
            "smooth": list(self.smooth),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GemmCurve:
        eff = np.asarray(d["efficiency"], dtype=np.float64)
        axes = [np.asarray(d[a], dtype=np.float64) for a in ("m_axis", "n_axis", "k_axis")]
        if eff.shape != tuple(len(a) for a in axes):
            raise DataError(
                f"GEMM curve {d.get('dtype')!r}: efficiency grid shape {eff.shape} "
                f"must match the axes ({', '.join(str(len(a)) for a in axes)})"
            )
        return cls(
            dtype=str(d["dtype"]),
            m_axis=axes[0],
            n_axis=axes[1],
            k_axis=axes[2],
            efficiency=eff,
            measured=np.asarray(d["measured"], dtype=bool),
            smooth=tuple(float(x) for x in d["smooth"]),  # type: ignore[arg-type]
            provenance=d["provenance"],
            derived_from=str(d.get("derived_from", "")),
            points=int(d.get("points", 0)),
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class CollectiveCurve:
    """Time of one op at one group size, inside a node or across nodes."""

    op: str
    group_size: int
    inter_node: bool
    sizes_bytes: Array
    """Sorted message sizes (nccl-tests convention)."""
    times_s: Array
    """Time at each size, non-decreasing."""
    provenance: Provenance
    derived_from: str = ""
    points: int = 0
    latency_s: float = float("nan")
    """Alpha of the summary fit t = latency + size / bandwidth (for reading, not for use)."""
    algbw_bytes_per_s: float = float("nan")
    """Beta of that fit, as algbw."""

    def __call__(self, size_bytes: Array) -> Array:
        s = np.maximum(np.asarray(size_bytes, dtype=np.float64), 1.0)
        ls, lt = np.log(self.sizes_bytes), np.log(self.times_s)
        t = np.exp(np.interp(np.log(s), ls, lt))  # constant below the first size
        beyond = s > self.sizes_bytes[-1]
        return np.where(beyond, self.times_s[-1] * s / self.sizes_bytes[-1], t)

    def to_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:  # 6 significant digits; NaN, inf -> null
            rounded: float | None = json_safe(float(f"{x:.6g}"))
            return rounded

        return {
            "op": self.op,
            "group_size": self.group_size,
            "inter_node": self.inter_node,
            "provenance": self.provenance,
            "derived_from": self.derived_from,
            "points": self.points,
            "latency_s": num(self.latency_s),
            "algbw_bytes_per_s": num(self.algbw_bytes_per_s),
            "sizes_bytes": [int(x) for x in self.sizes_bytes],
            "times_s": [float(f"{x:.6g}") for x in self.times_s],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CollectiveCurve:
        sizes = np.asarray(d["sizes_bytes"], dtype=np.float64)
        times = np.asarray(d["times_s"], dtype=np.float64)
        if (
            len(sizes) == 0
            or sizes.shape != times.shape
            or (np.diff(sizes) <= 0).any()
            or (np.diff(times) < 0).any()
            or (times <= 0).any()
        ):
            raise DataError(
                f"collective curve {d.get('op')} group {d.get('group_size')}: sizes "
                "must increase and times be positive and non-decreasing, with one "
                "time per size"
            )
        return cls(
            op=str(d["op"]),
            group_size=int(d["group_size"]),
            inter_node=bool(d["inter_node"]),
            sizes_bytes=sizes,
            times_s=times,
            provenance=d["provenance"],
            derived_from=str(d.get("derived_from", "")),
            points=int(d.get("points", 0)),
            latency_s=float(d["latency_s"]) if d.get("latency_s") is not None else float("nan"),
            algbw_bytes_per_s=float(d["algbw_bytes_per_s"])
            if d.get("algbw_bytes_per_s") is not None
            else float("nan"),
        )


@dataclass(kw_only=True, eq=False)
class CalibrationProfile:
    """A fitted :class:`~surrogate.analytic.perf.PerfModel` for one GPU.

    Not frozen only because ``PerfModel`` declares ``name`` as a plain (settable) attribute,
    which a frozen dataclass does not satisfy; treat it as read-only."""

    name: str
    gpu: str
    created: str
    gemm: dict[str, GemmCurve]
    collectives: tuple[CollectiveCurve, ...]
    sources: tuple[dict[str, Any], ...] = ()
    """The data it came from: one entry per (source, file, run), with row counts."""
    excluded: tuple[dict[str, Any], ...] = ()
    """Rows not used, with the reason and count."""
    notes: tuple[str, ...] = ()
    fabric: Fabric | None = None
    """The network between nodes as a function of scale (``surrogate.hardware.fabric``); when set it
    answers every collective whose group spans nodes, else the inter-node curves do."""
    attention: GemmCurve | None = None
    """Measured causal flash attention (module doc), or None."""
    schema_version: int = SCHEMA_VERSION
    _index: dict[tuple[str, bool], list[CollectiveCurve]] = field(
        default_factory=dict, init=False, repr=False
    )

    def __post_init__(self) -> None:
        for c in self.collectives:
            self._index.setdefault((c.op, c.inter_node), []).append(c)

    # PerfModel ---------------------------------------------------------------------------
    def gemm_efficiency(self, m: Array, n: Array, k: Array, c: Cols) -> Array:
        shape = np.broadcast(m, n, k).shape
        if "bf16" not in self.gemm:
            return SpecPerfModel().gemm_efficiency(m, n, k, c)
        eff = self.gemm["bf16"](m, n, k)
        fp8 = np.broadcast_to(np.asarray(c.get("fp8", 0.0)), shape)
        if "fp8" in self.gemm and bool(np.any(fp8 > 0)):
            eff = np.where(fp8 > 0, self.gemm["fp8"](m, n, k), eff)
        return np.broadcast_to(eff, shape).astype(np.float64)

    @cached_property
    def best_gemm_efficiency(self) -> float:
        return best_gemm_efficiency(self)

    def attention_efficiency(
        self, rows: Array, seq: Array, head_dim: Array, c: Cols
    ) -> Array | None:
        if self.attention is None:
            return None
        shape = np.broadcast(rows, seq, head_dim).shape
        return np.broadcast_to(self.attention(rows, seq, head_dim), shape).astype(np.float64)

    def network_spread(self, c: Cols) -> tuple[Array, Array, Array]:
        """Per configuration: the cluster's measured spread of the all-reduce bandwidth at its
        node count below and above the median (:meth:`Fabric.log_spread`, log ratios), and
        whether its own network is known (1: a ``net_measured`` column > 0, a run's start-up
        measurement, or a fabric put under a measured network), where the spread is 0."""
        n = np.asarray(c["num_nodes"], dtype=np.float64)
        known = np.asarray(c.get("net_measured", np.zeros(n.shape)), dtype=np.float64) > 0
        if self.fabric is None:
            return np.zeros(n.shape), np.zeros(n.shape), known.astype(np.float64)
        known = known | self.fabric.measured
        down, up = self.fabric.log_spread(n)
        return (
            np.where(known, 0.0, down),
            np.where(known, 0.0, up),
            np.broadcast_to(known, n.shape).astype(np.float64),
        )

    def curve(self, op: str, group_size: int, inter_node: bool) -> tuple[CollectiveCurve, float]:
        """The curve answering (op, group_size, inter_node) and the factor its times are
        multiplied by (1 for an exact match; the bus-factor ratio for another group size).
        Raises LookupError if the profile has no curve for the op and locality."""
        if op not in COLLECTIVE_OPS:
            raise ValueError(f"op must be one of {', '.join(COLLECTIVE_OPS)}, got {op!r}")
        cands = self._index.get((op, inter_node), [])
        if not cands:
            raise LookupError(f"no {op} curve {'across' if inter_node else 'inside'} nodes")
        best = min(
            cands,
            key=lambda cv: (abs(math.log2(cv.group_size) - math.log2(group_size)), -cv.group_size),
        )
        if best.group_size == group_size:
            return best, 1.0
        return best, float(bus_factor(op, group_size) / bus_factor(op, best.group_size))

    def collective_time_s(
        self,
        op: str,
        size_bytes: Array,
        group_size: Array,
        inter_node: Array,
        c: Cols,
        ranks_per_node: Array | None = None,
    ) -> Array:
        size, group, inter = np.broadcast_arrays(
            np.asarray(size_bytes, dtype=np.float64),
            np.asarray(group_size, dtype=np.float64),
            np.asarray(inter_node, dtype=np.float64),
        )
        out = np.zeros(size.shape)
        fallback = np.zeros(size.shape, dtype=bool)
        if self.fabric is not None and bool(np.any(inter > 0)):
            across = (inter > 0) & (group > 1)
            if across.any():  # the fabric's formula on those rows only
                rows = np.flatnonzero(across.ravel())
                local = np.broadcast_to(local_ranks(group, c, ranks_per_node), size.shape)
                out.ravel()[rows] = self.fabric.time_s(
                    op,
                    size.ravel()[rows],
                    group.ravel()[rows],
                    local.ravel()[rows],
                    _net_scale_rows(c, rows, size.shape),
                )
            inter = np.where(across, -1.0, inter)  # answered
        side = np.sign(inter)  # -1: answered above; 0: inside a node; 1: across nodes
        # the curves answer the rest: each (group size, side) once, over its own rows
        todo = np.flatnonzero(((side >= 0) & (group > 1)).ravel())
        flat_group, flat_side, flat_size = (
            group.ravel()[todo],
            side.ravel()[todo],
            size.ravel()[todo],
        )
        flat_out, flat_fallback = out.ravel(), fallback.ravel()
        inside = flat_side == 0.0
        for g in np.unique(flat_group).tolist():
            in_group = flat_group == g
            for x, on_side in ((0.0, inside), (1.0, ~inside)):
                mask = in_group & on_side
                if not mask.any():
                    continue
                try:
                    cv, factor = self.curve(op, round(g), x > 0)
                except LookupError:
                    flat_fallback[todo[mask]] = True
                    continue
                flat_out[todo[mask]] = cv(flat_size[mask]) * factor
        if fallback.any():
            spec = SpecPerfModel().collective_time_s(
                op, size, group, np.abs(inter), c, ranks_per_node
            )
            out = np.where(fallback, spec, out)
        return out

    # persistence ------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "name": self.name,
            "gpu": self.gpu,
            "created": self.created,
            "notes": list(self.notes),
            "sources": list(self.sources),
            "excluded": list(self.excluded),
            "fabric": None if self.fabric is None else self.fabric.to_json(),
            "gemm": {d: cv.to_json() for d, cv in self.gemm.items()},
            "attention": None if self.attention is None else self.attention.to_json(),
            "collectives": [cv.to_json() for cv in self.collectives],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CalibrationProfile:
        if d.get("schema_version") != SCHEMA_VERSION:
            raise DataError(
                f"a calibration profile must have schema_version {SCHEMA_VERSION}, "
                f"got {shown(d.get('schema_version'))}"
            )
        try:
            return cls(
                name=str(d["name"]),
                gpu=str(d["gpu"]),
                created=str(d.get("created", "")),
                gemm={k: GemmCurve.from_json(v) for k, v in d.get("gemm", {}).items()},
                collectives=tuple(CollectiveCurve.from_json(v) for v in d["collectives"]),
                sources=tuple(d.get("sources", ())),
                excluded=tuple(d.get("excluded", ())),
                notes=tuple(d.get("notes", ())),
                fabric=Fabric.from_json(d["fabric"]) if d.get("fabric") else None,
                attention=GemmCurve.from_json(d["attention"]) if d.get("attention") else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            if isinstance(e, DataError):
                raise
            raise DataError(
                f"malformed calibration profile: {type(e).__name__}: {shorten(str(e))}"
            ) from e

    def save(self, path: str | Path) -> None:
        """Write the profile as JSON, atomically (:mod:`surrogate.io.atomic`)."""
        atomic_write(path, json.dumps(self.to_json(), indent=1) + "\n")


def _net_scale_rows(c: Cols, rows: np.ndarray, shape: tuple[int, ...]) -> Cols:
    """The columns :meth:`Fabric.time_s` reads (``net_scale``, where given) at flat positions
    ``rows`` of arrays of ``shape``."""
    if "net_scale" not in c:
        return {}
    scale = np.broadcast_to(np.asarray(c["net_scale"], dtype=np.float64), shape)
    return {"net_scale": scale.ravel()[rows]}


def shipped_profiles() -> list[str]:
    """Names of the profiles shipped in the package (``surrogate/data/profiles``)."""
    folder = resources.files("surrogate").joinpath("data", "profiles")
    return sorted(
        f.name.removesuffix(".json") for f in folder.iterdir() if f.name.endswith(".json")
    )


@lru_cache(maxsize=8)
def _shipped(name: str) -> CalibrationProfile:
    res = resources.files("surrogate").joinpath("data", "profiles", f"{name}.json")
    return CalibrationProfile.from_json(json.loads(res.read_text()))


def load_profile(path: str | Path) -> CalibrationProfile:
    """Read a profile written by ``surrogate calibrate``, or a shipped one by name
    (:func:`shipped_profiles`); DataError if missing or malformed. Shipped profiles are
    cached and shared: treat them as read-only."""
    p = Path(path)
    if not p.exists() and p.suffix == "" and str(path) in shipped_profiles():
        return _shipped(str(path))
    shipped = ", ".join(shipped_profiles())
    if p.is_dir():
        raise DataError(
            f"a calibration profile is a JSON file written by `surrogate calibrate` "
            f"(or a shipped profile: {shipped}), got the directory {str(p)!r}"
        )
    if not p.exists():
        raise DataError(
            f"calibration profile {str(p)!r} does not exist (a file, or one of "
            f"the shipped profiles: {shipped})"
        )
    raw = read_input_bytes(p, what="calibration profile", kind="config")
    try:
        d = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise DataError(
            f"{p}: a calibration profile is a JSON file written by `surrogate "
            f"calibrate`, but this file is not text (an image? a binary?)"
        ) from None
    except json.JSONDecodeError as e:
        raise DataError(
            f"{p}: a calibration profile is a JSON file written by `surrogate "
            f"calibrate`, but this is not valid JSON ({e.msg} at line "
            f"{e.lineno})"
        ) from None
    if not isinstance(d, dict):
        raise DataError(f"{p}: a calibration profile is a JSON object")
    try:
        return CalibrationProfile.from_json(d)
    except DataError as e:
        raise DataError(f"{p}: {e}") from None


def default_profile(gpu_name: str) -> CalibrationProfile | None:
    """The profile shipped with the package for ``gpu_name`` (a hardware-table key or alias),
    or None when none is shipped."""

    name = canonical_gpu_name(gpu_name)
    if not resources.files("surrogate").joinpath("data", "profiles", f"{name}.json").is_file():
        return None
    return _shipped(name)
