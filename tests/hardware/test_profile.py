"""Calibration profiles: PerfModel behaviour, JSON round trip, the shipped H100 profile."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from surrogate.analytic.perf import CEILING_SIDES, COLLECTIVE_OPS, PerfModel
from surrogate.errors import DataError
from surrogate.hardware.profile import CalibrationProfile, default_profile, load_profile


@pytest.fixture(scope="module")
def h100() -> CalibrationProfile:
    p = default_profile("H100")
    assert p is not None
    return p


def test_shipped_profile_is_a_perf_model(h100: CalibrationProfile) -> None:
    model: PerfModel = h100
    assert model.name.startswith("H100-SXM-80GB")
    assert default_profile("A100") is None


def test_gemm_efficiency_in_unit_interval_and_saturating(h100: CalibrationProfile) -> None:
    g = 2.0 ** np.arange(4, 17)
    m, n, k = (a.ravel() for a in np.meshgrid(g, g, g, indexing="ij"))
    for fp8 in (0.0, 1.0):
        eff = h100.gemm_efficiency(m, n, k, {"fp8": np.full(m.shape, fp8)})
        assert eff.shape == m.shape and ((eff > 0) & (eff <= 1)).all()
    big = h100.gemm_efficiency(
        np.array([4096.0, 65536.0]), np.array([4096.0, 65536.0]), np.array([4096.0, 65536.0]), {}
    )
    assert big[1] == pytest.approx(big[0])  # beyond the grid the edge value holds


def test_many_shapes_are_evaluated_once_each(h100: CalibrationProfile) -> None:
    """A large batch (a search) is evaluated per distinct shape: the same answer as shape by
    shape, whole or fractional, beyond 63 packed bits, NaN."""
    curve = h100.gemm["bf16"]
    rng = np.random.default_rng(0)
    size = 200_000
    cases = {
        "whole": [
            rng.choice([1.0, 512, 4096, 2.0**22], size),
            rng.choice([128.0, 14336], size),
            rng.choice([4096.0, 3, 1e5], size),
        ],
        "fractional": [
            rng.choice([0.5, 512, 4096.5], size),
            rng.choice([128.0, 7.25], size),
            rng.choice([4096.0, 3], size),
        ],
        "wide": [
            rng.choice([1.0, 2.0**40], size),
            rng.choice([2.0**30, 8], size),
            rng.choice([4096.0, 3], size),
        ],
    }
    cases["fractional"][0][7] = np.nan
    for name, (m, n, k) in cases.items():
        one_by_one = np.array(
            [curve(a, b, c) for a, b, c in zip(m[:50], n[:50], k[:50], strict=True)]
        )
        batch = curve(m, n, k)
        assert batch.shape == (size,), name
        np.testing.assert_array_equal(batch[:50], one_by_one, err_msg=name)
        for value in np.unique(np.stack([m, n, k]), axis=1).T[:20]:  # repeats agree
            same = (m == value[0]) & (n == value[1]) & (k == value[2])
            if same.any():
                assert np.unique(batch[same]).size == 1, name


@pytest.mark.parametrize("op", COLLECTIVE_OPS)
@pytest.mark.parametrize(("group", "inter"), [(2, 0), (4, 0), (8, 0), (16, 1), (64, 1)])
def test_collective_times_monotone_in_size(
    h100: CalibrationProfile, op: str, group: int, inter: int
) -> None:
    s = np.asarray(2.0 ** np.arange(0, 40), dtype=np.float64)
    t = h100.collective_time_s(op, s, np.full(s.shape, group), np.full(s.shape, inter), {})
    assert (t > 0).all() and (np.diff(t) >= 0).all()


def test_group_of_one_costs_nothing(h100: CalibrationProfile) -> None:
    t = h100.collective_time_s(
        "all_reduce", np.array([1e6, 1e6]), np.array([1.0, 8.0]), np.array([0.0, 0.0]), {}
    )
    assert t[0] == 0.0 and t[1] > 0


def test_the_best_gemm_efficiency_is_computed_once_per_profile(h100: CalibrationProfile) -> None:
    m, n, k = (a.ravel() for a in np.meshgrid(CEILING_SIDES, CEILING_SIDES, CEILING_SIDES))
    best = float(np.max(h100.gemm_efficiency(m, n, k, {})))
    assert h100.best_gemm_efficiency == best
    assert vars(h100)["best_gemm_efficiency"] == best  # kept on the profile, not elsewhere


@pytest.mark.parametrize("name", ["H100-SXM-80GB", "hf-playbook-cluster"])
def test_a_batch_gives_each_row_its_own_time(name: str) -> None:
    """Groups inside and across nodes (the fabric's and the curves' rows), groups no curve
    has (the datasheet's), per-row net_scale: each row's time in a batch is its time alone."""
    profile = load_profile(name)
    rng = np.random.default_rng(1)
    n = 400
    size = 10.0 ** rng.uniform(0, 11, n)
    group = 2.0 ** rng.integers(0, 12, n)
    inter = rng.integers(0, 2, n).astype(np.float64)
    local = np.minimum(group, 2.0 ** rng.integers(0, 4, n))
    c = {
        "gpus_per_node": np.full(n, 8.0),
        "intra_node_bw": np.full(n, 4.5e11),
        "inter_node_bw": np.full(n, 5e10),
        "intra_node_latency_s": np.full(n, 1e-5),
        "inter_node_latency_s": np.full(n, 2e-5),
        "net_scale": rng.uniform(0.5, 1.2, n),
    }
    for op in COLLECTIVE_OPS:
        batch = profile.collective_time_s(op, size, group, inter, c, local)
        for i in range(0, n, 9):
            one = slice(i, i + 1)
            alone = profile.collective_time_s(
                op, size[one], group[one], inter[one], {k: v[one] for k, v in c.items()}, local[one]
            )
            assert alone[0] == batch[i], (op, i)


def test_labels_measured_and_extrapolated(h100: CalibrationProfile) -> None:
    inter = {c.op: c.provenance for c in h100.collectives if c.inter_node}
    assert inter.pop("all_reduce") == "measured"
    assert set(inter.values()) == {"extrapolated"}
    assert h100.gemm["fp8"].provenance == "extrapolated"
    assert {s["source"] for s in h100.sources} == {"xla", "nccl-tests", "microbench"}


def test_round_trip(tmp_path: Path, h100: CalibrationProfile) -> None:
    p = tmp_path / "prof.json"
    h100.save(p)
    again = load_profile(p)
    s = np.asarray(2.0 ** np.arange(5, 35, 3), dtype=np.float64)
    for op in COLLECTIVE_OPS:
        a = h100.collective_time_s(op, s, np.full(s.shape, 8.0), np.zeros(s.shape), {})
        b = again.collective_time_s(op, s, np.full(s.shape, 8.0), np.zeros(s.shape), {})
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert again.to_json()["gemm"] == h100.to_json()["gemm"]


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_profile(tmp_path / "none.json")
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(DataError, match="schema_version 1"):
        load_profile(p)
    p.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "name": "x",
                "gpu": "y",
                "collectives": [
                    {
                        "op": "all_reduce",
                        "group_size": 2,
                        "inter_node": False,
                        "provenance": "measured",
                        "sizes_bytes": [2, 1],
                        "times_s": [1, 2],
                    }
                ],
            }
        )
    )
    with pytest.raises(DataError, match="sizes must increase"):
        load_profile(p)


def test_two_named_profiles_ship_with_a_fabric() -> None:
    from surrogate.hardware.profile import shipped_profiles

    assert {"H100-SXM-80GB", "hf-playbook-cluster"} <= set(shipped_profiles())
    healthy, playbook = load_profile("H100-SXM-80GB"), load_profile("hf-playbook-cluster")
    assert healthy.fabric is not None and playbook.fabric is not None
    nodes = np.array([2.0, 64.0, 1024.0])
    flat = healthy.fabric.efficiency("all_reduce", nodes)
    assert flat[0] == pytest.approx(flat[2])  # one measured node count: held flat
    measured = playbook.fabric.efficiency("all_reduce", nodes)
    assert measured[0] > 5 * measured[1] > 5 * measured[2]  # that cluster's collapse
    assert playbook.fabric.curves["all_reduce"].law_scores  # chosen on held-out counts


def test_unknown_profile_names_the_shipped_ones() -> None:
    with pytest.raises(DataError, match="hf-playbook-cluster"):
        load_profile("no-such-profile")


def test_every_h100_profile_times_attention_by_our_measurements() -> None:
    from surrogate.hardware.profile import shipped_profiles

    for name in shipped_profiles():
        attention = load_profile(name).attention
        assert attention is not None and attention.provenance == "measured", name
        assert attention.measured.sum() == 28  # 7 sequences x 2 batches x 2 head widths
    h100 = load_profile("H100-SXM-80GB")
    rows, seq = np.array([2.0**17, 2.0**17, 2.0**30]), np.array([4096.0, 2.0**20, 2.0**20])
    eff = h100.attention_efficiency(rows, seq, np.full(3, 128.0), {})
    assert eff is not None
    assert 0.3 < eff[0] < eff[1] <= eff[2] < 1  # rises with the sequence; the edge holds above


def test_round_trip_keeps_the_attention_curve(tmp_path: Path, h100: CalibrationProfile) -> None:
    h100.save(tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json").to_json()["attention"] == h100.to_json()["attention"]
