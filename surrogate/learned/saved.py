"""A fitted :class:`~surrogate.learned.model.SurrogateModel` as saved: its sidecar
``model.json`` (the settings, the fitted figures, the domain, the metrics and the versions that
wrote it), read back and checked (:func:`read_sidecar`) and restored onto a model
(:func:`restore`). The files' integrity is :mod:`surrogate.learned.model_files`'."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import surrogate
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.errors import DataError, NoModelError
from surrogate.io.json_files import read_json
from surrogate.learned.domain import Domain
from surrogate.learned.features import FEATURE_NAMES
from surrogate.learned.recalibration import Recalibration

if TYPE_CHECKING:
    import lightgbm as lgb

    from surrogate.learned.model import SurrogateModel

FORMAT = "surrogate.model/2"


def _json_float(x: float) -> float | None:
    """``x`` for a JSON sidecar: None where NaN."""
    return None if np.isnan(x) else float(x)


def sidecar_of(model: SurrogateModel) -> dict[str, Any]:
    """The sidecar of a fitted model, less the sha256 of its files
    (:func:`surrogate.learned.model_files.write_sidecar` adds them)."""
    import lightgbm as lgb

    return {
        "format": FORMAT,
        "feature_names": model.feature_names_,
        "status_classes": model.status_classes_,
        "status_fail_rate": model.status_fail_rate_,
        "conformal_q": model.conformal_q_,
        "conformal_q_by_framework": model.conformal_q_by_framework_,
        "mem_conformal_q": _json_float(model.mem_conformal_q_),
        "mem_conformal_q_by_framework": model.mem_conformal_q_by_framework_,
        "mem_conformal_q_unseen_shape": _json_float(model.mem_conformal_q_unseen_shape_),
        "correction_weight_by_framework": model.correction_weight_by_framework_,
        **({"physics_sets": model.physics_sets_} if model.physics_sets_ else {}),
        "coverage": model.coverage,
        "seed": model.seed,
        "n_folds": model.n_folds,
        "balance_sources": model.balance_sources,
        "censored_memory": model.censored_memory,
        "params": model.lightgbm_params,
        "data_hash": model.data_hash_,
        "domain": model.domain_.to_json(),
        "n_train": model.n_train_,
        "metrics": model.metrics_,
        **({"recalibration": model.recalibration_.to_json()}
           if model.recalibration_ is not None else {}),
        "versions": {"surrogate": surrogate.__version__, "lightgbm": lgb.__version__,
                     "python": platform.python_version()},
    }


def read_sidecar(directory: Path) -> dict[str, Any]:
    """The sidecar of a saved model directory, checked: NoModelError without one, DataError
    when it is not JSON, of another format, or of other features than this version computes."""
    side = directory / "model.json"
    meta = read_json(side, missing=NoModelError(
        f"no model in {str(directory)!r} (model.json missing)"))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise DataError(f"{side}: format must be {FORMAT!r}, got {got!r}")
    if meta.get("feature_names") != list(FEATURE_NAMES):
        raise DataError(
            f"{side}: the model was trained on other features than this version computes; "
            "retrain it (surrogate train)"
        )
    return meta


def settings_of(meta: dict[str, Any], domain: Domain) -> dict[str, Any]:
    """The constructor settings a sidecar records."""
    return {
        "coverage": meta["coverage"], "seed": meta["seed"],
        "n_folds": int(meta.get("n_folds", 5)),  # not recorded before: the default
        "shrink_doublings": domain.shrink_doublings,
        "unseen_shape_weight": domain.unseen_shape_weight,
        "balance_sources": bool(meta.get("balance_sources", True)),
        "censored_memory": bool(meta.get("censored_memory", False)),
        "status_params": meta["params"]["status"], "mfu_params": meta["params"]["mfu"],
        "mem_params": meta["params"]["mem"],
    }


def restore(model: SurrogateModel, meta: dict[str, Any], domain: Domain,
            boosters: dict[str, lgb.Booster]) -> None:
    """Set the fitted attributes of ``model`` from a verified sidecar and its boosters."""
    model.status_model_ = boosters["status"]
    model.mfu_model_ = boosters["mfu"]
    model.mfu_lo_model_ = boosters["mfu_lo"]
    model.mfu_hi_model_ = boosters["mfu_hi"]
    model.mem_model_ = boosters["mem"]
    model.status_classes_ = list(meta["status_classes"])
    fail_rate = meta.get("status_fail_rate")  # absent before the status model had a start
    model.status_fail_rate_ = None if fail_rate is None else float(fail_rate)
    model.conformal_q_ = float(meta["conformal_q"])
    model.conformal_q_by_framework_ = {  # absent before the widening was per framework
        str(k): float(v) for k, v in meta.get("conformal_q_by_framework", {}).items()}
    mem_q = meta.get("mem_conformal_q")  # absent before the memory had an interval
    model.mem_conformal_q_ = float("nan") if mem_q is None else float(mem_q)
    model.mem_conformal_q_by_framework_ = {  # absent before it was per framework
        str(k): float(v) for k, v in meta.get("mem_conformal_q_by_framework", {}).items()}
    mem_q = meta.get("mem_conformal_q_unseen_shape")  # absent before it had its own
    model.mem_conformal_q_unseen_shape_ = float("nan") if mem_q is None else float(mem_q)
    model.physics_sets_ = dict(meta.get("physics_sets", {}))  # absent: none of its own
    model.base_parameter_sets_ = shipped_parameter_sets()
    model.correction_weight_by_framework_ = {  # absent: the full correction everywhere
        str(k): float(v) for k, v in meta.get("correction_weight_by_framework", {}).items()}
    model.feature_names_ = list(meta["feature_names"])
    model.data_hash_ = meta["data_hash"]
    model.domain_ = domain
    model.n_train_ = meta["n_train"]
    model.metrics_ = meta.get("metrics", {})
    recal = meta.get("recalibration")  # absent: the intervals as fitted
    model.recalibration_ = None if recal is None else Recalibration.from_json(recal)
    model.saved_sha256_ = str(meta["sidecar_sha256"])
