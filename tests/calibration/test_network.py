"""The network of the day (``surrogate.calibration.network``): a measured all-reduce scales the
profile's inter-node curve as a Playbook run's start-up measurement does in training."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from surrogate.calibration.network import busbw_rows, measure, scaled_profile, under_network
from surrogate.errors import ConfigError, DataError
from surrogate.hardware.fabric import run_scales
from surrogate.hardware.profile import load_profile

PLAYBOOK = Path("sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv")


def test_a_bandwidth_scales_as_the_training_path_does_for_the_same_measurement() -> None:
    """A Playbook run's start-up all-reduce (its row of ``parse_playbook_network``), given as
    a bandwidth at its node count, gives the scale ``run_scales`` gives that row in
    training."""
    from surrogate.ingest.playbook_network import parse_playbook_network
    from surrogate.io.datasource import data_dir

    path = data_dir() / PLAYBOOK
    if not path.exists():
        pytest.skip(f"the shared Playbook data is absent ({path})")
    rows, _ = parse_playbook_network(path)
    profile = load_profile("hf-playbook-cluster")
    assert profile.fabric is not None
    ar = rows[(rows["op"] == "all_reduce") & (rows["nodes"] >= 2)]
    for _, row in ar.groupby("nodes").head(2).iterrows():  # two runs per node count
        nodes = int(row["nodes"])
        training = float(run_scales(ar.loc[[row.name]], profile.fabric).iloc[0])
        net = measure(
            f"{row['busbw_bytes_per_s'] / 1e9!r}GBps",
            profile,
            nodes=nodes,
            gpus_per_node=int(row["group_size"]) // nodes,
        )
        assert net.nodes == nodes
        assert math.isclose(net.scale, training, rel_tol=1e-12)


def test_the_scaled_profile_predicts_as_a_net_scale_column_does() -> None:
    """Scoring under the profile put under the network equals scoring under the profile with
    the training path's ``net_scale`` column of the same value; without a network it is the
    profile's curve (scale 1)."""
    from surrogate.config.presets import model_values
    from surrogate.config.training import config_from_flat
    from surrogate.prediction.scoring import score

    cfg = config_from_flat(
        model_values("3.57b", None)
        | {
            "framework": "nanotron",
            "gpu": "H100-SXM-80GB",
            "num_nodes": 16,
            "dp": 64,
            "tp": 2,
            "pp": 1,
            "mbs": 2,
            "grad_accum": 4,
            "zero_stage": 1,
        }
    )
    profile = load_profile("hf-playbook-cluster")
    net = measure("120GBps", profile, nodes=16, gpus_per_node=8)
    assert net.scale > 1  # 120 GB/s is above the curve's 52.7 at 16 nodes
    under = score([cfg], profile=under_network(profile, net)).columns
    column = score([cfg], profile=profile, extra={"net_scale": np.array([net.scale])}).columns
    plain = score([cfg], profile=profile).columns
    for k in ("pred_mfu", "pred_step_time_s", "pred_tokens_per_s_per_gpu"):
        assert under[k][0] == column[k][0]
    assert under["pred_mfu"][0] > plain["pred_mfu"][0]
    same = scaled_profile("hf-playbook-cluster", "H100-SXM-80GB", net.scale)
    assert score([cfg], profile=same).columns["pred_mfu"][0] == under["pred_mfu"][0]
    assert scaled_profile("hf-playbook-cluster", "H100-SXM-80GB", None) == "hf-playbook-cluster"
    assert under_network(profile, net).name == profile.name
    assert dataclasses.replace(profile.fabric).net_scale == 1.0  # type: ignore[type-var]


def test_an_nccl_tests_log_gives_its_node_count_and_mean_bandwidth(mbench_data_dir) -> None:
    profile = load_profile("hf-playbook-cluster")
    log = mbench_data_dir / "microbench/nccl-tests/gcp_a3mega_2node_16gpu_all_reduce.log"
    net = measure(log, profile, nodes=16, gpus_per_node=8)
    assert net.nodes == 2 and net.busbw_gbps > 0 and net.scale > 0
    assert "at 2 nodes" in net.describe() and "nccl-tests log" in net.describe()
    one = mbench_data_dir / "microbench/nccl-tests/dgx_h100_1node_8gpu_all_reduce.log"
    with pytest.raises(DataError, match="no all-reduce across nodes"):
        measure(one, profile, nodes=16, gpus_per_node=8)


def test_what_must_hold() -> None:
    profile = load_profile("hf-playbook-cluster")
    for bad in ("fast", "-3GBps", "120", "GBps"):
        with pytest.raises(ConfigError, match="must be an nccl-tests all_reduce_perf log"):
            measure(bad, profile, nodes=16, gpus_per_node=8)
    with pytest.raises(ConfigError, match="positive"):
        measure("0GBps", profile, nodes=16, gpus_per_node=8)
    with pytest.raises(ConfigError, match="between nodes"):
        measure("100GBps", profile, nodes=1, gpus_per_node=8)
    with pytest.raises(ConfigError, match="has none"):
        measure("100GBps", load_profile("h100-own-measured"), nodes=4, gpus_per_node=8)
    rows = busbw_rows(100.0, 4, 8)
    assert float(
        rows["size_bytes"].iloc[0] * 2 * 31 / 32 / rows["time_s"].iloc[0]
    ) == pytest.approx(100e9)


def test_the_profile_records_the_spread_its_runs_measured() -> None:
    """A fabric fitted on several runs per node count records the spread of their all-reduce
    busbw (synthetic rows: 10 runs at 4 nodes, 10 to 100 GB/s), which survives the profile's
    JSON, and a prediction without --network says it (the shipped Playbook profile: 335
    runs at 16 nodes, the median its curve's)."""
    import pandas as pd

    from surrogate.calibration.network import describe_profile_network, profile_network
    from surrogate.hardware.fabric import Fabric, busbw_spread, fit_fabric

    rows = pd.concat(
        [busbw_rows(float(g), 4, 8, run_id=f"r{g}") for g in range(10, 101, 10)], ignore_index=True
    ).assign(source="synthetic", file="synthetic")
    fabric = fit_fabric(rows, 50e9, 1e-5)
    assert fabric is not None
    q = fabric.spread[4.0]
    assert q["runs"] == 10 and q["median_gbps"] == pytest.approx(55.0)
    assert q["p10_gbps"] == pytest.approx(19.0) and q["p90_gbps"] == pytest.approx(91.0)
    assert Fabric.from_json(fabric.to_json()).spread == {4.0: pytest.approx(q)}
    assert busbw_spread(rows[rows["nodes"] > 4]) == {}
    shipped = load_profile("hf-playbook-cluster")
    d = profile_network(shipped, 16, 8)
    assert d["measured_spread"]["runs"] == 335
    assert d["measured_spread"]["median_gbps"] == pytest.approx(d["busbw_gbps"], rel=1e-4)
    assert "10th-90th percentile of 335" in describe_profile_network(shipped, 16, 8)
    assert "measured_spread" not in profile_network(shipped, 12, 8)  # no runs at 12 nodes
