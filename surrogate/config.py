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
from typing import Any, Literal, get_args

from surrogate.errors import ConfigError
from surrogate.frameworks import PIPELINE_SCHEDULES as PIPELINE_SCHEDULES  # re-exported
from surrogate.frameworks import RECOMPUTE_MODES as RECOMPUTE_MODES  # re-exported
from surrogate.frameworks import FrameworkTraits, get_framework
from surrogate.frameworks import PipelineSchedule as PipelineSchedule
from surrogate.frameworks import Recompute as Recompute
from surrogate.hardware import GPUSpec, canonical_gpu_name, get_gpu

Dtype = Literal["bf16", "fp8"]
DTYPES: tuple[str, ...] = get_args(Dtype)


MAX_COUNT = 2**53
"""Largest count (of layers, ranks, tokens, ...) a configuration may hold: the analytic model
computes in float64, whose integers are exact up to 2**53 (9.0e15, some 300 times the tokens
of the largest published training sets), and tables store int64. Beyond it a count would be
rounded or overflow, so it is an error, not a prediction."""
_MAX_TEXT = f"2**53 = {MAX_COUNT:,}"


def _positive_int(owner: str, name: str, value: Any, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{owner}.{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{owner}.{name} must be an integer >= {minimum}, got {value}")
    if value > MAX_COUNT:
        got = f"{value:,}" if value < 10**30 else f"a {len(str(value))}-digit number"
        raise ConfigError(f"{owner}.{name} must be at most {_MAX_TEXT} (counts are exact in "
                          f"float64 up to there), got {got}")


def _check_ints(obj: Any, names: tuple[str, ...], *, minimum: int = 1) -> None:
    owner = type(obj).__name__
    for n in names:
        _positive_int(owner, n, getattr(obj, n), minimum=minimum)


def _check_bool(obj: Any, name: str) -> None:
    value = getattr(obj, name)
    if not isinstance(value, bool):
        raise ConfigError(f"{type(obj).__name__}.{name} must be true or false, got {value!r}")


MLA_FIELDS: tuple[str, ...] = (
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
)
ARCHITECTURE_FIELDS: tuple[str, ...] = (
    "head_dim", "shared_expert_ffn_hidden_size", "num_dense_layers", *MLA_FIELDS,
)
"""Model columns describing the variants of the Llama block (ModelConfig docstring); each 0
by default, so tables written before they existed read as Llama blocks."""


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A decoder-only transformer (Llama style: GQA attention, SwiGLU MLP, RMSNorm, no biases).

    The fields after ``moe_ffn_hidden_size`` describe the variants of the families
    :func:`surrogate.hf_config.model_from_hf_config` reads; their defaults (0) give the Llama
    block:
    an explicit ``head_dim`` (Gemma, Qwen3), shared experts and leading dense layers
    (Qwen2-MoE, DeepSeek) and multi-head latent attention (DeepSeek-V2/V3, when
    ``kv_lora_rank`` > 0; DeepSeek-AI 2024, "DeepSeek-V2", sec. 2.1).

    Build one from a preset (``surrogate.presets.get_preset("llama3-8b")``), a Hugging Face
    ``config.json`` (``surrogate.hf_config.model_from_hf_config``) or the fields below, all
    keyword-only; the instance is frozen.

    Raises:
        ConfigError: A count is not a positive integer (the variant fields: not a
            non-negative one) or a flag not a boolean; ``hidden_size`` is not divisible by
            ``num_heads`` (without ``head_dim``), nor ``num_heads`` by ``num_kv_heads``;
            ``num_experts`` is 1, ``experts_topk`` is outside 1..``num_experts``, or the MoE
            or MLA fields are set without the experts or the latent rank they need. The
            message names the rule and the values given.
    """

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    """Width of the SwiGLU MLP (Hugging Face ``intermediate_size``)."""
    num_heads: int
    num_kv_heads: int
    """Key/value heads (GQA); equal to num_heads for multi-head attention."""
    vocab_size: int
    seq_len: int
    """Tokens per sequence."""
    tie_embeddings: bool = False
    num_experts: int = 0
    """Routed experts per MoE layer; 0 for a dense model."""
    experts_topk: int = 0
    """Experts each token is routed to (MoE only)."""
    moe_ffn_hidden_size: int = 0
    """Width of one expert's MLP; 0 means ffn_hidden_size (MoE only)."""
    head_dim: int = 0
    """Width of one query, key and value head; 0 means hidden_size / num_heads. Gemma and Qwen3
    set it so that num_heads x head_dim differs from hidden_size (HF ``head_dim``)."""
    shared_expert_ffn_hidden_size: int = 0
    """Width of the shared-expert MLP every token passes through beside its routed experts
    (MoE only; DeepSeek ``n_shared_experts x moe_intermediate_size``, Qwen2-MoE
    ``shared_expert_intermediate_size``); 0 for none."""
    num_dense_layers: int = 0
    """Leading layers whose MLP is dense (width ffn_hidden_size) instead of experts (MoE only;
    DeepSeek ``first_k_dense_replace``)."""
    q_lora_rank: int = 0
    """MLA: rank of the compressed query (0: queries are projected directly from the hidden
    state, as in DeepSeek-V2-Lite)."""
    kv_lora_rank: int = 0
    """MLA: rank of the compressed key-value latent; > 0 selects multi-head latent attention."""
    qk_nope_head_dim: int = 0
    """MLA: per-head query/key width without rotary embedding."""
    qk_rope_head_dim: int = 0
    """MLA: per-head query/key width carrying the rotary embedding (the key part is shared by
    all heads)."""
    v_head_dim: int = 0
    """MLA: per-head value width."""
    name: str = "custom"

    def __post_init__(self) -> None:
        _check_ints(
            self,
            ("num_layers", "hidden_size", "ffn_hidden_size", "num_heads", "num_kv_heads",
             "vocab_size", "seq_len"),
        )
        _check_ints(self, ("num_experts", "experts_topk", "moe_ffn_hidden_size"), minimum=0)
        _check_ints(self, ARCHITECTURE_FIELDS, minimum=0)
        _check_bool(self, "tie_embeddings")
        if not self.head_dim and not self.is_mla and self.hidden_size % self.num_heads:
            raise ConfigError(
                f"hidden_size must be divisible by num_heads, got hidden_size={self.hidden_size} "
                f"num_heads={self.num_heads}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"num_heads must be divisible by num_kv_heads, got num_heads={self.num_heads} "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.num_experts == 1:
            raise ConfigError("num_experts must be 0 (dense) or >= 2, got 1")
        if self.is_moe and not 1 <= self.experts_topk <= self.num_experts:
            raise ConfigError(
                f"experts_topk must be between 1 and num_experts={self.num_experts}, "
                f"got {self.experts_topk}"
            )
        if not self.is_moe and (self.experts_topk or self.moe_ffn_hidden_size):
            raise ConfigError(
                "experts_topk and moe_ffn_hidden_size need num_experts >= 2, got "
                f"num_experts={self.num_experts} experts_topk={self.experts_topk} "
                f"moe_ffn_hidden_size={self.moe_ffn_hidden_size}"
            )
        self._check_architecture()

    def _check_architecture(self) -> None:
        """The variant fields (head_dim, shared experts, dense layers, MLA) agree."""
        if not self.is_moe and (self.shared_expert_ffn_hidden_size or self.num_dense_layers):
            raise ConfigError(
                "shared_expert_ffn_hidden_size and num_dense_layers need num_experts >= 2, got "
                f"num_experts={self.num_experts} shared_expert_ffn_hidden_size="
                f"{self.shared_expert_ffn_hidden_size} num_dense_layers={self.num_dense_layers}"
            )
        if self.num_dense_layers >= self.num_layers:
            raise ConfigError(
                f"num_dense_layers must be < num_layers (an MoE model has MoE layers), got "
                f"num_dense_layers={self.num_dense_layers} num_layers={self.num_layers}"
            )
        mla = {n: getattr(self, n) for n in MLA_FIELDS}
        if not self.is_mla:
            if any(mla.values()):
                given = " ".join(f"{n}={v}" for n, v in mla.items() if v)
                raise ConfigError(f"the MLA fields need kv_lora_rank >= 1, got kv_lora_rank=0 "
                                  f"{given}")
            return
        for n in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _positive_int(type(self).__name__, n, mla[n])
        if self.head_dim:
            raise ConfigError(f"head_dim must be 0 with MLA (its widths are qk_nope_head_dim, "
                              f"qk_rope_head_dim and v_head_dim), got head_dim={self.head_dim}")
        if self.num_kv_heads != self.num_heads:
            raise ConfigError(
                f"MLA has one key and value per head: num_kv_heads must equal num_heads, got "
                f"num_kv_heads={self.num_kv_heads} num_heads={self.num_heads}"
            )

    @property
    def is_moe(self) -> bool:
        return self.num_experts >= 2

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def attention_head_dim(self) -> int:
        """Query/key width of one head: head_dim, or hidden_size / num_heads when 0; with MLA
        qk_nope_head_dim + qk_rope_head_dim."""
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def value_head_dim(self) -> int:
        """Value width of one head (v_head_dim with MLA, else attention_head_dim)."""
        return self.v_head_dim if self.is_mla else self.attention_head_dim

    @property
    def expert_ffn_hidden_size(self) -> int:
        """Width of one expert's MLP (MoE); ffn_hidden_size when not given."""
        return self.moe_ffn_hidden_size or self.ffn_hidden_size


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """Where the run happens: a GPU type from :data:`surrogate.hardware.GPUS` and a node count.

    Attributes:
        gpu: A GPU of the hardware table or an alias (``"H100"``, ``"A100-40GB"``,
            ``"B200"``), stored under its canonical name.
        gpus_per_node: GPUs per node.
        num_nodes: Nodes of the run.

    Raises:
        ConfigError: The GPU is not in the hardware table, or a count is not a positive
            integer.
    """

    gpu: str = "H100-SXM-80GB"
    gpus_per_node: int = 8
    num_nodes: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu", canonical_gpu_name(str(self.gpu)))
        _check_ints(self, ("gpus_per_node", "num_nodes"))

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def spec(self) -> GPUSpec:
        return get_gpu(self.gpu)


@dataclass(frozen=True, kw_only=True)
class LayoutConfig:
    """The parallel layout and training recipe of one run.

    Every field is keyword-only and has a default (one GPU, no parallelism, nanotron). The
    degrees ``dp``, ``tp``, ``pp``, ``cp`` and ``ep`` are data, tensor, pipeline, context and
    expert parallelism; expert parallelism is carved out of dp x cp, so the world size is
    dp x tp x pp x cp. Which ZeRO stages, schedules and recomputation modes a framework runs
    is in ``surrogate.frameworks`` (the configuration reference's table).

    Raises:
        ConfigError: A degree or count is not a positive integer (``zero_stage`` and
            ``recompute_layers``: not a non-negative one), ``zero_stage`` is above 3, a mode
            (``recompute``, ``dtype``, ``pp_schedule``) is unknown, ``vpp`` > 1 without a
            pipeline, ``recompute_layers`` without full recomputation, ``dp_replicate`` > 1
            under ZeRO-0, or the framework does not run what is asked (an unknown framework or
            version, a ZeRO stage or schedule it lacks). The message names the rule and the
            values given.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    """Virtual pipeline stages per pipeline rank (interleaved 1F1B when > 1)."""
    pp_schedule: PipelineSchedule = "1f1b"
    """Pipeline schedule: '1f1b' (interleaved when vpp > 1) or 'afab' (all forwards, then all
    backwards: every micro-batch's activations held at once)."""
    mbs: int = 1
    """Micro-batch size in sequences per data-parallel rank."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
    zero_stage: int = 0
    dp_replicate: int = 1
    """Copies of ZeRO's shards (hybrid sharding, HSDP): with zero_stage >= 1 the states are
    sharded over dp x cp / dp_replicate ranks (the inner ones, consecutive data-parallel
    ranks) and the gradients reduced over the shard group, then all-reduced over the
    dp_replicate copies. torchtitan's ``data_parallel_replicate_degree`` beside a shard degree,
    Megatron-LM's ``--num-distributed-optimizer-instances``. 1: one copy, ZeRO over every
    data- and context-parallel rank."""
    recompute: Recompute = "none"
    recompute_layers: int = 0
    """With recompute 'full': how many layers of each pipeline stage are checkpointed (the
    others keep all their activations and are not recomputed); 0: every layer. Megatron-LM's
    ``--recompute-method block --recompute-num-layers N`` is N x vpp, torchtitan's
    ``selective_ac_option = "n"`` (every n-th block of a rank) floor(layers of the first rank
    / n): the model gives every stage min(this, its layers), and under torchtitan each rank
    floor(its layers / n) (``analytic.flops.checkpointed_layers``)."""
    sequence_parallel: bool = False
    dtype: Dtype = "bf16"
    framework: str = "nanotron"
    """Implementation whose runs are described. The default is nanotron because the bundled
    measurements (the Playbook sweep) are nanotron runs."""
    framework_version: str | None = None
    """Implementation version where it matters (nanotron: 'pre-pp-fix' or 'pp-fix');
    None means the newest known."""

    def __post_init__(self) -> None:
        _check_ints(self, ("dp", "tp", "pp", "cp", "ep", "vpp", "mbs", "grad_accum",
                           "dp_replicate"))
        _check_ints(self, ("zero_stage", "recompute_layers"), minimum=0)
        _check_bool(self, "sequence_parallel")
        if self.zero_stage > 3:
            raise ConfigError(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if self.recompute not in RECOMPUTE_MODES:
            raise ConfigError(
                f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {self.recompute!r}"
            )
        if self.recompute_layers > 0 and self.recompute != "full":
            raise ConfigError(
                f"recompute_layers counts the layers of a stage that full recomputation "
                f"checkpoints: it needs recompute='full', got recompute={self.recompute!r} "
                f"recompute_layers={self.recompute_layers}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.dp_replicate > 1 and self.zero_stage == 0:
            raise ConfigError(
                f"dp_replicate > 1 copies ZeRO's shards: it needs zero_stage >= 1 (with ZeRO-0 "
                f"every data-parallel rank holds a whole copy), got dp_replicate="
                f"{self.dp_replicate} zero_stage=0")
        if self.pp_schedule not in PIPELINE_SCHEDULES:
            raise ConfigError(f"pp_schedule must be one of {', '.join(PIPELINE_SCHEDULES)}, "
                              f"got {self.pp_schedule!r}")
        traits = get_framework(self.framework)
        object.__setattr__(self, "framework", traits.name)
        if self.vpp > 1 and self.pp == 1:
            raise ConfigError(f"vpp > 1 needs pp > 1, got pp=1 vpp={self.vpp}")
        problem = traits.unsupported(tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep,
                                     vpp=self.vpp, zero_stage=self.zero_stage,
                                     pp_schedule=self.pp_schedule,
                                     dp_replicate=self.dp_replicate)
        if problem:
            raise ConfigError(problem)
        if self.framework_version is None:
            object.__setattr__(self, "framework_version", traits.versions[-1])
        elif self.framework_version not in traits.versions:
            raise ConfigError(
                f"framework_version for {traits.name} must be one of "
                f"{', '.join(traits.versions)}, got {self.framework_version!r}"
            )

    @property
    def model_parallel_size(self) -> int:
        return self.tp * self.pp * self.cp

    def runs_as_another(self, *, moe: bool = False) -> str | None:
        """Why the framework would not run this layout as described, or None
        (:meth:`surrogate.frameworks.FrameworkTraits.runs_as_another`); ``moe``: of a model
        with experts (:meth:`TrainingConfig.runs_as_another` knows)."""
        return get_framework(self.framework).runs_as_another(
            **{name: getattr(self, name) for name in RUNS_AS_FIELDS}, moe=moe)


    def parameter_set(self) -> str:
        """The ``framework/version`` whose free parameters (:mod:`surrogate.analytic.params`)
        this layout takes (:meth:`surrogate.frameworks.FrameworkTraits.parameter_set`:
        torchtitan under autocast takes pytorch/autocast's)."""
        return get_framework(self.framework).parameter_set(
            self.framework_version or None, zero_stage=self.zero_stage, tp=self.tp, pp=self.pp,
            cp=self.cp)


RUNS_AS_FIELDS: tuple[str, ...] = (
    "dp", "tp", "pp", "cp", "ep", "vpp", "zero_stage", "recompute", "sequence_parallel",
    "pp_schedule", "recompute_layers", "dp_replicate")
"""The layout fields :meth:`~surrogate.frameworks.FrameworkTraits.runs_as_another` reads."""


@dataclass(frozen=True)
class Rule:
    """One rule a whole configuration obeys, written once for one configuration and for
    columns of many (``surrogate.config_table``): ``broken`` reads the counts of
    :data:`CROSS_COUNTS` as attributes (ints, or float64 arrays) and returns whether, or
    where, the rule is broken, with ``&``, ``|`` and comparisons only; ``message`` says what
    must hold and what was given, for one configuration."""

    broken: Callable[[Any], Any]
    message: Callable[[Any], str]


CROSS_COUNTS: tuple[str, ...] = (
    "num_layers", "num_heads", "num_kv_heads", "seq_len", "num_experts", "gpus_per_node",
    "num_nodes", "dp", "tp", "pp", "cp", "ep", "vpp", "recompute_layers", "dp_replicate",
)
"""The counts the rules between model, cluster and layout read, with ``weighted_split``: 1
where the framework splits layers into stages by torchtitan's weighted slots, which take any
layer count (:func:`weighted_split`), else 0."""


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


def always_sequence_parallel(framework: str) -> bool:
    """Whether ``framework``'s tensor parallelism always shards the sequence
    (:attr:`~surrogate.frameworks.FrameworkTraits.always_sequence_parallel`); False for an
    unknown name."""
    return framework_flag(framework, lambda t: t.always_sequence_parallel)


def moe_needs_sequence_parallel(framework: str) -> bool:
    """Whether ``framework``'s MoE layer needs sequence parallelism under tp
    (:attr:`~surrogate.frameworks.FrameworkTraits.moe_tp_needs_sequence_parallel`); False for
    an unknown name."""
    return framework_flag(framework, lambda t: t.moe_tp_needs_sequence_parallel)


def counts_view(cfg: TrainingConfig) -> SimpleNamespace:
    """The counts of :data:`CROSS_COUNTS` of one configuration, as attributes."""
    m, c, lay = cfg.model, cfg.cluster, cfg.layout
    return SimpleNamespace(
        num_layers=m.num_layers, num_heads=m.num_heads, num_kv_heads=m.num_kv_heads,
        seq_len=m.seq_len, num_experts=m.num_experts, gpus_per_node=c.gpus_per_node,
        num_nodes=c.num_nodes, dp=lay.dp, tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep,
        vpp=lay.vpp, recompute_layers=lay.recompute_layers, dp_replicate=lay.dp_replicate,
        weighted_split=int(weighted_split(lay.framework)))


def _heads_rule(name: str) -> Rule:
    return Rule(
        lambda v: getattr(v, name) % v.tp != 0,
        lambda v: f"{name} must be divisible by tp, got {name}={getattr(v, name)} tp={v.tp}")


CROSS_RULES: tuple[Rule, ...] = (
    Rule(lambda v: v.dp * v.tp * v.pp * v.cp != v.gpus_per_node * v.num_nodes,
         lambda v: (f"dp * tp * pp * cp must equal the number of GPUs "
                    f"({v.gpus_per_node * v.num_nodes} = {v.num_nodes} nodes x "
                    f"{v.gpus_per_node}), got dp={v.dp} tp={v.tp} pp={v.pp} cp={v.cp} "
                    f"({v.dp * v.tp * v.pp * v.cp})")),
    _heads_rule("num_heads"),
    _heads_rule("num_kv_heads"),
    Rule(lambda v: v.num_layers < v.pp * v.vpp,
         lambda v: (f"num_layers must be >= pp * vpp (each pipeline stage holds a layer), got "
                    f"num_layers={v.num_layers} pp={v.pp} vpp={v.vpp} ({v.pp * v.vpp})")),
    Rule(lambda v: (v.vpp > 1) & (v.num_layers % (v.pp * v.vpp) != 0) & (v.weighted_split == 0),
         lambda v: (f"num_layers must be divisible by pp * vpp for interleaved pipelines "
                    f"(torchtitan's split takes any count), got num_layers={v.num_layers} "
                    f"pp={v.pp} vpp={v.vpp} ({v.pp * v.vpp})")),
    Rule(lambda v: v.recompute_layers * v.pp > v.num_layers,
         lambda v: (f"recompute_layers counts the checkpointed layers of one pipeline stage: it "
                    f"must be at most num_layers / pp, got recompute_layers="
                    f"{v.recompute_layers} num_layers={v.num_layers} pp={v.pp}")),
    Rule(lambda v: v.seq_len % v.cp != 0,
         lambda v: f"seq_len must be divisible by cp, got seq_len={v.seq_len} cp={v.cp}"),
    Rule(lambda v: (v.ep > 1) & (v.num_experts < 2),
         lambda v: f"ep > 1 needs an MoE model (num_experts >= 2), got ep={v.ep}"),
    Rule(lambda v: (v.ep > 1) & (v.num_experts % v.ep != 0),
         lambda v: (f"num_experts must be divisible by ep, got num_experts={v.num_experts} "
                    f"ep={v.ep}")),
    Rule(lambda v: (v.ep > 1) & ((v.dp * v.cp) % v.ep != 0),
         lambda v: (f"ep must divide dp * cp (experts are sharded over the data and context "
                    f"parallel ranks), got dp={v.dp} cp={v.cp} ep={v.ep}")),
    Rule(lambda v: v.dp % v.dp_replicate != 0,
         lambda v: (f"dp_replicate must divide dp (each copy of ZeRO's shards is dp / "
                    f"dp_replicate data-parallel ranks), got dp={v.dp} "
                    f"dp_replicate={v.dp_replicate}")),
    Rule(lambda v: (v.dp_replicate > 1) & (v.dp * v.cp <= v.dp_replicate),
         lambda v: (f"dp_replicate must be less than dp * cp (a copy of ZeRO's shards over one "
                    f"rank shards nothing: that is zero_stage 0), got dp={v.dp} cp={v.cp} "
                    f"dp_replicate={v.dp_replicate}")),
    Rule(lambda v: (v.dp_replicate > 1) & (v.ep > 1)
         & (((v.dp * v.cp) // v.dp_replicate) % v.ep != 0),
         lambda v: (f"ep must divide dp * cp / dp_replicate (experts are sharded over the ranks "
                    f"of one copy of ZeRO's shards), got dp={v.dp} cp={v.cp} "
                    f"dp_replicate={v.dp_replicate} ep={v.ep}")),
)
"""The rules between model, cluster and layout, in the order they are checked. Then: the GPU
has the dtype, and the GPU count, global batch and ``global_batch_seqs`` are within range."""


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """A whole run: model, cluster and layout, validated against each other.

    Example:
        ```python
        from surrogate import ClusterConfig, LayoutConfig, TrainingConfig
        from surrogate.presets import get_preset

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
                f"the number of GPUs gpus_per_node * num_nodes must be at most {_MAX_TEXT} "
                f"(counts are exact in float64 up to there), got gpus_per_node="
                f"{c.gpus_per_node} num_nodes={c.num_nodes} ({c.num_gpus:,})")
        if self.batch_tokens > MAX_COUNT:
            raise ConfigError(
                f"the global batch dp * grad_accum * mbs * seq_len must be at most {_MAX_TEXT} "
                f"tokens (counts are exact in float64 up to there), got dp={lay.dp} "
                f"grad_accum={lay.grad_accum} mbs={lay.mbs} seq_len={m.seq_len} "
                f"({self.batch_tokens:,})")
        if self.global_batch_seqs is not None:
            _positive_int("TrainingConfig", "global_batch_seqs", self.global_batch_seqs)
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

_INT_FIELDS = frozenset(
    f.name for cls in (ModelConfig, ClusterConfig, LayoutConfig) for f in fields(cls)
    if f.type in ("int", int)
)
_BOOL_FIELDS = frozenset({"tie_embeddings", "sequence_parallel"})
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

    Missing optional columns take the dataclass defaults (or ``defaults``), except a missing
    ``sequence_parallel``, which takes the framework's: on where its tensor parallelism always
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
    if "sequence_parallel" not in layout:  # the framework's default, for this model
        framework = layout.get("framework", LayoutConfig.framework)
        moe = parts["model"].get("num_experts", ModelConfig.num_experts) >= 2
        layout["sequence_parallel"] = layout.get("tp", 1) > 1 and (
            always_sequence_parallel(framework)
            or (moe and moe_needs_sequence_parallel(framework)))
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
