"""What a parser read and what it skipped, with file:line and a reason for every skip."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Skip:
    path: str
    line: int | None
    """1-based line (or CSV data row + 1 for the header); None for a whole-file reason."""
    reason: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.reason}"


@dataclass
class IngestReport:
    """Counts of rows read and every skip, so that nothing is dropped silently."""

    rows_read: int = 0
    skips: list[Skip] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What was kept in a way worth saying (runs kept flagged), one line each."""

    def note(self, text: str) -> None:
        self.notes.append(text)

    def skip(self, path: str, line: int | None, reason: str) -> None:
        self.skips.append(Skip(str(path), line, reason))

    def merge(self, other: IngestReport) -> IngestReport:
        self.rows_read += other.rows_read
        self.skips.extend(other.skips)
        self.files.extend(other.files)
        self.notes.extend(other.notes)
        return self

    def reasons(self) -> Counter[str]:
        """How many skips per reason (for a summary line)."""
        return Counter(s.reason for s in self.skips)

    def summary(self, *, max_lines: int = 10) -> str:
        lines = [
            f"read {self.rows_read} rows from {len(self.files)} file(s), skipped {len(self.skips)}",
            *(f"  {n}" for n in self.notes),
        ]
        for reason, n in self.reasons().most_common():
            lines.append(f"  {n} x {reason}")
        for s in self.skips[:max_lines]:
            lines.append(f"  e.g. {s}")
        return "\n".join(lines)
