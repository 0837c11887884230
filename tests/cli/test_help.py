"""Every command's help reads at 80 columns: no line longer, no option's name cut, no type
label on a switch, and the one default framework shown; the shared option groups name
configuration fields."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest
import typer.main
from typer.testing import CliRunner

from surrogate.cli import app
from surrogate.cli.app import ensure_plugins
from surrogate.cli.options import DEFAULT_FRAMEWORK, LayoutOptions, ModelOptions
from surrogate.config.training import CLUSTER_FIELDS, LAYOUT_FIELDS, MODEL_FIELDS

ensure_plugins([])  # the plugins' commands too


def _commands() -> dict[str, object]:
    group = typer.main.get_command(app)
    found: dict[str, object] = {}
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        if hasattr(command, "commands"):
            found |= {f"{name} {sub}": c for sub, c in command.commands.items()}
        found[name] = command
    return found


COMMANDS = sorted(_commands())


def _help(args: list[str], columns: int = 80) -> str:
    done = CliRunner().invoke(
        app, [*args, "--help"], env={"COLUMNS": str(columns)}, prog_name="surrogate"
    )
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_help_fits_80_columns_and_cuts_no_name(name: str) -> None:
    text = _help(name.split())
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "…" not in text
    command = _commands()[name] if name else typer.main.get_command(app)
    for param in command.params:  # type: ignore[attr-defined]
        if getattr(param, "hidden", False):  # a former name kept working (heatmap --models)
            continue
        for flag in [*param.opts, *param.secondary_opts]:
            if flag.startswith("-"):
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), (name, flag)
    assert not re.search(r"<(bool|int|str|path|float)>", text), name
    assert re.search(r"--help +Show this message", text), name


def test_switches_carry_no_metavar_and_values_do() -> None:
    text = _help(["predict"])
    assert re.search(r"--json +Print JSON", text)
    assert re.search(r"--dp N +Data-parallel", text)
    assert "--tie-embeddings / --no-tie-embeddings" in text


@pytest.mark.parametrize("name", ["predict", "search", "propose"])
def test_the_one_default_framework_is_shown(name: str) -> None:
    text = " ".join(re.sub("[│╭╮╰╯─]", " ", _help([name])).split())  # the panels' borders out
    assert f"[default: {DEFAULT_FRAMEWORK}]" in text


def test_narrow_terminals_cut_nothing_either() -> None:
    text = _help(["predict"], columns=60)
    assert all(len(line) <= 60 for line in text.splitlines())
    assert "--sequence-parallel" in text and "--no-sequence-parallel" in text


def test_option_groups_name_configuration_fields() -> None:
    assert {f.name for f in fields(ModelOptions)} - {"model", "hf_config"} <= set(MODEL_FIELDS)
    assert {f.name for f in fields(LayoutOptions)} - {"global_batch_seqs"} <= set(
        CLUSTER_FIELDS + LAYOUT_FIELDS
    )
