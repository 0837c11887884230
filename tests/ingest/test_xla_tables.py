"""XLA perf-table parser: excerpts of both tables, the text-proto reader, the public files."""

from __future__ import annotations

from pathlib import Path

import pytest

from surrogate.errors import DataError
from surrogate.ingest.textproto import parse_textproto
from surrogate.ingest.xla_tables import parse_xla_table
from surrogate.runs.microbench_table import validate_microbench

FIX = Path(__file__).parent / "fixtures"


def test_matmul_excerpt() -> None:
    df, rep = parse_xla_table(FIX / "mbench_xla_matmul_excerpt.txtpb")
    validate_microbench(df)
    assert rep.rows_read == len(df) == 15 and not rep.skips
    bf16 = df[(df["dtype"] == "bf16") & (df["m"] == 256) & (df["n"] == 256)].iloc[0]
    assert bf16["flops_per_s"] == 6721641025641
    assert bf16["time_s"] == pytest.approx(2 * 256**3 / 6721641025641)
    assert set(df["dtype"]) == {"bf16", "f32", "fp8"}
    assert (df["hardware"] == "H100-SXM-80GB").all() and (df["run_id"] == "xla:sm_90").all()


def test_collective_excerpt_sizes_follow_nccl_tests() -> None:
    df, _ = parse_xla_table(FIX / "mbench_xla_collective_excerpt.txtpb")
    validate_microbench(df)
    by_op = {str(r["op"]): r for r in df.to_dict("records")}
    # all-gather: the shape is the gathered output, 4096 F32 = 16 KiB; throughput is algbw
    assert by_op["all_gather"]["size_bytes"] == 16384 and by_op["all_gather"]["group_size"] == 2
    # reduce-scatter: the shape is one rank's part (512 F32), the input is 8 x that
    assert by_op["reduce_scatter"]["size_bytes"] == 512 * 4 * 8
    assert by_op["send_recv"]["group_size"] == 2
    assert by_op["send_recv"]["layout"] == "contiguous"
    r = by_op["all_reduce"]
    assert r["time_s"] == pytest.approx(r["size_bytes"] / r["algbw_bytes_per_s"])
    assert r["busbw_bytes_per_s"] == pytest.approx(r["algbw_bytes_per_s"] * 2 * 7 / 8)


def test_device_filter_and_truncation(tmp_path: Path) -> None:
    df, rep = parse_xla_table(FIX / "mbench_xla_matmul_excerpt.txtpb", devices=("sm_100_B200",))
    assert df.empty and "not asked for" in rep.skips[0].reason
    text = (FIX / "mbench_xla_matmul_excerpt.txtpb").read_text()
    p = tmp_path / "cut.txtpb"
    p.write_text(text[: len(text) // 2])
    with pytest.raises(DataError, match="ends early"):
        parse_xla_table(p)


def test_entry_without_fields_is_skipped_with_line(tmp_path: Path) -> None:
    p = tmp_path / "t.txtpb"
    p.write_text(
        'entries {\n  key: "sm_90"\n  value {\n    entries {\n      b: 1\n'
        "      m: 256\n    }\n  }\n}\n"
    )
    df, rep = parse_xla_table(p)
    assert df.empty and rep.skips[0].line == 4 and "'n'" in rep.skips[0].reason


def test_textproto_reader_forms() -> None:
    msg = parse_textproto(
        'a: 1 b: -2.5e3 c: "x\\"y" "z" d: true e: F32 f { g: [1, 2] } '
        "f: < g: 3 > # comment\n h: inf"
    )
    assert msg.one("a") == 1 and msg.one("b") == -2500.0 and msg.one("c") == 'x"yz'
    assert msg.one("d") is True and msg.one("e") == "F32" and msg.one("h") == float("inf")
    assert [m.all("g") for m in msg.messages("f")] == [[1, 2], [3]]
    with pytest.raises(DataError, match=r"<text>:1: expected ':' or '\{'"):
        parse_textproto("a 1")


def test_public_tables(mbench_data_dir: Path) -> None:
    xla = mbench_data_dir / "microbench" / "xla"
    df, _ = parse_xla_table(xla / "default_collective_perf_table.txtpb", devices=("sm_90",))
    validate_microbench(df)
    assert len(df) == 330 and set(df["group_size"]) == {2.0, 4.0, 8.0}
    assert df.groupby("op")["size_bytes"].agg(["min", "max"]).eq([1024, 2**31]).all().all()
