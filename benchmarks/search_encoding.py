"""How optuna's trials fare in a space that can be enumerated, by how they are drawn.

    python benchmarks/search_encoding.py [--trials N] [--seeds K] [--space integration|8b]

Three ways, each over ``--seeds`` seeds (0, 1, ...), each study in its own sqlite file, the
layouts scored by the analytic model (``model=None``):

- **every point**: per-dimension parameters drawn over the whole grid of choices, invalid
  points handled as constraints (``search(..., enumerate_limit=0)``, a larger space's way);
- **valid, per dimension**: the same parameters, each proposal made one that leads to a valid
  layout (``surrogate.layouts.valid_sampler``, what ``search`` does where it can enumerate);
- **valid, one categorical**: one parameter whose choices are the valid layouts' keys, TPE
  over it (the encoding not chosen), its value the layout's predicted MFU where feasible.

Per way: the trials that were valid layouts, the distinct layouts met, the best feasible
predicted MFU found (mean of the seeds, a search that found none counted as 0; the
enumeration's best beside it) and the study's file size. The spaces: ``integration``,
tests/integration/test_postgres.py's (1.34b on 1, 2 and 4 nodes, 946 valid layouts of 13,500
points); ``8b``, Llama 3 8B with torchtitan on 1-64 nodes at a batch of 8 sequences (33,597
of 1,612,800). About a minute each on two cores.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

SPACES = ("integration", "8b")


def _space(name: str) -> Any:
    from surrogate.config.presets import get_preset
    from surrogate.layouts.space import LayoutSpace

    if name == "integration":
        return LayoutSpace(
            model=get_preset("1.34b"),
            global_batch_seqs=64,
            node_counts=(1, 2, 4),
            max_cp=1,
            max_vpp=1,
            max_mbs=4,
            recompute_modes=("none", "full"),
        )
    return LayoutSpace(
        model=get_preset("8b"),
        global_batch_seqs=8,
        node_counts=(1, 2, 4, 8, 16, 32, 64),
        frameworks=("torchtitan",),
    )


def _by_search(
    space: Any, trials: int, seed: int, limit: int | None, db: Path
) -> tuple[int, int, float]:
    """(valid trials, distinct layouts, best feasible MFU: 0 where the search found no valid
    layout and ended with its error) of ``search``'s study."""
    import optuna

    from surrogate.errors import ConfigError
    from surrogate.layouts.search import search

    kw = {} if limit is None else {"enumerate_limit": limit}
    url = f"sqlite:///{db}"
    try:
        found = search(
            space, model=None, n_trials=trials, storage=url, study_name="s", seed=seed, **kw
        )
        feasible = found.top[found.top["feasible"]]
        best = float(feasible["pred_mfu"].iloc[0]) if len(feasible) else 0.0
    except ConfigError:  # none of the trials was a valid layout
        best = 0.0
    done = optuna.load_study(study_name="s", storage=url).trials
    valid = [t for t in done if not t.user_attrs.get("invalid")]
    return len(valid), len({t.user_attrs["layout"] for t in valid}), best


def _one_categorical(
    value: dict[str, float], trials: int, seed: int, db: Path
) -> tuple[int, int, float]:
    import optuna

    keys = sorted(value)
    study = optuna.create_study(
        direction="maximize",
        storage=f"sqlite:///{db}",
        sampler=optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=min(20, max(1, trials // 4))
        ),  # search's own TPE settings
    )
    study.optimize(lambda t: value[t.suggest_categorical("layout", keys)], n_trials=trials)
    met = {t.params["layout"] for t in study.trials}
    return trials, len(met), max(0.0, study.best_value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--space", choices=SPACES, default="integration")
    args = parser.parse_args()
    import optuna

    from surrogate.layouts.grid import space_table
    from surrogate.layouts.scored import Limits, Scorer

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    space = _space(args.space)
    how = Scorer(learned=None, profile=None, limits=Limits(), rank="mean")
    scored = how.ranked(space_table(space), labels=False, keys=True)
    value = {
        str(k): float(v) if f else 0.0
        for k, v, f in zip(scored["key"], scored["pred_mfu"], scored["feasible"], strict=True)
    }
    print(
        f"{args.space}: {len(value):,} valid layouts of {space.size_bound():,} points; the "
        f"enumeration's best feasible predicted MFU {max(value.values()):.4f}; "
        f"{args.trials} trials, seeds 0-{args.seeds - 1}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for way in ("every point", "valid, per dimension", "valid, one categorical"):
            rows, sizes = [], []
            for seed in range(args.seeds):
                db = Path(tmp) / f"{way.replace(' ', '_').replace(',', '')}-{seed}.db"
                if way == "valid, one categorical":
                    rows.append(_one_categorical(value, args.trials, seed, db))
                else:
                    limit = 0 if way == "every point" else None
                    rows.append(_by_search(space, args.trials, seed, limit, db))
                sizes.append(db.stat().st_size)
            valid, distinct, best = zip(*rows, strict=True)
            print(
                f"  {way:<23} valid trials {sum(valid)} of {args.trials * args.seeds} "
                f"({sum(b == 0 for b in best)} searches with none feasible), "
                f"{statistics.mean(distinct):.1f} distinct layouts a search, best "
                f"{statistics.mean(best):.4f} ({min(best):.4f}-{max(best):.4f}), study "
                f"{statistics.mean(sizes) / 1e6:.2f} MB"
            )


if __name__ == "__main__":
    main()
