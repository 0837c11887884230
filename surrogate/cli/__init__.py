"""Command-line interface: parse, call the library, print a table or JSON, return an exit code.

Every :class:`~surrogate.errors.SurrogateError`, every usage error (an unknown command or
option, a value of the wrong type, a missing value), an output the system refuses (a full disk,
a closed or full stdout: :mod:`surrogate.cli.streams`) and running out of memory become one
line on stderr and exit code 2; ``--debug`` (anywhere on the command line) shows the traceback
instead. A library warning (a model saved without its physics, no bundled model) is one
``warning:`` line on stderr likewise (``--debug``: Python's own form, with its source line).
That holds for the plugin commands of the programs (``train``, ``evaluate``, ``microbench``)
too, which :mod:`surrogate.cli.app` loads from entry points only when one of them, or the
help, is asked for.
"""

from __future__ import annotations

import errno
import sys
import warnings
from typing import Any

import typer

# isort: off  (the commands register in the order the help lists them)
from surrogate.cli import calibrate, data, heatmap, predict, propose, rounds, search  # noqa: F401

# isort: on
from surrogate.cli.app import app, ensure_plugins
from surrogate.cli.streams import flush, prepare, restore, silence, write_failure
from surrogate.errors import SurrogateError

try:  # typer >= 0.2x parses with its own copy of click; older typer with the click package
    from typer._click import exceptions as _click_exceptions
except ImportError:  # pragma: no cover - older typer
    from click import exceptions as _click_exceptions  # type: ignore[no-redef]

_CLICK_ERROR: type[Exception] = _click_exceptions.ClickException
_NO_ARGS_IS_HELP: type[Exception] | None = getattr(_click_exceptions, "NoArgsIsHelpError", None)
_EXIT: tuple[type[BaseException], ...] = (
    typer.Exit,
    getattr(_click_exceptions, "Exit", typer.Exit),
)
_ABORT: tuple[type[BaseException], ...] = (
    typer.Abort,
    getattr(_click_exceptions, "Abort", typer.Abort),
)

__all__ = ["app", "main"]


_SHOWN = 80
"""Longest value a usage error quotes whole (a 5,000-digit number is cut)."""


_LONGEST_MESSAGE = 2000
"""Longest error line printed whole; a longer one keeps its start and its end (the advice)."""


def _one_line(text: str) -> str:
    if len(text) > _LONGEST_MESSAGE:  # cut before splitting: a message may quote a huge value
        cut = _LONGEST_MESSAGE // 2
        text = f"{text[:cut]} ... ({len(text):,} characters) ... {text[-cut // 2 :]}"
    return " ".join(text.split())


def _given(args: list[str], e: Exception) -> str | None:
    """The text given on the command line for the option a BadParameter names, if found."""
    param = getattr(e, "param", None)
    names = [*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())]
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return None


def _usage_error_line(e: Exception, args: list[str]) -> str:
    """``error: MESSAGE, got 'VALUE' (see 'surrogate CMD --help')`` for a click usage error."""
    message = _one_line(e.format_message())  # type: ignore[attr-defined]
    given = _given(args, e)
    if given is not None:
        shown = (
            repr(given)
            if len(given) <= _SHOWN
            else (f"{given[: _SHOWN // 2]!r}... ({len(given):,} characters)")
        )
        message = f"{message.rstrip('.')}, got {shown}"
    ctx = getattr(e, "ctx", None)
    where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"error: {message}{where}"


def main(argv: list[str] | None = None) -> int:
    before = prepare()
    try:
        with warnings.catch_warnings():
            if "--debug" not in (sys.argv[1:] if argv is None else argv):
                warnings.showwarning = _show_warning
            return _main(argv)
    finally:
        restore(before)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """A warning as one ``warning:`` line on stderr, as an error is one ``error:`` line."""
    print("warning: " + _one_line(str(message)), file=sys.stderr)


def _main(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        ensure_plugins(args)
        result = app(args=args, prog_name="surrogate", standalone_mode=False)
        flush()
    except SurrogateError as e:
        if debug:
            raise
        # One line, whatever the message holds (a YAML parser's error spans several).
        print("error: " + _one_line(str(e)), file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:  # an optional dependency a command imported directly
        from surrogate.extras import missing_extra_message

        msg = missing_extra_message(e)
        if msg is None or debug:
            raise
        print("error: " + msg, file=sys.stderr)
        return 2
    except _CLICK_ERROR as e:
        if _NO_ARGS_IS_HELP is not None and isinstance(e, _NO_ARGS_IS_HELP):
            e.show()  # type: ignore[attr-defined]  # a bare group: its help, as click does
            return 2
        if debug:
            raise
        print(_usage_error_line(e, args), file=sys.stderr)
        return 2
    except _EXIT as e:
        return int(getattr(e, "exit_code", 0) or 0)
    except _ABORT:
        print("aborted", file=sys.stderr)
        return 130
    except OSError as e:  # a write the system refused: a full disk, a closed or full stdout
        message = write_failure(e)
        if message is None or debug:
            raise
        silence()
        if e.errno == errno.EPIPE and e.filename is None:
            return 1  # the reader left (``| head``): quietly, as rich's own writes end
        print("error: " + _one_line(message), file=sys.stderr)
        return 2
    except (MemoryError, ImportError) as e:  # an address-space limit (ulimit -v), or the RAM
        if debug or not (isinstance(e, MemoryError) or _out_of_memory(e)):
            raise
        print(f"error: {OUT_OF_MEMORY}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0


OUT_OF_MEMORY = (
    "out of memory (is an address-space limit set, ulimit -v? the command needs "
    "more; a large --from-csv table or search space needs the most)"
)
MIN_ADDRESS_SPACE_BYTES = 1 << 30
"""Below this address-space limit (``ulimit -v``) the command is refused before it starts:
the native libraries it loads (numpy, pyarrow, LightGBM) then crash the process as they start
their threads (an abort or a segmentation fault at 300-600 MB, measured), which no handler can
turn into a message. A single prediction needs about 1.5-2 GB of address space (measured)."""


def _out_of_memory(e: ImportError) -> bool:
    """Whether ``e`` is a shared library that could not be mapped (no address space left)."""
    text = str(e).lower()
    return "failed to map segment" in text or "cannot allocate memory" in text


def address_space_error() -> str | None:
    """The error line for an address-space limit below :data:`MIN_ADDRESS_SPACE_BYTES`."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft >= MIN_ADDRESS_SPACE_BYTES:
        return None
    return (
        f"error: the address-space limit (ulimit -v) is {soft / 2**20:,.0f} MiB; surrogate "
        f"needs at least {MIN_ADDRESS_SPACE_BYTES >> 20:,} MiB (its native libraries map "
        "that much as they start), a prediction about 2 GB"
    )


def entry() -> None:
    """Console-script entry point."""
    from surrogate.cli import lean_imports

    lean_imports.ONE_COMMAND_PROCESS = True  # one command, then exit
    if (refused := address_space_error()) is not None:
        print(refused, file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
