"""`surrogate train` and `surrogate evaluate`: the ``training`` program's commands.

The library never imports this program: pyproject.toml declares :func:`register` under the
``surrogate.commands`` entry-point group, and ``surrogate.cli`` calls it when a command it
does not have itself is asked for (or for the help that lists every command).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from surrogate.cli.display import GAVE_WAY
from surrogate.cli.options import with_options
from surrogate.errors import ConfigError, DataError
from surrogate.extras import require
from surrogate.io.outputs import check_output_dir
from surrogate.io.stores import check_storage
from surrogate.io.table_files import check_table_file
from surrogate.io.tracking import check_store, run_url, tracking_uri
from surrogate.learned.model import SurrogateModel
from surrogate.progress import bars
from training.evaluate import DEFAULT_PROTOCOLS, PROTOCOLS, evaluate, format_metric
from training.train import EVALUATION_FILE, load_runs
from training.tune import MAX_ESTIMATORS

if TYPE_CHECKING:
    import pandas as pd

    from training.evaluate import ProtocolResult


def _print_results(results: dict[str, ProtocolResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for name, r in results.items():
        physics = (
            "physics refit per split" if r.refit_physics else "shipped physics, fitted on every run"
        )
        network = "" if r.network == "measured" else "; network: the profile's curve alone"
        table = Table(
            title=f"{name}: {PROTOCOLS[r.protocol]} ({r.n_splits} splits, held-out "
            f"runs; {physics}{network})"
        )
        table.add_column("metric")
        table.add_column("learned", justify="right")
        table.add_column("analytic", justify="right")
        for k, v in r.metrics.items():
            table.add_row(k, format_metric(k, v), format_metric(k, r.analytic_metrics[k]))
        console.print(table)


def _json_results(results: dict[str, ProtocolResult]) -> dict[str, Any]:
    def clean(d: dict[str, float]) -> dict[str, float | None]:
        return {k: (None if v != v else v) for k, v in d.items()}

    return {
        p: {
            "learned": clean(r.metrics),
            "analytic": clean(r.analytic_metrics),
            "refit_physics": r.refit_physics,
        }
        for p, r in results.items()
    }


@dataclass(frozen=True)
class RunsOptions:
    """The runs to train or evaluate on: the Playbook sweep and sweep tables besides."""

    sweeps: Annotated[
        list[Path] | None,
        typer.Option(
            "--sweeps", help="Sweep table(s) to train on besides the Playbook data (repeatable)."
        ),
    ] = None
    no_playbook: Annotated[
        bool, typer.Option("--no-playbook", help="Leave the shared Playbook sweep out.")
    ] = False
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Public data directory (default: SURROGATE_DATA_DIR, ../shared/data, the cache)."
        ),
    ] = None

    def load(self) -> pd.DataFrame:
        """The runs (``training.train.load_runs``)."""
        return load_runs(
            list(self.sweeps or []), playbook=not self.no_playbook, data_dir=self.data_dir
        )


@dataclass(frozen=True)
class TuningOptions:
    """How ``train`` searches the LightGBM settings, or where it takes them instead."""

    n_trials: Annotated[
        int, typer.Option(help="optuna trials per study (0: library defaults, no tuning).")
    ] = 30
    storage: Annotated[
        str, typer.Option(help="optuna storage URL; a rerun resumes its studies.")
    ] = "sqlite:///mlruns/optuna.db"
    max_estimators: Annotated[
        int, typer.Option(help="Upper bound of n_estimators (trees per booster) in the search.")
    ] = MAX_ESTIMATORS
    timeout: Annotated[
        float | None, typer.Option(help="Stop each study after this many seconds.")
    ] = None
    settings_from: Annotated[
        Path | None,
        typer.Option(
            "--settings-from",
            help="Take the LightGBM settings from this saved model instead of tuning (with "
            "--n-trials 0), e.g. to retrain the bundled model's settings on new data or "
            "physics.",
        ),
    ] = None

    def given_params(self) -> dict[str, dict[str, Any] | None] | None:
        """The LightGBM settings of ``--settings-from`` (None: tune them)."""
        if self.settings_from is None:
            return None
        if self.n_trials > 0:
            raise ConfigError(
                f"--settings-from replaces tuning: give --n-trials 0, got {self.n_trials}"
            )

        return SurrogateModel.load(self.settings_from).lightgbm_params


ProtocolOpt = Annotated[
    list[str] | None,
    typer.Option("--protocol", help="Evaluation protocol (repeatable): cv, cv_cells, lomo, nodes."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


@with_options
def train_cmd(
    runs: RunsOptions,
    tuning: TuningOptions,
    out: Annotated[Path, typer.Option("--out", help="Directory to save the model in.")] = Path(
        "mlruns/model"
    ),
    seed: Annotated[int, typer.Option(help="Seed of the sampler, the folds and LightGBM.")] = 0,
    protocol: ProtocolOpt = None,
    no_track: Annotated[
        bool, typer.Option("--no-track", help="Do not record the training in MLflow.")
    ] = False,
    as_json: JsonOpt = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace what --out already holds.")
    ] = False,
    keep_trees: Annotated[
        Path | None,
        typer.Option(
            "--keep-trees",
            help="Keep this saved model's trees, widths and settings (with --n-trials 0) and "
            "refit only its metrics and its intervals' recalibration on the protocols' "
            "held-out runs: its point predictions unchanged.",
        ),
    ] = None,
) -> None:
    """Tune, evaluate, fit and save the learned surrogate; record it in MLflow
    ($MLFLOW_TRACKING_URI, default sqlite:///mlruns/mlflow.db)."""
    _check_before_work(runs, tuning, out=out, force=force, track=not no_track)
    from training.train import train

    params = tuning.given_params()
    keep = None
    if keep_trees is not None:
        if tuning.n_trials > 0:
            raise ConfigError(
                f"--keep-trees keeps the model's settings: give --n-trials 0, got {tuning.n_trials}"
            )
        keep = SurrogateModel.load(keep_trees)
    result = train(
        list(runs.sweeps or []),
        out,
        tuning.n_trials,
        seed,
        playbook=not runs.no_playbook,
        data_dir=runs.data_dir,
        storage=tuning.storage,
        protocols=tuple(protocol or DEFAULT_PROTOCOLS),
        max_estimators=tuning.max_estimators,
        timeout_s=tuning.timeout,
        track=not no_track,
        progress=not as_json,
        params=params,
        keep=keep,
    )
    if as_json:
        typer.echo(json.dumps(_train_json(result), indent=2))
    else:
        _print_training(result)
    _tracking_failed(result)


def _check_before_work(
    runs: RunsOptions, tuning: TuningOptions, *, out: Path, force: bool, track: bool
) -> None:
    """The inputs first, within a second (nothing heavy is imported yet), then the extras,
    the stores and the data: each before minutes of work, not after."""
    check_output_dir(out, flag="--out", force=force)
    for path in runs.sweeps or []:
        check_table_file(path, flag="--sweeps")
    if track:
        check_store()
    for module in ("optuna", "mlflow"):
        require(module, extra="train", purpose="surrogate train")
    if tuning.storage:
        check_storage(tuning.storage)


def _train_json(result: Any) -> dict[str, Any]:
    """``train --json``: the saved model, its settings, tuning, evaluation and MLflow run."""
    tracked = result.tracked
    return {
        "out_dir": str(result.out_dir),
        "params": result.params,
        "tuning": {
            t: {
                "study_name": r.study_name,
                "best_value": r.best_value,
                "n_complete": r.n_complete,
                "n_pruned": r.n_pruned,
            }
            for t, r in result.tuning.items()
        },
        "evaluation": _json_results(result.evaluation),
        "evaluation_profile_network": _json_results(getattr(result, "as_predicted", {})),
        "mlflow": None
        if tracked is None
        else {
            "tracking_uri": tracked.tracking_uri,
            "experiment_id": tracked.experiment_id,
            "run_id": tracked.run_id,
            "run_name": tracked.run_name,
            "baseline_run_id": tracked.baseline_run_id,
            "model": tracked.model_name,
            "version": tracked.model_version,
        },
        "mlflow_error": getattr(result, "tracking_error", None),
        "seconds": result.seconds,
        "own_physics": sorted(result.model.physics_sets_),
        "correction_share": dict(sorted(result.model.correction_weight_by_framework_.items())),
    }


def _print_training(result: Any) -> None:
    """``train`` without ``--json``: the evaluation's tables, then what tuning found, what the
    model fitted of its own, where it is saved and where MLflow recorded it."""
    _print_results(result.evaluation)
    _print_results(
        {f"{p} (profile network)": r for p, r in getattr(result, "as_predicted", {}).items()}
    )
    for t, r in result.tuning.items():
        typer.echo(
            f"tuned {t}: best grouped-CV score {r.best_value:.4f} over {r.n_complete} "
            f"complete and {r.n_pruned} pruned trials (study {r.study_name})"
        )
    for version in sorted(result.model.physics_sets_):
        typer.echo(
            f"{version}: no shipped analytic parameters; fitted on its runs, and the "
            "model predicts under them"
        )
    for version, share in sorted(result.model.correction_weight_by_framework_.items()):
        if share < 1:
            typer.echo(
                f"{version}: on its held-out runs {GAVE_WAY}; it keeps {share:.0%} of itself there"
            )
    typer.echo(f"saved the model to {result.out_dir} in {result.seconds:.0f} s")
    tracked = result.tracked
    if tracked is not None:
        typer.echo(
            f"MLflow: {tracked.run_name!r}, "
            f"{run_url(tracked.tracking_uri, tracked.experiment_id, tracked.run_id)}; "
            f"registered as {tracked.model_name} version {tracked.model_version}"
        )


def _tracking_failed(result: Any) -> None:
    """After the results are printed: a DataError if recording in MLflow failed, saying where
    the model and its evaluation are kept."""
    error = getattr(result, "tracking_error", None)
    if error is None:
        return

    raise DataError(
        f"recording the training in MLflow ({tracking_uri()}) failed "
        f"({error}); the model is saved in {result.out_dir} and its "
        f"evaluation in {result.out_dir / EVALUATION_FILE}"
    )


@with_options
def evaluate_cmd(
    runs: RunsOptions,
    model_dir: Annotated[
        Path | None,
        typer.Option(
            "--model-dir",
            help="Take the LightGBM settings from this saved model (default: library defaults).",
        ),
    ] = None,
    protocol: ProtocolOpt = None,
    seed: Annotated[int, typer.Option(help="Seed of the folds and LightGBM.")] = 0,
    as_json: JsonOpt = False,
    shipped_physics: Annotated[
        bool,
        typer.Option(
            "--shipped-physics",
            help="Keep the shipped analytic parameters (fitted on every Playbook run, held-out "
            "ones included) instead of refitting them on each training part.",
        ),
    ] = False,
) -> None:
    """Refit the surrogate under each protocol and print held-out accuracy (learned vs the
    analytic model alone)."""
    table = runs.load()
    params: dict[str, dict[str, Any] | None] | None = None
    if model_dir is not None:
        params = SurrogateModel.load(model_dir).lightgbm_params
    with bars(not as_json) as report:
        results = evaluate(
            table,
            tuple(protocol or DEFAULT_PROTOCOLS),
            params=params,
            seed=seed,
            progress=report,
            refit_physics=not shipped_physics,
        )
    if as_json:
        typer.echo(json.dumps(_json_results(results), indent=2))
    else:
        _print_results(results)


def register(app: typer.Typer) -> None:
    """Add ``train`` and ``evaluate`` to ``app`` (the ``surrogate.commands`` entry point)."""
    app.command("train")(train_cmd)
    app.command("evaluate")(evaluate_cmd)
