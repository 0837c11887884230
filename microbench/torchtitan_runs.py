"""Real torchtitan training runs, launched from the files ``surrogate.loop.launch`` writes.

Three steps, the first and last where the surrogate is installed, the second on the GPU machine
(with torchtitan 0.2.2, the last release that reads TOML job configs)::

    python -m microbench.torchtitan_runs plan --out runs/           # launch files + assets
    python -m microbench.torchtitan_runs run runs/ --budget-s 500   # on the GPU: every run dir
    python -m microbench.torchtitan_runs ingest runs/ --into t.parquet   # torchtitan reader

``plan`` writes, for each case of :data:`CASES`, ``<run>/config.toml`` (and ``launch.sh``,
``job.sbatch``) with :func:`surrogate.loop.launch.write_launch_files`, unchanged: what
``surrogate search --launch-dir`` would give a user. A shape that is not one of torchtitan's
flavours is written as flavour ``custom``: the launch files then hold ``flavour.json``,
torchtitan's model arguments for it (:func:`surrogate.loop.launch.torchtitan_model_args`: ``llama3``
for dense models, ``llama4`` with an MoE block in every layer for MoE models), and
``train_custom.py``, which registers it and starts torchtitan's trainer; ``plan`` adds to
``flavour.json`` the configuration columns the ingest step gives the reader (what ``surrogate
ingest --set`` would). Beside the runs, under ``tests/assets/`` (torchtitan's default asset
paths, relative to the directory it runs in), ``run`` writes a **synthetic** tokenizer and
dataset: a word-level vocabulary of :data:`SYNTHETIC_VOCAB` words and documents of words drawn
at random from it with a fixed seed. The text only feeds token ids to the model; nothing
measured depends on what the words are, except where routing does (MoE: a randomly initialised
router sees random tokens).

``run`` runs every run directory in turn (``torchrun --standalone --nproc_per_node 1 -m
microbench.torchtitan_runs train-one <run>``, from the plan directory: what the run's
``launch.sh`` runs, from the plan directory, where the assets are), its output in
``<run>/train.log``; a run that overruns ``--timeout-s`` is killed and gets ``status.txt`` =
``timeout``; ``--budget-s`` starts no run after that many seconds (every finished run stays).
``env.txt`` gets ``nvidia-smi`` and the fingerprint of :mod:`microbench.fingerprint`.

``ingest`` reads each run with the torchtitan reader (:mod:`surrogate.ingest.torchtitan`: the
log's step lines, status by the one rule of ``surrogate.runs.status``), giving it the
columns of ``flavour.json``, and appends the rows to a sweep table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from microbench.fingerprint import collect
from surrogate.config.training import MODEL_FIELDS, config_from_flat

FLAVOUR_FILE = "flavour.json"
CONFIG_FILE = "config.toml"
TRAIN_SCRIPT = "train_custom.py"
"""``surrogate.loop.launch``'s file names (``flavour.json`` with the reader's columns added by
:func:`plan`), repeated: the GPU machine runs this module without ``surrogate.loop.launch``'s
dependencies (tomli-w); a test checks they agree."""
LOG_FILE = "train.log"
STATUS_FILE = "status.txt"
SYNTHETIC_VOCAB = 2000
"""Words of the synthetic vocabulary (every model here has at least this many embeddings)."""
SYNTHETIC_DOCS = 400
SYNTHETIC_WORDS_PER_DOC = 2000
STEPS = 20


@dataclass(frozen=True)
class Case:
    """One planned run: a model shape and a layout on one GPU."""

    label: str
    """Short model label of the run's name."""
    model: dict[str, Any]
    """Model columns (``surrogate.config.training.MODEL_FIELDS`` names; ``name`` a preset or a
    label)."""
    seq_len: int
    mbs: int
    recompute: str = "none"

    @property
    def name(self) -> str:
        """The run's directory: ``<label>-s<seq_len>-mbs<mbs>[-sel|-full]``."""
        suffix = {"none": "", "selective": "-sel", "full": "-full"}[self.recompute]
        return f"{self.label}-s{self.seq_len}-mbs{self.mbs}{suffix}"


def _llama(
    name: str, layers: int, hidden: int, ffn: int, heads: int, kv: int, vocab: int, **moe: int
) -> dict[str, Any]:
    return {
        "name": name,
        "num_layers": layers,
        "hidden_size": hidden,
        "ffn_hidden_size": ffn,
        "num_heads": heads,
        "num_kv_heads": kv,
        "vocab_size": vocab,
        "tie_embeddings": False,
        **moe,
    }


_DENSE_05B = _llama("bench-0.5b", 24, 1024, 4096, 16, 4, 32000)
_DENSE_1B = _llama("tt-dense-1.5b", 16, 2048, 8192, 32, 8, 128256)
_DENSE_3B = _llama("tt-dense-3.6b", 28, 3072, 8192, 24, 8, 128256)
_MOE_16E = _llama(
    "tt-moe-16e-top1",
    12,
    1024,
    2048,
    16,
    8,
    32768,
    num_experts=16,
    experts_topk=1,
    moe_ffn_hidden_size=2048,
    shared_expert_ffn_hidden_size=2048,
)
_MOE_8E = _llama(
    "tt-moe-8e-top2",
    8,
    2048,
    2816,
    16,
    8,
    32768,
    num_experts=8,
    experts_topk=2,
    moe_ffn_hidden_size=2816,
    shared_expert_ffn_hidden_size=0,
)
_MOE_32E = _llama(
    "tt-moe-32e-top4",
    8,
    1024,
    512,
    16,
    8,
    32768,
    num_experts=32,
    experts_topk=4,
    moe_ffn_hidden_size=512,
    shared_expert_ffn_hidden_size=512,
)
_LLAMA3_8B = {"name": "llama3-8b"}

CASES: tuple[Case, ...] = tuple(
    Case(*c)
    for c in (
        # the first campaign
        ("dense1b", _DENSE_1B, 4096, 1),
        ("dense1b", _DENSE_1B, 4096, 2),
        ("dense1b", _DENSE_1B, 4096, 4),
        ("dense1b", _DENSE_1B, 4096, 2, "selective"),
        ("dense1b", _DENSE_1B, 4096, 8, "full"),
        ("dense3b", _DENSE_3B, 2048, 1),
        ("dense3b", _DENSE_3B, 2048, 4, "full"),
        ("llama3-8b", _LLAMA3_8B, 2048, 1, "full"),
        ("moe16e", _MOE_16E, 4096, 2),
        ("moe16e", _MOE_16E, 4096, 4),
        ("moe16e", _MOE_16E, 4096, 8, "full"),
        ("moe8e", _MOE_8E, 4096, 1),
        ("moe8e", _MOE_8E, 4096, 2),
        ("moe8e", _MOE_8E, 4096, 4, "selective"),
        # the second campaign
        ("dense05b", _DENSE_05B, 4096, 4),
        ("dense05b", _DENSE_05B, 4096, 8),
        ("dense05b", _DENSE_05B, 4096, 16, "full"),
        ("dense05b", _DENSE_05B, 8192, 2),
        ("dense1b", _DENSE_1B, 2048, 4),
        ("dense1b", _DENSE_1B, 8192, 1),
        ("dense1b", _DENSE_1B, 4096, 4, "full"),
        ("dense3b", _DENSE_3B, 2048, 2),
        ("dense3b", _DENSE_3B, 4096, 2, "full"),
        ("moe16e", _MOE_16E, 2048, 8),
        ("moe16e", _MOE_16E, 4096, 4, "selective"),
        ("moe8e", _MOE_8E, 4096, 4),
        ("moe32e", _MOE_32E, 4096, 4),
        ("moe32e", _MOE_32E, 4096, 8, "full"),
    )
)
"""The planned runs, in the order ``run`` takes them."""


def _case_config(case: Case) -> Any:
    from surrogate.config.presets import PRESETS

    model = dict(case.model)
    name = model.pop("name")
    flat = asdict(PRESETS[name]) if name in PRESETS else model | {"name": name}
    flat |= {
        "seq_len": case.seq_len,
        "gpu": "H100-SXM-80GB",
        "gpus_per_node": 1,
        "num_nodes": 1,
        "dp": 1,
        "tp": 1,
        "pp": 1,
        "cp": 1,
        "ep": 1,
        "mbs": case.mbs,
        "grad_accum": 1,
        "zero_stage": 0,
        "recompute": case.recompute,
        "dtype": "bf16",
        "framework": "torchtitan",
    }
    return config_from_flat(flat)


def write_synthetic_assets(root: Path, *, seed: int = 0) -> None:
    """torchtitan's default assets under ``root/tests/assets``: a word-level tokenizer
    (``tokenizer/tokenizer.json``, whitespace-split, with begin/end-of-text tokens) and a
    dataset of random words (``c4_test/synthetic.json``, one ``{"text": ...}`` per line).
    Synthetic, generated here from ``seed``."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel

    words = [f"w{i}" for i in range(SYNTHETIC_VOCAB - 3)]
    specials = ["[UNK]", "<|begin_of_text|>", "<|end_of_text|>"]
    vocab = {w: i for i, w in enumerate(specials + words)}
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(specials[1:])
    tdir = root / "tests" / "assets" / "tokenizer"
    tdir.mkdir(parents=True, exist_ok=True)
    tok.save(str(tdir / "tokenizer.json"))
    (tdir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": specials[1],
                "eos_token": specials[2],
                "add_bos_token": True,
                "add_eos_token": True,
                "note": "synthetic word-level tokenizer (surrogate)",
            }
        )
    )
    ddir = root / "tests" / "assets" / "c4_test"
    ddir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    with open(ddir / "synthetic.json", "w", encoding="utf-8") as f:
        for _ in range(SYNTHETIC_DOCS):
            text = " ".join(rng.choices(words, k=SYNTHETIC_WORDS_PER_DOC))
            f.write(json.dumps({"text": text}) + "\n")


def plan(out: Path, cases: Sequence[Case] = CASES, *, steps: int = STEPS) -> list[Path]:
    """Write the launch files of ``cases`` under ``out``, each ``flavour.json`` with the
    columns the ingest step gives the reader in front."""
    from surrogate.config.presets import TORCHTITAN_FLAVOURS
    from surrogate.loop.launch import write_launch_files

    dirs = []
    for case in cases:
        cfg = _case_config(case)
        d = out / case.name
        write_launch_files(cfg, d, run_name=case.name, steps=steps)
        shipped = cfg.model.name in TORCHTITAN_FLAVOURS
        columns = ({"model": cfg.model.name} if shipped else _model_columns(cfg.model)) | {
            "gpu": cfg.cluster.gpu,
            "gpus_per_node": 1,
            "num_nodes": 1,
        }
        launch_spec = {} if shipped else json.loads((d / FLAVOUR_FILE).read_text())
        (d / FLAVOUR_FILE).write_text(
            json.dumps({"columns": columns, **launch_spec}, indent=1) + "\n"
        )
        dirs.append(d)
    return dirs


def _model_columns(model: Any) -> dict[str, Any]:
    return {"model_name": model.name} | {
        f: getattr(model, f) for f in MODEL_FIELDS if f not in ("name", "seq_len")
    }


def train_one(run_dir: Path, extra: Sequence[str] = ()) -> None:
    """What the run's ``launch.sh`` starts under torchrun, in this process: its
    ``train_custom.py`` (which registers ``flavour.json``'s model) or torchtitan's trainer, on
    ``config.toml``; ``extra``: torchtitan command-line overrides (e.g.
    ``--profiling.enable_profiling``)."""
    import runpy

    script = run_dir / TRAIN_SCRIPT
    # set before torchtitan is imported: its ConfigManager.parse_args binds sys.argv[1:]
    sys.argv = [str(script), "--job.config_file", str(run_dir / CONFIG_FILE), *extra]
    if script.exists():
        runpy.run_path(str(script), run_name="__main__")
    else:
        runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)


def run_all(root: Path, *, timeout_s: float, budget_s: float, max_runs: int | None = None) -> int:
    """Run every run directory under ``root`` that has no log yet (in the planned order), at
    most ``max_runs`` of them; returns how many ran."""
    order = [c.name for c in CASES]
    dirs = sorted(
        (d for d in root.iterdir() if (d / FLAVOUR_FILE).exists()),
        key=lambda d: order.index(d.name) if d.name in order else len(order),
    )
    _write_env(root)
    if not (root / "tests" / "assets").exists():
        write_synthetic_assets(root)
    deadline = time.monotonic() + budget_s
    done = 0
    for d in dirs:
        if max_runs is not None and done >= max_runs:
            break
        if time.monotonic() > deadline:
            print(f"budget spent: {d.name} and later runs not started", flush=True)
            break
        if (d / LOG_FILE).exists():
            continue
        cmd = [
            "torchrun",
            "--standalone",
            "--nproc_per_node",
            "1",
            "-m",
            "microbench.torchtitan_runs",
            "train-one",
            str(d.relative_to(root)),
        ]
        env = os.environ | {
            "PYTHONPATH": os.pathsep.join(
                [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
            )
        }
        start = time.monotonic()
        with open(d / LOG_FILE, "w", encoding="utf-8") as log:
            try:
                rc = subprocess.run(
                    cmd,
                    cwd=root,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    timeout=timeout_s,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                (d / STATUS_FILE).write_text("timeout\n")
                rc = -1
        print(f"{d.name}: exit {rc} after {time.monotonic() - start:.0f} s", flush=True)
        done += 1
    return done


def kernel_table(trace: Path, *, top: int = 40) -> str:
    """GPU kernel time of a torchtitan profiler trace (Chrome trace JSON, one profiled step):
    total and per kernel name (the ``top`` longest), in ms, with counts."""
    events = json.loads(trace.read_text())["traceEvents"]
    totals: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            t = totals.setdefault(str(e.get("name", "?"))[:110], [0.0, 0.0])
            t[0] += float(e.get("dur", 0.0)) / 1e3
            t[1] += 1
    busy = sum(t[0] for t in totals.values())
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep")]
    wall = max((float(e.get("dur", 0.0)) / 1e3 for e in steps), default=float("nan"))
    lines = [
        f"profiled step: {wall:.2f} ms wall, {busy:.2f} ms of GPU kernels, "
        f"{len(totals)} kernel names"
    ]
    for name, (ms, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{ms:9.3f} ms {int(n):6d}x  {name}")
    return "\n".join(lines) + "\n"


def _write_env(root: Path) -> None:
    smi = shutil.which("nvidia-smi")
    text = (
        subprocess.run(
            [
                smi,
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                "--format=csv",
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        if smi
        else "no nvidia-smi\n"
    )
    import torch
    import torchtitan

    text += (
        f"torch {torch.__version__} CUDA {torch.version.cuda} torchtitan "
        f"{torchtitan.__version__}\nfingerprint: {json.dumps(collect().to_dict())}\n"
    )
    (root / "env.txt").write_text(text)


def read_run_dirs(root: Path) -> tuple[Any, list[str]]:
    """Every run under ``root`` read by the torchtitan reader, given its ``flavour.json``
    columns: the sweep rows, and a line per run (rows read, skips with their reasons)."""
    import pandas as pd

    from surrogate.ingest.torchtitan import parse_torchtitan

    frames, lines = [], []
    for d in sorted(root.iterdir()):
        if not (d / FLAVOUR_FILE).exists() or not (d / LOG_FILE).exists():
            continue
        given = json.loads((d / FLAVOUR_FILE).read_text())["columns"]
        frame, report = parse_torchtitan(d / LOG_FILE, given=given)
        lines.append(f"{d.name}: {len(frame)} row(s); {report.summary()}")
        frames.append(frame)
    return pd.concat(frames, ignore_index=True), lines


def ingest(root: Path, into: Path) -> Any:
    """Append the rows of :func:`read_run_dirs` to the sweep table ``into``; returns the
    append summary."""
    from surrogate.runs.sweep_files import append_sweeps

    frame, lines = read_run_dirs(root)
    print("\n".join(lines))
    return append_sweeps(frame, into)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m microbench.torchtitan_runs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="write the launch files (run writes the synthetic assets)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=STEPS)
    r = sub.add_parser("run", help="run every planned run (on the GPU machine)")
    r.add_argument("root", type=Path)
    r.add_argument("--timeout-s", type=float, default=150.0)
    r.add_argument("--budget-s", type=float, default=float("inf"))
    r.add_argument("--max-runs", type=int, default=None)
    t = sub.add_parser("train-one", help="one run (what run starts under torchrun)")
    t.add_argument("run_dir", type=Path)
    t.add_argument("extra", nargs="*", help="torchtitan overrides, after --")
    k = sub.add_parser("kernels", help="GPU kernel time of a torchtitan profiler trace")
    k.add_argument("trace", type=Path)
    i = sub.add_parser("ingest", help="read the runs into a sweep table")
    i.add_argument("root", type=Path)
    i.add_argument("--into", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.command == "plan":
        for d in plan(args.out, steps=args.steps):
            print(d)
    elif args.command == "run":
        run_all(args.root, timeout_s=args.timeout_s, budget_s=args.budget_s, max_runs=args.max_runs)
    elif args.command == "train-one":
        train_one(args.run_dir, args.extra)
    elif args.command == "kernels":
        print(kernel_table(args.trace), end="")
    else:
        print(ingest(args.root, args.into))
    return 0


if __name__ == "__main__":
    sys.exit(main())
