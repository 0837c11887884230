"""How each measured run is explained: what its own columns say, else the defaults."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from surrogate.runs.context import NETWORKS, as_predicted, run_context


def test_each_run_is_explained_by_its_own_columns_else_the_given_profile() -> None:
    runs = pd.DataFrame(
        {
            "profile": ["hf-playbook-cluster", None, np.nan],
            "net_scale": [0.5, np.nan, 0.0],
            "peak_mem_stage": [0.0, np.nan, 2.0],
        }
    )
    profiles, extra = run_context(runs, "my.json")
    assert profiles == ["hf-playbook-cluster", "my.json", "my.json"]
    assert extra["net_scale"].tolist() == [0.5, 1.0, 1.0]  # 1: the profile's curve
    assert extra["net_measured"].tolist() == [1.0, 0.0, 0.0]  # only the first measured it
    stage = extra["peak_mem_stage"]
    assert stage[0] == 0.0 and np.isnan(stage[1]) and stage[2] == 2.0


def test_runs_without_the_columns_take_the_defaults() -> None:
    profiles, extra = run_context(pd.DataFrame({"source": ["a", "b"]}))
    assert profiles == [None, None]  # the GPU's default profile
    assert extra["net_scale"].tolist() == [1.0, 1.0]
    assert extra["net_measured"].tolist() == [0.0, 0.0]
    assert np.isnan(extra["peak_mem_stage"]).all()  # the most loaded stage


def test_the_profile_network_drops_what_the_runs_measured() -> None:
    runs = pd.DataFrame({"net_scale": [0.5, 2.0]})
    assert as_predicted(runs, "measured") is runs
    assert as_predicted(runs, "profile")["net_scale"].isna().all()
    assert runs["net_scale"].notna().all()
    assert (as_predicted(runs, "curve")["net_scale"] == 1.0).all()  # measured, at the curve
    assert set(NETWORKS) == {"measured", "profile", "curve"}
    with pytest.raises(ValueError, match="network must be one of measured, profile, curve"):
        as_predicted(runs, "median")
