"""Calibration: fits on synthetic tables with known answers, exclusions, the public data."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from surrogate.calibration.calibrate import fit_profile, fit_smooth_gemm, isotonic_increasing
from surrogate.config.gpus import get_gpu
from surrogate.errors import DataError
from surrogate.runs.microbench_table import rows_to_microbench

H100 = get_gpu("H100")


def _eff(m: float, n: float, k: float) -> float:
    return 0.8 / (1 + 100 / m + 200 / n + 50 / k + 1e7 / (m * n * k))


def _table(fp8_factor: float = 0.5, inter: bool = True) -> pd.DataFrame:
    rows: list[dict[str, object]] = []
    sides = (256, 1024, 4096)
    for m in sides:
        for n in sides:
            for k in sides:
                for dtype, peak in (
                    ("bf16", H100.bf16_dense_flops),
                    ("fp8", (H100.fp8_dense_flops or 0) * fp8_factor),
                ):
                    f = _eff(m, n, k) * peak
                    rows.append(
                        {
                            "op": "gemm",
                            "dtype": dtype,
                            "m": m,
                            "n": n,
                            "k": k,
                            "batch": 1,
                            "nodes": 1,
                            "time_s": 2 * m * n * k / f,
                            "flops_per_s": f,
                            "hardware": "H100-SXM-80GB",
                            "source": "synthetic",
                        }
                    )
    for nodes, g, lat, bw in ((1, 8, 10e-6, 200e9), (2, 16, 30e-6, 50e9))[: 2 if inter else 1]:
        for s in 2.0 ** np.arange(10, 31, 2):
            t = lat + s / bw
            rows.append(
                {
                    "op": "all_reduce",
                    "dtype": "f32",
                    "size_bytes": s,
                    "group_size": g,
                    "nodes": nodes,
                    "layout": "contiguous",
                    "in_place": True,
                    "time_s": t,
                    "algbw_bytes_per_s": s / t,
                    "hardware": "H100-SXM-80GB",
                    "source": "synthetic",
                }
            )
    return rows_to_microbench(rows)


def test_smooth_gemm_recovers_known_model() -> None:
    g = np.array([256.0, 512, 1024, 2048, 4096])
    m, n, k = (a.ravel() for a in np.meshgrid(g, g, g, indexing="ij"))
    e, cm, cn, ck, c0 = fit_smooth_gemm(m, n, k, _eff(m, n, k))  # type: ignore[arg-type]
    assert (e, cm, cn, ck, c0) == pytest.approx((0.8, 100, 200, 50, 1e7), rel=1e-6)


def test_isotonic_averages_an_outlier_instead_of_propagating_it() -> None:
    y = np.log(np.array([13.0, 68.0, 14.0, 15.0, 16.0, 30.0]))
    fit = np.exp(isotonic_increasing(y, np.ones(6)))
    assert (np.diff(fit) >= 0).all() and fit[-1] == pytest.approx(30.0)
    assert fit[3] < 68.0


def test_fit_profile_on_synthetic_table() -> None:
    p = fit_profile(_table(), "H100")
    assert p.gemm["bf16"].provenance == "measured" and p.gemm["fp8"].provenance == "measured"
    m, n, k = np.array([1024.0]), np.array([256.0]), np.array([4096.0])
    assert p.gemm_efficiency(m, n, k, {"fp8": np.zeros(1)})[0] == pytest.approx(
        _eff(1024, 256, 4096)
    )
    # between grid points the interpolation stays close to the true smooth curve
    mid = p.gemm_efficiency(np.array([2048.0]), np.array([512.0]), np.array([2048.0]), {})[0]
    assert mid == pytest.approx(_eff(2048, 512, 2048), rel=0.05)
    measured = {
        (c.op, c.group_size, c.inter_node) for c in p.collectives if c.provenance == "measured"
    }
    assert measured == {("all_reduce", 8, False), ("all_reduce", 16, True)}
    ag = next(c for c in p.collectives if c.op == "all_gather" and c.inter_node)
    assert ag.provenance == "extrapolated" and "all_reduce" in ag.derived_from
    sr = next(c for c in p.collectives if c.op == "send_recv" and c.inter_node)
    assert "datasheet network rate" in sr.derived_from
    ar = next(c for c in p.collectives if c.op == "all_reduce" and not c.inter_node)
    assert ar.latency_s == pytest.approx(10e-6, rel=0.05)
    assert ar.algbw_bytes_per_s == pytest.approx(200e9, rel=0.05)


def test_suspect_fp8_is_excluded_and_extrapolated() -> None:
    p = fit_profile(_table(fp8_factor=2.0), "H100")
    assert p.gemm["fp8"].provenance == "extrapolated"
    assert any("suspect" in e["reason"] for e in p.excluded)


def test_no_rows_for_the_gpu() -> None:
    with pytest.raises(DataError, match="no rows for hardware A100-SXM-80GB"):
        fit_profile(_table(), "A100")


def test_without_inter_node_data_the_datasheet_answers() -> None:
    from surrogate.analytic.perf import SpecPerfModel

    p = fit_profile(_table(inter=False), "H100")
    c = {
        "inter_node_bw": np.array([50e9]),
        "intra_node_bw": np.array([450e9]),
        "inter_node_latency_s": np.array([25e-6]),
        "intra_node_latency_s": np.array([10e-6]),
    }
    args = ("all_gather", np.array([1e8]), np.array([16.0]), np.array([1.0]), c)
    assert p.collective_time_s(*args) == pytest.approx(SpecPerfModel().collective_time_s(*args))
    assert any("datasheet" in n for n in p.notes)


def test_public_h100_fit(mbench_data_dir: Path) -> None:
    from surrogate.ingest.microbench_inputs import read_microbench_inputs

    mb = mbench_data_dir / "microbench"
    table, _ = read_microbench_inputs(
        [*sorted((mb / "xla").glob("*.txtpb")), *sorted((mb / "nccl-tests").glob("*.log"))]
    )
    p = fit_profile(table, "H100")
    assert p.gemm["bf16"].provenance == "measured"
    assert p.gemm["fp8"].provenance == "extrapolated"  # MANIFEST: sm_90 fp8 is suspect
    inter = [c for c in p.collectives if c.inter_node]
    assert [c.op for c in inter if c.provenance == "measured"] == ["all_reduce"]


def _attention_rows(scale: float = 1.0) -> pd.DataFrame:
    """Synthetic causal flash-attention timings (and non-causal ones the fit must ignore)."""
    rows: list[dict[str, object]] = []
    for s, d, bh in itertools.product((1024, 4096, 16384), (64, 128), (8, 64)):
        for op in ("sdpa_causal_fwd_bwd", "sdpa_fwd_bwd"):
            f = _eff(s * bh, s, d) * H100.bf16_dense_flops * scale
            rows.append(
                {
                    "op": op,
                    "dtype": "bf16",
                    "m": s,
                    "n": s,
                    "k": d,
                    "batch": bh,
                    "nodes": 1,
                    "time_s": 12 * bh * s * s * d / f,
                    "flops_per_s": f,
                    "hardware": "H100-SXM-80GB",
                    "source": "synthetic",
                }
            )
    return rows_to_microbench(rows)


def test_attention_curve_from_causal_flash_attention() -> None:
    p = fit_profile(pd.concat([_table(), _attention_rows()], ignore_index=True), "H100")
    assert p.attention is not None and p.attention.provenance == "measured"
    assert p.attention.points == 12  # the causal forward + backward rows only
    # axes: query rows x heads, keys, head width
    got = p.attention_efficiency(np.array([4096.0 * 64]), np.array([4096.0]), np.array([128.0]), {})
    assert got is not None and got[0] == pytest.approx(_eff(4096 * 64, 4096, 128))
    assert any(n.startswith("Attention: causal flash attention") for n in p.notes)


def test_attention_above_the_peak_is_excluded() -> None:
    p = fit_profile(pd.concat([_table(), _attention_rows(scale=1e3)], ignore_index=True), "H100")
    assert p.attention is None
    assert any(e["reason"].startswith("attention: suspect") for e in p.excluded)
    assert p.attention_efficiency(np.ones(1), np.ones(1), np.ones(1), {}) is None
