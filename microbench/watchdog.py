"""A per-measurement timeout: a collective that hangs (a dead peer, a wedged NCCL
communicator) cannot be interrupted from Python, so a thread watches the clock and, when a
measurement overruns, records the timeout and ends the process. Measurements already written
are kept; the launcher (``surrogate microbench``) runs each op in its own process so the
other ops still run."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

TIMEOUT_EXIT_CODE = 124
"""Exit status of a process ended by the watchdog (as ``timeout(1)``)."""


class Watchdog:
    """``arm(label, timeout_s)`` before a measurement, ``disarm()`` after it. On overrun,
    ``on_timeout(label, timeout_s)`` runs (it should write the timeout record) and the process
    exits with :data:`TIMEOUT_EXIT_CODE` unless ``exit_on_timeout`` is False (for tests)."""

    def __init__(
        self,
        on_timeout: Callable[[str, float], None],
        *,
        exit_on_timeout: bool = True,
        poll_s: float = 0.05,
    ) -> None:
        self._on_timeout = on_timeout
        self._exit = exit_on_timeout
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._label = ""
        self._timeout_s = 0.0
        self.fired: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="microbench-watchdog", daemon=True)
        self._thread.start()

    def arm(self, label: str, timeout_s: float) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        with self._lock:
            self._label, self._timeout_s = label, timeout_s
            self._deadline = time.monotonic() + timeout_s

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            with self._lock:
                due = self._deadline is not None and time.monotonic() > self._deadline
                label, timeout_s = self._label, self._timeout_s
                if due:
                    self._deadline = None
            if due:
                self.fired.append(label)
                try:
                    self._on_timeout(label, timeout_s)
                finally:
                    if self._exit:
                        os._exit(TIMEOUT_EXIT_CODE)
