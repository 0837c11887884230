"""The inputs of :mod:`robustness`'s first classes: usage errors, hf-config files, config files
and CSV tables."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from robustness_harness import (
    FIXTURES,
    Case,
    Check,
    Expect,
    csv_rows,
    prediction,
    search_answer,
    table_shows,
)

# ------------------------------------------------------------------------ the inputs
PREDICT = (
    "predict",
    "--model",
    "8b",
    "--nodes",
    "4",
    "--dp",
    "8",
    "--tp",
    "4",
    "--framework",
    "nanotron",
)
"""A valid configuration (llama3-8b on 4 x 8 H100, nanotron's as the Playbook's) the inputs
change."""
INT_FLAGS = ("--tp", "--dp", "--pp", "--mbs", "--grad-accum", "--nodes", "--zero", "--seq-len")
BAD_INTS = ("2.5", "abc", "", "1e3", "evil[/]model")


def usage_cases() -> Iterator[Case]:
    c = "usage errors"
    for flag in INT_FLAGS:
        for value in BAD_INTS:
            yield Case(c, (*PREDICT, flag, value), "refuse")
        yield Case(c, (*PREDICT, f"{flag}=2.5"), "refuse")
        yield Case(c, (*PREDICT, flag), "refuse")  # missing value
    for flag in (
        "--model",
        "--gpu",
        "--config",
        "--hf-config",
        "--from-csv",
        "--profile",
        "--model-dir",
        "--recompute",
        "--dtype",
    ):
        yield Case(c, (*PREDICT, flag), "refuse")
    for command in (
        PREDICT,
        ("search", "--model", "8b", "--global-batch-seqs", "64"),
        ("ingest", "x.csv", "--into", "t.parquet"),
    ):
        for option in ("--foo", "--tpp", "-z"):
            yield Case(c, (*command, option, "3"), "refuse")
    for name in ("nosuch", "Predict", "predictt", "serach", "evil[/]cmd", ""):
        yield Case(c, (name,), "refuse")
        yield Case(c, ("data", name or "x"), "refuse")
    for switch in ("--sequence-parallel=yes", "--json=1", "--analytic=true"):
        yield Case(c, (*PREDICT, switch), "refuse")
    for into in ("t.xlsx", "t", "t.parquet.bak", "{d}"):
        yield Case(
            c,
            ("ingest", "{d}/chunk.csv", "--into", into),
            "refuse",
            files=(("chunk.csv", "a,b\n1,2\n"),),
        )
    yield Case(c, ("ingest", "{d}/none.csv", "--into", "t.parquet"), "refuse")
    yield Case(c, ("ingest", "{d}", "--into", "t.parquet", "--format", "bogus"), "refuse")
    # Python reads these as integers; so does the CLI, and it must say so in the answer
    for value, number in (("٣", 3), ("1_0", 10), (" 2", 2)):
        yield Case(
            c, (*PREDICT, "--mbs", value, "--json"), "either", check=prediction({"mbs": number})
        )


def hf_cases() -> Iterator[Case]:
    c = "hf-config"
    bad: Any
    layout = ("--nodes", "1", "--dp", "8", "--seq-len", "4096", "--json")
    expected_of = {
        "num_hidden_layers": "num_layers",
        "hidden_size": "hidden_size",
        "num_attention_heads": "num_heads",
        "vocab_size": "vocab_size",
    }
    for path in sorted(FIXTURES.glob("*.json")):
        cfg = json.loads(path.read_text())
        want = {ours: cfg[theirs] for theirs, ours in expected_of.items()}
        family = cfg["model_type"]
        if family == "mixtral":
            want["num_experts"] = cfg["num_local_experts"]
        elif family.endswith("moe"):
            want["num_experts"] = cfg["num_experts"]
            want["moe_ffn_hidden_size"] = cfg["moe_intermediate_size"]
        if family == "qwen2_moe":
            want["shared_expert_ffn_hidden_size"] = cfg["shared_expert_intermediate_size"]
        if family.startswith("deepseek"):
            want.update(
                num_experts=cfg["n_routed_experts"],
                kv_lora_rank=cfg["kv_lora_rank"],
                num_dense_layers=cfg["first_k_dense_replace"],
                moe_ffn_hidden_size=cfg["moe_intermediate_size"],
            )
        if "head_dim" in cfg and cfg["head_dim"] * cfg["num_attention_heads"] != cfg["hidden_size"]:
            want["head_dim"] = cfg["head_dim"]
        yield Case(
            c,
            ("predict", "--hf-config", "{d}/config.json", *layout),
            "answer",
            files=(("config.json", json.dumps(cfg)),),
            check=prediction(want),
        )
    llama = json.loads((FIXTURES / "llama3-8b.json").read_text())
    short = ("--nodes", "1", "--dp", "8", "--json")
    for key in (
        "num_hidden_layers",
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "max_position_embeddings",
    ):
        for bad in (4096.7, 4096.0, "4096", True, -1, 0, [8], "evil[/]x"):
            text = json.dumps({**llama, key: bad})
            yield Case(
                c,
                ("predict", "--hf-config", "{d}/config.json", *short),
                "refuse",
                files=(("config.json", text),),
            )
        yield Case(
            c,
            ("predict", "--hf-config", "{d}/config.json", *short),
            "refuse",
            files=(("config.json", json.dumps(llama)[:-1] + f', "{key}": 1e400}}'),),
        )
    for bad in ("false", "true", 0, 1, None, "False"):
        yield Case(
            c,
            ("predict", "--hf-config", "{d}/config.json", *short),
            "refuse",
            files=(("config.json", json.dumps({**llama, "tie_word_embeddings": bad})),),
        )
    for family in (
        "gemma2",
        "gemma3",
        "llama4",
        "qwen3_next",
        "bert",
        "",
        "LLAMA",
        5,
        None,
        ["llama"],
    ):
        cfg = {**llama, "model_type": family}
        cfg.pop("architectures", None)
        yield Case(
            c,
            ("predict", "--hf-config", "{d}/config.json", *short),
            "refuse",
            files=(("config.json", json.dumps(cfg)),),
        )
    yield Case(
        c,
        ("predict", "--hf-config", "{d}/config.json", *short),
        "refuse",
        files=(("config.json", json.dumps({**llama, "architectures": ["MixtralForCausalLM"]})),),
    )
    deepseek = json.loads((FIXTURES / "deepseek-v3.json").read_text())
    qwen_moe = json.loads((FIXTURES / "qwen2-57b-a14b.json").read_text())
    mistral = json.loads((FIXTURES / "mistral-7b-v0.1.json").read_text())
    for cfg in (
        {**deepseek, "moe_layer_freq": 2},
        {**qwen_moe, "decoder_sparse_step": 2},
        {**qwen_moe, "mlp_only_layers": [3]},
    ):
        yield Case(
            c,
            ("predict", "--hf-config", "{d}/config.json", *layout),
            "refuse",
            files=(("config.json", json.dumps(cfg)),),
        )
    window = mistral.get("sliding_window") or 4096
    yield Case(
        c,
        ("predict", "--hf-config", "{d}/config.json", "--seq-len", str(2 * window), *short),
        "refuse",
        files=(("config.json", json.dumps(mistral)),),
    )
    yield Case(
        c,
        ("predict", "--hf-config", "{d}/config.json", "--seq-len", str(window), *short),
        "answer",
        files=(("config.json", json.dumps(mistral)),),
        check=prediction({"seq_len": window}),
    )
    for name in ("evil[/]model[red]", "[bold]x[/bold]", "a\\[b]"):
        yield Case(
            c,
            (
                "predict",
                "--hf-config",
                "{d}/config.json",
                "--seq-len",
                "4096",
                "--nodes",
                "1",
                "--dp",
                "8",
            ),
            "answer",
            files=(("config.json", json.dumps({**llama, "_name_or_path": name})),),
            check=table_shows(f"{name} on 1 x 8"),
        )
    for text in (
        "not json",
        "[]",
        "null",
        "",
        '{"model_type": "llama", "model_type": "llama"}',
        "\x00\xff",
    ):
        yield Case(
            c,
            ("predict", "--hf-config", "{d}/config.json", *short),
            "refuse",
            files=(("config.json", text),),
        )
    yield Case(c, ("predict", "--hf-config", "{d}", *short), "refuse")
    yield Case(c, ("predict", "--hf-config", "{d}/none.json", *short), "refuse")


def _config_file(data: Any, fmt: str) -> tuple[str, str]:
    import yaml

    if fmt == "json":
        return "run.json", json.dumps(data)
    return "run.yaml", yaml.safe_dump(data)


VALID_FILE: dict[str, Any] = {
    "model": "8b",
    "gpu": "H100",
    "num_nodes": 4,
    "dp": 8,
    "tp": 4,
    "mbs": 1,
    "grad_accum": 8,
    "framework": "nanotron",
}
CSV_GOOD: dict[str, Any] = {
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


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def config_cases() -> Iterator[Case]:
    c = "config files, CSV"
    bad: Any
    run = ("predict", "--config", "{d}/run.{fmt}", "--json")

    def file_case(data: Any, fmt: str, expect: Expect, check: Check | None = None) -> Case:
        name, text = _config_file(data, fmt)
        return Case(
            c,
            tuple(a.replace("{fmt}", fmt) for a in run),
            expect,
            files=((name, text),),
            check=check,
        )

    for fmt in ("yaml", "json"):
        for key in (
            "zero",
            "grad-accum",
            "nodes",
            "num_layer",
            "tensor_parallel",
            "TP",
            "foo",
            "Zero_Stage",
            "mbs ",
            "dp.1",
            "micro_batch_size",
            "n_layers",
        ):
            yield file_case({**VALID_FILE, key: 1}, fmt, "refuse")
        hostile = ("abc", 2.5, True, [8], {"a": 1}, -1, 0, 10**400, "8 GPUs", None)
        for key in ("dp", "tp", "grad_accum", "zero_stage", "mbs", "num_nodes"):
            for bad in hostile if fmt == "yaml" else hostile[1:8:3]:
                if bad is None and key in ("zero_stage", "mbs", "grad_accum"):
                    continue  # null is 'not given': the default
                expect: Expect = "either" if bad == 0 and key == "zero_stage" else "refuse"
                yield file_case({**VALID_FILE, key: bad}, fmt, expect)
        for data in (
            [1, 2],
            "just text",
            5,
            {"cluster": 4, **VALID_FILE},
            {**VALID_FILE, "layout": {"gpu": "H100"}},
            {**VALID_FILE, "model": {"dp": 8}},
            {**VALID_FILE, "layout": {"dp": 8}},
        ):
            yield file_case(data, fmt, "refuse")
    for key, fmt_text in (("tp", "tp: 4\ntp: 8\n"), ("model", "model: 8b\nmodel: 70b\n")):
        yield Case(
            c,
            ("predict", "--config", "{d}/run.yaml", "--json"),
            "refuse",
            files=(
                (
                    "run.yaml",
                    "num_nodes: 4\ndp: 8\n"
                    + fmt_text
                    + ("model: 8b\n" if key == "tp" else "tp: 4\n"),
                ),
            ),
        )
        body = json.dumps({k: v for k, v in VALID_FILE.items() if k != key})[:-1]
        yield Case(
            c,
            ("predict", "--config", "{d}/run.json", "--json"),
            "refuse",
            files=(("run.json", body + f', "{key}": 4, "{key}": 8}}'),),
        )
    for text in (
        "",
        "~",
        "{",
        "dp: [1, 2",
        "!!python/object/apply:os.system ['true']",
        "a: &a [*a]",
        "\x00",
    ):
        yield Case(
            c, ("predict", "--config", "{d}/run.yaml"), "refuse", files=(("run.yaml", text),)
        )
    # keys that must change the prediction (each against the file without it)
    base_argv = (
        "predict",
        "--model",
        "8b",
        "--gpu",
        "H100",
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
        "--framework",
        "nanotron",
        "--json",
    )
    for key, value, path in (
        ("zero_stage", 1, ("memory_gib", "optimizer")),
        ("grad_accum", 16, ("step_time_s", "total")),
        ("recompute", "full", ("memory_gib", "activations")),
        ("mbs", 2, ("memory_gib", "activations")),
        ("sequence_parallel", True, ("memory_gib", "activations")),
        ("tie_embeddings", True, ("memory_gib", "weights")),
        ("seq_len", 4096, ("memory_gib", "activations")),
        ("framework", "megatron", ("step_time_s", "total")),
    ):
        for fmt in ("yaml", "json"):
            yield file_case(
                {**VALID_FILE, key: value},
                fmt,
                "answer",
                check=prediction({key: value}, differs=(base_argv, path)),
            )
    yield from _table_cases(c)
    yield from flag_and_round_cases()


def _table_cases(c: str) -> Iterator[Case]:
    """``--from-csv`` tables of configurations: repeated and near-miss columns, bad cells,
    values past the header, files that are no table."""
    header = list(CSV_GOOD)
    good = list(CSV_GOOD.values())
    for col in ("dp", "num_layers", "seq_len", "hidden_size", "num_nodes"):
        text = csv_text([*header, col], [[*good, CSV_GOOD[col]]])
        yield Case(c, ("predict", "--from-csv", "{d}/in.csv"), "refuse", files=(("in.csv", text),))
    for col, meant in (
        ("zero", "zero_stage"),
        ("grad-accum", "grad_accum"),
        ("num_layer", "num_layers"),
        ("tensor_parallel_size", "tp"),
        ("micro_batch_size", "mbs"),
        ("batch_accum", "grad_accum"),
        ("seq_length", "seq_len"),
        ("nodes", "num_nodes"),
    ):
        # a near miss of a column the table lacks: it would be ignored, the column defaulted
        kept = [h for h in header if h != meant]
        yield Case(
            c,
            ("predict", "--from-csv", "{d}/in.csv"),
            "refuse",
            files=(
                (
                    "in.csv",
                    csv_text(
                        [*kept, col], [[*(CSV_GOOD[h] for h in kept), CSV_GOOD.get(meant, 1)]]
                    ),
                ),
            ),
        )
    for col, bad in (
        ("dp", "abc"),
        ("dp", "8.5"),
        ("dp", "0"),
        ("tp", "3"),
        ("num_layers", "-4"),
        ("seq_len", "1e400"),
        ("hidden_size", "inf"),
        ("vocab_size", "nan"),
        ("num_heads", "evil[/]x"),
        ("gpu", "H900"),
        ("recompute", "bad"),
        ("dtype", "fp4"),
        ("framework", "deepspeed"),
        ("tie_embeddings", "maybe"),
        ("mbs", str(10**400)),
        ("zero_stage", "1.5"),
    ):
        cols = header if col in header else [*header, col]
        first = [CSV_GOOD.get(h, "") for h in cols]
        rows = [first, [bad if h == col else v for h, v in zip(cols, first, strict=True)]]
        # a count no float64 holds exactly refuses the table (the CSV reader would round it)
        expect = "either" if col == "mbs" else "answer"
        yield Case(
            c,
            ("predict", "--from-csv", "{d}/in.csv", "--analytic"),
            expect,
            files=(("in.csv", csv_text(cols, rows)),),
            check=csv_rows(2, {1}),
        )
    past: tuple[tuple[str, Expect, int], ...] = (
        (",7\n", "refuse", 0),
        (",\n", "answer", 1),
        (",,,\n", "answer", 1),
    )
    for rows_text, expect, n in past:
        # values past the header's columns; trailing commas (empty values) are allowed
        line = ",".join(map(str, good)) + rows_text
        yield Case(
            c,
            ("predict", "--from-csv", "{d}/in.csv", "--analytic"),
            expect,
            files=(("in.csv", ",".join(header) + "\n" + line),),
            check=csv_rows(n, set()),
        )
    for raw in (b"\x00\x01\x02", b"", b"num_layers\n", b"a,b\n1,2,3\n"):
        yield Case(
            c,
            ("predict", "--from-csv", "{d}/in.csv"),
            "either",
            files=(("in.csv", raw),),
            check=csv_rows(0, set()),
        )
    yield Case(
        c,
        ("predict", "--from-csv", "{d}/in.csv", "--out", "{d}/out.xlsx"),
        "refuse",
        files=(("in.csv", csv_text(header, [good])),),
    )


# ------------------------------------------- flags, caps, strict numbers, propose's runs and cost
# List flags (a value named twice, empty items, ranges that overlap), the caps on --top-k and
# --k, YAML and JSON numbers read strictly, the model column of --from-csv, and propose's
# --runs, limits and budget. Each case joins an existing class.
SMALL_SPACE = (
    "--model",
    "1.34b",
    "--nodes",
    "1",
    "--global-batch-seqs",
    "16",
    "--max-cp",
    "1",
    "--max-vpp",
    "1",
    "--max-mbs",
    "2",
)
PROPOSE = (
    "propose",
    "--round",
    "{d}/r",
    "--model",
    "8b",
    "--nodes",
    "1",
    "--global-batch-seqs",
    "32",
    "--max-cp",
    "1",
    "--max-vpp",
    "1",
    "--max-mbs",
    "2",
)


def _round_cost(budget: float | None) -> Check:
    """A round that prints and records its cost, within ``budget`` if one is given."""

    def check(d: Path, out: str, err: str) -> str | None:
        flat = " ".join(out.split())
        if "GPU-hours at the predicted step times" not in flat or "expected OOMs" not in flat:
            return "the round does not say what it costs"
        cost = json.loads((d / "r" / "round.json").read_text()).get("cost")
        if not cost:
            return "round.json records no cost"
        spent = pd.read_csv(d / "r" / "proposals.csv")["gpu_hours"].sum()
        if abs(spent - cost["gpu_hours"]) > 1e-6 * max(1.0, spent):
            return f"round.json says {cost['gpu_hours']} GPU-hours, its runs {spent}"
        if budget is not None and spent > budget:
            return f"{spent:.2f} GPU-hours spent of a budget of {budget}"
        return None

    return check


def flag_and_round_cases() -> Iterator[Case]:
    usage, files, prop = "usage errors", "config files, CSV", "propose"
    search = ("search", *SMALL_SPACE, "--trials", "0", "--json", "--top-k", "2")
    for flag, value in (
        ("--framework", "torchtitan,torchtitan"),
        ("--framework", " torchtitan , TorchTitan "),
        ("--framework", "nanotron,torchtitan,nanotron"),
        ("--zero", "2,2"),
        ("--recompute", "none,none,full"),
        ("--shardings", "full,node,full"),
        ("--recompute-shares", "1,1.0,0.5"),
        ("--nodes", "1,1"),
        ("--nodes", "1-2,1"),
        ("--nodes", "1-4,2-2"),
    ):
        yield Case(usage, (*search, flag, value), "answer", check=search_answer())
    for flag, value in (
        ("--framework", "torchtitan,,megatron"),
        ("--framework", ","),
        ("--framework", "torchtitan,"),
        ("--zero", "1,,2"),
        ("--recompute", " , "),
        ("--nodes", "1-4,,8"),
        ("--nodes", "4-1,2"),
        ("--recompute-shares", "nan,1"),
        ("--recompute-shares", "1,inf"),
    ):
        yield Case(usage, (*search, flag, value), "refuse", names=flag, timeout_s=20)
    for top_k in ("1001", "1000000", str(10**30)):
        yield Case(
            usage,
            ("search", *SMALL_SPACE, "--trials", "0", "--top-k", top_k),
            "refuse",
            names="--top-k",
            timeout_s=20,
        )
    for k in ("1001", "1000000"):
        yield Case(prop, (*PROPOSE, "--k", k), "refuse", names="--k", timeout_s=20)
    # YAML 1.1's numbers, NaN and infinity in configuration files
    run = ("predict", "--config", "{d}/run.yaml", "--json")
    base = "".join(f"{k}: {v}\n" for k, v in VALID_FILE.items() if k != "grad_accum")
    for value in (
        "016",
        "-016",
        "08",
        "00",
        "1:00",
        "1:30:00",
        "1_000",
        "0b1000",
        "0o20",
        ".nan",
        ".NaN",
        ".inf",
        "-.inf",
        "1e400",
    ):
        yield Case(
            files,
            run,
            "refuse",
            files=(("run.yaml", base + f"grad_accum: {value}\n"),),
            names="grad_accum" if "n" in value or "e" in value else value,
        )
    for value, number in (("16", 16), ("0x10", 16), ("1.6e1", 16), ("'016'", 16), ("+8", 8)):
        yield Case(
            files,
            run,
            "answer",
            files=(("run.yaml", base + f"grad_accum: {value}\n"),),
            check=prediction({"grad_accum": number}),
        )
    body = json.dumps({k: v for k, v in VALID_FILE.items() if k not in ("mbs", "framework")})
    for key, value in (
        ("mbs", "NaN"),
        ("mbs", "Infinity"),
        ("mbs", "-Infinity"),
        ("mbs", "1e999"),
        ("mbs", "true"),
        ("framework", "NaN"),
    ):
        text = body[:-1] + f', "{key}": {value}' + "}"
        yield Case(
            files,
            ("predict", "--config", "{d}/run.json", "--json"),
            "refuse",
            files=(("run.json", text),),
            names=key,
        )
    # the model column of --from-csv, linear in the rows: 20,000 rows in seconds
    rows = [[("8b", "70b", "", "1.34b")[i % 4], 1, 8] for i in range(20_000)]
    yield Case(
        files,
        ("predict", "--from-csv", "{d}/in.csv", "--analytic", "--out", "{d}/out.csv"),
        "answer",
        files=(("in.csv", csv_text(["model", "num_nodes", "dp"], rows)),),
        timeout_s=120,
    )
    yield Case(
        files,
        ("predict", "--from-csv", "{d}/in.csv", "--analytic"),
        "refuse",
        files=(
            (
                "in.csv",
                csv_text(["model", "num_nodes", "dp"], [["8b", 1, 8], ["", 1, 8], ["9b", 1, 8]]),
            ),
        ),
        names="row 3",
    )
    # propose: --runs read as measured runs only; no candidate left; the cost and a budget
    config = {**CSV_GOOD, "num_layers": 32, "num_nodes": 1, "dp": 8, "framework": "torchtitan"}
    tables = {
        "proposals": csv_text(
            ["name", "reason", "layout", *config, "pred_mfu", "p_oom"],
            [["r01-00", "best-predicted", "dp8", *config.values(), 0.4, 0]],
        ),
        "predictions": csv_text(
            [*config, "pred_mfu", "p_oom", "error"], [[*config.values(), 0.4, 0.0, ""]]
        ),
        "configurations": csv_text(list(config), [list(config.values())]),
        "sweep table": csv_text(["a", "b"], [[1, 2]]),
    }
    for kind, text in tables.items():
        yield Case(
            prop,
            (*PROPOSE, "--runs", "{d}/t.csv"),
            "refuse",
            files=(("t.csv", text),),
            names=kind,
            timeout_s=30,
        )
    for raw in (b"", b"\n\n", b"status\n", b"\x00\x01binary"):
        yield Case(
            prop, (*PROPOSE, "--runs", "{d}/t.csv"), "refuse", files=(("t.csv", raw),), timeout_s=30
        )
    for value in ("0", "0.0", "1e-300"):
        yield Case(
            prop, (*PROPOSE, "--max-p-oom", value), "refuse", names="--max-p-oom", timeout_s=60
        )
    yield Case(
        prop, (*PROPOSE, "--memory-margin", "0.95"), "refuse", names="--memory-margin", timeout_s=60
    )
    for value in ("0", "-1", "nan", "inf", "1e-9"):
        yield Case(
            prop,
            (*PROPOSE, "--budget-gpu-hours", value),
            "refuse",
            names="--budget-gpu-hours",
            timeout_s=60,
        )
    yield Case(prop, (*PROPOSE, "--k", "3"), "answer", check=_round_cost(None))
    yield Case(
        prop, (*PROPOSE, "--k", "4", "--budget-gpu-hours", "1.2"), "answer", check=_round_cost(1.2)
    )
