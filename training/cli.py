"""`surrogate train` and `surrogate evaluate`: the ``training`` program's commands.

The library never imports this program: pyproject.toml declares :func:`register` under the
``surrogate.commands`` entry-point group, and ``surrogate.cli`` calls it when a command it
does not have itself is asked for (or for the help that lists every command).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from training.tune import MAX_ESTIMATORS

if TYPE_CHECKING:
    from training.evaluate import ProtocolResult


def _print_results(results: dict[str, ProtocolResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    from training.evaluate import PROTOCOLS, format_metric

    console = Console()
    for name, r in results.items():
        physics = ("physics refit per split" if r.refit_physics
                   else "shipped physics, fitted on every run")
        table = Table(title=f"{name}: {PROTOCOLS[name]} ({r.n_splits} splits, held-out runs; "
                            f"{physics})")
        table.add_column("metric")
        table.add_column("learned", justify="right")
        table.add_column("analytic", justify="right")
        for k, v in r.metrics.items():
            table.add_row(k, format_metric(k, v), format_metric(k, r.analytic_metrics[k]))
        console.print(table)


def _json_results(results: dict[str, ProtocolResult]) -> dict[str, Any]:
    def clean(d: dict[str, float]) -> dict[str, float | None]:
        return {k: (None if v != v else v) for k, v in d.items()}

    return {p: {"learned": clean(r.metrics), "analytic": clean(r.analytic_metrics),
                "refit_physics": r.refit_physics}
            for p, r in results.items()}


def train_cmd(
    sweeps: Annotated[list[Path] | None, typer.Option(
        "--sweeps",
        help="Sweep table(s) to train on besides the Playbook data (repeatable).")] = None,
    no_playbook: Annotated[bool, typer.Option(
        "--no-playbook", help="Leave the shared Playbook sweep out.")] = False,
    data_dir: Annotated[Path | None, typer.Option(
        help="Public data directory (default: SURROGATE_DATA_DIR, ../shared/data, the "
             "cache).")] = None,
    out: Annotated[Path, typer.Option(
        "--out", help="Directory to save the model in.")] = Path("mlruns/model"),
    n_trials: Annotated[int, typer.Option(
        help="optuna trials per study (0: library defaults, no tuning).")] = 30,
    seed: Annotated[int, typer.Option(help="Seed of the sampler, the folds and LightGBM.")] = 0,
    storage: Annotated[str, typer.Option(
        help="optuna storage URL; a rerun resumes its studies.")] = "sqlite:///mlruns/optuna.db",
    protocol: Annotated[list[str] | None, typer.Option(
        "--protocol", help="Evaluation protocol (repeatable): cv, cv_cells, lomo, nodes.")] = None,
    max_estimators: Annotated[int, typer.Option(
        help="Upper bound of n_estimators (trees per booster) in the search.")] = MAX_ESTIMATORS,
    timeout: Annotated[float | None, typer.Option(
        help="Stop each study after this many seconds.")] = None,
    no_track: Annotated[bool, typer.Option(
        "--no-track", help="Do not record the training in MLflow.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace what --out already holds.")] = False,
    settings_from: Annotated[Path | None, typer.Option(
        "--settings-from",
        help="Take the LightGBM settings from this saved model instead of tuning (with "
             "--n-trials 0), e.g. to retrain the bundled model's settings on new data or "
             "physics.")] = None,
) -> None:
    """Tune, evaluate, fit and save the learned surrogate; record it in MLflow
    ($MLFLOW_TRACKING_URI, default sqlite:///mlruns/mlflow.db)."""
    from surrogate.errors import ConfigError
    from surrogate.extras import require
    from surrogate.io.outputs import check_output_dir

    # the inputs first, within a second (nothing heavy is imported yet), then the extras,
    # the stores and the data: each before minutes of work, not after
    check_output_dir(out, flag="--out", force=force)
    from surrogate.io.table_files import check_table_file

    for path in sweeps or []:
        check_table_file(path, flag="--sweeps")
    if not no_track:
        from surrogate.io.tracking import check_store

        check_store()
    for module in ("optuna", "mlflow"):
        require(module, extra="train", purpose="surrogate train")
    if storage:
        from surrogate.io.stores import check_storage

        check_storage(storage)
    from training.evaluate import DEFAULT_PROTOCOLS
    from training.train import train

    params = None
    if settings_from is not None:
        if n_trials > 0:
            raise ConfigError(f"--settings-from replaces tuning: give --n-trials 0, got "
                              f"{n_trials}")
        from surrogate.learned.model import SurrogateModel

        params = SurrogateModel.load(settings_from).lightgbm_params
    result = train(
        list(sweeps or []), out, n_trials, seed, playbook=not no_playbook, data_dir=data_dir,
        storage=storage, protocols=tuple(protocol or DEFAULT_PROTOCOLS),
        max_estimators=max_estimators, timeout_s=timeout, track=not no_track,
        progress=not as_json, params=params,
    )
    tracked = result.tracked
    if as_json:
        typer.echo(json.dumps({
            "out_dir": str(result.out_dir),
            "params": result.params,
            "tuning": {t: {"study_name": r.study_name, "best_value": r.best_value,
                           "n_complete": r.n_complete, "n_pruned": r.n_pruned}
                       for t, r in result.tuning.items()},
            "evaluation": _json_results(result.evaluation),
            "mlflow": None if tracked is None else {
                "tracking_uri": tracked.tracking_uri, "experiment_id": tracked.experiment_id,
                "run_id": tracked.run_id, "run_name": tracked.run_name,
                "baseline_run_id": tracked.baseline_run_id,
                "model": tracked.model_name, "version": tracked.model_version},
            "mlflow_error": getattr(result, "tracking_error", None),
            "seconds": result.seconds,
            "own_physics": sorted(result.model.physics_sets_),
            "correction_share": dict(sorted(result.model.correction_weight_by_framework_.items())),
        }, indent=2))
        _tracking_failed(result)
        return
    _print_results(result.evaluation)
    for t, r in result.tuning.items():
        typer.echo(f"tuned {t}: best grouped-CV score {r.best_value:.4f} over {r.n_complete} "
                   f"complete and {r.n_pruned} pruned trials (study {r.study_name})")
    for version in sorted(result.model.physics_sets_):
        typer.echo(f"{version}: no shipped analytic parameters; fitted on its runs, and the "
                   "model predicts under them")
    from surrogate.cli.display import GAVE_WAY

    for version, share in sorted(result.model.correction_weight_by_framework_.items()):
        if share < 1:
            typer.echo(f"{version}: on its held-out runs {GAVE_WAY}; it keeps {share:.0%} of "
                       "itself there")
    typer.echo(f"saved the model to {result.out_dir} in {result.seconds:.0f} s")
    if tracked is not None:
        from surrogate.io.tracking import run_url

        typer.echo(f"MLflow: {tracked.run_name!r}, "
                   f"{run_url(tracked.tracking_uri, tracked.experiment_id, tracked.run_id)}; "
                   f"registered as {tracked.model_name} version {tracked.model_version}")
    _tracking_failed(result)


def _tracking_failed(result: Any) -> None:
    """After the results are printed: a DataError if recording in MLflow failed, saying where
    the model and its evaluation are kept."""
    error = getattr(result, "tracking_error", None)
    if error is None:
        return
    from surrogate.errors import DataError
    from surrogate.io.tracking import tracking_uri
    from training.train import EVALUATION_FILE

    raise DataError(f"recording the training in MLflow ({tracking_uri()}) failed "
                    f"({error}); the model is saved in {result.out_dir} and its "
                    f"evaluation in {result.out_dir / EVALUATION_FILE}")


def evaluate_cmd(
    sweeps: Annotated[list[Path] | None, typer.Option(
        "--sweeps", help="Sweep table(s) besides the Playbook data (repeatable).")] = None,
    no_playbook: Annotated[bool, typer.Option(
        "--no-playbook", help="Leave the shared Playbook sweep out.")] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Public data directory.")] = None,
    model_dir: Annotated[Path | None, typer.Option(
        "--model-dir",
        help="Take the LightGBM settings from this saved model (default: library defaults).")]
        = None,
    protocol: Annotated[list[str] | None, typer.Option(
        "--protocol", help="Protocol (repeatable): cv, cv_cells, lomo, nodes.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the folds and LightGBM.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    shipped_physics: Annotated[bool, typer.Option(
        "--shipped-physics",
        help="Keep the shipped analytic parameters (fitted on every Playbook run, held-out "
             "ones included) instead of refitting them on each training part.")] = False,
) -> None:
    """Refit the surrogate under each protocol and print held-out accuracy (learned vs the
    analytic model alone)."""
    from surrogate.learned.model import SurrogateModel
    from training.evaluate import DEFAULT_PROTOCOLS, evaluate
    from training.train import load_runs

    runs = load_runs(list(sweeps or []), playbook=not no_playbook, data_dir=data_dir)
    params: dict[str, dict[str, Any] | None] | None = None
    if model_dir is not None:
        params = SurrogateModel.load(model_dir).lightgbm_params
    from surrogate.progress import bars

    with bars(not as_json) as report:
        results = evaluate(runs, tuple(protocol or DEFAULT_PROTOCOLS), params=params, seed=seed,
                           progress=report, refit_physics=not shipped_physics)
    if as_json:
        typer.echo(json.dumps(_json_results(results), indent=2))
    else:
        _print_results(results)


def register(app: typer.Typer) -> None:
    """Add ``train`` and ``evaluate`` to ``app`` (the ``surrogate.commands`` entry point)."""
    app.command("train")(train_cmd)
    app.command("evaluate")(evaluate_cmd)
