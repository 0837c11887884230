"""The physics step of the learned surrogate: the analytic parameter sets its correction is
trained against, fitted before any booster and saved with the model.

The learned model corrects the analytic model's answer, so its boosters are only as right as
the physics under them: a correction learned against one set of analytic parameters applied
to the answer of another would correct what that other set no longer gets wrong. The step is
therefore its own (:func:`fit_physics`): the given sets (the shipped ones by default) with the
framework versions they lack fitted on the training runs
(``surrogate.calibration.fit_params.own_sets``). ``surrogate.learned.training_data`` computes
every feature and target under them, the model keeps them (``base_parameter_sets_``,
``physics_sets_``) and its sidecar records them (``surrogate.learned.saved``), so a loaded
model predicts under the physics it was trained against whatever parameter sets ship later.

Predicting under other sets than a model's own is allowed (a study may ask for it) but warned
about (:func:`check_physics`), as is loading a model saved before the sets were recorded.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from surrogate.analytic.params import ParameterSets
from surrogate.calibration.parameter_files import shipped_parameter_sets

if TYPE_CHECKING:
    import pandas as pd

RETRAIN = (
    "retrain the model under the sets you predict with (surrogate train; in Python "
    "SurrogateModel().fit(training_data(runs, sets=SETS)))"
)
"""How to get a model whose corrections fit a set of analytic parameters."""


class PhysicsWarning(UserWarning):
    """A learned model predicts under analytic parameter sets other than, or not known to be,
    the ones its boosters were trained against."""


@dataclass(frozen=True)
class Physics:
    """The analytic parameter sets of one training: the sets given (:attr:`base`) and those
    fitted on its runs for the framework versions they lack (:attr:`own`)."""

    base: ParameterSets = field(default_factory=shipped_parameter_sets)
    """The sets the training started from (the shipped ones unless given)."""
    own: Mapping[str, Any] = field(default_factory=dict)
    """Sets fitted on the training runs, by ``framework/version`` (empty: none)."""

    @property
    def sets(self) -> ParameterSets:
        """Every set the training's features and targets are computed under: :attr:`own` over
        :attr:`base`."""
        return self.base.with_more(self.own)


def fit_physics(
    runs: pd.DataFrame, *, profile: Any = None, sets: ParameterSets | None = None
) -> Physics:
    """The physics a correction of ``runs`` is trained against: ``sets`` (None: the shipped
    ones) and, for the framework versions they lack, sets fitted on ``runs`` (explained under
    ``profile``, None: each run's cluster's)."""
    # here, not at the top: the fit imports scipy, which a prediction never needs
    from surrogate.calibration.fit_params import own_sets

    base = shipped_parameter_sets() if sets is None else sets
    return Physics(base=base, own=own_sets(runs, profile, sets=base))


def plain_sets(sets: ParameterSets) -> dict[str, Any]:
    """``sets`` as plain JSON values (what a sidecar records and reads back alike)."""
    return dict(json.loads(json.dumps(sets.as_dict(), sort_keys=True, default=float)))


def sets_sha256(sets: ParameterSets) -> str:
    """sha256 of ``sets`` (canonical JSON: sorted keys, no spaces), naming them in messages
    and records."""
    text = json.dumps(plain_sets(sets), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def check_physics(trained: ParameterSets, used: ParameterSets, *, what: str = "the model") -> None:
    """Warn (:class:`PhysicsWarning`) where a model trained against ``trained`` predicts
    under other sets ``used``: its corrections were fitted to another analytic answer."""
    if used is trained or used.as_dict() == trained.as_dict():
        return
    warnings.warn(
        f"{what} was trained against analytic parameter sets {sets_sha256(trained)[:12]} but "
        f"predicts under others ({sets_sha256(used)[:12]}): its corrections hold only for the "
        f"physics they were fitted on; predict under its own sets (give no sets) or {RETRAIN}",
        PhysicsWarning,
        stacklevel=3,
    )


def unrecorded_physics(where: str) -> ParameterSets:
    """The sets a model saved before they were recorded predicts under, the shipped ones,
    with a :class:`PhysicsWarning` that they may not be those it was trained against."""
    warnings.warn(
        f"{where} records no analytic parameter sets (saved by an older surrogate): it predicts "
        "under the shipped ones, which may differ from those its boosters were trained "
        "against; retrain it (surrogate train) to record them",
        PhysicsWarning,
        stacklevel=4,
    )
    return shipped_parameter_sets()
