"""A saved model's boosters as native code: lleaves (Boehm 2021, "lleaves: compiling decision
trees to machine code", github.com/siboehm/lleaves) compiles a LightGBM text model through
LLVM into one function per forest, giving the same predictions as LightGBM (up to floating-point
summation order) 2-4x faster over batches and without LightGBM's per-call cost on one row.

Optional (the ``fast`` extra): without lleaves, or where it fails, every prediction is
LightGBM's. Which path runs never changes an answer beyond rounding: a forest loaded or
compiled in a process is first checked against LightGBM on rows of the batch it is first used
for, and one that disagrees is dropped (with its cache file) for LightGBM.

Compiling takes seconds (about 6 s for the bundled model's boosters on 2 cores), so it is done
once per machine and cached: the object code lies under ``$SURROGATE_CACHE_DIR/compiled-trees``
(default the user cache, ``~/.cache/surrogate/compiled-trees`` on Linux): a directory per
forest, named by the sha256 of the booster's text, its score kind and the compile options,
holding a file per machine, named by the lleaves and llvmlite versions and the host CPU with
its features. lleaves itself checks none of these, nor the file (the sha256 of the object
code, recorded beside it, is checked before LLVM loads it). A forest cached on disk is loaded
by the first batch of any size (about 10 ms, and lleaves' import: a cold ``surrogate predict``
takes about 0.07 s longer, and every later prediction in the process is faster); one not cached
is compiled by the first batch of at least :data:`COMPILE_MIN_ROWS` rows (under a file lock,
written under a temporary name and renamed, so that concurrent processes and a crash leave no
half file), and smaller batches until then are LightGBM's. Only models read by
``SurrogateModel.load`` are compiled: a model being trained is predicted by LightGBM.
``SURROGATE_COMPILED_TREES=0`` turns compiled trees off.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import platform
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.io.atomic import atomic_path, atomic_write

if TYPE_CHECKING:
    import lightgbm as lgb

_log = logging.getLogger(__name__)

COMPILE_MIN_ROWS = 100_000
"""Batches of at least this many rows compile a forest not yet cached. Compiling the bundled
model takes about 6 s and saves about 8 us per row (measured here), so a batch this large wins
back about a seventh of it at once, a search of 10^6 layouts most of it, and every later process
loads the forests in about 10 ms; a smaller table would wait seconds to save milliseconds."""
SMALL_BATCH = 2048
"""Below this many rows a forest is evaluated on the calling thread (starting threads costs
more than the trees)."""
CHECK_ROWS = 64
"""Rows of the first batch a loaded or compiled forest is checked on against LightGBM."""
CHECK_RTOL = 1e-9
_OPTIONS: dict[str, Any] = {"finline": False}
"""lleaves' compile options. ``finline=False``: compiling is 4-5x faster (6 s instead of
27 s for the bundled model) for predictions about 1.3x slower than inlined (measured here)."""


def enabled() -> bool:
    """Whether compiled trees may be used: not turned off, and lleaves importable."""
    if os.environ.get("SURROGATE_COMPILED_TREES", "1").strip().lower() in ("0", "false", "no"):
        return False

    return importlib.util.find_spec("lleaves") is not None


def cache_root() -> Path:
    """Where compiled forests are cached (module docstring)."""
    env = os.environ.get("SURROGATE_CACHE_DIR")
    if env:
        return Path(env) / "compiled-trees"
    import platformdirs

    return platformdirs.user_cache_path("surrogate") / "compiled-trees"


def _forest_key(text: str, raw_score: bool) -> str:
    """The cache directory's name of a forest: its text, score kind and compile options."""
    parts = [hashlib.sha256(text.encode()).hexdigest(), f"raw={raw_score}", repr(_OPTIONS)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


@functools.cache
def _machine_key() -> str:
    """The name of a forest's object code on this machine: the lleaves and llvmlite versions
    and the host CPU with its features (imports llvmlite: only once a forest's directory
    exists, so that a process finding nothing cached never pays for it); once per process."""
    from importlib.metadata import version

    import llvmlite.binding as llvm

    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # LLVM cannot read them on some hosts
        features = ""
    parts = [
        f"lleaves={version('lleaves')}",
        f"llvmlite={version('llvmlite')}",
        platform.machine(),
        llvm.get_host_cpu_name(),
        features,
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


class CompiledForest:
    """One booster's text and, once loaded or compiled, its native predictor (per score kind:
    transformed and raw)."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._models: dict[bool, Any] = {}
        self._unusable: set[bool] = set()
        self._keys: dict[bool, str] = {}  # computing one costs milliseconds: once per kind

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the native code (a process of its own reloads it from the cache):
        a loaded model can go to worker processes."""
        return {**self.__dict__, "_models": {}}

    def predict(
        self, booster: lgb.Booster, arr: np.ndarray, *, raw_score: bool = False
    ) -> np.ndarray | None:
        """Predictions of ``arr`` (rows x features, float64) by the compiled forest, or None
        where it is not to be used (module docstring): the caller then asks LightGBM."""
        if raw_score in self._unusable:
            return None
        model = self._models.get(raw_score)
        if model is None:
            model = self._load(booster, arr, raw_score)
            if model is None:
                return None
        threads = 1 if len(arr) < SMALL_BATCH else (os.cpu_count() or 1)
        if threads == 1:
            return np.asarray(model.predict(arr, n_jobs=1))
        # lleaves starts a thread pool per call (about 1 ms a thread); one kept pool serves all
        parts = _pool().map(
            lambda rows: model.predict(rows, n_jobs=1), np.array_split(arr, threads)
        )
        return np.concatenate(list(parts))

    def _load(self, booster: lgb.Booster, arr: np.ndarray, raw_score: bool) -> Any | None:
        try:
            forest = self._keys.get(raw_score)
            if forest is None:
                forest = self._keys[raw_score] = _forest_key(self._text, raw_score)
            folder = cache_root() / forest
            if len(arr) < COMPILE_MIN_ROWS and not folder.is_dir():
                return None  # nothing cached, and not worth compiling: LightGBM answers
            obj = folder / f"{_machine_key()}.o"
            if len(arr) < COMPILE_MIN_ROWS and not obj.exists():
                return None
            model = self._compile_or_read(folder, obj, raw_score)
        except Exception as e:  # any failure of the optional path falls back to LightGBM
            _log.warning(
                "compiled trees unavailable, LightGBM predicts instead (%s: %s)",
                type(e).__name__,
                e,
            )
            self._unusable.add(raw_score)
            return None
        sample = np.ascontiguousarray(arr[:CHECK_ROWS])
        got = np.asarray(model.predict(sample, n_jobs=1))
        want = np.asarray(booster.predict(sample, raw_score=raw_score, num_threads=1))
        if got.shape != want.shape or not np.allclose(got, want, rtol=CHECK_RTOL, atol=CHECK_RTOL):
            _log.warning(
                "compiled trees %s disagree with LightGBM; removed, LightGBM predicts", obj
            )
            obj.unlink(missing_ok=True)
            self._unusable.add(raw_score)
            return None
        self._models[raw_score] = model
        return model

    def _compile_or_read(self, folder: Path, obj: Path, raw_score: bool) -> Any:
        """The forest's object code for this machine: read from ``obj`` when its recorded
        sha256 matches, else compiled and written there (``folder`` also holds the text
        lleaves reads)."""
        import lleaves
        from filelock import FileLock

        folder.mkdir(parents=True, exist_ok=True)
        text_file = folder / "model.txt"
        digest_file = obj.with_suffix(".sha256")
        with FileLock(folder / f".{obj.stem}.lock"):
            if not text_file.exists():
                _write_atomically(text_file, self._text.encode())
            model = lleaves.Model(model_file=str(text_file))
            if obj.exists():
                # LLVM loads object code unchecked, and damaged code can crash the process:
                # only a file whose sha256 is the one recorded when it was written is loaded
                recorded = digest_file.read_text().strip() if digest_file.exists() else ""
                if recorded == hashlib.sha256(obj.read_bytes()).hexdigest():
                    model.compile(cache=str(obj), raw_score=raw_score, **_OPTIONS)
                    return model
                _log.warning(
                    "compiled trees %s do not match their recorded sha256; compiling them again",
                    obj,
                )
                obj.unlink()
            _log.info(
                "compiling %d trees to native code (once; cached as %s)", model.num_trees(), obj
            )
            with atomic_path(obj) as tmp:
                tmp.unlink()  # lleaves writes the cache only where no file is
                model.compile(cache=str(tmp), raw_score=raw_score, **_OPTIONS)
                _write_atomically(
                    digest_file, hashlib.sha256(tmp.read_bytes()).hexdigest().encode()
                )
            return model


_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool() -> ThreadPoolExecutor:
    """The threads that evaluate compiled forests over parts of a batch (the C function
    releases the GIL); one pool per process, since a forked child inherits no threads."""
    pid = os.getpid()
    if pid not in _POOLS:
        _POOLS[pid] = ThreadPoolExecutor(
            max_workers=os.cpu_count() or 1, thread_name_prefix="surrogate-trees"
        )
    return _POOLS[pid]


def _write_atomically(path: Path, data: bytes) -> None:
    atomic_write(path, data)
