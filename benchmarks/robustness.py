"""Robustness of the CLI under bad, hostile and concurrent input: a table per class.

    python benchmarks/robustness.py [--quick] [--repeats N] [--jobs 2] [--only CLASS ...]
                                    [--show N]

Every input runs as a real ``surrogate`` process (what a user sees), in a temporary directory of
its own, ``--jobs`` at a time. The inputs are generated (products of hostile values with the
options, keys, fields and files they go into), in these classes:

- **concurrent appends**: 8 concurrent ``surrogate ingest CHUNK.csv --into t.parquet``, the
  Playbook CSV of ``../shared/data`` (``$SURROGATE_DATA_DIR``) split in 8, ``--repeats`` times.
- **usage errors**: option values of the wrong type, unknown options and commands, missing
  values, an unknown table suffix.
- **hf-config**: each supported family's published ``config.json`` (``tests/fixtures``), whose
  shapes must come back; fields retyped, refused families, malformed files, a name in markup.
- **config files, CSV**: ``--config`` files with unknown, repeated, misplaced or mistyped
  keys, keys that must change the prediction; ``--from-csv`` tables with repeated and near-miss
  columns and bad cells.
- **model integrity**: a copy of the bundled model with each file truncated, edited, extended
  or deleted, given as ``--model-dir``.
- **far-outside inputs**: layouts and shapes up to 10^20 and 10^400, zero and negative.
- **search messages**: ``surrogate search`` (and ``ingest --set``) with hostile options, and the
  documented searches, whose answers must not be empty.
- **score-round/train outputs**: outputs that cannot be written, rounds and tables that cannot
  be scored, and one that can.
- a new user's inputs (``NEW_USER``): **profiles** that are an image, a PDF, a directory or a
  malformed object; **tracking stores** that cannot take a run (a path MLflow 3 refuses as a
  file store, an unknown scheme, a closed port, a server that never answers, an SQLite path
  that is a directory or a CSV), refused before the work, and a server that answers its
  health check and fails every request, after which score-round and train must keep their
  work on disk; **YAML anchors**: merge keys (answers) and alias bombs and loops under known
  keys; **batch tables**: ``--from-csv`` columns the reader does not read, a ``model`` column
  of presets, a table whose every row fails, options the mode ignores; **torchtitan TOML**
  values that must be blamed on their own key; **non-table files** given as tables;
  **propose** options checked before scoring and its hints for paths with spaces;
  **hf-config names** (search names a config.json's model by the config and says where its
  sequence length came from); **flagged runs** (an ingest keeps the runs the validator
  rejects).

Each input says what it expects: ``refuse`` (the input is wrong), ``answer`` (it is right), or
``either`` (a refusal and a sane answer are both acceptable). A run counts as:

- **clear error**: exit 2 with exactly one line on stderr, starting ``error: `` (and an input
  that expects ``refuse`` or ``either``);
- **correct answer**: exit 0 where the input expects ``answer`` or ``either`` and its checks
  pass. Every prediction must be sane: MFU in (0, 1], tokens/s per GPU finite and > 0, finite
  non-negative memory and time terms, p_oom in [0, 1]; and, per input, the configuration echoed
  must be the one asked for (a key in a file, a field of a config.json), a key that must change
  the prediction must change it (against a baseline run), a far-outside input must say it
  extrapolates, a name with rich markup must print as written, a CSV row must carry its error
  or a sane prediction, a search must return layouts (and a Pareto front where asked), a damaged
  model's copy made intact must answer as the bundled model does;
- **traceback**: ``Traceback (most recent call last)`` on stderr, or death by a signal (exit
  < 0, or > 128 as a shell reports it: 134 abort, 139 segmentation fault);
- **silent wrong answer**: exit 0 where the input must be refused, or a check above that fails;
- **hang**: no answer within the input's time limit (20-30 s for a refusal, which must take
  a second or two);
- **other failure**: exit 1 without a traceback, an exit 2 whose message is not one line, a
  right input refused, a Python warning on stderr.

A refusal that must name something (the key of a TOML value, the kind of a file, the store's
variable) and does not is a silent wrong answer: it blames the wrong thing. A work-keeping
input whose output is not on disk afterwards (or a refused one that wrote) counts a row lost.

Rows lost (concurrent appends): per repeat, rows of the chunks - rows in the table - rows the
eight ingests reported skipped; summed over the repeats. A table that ends with more rows than
that, or a process that fails, counts too. Target: 0 tracebacks, 0 silent wrong answers, 0 rows
lost. ``--quick`` runs every fourth input of each class and 2 repeats; ``--show N`` prints up to N
failures per class with their command lines.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hf_configs"
MODEL_DIR = ROOT / "surrogate" / "data" / "models" / "default"
PLAYBOOK = Path("sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv")

Expect = Literal["refuse", "answer", "either"]
Check = Callable[[Path, str, str], str | None]
"""(case directory, stdout, stderr) of a run that exited 0 -> what is wrong, or None."""
Verdict = Literal["clear", "correct", "traceback", "hang", "wrong", "other"]
COLUMNS: tuple[tuple[Verdict, str], ...] = (
    ("clear", "clear errors"), ("correct", "correct answers"), ("traceback", "tracebacks"),
    ("hang", "hangs"), ("wrong", "silent wrong answers"), ("other", "other failures"))
NEW_USER = ("profiles", "tracking stores", "YAML anchors", "batch tables", "torchtitan TOML",
            "non-table files", "propose", "hf-config names", "flagged runs")
"""The classes of inputs a new user tried: files that are not what an option reads, stores
that cannot take a run (before the work, and failing after it), YAML merge keys and alias
bombs, batch columns the reader does not read, torchtitan values, propose's checks and hints,
a config.json's name and sequence length, the runs the validator rejects."""
CLASSES = ("concurrent appends", "usage errors", "hf-config", "config files, CSV",
           "model integrity", "far-outside inputs", "search messages",
           "score-round/train outputs", *NEW_USER)


@dataclass(frozen=True)
class Case:
    cls: str
    argv: tuple[str, ...]
    """After ``surrogate``; ``{d}`` stands for the case's directory."""
    expect: Expect
    files: tuple[tuple[str, str | bytes], ...] = ()
    """Written into the case's directory before the run."""
    setup: Callable[[Path], object] | None = None
    check: Check | None = None
    timeout_s: float = 180.0
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables of the run (``{d}`` stands for the case's directory)."""
    names: str | None = None
    """A refusal must name this (the key, the file's kind): one that blames something else is
    a wrong answer."""
    kept: Callable[[Path], str | None] | None = None
    """After any exit: what of the work already done is lost (None: nothing), a row lost."""


@dataclass
class Result:
    case: Case
    verdict: Verdict
    why: str = ""
    seconds: float = 0.0


@dataclass
class Tally:
    counts: Counter[str] = field(default_factory=Counter)
    failures: list[Result] = field(default_factory=list)
    rows_lost: int | None = None
    slowest_s: float = 0.0
    """The longest a clear error took (every input: one line within a second or two)."""


# ------------------------------------------------------------------------ running
def surrogate_exe() -> str:
    beside = Path(sys.executable).with_name("surrogate")
    return str(beside) if beside.exists() else shutil.which("surrogate") or "surrogate"


EXE = surrogate_exe()


def environment(d: Path) -> dict[str, str]:
    """MLflow in the case's directory, a fixed terminal width, no colour codes."""
    return {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{d}/mlflow.db", "COLUMNS": "100",
            "NO_COLOR": "1", "PYTHONWARNINGS": "default"}


def run_case(case: Case) -> Result:
    with tempfile.TemporaryDirectory(prefix="robustness-") as tmp:
        d = Path(tmp)
        for name, content in case.files:
            path = d / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        if case.setup is not None:
            case.setup(d)
        argv = [a.replace("{d}", str(d)) for a in case.argv]
        env = {**environment(d), **{k: v.replace("{d}", str(d)) for k, v in case.env}}
        start = time.perf_counter()
        try:
            done = subprocess.run([EXE, *argv], cwd=d, capture_output=True, text=True,
                                  errors="replace", timeout=case.timeout_s, env=env)
        except subprocess.TimeoutExpired:
            return Result(case, "hang", f"no answer within {case.timeout_s:.0f} s")
        seconds = time.perf_counter() - start
        verdict, why = classify(case, done.returncode, done.stdout, done.stderr, d)
        lost = case.kept(d) if case.kept is not None else None
        if lost is not None:
            verdict, why = "wrong", f"lost: {lost} ({verdict}: {why})"
    return Result(case, verdict, why, seconds)


def classify(case: Case, rc: int, out: str, err: str, d: Path) -> tuple[Verdict, str]:
    if "Traceback (most recent call last)" in err or rc < 0 or rc > 128:
        tail = err.strip().splitlines()[-1:] or [""]
        return "traceback", f"exit {rc}: {tail[0][:200]}"
    if rc == 2:
        lines = err.splitlines()
        if len(lines) != 1 or not lines[0].startswith("error: "):
            return "other", f"exit 2 with {len(lines)} lines on stderr: {err[:200]!r}"
        if case.expect == "answer":
            return "other", f"refused a right input: {lines[0][:200]}"
        if case.names is not None and not re.search(case.names, lines[0]):
            return "wrong", f"refused without naming {case.names!r}: {lines[0][:200]}"
        return "clear", lines[0]
    if rc != 0:
        return "other", f"exit {rc}: {err.strip()[-200:]}"
    if case.expect == "refuse":
        return "wrong", f"exit 0 where it must refuse; stdout {out[:160]!r}"
    warning = re.search(r"^.*\b\w+Warning: .*$", err, re.MULTILINE)
    if warning:
        return "other", f"a Python warning on stderr: {warning.group(0)[:200]}"
    problem = case.check(d, out, err) if case.check is not None else None
    return ("wrong", problem) if problem else ("correct", "")


# ------------------------------------------------------------------------ checks
def sane(d: dict[str, Any]) -> str | None:
    """What is impossible in one prediction's JSON, if anything."""
    mfu, tps = d.get("mfu"), d.get("tokens_per_s_per_gpu")
    if not isinstance(mfu, float) or not 0 < mfu <= 1:
        return f"MFU {mfu!r} outside (0, 1]"
    if not isinstance(tps, float) or not math.isfinite(tps) or tps <= 0:
        return f"tokens/s per GPU {tps!r} not finite and positive"
    for part in ("memory_gib", "step_time_s"):
        for k, v in d[part].items():
            if not math.isfinite(v) or v < 0:
                return f"{part}.{k} = {v!r}"
    if not 0 <= d["p_oom"] <= 1:
        return f"p_oom {d['p_oom']!r}"
    if d["mfu_lo"] is not None and not d["mfu_lo"] <= mfu <= d["mfu_hi"]:
        return f"MFU {mfu} outside its interval {d['mfu_lo']} - {d['mfu_hi']}"
    return None


def prediction(config: dict[str, Any] | None = None, *, extrapolates: bool = False,
               differs: tuple[Sequence[str], tuple[str, ...]] | None = None) -> Check:
    """A JSON prediction that is sane, echoes ``config``, says it extrapolates (if asked), and
    whose value at ``differs[1]`` (a path into the JSON) differs from a baseline run of the
    command line ``differs[0]``."""
    def check(d: Path, out: str, err: str) -> str | None:
        try:
            got = json.loads(out)
        except json.JSONDecodeError as e:
            return f"stdout is not JSON ({e})"
        problem = sane(got)
        if problem:
            return problem
        for k, v in (config or {}).items():
            if got["config"].get(k) != v:
                return f"asked for {k}={v!r}, predicted {k}={got['config'].get(k)!r}"
        if extrapolates and not got["extrapolates"]:
            return "far outside anything known, predicted without an extrapolation warning"
        if differs is not None:
            base = baseline(tuple(differs[0]))
            a, b = dig(got, differs[1]), dig(base, differs[1])
            if a == b:
                return f"{'.'.join(differs[1])} = {a!r}, the same as without the key"
        return None
    return check


def dig(d: Any, path: Sequence[str]) -> Any:
    for k in path:
        d = d[k]
    return d


_BASELINES: dict[tuple[str, ...], dict[str, Any]] = {}
_BASELINE_LOCK = threading.Lock()


def baseline(argv: tuple[str, ...]) -> dict[str, Any]:
    """The JSON of a reference command line (run once)."""
    with _BASELINE_LOCK:
        if argv not in _BASELINES:
            done = subprocess.run([EXE, *argv], capture_output=True, text=True, check=True,
                                  env=environment(Path(tempfile.gettempdir())))
            _BASELINES[argv] = json.loads(done.stdout)
        return _BASELINES[argv]


def table_shows(*texts: str) -> Check:
    """The table output with a sane MFU, showing each of ``texts`` as written."""
    def check(d: Path, out: str, err: str) -> str | None:
        flat = " ".join(out.split())
        m = re.search(r"MFU: (\d+(?:\.\d+)?)%", flat)
        if m is None or not 0 < float(m.group(1)) <= 100:
            return f"no sane MFU in the table ({m.group(0) if m else 'none'})"
        for text in texts:
            if text not in flat:
                return f"{text!r} does not print as written"
        return None
    return check


def csv_rows(n: int, errors: set[int]) -> Check:
    """``predict --from-csv`` output of ``n`` rows: rows ``errors`` carry an error and no
    prediction, the others a sane prediction and no error."""
    def check(d: Path, out: str, err: str) -> str | None:
        rows = pd.read_csv(io.StringIO(out), keep_default_na=False, na_values=[""],
                           dtype={"error": str})
        if len(rows) != n:
            return f"{n} rows in, {len(rows)} out"
        for i, row in enumerate(rows.to_dict("records")):
            message = row["error"] if isinstance(row["error"], str) else ""
            if i in errors and (not message or not pd.isna(row["pred_mfu"])):
                return f"row {i + 1} is invalid but has no error (pred_mfu {row['pred_mfu']})"
            if i not in errors and (message or not 0 < row["pred_mfu"] <= 1):
                return f"row {i + 1}: error {message!r}, pred_mfu {row['pred_mfu']}"
        return None
    return check


def search_answer(*, pareto: bool = False) -> Check:
    def check(d: Path, out: str, err: str) -> str | None:
        got = json.loads(out)
        if not got["top"]:
            return "no layout returned" + (f" (notes: {got['notes']})" if got["notes"] else "")
        for row in got["top"]:
            if not 0 < row["pred_mfu"] <= 1:
                return f"a layout with MFU {row['pred_mfu']!r}"
        if pareto and not got["pareto"]:
            return "an empty Pareto front" + ("" if got["notes"] else " without explanation")
        return None
    return check


def json_field(path: Sequence[str], test: Callable[[Any], bool], what: str) -> Check:
    def check(d: Path, out: str, err: str) -> str | None:
        value = dig(json.loads(out), path)
        return None if test(value) else f"{'.'.join(path)} = {value!r}, expected {what}"
    return check


# ------------------------------------------------------------------------ the inputs
PREDICT = ("predict", "--model", "8b", "--nodes", "4", "--dp", "8", "--tp", "4", "--framework",
           "nanotron")
"""A valid configuration (llama3-8b on 4 x 8 H100, nanotron's as the Playbook's) the inputs
change."""
INT_FLAGS = ("--tp", "--dp", "--pp", "--mbs", "--grad-accum", "--nodes", "--zero", "--seq-len")
BAD_INTS = ("2.5", "abc", "", "1e3", "evil[/]model")


def usage_cases() -> Iterator[Case]:
    c = "usage errors"
    for flag in INT_FLAGS:
        for value in BAD_INTS:
            yield Case(c, (*PREDICT, flag, value), "refuse")
        yield Case(c, (*PREDICT, f"{flag}=2.5"), "refuse")
        yield Case(c, (*PREDICT, flag), "refuse")  # missing value
    for flag in ("--model", "--gpu", "--config", "--hf-config", "--from-csv", "--profile",
                 "--model-dir", "--recompute", "--dtype"):
        yield Case(c, (*PREDICT, flag), "refuse")
    for command in (PREDICT, ("search", "--model", "8b", "--global-batch-seqs", "64"),
                    ("ingest", "x.csv", "--into", "t.parquet")):
        for option in ("--foo", "--tpp", "-z"):
            yield Case(c, (*command, option, "3"), "refuse")
    for name in ("nosuch", "Predict", "predictt", "serach", "evil[/]cmd", ""):
        yield Case(c, (name,), "refuse")
        yield Case(c, ("data", name or "x"), "refuse")
    for switch in ("--sequence-parallel=yes", "--json=1", "--analytic=true"):
        yield Case(c, (*PREDICT, switch), "refuse")
    for into in ("t.xlsx", "t", "t.parquet.bak", "{d}"):
        yield Case(c, ("ingest", "{d}/chunk.csv", "--into", into), "refuse",
                   files=(("chunk.csv", "a,b\n1,2\n"),))
    yield Case(c, ("ingest", "{d}/none.csv", "--into", "t.parquet"), "refuse")
    yield Case(c, ("ingest", "{d}", "--into", "t.parquet", "--format", "bogus"), "refuse")
    # Python reads these as integers; so does the CLI, and it must say so in the answer
    for value, number in (("٣", 3), ("1_0", 10), (" 2", 2)):
        yield Case(c, (*PREDICT, "--mbs", value, "--json"), "either",
                   check=prediction({"mbs": number}))


def hf_cases() -> Iterator[Case]:
    c = "hf-config"
    bad: Any
    layout = ("--nodes", "1", "--dp", "8", "--seq-len", "4096", "--json")
    expected_of = {
        "num_hidden_layers": "num_layers", "hidden_size": "hidden_size",
        "num_attention_heads": "num_heads", "vocab_size": "vocab_size",
    }
    for path in sorted(FIXTURES.glob("*.json")):
        cfg = json.loads(path.read_text())
        want = {ours: cfg[theirs] for theirs, ours in expected_of.items()}
        family = cfg["model_type"]
        if family == "mixtral":
            want["num_experts"] = cfg["num_local_experts"]
        elif family.endswith("moe"):
            want["num_experts"] = cfg["num_experts"]
            want["moe_ffn_hidden_size"] = cfg["moe_intermediate_size"]
        if family == "qwen2_moe":
            want["shared_expert_ffn_hidden_size"] = cfg["shared_expert_intermediate_size"]
        if family.startswith("deepseek"):
            want.update(num_experts=cfg["n_routed_experts"], kv_lora_rank=cfg["kv_lora_rank"],
                        num_dense_layers=cfg["first_k_dense_replace"],
                        moe_ffn_hidden_size=cfg["moe_intermediate_size"])
        if "head_dim" in cfg and cfg["head_dim"] * cfg["num_attention_heads"] != \
                cfg["hidden_size"]:
            want["head_dim"] = cfg["head_dim"]
        yield Case(c, ("predict", "--hf-config", "{d}/config.json", *layout), "answer",
                   files=(("config.json", json.dumps(cfg)),), check=prediction(want))
    llama = json.loads((FIXTURES / "llama3-8b.json").read_text())
    short = ("--nodes", "1", "--dp", "8", "--json")
    for key in ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "max_position_embeddings"):
        for bad in (4096.7, 4096.0, "4096", True, -1, 0, [8], "evil[/]x"):
            text = json.dumps({**llama, key: bad})
            yield Case(c, ("predict", "--hf-config", "{d}/config.json", *short), "refuse",
                       files=(("config.json", text),))
        yield Case(c, ("predict", "--hf-config", "{d}/config.json", *short), "refuse",
                   files=(("config.json", json.dumps(llama)[:-1] + f', "{key}": 1e400}}'),))
    for bad in ("false", "true", 0, 1, None, "False"):
        yield Case(c, ("predict", "--hf-config", "{d}/config.json", *short), "refuse",
                   files=(("config.json", json.dumps({**llama, "tie_word_embeddings": bad})),))
    for family in ("gemma2", "gemma3", "llama4", "qwen3_next", "bert", "", "LLAMA", 5, None,
                   ["llama"]):
        cfg = {**llama, "model_type": family}
        cfg.pop("architectures", None)
        yield Case(c, ("predict", "--hf-config", "{d}/config.json", *short), "refuse",
                   files=(("config.json", json.dumps(cfg)),))
    yield Case(c, ("predict", "--hf-config", "{d}/config.json", *short), "refuse",
               files=(("config.json", json.dumps({**llama, "architectures":
                                                  ["MixtralForCausalLM"]})),))
    deepseek = json.loads((FIXTURES / "deepseek-v3.json").read_text())
    qwen_moe = json.loads((FIXTURES / "qwen2-57b-a14b.json").read_text())
    mistral = json.loads((FIXTURES / "mistral-7b-v0.1.json").read_text())
    for cfg in ({**deepseek, "moe_layer_freq": 2}, {**qwen_moe, "decoder_sparse_step": 2},
                {**qwen_moe, "mlp_only_layers": [3]}):
        yield Case(c, ("predict", "--hf-config", "{d}/config.json", *layout), "refuse",
                   files=(("config.json", json.dumps(cfg)),))
    window = mistral.get("sliding_window") or 4096
    yield Case(c, ("predict", "--hf-config", "{d}/config.json", "--seq-len", str(2 * window),
                   *short), "refuse", files=(("config.json", json.dumps(mistral)),))
    yield Case(c, ("predict", "--hf-config", "{d}/config.json", "--seq-len", str(window),
                   *short), "answer", files=(("config.json", json.dumps(mistral)),),
               check=prediction({"seq_len": window}))
    for name in ("evil[/]model[red]", "[bold]x[/bold]", "a\\[b]"):
        yield Case(c, ("predict", "--hf-config", "{d}/config.json", "--seq-len", "4096",
                       "--nodes", "1", "--dp", "8"), "answer",
                   files=(("config.json", json.dumps({**llama, "_name_or_path": name})),),
                   check=table_shows(f"{name} on 1 x 8"))
    for text in ("not json", "[]", "null", "", '{"model_type": "llama", "model_type": "llama"}',
                 "\x00\xff"):
        yield Case(c, ("predict", "--hf-config", "{d}/config.json", *short), "refuse",
                   files=(("config.json", text),))
    yield Case(c, ("predict", "--hf-config", "{d}", *short), "refuse")
    yield Case(c, ("predict", "--hf-config", "{d}/none.json", *short), "refuse")


def _config_file(data: Any, fmt: str) -> tuple[str, str]:
    import yaml

    if fmt == "json":
        return "run.json", json.dumps(data)
    return "run.yaml", yaml.safe_dump(data)


VALID_FILE: dict[str, Any] = {"model": "8b", "gpu": "H100", "num_nodes": 4, "dp": 8, "tp": 4,
                              "mbs": 1, "grad_accum": 8, "framework": "nanotron"}
CSV_GOOD: dict[str, Any] = {"num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336,
                            "num_heads": 32, "num_kv_heads": 8, "vocab_size": 128256,
                            "seq_len": 4096, "num_nodes": 1, "dp": 8}


def _csv(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def config_cases() -> Iterator[Case]:
    c = "config files, CSV"
    bad: Any
    run = ("predict", "--config", "{d}/run.{fmt}", "--json")

    def file_case(data: Any, fmt: str, expect: Expect, check: Check | None = None) -> Case:
        name, text = _config_file(data, fmt)
        return Case(c, tuple(a.replace("{fmt}", fmt) for a in run), expect,
                    files=((name, text),), check=check)

    for fmt in ("yaml", "json"):
        for key in ("zero", "grad-accum", "nodes", "num_layer", "tensor_parallel", "TP", "foo",
                    "Zero_Stage", "mbs ", "dp.1", "micro_batch_size", "n_layers"):
            yield file_case({**VALID_FILE, key: 1}, fmt, "refuse")
        hostile = ("abc", 2.5, True, [8], {"a": 1}, -1, 0, 10**400, "8 GPUs", None)
        for key in ("dp", "tp", "grad_accum", "zero_stage", "mbs", "num_nodes"):
            for bad in hostile if fmt == "yaml" else hostile[1:8:3]:
                if bad is None and key in ("zero_stage", "mbs", "grad_accum"):
                    continue  # null is 'not given': the default
                expect: Expect = "either" if bad == 0 and key == "zero_stage" else "refuse"
                yield file_case({**VALID_FILE, key: bad}, fmt, expect)
        for data in ([1, 2], "just text", 5, {"cluster": 4, **VALID_FILE},
                     {**VALID_FILE, "layout": {"gpu": "H100"}},
                     {**VALID_FILE, "model": {"dp": 8}},
                     {**VALID_FILE, "layout": {"dp": 8}}):
            yield file_case(data, fmt, "refuse")
    for key, fmt_text in (("tp", "tp: 4\ntp: 8\n"), ("model", "model: 8b\nmodel: 70b\n")):
        yield Case(c, ("predict", "--config", "{d}/run.yaml", "--json"), "refuse",
                   files=(("run.yaml", "num_nodes: 4\ndp: 8\n" + fmt_text +
                           ("model: 8b\n" if key == "tp" else "tp: 4\n")),))
        body = json.dumps({k: v for k, v in VALID_FILE.items() if k != key})[:-1]
        yield Case(c, ("predict", "--config", "{d}/run.json", "--json"), "refuse",
                   files=(("run.json", body + f', "{key}": 4, "{key}": 8}}'),))
    for text in ("", "~", "{", "dp: [1, 2", "!!python/object/apply:os.system ['true']",
                 "a: &a [*a]", "\x00"):
        yield Case(c, ("predict", "--config", "{d}/run.yaml"), "refuse",
                   files=(("run.yaml", text),))
    # keys that must change the prediction (each against the file without it)
    base_argv = ("predict", "--model", "8b", "--gpu", "H100", "--nodes", "4", "--dp", "8",
                 "--tp", "4", "--mbs", "1", "--grad-accum", "8", "--framework", "nanotron",
                 "--json")
    for key, value, path in (
            ("zero_stage", 1, ("memory_gib", "optimizer")),
            ("grad_accum", 16, ("step_time_s", "total")),
            ("recompute", "full", ("memory_gib", "activations")),
            ("mbs", 2, ("memory_gib", "activations")),
            ("sequence_parallel", True, ("memory_gib", "activations")),
            ("tie_embeddings", True, ("memory_gib", "weights")),
            ("seq_len", 4096, ("memory_gib", "activations")),
            ("framework", "megatron", ("step_time_s", "total"))):
        for fmt in ("yaml", "json"):
            yield file_case({**VALID_FILE, key: value}, fmt, "answer",
                            check=prediction({key: value}, differs=(base_argv, path)))
    # tables of configurations
    header = list(CSV_GOOD)
    good = list(CSV_GOOD.values())
    for col in ("dp", "num_layers", "seq_len", "hidden_size", "num_nodes"):
        text = _csv([*header, col], [[*good, CSV_GOOD[col]]])
        yield Case(c, ("predict", "--from-csv", "{d}/in.csv"), "refuse",
                   files=(("in.csv", text),))
    for col, meant in (("zero", "zero_stage"), ("grad-accum", "grad_accum"),
                       ("num_layer", "num_layers"), ("tensor_parallel_size", "tp"),
                       ("micro_batch_size", "mbs"), ("batch_accum", "grad_accum"),
                       ("seq_length", "seq_len"), ("nodes", "num_nodes")):
        # a near miss of a column the table lacks: it would be ignored, the column defaulted
        kept = [h for h in header if h != meant]
        yield Case(c, ("predict", "--from-csv", "{d}/in.csv"), "refuse",
                   files=(("in.csv", _csv([*kept, col], [[*(CSV_GOOD[h] for h in kept),
                                                          CSV_GOOD.get(meant, 1)]])),))
    for col, bad in (("dp", "abc"), ("dp", "8.5"), ("dp", "0"), ("tp", "3"), ("num_layers", "-4"),
                     ("seq_len", "1e400"), ("hidden_size", "inf"), ("vocab_size", "nan"),
                     ("num_heads", "evil[/]x"), ("gpu", "H900"), ("recompute", "bad"),
                     ("dtype", "fp4"), ("framework", "deepspeed"), ("tie_embeddings", "maybe"),
                     ("mbs", str(10**400)), ("zero_stage", "1.5")):
        cols = header if col in header else [*header, col]
        first = [CSV_GOOD.get(h, "") for h in cols]
        rows = [first, [bad if h == col else v for h, v in zip(cols, first, strict=True)]]
        # a count no float64 holds exactly refuses the table (the CSV reader would round it)
        expect = "either" if col == "mbs" else "answer"
        yield Case(c, ("predict", "--from-csv", "{d}/in.csv", "--analytic"), expect,
                   files=(("in.csv", _csv(cols, rows)),), check=csv_rows(2, {1}))
    past: tuple[tuple[str, Expect, int], ...] = (
        (",7\n", "refuse", 0), (",\n", "answer", 1), (",,,\n", "answer", 1))
    for rows_text, expect, n in past:
        # values past the header's columns; trailing commas (empty values) are allowed
        line = ",".join(map(str, good)) + rows_text
        yield Case(c, ("predict", "--from-csv", "{d}/in.csv", "--analytic"), expect,
                   files=(("in.csv", ",".join(header) + "\n" + line),),
                   check=csv_rows(n, set()))
    for raw in (b"\x00\x01\x02", b"", b"num_layers\n", b"a,b\n1,2,3\n"):
        yield Case(c, ("predict", "--from-csv", "{d}/in.csv"), "either",
                   files=(("in.csv", raw),), check=csv_rows(0, set()))
    yield Case(c, ("predict", "--from-csv", "{d}/in.csv", "--out", "{d}/out.xlsx"), "refuse",
               files=(("in.csv", _csv(header, [good])),))


MODEL_FILES = ("status.txt", "mfu.txt", "mfu_lo.txt", "mfu_hi.txt", "mem.txt")


def _model_copy(change: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        m = d / "m"
        shutil.copytree(MODEL_DIR, m)
        change(m)
    return setup


def _truncate(name: str, size: Callable[[int], int]) -> Callable[[Path], None]:
    def change(m: Path) -> None:
        data = (m / name).read_bytes()
        (m / name).write_bytes(data[:size(len(data))])
    return change


def _edit_leaf(name: str) -> Callable[[Path], None]:
    def change(m: Path) -> None:
        text = (m / name).read_text()
        match = re.search(r"^leaf_value=(\S+)", text, re.MULTILINE)
        assert match, name
        first = match.group(1)
        changed = str(float(first) * 1.5 + 0.01)
        (m / name).write_text(text[:match.start(1)] + changed + text[match.end(1):])
    return change


def _extend(name: str) -> Callable[[Path], None]:
    def change(m: Path) -> None:
        (m / name).write_bytes((m / name).read_bytes() + b"\nx=1\n")
    return change


def _delete(name: str) -> Callable[[Path], None]:
    def change(m: Path) -> None:
        (m / name).unlink()
    return change


def _edit_sidecar(edit: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def change(m: Path) -> None:
        meta = json.loads((m / "model.json").read_text())
        out = edit(meta)
        (m / "model.json").write_text(json.dumps(meta if out is None else out))
    return change


def model_cases() -> Iterator[Case]:
    c = "model integrity"
    argv = (*PREDICT, "--model-dir", "{d}/m", "--json")
    for name in MODEL_FILES:
        for size in (lambda n: 0, lambda n: n // 2, lambda n: n - 1):
            yield Case(c, argv, "refuse", setup=_model_copy(_truncate(name, size)))
        yield Case(c, argv, "refuse", setup=_model_copy(_edit_leaf(name)))
        yield Case(c, argv, "refuse", setup=_model_copy(_extend(name)))
        yield Case(c, argv, "refuse", setup=_model_copy(_delete(name)))
    edits: tuple[Callable[[dict[str, Any]], Any], ...] = (
                 lambda meta: meta.pop("file_sha256"),
                 lambda meta: meta.pop("sidecar_sha256"),
                 lambda meta: meta.update(conformal_q=0.5),
                 lambda meta: meta["feature_names"].reverse(),
                 lambda meta: [],
                 lambda meta: {})
    for edit in edits:
        yield Case(c, argv, "refuse", setup=_model_copy(_edit_sidecar(edit)))
    yield Case(c, argv, "refuse", setup=_model_copy(_truncate("model.json", lambda n: n // 2)))
    yield Case(c, argv, "refuse", setup=_model_copy(lambda m: (m / "model.json").unlink()))
    yield Case(c, (*PREDICT, "--model-dir", "{d}/none", "--json"), "refuse")
    yield Case(c, (*PREDICT, "--model-dir", "{d}/file", "--json"), "refuse",
               files=(("file", "x"),))
    reference = (*PREDICT, "--json")
    yield Case(c, argv, "answer", setup=_model_copy(lambda m: None),
               check=lambda d, out, err: None if json.loads(out)["mfu"] == baseline(
                   reference)["mfu"] else "an intact copy answers unlike the bundled model")


FAR: dict[str, tuple[tuple[str, ...], float]] = {
    # option -> (the other options it needs, the value beyond which it must say it extrapolates)
    "--nodes": (("--dp", "{v8}", "--tp", "1"), 1e4),
    "--seq-len": ((), 2e6),
    "--mbs": ((), 1e5),
    "--grad-accum": ((), 1e6),
    "--vocab-size": ((), 2e6),
    "--hidden-size": (("--num-heads", "32", "--ffn-hidden-size", "14336"), 1e5),
    "--num-layers": ((), 1e4),
    "--ffn-hidden-size": ((), 1e6),
}


def far_cases() -> Iterator[Case]:
    c = "far-outside inputs"
    base = PREDICT
    magnitudes = (10**3, 10**6, 10**12, 2**53 + 1, 10**20, 10**400)
    for option, (extra, beyond) in FAR.items():
        for value in magnitudes:
            if option in ("--hidden-size",):
                value = value // 32 * 32 or 32  # divisible by the heads
            args = tuple(a.replace("{v8}", str(8 * value)) for a in extra)
            expect: Expect = "refuse" if max(value, 8 * value if extra[:1] == ("--dp",)
                                             else 0) > 2**53 else "either"
            column = option[2:].replace("-", "_").replace("nodes", "num_nodes")
            yield Case(c, (*base, option, str(value), *args, "--json"), expect,
                       check=prediction({column: value}, extrapolates=value > beyond))
        for value in (0, -1):
            yield Case(c, (*base, option, str(value), "--json"), "refuse")


def search_cases() -> Iterator[Case]:
    c = "search messages"
    base = ("search", "--model", "8b", "--nodes", "4", "--global-batch-seqs", "256",
            "--trials", "0", "--analytic", "--json")
    hostile = (
        ("--gpu", "H900"), ("--gpu", "evil[/]gpu"), ("--nodes", "abc"), ("--nodes", "0"),
        ("--nodes", "4-2"), ("--nodes", "-1"), ("--nodes", "1,,2"), ("--zero", "a,b"),
        ("--zero", "7"), ("--objective", "foo"), ("--max-p-oom", "2"), ("--max-p-oom", "-0.1"),
        ("--max-p-oom", "nan"), ("--memory-margin", "-1"), ("--memory-margin", "1"),
        ("--memory-margin", "nan"), ("--trials", "-3"), ("--top-k", "0"), ("--top-k", "-2"),
        ("--max-mbs", "0"), ("--framework", "foo"), ("--framework", ""), ("--recompute", "bad"),
        ("--global-batch-seqs", "0"), ("--global-batch-seqs", "-4"), ("--max-cp", "0"),
        ("--max-vpp", "0"), ("--seq-len", "0"), ("--model", "7b"), ("--gpus-per-node", "0"),
        ("--hf-config", "none.json"), ("--launch-dir", "{d}/file"),
        ("--launch-dir", "{d}/file/sub"),
        ("--storage", "nosuch://x"), ("--storage", "study.db"), ("--storage", "mysql://u@h/db"),
    )
    for option, value in hostile:
        yield Case(c, (*base, option, value), "refuse", files=(("file", "x"),))
    yield Case(c, ("search", "--model", "8b", "--nodes", "4", "--trials", "0", "--json"),
               "refuse")  # no global batch
    yield Case(c, (*base, "--global-batch-tokens", "1048576"), "refuse")  # both
    yield Case(c, ("search", "--model", "8b", "--nodes", "4", "--global-batch-tokens", "100",
                   "--trials", "0", "--json"), "refuse")  # under one sequence
    yield Case(c, ("search", "--model", "8b", "--nodes", "4", "--global-batch-seqs", "256",
                   "--trials", "30", "--json"), "answer", check=search_answer())
    yield Case(c, ("search", "--model", "70b", "--nodes", "4-32", "--global-batch-tokens",
                   "4194304", "--objective", "mfu-vs-gpus", "--trials", "50", "--json"),
               "answer", check=search_answer(pareto=True))
    yield Case(c, ("search", "--model", "8b", "--nodes", "4", "--global-batch-seqs", "256",
                   "--objective", "mfu-vs-oom", "--trials", "30", "--json"), "answer",
               check=search_answer(pareto=True))
    log = "{d}/logs/log_1.out"
    for assignment in ("dp=abc", "foo=1", "dp", "=3", "model=7b", "gpu=H900", "tp=2.5",
                       "num_nodes=-1", "recompute=[red]"):
        yield Case(c, ("ingest", log, "--into", "t.parquet", "--set", assignment), "refuse",
                   files=(("logs/log_1.out", "nothing\n"),))


def _round(d: Path) -> Path:
    """A copy of the round proposed once for the benchmark (``surrogate propose``)."""
    src = _shared_round()
    shutil.copytree(src, d / "r01")
    return d / "r01"


_ROUND: list[Path] = []
_ROUND_LOCK = threading.Lock()


def _shared_round() -> Path:
    with _ROUND_LOCK:
        if not _ROUND:
            where = Path(tempfile.mkdtemp(prefix="robustness-round-"))
            subprocess.run([EXE, "propose", "--round", str(where / "r01"), "--k", "4",
                            "--model", "1.34b", "--nodes", "1", "--global-batch-seqs", "64"],
                           check=True, capture_output=True, env=environment(where))
            _ROUND.append(where / "r01")
        return _ROUND[0]


def _runs_table(status: str | None = "completed", match: bool = True
                ) -> Callable[[Path], None]:
    """A runs table for the round: its proposals measured (or other runs when not ``match``)."""
    def setup(d: Path) -> None:
        r = _round(d)
        props = pd.read_csv(r / "proposals.csv")
        from surrogate.config.training import CONFIG_COLUMNS

        runs = props[list(CONFIG_COLUMNS)].copy()
        runs["run_id"] = props["name"] + "/1"
        if not match:
            runs["run_id"] = "other/" + runs.index.astype(str)
            runs["dp"], runs["mbs"], runs["grad_accum"] = 1, 1, 1
            runs["num_nodes"], runs["gpus_per_node"] = 1, 1
        if status is not None:
            runs["status"] = status
        runs["mfu"] = 0.3
        runs["source"] = "mine"
        runs.to_csv(d / "runs.csv", index=False)
    return setup


def _both(*steps: Callable[[Path], object]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        for s in steps:
            s(d)
    return setup


def _edit_round(edit: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        path = d / "r01" / "round.json"
        data = json.loads(path.read_text())
        out = edit(data)
        path.write_text(json.dumps(data if out is None else out))
    return setup


def outputs_cases() -> Iterator[Case]:
    c = "score-round/train outputs"
    score = ("score-round", "--round", "{d}/r01", "--runs", "{d}/runs.csv", "--no-mlflow",
             "--json")
    yield Case(c, ("train", "--out", "{d}/file", "--no-track", "--n-trials", "0"), "refuse",
               files=(("file", "x"),), timeout_s=30)
    yield Case(c, ("train", "--out", "{d}/full", "--no-track", "--n-trials", "0"), "refuse",
               files=(("full/x", "x"),), timeout_s=30)
    yield Case(c, ("heatmap", "--out", "{d}/file/h"), "refuse", files=(("file", "x"),),
               timeout_s=30)
    yield Case(c, ("predict", "--from-csv", "{d}/in.csv", "--out", "{d}"), "refuse",
               files=(("in.csv", _csv(list(CSV_GOOD), [list(CSV_GOOD.values())])),))
    yield Case(c, ("propose", "--round", "{d}/r01", "--k", "2", "--model", "1.34b",
                   "--global-batch-seqs", "64"), "refuse", setup=_round)
    for option, value in (("--k", "0"), ("--k", "-1"), ("--round-number", "0"),
                          ("--round-number", "-1"), ("--steps", "0"), ("--boundary-frac", "2")):
        yield Case(c, ("propose", "--round", "{d}/new", option, value, "--model", "1.34b",
                       "--global-batch-seqs", "64"), "refuse")
    yield Case(c, ("score-round", "--round", "{d}/none", *score[3:]), "refuse",
               setup=_runs_table())
    yield Case(c, score, "answer", setup=_runs_table(),
               check=json_field(("metrics", "measured"), lambda v: v == 4, "4 runs measured"))
    yield Case(c, score, "refuse", setup=_runs_table(status=None))
    yield Case(c, score, "refuse", setup=_runs_table(match=False))
    yield Case(c, score, "refuse", setup=_both(_runs_table(), lambda d: (d / "runs.csv")
                                                  .write_text("status,status\ncompleted,oom\n")))
    yield Case(c, score, "refuse", setup=_both(_runs_table(), lambda d: (d / "runs.csv")
                                                  .unlink()))
    for edit in (lambda r: r["model"].update(model_sha256="0" * 64),
                 lambda r: r["model"].update(data_hash="0" * 64),
                 lambda r: r.pop("model"),
                 lambda r: r.pop("proposals"),
                 lambda r: r.pop("round"),
                 lambda r: [r],
                 lambda r: r.update(proposals=[{"name": "x"}]),
                 lambda r: r.update(round="one")):
        yield Case(c, score, "refuse", setup=_both(_runs_table(), _edit_round(edit)))
    yield Case(c, score, "refuse", setup=_both(_runs_table(), lambda d: (
        d / "r01" / "round.json").write_text("{")))


# ------------------------------------------------------------------------ a new user's inputs
BMP = b"BM6\x00\x00\x00\x00\x00\x00\x006\x00\x00\x00(\x00\x00\x00" + bytes(64)
ZIP = b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00" + bytes(64)
PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n"
WEBP = b"RIFF\x1a\x00\x00\x00WEBPVP8 " + bytes(32)
_SERVERS: dict[str, int] = {}
_SERVERS_LOCK = threading.Lock()


def _servers() -> dict[str, int]:
    """Ports of two local servers, started once: ``silent`` accepts connections and never
    answers; ``broken`` answers /health as an MLflow server does and 500 to everything else
    (a store that passes the check and fails after the work)."""
    import socket
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    with _SERVERS_LOCK:
        if _SERVERS:
            return _SERVERS
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        _SERVERS["silent"] = silent.getsockname()[1]
        _SERVERS["_keep"] = id(silent)
        _KEEP.append(silent)

        class Broken(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                ok = self.path.rstrip("/") == "/health"
                body = b"OK" if ok else b'{"error_code": "INTERNAL_ERROR"}'
                self.send_response(200 if ok else 500)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Broken)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        _SERVERS["broken"] = server.server_address[1]
        _KEEP.append(server)
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        _SERVERS["closed"] = closed.getsockname()[1]
        closed.close()  # nothing listens there now
        return _SERVERS


_KEEP: list[Any] = []


def _sweep_table(d: Path) -> None:
    """150 Playbook runs as a sweep table (a small, fast training set)."""
    from surrogate.calibration.clusters import playbook_runs
    from surrogate.ingest.sweep_files import write_sweeps
    from surrogate.ingest.sweeps import SWEEP_COLUMNS

    runs = playbook_runs()
    runs = runs[runs["hidden_size"] == 2048].sample(150, random_state=0)
    write_sweeps(runs[[c for c in SWEEP_COLUMNS if c in runs.columns]], d / "s.parquet")


def _kept_files(*names: str) -> Callable[[Path], str | None]:
    def kept(d: Path) -> str | None:
        missing = [n for n in names if not (d / n).exists()]
        return f"{', '.join(missing)} not saved" if missing else None
    return kept


def _no_file(*names: str) -> Callable[[Path], str | None]:
    """Nothing written (the input was refused before the work)."""
    def kept(d: Path) -> str | None:
        there = [n for n in names if (d / n).exists()]
        return f"{', '.join(there)} written by a refused command" if there else None
    return kept


def _hint_quoted(d: Path, out: str, err: str) -> str | None:
    import shlex

    flat = " ".join(out.split())
    m = re.search(r"`(surrogate score-round --round .*? --runs TABLE)`", flat)
    if m is None:
        return "no score-round hint"
    got = shlex.split(m.group(1))[3]
    return None if got == str(d / "my rounds" / "r 1") else f"the hint's path reads {got!r}"


def _csv_columns(**want: list[Any]) -> Check:
    def check(d: Path, out: str, err: str) -> str | None:
        rows = pd.read_csv(io.StringIO(out))
        if rows["error"].notna().any():
            return f"row errors: {rows['error'].dropna().tolist()[:2]}"
        for col, values in want.items():
            if col not in rows.columns or rows[col].tolist() != values:
                return f"{col} = {rows[col].tolist() if col in rows.columns else None}"
        return None
    return check


def _search_names(d: Path, out: str, err: str) -> str | None:
    got = json.loads(out)
    if got["space"]["model"] in ("work", "hf-config", "config"):
        return f"named by the folder: {got['space']['model']!r}"
    if got["space"]["seq_len"] == 32768 and not any("max_position_embeddings" in n
                                                    for n in got["notes"]):
        return "took max_position_embeddings (32,768) as the sequence length silently"
    return None


def new_user_cases() -> Iterator[Case]:
    """The classes of ``NEW_USER`` (instances other than the ones first reported)."""
    servers = _servers()
    predict = (*PREDICT, "--analytic", "--json")
    # profiles: what --profile reads must be a JSON profile
    for name, content in (("p.bmp", BMP), ("p.json", PDF), ("p.json", b"[]"),
                          ("p.json", b'{"schema_version": 1, "gemm": 3}'),
                          ("p.json", b'{"schema_version": 1, "name": "x", "gpu": "H100", '
                                     b'"collectives": [null]}'), ("p.json", b"{")):
        yield Case("profiles", (*predict, "--profile", "{d}/" + name), "refuse",
                   files=((name, content),), timeout_s=20)
    yield Case("profiles", (*predict, "--profile", "{d}/dir"), "refuse",
               files=(("dir/x.json", "{}"),), timeout_s=20)
    yield Case("profiles", (*predict, "--profile", "H100-SXM-80GB"), "answer",
               check=prediction(), timeout_s=20)
    # tracking stores: refused before the work, and the work kept when one fails after it
    runs_setup = _runs_table()
    score = ("score-round", "--round", "{d}/r01", "--runs", "{d}/runs.csv", "--json")
    bad_stores = ("mlflow runs here", "file:///nonexistent/mlruns", "gopher://x/mlflow",
                  f"http://127.0.0.1:{servers['closed']}", f"http://127.0.0.1:{servers['silent']}",
                  "sqlite:///{d}/r01", "sqlite:///{d}/runs.csv", "http://[::1")
    for uri in bad_stores:
        yield Case("tracking stores", score, "refuse", setup=runs_setup,
                   env=(("MLFLOW_TRACKING_URI", uri),), names="MLFLOW_TRACKING_URI",
                   kept=_no_file("r01/scores.json"), timeout_s=30)
    for uri in bad_stores[:5]:  # none needs a file of the case
        yield Case("tracking stores", ("train", "--no-playbook", "--sweeps", "{d}/s.parquet",
                                       "--out", "{d}/m", "--n-trials", "0"), "refuse",
                   setup=_sweep_table, env=(("MLFLOW_TRACKING_URI", uri),),
                   names="MLFLOW_TRACKING_URI", kept=_no_file("m"), timeout_s=30)
    yield Case("tracking stores", ("search", "--model", "8b", "--nodes", "4",
                                   "--global-batch-seqs", "256", "--trials", "0", "--json",
                                   "--storage", f"mysql://u@127.0.0.1:{servers['closed']}/db"),
               "refuse", timeout_s=30)
    broken = (("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{servers['broken']}"),)
    yield Case("tracking stores", score, "refuse", setup=runs_setup, env=broken,
               names=r"scores\.json", kept=_kept_files("r01/scores.json",
                                                       "r01/matched_runs.csv"), timeout_s=120)
    yield Case("tracking stores", ("train", "--no-playbook", "--sweeps", "{d}/s.parquet",
                                   "--out", "{d}/m", "--n-trials", "0", "--protocol", "nodes",
                                   "--max-estimators", "10"), "refuse",
               setup=_sweep_table, env=broken, names=r"evaluation\.json",
               kept=_kept_files("m/model.json", "m/evaluation.json"), timeout_s=300)
    # YAML anchors: merge keys merge, alias bombs and loops are refused at once
    merged = ("x-l: &l {dp: 4, tp: 8, mbs: 1}\nmodel: 70b\nnum_nodes: 4\n"
              "layout: {<<: *l, dp: 4}\n")
    yield Case("YAML anchors", ("predict", "--config", "{d}/run.yaml", "--json", "--analytic"),
               "answer", files=(("run.yaml", merged),),
               check=prediction({"dp": 4, "tp": 8, "num_nodes": 4}), timeout_s=20)
    yield Case("YAML anchors", ("predict", "--config", "{d}/run.yaml", "--json", "--analytic"),
               "answer", files=(("run.yaml", "<<: [{model: 8b}, {num_nodes: 1, dp: 8}]\n"
                                             "dp: 8\n"),),
               check=prediction({"dp": 8, "num_nodes": 1}), timeout_s=20)
    for depth, fan, key in ((7, 8, "gpu"), (9, 6, "name"), (20, 2, "framework"),
                            (5, 40, "recompute")):
        lines = [f"z0: &z0 [{', '.join(['q'] * fan)}]"] + [
            f"z{i}: &z{i} [{', '.join([f'*z{i - 1}'] * fan)}]" for i in range(1, depth)]
        text = "\n".join([*lines, f"{key}: *z{depth - 1}", "model: 8b", "dp: 8"]) + "\n"
        yield Case("YAML anchors", ("predict", "--config", "{d}/run.yaml"), "refuse",
                   files=(("run.yaml", text),), names="aliases", timeout_s=20)
    yield Case("YAML anchors", ("predict", "--config", "{d}/run.yaml"), "refuse",
               files=(("run.yaml", "model: &m {name: *m}\n"),), timeout_s=20)
    # batch tables: columns the reader does not read, presets, options the mode ignores
    header, good = list(CSV_GOOD), [str(v) for v in CSV_GOOD.values()]
    for col, meant in (("gradient_checkpointing", "recompute"), ("compute_dtype", "dtype"),
                       ("accelerator", "gpu"), ("ep_parallel_size", "ep"), ("sp", None),
                       ("n_head", None), ("throughput_target", None)):
        yield Case("batch tables", ("predict", "--from-csv", "{d}/in.csv"), "refuse",
                   files=(("in.csv", _csv([*header, col], [[*good, "1"]])),),
                   names=f"did you mean '{meant}'" if meant else f"'{col}'", timeout_s=20)
    yield Case("batch tables", ("predict", "--from-csv", "{d}/in.csv", "--analytic"), "answer",
               files=(("in.csv", "model,num_nodes,dp,tp,_label\nmixtral,1,8,1,a\n"
                                 "1.34b,1,8,1,b\n"),),
               check=_csv_columns(num_experts=[8, 0], _label=["a", "b"]), timeout_s=20)
    yield Case("batch tables", ("predict", "--from-csv", "{d}/in.csv"), "refuse",
               files=(("in.csv", "model,num_nodes,dp\n8b,1,8\nllama2-13b,1,8\n"),),
               names="row 2", timeout_s=20)
    yield Case("batch tables", ("predict", "--from-csv", "{d}/in.csv", "--out", "{d}/o.csv",
                                "--analytic"), "refuse",
               files=(("in.csv", _csv(header, [[*good[:-1], "3"], [*good[:-1], "6"]])),),
               names="every one of the 2 rows", kept=_kept_files("o.csv"), timeout_s=20)
    for extra in (("--out", "{d}/o.csv"), ("--out", "{d}/o.csv", "--json")):
        yield Case("batch tables", (*PREDICT, *extra), "refuse", names="--out",
                   kept=_no_file("o.csv"), timeout_s=20)
    for extra in (("--dp", "8"), ("--config", "{d}/in.csv"), ("--json",)):
        yield Case("batch tables", ("predict", "--from-csv", "{d}/in.csv", *extra), "refuse",
                   files=(("in.csv", _csv(header, [good])),), names=extra[0], timeout_s=20)
    # torchtitan TOML: a bad value is blamed on its own key
    for key, value in (("pipeline_parallel_degree", "-4"), ("context_parallel_degree", '"two"'),
                       ("tensor_parallel_degree", "1.5"), ("expert_parallel_degree", "0"),
                       ("data_parallel_shard_degree", "-8"),
                       ("data_parallel_replicate_degree", "false")):
        toml = (f'[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\n{key} = {value}\n'
                "[training]\nlocal_batch_size = 1\nseq_len = 4096\n")
        yield Case("torchtitan TOML", ("predict", "--config", "{d}/job.toml", "--nodes", "1"),
                   "refuse", files=(("job.toml", toml),), names=key, timeout_s=20)
    yield Case("torchtitan TOML", ("predict", "--config", "{d}/job.toml", "--nodes", "1"),
               "refuse", files=(("job.toml", "training = 5\n"),), names=r"\[training\]",
               timeout_s=20)
    # files that are not tables
    for argv, name, content, kind in (
            (("calibrate", "--runs", "{d}/t.csv", "--out", "{d}/p.json"), "t.csv", BMP, "BMP"),
            (("heatmap", "--measured", "{d}/t.csv", "--out", "{d}/h"), "t.csv", PDF, "PDF"),
            (("heatmap", "--measured", "{d}/t.parquet", "--out", "{d}/h"), "t.parquet",
             b"a,b\n1,2\n", "Parquet"),
            (("score-round", "--round", "{d}/r01", "--runs", "{d}/t.csv", "--no-mlflow"),
             "t.csv", ZIP, "ZIP"),
            (("propose", "--round", "{d}/new", "--runs", "{d}/t.csv", "--model", "1.34b",
              "--global-batch-seqs", "64"), "t.csv", WEBP, "RIFF"),
            (("train", "--no-playbook", "--sweeps", "{d}/t.csv", "--no-track", "--out",
              "{d}/m"), "t.csv", b"\x00" * 64, "binary"),
            (("predict", "--from-csv", "{d}/t.csv"), "t.csv", "é,ü\n".encode("latin-1"),
             "UTF-8")):
        yield Case("non-table files", argv, "refuse", files=((name, content),),
                   setup=_round if "score-round" in argv else None, names=kind,
                   kept=_no_file("p.json", "h.png", "new", "m"), timeout_s=20)
    # propose: refused before scoring; its hints quote paths with spaces
    big = ("--model", "8b", "--nodes", "1-16", "--global-batch-seqs", "512")
    for option, value in (("--k", "0"), ("--k", "-2"), ("--steps", "-1"),
                          ("--boundary-frac", "1.5"), ("--round-number", "0")):
        yield Case("propose", ("propose", "--round", "{d}/r", option, value, *big), "refuse",
                   names=option, kept=_no_file("r"), timeout_s=10)
    yield Case("propose", ("propose", "--round", "{d}/my rounds/r 1", "--k", "2", "--model",
                           "1.34b", "--global-batch-seqs", "64"), "answer", check=_hint_quoted)
    # a config.json's model: named by the config, its sequence length said
    hf = json.loads((FIXTURES / "qwen2-7b.json").read_text())
    hf.pop("_name_or_path", None)
    for extra in ((), ("--seq-len", "4096")):
        yield Case("hf-config names", ("search", "--hf-config", "{d}/work/config.json",
                                       "--nodes", "1", "--global-batch-seqs", "64", "--trials",
                                       "0", "--analytic", "--json", *extra), "answer",
                   files=(("work/config.json", json.dumps(hf)),), check=_search_names)
    # the runs the validator rejects: kept, flagged
    yield Case("flagged runs", ("ingest", str(ROOT / "tests" / "fixtures" /
                                              "sweeps_playbook_excerpt.csv"),
                                "--into", "{d}/t.parquet"), "answer",
               check=_flagged_kept, timeout_s=60)


def _flagged_kept(d: Path, out: str, err: str) -> str | None:
    table = pd.read_parquet(d / "t.parquet")
    m = re.search(r"read (\d+) rows from \d+ file\(s\), skipped (\d+)", out)
    if m is None or int(m.group(1)) != len(table) + int(m.group(2)):
        return f"rows in != rows in the table + skipped ({out[:200]!r})"
    if "layout_problem" not in table.columns or table["layout_problem"].notna().sum() == 0:
        return "the run whose layout the validator rejects was not kept, flagged"
    return None


def all_cases() -> dict[str, list[Case]]:
    out: dict[str, list[Case]] = {}
    for gen in (usage_cases, hf_cases, config_cases, model_cases, far_cases, search_cases,
                outputs_cases, new_user_cases):
        for case in gen():
            out.setdefault(case.cls, []).append(case)
    return out


# ------------------------------------------------------------------------ concurrency
def concurrent_appends(repeats: int, tally: Tally) -> None:
    """8 concurrent ingests of the Playbook CSV's eight chunks into one table, ``repeats``
    times; rows in = rows in the table + rows skipped, or rows are lost."""
    from surrogate.io.datasource import data_dir

    source = data_dir() / PLAYBOOK
    if not source.exists():
        print(f"concurrent appends: skipped ({source} is absent)", file=sys.stderr)
        return
    lines = source.read_text().splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    n = len(rows)
    lost = 0
    with tempfile.TemporaryDirectory(prefix="robustness-ingest-") as tmp:
        d = Path(tmp)
        chunks = []
        for i in range(8):
            chunk = d / f"chunk{i}.csv"
            chunk.write_text(header + "".join(rows[i * n // 8:(i + 1) * n // 8]))
            chunks.append(chunk)
        for r in range(repeats):
            table = d / f"t{r}.parquet"
            procs = [subprocess.Popen([EXE, "ingest", str(chunk), "--into", str(table)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=environment(d)) for chunk in chunks]
            skipped = 0
            for chunk, p in zip(chunks, procs, strict=True):
                out, err = p.communicate(timeout=600)
                case = Case("concurrent appends", ("ingest", chunk.name, "--into", table.name),
                            "answer")
                verdict, why = classify(case, p.returncode, out, err, d)
                m = re.search(r"read (\d+) rows from \d+ file\(s\), skipped (\d+)", out)
                if verdict == "correct" and m is None:
                    verdict, why = "wrong", f"no 'read N rows ... skipped M' line: {out[:200]!r}"
                tally.counts[verdict] += 1
                if verdict != "correct":
                    tally.failures.append(Result(case, verdict, why))
                skipped += int(m.group(2)) if m else 0
            stored = len(pd.read_parquet(table)) if table.exists() else 0
            lost += abs(n - stored - skipped)
            print(f"  repeat {r + 1}/{repeats}: {n} rows in, {stored} in the table, "
                  f"{skipped} skipped", file=sys.stderr)
    tally.rows_lost = lost


# ------------------------------------------------------------------------ report
def print_table(tallies: dict[str, Tally], seconds: float) -> None:
    head = ["input class", "inputs", *(name for _, name in COLUMNS), "rows lost",
            "slowest error (s)"]
    rows = []
    total: Counter[str] = Counter()
    lost_total = 0
    for cls in CLASSES:
        if cls not in tallies:
            continue
        t = tallies[cls]
        n = sum(t.counts.values())
        total.update(t.counts)
        lost = "" if t.rows_lost is None else str(t.rows_lost)
        lost_total += t.rows_lost or 0
        slowest = f"{t.slowest_s:.1f}" if t.slowest_s else ""  # refusals of <= 30 s limits
        rows.append([cls, str(n), *(str(t.counts[k]) for k, _ in COLUMNS), lost, slowest])
    slowest_all = max((t.slowest_s for t in tallies.values()), default=0.0)
    rows.append(["total", str(sum(total.values())), *(str(total[k]) for k, _ in COLUMNS),
                 str(lost_total), f"{slowest_all:.1f}"])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |")
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for r in rows:
        cells = [r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:],
                                                                   strict=True))]
        print("| " + " | ".join(cells) + " |")
    print(f"\n{sum(total.values())} inputs in {seconds:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="every fourth input of each class, 2 repeats of the concurrent ingest")
    ap.add_argument("--repeats", type=int, default=None,
                    help="repeats of the 8 concurrent ingests (default 10; --quick 2)")
    ap.add_argument("--jobs", type=int, default=2, help="inputs run at once (default 2)")
    ap.add_argument("--only", action="append", choices=CLASSES, default=None,
                    help="run only this class (repeatable)")
    ap.add_argument("--show", type=int, default=5,
                    help="failures to print per class, with their command lines (default 5)")
    args = ap.parse_args()
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 10)
    chosen = set(args.only or CLASSES)
    start = time.perf_counter()
    cases = {k: v[::4] if args.quick else v for k, v in all_cases().items() if k in chosen}
    tallies = {cls: Tally() for cls in CLASSES if cls in chosen}
    if "concurrent appends" in chosen:
        print(f"concurrent appends: 8 ingests at once, {repeats} times", file=sys.stderr)
        concurrent_appends(repeats, tallies["concurrent appends"])
    todo = [case for group in cases.values() for case in group]
    print(f"{len(todo)} inputs, {args.jobs} at a time", file=sys.stderr)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for i, result in enumerate(pool.map(run_case, todo), start=1):
            t = tallies[result.case.cls]
            t.counts[result.verdict] += 1
            if result.case.kept is not None:  # what a failure keeps of the work: counted
                t.rows_lost = (t.rows_lost or 0) + result.why.startswith("lost: ")
            if result.verdict == "clear" and result.case.timeout_s <= 30:  # a refusal
                t.slowest_s = max(t.slowest_s, result.seconds)
            if result.verdict not in ("clear", "correct"):
                t.failures.append(result)
            if i % 50 == 0:
                print(f"  {i}/{len(todo)}", file=sys.stderr)
    print_table(tallies, time.perf_counter() - start)
    for cls, t in tallies.items():
        for r in t.failures[:args.show]:
            argv = " ".join(map(repr_arg, r.case.argv))
            print(f"\n[{cls}] {r.verdict}: {r.why}\n  surrogate {argv}  (expects "
                  f"{r.case.expect})")


def repr_arg(a: str) -> str:
    return a if re.fullmatch(r"[\w./{}:=,+-]+", a) else repr(a)


if __name__ == "__main__":
    main()
