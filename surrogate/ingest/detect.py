"""Which tool wrote a file: the format names ``surrogate ingest --format`` accepts.

Detection reads the file's name and first megabyte and looks for text only that tool writes;
anything ambiguous or unknown raises, naming the formats, so that ``--format`` can settle it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from surrogate.errors import DataError
from surrogate.ingest import (
    llmfoundry,
    megatron,
    nanotron,
    playbook,
    published,
    torchtitan,
    train_step,
)
from surrogate.io.input_files import check_input_file

Format = Literal[
    "playbook",
    "nanotron",
    "torchtitan",
    "megatron",
    "llm-foundry",
    "nccl-tests",
    "xla",
    "microbench-jsonl",
    "train-step-jsonl",
    "published",
]
FORMATS: tuple[str, ...] = get_args(Format)
SWEEP_FORMATS: tuple[str, ...] = (
    "playbook",
    "nanotron",
    "torchtitan",
    "megatron",
    "llm-foundry",
    "train-step-jsonl",
    "published",
)
MICROBENCH_FORMATS: tuple[str, ...] = ("nccl-tests", "xla", "microbench-jsonl")
_HEAD_BYTES = 1 << 20


def check_format(name: str) -> Format:
    """``name`` if it is a known format; ConfigError-like DataError otherwise."""
    if name not in FORMATS:
        raise DataError(f"--format must be one of {', '.join(FORMATS)}, got {name!r}")
    return name  # type: ignore[return-value]


def detect_format(path: str | Path) -> Format:
    """The format of ``path``; DataError if the file is missing or its format unknown."""
    p = Path(path)
    check_input_file(p, what="file to ingest", kind="table")
    try:
        with p.open("rb") as f:
            head = f.read(_HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError as e:
        raise DataError(f"cannot read {str(p)!r}: {e.strerror or e}") from None
    suffix = p.suffix.lower()
    first_line = head.split("\n", 1)[0]
    if suffix == ".csv" and all(m in first_line for m in playbook.HEADER_MARKERS):
        return "playbook"
    if suffix == ".csv" and published.is_published_head(first_line):
        return "published"
    if suffix in (".txtpb", ".pbtxt"):
        return "xla"
    if suffix == ".jsonl":
        return "train-step-jsonl" if train_step.is_train_step_head(head) else "microbench-jsonl"
    if any(llmfoundry.is_table_header(line) for line in head.splitlines()):
        return "llm-foundry"
    if all(m in head for m in nanotron.MARKERS) or nanotron.LOGGER_PREFIX.search(head):
        return "nanotron"
    if any(m in head for m in torchtitan.MARKERS) or torchtitan.STEP_LINE.search(head):
        return "torchtitan"
    if any(m in head for m in megatron.MARKERS):
        return "megatron"
    if "busbw" in head and "algbw" in head:
        return "nccl-tests"
    raise DataError(
        f"cannot tell the format of {str(p)!r}: it matches none of {', '.join(FORMATS)}; "
        "give --format"
    )
