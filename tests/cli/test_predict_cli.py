"""`surrogate predict`: flags, files, JSON output, CSV batches, and errors as one line + exit 2."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from surrogate.cli import main
from surrogate.config.training import CONFIG_COLUMNS, config_to_flat
from surrogate.errors import ConfigError
from surrogate.prediction.predict import PRED_COLUMNS, RUNS_AS_ANOTHER, resolve_model

FLAGS = [
    "predict",
    "--model",
    "8b",
    "--gpu",
    "H100-SXM-80GB",
    "--nodes",
    "4",
    "--dp",
    "8",
    "--tp",
    "4",
    "--pp",
    "1",
    "--mbs",
    "2",
    "--grad-accum",
    "16",
    "--zero",
    "1",
    "--framework",
    "nanotron",
]
LAYOUT = dict(
    gpu="H100-SXM-80GB",
    num_nodes=4,
    dp=8,
    tp=4,
    pp=1,
    mbs=2,
    grad_accum=16,
    zero_stage=1,
    framework="nanotron",
)


@pytest.fixture(autouse=True)
def analytic_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pin the analytic model's output; the learned path has its own tests."""
    monkeypatch.setattr("surrogate.prediction.predict.resolve_model", lambda model: None)


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_flags_print_the_tables(capsys):
    assert main(FLAGS) == 0
    out = capsys.readouterr().out
    assert "llama3-8b" in out and "dp=8 tp=4 pp=1" in out
    assert "Memory of the most" in out
    for term in ("weights", "optimizer", "activations", "total", "capacity"):
        assert term in out
    assert "verdict: fits" in out
    assert "Step time" in out and "compute" in out
    assert "MFU:" in out and "tokens/s per GPU" in out


def test_json_output(capsys):
    d = run_json(capsys, [*FLAGS, "--json"])
    assert {"memory_gib", "step_time_s", "mfu", "p_oom"} <= set(d)
    assert 0 < d["mfu"] < 1 and d["p_oom"] < 0.5 and d["pred_status"] == "completed"
    assert d["config"]["tp"] == 4 and d["config"]["num_layers"] == 32
    assert d["memory_gib"]["total"] < d["capacity_gib"]


def test_the_parameter_set_used_is_said(capsys):
    """Which fitted set (or the default set) the analytic model used; torchtitan on one GPU
    trains under autocast and takes pytorch/autocast's set, and says so."""
    assert run_json(capsys, [*FLAGS, "--json"])["analytic_parameters"] == {
        "set": "nanotron/pp-fix",
        "fitted": True,
        "source": "fitted",
    }
    assert main(FLAGS) == 0  # the Playbook's cluster terms stay on the Playbook's profile
    out = " ".join(capsys.readouterr().out.split())
    assert "(cluster-scoped terms: the default set's, not hf-playbook-cluster's)" in out
    megatron = [*FLAGS, "--framework", "megatron"]
    assert run_json(capsys, [*megatron, "--json"])["analytic_parameters"] == {
        "set": "megatron/core",
        "fitted": False,
        "source": "default",
    }
    assert main(megatron) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "analytic parameters: the default set (megatron/core has none of its own" in out
    titan = [
        "predict",
        "--model",
        "playbook-1.34b",
        "--nodes",
        "1",
        "--framework",
        "torchtitan",
        "--seq-len",
        "4096",
    ]
    for layout, fitted_set, why in (
        (
            ["--gpus-per-node", "1", "--zero", "0"],
            "pytorch/autocast",
            "torchtitan/main trains under torch.autocast here",
        ),
        (
            ["--gpus-per-node", "8", "--dp", "8", "--zero", "3"],
            "pytorch-fsdp2/bf16",
            "torchtitan/main shards with FSDP2 alone here",
        ),
    ):
        args = [*titan, *layout]
        assert run_json(capsys, [*args, "--json"])["analytic_parameters"] == {
            "set": fitted_set,
            "fitted": True,
            "source": "fitted",
        }
        assert main(args) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert f"analytic parameters: {fitted_set}'s fitted set ({why})" in out


def test_sequence_parallelism_follows_the_framework_unless_given(capsys):
    """torchtitan's tensor parallelism always shards the sequence: that is the default; a
    layout it would not run is predicted as given, with a note."""
    titan = [*FLAGS, "--framework", "torchtitan", "--zero", "2"]
    assert run_json(capsys, [*titan, "--json"])["config"]["sequence_parallel"] is True
    assert run_json(capsys, [*FLAGS, "--json"])["config"]["sequence_parallel"] is False
    given = run_json(capsys, [*titan, "--no-sequence-parallel", "--json"])
    assert given["config"]["sequence_parallel"] is False
    assert "always runs with sequence parallelism" in given["runs_as_another"]
    assert main([*titan, "--no-sequence-parallel"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "note: torchtitan would not run this layout as described" in out
    assert run_json(capsys, [*titan, "--json"])["runs_as_another"] == ""


def test_sp_is_short_for_sequence_parallel(capsys):
    """``--sp`` / ``--no-sp`` set what ``--sequence-parallel`` / ``--no-sequence-parallel`` do."""
    assert run_json(capsys, [*FLAGS, "--sp", "--json"])["config"]["sequence_parallel"] is True
    titan = [*FLAGS, "--framework", "torchtitan", "--zero", "2"]
    off = run_json(capsys, [*titan, "--no-sp", "--json"])
    assert off["config"]["sequence_parallel"] is False
    assert off == run_json(capsys, [*titan, "--no-sequence-parallel", "--json"])


def test_dp_replicate_flag(capsys):
    """--dp-replicate: copies of ZeRO's shards (Megatron's distributed optimizer instances
    here), the optimizer states sharded over dp / copies, shown in the layout line; refused
    where the framework has none."""
    assert main(FLAGS) == 0  # the Playbook's cluster terms stay on the Playbook's profile
    out = " ".join(capsys.readouterr().out.split())
    assert "(cluster-scoped terms: the default set's, not hf-playbook-cluster's)" in out
    megatron = [*FLAGS, "--framework", "megatron"]
    full = run_json(capsys, [*megatron, "--json"])
    copies = run_json(capsys, [*megatron, "--dp-replicate", "2", "--json"])
    assert copies["config"]["dp_replicate"] == 2 and full["config"]["dp_replicate"] == 1
    assert copies["memory_gib"]["optimizer"] == pytest.approx(2 * full["memory_gib"]["optimizer"])
    assert main([*megatron, "--dp-replicate", "2"]) == 0
    assert "zero=1 (sharded over dp x cp / 2, 2 copies)" in " ".join(
        capsys.readouterr().out.split()
    )
    assert main([*FLAGS, "--dp-replicate", "2"]) == 2
    assert "nanotron shards over every data-parallel rank" in capsys.readouterr().err


def test_pipeline_schedule_flag(capsys):
    """--pp-schedule afab: every micro-batch in flight, shown in the layout line."""
    piped = [
        "predict",
        "--model",
        "8b",
        "--nodes",
        "4",
        "--dp",
        "8",
        "--tp",
        "1",
        "--pp",
        "4",
        "--mbs",
        "1",
        "--grad-accum",
        "16",
        "--zero",
        "1",
        "--framework",
        "nanotron",
    ]
    onef = run_json(capsys, [*piped, "--json"])
    afab = run_json(capsys, [*piped, "--pp-schedule", "afab", "--json"])
    assert afab["config"]["pp_schedule"] == "afab" and onef["config"]["pp_schedule"] == "1f1b"
    # 16 micro-batches in flight on the first stage instead of 4; the few unsharded tensors
    # per micro-batch beyond the first (tests/analytic/test_memory.py) keep it from exact
    assert afab["memory_gib"]["activations"] == pytest.approx(
        16 / 4 * onef["memory_gib"]["activations"], rel=0.01
    )
    assert afab["step_time_s"] == pytest.approx(onef["step_time_s"])
    assert main([*piped, "--pp-schedule", "afab"]) == 0
    assert "pp=4 (afab) cp=1" in capsys.readouterr().out
    assert main([*piped, "--pp-schedule", "afab", "--framework", "megatron"]) == 2
    assert "framework megatron has no pipeline schedule 'afab'" in capsys.readouterr().err


def test_oom_verdict(capsys):
    argv = ["predict", "--model", "70b", "--dp", "8", "--zero", "0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "verdict: OOM" in out
    assert "its speed if it ran (the verdict says it would not):\ntokens/s per GPU" in out
    assert main(["predict", "--model", "8b", "--nodes", "4", "--dp", "8", "--tp", "4"]) == 0
    out = capsys.readouterr().out
    assert "verdict: fits" in out and "if it ran" not in out


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--tp", "8"], r"error: dp \* tp \* pp \* cp must equal the number of GPUs \(32"),
        (["--gpu", "V100"], r"error: gpu must be one of "),
        (["--zero", "3"], r"error: framework nanotron implements zero_stage 0 or 1, got 3"),
        (["--framework", "deepspeed"], r"error: framework must be one of "),
        (["--gpu", "A100", "--dtype", "fp8"], r"error: dtype 'fp8' needs a GPU with FP8"),
        (
            ["--global-batch-seqs", "100"],
            r"error: dp \* grad_accum \* mbs must equal the "
            r"global batch of 100 sequences",
        ),
        (["--model", "7b"], r"error: model must be one of "),
    ],
)
def test_invalid_config_is_one_line_and_exit_2(capsys, argv, match):
    assert main([*FLAGS, *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:")
    assert captured.out == ""
    assert re.match(match, lines[0]), lines[0]


def test_debug_reraises():
    with pytest.raises(ConfigError, match=r"dp \* tp \* pp \* cp must equal"):
        main([*FLAGS, "--tp", "8", "--debug"])


def test_no_model_is_an_error(capsys):
    assert main(["predict", "--dp", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: give a model: --model PRESET, --hf-config FILE")
    assert err.count("\n") == 1


@pytest.mark.parametrize("fmt", ["yaml", "json"])
@pytest.mark.parametrize("nested", [False, True])
def test_config_files(tmp_path, capsys, fmt, nested):
    data = {"model": "8b", **LAYOUT}
    if nested:
        data = {
            "model": {
                "num_layers": 32,
                "hidden_size": 4096,
                "ffn_hidden_size": 14336,
                "num_heads": 32,
                "num_kv_heads": 8,
                "vocab_size": 128256,
                "seq_len": 8192,
            },
            "cluster": {"gpu": "H100", "num_nodes": 4},
            "layout": {k: v for k, v in LAYOUT.items() if k not in ("gpu", "num_nodes")},
        }
    path = tmp_path / f"run.{fmt}"
    path.write_text(yaml.safe_dump(data) if fmt == "yaml" else json.dumps(data))
    from_file = run_json(capsys, ["predict", "--config", str(path), "--json"])
    from_flags = run_json(capsys, [*FLAGS, "--json"])
    assert from_file["config"] == from_flags["config"]
    assert from_file["mfu"] == pytest.approx(from_flags["mfu"])
    # flags override the file
    over = run_json(capsys, ["predict", "--config", str(path), "--mbs", "1", "--json"])
    assert over["config"]["mbs"] == 1


@pytest.mark.parametrize(
    "name,content,match",
    [
        ("bad.yaml", "dp: [1, 2", r"error: .*bad\.yaml: cannot parse"),
        ("list.json", "[1, 2]", r"error: .*list\.json: a configuration file holds a mapping"),
        (
            "float.yaml",
            "model: 8b\nnum_nodes: 4\ndp: 8.5\ntp: 4",
            r"error: dp must be an "
            r"integer, got 8\.5",
        ),
        # unknown keys name the nearest valid one instead of silently taking defaults
        (
            "zero.yaml",
            "model: 8b\nnum_nodes: 4\ndp: 8\ntp: 4\nzero: 1",
            r"error: .*zero\.yaml: unknown key 'zero'; did you mean 'zero_stage'\?",
        ),
        (
            "dash.yaml",
            "model: 8b\nnum_nodes: 4\ndp: 8\ntp: 4\ngrad-accum: 16",
            r"error: .*unknown key 'grad-accum'; did you mean 'grad_accum'\?",
        ),
        (
            "typo.json",
            '{"model": "8b", "num_nodes": 4, "dp": 8, "tp": 4, "foo": 1}',
            r"error: .*typo\.json: unknown key 'foo'; keys must be configuration columns: "
            r"num_layers, ",
        ),
        (
            "section.yaml",
            "model: 8b\ncluster: {num_nodes: 4}\nlayout: {dp: 8, tp: 4, gpu: A100}",
            r"error: .*section\.yaml: 'gpu' belongs under cluster:, not layout:",
        ),
        # a key given twice: parsers keep the last silently
        (
            "twice.yaml",
            "model: 8b\nnum_nodes: 4\ndp: 8\ntp: 4\ntp: 8",
            r"error: .*twice\.yaml: each key must appear once, got 'tp' twice \(line 5\)",
        ),
        (
            "twice.json",
            '{"model": "8b", "num_nodes": 4, "dp": 8, "tp": 4, "tp": 8}',
            r"error: .*twice\.json: each key must appear once, got 'tp' twice",
        ),
        (
            "nested.yaml",
            "model: 8b\nnum_nodes: 4\ndp: 8\nlayout: {dp: 8, tp: 4}",
            r"error: .*nested\.yaml: 'dp' is given twice",
        ),
    ],
)
def test_config_file_errors(tmp_path, capsys, name, content, match):
    path = tmp_path / name
    path.write_text(content)
    assert main(["predict", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(match, err), err


def test_a_torchtitan_job_toml_is_a_config_file(tmp_path, capsys):
    """The job TOML search writes for a layout reads back, in predict, to that layout."""
    launch = tmp_path / "launch"
    found = run_json(
        capsys,
        [
            "search",
            "--model",
            "8b",
            "--nodes",
            "2",
            "--global-batch-seqs",
            "64",
            "--framework",
            "torchtitan",
            "--trials",
            "0",
            "--analytic",
            "--top-k",
            "3",
            "--json",
            "--launch-dir",
            str(launch),
        ],
    )
    tomls = sorted(launch.glob("*/config.toml"))
    assert len(tomls) == 3 and 'flavor = "8B"' in tomls[0].read_text()  # the preset's flavour
    for row, toml in zip(found["top"], tomls, strict=True):
        d = run_json(capsys, ["predict", "--config", str(toml), "--json"])
        assert d["mfu"] == pytest.approx(row["pred_mfu"])
        assert (d["config"]["num_nodes"], d["config"]["framework"]) == (2, "torchtitan")
    # the command line completes and overrides the file
    d = run_json(capsys, ["predict", "--config", str(tomls[0]), "--gpu", "H200", "--json"])
    assert d["config"]["gpu"].startswith("H200")


TITAN = """[model]
name = "llama3"
flavor = "{flavor}"
[training]
local_batch_size = 2
seq_len = 8192
[parallelism]
data_parallel_shard_degree = {shard}
tensor_parallel_degree = {tp}
"""


@pytest.mark.parametrize(
    "values,flags,match",
    [
        (
            dict(flavor="8B", shard=-1, tp=2),
            [],
            r"error: .*job\.toml: data_parallel_shard_degree = -1 fills the world, whose size the "
            r"config does not give: pass --num-nodes N",
        ),
        (
            dict(flavor="debugmodel", shard=4, tp=2),
            [],  # torchtitan's default checkpointing
            r"error: .*every 2-th block .* the model is unknown: "
            r"pass --num-layers L or --model PRESET",
        ),
        (
            dict(flavor="8B", shard=1, tp=8),
            [],
            r"error: .*job\.toml: tensor or pipeline parallelism without FSDP .* trains in fp32",
        ),
        (
            dict(flavor="8B", shard=4, tp=2),
            ["--nodes", "2"],
            r"error: dp \* tp \* pp \* cp must equal",
        ),
        ("[training\n", [], r"error: .*job\.toml: not valid TOML"),
    ],
)
def test_torchtitan_job_toml_errors(tmp_path, capsys, values, flags, match):
    path = tmp_path / "job.toml"
    path.write_text(values if isinstance(values, str) else TITAN.format(**values))
    assert main(["predict", "--config", str(path), "--analytic", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(match, err), err


def test_a_torchtitan_job_toml_takes_what_it_leaves_open_from_the_flags(tmp_path, capsys):
    path = tmp_path / "job.toml"
    path.write_text(TITAN.format(flavor="8B", shard=-1, tp=2))
    d = run_json(capsys, ["predict", "--config", str(path), "--nodes", "2", "--json"])
    assert (d["config"]["dp"], d["config"]["tp"], d["config"]["zero_stage"]) == (8, 2, 3)
    path.write_text(TITAN.format(flavor="debugmodel", shard=4, tp=2))
    d = run_json(capsys, ["predict", "--config", str(path), "--model", "70b", "--json"])
    assert (d["config"]["num_layers"], d["config"]["num_nodes"]) == (80, 1)


def test_missing_config_file(tmp_path, capsys):
    assert main(["predict", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err.startswith("error: --config must name an existing file")


def test_hf_config(tmp_path, capsys):
    hf = {
        "model_type": "llama",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    argv = [
        "predict",
        "--hf-config",
        str(path),
        *FLAGS[3:],
        "--json",
    ]  # the layout flags, without --model
    d = run_json(capsys, argv)
    ref = run_json(capsys, [*FLAGS, "--json"])
    assert d["config"] == ref["config"]
    short = run_json(capsys, [*argv, "--seq-len", "4096"])
    assert short["config"]["seq_len"] == 4096
    assert main(["predict", "--hf-config", str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err.startswith("error: --hf-config must name an existing file")


def test_from_csv(tmp_path, capsys):
    d = run_json(capsys, [*FLAGS, "--json"])
    good = d["config"]
    rows = [good, dict(good, tp=3), dict(good, mbs=1), dict(good, dp=8.5)]
    src, dst = tmp_path / "in.csv", tmp_path / "out" / "pred.csv"
    pd.DataFrame(rows).to_csv(src, index=False)
    assert main(["predict", "--from-csv", str(src), "--out", str(dst)]) == 0
    assert "wrote 4 rows" in capsys.readouterr().err
    out = pd.read_csv(dst, keep_default_na=False, na_values=[""])
    assert list(out.columns) == [*CONFIG_COLUMNS, *PRED_COLUMNS, RUNS_AS_ANOTHER, "error"]
    assert out["error"].fillna("").iloc[[0, 2]].eq("").all()
    assert out["error"].iloc[1].startswith("dp * tp * pp * cp must equal the number of GPUs")
    assert out["error"].iloc[3] == "dp must be an integer, got 8.5"
    assert out["pred_mfu"].iloc[0] == pytest.approx(d["mfu"])
    assert out["pred_status"].iloc[0] == "completed" and out["pred_mfu"].iloc[2] > 0
    assert out["pred_mfu"].iloc[[1, 3]].isna().all()


def test_a_table_without_framework_gets_one_answer_from_library_and_cli(tmp_path: Path) -> None:
    """One default framework (torchtitan) for a row that names none: surrogate.predict on the
    table and predict --from-csv on the same table agree."""
    from surrogate import predict
    from surrogate.config.frameworks import DEFAULT_FRAMEWORK
    from surrogate.config.layout import ClusterConfig, LayoutConfig
    from surrogate.config.presets import get_preset
    from surrogate.config.training import TrainingConfig

    rows = [
        config_to_flat(
            TrainingConfig(
                model=get_preset("8b"),
                cluster=ClusterConfig(num_nodes=2),
                layout=LayoutConfig(
                    dp=dp, tp=16 // dp, mbs=1, grad_accum=4, zero_stage=2, sequence_parallel=dp < 16
                ),
            )
        )
        for dp in (4, 8, 16)
    ]
    table = pd.DataFrame(rows).drop(columns=["framework", "framework_version"])
    table.to_csv(tmp_path / "in.csv", index=False)
    assert (
        main(
            [
                "predict",
                "--from-csv",
                str(tmp_path / "in.csv"),
                "--analytic",
                "--out",
                str(tmp_path / "out.csv"),
            ]
        )
        == 0
    )
    cli = pd.read_csv(tmp_path / "out.csv")
    library = predict(table, model=None)
    assert DEFAULT_FRAMEWORK == "torchtitan" and rows[0]["framework"] == DEFAULT_FRAMEWORK
    assert cli["pred_mfu"].tolist() == pytest.approx(library["pred_mfu"].tolist(), rel=1e-12)
    assert cli["pred_peak_mem_reserved_gib"].tolist() == pytest.approx(
        library["pred_peak_mem_reserved_gib"].tolist(), rel=1e-12
    )


def test_from_csv_to_stdout(tmp_path, capsys):
    from surrogate.config.layout import ClusterConfig, LayoutConfig
    from surrogate.config.presets import get_preset
    from surrogate.config.training import TrainingConfig

    cfg = TrainingConfig(
        model=get_preset("1.34b"),
        cluster=ClusterConfig(),
        layout=LayoutConfig(framework="nanotron", dp=8),
    )
    src = tmp_path / "in.csv"
    pd.DataFrame([config_to_flat(cfg)]).to_csv(src, index=False)
    assert main(["predict", "--from-csv", str(src)]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    assert header[-len(PRED_COLUMNS) - 2 :] == [*PRED_COLUMNS, RUNS_AS_ANOTHER, "error"]


@pytest.mark.parametrize(
    "header,match",
    [
        # pandas would read the second dp as dp.1 and every reader would take the first
        (
            "dp,tp,dp",
            r"error: .*in\.csv: each column must appear once in the header, got 'dp' "
            r"again as column 9",
        ),
        (
            "dp,tp,zero",
            r"error: .*in\.csv: column 'zero' is not a configuration column; did "
            r"you mean 'zero_stage'\?",
        ),
    ],
)
def test_from_csv_bad_columns(tmp_path, capsys, header, match):
    src = tmp_path / "in.csv"
    src.write_text(
        f"num_layers,hidden_size,ffn_hidden_size,num_heads,vocab_size,seq_len,"
        f"{header}\n16,2048,8192,32,131072,4096,8,1,1\n"
    )
    assert main(["predict", "--from-csv", str(src)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(match, err), err


def test_names_with_rich_markup_print_as_text(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model": "8b", "name": "evil[/]model[red]", **LAYOUT}))
    assert main(["predict", "--config", str(path)]) == 0
    assert "evil[/]model[red] on 4 x 8" in capsys.readouterr().out


def test_from_csv_missing_file(tmp_path, capsys):
    assert main(["predict", "--from-csv", str(tmp_path / "none.csv")]) == 2
    assert capsys.readouterr().err.startswith("error: table ")


@pytest.mark.slow
def test_console_script():
    beside_python = Path(sys.executable).with_name("surrogate")
    exe = shutil.which("surrogate") or (str(beside_python) if beside_python.exists() else None)
    if exe is None:
        pytest.skip("the surrogate console script is not installed on PATH")
    ok = subprocess.run([exe, *FLAGS, "--json"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert 0 < json.loads(ok.stdout)["mfu"] < 1
    bad = subprocess.run([exe, *FLAGS, "--tp", "8"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: dp * tp * pp * cp")


@pytest.mark.parametrize(
    ("extra", "rc", "said"),
    [
        (["--nodes", "1000000", "--dp", "2000000"], 0, "extrapolates: num_gpus 8e+06 > 2.621e+05"),
        (["--seq-len", "10000000"], 0, "extrapolates: seq_len 1e+07 > 2.097e+06"),
        (["--mbs", "100000000"], 0, "extrapolates: batch_tokens"),
        (["--grad-accum", str(10**20)], 2, "error: LayoutConfig.grad_accum must be at most 2**53"),
        (["--vocab-size", str(10**12)], 2, "error: MFU must be at most 100% of the dense peak"),
    ],
)
def test_inputs_far_outside_anything_known(capsys, extra, rc, said):
    """Used to be predicted without a word (MFU 146% for a vocabulary of 10^12)."""
    assert main([*FLAGS, *extra]) == rc
    captured = capsys.readouterr()
    text = " ".join((captured.out + captured.err).split())
    assert said in text
    if rc == 2:
        assert captured.err.count("\n") == 1 and not captured.out
    else:
        assert "tokens/s per GPU: 0 " not in text


def test_a_model_cell_naming_no_preset_is_named_by_its_row_in_the_whole_file() -> None:
    """--from-csv reads its table a chunk at a time; a chunk's rows are numbered in the file.
    Each distinct name is looked up once; empty cells take the row's own model columns."""
    from surrogate.config.files import expand_model_column

    chunk = pd.DataFrame({"model": ["8b", None, " ", "8b", "13b", "13b"]})
    with pytest.raises(ConfigError, match=r"^t\.csv, row 14: model must be one of .*'13b'"):
        expand_model_column(chunk, where="t.csv", first_row=10)
    expand_model_column(chunk.head(4), where="t.csv", first_row=10)
    expand_model_column(pd.DataFrame({"dp": [8]}), where="t.csv", first_row=1)


@pytest.mark.parametrize("name", ["megatron", "nemo", "megatron-bridge"])
def test_a_megatron_recipe_says_the_defaults_it_assumed(capsys, name):
    """Llama 3 70B as NVIDIA's performance table runs it on 64 H100s (tp 4, pp 8, vp 5, mbs 1,
    gbs 256, seq 8,192, FP8): the distributed optimizer and sequence parallelism are taken
    from the framework's documented defaults, and the output says so."""
    argv = [
        "predict",
        "--model",
        "70b",
        "--gpu",
        "H100",
        "--nodes",
        "8",
        "--dp",
        "2",
        "--tp",
        "4",
        "--pp",
        "8",
        "--vpp",
        "5",
        "--mbs",
        "1",
        "--grad-accum",
        "128",
        "--seq-len",
        "8192",
        "--dtype",
        "fp8",
        "--framework",
        name,
    ]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "zero=1" in out and "sp=True" in out and "megatron/core" in out
    assert "megatron defaults assumed (megatron-bridge 0.3.1, megatron-core 0.16.1):" in out
    for said in (
        "distributed optimizer on",
        "sequence parallel on",
        "recompute none",
        "fp8 recipe tensorwise",
        "tp comm overlap on",
        "overlap grad reduce on",
    ):
        assert said in out
    assert main([*argv, "--zero", "0"]) == 0  # given: no longer an assumption
    assert "distributed optimizer" not in capsys.readouterr().out
    assert main(FLAGS) == 0  # nanotron: no table of defaults, no line
    assert "defaults assumed" not in capsys.readouterr().out


def test_network_of_the_day(capsys, mbench_data_dir):
    """--network takes a bandwidth at the job's node count or an nccl-tests log, and the
    output says which network the prediction assumed; without it, the profile's curve."""
    flags = [*FLAGS, "--profile", "hf-playbook-cluster"]
    plain = run_json(capsys, [*flags, "--json"])
    assert plain["network"]["assumed"] == "profile curve"
    slow = run_json(capsys, [*flags, "--json", "--network", "50GBps"])
    assert slow["network"]["assumed"] == "measured" and slow["network"]["nodes"] == 4
    assert slow["network"]["busbw_gbps"] == 50.0 and slow["network"]["scale"] < 1
    assert slow["mfu"] < plain["mfu"]
    assert run_json(capsys, [*flags, "--json", "--network", "50 GB/s"])["mfu"] == slow["mfu"]
    log = mbench_data_dir / "microbench/nccl-tests/gcp_a3mega_2node_16gpu_all_reduce.log"
    assert main([*flags, "--network", str(log)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"network: measured: [\d.]+ GB/s all-reduce busbw at 2 nodes", out)
    assert main(flags) == 0
    assert "network: profile curve (" in capsys.readouterr().out


def test_without_a_network_the_interval_holds_the_clusters_spread(capsys, monkeypatch):
    """Without --network the MFU interval includes the spread of the cluster's measured
    all-reduce bandwidth at the job's node count (the profile records it); with the network
    measured at the profile curve's own bandwidth the prediction is the same and its interval
    the narrower one, inside the other (the bundled learned model's)."""
    monkeypatch.setattr("surrogate.prediction.predict.resolve_model", resolve_model)
    flags = [
        *FLAGS,
        "--profile",
        "hf-playbook-cluster",
        "--model",
        "playbook-8.86b",
        "--nodes",
        "32",
        "--dp",
        "32",
        "--pp",
        "2",
        "--grad-accum",
        "4",
        "--json",
    ]
    plain = run_json(capsys, flags)
    spread = plain["network"]["measured_spread"]
    assert spread["p10_gbps"] < spread["median_gbps"] < spread["p90_gbps"]
    curve = f"{plain['network']['busbw_gbps']:.6f}GBps"
    known = run_json(capsys, [*flags, "--network", curve])
    assert known["mfu"] == pytest.approx(plain["mfu"], rel=1e-3)
    ulp = 1 + 1e-12
    assert plain["mfu_lo"] <= known["mfu_lo"] * ulp and known["mfu_hi"] <= plain["mfu_hi"] * ulp
    assert plain["mfu_hi"] / plain["mfu_lo"] > known["mfu_hi"] / known["mfu_lo"]


@pytest.mark.parametrize(
    "value,match",
    [
        (
            "fast",
            r"error: --network must be an nccl-tests all_reduce_perf log \(a file\) or a "
            r"measured all-reduce bus bandwidth",
        ),
        ("0GBps", r"error: --network must be a positive bus bandwidth"),
    ],
)
def test_a_bad_network_is_one_line(capsys, value, match):
    assert main([*FLAGS, "--profile", "hf-playbook-cluster", "--network", value]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and re.match(match, lines[0]), lines
    assert captured.out == ""


def test_from_csv_reads_a_table_of_predictions_under_older_names(tmp_path):
    """`predict --from-csv` given back its own output written under the older names (e.g.
    pred_peak_mem_gib, pred_peak_mem_lo_gib) predicts it again under the current names only."""
    from surrogate.runs.names import RENAMED_COLUMNS

    flat = dict(LAYOUT) | {"model": "8b"}
    pd.DataFrame([flat]).to_csv(tmp_path / "in.csv", index=False)
    assert (
        main(
            [
                "predict",
                "--from-csv",
                str(tmp_path / "in.csv"),
                "--analytic",
                "--out",
                str(tmp_path / "new.csv"),
            ]
        )
        == 0
    )
    new = pd.read_csv(tmp_path / "new.csv")
    older = {n: o for o, n in RENAMED_COLUMNS.items() if n in new.columns}
    assert {"pred_peak_mem_reserved_gib", "pred_peak_mem_reserved_hi_gib"} <= set(older)
    new.rename(columns=older).to_csv(tmp_path / "old.csv", index=False)
    assert (
        main(
            [
                "predict",
                "--from-csv",
                str(tmp_path / "old.csv"),
                "--analytic",
                "--out",
                str(tmp_path / "again.csv"),
            ]
        )
        == 0
    )
    again = pd.read_csv(tmp_path / "again.csv")
    assert list(again.columns) == list(new.columns)
    pd.testing.assert_frame_equal(again, new)
