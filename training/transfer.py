"""Transfer protocols: another cluster zero-shot and k-shot, and published runs at 16K GPUs.

- ``other_cluster``: MosaicML's published MPT runs (llm-foundry / Composer FSDP on H100 and
  A100; ``surrogate.ingest.llmfoundry``) predicted by a model fitted on the training runs
  alone (zero-shot), then by models fitted with ``k`` of them added (k-shot, several random
  draws), scored on the rest. The analytic model alone on the same runs is the baseline.
  Then as a user who has run on one node only: the ``k`` runs drawn from the one-node runs,
  scored on every run of more nodes (``scales="one node -> more"``), the scales they have not
  run.
- ``llama3_405b``: the three Llama 3 405B layouts of Table 4 of the Llama 3 paper (Dubey et
  al. 2024, "The Llama 3 Herd of Models"), with the MFU Meta *reported* for each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.params import DEFAULT_SET, ParameterSets
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.presets import get_preset
from surrogate.config.training import TrainingConfig
from surrogate.io.datasource import data_dir as resolve_data_dir
from surrogate.learned.model import SurrogateModel
from surrogate.learned.training_data import training_data
from surrogate.prediction.predict import predict
from surrogate.prediction.scoring import score_runs
from training.evaluate import PRED_KEYS, accuracy_metrics, analytic_predictions

if TYPE_CHECKING:
    import pandas as pd

LLAMA3_405B_REPORTED: tuple[dict[str, Any], ...] = (
    {"gpus": 8192, "dp": 64, "cp": 1, "seq_len": 8192, "grad_accum": 32, "mfu_reported": 0.43},
    {"gpus": 16384, "dp": 128, "cp": 1, "seq_len": 8192, "grad_accum": 16, "mfu_reported": 0.41},
    {"gpus": 16384, "dp": 8, "cp": 16, "seq_len": 131072, "grad_accum": 16, "mfu_reported": 0.38},
)
"""Table 4 of the Llama 3 paper: tp 8, pp 16, micro-batch 1, sequence parallelism, FSDP
without resharding after forward (ZeRO-2); BF16 MFU as reported by Meta."""


LLAMA3_405B_VPP: tuple[int, ...] = (1, 2, 4)
"""Virtual stages per rank the Table 4 layouts are predicted with: 1 as Table 4 gives them,
and 2 and 4 for the interleaved schedule the paper describes (sec. 3.3.2: V virtual stages per
pipeline rank, V not published; one layer fewer on the first and the last stage, which is
torchtitan's split, ``surrogate.analytic.pipeline``)."""


def llama3_405b_configs(vpp: int = 1) -> list[Any]:
    """The Table 4 layouts as TrainingConfigs (torchtitan traits: FSDP2, ZeRO-2), with ``vpp``
    virtual stages per rank."""
    base = get_preset("llama3-405b")
    out = []
    for row in LLAMA3_405B_REPORTED:
        model = replace(base, seq_len=row["seq_len"])
        out.append(
            TrainingConfig(
                model=model,
                cluster=ClusterConfig(gpu="H100-SXM-80GB", num_nodes=row["gpus"] // 8),
                layout=LayoutConfig(
                    dp=row["dp"],
                    tp=8,
                    pp=16,
                    cp=row["cp"],
                    mbs=1,
                    grad_accum=row["grad_accum"],
                    zero_stage=2,
                    vpp=vpp,
                    sequence_parallel=True,
                    framework="torchtitan",
                ),
            )
        )
    return out


def llama3_405b_table(model: SurrogateModel | None, vpp: int = 1) -> pd.DataFrame:
    """Reported vs predicted MFU (learned, analytic) for the Table 4 layouts with ``vpp``
    virtual stages per rank (:data:`LLAMA3_405B_VPP`)."""
    import pandas as pd

    rows = []
    for cfg, rep in zip(llama3_405b_configs(vpp), LLAMA3_405B_REPORTED, strict=True):
        analytic = predict(cfg, model=None)
        learned = predict(cfg, model=model) if model is not None else analytic
        rows.append(
            {
                "gpus": rep["gpus"],
                "dp": rep["dp"],
                "cp": rep["cp"],
                "seq_len": rep["seq_len"],
                "vpp": vpp,
                "mfu_reported": rep["mfu_reported"],
                "learned_mfu": learned.mfu,
                "learned_lo": learned.mfu_lo,
                "learned_hi": learned.mfu_hi,
                "analytic_mfu": analytic.mfu,
                "analytic_peak_mem_reserved_gib": analytic.peak_mem_reserved_gib,
                "learned_err": learned.mfu / rep["mfu_reported"] - 1,
                "analytic_err": analytic.mfu / rep["mfu_reported"] - 1,
                "extrapolation": learned.extrapolation,
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True, kw_only=True)
class TransferResult:
    """Metrics of one setting (``zero-shot`` or ``k=10`` ...) on the other cluster's runs."""

    setting: str
    metrics: dict[str, float]
    analytic_metrics: dict[str, float]
    draws: int
    scales: str = "any"
    """Where the k runs were drawn and what was scored: ``any`` (drawn from all, scored on the
    rest) or ``one node -> more`` (drawn from the one-node runs, scored on the others)."""
    own_physics_metrics: dict[str, float] | None = None
    """The analytic model alone under the parameters fitted on the k runs (their framework's:
    ``surrogate.calibration.fit_params.own_sets``, which the learned model's training fits and
    carries
    too), where k reaches ``surrogate.calibration.fit_params.OWN_MIN_RUNS``."""


def _scored(
    model: SurrogateModel, runs: pd.DataFrame, sets: ParameterSets | None = None
) -> pd.DataFrame:
    pred = score_runs(runs, model=model, sets=sets)
    out = runs.copy()
    for k in PRED_KEYS:
        out[k] = pred[k].to_numpy()
    return out


def _analytic(runs: pd.DataFrame, sets: ParameterSets | None = None) -> pd.DataFrame:
    return runs.drop(columns=[k for k in PRED_KEYS if k in runs]).join(
        analytic_predictions(runs, sets=sets)
    )


def zero_shot_analytic(other: pd.DataFrame, sets: ParameterSets | None = None) -> pd.DataFrame:
    """``other``'s runs with the analytic model's predictions under parameter sets ``sets``
    (None: the shipped ones; the priors for a framework without a fitted set): the zero-shot
    analytic baseline of :func:`other_cluster`, which fits nothing on ``other``."""
    return _analytic(other.reset_index(drop=True), sets)


def _mean(dicts: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the draws that have it (NaN where none has: e.g. the analytic
    model's interval coverage)."""
    out = {}
    for k in dicts[0]:
        values = np.array([d[k] for d in dicts], dtype=np.float64)
        out[k] = (
            float(values[np.isfinite(values)].mean()) if np.isfinite(values).any() else float("nan")
        )
    return out


def other_cluster(
    train_runs: pd.DataFrame,
    other: pd.DataFrame,
    *,
    ks: Sequence[int] = (10, 50),
    draws: int = 3,
    params: dict[str, dict[str, Any] | None] | None = None,
    seed: int = 0,
    fitted: SurrogateModel | None = None,
    sets: ParameterSets | None = None,
) -> list[TransferResult]:
    """Zero-shot, then k-shot for each ``k`` (mean over ``draws`` random draws of k runs), with
    the model's default source balancing (``k=10``) and without it (``k=10 unweighted``); then
    zero-shot and k-shot (balanced) with the k runs drawn from ``other``'s one-node runs and
    every run of more nodes scored (``scales="one node -> more"``; none where ``other`` lacks
    either kind, or a k is not under the one-node runs' count). The analytic baseline is the
    model under the shipped parameters (the priors, for a framework without a fitted set);
    where k reaches ``surrogate.calibration.fit_params.OWN_MIN_RUNS``, which is where training fits
    the k
    runs' framework its own parameters (``training_data(own_physics=True)``), also under
    those (``own_physics_metrics``). ``sets``: the parameter sets every model is trained and
    scored under (None: the shipped ones)."""
    params = params or {}

    def fit(runs: pd.DataFrame, balance: bool = True) -> SurrogateModel:
        return SurrogateModel(
            status_params=params.get("status"),
            mfu_params=params.get("mfu"),
            mem_params=params.get("mem"),
            seed=seed,
            balance_sources=balance,
        ).fit(training_data(runs, sets=sets))

    other = other.reset_index(drop=True)
    base = fitted if fitted is not None else fit(train_runs)
    results = [
        TransferResult(
            setting="zero-shot",
            metrics=accuracy_metrics(_scored(base, other, sets)),
            analytic_metrics=accuracy_metrics(zero_shot_analytic(other, sets)),
            draws=1,
        )
    ]
    rng = np.random.default_rng(seed)
    results += _k_shot(train_runs, other, fit, rng, ks=ks, draws=draws, sets=sets)
    return results + _from_one_node(
        train_runs, other, fit, base, rng, ks=ks, draws=draws, sets=sets
    )


_Fit = Callable[..., "SurrogateModel"]
""":func:`other_cluster`'s fit of a table of runs (``balance``: balance sources)."""


def _k_shot(
    train_runs: pd.DataFrame,
    other: pd.DataFrame,
    fit: _Fit,
    rng: np.random.Generator,
    *,
    ks: Sequence[int],
    draws: int,
    sets: ParameterSets | None,
) -> list[TransferResult]:
    """:func:`other_cluster`'s k-shot settings, balanced and unweighted: each ``k`` of
    ``other``'s runs drawn from all of them, scored on the rest."""
    import pandas as pd

    from surrogate.calibration.fit_params import OWN_MIN_RUNS

    results = []
    for k in ks:
        if k >= len(other):
            continue
        learned: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        analytic = []
        physics: list[dict[str, float]] = []
        for _ in range(draws):
            pick = rng.choice(len(other), size=k, replace=False)
            rest = np.setdiff1d(np.arange(len(other)), pick)
            train = pd.concat([train_runs, other.iloc[pick]], ignore_index=True)
            for balance in (True, False):
                model = fit(train, balance)
                learned[balance].append(accuracy_metrics(_scored(model, other.iloc[rest], sets)))
            analytic.append(accuracy_metrics(_analytic(other.iloc[rest], sets)))
            if k >= OWN_MIN_RUNS:  # the k runs' own, as training fitted them
                physics.append(
                    accuracy_metrics(_analytic(other.iloc[rest], model.parameter_sets()))
                )
        for balance, name in ((True, f"k={k}"), (False, f"k={k} unweighted")):
            results.append(
                TransferResult(
                    setting=name,
                    metrics=_mean(learned[balance]),
                    analytic_metrics=_mean(analytic),
                    draws=draws,
                    own_physics_metrics=_mean(physics) if physics else None,
                )
            )
    return results


def _from_one_node(
    train_runs: pd.DataFrame,
    other: pd.DataFrame,
    fit: _Fit,
    base: SurrogateModel,
    rng: np.random.Generator,
    *,
    ks: Sequence[int],
    draws: int,
    sets: ParameterSets | None,
) -> list[TransferResult]:
    """:func:`other_cluster`'s settings as a user who ran on one node only: zero-shot, then
    each ``k`` of ``other``'s one-node runs drawn, scored on every run of more nodes."""
    import pandas as pd

    from surrogate.calibration.fit_params import OWN_MIN_RUNS

    results: list[TransferResult] = []
    one = np.flatnonzero(other["num_nodes"].to_numpy() == 1)
    more = other[other["num_nodes"].to_numpy() > 1]
    if not len(one) or more.empty:
        return results
    scales = "one node -> more"
    analytic_more = accuracy_metrics(_analytic(more, sets))
    results.append(
        TransferResult(
            setting="zero-shot",
            metrics=accuracy_metrics(_scored(base, more, sets)),
            analytic_metrics=analytic_more,
            draws=1,
            scales=scales,
        )
    )
    for k in ks:
        if k >= len(one):
            continue
        scored, physics = [], []
        for _ in range(draws):
            pick = rng.choice(one, size=k, replace=False)
            train = pd.concat([train_runs, other.iloc[pick]], ignore_index=True)
            model = fit(train)
            scored.append(accuracy_metrics(_scored(model, more, sets)))
            if k >= OWN_MIN_RUNS:
                physics.append(accuracy_metrics(_analytic(more, model.parameter_sets())))
        results.append(
            TransferResult(
                setting=f"k={k}",
                metrics=_mean(scored),
                analytic_metrics=analytic_more,
                draws=draws,
                scales=scales,
                own_physics_metrics=_mean(physics) if physics else None,
            )
        )
    return results


def without_default() -> ParameterSets:
    """The shipped sets less the default set, whose fit saw the MPT runs the transfer protocols
    hold out: a framework without a set of its own there takes the priors, as before the default
    existed (``--across`` measures the default held out)."""
    return ParameterSets(
        {k: v for k, v in shipped_parameter_sets().sets.items() if k != DEFAULT_SET}
    )


def mpt_runs(data_dir: Path | None) -> pd.DataFrame:
    """The other cluster's runs: MosaicML's MPT tables in the public data folder."""
    from surrogate.ingest.llmfoundry import parse_llmfoundry

    path = resolve_data_dir(data_dir) / "sweeps/llmfoundry_mpt/benchmarking_README.md"
    return parse_llmfoundry(path)[0]


def llama3_figures(table: pd.DataFrame, column: str) -> dict[str, float]:
    """The Llama 3 405B table's ``column`` (an error) by MLflow name, per vpp and layout."""
    out = {}
    for v, part in table.groupby("vpp"):
        prefix = "llama3_405b" if v == 1 else f"llama3_405b_vpp{v}"
        for i, value in enumerate(part[column]):
            out[f"{prefix}_{i}/mfu_err"] = float(value)
    return out
