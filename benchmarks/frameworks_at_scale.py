"""How the zero-run default predicts each framework's published and measured runs, as a user
would: one source held out at a time.

    python benchmarks/frameworks_at_scale.py [--shipped] [--by COLUMN] [--runs-out FILE]
                                             [--data-dir DIR]

The runs (``training.across.all_runs(published=True)``): NVIDIA's Megatron-Bridge DGX-H100
runs (``surrogate.ingest.published``), MosaicML's MPT runs (llm-foundry FSDP on H100 and
A100), the Ultra-Scale Playbook's (nanotron, H100 + EFA) and the project's own single-H100
runs (PyTorch autocast, FSDP2, torchtitan). Each source is held out in turn: every parameter
set is fitted on the other sources' runs (``training.across.held_out_sets``: the framework
versions' own sets less those the held-out runs take, and the default set, each set's runs
weighed alike, as ``training/ship_physics.py`` ships it), and the held-out runs are predicted
from their configuration alone (``surrogate.prediction.predict.predict_frame``, the default
hardware profile, or the shipped profile of the run's cluster where it has one, as a user of
that cluster who calibrated it would: nothing measured on the run itself, its own network
bandwidth included; ``--default-profile``: every GPU's default), by the
analytic model alone and by the bundled learned model (trained on the Playbook's runs: on those
its figures are not held out, and are marked so). ``--shipped`` predicts with the shipped sets
instead (seconds, not minutes; not held out for the sources the shipped default set saw, which
are all but Megatron-Bridge's).

Figures per group (a cluster; the project's own runs per framework), each model:

- ``runs``: completed runs predicted; ``refused``: completed runs whose layout the project's
  rules refuse (not predicted: Megatron-Bridge's flagged rows);
- ``tps x``: median of predicted / measured tokens/s per GPU;
- ``spread``: the mean over the runs of |ratio / median ratio - 1| (the MAPE once the
  group's level, its median, is removed): how far the runs scatter about that level;
  ``med dev``: the median of the same (robust: two outliers of six do not move it);
- ``OOM called``: completed runs predicted to run out of memory (``p_oom`` > 0.5);
- ``mem MAPE``: mean |predicted / measured - 1| of peak reserved memory over the completed
  runs with a measurement (``-`` where the source measures none), with their count;
- ``repeats``: measured, not predicted: the mean of |tokens/s / its set's median - 1| over the
  completed runs whose configuration and model name another completed run shares (repeats of one
  layout, e.g. the same Megatron-Bridge recipe in several releases), with their count: the
  spread the measurements have where no configuration differs, which no model of the
  configuration can go below (``-`` where no layout was run twice).

``--by COLUMN`` adds the same figures per value of a run column within each group (e.g.
``--by model_name``); ``--runs-out FILE`` writes every held-out run's predictions (CSV).
About 4 minutes on two cores (one default-set fit per source); ``--shipped`` 30 s.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from surrogate.analytic.params import ParameterSets
from surrogate.calibration.fit_params import fit_runs
from surrogate.config.training import CONFIG_COLUMNS
from surrogate.ingest.published import parse_published
from surrogate.io.datasource import data_dir as resolve_data_dir
from surrogate.learned.physics import PhysicsWarning
from surrogate.prediction.predict import predict_frame
from training.across import _parameter_sets_taken, all_runs, held_out_sets, level_and_spread

MODELS: dict[str, Any] = {"analytic": None, "learned": "default"}
PRED = ("pred_tokens_per_s_per_gpu", "p_oom", "pred_peak_mem_reserved_gib")
"""The predictions kept per model, as ``<model>_<column>`` (predict_frame's columns)."""
LEARNED_TRAINED_ON = "hf_ultrascale_playbook"
"""The source the bundled learned model is trained on (its figures there are not held out)."""
OOM_P = 0.5


def group_of(runs: pd.DataFrame) -> pd.Series:
    """The reporting group of each run: its cluster; the project's own runs per framework."""
    own = runs["cluster"] == "own-h100"
    return runs["cluster"].where(~own, "own-h100 " + runs["framework"].astype(str))


def _cluster_profile(runs: pd.DataFrame) -> str | None:
    """The one profile the runs of a source carry (their ``profile`` column), or None."""
    given = set(runs["profile"].dropna()) if "profile" in runs else set()
    if len(given) > 1:
        raise SystemExit(f"one source's runs carry several profiles: {sorted(given)}")
    return given.pop() if given else None


def predictions(
    runs: pd.DataFrame,
    sets_by_source: dict[str, ParameterSets | None],
    *,
    cluster_profiles: bool = True,
) -> pd.DataFrame:
    """Every run of ``runs`` predicted under its source's held-out sets, by each of
    :data:`MODELS` (columns ``<model>_pred_tokens_per_s_per_gpu``, ``<model>_p_oom``,
    ``<model>_pred_peak_mem_reserved_gib``), with its
    cluster's shipped profile (``cluster_profiles``; else the GPU's default one)."""
    out = runs.copy()
    for name, model in MODELS.items():
        for col in PRED:
            out[f"{name}_{col}"] = np.nan
        for source, sets in sets_by_source.items():
            rows = (runs["source"] == source).to_numpy()
            profile = _cluster_profile(runs.loc[rows]) if cluster_profiles else None
            with warnings.catch_warnings():
                # held out on purpose: the bundled model corrects the shipped sets, and the
                # learned figures here are its corrections over sets fitted without a source
                warnings.simplefilter("ignore", PhysicsWarning)
                pred = predict_frame(
                    runs.loc[rows, list(CONFIG_COLUMNS)].reset_index(drop=True),
                    model=model,
                    sets=sets,
                    profile=profile,
                )
            bad = pred["error"].astype(bool)
            if bad.any():
                raise SystemExit(
                    f"{source}: {int(bad.sum())} runs not predicted, e.g. "
                    f"{pred.loc[bad, 'error'].iloc[0]}"
                )
            for col in PRED:
                out.loc[rows, f"{name}_{col}"] = pred[col].to_numpy()
    return out


def figures(part: pd.DataFrame, model: str) -> dict[str, Any]:
    """The figures of the module docstring for the runs of ``part`` under ``model``."""
    done = part[part["status"] == "completed"]
    ratio = (done[f"{model}_pred_tokens_per_s_per_gpu"] / done["tokens_per_s_per_gpu"]).to_numpy(
        float
    )
    level, spread, med_dev = level_and_spread(ratio)
    mem = (done[f"{model}_pred_peak_mem_reserved_gib"] / done["peak_mem_reserved_gib"]).to_numpy(
        float
    )
    mok = np.isfinite(mem)
    repeat, repeated = repeat_spread(done)
    return {
        "runs": int(np.isfinite(ratio).sum()),
        "tps x": level,
        "spread": spread,
        "med dev": med_dev,
        "OOM called": int((done[f"{model}_p_oom"] > OOM_P).sum()),
        "mem MAPE": float(np.mean(np.abs(mem[mok] - 1))) if mok.any() else np.nan,
        "mem runs": int(mok.sum()),
        "repeats": repeat,
        "repeat runs": repeated,
    }


def repeat_spread(done: pd.DataFrame) -> tuple[float, int]:
    """The ``repeats`` figure of the module docstring for the completed runs ``done``: the
    mean |tokens/s / median - 1| over the runs in sets of two or more that share every
    configuration column and the model name, and how many runs those sets hold."""
    keys = [c for c in (*CONFIG_COLUMNS, "model_name") if c in done]
    if done.empty:
        return np.nan, 0
    tps = done["tokens_per_s_per_gpu"]
    sets = done.groupby(keys, dropna=False)["tokens_per_s_per_gpu"]
    size = sets.transform("size")
    median = sets.transform("median")
    dev = ((tps / median - 1).abs())[(size > 1) & np.isfinite(tps)]
    return (float(dev.mean()) if len(dev) else np.nan), len(dev)


def table(scored: pd.DataFrame, refused: dict[str, int], by: str | None = None) -> pd.DataFrame:
    """One row per (group[, value of ``by``], model)."""
    keys = ["group", "framework"] + ([by] if by else [])
    rows = []
    for key, part in scored.groupby(keys, sort=True):
        values = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        for model in MODELS:
            label = model
            if model == "learned" and (part["source"] == LEARNED_TRAINED_ON).all():
                label = "learned (trained on these)"
            rows.append(
                {
                    **values,
                    "model": label,
                    "refused": refused.get(str(values["group"]), 0) if not by else "",
                    **figures(part, model),
                }
            )
    return pd.DataFrame(rows)


def show(frame: pd.DataFrame) -> str:
    shown = frame.copy()
    shown["tps x"] = shown["tps x"].map(lambda v: f"{v:.2f}")
    for col in ("spread", "med dev"):
        shown[col] = shown[col].map(lambda v: f"{100 * v:.1f}%")
    shown["mem MAPE"] = [
        ("-" if not np.isfinite(v) else f"{100 * v:.1f}% ({n})")
        for v, n in zip(shown["mem MAPE"], shown["mem runs"], strict=True)
    ]
    shown["repeats"] = [
        ("-" if not np.isfinite(v) else f"{100 * v:.1f}% ({n})")
        for v, n in zip(shown["repeats"], shown["repeat runs"], strict=True)
    ]
    return shown.drop(columns=["mem runs", "repeat runs"]).to_string(index=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shipped", action="store_true")
    ap.add_argument("--default-profile", action="store_true")
    ap.add_argument("--by", default=None, metavar="COLUMN")
    ap.add_argument("--runs-out", type=Path, default=None, metavar="FILE")
    ap.add_argument("--data-dir", type=Path, default=None)
    args = ap.parse_args()
    runs = all_runs(args.data_dir, published=True)
    if args.by and args.by not in runs:
        ap.error(f"--by {args.by}: not a column of the runs")
    runs["group"] = group_of(runs)
    sources = sorted(runs["source"].unique())
    sets_by_source: dict[str, ParameterSets | None] = {}
    if args.shipped:
        sets_by_source = dict.fromkeys(sources)
    else:
        taken = _parameter_sets_taken(runs)
        full = fit_runs(runs, group_by=None)["sets"]
        for source in sources:
            test = (runs["source"] == source).to_numpy()
            sets_by_source[source] = held_out_sets(runs, test, taken=taken, full=full)
            print(
                f"  held out {source}: sets fitted on the other {int((~test).sum())} runs",
                flush=True,
            )
    scored = predictions(runs, sets_by_source, cluster_profiles=not args.default_profile)
    path = resolve_data_dir(args.data_dir) / "published/megatron_bridge_h100.csv"
    flagged = parse_published(path, flagged=True)[0]
    refused = {"megatron-bridge-h100": int(flagged["layout_problem"].notna().sum())}
    how = (
        "the shipped parameter sets (not held out but for megatron_bridge)"
        if args.shipped
        else "each source held out of every fit"
    )
    profiles = (
        "every GPU's default hardware profile"
        if args.default_profile
        else "the cluster's shipped profile where it has one (Playbook: hf-playbook-cluster, "
        "own H100: h100-own-measured), else the GPU's default"
    )
    print(f"\n{len(runs)} runs; predicted from their configuration alone, {profiles}, {how}")
    print(show(table(scored, refused)))
    if args.by:
        print(f"\nper {args.by}:")
        print(show(table(scored, refused, by=args.by)))
    if args.runs_out is not None:
        keep = [
            "source",
            "run_id",
            "group",
            "model_name",
            "status",
            "tokens_per_s_per_gpu",
            "peak_mem_reserved_gib",
            *(f"{m}_{c}" for m in MODELS for c in PRED),
        ]
        scored[keep].to_csv(args.runs_out, index=False)
        print(f"wrote {len(scored)} runs' predictions to {args.runs_out}")


if __name__ == "__main__":
    main()
