"""The tree describes the product as it is: no numbered work periods, loans of machines or issue
numbers in any tracked text file (code, comments, docstrings, docs, data notes). History
belongs in CHANGELOG.md, by date, and in git.

The patterns are narrow on purpose: pytest's ``scope="session"``, MLflow or SQLAlchemy
sessions, "lends tp to expert parallelism" and the like stay legal.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

_UNITS = [
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
]
_TENS = ["twentieth", "thirtieth", "fortieth", "fiftieth"]
_ORDINAL = (
    r"(?:(?:twenty|thirty|forty|fifty)-(?:"
    + "|".join(_UNITS[:9])
    + r")|"
    + "|".join(sorted(_UNITS + _TENS, key=len, reverse=True))
    + r"|\d+(?:st|nd|rd|th))"
)

# an ordinal past the first few with its noun left out: in the possessive, or closing a clause
_LATE_ORDINAL = (
    r"(?:(?:twenty|thirty|forty|fifty)-(?:"
    + "|".join(_UNITS[:9])
    + r")|"
    + "|".join(sorted(_UNITS[5:] + _TENS, key=len, reverse=True))
    + r")"
)

PATTERNS: dict[str, re.Pattern[str]] = {
    "numbered work period": re.compile(
        r"\b" + _ORDINAL + r"[\s-]+(?:work[\s-]+)?(?:session|period)s?\b", re.IGNORECASE
    ),
    "numbered work period, noun left out": re.compile(
        r"\bthe\s+" + _LATE_ORDINAL + r"'s\b"
        r"|\b(?:in|on|of|since|before|after|until)\s+the\s+" + _LATE_ORDINAL + r"(?=\s*[,;:)])",
        re.IGNORECASE,
    ),
    "work period by number": re.compile(r"\b(?:session|work\s+period)\s+#?\d+\b", re.I),
    "work period": re.compile(r"\bwork\s+periods?\b", re.IGNORECASE),
    "earlier work period": re.compile(
        r"\b(?:earlier|previous|prior|last|next)\s+sessions?\b", re.IGNORECASE
    ),
    "issue number": re.compile(r"\bissues?\s+(?:no\.\s*)?#?\d+\b", re.IGNORECASE),
    "issue reference": re.compile(r"(?<![\w&/])\(#\d+\)"),
    "loan of a machine": re.compile(
        r"\b(?:was|were|been|being|is|are|got)\s+lent\b|\blent\s+(?:again|out)\b"
        r"|\blent\s+to\s+(?:the\s+)?(?:project|session|us)\b|\bon\s+loan\b"
        r"|\b(?:machines?|GPUs?|H100s?|H200s?|nodes?)\s+(?:(?:was|were)\s+)?lent\b",
        re.IGNORECASE,
    ),
}


def tracked_text_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    files = []
    for name in filter(None, out.split("\0")):
        path = ROOT / name
        if name == THIS or not path.is_file():
            continue
        head = path.read_bytes()[:8192]
        if b"\0" not in head:
            files.append(path)
    return files


def history_mentions(text: str) -> list[tuple[int, str, str]]:
    """(line number, pattern name, matched text) of every mention of the project's history."""
    hits = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for name, pattern in PATTERNS.items():
            for m in pattern.finditer(line):
                hits.append((lineno, name, m.group(0)))
    return hits


def test_no_history_in_the_tree() -> None:
    found = []
    for path in tracked_text_files():
        text = path.read_bytes().decode("utf-8", errors="replace")
        for lineno, name, match in history_mentions(text):
            found.append(f"{path.relative_to(ROOT)}:{lineno}: {name}: {match!r}")
    assert not found, (
        "history belongs in CHANGELOG.md (by date) and git, not in the tree:\n" + "\n".join(found)
    )


def _history_examples() -> list[str]:
    """Generated mentions of each kind the patterns must catch: every late ordinal of the
    vocabulary (spelled, hyphenated, capitalised, in digits) before each work-period noun or
    with the noun left out, each noun before a number, an issue number and reference, and the
    verbs of a loan after each machine."""
    nouns = ["session", "work period"]
    ordinals = [*_UNITS[5:], *_TENS, "thirty-" + _UNITS[3], ("twenty-" + _UNITS[2]).title(), "12th"]
    out = [f"figures of the {o} {n}" for o in ordinals for n in nouns]
    out += [f"the {o}'s figures" for o in _UNITS[5:]] + [f"(one more in the {_UNITS[11]})"]
    out += [f"since {n} {k}" for n in nouns for k in (3, 35)]
    out += ["a work period", "as in earlier sessions", f"see issue {7 * 8}", "fixed (#12)"]
    loan = "lent"  # the loan phrases of the pattern above, built from its parts
    out += [
        f"an {m} {phrase}"
        for m in ("H100", "GPU", "machine")
        for phrase in (f"was {loan}", f"{loan} again", f"{loan} to the project")
    ]
    return out


@pytest.mark.parametrize("text", _history_examples())
def test_patterns_catch_history(text: str) -> None:
    assert history_mentions(text)


@pytest.mark.parametrize(
    "text",
    [
        '@pytest.fixture(scope="session")',
        "start_new_session=True",
        "an SQLAlchemy session per worker",
        "torchtitan's default lends tp to expert parallelism",
        "tp lent to expert parallelism",
        "the first stage's memory",
        "in the eleventh layer",
        "the second's memory",
        "issues a collective per layer",
        "the issue's targets",
        "a dict of [#1, #2]",
    ],
)
def test_patterns_leave_legitimate_words(text: str) -> None:
    assert not history_mentions(text)
