"""`surrogate.cli.main`: usage errors are one line on stderr and exit 2, whichever click parses."""

from __future__ import annotations

import re

import pytest

from surrogate.cli import main

PREDICT = ["predict", "--model", "8b", "--nodes", "4", "--dp", "8"]


@pytest.mark.parametrize(
    "argv,match",
    [
        (
            [*PREDICT, "--tp", "2.5"],
            r"error: Invalid value for '--tp': .*integer.*, got '2\.5' "
            r"\(see 'surrogate predict --help'\)",
        ),
        ([*PREDICT, "--tp=abc"], r"error: Invalid value for '--tp': .*, got 'abc'"),
        ([*PREDICT, "--foo", "3"], r"error: No such option: --foo"),
        (["nosuch"], r"error: No such command 'nosuch'\. \(see 'surrogate --help'\)"),
        (["data", "nosuch"], r"error: No such command 'nosuch'\. \(see 'surrogate data --help'\)"),
        ([*PREDICT, "--tp"], r"error: Option '--tp' requires an argument"),
        (
            [*PREDICT, "--sequence-parallel=yes"],
            r"error: Option '--sequence-parallel' does not "
            r"take a value",
        ),
        (["search", "--model", "8b", "--trials", "many"], r"error: Invalid value for '--trials'"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, match):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert re.match(match, captured.err), captured.err
    assert captured.out == ""


def test_debug_shows_the_usage_error():
    with pytest.raises(Exception, match=r"Input should be a valid integer"):
        main([*PREDICT, "--tp", "abc", "--debug"])


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert main(["predict", "--help"]) == 0
    assert "--tp" in capsys.readouterr().out


def test_no_command_shows_the_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "predict" in capsys.readouterr().out


def _options_without_help(command, path=()):
    """``command option`` for each option (of every subcommand) that shows no help text."""
    if hasattr(command, "commands"):
        return [
            found
            for name, sub in command.commands.items()
            for found in _options_without_help(sub, (*path, name))
        ]
    return [
        f"{' '.join(path)} {param.opts[0]}"
        for param in command.params
        if getattr(param, "param_type_name", "") == "option"
        and param.name != "help"
        and not getattr(param, "help", None)
    ]


def test_every_option_of_every_command_says_what_it_is():
    import typer.main

    from surrogate.cli import app
    from surrogate.cli.app import ensure_plugins

    ensure_plugins([])  # the plugin commands too (train, evaluate, microbench)
    command = typer.main.get_command(app)
    assert {"predict", "search", "train", "microbench"} <= set(command.commands)
    assert _options_without_help(command) == []


def test_a_library_warning_is_one_line(capsys, monkeypatch):
    """A warning the library raises reaches the user as one ``warning:`` line on stderr."""
    from surrogate.prediction import predict as prediction

    monkeypatch.setattr(prediction, "_bundled_model", lambda: None)
    assert main([*PREDICT, "--tp", "4", "--mbs", "1", "--grad-accum", "8"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "no learned model" in line]
    assert lines == [
        "warning: no learned model is bundled; predictions are the analytic model's alone "
        "(train one with `surrogate train`)"
    ], err
    assert "UserWarning" not in err
