"""Whether a file a command is given as a table can be one, before it is read.

A CSV reader takes any bytes for text: an image given to ``--runs`` came back as "line 4 holds
3 values", which names neither the file's kind nor what was expected. A table is a Parquet file
(``.parquet``, ``.pq``) or a CSV text file; :func:`check_table_file` looks at the first bytes
and says what the file is instead (an image, an archive, a spreadsheet, a binary), naming the
option it was given to.
"""

from __future__ import annotations

from pathlib import Path

from surrogate.errors import DataError
from surrogate.io.input_files import check_input_file

SNIFF_BYTES = 8192
"""Bytes read from the start of a file to tell its kind."""
PARQUET_SUFFIXES = (".parquet", ".pq")
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"RIFF", "a RIFF file (a WebP image? a WAV?)"),
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive (an .xlsx spreadsheet? export it as CSV)"),
    (b"\xd0\xcf\x11\xe0", "an Office document (an .xls spreadsheet? export it as CSV)"),
    (b"\x1f\x8b", "a gzip archive (decompress it first)"),
    (b"BZh", "a bzip2 archive (decompress it first)"),
    (b"\xfd7zXZ", "an xz archive (decompress it first)"),
    (b"\x7fELF", "an executable"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"PAR1", "a Parquet file (name it .parquet)"),
)


def file_kind(head: bytes) -> str | None:
    """What the first bytes of a file say it is when that is not text (``a PNG image``,
    ``binary data``), or None for text."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if b"\x00" in head:
        return "a BMP image" if head.startswith(b"BM") else "binary data"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3:  # not a character cut at the end of the sniffed bytes
            return "not UTF-8 text"
    return None


def check_table_file(path: str | Path, *, flag: str) -> None:
    """DataError unless ``path`` can be a table: an existing file that is Parquet (by its
    suffix and magic bytes) or CSV text. The message names ``flag``, the file, what it is and
    what a table is."""
    p = Path(path)
    want = (
        f"{flag} must be a table: a CSV text file (a header of column names, one row per "
        f"line) or a Parquet file"
    )
    if not p.exists():
        raise DataError(f"table {str(p)!r} does not exist (given to {flag})")
    if p.is_dir():
        raise DataError(f"{want}; {str(p)!r} is a directory")
    check_input_file(p, what=flag, kind="table")
    try:
        with open(p, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as e:
        raise DataError(f"{want}; cannot read {str(p)!r}: {e.strerror or e}") from None
    parquet = p.suffix.lower() in PARQUET_SUFFIXES
    if parquet:
        if not head.startswith(b"PAR1"):
            kind = file_kind(head) or "text"
            raise DataError(f"{want}; {str(p)!r} is named .parquet but holds {kind}, not Parquet")
        return
    what = file_kind(head)
    if what is not None:
        raise DataError(f"{want}; {str(p)!r} is {what}")
