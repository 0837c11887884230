"""A scored active-learning round in MLflow (:func:`log_round`): its metrics under the names
MLflow's chart view groups (:data:`ROUND_METRICS`), its figures, the analytic baseline beside it,
the proposing model's registered version, and the campaign's trends over its rounds."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from surrogate.errors import DataError
from surrogate.io import tracking
from surrogate.io.tracking import REGISTERED_MODEL
from surrogate.io.tracking import tracking_uri as uri
from surrogate.loop import round_plots
from surrogate.loop.round_files import ROUND_FILE, read_round

if TYPE_CHECKING:
    import pandas as pd


def tracking_uri() -> str:
    return uri()


ROUND_METRICS = {
    "mfu_mape": "round/prospective_mfu_mape",
    "status_accuracy": "round/prospective_status_accuracy",
    "interval_coverage": "round/interval_coverage",
    "oom_rate": "round/oom_rate",
    "proposed": "runs/proposed",
    "measured": "runs/measured",
    "best_mfu_round": "best/mfu_in_round",
    "best_mfu_so_far": "best/mfu_so_far",
}
""":func:`score_round` figures as MLflow names them: ``round/`` the proposing model's accuracy
on the runs it had not seen (prospective), ``runs/`` counts, ``best/`` the best MFU measured;
each section is a group of charts in MLflow's chart view."""


BASELINE_METRICS = ("mfu_mape", "status_accuracy")
"""The analytic model's figures of a round that the ``analytic baseline`` run draws."""


def campaign_of(round_dir: str | Path) -> str:
    """A campaign is the directory that numbers its rounds (:func:`next_round_number`)."""
    return Path(round_dir).resolve().parent.name or "rounds"


def campaign_records(round_dir: str | Path) -> list[dict[str, Any]]:
    """The records of the other rounds beside ``round_dir``, by round number."""
    here = Path(round_dir).resolve()
    out = []
    for f in sorted(here.parent.glob(f"*/{ROUND_FILE}")):
        if f.parent == here:
            continue
        try:
            out.append(read_round(f.parent))
        except DataError:
            continue
    return sorted(out, key=lambda r: int(r.get("round", 0)))


def log_round(
    record: Mapping[str, Any],
    metrics: Mapping[str, float],
    *,
    campaign: str | None = None,
    matched: pd.DataFrame | None = None,
    analytic: tuple[Mapping[str, float], pd.DataFrame] | None = None,
    earlier: Sequence[Mapping[str, Any]] = (),
) -> str:
    """Log a scored round to MLflow; the id of its run.

    The experiment is ``active learning: <campaign>`` (default: the goal's model and GPU). The
    round's run, ``round 03``, is found again by its tags, so scoring a round again updates it:
    metrics ``round/<figure>`` at step = round, the proposing model's lineage as tags (its data
    hash and, when the registry holds it, its registered version, which is tagged back with
    the round), ``round.json``, the matched runs and the figures of
    :mod:`surrogate.loop.round_plots`.
    Then the run ``accuracy over rounds`` is brought up to date with every round's figures
    and ``analytic baseline`` with the analytic model's (``analytic``: :func:`score_round`
    with ``model=None``), so the chart view draws accuracy against rounds."""
    step = int(record["round"])
    goal = record.get("goal", {})
    campaign = campaign or f"{goal.get('model', 'model')} on {goal.get('gpu', 'gpu')}"
    exp_id = tracking.experiment(
        EXPERIMENT.format(campaign=campaign),
        description=(
            f"Active-learning campaign {campaign!r}: one run per scored round "
            "(`round NN`), `accuracy over rounds` (the proposing models' prospective "
            "accuracy, step = round) and `analytic baseline` (the analytic model on the "
            "same runs)."
        ),
        tags={"campaign": campaign},
    )
    key = {tracking.KIND_TAG: "round", "campaign": campaign, "round": str(step)}
    run_id, _ = tracking.run_for(exp_id, f"round {step:02d}", key)
    client = tracking.client()
    info = record.get("model", {})
    tags = {
        "proposing_model.kind": str(info.get("kind")),
        "proposing_model.data_hash": str(info.get("data_hash")),
        "proposing_model.path": str(info.get("path")),
    }
    version = _model_version(client, info.get("data_hash"), campaign, step)
    if version is not None:
        tags["proposing_model.version"] = version
    if analytic is not None:
        tags |= {
            f"analytic.{k}": f"{analytic[0][k]:.6g}"
            for k in BASELINE_METRICS
            if k in analytic[0] and analytic[0][k] == analytic[0][k]
        }
    for k, v in tags.items():
        client.set_tag(run_id, k, v)
    params = {
        "round": step,
        "k": len(record["proposals"]),
        **{f"goal.{k}": v for k, v in goal.items()},
    }
    have = client.get_run(run_id).data.params
    from mlflow.entities import Param

    new = [Param(k, str(v)) for k, v in params.items() if k not in have]
    if new:
        client.log_batch(run_id, params=new)
    latest = client.get_run(run_id).data.metrics
    changed = {ROUND_METRICS.get(k, f"round/{k}"): v for k, v in metrics.items()}
    tracking.log_metrics(
        run_id, {k: v for k, v in changed.items() if latest.get(k) != v}, step=step
    )  # a value scored again and unchanged is not repeated
    client.log_dict(run_id, dict(record), ROUND_FILE)
    title = f"round {step:02d}"
    frame = matched if matched is not None else None
    if frame is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "runs.csv"
            frame.to_csv(path, index=False)
            client.log_artifact(run_id, str(path))
        figures = {
            "predicted_vs_measured": round_plots.predicted_vs_measured(
                frame, title, None if analytic is None else analytic[1]
            ),
            "interval_coverage": round_plots.interval_coverage(frame, title),
            "layout_space": round_plots.layout_space(record, frame, earlier),
        }
        for name, fig in figures.items():
            client.log_figure(run_id, fig, f"plots/{name}.png")
    client.set_terminated(run_id)
    _sync_trends(exp_id, campaign)
    return run_id


def _model_version(client: Any, data_hash: Any, campaign: str, step: int) -> str | None:
    """The registered version of the proposing model (by data hash), tagged with the round."""
    from mlflow.exceptions import MlflowException

    if not data_hash:
        return None
    try:
        versions = client.search_model_versions(
            f"name = '{REGISTERED_MODEL}' and tags.data_hash = '{data_hash}'"
        )
    except MlflowException:
        return None
    if not versions:
        return None
    v = max(versions, key=lambda m: int(m.version))
    entry = f"{campaign} round {step:02d}"
    rounds = [r for r in str(v.tags.get("proposed_rounds", "")).split("; ") if r]
    if entry not in rounds:
        client.set_model_version_tag(
            REGISTERED_MODEL, v.version, "proposed_rounds", "; ".join([*rounds, entry])
        )
    return str(v.version)


def _sync_trends(exp_id: str, campaign: str) -> None:
    """Rebuild ``accuracy over rounds`` and ``analytic baseline`` from the round runs."""
    from mlflow.entities import ViewType

    runs = tracking.client().search_runs(
        [exp_id],
        filter_string=f"tags.`{tracking.KIND_TAG}` = 'round'",
        run_view_type=ViewType.ACTIVE_ONLY,
        max_results=1000,
    )
    learned: dict[int, dict[str, float]] = {}
    baseline: dict[int, dict[str, float]] = {}
    for r in runs:
        step = int(r.data.tags["round"])
        learned[step] = dict(r.data.metrics)
        baseline[step] = {
            ROUND_METRICS[k]: float(r.data.tags[f"analytic.{k}"])
            for k in BASELINE_METRICS
            if f"analytic.{k}" in r.data.tags
        }
    tracking.sync_history(
        exp_id, "accuracy over rounds", {tracking.KIND_TAG: "trend", "campaign": campaign}, learned
    )
    if any(baseline.values()):
        tracking.sync_history(
            exp_id,
            "analytic baseline",
            {tracking.KIND_TAG: "analytic-baseline", "campaign": campaign},
            baseline,
        )


EXPERIMENT = "active learning: {campaign}"
"""The MLflow experiment of a campaign."""
