"""The typer application every command registers on, and the loading of plugin commands.

The library's own commands register when their modules are imported (``surrogate.cli``).
Programs that use the library add theirs through entry points, so the library never imports
them: a program declares ``register(app: typer.Typer) -> None`` under the
``surrogate.commands`` group of its distribution's metadata (pyproject.toml: ``training``
adds ``train`` and ``evaluate``, ``microbench`` adds ``microbench``). Loading a plugin costs
the import of its modules, so :func:`ensure_plugins` loads them only when the command asked
for is not the library's own, or for the help that lists every command: a cold
``surrogate predict`` imports no program.

A plugin that fails to load breaks nothing else: its entry point's name becomes a command that
fails with one line saying why (listed in the help as unavailable).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import typer
from typer.core import TyperCommand, TyperGroup

from surrogate.errors import SurrogateError


class HelpCommand(TyperCommand):
    """A command whose help reads at 80 columns (:mod:`surrogate.cli.help`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from surrogate.cli.help import print_help

        print_help(self, ctx)


class HelpGroup(TyperGroup):
    """A command group whose help reads at 80 columns (:mod:`surrogate.cli.help`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from surrogate.cli.help import print_help

        print_help(self, ctx)


class Typer(typer.Typer):
    """typer's application whose commands (plugins' too) and groups print
    :mod:`surrogate.cli.help`'s help."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=HelpGroup, **kwargs)

    def command(  # type: ignore[override]  # typer's keywords, passed on
        self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return super().command(name, cls=cls or HelpCommand, **kwargs)


app = Typer(
    name="surrogate",
    help="Predict memory, OOM risk, step time and MFU of LLM training layouts before you run them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = Typer(help="Public measurement data: fetch it, summarise it.", no_args_is_help=True)
app.add_typer(data_app, name="data")

PLUGIN_GROUP = "surrogate.commands"
"""Entry-point group of plugin commands; each entry point names a ``register(app)``."""


class PluginError(SurrogateError, ImportError):
    """A plugin command's code failed to load; the message says which and why."""


class _EntryPoint(Protocol):
    """What is used of an :class:`importlib.metadata.EntryPoint` (a test's stand-in too)."""

    @property
    def name(self) -> str: ...  # the command its failure is reported under
    @property
    def value(self) -> str: ...  # "module:register"
    def load(self) -> object: ...


_plugins_loaded = False
"""Whether :func:`ensure_plugins` has loaded the plugins into :data:`app` in this process."""


def plugin_entry_points() -> Sequence[_EntryPoint]:
    """The installed ``surrogate.commands`` entry points, by name."""
    from importlib.metadata import entry_points

    return sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name)


def command_names(target: typer.Typer) -> set[str]:
    """The names of the commands and command groups registered on ``target``."""
    from typer.main import get_command_name

    names = {
        c.name or get_command_name(c.callback.__name__)
        for c in target.registered_commands
        if c.callback is not None
    }
    names |= {
        g.name or g.typer_instance.info.name or ""
        for g in target.registered_groups
        if g.typer_instance is not None
    }
    return names - {""}


def ensure_plugins(args: list[str]) -> None:
    """Load the plugin commands into :data:`app`, once, unless ``args`` (a command line
    without the program name) asks for a command of the library's own."""
    global _plugins_loaded
    if _plugins_loaded or (args and args[0] in command_names(app)):
        return
    _plugins_loaded = True
    load_plugins(app, plugin_entry_points())


def load_plugins(target: typer.Typer, found: Sequence[_EntryPoint]) -> None:
    """Call each entry point's ``register(target)``; one that fails gets instead a command of
    its name that fails with the reason."""
    for ep in found:
        n_commands, n_groups = len(target.registered_commands), len(target.registered_groups)
        try:
            register: Callable[[typer.Typer], None] = ep.load()  # type: ignore[assignment]
            register(target)
        except Exception as e:  # any failure of a plugin's code: its command reports it
            del target.registered_commands[n_commands:]  # nothing half-registered stays
            del target.registered_groups[n_groups:]
            _unavailable(target, ep, e)


def _unavailable(target: typer.Typer, ep: _EntryPoint, error: Exception) -> None:
    """Register ``ep.name`` as a command that raises a one-line PluginError, whatever its
    arguments (``--help`` included), and whose help says why it is unavailable."""
    from rich.markup import escape

    from surrogate.extras import missing_extra_message

    extra = missing_extra_message(error) if isinstance(error, ImportError) else None
    why = " ".join((extra or f"{type(error).__name__}: {error}").split())
    message = f"'surrogate {ep.name}' is unavailable: its plugin {ep.value} failed to load ({why})"

    def unavailable() -> None:
        raise PluginError(message) from error

    target.command(
        ep.name,
        help=escape(f"(unavailable: {why})"),  # rich markup: "[extra]" stays text
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )(unavailable)
