"""The inputs of :mod:`robustness` that reach a model or write: damaged model copies, far-outside
layouts, search messages, score-round and train outputs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from robustness_harness import (
    EXE,
    MODEL_DIR,
    Case,
    Expect,
    baseline,
    environment,
    json_field,
    prediction,
    search_answer,
)
from robustness_inputs import CSV_GOOD, PREDICT, csv_text

MODEL_FILES = ("status.txt", "mfu.txt", "mfu_lo.txt", "mfu_hi.txt", "mem.txt")


def _model_copy(change: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        m = d / "m"
        shutil.copytree(MODEL_DIR, m)
        change(m)

    return setup


def _truncate(name: str, size: Callable[[int], int]) -> Callable[[Path], None]:
    def change(m: Path) -> None:
        data = (m / name).read_bytes()
        (m / name).write_bytes(data[: size(len(data))])

    return change


def _edit_leaf(name: str) -> Callable[[Path], None]:
    def change(m: Path) -> None:
        text = (m / name).read_text()
        match = re.search(r"^leaf_value=(\S+)", text, re.MULTILINE)
        assert match, name
        first = match.group(1)
        changed = str(float(first) * 1.5 + 0.01)
        (m / name).write_text(text[: match.start(1)] + changed + text[match.end(1) :])

    return change


def _extend(name: str) -> Callable[[Path], None]:
    def change(m: Path) -> None:
        (m / name).write_bytes((m / name).read_bytes() + b"\nx=1\n")

    return change


def _delete(name: str) -> Callable[[Path], None]:
    def change(m: Path) -> None:
        (m / name).unlink()

    return change


def _edit_sidecar(edit: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def change(m: Path) -> None:
        meta = json.loads((m / "model.json").read_text())
        out = edit(meta)
        (m / "model.json").write_text(json.dumps(meta if out is None else out))

    return change


def model_cases() -> Iterator[Case]:
    c = "model integrity"
    argv = (*PREDICT, "--model-dir", "{d}/m", "--json")
    for name in MODEL_FILES:
        for size in (lambda n: 0, lambda n: n // 2, lambda n: n - 1):
            yield Case(c, argv, "refuse", setup=_model_copy(_truncate(name, size)))
        yield Case(c, argv, "refuse", setup=_model_copy(_edit_leaf(name)))
        yield Case(c, argv, "refuse", setup=_model_copy(_extend(name)))
        yield Case(c, argv, "refuse", setup=_model_copy(_delete(name)))
    edits: tuple[Callable[[dict[str, Any]], Any], ...] = (
        lambda meta: meta.pop("file_sha256"),
        lambda meta: meta.pop("sidecar_sha256"),
        lambda meta: meta.update(conformal_q=0.5),
        lambda meta: meta["feature_names"].reverse(),
        lambda meta: [],
        lambda meta: {},
    )
    for edit in edits:
        yield Case(c, argv, "refuse", setup=_model_copy(_edit_sidecar(edit)))
    yield Case(c, argv, "refuse", setup=_model_copy(_truncate("model.json", lambda n: n // 2)))
    yield Case(c, argv, "refuse", setup=_model_copy(lambda m: (m / "model.json").unlink()))
    yield Case(c, (*PREDICT, "--model-dir", "{d}/none", "--json"), "refuse")
    yield Case(c, (*PREDICT, "--model-dir", "{d}/file", "--json"), "refuse", files=(("file", "x"),))
    reference = (*PREDICT, "--json")
    yield Case(
        c,
        argv,
        "answer",
        setup=_model_copy(lambda m: None),
        check=lambda d, out, err: (
            None
            if json.loads(out)["mfu"] == baseline(reference)["mfu"]
            else "an intact copy answers unlike the bundled model"
        ),
    )


FAR: dict[str, tuple[tuple[str, ...], float]] = {
    # option -> (the other options it needs, the value beyond which it must say it extrapolates)
    "--nodes": (("--dp", "{v8}", "--tp", "1"), 1e4),
    "--seq-len": ((), 2e6),
    "--mbs": ((), 1e5),
    "--grad-accum": ((), 1e6),
    "--vocab-size": ((), 2e6),
    "--hidden-size": (("--num-heads", "32", "--ffn-hidden-size", "14336"), 1e5),
    "--num-layers": ((), 1e4),
    "--ffn-hidden-size": ((), 1e6),
}


def far_cases() -> Iterator[Case]:
    c = "far-outside inputs"
    base = PREDICT
    magnitudes = (10**3, 10**6, 10**12, 2**53 + 1, 10**20, 10**400)
    for option, (extra, beyond) in FAR.items():
        for value in magnitudes:
            if option in ("--hidden-size",):
                value = value // 32 * 32 or 32  # divisible by the heads
            args = tuple(a.replace("{v8}", str(8 * value)) for a in extra)
            expect: Expect = (
                "refuse"
                if max(value, 8 * value if extra[:1] == ("--dp",) else 0) > 2**53
                else "either"
            )
            column = option[2:].replace("-", "_").replace("nodes", "num_nodes")
            yield Case(
                c,
                (*base, option, str(value), *args, "--json"),
                expect,
                check=prediction({column: value}, extrapolates=value > beyond),
            )
        for value in (0, -1):
            yield Case(c, (*base, option, str(value), "--json"), "refuse")


def search_cases() -> Iterator[Case]:
    c = "search messages"
    base = (
        "search",
        "--model",
        "8b",
        "--nodes",
        "4",
        "--global-batch-seqs",
        "256",
        "--trials",
        "0",
        "--analytic",
        "--json",
    )
    hostile = (
        ("--gpu", "H900"),
        ("--gpu", "evil[/]gpu"),
        ("--nodes", "abc"),
        ("--nodes", "0"),
        ("--nodes", "4-2"),
        ("--nodes", "-1"),
        ("--nodes", "1,,2"),
        ("--zero", "a,b"),
        ("--zero", "7"),
        ("--objective", "foo"),
        ("--max-p-oom", "2"),
        ("--max-p-oom", "-0.1"),
        ("--max-p-oom", "nan"),
        ("--memory-margin", "-1"),
        ("--memory-margin", "1"),
        ("--memory-margin", "nan"),
        ("--trials", "-3"),
        ("--top-k", "0"),
        ("--top-k", "-2"),
        ("--max-mbs", "0"),
        ("--framework", "foo"),
        ("--framework", ""),
        ("--recompute", "bad"),
        ("--global-batch-seqs", "0"),
        ("--global-batch-seqs", "-4"),
        ("--max-cp", "0"),
        ("--max-vpp", "0"),
        ("--seq-len", "0"),
        ("--model", "7b"),
        ("--gpus-per-node", "0"),
        ("--hf-config", "none.json"),
        ("--launch-dir", "{d}/file"),
        ("--launch-dir", "{d}/file/sub"),
        ("--storage", "nosuch://x"),
        ("--storage", "study.db"),
        ("--storage", "mysql://u@h/db"),
    )
    for option, value in hostile:
        yield Case(c, (*base, option, value), "refuse", files=(("file", "x"),))
    yield Case(
        c, ("search", "--model", "8b", "--nodes", "4", "--trials", "0", "--json"), "refuse"
    )  # no global batch
    yield Case(c, (*base, "--global-batch-tokens", "1048576"), "refuse")  # both
    yield Case(
        c,
        (
            "search",
            "--model",
            "8b",
            "--nodes",
            "4",
            "--global-batch-tokens",
            "100",
            "--trials",
            "0",
            "--json",
        ),
        "refuse",
    )  # under one sequence
    yield Case(
        c,
        (
            "search",
            "--model",
            "8b",
            "--nodes",
            "4",
            "--global-batch-seqs",
            "256",
            "--trials",
            "30",
            "--json",
        ),
        "answer",
        check=search_answer(),
    )
    yield Case(
        c,
        (
            "search",
            "--model",
            "70b",
            "--nodes",
            "4-32",
            "--global-batch-tokens",
            "4194304",
            "--objective",
            "mfu-vs-gpus",
            "--trials",
            "50",
            "--json",
        ),
        "answer",
        check=search_answer(pareto=True),
    )
    yield Case(
        c,
        (
            "search",
            "--model",
            "8b",
            "--nodes",
            "4",
            "--global-batch-seqs",
            "256",
            "--objective",
            "mfu-vs-oom",
            "--trials",
            "30",
            "--json",
        ),
        "answer",
        check=search_answer(pareto=True),
    )
    log = "{d}/logs/log_1.out"
    for assignment in (
        "dp=abc",
        "foo=1",
        "dp",
        "=3",
        "model=7b",
        "gpu=H900",
        "tp=2.5",
        "num_nodes=-1",
        "recompute=[red]",
    ):
        yield Case(
            c,
            ("ingest", log, "--into", "t.parquet", "--set", assignment),
            "refuse",
            files=(("logs/log_1.out", "nothing\n"),),
        )


def round_copy(d: Path) -> Path:
    """A copy of the round proposed once for the benchmark (``surrogate propose``)."""
    src = _shared_round()
    shutil.copytree(src, d / "r01")
    return d / "r01"


_ROUND: list[Path] = []
_ROUND_LOCK = threading.Lock()


def _shared_round() -> Path:
    with _ROUND_LOCK:
        if not _ROUND:
            where = Path(tempfile.mkdtemp(prefix="robustness-round-"))
            subprocess.run(
                [
                    EXE,
                    "propose",
                    "--round",
                    str(where / "r01"),
                    "--k",
                    "4",
                    "--model",
                    "1.34b",
                    "--nodes",
                    "1",
                    "--global-batch-seqs",
                    "64",
                ],
                check=True,
                capture_output=True,
                env=environment(where),
            )
            _ROUND.append(where / "r01")
        return _ROUND[0]


def runs_table(status: str | None = "completed", match: bool = True) -> Callable[[Path], None]:
    """A runs table for the round: its proposals measured (or other runs when not ``match``)."""

    def setup(d: Path) -> None:
        r = round_copy(d)
        props = pd.read_csv(r / "proposals.csv")
        from surrogate.config.training import CONFIG_COLUMNS

        runs = props[list(CONFIG_COLUMNS)].copy()
        runs["run_id"] = props["name"] + "/1"
        if not match:
            runs["run_id"] = "other/" + runs.index.astype(str)
            runs["dp"], runs["mbs"], runs["grad_accum"] = 1, 1, 1
            runs["num_nodes"], runs["gpus_per_node"] = 1, 1
        if status is not None:
            runs["status"] = status
        runs["mfu"] = 0.3
        runs["source"] = "mine"
        runs.to_csv(d / "runs.csv", index=False)

    return setup


def _both(*steps: Callable[[Path], object]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        for s in steps:
            s(d)

    return setup


def _edit_round(edit: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        path = d / "r01" / "round.json"
        data = json.loads(path.read_text())
        out = edit(data)
        path.write_text(json.dumps(data if out is None else out))

    return setup


def outputs_cases() -> Iterator[Case]:
    c = "score-round/train outputs"
    score = ("score-round", "--round", "{d}/r01", "--runs", "{d}/runs.csv", "--no-mlflow", "--json")
    yield Case(
        c,
        ("train", "--out", "{d}/file", "--no-track", "--n-trials", "0"),
        "refuse",
        files=(("file", "x"),),
        timeout_s=30,
    )
    yield Case(
        c,
        ("train", "--out", "{d}/full", "--no-track", "--n-trials", "0"),
        "refuse",
        files=(("full/x", "x"),),
        timeout_s=30,
    )
    yield Case(
        c, ("heatmap", "--out", "{d}/file/h"), "refuse", files=(("file", "x"),), timeout_s=30
    )
    yield Case(
        c,
        ("predict", "--from-csv", "{d}/in.csv", "--out", "{d}"),
        "refuse",
        files=(("in.csv", csv_text(list(CSV_GOOD), [list(CSV_GOOD.values())])),),
    )
    yield Case(
        c,
        (
            "propose",
            "--round",
            "{d}/r01",
            "--k",
            "2",
            "--model",
            "1.34b",
            "--global-batch-seqs",
            "64",
        ),
        "refuse",
        setup=round_copy,
    )
    for option, value in (
        ("--k", "0"),
        ("--k", "-1"),
        ("--round-number", "0"),
        ("--round-number", "-1"),
        ("--steps", "0"),
        ("--boundary-frac", "2"),
    ):
        yield Case(
            c,
            (
                "propose",
                "--round",
                "{d}/new",
                option,
                value,
                "--model",
                "1.34b",
                "--global-batch-seqs",
                "64",
            ),
            "refuse",
        )
    yield Case(c, ("score-round", "--round", "{d}/none", *score[3:]), "refuse", setup=runs_table())
    yield Case(
        c,
        score,
        "answer",
        setup=runs_table(),
        check=json_field(("metrics", "measured"), lambda v: v == 4, "4 runs measured"),
    )
    yield Case(c, score, "refuse", setup=runs_table(status=None))
    yield Case(c, score, "refuse", setup=runs_table(match=False))
    yield Case(
        c,
        score,
        "refuse",
        setup=_both(
            runs_table(), lambda d: (d / "runs.csv").write_text("status,status\ncompleted,oom\n")
        ),
    )
    yield Case(c, score, "refuse", setup=_both(runs_table(), lambda d: (d / "runs.csv").unlink()))
    for edit in (
        lambda r: r["model"].update(model_sha256="0" * 64),
        lambda r: r["model"].update(data_hash="0" * 64),
        lambda r: r.pop("model"),
        lambda r: r.pop("proposals"),
        lambda r: r.pop("round"),
        lambda r: [r],
        lambda r: r.update(proposals=[{"name": "x"}]),
        lambda r: r.update(round="one"),
    ):
        yield Case(c, score, "refuse", setup=_both(runs_table(), _edit_round(edit)))
    yield Case(
        c,
        score,
        "refuse",
        setup=_both(runs_table(), lambda d: (d / "r01" / "round.json").write_text("{")),
    )


# ------------------------------------------------------------------------ a new user's inputs
