"""Where and how a run is laid out: the cluster it runs on (:class:`ClusterConfig`) and its
parallel layout and training recipe (:class:`LayoutConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from surrogate.config.checks import DTYPES, Dtype, check_bool, check_ints
from surrogate.config.framework_traits import (
    PIPELINE_SCHEDULES,
    RECOMPUTE_MODES,
    FrameworkName,
    PipelineSchedule,
    Recompute,
    ZeroStage,
)
from surrogate.config.frameworks import DEFAULT_FRAMEWORK, get_framework
from surrogate.config.gpus import GPUSpec, canonical_gpu_name, get_gpu
from surrogate.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """Where the run happens: a GPU type from :data:`surrogate.config.gpus.GPUS` and a node count.

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
        check_ints(self, ("gpus_per_node", "num_nodes"))

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def spec(self) -> GPUSpec:
        return get_gpu(self.gpu)


@dataclass(frozen=True, kw_only=True)
class LayoutConfig:
    """The parallel layout and training recipe of one run.

    Every field is keyword-only and has a default (one GPU, no parallelism, torchtitan). The
    degrees ``dp``, ``tp``, ``pp``, ``cp`` and ``ep`` are data, tensor, pipeline, context and
    expert parallelism; expert parallelism is carved out of dp x cp, so the world size is
    dp x tp x pp x cp. Which ZeRO stages, schedules and recomputation modes a framework runs
    is in ``surrogate.config.frameworks`` (the configuration reference's table).

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
    zero_stage: ZeroStage = 0
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
    framework: FrameworkName = DEFAULT_FRAMEWORK
    """Implementation whose runs are described (default:
    :data:`~surrogate.config.frameworks.DEFAULT_FRAMEWORK`, torchtitan, as in every command)."""
    framework_version: str | None = None
    """Implementation version where it matters (nanotron: 'pre-pp-fix' or 'pp-fix');
    None means the newest known."""

    def __post_init__(self) -> None:
        check_ints(self, ("dp", "tp", "pp", "cp", "ep", "vpp", "mbs", "grad_accum", "dp_replicate"))
        check_ints(self, ("zero_stage", "recompute_layers"), minimum=0)
        check_bool(self, "sequence_parallel")
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
                f"recompute_layers={self.recompute_layers}"
            )
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.dp_replicate > 1 and self.zero_stage == 0:
            raise ConfigError(
                f"dp_replicate > 1 copies ZeRO's shards: it needs zero_stage >= 1 (with ZeRO-0 "
                f"every data-parallel rank holds a whole copy), got dp_replicate="
                f"{self.dp_replicate} zero_stage=0"
            )
        if self.pp_schedule not in PIPELINE_SCHEDULES:
            raise ConfigError(
                f"pp_schedule must be one of {', '.join(PIPELINE_SCHEDULES)}, "
                f"got {self.pp_schedule!r}"
            )
        traits = get_framework(self.framework)
        object.__setattr__(self, "framework", traits.name)
        if self.vpp > 1 and self.pp == 1:
            raise ConfigError(f"vpp > 1 needs pp > 1, got pp=1 vpp={self.vpp}")
        problem = traits.unsupported(
            tp=self.tp,
            pp=self.pp,
            cp=self.cp,
            ep=self.ep,
            vpp=self.vpp,
            zero_stage=self.zero_stage,
            pp_schedule=self.pp_schedule,
            dp_replicate=self.dp_replicate,
        )
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
        (:meth:`surrogate.config.framework_traits.FrameworkTraits.runs_as_another`); ``moe``: of a
        model
        with experts (:meth:`TrainingConfig.runs_as_another` knows)."""
        return get_framework(self.framework).runs_as_another(
            **{name: getattr(self, name) for name in RUNS_AS_FIELDS}, moe=moe
        )

    def parameter_set(self) -> str:
        """The ``framework/version`` whose free parameters (:mod:`surrogate.analytic.params`)
        this layout takes (:meth:`surrogate.config.framework_traits.FrameworkTraits.parameter_set`:
        torchtitan under autocast takes pytorch/autocast's)."""
        return get_framework(self.framework).parameter_set(
            self.framework_version or None,
            zero_stage=self.zero_stage,
            tp=self.tp,
            pp=self.pp,
            cp=self.cp,
        )


RUNS_AS_FIELDS: tuple[str, ...] = (
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "vpp",
    "zero_stage",
    "recompute",
    "sequence_parallel",
    "pp_schedule",
    "recompute_layers",
    "dp_replicate",
)
"""The layout fields :meth:`~surrogate.config.framework_traits.FrameworkTraits.runs_as_another`
reads."""
