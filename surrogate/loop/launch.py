"""Ready-to-run launch files for a layout: a torchtitan TOML, a torchrun command, a Slurm script.

The TOML uses the names of torchtitan's ``JobConfig`` (pytorch/torchtitan
``torchtitan/config/job_config.py``; every key written is in torchtitan 0.2.2's, the last
release that reads TOML job configs: 0.3.0 takes a Python config function and command-line
overrides): ``[training] local_batch_size, global_batch_size, seq_len, steps``;
``[parallelism] data_parallel_replicate_degree, data_parallel_shard_degree`` (ZeRO-0: dp
replicas; ZeRO-2/3: ``dp_replicate`` copies, HSDP where there are several, of shards over the
rest of dp), ``fsdp_reshard_after_forward, tensor_parallel_degree, pipeline_parallel_degree,
pipeline_parallel_schedule, pipeline_parallel_microbatch_size, context_parallel_degree,
expert_parallel_degree, expert_tensor_parallel_degree`` (tp, with ep > 1: the surrogate's
layout, where torchtitan's default 1 would lend tp to ep) and the pipeline split
(:func:`torchtitan_stage_split`); ``[activation_checkpoint] mode``; ``[model] name``, the
torchtitan model with the model's blocks (:func:`torchtitan_model`: llama3, llama4 for
mixture-of-experts layers, deepseek_v3 for latent attention), and ``flavor``, a shipped
flavour or ``custom``, whose shape the comment lines give, and under fp8 ``converters``
(torchao's Float8 linears, ``surrogate.ingest.torchtitan.FLOAT8_CONVERTER``). It reads back
through :func:`surrogate.ingest.torchtitan.config_values` to the same layout, pipeline schedule
and virtual stages included (:func:`torchtitan_toml`). tomli-w writes it (strings escaped),
after comment lines that give the layout; the schedule names come from the framework's traits
(:mod:`surrogate.config.frameworks`), which also decide which layouts can be written
(:func:`launch_problem`).

Safety: every value written into a script is either an integer taken from a validated
:class:`~surrogate.config.training.TrainingConfig`, a name matching :data:`SAFE_NAME`, or a path
checked
by :func:`check_path` and quoted with :func:`shlex.quote`; nothing read from an input file
reaches a shell unchecked. Files are written atomically (temporary file, then rename).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from surrogate.analytic.flops import every_nth_block
from surrogate.analytic.inputs import cols_from_table, to_cols
from surrogate.analytic.params import ParameterSets
from surrogate.analytic.pipeline import weighted_first_rank_layers
from surrogate.config.frameworks import get_framework
from surrogate.config.model import ARCHITECTURE_FIELDS, ModelConfig
from surrogate.config.presets import TORCHTITAN_FLAVOURS
from surrogate.config.table import FlatTable, runs_as_another, take
from surrogate.config.training import TrainingConfig
from surrogate.errors import ConfigError
from surrogate.ingest.torchtitan import FLOAT8_CONVERTER
from surrogate.io.atomic import atomic_path

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
"""Run and job names: letters, digits, ``_ . -``; no leading dot or dash."""
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+-][A-Za-z0-9_./+@-]*$")
RDZV_PORT = 29500
CONFIG_FILE = "config.toml"
LAUNCH_FILE = "launch.sh"
SBATCH_FILE = "job.sbatch"
FLAVOUR_FILE = "flavour.json"
TRAIN_SCRIPT = "train_custom.py"
TRAIN_SCRIPT_TEXT = '''"""torchtitan's trainer, the model of flavour.json (beside this file, written
by surrogate's launch files) registered as flavour "custom" of its torchtitan model:

    torchrun ... train_custom.py --job.config_file config.toml
"""
import importlib
import json
from pathlib import Path

def register(path: Path) -> None:
    spec = json.loads(path.read_text(encoding="utf-8"))
    name = spec["torchtitan_model"]
    module = importlib.import_module(f"torchtitan.models.{name}")
    args = dict(spec["model_args"])
    if "moe_args" in args:
        from torchtitan.models.moe import MoEArgs

        args["moe_args"] = MoEArgs(**args["moe_args"])
    getattr(module, f"{name}_args")["custom"] = module.TransformerModelArgs(**args)

if __name__ == "__main__":
    register(Path(__file__).with_name("flavour.json"))
    from torchtitan.train import Trainer, main

    main(Trainer)
'''
"""The script a custom shape's launch files run in place of ``-m torchtitan.train``: it needs
torchtitan alone (not the surrogate), registers ``flavour.json``'s model and starts torchtitan's
own trainer (the way ``microbench/torchtitan_runs.py`` ran torchtitan 0.2.2 on an H100)."""


def check_name(name: str) -> str:
    """``name`` if it is a safe run/job name; ConfigError otherwise."""
    if not isinstance(name, str) or not SAFE_NAME.match(name):
        raise ConfigError(
            "a run name must be 1-100 letters, digits, '_', '.' or '-' and start with a letter "
            f"or digit, got {name!r}"
        )
    return name


def check_path(path: str | Path) -> str:
    """``path`` as a string if it is made of safe characters (no spaces, quotes, ``$``, ``;``,
    newlines...); ConfigError otherwise. Safe paths are still quoted where they are used."""
    text = str(path)
    if not _SAFE_PATH.match(text) or ".." in Path(text).parts:
        raise ConfigError(
            "a path written into a launch script may hold only letters, digits and "
            f"'_ . / + - @' (and no '..'), got {text!r}"
        )
    return text


LAUNCH_FRAMEWORK = "torchtitan"
"""The framework launch files are written for."""
LAUNCH_DTYPES: tuple[str, ...] = ("bf16", "fp8")
"""Dtypes the writer knows torchtitan's settings for: fp8 is its Float8 converter
(:data:`surrogate.ingest.torchtitan.FLOAT8_CONVERTER`)."""


def launchable(table: FlatTable) -> np.ndarray:
    """Per configuration of a valid flat table, whether :func:`launch_problem` finds nothing:
    the same rules, on columns (what the framework runs as another layout judged once per
    distinct layout, :func:`surrogate.config.table.runs_as_another`; torchtitan's count of
    checkpointed blocks on the rows that have one)."""
    ok = (
        (table["framework"] == LAUNCH_FRAMEWORK)
        & np.isin(table["dtype"], LAUNCH_DTYPES)
        & (runs_as_another(table) == "")
    )
    counted = np.flatnonzero(ok & (table["recompute_layers"] > 0))
    if counted.size:
        cols = cols_from_table(take(table, counted), ParameterSets())
        ok[counted] = every_nth_block(cols) > 0
    return np.asarray(ok, dtype=bool)


def launch_problem(cfg: TrainingConfig) -> str | None:
    """Why ``cfg`` cannot be written as a torchtitan run, or None if it can: what torchtitan
    does not run as described
    (:meth:`~surrogate.config.framework_traits.FrameworkTraits.runs_as_another`),
    or a dtype the writer does not handle."""
    lay = cfg.layout
    if lay.framework != LAUNCH_FRAMEWORK:
        return f"launch files are {LAUNCH_FRAMEWORK} configs; the layout is for {lay.framework}"
    problem = cfg.runs_as_another()
    if problem:
        return problem
    if lay.recompute_layers and _every_nth_block(cfg) is None:
        return (
            f"torchtitan checkpoints every n-th block of a pipeline rank, floor("
            f"{_rank0_layers(cfg)} layers of the first rank / n) of them: "
            f"recompute_layers={lay.recompute_layers} is not one of those counts"
        )
    if lay.dtype not in LAUNCH_DTYPES:
        return f"only {' or '.join(LAUNCH_DTYPES)} launch files are written, got {lay.dtype}"
    return None


def torchtitan_model(cfg: TrainingConfig) -> str:
    """The torchtitan model (``[model] name``) whose blocks ``cfg``'s model has: ``deepseek_v3``
    with multi-head latent attention, ``llama4`` with mixture-of-experts layers (torchtitan's
    llama3 has none), else ``llama3``. A shape that is not a shipped flavour is written as
    flavour ``custom`` of that model, which ``train_custom.py`` registers where the launch
    files hold it (:func:`custom_flavour`) and the user otherwise."""
    m = cfg.model
    if m.q_lora_rank or m.kv_lora_rank:
        return "deepseek_v3"
    return "llama4" if m.num_experts else "llama3"


def torchtitan_model_args(model: ModelConfig) -> tuple[str, dict[str, Any]]:
    """torchtitan's model (:func:`torchtitan_model`: ``llama3`` or ``llama4``) and the
    ``TransformerModelArgs`` keywords that build ``model`` exactly; ValueError naming what
    torchtitan's llama models cannot build (tied embeddings, a head width other than hidden /
    heads, latent attention, leading dense layers, a shared expert of another width).

    llama3 sizes its MLP as ``multiple_of`` x ceil(``ffn_dim_multiplier`` x int(8 dim / 3) /
    ``multiple_of``); with ``multiple_of`` = the wanted width and a multiplier that lands just
    under it, that is the width. llama4 sizes its experts the same way (from 4 dim, with
    ``auto_scale_hidden_dim`` off, so the width is not divided by top-k + shared experts),
    and its shared expert has the experts' width times ``num_shared_experts`` (none or one
    here). Every layer is an MoE layer (``interleave_moe_layer_step`` = 1); the router is
    torchtitan's default (sigmoid scores, weighting the tokens before the experts,
    load-balancing bias). Checked on torchtitan 0.2.2: its parameter count of each shape
    built this way is the surrogate's (``datasets/h100/2026-11-24/torchtitan``)."""
    if model.tie_embeddings:
        raise ValueError(f"torchtitan's llama models do not tie embeddings: {model.name}")
    if not model.gated_mlp:
        raise ValueError(
            f"torchtitan's llama models have a SwiGLU MLP: {model.name} has a "
            "two-matrix one (gated_mlp=False)"
        )
    if model.attention_head_dim * model.num_heads != model.hidden_size:
        raise ValueError(
            f"torchtitan's llama models have heads of hidden / heads: "
            f"{model.name} has {model.num_heads} of {model.attention_head_dim}"
        )
    if model.num_dense_layers or model.q_lora_rank or model.kv_lora_rank:
        raise ValueError(
            f"{model.name}: leading dense layers and latent attention are not "
            "written as llama flavours"
        )
    base = int(2 * 4 * model.hidden_size / 3)
    args: dict[str, Any] = {
        "dim": model.hidden_size,
        "n_layers": model.num_layers,
        "n_heads": model.num_heads,
        "n_kv_heads": model.num_kv_heads,
        "vocab_size": model.vocab_size,
        "rope_theta": 500000,
    }
    if not model.is_moe:
        width = model.ffn_hidden_size
        return "llama3", args | {"multiple_of": width, "ffn_dim_multiplier": (width - 0.5) / base}
    width = model.expert_ffn_hidden_size
    shared = model.shared_expert_ffn_hidden_size
    if shared not in (0, width):
        raise ValueError(
            f"a torchtitan llama4 shared expert has the experts' width {width}, got {shared}"
        )
    return "llama4", args | {
        "multiple_of": width,
        "ffn_dim_multiplier": (width - 0.5) / base,
        "auto_scale_hidden_dim": False,
        "interleave_moe_layer_step": 1,
        "moe_args": {
            "num_experts": model.num_experts,
            "top_k": model.experts_topk,
            "num_shared_experts": 1 if shared else 0,
        },
    }


def custom_flavour(cfg: TrainingConfig) -> dict[str, Any] | None:
    """``flavour.json`` of a shape torchtitan does not ship (``torchtitan_model``,
    ``model_args``: :func:`torchtitan_model_args`), or None for a shipped flavour or a shape
    its llama models cannot build (the TOML's comment then gives the shape to register)."""
    if cfg.model.name in TORCHTITAN_FLAVOURS:
        return None
    try:
        name, args = torchtitan_model_args(cfg.model)
    except ValueError:
        return None
    return {"torchtitan_model": name, "model_args": args}


def torchtitan_stage_split(num_layers: int, stages: int) -> dict[str, Any]:
    """``[parallelism]`` keys that make torchtitan split ``num_layers`` into ``stages`` virtual
    pipeline stages the way the surrogate models it (``surrogate.analytic.pipeline``: the
    embedding and the head take one layer's slot each, stated explicitly).

    torchtitan (0.2.2, the last release that reads TOML job configs, and 0.3.0 alike;
    ``distributed/pipeline_parallel.py``) makes ceil((L + 2) /
    ``pipeline_parallel_layers_per_stage``) virtual stages; where no whole number gives exactly
    ``stages`` (e.g. 32 layers in 16), the stages' modules are listed instead
    (``module_fqns_per_model_part``, with the names torchtitan 0.2.2's own split uses)."""
    slots = num_layers + 2
    out: dict[str, Any] = {
        "pipeline_parallel_first_stage_less_layers": 1,
        "pipeline_parallel_last_stage_less_layers": 1,
    }
    per_stage = -(-slots // stages)
    if -(-slots // per_stage) == stages:
        return out | {"pipeline_parallel_layers_per_stage": per_stage}
    base, extra = divmod(slots, stages)
    parts: list[list[str]] = []
    layer = 0
    for k in range(stages):
        take = base + (k < extra) - (k == 0) - (k == stages - 1)
        names = [f"layers.{i}" for i in range(layer, layer + take)]
        layer += take
        parts.append(
            (["tok_embeddings"] if k == 0 else [])
            + names
            + (["norm", "output"] if k == stages - 1 else [])
        )
    return out | {"module_fqns_per_model_part": parts}


def torchtitan_toml(
    cfg: TrainingConfig, *, run_name: str, steps: int = 50, dump_folder: str = "./outputs"
) -> str:
    """The torchtitan job TOML of ``cfg``.

    Batch mapping: without pipeline parallelism ``local_batch_size`` = mbs and
    ``global_batch_size`` = mbs x dp x grad_accum (torchtitan accumulates the difference). With
    it, one optimizer step is ``grad_accum`` pipeline micro-batches: ``local_batch_size`` =
    mbs x grad_accum and ``pipeline_parallel_microbatch_size`` = mbs (the torchtitan ingest
    reads both back to the same mbs and grad_accum)."""
    problem = launch_problem(cfg)
    if problem:
        raise ConfigError(f"cannot write a torchtitan config: {problem}")
    check_name(run_name)
    if steps < 1:
        raise ConfigError(f"steps must be >= 1, got {steps}")
    check_path(dump_folder)
    m, lay = cfg.model, cfg.layout
    traits = get_framework(lay.framework)
    flavour = TORCHTITAN_FLAVOURS.get(m.name)
    local = lay.mbs * (lay.grad_accum if lay.pp > 1 else 1)
    # ZeRO-0: DDP over dp; else FSDP over dp / dp_replicate (x cp), HSDP with copies
    replicate = lay.dp if lay.zero_stage == 0 else lay.dp_replicate
    shard = lay.dp // replicate
    reshard = {0: "default", 2: "never", 3: "always"}[lay.zero_stage]
    comments = [
        f"# surrogate launch config: {run_name}",
        f"# layout: dp={lay.dp} tp={lay.tp} pp={lay.pp} cp={lay.cp} ep={lay.ep} vpp={lay.vpp} "
        f"mbs={lay.mbs} grad_accum={lay.grad_accum} zero_stage={lay.zero_stage} "
        + (f"dp_replicate={lay.dp_replicate} " if lay.dp_replicate > 1 else "")
        + f"recompute={lay.recompute}"
        + (f" recompute_layers={lay.recompute_layers}" if lay.recompute_layers else "")
        + f" on {cfg.cluster.num_nodes} x {cfg.cluster.gpus_per_node} "
        f"{cfg.cluster.gpu}",
    ]
    if flavour is None:
        moe = (
            f" num_experts={m.num_experts} experts_topk={m.experts_topk} "
            f"moe_ffn_hidden_size={m.expert_ffn_hidden_size}"
            if m.is_moe
            else ""
        )
        comments.append(
            "# model shape ("
            + (
                "train_custom.py registers it from flavour.json"
                if custom_flavour(cfg)
                else "register it as a torchtitan flavour"
            )
            + f"): num_layers={m.num_layers} "
            f"hidden_size={m.hidden_size} ffn_hidden_size={m.ffn_hidden_size} "
            f"num_heads={m.num_heads} num_kv_heads={m.num_kv_heads} vocab_size={m.vocab_size}"
            + (" tie_embeddings=true" if m.tie_embeddings else "")
            + moe
            + "".join(f" {n}={getattr(m, n)}" for n in ARCHITECTURE_FIELDS if getattr(m, n))
        )
    if lay.dtype == "fp8":
        comments.append(
            f"# fp8: torchao's Float8 linears ([model] converters {FLOAT8_CONVERTER}, "
            "tensorwise); the cluster needs torchao installed"
        )
    name, flav = flavour or (torchtitan_model(cfg), "custom")
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": reshard,
        "tensor_parallel_degree": lay.tp,
        "pipeline_parallel_degree": lay.pp,
        "context_parallel_degree": lay.cp,
        "expert_parallel_degree": lay.ep,
    }
    if lay.ep > 1:  # the experts split over tp too, as modelled (torchtitan's default is 1)
        parallelism["expert_tensor_parallel_degree"] = lay.tp
    if lay.pp > 1:
        parallelism |= {
            "pipeline_parallel_schedule": (
                traits.interleaved_schedule
                if lay.vpp > 1
                else traits.pipeline_schedules[lay.pp_schedule]
            ),
            "pipeline_parallel_microbatch_size": lay.mbs,
            **torchtitan_stage_split(m.num_layers, lay.pp * lay.vpp),
        }
    doc = {
        "job": {"dump_folder": dump_folder, "description": run_name},
        "model": {
            "name": name,
            "flavor": flav,
            **({"converters": [FLOAT8_CONVERTER]} if lay.dtype == "fp8" else {}),
        },
        "training": {
            "local_batch_size": local,
            "global_batch_size": local * lay.dp * (1 if lay.pp > 1 else lay.grad_accum),
            "seq_len": m.seq_len,
            "steps": steps,
        },
        "parallelism": parallelism,
        "activation_checkpoint": _torchtitan_checkpointing(cfg),
        "metrics": {"log_freq": 1},
    }
    return "\n".join(comments) + "\n\n" + tomli_w.dumps(doc)


def _torchtitan_checkpointing(cfg: TrainingConfig) -> dict[str, str]:
    """torchtitan's ``[activation_checkpoint]`` for a layout's recomputation: 'selective' runs
    per operator (``selective_ac_option = "op"``, ``FrameworkTraits.selective_per_op``), written
    out because torchtitan's own default option, "2", checkpoints every second block in full
    instead; full recomputation of ``recompute_layers`` of a stage's layers is that option
    with the n that checkpoints as many on the first rank (:func:`_every_nth_block`)."""
    lay = cfg.layout
    if lay.recompute == "selective":
        return {"mode": "selective", "selective_ac_option": "op"}
    if lay.recompute_layers:
        return {"mode": "selective", "selective_ac_option": str(_every_nth_block(cfg))}
    return {"mode": lay.recompute}


def _rank0_layers(cfg: TrainingConfig) -> int:
    """Transformer layers on torchtitan's first pipeline rank (its weighted split)."""

    return weighted_first_rank_layers(cfg.model.num_layers, cfg.layout.pp, cfg.layout.vpp)


def _every_nth_block(cfg: TrainingConfig) -> int | None:
    """The smallest n >= 2 for which torchtitan's every-n-th-block checkpointing checkpoints
    ``recompute_layers`` of the first rank's layers (floor(layers / n)), or None: the n the
    analytic model counts with (``analytic.flops.every_nth_block``)."""
    n = int(every_nth_block(to_cols([cfg], ParameterSets()))[0])
    return n or None


def torchrun_command(
    cfg: TrainingConfig, config_path: str | Path, script: str | Path | None = None
) -> str:
    """The torchrun command line (one node: ``--standalone``; several: a c10d rendezvous on
    ``$MASTER_ADDR``, which the caller or Slurm script sets), running torchtitan's trainer
    (``-m torchtitan.train``) or ``script`` (:data:`TRAIN_SCRIPT` for a custom flavour)."""
    c = cfg.cluster
    path = shlex.quote(check_path(config_path))
    entry = "-m torchtitan.train" if script is None else shlex.quote(check_path(script))
    if c.num_nodes == 1:
        rdzv = "--standalone"
    else:
        rdzv = (
            f'--rdzv_backend c10d --rdzv_endpoint "${{MASTER_ADDR:?}}:{RDZV_PORT}" '
            '--rdzv_id "${RDZV_ID:-surrogate}"'
        )
    return (
        f"torchrun --nnodes {int(c.num_nodes)} --nproc_per_node {int(c.gpus_per_node)} "
        f"{rdzv} {entry} --job.config_file {path}"
    )


SBATCH_TIME_LIMIT = "00:30:00"
"""The wall-clock limit (``#SBATCH --time``) of each run's job.sbatch."""


def sbatch_script(
    cfg: TrainingConfig,
    *,
    job_name: str,
    config_path: str | Path,
    time_limit: str = SBATCH_TIME_LIMIT,
    script: str | Path | None = None,
) -> str:
    """A Slurm batch script running the torchrun command on every node (log: train-<job>.log
    in the submission directory, where ``surrogate ingest`` finds it beside the TOML)."""
    check_name(job_name)
    if not re.fullmatch(r"\d{1,3}:\d{2}:\d{2}", time_limit):
        raise ConfigError(f"time limit must be HH:MM:SS, got {time_limit!r}")
    c = cfg.cluster
    command = torchrun_command(cfg, config_path, script).replace(
        '"${RDZV_ID:-surrogate}"', '"$SLURM_JOB_ID"'
    )
    return "\n".join(
        [
            "#!/bin/bash",
            f"#SBATCH --job-name={job_name}",
            f"#SBATCH --nodes={int(c.num_nodes)}",
            "#SBATCH --ntasks-per-node=1",
            f"#SBATCH --gpus-per-node={int(c.gpus_per_node)}",
            "#SBATCH --exclusive",
            f"#SBATCH --time={time_limit}",
            "#SBATCH --output=train-%j.log",
            "set -euo pipefail",
            'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "export MASTER_ADDR",
            f"srun {command}",
            "",
        ]
    )


@dataclass(frozen=True, kw_only=True)
class LaunchFiles:
    directory: Path
    config: Path
    launch: Path
    sbatch: Path
    command: str


def write_launch_files(
    cfg: TrainingConfig, directory: str | Path, *, run_name: str, steps: int = 50
) -> LaunchFiles:
    """Write ``config.toml``, ``launch.sh`` (torchrun) and ``job.sbatch`` into ``directory``;
    for a shape torchtitan does not ship but can build (:func:`custom_flavour`) also
    ``flavour.json`` and ``train_custom.py``, which the scripts run to register it.

    The scripts refer to the files by their names relative to the directory they run in."""
    check_name(run_name)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    toml_text = torchtitan_toml(cfg, run_name=run_name, steps=steps)
    flavour = custom_flavour(cfg)
    script = TRAIN_SCRIPT if flavour else None
    if flavour:
        _write_atomic(d / FLAVOUR_FILE, json.dumps(flavour, indent=1) + "\n")
        _write_atomic(d / TRAIN_SCRIPT, TRAIN_SCRIPT_TEXT)
    command = torchrun_command(cfg, CONFIG_FILE, script)
    launch = "\n".join(
        [
            "#!/bin/bash",
            f"# {run_name}: run from this directory (several nodes: set MASTER_ADDR on each)",
            "set -euo pipefail",
            'cd "$(dirname "$0")"',
            f"{command} 2>&1 | tee train.log",
            "",
        ]
    )
    sbatch = sbatch_script(cfg, job_name=run_name, config_path=CONFIG_FILE, script=script)
    paths = (d / CONFIG_FILE, d / LAUNCH_FILE, d / SBATCH_FILE)
    for path, text in zip(paths, (toml_text, launch, sbatch), strict=True):
        _write_atomic(path, text, executable=path.suffix != ".toml")
    return LaunchFiles(
        directory=d, config=paths[0], launch=paths[1], sbatch=paths[2], command=command
    )


def _write_atomic(path: Path, text: str, *, executable: bool = False) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
        if executable:
            os.chmod(tmp, 0o755)
