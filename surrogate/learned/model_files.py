"""The integrity of a saved model directory (``surrogate.learned.model.SurrogateModel.save``):
LightGBM's text models (``<name>.txt``) and the JSON sidecar ``model.json``, which records the
sha256 of every model file and of itself.

LightGBM trusts its input, so every file is checked against its recorded sha256 before
LightGBM parses it (:func:`verified_texts`); the sidecar is written atomically
(:func:`write_sidecar`); the files of a model saved before hashes were recorded are vouched
for with :func:`record_hashes`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from surrogate.errors import DataError, NoModelError
from surrogate.io.atomic import atomic_write
from surrogate.io.input_files import read_input_bytes
from surrogate.io.json_files import read_json

_MODEL_FILES = ("status", "mfu", "mfu_lo", "mfu_hi", "mem")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sidecar_digest(meta: dict[str, Any]) -> str:
    """sha256 of the sidecar's content, its own ``sidecar_sha256`` left out (canonical JSON:
    sorted keys, no spaces; a float prints the same after a JSON round trip)."""
    body = {k: v for k, v in meta.items() if k != "sidecar_sha256"}
    return _sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def write_sidecar(d: Path, sidecar: dict[str, Any]) -> str:
    """Record the sha256 of every model file and of the sidecar itself, then write
    ``model.json`` atomically (a temporary file and a rename); the sidecar's sha256."""
    sidecar = dict(sidecar)
    sidecar["file_sha256"] = {
        f"{n}.txt": _sha256((d / f"{n}.txt").read_bytes()) for n in _MODEL_FILES
    }
    sidecar["sidecar_sha256"] = _sidecar_digest(sidecar)
    atomic_write(d / "model.json", json.dumps(sidecar, indent=2, sort_keys=True))
    return str(sidecar["sidecar_sha256"])


def verified_texts(d: Path, meta: dict[str, Any]) -> dict[str, str]:
    """The LightGBM text of each model file in ``d``, each checked against the sha256 the
    sidecar ``meta`` records (and the sidecar against its own), before LightGBM parses it:
    LightGBM trusts its input, so an edited leaf would change predictions silently and a
    truncated file can crash the interpreter (segfault, abort) where no error can be caught.

    A sidecar without hashes (saved before they were recorded) is refused rather than trusted:
    its files cannot be told from damaged ones. Retrain, or vouch for the files with
    :func:`record_hashes`."""
    side = d / "model.json"
    hashes = meta.get("file_sha256")
    if not isinstance(hashes, dict) or "sidecar_sha256" not in meta:
        raise DataError(
            f"{side} records no sha256 of the model files (saved by an older surrogate), so a "
            "damaged file cannot be told from a sound one: retrain the model (surrogate train), "
            "or, if you trust its files, record their hashes with "
            "surrogate.learned.model_files.record_hashes(DIRECTORY)"
        )
    if meta["sidecar_sha256"] != _sidecar_digest(meta):
        raise DataError(
            f"{side} was changed after the model was saved (its sha256 differs from "
            "the one it records): restore it or retrain the model"
        )
    texts: dict[str, str] = {}
    for name in _MODEL_FILES:
        path = d / f"{name}.txt"
        if not path.exists():
            raise DataError(f"{d}: model file {name}.txt missing")
        data = read_input_bytes(path, what="model file", kind="model")
        if _sha256(data) != hashes.get(path.name):
            raise DataError(
                f"model file {path} is damaged: its sha256 differs from the one {side.name} "
                f"records ({len(data):,} bytes); restore it or retrain the model"
            )
        texts[name] = data.decode("utf-8")
    return texts


def record_hashes(directory: str | Path) -> Path:
    """Record in ``directory/model.json`` the sha256 of the model files as they are now.

    For a model saved before :meth:`surrogate.learned.model.SurrogateModel.save` recorded hashes
    (the bundled model's sidecar was updated so): whoever calls this vouches that the files
    are sound."""
    d = Path(directory)
    side = d / "model.json"
    meta = read_json(side, missing=NoModelError(f"no model in {str(d)!r} (model.json missing)"))
    for name in _MODEL_FILES:
        if not (d / f"{name}.txt").exists():
            raise DataError(f"{d}: model file {name}.txt missing")
    meta.pop("sidecar_sha256", None)
    write_sidecar(d, meta)
    return d
