"""torchtitan training logs and their TOML job configs.

The per-step line (pytorch/torchtitan ``train.py``/``metrics.py``; older versions wrote
``wps`` and no ``tflops``)::

    [rank0]:[titan] 2025-01-10 12:00:05,123 - root - INFO - step: 10  loss:  7.6543
        grad_norm:  1.2345  memory: 43.64GiB(45.94%)  tps: 6,530  tflops: 378.16  mfu: 38.24%

(one line in the log, often with ANSI colours, which are removed). ``memory`` is the peak
*reserved* memory in GiB (torchtitan's ``max_reserved_gib``); ``tps`` is tokens per second per
GPU; ``tflops`` and ``mfu`` use torchtitan's own FLOPs count and peak and are kept as
``tflops_per_gpu_reported`` and ``mfu_reported`` (percent); ``mfu`` is recomputed.

The configuration comes from the job TOML (``--job.config_file``) beside the log (the only
``*.toml`` there, else ``config.toml``, ``train.toml`` or ``job_config.toml``), completed by
``ingest --set``:

- ``[model] name, flavor``: llama3 8B / 70B / 405B map to the presets ``llama3-*``; other
  models need ``--set model=...`` or the shape columns.
- ``[training] local_batch_size`` (older ``batch_size``) -> mbs, ``seq_len``, ``steps``,
  ``global_batch_size`` (if > 0) -> grad_accum = global / (local x dp). With pipeline
  parallelism, ``[parallelism] pipeline_parallel_microbatch_size`` is the mbs and the local
  batch holds local / mbs of them: grad_accum = (local / mbs) x global / (local x dp).
- ``[parallelism]`` dp = replicate x shard degrees (shard -1 fills the world, which then
  needs ``--set num_nodes``); tensor, pipeline, context, expert degrees; FSDP (over shard x
  cp ranks, where that is above 1) is ZeRO-3, or ZeRO-2 when parameters are not resharded
  after forward (``never``, or ``default`` with pipeline parallelism); TP always runs with
  sequence parallelism; replicas beside sharded ranks (HSDP) -> ``dp_replicate`` =
  ``data_parallel_replicate_degree``. Skipped with the reason: expert parallelism with tp
  lent to it (``expert_tensor_parallel_degree`` other than tp, torchtitan's default 1).
- Precision: bf16 mixed precision, the default, where it runs: FSDP applies
  ``[training] mixed_precision_param`` (shard x cp above 1), ``torch.autocast`` does under DDP
  or on one GPU, and with tp or pp > 1 and neither torchtitan disables it and trains in fp32
  (``distributed/utils.py`` ``maybe_enable_amp``). ``[model] converters`` naming float8 for
  the linears (``float8``, ``quantize.linear.float8``) -> dtype fp8. Skipped with the reason:
  fp32 training (that case, or ``mixed_precision_param = "float32"``), ``[training] dtype =
  "bfloat16"`` (bf16 states without fp32 master weights), other converters (MX formats, fp8
  for the experts alone): precisions the surrogate does not model.
- ``[activation_checkpoint] mode`` none / full -> recompute; selective with
  ``selective_ac_option`` "op" (per operator) -> selective; an integer n (torchtitan's
  default, "2", also where the config has no such section) checkpoints every n-th block of a
  pipeline rank in full (one counter over the rank's blocks, ``distributed/
  activation_checkpoint.py``): recompute full with ``recompute_layers`` = floor(layers of the
  first rank / n) (0, every layer, for n = 1; recompute none where it is 0 layers), which
  needs the model's layer count (its preset, or ``--set num_layers``).
- ``[parallelism] pipeline_parallel_schedule`` (with pp > 1): ``1F1B`` -> pp_schedule 1f1b,
  ``GPipe`` -> afab, ``Interleaved1F1B`` -> vpp = virtual stages / pp, as torchtitan 0.2.2
  counts them: ceil((num_layers + first_stage_less_layers + last_stage_less_layers) /
  ``pipeline_parallel_layers_per_stage``), or the length of ``module_fqns_per_model_part``,
  or 2 per rank when neither is given (or ``--set vpp=N``). The surrogate models torchtitan's
  default split (``surrogate.analytic.pipeline``: one slot each for the embedding and the
  head); a run that sets other slots or lists other modules is modelled with it. The other
  schedules of
  torch.distributed.pipelining (zero-bubble, looped BFS, DualPipe) are not modelled: the run
  is skipped with that reason.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from surrogate.analytic.pipeline import weighted_first_rank_layers
from surrogate.config.frameworks import get_framework
from surrogate.config.presets import TORCHTITAN_FLAVOURS, get_preset
from surrogate.errors import ConfigError, DataError, shown
from surrogate.ingest.logrun import LogRun, human_number, read_log, read_optional, run_row, steady
from surrogate.ingest.report import IngestReport
from surrogate.ingest.runconfig import place_on_nodes
from surrogate.io.input_files import read_input_text
from surrogate.runs.sweeps import frame_from_rows

SOURCE = "torchtitan"
MARKERS: tuple[str, ...] = ("[titan]",)
_STEP = re.compile(r"step:\s*(\d+)\s+loss:\s*(\S+)(?P<rest>.*)$", re.MULTILINE)
_MEMORY = re.compile(r"memory:\s*([\d.]+)GiB")
_TPS = re.compile(r"\b(?:tps|wps):\s*([\d,.]+[KMG]?)")
_TFLOPS = re.compile(r"\btflops:\s*([\d,.]+)")
_MFU = re.compile(r"\bmfu:\s*([\d.]+)%")
_DATE = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
STEP_LINE = re.compile(r"step:\s*\d+\s+loss:.*\b(?:tps|wps):")
"""A torchtitan step line (used by :mod:`surrogate.ingest.detect`)."""

FLAVOURS: dict[tuple[str, str], str] = {
    (name.lower(), flavour.lower()): preset
    for preset, (name, flavour) in TORCHTITAN_FLAVOURS.items()
}
"""``[model] name, flavor`` (lower case) -> preset: the launch writer's table, read back."""


def _section(cfg: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The ``[name]`` table of a job config ({} when absent); DataError if it is a value."""
    section = cfg.get(name, {})
    if not isinstance(section, Mapping):
        raise DataError(f"[{name}] must be a table of settings, got {name} = {shown(section)}")
    return section


def _count(
    section: str,
    table: Mapping[str, Any],
    key: str,
    default: int | None = None,
    *,
    minimum: int = 1,
    unset: tuple[int, ...] = (),
) -> int | None:
    """The integer setting ``[section] key`` (``default`` when absent), >= ``minimum`` or one
    of ``unset`` (torchtitan's -1 "fill" or "not set"); DataError naming the key otherwise,
    never a float truncated or a negative degree read on."""
    value = table.get(key, default)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (value < minimum and value not in unset)
    ):
        also = "".join(f" or {u}" for u in unset)
        raise DataError(
            f"[{section}] {key} must be an integer >= {minimum}{also}, got {shown(value)}"
        )
    return value


def _world_shard(rest: int, given: dict[str, Any]) -> int:
    """The shard degree of ``data_parallel_shard_degree = -1``: what fills the world the
    command line gives (``num_nodes``, ``gpus_per_node``) beside the other degrees, whose
    product is ``rest``."""
    if "num_nodes" not in given:
        raise DataError(
            "data_parallel_shard_degree = -1 fills the world, whose size the config does "
            "not give: pass --set num_nodes=N (and gpus_per_node if not 8)"
        )
    world = int(given["num_nodes"]) * int(given.get("gpus_per_node", 8))
    if world % rest:
        raise DataError(
            f"the world size ({world}) must be divisible by replicate x tp x pp x cp "
            f"({rest}) when data_parallel_shard_degree = -1"
        )
    return world // rest


def _batch_values(
    training: dict[str, Any], par: dict[str, Any], pp: int, dp: int
) -> dict[str, Any]:
    """``mbs``, ``grad_accum`` and ``seq_len`` of a job config's training and parallelism
    sections, under ``pp`` pipeline stages and ``dp`` data-parallel ranks."""
    out: dict[str, Any] = {}
    local = training.get("local_batch_size", training.get("batch_size"))
    # With pipeline parallelism torchtitan splits the local batch into pipeline micro-batches
    # of pipeline_parallel_microbatch_size: those are our mbs and (times any gradient
    # accumulation steps) our grad_accum.
    pp_mbs = par.get("pipeline_parallel_microbatch_size")
    split = 1
    if local is not None:
        out["mbs"] = int(local)
        if pp > 1 and pp_mbs is not None:
            if int(local) % int(pp_mbs):
                raise DataError(
                    f"local_batch_size ({local}) must be a multiple of "
                    f"pipeline_parallel_microbatch_size ({pp_mbs})"
                )
            out["mbs"] = int(pp_mbs)
            split = int(local) // int(pp_mbs)
            out["grad_accum"] = split
    if training.get("seq_len") is not None:
        out["seq_len"] = int(training["seq_len"])
    gbs = int(training.get("global_batch_size", -1) or -1)
    if gbs > 0 and local is not None:
        per_step = int(local) * dp
        if gbs % per_step:
            raise DataError(
                f"global_batch_size ({gbs}) must be a multiple of local_batch_size x dp "
                f"({per_step})"
            )
        out["grad_accum"] = split * (gbs // per_step)
    return out


def config_values(cfg: dict[str, Any], given: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """Configuration columns from a torchtitan job config (parsed TOML), and its step count.

    ``given`` is consulted for the world size when ``data_parallel_shard_degree`` is -1, and
    for ``vpp``, ``num_layers`` or ``model`` under an interleaved pipeline schedule.
    """
    model = dict(_section(cfg, "model"))
    training = dict(_section(cfg, "training"))
    par = dict(_section(cfg, "parallelism"))
    ac = dict(_section(cfg, "activation_checkpoint"))
    out: dict[str, Any] = {"framework": "torchtitan"}
    key = (str(model.get("name", "")).lower(), str(model.get("flavor", "")).lower())
    if key in FLAVOURS:
        out["model"] = FLAVOURS[key]

    def degree(name: str, default: int = 1, unset: tuple[int, ...] = ()) -> int:
        value = _count("parallelism", par, name, default, unset=unset)
        assert value is not None
        return value

    replicate = degree("data_parallel_replicate_degree")
    shard = degree("data_parallel_shard_degree", -1, unset=(-1,))
    tp = degree("tensor_parallel_degree")
    pp = degree("pipeline_parallel_degree")
    cp = degree("context_parallel_degree")
    ep = degree("expert_parallel_degree")
    etp = degree("expert_tensor_parallel_degree")
    for name in ("local_batch_size", "batch_size", "seq_len", "steps"):
        _count("training", training, name)
    _count("training", training, "global_batch_size", unset=(-1, 0))
    _count("parallelism", par, "pipeline_parallel_microbatch_size")
    if ep > 1 and tp > 1 and etp != tp:
        raise DataError(
            f"expert_tensor_parallel_degree {etp} with tensor_parallel_degree {tp} lends tp to "
            f"expert parallelism, a layout the surrogate does not model: it models the experts "
            f"split over tp too (expert_tensor_parallel_degree = tensor_parallel_degree)"
        )
    if shard == -1:
        shard = _world_shard(replicate * tp * pp * cp, given)
    out.update(dp=replicate * shard, tp=tp, pp=pp, cp=cp, ep=ep, sequence_parallel=tp > 1)
    out["dtype"] = _dtype(model, training, fsdp=shard * cp > 1, model_parallel=max(tp, pp) > 1)
    schedule = par.get("pipeline_parallel_schedule")
    if pp > 1 and schedule is not None:
        out.update(
            _schedule_values(str(schedule), par, out.get("model", given.get("model")), given, pp)
        )
    reshard = str(par.get("fsdp_reshard_after_forward", "default")).lower()
    if shard * cp > 1:  # FSDP over data_parallel_shard_degree x cp; HSDP with replicas
        zero3 = reshard == "always" or (reshard == "default" and pp == 1)
        out["zero_stage"] = 3 if zero3 else 2
        out["dp_replicate"] = replicate
    else:
        out["zero_stage"] = 0
    out.update(_batch_values(training, par, pp, out["dp"]))
    out.update(_recompute_values(ac, out, given))
    steps = training.get("steps")
    return out, int(steps) if steps is not None else None


def job_config_columns(path: str | Path, given: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration columns of a torchtitan job TOML (``predict --config job.toml``):
    what :func:`config_values` reads from it, on the nodes its world fills (unless ``given``,
    the columns the command line sets, says ``num_nodes``). ``given`` also completes what the
    file leaves open (the world of data_parallel_shard_degree = -1, a model's layer count).
    ConfigError naming the file for what cannot be read."""
    p = Path(path)
    text = read_input_text(p, what="--config", kind="config", error=ConfigError)
    try:
        found, _ = config_values(tomllib.loads(text), dict(given))
        if "num_nodes" not in given:
            placed = {"gpus_per_node": given.get("gpus_per_node", 8)}
            place_on_nodes(placed, found["dp"] * found["tp"] * found["pp"] * found["cp"])
            found.update(placed)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML ({e})") from None
    except (DataError, ValueError, TypeError) as e:  # ingest's advice, as predict's flags
        advice = _SET.sub(lambda m: f"--{m.group(1).replace('_', '-')} {m.group(2)}", str(e))
        raise ConfigError(f"{p}: {advice}") from None
    return found


_SET = re.compile(r"--set (\w+)=(\S+)")
"""``--set key=VALUE`` in ingest's messages (the same columns are predict's ``--key VALUE``)."""

FLOAT8_CONVERTER = "quantize.linear.float8"
"""torchtitan 0.2.2's registered ``[model] converters`` name of torchao's Float8 linears
(``components/quantization/float8.py``: tensorwise dynamic scaling by default; the routed
experts stay bf16), what the analytic model takes fp8 to be there; launch files write it."""
_FP8_LINEAR_CONVERTERS = ("float8", FLOAT8_CONVERTER)
"""``[model] converters`` that run the linears' GEMMs in float8 (torchao's Float8Linear; the
older name and :data:`FLOAT8_CONVERTER`)."""


def _dtype(
    model: dict[str, Any], training: dict[str, Any], *, fsdp: bool, model_parallel: bool
) -> str:
    """The run's dtype column (bf16 or fp8), or a DataError for a precision not modelled."""
    full = str(training.get("dtype", "float32")).lower()
    if full != "float32":
        raise DataError(
            f"[training] dtype = {full!r} trains every state in that dtype, without "
            f"fp32 master weights, which the surrogate does not model"
        )
    param = str(training.get("mixed_precision_param", "bfloat16")).lower()
    if param != "bfloat16":
        raise DataError(
            f"[training] mixed_precision_param = {param!r} trains in fp32, which "
            f"the surrogate does not model"
        )
    if model_parallel and not fsdp:
        raise DataError(
            "tensor or pipeline parallelism without FSDP (data_parallel_shard_degree "
            "x context_parallel_degree = 1) trains in fp32: torchtitan disables "
            "mixed precision there, and the surrogate does not model fp32 training"
        )
    given = model.get("converters") or []
    converters = set(given.split(",") if isinstance(given, str) else map(str, given))
    fp8 = bool(converters & set(_FP8_LINEAR_CONVERTERS))
    # float8 experts beside float8 linears: every GEMM in fp8, as dtype fp8 has it
    others = converters - set(_FP8_LINEAR_CONVERTERS)
    if fp8:
        others.discard("quantize.grouped_mm.float8")
    if others:
        raise DataError(
            f"[model] converters {sorted(others)} are not modelled; the surrogate "
            f"models float8 linears ({' or '.join(_FP8_LINEAR_CONVERTERS)}), with or "
            f"without float8 experts, as dtype fp8"
        )
    return "fp8" if fp8 else "bf16"


def _recompute_values(
    ac: dict[str, Any], found: dict[str, Any], given: dict[str, Any]
) -> dict[str, Any]:
    """``[activation_checkpoint]`` as ``recompute`` (and ``recompute_layers``), module
    docstring: torchtitan's defaults (0.2.2) are mode 'selective' with ``selective_ac_option``
    "2"; ``found`` holds the parallel degrees read so far."""
    mode = str(ac.get("mode", "selective")).lower()
    if mode in ("none", "full"):
        return {"recompute": mode}
    if mode != "selective":
        raise DataError(
            f"activation_checkpoint mode {mode!r} is not modelled; the surrogate "
            "models none, full and selective (selective_ac_option 'op' or n)"
        )
    option = str(ac.get("selective_ac_option", "2")).strip().lower()
    if option == "op":
        return {"recompute": "selective"}
    if not option.isdigit():
        raise DataError(f"selective_ac_option must be 'op' or an integer, got {option!r}")
    every = int(option)
    if every <= 1:  # torchtitan checkpoints every block for 0 and 1
        return {"recompute": "full"}
    return _every_nth_block(every, found, given, "mode" in ac)


def _every_nth_block(
    every: int, found: dict[str, Any], given: dict[str, Any], set_mode: bool
) -> dict[str, Any]:
    """selective_ac_option n >= 2: the blocks of the first pipeline rank torchtitan
    checkpoints, floor(its layers / n), as ``recompute_layers``."""

    layers = given.get("num_layers")
    preset = found.get("model", given.get("model"))
    if layers is None and preset is not None:
        layers = get_preset(str(preset)).num_layers
    default = "" if set_mode else " (torchtitan's default when the config sets no mode)"
    if layers is None:
        raise DataError(
            f"selective_ac_option {every!r}{default} checkpoints every {every}-th block of a "
            "pipeline rank; the model is unknown: pass --set num_layers=L or --set model=PRESET"
        )
    first_rank = weighted_first_rank_layers(
        int(layers), int(found.get("pp", 1)), int(found.get("vpp", given.get("vpp", 1)))
    )
    checkpointed = first_rank // every
    if checkpointed == 0:
        return {"recompute": "none"}
    return {"recompute": "full", "recompute_layers": checkpointed}


def _config_file(log: Path) -> Path | None:
    tomls = sorted(log.parent.glob("*.toml"))
    if len(tomls) == 1:
        return tomls[0]
    for name in ("config.toml", "train.toml", "job_config.toml"):
        if (log.parent / name).exists():
            return log.parent / name
    return None


def _schedule_values(
    name: str, par: dict[str, Any], preset: str | None, given: dict[str, Any], pp: int
) -> dict[str, Any]:
    """``pp_schedule`` or ``vpp`` from a pipeline schedule's name (module docstring)."""

    traits = get_framework("torchtitan")
    plain = {v.lower(): k for k, v in traits.pipeline_schedules.items()}
    key = name.strip().lower()
    if key in plain:
        return {"pp_schedule": plain[key]}
    if traits.interleaved_schedule is None or key != traits.interleaved_schedule.lower():
        known = [*traits.pipeline_schedules.values(), traits.interleaved_schedule]
        raise DataError(
            f"pipeline_parallel_schedule {name!r} is not modelled; the surrogate "
            f"describes {', '.join(str(k) for k in known)}"
        )
    if "vpp" in given:
        return {}
    parts = par.get("module_fqns_per_model_part")
    per_stage = par.get("pipeline_parallel_layers_per_stage")
    if parts is not None:
        stages = len(parts)
    elif per_stage is None:
        stages = 2 * pp  # torchtitan's default for a multi-stage schedule: 2 per rank
    else:
        layers = given.get("num_layers")
        if layers is None and preset is not None:
            layers = get_preset(str(preset)).num_layers
        if layers is None:
            raise DataError(
                f"{name} runs ceil((num_layers + 2) / "
                "pipeline_parallel_layers_per_stage) virtual stages; the model is "
                "unknown: pass --set vpp=N or --set num_layers=L"
            )
        slots = (
            int(layers)
            + int(par.get("pipeline_parallel_first_stage_less_layers", 1))
            + int(par.get("pipeline_parallel_last_stage_less_layers", 1))
        )
        stages = -(-slots // int(per_stage))
    if stages % pp or stages < 2 * pp:
        raise DataError(
            f"{name} needs a multiple of pp, at least 2 per rank, virtual stages, "
            f"got {stages} for pp={pp}"
        )
    return {"vpp": stages // pp}


def parse_torchtitan(
    path: str | Path, *, given: dict[str, Any] | None = None
) -> tuple[pd.DataFrame, IngestReport]:
    """One torchtitan run (its log and TOML) as a sweep row; unusable runs are counted skips."""
    log = Path(path)
    given = dict(given or {})
    report = IngestReport(files=[str(log)], rows_read=1)
    text = read_log(log)
    found: dict[str, Any] = {}
    steps: int | None = None
    toml_path = _config_file(log)
    try:
        if toml_path is not None:
            cfg = tomllib.loads(read_input_text(toml_path, what="job config", kind="config"))
            found, steps = config_values(cfg, given)
    except tomllib.TOMLDecodeError as e:
        report.skip(str(log), None, f"{toml_path}: not valid TOML ({e})")
        return frame_from_rows([]), report
    except (DataError, ValueError, TypeError) as e:
        report.skip(str(log), None, f"{toml_path}: {e}")
        return frame_from_rows([]), report
    tps: list[float] = []
    tflops: list[float] = []
    mfus: list[float] = []
    mem: list[float] = []
    last_step = 0
    for m in _STEP.finditer(text):
        rest = m.group("rest")
        line = text.count("\n", 0, m.start()) + 1
        t = _TPS.search(rest)
        if t is None:
            report.skip(str(log), line, "step line without tps/wps")
            continue
        last_step = max(last_step, int(m.group(1)))
        tps.append(human_number(t.group(1)))
        if (f := _TFLOPS.search(rest)) is not None:
            tflops.append(human_number(f.group(1)))
        if (u := _MFU.search(rest)) is not None:
            mfus.append(float(u.group(1)))
        if (g := _MEMORY.search(rest)) is not None:
            mem.append(float(g.group(1)))
    date = _DATE.search(text)
    run = LogRun(
        path=log,
        log_text=text,
        default_source=SOURCE,
        run_id=f"{log.parent.name}/{log.stem}",
        found=found,
        iterations_logged=last_step,
        iterations_expected=steps,
        status_file_text=read_optional(log.parent / "status.txt"),
        tokens_per_s_per_gpu=steady(tps),
        measurements={
            "tflops_per_gpu_reported": steady(tflops),
            "mfu_reported": steady(mfus),
            "peak_mem_reserved_gib": max(mem) if mem else None,
        },
        date=date.group(1) if date else None,
    )
    row = run_row(run, given, report)
    return frame_from_rows([row] if row else [], where=str(log)), report
