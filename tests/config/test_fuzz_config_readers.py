"""Property-based fuzzing of the readers of user files (hypothesis), called directly: a
configuration file (``surrogate.config.files``), a Hugging Face ``config.json``
(``surrogate.config.hf_config``), a CSV table (``surrogate.io.tableio``) and the Playbook CSV parser
(``surrogate.ingest.playbook``) with ``surrogate ingest``'s append behind it.

Property: a reader returns what the file says, or raises the project's error for that input
(ConfigError or DataError, whose message the CLI prints as one line); never another exception,
never a value read differently from the file, never a row dropped without a counted skip.
Examples are derandomized (``tests/cli/test_fuzz.py`` says how to explore further).
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from surrogate.config.files import FILE_KEYS, SECTION_KEYS
from surrogate.config.hf_config import model_from_hf_config
from surrogate.config.training import CONFIG_COLUMNS
from surrogate.errors import ConfigError, DataError
from surrogate.ingest.config_file import read_config_file
from surrogate.io.tableio import read_table

SCALE = max(1, int(os.environ.get("SURROGATE_FUZZ_EXAMPLES", "1")))
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "surrogate-hypothesis")
"""hypothesis caches what it learns in .hypothesis/ of the working directory: not the checkout."""


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        derandomize=SCALE == 1,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@contextmanager
def file_with(name: str, text: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="surrogate-fuzz-") as d:
        path = Path(d) / name
        path.write_text(text)
        yield path


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.sampled_from([0, 8, 2**53 + 1, 10**400, -1, 4.0, 2.5, "8b", "true", "evil[/]x"]),
    st.text(max_size=10),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
keys = st.one_of(
    st.sampled_from(FILE_KEYS),
    st.sampled_from(["zero", "grad-accum", "foo", ""]),
    st.text(max_size=8),
)


# ------------------------------------------------------------------------ configuration files
@fuzz(200)
@given(st.dictionaries(keys, values, max_size=6), st.sampled_from([".yaml", ".json"]))
def test_config_file_reads_every_key_or_refuses(data: dict[str, Any], suffix: str) -> None:
    """A flat file comes back key for key; nothing is dropped or renamed silently."""
    text = json.dumps(data) if suffix == ".json" else yaml.safe_dump(data)
    with file_with(f"run{suffix}", text) as path:
        try:
            flat = read_config_file(path)
        except ConfigError as e:
            assert str(e)
            return
    expected: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTION_KEYS and isinstance(value, dict):
            expected.update(value)
        else:
            expected[key] = value
    assert set(flat) == set(expected)
    for k, v in flat.items():  # NaN != NaN: compare the JSON text
        assert json.dumps(v, sort_keys=True) == json.dumps(expected[k], sort_keys=True)


@fuzz(150)
@given(
    st.text(max_size=300)
    | st.sampled_from(
        [
            "a: &a [*a]",
            "!!python/object/apply:os.system ['true']",
            "dp: !!binary aGVsbG8=",
            "? [1, 2]\n: 3",
            "dp: 8\ndp: 8",
            "model: {dp: 1}\nlayout: {dp: 2}",
            '{"dp": NaN}',
            "dp: 1\n" + "x: &x [" + ", ".join(["*x"] * 3) + "]",
            # merge keys, at the top and in a section, with a key of the mapping over a merged one
            "<<: {dp: 2, tp: 4}\ndp: 8",
            "x-c: &c {num_nodes: 2}\ncluster: {<<: *c, gpus_per_node: 4}",
            "<<: [{dp: 2}, {pp: 2}]\nmbs: 1",
            "<<: *nothing",
            "<<: 5",
            # aliases that expand past the bound, under a key the reader knows
            "\n".join(
                [
                    f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 7) + "]"
                    if i
                    else "l0: &l0 [7, 7, 7, 7, 7, 7, 7]"
                    for i in range(7)
                ]
            )
            + "\nname: *l6",
        ]
    ),
    st.sampled_from([".yaml", ".json", ".yml", ".txt"]),
)
def test_config_file_raw_text(text: str, suffix: str) -> None:
    with file_with(f"run{suffix}", text) as path:
        try:
            flat = read_config_file(path)
        except ConfigError:
            return
    assert isinstance(flat, dict)
    assert all(k in FILE_KEYS for k in flat)


@fuzz(60)
@given(
    st.dictionaries(
        st.sampled_from(["dp", "tp", "pp", "mbs", "grad_accum", "zero_stage"]),
        st.integers(1, 64),
        min_size=1,
        max_size=4,
    ),
    st.dictionaries(
        st.sampled_from(["dp", "tp", "pp", "mbs", "grad_accum", "zero_stage"]),
        st.integers(1, 64),
        max_size=3,
    ),
    st.sampled_from(["top", "layout"]),
)
def test_yaml_merge_keys_merge_as_yaml_says(
    base: dict[str, int], own: dict[str, int], where: str
) -> None:
    """``<<: *base`` merges the anchored mapping; a key of the mapping itself wins."""
    body = "".join(f"  {k}: {v}\n" for k, v in own.items())
    inner = "".join(f"  {k}: {v}\n" for k, v in base.items())
    if where == "top":
        text = f"x-base: &base\n{inner}<<: *base\n" + body.replace("  ", "")
    else:
        text = f"x-base: &base\n{inner}layout:\n  <<: *base\n{body}"
    with file_with("run.yaml", text) as path:
        flat = read_config_file(path)
    assert flat == {**base, **own}


@pytest.mark.parametrize("depth,fan", [(6, 10), (12, 3), (30, 2)])
def test_alias_expansion_is_bounded_before_anything_is_built(depth: int, fan: int) -> None:
    """A file of a few hundred bytes whose aliases expand to fan**depth values (up to 10**9)
    is refused at once, in a message of ordinary length."""
    import time

    lines = ["a0: &a0 [" + ", ".join(["x"] * fan) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan) + "]" for i in range(1, depth)]
    with file_with("run.yaml", "\n".join([*lines, f"model: *a{depth - 1}"]) + "\n") as path:
        start = time.perf_counter()
        with pytest.raises(ConfigError, match=r"expands to more than 10,000 values") as e:
            read_config_file(path)
    assert time.perf_counter() - start < 2 and len(str(e.value)) < 300


# ------------------------------------------------------------------------ Hugging Face configs
LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}
DEEPSEEK: dict[str, Any] = {
    "model_type": "deepseek_v3",
    "num_hidden_layers": 61,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 4096,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048,
    "n_shared_experts": 1,
    "first_k_dense_replace": 3,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}
QWEN2_MOE: dict[str, Any] = {
    "model_type": "qwen2_moe",
    "num_hidden_layers": 24,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "vocab_size": 151936,
    "max_position_embeddings": 8192,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}
MISTRAL: dict[str, Any] = {**LLAMA, "model_type": "mistral", "sliding_window": 4096}
GEMMA: dict[str, Any] = {
    **LLAMA,
    "model_type": "gemma",
    "head_dim": 256,
    "hidden_size": 3072,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
}
GEMMA.pop("tie_word_embeddings")
BASES = {
    "llama": LLAMA,
    "deepseek_v3": DEEPSEEK,
    "qwen2_moe": QWEN2_MOE,
    "mistral": MISTRAL,
    "gemma": GEMMA,
}
READ_AS: dict[str, str] = {
    "num_hidden_layers": "num_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_heads",
    "vocab_size": "vocab_size",
}
"""Keys every family reads unchanged into a ModelConfig field."""


@fuzz(250)
@given(
    st.sampled_from(sorted(BASES)),
    st.dictionaries(
        st.sampled_from(
            sorted(
                {k for b in BASES.values() for k in b}
                | {"head_dim", "use_sliding_window", "layer_types"}
            )
        )
        | st.text(max_size=6),
        values | st.sampled_from([4096.7, 4096.0, "4096", "false", 0, -8, None]),
        max_size=3,
    ),
    st.none() | st.integers(-5, 2**20) | st.sampled_from([2**60, 10**400, True, 4096.0, "4096"]),
)
def test_hf_config_reads_what_the_file_says_or_refuses(
    family: str, changes: dict[str, Any], seq_len: Any
) -> None:
    cfg = {**BASES[family], **changes}
    with file_with("config.json", json.dumps(cfg)) as path:
        try:
            model = model_from_hf_config(path, seq_len=seq_len)
        except ConfigError as e:
            assert str(path) in str(e) or "--hf-config" in str(e) or "seq_len" in str(e), e
            return
    for key, field in READ_AS.items():
        assert getattr(model, field) == cfg[key], (key, cfg[key], getattr(model, field))
    assert model.tie_embeddings is cfg.get("tie_word_embeddings", family == "gemma")
    kv = cfg.get("num_key_value_heads")
    assert model.num_kv_heads == (cfg["num_attention_heads"] if kv is None else kv)
    assert model.seq_len == (cfg["max_position_embeddings"] if seq_len is None else seq_len)
    if family.startswith("deepseek"):
        assert model.num_experts == cfg["n_routed_experts"] and model.kv_lora_rank > 0


@fuzz(80)
@given(
    st.text(max_size=200)
    | st.sampled_from(
        ["[]", "null", "{", "1e999", '"llama"', '{"model_type": "llama", "model_type": 1}']
    )
)
def test_hf_config_raw_text(text: str) -> None:
    with file_with("config.json", text) as path, pytest.raises(ConfigError):
        model_from_hf_config(path)


# ------------------------------------------------------------------------ CSV tables
names = st.one_of(st.sampled_from(CONFIG_COLUMNS), st.text(max_size=6))


@fuzz(150)
@given(
    st.lists(names, min_size=1, max_size=6),
    st.lists(st.lists(st.text(max_size=6), min_size=0, max_size=7), max_size=4),
)
def test_csv_tables_never_shift_or_rename_columns(header: list[str], rows: list[list[str]]) -> None:
    """A header that names a column twice, or a row with a value past the header's columns, is
    refused; any other CSV reads with exactly the header's columns (pandas would rename a
    repeated one ``NAME.1``, or take a first column for the index and shift the others)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    with file_with("t.csv", buf.getvalue()) as path:
        try:
            df = read_table(path)
        except DataError as e:
            message = str(e)
            if len(set(header)) < len(header):
                assert "each column must appear once" in message
            elif any(any(v.strip() for v in r[len(header) :]) for r in rows):
                assert "a value without a column" in message
            return
    assert len(set(header)) == len(header)
    assert not any(any(v.strip() for v in r[len(header) :]) for r in rows)
    assert len(df.columns) == len(header)
    named = [(h, str(c)) for h, c in zip(header, df.columns, strict=True) if h.strip()]
    assert all(h == c for h, c in named), named


# ------------------------------------------------------------------------ the Playbook parser
PLAYBOOK_HEADER = next(
    csv.reader(
        [
            "job_id,name,nodes,seq_len,mbs,batch_accum,gbs,mTFLOPs,hTFLOPs,tok/s/gpu,"
            "Mem Alloc (GB),Mem Res (GB),dp,pp,tp,tp_mode,hidden_size,num_layers,num_heads,"
            "num_kv_heads,vocab_size,"
            "tie_word_embeddings,zero_stage,date,status,log_file,mfu,after_pp_fix"
        ]
    )
)
PLAYBOOK_ROW = next(
    csv.reader(
        [
            "14113488,1.34G_dp8_tp1_pp1_acc16_mbs2_seq4096_zero0_tpmodeRED_vocab131k,1.0,4096,2,16.0,"
            "256.0,388.0,388.0,40149.94,25.07,50.18,8,1,1,REDUCE_SCATTER,2048,16,32,32.0,131072,True,0,"
            ",Success,logs/14113488-bench.out,39.17,True"
        ]
    )
)
playbook_cells = st.one_of(
    st.sampled_from(
        [
            "",
            "0",
            "-1",
            "1",
            "2",
            "8",
            "16",
            "1.5",
            "nan",
            "inf",
            "-inf",
            "1e400",
            "9" * 30,
            "abc",
            "True",
            "False",
            "OOM",
            "Other",
            "Success",
            "Running",
            "1.34G_x",
            "469G_dp1",
            "ALL_REDUCE",
        ]
    ),
    st.integers(-(2**40), 2**40).map(str),
    st.text(max_size=6),
)


@st.composite
def playbook_tables(draw: st.DrawFn) -> tuple[str, int]:
    """(CSV text, data rows): the real header and one real row, copied with cells changed
    and sometimes a column dropped or repeated."""
    header = list(PLAYBOOK_HEADER)
    n = draw(st.integers(1, 5))
    rows = [list(PLAYBOOK_ROW) for _ in range(n)]
    for i, row in enumerate(rows):
        row[0] = str(14113488 + i)  # distinct runs unless a change says otherwise
        for _ in range(draw(st.integers(0, 3))):
            row[draw(st.integers(0, len(row) - 1))] = draw(playbook_cells)
    shape = draw(st.integers(0, 9))
    if shape == 0:
        col = draw(st.integers(0, len(header) - 1))
        header.pop(col)
        rows = [r[:col] + r[col + 1 :] for r in rows]
    elif shape == 1:
        col = draw(st.integers(0, len(header) - 1))
        header.append(header[col])
        rows = [[*r, r[col]] for r in rows]
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue(), n


@fuzz(80)
@given(playbook_tables())
def test_playbook_rows_are_ingested_or_counted(table: tuple[str, int]) -> None:
    """rows in = rows ingested + rows skipped (each with a reason), through the same append
    as ``surrogate ingest``; a malformed table is a DataError."""
    from surrogate.ingest.dispatch import ingest
    from surrogate.runs.sweep_files import read_sweeps

    text, n = table
    with tempfile.TemporaryDirectory(prefix="surrogate-fuzz-") as d:
        src, into = Path(d) / "bench.csv", Path(d) / "t.parquet"
        src.write_text(text)
        try:
            result = ingest([src], into, fmt="playbook")
        except (DataError, ConfigError) as e:
            assert str(e)
            return
        # every run kept counts, those flagged for a layout the validator rejects included
        stored = len(read_sweeps(into, flagged=True)) if into.exists() else 0
    report = result.report
    assert report.rows_read == n
    assert stored + len(report.skips) == n, (stored, [str(s) for s in report.skips])
    assert all(s.reason for s in report.skips)


# ------------------------------------------------------------------------ tracking stores
@fuzz(80)
@given(
    st.one_of(
        st.text(max_size=30),
        st.sampled_from(
            [
                "",
                "mlruns",
                "file:",
                "sqlite://",
                "sqlite:///",
                "sqlite:////",
                "sqlite:///:memory:",
                "http://",
                "https://:0",
                "http://[::1",
                "mysql://",
                "postgresql://u@/db",
                "databricks",
                "s3://bucket/x",
                "sqlite:///a\x00b",
                "http://127.0.0.1:0",
                "ftp://x",
                "sqlite:///{tmp}",
                "sqlite:///{tmp}/x/y.db",
                "file:///{tmp}/store",
                "{tmp}/store",
            ]
        ),
    )
)
def test_tracking_store_check_answers_or_refuses(uri: str) -> None:
    """Any MLFLOW_TRACKING_URI: accepted, or a ConfigError (one line by the CLI); never
    another exception, never a wait beyond the check's timeout."""
    import time

    from surrogate.io.tracking import check_store

    with tempfile.TemporaryDirectory(prefix="surrogate-fuzz-") as d:
        start = time.perf_counter()
        try:
            assert check_store(uri.replace("{tmp}", d), timeout_s=1.0)
        except ConfigError as e:
            assert str(e) and "\n" not in str(e).strip()
        assert time.perf_counter() - start < 5
