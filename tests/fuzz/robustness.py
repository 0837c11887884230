"""Robustness of the CLI under bad, hostile and concurrent input: a table per class.

    python tests/fuzz/robustness.py [--quick] [--repeats N] [--jobs 2] [--only CLASS ...]
                                     [--show N]

(``python -m pytest -m fuzz`` runs it with ``--quick``: ``tests/fuzz/test_robustness.py``.)

Every input runs as a real ``surrogate`` process (what a user sees), in a temporary directory of
its own, ``--jobs`` at a time. The inputs are generated (products of hostile values with the
options, keys, fields and files they go into), in these classes:

- **concurrent appends**: 8 concurrent ``surrogate ingest CHUNK.csv --into t.parquet``, the
  Playbook CSV of ``../shared/data`` (``$SURROGATE_DATA_DIR``) split in 8, ``--repeats`` times.
- **usage errors**: option values of the wrong type, unknown options and commands, missing
  values, an unknown table suffix.
- **hf-config**: each supported family's published ``config.json`` (``tests/fixtures``), whose
  shapes must come back; fields retyped, refused families, malformed files, a name in markup.
- **config files, CSV**: ``--config`` files with unknown, repeated, misplaced or mistyped
  keys, keys that must change the prediction; ``--from-csv`` tables with repeated and near-miss
  columns and bad cells.
- **model integrity**: a copy of the bundled model with each file truncated, edited, extended
  or deleted, given as ``--model-dir``.
- **far-outside inputs**: layouts and shapes up to 10^20 and 10^400, zero and negative.
- **search messages**: ``surrogate search`` (and ``ingest --set``) with hostile options, and the
  documented searches, whose answers must not be empty.
- **score-round/train outputs**: outputs that cannot be written, rounds and tables that cannot
  be scored, and one that can.
- a new user's inputs (``NEW_USER``): **profiles** that are an image, a PDF, a directory or a
  malformed object; **tracking stores** that cannot take a run (a path MLflow 3 refuses as a
  file store, an unknown scheme, a closed port, a server that never answers, an SQLite path
  that is a directory or a CSV), refused before the work, and a server that answers its
  health check and fails every request, after which score-round and train must keep their
  work on disk; **YAML anchors**: merge keys (answers) and alias bombs and loops under known
  keys; **batch tables**: ``--from-csv`` columns the reader does not read, a ``model`` column
  of presets, a table whose every row fails, options the mode ignores; **torchtitan TOML**
  values that must be blamed on their own key; **non-table files** given as tables;
  **propose** options checked before scoring and its hints for paths with spaces;
  **hf-config names** (search names a config.json's model by the config and says where its
  sequence length came from); **flagged runs** (an ingest keeps the runs the validator
  rejects).
- files and outputs (``FILES_AND_OUTPUTS``): **file arguments** (every file option given a
  FIFO, a device, a link to one, a directory, a socket, a file over its kind's cap);
  **outputs** (a full disk under every output, a full or closed stdout, ``COLUMNS`` of 0 or
  nonsense, an output that is a device or a FIFO, ``ulimit -f`` and ``ulimit -v``); **lock
  waits** (a table's lock held by a stopped, a busy or an anonymous process, the wait's
  variable given nonsense); **concurrent rounds** (2-4 proposes into one new round at once:
  exactly one round, whole); **log parsers** (torchtitan, nanotron and Megatron logs with a
  zero throughput or iteration time).

Each input says what it expects: ``refuse`` (the input is wrong), ``answer`` (it is right), or
``either`` (a refusal and a sane answer are both acceptable). A run counts as:

- **clear error**: exit 2 with exactly one line on stderr, starting ``error: `` (and an input
  that expects ``refuse`` or ``either``);
- **correct answer**: exit 0 where the input expects ``answer`` or ``either`` and its checks
  pass. Every prediction must be sane: MFU in (0, 1], tokens/s per GPU finite and > 0, finite
  non-negative memory and time terms, p_oom in [0, 1]; and, per input, the configuration echoed
  must be the one asked for (a key in a file, a field of a config.json), a key that must change
  the prediction must change it (against a baseline run), a far-outside input must say it
  extrapolates, a name with rich markup must print as written, a CSV row must carry its error
  or a sane prediction, a search must return layouts (and a Pareto front where asked), a damaged
  model's copy made intact must answer as the bundled model does;
- **traceback**: ``Traceback (most recent call last)`` on stderr, or death by a signal (exit
  < 0, or > 128 as a shell reports it: 134 abort, 139 segmentation fault);
- **silent wrong answer**: exit 0 where the input must be refused, or a check above that fails;
- **hang**: no answer within the input's time limit (20-30 s for a refusal, which must take
  a second or two);
- **other failure**: exit 1 without a traceback, an exit 2 whose message is not one line, a
  right input refused, a Python warning on stderr.

A refusal that must name something (the key of a TOML value, the kind of a file, the store's
variable) and does not is a silent wrong answer: it blames the wrong thing. A work-keeping
input whose output is not on disk afterwards (or a refused one that wrote) counts a row lost.

Rows lost (concurrent appends): per repeat, rows of the chunks - rows in the table - rows the
eight ingests reported skipped; summed over the repeats. A table that ends with more rows than
that, or a process that fails, counts too. Target: 0 tracebacks, 0 silent wrong answers, 0 rows
lost. ``--quick`` runs every fourth input of each class and 2 repeats; ``--show N`` prints up to N
failures per class with their command lines. The exit status is 1 where any input failed or a
row was lost, else 0.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
from robustness_files import files_and_outputs_cases
from robustness_harness import (
    CLASSES,
    COLUMNS,
    EXE,
    PLAYBOOK,
    Case,
    Result,
    Tally,
    classify,
    environment,
    run_case,
)
from robustness_inputs import config_cases, hf_cases, usage_cases
from robustness_new_user import new_user_cases
from robustness_runs import far_cases, model_cases, outputs_cases, search_cases


def all_cases() -> dict[str, list[Case]]:
    out: dict[str, list[Case]] = {}
    for gen in (
        usage_cases,
        hf_cases,
        config_cases,
        model_cases,
        far_cases,
        search_cases,
        outputs_cases,
        new_user_cases,
        files_and_outputs_cases,
    ):
        for case in gen():
            out.setdefault(case.cls, []).append(case)
    return out


# ------------------------------------------------------------------------ concurrency
def concurrent_appends(repeats: int, tally: Tally) -> None:
    """8 concurrent ingests of the Playbook CSV's eight chunks into one table, ``repeats``
    times; rows in = rows in the table + rows skipped, or rows are lost."""
    from surrogate.io.datasource import data_dir

    source = data_dir() / PLAYBOOK
    if not source.exists():
        print(f"concurrent appends: skipped ({source} is absent)", file=sys.stderr)
        return
    lines = source.read_text().splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    n = len(rows)
    lost = 0
    with tempfile.TemporaryDirectory(prefix="robustness-ingest-") as tmp:
        d = Path(tmp)
        chunks = []
        for i in range(8):
            chunk = d / f"chunk{i}.csv"
            chunk.write_text(header + "".join(rows[i * n // 8 : (i + 1) * n // 8]))
            chunks.append(chunk)
        for r in range(repeats):
            table = d / f"t{r}.parquet"
            procs = [
                subprocess.Popen(
                    [EXE, "ingest", str(chunk), "--into", str(table)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=environment(d),
                )
                for chunk in chunks
            ]
            skipped = 0
            for chunk, p in zip(chunks, procs, strict=True):
                out, err = p.communicate(timeout=600)
                case = Case(
                    "concurrent appends", ("ingest", chunk.name, "--into", table.name), "answer"
                )
                verdict, why = classify(case, p.returncode, out, err, d)
                m = re.search(r"read (\d+) rows from \d+ file\(s\), skipped (\d+)", out)
                if verdict == "correct" and m is None:
                    verdict, why = "wrong", f"no 'read N rows ... skipped M' line: {out[:200]!r}"
                tally.counts[verdict] += 1
                if verdict != "correct":
                    tally.failures.append(Result(case, verdict, why))
                skipped += int(m.group(2)) if m else 0
            stored = len(pd.read_parquet(table)) if table.exists() else 0
            lost += abs(n - stored - skipped)
            print(
                f"  repeat {r + 1}/{repeats}: {n} rows in, {stored} in the table, "
                f"{skipped} skipped",
                file=sys.stderr,
            )
    tally.rows_lost = lost


# ------------------------------------------------------------------------ report
def print_table(tallies: dict[str, Tally], seconds: float) -> None:
    head = [
        "input class",
        "inputs",
        *(name for _, name in COLUMNS),
        "rows lost",
        "slowest error (s)",
    ]
    rows = []
    total: Counter[str] = Counter()
    lost_total = 0
    for cls in CLASSES:
        if cls not in tallies:
            continue
        t = tallies[cls]
        n = sum(t.counts.values())
        total.update(t.counts)
        lost = "" if t.rows_lost is None else str(t.rows_lost)
        lost_total += t.rows_lost or 0
        slowest = f"{t.slowest_s:.1f}" if t.slowest_s else ""  # refusals of <= 30 s limits
        rows.append([cls, str(n), *(str(t.counts[k]) for k, _ in COLUMNS), lost, slowest])
    slowest_all = max((t.slowest_s for t in tallies.values()), default=0.0)
    rows.append(
        [
            "total",
            str(sum(total.values())),
            *(str(total[k]) for k, _ in COLUMNS),
            str(lost_total),
            f"{slowest_all:.1f}",
        ]
    )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |")
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for r in rows:
        cells = [
            r[0].ljust(widths[0]),
            *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)),
        ]
        print("| " + " | ".join(cells) + " |")
    print(f"\n{sum(total.values())} inputs in {seconds:.0f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="every fourth input of each class, 2 repeats of the concurrent ingest",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="repeats of the 8 concurrent ingests (default 10; --quick 2)",
    )
    ap.add_argument("--jobs", type=int, default=2, help="inputs run at once (default 2)")
    ap.add_argument(
        "--only",
        action="append",
        choices=CLASSES,
        default=None,
        help="run only this class (repeatable)",
    )
    ap.add_argument(
        "--show",
        type=int,
        default=5,
        help="failures to print per class, with their command lines (default 5)",
    )
    args = ap.parse_args()
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 10)
    chosen = set(args.only or CLASSES)
    start = time.perf_counter()
    cases = {k: v[::4] if args.quick else v for k, v in all_cases().items() if k in chosen}
    tallies = {cls: Tally() for cls in CLASSES if cls in chosen}
    if "concurrent appends" in chosen:
        print(f"concurrent appends: 8 ingests at once, {repeats} times", file=sys.stderr)
        concurrent_appends(repeats, tallies["concurrent appends"])
    todo = [case for group in cases.values() for case in group]
    print(f"{len(todo)} inputs, {args.jobs} at a time", file=sys.stderr)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for i, result in enumerate(pool.map(run_case, todo), start=1):
            t = tallies[result.case.cls]
            t.counts[result.verdict] += 1
            if result.case.kept is not None:  # what a failure keeps of the work: counted
                t.rows_lost = (t.rows_lost or 0) + result.why.startswith("lost: ")
            if result.verdict == "clear" and result.case.timeout_s <= 30:  # a refusal
                t.slowest_s = max(t.slowest_s, result.seconds)
            if result.verdict not in ("clear", "correct"):
                t.failures.append(result)
            if i % 50 == 0:
                print(f"  {i}/{len(todo)}", file=sys.stderr)
    print_table(tallies, time.perf_counter() - start)
    for cls, t in tallies.items():
        for r in t.failures[: args.show]:
            argv = " ".join(map(repr_arg, r.case.argv))
            print(f"\n[{cls}] {r.verdict}: {r.why}\n  surrogate {argv}  (expects {r.case.expect})")
    return 1 if any(t.failures or t.rows_lost for t in tallies.values()) else 0


def repr_arg(a: str) -> str:
    return a if re.fullmatch(r"[\w./{}:=,+-]+", a) else repr(a)


if __name__ == "__main__":
    sys.exit(main())
