"""Typed, validated training configurations: the model, the cluster, the parallel layout.

Conventions (pinned by tests):

- **World size** = dp x tp x pp x cp. Expert parallelism is carved out of dp x cp, as in
  Megatron-LM (``expert_model_parallel_size`` divides the data x context parallel group) and
  torchtitan (``ep`` borrows from ``dp_shard x cp``): dense layers see ``dp`` data-parallel
  replicas, expert layers see ``ep`` expert shards times ``dp x cp / ep`` expert replicas. The
  Playbook text writes the world size as dp x tp x pp x cp x ep with its ``dp`` counting only
  expert *replicas*: Playbook dp x ep = our dp (tp, pp and cp mean the same in both), so a
  Playbook layout dp=4 ep=2 is our dp=8 ep=2. For dense models (ep = 1) the two agree.
- **Global batch** in tokens = dp x grad_accum x mbs x seq_len. Context parallelism splits each
  sequence over cp ranks, so it does not multiply the batch.
- The micro-batch ``mbs`` counts sequences per data-parallel rank per micro-step.

Every rule raises :class:`~surrogate.errors.ConfigError` saying what must hold and what was given.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import Any

from surrogate.config.checks import MAX_COUNT, MAX_TEXT, positive_int
from surrogate.config.framework_defaults import config_defaults
from surrogate.config.framework_traits import FrameworkTraits
from surrogate.config.frameworks import get_framework
from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.model import ModelConfig
from surrogate.errors import ConfigError


@dataclass(frozen=True)
class Rule:
    """One rule a whole configuration obeys, written once for one configuration and for
    columns of many (``surrogate.config.table``): ``broken`` reads the counts of
    :data:`CROSS_COUNTS` as attributes (ints, or float64 arrays) and returns whether, or
    where, the rule is broken, with ``&``, ``|`` and comparisons only; ``message`` says what
    must hold and what was given, for one configuration."""

    broken: Callable[[Any], Any]
    message: Callable[[Any], str]


CROSS_COUNTS: tuple[str, ...] = (
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "seq_len",
    "num_experts",
    "gpus_per_node",
    "num_nodes",
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "vpp",
    "recompute_layers",
    "dp_replicate",
)
"""The counts the rules between model, cluster and layout read, with ``weighted_split``: 1
where the framework splits layers into stages by torchtitan's weighted slots, which take any
layer count (:func:`weighted_split`), else 0; and ``accounted_split``: 1 where it splits them as
Megatron-Core does (:func:`accounted_split`), else 0; and ``folds_experts``: 1 where it folds
its experts over tp x dp x cp (:func:`folds_experts`), else 0."""


def framework_flag(framework: str, flag: Callable[[FrameworkTraits], bool]) -> bool:
    """``flag`` of the traits of ``framework``; False for an unknown name (reported
    elsewhere)."""
    try:
        return flag(get_framework(framework))
    except ConfigError:
        return False


def weighted_split(framework: str) -> bool:
    """Whether ``framework`` splits layers into pipeline stages by weighted slots (any layer
    count fits an interleaved pipeline); False for an unknown name (reported elsewhere)."""
    return framework_flag(framework, lambda t: t.pipeline_split == "weighted")


def accounted_split(framework: str) -> bool:
    """Whether ``framework`` splits layers as Megatron-Core does (``PipelineSplit``
    ``megatron``): an interleaved pipeline fits where num_layers or num_layers + 2 (the
    embedding and the loss as a layer slot each) divides by pp x vpp; False for an unknown
    name (reported elsewhere)."""
    return framework_flag(framework, lambda t: t.pipeline_split == "megatron")


def folds_experts(framework: str) -> bool:
    """Whether ``framework`` folds its experts over the tensor, data and context parallel
    ranks with expert tensor parallelism 1
    (:attr:`~surrogate.config.framework_traits.FrameworkTraits.moe_parallel_folding`): ep
    divides tp x dp x cp; False for an unknown name (reported elsewhere)."""
    return framework_flag(framework, lambda t: t.moe_parallel_folding)


def always_sequence_parallel(framework: str) -> bool:
    """Whether ``framework``'s tensor parallelism always shards the sequence
    (:attr:`~surrogate.config.framework_traits.FrameworkTraits.always_sequence_parallel`); False
    for an
    unknown name."""
    return framework_flag(framework, lambda t: t.always_sequence_parallel)


def moe_needs_sequence_parallel(framework: str) -> bool:
    """Whether ``framework``'s MoE layer needs sequence parallelism under tp
    (:attr:`~surrogate.config.framework_traits.FrameworkTraits.moe_tp_needs_sequence_parallel`);
    False for
    an unknown name."""
    return framework_flag(framework, lambda t: t.moe_tp_needs_sequence_parallel)


def counts_view(cfg: TrainingConfig) -> SimpleNamespace:
    """The counts of :data:`CROSS_COUNTS` of one configuration, as attributes."""
    m, c, lay = cfg.model, cfg.cluster, cfg.layout
    return SimpleNamespace(
        num_layers=m.num_layers,
        num_heads=m.num_heads,
        num_kv_heads=m.num_kv_heads,
        seq_len=m.seq_len,
        num_experts=m.num_experts,
        gpus_per_node=c.gpus_per_node,
        num_nodes=c.num_nodes,
        dp=lay.dp,
        tp=lay.tp,
        pp=lay.pp,
        cp=lay.cp,
        ep=lay.ep,
        vpp=lay.vpp,
        recompute_layers=lay.recompute_layers,
        dp_replicate=lay.dp_replicate,
        weighted_split=int(weighted_split(lay.framework)),
        accounted_split=int(accounted_split(lay.framework)),
        folds_experts=int(folds_experts(lay.framework)),
    )


def _heads_rule(name: str) -> Rule:
    return Rule(
        lambda v: getattr(v, name) % v.tp != 0,
        lambda v: f"{name} must be divisible by tp, got {name}={getattr(v, name)} tp={v.tp}",
    )


CROSS_RULES: tuple[Rule, ...] = (
    Rule(
        lambda v: v.dp * v.tp * v.pp * v.cp != v.gpus_per_node * v.num_nodes,
        lambda v: (
            f"dp * tp * pp * cp must equal the number of GPUs "
            f"({v.gpus_per_node * v.num_nodes} = {v.num_nodes} nodes x "
            f"{v.gpus_per_node}), got dp={v.dp} tp={v.tp} pp={v.pp} cp={v.cp} "
            f"({v.dp * v.tp * v.pp * v.cp})"
        ),
    ),
    _heads_rule("num_heads"),
    _heads_rule("num_kv_heads"),
    Rule(
        lambda v: v.num_layers < v.pp * v.vpp,
        lambda v: (
            f"num_layers must be >= pp * vpp (each pipeline stage holds a layer), got "
            f"num_layers={v.num_layers} pp={v.pp} vpp={v.vpp} ({v.pp * v.vpp})"
        ),
    ),
    Rule(
        lambda v: (
            (v.vpp > 1)
            & (v.num_layers % (v.pp * v.vpp) != 0)
            & (v.weighted_split == 0)
            & ((v.accounted_split == 0) | ((v.num_layers + 2) % (v.pp * v.vpp) != 0))
        ),
        lambda v: (
            f"num_layers must be divisible by pp * vpp for interleaved pipelines "
            f"(Megatron's also takes num_layers + 2 divisible, the embedding and the "
            f"loss as a layer each; torchtitan's split takes any count), got "
            f"num_layers={v.num_layers} "
            f"pp={v.pp} vpp={v.vpp} ({v.pp * v.vpp})"
        ),
    ),
    Rule(
        lambda v: v.recompute_layers * v.pp > v.num_layers,
        lambda v: (
            f"recompute_layers counts the checkpointed layers of one pipeline stage: it "
            f"must be at most num_layers / pp, got recompute_layers="
            f"{v.recompute_layers} num_layers={v.num_layers} pp={v.pp}"
        ),
    ),
    Rule(
        lambda v: v.seq_len % v.cp != 0,
        lambda v: f"seq_len must be divisible by cp, got seq_len={v.seq_len} cp={v.cp}",
    ),
    Rule(
        lambda v: (v.ep > 1) & (v.num_experts < 2),
        lambda v: f"ep > 1 needs an MoE model (num_experts >= 2), got ep={v.ep}",
    ),
    Rule(
        lambda v: (v.ep > 1) & (v.num_experts % v.ep != 0),
        lambda v: f"num_experts must be divisible by ep, got num_experts={v.num_experts} ep={v.ep}",
    ),
    Rule(
        lambda v: (v.ep > 1) & (v.folds_experts == 0) & ((v.dp * v.cp) % v.ep != 0),
        lambda v: (
            f"ep must divide dp * cp (experts are sharded over the data and context "
            f"parallel ranks), got dp={v.dp} cp={v.cp} ep={v.ep}"
        ),
    ),
    Rule(
        lambda v: (v.ep > 1) & (v.folds_experts > 0) & ((v.tp * v.dp * v.cp) % v.ep != 0),
        lambda v: (
            f"ep must divide tp * dp * cp (Megatron-Core folds its experts over the "
            f"tensor, data and context parallel ranks, expert tensor parallelism 1), "
            f"got tp={v.tp} dp={v.dp} cp={v.cp} ep={v.ep}"
        ),
    ),
    Rule(
        lambda v: v.dp % v.dp_replicate != 0,
        lambda v: (
            f"dp_replicate must divide dp (each copy of ZeRO's shards is dp / "
            f"dp_replicate data-parallel ranks), got dp={v.dp} "
            f"dp_replicate={v.dp_replicate}"
        ),
    ),
    Rule(
        lambda v: (v.dp_replicate > 1) & (v.dp * v.cp <= v.dp_replicate),
        lambda v: (
            f"dp_replicate must be less than dp * cp (a copy of ZeRO's shards over one "
            f"rank shards nothing: that is zero_stage 0), got dp={v.dp} cp={v.cp} "
            f"dp_replicate={v.dp_replicate}"
        ),
    ),
    Rule(
        lambda v: (
            (v.dp_replicate > 1) & (v.ep > 1) & (((v.dp * v.cp) // v.dp_replicate) % v.ep != 0)
        ),
        lambda v: (
            f"ep must divide dp * cp / dp_replicate (experts are sharded over the ranks "
            f"of one copy of ZeRO's shards), got dp={v.dp} cp={v.cp} "
            f"dp_replicate={v.dp_replicate} ep={v.ep}"
        ),
    ),
)
"""The rules between model, cluster and layout, in the order they are checked. Then: the GPU
has the dtype, and the GPU count, global batch and ``global_batch_seqs`` are within range."""


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """A whole run: model, cluster and layout, validated against each other.

    Example:
        ```python
        from surrogate import ClusterConfig, LayoutConfig, TrainingConfig
        from surrogate.config.presets import get_preset

        cfg = TrainingConfig(
            model=get_preset("llama3-8b"),
            cluster=ClusterConfig(gpu="H100-SXM-80GB", num_nodes=4),
            layout=LayoutConfig(dp=8, tp=4, mbs=2, grad_accum=16, zero_stage=1),
        )
        ```

    Raises:
        ConfigError: A rule between model, cluster and layout is broken (:data:`CROSS_RULES`,
            e.g. ``dp * tp * pp * cp`` must equal the GPU count, tp must divide the heads), the
            GPU lacks the dtype, a count passes exact float64 integers, or the layout does not
            produce ``global_batch_seqs``. The message says what must hold and what was
            given, e.g. ``dp * tp * pp * cp must equal the number of GPUs (32 = 4 nodes x 8),
            got dp=8 tp=3 pp=1 cp=1 (24)``.
    """

    model: ModelConfig
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    layout: LayoutConfig = field(default_factory=LayoutConfig)
    global_batch_seqs: int | None = None
    """If given, the global batch (sequences) the layout must produce."""

    def __post_init__(self) -> None:
        m, c, lay = self.model, self.cluster, self.layout
        counts = counts_view(self)
        for rule in CROSS_RULES:
            if rule.broken(counts):
                raise ConfigError(rule.message(counts))
        c.spec.peak_flops(lay.dtype)  # raises if the GPU lacks the dtype
        if c.num_gpus > MAX_COUNT:
            raise ConfigError(
                f"the number of GPUs gpus_per_node * num_nodes must be at most {MAX_TEXT} "
                f"(counts are exact in float64 up to there), got gpus_per_node="
                f"{c.gpus_per_node} num_nodes={c.num_nodes} ({c.num_gpus:,})"
            )
        if self.batch_tokens > MAX_COUNT:
            raise ConfigError(
                f"the global batch dp * grad_accum * mbs * seq_len must be at most {MAX_TEXT} "
                f"tokens (counts are exact in float64 up to there), got dp={lay.dp} "
                f"grad_accum={lay.grad_accum} mbs={lay.mbs} seq_len={m.seq_len} "
                f"({self.batch_tokens:,})"
            )
        if self.global_batch_seqs is not None:
            positive_int("TrainingConfig", "global_batch_seqs", self.global_batch_seqs)
            if self.batch_seqs != self.global_batch_seqs:
                raise ConfigError(
                    f"dp * grad_accum * mbs must equal the global batch of "
                    f"{self.global_batch_seqs} sequences, got dp={lay.dp} "
                    f"grad_accum={lay.grad_accum} mbs={lay.mbs} ({self.batch_seqs})"
                )

    def runs_as_another(self) -> str | None:
        """Why the framework would not run this configuration's layout as described, or None
        (:meth:`LayoutConfig.runs_as_another`, for this model)."""
        return self.layout.runs_as_another(moe=self.model.num_experts >= 2)

    @property
    def batch_seqs(self) -> int:
        """Global batch in sequences: dp x grad_accum x mbs."""
        return self.layout.dp * self.layout.grad_accum * self.layout.mbs

    @property
    def batch_tokens(self) -> int:
        """Global batch in tokens: dp x grad_accum x mbs x seq_len."""
        return self.batch_seqs * self.model.seq_len


MODEL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ModelConfig) if f.name != "name")
CLUSTER_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ClusterConfig))
LAYOUT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(LayoutConfig))
CONFIG_COLUMNS: tuple[str, ...] = MODEL_FIELDS + CLUSTER_FIELDS + LAYOUT_FIELDS
"""The flat column names of one configuration (``predict --from-csv``, sweep tables)."""

INT_FIELD_TYPES: tuple[object, ...] = ("int", int, "ZeroStage")
"""The annotations of the integer fields of a configuration (``ZeroStage``: a Literal of
integers), read as integer columns by tables and coercion."""

_INT_FIELDS = frozenset(
    f.name
    for cls in (ModelConfig, ClusterConfig, LayoutConfig)
    for f in fields(cls)
    if f.type in INT_FIELD_TYPES
)
_BOOL_FIELDS = frozenset({"tie_embeddings", "sequence_parallel", "gated_mlp"})
_TRUE = frozenset({"true", "1", "yes", "y", "t"})
_FALSE = frozenset({"false", "0", "no", "n", "f"})


def _missing(value: Any) -> bool:
    """None, NaN, '' and the missing markers of pandas' nullable columns (pd.NA, NaT)."""
    if value is None or isinstance(value, str | float):
        return value is None or value == "" or value != value
    try:
        return bool(value != value)  # NaT; a number or a word is itself
    except TypeError:  # pd.NA: its comparisons are NA, whose truth is ambiguous
        return True


def _short(value: Any) -> str:
    """``repr(value)``, shortened past 80 characters (a 5,000-digit cell is not echoed)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def _coerce(name: str, value: Any) -> Any:
    """Turn a CSV/JSON/YAML cell into the field's type, strictly (8.0 -> 8, 8.5 -> error)."""
    if name in _BOOL_FIELDS:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if name in _INT_FIELDS:
        if isinstance(value, bool):
            raise ConfigError(f"{name} must be an integer, got {value!r}")
        if isinstance(value, numbers.Integral):
            return int(value)  # exact: no float on the way (2**53 + 1 stays itself)
        if isinstance(value, str):
            try:
                return int(value.strip())  # exact for any length of digits
            except ValueError:
                pass
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{name} must be an integer, got {_short(value)}") from None
        if not number.is_integer():
            raise ConfigError(f"{name} must be an integer, got {_short(value)}")
        return int(number)
    return str(value).strip()


def coerce_column(name: str, value: Any) -> Any:
    """A value of the configuration column ``name`` in its field's type, strictly: ``dp=abc``
    is a ConfigError ("dp must be an integer") where it is given, not a puzzle later."""
    return _coerce(name, value)


def config_from_flat(row: Mapping[Any, Any], **defaults: Any) -> TrainingConfig:
    """Build a :class:`TrainingConfig` from one flat row of :data:`CONFIG_COLUMNS`.

    Missing optional columns take the framework's documented defaults
    (:func:`surrogate.config.framework_defaults.config_defaults`: Megatron-Core's distributed
    optimizer, zero_stage 1, and sequence parallelism with tp > 1, as Megatron-Bridge's recipes
    set them), else the dataclass defaults (or ``defaults``, which win over both); a missing
    ``sequence_parallel`` then takes the framework's: on where its tensor parallelism always
    shards the sequence (torchtitan) and tp > 1. Unknown keys are ignored so that a sweep row
    with outcome columns can be passed as is. A missing required model column raises
    ConfigError. ``global_batch_seqs`` is honoured if present.
    """
    values = {**defaults, **{str(k): v for k, v in row.items() if not _missing(v)}}
    parts: dict[str, dict[str, Any]] = {}
    for cls, key in ((ModelConfig, "model"), (ClusterConfig, "cluster"), (LayoutConfig, "layout")):
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in values:
                kwargs[f.name] = _coerce(f.name, values[f.name])
        parts[key] = kwargs
    layout = parts["layout"]
    framework = layout.get("framework", LayoutConfig.framework)
    documented = config_defaults(
        framework,
        tp=layout.get("tp", 1),
        pp=layout.get("pp", 1),
        dtype=layout.get("dtype", LayoutConfig.dtype),
    )
    for column, value in documented.items():  # the framework's documented defaults
        layout.setdefault(column, value)
    if "sequence_parallel" not in layout:  # the framework's default, for this model
        moe = parts["model"].get("num_experts", ModelConfig.num_experts) >= 2
        layout["sequence_parallel"] = layout.get("tp", 1) > 1 and (
            always_sequence_parallel(framework) or (moe and moe_needs_sequence_parallel(framework))
        )
    if "num_kv_heads" not in parts["model"] and "num_heads" in parts["model"]:
        parts["model"]["num_kv_heads"] = parts["model"]["num_heads"]
    missing = [n for n in MODEL_FIELDS[:7] if n not in parts["model"]]
    if missing:
        raise ConfigError(f"a configuration needs the model columns {', '.join(missing)}")
    gbs = values.get("global_batch_seqs")
    return TrainingConfig(
        model=ModelConfig(**parts["model"]),
        cluster=ClusterConfig(**parts["cluster"]),
        layout=LayoutConfig(**parts["layout"]),
        global_batch_seqs=None if gbs is None else _coerce("num_layers", gbs),
    )


def config_to_flat(cfg: TrainingConfig) -> dict[str, Any]:
    """The inverse of :func:`config_from_flat`: one flat dict over :data:`CONFIG_COLUMNS`."""
    out: dict[str, Any] = {}
    for part in (cfg.model, cfg.cluster, cfg.layout):
        for f in fields(part):
            if f.name != "name":
                out[f.name] = getattr(part, f.name)
    return out
