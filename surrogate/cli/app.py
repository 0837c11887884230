"""The typer application every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="surrogate",
    help="Predict memory, OOM risk, step time and MFU of LLM training layouts before you run them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Public measurement data: fetch it, summarise it.", no_args_is_help=True)
app.add_typer(data_app, name="data")
