"""The installed package, as a user gets it: the wheel built from this checkout, installed in
a fresh virtual environment, run from a directory outside the checkout. It must find its
bundled model, profiles and source list as package data (nothing from datasets/ or the
checkout), and the library must not need the programs beside it.

The wheel is built offline (``pip wheel --no-build-isolation``, from a copy of the sources so
that nothing is written into the checkout) and installed without its dependencies; the fresh
environment borrows the test environment's installed packages through a ``.pth`` file, which
comes after its own site-packages, so ``surrogate`` itself is the wheel's.
"""

from __future__ import annotations

import os
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
PREDICT = ["predict", "--model", "8b", "--gpu", "H100-SXM-80GB", "--nodes", "4", "--dp", "8",
           "--tp", "4", "--pp", "1", "--mbs", "2", "--grad-accum", "16", "--zero", "1",
           "--framework", "nanotron"]


def _run(args: list[str | Path], *, cwd: Path,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the fresh environment's bin directory, a working directory outside the checkout)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns(
                "__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(path, src / name)
    dist = root / "dist"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                  "--no-index", "-q", "-w", dist, src], cwd=root)
    if built.returncode != 0 and "No module named 'setuptools'" in built.stderr:
        pytest.skip("setuptools is not installed: pip install -e '.[test]'")
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("surrogate-*.whl")
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=root)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    got = _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps",
                "--no-index", "-q", wheel], cwd=root)
    assert got.returncode == 0, got.stderr[-3000:]
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                cwd=root).stdout.strip()
    borrowed = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(site) / "zz_test_environment.pth").write_text("\n".join(borrowed) + "\n")
    work = root / "elsewhere"
    work.mkdir()
    yield venv / "bin", work


def test_the_wheel_holds_the_package_data(installed: tuple[Path, Path]) -> None:
    _, work = installed
    (wheel,) = (work.parent / "dist").glob("surrogate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("surrogate/py.typed", "surrogate/data/sources.toml",
                   "surrogate/data/analytic_params.json"):
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
        installed: tuple[Path, Path]) -> None:
    bindir, work = installed
    out = _run([bindir / "surrogate", "data", "--help"], cwd=work)
    assert out.returncode == 0, out.stderr
    assert "fetch" in out.stdout and "summary" in out.stdout
    # No download: an unknown --only is refused with the names of the packaged list.
    out = _run([bindir / "surrogate", "data", "fetch", "--only", "no-such-source", "--dest",
                work / "cache"], cwd=work)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: --only must name sources of the TOML (hf_ultrascale_playbook, "
        "xla_collective_perf_table, xla_matmul_perf_table), got no-such-source"]
