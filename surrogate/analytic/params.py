"""The analytic model's free parameters: one typed place, each with its prior and source.

Everything else in :mod:`surrogate.analytic` is derived (FLOPs, bytes, collective sizes) or
measured (the calibration profile's GEMM and collective curves). What remains is a handful of
numbers no microbenchmark gives: how much of a framework's communication overlaps compute, its
fixed costs per layer and per micro-batch (kernel launches, Python, synchronisation), how far a
real training loop's kernels and collectives run from the microbenchmarks', and how much the
caching allocator reserves beyond what is allocated. Each has a prior (the value used when
nothing was fitted) with a source, a width, and bounds; ``surrogate calibrate --runs`` fits them
per framework version by least squares on measured runs (:mod:`surrogate.calibration.fit_params`),
and the
fitted sets (:class:`ParameterSets`, passed to the model, never read here) ship in
``surrogate/data/analytic_params.json`` (``surrogate.calibration.parameter_files``).

The analytic functions read them as columns named ``p_<name>`` (one value per configuration,
so one batch can mix frameworks); a column that is absent takes the prior.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from surrogate.analytic.inputs import FRAMEWORK_VERSIONS

Array = NDArray[np.float64]
Cols = Mapping[str, Array]

Kind = Literal["time", "memory", "error"]
Scope = Literal["framework", "cluster"]

DEFAULT_SET = "default"
"""The set a framework version without a fitted set of its own takes: fitted on every
framework's runs together (``surrogate.calibration.fit_params.fit_default``), its cluster-scoped
parameters at their priors."""


@dataclass(frozen=True)
class FreeParameter:
    """One free parameter of the analytic model."""

    name: str
    prior: float
    """Value used where nothing was fitted."""
    prior_width: float
    """Prior standard deviation in the fitted space: of log(value) for positive parameters,
    of logit(value) for fractions, of the value for signed ones."""
    lower: float
    upper: float
    unit: str
    kind: Kind
    source: str
    fit_start: float | None = None
    """Where least squares starts (None: the prior). A floor has no gradient where it binds no
    run, so it starts where it binds some."""
    scope: Scope = "framework"
    """``framework``: a trait of the implementation (overlap, launches, the allocator), which
    carries to any cluster the framework runs on. ``cluster``: a property of the cluster a set
    was fitted on (its network's latency, its hosts' time to issue a layer's kernels): a set's
    fitted value holds on that cluster's calibration profile only, and elsewhere the default
    set's (:meth:`ParameterSets.cluster_scoped`)."""

    @property
    def is_fraction(self) -> bool:
        return self.lower == 0.0 and self.upper == 1.0

    @property
    def is_signed(self) -> bool:
        """A parameter that may be negative (a shift): fitted as it is, within its bounds."""
        return self.lower < 0.0

    def to_free(self, value: float | Array) -> Array:
        """Value -> the unbounded space the fit works in (log, logit for fractions, the value
        itself for signed parameters)."""
        v = np.asarray(value, dtype=np.float64)
        if self.is_signed:
            return v
        if self.is_fraction:
            v = np.clip(v, 1e-6, 1 - 1e-6)
            return np.asarray(np.log(v / (1 - v)))
        return np.asarray(np.log(np.maximum(v, 1e-12)))

    def from_free(self, z: float | Array) -> Array:
        z = np.asarray(z, dtype=np.float64)
        if self.is_signed:
            return np.asarray(np.clip(z, self.lower, self.upper))
        if self.is_fraction:
            return np.asarray(1.0 / (1.0 + np.exp(-z)))
        return np.asarray(np.clip(np.exp(z), self.lower, self.upper))


FREE_PARAMETERS: tuple[FreeParameter, ...] = (
    FreeParameter(
        "gemm_time_scale",
        1.0,
        0.15,
        0.8,
        2.0,
        "x",
        "time",
        "GEMM time in a training loop over the profile's microbenchmark at the same shape "
        "(epilogues, strided layouts, clocks under sustained load); prior 1: the profile is "
        "taken as it was measured. "
        "Range 0.8-2: sustained clocks and epilogues cost a training loop's GEMMs tens of "
        "percent, never half their speed, over the same shape measured alone.",
    ),
    FreeParameter(
        "tp_comm_scale",
        1.0,
        0.5,
        0.2,
        5.0,
        "x",
        "time",
        "Intra-node TP/SP collectives (all-gather/reduce-scatter of activations) over the "
        "profile's microbenchmark time at that size; prior 1. A framework that overlaps them "
        "with GEMMs (nanotron tp_async_comm, async TP) fits below 1. "
        "Range 0.2-5: overlap hides at most about four fifths of it; small messages in a loop "
        "run a few times slower than the profile's sizes, not more.",
    ),
    FreeParameter(
        "tp_inter_comm_scale",
        1.0,
        1.0,
        0.2,
        50.0,
        "x",
        "time",
        "The same for TP groups that span nodes, which run many mid-size collectives over the "
        "network where the profile measured large ones; prior 1.",
        scope="cluster",
    ),
    FreeParameter(
        "tp_inter_step_latency_s",
        1e-5,
        3.0,
        1e-7,
        1e-2,
        "s per ring step",
        "time",
        "Latency of one step of a TP ring across nodes (``comm.tp_ring_steps_per_layer``: "
        "8 (tp - 1) steps per layer and micro-batch), beyond the profile's time for the "
        "collective: the alpha of the ring's alpha-beta cost, which the fabric curves, "
        "measured on large messages, do not see (the datasheet path already charges 10 us "
        "per step; this adds to it). Prior 10 us, the order of an inter-node hop (network "
        "latency plus NCCL's protocol), wide.",
        scope="cluster",
    ),
    FreeParameter(
        "pp_comm_scale",
        1.0,
        1.0,
        0.2,
        10.0,
        "x",
        "time",
        "Pipeline send/receive time over the profile's point-to-point time (both directions, "
        "every slot): includes the synchronisation of blocking sends; prior 1. "
        "Range 0.2-10: a blocking send waits for its peer's slot at most a few times its "
        "transfer.",
    ),
    FreeParameter(
        "pp_slot_latency_s",
        1e-3,
        2.0,
        1e-6,
        5.0,
        "s",
        "time",
        "Fixed cost of one send/receive handshake between pipeline stages across a node "
        "boundary, charged min(p - 1, 2) x (m - 1) + (p - 2) times per step "
        "(``pipeline.cross_node_waits``): a latency, not a bandwidth (the Playbook's "
        "cross-node pipelines lose a constant time per handshake whatever the message size); "
        "prior 1 ms. Cluster-scoped: nanotron's pre-pp-fix version fits about 0.56 s on the "
        "Playbook's cluster, a wait of its pipeline engine rather than a network latency, "
        "and it holds there only.",
        scope="cluster",
    ),
    FreeParameter(
        "pp_layer_floor_s",
        1e-4,
        3.0,
        1e-6,
        0.05,
        "s per layer per micro-batch",
        "time",
        "Least time one layer's forward and backward takes per micro-batch in a pipelined run, "
        "whatever its work (surrogate.analytic.step: a floor, not an added cost; the "
        "Playbook's nanotron pipelines run no faster than about 8 ms per layer at tp 2); prior "
        "0.1 ms, wide: a framework whose pipelines show no floor keeps it negligible. Range "
        "up to 50 ms per layer: the issue time of a layer's few hundred kernels from a "
        "Python host at its slowest.",
        fit_start=2e-3,
        scope="cluster",
    ),
    FreeParameter(
        "pp_layer_floor_per_tp_s",
        1e-4,
        3.0,
        1e-6,
        0.05,
        "s per layer per micro-batch per TP rank",
        "time",
        "The same floor's growth with the tensor-parallel degree (the Playbook's nanotron "
        "pp-fix pipelines: about 15 ms per layer at tp 4 and 23 ms at tp 8); prior 0.1 ms, "
        "wide.",
        fit_start=2e-3,
        scope="cluster",
    ),
    FreeParameter(
        "layer_floor_s",
        1e-4,
        3.0,
        1e-6,
        0.05,
        "s per layer per micro-batch",
        "time",
        "Least time one layer's forward and backward takes per micro-batch without a pipeline, "
        "whatever its work, a third more where its forward runs again under recomputation "
        "(surrogate.analytic.step: a floor, not an added cost): the host's time to issue the "
        "layer's kernels (and FSDP2's per-block hooks) where the GPU finishes first. Measured "
        "on one H100 (microbench.train_step): the step time stays flat as the micro-batch "
        "grows from 1 to 4-8, about 6 ms per layer under FSDP2; prior 0.1 ms, wide. Range "
        "up to 50 ms per layer, as the pipelined floor.",
        fit_start=2e-3,
        scope="cluster",
    ),
    FreeParameter(
        "dp_overlap",
        0.9,
        1.5,
        0.0,
        1.0,
        "fraction",
        "time",
        "Share of the last micro-batch's backward that hides the DP gradient reduction "
        "(bucketed reduction launched as gradients are ready, Li et al. 2020, 'PyTorch "
        "Distributed', sec. 3.2); prior 0.9.",
    ),
    FreeParameter(
        "nccl_sm_share",
        16 / 132,
        0.5,
        0.0,
        1.0,
        "fraction",
        "time",
        "Share of the GPU's SMs NCCL kernels occupy while they overlap compute, which then "
        "runs at peak x (1 - share): 16 channels of one SM each on a 132-SM H100 (NCCL's "
        "default NCCL_MAX_NCHANNELS-bound ring/tree use); prior 16/132. "
        "Compute that shares the GPU with NCCL also shares its memory bandwidth, so fits "
        "above the SM share alone (0.12-0.24) are physical up to about half.",
    ),
    FreeParameter(
        "layer_overhead_s",
        3e-4,
        1.5,
        1e-6,
        5e-3,
        "s per layer per micro-batch",
        "time",
        "Fixed cost of one layer's forward and backward beyond its kernels' work: about 30 "
        "kernel launches at ~10 us each (CUDA launch latency, NVIDIA CUDA C++ Best Practices "
        "Guide) when the host cannot run ahead; prior 0.3 ms. "
        "Range up to 5 ms: some 500 launches at 10 us, more than a layer issues.",
    ),
    FreeParameter(
        "microbatch_overhead_s",
        2e-3,
        1.5,
        1e-6,
        0.2,
        "s per micro-batch slot",
        "time",
        "Fixed cost of one micro-batch slot of a stage (data loading, loss, pipeline "
        "bookkeeping, synchronisation); prior 2 ms. "
        "Range up to 0.2 s: a data loader, a loss and a synchronisation per micro-batch, at "
        "their slowest.",
    ),
    FreeParameter(
        "allocator_overhead_frac",
        0.10,
        0.7,
        0.0,
        1.0,
        "fraction",
        "memory",
        "PyTorch caching allocator: reserved / allocated - 1 (block rounding and "
        "fragmentation); prior 0.10.",
    ),
    FreeParameter(
        "activation_scale",
        1.0,
        0.2,
        0.3,
        3.0,
        "x",
        "memory",
        "Stored activations over the derived count (Korthikanti et al. 2022, rederived in "
        "surrogate.analytic.memory): framework temporaries kept alive; prior 1.",
    ),
    FreeParameter(
        "inflight_hidden_tensors",
        0.1,
        3.0,
        1e-3,
        20.0,
        "tensors of T x h per micro-batch",
        "memory",
        "Unsharded T x h bf16 tensors (T = the micro-batch's tokens, h = hidden size) a "
        "pipeline stage keeps for each micro-batch in flight beyond the first, on top of the "
        "derived activations (surrogate.analytic.memory). Measured, not derived: in the "
        "Playbook's nanotron pp-fix pipelines the memory the activation count misses grows "
        "with the micro-batches in flight and does not shrink with tp (diagnosis of "
        "2026-11-23, benchmarks/memory_diagnosis.py table 7); the cause in nanotron's "
        "pipeline engine is not identified. Prior 0.1, wide: a framework whose pipelines "
        "keep nothing extra fits it negligible.",
        fit_start=2.0,
    ),
    FreeParameter(
        "logit_bytes",
        16.0,
        0.25,
        4.0,
        24.0,
        "B/logit",
        "memory",
        "Bytes per output logit alive at the loss (surrogate.analytic.memory: bf16 logits, "
        "their fp32 copy, the fp32 softmax and its gradient in both precisions: 16); "
        "frameworks that fuse or chunk the cross entropy keep fewer. Prior 16, log-width 0.25.",
    ),
    FreeParameter(
        "memory_log_sd",
        0.10,
        0.0,
        1e-3,
        2.0,
        "log",
        "error",
        "Standard deviation of log(measured / predicted peak memory) (not fitted by least "
        "squares: the fitted memory residuals' spread); turns the memory estimate into "
        "p_oom. Prior 0.10: the memory model's order of error before any fit.",
    ),
    FreeParameter(
        "oom_log_margin",
        0.0,
        0.0,
        -1.0,
        1.0,
        "log",
        "error",
        "Where runs run out of memory, as a shift of log(predicted need / GPU memory): p_oom = "
        "Phi((log(need / capacity) + margin) / memory_log_sd). Not fitted by least squares: "
        "by maximum likelihood on completed vs out-of-memory runs "
        "(surrogate.calibration.fit_params). "
        "It takes in what the reserved-memory fit cannot see: memory outside torch's "
        "allocator beyond the CUDA context (NCCL's buffers), transient peaks between two "
        "measurements, the estimate's bias near capacity. Prior 0: OOM where the estimate "
        "reaches the capacity.",
    ),
)
"""Every free parameter of the analytic model."""

PARAMETERS: dict[str, FreeParameter] = {p.name: p for p in FREE_PARAMETERS}
PRIORS: dict[str, float] = {p.name: p.prior for p in FREE_PARAMETERS}


def param(c: Cols, name: str) -> Array | float:
    """The value of free parameter ``name`` for each configuration of ``c`` (its column
    ``p_<name>``), or its prior."""
    col = c.get(f"p_{name}")
    return PARAMETERS[name].prior if col is None else col


def cluster_key(profile_name: str) -> str:
    """The cluster a calibration profile describes: its name up to the first colon (profiles
    are named ``key: description``, e.g. ``hf-playbook-cluster: the Playbook's H100 + AWS EFA
    cluster as measured``)."""
    return profile_name.split(":", 1)[0].strip()


CLUSTER_SCOPED: tuple[str, ...] = tuple(p.name for p in FREE_PARAMETERS if p.scope == "cluster")
"""The parameters whose fitted value belongs to the cluster it was fitted on."""


FITS_MEMORY = "fits_memory"
"""The key :meth:`ParameterSets.as_own` marks a set with whose memory parameters a fit is
about to fit (never saved: a fitted set's ``runs`` record says it)."""


@dataclass(frozen=True, eq=False)
class ParameterSets:
    """Fitted parameter sets by ``framework/version`` (each with its ``values``, and where it
    says so the ``clusters`` it was fitted on; :data:`DEFAULT_SET`'s may carry a ``transfer``
    entry), as ``surrogate calibrate --runs`` writes them. The analytic model reads the set of
    each configuration's framework version (:meth:`param_columns`); a framework version absent
    takes the default set, else the priors. ``ParameterSets()`` holds none: the priors
    everywhere. Loading the shipped sets is ``surrogate.calibration.parameter_files``'s."""

    sets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "sets",
            MappingProxyType({k: MappingProxyType(dict(v)) for k, v in self.sets.items()}),
        )

    def __contains__(self, framework_version: object) -> bool:
        return framework_version in self.sets

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """The sets as plain dictionaries (a copy)."""
        return {k: dict(v) for k, v in self.sets.items()}

    def with_more(self, more: Mapping[str, Mapping[str, Any]]) -> ParameterSets:
        """These sets with ``more`` over them (a framework's own, fitted on its runs:
        ``surrogate.calibration.fit_params.own_sets``); these where ``more`` is empty."""
        return ParameterSets({**self.sets, **more}) if more else self

    def values_for(self, framework_version: str) -> dict[str, float]:
        """Parameter values for ``framework/version``: its set where one exists, else the
        default set (:data:`DEFAULT_SET`, fitted on every framework's runs together) where one
        is here, else the priors."""
        sets = self.sets
        fitted = sets.get(framework_version, sets.get(DEFAULT_SET, {})).get("values", {})
        return {name: float(fitted.get(name, prior)) for name, prior in PRIORS.items()}

    def clusters(self, framework_version: str) -> tuple[str, ...]:
        """The calibration profiles (:func:`cluster_key`) whose runs the set of
        ``framework/version`` was fitted on; empty where it takes the default set or the
        priors, or where the set does not say (its cluster-scoped values then hold
        everywhere)."""
        entry = self.sets.get(framework_version)
        return tuple(entry.get("clusters", ())) if entry else ()

    def transfer_half_widths(self) -> tuple[float, float] | None:
        """Half-widths, in log, of the interval of a prediction for a framework, GPU or
        cluster no set was fitted on: (tokens/s, peak memory), measured on the frameworks and
        clusters held out of the default set in turn (its ``transfer`` entry,
        ``training.across``); None where the default set carries none."""
        transfer = self.sets.get(DEFAULT_SET, {}).get("transfer", {})
        if "log_tps" not in transfer:
            return None
        return float(transfer["log_tps"]), float(transfer.get("log_memory", transfer["log_tps"]))

    @cached_property
    def _table(self) -> Array:
        """:meth:`values_for` of every known framework version, one row each, in
        ``FRAMEWORK_VERSIONS`` order."""
        return np.array(
            [[self.values_for(fv)[name] for name in PRIORS] for fv in FRAMEWORK_VERSIONS],
            dtype=np.float64,
        )

    def memory_fitted_codes(self, parameter_codes: Array) -> Array:
        """Per ``parameter_code`` (an index in
        :data:`surrogate.analytic.inputs.FRAMEWORK_VERSIONS`), whether that framework version
        has a set of its own here whose memory parameters were fitted on its runs (its
        ``runs`` record counts runs with a memory, or :meth:`as_own` marks it), not the
        default set or the priors standing in."""
        own = np.array(
            [
                fv in self.sets
                and bool(
                    self.sets[fv].get(FITS_MEMORY) or self.sets[fv].get("runs", {}).get("memory")
                )
                for fv in FRAMEWORK_VERSIONS
            ],
            dtype=bool,
        )
        return own[np.asarray(parameter_codes, dtype=np.int64)]

    def as_own(self, framework_versions: Iterable[str]) -> ParameterSets:
        """These sets, each of ``framework_versions`` marked as one whose memory parameters are
        fitted (:data:`FITS_MEMORY`), with the values it takes now (its set's, else the default
        set's, else the priors): the sets a fit of those versions' own memory parameters
        explains their runs under, where a framework's stated values give way to the
        parameters fitted (``FrameworkTraits.activation_scale``, ``logit_bytes``)."""
        more = {
            fv: {**self.sets.get(fv, {"values": self.values_for(fv)}), FITS_MEMORY: True}
            for fv in framework_versions
        }
        return self.with_more(more)

    def param_columns(self, parameter_codes: Array) -> dict[str, Array]:
        """``p_<name>`` columns for configurations of the given ``parameter_code`` each (the
        index in :data:`surrogate.analytic.inputs.FRAMEWORK_VERSIONS` of the
        ``framework/version`` whose set the layout takes: its own, or the one
        ``FrameworkTraits.parameter_set`` names)."""
        codes = np.asarray(parameter_codes, dtype=np.int64)
        by_name = self._table.T.copy()  # contiguous columns: later passes read them faster
        return {f"p_{name}": by_name[j][codes] for j, name in enumerate(PRIORS)}

    def cluster_scoped(self, cols: dict[str, Array], profile_name: str) -> dict[str, Array]:
        """``cols`` (with ``parameter_code`` and ``p_<name>`` columns) predicted on the
        cluster of calibration profile ``profile_name``: where a configuration's set was
        fitted on other clusters (:meth:`clusters`), its cluster-scoped parameters
        (:data:`CLUSTER_SCOPED`) take the default set's values instead, so one cluster's
        network latency or host floor does not speak for another's."""
        if "parameter_code" not in cols or not CLUSTER_SCOPED:
            return cols
        here = cluster_key(profile_name)
        codes = np.asarray(cols["parameter_code"], dtype=np.int64)
        homes = [self.clusters(fv) for fv in FRAMEWORK_VERSIONS]
        foreign = np.array([bool(h) and here not in h for h in homes], dtype=bool)[codes]
        if not foreign.any():
            return cols
        fallback = self.values_for(DEFAULT_SET)
        out = dict(cols)
        for name in CLUSTER_SCOPED:
            key = f"p_{name}"
            if key in out:
                out[key] = np.where(foreign, fallback[name], out[key])
        return out
