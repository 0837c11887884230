"""The Playbook sweep's per-run network measurements as microbenchmark rows."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from surrogate.analytic.perf import bus_factor
from surrogate.cli import main
from surrogate.errors import DataError
from surrogate.ingest.playbook import PROFILE
from surrogate.ingest.playbook_network import (
    NETWORK_COLUMNS,
    measured_net_scale,
    parse_playbook_network,
    parse_playbook_runs,
)
from surrogate.runs.microbench_table import MICROBENCH_COLUMNS, validate_microbench

HEADER = (
    "job_id,name,nodes,seq_len,mbs,batch_accum,gbs,mTFLOPs,hTFLOPs,tok/s/gpu,AllReduce (GB/s),"
    "AllGather (GB/s),ReduceScatter (GB/s),AR Intra-node (GB/s),AG Intra-node (GB/s),"
    "RS Intra-node (GB/s),Mem Alloc (GB),Mem Res (GB),dp,pp,tp,pp_engine,tp_mode,tp_async_comm,"
    "hidden_size,hidden_act,num_layers,num_heads,num_kv_heads,max_pos,vocab_size,"
    "tie_word_embeddings,dtype,zero_stage,ddp_bucket_cap_mb,accumulate_grad_in_fp32,"
    "Total Params,Local Params,date,status,log_file,oom_error,Total Params Numeric,num_params,"
    "mfu,after_pp_fix"
)
"""The real header line of ``bench_final2_mfu2.csv``."""
MIB_256 = 268_435_456
NET = list(NETWORK_COLUMNS)
REAL = Path("sweeps/hf_ultrascale_playbook/bench_final2_mfu2.csv")


def _line(
    job: int,
    name: str,
    nodes: float,
    status: str,
    net: list[str],
    *,
    date: str = "",
    log_file: str = "",
) -> str:
    cols = HEADER.split(",")
    row = dict.fromkeys(cols, "")
    row.update(
        {
            "job_id": str(job),
            "name": name,
            "nodes": str(nodes),
            "status": status,
            "date": date,
            "log_file": log_file,
            "dtype": "torch.bfloat16",
        }
    )
    row.update(dict(zip(NET, net, strict=True)))
    return ",".join(row[c] for c in cols)


@pytest.fixture
def synthetic_csv(tmp_path: Path) -> Path:
    """A synthetic Playbook table (made-up values): a 1-node run, a 2-node run, an OOM run with
    no bandwidths, and a completed run whose values are zero, non-numeric or empty."""
    lines = [
        HEADER,
        _line(
            11,
            "1.34G_synthetic_a",
            1.0,
            "Success",
            ["457", "262", "261", "456", "263", "262.5"],
            date="2025-01-08 17:59:27",
        ),
        _line(
            22,
            "8.86G_synthetic_b",
            2.0,
            "Success",
            ["340", "168", "164", "427", "243", "243.5"],
            log_file="logs/22-bench-2024-12-01-10-11-12-x.out",
        ),
        _line(33, "8.86G_synthetic_c", 4.0, "OOM", [""] * 6),
        _line(44, "1.34G_synthetic_d", 1.0, "Success", ["0", "n/a", "", "", "", ""]),
    ]
    path = tmp_path / "synthetic_playbook.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_synthetic_rows_every_column(synthetic_csv: Path) -> None:
    df, report = parse_playbook_network(synthetic_csv)
    validate_microbench(df)
    assert list(df.columns) == list(MICROBENCH_COLUMNS)
    assert len(df) == 12 and report.rows_read == 24 and len(report.skips) == 12
    ops = ["all_reduce", "all_gather", "reduce_scatter"] * 2
    for job, name, nodes, values, date in (
        (11, "1.34G_synthetic_a", 1, [457, 262, 261, 456, 263, 262.5], "2025-01-08 17:59:27"),
        (22, "8.86G_synthetic_b", 2, [340, 168, 164, 427, 243, 243.5], "2024-12-01 10:11:12"),
    ):
        rows = df[df["run_id"] == f"{job}/{name}"].reset_index(drop=True)
        assert rows["op"].tolist() == ops
        assert rows["group_size"].tolist() == [8.0 * nodes] * 3 + [8.0] * 3
        assert rows["nodes"].tolist() == [float(nodes)] * 3 + [1.0] * 3
        assert rows["detail"].tolist() == [
            f"nanotron start-of-run measurement, column {c}" for c in NET
        ]
        assert np.allclose(rows["busbw_bytes_per_s"], np.array(values) * 1e9)
        factor = np.array(
            [float(bus_factor(o, g)) for o, g in zip(rows["op"], rows["group_size"], strict=True)]
        )
        assert np.allclose(rows["busbw_bytes_per_s"] / rows["algbw_bytes_per_s"], factor)
        assert np.allclose(rows["time_s"], MIB_256 / rows["algbw_bytes_per_s"])
        assert (rows["size_bytes"] == MIB_256).all()
        assert (rows["dtype"] == "bf16").all() and (rows["layout"] == "contiguous").all()
        assert rows["in_place"].isna().all()
        assert rows[["m", "n", "k", "batch", "flops_per_s"]].isna().all().all()
        assert (rows["hardware"] == "H100-SXM-80GB").all()
        assert (rows["source"] == "hf_ultrascale_playbook").all()
        assert (rows["file"] == "synthetic_playbook.csv").all()
        assert (rows["date"] == date).all()
    # 2 nodes, whole job: 16 GPUs, all_reduce busbw 340 GB/s = algbw x 2 x 15/16
    two = df[(df["run_id"] == "22/8.86G_synthetic_b") & (df["op"] == "all_reduce")]
    assert math.isclose(two["algbw_bytes_per_s"].iloc[0], 340e9 / (2 * 15 / 16))


def test_synthetic_skips_are_counted_with_line_and_reason(synthetic_csv: Path) -> None:
    _, report = parse_playbook_network(synthetic_csv)
    lines = [s.line for s in report.skips]
    assert lines == [4] * 6 + [5] * 6
    reasons = report.reasons()
    assert reasons["no network measurement: the run did not complete (status not Success)"] == 6
    assert reasons["AllReduce (GB/s) must be a positive number, got '0'"] == 1
    assert reasons["AllGather (GB/s) must be a number, got 'n/a'"] == 1
    assert sum(n for r, n in reasons.items() if "empty on a completed run" in r) == 4


def test_repeated_run_and_missing_column(tmp_path: Path, synthetic_csv: Path) -> None:
    text = synthetic_csv.read_text().splitlines()
    twice = tmp_path / "twice.csv"
    twice.write_text("\n".join([*text[:3], text[1]]) + "\n")
    df, report = parse_playbook_network(twice)
    assert len(df) == 12 and [s.line for s in report.skips] == [4] * 6
    assert report.skips[0].reason == "repeats run 11/1.34G_synthetic_a of line 2"
    broken = tmp_path / "broken.csv"
    broken.write_text(text[0].replace("AllGather (GB/s)", "AG") + "\n" + text[1] + "\n")
    with pytest.raises(DataError, match="need the columns AllGather"):
        parse_playbook_network(broken)


def test_cli_network_flag(
    tmp_path: Path, synthetic_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    into = tmp_path / "mb.parquet"
    assert main(["ingest", str(synthetic_csv), "--into", str(into), "--network"]) == 0
    out = capsys.readouterr().out
    assert "read 24 rows from 1 file(s), skipped 12" in out
    assert "12 given" in out and "12 rows now" in out
    table = validate_microbench(pd.read_parquet(into))
    assert len(table) == 12 and set(table["source"]) == {"hf_ultrascale_playbook"}
    # --network refuses other formats
    nccl = Path(__file__).resolve().parent / "fixtures" / "mbench_nccl_2node_excerpt.log"
    assert (
        main(["ingest", str(nccl), "--into", str(into), "--network", "--format", "nccl-tests"]) == 2
    )
    err = capsys.readouterr().err
    assert (
        err.startswith(
            "error: --network reads the per-run network measurements of a Playbook table;"
        )
        and "is nccl-tests output" in err
    )


def test_real_file_counts_and_medians() -> None:
    from surrogate.io.datasource import data_dir

    path = data_dir() / REAL
    if not path.exists():
        pytest.skip(f"the shared Playbook data is absent ({path}); run `surrogate data fetch`")
    df, report = parse_playbook_network(path)
    rows = len(pd.read_csv(path, usecols=["job_id"]))
    assert report.rows_read == 6 * rows
    assert len(df) + len(report.skips) == 6 * rows
    validate_microbench(df)
    whole_ar = df[(df["op"] == "all_reduce") & ~df["detail"].str.contains("Intra-node")]
    med = whole_ar.groupby("nodes")["busbw_bytes_per_s"].median()
    from_two = med[med.index >= 2].sort_index()
    assert len(from_two) >= 5
    assert from_two.is_monotonic_decreasing, from_two.to_dict()


def test_the_runs_carry_their_cluster_and_the_network_each_measured(tmp_path: Path) -> None:
    excerpt = Path(__file__).resolve().parents[1] / "fixtures" / "sweeps_playbook_excerpt.csv"
    runs, _ = parse_playbook_runs(excerpt)
    assert (runs["profile"] == PROFILE).all() and (runs["peak_mem_stage"] == 0.0).all()
    expected = runs["run_id"].map(measured_net_scale(parse_playbook_network(excerpt)[0]))
    pd.testing.assert_series_equal(runs["net_scale"], expected, check_names=False)
    assert runs["net_scale"].notna().any()
    # without the network columns every run is explained under its profile's curve, noted
    bare = tmp_path / "bare.csv"
    pd.read_csv(excerpt, dtype=str).drop(columns=NET).to_csv(bare, index=False)
    plain, report = parse_playbook_runs(bare)
    assert plain["net_scale"].isna().all() and (plain["profile"] == PROFILE).all()
    assert any("no network columns" in n for n in report.notes)
