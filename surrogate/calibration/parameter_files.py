"""The analytic model's fitted parameter sets that ship with the package
(``surrogate/data/analytic_params.json``, written by ``training/ship_physics.py`` through
``surrogate.calibration.fit_params.write_sets``), read once: the sets every prediction takes unless
it is
given others (:class:`~surrogate.analytic.params.ParameterSets`)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from surrogate.analytic.params import ParameterSets


@cache
def shipped_parameter_sets() -> ParameterSets:
    """The shipped fitted parameter sets, by ``framework/version`` (none if none ship)."""
    path = resources.files("surrogate") / "data" / "analytic_params.json"
    if not path.is_file():
        return ParameterSets()
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return ParameterSets(dict(data.get("sets", {})))
