"""Recording a training in MLflow: parameters, data, tuning, metrics, model files, plots.

The tracking URI is ``$MLFLOW_TRACKING_URI`` when set (a server, e.g. ``http://host:5000``),
else ``sqlite:///mlruns/mlflow.db`` with artifacts under ``mlruns/artifacts`` (MLflow's file
store is deprecated, so the default is a database). The model files are logged as run
artifacts and registered as a new version of the registered model ``surrogate``. mlflow is
imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"
DEFAULT_ARTIFACT_DIR = Path("mlruns/artifacts")
EXPERIMENT = "surrogate"
REGISTERED_MODEL = "surrogate"


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` or the local SQLite default."""
    return os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


@dataclass(frozen=True, kw_only=True)
class TrackedRun:
    """Where a training was recorded."""

    tracking_uri: str
    experiment_id: str
    run_id: str
    model_name: str
    model_version: str


def _experiment_id(uri: str, name: str) -> str:
    import mlflow

    exp = mlflow.get_experiment_by_name(name)
    if exp is not None:
        return str(exp.experiment_id)
    location = None
    if uri == DEFAULT_TRACKING_URI:  # local default: keep artifacts beside the database
        DEFAULT_ARTIFACT_DIR.mkdir(parents=True, exist_ok=True)
        location = DEFAULT_ARTIFACT_DIR.resolve().as_uri()
    return str(mlflow.create_experiment(name, artifact_location=location))


def _finite(metrics: Mapping[str, float]) -> dict[str, float]:
    """MLflow's REST API cannot carry NaN: undefined metrics are left out."""
    return {k: float(v) for k, v in metrics.items() if v == v and abs(v) != float("inf")}


def log_training(
    *,
    params: Mapping[str, Any],
    data_summary: Mapping[str, Any],
    data_hash: str,
    tuning: Mapping[str, Any],
    metrics: Mapping[str, Mapping[str, float]],
    model_dir: str | Path,
    figures: Mapping[str, Figure],
    experiment: str = EXPERIMENT,
    model_name: str = REGISTERED_MODEL,
    run_name: str | None = None,
) -> TrackedRun:
    """Log one training as an MLflow run and register its model files as a new version.

    ``params`` flat training settings; ``data_summary`` counts (logged as params and as
    ``data_summary.json``); ``tuning`` per target a dict with the study name, best value and
    best trials (``optuna/<target>.json``); ``metrics`` per protocol and metric name (logged as
    ``<protocol>.<metric>``); ``figures`` saved under ``plots/<name>.png``.
    """
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    exp_id = _experiment_id(uri, experiment)
    with mlflow.start_run(experiment_id=exp_id, run_name=run_name) as run:
        mlflow.set_tag("data_hash", data_hash)
        mlflow.log_params({k: v for k, v in params.items()})
        mlflow.log_params({f"data.{k}": v for k, v in data_summary.items()
                           if not isinstance(v, dict | list)})
        mlflow.log_dict(dict(data_summary) | {"data_hash": data_hash}, "data_summary.json")
        for target, study in tuning.items():
            mlflow.log_dict(dict(study), f"optuna/{target}.json")
            mlflow.log_param(f"optuna.{target}.study", study.get("study_name", ""))
            mlflow.log_metrics(_finite({
                f"optuna.{target}.best_value": study.get("best_value", float("nan")),
                f"optuna.{target}.n_complete": study.get("n_complete", float("nan")),
                f"optuna.{target}.n_pruned": study.get("n_pruned", float("nan")),
            }))
        for protocol, values in metrics.items():
            mlflow.log_metrics(_finite({f"{protocol}.{k}": v for k, v in values.items()}))
        mlflow.log_artifacts(str(model_dir), artifact_path="model")
        for name, fig in figures.items():
            mlflow.log_figure(fig, f"plots/{name}.png")
        source = mlflow.get_artifact_uri("model")
        run_id = run.info.run_id
    client = MlflowClient(tracking_uri=uri)
    try:
        client.create_registered_model(
            model_name, description="surrogate: LightGBM text models + model.json sidecar")
    except MlflowException as e:
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = client.create_model_version(model_name, source=source, run_id=run_id)
    return TrackedRun(tracking_uri=uri, experiment_id=exp_id, run_id=run_id,
                      model_name=model_name, model_version=str(version.version))

