"""One test per class of hostile input the fuzz suite (``test_fuzz.py``) and
``benchmarks/robustness.py`` found answered with a traceback or a silent wrong answer: each is
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
CSV_GOOD = {"num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336, "num_heads": 32,
            "num_kv_heads": 8, "vocab_size": 128256, "seq_len": 4096, "num_nodes": 1, "dp": 8}
MISTRAL = {"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
           "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096}


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
        path.write_text(f"model: 8b\nnum_nodes: 4\ndp: 8\ntp: 4\nmbs: {huge}\n" if where ==
                        "yaml" else f'{{"model": "8b", "num_nodes": 4, "dp": 8, "tp": 4, '
                                    f'"mbs": {huge}}}')
        argv = ["predict", "--config", str(path), "--analytic"]
    one_line_error(capsys, argv, r"mbs must be at most 2\*\*53 = 9,007,199,254,740,992 .*got "
                                 r"an integer of 400 digits")


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
        path.write_text(",".join(CSV_GOOD) + "\n" + ",".join(
            str(value if k == "vocab_size" else v) for k, v in CSV_GOOD.items()) + "\n")
        argv = ["predict", "--from-csv", str(path), "--analytic"]
    one_line_error(capsys, argv, r"ModelConfig\.vocab_size must be at most 2\*\*53 = "
                                 r"9,007,199,254,740,992 .*got 9,007,199,254,740,993")


def test_a_long_value_in_a_usage_error_is_cut(capsys):
    one_line_error(capsys, [*PREDICT, "--mbs", "9" * 5000],
                   r"got '9{40}'\.\.\. \(5,000 characters\)")


# ------------------------------------------------------------------------ seq_len with --hf-config
@pytest.mark.parametrize("value,match", [
    ("abc", r"error: seq_len must be an integer, got 'abc'"),
    ("[1]", r"error: seq_len must be an integer, got \[1\]"),
    ("true", r"error: seq_len must be an integer, got True"),
])
def test_seq_len_of_a_config_file_beside_hf_config_is_type_checked(tmp_path, capsys, value,
                                                                   match):
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
    assert main(["predict", "--hf-config", str(hf), "--config", str(cfg), "--json",
                 "--analytic"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["seq_len"] == 4096


def test_model_from_hf_config_checks_seq_len(tmp_path):
    from surrogate.hf_config import model_from_hf_config

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
    src.write_text(",".join(CSV_GOOD) + "\n" + ",".join(map(str, CSV_GOOD.values())) + "\n"
                   + '"\r",' + ",".join(map(str, list(CSV_GOOD.values())[1:])) + "\n",
                   newline="")
    assert main(["predict", "--from-csv", str(src), "--analytic"]) == 0
    out = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    assert len(out) == 2 and list(out["hidden_size"]) == [4096, 4096]
    assert out["error"].iloc[1] == "num_layers must be an integer, got '\\r'"
    from surrogate.tableio import write_table_atomic

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
    one_line_error(capsys, ["predict", "--from-csv", str(src)],
                   r"in\.csv: line 2 holds 10 values, but the header names 9 columns")
    src.write_text(f"{header}\n{row},\n{row},,\n")
    assert main(["predict", "--from-csv", str(src), "--analytic"]) == 0
    out = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    assert len(out) == 2 and list(out["num_layers"]) == [32, 32] and list(out["dp"]) == [8, 8]
    assert out["error"].isna().all()


@pytest.mark.parametrize("column,meant", [
    ("micro_batch_size", "mbs"), ("batch_accum", "grad_accum"),
    ("tensor_model_parallel_size", "tp"), ("seq_length", "seq_len"),
    ("gradient_accumulation_steps", "grad_accum"), ("pipeline_parallel_degree", "pp"),
])
def test_frameworks_spellings_of_a_column_are_refused(tmp_path, capsys, column, meant):
    """A Megatron, nanotron or torchtitan name for a column used to be an extra column, ignored,
    and the configuration column defaulted (mbs=1)."""
    good = {k: v for k, v in CSV_GOOD.items() if k != meant}  # beside its column it passes
    src = tmp_path / "in.csv"
    src.write_text(",".join([*good, column]) + "\n"
                   + ",".join(map(str, [*good.values(), 4096])) + "\n")
    one_line_error(capsys, ["predict", "--from-csv", str(src)],
                   rf"column '{column}' is not a configuration column; did you mean '{meant}'")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"model: 8b\nnum_nodes: 1\ndp: 8\n{column}: 2\n")
    one_line_error(capsys, ["predict", "--config", str(cfg)],
                   rf"unknown key '{column}'; did you mean '{meant}'")


# ------------------------------------------------------------------------ the Playbook parser
@pytest.mark.parametrize("column,value", [("hidden_size", "inf"), ("num_layers", "-inf"),
                                          ("num_kv_heads", "abc"), ("num_heads", "1e400")])
def test_playbook_rows_with_non_finite_shapes_are_counted_skips(tmp_path, capsys, column,
                                                                 value):
    """Used to be an OverflowError traceback (int(inf)) that stopped the whole ingest."""
    header = next(csv.reader([
        "job_id,name,nodes,seq_len,mbs,batch_accum,gbs,mTFLOPs,hTFLOPs,tok/s/gpu,"
        "Mem Alloc (GB),Mem Res (GB),dp,pp,tp,tp_mode,hidden_size,num_layers,num_heads,"
        "num_kv_heads,vocab_size,tie_word_embeddings,zero_stage,date,status,log_file,mfu,"
        "after_pp_fix"]))
    row = next(csv.reader([
        "1,1.34G_dp8_tp1_pp1_acc16_mbs2_seq4096_zero0_tpmodeRED_vocab131k,1.0,4096,2,16.0,"
        "256.0,388.0,388.0,40149.94,25.07,50.18,8,1,1,REDUCE_SCATTER,2048,16,32,32.0,131072,"
        "True,0,,Success,logs/1-bench.out,39.17,True"]))
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
@pytest.mark.parametrize("assignment,match", [
    ("model=7b", r"error: --set model must be one of "),
    ("tensor=8", r"--set key must be one of .* got 'tensor'"),
    ("micro_batch_size=2", r"got 'micro_batch_size'; did you mean 'mbs'\?"),
])
def test_ingest_set_is_checked_before_any_file(tmp_path, capsys, assignment, match):
    log = tmp_path / "log_1.out"
    log.write_text("nothing\n")
    one_line_error(capsys, ["ingest", str(log), "--into", str(tmp_path / "t.parquet"), "--set",
                            assignment], match)


# ------------------------------------------------------------------------ search and propose
SEARCH = ["search", "--model", "8b", "--nodes", "4", "--global-batch-seqs", "256", "--trials",
          "0", "--analytic", "--json"]


@pytest.mark.parametrize("extra,match", [
    (["--trials", "-3"], r"error: --trials must be >= 0, got -3"),  # was taken as 0
    (["--top-k", "0"], r"error: --top-k must be >= 1, got 0"),  # was an empty table
    (["--storage", "nosuch://x"], r"error: --storage must be a database URL optuna can open"),
    (["--storage", "study.db"], r"error: --storage must be a database URL .* got 'study\.db'"),
])
def test_search_options_out_of_range(capsys: pytest.CaptureFixture[str], extra: list[str],
                                     match: str) -> None:
    one_line_error(capsys, [*SEARCH, *extra], match)


def test_search_storage_failures_are_one_line(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy.exc import OperationalError

    def unreachable(*args: object, **kwargs: object) -> None:
        raise OperationalError("connect", {}, Exception("could not connect to server\nmore"))

    monkeypatch.setattr("surrogate.search.search", unreachable)
    one_line_error(capsys, [*SEARCH, "--storage", "sqlite:///study.db"],
                   r"error: the optuna storage 'sqlite:///study\.db' failed: .*could not connect")


def test_propose_refuses_a_round_number_below_1(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    one_line_error(capsys, ["propose", "--round", str(tmp_path / "r"), "--round-number", "0",
                            "--model", "1.34b", "--global-batch-seqs", "64"],
                   r"error: --round-number must be >= 1, got 0")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("content,match", [
    ("[]", r"a round file holds a JSON object, got list"),  # was an AttributeError traceback
    ('{"round": "one", "model": {"kind": "analytic"}, "proposals": [{"name": "a", '
     '"config": {}}]}', r"round must be an integer >= 1, got 'one'"),  # was scored as 'one'
    ('{"round": 1, "model": {"kind": "analytic"}, "proposals": [{"name": "a"}]}',
     r"proposals must be a non-empty list of objects with a name and a config"),
    ('{"round": 1, "proposals": [{"name": "a", "config": {}}]}', r"names no proposing model"),
])
def test_score_round_checks_the_round_file(tmp_path, capsys, content, match):
    (tmp_path / "r01").mkdir()
    (tmp_path / "r01" / "round.json").write_text(content)
    runs = tmp_path / "runs.csv"
    runs.write_text("run_id,status,mfu\na/1,completed,0.3\n")
    one_line_error(capsys, ["score-round", "--round", str(tmp_path / "r01"), "--runs", str(runs),
                            "--no-mlflow"], match)


# ------------------------------------------------------------------------ rich markup in paths
def test_calibrate_prints_paths_with_markup_as_text(tmp_path, capsys):
    """A path holding rich markup (``[/]``) used to raise a MarkupError after the work."""
    fixtures = Path(__file__).resolve().parents[1] / "ingest" / "fixtures"
    out = tmp_path / "evil[" / "]dir[red]" / "p.json"  # the path reads evil[/]dir[red]
    out.parent.mkdir(parents=True)
    assert main(["calibrate", str(fixtures / "mbench_xla_matmul_excerpt.txtpb"),
                 str(fixtures / "mbench_nccl_2node_excerpt.log"), "--gpu", "H100", "--out",
                 str(out)]) == 0
    err = "".join(capsys.readouterr().err.split())  # rich folds a long path
    assert f"wrote{out}" in err and out.exists()


def test_calibrate_runs_names_the_fit_on_choices(tmp_path, capsys):
    one_line_error(capsys, ["calibrate", "--runs", "playbook", "--fit-on", "most",
                            "--out", str(tmp_path / "p.json")],
                   r"--fit-on must be 'all' or 'healthy', got 'most'")
    assert not (tmp_path / "p.json").exists()
