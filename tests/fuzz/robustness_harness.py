"""What :mod:`robustness` runs and how it judges a run: the case, its result, the checks of an
answer (the verdicts: ``robustness.py``'s docstring)."""

from __future__ import annotations

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "hf_configs"
MODEL_DIR = ROOT / "surrogate" / "data" / "models" / "default"
PLAYBOOK = Path("sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv")

Expect = Literal["refuse", "answer", "either"]
Check = Callable[[Path, str, str], str | None]
"""(case directory, stdout, stderr) of a run that exited 0 -> what is wrong, or None."""
Verdict = Literal["clear", "correct", "traceback", "hang", "wrong", "other"]
COLUMNS: tuple[tuple[Verdict, str], ...] = (
    ("clear", "clear errors"),
    ("correct", "correct answers"),
    ("traceback", "tracebacks"),
    ("hang", "hangs"),
    ("wrong", "silent wrong answers"),
    ("other", "other failures"),
)
NEW_USER = (
    "profiles",
    "tracking stores",
    "YAML anchors",
    "batch tables",
    "torchtitan TOML",
    "non-table files",
    "propose",
    "hf-config names",
    "flagged runs",
)
"""The classes of inputs a new user tried: files that are not what an option reads, stores
that cannot take a run (before the work, and failing after it), YAML merge keys and alias
bombs, batch columns the reader does not read, torchtitan values, propose's checks and hints,
a config.json's name and sequence length, the runs the validator rejects."""
FILES_AND_OUTPUTS = ("file arguments", "outputs", "lock waits", "concurrent rounds", "log parsers")
"""Files that are not regular (a FIFO, a device, a directory, a socket, a link to a device) or
too large given to every file option; outputs that cannot be written (a full disk, a full or
closed stdout, a width of 0, file-size and address-space limits); a table's lock held by a
stopped or silent process; proposes into one new round at once; logs with a zero
throughput."""
CLASSES = (
    "concurrent appends",
    "usage errors",
    "hf-config",
    "config files, CSV",
    "model integrity",
    "far-outside inputs",
    "search messages",
    "score-round/train outputs",
    *NEW_USER,
    *FILES_AND_OUTPUTS,
)


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
    stdout: Literal["capture", "closed", "full"] = "capture"
    """The run's stdout: captured, closed (``>&-``) or ``/dev/full``."""
    limits: tuple[tuple[int, int], ...] = ()
    """``(resource.RLIMIT_*, bytes)`` set in the run's process (``ulimit -f``, ``-v``)."""
    teardown: Callable[[Path], object] | None = None
    """After the run and ``kept``, whatever happened (unmount, stop a helper process)."""


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
    return {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{d}/mlflow.db",
        "COLUMNS": "100",
        "NO_COLOR": "1",
        "PYTHONWARNINGS": "default",
    }


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
        try:
            return _run(case, d)
        finally:
            if case.teardown is not None:
                case.teardown(d)


def _run(case: Case, d: Path) -> Result:
    argv = [a.replace("{d}", str(d)) for a in case.argv]
    env = {**environment(d), **{k: v.replace("{d}", str(d)) for k, v in case.env}}
    start = time.perf_counter()
    try:
        with open(os.devnull if case.stdout != "full" else "/dev/full", "w") as full:
            done = subprocess.run(
                [EXE, *argv],
                cwd=d,
                stdin=subprocess.DEVNULL,
                stdout=full if case.stdout == "full" else subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                timeout=case.timeout_s,
                env=env,
                preexec_fn=_preexec(case) if case.stdout == "closed" or case.limits else None,
            )
    except subprocess.TimeoutExpired:
        return Result(case, "hang", f"no answer within {case.timeout_s:.0f} s")
    seconds = time.perf_counter() - start
    verdict, why = classify(case, done.returncode, done.stdout or "", done.stderr, d)
    lost = case.kept(d) if case.kept is not None else None
    if lost is not None:
        verdict, why = "wrong", f"lost: {lost} ({verdict}: {why})"
    return Result(case, verdict, why, seconds)


def _preexec(case: Case) -> Callable[[], None]:
    """In the child before it runs: close stdout, set the resource limits."""

    def child() -> None:
        import resource

        for which, value in case.limits:
            resource.setrlimit(which, (value, value))
        if case.stdout == "closed":
            os.close(1)

    return child


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


def prediction(
    config: dict[str, Any] | None = None,
    *,
    extrapolates: bool = False,
    differs: tuple[Sequence[str], tuple[str, ...]] | None = None,
) -> Check:
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
            done = subprocess.run(
                [EXE, *argv],
                capture_output=True,
                text=True,
                check=True,
                env=environment(Path(tempfile.gettempdir())),
            )
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
        rows = pd.read_csv(
            io.StringIO(out), keep_default_na=False, na_values=[""], dtype={"error": str}
        )
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
