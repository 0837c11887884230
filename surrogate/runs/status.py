"""The one rule that turns what a run left behind into a status.

Every parser calls :func:`run_status` (logs) or :func:`status_from_label` (tables and
``status.txt`` files that already carry a word), so a run counts as ``oom`` or ``timeout`` for
the same reasons whichever tool wrote it.

Order of evidence, strongest first:

1. a final word in a ``status.txt`` (huggingface/bench_cluster writes ``completed``, ``oom``,
   ``timeout`` or ``fail`` there when a run ends; ``init``, ``pending``, ``running`` while it
   has not);
2. out-of-memory evidence in the log (PyTorch ``OutOfMemoryError`` / ``CUDA out of memory``,
   cuBLAS allocation failures) -> ``oom``; it is checked before the others because an OOM on
   one rank usually ends in collective timeouts and tracebacks on the rest;
3. timeout evidence (Slurm's ``CANCELLED ... DUE TO TIME LIMIT``, the NCCL watchdog's
   ``collective operation timeout``) -> ``timeout``;
4. crash evidence (a Python traceback, ``...Error:``, a non-zero exit code from srun or
   torchrun, a segmentation fault) -> ``fail``;
5. otherwise, iterations logged: all expected iterations (or, when the expected number is
   unknown, at least one) -> ``completed``.

A log with neither failure evidence nor enough iterations is not a measurement (a run still
going, or a truncated file): the verdict's status is None and the caller counts a skip.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from surrogate.runs.sweeps import STATUSES, Status

_OOM = re.compile(
    r"OutOfMemoryError|CUDA out of memory|HIP out of memory|CUBLAS_STATUS_ALLOC_FAILED"
    r"|\bout of memory\b",
    re.IGNORECASE,
)
_TIMEOUT = re.compile(
    r"DUE TO TIME LIMIT|collective operation timeout|Watchdog caught collective operation"
    r"|ProcessGroupNCCL.*\btimed? ?out\b",
    re.IGNORECASE,
)
_FAIL = re.compile(
    r"^.*Traceback \(most recent call last\)"
    r"|^.*\b[A-Z]\w*(?:Error|Exception):"
    r"|(?i:exited with exit code [1-9])|exitcode\s*:\s*[1-9]"
    r"|Segmentation fault|core dumped|\*\*\* JOB \d+ ON .* CANCELLED",
    re.MULTILINE,
)

LABELS: dict[str, Status] = {
    # the project's own words
    **{s: s for s in STATUSES},  # type: ignore[misc]
    # the Ultra-Scale Playbook table (bench_final2_mfu2.csv): "Other" covers timeouts, hangs
    # and crashes (MANIFEST.md), which it does not tell apart, so it maps to "fail"
    "success": "completed",
    "other": "fail",
    # bench_cluster status.txt
    "failed": "fail",
}
UNFINISHED_LABELS = frozenset({"init", "pending", "running"})


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """A run's status and the evidence for it; ``status`` None means "not a finished run"."""

    status: Status | None
    evidence: str


def status_from_label(label: str, *, where: str = "status") -> Verdict:
    """The status a word stands for (``Success``, ``OOM``, ``Other``, ``completed``, ...).

    An unknown word gives a verdict with status None that says so, so the caller can count
    the row as a skip with the word in the reason.
    """
    word = str(label).strip().lower()
    if word in LABELS:
        return Verdict(status=LABELS[word], evidence=f"{where} says {label.strip()!r}")
    if word in UNFINISHED_LABELS:
        return Verdict(status=None, evidence=f"run not finished: {where} says {label.strip()!r}")
    known = ", ".join(sorted({*LABELS, *UNFINISHED_LABELS}))
    return Verdict(status=None, evidence=f"{where} must be one of {known}, got {label!r}")


def _first_match(pattern: re.Pattern[str], text: str) -> str | None:
    m = pattern.search(text)
    if m is None:
        return None
    line_start = text.rfind("\n", 0, m.start()) + 1
    line_end = text.find("\n", m.end())
    line = text[line_start : None if line_end < 0 else line_end].strip()
    return line[:160]


def run_status(
    *,
    log_text: str,
    iterations_logged: int,
    iterations_expected: int | None = None,
    status_file_text: str | None = None,
) -> Verdict:
    """The status of one run from its log, the iterations it logged and its ``status.txt``.

    See the module docstring for the order of evidence.
    """
    if status_file_text is not None and status_file_text.strip():
        return status_from_label(status_file_text.strip().splitlines()[0], where="status.txt")
    for pattern, status in ((_OOM, "oom"), (_TIMEOUT, "timeout"), (_FAIL, "fail")):
        line = _first_match(pattern, log_text)
        if line is not None:
            return Verdict(status=status, evidence=f"log: {line}")  # type: ignore[arg-type]
    if iterations_expected is not None and iterations_logged >= iterations_expected:
        return Verdict(
            status="completed",
            evidence=f"all {iterations_expected} iterations logged, no error",
        )
    if iterations_expected is None and iterations_logged > 0:
        return Verdict(status="completed", evidence=f"{iterations_logged} iterations, no error")
    expected = "?" if iterations_expected is None else str(iterations_expected)
    return Verdict(
        status=None,
        evidence=(
            f"log ends after {iterations_logged} of {expected} iterations with no OOM, "
            "timeout or error: unfinished or truncated"
        ),
    )
