"""Whether the memory interval, p_oom and the verdict say one thing, on random layouts.

    python benchmarks/oom_agreement.py [--n 10000] [--seed 0] [--model-dir DIR]

Draws ``--n`` layouts at random (seeded) from the layout spaces of the Playbook's model sizes
and Llama 3 8B and 70B, on 1 to 64 nodes of 8 H100s, under nanotron, Megatron-LM and
torchtitan, at a global batch of 512 sequences of each model's length, micro-batches up to 8
and vpp up to 2 (each space, a model on a node count, drawn alike; within it every layout the
rules allow equally likely), predicts them with the learned model of ``--model-dir``
(default: the bundled one)
and counts those that break the rule of ``surrogate.prediction.memory_verdict`` (the
device's memory
interval within the GPU's memory beside a p_oom above 0.1, beyond it beside one under 0.9, or
a verdict that is not ``p_oom >= 0.5``), as the learned model's parts answer alone (``before``)
and as ``surrogate.prediction.scoring.score`` answers (``after``). These are predictions, not
measurements: the count says how often the answers contradicted each other, not which was
right (``benchmarks/accuracy.py`` measures p_oom's reliability on held-out runs).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from surrogate.config.presets import get_preset
from surrogate.config.table import FlatTable, table_len, take
from surrogate.layouts.grid import space_table
from surrogate.layouts.space import LayoutSpace
from surrogate.prediction.memory_verdict import agree, disagreements
from surrogate.prediction.scoring import score

MODELS = (
    "playbook-1.34b",
    "playbook-3.57b",
    "playbook-8.86b",
    "playbook-80b",
    "llama3-8b",
    "llama3-70b",
)
NODES = (1, 2, 4, 8, 16, 32, 64)
FRAMEWORKS = ("nanotron", "megatron", "torchtitan")


def random_layouts(n: int, seed: int) -> list[FlatTable]:
    """``n`` layout tables' rows drawn as the module doc says, one table per space."""
    rng = np.random.default_rng(seed)
    spaces = [(m, k) for m in MODELS for k in NODES]
    counts = np.bincount(rng.integers(len(spaces), size=n), minlength=len(spaces))
    tables = []
    for (name, nodes), count in zip(spaces, counts, strict=True):
        if not count:
            continue
        space = LayoutSpace(
            model=get_preset(name),
            global_batch_seqs=512,
            node_counts=(nodes,),
            frameworks=FRAMEWORKS,
            max_mbs=8,
            max_vpp=2,
            recompute_shares=(0.5, 1.0),
        )
        table = space_table(space)
        size = table_len(table)
        tables.append(take(table, rng.integers(size, size=count)))
    return tables


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model-dir", type=Path, default=None)
    args = ap.parse_args()
    from surrogate.prediction.predict import resolve_model

    model = resolve_model(args.model_dir or "default")
    before = after = total = 0
    kinds = {
        "interval within capacity, p_oom > 0.1": 0,
        "interval beyond capacity, p_oom < 0.9": 0,
        "verdict not p_oom >= 0.5": 0,
    }
    for table in random_layouts(args.n, args.seed):
        s = score(table, model=model, agree=False)
        context = s.analytic["mem_cuda_context"] / 2**30
        raw = s.columns
        bad = disagreements(raw, context)
        before += int(bad.sum())
        lo = raw["pred_peak_mem_reserved_lo_gib"] + context
        hi = raw["pred_peak_mem_reserved_hi_gib"] + context
        p, cap = raw["p_oom"], raw["capacity_gib"]
        kinds["interval within capacity, p_oom > 0.1"] += int(((hi <= cap) & (p > 0.1)).sum())
        kinds["interval beyond capacity, p_oom < 0.9"] += int(((lo > cap) & (p < 0.9)).sum())
        kinds["verdict not p_oom >= 0.5"] += int(
            ((p >= 0.5) != (raw["pred_status"] == "oom")).sum()
        )
        after += int(disagreements(agree(raw, context), context).sum())
        total += len(bad)
    print(
        f"{total} random layouts (seed {args.seed}), the learned model "
        f"{args.model_dir or 'bundled'}: memory interval, p_oom and verdict disagree on "
        f"{before} before reconciling, {after} after "
        "(surrogate.prediction.memory_verdict)"
    )
    for kind, count in kinds.items():
        print(f"  before, {kind}: {count}")


if __name__ == "__main__":
    main()
