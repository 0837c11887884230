"""The help of every command, readable at 80 columns.

typer's own help puts each option in a table of six columns (long name, short name, negative
names, type, help); at 80 columns the names are cut (``--moe-ffn-hidden-si…``) and every option
carries a type label. This layout has two columns, as click's does: the option's names with a
metavar where the option takes a value, then its help, wrapped; names too long for their column
get a line of their own, the help below. Options are grouped in the panels their declarations
name (``rich_help_panel``), in order of appearance. Nothing is cut at any width from 60 columns.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import RenderableType

NAMES_WIDTH = 28
"""Widest option names kept beside their help; longer ones take a line of their own."""

_METAVARS = {"int": "N", "float": "X", "path": "PATH"}
"""The metavar of an option that declares none, by its type (else ``TEXT``)."""


def _paragraphs(text: str) -> str:
    """A docstring's paragraphs, each one line (the console wraps them)."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


def _names(param: Any) -> str:
    """``-m, --model PRESET``; a flag with a negative form ``--json / --no-json``."""
    names = ", ".join(sorted(param.opts, key=lambda o: o.startswith("--")))
    if param.secondary_opts:
        names += " / " + ", ".join(param.secondary_opts)
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return names
    bare = getattr(param, "bare_type", lambda: "")()
    metavar = param.metavar or _METAVARS.get(bare.split(" ")[0].lower(), "TEXT")
    return f"{names} {metavar}"


def _default(param: Any) -> str | None:
    """What ``[default: ...]`` shows, or None where nothing is worth showing."""
    shown = getattr(param, "show_default", None)
    if isinstance(shown, str):
        return shown
    default = param.default
    if shown is False or default is None or callable(default):
        return None
    if getattr(param, "is_flag", False):
        if not param.secondary_opts:
            return None  # a plain switch is off unless given
        return str((param.opts if default else param.secondary_opts)[-1])
    if default in ("", ()) or (isinstance(default, list | tuple) and not default):
        return None
    return ",".join(map(str, default)) if isinstance(default, list | tuple) else str(default)


def _help(param: Any) -> Any:
    from rich.text import Text

    text = Text.from_markup(" ".join((getattr(param, "help", None) or "").split()))
    default = _default(param)
    if default is not None:
        text.append(f"{' ' if text else ''}[default: {default}]", style="dim")
    if param.required:
        text.append(f"{' ' if text else ''}[required]", style="dim red")
    return text


def _rows(pairs: list[tuple[str, Any]]) -> RenderableType:
    """Names beside their help, or above it where they are wider than :data:`NAMES_WIDTH`."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    width = min(NAMES_WIDTH, max((len(n) for n, _ in pairs), default=0))
    parts: list[RenderableType] = []
    for names, help_text in pairs:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(width=width, no_wrap=True, style="bold cyan")
        grid.add_column(ratio=1, overflow="fold")  # a long default is folded, not cut
        if len(names) > width:
            parts.append(Text(names, style="bold cyan", overflow="fold"))
            names = ""
        grid.add_row(names, help_text)
        parts.append(grid)
    return Group(*parts)


def _panels(command: Any, ctx: Any) -> dict[str, list[tuple[str, Any]]]:
    """Each panel's options (names, help): the arguments, then the panels in the order of
    their first option."""
    panels: dict[str, list[tuple[str, Any]]] = {"Arguments": []}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        kind = "Arguments" if param.param_type_name == "argument" else "Options"
        panel = getattr(param, "rich_help_panel", None) or kind
        if kind == "Arguments":
            names = (param.metavar or param.name or "").upper()
            pair = (names, _help(param))
        else:
            pair = (_names(param), _help(param))
        panels.setdefault(panel, []).append(pair)
    return {name: rows for name, rows in panels.items() if rows}


def _commands(group: Any, ctx: Any) -> list[tuple[str, Any]]:
    from rich.text import Text

    rows = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        first = _paragraphs(command.help or "").split("\n\n")[0]
        rows.append((name, Text.from_markup(first)))
    return rows


def print_help(command: Any, ctx: Any) -> None:
    """Print the help of a click command or group (typer's) on stdout."""
    from rich.console import Console
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.text import Text

    console = Console(highlight=False)
    console.print(Padding(Text(command.get_usage(ctx), style="bold"), (1, 1, 0, 1)))
    if command.help:
        console.print(Padding(Text.from_markup(_paragraphs(command.help)), (1, 1, 0, 1)))
    console.print()
    for name, rows in _panels(command, ctx).items():
        console.print(Panel(_rows(rows), title=name, title_align="left", border_style="dim"))
    if hasattr(command, "list_commands"):
        console.print(
            Panel(
                _rows(_commands(command, ctx)),
                title="Commands",
                title_align="left",
                border_style="dim",
            )
        )
