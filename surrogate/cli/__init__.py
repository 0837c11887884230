"""Command-line interface: parse, call the library, print a table or JSON, return an exit code.

Every :class:`~surrogate.errors.SurrogateError` becomes one line on stderr and exit code 2;
``--debug`` (anywhere on the command line) shows the traceback instead.
"""

from __future__ import annotations

import sys

import click

from surrogate.cli import data, microbench, predict, search, train  # noqa: F401  (register commands)
from surrogate.cli.app import app
from surrogate.errors import SurrogateError

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        result = app(args=args, prog_name="surrogate", standalone_mode=False)
    except SurrogateError as e:
        if debug:
            raise
        # One line, whatever the message holds (a YAML parser's error spans several).
        print("error: " + " ".join(str(e).split()), file=sys.stderr)
        return 2
    except click.exceptions.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.exceptions.Abort:
        print("aborted", file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
