"""Shared fixtures: the public Playbook sweep and microbenchmark data (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

PLAYBOOK = Path("sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv")


@pytest.fixture(scope="session")
def playbook_runs() -> pd.DataFrame:
    """Every run of the Playbook sweep."""
    from surrogate.datasource import data_dir
    from surrogate.ingest.playbook import parse_playbook

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
    from surrogate.datasource import data_dir

    d = data_dir()
    if not (d / "microbench").is_dir():
        pytest.skip(f"public microbenchmark data not found under {d} (SURROGATE_DATA_DIR)")
    return d
