"""The watchdog fires on overrun, not before, and reports the measurement's label."""

from __future__ import annotations

import time

import pytest

from microbench.watchdog import Watchdog


def test_fires_once_on_overrun() -> None:
    seen: list[tuple[str, float]] = []
    dog = Watchdog(lambda label, t: seen.append((label, t)), exit_on_timeout=False, poll_s=0.01)
    dog.arm("all_reduce 1 GiB", 0.05)
    time.sleep(0.3)
    dog.arm("quick", 5.0)
    dog.disarm()
    time.sleep(0.05)
    dog.close()
    assert seen == [("all_reduce 1 GiB", 0.05)]


def test_rejects_non_positive_timeout() -> None:
    dog = Watchdog(lambda label, t: None, exit_on_timeout=False)
    with pytest.raises(ValueError, match="timeout_s must be > 0, got 0"):
        dog.arm("x", 0)
    dog.close()
