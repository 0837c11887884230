"""`surrogate score-round`: a proposed round's runs against the model that proposed them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from surrogate.cli.app import app
from surrogate.cli.options import JsonOpt
from surrogate.errors import DataError


@app.command("score-round")
def score_round_cmd(
    round_dir: Annotated[
        Path, typer.Option("--round", help="A round directory written by propose.", metavar="DIR")
    ],
    runs: Annotated[
        Path,
        typer.Option(
            help="Sweep table holding the round's ingested runs (and earlier ones).",
            metavar="TABLE",
        ),
    ],
    model_dir: Annotated[
        Path | None,
        typer.Option(help="The proposing model's directory, if it moved.", metavar="DIR"),
    ] = None,
    mlflow: Annotated[
        bool,
        typer.Option(
            "--mlflow/--no-mlflow",
            help="Log to MLflow ($MLFLOW_TRACKING_URI, else sqlite:///mlruns/mlflow.db).",
        ),
    ] = True,
    campaign: Annotated[
        str | None,
        typer.Option(
            help="MLflow experiment 'active learning: CAMPAIGN' (default: the name of the "
            "directory holding the rounds).",
            metavar="NAME",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Score a round's runs against the model that proposed them (before retraining) and log it
    (scoring a round again updates its MLflow run)."""
    from surrogate.io.table_files import check_table_file
    from surrogate.io.tableio import read_table
    from surrogate.loop.active import load_round_model, score_round
    from surrogate.loop.round_files import read_round

    record = read_round(round_dir)
    if model_dir is not None:
        record["model"] = {**record["model"], "path": str(model_dir)}
    check_table_file(runs, flag="--runs")
    if mlflow:  # before the scoring, within seconds: an unusable store costs a line
        from surrogate.extras import require
        from surrogate.io.tracking import check_store

        require("mlflow", purpose="score-round's MLflow record (--no-mlflow scores without it)")
        check_store()
    proposer = load_round_model(record)
    table = read_table(runs)
    metrics, matched = score_round(record, table, model=proposer)
    analytic = score_round(record, table, model=None) if proposer is not None else None
    analytic_metrics = None if analytic is None else analytic[0]
    if not as_json:  # the figures first: a store failing below loses nothing
        _print_round(record, metrics, analytic_metrics)
    run_id, failure = None, None
    if mlflow:
        run_id, failure = _log_round(
            record, metrics, round_dir, campaign, matched, analytic, progress=not as_json
        )
    scores = {
        "round": record["round"],
        "metrics": metrics,
        "analytic_metrics": analytic_metrics,
        "mlflow_run_id": run_id,
    }
    if as_json:
        typer.echo(json.dumps(scores, indent=2))
    elif run_id:
        _print_mlflow_line(run_id)
    if failure is not None:
        _keep_scores(failure, round_dir, scores, matched)


def _log_round(
    record: dict[str, Any],
    metrics: dict[str, float],
    round_dir: Path,
    campaign: str | None,
    matched: Any,
    analytic: Any,
    *,
    progress: bool,
) -> tuple[str | None, Exception | None]:
    """The MLflow run of the scored round, or the store's failure (the work is kept)."""
    from surrogate.loop.round_log import campaign_of, campaign_records, log_round
    from surrogate.progress import bars

    try:
        with bars(progress) as report:
            report("logging to MLflow (metrics, plots, accuracy over rounds)", 0, 1)
            earlier = [
                r for r in campaign_records(round_dir) if int(r["round"]) < int(record["round"])
            ]
            run_id = log_round(
                record,
                metrics,
                campaign=campaign or campaign_of(round_dir),
                matched=matched,
                analytic=analytic,
                earlier=earlier,
            )
    except Exception as e:  # any failure of the store, after the work: keep the work
        return None, e
    return run_id, None


def _keep_scores(failure: Exception, round_dir: Path, scores: dict[str, Any], matched: Any) -> None:
    """Save the round's figures beside it, and raise the store's failure in a line."""
    from surrogate.io.tableio import write_table_atomic
    from surrogate.io.tracking import store_failure, tracking_uri

    saved = round_dir / SCORES_FILE
    _write_json_atomic(saved, scores)
    if matched is not None:
        write_table_atomic(matched, round_dir / MATCHED_FILE)
    raise DataError(
        f"logging the scored round to MLflow ({tracking_uri()}) failed "
        f"({store_failure(failure)}); its figures are saved in {saved} and its matched "
        f"runs in {round_dir / MATCHED_FILE}: score it again when the store works"
    )


SCORES_FILE = "scores.json"
"""Where score-round keeps a round's figures when the tracking store fails after scoring."""
MATCHED_FILE = "matched_runs.csv"
"""... and the proposals matched with their measured runs."""


def _write_json_atomic(path: Path, data: Any) -> None:
    from surrogate.io.atomic import atomic_write

    atomic_write(path, json.dumps(data, indent=2, default=str))


def _print_round(
    record: dict[str, Any], metrics: dict[str, float], analytic: dict[str, float] | None
) -> None:
    """The round's figures, the proposing model's beside the analytic model's."""
    from rich.markup import escape
    from rich.table import Table

    from surrogate.cli.display import console as make_console

    console = make_console()
    info = record.get("model", {})
    who = (
        "the analytic model"
        if info.get("kind") == "analytic"
        else f"the learned model at {info.get('path')} (data {str(info.get('data_hash'))[:8]})"
    )
    console.print(escape(f"round {record['round']}: proposed by {who}"), highlight=False)
    t = Table(title=f"Round {record['round']}, prospective (runs the model had not seen)")
    t.add_column("figure")
    t.add_column("proposing model", justify="right")
    if analytic is not None:
        t.add_column("analytic model", justify="right")
    for k, v in metrics.items():
        row = [k, _figure(k, v)]
        if analytic is not None:
            a = analytic.get(k, float("nan"))
            row.append(
                _figure(k, a) if k in ("mfu_mape", "status_accuracy", "interval_coverage") else ""
            )
        t.add_row(*row)
    console.print(t)


def _print_mlflow_line(run_id: str) -> None:
    """Where MLflow shows the round's run."""
    from rich.markup import escape

    from surrogate.cli.display import console as make_console
    from surrogate.io.tracking import client, run_url, tracking_uri

    try:
        exp = client().get_run(run_id).info.experiment_id
        where = run_url(tracking_uri(), exp, run_id)
    except Exception:  # logged; only the page's address is unknown
        where = f"run {run_id} in {tracking_uri()}"
    make_console().print(escape(f"MLflow: {where}"), highlight=False)


def _figure(name: str, value: float) -> str:
    if value != value:
        return "-"
    if name in ("proposed", "measured"):
        return f"{value:.0f}"
    return f"{value:.1%}"
