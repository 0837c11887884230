"""Real servers for the integration tests, each started here on a free loopback port in a
temporary directory and stopped afterwards: an ``mlflow server`` (SQLite backend) and a
PostgreSQL server (``initdb`` + ``pg_ctl``). A server that cannot start skips the tests that
need it, with the reason. Screenshots and logs go to ``$SURROGATE_TEST_ARTIFACTS`` when set,
else to pytest's temporary directory: never into the checkout.

Every test module here is marked ``integration`` (``pytestmark``): ``python -m pytest`` leaves
them out, ``python -m pytest -m integration`` runs them alone (``.ci/run`` does, as a step of
its own).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=20) as r:
        return json.loads(r.read())


def post_json(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=20) as r:
        return json.loads(r.read())


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The process group this module started (the server and its workers), by its id."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tests leave screenshots and server logs for a person to look at."""
    env = os.environ.get("SURROGATE_TEST_ARTIFACTS")
    d = Path(env) if env else tmp_path_factory.mktemp("artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


def start_mlflow_server(
    workdir: Path, backend_uri: str, log_path: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """An ``mlflow server`` on a free loopback port, serving artifacts from ``workdir``;
    skips the calling test when it does not answer within 90 s."""
    port = free_port()
    log = log_path.open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            backend_uri,
            "--artifacts-destination",
            str(workdir / "art"),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=workdir,
        # no GenAI job runners (seven processes) and no telemetry: a closed network
        env={
            **os.environ,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
        },
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2).close()
            return proc, url
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop(proc)
                pytest.skip(
                    "mlflow server did not start: "
                    + log_path.read_text()[-1500:].replace("\n", " | ")
                )
            time.sleep(0.3)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory, artifacts_dir: Path) -> Iterator[str]:
    """The URL of a real ``mlflow server`` with a SQLite backend in a temporary directory."""
    d = tmp_path_factory.mktemp("mlflow-server")
    proc, url = start_mlflow_server(
        d, f"sqlite:///{d}/db.sqlite", artifacts_dir / "mlflow-server.log"
    )
    try:
        yield url
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def postgres(artifacts_dir: Path) -> Iterator[str]:
    """A PostgreSQL server of its own (``initdb`` + ``pg_ctl`` in a temporary directory, a free
    loopback port): its base URL ``postgresql+psycopg://USER@127.0.0.1:PORT`` (SQLAlchemy's,
    with the driver named: SQLAlchemy 2.0 and 2.1 default to different ones). Skips when the
    binaries (``$PATH``, ``/usr/local/bin``, ``/usr/lib/postgresql/*/bin``) or a driver are
    absent.
    ``initdb`` refuses to run as root, so as root the cluster belongs to ``nobody``."""
    pytest.importorskip("psycopg", reason="pip install -e '.[postgres]' for the driver")
    bindir = _postgres_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found")
    import getpass
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="surrogate-pg-"))  # removed below
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    as_user: list[str] = []
    user = getpass.getuser()
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            shutil.rmtree(base)
            pytest.skip("running as root without runuser: initdb refuses root")
        as_user, user = ["runuser", "-u", "nobody", "--"], "nobody"
        for p in (base, sock):
            os.chown(p, _uid("nobody"), -1)
    log_path = artifacts_dir / "postgres.log"
    init = subprocess.run(
        [
            *as_user,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            user,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if init.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"initdb failed: {init.stderr[-800:]}")
    port = free_port()
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60"
    start = subprocess.run(
        [
            *as_user,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            opts,
            "-l",
            str(base / "log"),
            "-w",
            "-t",
            "60",
            "start",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if start.returncode != 0:
        why = (base / "log").read_text()[-800:] if (base / "log").exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"pg_ctl start failed: {start.stderr[-800:]} {why}")
    try:
        yield f"postgresql+psycopg://{user}@127.0.0.1:{port}"
    finally:
        subprocess.run(
            [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
            capture_output=True,
            check=False,
        )
        if (base / "log").exists():
            shutil.copy(base / "log", log_path)
        shutil.rmtree(base, ignore_errors=True)


def _uid(name: str) -> int:
    import pwd

    return pwd.getpwnam(name).pw_uid


def _postgres_bindir() -> Path | None:
    candidates = [Path(p).parent for p in (shutil.which("initdb"),) if p]
    candidates += [
        Path("/usr/local/bin"),
        *sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True),
    ]
    for d in candidates:
        if all((d / b).exists() for b in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


def create_database(base_url: str, name: str) -> str:
    """A new database on the server of :func:`postgres`; its SQLAlchemy URL."""
    import psycopg

    libpq_url = base_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(f"{libpq_url}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    return f"{base_url}/{name}"


REPO = HERE.parents[1]
SMALL_SPACE = [
    "--model",
    "1.34b",
    "--nodes",
    "1",
    "--global-batch-seqs",
    "16",
    "--max-cp",
    "1",
    "--max-vpp",
    "1",
    "--max-mbs",
    "2",
    "--recompute",
    "none,full",
    "--framework",
    "torchtitan",
]


def surrogate_cmd(*args: str) -> list[str]:
    """The command line of ``surrogate ARGS`` in a subprocess, with this checkout's code."""
    return [sys.executable, "-c", "from surrogate.cli import entry; entry()", *args]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def synthetic_outcomes(round_dir: Path, path: Path, *, shift: float = 0.0) -> Path:
    """A sweep table of made-up outcomes for a round's proposals (the last one OOM), as if they
    had been run and ingested (``surrogate.runs.sweeps.sweep_row``, what ingest writes): the
    numbers are this test's, not measurements."""
    import pandas as pd

    from surrogate.config.training import config_from_flat
    from surrogate.loop.round_files import read_round
    from surrogate.runs.sweeps import sweep_row, validate_sweeps

    proposals = read_round(round_dir)["proposals"]
    n = len(proposals)
    rows = [
        sweep_row(
            config_from_flat(p["config"]),
            status="completed" if i < n - 1 else "oom",
            source="synthetic",
            run_id=f"{p['name']}/train-1",
            mfu=0.25 + shift + 0.03 * i if i < n - 1 else None,
        )
        for i, p in enumerate(proposals)
    ]
    table = validate_sweeps(pd.DataFrame(rows))
    if path.exists():
        table = pd.concat([pd.read_csv(path), table], ignore_index=True)
    table.to_csv(path, index=False)
    return path


def run_campaign(
    workdir: Path, *, rounds: int, model_dir: Path | None = None, campaign: str = "demo"
) -> list[dict[str, Any]]:
    """``surrogate propose`` and ``surrogate score-round`` for ``rounds`` rounds of synthetic
    outcomes into ``$MLFLOW_TRACKING_URI``, each round better than the one before, then round 1
    scored again (it must update its run, not add one); the ``--json`` outputs of the scoring."""
    from surrogate.cli import main

    base = workdir / campaign
    runs = workdir / f"{campaign}-runs.csv"
    model = ["--model-dir", str(model_dir)] if model_dir is not None else []
    out = []

    def score(rnd: Path) -> None:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["score-round", "--round", str(rnd), "--runs", str(runs), "--json"]) == 0
        out.append(json.loads(buf.getvalue()))

    for r in range(1, rounds + 1):
        rnd = base / f"round-{r:02d}"
        earlier = ["--runs", str(runs)] if runs.exists() else []
        assert (
            main(["propose", "--round", str(rnd), "--k", "4", *SMALL_SPACE, *model, *earlier]) == 0
        )
        synthetic_outcomes(rnd, runs, shift=0.05 * r)
        score(rnd)
    score(base / "round-01")  # again, with the later rounds' runs in the table
    return out


@pytest.fixture(scope="session")
def populated_server(
    mlflow_server: str, playbook_subset: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The server of :func:`mlflow_server` after a small ``train`` (registered as a model
    version) and a two-round campaign proposed by that model, round 1 scored twice."""
    from training.train import train

    work = tmp_path_factory.mktemp("campaign")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", mlflow_server)
        result = train(
            runs=playbook_subset,
            out_dir=work / "model",
            n_trials=1,
            storage=None,
            max_estimators=15,
            protocols=("nodes",),
            progress=False,
        )
        scored = run_campaign(work, rounds=2, model_dir=work / "model", campaign="demo")
    exps = post_json(f"{mlflow_server}/api/2.0/mlflow/experiments/search", {"max_results": 100})[
        "experiments"
    ]
    return {
        "url": mlflow_server,
        "train": result,
        "scored": scored,
        "experiments": {e["name"]: e for e in exps},
    }
