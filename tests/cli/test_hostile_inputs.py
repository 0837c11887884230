"""One test per class of hostile input the fuzz suite (``test_fuzz.py``) and
``tests/fuzz/robustness.py`` found answered with a traceback or a silent wrong answer: each is
now one line on stderr and exit 2, or a right answer."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from surrogate.cli import main
from surrogate.errors import ConfigError

PREDICT = ["predict", "--model", "8b", "--nodes", "4", "--dp", "8", "--tp", "4", "--analytic"]
CSV_GOOD = {
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


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], match: str) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: "), captured.err
    assert re.search(match, captured.err), captured.err


# ------------------------------------------------------------------------ huge integers
@pytest.mark.parametrize("where", ["flag", "yaml", "json"])
def test_integers_beyond_float_range_are_refused(tmp_path, capsys, where):
    """Used to be an OverflowError traceback (int too large to convert to float)."""
    huge = "9" * 400
    if where == "flag":
        argv = [*PREDICT, "--mbs", huge]
    else:
        path = tmp_path / f"run.{where}"
        path.write_text(
            f"model: 8b\nnum_nodes: 4\ndp: 8\ntp: 4\nmbs: {huge}\n"
            if where == "yaml"
            else f'{{"model": "8b", "num_nodes": 4, "dp": 8, "tp": 4, "mbs": {huge}}}'
        )
        argv = ["predict", "--config", str(path), "--analytic"]
    one_line_error(
        capsys,
        argv,
        r"mbs must be at most 2\*\*53 = 9,007,199,254,740,992 .*got "
        r"an integer of 400 digits",
    )


@pytest.mark.parametrize("where", ["flag", "yaml", "csv"])
def test_integers_just_above_2_53_are_refused_not_rounded(tmp_path, capsys, where):
    """2**53 + 1 used to be read through float64 as 2**53, which passes the limit: predicted
    for a vocabulary other than the one given."""
    value = 2**53 + 1
    if where == "flag":
        argv = [*PREDICT, "--vocab-size", str(value)]
    elif where == "yaml":
        path = tmp_path / "run.yaml"
        path.write_text(f"model: 8b\nnum_nodes: 4\ndp: 8\ntp: 4\nvocab_size: {value}\n")
        argv = ["predict", "--config", str(path), "--analytic"]
    else:
        path = tmp_path / "in.csv"
        path.write_text(
            ",".join(CSV_GOOD)
            + "\n"
            + ",".join(str(value if k == "vocab_size" else v) for k, v in CSV_GOOD.items())
            + "\n"
        )
        argv = ["predict", "--from-csv", str(path), "--analytic"]
    one_line_error(
        capsys,
        argv,
        r"ModelConfig\.vocab_size must be at most 2\*\*53 = "
        r"9,007,199,254,740,992 .*got 9,007,199,254,740,993",
    )


def test_a_long_value_in_a_usage_error_is_cut(capsys):
    one_line_error(
        capsys, [*PREDICT, "--mbs", "9" * 5000], r"got '9{40}'\.\.\. \(5,000 characters\)"
    )


# ------------------------------------------------------------------------ seq_len with --hf-config
@pytest.mark.parametrize(
    "value,match",
    [
        ("abc", r"error: seq_len must be an integer, got 'abc'"),
        ("[1]", r"error: seq_len must be an integer, got \[1\]"),
        ("true", r"error: seq_len must be an integer, got True"),
    ],
)
def test_seq_len_of_a_config_file_beside_hf_config_is_type_checked(tmp_path, capsys, value, match):
    """Used to be a TypeError traceback in the sliding-window check."""
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(MISTRAL))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"seq_len: {value}\nnum_nodes: 1\ndp: 8\n")
    one_line_error(capsys, ["predict", "--hf-config", str(hf), "--config", str(cfg)], match)


def test_seq_len_of_a_config_file_reads_as_its_other_columns(tmp_path, capsys):
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(MISTRAL))
    cfg = tmp_path / "run.yaml"
    cfg.write_text("seq_len: 4096.0\nnum_nodes: 1\ndp: 8\n")
    assert (
        main(["predict", "--hf-config", str(hf), "--config", str(cfg), "--json", "--analytic"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["config"]["seq_len"] == 4096


def test_model_from_hf_config_checks_seq_len(tmp_path):
    from surrogate.config.hf_config import model_from_hf_config

    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(MISTRAL))
    for bad in ("4096", 4096.0, True, 0):
        with pytest.raises(ConfigError, match=r"seq_len must be an integer >= 1, got"):
            model_from_hf_config(hf, seq_len=bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------ CSV tables
def test_a_carriage_return_in_a_cell_round_trips(tmp_path, capsys):
    """The csv module left a bare CR unquoted: readers ended the row there and the next
    row's cells shifted one column (a silent wrong answer on reading the predictions)."""
    src = tmp_path / "in.csv"
    src.write_text(
        ",".join(CSV_GOOD)
        + "\n"
        + ",".join(map(str, CSV_GOOD.values()))
        + "\n"
        + '"\r",'
        + ",".join(map(str, list(CSV_GOOD.values())[1:]))
        + "\n",
        newline="",
    )
    assert main(["predict", "--from-csv", str(src), "--analytic"]) == 0
    out = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    assert len(out) == 2 and list(out["hidden_size"]) == [4096, 4096]
    assert out["error"].iloc[1] == "num_layers must be an integer, got '\\r'"
    from surrogate.io.tableio import write_table_atomic

    write_table_atomic(out, tmp_path / "t.csv")
    back = pd.read_csv(tmp_path / "t.csv")
    assert len(back) == 2 and back["num_layers"].iloc[1] == "\r"


def test_a_value_without_a_column_is_refused_and_trailing_commas_are_not(tmp_path, capsys):
    """pandas made the first column the index when the rows held one value more than the
    header, and shifted every other value one column left, silently (a trailing comma on
    each row did the same)."""
    header = ",".join(CSV_GOOD)
    row = ",".join(map(str, CSV_GOOD.values()))
    src = tmp_path / "in.csv"
    src.write_text(f"{header}\n{row},7\n")
    one_line_error(
        capsys,
        ["predict", "--from-csv", str(src)],
        r"in\.csv: line 2 holds 10 values, but the header names 9 columns",
    )
    src.write_text(f"{header}\n{row},\n{row},,\n")
    assert main(["predict", "--from-csv", str(src), "--analytic"]) == 0
    out = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    assert len(out) == 2 and list(out["num_layers"]) == [32, 32] and list(out["dp"]) == [8, 8]
    assert out["error"].isna().all()


@pytest.mark.parametrize(
    "column,meant",
    [
        ("micro_batch_size", "mbs"),
        ("batch_accum", "grad_accum"),
        ("tensor_model_parallel_size", "tp"),
        ("seq_length", "seq_len"),
        ("gradient_accumulation_steps", "grad_accum"),
        ("pipeline_parallel_degree", "pp"),
    ],
)
def test_frameworks_spellings_of_a_column_are_refused(tmp_path, capsys, column, meant):
    """A Megatron, nanotron or torchtitan name for a column used to be an extra column, ignored,
    and the configuration column defaulted (mbs=1)."""
    good = {k: v for k, v in CSV_GOOD.items() if k != meant}  # beside its column it passes
    src = tmp_path / "in.csv"
    src.write_text(
        ",".join([*good, column]) + "\n" + ",".join(map(str, [*good.values(), 4096])) + "\n"
    )
    one_line_error(
        capsys,
        ["predict", "--from-csv", str(src)],
        rf"column '{column}' is not a configuration column; did you mean '{meant}'",
    )
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"model: 8b\nnum_nodes: 1\ndp: 8\n{column}: 2\n")
    one_line_error(
        capsys,
        ["predict", "--config", str(cfg)],
        rf"unknown key '{column}'; did you mean '{meant}'",
    )


# ------------------------------------------------------------------------ the Playbook parser
@pytest.mark.parametrize(
    "column,value",
    [
        ("hidden_size", "inf"),
        ("num_layers", "-inf"),
        ("num_kv_heads", "abc"),
        ("num_heads", "1e400"),
    ],
)
def test_playbook_rows_with_non_finite_shapes_are_counted_skips(tmp_path, capsys, column, value):
    """Used to be an OverflowError traceback (int(inf)) that stopped the whole ingest."""
    header = next(
        csv.reader(
            [
                "job_id,name,nodes,seq_len,mbs,batch_accum,gbs,mTFLOPs,hTFLOPs,tok/s/gpu,"
                "Mem Alloc (GB),Mem Res (GB),dp,pp,tp,tp_mode,hidden_size,num_layers,num_heads,"
                "num_kv_heads,vocab_size,tie_word_embeddings,zero_stage,date,status,log_file,mfu,"
                "after_pp_fix"
            ]
        )
    )
    row = next(
        csv.reader(
            [
                "1,1.34G_dp8_tp1_pp1_acc16_mbs2_seq4096_zero0_tpmodeRED_vocab131k,1.0,4096,2,16.0,"
                "256.0,388.0,388.0,40149.94,25.07,50.18,8,1,1,REDUCE_SCATTER,2048,16,32,32.0,131072,"
                "True,0,,Success,logs/1-bench.out,39.17,True"
            ]
        )
    )
    bad = [value if h == column else v for h, v in zip(header, row, strict=True)]
    bad[0] = "2"
    src = tmp_path / "bench.csv"
    src.write_text("\n".join(",".join(r) for r in (header, row, bad)) + "\n")
    assert main(["ingest", str(src), "--into", str(tmp_path / "t.parquet")]) == 0
    out = capsys.readouterr().out
    assert "read 2 rows from 1 file(s), skipped 1" in out
    assert f"{column} must be an integer" in out or "invalid configuration" in out
    assert len(pd.read_parquet(tmp_path / "t.parquet")) == 1


# ------------------------------------------------------------------------ ingest --set
@pytest.mark.parametrize(
    "assignment,match",
    [
        ("model=7b", r"error: --set model must be one of "),
        ("tensor=8", r"--set key must be one of .* got 'tensor'"),
        ("micro_batch_size=2", r"got 'micro_batch_size'; did you mean 'mbs'\?"),
    ],
)
def test_ingest_set_is_checked_before_any_file(tmp_path, capsys, assignment, match):
    log = tmp_path / "log_1.out"
    log.write_text("nothing\n")
    one_line_error(
        capsys,
        ["ingest", str(log), "--into", str(tmp_path / "t.parquet"), "--set", assignment],
        match,
    )


# ------------------------------------------------------------------------ search and propose
SEARCH = [
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
]


@pytest.mark.parametrize(
    "extra,match",
    [
        (["--trials", "-3"], r"error: --trials must be >= 0, got -3"),  # was taken as 0
        (["--top-k", "0"], r"error: --top-k must be >= 1, got 0"),  # was an empty table
        (["--storage", "nosuch://x"], r"error: --storage must be a database URL optuna can open"),
        (["--storage", "study.db"], r"error: --storage must be a database URL .* got 'study\.db'"),
    ],
)
def test_search_options_out_of_range(
    capsys: pytest.CaptureFixture[str], extra: list[str], match: str
) -> None:
    one_line_error(capsys, [*SEARCH, *extra], match)


def test_search_storage_failures_are_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    def unreachable(*args: object, **kwargs: object) -> None:
        raise OperationalError("connect", {}, Exception("could not connect to server\nmore"))

    monkeypatch.setattr("surrogate.layouts.search.search", unreachable)
    one_line_error(
        capsys,
        [*SEARCH, "--trials", "1", "--storage", "sqlite:///study.db"],
        r"error: the optuna storage 'sqlite:///study\.db' failed: .*could not connect",
    )


def test_propose_refuses_a_round_number_below_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one_line_error(
        capsys,
        [
            "propose",
            "--round",
            str(tmp_path / "r"),
            "--round-number",
            "0",
            "--model",
            "1.34b",
            "--global-batch-seqs",
            "64",
        ],
        r"error: --round-number must be >= 1, got 0",
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "content,match",
    [
        ("[]", r"a round file holds a JSON object, got list"),  # was an AttributeError traceback
        (
            '{"round": "one", "model": {"kind": "analytic"}, "proposals": [{"name": "a", '
            '"config": {}}]}',
            r"round must be an integer >= 1, got 'one'",
        ),  # was scored as 'one'
        (
            '{"round": 1, "model": {"kind": "analytic"}, "proposals": [{"name": "a"}]}',
            r"proposals must be a non-empty list of objects with a name and a config",
        ),
        ('{"round": 1, "proposals": [{"name": "a", "config": {}}]}', r"names no proposing model"),
    ],
)
def test_score_round_checks_the_round_file(tmp_path, capsys, content, match):
    (tmp_path / "r01").mkdir()
    (tmp_path / "r01" / "round.json").write_text(content)
    runs = tmp_path / "runs.csv"
    runs.write_text("run_id,status,mfu\na/1,completed,0.3\n")
    one_line_error(
        capsys,
        ["score-round", "--round", str(tmp_path / "r01"), "--runs", str(runs), "--no-mlflow"],
        match,
    )


# ------------------------------------------------------------------------ rich markup in paths
def test_calibrate_prints_paths_with_markup_as_text(tmp_path, capsys):
    """A path holding rich markup (``[/]``) used to raise a MarkupError after the work."""
    fixtures = Path(__file__).resolve().parents[1] / "ingest" / "fixtures"
    out = tmp_path / "evil[" / "]dir[red]" / "p.json"  # the path reads evil[/]dir[red]
    out.parent.mkdir(parents=True)
    assert (
        main(
            [
                "calibrate",
                str(fixtures / "mbench_xla_matmul_excerpt.txtpb"),
                str(fixtures / "mbench_nccl_2node_excerpt.log"),
                "--gpu",
                "H100",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    err = "".join(capsys.readouterr().err.split())  # rich folds a long path
    assert f"wrote{out}" in err and out.exists()


def test_calibrate_runs_names_the_fit_on_choices(tmp_path, capsys):
    one_line_error(
        capsys,
        ["calibrate", "--runs", "playbook", "--fit-on", "most", "--out", str(tmp_path / "p.json")],
        r"--fit-on must be 'all' or 'healthy', got 'most'",
    )
    assert not (tmp_path / "p.json").exists()


# ------------------------------------------------------------------------ profiles
@pytest.mark.parametrize(
    "content",
    [
        b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n",  # a PDF
        b"GIF89a\x01\x00\x01\x00\x80\x00\x00",  # a GIF
        b"[1, 2, 3]",  # JSON, not an object
        b'{"schema_version": 1, "name": "x", "gpu": "H100", "collectives": [], "gemm": [7]}',
        b'{"schema_version": 1, "name": "x", "gpu": "H100", "collectives": ["7"]}',
        b"",
    ],
)
def test_a_profile_that_is_not_a_json_profile_is_one_line(tmp_path, capsys, content):
    """Used to be a UnicodeDecodeError, IsADirectoryError or AttributeError traceback."""
    path = tmp_path / "cal.json"
    path.write_bytes(content)
    one_line_error(
        capsys, [*PREDICT, "--profile", str(path)], r"(calibration profile|not valid JSON|not text)"
    )


def test_a_profile_that_is_a_directory_is_one_line(tmp_path, capsys):
    (tmp_path / "profiles").mkdir()
    one_line_error(
        capsys,
        [*PREDICT, "--profile", str(tmp_path / "profiles")],
        r"a calibration profile is a JSON file .* got the directory",
    )


# ------------------------------------------------------------------------ tracking stores
def _round_dir(tmp_path: Path) -> Path:
    """A round of one proposal ("a", llama3-8b on 8 GPUs) by the analytic model, and a runs
    table measuring it."""
    from dataclasses import asdict

    from surrogate.config.presets import get_preset
    from surrogate.config.training import config_from_flat, config_to_flat

    config = config_to_flat(config_from_flat({**asdict(get_preset("8b")), "num_nodes": 1, "dp": 8}))
    (tmp_path / "r01").mkdir()
    (tmp_path / "r01" / "round.json").write_text(
        json.dumps(
            {
                "round": 1,
                "model": {"kind": "analytic"},
                "proposals": [{"name": "a", "config": config}],
            }
        )
    )
    pd.DataFrame([{**config, "run_id": "a/1", "status": "completed", "mfu": 0.3}]).to_csv(
        tmp_path / "runs.csv", index=False
    )
    return tmp_path / "r01"


@pytest.mark.parametrize(
    "uri,match",
    [
        ("not a store at all", r"names a file store \(a path\), which MLflow 3 refuses"),
        ("ftp://host/mlflow", r"the scheme 'ftp' names no tracking store"),
        ("mysql://u@127.0.0.1:1/mlflow", r"cannot reach 127\.0\.0\.1:1 within 3 s"),
        ("http://127.0.0.1:1", r"cannot reach 127\.0\.0\.1:1 within 3 s"),
        ("sqlite:///{tmp}", r"is a directory, not a database file"),
        ("sqlite:///{tmp}/runs.csv", r"holds text, not an SQLite database"),
    ],
)
@pytest.mark.parametrize("command", ["score-round", "train"])
def test_an_unusable_tracking_store_is_refused_before_the_work(
    tmp_path, capsys, monkeypatch, uri, match, command
):
    """Used to be a traceback after the work, or minutes of silent retries for a server."""
    import time

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri.replace("{tmp}", str(tmp_path)))
    rnd = _round_dir(tmp_path)
    argv = (
        ["score-round", "--round", str(rnd), "--runs", str(tmp_path / "runs.csv")]
        if command == "score-round"
        else [
            "train",
            "--no-playbook",
            "--sweeps",
            str(tmp_path / "runs.csv"),
            "--out",
            str(tmp_path / "model"),
            "--storage",
            f"sqlite:///{tmp_path}/optuna.db",
        ]
    )
    start = time.perf_counter()
    one_line_error(capsys, argv, r"^error: MLFLOW_TRACKING_URI=.*" + match)
    assert time.perf_counter() - start < 5
    assert not (tmp_path / "model").exists() and not (rnd / "scores.json").exists()


def test_a_server_that_never_answers_is_refused_within_seconds(tmp_path, capsys, monkeypatch):
    """A server that accepts the connection and says nothing: MLflow retried for minutes."""
    import socket
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{server.getsockname()[1]}")
        rnd = _round_dir(tmp_path)
        start = time.perf_counter()
        one_line_error(
            capsys,
            ["score-round", "--round", str(rnd), "--runs", str(tmp_path / "runs.csv")],
            r"does not answer HTTP within 3 s .*start the MLflow server",
        )
        assert time.perf_counter() - start < 8
    finally:
        server.close()


@pytest.mark.parametrize(
    "url,match",
    [
        ("postgresql+psycopg://u@127.0.0.1:1/db", r"--storage .* cannot reach 127\.0\.0\.1:1"),
        ("mysql://u@127.0.0.1:1/db", r"--storage .* (cannot reach 127\.0\.0\.1:1|optuna can open)"),
        ("sqlite:///{tmp}", r"--storage .* is a directory"),
    ],
)
def test_an_unusable_optuna_storage_is_refused_before_the_work(tmp_path, capsys, url, match):
    if url.startswith("postgresql"):
        pytest.importorskip("psycopg")
    one_line_error(capsys, [*SEARCH, "--storage", url.replace("{tmp}", str(tmp_path))], match)


def test_score_round_keeps_its_figures_when_the_store_fails_after_scoring(
    tmp_path, capsys, monkeypatch
):
    """score-round used to lose the table it computed when MLflow failed while logging."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    rnd = _round_dir(tmp_path)

    def fails(*args: object, **kwargs: object) -> str:
        raise ConnectionError("the server went away\nmid-request")

    monkeypatch.setattr("surrogate.loop.round_log.log_round", fails)
    assert (
        main(["score-round", "--round", str(rnd), "--runs", str(tmp_path / "runs.csv"), "--json"])
        == 2
    )
    captured = capsys.readouterr()
    printed = json.loads(captured.out)  # printed first, then the error
    assert printed["metrics"]["measured"] == 1 and printed["mlflow_run_id"] is None
    assert captured.err.count("\n") == 1
    assert re.search(
        r"^error: logging the scored round to MLflow .* failed \(ConnectionError: "
        r"the server went away\); its figures are saved in .*scores\.json",
        captured.err,
    ), captured.err
    saved = json.loads((rnd / "scores.json").read_text())
    assert saved["metrics"] == printed["metrics"]
    assert (rnd / "matched_runs.csv").exists()


def test_train_keeps_its_model_and_evaluation_when_the_store_fails(
    tmp_path, capsys, monkeypatch, playbook_subset
):
    """train used to lose its evaluation tables when MLflow failed after the work."""
    from surrogate.runs.sweep_files import write_sweeps

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    sweeps = tmp_path / "runs.parquet"
    write_sweeps(playbook_subset.head(120), sweeps)

    def fails(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("training.train._track", fails)
    out = tmp_path / "model"
    assert (
        main(
            [
                "train",
                "--no-playbook",
                "--sweeps",
                str(sweeps),
                "--out",
                str(out),
                "--n-trials",
                "0",
                "--max-estimators",
                "10",
                "--protocol",
                "nodes",
            ]
        )
        == 2
    )
    captured = capsys.readouterr()
    assert "saved the model to" in captured.out  # the tables were printed first
    assert captured.err.count("\n") == 1 and re.search(
        r"^error: recording the training in MLflow .* failed \(OSError: disk full\); the model "
        r"is saved in .* and its evaluation in .*evaluation\.json",
        captured.err,
    ), captured.err
    saved = json.loads((out / "evaluation.json").read_text())
    assert saved["evaluation"]["nodes"]["learned"]["runs"] > 0
    assert (out / "model.json").exists()


# ------------------------------------------------------------------------ YAML files
def test_a_merge_key_merges(tmp_path, capsys):
    """``<<: *base`` was a raw PyYAML error (no constructor for the merge tag)."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "x-cluster: &c\n  num_nodes: 2\n  gpus_per_node: 8\nmodel: 70b\n"
        "cluster:\n  <<: *c\n  num_nodes: 4\nlayout: {<<: {dp: 4, tp: 8}, mbs: 1}\n"
    )
    assert main(["predict", "--config", str(cfg), "--json", "--analytic"]) == 0
    got = json.loads(capsys.readouterr().out)["config"]
    assert (got["num_nodes"], got["dp"], got["tp"], got["mbs"]) == (4, 4, 8, 1)


def test_an_alias_bomb_under_a_known_key_is_refused_at_once(tmp_path, capsys):
    """A 1 KB file of nested aliases took minutes and gigabytes, then printed the expanded
    value whole."""
    import time

    lines = ["b0: &b0 [y, y, y, y, y, y, y, y, y]"]
    lines += [f"b{i}: &b{i} [" + ", ".join([f"*b{i - 1}"] * 9) + "]" for i in range(1, 9)]
    cfg = tmp_path / "run.yaml"
    cfg.write_text("\n".join([*lines, "name: *b8", "model: 8b", "dp: 8"]) + "\n")
    start = time.perf_counter()
    one_line_error(
        capsys,
        ["predict", "--config", str(cfg)],
        r"expands to more than 10,000 values through its aliases",
    )
    assert time.perf_counter() - start < 3


# ------------------------------------------------------------------------ batch tables
@pytest.mark.parametrize(
    "column,meant",
    [
        ("activation_recomputation", "recompute"),
        ("mixed_precision", "dtype"),
        ("gpu_name", "gpu"),
        ("ep_size", "ep"),
        ("vpp_degree", "vpp"),
        ("n_layer", "num_layers"),
    ],
)
def test_a_column_the_batch_reader_does_not_read_is_refused_with_its_meaning(
    tmp_path, capsys, column, meant
):
    """Was ignored silently, the row predicted with the column's default."""
    src = tmp_path / "in.csv"
    good = {k: v for k, v in CSV_GOOD.items() if k != meant}
    src.write_text(
        ",".join([*good, column]) + "\n" + ",".join([*map(str, good.values()), "2"]) + "\n"
    )
    one_line_error(
        capsys,
        ["predict", "--from-csv", str(src)],
        rf"column '{column}' is not a configuration column; did you mean '{meant}'",
    )


def test_an_unknown_column_is_refused_and_an_own_one_carried_through(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text(
        ",".join([*CSV_GOOD, "cluster_label"])
        + "\n"
        + ",".join([*map(str, CSV_GOOD.values()), "east"])
        + "\n"
    )
    one_line_error(
        capsys,
        ["predict", "--from-csv", str(src)],
        r"column 'cluster_label' is not a column predict reads; .* or your own "
        r"named _cluster_label \(carried through\)",
    )
    src.write_text(
        ",".join([*CSV_GOOD, "_cluster_label", "status"])
        + "\n"
        + ",".join([*map(str, CSV_GOOD.values()), "east", "completed"])
        + "\n"
    )
    assert main(["predict", "--from-csv", str(src), "--analytic"]) == 0
    out = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    assert out["_cluster_label"].tolist() == ["east"] and 0 < out["pred_mfu"].iloc[0] <= 1


def test_a_model_column_names_a_preset_row_by_row(tmp_path, capsys):
    """Every row failed (the shape columns missing) and the command exited 0."""
    src = tmp_path / "in.csv"
    src.write_text("model,num_nodes,dp,tp,num_layers\nmixtral,1,8,1,\n70b,4,4,8,40\n")
    assert main(["predict", "--from-csv", str(src), "--analytic"]) == 0
    out = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    assert out["error"].isna().all(), out["error"].tolist()
    assert out["num_experts"].tolist() == [8, 0]
    assert out["num_layers"].tolist() == [32, 40]  # the row's own column wins over the preset
    src.write_text("model,num_nodes,dp\n8b,1,8\n13b,1,8\n")
    one_line_error(
        capsys,
        ["predict", "--from-csv", str(src)],
        r"in\.csv, row 2: model must be one of .* got '13b'",
    )


def test_a_table_whose_every_row_fails_exits_2_after_writing(tmp_path, capsys):
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text(
        "num_layers,hidden_size,num_heads,ffn_hidden_size,vocab_size,dp\n"
        "32,4096,32,14336,128256,3\n32,4096,32,14336,128256,5\n"
    )
    assert main(["predict", "--from-csv", str(src), "--out", str(dst), "--analytic"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: every one of the 2 rows of ")
    assert str(dst) in err[0]
    assert len(pd.read_csv(dst)) == 2


@pytest.mark.parametrize(
    "argv,match",
    [
        ([*PREDICT, "--out", "x.csv", "--json"], r"--out writes the predictions of --from-csv"),
        (
            ["predict", "--from-csv", "{csv}", "--tp", "2"],
            r"--tp does not apply with --from-csv: .* give tp as a column",
        ),
        (
            ["predict", "--from-csv", "{csv}", "--hf-config", "c.json"],
            r"--hf-config does not apply with --from-csv",
        ),
        (["predict", "--from-csv", "{csv}", "--explain"], r"--explain does not apply"),
    ],
)
def test_options_the_mode_does_not_read_are_refused(tmp_path, capsys, argv, match):
    """``--out`` without ``--from-csv`` was ignored, exit 0; so were flags beside it."""
    src = tmp_path / "in.csv"
    src.write_text(",".join(CSV_GOOD) + "\n" + ",".join(map(str, CSV_GOOD.values())) + "\n")
    one_line_error(capsys, [a.replace("{csv}", str(src)) for a in argv], match)
    assert not Path("x.csv").exists()


# ------------------------------------------------------------------------ torchtitan TOML
@pytest.mark.parametrize(
    "line,match",
    [
        (
            "pipeline_parallel_degree = -4",
            r"\[parallelism\] pipeline_parallel_degree must be an "
            r"integer >= 1, got -4",
        ),
        (
            'context_parallel_degree = "two"',
            r"\[parallelism\] context_parallel_degree must be an "
            r"integer >= 1, got 'two'",
        ),
        (
            "data_parallel_shard_degree = -3",
            r"data_parallel_shard_degree must be an integer >= 1 "
            r"or -1, got -3",
        ),
        (
            "tensor_parallel_degree = 2.0",
            r"tensor_parallel_degree must be an integer >= 1, got 2\.0",
        ),
    ],
)
def test_a_torchtitan_value_is_blamed_on_its_own_key(tmp_path, capsys, line, match):
    """A negative degree was blamed on gpus_per_node; text was refused without the key."""
    job = tmp_path / "job.toml"
    job.write_text(
        f'[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\n{line}\n'
        "[training]\nlocal_batch_size = 1\nseq_len = 4096\n"
    )
    one_line_error(capsys, ["predict", "--config", str(job), "--nodes", "1"], match)


# ------------------------------------------------------------------------ non-table files
ZIP = b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00"
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01"


@pytest.mark.parametrize(
    "argv,content,match",
    [
        (["calibrate", "--runs", "{f}", "--out", "{d}/p.json"], JPEG, r"--runs .* is a JPEG image"),
        (
            ["heatmap", "--measured", "{f}", "--out", "{d}/h"],
            ZIP,
            r"--measured .* is a ZIP archive",
        ),
        (
            ["score-round", "--round", "{d}/r01", "--runs", "{f}", "--no-mlflow"],
            b"\x00\x01\x02",
            r"--runs .* is binary data",
        ),
        (["predict", "--from-csv", "{f}"], b"\xff\xfe\x00a\x00,\x00b", r"--from-csv .* is binary"),
    ],
)
def test_a_file_that_is_not_a_table_is_named_for_what_it_is(tmp_path, capsys, argv, content, match):
    """An image given as a table was "line 4 holds 3 values"."""
    _round_dir(tmp_path)
    f = tmp_path / "table.csv"
    f.write_bytes(content)
    one_line_error(
        capsys, [a.replace("{f}", str(f)).replace("{d}", str(tmp_path)) for a in argv], match
    )


def test_a_parquet_name_on_text_is_refused(tmp_path, capsys):
    f = tmp_path / "runs.parquet"
    f.write_text("run_id,status\n")
    one_line_error(
        capsys,
        ["calibrate", "--runs", str(f), "--out", str(tmp_path / "p.json")],
        r"is named \.parquet but holds text, not Parquet",
    )


# ------------------------------------------------------------------------ propose
@pytest.mark.parametrize(
    "option,value", [("--k", "-3"), ("--steps", "0"), ("--boundary-frac", "-0.5")]
)
def test_propose_refuses_before_scoring(tmp_path, capsys, option, value):
    """--k 0 was refused after seconds of scoring."""
    import time

    start = time.perf_counter()
    one_line_error(
        capsys,
        [
            "propose",
            "--round",
            str(tmp_path / "r"),
            option,
            value,
            "--model",
            "8b",
            "--nodes",
            "1-8",
            "--global-batch-seqs",
            "256",
        ],
        rf"{option} must be",
    )
    assert time.perf_counter() - start < 2 and not (tmp_path / "r").exists()


def test_propose_quotes_a_round_directory_with_spaces(tmp_path, capsys):
    import shlex

    rnd = tmp_path / "my campaign" / "round 1"
    assert (
        main(
            [
                "propose",
                "--round",
                str(rnd),
                "--k",
                "2",
                "--model",
                "1.34b",
                "--nodes",
                "1",
                "--global-batch-seqs",
                "64",
                "--max-cp",
                "1",
                "--max-vpp",
                "1",
            ]
        )
        == 0
    )
    out = " ".join(capsys.readouterr().out.split())
    hint = re.search(r"`(surrogate score-round --round .*? --runs TABLE)`", out)
    assert hint is not None, out
    assert shlex.split(hint.group(1))[3] == str(rnd)


# ------------------------------------------------------------------------ Hugging Face names
def test_search_and_predict_name_a_hf_config_alike_and_say_its_sequence_length(tmp_path, capsys):
    """search named the model by the folder ("work"), predict "hf-config"; search took the
    config's maximum position as the sequence length silently."""
    hf = {k: v for k, v in MISTRAL.items()}
    hf["architectures"] = ["MistralForCausalLM"]
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf))
    assert (
        main(
            [
                "search",
                "--hf-config",
                str(folder / "config.json"),
                "--nodes",
                "1",
                "--global-batch-seqs",
                "64",
                "--trials",
                "0",
                "--analytic",
                "--json",
                "--seq-len",
                "4096",
            ]
        )
        == 0
    )
    searched = json.loads(capsys.readouterr().out)
    assert searched["space"]["model"] == "MistralForCausalLM" and not any(
        "max_position_embeddings" in n for n in searched["notes"]
    )
    assert (
        main(
            [
                "predict",
                "--hf-config",
                str(folder / "config.json"),
                "--nodes",
                "1",
                "--dp",
                "8",
                "--seq-len",
                "4096",
                "--analytic",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("MistralForCausalLM on 1 x 8")
    hf["max_position_embeddings"] = 4096  # within the sliding window: the default holds
    (folder / "config.json").write_text(json.dumps(hf))
    assert (
        main(
            [
                "search",
                "--hf-config",
                str(folder / "config.json"),
                "--nodes",
                "1",
                "--global-batch-seqs",
                "64",
                "--trials",
                "0",
                "--analytic",
                "--json",
            ]
        )
        == 0
    )
    searched = json.loads(capsys.readouterr().out)
    assert searched["space"]["seq_len"] == 4096
    assert any(
        "sequence length 4,096: the config's max_position_embeddings" in n
        for n in searched["notes"]
    )


# ------------------------------------------------------------------------ flagged runs
def test_runs_the_validator_rejects_are_kept_flagged_and_training_reads_around_them(
    tmp_path, capsys, playbook_subset
):
    """The Playbook's runs with a pipeline deeper than the layers were dropped at ingestion."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    into = tmp_path / "t.parquet"
    assert main(["ingest", str(fixtures / "sweeps_playbook_excerpt.csv"), "--into", str(into)]) == 0
    assert (
        "kept 1 run(s) whose layout the configuration validator rejects" in capsys.readouterr().out
    )
    table = pd.read_parquet(into)
    flagged = table[table["layout_problem"].notna()]
    assert len(flagged) == 1 and flagged["pp"].iloc[0] > flagged["num_layers"].iloc[0]
    assert "num_layers must be >= pp * vpp" in flagged["layout_problem"].iloc[0]
    from surrogate.runs.sweep_files import read_sweeps, write_sweeps

    mixed = pd.concat(
        [read_sweeps(into, flagged=True), playbook_subset.head(150)], ignore_index=True
    )
    write_sweeps(mixed, into)  # appends and rewrites keep it
    assert read_sweeps(into, flagged=True)["layout_problem"].notna().sum() == 1
    assert (
        main(
            [
                "train",
                "--no-playbook",
                "--sweeps",
                str(into),
                "--out",
                str(tmp_path / "m"),
                "--n-trials",
                "0",
                "--max-estimators",
                "10",
                "--protocol",
                "nodes",
                "--no-track",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["evaluation"]["nodes"]["learned"]["runs"] > 0
