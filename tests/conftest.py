"""Shared fixtures: the public Playbook sweep and microbenchmark data (skipped when absent),
a builder of configurations, and a small SurrogateModel fitted on the Playbook subset."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pytest

from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.model import ModelConfig
from surrogate.config.presets import get_preset
from surrogate.config.training import TrainingConfig

if TYPE_CHECKING:
    from surrogate.learned.model import SurrogateModel

PLAYBOOK = Path("sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv")


@pytest.fixture(autouse=True)
def _tracking_outside_the_checkout(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test records to its own MLflow store in a temporary directory, never to the
    default ``sqlite:///mlruns/mlflow.db`` of the checkout (a test that means the default
    removes the variable and changes into its tmp_path first)."""
    store = tmp_path_factory.mktemp("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}/mlflow.db")


@pytest.fixture(autouse=True)
def _lightgbm_trees(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaded models predict with LightGBM, never compiling trees into the user cache
    (tests/learned/test_compiled_trees.py turns compiled trees on, with a cache of its own)."""
    monkeypatch.setenv("SURROGATE_COMPILED_TREES", "0")


@pytest.fixture(scope="session")
def playbook_runs() -> pd.DataFrame:
    """Every run of the Playbook sweep."""
    from surrogate.ingest.playbook import parse_playbook
    from surrogate.io.datasource import data_dir

    path = data_dir() / PLAYBOOK
    if not path.exists():
        pytest.skip(f"the shared Playbook data is absent ({path}); run `surrogate data fetch`")
    return parse_playbook(path)[0]


@pytest.fixture(scope="session")
def playbook_subset(playbook_runs: pd.DataFrame) -> pd.DataFrame:
    """400 real runs of two model sizes over all node counts (a fast training set)."""
    two = playbook_runs[playbook_runs["hidden_size"].isin([2048, 4096])]
    return two.sample(400, random_state=0).reset_index(drop=True)


@pytest.fixture
def mbench_data_dir() -> Path:
    """The public data directory, if it holds the microbenchmark files."""
    from surrogate.io.datasource import data_dir

    d = data_dir()
    if not (d / "microbench").is_dir():
        pytest.skip(f"public microbenchmark data not found under {d} (SURROGATE_DATA_DIR)")
    return d


def build_config(
    model: str | ModelConfig = "8b",
    *,
    gpu: str = "H100-SXM-80GB",
    gpus_per_node: int = 8,
    **layout: Any,
) -> TrainingConfig:
    """A TrainingConfig whose cluster is sized to the layout's world (dp x tp x pp x cp)."""
    lay = LayoutConfig(**{"framework": "nanotron", **layout})
    world = lay.dp * lay.tp * lay.pp * lay.cp
    per_node = min(world, gpus_per_node)
    return TrainingConfig(
        model=get_preset(model) if isinstance(model, str) else model,
        cluster=ClusterConfig(gpu=gpu, gpus_per_node=per_node, num_nodes=world // per_node),
        layout=lay,
    )


@pytest.fixture(scope="session")
def config() -> Callable[..., TrainingConfig]:
    return build_config


SMALL_BOOSTERS = {"n_estimators": 20, "num_leaves": 15}  # fast fits


def small_model() -> SurrogateModel:
    """An unfitted SurrogateModel of small boosters (:data:`SMALL_BOOSTERS`), seed 3."""
    from surrogate.learned.model import SurrogateModel

    return SurrogateModel(
        status_params=SMALL_BOOSTERS, mfu_params=SMALL_BOOSTERS, mem_params=SMALL_BOOSTERS, seed=3
    )


@pytest.fixture(scope="module")
def fitted(playbook_subset: pd.DataFrame) -> SurrogateModel:
    """:func:`small_model` fitted on the Playbook subset (once per test module)."""
    from surrogate.learned.training_data import cell_groups

    assert len(np.unique(cell_groups(playbook_subset))) >= 2
    return small_model().fit(playbook_subset)


@pytest.fixture(scope="module")
def configs(playbook_subset: pd.DataFrame) -> list[TrainingConfig]:
    """The configurations of the first 60 runs of the Playbook subset."""
    from surrogate.config.training import config_from_flat

    return [config_from_flat(r) for r in playbook_subset.head(60).to_dict("records")]


def same_predictions(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    """Assert two prediction tables (column name -> array) are identical."""
    assert a.keys() == b.keys()
    for k in a:
        if a[k].dtype == object:
            assert list(a[k]) == list(b[k]), k
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.fixture
def full_dir(tmp_path: Path) -> Any:
    """A directory on a filesystem with no space left: a 64 KiB tmpfs mounted over
    ``tmp_path/full`` and filled (skipped where mounting is not permitted, as without root)."""
    import os
    import subprocess

    d = tmp_path / "full"
    d.mkdir()
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )
    if not mounted:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)
