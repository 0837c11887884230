"""``surrogate ingest``: expand paths, detect formats, run the parsers, write one table.

Sweep formats (training runs) go to :func:`surrogate.runs.sweep_files.append_sweeps`;
microbenchmark
formats go to the parsers of the microbenchmark table (``surrogate.ingest.nccl_tests``,
``xla_tables``, ``microbench_jsonl``) and ``surrogate.runs.microbench_table.append_microbench``,
imported only when such a file is ingested. One call writes one table, so sweep and
microbenchmark files cannot be mixed. ``network=True`` reads a Playbook table's per-run network
measurements (:mod:`surrogate.ingest.playbook_network`) into a microbenchmark table instead of
its runs into a sweep table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from surrogate.errors import DataError
from surrogate.ingest.detect import (
    SWEEP_FORMATS,
    Format,
    check_format,
    detect_format,
)
from surrogate.ingest.llmfoundry import parse_llmfoundry
from surrogate.ingest.megatron import parse_megatron
from surrogate.ingest.nanotron import parse_nanotron
from surrogate.ingest.playbook_network import parse_playbook_network, parse_playbook_runs
from surrogate.ingest.published import parse_published
from surrogate.ingest.report import IngestReport
from surrogate.ingest.torchtitan import parse_torchtitan
from surrogate.ingest.train_step import parse_train_step_jsonl
from surrogate.io.outputs import check_output_file
from surrogate.io.tableio import table_format
from surrogate.runs.sweep_files import append_sweeps, read_sweeps
from surrogate.runs.sweeps import empty_sweeps

CANDIDATE_SUFFIXES = frozenset(
    {".csv", ".out", ".log", ".txt", ".txtpb", ".pbtxt", ".jsonl", ".md"}
)
"""Files considered inside a directory given to ``ingest`` (``status.txt`` excepted)."""

_MICROBENCH_PARSERS: dict[str, tuple[str, str]] = {
    "nccl-tests": ("surrogate.ingest.nccl_tests", "parse_nccl_tests"),
    "xla": ("surrogate.ingest.xla_tables", "parse_xla_table"),
    "microbench-jsonl": ("surrogate.ingest.microbench_jsonl", "parse_microbench_jsonl"),
}

Parsed = tuple[pd.DataFrame, IngestReport]


@dataclass(frozen=True, kw_only=True)
class IngestResult:
    kind: str
    """"sweep" or "microbench"."""
    frame: pd.DataFrame
    report: IngestReport
    append_summary: str


def expand(paths: Sequence[str | Path], report: IngestReport) -> list[Path]:
    """Files named, and candidate files found (recursively, sorted) in directories named."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(
                f
                for f in p.rglob("*")
                if f.is_file() and f.suffix.lower() in CANDIDATE_SUFFIXES and f.name != "status.txt"
            )
            if not found:
                report.skip(str(p), None, "directory holds no log or table files")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise DataError(f"{str(p)!r} does not exist")
    return out


def _load(module: str, attr: str, fmt: str) -> Callable[..., Any]:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise DataError(
            f"format {fmt} needs {module}, which this installation lacks ({e})"
        ) from None
    fn = getattr(mod, attr, None)
    if fn is None:
        raise DataError(f"format {fmt} needs {module}.{attr}, which this installation lacks")
    return fn  # type: ignore[no-any-return]


_TABLE_FORMATS = {
    "playbook": "the Playbook table carries its own",
    "llm-foundry": "the llm-foundry tables carry their own",
    "published": "a published performance table carries its own",
    "train-step-jsonl": "each train-step record carries its own",
}
"""Sweep formats whose files carry every configuration column (no --set)."""


def _check_network(path: Path, fmt: str, network: bool) -> None:
    if network and fmt != "playbook":
        raise DataError(
            "--network reads the per-run network measurements of a Playbook table; "
            f"{path} is {fmt} output"
        )


def parse_file(
    path: Path, fmt: Format, given: Mapping[str, Any], *, network: bool = False
) -> Parsed:
    """Run the parser of ``fmt`` on ``path`` (``network``: the Playbook network columns)."""
    _check_network(path, fmt, network)
    if fmt in _TABLE_FORMATS and given:
        raise DataError(
            f"--set fills what a log lacks; {_TABLE_FORMATS[fmt]} "
            f"configuration, got --set {', '.join(given)}"
        )
    if fmt == "playbook":
        if network:
            return parse_playbook_network(path)
        return parse_playbook_runs(path, flagged=True)  # an ingest keeps every run, flagged
    if fmt == "llm-foundry":
        return parse_llmfoundry(path)
    if fmt == "published":
        return parse_published(path, flagged=True)  # an ingest keeps every run, flagged
    if fmt == "train-step-jsonl":
        return parse_train_step_jsonl(path)
    if fmt == "nanotron":
        return parse_nanotron(path, given=dict(given))
    if fmt == "torchtitan":
        return parse_torchtitan(path, given=dict(given))
    if fmt == "megatron":
        return parse_megatron(path, given=dict(given))
    module, attr = _MICROBENCH_PARSERS[fmt]
    result: Parsed = _load(module, attr, fmt)(path)
    return result


def read_runs(path: str | Path) -> pd.DataFrame:
    """The runs of one file: a sweep table (Parquet, or CSV with the table's columns) or a file
    a sweep parser reads (e.g. ``microbench.train_step`` records); DataError otherwise."""
    p = Path(path)
    if p.suffix.lower() == ".parquet":
        return read_sweeps(p)
    try:
        fmt = detect_format(p)
    except DataError:
        return read_sweeps(p)
    if fmt not in SWEEP_FORMATS:
        raise DataError(f"{p} holds microbenchmark measurements ({fmt}), not runs")
    if fmt not in _TABLE_FORMATS:
        raise DataError(
            f"{p} is a {fmt} log, whose configuration may need --set: ingest it "
            "into a sweep table first (surrogate ingest ... --into runs.parquet)"
        )
    return parse_file(p, fmt, {})[0]


def ingest(
    paths: Sequence[str | Path],
    into: str | Path,
    *,
    fmt: str | None = None,
    given: Mapping[str, Any] | None = None,
    network: bool = False,
) -> IngestResult:
    """Parse every file under ``paths`` and append the rows to the table ``into``.

    ``network``: every file must be a Playbook table, whose network measurements go to a
    microbenchmark table.
    """
    table_format(into)  # before any parsing: a bad --into must not cost the user a parse
    check_output_file(into, flag="--into")
    report = IngestReport()
    forced = check_format(fmt) if fmt else None
    files = expand(paths, report)
    explicit = {Path(p) for p in paths}
    planned: list[tuple[Path, Format]] = []
    kinds: dict[str, str] = {}
    for f in files:
        try:
            file_fmt = forced or detect_format(f)
        except DataError as e:
            if f in explicit:
                raise
            report.files.append(str(f))
            report.skip(str(f), None, f"unknown format ({e})")
            continue
        _check_network(f, file_fmt, network)
        sweep = file_fmt in SWEEP_FORMATS and not network
        kinds.setdefault("sweep" if sweep else "microbench", str(f))
        planned.append((f, file_fmt))
    if len(kinds) > 1:
        raise DataError(
            "one ingest writes one table: sweep files (e.g. "
            f"{kinds['sweep']}) and microbenchmark files (e.g. {kinds['microbench']}) "
            "must be ingested separately"
        )
    frames: list[pd.DataFrame] = []
    for f, file_fmt in planned:
        df, rep = parse_file(f, file_fmt, given or {}, network=network)
        report.merge(rep)
        if not df.empty:
            frames.append(df)
    kind = next(iter(kinds), "sweep")
    if kind == "sweep":
        frame = pd.concat(frames, ignore_index=True) if frames else empty_sweeps()
        if frame.empty:
            return IngestResult(
                kind=kind, frame=frame, report=report, append_summary=f"nothing to add to {into}"
            )
        result = append_sweeps(frame, into)
        return IngestResult(
            kind=kind, frame=frame, report=report, append_summary=f"{into}: {result.summary()}"
        )
    append = _load("surrogate.runs.microbench_table", "append_microbench", "microbenchmark table")
    if not frames:
        return IngestResult(
            kind=kind,
            frame=pd.DataFrame(),
            report=report,
            append_summary=f"nothing to add to {into}",
        )
    frame = pd.concat(frames, ignore_index=True)
    outcome = append(frame, into)
    summary = outcome.summary() if hasattr(outcome, "summary") else str(outcome)
    return IngestResult(kind=kind, frame=frame, report=report, append_summary=summary)
