"""Where the public measurement data lives, and fetching it with checksums.

The data directory is, first found: ``--data-dir``; ``$SURROGATE_DATA_DIR``; ``../shared/data``
beside the repository (development and CI); the user cache ``~/.cache/surrogate/data``
(``$SURROGATE_CACHE_DIR`` overrides it), where ``surrogate data fetch`` puts the files listed in
``datasets/sources.toml``. Fetching verifies each file's sha256 before it appears under its
name, so a failed or tampered download never leaves a file behind.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from surrogate.errors import DataError

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCES_TOML = REPO_ROOT / "datasets" / "sources.toml"
_CHUNK_BYTES = 1 << 20


def cache_dir() -> Path:
    """The user cache for fetched data."""
    env = os.environ.get("SURROGATE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "surrogate" / "data"


def data_dir(explicit: str | Path | None = None) -> Path:
    """The public data directory (module docstring for the order); an explicit or environment
    path must exist."""
    if explicit is not None:
        p = Path(explicit)
        if not p.is_dir():
            raise DataError(f"--data-dir must be an existing directory, got {str(p)!r}")
        return p
    env = os.environ.get("SURROGATE_DATA_DIR")
    if env:
        p = Path(env)
        if not p.is_dir():
            raise DataError(f"SURROGATE_DATA_DIR must be an existing directory, got {env!r}")
        return p
    beside = REPO_ROOT.parent / "shared" / "data"
    if beside.is_dir():
        return beside
    return cache_dir()


@dataclass(frozen=True, kw_only=True)
class Source:
    """One public file: where to get it, its checksum, where it goes under the data dir."""

    name: str
    url: str
    sha256: str
    path: str
    """Relative POSIX path under the data directory."""
    license: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if len(self.sha256) != 64 or any(c not in "0123456789abcdef" for c in self.sha256):
            raise DataError(
                f"source {self.name}: sha256 must be 64 lowercase hex digits, got {self.sha256!r}"
            )
        rel = PurePosixPath(self.path)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise DataError(
                f"source {self.name}: path must be relative and stay inside the data directory, "
                f"got {self.path!r}"
            )


def load_sources(path: str | Path = SOURCES_TOML) -> list[Source]:
    """The ``[[source]]`` entries of a sources TOML."""
    p = Path(path)
    try:
        tree = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"sources file {str(p)!r} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise DataError(f"{p}: not valid TOML ({e})") from None
    entries = tree.get("source")
    if not isinstance(entries, list) or not entries:
        raise DataError(f"{p}: must hold [[source]] entries, found none")
    out: list[Source] = []
    for i, entry in enumerate(entries):
        missing = [k for k in ("name", "url", "sha256", "path") if k not in entry]
        if missing:
            raise DataError(f"{p}: source #{i + 1} needs the keys {', '.join(missing)}")
        out.append(Source(**{k: str(v) for k, v in entry.items()
                             if k in ("name", "url", "sha256", "path", "license",
                                      "description")}))
    return out


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True, kw_only=True)
class FetchResult:
    name: str
    path: Path
    action: str
    """"downloaded", or "present" when a file with the right checksum was already there."""
    size_bytes: int


def fetch_one(source: Source, dest_dir: Path, *, timeout_s: float = 60.0) -> FetchResult:
    """Download ``source`` into ``dest_dir`` unless a verified copy is there.

    The download goes to a temporary file in the target directory, is hashed, and is renamed
    into place only if the sha256 matches; otherwise it is deleted and DataError raised.
    """
    target = dest_dir / PurePosixPath(source.path)
    if target.exists() and sha256_of(target) == source.sha256:
        return FetchResult(name=source.name, path=target, action="present",
                           size_bytes=target.stat().st_size)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    h = hashlib.sha256()
    size = 0
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(
            source.url, timeout=timeout_s
        ) as resp:
            while chunk := resp.read(_CHUNK_BYTES):
                h.update(chunk)
                out.write(chunk)
                size += len(chunk)
        digest = h.hexdigest()
        if digest != source.sha256:
            raise DataError(
                f"{source.name}: the sha256 of {source.url} must be {source.sha256}, got "
                f"{digest} ({size} bytes); nothing was written"
            )
        os.replace(tmp, target)
    except (urllib.error.URLError, OSError) as e:
        tmp.unlink(missing_ok=True)
        raise DataError(f"{source.name}: cannot download {source.url}: {e}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return FetchResult(name=source.name, path=target, action="downloaded", size_bytes=size)


def fetch(
    sources: Sequence[Source],
    dest_dir: str | Path,
    *,
    on_result: Callable[[FetchResult], None] | None = None,
) -> list[FetchResult]:
    """Fetch every source into ``dest_dir``; stops at the first failure (already verified
    files stay)."""
    out = []
    for s in sources:
        r = fetch_one(s, Path(dest_dir))
        if on_result is not None:
            on_result(r)
        out.append(r)
    return out
