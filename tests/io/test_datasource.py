"""Data directory resolution and sha256-verified fetching (local server and file URLs only)."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from surrogate.errors import DataError
from surrogate.io.datasource import (
    SOURCES_TOML,
    Source,
    cache_dir,
    data_dir,
    fetch,
    fetch_one,
    load_sources,
)

PAYLOAD = b"job_id,name\n1,run-a\n2,run-b\n" * 100
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A file server on 127.0.0.1 over a directory holding ``table.csv``."""
    root = tmp_path / "served"
    root.mkdir()
    (root / "table.csv").write_bytes(PAYLOAD)
    handler = partial(_QuietHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _source(url: str, sha: str = SHA) -> Source:
    return Source(name="t", url=url, sha256=sha, path="sweeps/t/table.csv")


def test_fetch_over_http_verifies_and_is_idempotent(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "cache"
    r = fetch_one(_source(f"{server}/table.csv"), dest)
    assert r.action == "downloaded" and r.size_bytes == len(PAYLOAD)
    assert (dest / "sweeps/t/table.csv").read_bytes() == PAYLOAD
    again = fetch([_source(f"{server}/table.csv")], dest)
    assert again[0].action == "present"


def test_fetch_refuses_a_checksum_mismatch_and_leaves_nothing(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "cache"
    with pytest.raises(DataError, match=f"sha256 of .* must be {'0' * 64}, got {SHA}"):
        fetch_one(_source(f"{server}/table.csv", sha="0" * 64), dest)
    assert [p for p in dest.rglob("*") if p.is_file()] == []


def test_fetch_replaces_a_corrupt_copy(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "cache"
    target = dest / "sweeps/t/table.csv"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"truncated")
    r = fetch_one(_source(f"{server}/table.csv"), dest)
    assert r.action == "downloaded" and target.read_bytes() == PAYLOAD
    assert [p.name for p in target.parent.iterdir()] == ["table.csv"]  # no temporary left


def test_fetch_unreachable(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "cache"
    with pytest.raises(DataError, match=r"t: cannot download .*/missing.csv: 404"):
        fetch_one(_source(f"{server}/missing.csv"), dest)
    assert [p for p in dest.rglob("*") if p.is_file()] == []


def test_the_source_list_ships_inside_the_package() -> None:
    """An installed surrogate (a wheel) has no datasets/ folder: the list is package data,
    and datasets/sources.toml in the checkout is a link to it, not a second copy."""
    import surrogate

    assert SOURCES_TOML.parent == Path(surrogate.__file__).parent / "data"
    beside = Path(surrogate.__file__).parents[1] / "datasets" / "sources.toml"
    if beside.exists():  # a checkout
        assert beside.resolve() == SOURCES_TOML.resolve()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sha256": "abc"}, "sha256 must be 64 lowercase hex digits, got 'abc'"),
        ({"path": "../escape.csv"}, "path must be relative and stay inside the data directory"),
        ({"path": "/abs.csv"}, "path must be relative"),
    ],
)
def test_source_validation(kwargs: dict[str, str], match: str) -> None:
    base = {"name": "t", "url": "file:///x", "sha256": SHA, "path": "a.csv"}
    with pytest.raises(DataError, match=match):
        Source(**{**base, **kwargs})


def test_repository_sources_match_the_manifest() -> None:
    sources = {s.name: s for s in load_sources(SOURCES_TOML)}
    assert sources["hf_ultrascale_playbook"].sha256 == (
        "2b20c1ecbab9de9af9627c3ebb727f72bad447ceca1b5503e00abd74ac5e7958"
    )
    assert sources["xla_matmul_perf_table"].path == "microbench/xla/default_matmul_perf_table.txtpb"
    assert all(s.url.startswith("https://raw.githubusercontent.com/") for s in sources.values())


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[[source]\n", "not valid TOML"),
        ("title = 'x'\n", r"must hold \[\[source\]\] entries, found none"),
        ("[[source]]\nname = 'a'\n", "source #1 needs the keys url, sha256, path"),
    ],
)
def test_load_sources_errors(tmp_path: Path, text: str, match: str) -> None:
    p = tmp_path / "s.toml"
    p.write_text(text)
    with pytest.raises(DataError, match=match):
        load_sources(p)
    with pytest.raises(DataError, match="does not exist"):
        load_sources(tmp_path / "none.toml")


def test_data_dir_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SURROGATE_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    assert data_dir(tmp_path / ".") == tmp_path / "."
    with pytest.raises(DataError, match="--data-dir must be an existing directory"):
        data_dir(tmp_path / "none")
    monkeypatch.setenv("SURROGATE_DATA_DIR", str(tmp_path / "none"))
    with pytest.raises(DataError, match="SURROGATE_DATA_DIR must be an existing directory"):
        data_dir()
    monkeypatch.setenv("SURROGATE_CACHE_DIR", str(tmp_path / "cache"))
    assert cache_dir() == tmp_path / "cache"
