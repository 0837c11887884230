"""Where the public measurement data lives, and fetching it with checksums.

The data directory is, first found: ``--data-dir``; ``$SURROGATE_DATA_DIR``; ``../shared/data``
beside a source checkout (development and CI); the user cache (:func:`cache_dir`:
``~/.cache/surrogate/data`` on Linux, the platform's cache directory elsewhere, by
platformdirs; ``$SURROGATE_CACHE_DIR`` overrides it), where ``surrogate data fetch`` puts the
files listed in the package's ``data/sources.toml``. Fetching (pooch) verifies each file's
sha256 before it appears under its name, so a failed or tampered download never leaves a file
behind.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tomllib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from surrogate.errors import DataError
from surrogate.io.input_files import read_input_text

SOURCES_TOML = Path(__file__).resolve().parents[1] / "data" / "sources.toml"
"""The public files the project reads, shipped with the package."""
_CHECKOUT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """The user cache for fetched data."""
    env = os.environ.get("SURROGATE_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return platformdirs.user_cache_path("surrogate") / "data"


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
    beside = _CHECKOUT.parent / "shared" / "data"
    if (_CHECKOUT / "pyproject.toml").is_file() and beside.is_dir():
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
        tree = tomllib.loads(read_input_text(p, what="sources file", kind="config"))
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
        out.append(
            Source(
                **{
                    k: str(v)
                    for k, v in entry.items()
                    if k in ("name", "url", "sha256", "path", "license", "description")
                }
            )
        )
    return out


@dataclass(frozen=True, kw_only=True)
class FetchResult:
    name: str
    path: Path
    action: str
    """"downloaded", or "present" when a file with the right checksum was already there."""
    size_bytes: int


def fetch_one(source: Source, dest_dir: Path, *, timeout_s: float = 60.0) -> FetchResult:
    """Download ``source`` into ``dest_dir`` unless a verified copy is there.

    pooch downloads to a temporary file in the target directory, hashes it, and moves it into
    place only if the sha256 matches; otherwise it deletes it and DataError is raised. A copy
    with another checksum is downloaded again."""
    import pooch

    target = dest_dir / PurePosixPath(source.path)
    actions: list[str] = []

    def note(fname: str, action: str, _: object) -> str:
        actions.append(action)  # "fetch": the verified copy was there
        return fname

    try:
        with _quiet(pooch.get_logger()):
            pooch.retrieve(
                source.url,
                known_hash=f"sha256:{source.sha256}",
                fname=target.name,
                path=target.parent,
                processor=note,
                downloader=_downloader(source.url, timeout_s),
            )
    except ValueError as e:  # pooch: the downloaded file's hash differs (or a bad URL)
        got = re.search(r"but got ([0-9a-f]{64})", str(e))
        if got is None:
            raise DataError(f"{source.name}: cannot download {source.url}: {e}") from None
        raise DataError(
            f"{source.name}: the sha256 of {source.url} must be {source.sha256}, got "
            f"{got.group(1)}; nothing was written"
        ) from None
    except OSError as e:  # requests' errors are OSErrors: unreachable, HTTP 404, ...
        raise DataError(f"{source.name}: cannot download {source.url}: {e}") from None
    present = actions == ["fetch"]
    return FetchResult(
        name=source.name,
        path=target,
        action="present" if present else "downloaded",
        size_bytes=target.stat().st_size,
    )


def _downloader(url: str, timeout_s: float) -> Callable[[str, str, object], None]:
    """pooch's downloader for ``url``, and a copy for ``file://`` URLs (a local mirror)."""
    import pooch

    if url.startswith("file://"):
        return _copy_file_url
    if url.startswith(("http://", "https://")):
        return pooch.HTTPDownloader(timeout=timeout_s, progressbar=False)  # type: ignore[no-any-return]
    return pooch.choose_downloader(url)  # type: ignore[no-any-return]


def _copy_file_url(url: str, output_file: str, _: object) -> None:
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    shutil.copyfile(url2pathname(urlparse(url).path), output_file)


@contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    """pooch logs each download on stderr; the command prints its own line per file."""
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


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
