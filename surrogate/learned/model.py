"""The learned surrogate: LightGBM models that correct the analytic model with real runs
(the estimator :class:`SurrogateModel`).

- status: a multiclass classifier of completed / oom / fail (timeouts count as fail), giving
  ``p_oom`` and ``p_fail``, boosted from the physics: its trees start from the analytic model's
  log-probabilities (``p_oom`` from the memory estimate, the training runs' share of failures)
  and learn what the memory model misses (:func:`status_init_score`);
- throughput: a regressor of log(measured / analytic tokens/s per GPU) on completed runs, so
  a prediction is the analytic estimate times a learned factor and stays sensible outside the
  training data (the factor is bounded by what was seen; the physics carries the rest);
- memory: the same for peak reserved memory, the runs that ran out of memory read as
  targets censored from below at the GPU's capacity (:func:`fit_memory`);
- uncertainty: conformalised quantile regression (Romano et al. 2019, "Conformalized Quantile
  Regression") of the throughput factor: 10% and 90% quantile models, widened by the 80%
  quantile of their out-of-fold conformity scores over grouped folds, so that the interval is
  ``coverage`` wide on unseen cells and wider where the quantile models disagree, that
  quantile taken per framework version over its own runs (``conformal_q_by_framework_``,
  :func:`framework_quantiles`: a user's few runs of their own framework get the width their
  own errors ask for, not the Playbook's), and within it per pipeline or none; and of the
  peak memory, the same quantile of the memory model's absolute out-of-fold errors in log
  memory: one width for the model shapes it was trained on (``mem_conformal_q_``, per
  framework version ``mem_conformal_q_by_framework_``) and one,
  from folds that hold shapes out, for a shape it has not seen
  (``mem_conformal_q_unseen_shape_``).

scikit-learn conventions: ``__init__`` stores settings, which ``get_params`` / ``set_params``
read and write (so ``sklearn.base.clone`` works); ``fit(X)`` learns from a runs table and returns
the model; fitted attributes end in ``_``; a method that needs a fitted model raises
:class:`NotFittedError`, both scikit-learn's and the project's :class:`NoModelError`. The
model does not subclass ``sklearn.base.BaseEstimator``: importing scikit-learn takes about 2 s,
which ``surrogate predict`` must not pay. The features and targets a fit learns from are
prepared once per table (``surrogate.learned.training_data``), and a training that fits many times
on
parts of one table takes those parts of it (:meth:`TrainingData.take`).

:meth:`SurrogateModel.save` writes LightGBM's own text models and a JSON sidecar (features,
versions, training-data hash, metrics, domain, the sha256 of every file, checked on load by
``surrogate.learned.model_files``); no pickle.

Features are dimensionless physics (``surrogate.learned.features``), and each training run is
explained
under its own cluster (``surrogate.calibration.clusters``). Off the training domain
(``surrogate.learned.domain``: an unseen GPU or framework, or a scale beyond the data) the
throughput
and memory corrections shrink toward the analytic answer by the domain weight w
(factor^w), the OOM probability moves toward the analytic verdict, and the interval widens
by a factor 1 + distance in doublings (at most 5) around the shrunk answer and always holds
the analytic answer and the unshrunk learned interval; ``extrapolation`` says along what.
Within it, a framework version whose held-out runs the throughput correction predicts no
better than the physics under it keeps only the share they bear out
(``correction_weight_by_framework_``, :func:`framework_weights`). A framework without shipped
analytic parameters gets them fitted on its training runs first, and the model predicts under
them (``physics_sets_``, :meth:`SurrogateModel.physics`).

Where the physics is certain of an out-of-memory (an analytic ``p_oom`` of at least
:data:`CERTAIN_P_OOM`), the status is the analytic one whatever the domain: the classifier
learns what the memory model misses near the capacity, and must not call a run whose memory
estimate lies far beyond the GPU's, by the memory model's own fitted error, anything but out
of memory.
"""

from __future__ import annotations

import functools
import inspect
import json
import platform
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.inputs import FRAMEWORK_VERSIONS
from surrogate.analytic.params import transfer_half_widths
from surrogate.errors import DataError, NoModelError
from surrogate.learned import compiled_trees
from surrogate.learned.compiled_trees import CompiledForest
from surrogate.learned.domain import (
    DEFAULT_SHRINK_DOUBLINGS,
    UNSEEN_SHAPE_WEIGHT,
    Domain,
    beyond_practice,
    join_reasons,
    shape_keys,
)
from surrogate.learned.features import FEATURE_NAMES
from surrogate.learned.model_files import verified_texts, write_sidecar
from surrogate.learned.training_data import TrainingData, training_data

if TYPE_CHECKING:
    import lightgbm as lgb
    import pandas as pd

FORMAT = "surrogate.model/2"
STATUS_CLASSES: tuple[str, ...] = ("completed", "oom", "fail")
DEFAULT_PARAMS: dict[str, Any] = {
    "n_estimators": 400,
    "learning_rate": 0.05,
    "num_leaves": 31,
    "min_child_samples": 10,
    "subsample": 0.8,
    "subsample_freq": 1,
    "colsample_bytree": 0.8,
    "reg_lambda": 1.0,
}
"""LightGBM settings when none are tuned (``training`` tunes them with optuna)."""
_FIXED = {"deterministic": True, "force_row_wise": True, "n_jobs": 1, "verbose": -1}
CATEGORICAL = ["framework_code"]
"""Features LightGBM treats as categories (fit argument ``categorical_feature``)."""
CERTAIN_P_OOM = 0.99
"""An analytic ``p_oom`` from which the status is the physics' (module doc). With each
framework's fitted memory error and margin (``surrogate.analytic.memory.oom_probability``) it
is reached where the memory estimate is 1.54 x the capacity for nanotron pp-fix, 1.27 x for
pre-pp-fix. Chosen as a certainty, not by its effect: under the protocols of
``benchmarks/accuracy.py`` 0.9 and 0.99 give the same verdicts."""
_MAX_WIDEN = 4.0
_SMALL_BATCH = 2048
"""Below this many rows a booster predicts on one thread: starting OpenMP threads costs
more than the trees (5-8 ms against 0.1 ms for one row, measured on 2 cores)."""


def _take(X: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """The rows of ``X`` at positions ``rows`` (``X`` itself when they are all of them)."""
    return X if len(rows) == len(X) else X.iloc[rows]


def _booster_predict(booster: lgb.Booster, X: pd.DataFrame, *,
                     compiled: CompiledForest | None = None, **kwargs: Any) -> np.ndarray:
    """``booster.predict`` on a float array (skipping LightGBM's DataFrame handling): by the
    booster's ``compiled`` forest where it can (``surrogate.learned.compiled_trees``; not for
    ``pred_contrib``), else by LightGBM on one thread for small batches and its default (0:
    OpenMP's) for large ones."""
    arr = X.to_numpy(dtype=np.float64)
    if compiled is not None and set(kwargs) <= {"raw_score"}:
        got = compiled.predict(booster, arr, raw_score=bool(kwargs.get("raw_score", False)))
        if got is not None:
            return got
    threads = 1 if len(arr) < _SMALL_BATCH else 0
    return np.asarray(booster.predict(arr, num_threads=threads, **kwargs))


def status_init_score(p_oom: np.ndarray, fail_rate: float, classes: Sequence[int]
                      ) -> np.ndarray:
    """The status classifier's starting raw scores (LightGBM ``init_score``): the physics'
    log-probabilities of the ``classes`` present (indices into :data:`STATUS_CLASSES`):
    completed (1 - p_oom)(1 - f), oom p_oom (1 - f), fail f, with p_oom the analytic model's and
    f the training runs' share of failures, taken as independent of memory (the Playbook's
    runs fail otherwise at 3-11% in every bin of predicted memory over capacity, from under
    half to over five times).
    Measured against the alternative where a run that does not fit cannot fail otherwise
    (oom p_oom, fail (1 - p_oom) f'): summed held-out log loss over cv, lomo and nodes 0.463 vs
    0.472 (0.467 without a start). Two classes: the log-odds of the second."""
    po = np.clip(np.asarray(p_oom, dtype=np.float64), 1e-4, 1 - 1e-4)
    f = float(np.clip(fail_rate, 1e-4, 0.5))
    logp = [np.log((1 - po) * (1 - f)), np.log(po * (1 - f)), np.full(len(po), np.log(f))]
    cols = [logp[int(c)] for c in classes]
    if len(cols) == 2:
        return np.asarray(cols[1] - cols[0])
    return np.column_stack(cols)


def fit_status(X: pd.DataFrame, y: np.ndarray, sample_weight: np.ndarray, p_oom: np.ndarray,
               settings: dict[str, Any]) -> tuple[lgb.Booster, list[int], float]:
    """The status classifier boosted from :func:`status_init_score`: its booster, the class
    indices it saw and the failure share it starts from (weighted by ``sample_weight``)."""
    import lightgbm as lgb

    classes = [int(c) for c in np.unique(y)]
    fail_rate = float(np.average(y == STATUS_CLASSES.index("fail"), weights=sample_weight))
    clf = lgb.LGBMClassifier(**settings)
    clf.fit(X, y, sample_weight=sample_weight, categorical_feature=CATEGORICAL,
            init_score=status_init_score(p_oom, fail_rate, classes))
    return clf.booster_, classes, fail_rate


def fit_memory(X: pd.DataFrame, y_mem: np.ndarray, mem_ok: np.ndarray, floor: np.ndarray,
               sample_weight: np.ndarray, settings: dict[str, Any]) -> lgb.Booster:
    """The memory regressor of log(measured / analytic peak reserved memory), with the runs
    out of memory as censored targets.

    Only runs that fit in memory measure it, so near and past the capacity the completed runs
    are the ones the analytic model over-estimated: fitted on them alone the correction learns
    that survivorship as "less memory where the estimate is above the capacity", and the
    predicted memory falls where the estimate crosses it (``benchmarks/monotonicity.py``). A
    run out of memory says only that its need was above the GPU's: its target is censored
    from below at ``floor`` (log(capacity / analytic estimate); NaN for other runs). Such a
    run is fitted at max(0, floor): the analytic answer, raised to the least that explains
    the out-of-memory. Far past the capacity that is the physics, to which the correction
    falls back off its data. (Moving these targets to max(floor, the fit's prediction) and
    refitting, in the manner of Buckley and James 1979, was measured and not kept: the same
    held-out memory error within 0.1 point, more falls along the micro-batch.)"""
    import lightgbm as lgb

    censored = np.isfinite(floor) & ~mem_ok
    rows = np.flatnonzero(mem_ok | censored)
    y = np.where(mem_ok, y_mem, np.maximum(np.nan_to_num(floor, nan=0.0), 0.0))
    reg = lgb.LGBMRegressor(**settings)
    reg.fit(_take(X, rows), y[rows], sample_weight=sample_weight[rows],
            categorical_feature=CATEGORICAL)
    return reg.booster_


def status_proba(booster: lgb.Booster, X: pd.DataFrame, p_oom: np.ndarray,
                 fail_rate: float | None, classes: Sequence[int], *,
                 compiled: CompiledForest | None = None) -> np.ndarray:
    """Probabilities of ``classes`` (one column each) from a :func:`fit_status` booster (or its
    ``compiled`` forest): its raw scores plus the physics it started from. ``fail_rate`` None:
    a booster fitted without a start (models saved before it had one)."""
    if fail_rate is None:
        probs = _booster_predict(booster, X, compiled=compiled)
        return probs if probs.ndim == 2 else np.column_stack([1 - probs, probs])
    raw = _booster_predict(booster, X, compiled=compiled, raw_score=True) + status_init_score(
        p_oom, fail_rate, classes)
    if raw.ndim == 1:
        p1 = 1.0 / (1.0 + np.exp(-raw))
        return np.column_stack([1 - p1, p1])
    e = np.exp(raw - raw.max(axis=1, keepdims=True))
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def booster_params(given: dict[str, Any] | None, seed: int, **extra: Any) -> dict[str, Any]:
    """The LightGBM settings of a fit: :data:`DEFAULT_PARAMS` overridden by ``given`` (tuned),
    then the fixed ones (deterministic, one thread) and the seed; tuning scores these too."""
    return {**DEFAULT_PARAMS, **(given or {}), **_FIXED, "random_state": seed, **extra}


@functools.cache
def not_fitted_error() -> type[NoModelError]:
    """:class:`NotFittedError`, made on first use.

    It is both the project's :class:`~surrogate.errors.NoModelError` (the CLI prints it as one
    line) and scikit-learn's ``NotFittedError`` (what scikit-learn's tools and their users
    catch). Made when first raised or imported rather than at import: importing scikit-learn
    takes about 2 s."""
    from sklearn.exceptions import NotFittedError as SklearnNotFittedError

    return type("NotFittedError", (NoModelError, SklearnNotFittedError), {
        "__module__": __name__,
        "__doc__": "A SurrogateModel that is not fitted was asked to predict, explain or save.",
    })


def conformal_quantile(scores: np.ndarray, coverage: float) -> float:
    """The split-conformal quantile of conformity ``scores``: their ceil((n + 1) coverage) / n
    quantile, which a new exchangeable score stays under with probability >= ``coverage``."""
    level = min(1.0, np.ceil((len(scores) + 1) * coverage) / len(scores))
    return float(np.quantile(scores, level))


def stratum_key(framework: str, pipelined: bool) -> str:
    """The name of a framework version's runs with (pp > 1) or without a pipeline in the
    per-category quantiles (:func:`framework_quantiles`), e.g. ``'nanotron/pp-fix pp>1'``."""
    return f"{framework} {'pp>1' if pipelined else 'pp=1'}"


def framework_quantiles(scores: np.ndarray, framework_code: np.ndarray, coverage: float,
                        pp: np.ndarray | None = None) -> dict[str, float]:
    """Per framework version, the :func:`conformal_quantile` of its own runs' conformity
    ``scores`` (Mondrian conformal prediction: ``coverage`` holds within each category, not
    only over all runs), for the versions with enough runs that it is finite: n + 1 >=
    1 / (1 - coverage) (4 runs at 80%); fewer, and the conformal quantile would be
    unbounded. Given each run's ``pp``, also per version and pipeline or none
    (:func:`stratum_key`), where those runs are enough.

    Measured by ``python benchmarks/accuracy.py --transfer`` against the pooled quantile
    alone: on MPT runs of another cluster and framework added to training, coverage with
    balanced sources 75.4 -> 85.3% at k = 10 and 76.1 -> 89.0% at k = 50, unweighted 88.8 ->
    79.8% and 85.5 -> 85.7%; on the Playbook cv 82.5% both, lomo 81.7 -> 81.4%, nodes 80.3 ->
    79.0%. Per pipeline or none too (``... --by pp``), the Playbook's runs without a pipeline
    are covered 73.2 -> 82.1% in cv, 70.5 -> 80.3% in lomo and 48.6 -> 52.1% in the nodes
    protocol (all runs 82.6 / 81.6 / 78.7%); the MPT runs, all without one, are unchanged."""
    codes = np.asarray(framework_code).astype(np.int64)
    least = int(np.ceil(1.0 / (1.0 - coverage) - 1.0 - 1e-9))
    out = {}
    for code in np.unique(codes):
        mine = codes == code
        name = FRAMEWORK_VERSIONS[int(code)]
        if mine.sum() >= least:
            out[name] = conformal_quantile(scores[mine], coverage)
        if pp is None:
            continue
        for pipelined in (False, True):
            part = mine & ((np.asarray(pp) > 1) == pipelined)
            if part.sum() >= least:
                out[stratum_key(name, pipelined)] = conformal_quantile(scores[part], coverage)
    return out


def framework_weights(y: np.ndarray, oof: np.ndarray, framework_code: np.ndarray,
                      least: int = 4) -> dict[str, float]:
    """Per framework version with at least ``least`` runs, the share of the learned throughput
    correction its own runs bear out, from their out-of-fold corrections ``oof`` and measured
    ones ``y`` (log(measured / analytic)):

    - 1 where the correction predicts them better than the physics under it (sum (y - oof)^2
      < sum y^2): it is kept whole;
    - else the least-squares share w = sum y oof / sum oof^2 (at most 1/2 there), at least 0:
      the correction gives way to the physics, as far as the held-out runs say.

    Measured (``python benchmarks/accuracy.py --transfer``, MPT runs of llm-foundry added to
    the Playbook's, 3 draws): with 10 added the learned MFU MAPE went 13.4 -> 11.9% (the
    calibrated physics alone: 11.9%; Spearman 0.658 -> 0.764), from one node 10.5 -> 9.4%;
    with 50 it went 7.5 -> 8.2% (physics alone 9.8%; unweighted 8.5 -> 9.4%): there too the
    held-out runs gave the correction less than its whole share, and the whole model would
    have done better. Every learned figure is now at or under its physics'. The Playbook's
    protocols do not move (both its versions are kept whole). The least-squares share without
    the gate also moved them: lomo 13.3 -> 13.5%, nodes 14.7 -> 15.0%: out-of-fold
    corrections, fitted on 4/5 of the runs and scored on unseen cells, understate the whole
    model's."""
    codes = np.asarray(framework_code).astype(np.int64)
    out = {}
    for code in np.unique(codes):
        mine = codes == code
        den = float(np.sum(oof[mine] ** 2))
        if mine.sum() < least or den == 0:
            continue
        helps = float(np.sum((y[mine] - oof[mine]) ** 2)) < float(np.sum(y[mine] ** 2))
        w = 1.0 if helps else float(np.sum(y[mine] * oof[mine])) / den
        out[FRAMEWORK_VERSIONS[int(code)]] = min(max(w, 0.0), 1.0)
    return out


def by_framework(quantiles: dict[str, float], pooled: float, framework_code: np.ndarray,
                 pp: np.ndarray | None = None) -> np.ndarray:
    """Per configuration, the value (a conformal quantile, :func:`framework_quantiles`, or a
    correction's share, :func:`framework_weights`) of its framework version and pipeline or
    none, else of its framework version, else ``pooled``."""
    codes = np.asarray(framework_code).astype(np.int64)
    table = np.array([quantiles.get(name, pooled) for name in FRAMEWORK_VERSIONS])
    out = np.asarray(table[codes], dtype=np.float64)
    if pp is None:
        return out
    pipelined = np.asarray(pp) > 1
    for flag in (False, True):
        table = np.array([quantiles.get(stratum_key(name, flag), quantiles.get(name, pooled))
                          for name in FRAMEWORK_VERSIONS])
        out = np.where(pipelined == flag, table[codes], out)
    return out


def _json_float(x: float) -> float | None:
    """``x`` for a JSON sidecar: None where NaN."""
    return None if np.isnan(x) else float(x)


def __getattr__(name: str) -> Any:
    """``NotFittedError``, made on first use (:func:`not_fitted_error`)."""
    if name == "NotFittedError":
        return not_fitted_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SurrogateModel:
    """Status, throughput and memory models with an MFU interval (module docstring).

    Settings (scikit-learn's "parameters", read by :meth:`get_params`): LightGBM settings per
    model (None: :data:`DEFAULT_PARAMS`), the interval's ``coverage`` and its ``n_folds``
    grouped folds, the ``seed``, the domain's ``shrink_doublings`` and
    ``unseen_shape_weight``, whether to ``balance_sources`` and whether the memory model
    reads runs out of memory as censored targets (``censored_memory``, :func:`fit_memory`;
    models saved before it load as False). Fitted attributes: the boosters
    (``status_model_``, ``mfu_model_``, ``mfu_lo_model_``, ``mfu_hi_model_``,
    ``mem_model_``), ``status_classes_``, ``conformal_q_``, ``conformal_q_by_framework_``,
    ``mem_conformal_q_``, ``mem_conformal_q_by_framework_``,
    ``mem_conformal_q_unseen_shape_``, ``correction_weight_by_framework_``,
    ``physics_sets_``, ``feature_names_``, ``domain_``, ``data_hash_``,
    ``n_train_``, ``metrics_`` and ``saved_sha256_``.

    Args:
        status_params: LightGBM settings of the status classifier (None: the defaults).
        mfu_params: LightGBM settings of the throughput regressor and its interval's quantile
            models (None: the defaults).
        mem_params: LightGBM settings of the memory regressor (None: the defaults).
        coverage: Share of held-out runs the MFU and memory intervals aim to hold (0.8: 80%
            intervals).
        n_folds: Grouped folds of the conformal intervals and of the framework gate.
        seed: Seed of every booster and fold.
        shrink_doublings: Doublings beyond the training ranges over which the correction
            shrinks toward the analytic answer (it keeps exp(-d / shrink_doublings)).
        unseen_shape_weight: Share of the correction kept for a model shape no run had.
        balance_sources: Weigh each source's runs as much in total as the largest source's.
        censored_memory: Read runs out of memory as censored targets of the memory model.

    Example:
        ```python
        from surrogate.learned.model import SurrogateModel

        model = SurrogateModel().fit(runs)   # runs: a sweep table (surrogate.ingest.sweeps columns)
        model.save("my-model")
        columns = SurrogateModel.load("my-model").predict([cfg])   # cfg: a TrainingConfig
        ```
    """

    _compiled: dict[str, CompiledForest] = {}  # noqa: RUF012 (never mutated: replaced)
    """A loaded model's boosters compiled to native code (``surrogate.learned.compiled_trees``)."""

    def __init__(
        self,
        *,
        status_params: dict[str, Any] | None = None,
        mfu_params: dict[str, Any] | None = None,
        mem_params: dict[str, Any] | None = None,
        coverage: float = 0.8,
        n_folds: int = 5,
        seed: int = 0,
        shrink_doublings: float = DEFAULT_SHRINK_DOUBLINGS,
        unseen_shape_weight: float = UNSEEN_SHAPE_WEIGHT,
        balance_sources: bool = True,
        censored_memory: bool = True,
    ) -> None:
        self.status_params = status_params
        self.mfu_params = mfu_params
        self.mem_params = mem_params
        self.coverage = coverage
        self.n_folds = n_folds
        self.seed = seed
        self.shrink_doublings = shrink_doublings
        self.unseen_shape_weight = unseen_shape_weight
        self.balance_sources = balance_sources
        self.censored_memory = censored_memory

    # ------------------------------------------------------- scikit-learn API
    @classmethod
    def _param_names(cls) -> list[str]:
        return [p.name for p in inspect.signature(cls.__init__).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's settings, by name (``deep`` is accepted for scikit-learn: no
        setting is itself an estimator)."""
        return {name: getattr(self, name) for name in self._param_names()}

    @property
    def lightgbm_params(self) -> dict[str, dict[str, Any] | None]:
        """The LightGBM settings by target (status, mfu, mem), as the evaluation protocols and
        ``training.train`` take them (``params``) and the sidecar stores them."""
        return {"status": self.status_params, "mfu": self.mfu_params, "mem": self.mem_params}

    def set_params(self, **params: Any) -> SurrogateModel:
        """Change settings by name; they take effect at the next :meth:`fit`."""
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"SurrogateModel has no setting {name!r}; its settings are "
                                 f"{', '.join(valid)}")
            setattr(self, name, value)
        return self

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "status_model_")

    def physics(self) -> AbstractContextManager[None]:
        """Within the block, the analytic model runs under the parameters this model was
        trained under: the sets fitted on its training runs for framework versions the
        shipped ones lacked (``physics_sets_``, ``surrogate.calibration.fit_params.own_sets``),
        over the
        sets in use. Every prediction with the model is made in it
        (``surrogate.prediction.scoring``)."""
        from surrogate.analytic.params import using_more_sets

        return using_more_sets(self.physics_sets_)

    def __sklearn_tags__(self) -> Any:
        """What scikit-learn's tools (``check_is_fitted``, ``clone``) ask of an estimator
        (scikit-learn >= 1.6; asked only by scikit-learn, so importing it here costs nothing
        more): it learns from a table of runs (strings, categories, NaN for what was not
        measured) whose own columns are the targets (no ``y``), and is neither a plain
        classifier nor a plain regressor."""
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False),
                    input_tags=InputTags(string=True, categorical=True, allow_nan=True),
                    requires_fit=True)

    def __repr__(self) -> str:
        defaults = {p.name: p.default
                    for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if v != defaults[k]]
        return f"{type(self).__name__}({', '.join(changed)})"

    # ---------------------------------------------------------------- fitting
    def fit(self, X: pd.DataFrame | TrainingData, y: None = None, *, profile: Any = None,
            sample_weight: np.ndarray | None = None) -> SurrogateModel:
        """Learn from the runs of a sweep table (``surrogate.ingest.sweeps`` columns); the model.

        ``X`` is the runs table, or the :class:`TrainingData` :func:`training_data` made of it
        (or a part of one, :meth:`TrainingData.take`). ``y`` must be None: the targets are the
        runs' own columns (``status``, ``tokens_per_s_per_gpu``, ``peak_mem_reserved_gib``,
        read relative to the analytic model's answer, :func:`training_data`), so they come
        with ``X``; the argument keeps scikit-learn's ``fit(X, y)`` signature. Rows need a
        status; the regressors use completed runs with a measured throughput / peak reserved
        memory. ``profile``: the calibration profile of the features of a table (a
        :class:`TrainingData` carries its own). ``sample_weight`` (one per run) weighs every
        model's loss; by default each source's runs weigh 1 or, with ``balance_sources``,
        :func:`surrogate.learned.training_data.source_weights`.

        Args:
            X: The runs table, or the :class:`TrainingData` made of it.
            y: Must be None (the targets are columns of ``X``).
            profile: The calibration profile passed to :func:`training_data` for a table
                (which explains each run under its own cluster); must be None with a
                :class:`TrainingData`.
            sample_weight: One positive weight per run, or None for the default weighting.

        Returns:
            The fitted model itself.

        Raises:
            DataError: ``y`` is given, ``sample_weight`` is not one positive number per run,
                there are fewer than 2 x ``n_folds`` completed runs with a throughput, or the
                runs come from fewer than two (model, nodes) cells.
            ValueError: ``profile`` is given with a :class:`TrainingData`.
        """
        import lightgbm as lgb

        if y is not None:
            raise DataError(
                "y must be None: the targets are the runs' own columns (status, "
                "tokens_per_s_per_gpu, peak_mem_reserved_gib), read from X")
        if isinstance(X, TrainingData):
            if profile is not None:
                raise ValueError("profile must be None when X is a TrainingData: give it to "
                                 "training_data(), which computed the features under it")
            data = X
        else:
            data = training_data(X, profile=profile)
        if sample_weight is not None:
            sw = np.asarray(sample_weight, dtype=np.float64)
        else:
            sw = data.sample_weight(balance_sources=self.balance_sources)
        self._compiled = {}  # a loaded model's compiled forests are of its former boosters
        if sw.shape != (len(data),) or not (np.isfinite(sw) & (sw > 0)).all():
            raise DataError(f"sample_weight must hold one positive number per run ({len(data)})")
        done, mem_ok = data.done, data.mem_ok
        if done.sum() < 2 * self.n_folds:
            raise DataError(
                f"need at least {2 * self.n_folds} completed runs with a throughput, got "
                f"{int(done.sum())}"
            )
        if len(np.unique(data.groups[done])) < 2:  # checked before anything is fitted
            raise DataError("need runs from at least two (model, nodes) cells for the interval")

        def settings(given: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
            return booster_params(given, self.seed, **extra)

        X_all = data.X
        self.status_model_, classes, fail_rate = fit_status(
            X_all, data.y_status, sw, data.analytic["p_oom"], settings(self.status_params))
        self.status_fail_rate_: float | None = fail_rate
        self.status_classes_ = [STATUS_CLASSES[i] for i in classes]
        mfu = lgb.LGBMRegressor(**settings(self.mfu_params))
        mfu.fit(X_all[done], data.y_mfu[done], sample_weight=sw[done],
                categorical_feature=CATEGORICAL)
        self.mfu_model_ = mfu.booster_
        floor = data.mem_floor if self.censored_memory else np.full(len(data), np.nan)
        self.mem_model_ = fit_memory(X_all, data.y_mem, mem_ok, floor, sw,
                                     settings(self.mem_params))
        (self.mem_conformal_q_, self.mem_conformal_q_by_framework_,
         self.mem_conformal_q_unseen_shape_) = self._memory_interval(data, sw, floor, settings)
        self._fit_interval(data.take(np.flatnonzero(done)), sw[done], settings)
        self.feature_names_ = list(FEATURE_NAMES)
        self.domain_ = Domain.from_cols(data.cols, self.shrink_doublings,
                                        self.unseen_shape_weight)
        self.data_hash_ = data.data_hash
        self.physics_sets_: dict[str, Any] = dict(data.physics_sets)
        self.n_train_ = {"runs": len(data), "completed": int(done.sum()),
                         "with_memory": int(mem_ok.sum())}
        self.metrics_: dict[str, Any] = {}
        # identity as saved: the sidecar's sha256, which covers every file's; set by save/load
        self.saved_sha256_: str | None = None
        return self

    def _fit_interval(self, done: TrainingData, wd: np.ndarray,
                      settings: Callable[..., dict[str, Any]]) -> None:
        """The conformalised quantile models of the throughput factor (module docstring), on
        the completed runs ``done`` weighted ``wd``."""
        import lightgbm as lgb
        from sklearn.model_selection import GroupKFold

        alpha = (1 - self.coverage) / 2
        Xd, yd, groups = done.X, done.y_mfu, done.groups
        n_splits = min(self.n_folds, len(np.unique(groups)))  # >= 2, checked by fit

        def quantile(a: float) -> lgb.LGBMRegressor:
            return lgb.LGBMRegressor(**settings(self.mfu_params, objective="quantile", alpha=a))

        scores, oof = np.empty(len(yd)), np.empty(len(yd))
        for train, test in GroupKFold(n_splits=n_splits).split(Xd, yd, groups):
            lo, hi = quantile(alpha), quantile(1 - alpha)
            point = lgb.LGBMRegressor(**settings(self.mfu_params))
            for q in (lo, hi, point):
                q.fit(Xd.iloc[train], yd[train], sample_weight=wd[train],
                      categorical_feature=CATEGORICAL)
            q_lo, q_hi = lo.predict(Xd.iloc[test]), hi.predict(Xd.iloc[test])
            scores[test] = np.maximum(q_lo - yd[test], yd[test] - q_hi)
            oof[test] = point.predict(Xd.iloc[test])
        self.correction_weight_by_framework_ = framework_weights(
            yd, oof, done.cols["framework_code"])
        self.conformal_q_ = conformal_quantile(scores, self.coverage)
        self.conformal_q_by_framework_ = framework_quantiles(
            scores, done.cols["framework_code"], self.coverage, done.cols["pp"])
        lo, hi = quantile(alpha), quantile(1 - alpha)
        for q in (lo, hi):
            q.fit(Xd, yd, sample_weight=wd, categorical_feature=CATEGORICAL)
        self.mfu_lo_model_, self.mfu_hi_model_ = lo.booster_, hi.booster_

    def _memory_interval(self, data: TrainingData, sw: np.ndarray, floor: np.ndarray,
                         settings: Callable[..., dict[str, Any]]
                         ) -> tuple[float, dict[str, float], float]:
        """Half-widths, in log memory, of the ``coverage`` interval of the learned peak memory,
        for a model shape the training runs had (pooled, and per framework version as for the
        MFU interval, :func:`framework_quantiles`) and for one they had not: conformal quantiles
        of the memory model's absolute out-of-fold errors on the completed runs with a
        measured memory (split conformal prediction, Lei et al. 2018, "Distribution-free
        predictive inference for regression", over folds as in CV+), one per kind of
        configuration (Mondrian conformal prediction, Vovk et al. 2005, "Algorithmic Learning
        in a Random World", ch. 4), over folds that hold out

        - (model, nodes) cells (``groups``): a shape seen, at a scale perhaps not;
        - model shapes (:func:`surrogate.learned.domain.shape_keys`): each held-out run predicted as
          :meth:`predict_from_features` predicts an unseen shape, the correction times the
          weight the fold's own domain gives it, scored where that domain's ranges hold the
          run (an unseen shape between the data; beyond them prediction widens the interval
          by the distance, as for every configuration).

        On the Playbook's leave-one-model-size-out protocol (``python benchmarks/accuracy.py
        --protocol lomo --by model_name``) the interval holds 82.9% of the held-out runs'
        memory, against 70.9% with the seen-shape width for every shape: 72.8% of 3.57G, 89.5%
        of 8.86G, 83.3% of 80G (inside the others' ranges), 87.6% of 1.34G and the 6 of 469G
        (beyond them, widened). Scoring every held-out shape instead, its error divided by its
        widening, gave 71.9% under the protocol; undivided, about 90% with the shipped
        physics (the widening counted twice). Each is NaN (empty) without runs with a memory
        in two folds. Per framework version (``... --by framework_version``), the Playbook's
        cv covers 82.0% of pp-fix runs and 87.8% of pre-pp-fix runs at the pooled width, 85.2%
        and 84.9% at their own (85.0 -> 85.1% in all; nodes 94.1 -> 94.9%, lomo 82.9% both).
        Per version and pipeline or none (``... --by pp``), the runs without a pipeline are
        covered 74.4 -> 83.5% in cv, 71.7 -> 75.7% in lomo (all runs 85.1% and 82.9 -> 84.0%;
        nodes 95.0%)."""
        from sklearn.model_selection import GroupKFold

        def scores(groups: np.ndarray,
                   as_predicted: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            """The out-of-fold errors, and the framework codes and pp of their runs (none
            without runs with a memory in two folds)."""
            none = (np.zeros(0), np.zeros(0), np.zeros(0))
            n_splits = min(self.n_folds, len(np.unique(groups)))
            if n_splits < 2:
                return none
            errors, codes, pps = [], [], []
            for train, test in GroupKFold(n_splits=n_splits).split(data.X, groups=groups):
                test = test[data.mem_ok[test]]
                if not len(test) or not data.mem_ok[train].any():
                    continue
                booster = fit_memory(_take(data.X, train), data.y_mem[train],
                                     data.mem_ok[train], floor[train], sw[train],
                                     settings(self.mem_params))
                pred = booster.predict(_take(data.X, test))
                if as_predicted:
                    domain = Domain.from_cols({k: v[train] for k, v in data.cols.items()},
                                              self.shrink_doublings, self.unseen_shape_weight)
                    where = domain.assess({k: v[test] for k, v in data.cols.items()})
                    inside = where.distance == 0
                    test, pred = test[inside], (where.weight * pred)[inside]
                    if not len(test):
                        continue
                errors.append(np.abs(data.y_mem[test] - pred))
                codes.append(data.cols["framework_code"][test])
                pps.append(data.cols["pp"][test])
            if len(errors) < 2:
                return none
            return np.concatenate(errors), np.concatenate(codes), np.concatenate(pps)

        seen, seen_codes, seen_pp = scores(data.groups, False)
        shapes = np.unique(shape_keys(data.cols), axis=0, return_inverse=True)[1].ravel()
        unseen = scores(shapes, True)[0]
        nan = float("nan")
        return (conformal_quantile(seen, self.coverage) if len(seen) else nan,
                framework_quantiles(seen, seen_codes, self.coverage, seen_pp),
                conformal_quantile(unseen, self.coverage) if len(unseen) else nan)

    # ------------------------------------------------------------- predicting
    def _check_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise not_fitted_error()(
                "this SurrogateModel is not fitted: call fit() or load() first")

    def predict_from_features(
        self, X: pd.DataFrame, out: dict[str, np.ndarray], cols: dict[str, np.ndarray],
        *, shrink_doublings: float | None = None,
    ) -> dict[str, Any]:
        """Predictions from features, the analytic outputs and the analytic columns they came
        from (module doc: shrinkage off the domain). ``shrink_doublings`` overrides the
        model's own (``training.evaluate.evaluate_shrinks`` compares settings on one fit)."""
        self._check_fitted()
        if list(X.columns) != self.feature_names_:
            raise DataError("features do not match the model's feature_names_")
        where = self.domain_.assess(cols, shrink_doublings)
        w = where.weight
        # The status and memory corrections count w times: where w is 0 (far off the
        # domain: a search of new scales) their boosters are not run. The throughput's are,
        # for its interval. Where the physics is certain of an OOM the status is its own.
        weighed = np.flatnonzero(w > 0)
        w_status = np.where(out["p_oom"] >= CERTAIN_P_OOM, 0.0, w)
        judged = np.flatnonzero(w_status > 0)
        classes = [STATUS_CLASSES.index(name) for name in self.status_classes_]
        p = np.zeros((len(X), len(STATUS_CLASSES)))
        if len(judged):
            probs = status_proba(self.status_model_, _take(X, judged), out["p_oom"][judged],
                                 self.status_fail_rate_, classes,
                                 compiled=self._compiled.get("status"))
            for j, k in enumerate(classes):
                p[judged, k] = probs[:, j]
        p_oom = w_status * p[:, 1] + (1 - w_status) * out["p_oom"]
        p_fail = w_status * p[:, 2]
        p_done = np.clip(1.0 - p_oom - p_fail, 0.0, 1.0)
        stacked = np.stack([p_done, p_oom, p_fail], axis=1)
        f = self._trees("mfu", X)
        q_conf = by_framework(self.conformal_q_by_framework_, self.conformal_q_,
                              cols["framework_code"], cols["pp"])
        q_lo = self._trees("mfu_lo", X) - q_conf
        q_hi = self._trees("mfu_hi", X) + q_conf
        q_lo, q_hi = np.minimum(q_lo, f), np.maximum(q_hi, f)
        # the share of the correction its framework's held-out runs bore out (1: all of it)
        borne = by_framework(self.correction_weight_by_framework_, 1.0,
                             cols["framework_code"])
        center = w * borne * f
        outside = where.distance > 0
        widen = 1.0 + np.minimum(where.distance, _MAX_WIDEN)
        # off the domain, or sharing the answer with the physics: the interval holds both
        shared = outside | (borne < 1)
        lo = np.where(shared, np.minimum(np.minimum(center + (q_lo - f) * widen, q_lo), 0.0),
                      q_lo)
        hi = np.where(shared, np.maximum(np.maximum(center + (q_hi - f) * widen, q_hi), 0.0),
                      q_hi)
        # The correction is a ratio learned from runs; the physics bounds it: no run passes 100%
        # MFU, so the factor stops where the analytic MFU times it reaches 1 (an analytic MFU
        # above 1 is refused by surrogate.prediction.predict, not hidden here).
        bound = np.where(out["mfu"] > 0, 1.0 / np.maximum(out["mfu"], 1e-300), np.inf)
        factor = np.where(out["mfu"] <= 1, np.minimum(np.exp(center), bound), np.exp(center))
        mem_log = np.zeros(len(X))
        if len(weighed):
            mem_log[weighed] = w[weighed] * self._trees("mem", _take(X, weighed))
        mem = out["mem_reserved"] * np.exp(mem_log)
        # the memory interval: the conformal half-width around the (shrunk) answer, widened
        # off the domain like the throughput's and then holding the analytic answer
        q_mem = by_framework(self.mem_conformal_q_by_framework_, self.mem_conformal_q_,
                             cols["framework_code"], cols["pp"])
        if where.unseen_shape is not None and np.isfinite(self.mem_conformal_q_unseen_shape_):
            # never narrower for a shape unseen than for one seen
            q_mem = np.where(where.unseen_shape,
                             np.maximum(q_mem, self.mem_conformal_q_unseen_shape_), q_mem)
        half = q_mem * widen
        # an unseen framework, GPU or cluster: the width the held-out ones measured
        transfer = transfer_half_widths()
        unseen = ~np.isfinite(where.distance)
        if transfer is not None and unseen.any():
            lo = np.where(unseen, np.minimum(center, 0.0) - transfer[0], lo)
            hi = np.where(unseen, np.maximum(center, 0.0) + transfer[0], hi)
            half = np.where(unseen, transfer[1], half)
        mem_lo = mem * np.exp(-half)
        mem_hi = mem * np.exp(half)
        mem_lo = np.where(outside, np.minimum(mem_lo, out["mem_reserved"]), mem_lo)
        mem_hi = np.where(outside, np.maximum(mem_hi, out["mem_reserved"]), mem_hi)
        return {
            "p_completed": p_done,
            "p_oom": p_oom,
            "p_fail": p_fail,
            "pred_status": np.array(STATUS_CLASSES, dtype=object)[stacked.argmax(axis=1)],
            "pred_mfu": out["mfu"] * factor,
            "pred_mfu_lo": np.minimum(out["mfu"] * np.exp(lo), out["mfu"] * factor),
            # no interval passes what the hardware allows (analytic.run.mfu_ceiling)
            "pred_mfu_hi": np.minimum(out["mfu"] * np.exp(hi), np.minimum(
                np.maximum(out.get("mfu_ceiling", 1.0), out["mfu"] * factor), 1.0)),
            "pred_tokens_per_s_per_gpu": out["tokens_per_s_per_gpu"] * factor,
            "pred_step_time_s": out["step_time_s"] / factor,
            "pred_peak_mem_gib": mem / 2**30,
            "pred_peak_mem_lo_gib": mem_lo / 2**30,
            "pred_peak_mem_hi_gib": mem_hi / 2**30,
            "domain_weight": w,
            "correction_share": borne,
            "extrapolation": np.array(join_reasons(where.reasons, beyond_practice(cols)),
                                      dtype=object),
        }

    def _trees(self, name: str, X: pd.DataFrame) -> np.ndarray:
        """Booster ``name`` (a key of :meth:`_boosters`) on ``X``, compiled where it can be."""
        return _booster_predict(self._boosters()[name], X, compiled=self._compiled.get(name))

    def explain(self, X: pd.DataFrame, *, top: int = 8) -> list[dict[str, float]]:
        """Per row, the ``top`` largest SHAP contributions (LightGBM ``pred_contrib``) to the
        throughput correction log(measured / analytic), plus ``bias`` (the mean correction)."""
        self._check_fitted()
        contrib = _booster_predict(self.mfu_model_, X, pred_contrib=True)
        names = [*self.feature_names_, "bias"]
        rows = []
        for values in contrib:
            order = np.argsort(-np.abs(values[:-1]))[:top]
            row = {names[i]: float(values[i]) for i in order}
            row["bias"] = float(values[-1])
            rows.append(row)
        return rows

    def predict(self, configs: Sequence[Any], *, profile: Any = None) -> dict[str, np.ndarray]:
        """Predictions for TrainingConfigs: :func:`surrogate.prediction.scoring.score`'s columns.

        Args:
            configs: The configurations to predict.
            profile: The hardware's speeds, as for :func:`surrogate.predict` (None: each GPU's
                default profile).

        Returns:
            One array per column of :data:`surrogate.prediction.scoring` (``pred_mfu``,
            ``pred_mfu_lo``,
                ``pred_mfu_hi``, ``p_oom``, ``pred_status``, ``pred_peak_mem_gib``, ...), a value
                per configuration in order; :func:`surrogate.predict` wraps them in
                ``Prediction`` objects.

        Raises:
            NoModelError: The model is not fitted.
        """
        from surrogate.prediction.scoring import score

        self._check_fitted()
        return score(list(configs), model=self, profile=profile).columns

    # ------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        """Write ``<name>.txt`` LightGBM models and ``model.json`` into ``directory``.

        The sidecar ``model.json`` records the settings, the domain, the metrics and the
        sha256 of every file, which :meth:`load` checks.

        Args:
            directory: Where to write (created if missing; files of the same names are
                replaced).

        Returns:
            The directory written.

        Raises:
            NoModelError: The model is not fitted.
        """
        import lightgbm as lgb

        import surrogate

        self._check_fitted()
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        boosters = self._boosters()
        for name, booster in boosters.items():
            booster.save_model(str(d / f"{name}.txt"))
        sidecar: dict[str, Any] = {
            "format": FORMAT,
            "feature_names": self.feature_names_,
            "status_classes": self.status_classes_,
            "status_fail_rate": self.status_fail_rate_,
            "conformal_q": self.conformal_q_,
            "conformal_q_by_framework": self.conformal_q_by_framework_,
            "mem_conformal_q": _json_float(self.mem_conformal_q_),
            "mem_conformal_q_by_framework": self.mem_conformal_q_by_framework_,
            "mem_conformal_q_unseen_shape": _json_float(self.mem_conformal_q_unseen_shape_),
            "correction_weight_by_framework": self.correction_weight_by_framework_,
            **({"physics_sets": self.physics_sets_} if self.physics_sets_ else {}),
            "coverage": self.coverage,
            "seed": self.seed,
            "n_folds": self.n_folds,
            "balance_sources": self.balance_sources,
            "censored_memory": self.censored_memory,
            "params": self.lightgbm_params,
            "data_hash": self.data_hash_,
            "domain": self.domain_.to_json(),
            "n_train": self.n_train_,
            "metrics": self.metrics_,
            "versions": {"surrogate": surrogate.__version__, "lightgbm": lgb.__version__,
                         "python": platform.python_version()},
        }
        self.saved_sha256_ = write_sidecar(d, sidecar)
        return d

    def _boosters(self) -> dict[str, lgb.Booster]:
        return {"status": self.status_model_, "mfu": self.mfu_model_,
                "mfu_lo": self.mfu_lo_model_, "mfu_hi": self.mfu_hi_model_,
                "mem": self.mem_model_}

    @classmethod
    def load(cls, directory: str | Path) -> SurrogateModel:
        """Read a model written by :meth:`save`; NoModelError if absent, DataError if broken.

        Every file is checked against the sha256 its sidecar records before LightGBM parses it
        (:func:`surrogate.learned.model_files.verified_texts`): a damaged file is a DataError naming
        it, not a silently different prediction or a crash of the interpreter.

        Args:
            directory: A directory written by :meth:`save` (``surrogate train --out``).

        Returns:
            The fitted model.

        Raises:
            NoModelError: ``directory`` holds no ``model.json``.
            DataError: The sidecar is not valid JSON or of another format, the model was
                trained on other features than this version computes, or a file does not
                match the sha256 its sidecar records.
        """
        import lightgbm as lgb

        d = Path(directory)
        side = d / "model.json"
        if not side.exists():
            raise NoModelError(f"no model in {str(d)!r} (model.json missing)")
        try:
            meta = json.loads(side.read_text())
        except json.JSONDecodeError as e:
            raise DataError(f"{side}: not valid JSON ({e.msg})") from None
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"{side}: cannot read it ({e})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
            raise DataError(f"{side}: format must be {FORMAT!r}, got {got!r}")
        if meta.get("feature_names") != list(FEATURE_NAMES):
            raise DataError(
                f"{side}: the model was trained on other features than this version computes; "
                "retrain it (surrogate train)"
            )
        texts = verified_texts(d, meta)
        try:
            model = cls._from_verified(meta, {n: lgb.Booster(model_str=t)
                                              for n, t in texts.items()})
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"{side}: malformed sidecar ({type(e).__name__}: {e})") from None
        if compiled_trees.enabled():
            model._compiled = {n: compiled_trees.CompiledForest(t) for n, t in texts.items()}
        return model

    @classmethod
    def _from_verified(cls, meta: dict[str, Any], boosters: dict[str, lgb.Booster]
                       ) -> SurrogateModel:
        """A model from a verified sidecar and its boosters."""
        domain = Domain.from_json(meta["domain"])
        model = cls(coverage=meta["coverage"], seed=meta["seed"],
                    n_folds=int(meta.get("n_folds", 5)),  # not recorded before: the default
                    shrink_doublings=domain.shrink_doublings,
                    unseen_shape_weight=domain.unseen_shape_weight,
                    balance_sources=bool(meta.get("balance_sources", True)),
                    censored_memory=bool(meta.get("censored_memory", False)),
                    status_params=meta["params"]["status"], mfu_params=meta["params"]["mfu"],
                    mem_params=meta["params"]["mem"])
        model.status_model_ = boosters["status"]
        model.mfu_model_ = boosters["mfu"]
        model.mfu_lo_model_ = boosters["mfu_lo"]
        model.mfu_hi_model_ = boosters["mfu_hi"]
        model.mem_model_ = boosters["mem"]
        model.status_classes_ = list(meta["status_classes"])
        fail_rate = meta.get("status_fail_rate")  # absent before the status model had a start
        model.status_fail_rate_ = None if fail_rate is None else float(fail_rate)
        model.conformal_q_ = float(meta["conformal_q"])
        model.conformal_q_by_framework_ = {  # absent before the widening was per framework
            str(k): float(v) for k, v in meta.get("conformal_q_by_framework", {}).items()}
        mem_q = meta.get("mem_conformal_q")  # absent before the memory had an interval
        model.mem_conformal_q_ = float("nan") if mem_q is None else float(mem_q)
        model.mem_conformal_q_by_framework_ = {  # absent before it was per framework
            str(k): float(v) for k, v in meta.get("mem_conformal_q_by_framework", {}).items()}
        mem_q = meta.get("mem_conformal_q_unseen_shape")  # absent before it had its own
        model.mem_conformal_q_unseen_shape_ = float("nan") if mem_q is None else float(mem_q)
        model.physics_sets_ = dict(meta.get("physics_sets", {}))  # absent: none of its own
        model.correction_weight_by_framework_ = {  # absent: the full correction everywhere
            str(k): float(v) for k, v in meta.get("correction_weight_by_framework", {}).items()}
        model.feature_names_ = list(meta["feature_names"])
        model.data_hash_ = meta["data_hash"]
        model.domain_ = domain
        model.n_train_ = meta["n_train"]
        model.metrics_ = meta.get("metrics", {})
        model.saved_sha256_ = str(meta["sidecar_sha256"])
        return model
