"""The probability that each of a few shown layouts is the best of them, with correlated errors.

A search shows its top layouts with their predicted MFU and 80% interval; which of them is
really fastest is uncertain, and their errors need not be independent: layouts of one model on
one cluster and framework may share a transfer error (a physics term the model gets wrong for
this shape and network, the same for all of them), and a layout one step from another (one
more micro-batch, ZeRO-1 for ZeRO-0) shares more of its error with it than a layout that
differs in every dimension.

:func:`p_best` draws the log MFU of every shown layout ``n_draws`` times (a Monte Carlo with a
fixed seed: the same rows give the same answer) as

    log MFU_i = log pred_mfu_i + sd_i z_i,

``sd_i`` the layout's predictive spread in log MFU (log tokens/s: the two differ by a factor
fixed by the model and GPU, the same for every layout), read from its 80% interval as
log(hi / lo) / (2 x 1.2816) (:func:`log_sd`), and z a standard normal vector with

    corr(z_i, z_j) = a + b lambda^d_ij   for two layouts of one cell (framework, node count),
                     0                   for layouts of different cells,

d_ij the number of :data:`DIMENSIONS` in which the two differ: ``a`` a component every layout
of the cell shares, ``b lambda^d`` one that neighbours share and that fades with each
dimension that differs (a product over the dimensions of 1 where they agree and lambda where
they differ, so the matrix is a valid correlation). A component shared by every shown layout
moves them all together and changes no probability; only differences count, so correlated
errors make a lead over a near neighbour surer than the same lead over a distant layout. Each
draw also lets a layout fail (OOM or another failure) with its predicted probability
1 - ``p_completed``, independently: a layout that does not complete is not the best, so the
probabilities of the shown layouts sum to at most 1 (less by the chance that none completes).

:data:`CORRELATION` holds a, b and lambda as fitted by ``benchmarks/rank_correlation.py`` to
the held-out errors of the Playbook runs (docs/search.md gives the figures).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from surrogate.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

Z80 = 1.2815515655446004
"""Standard normal quantile of 0.9: an 80% interval is median x exp(+-1.2816 sd) in log."""
DIMENSIONS: tuple[str, ...] = (
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "vpp",
    "mbs",
    "zero_stage",
    "dp_replicate",
    "recompute",
    "recompute_layers",
    "sequence_parallel",
)
"""The layout dimensions counted in the distance d between two layouts."""
CELL: tuple[str, ...] = ("framework", "num_nodes")
"""The columns of a cell: only layouts of one cell share errors."""
N_DRAWS = 4000
SEED = 0


@dataclass(frozen=True, kw_only=True)
class Correlation:
    """corr = a + b lambda^d within a cell (module docstring)."""

    cell: float
    """a: the share of the error variance every layout of a cell has in common."""
    neighbours: float
    """b: the share that a layout's neighbours have in common with it (at d = 0)."""
    decay: float
    """lambda: the factor the shared part loses with each dimension that differs."""
    tail_df: float = float("inf")
    """nu: degrees of freedom of each layout's error (Student t, its scale chosen so that the
    layout's 80% interval still holds 80% of it; infinite: normal)."""

    def __post_init__(self) -> None:
        if self.cell < 0 or self.neighbours < 0 or self.cell + self.neighbours > 1:
            raise ConfigError(
                f"correlation weights must be >= 0 and sum to <= 1, got cell "
                f"{self.cell} and neighbours {self.neighbours}"
            )
        if not 0 <= self.decay <= 1:
            raise ConfigError(f"correlation decay must be in [0, 1], got {self.decay}")
        if not self.tail_df > 0:
            raise ConfigError(f"tail degrees of freedom must be > 0, got {self.tail_df}")

    def between(
        self,
        differing: int | np.ndarray,
        same_cell: bool | np.ndarray = True,
    ) -> np.ndarray:
        """The correlation of two distinct layouts that differ in ``differing`` dimensions."""
        return np.where(
            same_cell,
            self.cell + self.neighbours * self.decay ** np.asarray(differing, dtype=float),
            0.0,
        )


CORRELATION = Correlation(cell=0.005, neighbours=0.707, decay=0.35)
"""Fitted to the Playbook's errors held out by whole (model, nodes) cell, standardised by each
run's interval and clipped to +-3 (``python benchmarks/rank_correlation.py``: correlation
0.25 at one differing dimension, 0.10 at two, 0.03 at three, 0.01-0.02 beyond, 0.01 between
node counts of one model; docs/search.md)."""


def log_sd(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Spread (sd) of log MFU read from an 80% interval [lo, hi]: log(hi / lo) / (2 x 1.2816);
    NaN where the interval is missing or not positive."""
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    ok = np.isfinite(lo) & np.isfinite(hi) & (lo > 0) & (hi >= lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(
            ok, np.log(np.where(ok, hi, 1.0) / np.where(ok, lo, 1.0)) / (2 * Z80), np.nan
        )


def correlation_matrix(frame: pd.DataFrame, correlation: Correlation = CORRELATION) -> np.ndarray:
    """The rows' error correlations (columns of :data:`CELL` and :data:`DIMENSIONS` that
    ``frame`` lacks count as one value)."""
    cells = _codes(frame, CELL)
    differing = np.zeros((len(frame), len(frame)), dtype=int)
    for dim in DIMENSIONS:
        codes = _codes(frame, (dim,))
        differing += codes[:, None] != codes[None, :]
    corr = correlation.between(differing, cells[:, None] == cells[None, :])
    np.fill_diagonal(corr, 1.0)
    return np.asarray(corr)


def draw_log_errors(
    frame: pd.DataFrame,
    n_draws: int = N_DRAWS,
    *,
    correlation: Correlation = CORRELATION,
    seed: int = SEED,
) -> np.ndarray:
    """``n_draws`` x rows errors z with :func:`correlation_matrix`: standard normal, or with a
    finite ``tail_df`` each normal divided by its own sqrt(chi2(nu) / nu) and scaled by
    1.2816 / t_0.9(nu), so that +-1.2816 still holds 80% of each (a Student t of heavier
    tails; the correlation is the normals')."""
    corr = correlation_matrix(frame, correlation)
    values, vectors = np.linalg.eigh(corr)  # a square root that tolerates round-off
    root = vectors * np.sqrt(np.clip(values, 0.0, None))
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n_draws, len(frame))) @ root.T
    nu = correlation.tail_df
    if np.isfinite(nu):
        from scipy.special import stdtrit

        z = z / np.sqrt(rng.chisquare(nu, z.shape) / nu) * (Z80 / float(stdtrit(nu, 0.9)))
    return np.asarray(z)


def _codes(frame: pd.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    """An integer per row, equal where the rows agree on every column of ``columns`` held."""
    import pandas as pd

    held = [c for c in columns if c in frame.columns]
    if not held:
        return np.zeros(len(frame), dtype=int)
    keys = (
        pd.MultiIndex.from_frame(frame[held].astype(str))
        if len(held) > 1
        else frame[held[0]].astype(str)
    )
    return np.asarray(pd.factorize(keys)[0], dtype=int)


def p_best(
    frame: pd.DataFrame,
    *,
    n_draws: int = N_DRAWS,
    correlation: Correlation = CORRELATION,
    seed: int = SEED,
    incumbent: float | None = None,
) -> np.ndarray:
    """Per row of ``frame`` (scored layouts: ``pred_mfu``, ``pred_mfu_lo``, ``pred_mfu_hi``,
    ``p_completed`` and the layout columns), the probability that it completes and has the
    highest MFU of the rows (module docstring), and above ``incumbent`` (an MFU measured
    already) when one is given. All NaN when a row has no interval (the analytic model alone
    gives none): its spread would be a guess."""
    n = len(frame)
    if n == 0:
        return np.zeros(0)
    sd = log_sd(frame["pred_mfu_lo"].to_numpy(), frame["pred_mfu_hi"].to_numpy())
    mu = frame["pred_mfu"].to_numpy(dtype=float)
    if not (np.all(np.isfinite(sd)) and np.all(mu > 0)):
        return np.full(n, np.nan)
    log_mfu = np.log(mu) + sd * draw_log_errors(frame, n_draws, correlation=correlation, seed=seed)
    p_ok = (
        np.nan_to_num(frame["p_completed"].to_numpy(dtype=float), nan=1.0)
        if "p_completed" in frame.columns
        else np.ones(n)
    )
    completes = np.random.default_rng(seed + 1).random((n_draws, n)) < p_ok
    log_mfu = np.where(completes, log_mfu, -np.inf)
    best = np.argmax(log_mfu, axis=1)
    floor = -np.inf if incumbent is None or not incumbent > 0 else np.log(incumbent)
    won = completes.any(axis=1) & (log_mfu[np.arange(n_draws), best] > floor)
    wins = np.bincount(best[won], minlength=n)
    return np.asarray(wins / n_draws, dtype=float)


BEST_SET_MASS = 0.9
"""The share of the shown layouts' P(best) that :func:`best_set` holds."""


def best_set(p: np.ndarray, mass: float = BEST_SET_MASS) -> np.ndarray:
    """Per row, whether it is one of the layouts a search cannot tell apart: the fewest rows,
    taken by P(best) (``p``, :func:`p_best`) from the highest, whose P(best) sums to at least
    ``mass`` of the rows' total (the chance that one of them is the best, given that one of
    the rows is; ties keep the rows' order). One row alone: a clear lead. All False where
    P(best) is NaN (no intervals) or every row's is 0."""
    if not 0 < mass <= 1:
        raise ConfigError(f"best-set mass must be in (0, 1], got {mass}")
    p = np.asarray(p, dtype=float)
    out = np.zeros(len(p), dtype=bool)
    total = float(p.sum()) if len(p) and np.all(np.isfinite(p)) else 0.0
    if not total > 0:
        return out
    order = np.argsort(-p, kind="stable")
    held = np.cumsum(p[order]) / total
    n = int(np.searchsorted(held, mass - 1e-12)) + 1  # the first prefix that holds ``mass``
    out[order[:n]] = True
    return out
