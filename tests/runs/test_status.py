"""The one rule from a run's traces to its status."""

from __future__ import annotations

import pytest

from surrogate.runs.status import run_status, status_from_label

OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 3 has "
    "a total capacity of 79.33 GiB of which 5.12 GiB is free."
)
TIME_LIMIT = (
    "slurmstepd: error: *** JOB 13490827 ON ip-26-0-160-225 CANCELLED AT "
    "2024-12-18T13:10:01 DUE TO TIME LIMIT ***"
)
WATCHDOG = (
    "[rank3]:[E ProcessGroupNCCL.cpp:577] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600012 ms"
)
CRASH = 'Traceback (most recent call last):\n  File "train.py", line 3\nRuntimeError: NCCL error'


@pytest.mark.parametrize(
    ("label", "status"),
    [
        ("Success", "completed"),
        ("OOM", "oom"),
        ("Other", "fail"),
        ("completed", "completed"),
        ("timeout", "timeout"),
        ("fail", "fail"),
        (" oom\n", "oom"),
    ],
)
def test_labels(label: str, status: str) -> None:
    assert status_from_label(label).status == status


@pytest.mark.parametrize("label", ["running", "pending", "init"])
def test_unfinished_labels_are_not_runs(label: str) -> None:
    v = status_from_label(label, where="status.txt")
    assert v.status is None
    assert "run not finished" in v.evidence


def test_unknown_label_says_what_is_known() -> None:
    v = status_from_label("exploded")
    assert v.status is None
    assert "must be one of" in v.evidence and "'exploded'" in v.evidence


@pytest.mark.parametrize(
    ("log", "status"),
    [
        (OOM_LINE, "oom"),
        ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate", "oom"),
        (TIME_LIMIT, "timeout"),
        (WATCHDOG, "timeout"),
        (CRASH, "fail"),
        ("srun: error: node-1: task 0: Exited with exit code 1", "fail"),
        ("failed (exitcode: 1) local_rank: 3", "fail"),
    ],
)
def test_log_evidence(log: str, status: str) -> None:
    v = run_status(log_text="iteration 1\n" + log, iterations_logged=1, iterations_expected=10)
    assert v.status == status
    assert v.evidence.startswith("log: ")


def test_oom_wins_over_the_timeouts_and_crashes_it_causes() -> None:
    log = "\n".join([WATCHDOG, OOM_LINE, CRASH, TIME_LIMIT])
    assert run_status(log_text=log, iterations_logged=0).status == "oom"


def test_time_limit_wins_over_crash() -> None:
    assert run_status(log_text=CRASH + "\n" + TIME_LIMIT, iterations_logged=0).status == "timeout"


def test_status_file_wins_over_log() -> None:
    v = run_status(log_text=OOM_LINE, iterations_logged=0, status_file_text="completed\n")
    assert (v.status, v.evidence) == ("completed", "status.txt says 'completed'")
    v = run_status(log_text="", iterations_logged=3, status_file_text="running")
    assert v.status is None


def test_completed_needs_the_iterations() -> None:
    assert run_status(log_text="", iterations_logged=20, iterations_expected=20).status == (
        "completed"
    )
    assert run_status(log_text="", iterations_logged=3).status == "completed"
    v = run_status(log_text="", iterations_logged=3, iterations_expected=20)
    assert v.status is None
    assert "after 3 of 20 iterations" in v.evidence
    assert run_status(log_text="", iterations_logged=0).status is None


def test_benign_text_is_not_a_failure() -> None:
    log = "UserWarning: TypedStorage is deprecated\nerror_rate: 0.1\nno errors found"
    assert run_status(log_text=log, iterations_logged=5).status == "completed"
