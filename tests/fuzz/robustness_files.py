"""Files and outputs for :mod:`robustness` (``FILES_AND_OUTPUTS``): every file option given
what is not a regular file or is too large; outputs a command cannot write; a table's lock held
by a stopped process; proposes into one new round at once; logs with a zero throughput."""

from __future__ import annotations

import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from robustness_harness import EXE, ROOT, Case, environment
from robustness_inputs import CSV_GOOD, PREDICT, csv_text
from robustness_runs import round_copy

PLAYBOOK_EXCERPT = ROOT / "tests" / "fixtures" / "sweeps_playbook_excerpt.csv"
TORCHTITAN = ROOT / "tests" / "fixtures" / "sweeps_torchtitan" / "llama3_8b"
NANOTRON = ROOT / "tests" / "fixtures" / "sweeps_bench_cluster" / "dp-2_tp-4_pp-1_mbz-4"
MEGATRON = ROOT / "tests" / "fixtures" / "sweeps_megatron" / "gpt_8b" / "train_2nodes.log"
SHAPE = ("--gpu", "H100-SXM-80GB", "--nodes", "4", "--dp", "8", "--tp", "4")
GOAL = (
    "--model",
    "8b",
    "--gpu",
    "H100-SXM-80GB",
    "--nodes",
    "4",
    "--global-batch-tokens",
    "4194304",
)
CSV_ROW = csv_text(list(CSV_GOOD), [list(CSV_GOOD.values())])

# ------------------------------------------------------------------------ file arguments
FILE_OPTIONS: dict[str, tuple[tuple[str, ...], str, int]] = {
    # where: (argv with {f} for the file, suffix, the kind's cap in bytes)
    "--from-csv": (("predict", "--from-csv", "{f}"), ".csv", 16 << 30),
    "--config": (("predict", "--config", "{f}", *SHAPE), ".yaml", 16 << 20),
    "--config toml": (("predict", "--config", "{f}", *SHAPE), ".toml", 16 << 20),
    "--hf-config": (("predict", "--hf-config", "{f}", *SHAPE), ".json", 16 << 20),
    "--profile": ((*PREDICT, "--profile", "{f}"), ".json", 16 << 20),
    "ingest": (("ingest", "{f}", "--into", "t.parquet"), ".csv", 16 << 30),
    "ingest torchtitan": (
        ("ingest", "{f}", "--into", "t.parquet", "--format", "torchtitan", "--set", "num_nodes=1"),
        ".log",
        2 << 30,
    ),
    "ingest megatron": (
        ("ingest", "{f}", "--into", "t.parquet", "--format", "megatron"),
        ".log",
        2 << 30,
    ),
    "ingest nanotron": (
        ("ingest", "{f}", "--into", "t.parquet", "--format", "nanotron"),
        ".out",
        2 << 30,
    ),
    "ingest nccl-tests": (
        ("ingest", "{f}", "--into", "t.parquet", "--format", "nccl-tests"),
        ".log",
        2 << 30,
    ),
    "calibrate jsonl": (
        ("calibrate", "{f}", "--gpu", "H100", "--out", "p.json"),
        ".jsonl",
        2 << 30,
    ),
    "calibrate nccl": (("calibrate", "{f}", "--gpu", "H100", "--out", "p.json"), ".log", 2 << 30),
    "calibrate txtpb": (
        ("calibrate", "{f}", "--gpu", "H100", "--out", "p.json"),
        ".txtpb",
        16 << 30,
    ),
    "calibrate --runs": (
        ("calibrate", "--runs", "{f}", "--gpu", "H100", "--out", "p.json"),
        ".csv",
        16 << 30,
    ),
    "propose --runs": (("propose", "--runs", "{f}", *GOAL, "--round", "r1"), ".csv", 16 << 30),
    "heatmap --measured": (("heatmap", "--measured", "{f}", "--out", "h"), ".csv", 16 << 30),
    "data summary --sweeps": (("data", "summary", "--sweeps", "{f}"), ".parquet", 16 << 30),
    "score-round --runs": (
        ("score-round", "--round", "r01", "--runs", "{f}", "--no-mlflow"),
        ".csv",
        16 << 30,
    ),
}


def _make(kind: str, name: str, cap: int) -> Callable[[Path], object]:
    def setup(d: Path) -> None:
        p = d / name
        if kind == "fifo":
            os.mkfifo(p)
        elif kind == "directory":
            p.mkdir()
        elif kind == "link to /dev/zero":
            p.symlink_to("/dev/zero")
        elif kind == "link to /dev/urandom":
            p.symlink_to("/dev/urandom")
        elif kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(p))
            s.close()
        elif kind == "over its cap":  # sparse: no disk used
            with open(p, "wb") as f:
                f.truncate(cap + 1)

    return setup


KIND_NAMES = {
    "fifo": "FIFO",
    "directory": "directory",
    "link to /dev/zero": "character device",
    "link to /dev/urandom": "character device",
    "socket": "socket",
    "over its cap": r"holds \d",
}


def file_argument_cases() -> Iterator[Case]:
    c = "file arguments"
    for where, (argv, suffix, cap) in FILE_OPTIONS.items():
        name = f"in{suffix}"
        rounds = (round_copy,) if where.startswith("score-round") else ()
        for kind, names in KIND_NAMES.items():
            if kind == "directory" and where.startswith("ingest"):
                continue  # ingest DIRECTORY reads the logs under it
            if kind == "over its cap" and cap > (16 << 20):
                continue  # a sparse file of the tables' and logs' caps: refused all the same
            given = tuple(a.replace("{f}", name) for a in argv)
            yield Case(
                c,
                given,
                "refuse",
                setup=_both(*rounds, _make(kind, name, cap)),
                timeout_s=30,
                names=names if kind != "directory" else "directory",
            )
        for device in ("/dev/zero", "/dev/null", "/dev/urandom"):
            given = tuple(a.replace("{f}", device) for a in argv)
            yield Case(
                c,
                given,
                "refuse",
                setup=_both(*rounds),
                timeout_s=30,
                names=r"character device|suffix|must end in",
            )


# ------------------------------------------------------------------------ outputs
def _mount(where: Path) -> bool:
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )


def can_mount() -> bool:
    """Whether a tmpfs can be mounted here (root): the full-disk cases need one."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        if not _mount(Path(tmp)):
            return False
        subprocess.run(["umount", "-l", tmp], capture_output=True, check=False)
        return True


def _full_disk(d: Path) -> None:
    """A 64 KiB tmpfs over ``d/full``, filled."""
    full = d / "full"
    full.mkdir()
    if not _mount(full):
        raise RuntimeError("cannot mount a tmpfs")
    fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def _unmount(d: Path) -> None:
    subprocess.run(["umount", "-l", str(d / "full")], capture_output=True, check=False)


def _nothing_left(d: Path) -> str | None:
    """The files a failed write left on the full disk besides the filler (a table's lock file
    is kept; a directory made for the output may stay, empty)."""
    left = sorted(
        str(p.relative_to(d / "full"))
        for p in (d / "full").rglob("*")
        if p.is_file() and p.name != "filler" and not p.name.endswith(".lock")
    )
    return f"left {left} on the full disk" if left else None  # an empty directory may stay


def _both(*setups: Callable[[Path], object]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        for s in setups:
            s(d)

    return setup


def _with_input(d: Path) -> None:
    (d / "in.csv").write_text(CSV_ROW)
    (d / "many.csv").write_text(csv_text(list(CSV_GOOD), [list(CSV_GOOD.values())] * 3000))


def _table_printed(d: Path, out: str, err: str) -> str | None:
    flat = " ".join(out.split())
    return None if "tokens/s per GPU" in flat and "MFU" in flat else f"no table: {out[:120]!r}"


def output_cases() -> Iterator[Case]:
    c = "outputs"
    search = ("search", *GOAL, "--analytic")
    on_full_disk = [
        ("predict", "--from-csv", "in.csv", "--out", "full/p.csv"),
        ("predict", "--from-csv", "in.csv", "--out", "full/p.parquet"),
        ("predict", "--from-csv", "many.csv", "--out", "full/sub/p.csv"),
        ("ingest", str(PLAYBOOK_EXCERPT), "--into", "full/t.parquet"),
        ("ingest", str(PLAYBOOK_EXCERPT), "--into", "full/t.csv"),
        (*search, "--launch-dir", "full/launch"),
        (*search, "--launch-dir", "full"),
        ("propose", *GOAL, "--round", "full/r1"),
    ]  # calibrate --out on a full disk: tests/cli/test_streams.py (its fit takes minutes here)
    if not can_mount():
        print("outputs: the full-disk inputs need root (a tmpfs), skipped", file=sys.stderr)
        on_full_disk = []
    for argv in on_full_disk:
        yield Case(
            c,
            argv,
            "refuse",
            setup=_both(_with_input, _full_disk),
            kept=_nothing_left,
            teardown=_unmount,
            names="No space left on device|already holds",
        )
    for argv in (
        PREDICT,
        (*PREDICT, "--json"),
        ("predict", "--from-csv", "in.csv"),
        ("search", *GOAL, "--analytic"),
        ("search", *GOAL, "--analytic", "--json"),
        ("data", "summary"),
        ("--help",),
        ("predict", "--help"),
    ):
        yield Case(
            c, argv, "refuse", setup=_with_input, stdout="full", names="No space left on device"
        )
        yield Case(
            c, argv, "refuse", setup=_with_input, stdout="closed", names="standard output is closed"
        )
    for columns in ("0", "1", "19", "-3", "abc", "", "99999999999999999999"):
        yield Case(c, PREDICT, "answer", env=(("COLUMNS", columns),), check=_table_printed)
    for out in ("/dev/null", "/dev/full"):
        yield Case(
            c,
            ("predict", "--from-csv", "in.csv", "--out", out),
            "refuse",
            setup=_with_input,
            names="suffix|must end in|regular file",
        )
    yield Case(
        c,
        ("predict", "--from-csv", "in.csv", "--out", "fifo.csv"),
        "refuse",
        setup=_both(_with_input, lambda d: os.mkfifo(d / "fifo.csv")),
        timeout_s=30,
        names="regular file",
    )
    fsize = getattr(resource, "RLIMIT_FSIZE", None)
    if fsize is not None:
        for limit in (0, 4096, 65536):
            yield Case(
                c,
                ("predict", "--from-csv", "many.csv", "--out", "p.csv"),
                "refuse",
                setup=_with_input,
                limits=((fsize, limit),),
                names="File too large",
                kept=lambda d: (
                    "left a temporary file"
                    if any(p.suffix == ".tmp" for p in d.iterdir())
                    else None
                ),
            )
    for limit_mib in (256, 600, 900, 1100):
        yield Case(
            c,
            ("predict", "--from-csv", "many.csv", "--out", "p.csv"),
            "either",
            setup=_with_input,
            limits=((resource.RLIMIT_AS, limit_mib << 20),),
            names="address-space limit|out of memory",
        )
        yield Case(
            c,
            PREDICT,
            "either",
            limits=((resource.RLIMIT_AS, limit_mib << 20),),
            names="address-space limit|out of memory",
        )


# ------------------------------------------------------------------------ lock waits
_HOLDERS: dict[str, subprocess.Popen[bytes]] = {}

HOLD = """
import os, signal, sys, time
from pathlib import Path
from surrogate.io.locks import locked
table, how = Path(sys.argv[1]), sys.argv[2]
with locked(table):
    if how == "anonymous":
        table.with_name(f".{table.name}.lock.holder").unlink()
    table.with_name("ready").touch()
    if how == "stopped":
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(float(sys.argv[3]))
"""


def _holder(how: str, seconds: float = 120) -> Callable[[Path], None]:
    """A process holding the lock of ``d/t.parquet``: stopped (SIGSTOP, as a suspended
    ingest), busy (sleeping), anonymous (its sidecar removed), for ``seconds``."""

    def setup(d: Path) -> None:
        p = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(d / "t.parquet"), how, str(seconds)],
            env=environment(d),
        )
        _HOLDERS[str(d)] = p
        for _ in range(600):
            if (d / "ready").exists():
                return
            time.sleep(0.05)
        raise SystemExit("robustness: the lock holder did not start")

    return setup


def _release(d: Path) -> None:
    p = _HOLDERS.pop(str(d), None)
    if p is not None:
        p.kill()
        p.wait(10)


def lock_cases() -> Iterator[Case]:
    c = "lock waits"
    ingest = ("ingest", str(PLAYBOOK_EXCERPT), "--into", "t.parquet")
    for how, names in (
        ("stopped", r"locked by pid \d+ on host \S+ \(.* stopped "),
        ("busy", r"locked by pid \d+ on host"),
        ("anonymous", "did not say who it is"),
    ):
        for timeout in ("0", "0.5", "2"):
            yield Case(
                c,
                ingest,
                "refuse",
                setup=_holder(how),
                teardown=_release,
                env=(("SURROGATE_LOCK_TIMEOUT_S", timeout),),
                names=names,
                timeout_s=40,
            )  # a wait by design: not among the fast refusals
    yield Case(
        c,
        ingest,
        "answer",
        setup=_holder("busy", seconds=1),
        teardown=_release,
        env=(("SURROGATE_LOCK_TIMEOUT_S", "20"),),
        timeout_s=60,
    )
    for bad in ("-1", "soon", "inf", "nan", "1e999"):
        yield Case(
            c,
            ingest,
            "refuse",
            env=(("SURROGATE_LOCK_TIMEOUT_S", bad),),
            names="SURROGATE_LOCK_TIMEOUT_S must be a number of seconds",
            timeout_s=30,
        )


# ------------------------------------------------------------------------ concurrent rounds
_OTHERS: dict[str, list[subprocess.Popen[str]]] = {}


def _other_proposes(n: int) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        _OTHERS[str(d)] = [
            subprocess.Popen(
                [EXE, "propose", *GOAL, "--round", "rounds/r1", "--k", "2"],
                cwd=d,
                env=environment(d),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(n)
        ]

    return setup


def _one_round(d: Path) -> str | None:
    """All proposes into rounds/r1 at once: exactly one round, whole, no temporary left;
    each loser refused in one line."""
    others = _OTHERS.pop(str(d), [])
    refused = 0
    for p in others:
        _, err = p.communicate(timeout=300)
        if (
            p.returncode == 2
            and err.count("\n") == 1
            and ("another propose" in err or "already exists" in err)
        ):
            refused += 1
        elif p.returncode != 0:
            return f"another propose ended {p.returncode}: {err.strip()[-160:]!r}"
    left = sorted(p.name for p in (d / "rounds").iterdir())
    if left != ["r1"] or not (d / "rounds" / "r1" / "round.json").exists():
        return f"rounds/ holds {left}"
    if refused < len(others) - 1:
        return f"only {refused} of {len(others)} other proposes refused"
    return None


def round_cases() -> Iterator[Case]:
    c = "concurrent rounds"
    for n in (1, 2, 3):
        yield Case(
            c,
            ("propose", *GOAL, "--round", "rounds/r1", "--k", "2"),
            "either",
            setup=_other_proposes(n),
            kept=_one_round,
            names="written by another propose meanwhile|already exists",
        )


# ------------------------------------------------------------------------ log parsers
def _edited(
    source: Path, name: str, pattern: str, value: str, extra: Path | None = None
) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        run = d / "run"
        run.mkdir()
        if extra is not None:
            shutil.copy(extra, run / extra.name)
        (run / name).write_text(re.sub(pattern, value, source.read_text()))

    return setup


def _skipped_for(reason: str) -> Callable[[Path, str, str], str | None]:
    def check(d: Path, out: str, err: str) -> str | None:
        return None if reason in out else f"no skip saying {reason!r}: {out[-200:]!r}"

    return check


def parser_cases() -> Iterator[Case]:
    c = "log parsers"
    positive = "must be a positive number"
    for value in ("0", "0.0", "0K", "0,000"):
        yield Case(
            c,
            (
                "ingest",
                "run/train.log",
                "--into",
                "t.parquet",
                "--format",
                "torchtitan",
                "--set",
                "num_nodes=1",
            ),
            "answer",
            setup=_edited(
                TORCHTITAN / "train.log",
                "train.log",
                r"tps: [\d,]+",
                f"tps: {value}",
                TORCHTITAN / "llama3_8b.toml",
            ),
            check=_skipped_for(positive),
        )
        yield Case(
            c,
            ("ingest", "run/log.out", "--into", "t.parquet", "--format", "nanotron"),
            "answer",
            setup=_edited(
                NANOTRON / "log_13490827.out",
                "log.out",
                r"tokens_per_sec_per_gpu: [\d.]+K",
                f"tokens_per_sec_per_gpu: {value}",
                NANOTRON / "config.yaml",
            ),
            check=_skipped_for(positive),
        )
    for value in ("0", "0.0"):
        yield Case(
            c,
            ("ingest", "run/train.log", "--into", "t.parquet", "--format", "megatron"),
            "answer",
            setup=_edited(
                MEGATRON,
                "train.log",
                r"elapsed time per iteration \(ms\): [\d.]+",
                f"elapsed time per iteration (ms): {value}",
            ),
            check=_skipped_for(positive),
        )
    yield Case(
        c,
        (
            "ingest",
            "run/train.log",
            "--into",
            "t.parquet",
            "--format",
            "torchtitan",
            "--set",
            "num_nodes=1",
        ),
        "answer",
        setup=_edited(
            TORCHTITAN / "train.log",
            "train.log",
            r"tps: [\d,]+",
            "wps: 0",
            TORCHTITAN / "llama3_8b.toml",
        ),
        check=_skipped_for(positive),
    )


def files_and_outputs_cases() -> Iterator[Case]:
    for gen in (file_argument_cases, output_cases, lock_cases, round_cases, parser_cases):
        yield from gen()
