"""An optuna sampler that proposes only valid layouts of a space that can be enumerated.

Where a space has at most the enumeration limit's points
(:data:`~surrogate.layouts.grid.TABLE_LIMIT`), its valid layouts are a table
(:func:`~surrogate.layouts.grid.space_table`), and an optuna search of it (a shared study,
``method="optuna"``) need not spend a trial on a point that breaks a rule: in some spaces most
points do. :func:`valid_sampler` wraps optuna's own sampler (TPE, NSGA-II) the way optuna's
``PartialFixedSampler`` does: the trial's parameters keep their names and distributions (one
categorical per dimension, over :meth:`~surrogate.layouts.space.LayoutSpace.choices`), the
wrapped sampler proposes as it would, and each proposal is kept where it extends the trial's
choices so far to some valid layout, else drawn again (a few times), else replaced by the
nearest value that does (:meth:`ValidPoints.pick`). Every trial is thus a valid layout, and
TPE still models each dimension on its own: what it learns of a tp or a framework holds for
every layout that has it (one categorical over the valid layouts would learn of each layout
alone, and would store its list of every valid layout with each trial).

:class:`ValidPoints` holds the table's plain dimensions as indices into their choices; the
two conditional ones are read from what they become: the share (where a point chooses one)
from the count of layers it checkpoints (:func:`recompute_layers_for_share`), the sharding
from the copies of ZeRO's shards (``dp_replicate`` above 1 is 'node')."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.config.table import FlatTable
from surrogate.layouts.degrees import recompute_layers_for_share
from surrogate.layouts.dimensions import DIMENSIONS

if TYPE_CHECKING:
    import optuna

    from surrogate.layouts.space import LayoutSpace

PLAIN: tuple[str, ...] = tuple(d for d in DIMENSIONS if d not in ("recompute_share", "sharding"))
"""The dimensions every point chooses (the table's columns of the same names)."""

TRIES = 4
"""Proposals the wrapped sampler makes for a parameter before the nearest valid value is
taken instead (:meth:`ValidPoints.pick`)."""


class ValidPoints:
    """The valid layouts of a space (the rows of its table), as each plain dimension's index
    into the space's choices; which values of a dimension extend some choices to a valid
    layout."""

    def __init__(self, space: LayoutSpace, table: FlatTable) -> None:
        import pandas as pd

        self.space = space
        self.choices = space.choices()
        self.codes = {
            d: pd.Index(self.choices[d]).get_indexer(table[d]).astype(np.int64) for d in PLAIN
        }
        assert all((c >= 0).all() for c in self.codes.values()), "a row off the space's choices"
        self.checkpointed = np.asarray(table["recompute_layers"], dtype=np.int64)
        self.copies = np.asarray(table["dp_replicate"], dtype=np.int64)
        self.size = len(self.checkpointed)

    def _rows(self, params: Mapping[str, Any], skip: str = "") -> np.ndarray:
        """Where the rows agree with ``params`` (a value per dimension given; ``skip`` aside),
        the share through the count it becomes."""
        keep = np.ones(self.size, dtype=bool)
        for d in PLAIN:
            if d in params and d != skip:
                keep &= self.codes[d] == self.choices[d].index(params[d])
        if "recompute_share" in params and skip != "recompute_share":
            keep &= self.checkpointed == self._count(params, float(params["recompute_share"]))
        return keep

    def _count(self, params: Mapping[str, Any], share: float) -> int:
        return recompute_layers_for_share(
            str(params["framework"]),
            self.space.model.num_layers,
            int(params["pp"]),
            int(params["vpp"]),
            share,
        )

    def _chooses(self, params: Mapping[str, Any], name: str) -> bool:
        """Whether a point of ``params`` chooses dimension ``name`` (the share and the sharding
        only for some recompute modes, ZeRO stages and frameworks)."""
        if name == "recompute_share":
            return self.space.chooses_share(str(params["recompute"]), str(params["framework"]))
        if name == "sharding":
            return self.space.chooses_sharding(int(params["zero_stage"]), str(params["framework"]))
        return True

    def allowed(self, params: Mapping[str, Any], name: str) -> list[Any]:
        """The values of dimension ``name`` that extend ``params`` to some valid layout, in
        the order of the space's choices (empty: ``params`` are no valid layout's)."""
        rows = self._rows(params, skip=name)
        options = self.choices[name]
        if name in PLAIN:
            return [options[i] for i in np.unique(self.codes[name][rows])]
        if name == "recompute_share":
            counts = set(self.checkpointed[rows].tolist())
            return [s for s in options if self._count(params, float(s)) in counts]
        copies = self.copies[rows]
        held = {"full": bool((copies == 1).any()), "node": bool((copies > 1).any())}
        return [s for s in options if held[s]]

    def pick(
        self,
        params: Mapping[str, Any],
        name: str,
        propose: Callable[[], Any],
        rng: np.random.Generator,
    ) -> Any:
        """A value of dimension ``name`` that extends ``params`` to a valid layout: the first of
        :data:`TRIES` proposals that does, else the allowed value nearest the last proposal
        in the order of the choices (a degree, a micro-batch, a stage; ties drawn by ``rng``),
        or one drawn by ``rng`` (text and flags, which have no order)."""
        allowed = self.allowed(params, name)
        if not allowed:
            raise ValueError(f"no valid layout extends {dict(params)}")
        value = None
        for _ in range(TRIES):
            value = propose()
            if value in allowed:
                return value
        options = self.choices[name]
        if isinstance(value, bool | str) or value not in options:
            return allowed[int(rng.integers(len(allowed)))]
        at = options.index(value)
        gaps = np.array([abs(options.index(a) - at) for a in allowed])
        nearest = np.flatnonzero(gaps == gaps.min())
        return allowed[int(nearest[int(rng.integers(len(nearest)))])]

    def project(self, proposed: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        """``proposed`` (values of some dimensions, drawn together) made a valid layout's, in
        the order of :data:`DIMENSIONS`: each value kept where it extends those before it, else
        the nearest that does (:meth:`pick`); a share or a sharding dropped where the values
        before it make it no choice. Stops before a dimension that ``proposed`` lacks and the
        values before it leave open (the rest is drawn one parameter at a time)."""
        out: dict[str, Any] = {}
        fixed: dict[str, Any] = {}
        for d in DIMENSIONS:
            if not self._chooses({**fixed, **out}, d):
                continue
            if d in proposed:
                out[d] = self.pick({**fixed, **out}, d, partial(proposed.__getitem__, d), rng)
                continue
            allowed = self.allowed({**fixed, **out}, d)
            if len(allowed) != 1:
                break
            fixed[d] = allowed[0]
        return out


def valid_sampler(
    base: optuna.samplers.BaseSampler, points: ValidPoints, seed: int
) -> optuna.samplers.BaseSampler:
    """``base`` made to propose valid layouts of ``points`` only (module docstring)."""
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial, TrialState

    class ValidSampler(optuna.samplers.BaseSampler):
        def __init__(self) -> None:
            self._rng = np.random.default_rng(seed)

        def reseed_rng(self) -> None:
            base.reseed_rng()
            self._rng = np.random.default_rng()

        def infer_relative_search_space(
            self, study: optuna.Study, trial: FrozenTrial
        ) -> dict[str, BaseDistribution]:
            return base.infer_relative_search_space(study, trial)

        def sample_relative(
            self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
        ) -> dict[str, Any]:
            return points.project(base.sample_relative(study, trial, search_space), self._rng)

        def sample_independent(
            self,
            study: optuna.Study,
            trial: FrozenTrial,
            param_name: str,
            param_distribution: BaseDistribution,
        ) -> Any:
            def propose() -> Any:
                return base.sample_independent(study, trial, param_name, param_distribution)

            return points.pick(trial.params, param_name, propose, self._rng)

        def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
            base.before_trial(study, trial)

        def after_trial(
            self,
            study: optuna.Study,
            trial: FrozenTrial,
            state: TrialState,
            values: Sequence[float] | None,
        ) -> None:
            base.after_trial(study, trial, state, values)

    return ValidSampler()
