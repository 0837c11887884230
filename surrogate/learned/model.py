"""The learned surrogate: LightGBM models that correct the analytic model with real runs
(the estimator :class:`SurrogateModel`), a pipeline of three parts fitted in turn.

1. The physics (``surrogate.learned.physics``): the analytic parameter sets the corrections are
   trained against, the shipped ones and, for a framework version they lack, sets fitted on its
   training runs first (``physics_sets_``); every feature and target is computed under them
   (``surrogate.learned.training_data``), the model keeps them (:meth:`parameter_sets`), saves
   them and predicts under them.
2. The corrector (:meth:`SurrogateModel._fit_corrector`): a status classifier of completed /
   oom / fail (``p_oom``, ``p_fail``) whose trees start from the physics' log-probabilities
   (:func:`status_init_score`); a regressor of log(measured / analytic tokens/s per GPU), so a
   prediction is the analytic estimate times a learned factor; the same for peak reserved
   memory, runs out of memory read as targets censored at the capacity (:func:`fit_memory`).
3. The interval model (:meth:`SurrogateModel._fit_intervals`, ``surrogate.learned.intervals``):
   conformalised quantile regression (Romano et al. 2019) of the throughput factor, 10% and 90%
   quantile models widened by the ``coverage`` quantile of their out-of-fold conformity scores
   over grouped folds, per framework version (``conformal_q_by_framework_``) and pipeline or
   none; the same quantile of the memory model's absolute out-of-fold errors, per framework
   version (``mem_conformal_q_by_framework_``) and for an unseen model shape
   (``mem_conformal_q_unseen_shape_``); the share of the correction each framework's held-out
   runs bear out (``correction_weight_by_framework_``, :func:`framework_weights`); and, once
   trained, a rescaling per kind of configuration by what held-out runs needed
   (:meth:`SurrogateModel.recalibrate`, ``recalibration_``).

scikit-learn conventions: ``__init__`` stores settings, read and written by ``get_params`` /
``set_params`` (so ``sklearn.base.clone`` works); ``fit(X)`` learns from a runs table (or the
:class:`TrainingData` made of it once, :meth:`TrainingData.take` for its parts) and returns the
model; ``predict(X)`` predicts configurations; fitted attributes end in ``_``; a method that
needs a fitted model raises :class:`NotFittedError`, scikit-learn's and the project's
:class:`NoModelError`. It does not subclass ``sklearn.base.BaseEstimator``: importing
scikit-learn takes about 2 s, which ``surrogate predict`` must not pay.

:meth:`SurrogateModel.save` writes LightGBM's text models and a JSON sidecar
(``surrogate.learned.saved``: settings, parameter sets, domain, metrics, versions, the sha256 of
every file, checked on load by ``surrogate.learned.model_files``); no pickle.

Off the training domain (``surrogate.learned.domain``: an unseen GPU or framework, or a scale
beyond the data) the corrections shrink toward the analytic answer by the domain weight w
(factor^w), the OOM probability moves toward the analytic verdict, and the interval widens by
1 + distance in doublings (at most 5), holds the analytic answer and the unshrunk learned
interval, but reaches no further beyond them than the transfer width
(``surrogate.learned.blend.mfu_bounds``); ``extrapolation`` says along what. Where the physics
is certain of an out-of-memory (an analytic ``p_oom`` of at least :data:`CERTAIN_P_OOM`), the
status is the analytic one whatever the domain.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surrogate.analytic.params import ParameterSets
from surrogate.analytic.run import analytic_for
from surrogate.config.table import table_len
from surrogate.errors import DataError
from surrogate.hardware.perf_models import resolve_perf_model
from surrogate.io.atomic import atomic_path
from surrogate.learned import compiled_trees
from surrogate.learned.blend import (
    MAX_WIDEN,
    bounded_factor,
    memory_bounds,
    memory_half_width,
    mfu_bounds,
    no_predictions,
    prediction_columns,
    shrunk_status,
    unseen_widths,
    with_network_spread,
)
from surrogate.learned.boosters import (
    CATEGORICAL,
    STATUS_CLASSES,
    booster_params,
    booster_predict,
    fit_memory,
    fit_status,
    take_rows,
)
from surrogate.learned.compiled_trees import CompiledForest
from surrogate.learned.domain import (
    DEFAULT_SHRINK_DOUBLINGS,
    UNSEEN_SHAPE_WEIGHT,
    Assessment,
    Domain,
    beyond_practice,
    join_reasons,
)
from surrogate.learned.estimator import Estimator, not_fitted_error
from surrogate.learned.features import FEATURE_NAMES, features_from_analytic
from surrogate.learned.intervals import by_framework, fit_memory_interval, fit_mfu_interval
from surrogate.learned.model_files import verified_texts, write_sidecar
from surrogate.learned.recalibration import Recalibration, fit_recalibration, kinds_of
from surrogate.learned.saved import fitted_attributes, read_sidecar, settings_of, sidecar_of
from surrogate.learned.training_data import TrainingData, fit_inputs

if TYPE_CHECKING:
    import lightgbm as lgb
    import pandas as pd

    from surrogate.config.table import FlatTable


def __getattr__(name: str) -> Any:
    """``NotFittedError``, made on first use (:func:`not_fitted_error`)."""
    if name == "NotFittedError":
        return not_fitted_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SurrogateModel(Estimator):
    """The physics, its corrector and the interval model (module docstring).

    Settings (scikit-learn's "parameters", read by :meth:`get_params`): LightGBM settings per
    model (None: :data:`DEFAULT_PARAMS`), the interval's ``coverage`` and its ``n_folds``
    grouped folds, the ``seed``, the domain's ``shrink_doublings`` and
    ``unseen_shape_weight``, whether to ``balance_sources`` and whether the memory model
    reads runs out of memory as censored targets (``censored_memory``, :func:`fit_memory`;
    models saved before it load as False). Fitted attributes: the physics
    (``base_parameter_sets_``, the sets its training data was computed under, and
    ``physics_sets_``), the corrector (``status_model_``, ``status_classes_``,
    ``status_fail_rate_``, ``mfu_model_``, ``mem_model_``), the interval model
    (``mfu_lo_model_``, ``mfu_hi_model_``, ``conformal_q_``, ``conformal_q_by_framework_``,
    ``mem_conformal_q_``, ``mem_conformal_q_by_framework_``, ``mem_conformal_q_unseen_shape_``,
    ``correction_weight_by_framework_``, ``recalibration_``), and ``feature_names_``,
    ``domain_``, ``data_hash_``, ``n_train_``, ``metrics_`` and ``saved_sha256_``.

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

        model = SurrogateModel().fit(runs)   # runs: a sweep table (surrogate.runs.sweeps columns)
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
    @property
    def lightgbm_params(self) -> dict[str, dict[str, Any] | None]:
        """The LightGBM settings by target (status, mfu, mem), as the evaluation protocols and
        ``training.train`` take them (``params``) and the sidecar stores them."""
        return {"status": self.status_params, "mfu": self.mfu_params, "mem": self.mem_params}

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "status_model_")

    def parameter_sets(self) -> ParameterSets:
        """The analytic parameter sets this model was trained under (``physics_sets_`` over
        ``base_parameter_sets_``; a loaded model: those its sidecar records), under which it
        predicts (``surrogate.prediction.scoring``)."""
        return self.base_parameter_sets_.with_more(self.physics_sets_)

    def __sklearn_tags__(self) -> Any:
        """What scikit-learn's tools (``check_is_fitted``, ``clone``; scikit-learn >= 1.6,
        imported only for them) ask of an estimator: it learns from a table of runs (strings,
        categories, NaN for what was not measured) whose own columns are the targets (no
        ``y``), and is neither a plain classifier nor a plain regressor."""
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(
            estimator_type=None,
            target_tags=TargetTags(required=False),
            input_tags=InputTags(string=True, categorical=True, allow_nan=True),
            requires_fit=True,
        )

    # ---------------------------------------------------------------- fitting
    def fit(
        self,
        X: pd.DataFrame | TrainingData,
        y: None = None,
        *,
        profile: Any = None,
        sample_weight: np.ndarray | None = None,
    ) -> SurrogateModel:
        """Learn from the runs of a sweep table (``surrogate.runs.sweeps`` columns); the model.

        The pipeline in turn: the physics (a table's :func:`training_data` fits it; a
        :class:`TrainingData` carries its own), the corrector, the interval model. ``y`` must
        be None: the targets are the runs' own columns (``status``, ``tokens_per_s_per_gpu``,
        ``peak_mem_reserved_gib``, relative to the analytic answer); the argument keeps
        scikit-learn's signature. The regressors use completed runs with a measured throughput
        / peak reserved memory. By default each source's runs weigh 1 or, with
        ``balance_sources``, :func:`surrogate.learned.training_data.source_weights`.

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
        data, sw = fit_inputs(
            X, y, profile, sample_weight, n_folds=self.n_folds, balance_sources=self.balance_sources
        )
        self._compiled = {}  # a loaded model's compiled forests are of its former boosters
        # the physics, fitted with the data (surrogate.learned.physics): the corrections' base
        self.physics_sets_: dict[str, Any] = dict(data.physics_sets)
        self.base_parameter_sets_: ParameterSets = data.parameter_sets
        self._fit_corrector(data, sw)
        self._fit_intervals(data, sw)
        self.feature_names_ = list(FEATURE_NAMES)
        self.domain_ = Domain.from_cols(data.cols, self.shrink_doublings, self.unseen_shape_weight)
        self.data_hash_ = data.data_hash
        self.n_train_ = {
            "runs": len(data),
            "completed": int(data.done.sum()),
            "with_memory": int(data.mem_ok.sum()),
        }
        self.metrics_: dict[str, Any] = {}
        self.recalibration_: Recalibration | None = None
        # identity as saved: the sidecar's sha256, which covers every file's; set by save/load
        self.saved_sha256_: str | None = None
        return self

    def _settings(self, given: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
        """LightGBM settings of one booster: ``given`` (None: the defaults) and the seed."""
        return booster_params(given, self.seed, **extra)

    def _memory_floor(self, data: TrainingData) -> np.ndarray:
        """The censoring floor of each run's memory target (all NaN without censoring)."""
        return data.mem_floor if self.censored_memory else np.full(len(data), np.nan)

    def _fit_corrector(self, data: TrainingData, sw: np.ndarray) -> None:
        """The corrections of the physics: the status classifier and the throughput and
        memory regressors (``surrogate.learned.boosters``)."""
        import lightgbm as lgb

        self.status_model_, classes, fail_rate = fit_status(
            data.X, data.y_status, sw, data.analytic["p_oom"], self._settings(self.status_params)
        )
        self.status_fail_rate_: float | None = fail_rate
        self.status_classes_ = [STATUS_CLASSES[i] for i in classes]
        done = data.done
        mfu = lgb.LGBMRegressor(**self._settings(self.mfu_params))
        mfu.fit(
            data.X[done], data.y_mfu[done], sample_weight=sw[done], categorical_feature=CATEGORICAL
        )
        self.mfu_model_ = mfu.booster_
        self.mem_model_ = fit_memory(
            data.X,
            data.y_mem,
            data.mem_ok,
            self._memory_floor(data),
            sw,
            self._settings(self.mem_params),
        )

    def _fit_intervals(self, data: TrainingData, sw: np.ndarray) -> None:
        """The interval model, the learned model's own part (``surrogate.learned.intervals``):
        the memory's conformal widths, the throughput's quantile models and conformal widths,
        and the share of the correction each framework's held-out runs bear out."""
        (
            self.mem_conformal_q_,
            self.mem_conformal_q_by_framework_,
            self.mem_conformal_q_unseen_shape_,
        ) = fit_memory_interval(
            data,
            sw,
            self._memory_floor(data),
            self._settings,
            self.mem_params,
            coverage=self.coverage,
            n_folds=self.n_folds,
            shrink_doublings=self.shrink_doublings,
            unseen_shape_weight=self.unseen_shape_weight,
        )
        done = data.done
        interval = fit_mfu_interval(
            data.take(np.flatnonzero(done)),
            sw[done],
            self._settings,
            self.mfu_params,
            coverage=self.coverage,
            n_folds=self.n_folds,
        )
        self.mfu_lo_model_, self.mfu_hi_model_ = interval.lo_model, interval.hi_model
        self.conformal_q_ = interval.conformal_q
        self.conformal_q_by_framework_ = interval.conformal_q_by_framework
        self.correction_weight_by_framework_ = interval.correction_weight_by_framework

    def recalibrate(
        self,
        held_out: dict[str, pd.DataFrame],
        as_predicted: dict[str, pd.DataFrame] | None = None,
        known: dict[str, pd.DataFrame] | None = None,
    ) -> SurrogateModel:
        """Scale the intervals per kind of configuration and category by what the protocols'
        held-out runs needed (``held_out``: their predictions per protocol, as
        ``training.evaluate`` gives them, under each run's measured network; ``as_predicted``:
        the same under the profile's curve alone, which scale the MFU intervals of
        configurations whose network is not known, beyond what ``known``, the same
        predictions with the network known, hold; :mod:`surrogate.learned.recalibration`);
        the model."""
        self._check_fitted()
        self.recalibration_ = fit_recalibration(
            held_out, coverage=self.coverage, as_predicted=as_predicted, known=known
        )
        return self

    # ------------------------------------------------------------- predicting
    def _check_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise not_fitted_error()(
                "this SurrogateModel is not fitted: call fit() or load() first"
            )

    def predict_from_features(
        self,
        X: pd.DataFrame,
        out: dict[str, np.ndarray],
        cols: dict[str, np.ndarray],
        *,
        shrink_doublings: float | None = None,
        sets: ParameterSets | None = None,
    ) -> dict[str, Any]:
        """Predictions from features, the analytic outputs and the analytic columns they came
        from (module doc: shrinkage off the domain). ``shrink_doublings`` overrides the
        model's own (``training.evaluate.evaluate_shrinks`` compares settings on one fit).
        ``sets``: the analytic parameter sets the analytic outputs came from (None: the
        model's, :meth:`parameter_sets`), whose default set gives the interval's width for
        what no set was fitted on."""
        self._check_fitted()
        if list(X.columns) != self.feature_names_:
            raise DataError("features do not match the model's feature_names_")
        where = self.domain_.assess(cols, shrink_doublings)
        w = where.weight
        # the corrector: the status, and the throughput and memory factors, shrunk off the domain
        status = shrunk_status(
            self.status_model_,
            X,
            out["p_oom"],
            w,
            self.status_fail_rate_,
            self.status_classes_,
            compiled=self._compiled.get("status"),
        )
        f = self._trees("mfu", X)
        # the share of the correction its framework's held-out runs bore out (1: all of it)
        borne = by_framework(self.correction_weight_by_framework_, 1.0, cols["framework_code"])
        center = w * borne * f
        factor = bounded_factor(center, out["mfu"])
        # the memory correction counts w times: where w is 0 its booster is not run
        weighed = np.flatnonzero(w > 0)
        mem_log = np.zeros(len(X))
        if len(weighed):
            mem_log[weighed] = w[weighed] * self._trees("mem", take_rows(X, weighed))
        mem = out["mem_reserved"] * np.exp(mem_log)
        # the interval model, around them
        transfer = (self.parameter_sets() if sets is None else sets).transfer_half_widths()
        lo, hi, mem_bounds = self._intervals(
            X, cols, where, (f, center, borne), mem, out["mem_reserved"], transfer
        )
        known = prediction_columns(out, status, factor, lo, hi, mem_bounds)
        columns = with_network_spread(known, out)
        outside = where.distance > 0
        if self.recalibration_ is not None:
            columns = self.recalibration_.apply(
                columns,
                kinds_of(where.distance, where.unseen_shape),
                cols,
                out.get("mfu_ceiling", 1.0),
                analytic=(out["mfu"], out["mem_reserved"] / 2**30),
                holds=(outside | (borne < 1), outside),
                network_known=out.get("net_known"),
                unwidened=known,
            )
        return {
            **columns,
            "domain_weight": w,
            "correction_share": borne,
            "extrapolation": np.array(
                join_reasons(where.reasons, beyond_practice(cols)), dtype=object
            ),
        }

    def _intervals(
        self,
        X: pd.DataFrame,
        cols: dict[str, np.ndarray],
        where: Assessment,
        throughput: tuple[np.ndarray, np.ndarray, np.ndarray],
        mem: np.ndarray,
        analytic_mem: np.ndarray,
        transfer: tuple[float, float] | None,
    ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The interval model's MFU interval (low, high) and memory's (:func:`memory_bounds`)
        around the correction (``throughput``: its unshrunk factor, the factor kept and the
        share borne out; ``mem``: the corrected memory; module doc)."""
        f, center, borne = throughput
        q_conf = by_framework(
            self.conformal_q_by_framework_, self.conformal_q_, cols["framework_code"], cols["pp"]
        )
        outside = where.distance > 0
        widen = 1.0 + np.minimum(where.distance, MAX_WIDEN)
        cap_tps, cap_mem = transfer if transfer is not None else (None, None)
        # off the domain, or sharing the answer with the physics: the interval holds both
        lo, hi = mfu_bounds(
            f,
            self._trees("mfu_lo", X) - q_conf,
            self._trees("mfu_hi", X) + q_conf,
            center,
            outside | (borne < 1),
            widen,
            cap_tps,
        )
        q_mem = by_framework(
            self.mem_conformal_q_by_framework_,
            self.mem_conformal_q_,
            cols["framework_code"],
            cols["pp"],
        )
        half = memory_half_width(
            q_mem, self.mem_conformal_q_unseen_shape_, where.unseen_shape, widen, cap_mem
        )
        lo, hi, half = unseen_widths(lo, hi, half, center, where.distance, transfer)
        return lo, hi, memory_bounds(mem, half, analytic_mem, outside)

    def _trees(self, name: str, X: pd.DataFrame) -> np.ndarray:
        """Booster ``name`` (a key of :meth:`_boosters`) on ``X``, compiled where it can be."""
        return booster_predict(self._boosters()[name], X, compiled=self._compiled.get(name))

    def explain(self, X: pd.DataFrame, *, top: int = 8) -> list[dict[str, float]]:
        """Per row, the ``top`` largest SHAP contributions (LightGBM ``pred_contrib``) to the
        throughput correction log(measured / analytic), plus ``bias`` (the mean correction)."""
        self._check_fitted()
        contrib = booster_predict(self.mfu_model_, X, pred_contrib=True)
        names = [*self.feature_names_, "bias"]
        rows = []
        for values in contrib:
            order = np.argsort(-np.abs(values[:-1]))[:top]
            row = {names[i]: float(values[i]) for i in order}
            row["bias"] = float(values[-1])
            rows.append(row)
        return rows

    def predict(
        self, X: Sequence[Any] | FlatTable, *, profile: Any = None
    ) -> dict[str, np.ndarray]:
        """Predictions of configurations: the analytic answer under the parameter sets this
        model was trained against (:meth:`parameter_sets`), corrected, with its intervals
        (``surrogate.prediction.scoring.score`` then makes the memory verdict agree).

        Args:
            X: TrainingConfigs, or their flat table (``surrogate.config.table``).
            profile: The hardware's speeds, as for :func:`surrogate.predict` (None: each GPU's
                default profile).

        Returns:
            One array per column (``pred_mfu``, ``pred_mfu_lo``, ``p_oom``, ``pred_status``,
                ..., ``correction_share``), a value per configuration in order.

        Raises:
            NoModelError: The model is not fitted.
        """
        self._check_fitted()
        configs = X if isinstance(X, dict) else list(X)
        if (table_len(configs) if isinstance(configs, dict) else len(configs)) == 0:
            return no_predictions()
        sets = self.parameter_sets()
        c, out, _ = analytic_for(configs, profile, sets=sets, resolve=resolve_perf_model)
        return self.predict_from_features(features_from_analytic(c, out), out, c, sets=sets)

    # ------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        """Write ``<name>.txt`` LightGBM models and ``model.json`` into ``directory``.

        The sidecar ``model.json`` records the settings, the parameter sets, the domain, the
        metrics and the sha256 of every file, which :meth:`load` checks.

        Args:
            directory: Where to write (created if missing; files of the same names are
                replaced).

        Returns:
            The directory written.

        Raises:
            NoModelError: The model is not fitted.
        """
        self._check_fitted()
        d = Path(directory)
        for name, booster in self._boosters().items():  # each file atomically
            with atomic_path(d / f"{name}.txt") as tmp:
                booster.save_model(str(tmp))
        self.saved_sha256_ = write_sidecar(d, sidecar_of(vars(self)))
        return d

    def _boosters(self) -> dict[str, lgb.Booster]:
        return {
            "status": self.status_model_,
            "mfu": self.mfu_model_,
            "mfu_lo": self.mfu_lo_model_,
            "mfu_hi": self.mfu_hi_model_,
            "mem": self.mem_model_,
        }

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
        meta = read_sidecar(d)
        texts = verified_texts(d, meta)
        try:
            boosters = {n: lgb.Booster(model_str=t) for n, t in texts.items()}
            domain = Domain.from_json(meta["domain"])
            model = cls(**settings_of(meta, domain))
            vars(model).update(fitted_attributes(meta, domain, boosters, where=str(d)))
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(
                f"{d / 'model.json'}: malformed sidecar ({type(e).__name__}: {e})"
            ) from None
        if compiled_trees.enabled():
            model._compiled = {n: compiled_trees.CompiledForest(t) for n, t in texts.items()}
        return model
