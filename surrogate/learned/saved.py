"""A fitted :class:`~surrogate.learned.model.SurrogateModel` as saved: its sidecar
``model.json`` (the settings, the fitted figures, the analytic parameter sets the boosters were
trained against, the domain, the metrics and the versions that wrote it), made of the model's
attributes (:func:`sidecar_of`), read back and checked (:func:`read_sidecar`) and turned into
the fitted attributes of a loaded model (:func:`fitted_attributes`). The files' integrity is
:mod:`surrogate.learned.model_files`'."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.params import ParameterSets
from surrogate.errors import DataError, NoModelError
from surrogate.io.json_files import read_json
from surrogate.learned.domain import Domain
from surrogate.learned.features import FEATURE_NAMES
from surrogate.learned.physics import plain_sets, sets_sha256, unrecorded_physics
from surrogate.learned.recalibration import Recalibration
from surrogate.version import __version__

if TYPE_CHECKING:
    from collections.abc import Mapping

    import lightgbm as lgb

FORMAT = "surrogate.model/2"


def _json_float(x: float) -> float | None:
    """``x`` for a JSON sidecar: None where NaN."""
    return None if np.isnan(x) else float(x)


def sidecar_of(model: Mapping[str, Any]) -> dict[str, Any]:
    """The sidecar of a fitted model, of its settings and fitted attributes by name (its
    ``vars``), less the sha256 of its files
    (:func:`surrogate.learned.model_files.write_sidecar` adds them)."""
    import lightgbm as lgb

    sets: ParameterSets = model["base_parameter_sets_"]
    return {
        "format": FORMAT,
        "feature_names": model["feature_names_"],
        "status_classes": model["status_classes_"],
        "status_fail_rate": model["status_fail_rate_"],
        "conformal_q": model["conformal_q_"],
        "conformal_q_by_framework": model["conformal_q_by_framework_"],
        "mem_conformal_q": _json_float(model["mem_conformal_q_"]),
        "mem_conformal_q_by_framework": model["mem_conformal_q_by_framework_"],
        "mem_conformal_q_unseen_shape": _json_float(model["mem_conformal_q_unseen_shape_"]),
        "correction_weight_by_framework": model["correction_weight_by_framework_"],
        **({"physics_sets": model["physics_sets_"]} if model["physics_sets_"] else {}),
        "parameter_sets": plain_sets(sets),
        "parameter_sets_sha256": sets_sha256(sets),
        "coverage": model["coverage"],
        "seed": model["seed"],
        "n_folds": model["n_folds"],
        "balance_sources": model["balance_sources"],
        "censored_memory": model["censored_memory"],
        "params": {
            "status": model["status_params"],
            "mfu": model["mfu_params"],
            "mem": model["mem_params"],
        },
        "data_hash": model["data_hash_"],
        "domain": model["domain_"].to_json(),
        "n_train": model["n_train_"],
        "metrics": model["metrics_"],
        **(
            {"recalibration": model["recalibration_"].to_json()}
            if model["recalibration_"] is not None
            else {}
        ),
        "versions": {
            "surrogate": __version__,
            "lightgbm": lgb.__version__,
            "python": platform.python_version(),
        },
    }


def read_sidecar(directory: Path) -> dict[str, Any]:
    """The sidecar of a saved model directory, checked: NoModelError without one, DataError
    when it is not JSON, of another format, or of other features than this version computes."""
    side = directory / "model.json"
    meta = read_json(
        side, missing=NoModelError(f"no model in {str(directory)!r} (model.json missing)")
    )
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
        "coverage": meta["coverage"],
        "seed": meta["seed"],
        "n_folds": int(meta.get("n_folds", 5)),  # not recorded before: the default
        "shrink_doublings": domain.shrink_doublings,
        "unseen_shape_weight": domain.unseen_shape_weight,
        "balance_sources": bool(meta.get("balance_sources", True)),
        "censored_memory": bool(meta.get("censored_memory", False)),
        "status_params": meta["params"]["status"],
        "mfu_params": meta["params"]["mfu"],
        "mem_params": meta["params"]["mem"],
    }


def fitted_attributes(
    meta: dict[str, Any], domain: Domain, boosters: dict[str, lgb.Booster], *, where: str
) -> dict[str, Any]:
    """The fitted attributes of a model, by name, from a verified sidecar and its boosters.

    The analytic parameter sets are the ones the sidecar records; a sidecar saved before they
    were recorded (``where`` names it) gives the shipped ones, with a warning
    (:func:`surrogate.learned.physics.unrecorded_physics`)."""
    fail_rate = meta.get("status_fail_rate")  # absent before the status model had a start
    mem_q = meta.get("mem_conformal_q")  # absent before the memory had an interval
    unseen_q = meta.get("mem_conformal_q_unseen_shape")  # absent before it had its own
    recorded = meta.get("parameter_sets")  # absent before the sets were recorded
    recal = meta.get("recalibration")  # absent: the intervals as fitted
    return {
        "status_model_": boosters["status"],
        "mfu_model_": boosters["mfu"],
        "mfu_lo_model_": boosters["mfu_lo"],
        "mfu_hi_model_": boosters["mfu_hi"],
        "mem_model_": boosters["mem"],
        "status_classes_": list(meta["status_classes"]),
        "status_fail_rate_": None if fail_rate is None else float(fail_rate),
        "conformal_q_": float(meta["conformal_q"]),
        "conformal_q_by_framework_": {  # absent before the widening was per framework
            str(k): float(v) for k, v in meta.get("conformal_q_by_framework", {}).items()
        },
        "mem_conformal_q_": float("nan") if mem_q is None else float(mem_q),
        "mem_conformal_q_by_framework_": {  # absent before it was per framework
            str(k): float(v) for k, v in meta.get("mem_conformal_q_by_framework", {}).items()
        },
        "mem_conformal_q_unseen_shape_": float("nan") if unseen_q is None else float(unseen_q),
        "physics_sets_": dict(meta.get("physics_sets", {})),  # absent: none of its own
        "base_parameter_sets_": (
            unrecorded_physics(where) if recorded is None else ParameterSets(recorded)
        ),
        "correction_weight_by_framework_": {  # absent: the full correction everywhere
            str(k): float(v) for k, v in meta.get("correction_weight_by_framework", {}).items()
        },
        "feature_names_": list(meta["feature_names"]),
        "data_hash_": meta["data_hash"],
        "domain_": domain,
        "n_train_": meta["n_train"],
        "metrics_": meta.get("metrics", {}),
        "recalibration_": None if recal is None else Recalibration.from_json(recal),
        "saved_sha256_": str(meta["sidecar_sha256"]),
    }
