"""The options `predict`, `search` and `propose` share, declared once.

Each group is a frozen dataclass whose fields are typer options; a command names the group as
one parameter (``model: ModelOptions``) and :func:`with_options` gives typer the group's
fields as options, then builds the group from them. The fields carry the names of the
configuration's fields (:class:`surrogate.config.model.ModelConfig`, ``ClusterConfig``,
``LayoutConfig``) whatever their flags are called (``--nodes`` sets ``num_nodes``), so a group
builds its configuration object directly (the CLI tests check that every field is one), and
:class:`SpaceOptions` builds the :class:`surrogate.layouts.space.LayoutSpace` of a search.

Every command defaults to one framework, :data:`DEFAULT_FRAMEWORK`, and its help says so.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast, get_type_hints

import typer

from surrogate.config.frameworks import DEFAULT_FRAMEWORK as DEFAULT_FRAMEWORK
from surrogate.config.model import ModelConfig
from surrogate.config.presets import model_values, require_model_shape
from surrogate.errors import ConfigError

MODEL = "Model"
LAYOUT = "Cluster and layout"
SPACE = "Search space"
OUTPUT = "Prediction and output"

_F = TypeVar("_F", bound=Callable[..., Any])


def _option(
    *names: str, help: str, panel: str, metavar: str | None = None, show_default: bool | str = True
) -> Any:
    return typer.Option(
        *names, help=help, rich_help_panel=panel, metavar=metavar, show_default=show_default
    )


def _model(help: str, *names: str, metavar: str | None = "N") -> Any:
    return _option(*names, help=help, panel=MODEL, metavar=metavar)


def _layout(
    help: str, *names: str, metavar: str | None = "N", show_default: bool | str = True
) -> Any:
    return _option(*names, help=help, panel=LAYOUT, metavar=metavar, show_default=show_default)


def _space(help: str, *names: str, metavar: str | None = None) -> Any:
    return _option(*names, help=help, panel=SPACE, metavar=metavar)


SHAPE_FLAGS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_heads",
    "num_kv_heads",
    "vocab_size",
    "tie_embeddings",
    "num_experts",
    "experts_topk",
    "moe_ffn_hidden_size",
    "gated_mlp",
)
"""The shape flags' names, each a :class:`surrogate.config.model.ModelConfig` field; each
overrides the preset (``--model``) or the Hugging Face config (``--hf-config``)."""


@dataclass(frozen=True)
class ModelOptions:
    """The model: a preset or a Hugging Face config, and shape flags over either."""

    model: Annotated[
        str | None,
        _model("Model preset, e.g. 8b, 70b, 1.34b, mixtral.", "--model", "-m", metavar="PRESET"),
    ] = None
    hf_config: Annotated[
        Path | None, _model("A Hugging Face config.json to read the model from.", metavar="FILE")
    ] = None
    seq_len: Annotated[int | None, _model("Sequence length (default: the model's).")] = None
    num_layers: Annotated[
        int | None, _model("Transformer layers (shape flags override the preset or --hf-config).")
    ] = None
    hidden_size: Annotated[int | None, _model("Hidden size.")] = None
    ffn_hidden_size: Annotated[int | None, _model("Width of the dense SwiGLU MLP.")] = None
    num_heads: Annotated[int | None, _model("Attention (query) heads.")] = None
    num_kv_heads: Annotated[int | None, _model("Key/value heads (GQA; default: --num-heads).")] = (
        None
    )
    vocab_size: Annotated[int | None, _model("Vocabulary size.")] = None
    tie_embeddings: Annotated[
        bool | None,
        _model(
            "Input and output embeddings shared.",
            "--tie-embeddings/--no-tie-embeddings",
            metavar=None,
        ),
    ] = None
    num_experts: Annotated[int | None, _model("Routed experts per MoE layer (0: dense).")] = None
    experts_topk: Annotated[int | None, _model("Experts each token is routed to.")] = None
    moe_ffn_hidden_size: Annotated[
        int | None, _model("Width of one expert's MLP (default: --ffn-hidden-size).")
    ] = None
    gated_mlp: Annotated[
        bool | None,
        _model(
            "SwiGLU MLP; --no-gated-mlp: a two-matrix GELU MLP given by its SwiGLU-equivalent "
            "--ffn-hidden-size (2/3 of its own).",
            "--gated-mlp/--no-gated-mlp",
            metavar=None,
        ),
    ] = None

    def given(self) -> dict[str, Any]:
        """The ModelConfig fields given as flags (``seq_len`` and the shape flags)."""
        names = ("seq_len", *SHAPE_FLAGS)
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def config(self) -> Any:
        """The ModelConfig of the preset or the Hugging Face config, the flags over it."""
        values = model_values(self.model, self.hf_config, seq_len=self.seq_len)
        values.update(self.given())
        require_model_shape(values, sources="--model PRESET, --hf-config FILE")
        values.setdefault("num_kv_heads", values["num_heads"])
        return ModelConfig(**values)


_FRAMEWORKS_HELP = (
    "nanotron, torchtitan or megatron (nemo and megatron-bridge are names of megatron)."
)


@dataclass(frozen=True)
class LayoutOptions:
    """One configuration's cluster and layout (``predict``): ClusterConfig and LayoutConfig
    fields, and the global batch the layout must yield."""

    gpu: Annotated[
        str | None,
        _layout(
            "GPU, e.g. H100-SXM-80GB, H100, A100-40GB, B200.",
            metavar="NAME",
            show_default="H100-SXM-80GB",
        ),
    ] = None
    gpus_per_node: Annotated[int | None, _layout("GPUs per node.", show_default="8")] = None
    num_nodes: Annotated[
        int | None, _layout("Nodes.", "--nodes", "--num-nodes", show_default="1")
    ] = None
    dp: Annotated[int | None, _layout("Data-parallel degree.", show_default="1")] = None
    tp: Annotated[int | None, _layout("Tensor-parallel degree.", show_default="1")] = None
    pp: Annotated[int | None, _layout("Pipeline stages.", show_default="1")] = None
    cp: Annotated[int | None, _layout("Context-parallel degree.", show_default="1")] = None
    ep: Annotated[
        int | None, _layout("Expert-parallel degree, dividing dp x cp.", show_default="1")
    ] = None
    vpp: Annotated[
        int | None, _layout("Virtual stages per pipeline rank, interleaved 1F1B.", show_default="1")
    ] = None
    pp_schedule: Annotated[
        str | None,
        _layout(
            "Pipeline schedule: 1f1b (interleaved with vpp > 1) or afab (all forwards, then all "
            "backwards).",
            metavar="NAME",
            show_default="1f1b",
        ),
    ] = None
    mbs: Annotated[int | None, _layout("Micro-batch size (sequences).", show_default="1")] = None
    grad_accum: Annotated[
        int | None, _layout("Micro-batches per step, gradient accumulation.", show_default="1")
    ] = None
    zero_stage: Annotated[
        int | None, _layout("ZeRO stage 0-3.", "--zero", "--zero-stage", show_default="0")
    ] = None
    dp_replicate: Annotated[
        int | None,
        _layout(
            "Copies of ZeRO's shards (hybrid sharding: torchtitan's HSDP, Megatron's distributed "
            "optimizer instances); 1: ZeRO over every data-parallel rank.",
            show_default="1",
        ),
    ] = None
    recompute: Annotated[
        str | None, _layout("none, selective or full.", metavar="MODE", show_default="none")
    ] = None
    recompute_layers: Annotated[
        int | None,
        _layout(
            "With --recompute full: layers of each pipeline stage checkpointed (Megatron's block "
            "method, torchtitan's every n-th block); 0: all.",
            show_default="0",
        ),
    ] = None
    sequence_parallel: Annotated[
        bool | None,
        _layout(
            "Sequence parallelism with tp > 1.",
            "--sequence-parallel/--no-sequence-parallel",
            "--sp/--no-sp",
            metavar=None,
            show_default="the framework's",
        ),
    ] = None
    dtype: Annotated[str | None, _layout("bf16 or fp8.", metavar="NAME", show_default="bf16")] = (
        None
    )
    framework: Annotated[
        str | None, _layout(_FRAMEWORKS_HELP, metavar="NAME", show_default=DEFAULT_FRAMEWORK)
    ] = None
    framework_version: Annotated[
        str | None,
        _layout(
            "Framework version where it matters (nanotron: pre-pp-fix or pp-fix).",
            metavar="NAME",
            show_default="the newest",
        ),
    ] = None
    global_batch_seqs: Annotated[
        int | None, _layout("Check the layout yields this global batch (sequences).")
    ] = None

    def given(self) -> dict[str, Any]:
        """The configuration columns given as flags."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


def list_items(text: str, flag: str) -> tuple[str, ...]:
    """The items of a comma-separated list flag, stripped, each once in the order given:
    every list flag is read here. ``torchtitan,torchtitan`` is one item (a choice named twice
    is a choice once); an empty list or an empty item (``1,,2``, ``1,``) is a ConfigError
    naming the flag, for it is a list mistyped, not a shorter one."""
    items = [x.strip() for x in text.split(",")]
    if not any(items):
        raise ConfigError(f"{flag} must list at least one value, got {text!r}")
    if not all(items):
        raise ConfigError(
            f"{flag} must be values separated by single commas, got an empty item in {text!r}"
        )
    return tuple(dict.fromkeys(items))


def parse_nodes(text: str, flag: str = "--nodes") -> tuple[int, ...]:
    """``4`` -> (4,); ``1,2,4`` -> (1, 2, 4); ``1-8`` -> 1, 8 and the powers of two between
    (1, 2, 4, 8; ``1-3``: 1, 2, 3); items combine (``1-4,6``), each count once, sorted."""
    out: set[int] = set()
    for item in list_items(text, flag):
        try:
            if "-" in item:
                lo, hi = (int(x) for x in item.split("-", 1))
                if lo < 1 or hi < lo:
                    raise ValueError
                out.update(n for n in (2**i for i in range(hi.bit_length() + 1)) if lo <= n <= hi)
                out.update((lo, hi))
            else:
                out.add(int(item))
        except ValueError:
            raise ConfigError(
                f"{flag} must be a count (4), a list (1,2,4) or a range (1-8), got {text!r}"
            ) from None
    return tuple(sorted(out))


def ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    """``0,1`` -> (0, 1), each once; None stays None."""
    if text is None:
        return None
    try:
        return tuple(dict.fromkeys(int(x) for x in list_items(text, flag)))
    except ValueError:
        raise ConfigError(f"{flag} must be comma-separated integers, got {text!r}") from None


def floats(text: str, flag: str) -> tuple[float, ...]:
    """``0.5,1`` -> (0.5, 1.0), each once; a value that is not a finite number is refused."""
    try:
        values = tuple(dict.fromkeys(float(x) for x in list_items(text, flag)))
    except ValueError:
        raise ConfigError(f"{flag} must be comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{flag} must be finite numbers, got {text!r}")
    return values


def at_least(minimum: int, **values: int | None) -> None:
    """ConfigError naming the first option below ``minimum`` (``top_k=0``: ``--top-k``)."""
    for name, value in values.items():
        if value is not None and value < minimum:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} must be >= {minimum}, got {value}")


def names(text: str, flag: str) -> tuple[str, ...]:
    """``nanotron, megatron`` -> ('nanotron', 'megatron'), each once (:func:`list_items`)."""
    return list_items(text, flag)


@dataclass(frozen=True)
class SpaceOptions:
    """The layouts ``search`` and ``propose`` consider
    (:class:`surrogate.layouts.space.LayoutSpace`)."""

    gpu: Annotated[str, _space("GPU, e.g. H100-SXM-80GB, A100-40GB, B200.", metavar="NAME")] = (
        "H100-SXM-80GB"
    )
    gpus_per_node: Annotated[int, _space("GPUs per node.", metavar="N")] = 8
    nodes: Annotated[
        str,
        _space(
            "Node count (4), list (1,2,4) or range LO-HI: its ends and the powers of two "
            "between (1-8: 1,2,4,8; 1-3: 1,2,3; 3-12: 3,4,8,12).",
            "--nodes",
            metavar="LIST",
        ),
    ] = "1"
    global_batch_tokens: Annotated[int | None, _space("Global batch in tokens.", metavar="N")] = (
        None
    )
    global_batch_seqs: Annotated[int | None, _space("Global batch in sequences.", metavar="N")] = (
        None
    )
    framework: Annotated[
        str,
        _space(
            "Allowed frameworks (nanotron, torchtitan, megatron; nemo and megatron-bridge name "
            "megatron), comma-separated.",
            "--framework",
            metavar="LIST",
        ),
    ] = DEFAULT_FRAMEWORK
    zero: Annotated[
        str | None,
        _space(
            "Allowed ZeRO stages, e.g. 0,1 (default: every stage the framework runs).",
            "--zero",
            metavar="LIST",
        ),
    ] = None
    recompute: Annotated[
        str, _space("Allowed recompute modes, comma-separated.", "--recompute", metavar="LIST")
    ] = "none,full"
    recompute_shares: Annotated[
        str,
        _space(
            "Shares of each pipeline stage's layers full recomputation may checkpoint on megatron "
            "and torchtitan (each the nearest count the framework writes), comma-separated; must "
            "include 1 (every layer).",
            "--recompute-shares",
            metavar="LIST",
        ),
    ] = "0.25,0.5,0.75,1"
    shardings: Annotated[
        str,
        _space(
            "ZeRO shardings on torchtitan (ZeRO-2/3) and megatron (ZeRO-1): full (over every "
            "data-parallel rank) and node (hybrid: shards over one node's ranks, a copy per "
            "node), comma-separated; must include full.",
            "--shardings",
            metavar="LIST",
        ),
    ] = "full,node"
    memory_margin: Annotated[
        float, _space("Keep this fraction of GPU memory free (0-1).", metavar="X")
    ] = 0.0
    max_cp: Annotated[int | None, _space("Largest context-parallel degree.", metavar="N")] = None
    max_vpp: Annotated[int, _space("Largest virtual pipeline degree.", metavar="N")] = 4
    max_mbs: Annotated[int, _space("Largest micro-batch (sequences).", metavar="N")] = 64
    dtype: Annotated[
        str,
        _space(
            "Precision of every layout: bf16 or fp8 (each framework's FP8 recipe, as predict "
            "--dtype fp8).",
            "--dtype",
            metavar="NAME",
        ),
    ] = "bf16"

    def limits(self, max_p_oom: float) -> Any:
        """The search's limits: ``max_p_oom`` and this memory margin."""
        from surrogate.layouts.search import Limits

        return Limits(max_p_oom=max_p_oom, memory_margin_frac=self.memory_margin)

    def space(self, model: Any) -> Any:
        """The LayoutSpace of ``model`` (a ModelConfig) these options allow."""
        from surrogate.layouts.degrees import batch_seqs_from_tokens
        from surrogate.layouts.space import LayoutSpace

        tokens, seqs = self.global_batch_tokens, self.global_batch_seqs
        if (tokens is None) == (seqs is None):
            raise ConfigError(
                "give the global batch: --global-batch-tokens or --global-batch-seqs (one of them)"
            )
        if seqs is None:
            seqs = batch_seqs_from_tokens(int(tokens or 0), model.seq_len)
        return LayoutSpace(  # the closed choices are checked by LayoutSpace, saying which
            model=model,
            global_batch_seqs=seqs,
            gpu=self.gpu,
            gpus_per_node=self.gpus_per_node,
            node_counts=parse_nodes(self.nodes),
            frameworks=names(self.framework, "--framework"),
            zero_stages=cast(Any, ints(self.zero, "--zero")),
            recompute_modes=cast(Any, names(self.recompute, "--recompute")),
            recompute_shares=floats(self.recompute_shares, "--recompute-shares"),
            shardings=cast(Any, names(self.shardings, "--shardings")),
            max_cp=self.max_cp,
            max_vpp=self.max_vpp,
            max_mbs=self.max_mbs,
            dtype=cast(Any, self.dtype),
        )


ProfileOpt = Annotated[
    Path | None,
    _option(
        "--profile",
        help="Calibration profile of your cluster: a JSON file from `surrogate "
        "calibrate`, or a shipped one by name, e.g. hf-playbook-cluster (default: the GPU's own, "
        "else its datasheet).",
        panel=LAYOUT,
        metavar="FILE|NAME",
    ),
]
NetworkOpt = Annotated[
    str | None,
    _option(
        "--network",
        help="The network of the day between the job's nodes: an nccl-tests "
        "all_reduce_perf log, or the all-reduce bus bandwidth measured at the job's node count, "
        "e.g. 120GBps (default: the profile's curve).",
        panel=LAYOUT,
        metavar="LOG|GBps",
    ),
]
ModelDirOpt = Annotated[
    Path | None,
    _option(
        "--model-dir",
        help="A trained model directory (default: the bundled model).",
        panel=OUTPUT,
        metavar="DIR",
    ),
]
AnalyticOpt = Annotated[
    bool,
    _option(
        "--analytic", help="The analytic model alone, without the learned correction.", panel=OUTPUT
    ),
]
JsonOpt = Annotated[bool, _option("--json", help="Print JSON instead of tables.", panel=OUTPUT)]
RankOpt = Annotated[
    str,
    _option(
        "--rank",
        help="mean: rank by predicted MFU; safe: by its 10% quantile (the 80% "
        "interval's lower end).",
        panel=OUTPUT,
        metavar="mean|safe",
    ),
]
WideOpt = Annotated[
    bool,
    _option(
        "--wide",
        help="Every column, at least 160 characters wide (default: fewer columns below 110).",
        panel=OUTPUT,
    ),
]


def check_profile(profile: Path | None) -> None:
    """Read ``--profile`` before any work: DataError naming the shipped profiles if it is
    neither one of them nor a readable profile file."""
    if profile is not None:
        from surrogate.hardware.profile import load_profile

        load_profile(profile)


@functools.cache
def _group_parameters(kind: type[Any]) -> list[inspect.Parameter]:
    """An option group's fields as keyword parameters, annotated for typer (once per group)."""
    hints = get_type_hints(kind, include_extras=True)
    return [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name]
        )
        for f in fields(kind)
    ]


def with_options(command: _F) -> _F:
    """``command`` with each parameter annotated by an option group (a dataclass above)
    replaced, for typer, by the group's fields; called, it receives the group built from
    them."""
    hints = get_type_hints(command, include_extras=True)
    groups: dict[str, type[Any]] = {}
    params: list[inspect.Parameter] = []
    for p in inspect.signature(command).parameters.values():
        kind = hints[p.name]
        if not (isinstance(kind, type) and is_dataclass(kind)):
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=kind))
            continue
        groups[p.name] = kind
        params += _group_parameters(kind)

    @functools.wraps(command)
    def run(**kwargs: Any) -> Any:
        for name, kind in groups.items():
            kwargs[name] = kind(**{f.name: kwargs.pop(f.name) for f in fields(kind)})
        return command(**kwargs)

    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    del run.__wrapped__  # typer reads the signature above, not the command's
    return run  # type: ignore[return-value]
