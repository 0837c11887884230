"""The round directory on disk: ``proposals.csv``, the launch files under ``logs/`` and
``round.json`` (what was proposed, why, by which model, and the goal), written atomically and
never over another round; and ``round.json`` read back, type-checked."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from surrogate.config.training import TrainingConfig, config_to_flat
from surrogate.errors import ConfigError, DataError, OutputError
from surrogate.io.atomic import is_write_failure, output_error
from surrogate.io.json_files import read_json
from surrogate.io.jsonsafe import json_safe
from surrogate.io.outputs import check_writable_dir
from surrogate.layouts.labels import layout_label
from surrogate.loop.acquisition import Acquisition
from surrogate.loop.launch import write_launch_files

if TYPE_CHECKING:
    from surrogate.learned.model import SurrogateModel

ROUND_FILE = "round.json"
PROPOSALS_FILE = "proposals.csv"
LOGS_DIR = "logs"


def model_identity(model: SurrogateModel | None, where: str) -> dict[str, Any]:
    """What identifies the proposing model in ``round.json``: where it was, the data it was
    trained on and, for a saved model, its own sha256 (``saved_sha256_``: a model retrained on
    the same data with other settings is another model)."""
    if model is None:
        return {"path": None, "kind": "analytic", "data_hash": None}
    return {
        "path": where,
        "kind": "learned",
        "data_hash": model.data_hash_,
        "model_sha256": getattr(model, "saved_sha256_", None),
        "n_train": model.n_train_,
    }


def next_round_number(round_dir: Path) -> int:
    """1 + the largest round number recorded beside ``round_dir`` (1 for the first)."""
    numbers = [0]
    parent = round_dir.parent
    if parent.is_dir():
        for f in parent.glob(f"*/{ROUND_FILE}"):
            try:
                numbers.append(int(json.loads(f.read_text())["round"]))
            except (ValueError, KeyError, TypeError, json.JSONDecodeError):
                continue
    return max(numbers) + 1


def check_new_round_dir(round_dir: str | Path) -> Path:
    """``round_dir`` as a Path if a new round can be written there (absent or an empty
    directory, in a writable place); ConfigError otherwise.
    :func:`surrogate.loop.active.propose` checks before it scores the space, so a taken
    directory costs nothing."""

    final = Path(round_dir)
    if final.exists() and not final.is_dir():
        raise ConfigError(f"--round must be a new directory, got the file {str(final)!r}")
    if final.is_dir() and any(final.iterdir()):
        raise ConfigError(
            f"round directory {str(final)!r} already exists and is not empty: a round is never "
            "overwritten; give a new --round directory"
        )
    check_writable_dir(final.parent, flag="--round")
    return final


def write_round(
    round_dir: str | Path,
    picks: Sequence[tuple[TrainingConfig, str, Mapping[str, Any]]],
    *,
    model_info: Mapping[str, Any],
    goal: Mapping[str, Any],
    acquisition: Acquisition,
    round_number: int | None = None,
    steps: int = 50,
    cost: Mapping[str, Any] | None = None,
) -> Path:
    """Write a round directory (module docstring) atomically; ConfigError if it exists.

    ``picks``: per run its configuration, the reason it was picked and its predicted scores;
    ``cost``: what the round costs (:func:`surrogate.loop.cost.round_cost`), recorded as
    ``cost``."""
    import pandas as pd

    final = check_new_round_dir(round_dir)
    if not picks:  # read_round and score-round refuse a round of no run: none is written
        raise ConfigError("a round holds at least one run, got none to write")
    number = round_number if round_number is not None else next_round_number(final)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        rows, records = [], []
        for i, (cfg, reason, scores) in enumerate(picks):
            name = f"r{number:02d}-{i:02d}-n{cfg.cluster.num_nodes}-" + layout_label(cfg).replace(
                " ", "_"
            )
            files = write_launch_files(cfg, tmp / LOGS_DIR / name, run_name=name, steps=steps)
            flat = config_to_flat(cfg) | {"global_batch_seqs": cfg.batch_seqs}
            clean = {k: json_safe(v) for k, v in scores.items()}
            rows.append(
                {"name": name, "reason": reason, "layout": layout_label(cfg), **flat, **clean}
            )
            records.append(
                {
                    "name": name,
                    "reason": reason,
                    "config": flat,
                    "predicted": clean,
                    "command": files.command,
                }
            )
        pd.DataFrame(rows).to_csv(tmp / PROPOSALS_FILE, index=False)
        record = {
            "round": number,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "goal": dict(goal),
            "model": dict(model_info),
            "acquisition": {
                "boundary_frac": acquisition.boundary_frac,
                "diversity_scale": acquisition.diversity_scale,
                "gain": acquisition.gain,
                "open_with_best": acquisition.open_with_best,
            },
            "proposals": records,
        }
        if cost is not None:
            record["cost"] = dict(cost)
        (tmp / ROUND_FILE).write_text(json.dumps(json_safe(record), indent=2))
        final.parent.mkdir(parents=True, exist_ok=True)
        # one rename: it replaces an absent or empty directory, never a written round, so of
        # several proposes into one new directory at once exactly one wins
        os.rename(tmp, final)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise ConfigError(
                f"round directory {str(final)!r} was written by another propose meanwhile: a "
                "round is never overwritten; give a new --round directory"
            ) from None
        if isinstance(e, OutputError):  # a file of the round: name the round, not its tmp
            raise OutputError(f"cannot write the round {str(final)!r}: {e.reason}") from None
        if isinstance(e, OSError) and is_write_failure(e):
            raise output_error(final, e) from None
        raise
    return final


def read_round(round_dir: str | Path) -> dict[str, Any]:
    path = Path(round_dir) / ROUND_FILE
    data = read_json(
        path,
        missing=DataError(f"{str(round_dir)!r} is not a round directory ({ROUND_FILE} missing)"),
    )
    return _check_round(data, path)


def _check_round(record: Any, where: Path) -> dict[str, Any]:
    """The parts of ``round.json`` that scoring reads, type-checked (a hand-edited or foreign
    file must not end in a KeyError or score under a round number that is not one)."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: a round file holds a JSON object, got {type(record).__name__}")
    number = record.get("round")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise DataError(f"{where}: round must be an integer >= 1, got {number!r}")
    proposals = record.get("proposals")
    if (
        not isinstance(proposals, list)
        or not proposals
        or not all(
            isinstance(p, dict)
            and isinstance(p.get("name"), str)
            and isinstance(p.get("config"), dict)
            for p in proposals
        )
    ):
        raise DataError(
            f"{where}: proposals must be a non-empty list of objects with a name "
            "and a config (what `surrogate propose` writes)"
        )
    if not isinstance(record.get("model"), dict):
        raise DataError(f"{where}: round {number} names no proposing model (a 'model' object)")
    return record
