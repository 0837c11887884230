"""The installed package, as a user gets it, in two ways.

The wheel built from this checkout, installed in a fresh virtual environment, run from a
directory outside the checkout: it must find its bundled model, profiles and source list as
package data (nothing from datasets/ or the checkout), and the library must not need the
programs beside it. The wheel is built offline (``pip wheel --no-build-isolation``, from a copy
of the sources so that nothing is written into the checkout) and installed without its
dependencies; that environment borrows the test environment's installed packages through a
``.pth`` file, which comes after its own site-packages, so ``surrogate`` itself is the wheel's.

The README's install, exactly (``python3 -m venv .venv``, then ``pip install -e .`` in a copy of
the checkout): a fresh environment with the dependencies pip resolves and no extra, nothing
borrowed. Every command of the README's "Main tasks" table then answers, or stops with one
line naming the extra it needs. It needs the package index (pip's cache makes a second run
quick) and skips, saying why, when the index cannot be reached.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "surrogate", "training", "microbench")
"""What setuptools packs (pyproject's packages.find and readme)."""
PREDICT = [
    "predict",
    "--model",
    "8b",
    "--gpu",
    "H100-SXM-80GB",
    "--nodes",
    "4",
    "--dp",
    "8",
    "--tp",
    "4",
    "--pp",
    "1",
    "--mbs",
    "2",
    "--grad-accum",
    "16",
    "--zero",
    "1",
    "--framework",
    "nanotron",
]


def _run(
    args: list[str | Path], *, cwd: Path, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _copy_sources(src: Path) -> None:
    """What setuptools packs, copied from the checkout into ``src`` (a new directory)."""
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(
                path,
                src / name,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
            )
        else:
            shutil.copy2(path, src / name)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the fresh environment's bin directory, a working directory outside the checkout)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    _copy_sources(src)
    dist = root / "dist"
    built = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            dist,
            src,
        ],
        cwd=root,
    )
    if built.returncode != 0 and "No module named 'setuptools'" in built.stderr:
        pytest.skip("setuptools is not installed: pip install -e '.[test]'")
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("surrogate-*.whl")
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=root)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    got = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            wheel,
        ],
        cwd=root,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    site = _run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root
    ).stdout.strip()
    borrowed = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(site) / "zz_test_environment.pth").write_text("\n".join(borrowed) + "\n")
    work = root / "elsewhere"
    work.mkdir()
    yield venv / "bin", work


def test_the_wheel_holds_the_package_data(installed: tuple[Path, Path]) -> None:
    _, work = installed
    (wheel,) = (work.parent / "dist").glob("surrogate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "surrogate/py.typed",
        "surrogate/data/sources.toml",
        "surrogate/data/analytic_params.json",
    ):
        assert needed in names
    assert any(n.startswith("surrogate/data/models/default/") for n in names)
    assert any(n.startswith("surrogate/data/profiles/") for n in names)


def test_installed_surrogate_is_the_wheel(installed: tuple[Path, Path]) -> None:
    bindir, work = installed
    out = _run([bindir / "python", "-c", "import surrogate; print(surrogate.__file__)"], cwd=work)
    assert out.returncode == 0, out.stderr
    where = Path(out.stdout.strip())
    assert where.is_relative_to(bindir.parent), where
    assert not where.is_relative_to(REPO)


def test_installed_predict_answers_with_the_bundled_model(installed: tuple[Path, Path]) -> None:
    bindir, work = installed
    out = _run([bindir / "surrogate", *PREDICT], cwd=work)
    print(out.stdout[-1500:])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "prediction: learned model" in out.stdout
    assert "MFU:" in out.stdout
    assert not any(work.iterdir()), "predict wrote into the working directory"


def test_installed_data_commands_read_the_packaged_source_list(
    installed: tuple[Path, Path],
) -> None:
    bindir, work = installed
    out = _run([bindir / "surrogate", "data", "--help"], cwd=work)
    assert out.returncode == 0, out.stderr
    assert "fetch" in out.stdout and "summary" in out.stdout
    # No download: an unknown --only is refused with the names of the packaged list.
    out = _run(
        [
            bindir / "surrogate",
            "data",
            "fetch",
            "--only",
            "no-such-source",
            "--dest",
            work / "cache",
        ],
        cwd=work,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: --only must name sources of the TOML (hf_ultrascale_playbook, "
        "xla_collective_perf_table, xla_matmul_perf_table), got no-such-source"
    ]


UNREACHABLE = (
    "Could not find a version that satisfies",
    "No matching distribution found",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Read timed out",
    "ConnectTimeoutError",
)
"""pip's words when the package index (or its cache) cannot give a requirement."""


@pytest.fixture(scope="module")
def readme_install(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The README's install in a fresh environment: (its bin directory, a working directory
    outside the checkout). Skips when pip cannot reach the package index."""
    root = tmp_path_factory.mktemp("readme")
    src = root / "checkout"
    _copy_sources(src)
    venv = src / ".venv"
    made = _run([sys.executable, "-m", "venv", venv], cwd=src)  # with pip; nothing borrowed
    assert made.returncode == 0, made.stderr
    got = _run([venv / "bin" / "pip", "install", "-q", "-e", "."], cwd=src, timeout=1500)
    if got.returncode != 0 and any(w in got.stderr for w in UNREACHABLE):
        why = [ln.strip() for ln in got.stderr.splitlines() if any(w in ln for w in UNREACHABLE)]
        pytest.skip(f"the package index is unreachable: {why[-1]}")
    assert got.returncode == 0, got.stderr[-3000:]
    work = root / "work"
    work.mkdir()
    return venv / "bin", work


def _main_tasks() -> list[str]:
    """The commands of the README's "Main tasks" table (its code spans that start with a
    program), in order."""
    text = (REPO / "README.md").read_text()
    table = text.split("## Main tasks", 1)[1].split("\n\n", 2)[1]
    return [
        span
        for span in re.findall(r"`([^`]+)`", table)
        if span.split()[0] in ("surrogate", "mlflow")
    ]


def _calibrate_args() -> list[str]:
    """``calibrate`` of the microbenchmark excerpts of tests/ingest/fixtures (a GEMM table and
    an nccl-tests log), for the README's ``mb/*.jsonl`` of a GPU machine."""
    fixtures = REPO / "tests" / "ingest" / "fixtures"
    return [
        "calibrate",
        str(fixtures / "mbench_xla_matmul_excerpt.txtpb"),
        str(fixtures / "mbench_nccl_2node_excerpt.log"),
        "--gpu",
        "H100",
        "--out",
        "my-h100.json",
    ]


def _flags_as_row(words: list[str]) -> dict[str, str]:
    """A configuration's flags as a row of ``--from-csv`` (``--sp``: sequence_parallel true)."""
    columns = {"--nodes": "num_nodes", "--zero": "zero_stage", "--sp": "sequence_parallel"}
    row = {}
    while words:
        flag, words = words[0], words[1:]
        value = "true"
        if words and not words[0].startswith("--"):
            value, words = words[0], words[1:]
        row[columns.get(flag, flag[2:].replace("-", "_"))] = value
    return row


def _answers_or_names_its_extra(
    out: subprocess.CompletedProcess[str], command: str, answers: bool
) -> None:
    """Exit 0 (required when ``answers``), or 2 with one line naming the extra to install."""
    assert "Traceback" not in out.stderr, f"{command}:\n{out.stderr[-3000:]}"
    if answers or out.returncode == 0:
        assert out.returncode == 0, f"{command}:\n{out.stderr[-3000:]}"
        return
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, f"{command}:\n{out.stderr[-3000:]}"
    assert re.fullmatch(r"error: .* pip install 'surrogate\[[a-z]+\]'", lines[0]), lines[0]


@pytest.mark.slow
def test_the_readme_install_has_no_extra(readme_install: tuple[Path, Path]) -> None:
    bindir, work = readme_install
    out = _run(
        [
            bindir / "python",
            "-c",
            "import importlib.util as u; print([m for m in "
            "('torch', 'mlflow', 'optuna', 'sqlalchemy', 'lleaves') if u.find_spec(m)])",
        ],
        cwd=work,
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


IMPORT_EVERY_MODULE = """
import importlib, pkgutil, surrogate, training, microbench
failed = []
for package in (surrogate, training, microbench):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if module.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            importlib.import_module(module.name)
        except Exception as e:
            failed.append(f"{module.name}: {e!r}")
print("\\n".join(failed))
"""


@pytest.mark.slow
def test_every_module_imports_without_extras(readme_install: tuple[Path, Path]) -> None:
    """An optional dependency is imported where it is used, never at a module's top."""
    bindir, work = readme_install
    out = _run([bindir / "python", "-c", IMPORT_EVERY_MODULE], cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "", out.stdout


@pytest.mark.slow
def test_every_main_task_answers_or_names_its_extra(readme_install: tuple[Path, Path]) -> None:
    """The README's commands as written, in the table's order, from one working directory
    (a round proposed, then ingested, scored and trained on); where one needs what only a
    GPU machine makes (microbenchmark tables) or a run makes (measured outcomes), the test
    gives the fixtures' excerpts or synthetic outcomes instead."""
    import pandas as pd

    bindir, work = readme_install
    tasks = _main_tasks()
    predict = next(t for t in tasks if t.startswith("surrogate predict --model"))
    given = {
        # the README's GPU-machine tables: microbenchmark excerpts of the test fixtures
        "surrogate calibrate mb/*.jsonl --gpu H100 --out my-h100.json": _calibrate_args(),
        "surrogate predict ... --profile my-h100.json": [
            *predict.split()[1:],
            "--profile",
            "my-h100.json",
        ],
    }
    pd.DataFrame([_flags_as_row(predict.split()[2:])]).to_csv(work / "configs.csv", index=False)
    ran = []
    for task in tasks:
        program, argv = task.split()[0], given.get(task) or task.split()[1:]
        if program == "mlflow":  # a program of the tracking extra, which the README names
            assert not (bindir / "mlflow").exists()
            row = next(r for r in (REPO / "README.md").read_text().splitlines() if task in r)
            assert "[tracking]" in row, row
            continue
        if argv[0] == "score-round":  # the round's outcomes, as if it had run
            synthetic_outcomes_parquet(work / "rounds" / "r01", work / "my_runs.parquet")
        out = _run([bindir / "surrogate", *argv], cwd=work)
        answers = argv[0] in ("predict", "propose", "ingest", "calibrate")
        _answers_or_names_its_extra(out, task, answers)
        ran.append(argv[0])
    # search without optuna: the enumeration alone, and the launch files the table mentions
    out = _run(
        [
            bindir / "surrogate",
            *next(t for t in tasks if t.startswith("surrogate search")).split()[1:],
            "--trials",
            "0",
            "--launch-dir",
            "launch",
        ],
        cwd=work,
    )
    _answers_or_names_its_extra(out, "search --trials 0", answers=True)
    assert any((work / "launch").iterdir())
    assert set(ran) == {
        "predict",
        "search",
        "microbench",
        "calibrate",
        "propose",
        "ingest",
        "score-round",
        "train",
    }
    assert (work / "my-h100.json").exists()
    assert pd.read_csv(work / "predictions.csv")["error"].isna().all()  # the README's row


def synthetic_outcomes_parquet(round_dir: Path, path: Path) -> None:
    """Made-up outcomes of a round's proposals (the last one OOM), as if run and ingested:
    the numbers are this test's, not measurements."""
    import pandas as pd

    props = pd.read_csv(round_dir / "proposals.csv")
    n = len(props)
    table = props.assign(
        run_id=props["name"] + "/train-1",
        status=["completed"] * (n - 1) + ["oom"],
        mfu=[0.3 + 0.01 * i for i in range(n - 1)] + [float("nan")],
        source="synthetic",
    )
    table.to_parquet(path, index=False)
