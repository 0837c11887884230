"""Recording a training in MLflow: parameters, data, tuning, metrics, model files, plots.

Where and how (:mod:`surrogate.io.tracking`): ``$MLFLOW_TRACKING_URI`` when set, else
``sqlite:///mlruns/mlflow.db`` with artifacts under ``mlruns/artifacts``. Every training is one
run of the experiment ``surrogate-training``, named for what it is (``train 2026-11-22
playbook+my_runs``), with metrics ``<protocol>/<metric>`` (``cv/mfu_mape``,
``nodes/spearman``) and tuning figures ``optuna/<target>_best_value``. The analytic model's
figures on the same data are a run of their own (``analytic baseline playbook+my_runs``, one per
data hash, updated in place), so the charts compare the trainings with the baseline. The model
files are logged as run artifacts and registered as a new version of the registered model
``surrogate``, whose tags carry its lineage (data hash, data, the training run, the
active-learning rounds whose runs it was trained on). mlflow is imported inside the functions:
importing this module costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from surrogate.extras import require
from surrogate.ingest.playbook import SOURCE as PLAYBOOK
from surrogate.io import tracking
from surrogate.io.tracking import DEFAULT_TRACKING_URI, KIND_TAG, REGISTERED_MODEL, tracking_uri

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DEFAULT_TRACKING_URI",
    "EXPERIMENT",
    "REGISTERED_MODEL",
    "TrackedRun",
    "data_label",
    "log_training",
    "rounds_in",
    "tracking_uri",
]

EXPERIMENT = "surrogate-training"
_DESCRIPTION = (
    "One run per `surrogate train` (named `train DATE DATA`): held-out accuracy per protocol "
    "(`cv/`, `lomo/`, `nodes/`...), the optuna tuning (`optuna/`), plots and the model files. "
    "The `analytic baseline DATA` runs hold the analytic model's figures on the same data under "
    "the same names. Registered model: `surrogate` (lineage in its version tags)."
)
_ROUND_RUN = re.compile(r"^r(\d{2,})-\d{2,}-n\d+-")
"""Run names that ``surrogate propose`` writes: ``r<round>-<index>-n<nodes>-<layout>``."""


@dataclass(frozen=True, kw_only=True)
class TrackedRun:
    """Where a training was recorded."""

    tracking_uri: str
    experiment_id: str
    run_id: str
    run_name: str
    baseline_run_id: str | None
    model_name: str
    model_version: str


def data_label(sources: Iterable[str], sweep_paths: Iterable[str | Path] = ()) -> str:
    """What a model was trained on, for run names: ``playbook`` for the Playbook sweep, then
    the stem of each sweep table given (``playbook+my_runs``), or else each other source."""
    names = sorted({str(s) for s in sources})
    parts = ["playbook"] if PLAYBOOK in names else []
    stems = [Path(p).stem for p in sweep_paths]
    parts += stems or [s for s in names if s != PLAYBOOK]
    return "+".join(dict.fromkeys(parts)) or "no data"


def rounds_in(run_ids: Iterable[Any]) -> list[int]:
    """The active-learning rounds whose proposed runs are among ``run_ids``."""
    found = {int(m.group(1)) for r in run_ids if (m := _ROUND_RUN.match(str(r)))}
    return sorted(found)


def log_training(
    *,
    params: Mapping[str, Any],
    data_summary: Mapping[str, Any],
    data_hash: str,
    tuning: Mapping[str, Any],
    metrics: Mapping[str, Mapping[str, float]],
    model_dir: str | Path,
    figures: Mapping[str, Figure],
    baseline: Mapping[str, Mapping[str, float]] | None = None,
    label: str = "",
    lineage: Mapping[str, str] | None = None,
    experiment: str = EXPERIMENT,
    model_name: str = REGISTERED_MODEL,
    run_name: str | None = None,
) -> TrackedRun:
    """Log one training as an MLflow run and register its model files as a new version.

    ``params`` flat training settings; ``data_summary`` counts (logged as params and as
    ``data_summary.json``); ``tuning`` per target a dict with the study name, best value and
    best trials (``optuna/<target>.json``); ``metrics`` per protocol and metric name (logged as
    ``<protocol>/<metric>``); ``baseline`` the analytic model's, logged under the same names in
    the data's ``analytic baseline`` run; ``label`` names the data (:func:`data_label`);
    ``lineage`` more tags for the run and the model version; ``figures`` saved under
    ``plots/<name>.png``. The run is named ``run_name`` or ``train <date> <label>``.
    """
    require("mlflow", extra="train")  # absent: one line naming the extra that installs it
    import mlflow

    uri = tracking.connect()
    exp_id = tracking.experiment(experiment, description=_DESCRIPTION)
    label = label or "data " + data_hash[:8]
    name = run_name or f"train {datetime.now(UTC):%Y-%m-%d} {label}"
    tags = {
        KIND_TAG: "training",
        "data_hash": data_hash,
        "data_label": label,
        **dict(lineage or {}),
    }
    with mlflow.start_run(experiment_id=exp_id, run_name=name, tags=tags) as run:
        mlflow.log_params({k: v for k, v in params.items()})
        mlflow.log_params(
            {f"data.{k}": v for k, v in data_summary.items() if not isinstance(v, dict | list)}
        )
        mlflow.log_dict(dict(data_summary) | {"data_hash": data_hash}, "data_summary.json")
        for target, study in tuning.items():
            mlflow.log_dict(dict(study), f"optuna/{target}.json")
            mlflow.log_param(f"optuna.{target}.study", study.get("study_name", ""))
            mlflow.log_metrics(
                tracking.finite(
                    {
                        f"optuna/{target}_best_value": study.get("best_value", float("nan")),
                        f"optuna/{target}_n_complete": study.get("n_complete", float("nan")),
                        f"optuna/{target}_n_pruned": study.get("n_pruned", float("nan")),
                    }
                )
            )
        for protocol, values in metrics.items():
            mlflow.log_metrics(tracking.finite({f"{protocol}/{k}": v for k, v in values.items()}))
        mlflow.log_artifacts(str(model_dir), artifact_path="model")
        for fig_name, fig in figures.items():
            mlflow.log_figure(fig, f"plots/{fig_name}.png")
        source = mlflow.get_artifact_uri("model")
        run_id = str(run.info.run_id)
    baseline_id = _log_baseline(exp_id, label, data_hash, baseline) if baseline else None
    version = _register(
        model_name,
        source=source,
        run_id=run_id,
        run_name=name,
        label=label,
        data_hash=data_hash,
        lineage=lineage,
        runs=data_summary.get("runs", "?"),
    )
    return TrackedRun(
        tracking_uri=uri,
        experiment_id=exp_id,
        run_id=run_id,
        run_name=name,
        baseline_run_id=baseline_id,
        model_name=model_name,
        model_version=version,
    )


def _log_baseline(
    exp_id: str, label: str, data_hash: str, baseline: Mapping[str, Mapping[str, float]]
) -> str:
    """Log the analytic model's figures in the data's ``analytic baseline`` run (updated in
    place); its id."""
    baseline_id, _ = tracking.run_for(
        exp_id,
        f"analytic baseline {label}",
        {KIND_TAG: "analytic-baseline", "data_hash": data_hash},
    )
    for protocol, values in baseline.items():
        tracking.log_metrics(baseline_id, {f"{protocol}/{k}": v for k, v in values.items()})
    tracking.client().set_terminated(baseline_id)
    return str(baseline_id)


def _register(
    model_name: str,
    *,
    source: str,
    run_id: str,
    run_name: str,
    label: str,
    data_hash: str,
    lineage: Mapping[str, str] | None,
    runs: Any,
) -> str:
    """Register the run's model files as a new version of ``model_name`` (created if need
    be); the version."""
    from mlflow.exceptions import MlflowException

    client = tracking.client()
    try:
        client.create_registered_model(
            model_name, description="surrogate: LightGBM text models + model.json sidecar"
        )
    except MlflowException as e:
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version_tags = {
        "data_hash": data_hash,
        "data_label": label,
        "training_run": run_id,
        "training_run_name": run_name,
        **dict(lineage or {}),
    }
    version = client.create_model_version(
        model_name,
        source=source,
        run_id=run_id,
        tags=version_tags,
        description=f"{run_name}: trained on {runs} runs ({label})",
    )
    return str(version.version)
