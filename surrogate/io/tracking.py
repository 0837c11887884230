"""MLflow as the dashboard: where the store is, experiments that open on their runs, runs found
again by their tags, and metric histories over rounds.

The store is ``$MLFLOW_TRACKING_URI`` when set (a server, ``http://host:5000``, or a database),
else ``sqlite:///mlruns/mlflow.db``. With a SQLite store the artifacts of a new experiment go
beside the database (``mlruns/artifacts`` for the default), never to MLflow's own default of
``./mlruns`` under whatever directory the command ran in. mlflow is imported inside the
functions: importing this module costs nothing.

Conventions shared by every writer (``surrogate train``, ``surrogate score-round``,
``benchmarks/accuracy.py --track``):

- metric names are hierarchical, ``<section>/<metric>`` (``cv/mfu_mape``,
  ``round/prospective_mfu_mape``): MLflow's chart view groups its charts by the section;
- the tag ``surrogate.kind`` says what a run is (:data:`KINDS`); a run is found again by its
  tags (:func:`find_run`), so writing the same thing twice updates one run;
- the analytic model's figures are runs of their own (kind ``analytic-baseline``) logged under
  the same metric names, so a chart compares the learned model with the baseline instead of
  doubling the number of charts.
"""

from __future__ import annotations

import math
import os
import shlex
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from surrogate.errors import ConfigError, shorten, shown
from surrogate.extras import require
from surrogate.io.outputs import check_writable_dir
from surrogate.io.stores import (
    NETWORK_PORTS,
    STORE_CHECK_TIMEOUT_S,
    check_sqlite_file,
    ensure_sqlite_dir,
    reach,
    sqlite_path,
)

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"
KIND_TAG = "surrogate.kind"
REGISTERED_MODEL = "surrogate"
"""The registered model that ``surrogate train`` adds a version to."""
KINDS = ("training", "analytic-baseline", "accuracy", "round", "trend")
"""``training``: one ``surrogate train``; ``analytic-baseline``: the analytic model on the same
data; ``accuracy``: one ``benchmarks/accuracy.py --track``; ``round``: one scored
active-learning round; ``trend``: a metric history over the rounds of a campaign."""
_EXPERIMENT_KIND = "mlflow.experimentKind"
"""MLflow 3 opens an experiment without this tag as a GenAI app; ``custom_model_development``
marks it as model training (MLflow 3.17's UI reads its own view switch instead: :func:`run_url`
selects it)."""


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` or the local SQLite default."""
    return os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


_OFF = "--no-mlflow (score-round) or --no-track (train)"


def check_store(uri: str | None = None, *, timeout_s: float = STORE_CHECK_TIMEOUT_S) -> str:
    """The tracking store ``uri`` (default :func:`tracking_uri`) can take a run
    (:func:`_check_store`); ConfigError otherwise, also for text that is no URI at all."""

    uri = tracking_uri() if uri is None else uri
    try:
        return _check_store(uri, timeout_s)
    except ValueError as e:  # a malformed URL, a NUL in a path
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(
            f"MLFLOW_TRACKING_URI={shown(uri)} is not a usable URI ({e}); give "
            f"sqlite:///PATH or http(s)://HOST:PORT, or {_OFF}"
        ) from None


def _check_store(uri: str, timeout_s: float) -> str:
    """The tracking store ``uri`` can take a run: checked before
    a command works, within ``timeout_s`` seconds, so that an unusable store costs a line, not
    the work. A SQLite file's directory must be writable and an existing file a database; a
    server or database must accept a connection; a file store (a path) must be allowed
    (MLflow 3 refuses one unless ``MLFLOW_ALLOW_FILE_STORE=true``). ConfigError naming
    ``MLFLOW_TRACKING_URI``, what is wrong and what would do, else the URI."""
    from urllib.parse import urlsplit

    where = (
        f"MLFLOW_TRACKING_URI={shown(uri)}"
        if os.environ.get("MLFLOW_TRACKING_URI")
        else f"the tracking store {shown(uri)}"
    )
    fix = (
        f"unset MLFLOW_TRACKING_URI for the local store {DEFAULT_TRACKING_URI}, or give {_OFF}"
        if os.environ.get("MLFLOW_TRACKING_URI")
        else f"give {_OFF}"
    )
    scheme = urlsplit(uri).scheme.lower() if "://" in uri else ""
    base = scheme.split("+", 1)[0]
    db = sqlite_path(uri)
    if base == "sqlite":
        if db is not None:  # else an in-memory database
            check_sqlite_file(db, timeout_s, where=where, fix=fix)
        return uri
    if base in NETWORK_PORTS:
        reach(uri, timeout_s, where=where, fix=fix, http_health=base in ("http", "https"))
        return uri
    if base in ("databricks", "databricks-uc", "uc"):
        return uri  # checked by MLflow itself, with its own credentials
    if scheme in ("", "file"):
        if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() != "true":
            raise ConfigError(
                f"{where} names a file store (a path), which MLflow 3 refuses "
                f"unless MLFLOW_ALLOW_FILE_STORE=true; give a database such as "
                f"sqlite:///mlruns/mlflow.db or a server http://HOST:PORT, or "
                f"{fix}"
            )
        path = uri[len("file://") :] if scheme == "file" else uri
        try:
            check_writable_dir(path, flag=where)
        except ConfigError as e:
            raise ConfigError(f"{e}; {fix}") from None
        return uri
    raise ConfigError(
        f"{where}: the scheme {scheme!r} names no tracking store; give "
        f"sqlite:///PATH, http(s)://HOST:PORT, postgresql://..., mysql://... or "
        f"mssql://..., or {fix}"
    )


def bound_requests() -> None:
    """Bound how long MLflow retries a server that stops answering (by default it retries for
    minutes, silently), unless the user set the variables."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")


def store_failure(e: BaseException) -> str:
    """One line of what a tracking store's failure was (its type and first line)."""

    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {shorten(text[0], 300)}" if text else type(e).__name__


def artifact_location(uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: beside a SQLite database, else the server's
    choice (None)."""
    db = sqlite_path(uri)
    if db is None:
        return None
    return (db.parent / "artifacts").resolve().as_uri()


def connect() -> str:
    """Point mlflow at :func:`tracking_uri` (creating a SQLite database's directory); the URI.

    MLflow prints "View run ... at URL" on stdout when a run ends on a server, which would break
    ``--json`` output: that is turned off (unless the variable is set), and the commands say
    where they logged (:func:`run_url`)."""
    require("mlflow")  # absent: one line naming the extra that installs it
    import mlflow

    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    bound_requests()
    uri = tracking_uri()
    ensure_sqlite_dir(uri)
    mlflow.set_tracking_uri(uri)
    return uri


_ML_VIEW = "workflowType=machine_learning"
"""MLflow 3's UI shows an experiment as a GenAI app (traces, an empty overview) unless the
page is opened in its "Model training" view, which this query selects (and remembers)."""


def run_url(uri: str, experiment_id: str, run_id: str) -> str:
    """Where a person sees a run: its page on a server, else the run id and the store."""
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?{_ML_VIEW}"

    return f"run {run_id} in {uri} (see it with `mlflow ui --backend-store-uri {shlex.quote(uri)}`)"


def experiment_url(uri: str, experiment_id: str, *, charts: bool = False) -> str | None:
    """The page of an experiment's runs on a server (``charts``: its chart view), else None."""
    if not uri.startswith(("http://", "https://")):
        return None
    mode = "&compareRunsMode=CHART" if charts else ""
    return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs?{_ML_VIEW}{mode}"


def client() -> MlflowClient:
    require("mlflow")
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=connect())


def experiment(name: str, *, description: str = "", tags: Mapping[str, str] | None = None) -> str:
    """The id of the experiment ``name``, created if absent (artifacts: :func:`artifact_location`);
    it opens on its runs and shows ``description`` on its page."""
    c = client()
    exp = c.get_experiment_by_name(name)
    if exp is not None and exp.lifecycle_stage == "deleted":
        c.restore_experiment(exp.experiment_id)  # its name is taken until it is purged
    if exp is None:
        exp_id = c.create_experiment(name, artifact_location=artifact_location(tracking_uri()))
    else:
        exp_id = str(exp.experiment_id)
    wanted = {_EXPERIMENT_KIND: "custom_model_development", **dict(tags or {})}
    if description:
        wanted["mlflow.note.content"] = description
    have = {} if exp is None else dict(exp.tags)
    for key, value in wanted.items():
        if have.get(key) != value:
            c.set_experiment_tag(exp_id, key, value)
    return str(exp_id)


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def find_run(experiment_id: str, tags: Mapping[str, str]) -> str | None:
    """The newest active run of the experiment carrying all of ``tags``, or None."""
    from mlflow.entities import ViewType

    clause = " and ".join(f"tags.`{k}` = {_quote(str(v))}" for k, v in tags.items())
    runs = client().search_runs(
        [experiment_id],
        filter_string=clause,
        run_view_type=ViewType.ACTIVE_ONLY,
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return str(runs[0].info.run_id) if runs else None


def run_for(experiment_id: str, run_name: str, tags: Mapping[str, str]) -> tuple[str, bool]:
    """The run carrying ``tags`` (:func:`find_run`), else a new one named ``run_name`` with
    them: ``(run_id, created)``. Writing the same thing twice then updates one run."""
    found = find_run(experiment_id, tags)
    if found is not None:
        return found, False
    run = client().create_run(experiment_id, run_name=run_name, tags=dict(tags))
    return str(run.info.run_id), True


def finite(metrics: Mapping[str, float]) -> dict[str, float]:
    """MLflow's REST API cannot carry NaN or infinity: undefined figures are left out."""
    return {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}


def log_metrics(run_id: str, metrics: Mapping[str, float], *, step: int = 0) -> None:
    """Log the finite ``metrics`` at ``step`` in one batch."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(key=k, value=v, timestamp=now, step=step) for k, v in finite(metrics).items()]
    if batch:
        client().log_batch(run_id, metrics=batch)


def sync_history(
    experiment_id: str,
    run_name: str,
    tags: Mapping[str, str],
    history: Mapping[int, Mapping[str, float]],
) -> str:
    """Make the run carrying ``tags`` hold exactly ``history`` (step -> metrics) as its metric
    histories, so that MLflow draws one line per metric over the steps; the run id.

    A step already logged with the same values is left alone and new steps are appended. When a
    logged value changed (a round scored again with more runs) the run is replaced, since
    MLflow cannot delete a metric value and a second value at one step would draw the line
    back and forth (the old run goes to MLflow's deleted runs)."""
    c = client()
    want = {step: finite(values) for step, values in history.items()}
    run_id = find_run(experiment_id, tags)
    if run_id is not None:
        have: dict[int, dict[str, float]] = {}
        for key in c.get_run(run_id).data.metrics:
            for m in c.get_metric_history(run_id, key):
                have.setdefault(int(m.step), {})[key] = float(m.value)
        stale = any(
            step not in want
            or any(
                k not in want[step] or not math.isclose(v, want[step][k], rel_tol=1e-9, abs_tol=0)
                for k, v in values.items()
            )
            for step, values in have.items()
        )
        if stale:
            c.delete_run(run_id)
            run_id = None
        else:
            want = {
                s: {k: v for k, v in vals.items() if k not in have.get(s, {})}
                for s, vals in want.items()
            }
    if run_id is None:
        run_id = str(c.create_run(experiment_id, run_name=run_name, tags=dict(tags)).info.run_id)
    for step in sorted(want):
        log_metrics(run_id, want[step], step=step)
    c.set_terminated(run_id)
    return run_id
