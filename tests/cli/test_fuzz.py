"""Property-based fuzzing of the CLI (hypothesis): every input, however hostile, either predicts
(exit 0, a sane answer: MFU in (0, 1], finite positive throughput, finite breakdowns, the
configuration asked for) or exits 2 with one line on stderr; never a traceback, exit 1 or a
signal.

Inputs: ``surrogate predict`` option values (numbers, huge numbers, negatives, floats for
integers, text, rich markup, values that look like options), unknown options and commands,
missing values; ``--config`` YAML/JSON files of random keys, values and types (and raw text);
``--hf-config`` JSON of each supported family with fields removed, retyped or added;
``--from-csv`` tables with random, duplicated and near-miss columns and bad cells.

The CLI runs in-process (:func:`surrogate.cli.main`, as ``tests/cli/test_predict_cli.py``
does) to stay fast; :func:`test_real_processes_never_crash` runs a few inputs as real
processes, where a crash of a native library would show as a signal. Examples are derandomized
(the same on every run, so CI is stable); ``SURROGATE_FUZZ_EXAMPLES=N`` (N > 1) multiplies
their number and draws them at random, for a longer exploration.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from surrogate.cli import main
from surrogate.config.files import FILE_KEYS
from surrogate.config.training import CONFIG_COLUMNS

SCALE = max(1, int(os.environ.get("SURROGATE_FUZZ_EXAMPLES", "1")))
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "surrogate-hypothesis")
"""hypothesis caches what it learns in .hypothesis/ of the working directory: not the checkout."""


def fuzz(examples: int) -> settings:
    """Derandomized settings (module docstring), no example database (nothing is written into
    the checkout), no deadline (the first call loads the learned model)."""
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        derandomize=SCALE == 1,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@dataclass(frozen=True)
class Outcome:
    rc: int
    out: str
    err: str
    warned: tuple[str, ...]


def invoke(argv: Sequence[str]) -> Outcome:
    """Run the CLI in-process, capturing stdout, stderr and the warnings raised."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc = main(list(argv))
    numeric = tuple(
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if issubclass(w.category, RuntimeWarning)
    )
    return Outcome(rc, out.getvalue(), err.getvalue(), numeric)


def assert_refused_or_answered(o: Outcome, *, output_kept: str | None = None) -> bool:
    """Exit 2 with one line 'error: ...' on stderr and nothing on stdout, or exit 0 without
    numeric warnings (an overflow or a NaN on the way to an answer). True if it answered.
    ``output_kept``: the start of the error after which the command's output was printed
    anyway (what it computed before failing is never lost)."""
    assert o.rc in (0, 2), f"exit {o.rc}\nstdout: {o.out[-1500:]}\nstderr: {o.err[-1500:]}"
    if o.rc == 2:
        lines = o.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), o.err
        if output_kept is None or not lines[0].startswith(output_kept):
            assert o.out == "", o.out[-1500:]
        return False
    assert not o.warned, o.warned
    return True


def assert_sane_prediction(d: dict[str, Any]) -> None:
    """What any answer must satisfy: MFU in (0, 1], positive finite throughput, finite
    non-negative breakdowns, probabilities in [0, 1], an interval around the MFU."""
    assert 0 < d["mfu"] <= 1, d["mfu"]
    assert math.isfinite(d["tokens_per_s_per_gpu"]) and d["tokens_per_s_per_gpu"] > 0
    for part in ("memory_gib", "step_time_s"):
        for k, v in d[part].items():
            assert math.isfinite(v) and v >= 0, (part, k, v)
    assert d["step_time_s"]["total"] > 0
    assert 0 <= d["p_oom"] <= 1 and 0 <= d["bubble_frac"] < 1
    assert math.isfinite(d["capacity_gib"]) and d["capacity_gib"] > 0
    if d["mfu_lo"] is not None:
        assert 0 <= d["mfu_lo"] <= d["mfu"] <= d["mfu_hi"] <= 1, (d["mfu_lo"], d["mfu_hi"])
    assert d["pred_status"] in ("completed", "oom", "fail")


@contextmanager
def scratch() -> Iterator[Path]:
    """A temporary directory per example (pytest's tmp_path is one per test function)."""
    with tempfile.TemporaryDirectory(prefix="surrogate-fuzz-") as d:
        yield Path(d)


# ------------------------------------------------------------------------ hostile values
BASE = [
    "predict",
    "--model",
    "8b",
    "--nodes",
    "4",
    "--dp",
    "8",
    "--tp",
    "4",
    "--mbs",
    "1",
    "--grad-accum",
    "8",
]
"""A valid configuration the examples add options to (click keeps the last of a repeated
option, so an added option replaces the base's value)."""

INT_OPTIONS: dict[str, str] = {
    "--nodes": "num_nodes",
    "--gpus-per-node": "gpus_per_node",
    "--dp": "dp",
    "--tp": "tp",
    "--pp": "pp",
    "--cp": "cp",
    "--ep": "ep",
    "--vpp": "vpp",
    "--mbs": "mbs",
    "--grad-accum": "grad_accum",
    "--zero": "zero_stage",
    "--num-layers": "num_layers",
    "--hidden-size": "hidden_size",
    "--ffn-hidden-size": "ffn_hidden_size",
    "--num-heads": "num_heads",
    "--num-kv-heads": "num_kv_heads",
    "--vocab-size": "vocab_size",
    "--seq-len": "seq_len",
    "--num-experts": "num_experts",
    "--experts-topk": "experts_topk",
    "--moe-ffn-hidden-size": "moe_ffn_hidden_size",
    "--global-batch-seqs": "global_batch_seqs",
}
"""Integer options and the configuration column each sets."""
TEXT_OPTIONS: dict[str, list[str]] = {
    "--model": ["8b", "70b", "1.34b", "469b", "mixtral-8x7b", "llama3-405b", "7b"],
    "--gpu": ["H100", "H100-SXM-80GB", "A100-40GB", "A100", "B200", "H200", "H900", "h100"],
    "--recompute": ["none", "selective", "full", "FULL", "partial"],
    "--dtype": ["bf16", "fp8", "fp16", "fp32"],
    "--framework": ["nanotron", "torchtitan", "megatron", "deepspeed", "llm-foundry"],
    "--framework-version": ["pp-fix", "pre-pp-fix", "1.0", "newest"],
}
"""Text options with plausible (valid and invalid) values."""
SWITCHES = [
    "--tie-embeddings",
    "--no-tie-embeddings",
    "--sequence-parallel",
    "--no-sequence-parallel",
    "--analytic",
    "--explain",
]
HOSTILE = [
    "",
    " ",
    "0",
    "-0",
    "-1",
    "1",
    "2",
    "3",
    "8",
    "64",
    "4.0",
    "2.5",
    "1e3",
    "1E400",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "0x10",
    "0b11",
    "1_0",
    " 2",
    "2 ",
    "+4",
    "٣",
    "２",
    str(2**31),
    str(2**53),
    str(2**53 + 1),
    str(2**63),
    str(2**64),
    "9" * 30,
    "9" * 400,
    "-" + "9" * 400,
    "abc",
    "true",
    "none",
    "null",
    "evil[/]model",
    "[red]x[/red]",
    "[/]",
    "\x1b[31mred",
    "--tp",
    "-",
    "--",
    "=",
    "'",
    '"',
    "\\",
    "%s",
    "{}",
    "8b",
    "H100",
    "full",
]
"""Values a careless or hostile user types."""

hostile_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(repr),
    st.text(max_size=12),
)
plausible_int = st.one_of(
    st.sampled_from([0, 1, 2, 3, 4, 8, 16, 32, 64, 128, 256]),
    st.integers(1, 2**20),
    st.sampled_from([10**6, 10**7, 10**8, 2**40, 10**12, 2**53, 2**53 + 1, 10**20]),
).map(str)
"""Integers from the usual to the far outside (10^6 nodes, seq_len 10^7, vocab 10^12)."""


@st.composite
def option_pairs(draw: st.DrawFn) -> list[str]:
    """One option and a value: an integer option with a plausible or hostile value, a text
    option with a plausible or hostile value, or a switch."""
    kind = draw(st.sampled_from(["int", "int", "int", "text", "switch"]))
    if kind == "switch":
        return [draw(st.sampled_from(SWITCHES))]
    if kind == "int":
        option = draw(st.sampled_from(sorted(INT_OPTIONS)))
        value = draw(st.one_of(plausible_int, plausible_int, hostile_text))
    else:
        option = draw(st.sampled_from(sorted(TEXT_OPTIONS)))
        value = draw(st.one_of(st.sampled_from(TEXT_OPTIONS[option]), hostile_text))
    return [f"{option}={value}"] if draw(st.booleans()) else [option, value]


def _asked(pairs: list[list[str]]) -> dict[str, int]:
    """The integer columns the added options ask for (the last of a repeated option wins, as
    click reads them) where the value is a plain decimal integer; an option given another
    value is left out."""
    asked: dict[str, int] = {}
    for pair in pairs:
        option, value = pair if len(pair) == 2 else (*pair[0].partition("=")[::2],)
        if option not in INT_OPTIONS:
            continue
        if re.fullmatch(r"\s*[+-]?\d+\s*", value):
            asked[INT_OPTIONS[option]] = int(value)
        else:
            asked.pop(INT_OPTIONS[option], None)
    return asked


@fuzz(120)
@given(st.lists(option_pairs(), min_size=1, max_size=4))
@example([["--mbs", "9" * 400]])  # found: an OverflowError traceback
@example([["--vocab-size", str(2**53 + 1)]])  # found: predicted for 2**53
def test_predict_options(pairs: list[list[str]]) -> None:
    """Random option values on a valid base: refused in one line, or answered sanely with the
    configuration asked for (never a value read differently from what was typed)."""
    extra = [a for pair in pairs for a in pair]
    o = invoke([*BASE, *extra, "--json"])
    if not assert_refused_or_answered(o):
        return
    d = json.loads(o.out)
    assert_sane_prediction(d)
    for column, value in _asked(pairs).items():
        if column != "global_batch_seqs":
            assert d["config"][column] == value, (column, value, d["config"][column])


@fuzz(60)
@given(
    st.lists(option_pairs(), min_size=1, max_size=3),
    st.text(max_size=30).filter(lambda s: "\x00" not in s),
)
def test_predict_tables(pairs: list[list[str]], name: str) -> None:
    """The table output of the same inputs, with a model name of arbitrary text (rich markup
    included) that must print as written."""
    extra = [a for pair in pairs for a in pair]
    with scratch() as d:
        path = d / "run.yaml"
        path.write_text(yaml.safe_dump({"name": name}))
        o = invoke([*BASE, "--config", str(path), *extra])
    if not assert_refused_or_answered(o):
        return
    mfu = re.search(r"MFU: (\d+(?:\.\d+)?)%", o.out)
    assert mfu is not None and 0 < float(mfu.group(1)) <= 100, o.out[-800:]
    shown = name.strip() or "custom"
    if name == name.strip() and "\n" not in name and len(name) < 20 and name.isprintable():
        assert shown in " ".join(o.out.split()) or shown in o.out, (shown, o.out[:300])


@fuzz(100)
@given(
    st.one_of(
        st.lists(st.sampled_from(HOSTILE) | st.text(max_size=15), min_size=1, max_size=4),
        st.tuples(
            st.sampled_from(
                [
                    "predict",
                    "search",
                    "ingest",
                    "data",
                    "train",
                    "propose",
                    "score-round",
                    "calibrate",
                    "heatmap",
                    "evaluate",
                ]
            ),
            st.sampled_from(
                [
                    "--foo",
                    "--tp",
                    "--nodes",
                    "--model",
                    "--into",
                    "--round",
                    "--out",
                    "-x",
                    "--json=yes",
                    "--analytic=1",
                    "--debug=1",
                    "--nodes=",
                    "-",
                ]
            ),
        ).map(list),
        st.tuples(st.just(BASE), st.sampled_from(sorted(INT_OPTIONS) + sorted(TEXT_OPTIONS))).map(
            lambda t: [*t[0], t[1]]
        ),
    )
)
def test_unknown_options_commands_and_missing_values(argv: list[str]) -> None:
    """Random commands, options without values, unknown options: one line and exit 2 (or a
    help text and exit 0; a group without a command prints its help and exits 2). No example
    is a complete command line of a long command (``train --`` would train)."""
    if "--help" in argv or "-h" in argv or "--" in argv:
        return
    o = invoke(argv)
    assert o.rc in (0, 2), f"exit {o.rc}: {o.err[-1500:]}"
    if o.rc == 2 and o.err:
        lines = o.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), o.err


# ------------------------------------------------------------------------ --config files
VALID_FILE: dict[str, Any] = {
    "model": "8b",
    "gpu": "H100",
    "num_nodes": 4,
    "dp": 8,
    "tp": 4,
    "pp": 1,
    "mbs": 1,
    "grad_accum": 8,
    "zero_stage": 1,
}
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.sampled_from([0, 1, 2, 8, 64, 4096, 2**53 + 1, 10**400, -1, 4.0, 2.5]),
    st.text(max_size=12),
    st.sampled_from(["8b", "H100", "full", "true", "false", "evil[/]x"]),
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
    st.sampled_from(
        ["zero", "grad-accum", "nodes", "num_layer", "tensor_parallel", "TP", "Dp", "foo", ""]
    ),
    st.text(max_size=10),
)


@st.composite
def config_files(draw: st.DrawFn) -> tuple[str, str]:
    """(suffix, text): a valid file with keys changed, removed or added; a random mapping; a
    nested file with random sections; or raw text."""
    kind = draw(st.sampled_from(["mutated", "mutated", "random", "nested", "raw"]))
    if kind == "raw":
        return ".yaml", draw(
            st.text(max_size=200)
            | st.sampled_from(
                [
                    "a: &a [*a]",
                    "!!python/object/apply:os.system ['true']",
                    "dp: !!float 8",
                    "? [1, 2]\n: 3",
                    "model: 8b\n" * 2,
                    "- 1\n- 2",
                    "dp: 8\n\tp: 1",
                    "{",
                    "~",
                    "model: 8b\nnum_nodes: 4\ndp: 8\ntp: 4\n<<: {pp: 2}",
                    # merge keys from anchors, nested, overridden, of the wrong kind
                    "x-l: &l {dp: 4, tp: 8}\nmodel: 70b\nnum_nodes: 4\nlayout: {<<: *l, dp: 2}",
                    "x-a: &a {num_nodes: 2}\nx-b: &b {<<: *a, gpu: H100}\nmodel: 8b\ndp: 16\n"
                    "cluster: {<<: *b}",
                    "model: 8b\n<<: [1, 2]",
                    "model: 8b\n<<: {<<: {dp: 8}}",
                    # aliases expanding past the bound under a known key, and one naming itself
                    "\n".join(
                        [
                            f"q{i}: &q{i} [" + ", ".join([f"*q{i - 1}"] * 6) + "]"
                            if i
                            else "q0: &q0 [1, 2, 3, 4, 5, 6]"
                            for i in range(8)
                        ]
                    )
                    + "\ngpu: *q7",
                    "layout: &me {dp: *me}",
                ]
            )
        )
    if kind == "random":
        data: Any = draw(st.dictionaries(keys, values, max_size=6))
    elif kind == "nested":
        data = {
            "model": draw(st.sampled_from(["8b", "70b"]) | values),
            "cluster": draw(st.dictionaries(keys, values, max_size=3) | values),
            "layout": draw(st.dictionaries(keys, values, max_size=3) | values),
        }
    else:
        data = dict(VALID_FILE)
        for key in draw(st.lists(keys, max_size=3)):
            if draw(st.booleans()) and key in data:
                del data[key]
            else:
                data[key] = draw(values)
    if draw(st.booleans()):
        return ".json", json.dumps(data)  # NaN and Infinity included: Python's json reads them
    return ".yaml", yaml.safe_dump(data, allow_unicode=True)


MISTRAL = {
    "model_type": "mistral",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "sliding_window": 4096,
}
"""A config.json with a sliding window, whose check reads the file's ``seq_len``."""


@fuzz(120)
@given(config_files(), st.booleans(), st.booleans())
@example(
    (".yaml", "model: 8b\nnum_nodes: 4\ndp: 8\ntp: 4\nmbs: " + "9" * 400), False, False
)  # found: an OverflowError traceback
@example((".yaml", "seq_len: abc\nnum_nodes: 1\ndp: 8\n"), True, True)  # found: a TypeError
def test_config_files(file: tuple[str, str], analytic: bool, hf: bool) -> None:
    """Random --config files, alone or beside a --hf-config (which the file's keys override)."""
    suffix, text = file
    with scratch() as d:
        path = d / f"run{suffix}"
        path.write_text(text)
        (d / "config.json").write_text(json.dumps(MISTRAL))
        o = invoke(
            [
                "predict",
                "--config",
                str(path),
                "--json",
                *(["--hf-config", str(d / "config.json")] if hf else []),
                *(["--analytic"] if analytic else []),
            ]
        )
    if assert_refused_or_answered(o):
        assert_sane_prediction(json.loads(o.out))


# ------------------------------------------------------------------------ --hf-config files
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
    },
    "mistral": {
        "model_type": "mistral",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "sliding_window": None,
    },
    "mixtral": {
        "model_type": "mixtral",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "sliding_window": None,
    },
    "qwen2_moe": {
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
        "use_sliding_window": False,
    },
    "qwen3": {
        "model_type": "qwen3",
        "num_hidden_layers": 28,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    },
    "deepseek_v3": {
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
        "moe_layer_freq": 1,
    },
    "gemma": {
        "model_type": "gemma",
        "num_hidden_layers": 28,
        "hidden_size": 3072,
        "intermediate_size": 24576,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 256,
        "vocab_size": 256000,
        "max_position_embeddings": 8192,
    },
}
"""One real-shaped config.json per family (the keys hf_config.py reads)."""
LAYOUTS: dict[str, list[str]] = {
    "deepseek_v3": [
        "--nodes",
        "64",
        "--dp",
        "64",
        "--pp",
        "8",
        "--ep",
        "64",
        "--zero",
        "1",
        "--seq-len",
        "4096",
    ],
}
"""Layouts the large families fit (the others take a small one of 8 GPUs)."""
HF_KEYS = sorted(
    {k for cfg in FAMILIES.values() for k in cfg}
    | {"head_dim", "layer_types", "max_window_layers", "_name_or_path", "rope_theta"}
)


@st.composite
def hf_configs(draw: st.DrawFn) -> tuple[str, dict[str, Any] | str]:
    family = draw(st.sampled_from(sorted(FAMILIES)))
    if draw(st.integers(0, 9)) == 0:
        return family, draw(
            st.text(max_size=100)
            | st.sampled_from(
                ["[]", "null", "{", '{"model_type": "llama", "model_type": "llama"}', "1e999"]
            )
        )
    cfg = dict(FAMILIES[family])
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(HF_KEYS) | st.text(max_size=8))
        action = draw(st.sampled_from(["drop", "retype", "retype", "scale"]))
        if action == "drop":
            cfg.pop(key, None)
        elif action == "scale" and isinstance(cfg.get(key), int) and cfg[key] is not True:
            cfg[key] = cfg[key] * draw(st.sampled_from([0, -1, 2, 3, 10**6, 10**20])) or 0
        else:
            cfg[key] = draw(
                values
                | st.sampled_from(
                    [
                        "llama",
                        "gemma2",
                        "qwen3_next",
                        "false",
                        "4096",
                        4096.7,
                        4096.0,
                        ["MixtralForCausalLM"],
                        "evil[/]model",
                    ]
                )
            )
    return family, cfg


@fuzz(120)
@given(hf_configs(), st.booleans())
def test_hf_configs(case: tuple[str, dict[str, Any] | str], analytic: bool) -> None:
    family, cfg = case
    layout = LAYOUTS.get(family, ["--nodes", "1", "--dp", "8", "--seq-len", "4096"])
    with scratch() as d:
        path = d / "config.json"
        path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
        o = invoke(
            [
                "predict",
                "--hf-config",
                str(path),
                *layout,
                "--json",
                *(["--analytic"] if analytic else []),
            ]
        )
    if assert_refused_or_answered(o):
        assert_sane_prediction(json.loads(o.out))


# ------------------------------------------------------------------------ --from-csv tables
CSV_BASE = {
    "num_layers": 32,
    "hidden_size": 4096,
    "ffn_hidden_size": 14336,
    "num_heads": 32,
    "num_kv_heads": 8,
    "vocab_size": 128256,
    "seq_len": 4096,
    "num_nodes": 1,
    "dp": 8,
}
cells = st.one_of(
    st.sampled_from(
        [
            "",
            "8",
            "1",
            "0",
            "-1",
            "8.0",
            "8.5",
            "nan",
            "inf",
            "1e400",
            "9" * 30,
            "true",
            "abc",
            "evil[/]x",
            '"1,2"',
            "H100",
            "full",
            "fp8",
            "torchtitan",
            "8b",
            "mixtral",
            "1.34G",
            "13b",
        ]
    ),
    st.integers(-(2**40), 2**40).map(str),
    st.text(
        alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=8
    ),
)
columns = st.one_of(
    st.sampled_from(CONFIG_COLUMNS),
    st.sampled_from(
        [
            "zero",
            "grad-accum",
            "num_layer",
            "note",
            "status",
            "mfu",
            "",
            " dp",
            "DP",
            "_note",
            "model",
            "sp_degree",
            "gradient_checkpointing",
            "compute_dtype",
            "nproc_per_node",
            "run_id",
            "pred_mfu",
            "error",
        ]
    ),
    st.text(max_size=8),
)


@st.composite
def csv_tables(draw: st.DrawFn) -> str:
    """CSV text: the base configuration with columns added (some repeated), dropped or
    retyped, over one to four rows."""
    header = list(CSV_BASE)
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()) and len(header) > 1:
            header.pop(draw(st.integers(0, len(header) - 1)))
        else:
            header.append(draw(columns))
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        row = [str(CSV_BASE.get(c, "")) for c in header]
        for _ in range(draw(st.integers(0, 2))):
            row[draw(st.integers(0, len(row) - 1))] = draw(cells)
        rows.append(row)
    if draw(st.integers(0, 9)) == 0:  # a ragged row
        rows.append([*rows[0], "extra"])
    buf = io.StringIO()
    import csv

    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


_CSV_HEADER = ",".join(CSV_BASE)
_CSV_ROW = ",".join(map(str, CSV_BASE.values()))


@fuzz(120)
@given(csv_tables(), st.booleans())
@example(f'{_CSV_HEADER}\n{_CSV_ROW}\n"\r",' + _CSV_ROW.split(",", 1)[1] + "\n", True)  # found:
# the output wrote the carriage return unquoted and its readers split the row
@example(f"{_CSV_HEADER}\n{_CSV_ROW},\n", True)  # trailing commas shifted every column
@example(f"{_CSV_HEADER}\n{_CSV_ROW},7\n", True)  # so did a value without a column
@example(f"{_CSV_HEADER},mbs\n{_CSV_ROW},{2**53 + 1}\n", True)  # read as 2**53
@example("model,num_nodes,dp\n70b,8,64\n", True)  # found: a preset name failed every row
@example(f"{_CSV_HEADER},tensor_degree\n{_CSV_ROW},2\n", True)  # found: ignored, tp=1
def test_from_csv(text: str, analytic: bool) -> None:
    """Each row is predicted sanely or carries its error; a bad table is refused in one line."""
    with scratch() as d:
        path = d / "in.csv"
        path.write_text(text)
        o = invoke(["predict", "--from-csv", str(path), *(["--analytic"] if analytic else [])])
    if not assert_refused_or_answered(o, output_kept="error: every one of the"):
        if o.out:  # every row failed: the table of their errors was written first
            out = pd.read_csv(
                io.StringIO(o.out), keep_default_na=False, na_values=[""], dtype={"error": str}
            )
            assert out["error"].notna().all() and out["pred_mfu"].isna().all()
        return
    out = pd.read_csv(
        io.StringIO(o.out), keep_default_na=False, na_values=[""], dtype={"error": str}
    )
    import csv

    records = [r for r in csv.reader(io.StringIO(text)) if any(cell for cell in r)]
    assert len(out) == len(records) - 1, "a row was lost"
    for row in out.to_dict("records"):
        error = row["error"] if isinstance(row["error"], str) else ""
        if error:
            assert pd.isna(row["pred_mfu"]), row
        else:
            assert 0 < row["pred_mfu"] <= 1, row
            assert math.isfinite(row["pred_tokens_per_s_per_gpu"])
            assert row["pred_tokens_per_s_per_gpu"] > 0
            assert 0 <= row["p_oom"] <= 1


# ------------------------------------------------------------------------ real processes
def _console_script() -> list[str]:
    return [sys.executable, "-c", "from surrogate.cli import entry; entry()"]


@fuzz(6)
@given(st.lists(option_pairs(), min_size=1, max_size=3))
def test_real_processes_never_crash(pairs: list[list[str]]) -> None:
    """As a user runs it: exit 0 or 2 (never 1, never a signal), no traceback on stderr."""
    extra = [a.replace("\x00", "") for pair in pairs for a in pair]
    done = subprocess.run(
        [*_console_script(), *BASE, *extra, "--json", "--analytic"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 2), (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    if done.returncode == 2:
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")
    else:
        assert_sane_prediction(json.loads(done.stdout))


@pytest.mark.parametrize(
    "argv",
    [
        [*BASE, "--mbs", "9" * 400],
        [*BASE, "--tp", "2.5"],
        ["predict", "--hf-config", "/dev/null"],
        ["predict", "--config", "/"],
        ["nosuch"],
    ],
)
def test_real_processes_on_known_hostile_inputs(argv: list[str]) -> None:
    done = subprocess.run([*_console_script(), *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
