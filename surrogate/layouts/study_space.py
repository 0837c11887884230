"""Which layout space an optuna study searches: recorded by its first search, checked by every
later one.

Several ``surrogate search`` workers share a study in an RDB storage, and a later search
resumes it. A trial's parameters are a point's values (``tp``, ``framework``, ...), and what a
value is worth, and whether it makes a valid layout, depends on the space: the model, the
GPUs, the batch, the bounds. A worker searching another space would feed the study's sampler
trials that mean something else, and be fed proposals its space may not hold. So the study
records its space (:func:`space_record`, the study's user attribute :data:`SPACE_ATTR`,
which optuna-dashboard shows), and a search of another space is refused, naming what differs.
A study that holds trials but no record (made before searches recorded their space, or by
other code) is refused too: nothing tells which space its trials searched."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from surrogate.errors import ConfigError

if TYPE_CHECKING:
    import optuna

    from surrogate.layouts.space import LayoutSpace

SPACE_ATTR = "layout_space"
"""The study's user attribute that holds the space its trials search (:func:`space_record`)."""


def space_record(space: LayoutSpace) -> dict[str, Any]:
    """The fields that define ``space`` (the model's included), as JSON gives them back."""
    record: dict[str, Any] = json.loads(
        json.dumps(dataclasses.asdict(space), sort_keys=True, default=str)
    )
    return record


def _flat(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_study_space(study: optuna.Study, space: LayoutSpace) -> None:
    """Record ``space`` in a study that holds no trial and no record; ConfigError where the
    study records another space (saying what differs) or holds trials and no record."""
    record = space_record(space)
    held = study.user_attrs.get(SPACE_ATTR)
    if held is None:
        trials = len(study.get_trials(deepcopy=False))
        held = study.user_attrs.get(SPACE_ATTR)  # a worker that started meanwhile records first
        if held is None and trials:
            raise ConfigError(
                f"study {study.study_name!r} holds {trials} trial{'s' if trials > 1 else ''} but "
                f"no record of the layout space searched (its user attribute {SPACE_ATTR!r}, "
                "which a search records in a study it starts): a study is resumed only by a "
                "search of the space it records; search a new study (another --study-name)"
            )
        if held is None:
            study.set_user_attr(SPACE_ATTR, record)
            held = study.user_attrs.get(SPACE_ATTR)  # another worker's, if it wrote last
    if held != record:
        theirs, ours = _flat(held) if isinstance(held, dict) else {}, _flat(record)
        names = sorted({*theirs, *ours}, key=lambda k: (k != "model.name", k))  # name first
        differ = [k for k in names if theirs.get(k) != ours.get(k)]
        shown = ", ".join(f"{k} ({theirs.get(k)} there, {ours.get(k)} here)" for k in differ[:4])
        raise ConfigError(
            f"study {study.study_name!r} searches another layout space than this search's: "
            f"{shown}{' ...' if len(differ) > 4 else ''}; every search of a study gives the "
            "same space (model, GPUs, nodes, batch, frameworks and bounds), or searches "
            "another study (--study-name)"
        )
