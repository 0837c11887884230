"""The layout space an optuna study records: by its first search, checked by every later one."""

from __future__ import annotations

import pytest

from surrogate.config.presets import get_preset
from surrogate.errors import ConfigError
from surrogate.layouts.space import LayoutSpace
from surrogate.layouts.study_space import SPACE_ATTR, check_study_space, space_record


def _space(**kw: object) -> LayoutSpace:
    fields = {"model": get_preset("1.34b"), "global_batch_seqs": 16, "max_mbs": 2, **kw}
    return LayoutSpace(**fields)  # type: ignore[arg-type]


def test_a_study_records_its_first_search_s_space_and_takes_the_same_again() -> None:
    import optuna

    study = optuna.create_study()
    check_study_space(study, _space())
    assert study.user_attrs[SPACE_ATTR] == space_record(_space()) == space_record(_space())
    study.add_trial(optuna.trial.create_trial(value=0.0))
    check_study_space(study, _space(frameworks=("torchtitan", "torchtitan")))  # the same space


def test_another_space_or_an_unrecorded_one_is_refused() -> None:
    import optuna

    study = optuna.create_study(study_name="s")
    check_study_space(study, _space())
    with pytest.raises(
        ConfigError,
        match=r"study 's' searches another layout space than this search's: "
        r"gpus_per_node \(8 there, 4 here\), max_mbs \(2 there, 4 here\);",
    ):
        check_study_space(study, _space(max_mbs=4, gpus_per_node=4))
    with pytest.raises(
        ConfigError, match=r": model\.name \(playbook-1\.34b there, llama3-8b here\), "
    ):
        check_study_space(study, _space(model=get_preset("8b")))
    old = optuna.create_study(study_name="old")
    old.add_trial(optuna.trial.create_trial(value=0.0))
    old.add_trial(optuna.trial.create_trial(value=0.0))
    with pytest.raises(
        ConfigError,
        match=r"study 'old' holds 2 trials but no record of the layout space searched .+ "
        r"search a new study \(another --study-name\)",
    ):
        check_study_space(old, _space())
