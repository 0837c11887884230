"""The process's worker threads for native work that releases the GIL (compiled trees
evaluating parts of a batch: ``surrogate.compiled_trees``), one per core this process may
run on. Each task runs in a copy of the caller's context, so that context variables (the
analytic parameters in use, ``surrogate.analytic.params``) are the caller's.

Running the analytic model over parts of a table on these threads gave the same answers
bitwise but no measurable gain on a busy 2-core machine (numpy's temporaries are bound by
memory bandwidth), so it runs on the calling thread.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_POOLS: dict[int, ThreadPoolExecutor] = {}


def workers() -> int:
    """Threads of the pool: one per CPU core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def pool() -> ThreadPoolExecutor:
    """The threads (one pool per process, since a forked child inherits no threads)."""
    pid = os.getpid()
    if pid not in _POOLS:
        _POOLS[pid] = ThreadPoolExecutor(max_workers=workers(),
                                         thread_name_prefix="surrogate-worker")
    return _POOLS[pid]


def map_in_threads(fn: Callable[..., T], *args: Iterable[Any]) -> list[T]:
    """``[fn(*a) for a in zip(*args)]`` (iterables of one length), each call on a worker
    thread in a copy of the caller's context; in order."""
    futures = [pool().submit(contextvars.copy_context().run, fn, *a)
               for a in zip(*args, strict=True)]
    return [f.result() for f in futures]
