"""Progress of long work (evaluating, searching, proposing, drawing heatmaps, training).

The library reports ``(stage, done, total)`` through a callback, :data:`ProgressFn`, and knows
nothing of how it is shown; the commands draw it with :func:`bars`: rich progress bars on
stderr, so stdout keeps only the answer (a table or JSON). Nothing is drawn when stderr is not a
terminal (a pipe, a CI log, a test), nor with ``enabled=False`` (``--json``). rich is imported
inside :func:`bars`: importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

ProgressFn = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: ``done`` of ``total`` steps of ``stage`` are finished
(``total`` 0: unknown). A stage is drawn as one bar, created on its first report."""


def report(progress: ProgressFn | None, stage: str, done: int, total: int) -> None:
    """Call ``progress`` if there is one."""
    if progress is not None:
        progress(stage, done, total)


def _silent(stage: str, done: int, total: int) -> None:
    """A :data:`ProgressFn` that shows nothing."""


@contextmanager
def bars(enabled: bool = True) -> Iterator[ProgressFn]:
    """A :data:`ProgressFn` drawing one rich bar per stage on stderr (elapsed time, steps), for
    the duration of the ``with`` block; the bars are cleared when it ends."""
    from rich.console import Console

    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield _silent
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        tasks = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=total or None)
            progress.update(tasks[stage], completed=done, total=total or None)

        yield update
