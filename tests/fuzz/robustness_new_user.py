"""A new user's inputs to :mod:`robustness` (``NEW_USER``): profiles, tracking stores, YAML
anchors, batch tables, torchtitan TOML, non-table files, propose, hf-config names, flagged runs."""

from __future__ import annotations

import io
import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from robustness_harness import (
    FIXTURES,
    ROOT,
    Case,
    Check,
    prediction,
)
from robustness_inputs import CSV_GOOD, PREDICT, csv_text
from robustness_runs import round_copy, runs_table

BMP = b"BM6\x00\x00\x00\x00\x00\x00\x006\x00\x00\x00(\x00\x00\x00" + bytes(64)
ZIP = b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00" + bytes(64)
PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n"
WEBP = b"RIFF\x1a\x00\x00\x00WEBPVP8 " + bytes(32)
_SERVERS: dict[str, int] = {}
_SERVERS_LOCK = threading.Lock()


def _servers() -> dict[str, int]:
    """Ports of two local servers, started once: ``silent`` accepts connections and never
    answers; ``broken`` answers /health as an MLflow server does and 500 to everything else
    (a store that passes the check and fails after the work)."""
    import socket
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    with _SERVERS_LOCK:
        if _SERVERS:
            return _SERVERS
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        _SERVERS["silent"] = silent.getsockname()[1]
        _SERVERS["_keep"] = id(silent)
        _KEEP.append(silent)

        class Broken(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                ok = self.path.rstrip("/") == "/health"
                body = b"OK" if ok else b'{"error_code": "INTERNAL_ERROR"}'
                self.send_response(200 if ok else 500)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Broken)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        _SERVERS["broken"] = server.server_address[1]
        _KEEP.append(server)
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        _SERVERS["closed"] = closed.getsockname()[1]
        closed.close()  # nothing listens there now
        return _SERVERS


_KEEP: list[Any] = []


def _sweep_table(d: Path) -> None:
    """150 Playbook runs as a sweep table (a small, fast training set)."""
    from surrogate.ingest.playbook_network import playbook_runs
    from surrogate.runs.sweep_files import write_sweeps
    from surrogate.runs.sweeps import SWEEP_COLUMNS

    runs = playbook_runs()
    runs = runs[runs["hidden_size"] == 2048].sample(150, random_state=0)
    write_sweeps(runs[[c for c in SWEEP_COLUMNS if c in runs.columns]], d / "s.parquet")


def _kept_files(*names: str) -> Callable[[Path], str | None]:
    def kept(d: Path) -> str | None:
        missing = [n for n in names if not (d / n).exists()]
        return f"{', '.join(missing)} not saved" if missing else None

    return kept


def _no_file(*names: str) -> Callable[[Path], str | None]:
    """Nothing written (the input was refused before the work)."""

    def kept(d: Path) -> str | None:
        there = [n for n in names if (d / n).exists()]
        return f"{', '.join(there)} written by a refused command" if there else None

    return kept


def _hint_quoted(d: Path, out: str, err: str) -> str | None:
    import shlex

    flat = " ".join(out.split())
    m = re.search(r"`(surrogate score-round --round .*? --runs TABLE)`", flat)
    if m is None:
        return "no score-round hint"
    got = shlex.split(m.group(1))[3]
    return None if got == str(d / "my rounds" / "r 1") else f"the hint's path reads {got!r}"


def _csv_columns(**want: list[Any]) -> Check:
    def check(d: Path, out: str, err: str) -> str | None:
        rows = pd.read_csv(io.StringIO(out))
        if rows["error"].notna().any():
            return f"row errors: {rows['error'].dropna().tolist()[:2]}"
        for col, values in want.items():
            if col not in rows.columns or rows[col].tolist() != values:
                return f"{col} = {rows[col].tolist() if col in rows.columns else None}"
        return None

    return check


def _search_names(d: Path, out: str, err: str) -> str | None:
    got = json.loads(out)
    if got["space"]["model"] in ("work", "hf-config", "config"):
        return f"named by the folder: {got['space']['model']!r}"
    if got["space"]["seq_len"] == 32768 and not any(
        "max_position_embeddings" in n for n in got["notes"]
    ):
        return "took max_position_embeddings (32,768) as the sequence length silently"
    return None


def new_user_cases() -> Iterator[Case]:
    """The classes of ``NEW_USER`` (instances other than the ones first reported)."""
    yield from _profile_cases()
    yield from _store_cases()
    yield from _yaml_cases()
    yield from _batch_cases()
    yield from _file_cases()


def _profile_cases() -> Iterator[Case]:
    """What ``--profile`` reads must be a JSON profile."""
    predict = (*PREDICT, "--analytic", "--json")
    # profiles: what --profile reads must be a JSON profile
    for name, content in (
        ("p.bmp", BMP),
        ("p.json", PDF),
        ("p.json", b"[]"),
        ("p.json", b'{"schema_version": 1, "gemm": 3}'),
        ("p.json", b'{"schema_version": 1, "name": "x", "gpu": "H100", "collectives": [null]}'),
        ("p.json", b"{"),
    ):
        yield Case(
            "profiles",
            (*predict, "--profile", "{d}/" + name),
            "refuse",
            files=((name, content),),
            timeout_s=20,
        )
    yield Case(
        "profiles",
        (*predict, "--profile", "{d}/dir"),
        "refuse",
        files=(("dir/x.json", "{}"),),
        timeout_s=20,
    )
    yield Case(
        "profiles",
        (*predict, "--profile", "H100-SXM-80GB"),
        "answer",
        check=prediction(),
        timeout_s=20,
    )


def _store_cases() -> Iterator[Case]:
    """Tracking stores: refused before the work, and the work kept when one fails after it."""
    servers = _servers()
    # tracking stores: refused before the work, and the work kept when one fails after it
    runs_setup = runs_table()
    score = ("score-round", "--round", "{d}/r01", "--runs", "{d}/runs.csv", "--json")
    bad_stores = (
        "mlflow runs here",
        "file:///nonexistent/mlruns",
        "gopher://x/mlflow",
        f"http://127.0.0.1:{servers['closed']}",
        f"http://127.0.0.1:{servers['silent']}",
        "sqlite:///{d}/r01",
        "sqlite:///{d}/runs.csv",
        "http://[::1",
    )
    for uri in bad_stores:
        yield Case(
            "tracking stores",
            score,
            "refuse",
            setup=runs_setup,
            env=(("MLFLOW_TRACKING_URI", uri),),
            names="MLFLOW_TRACKING_URI",
            kept=_no_file("r01/scores.json"),
            timeout_s=30,
        )
    for uri in bad_stores[:5]:  # none needs a file of the case
        yield Case(
            "tracking stores",
            (
                "train",
                "--no-playbook",
                "--sweeps",
                "{d}/s.parquet",
                "--out",
                "{d}/m",
                "--n-trials",
                "0",
            ),
            "refuse",
            setup=_sweep_table,
            env=(("MLFLOW_TRACKING_URI", uri),),
            names="MLFLOW_TRACKING_URI",
            kept=_no_file("m"),
            timeout_s=30,
        )
    yield Case(
        "tracking stores",
        (
            "search",
            "--model",
            "8b",
            "--nodes",
            "4",
            "--global-batch-seqs",
            "256",
            "--trials",
            "0",
            "--json",
            "--storage",
            f"mysql://u@127.0.0.1:{servers['closed']}/db",
        ),
        "refuse",
        timeout_s=30,
    )
    broken = (("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{servers['broken']}"),)
    yield Case(
        "tracking stores",
        score,
        "refuse",
        setup=runs_setup,
        env=broken,
        names=r"scores\.json",
        kept=_kept_files("r01/scores.json", "r01/matched_runs.csv"),
        timeout_s=120,
    )
    yield Case(
        "tracking stores",
        (
            "train",
            "--no-playbook",
            "--sweeps",
            "{d}/s.parquet",
            "--out",
            "{d}/m",
            "--n-trials",
            "0",
            "--protocol",
            "nodes",
            "--max-estimators",
            "10",
        ),
        "refuse",
        setup=_sweep_table,
        env=broken,
        names=r"evaluation\.json",
        kept=_kept_files("m/model.json", "m/evaluation.json"),
        timeout_s=300,
    )


def _yaml_cases() -> Iterator[Case]:
    """YAML anchors: merge keys merge, alias bombs and loops are refused at once."""
    # YAML anchors: merge keys merge, alias bombs and loops are refused at once
    merged = "x-l: &l {dp: 4, tp: 8, mbs: 1}\nmodel: 70b\nnum_nodes: 4\nlayout: {<<: *l, dp: 4}\n"
    yield Case(
        "YAML anchors",
        ("predict", "--config", "{d}/run.yaml", "--json", "--analytic"),
        "answer",
        files=(("run.yaml", merged),),
        check=prediction({"dp": 4, "tp": 8, "num_nodes": 4}),
        timeout_s=20,
    )
    yield Case(
        "YAML anchors",
        ("predict", "--config", "{d}/run.yaml", "--json", "--analytic"),
        "answer",
        files=(("run.yaml", "<<: [{model: 8b}, {num_nodes: 1, dp: 8}]\ndp: 8\n"),),
        check=prediction({"dp": 8, "num_nodes": 1}),
        timeout_s=20,
    )
    for depth, fan, key in (
        (7, 8, "gpu"),
        (9, 6, "name"),
        (20, 2, "framework"),
        (5, 40, "recompute"),
    ):
        lines = [f"z0: &z0 [{', '.join(['q'] * fan)}]"] + [
            f"z{i}: &z{i} [{', '.join([f'*z{i - 1}'] * fan)}]" for i in range(1, depth)
        ]
        text = "\n".join([*lines, f"{key}: *z{depth - 1}", "model: 8b", "dp: 8"]) + "\n"
        yield Case(
            "YAML anchors",
            ("predict", "--config", "{d}/run.yaml"),
            "refuse",
            files=(("run.yaml", text),),
            names="aliases",
            timeout_s=20,
        )
    yield Case(
        "YAML anchors",
        ("predict", "--config", "{d}/run.yaml"),
        "refuse",
        files=(("run.yaml", "model: &m {name: *m}\n"),),
        timeout_s=20,
    )


def _batch_cases() -> Iterator[Case]:
    """Batch tables and torchtitan TOML values."""
    # batch tables: columns the reader does not read, presets, options the mode ignores
    header, good = list(CSV_GOOD), [str(v) for v in CSV_GOOD.values()]
    for col, meant in (
        ("gradient_checkpointing", "recompute"),
        ("compute_dtype", "dtype"),
        ("accelerator", "gpu"),
        ("ep_parallel_size", "ep"),
        ("sp", None),
        ("n_head", None),
        ("throughput_target", None),
    ):
        yield Case(
            "batch tables",
            ("predict", "--from-csv", "{d}/in.csv"),
            "refuse",
            files=(("in.csv", csv_text([*header, col], [[*good, "1"]])),),
            names=f"did you mean '{meant}'" if meant else f"'{col}'",
            timeout_s=20,
        )
    yield Case(
        "batch tables",
        ("predict", "--from-csv", "{d}/in.csv", "--analytic"),
        "answer",
        files=(("in.csv", "model,num_nodes,dp,tp,_label\nmixtral,1,8,1,a\n1.34b,1,8,1,b\n"),),
        check=_csv_columns(num_experts=[8, 0], _label=["a", "b"]),
        timeout_s=20,
    )
    yield Case(
        "batch tables",
        ("predict", "--from-csv", "{d}/in.csv"),
        "refuse",
        files=(("in.csv", "model,num_nodes,dp\n8b,1,8\nllama2-13b,1,8\n"),),
        names="row 2",
        timeout_s=20,
    )
    yield Case(
        "batch tables",
        ("predict", "--from-csv", "{d}/in.csv", "--out", "{d}/o.csv", "--analytic"),
        "refuse",
        files=(("in.csv", csv_text(header, [[*good[:-1], "3"], [*good[:-1], "6"]])),),
        names="every one of the 2 rows",
        kept=_kept_files("o.csv"),
        timeout_s=20,
    )
    for extra in (("--out", "{d}/o.csv"), ("--out", "{d}/o.csv", "--json")):
        yield Case(
            "batch tables",
            (*PREDICT, *extra),
            "refuse",
            names="--out",
            kept=_no_file("o.csv"),
            timeout_s=20,
        )
    for extra in (("--dp", "8"), ("--config", "{d}/in.csv"), ("--json",)):
        yield Case(
            "batch tables",
            ("predict", "--from-csv", "{d}/in.csv", *extra),
            "refuse",
            files=(("in.csv", csv_text(header, [good])),),
            names=extra[0],
            timeout_s=20,
        )
    # torchtitan TOML: a bad value is blamed on its own key
    for key, value in (
        ("pipeline_parallel_degree", "-4"),
        ("context_parallel_degree", '"two"'),
        ("tensor_parallel_degree", "1.5"),
        ("expert_parallel_degree", "0"),
        ("data_parallel_shard_degree", "-8"),
        ("data_parallel_replicate_degree", "false"),
    ):
        toml = (
            f'[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\n{key} = {value}\n'
            "[training]\nlocal_batch_size = 1\nseq_len = 4096\n"
        )
        yield Case(
            "torchtitan TOML",
            ("predict", "--config", "{d}/job.toml", "--nodes", "1"),
            "refuse",
            files=(("job.toml", toml),),
            names=key,
            timeout_s=20,
        )
    yield Case(
        "torchtitan TOML",
        ("predict", "--config", "{d}/job.toml", "--nodes", "1"),
        "refuse",
        files=(("job.toml", "training = 5\n"),),
        names=r"\[training\]",
        timeout_s=20,
    )


def _file_cases() -> Iterator[Case]:
    """Files that are not tables, propose's checks and hints, a config.json's name, flagged runs."""
    # files that are not tables
    for argv, name, content, kind in (
        (("calibrate", "--runs", "{d}/t.csv", "--out", "{d}/p.json"), "t.csv", BMP, "BMP"),
        (("heatmap", "--measured", "{d}/t.csv", "--out", "{d}/h"), "t.csv", PDF, "PDF"),
        (
            ("heatmap", "--measured", "{d}/t.parquet", "--out", "{d}/h"),
            "t.parquet",
            b"a,b\n1,2\n",
            "Parquet",
        ),
        (
            ("score-round", "--round", "{d}/r01", "--runs", "{d}/t.csv", "--no-mlflow"),
            "t.csv",
            ZIP,
            "ZIP",
        ),
        (
            (
                "propose",
                "--round",
                "{d}/new",
                "--runs",
                "{d}/t.csv",
                "--model",
                "1.34b",
                "--global-batch-seqs",
                "64",
            ),
            "t.csv",
            WEBP,
            "RIFF",
        ),
        (
            ("train", "--no-playbook", "--sweeps", "{d}/t.csv", "--no-track", "--out", "{d}/m"),
            "t.csv",
            b"\x00" * 64,
            "binary",
        ),
        (("predict", "--from-csv", "{d}/t.csv"), "t.csv", "é,ü\n".encode("latin-1"), "UTF-8"),
    ):
        yield Case(
            "non-table files",
            argv,
            "refuse",
            files=((name, content),),
            setup=round_copy if "score-round" in argv else None,
            names=kind,
            kept=_no_file("p.json", "h.png", "new", "m"),
            timeout_s=20,
        )
    # propose: refused before scoring; its hints quote paths with spaces
    big = ("--model", "8b", "--nodes", "1-16", "--global-batch-seqs", "512")
    for option, value in (
        ("--k", "0"),
        ("--k", "-2"),
        ("--steps", "-1"),
        ("--boundary-frac", "1.5"),
        ("--round-number", "0"),
    ):
        yield Case(
            "propose",
            ("propose", "--round", "{d}/r", option, value, *big),
            "refuse",
            names=option,
            kept=_no_file("r"),
            timeout_s=10,
        )
    yield Case(
        "propose",
        (
            "propose",
            "--round",
            "{d}/my rounds/r 1",
            "--k",
            "2",
            "--model",
            "1.34b",
            "--global-batch-seqs",
            "64",
        ),
        "answer",
        check=_hint_quoted,
    )
    # a config.json's model: named by the config, its sequence length said
    hf = json.loads((FIXTURES / "qwen2-7b.json").read_text())
    hf.pop("_name_or_path", None)
    for extra in ((), ("--seq-len", "4096")):
        yield Case(
            "hf-config names",
            (
                "search",
                "--hf-config",
                "{d}/work/config.json",
                "--nodes",
                "1",
                "--global-batch-seqs",
                "64",
                "--trials",
                "0",
                "--analytic",
                "--json",
                *extra,
            ),
            "answer",
            files=(("work/config.json", json.dumps(hf)),),
            check=_search_names,
        )
    # the runs the validator rejects: kept, flagged
    yield Case(
        "flagged runs",
        (
            "ingest",
            str(ROOT / "tests" / "fixtures" / "sweeps_playbook_excerpt.csv"),
            "--into",
            "{d}/t.parquet",
        ),
        "answer",
        check=_flagged_kept,
        timeout_s=60,
    )


def _flagged_kept(d: Path, out: str, err: str) -> str | None:
    table = pd.read_parquet(d / "t.parquet")
    m = re.search(r"read (\d+) rows from \d+ file\(s\), skipped (\d+)", out)
    if m is None or int(m.group(1)) != len(table) + int(m.group(2)):
        return f"rows in != rows in the table + skipped ({out[:200]!r})"
    if "layout_problem" not in table.columns or table["layout_problem"].notna().sum() == 0:
        return "the run whose layout the validator rejects was not kept, flagged"
    return None
