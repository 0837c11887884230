"""How correlated are the learned model's held-out errors of two layouts? Prints the figures
behind :data:`surrogate.layouts.best_odds.CORRELATION` and fits it.

    python benchmarks/rank_correlation.py [--protocol cv_cells] [--seed 0] [--full-fit]
                                          [--predictions DIR]

Held-out predictions of the Playbook runs (:func:`training.evaluate.evaluate_protocol`, the
shipped physics, cheap LightGBM settings unless ``--full-fit``; kept in ``--predictions DIR``
and read back from there on a second run); on completed runs the log error
r = log(measured / predicted MFU) and its standardised form z = r / sd, sd read from the run's
80% interval as :func:`surrogate.layouts.best_odds.log_sd` does, and z clipped to +-3 (a few
runs with
a narrow interval and a large miss dominate z's variance otherwise). For pairs of runs it
prints the correlation of each (sum over pairs of (x_i - m)(x_j - m) / (pairs x variance),
m the mean): pairs of the same (model, nodes) cell by the number d of
:data:`surrogate.layouts.best_odds.DIMENSIONS` in which they differ, pairs of the same model
on other
node counts, and pairs of different models. It then fits a + b lambda^d to the clipped z's
correlations at d >= 1 (least squares weighted by pairs, lambda on a grid of 0.01, a and b
>= 0): the module's model. Last, the errors' tails: the Student t degrees of freedom nu under
which z is likeliest (``Correlation.tail_df``), and how P(best) of each held-out cell's top
layouts holds, with normal errors and with that nu (Brier score, reliability per bin).

``cv_cells`` (whole cells held out) is what a search of a model and cluster the learned model
never saw faces; ``cv`` (runs held out, neighbours seen) what a search of a measured cell faces.
"""

from __future__ import annotations

import argparse
import time
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from surrogate.layouts.best_odds import CORRELATION, DIMENSIONS, Z80, log_sd, p_best
from surrogate.learned.training_data import cell_groups, training_data
from training.evaluate import evaluate_protocol
from training.train import load_runs

CHEAP = {"n_estimators": 100}
MAX_D = 5
TAIL_DFS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0, 10.0, 20.0, 50.0, float("inf"))
"""The degrees of freedom :func:`fit_tail_df` chooses from."""
SHOWN = 5
"""Layouts per held-out cell whose P(best) :func:`p_best_reliability` judges (search's top)."""


def pair_correlations(done: pd.DataFrame, x: np.ndarray) -> pd.DataFrame:
    """Correlation of x over pairs, by pair kind (module docstring)."""
    xc = x - x.mean()
    var = float(np.mean(xc**2))
    cells = cell_groups(done)
    models = done["model_name"].astype(str).to_numpy()
    held = [d for d in DIMENSIONS if d in done.columns]
    sums: dict[int, list[float]] = {}
    for cell in np.unique(cells):
        idx = np.flatnonzero(cells == cell)
        dims = done.iloc[idx][held].astype(str).to_numpy()
        for a, b in combinations(range(len(idx)), 2):
            d = min(int(np.sum(dims[a] != dims[b])), MAX_D)
            sums.setdefault(d, []).append(xc[idx[a]] * xc[idx[b]])

    def within(groups: np.ndarray) -> tuple[float, int]:
        total, n = 0.0, 0
        for g in np.unique(groups):
            s = xc[groups == g]
            total += (s.sum() ** 2 - np.sum(s**2)) / 2
            n += len(s) * (len(s) - 1) // 2
        return total, n

    cell_sum, cell_n = within(cells)
    model_sum, model_n = within(models)
    all_sum = (xc.sum() ** 2 - np.sum(xc**2)) / 2
    all_n = len(xc) * (len(xc) - 1) // 2
    rows = [
        {
            "pairs": f"same cell, d = {d}{'+' if d == MAX_D else ''}",
            "d": d,
            "n": len(v),
            "correlation": float(np.mean(v)) / var,
        }
        for d, v in sorted(sums.items())
    ]
    rows.append(
        {"pairs": "same cell, any", "d": -1, "n": cell_n, "correlation": cell_sum / cell_n / var}
    )
    rows.append(
        {
            "pairs": "same model, other nodes",
            "d": -1,
            "n": model_n - cell_n,
            "correlation": (model_sum - cell_sum) / (model_n - cell_n) / var,
        }
    )
    rows.append(
        {
            "pairs": "other models",
            "d": -1,
            "n": all_n - model_n,
            "correlation": (all_sum - model_sum) / (all_n - model_n) / var,
        }
    )
    return pd.DataFrame(rows)


def fit_decay(table: pd.DataFrame) -> tuple[float, float, float]:
    """(a, b, lambda) of a + b lambda^d fitted to the rows with d >= 1 (module docstring)."""
    rows = table[table["d"] >= 1]
    d, y, w = (rows[c].to_numpy(dtype=float) for c in ("d", "correlation", "n"))
    best = (np.inf, 0.0, 0.0, 0.0)
    for lam in np.round(np.arange(0.0, 1.0001, 0.01), 2):
        X = np.stack([np.ones_like(d), lam**d], axis=1)
        coef, *_ = np.linalg.lstsq(X * np.sqrt(w)[:, None], y * np.sqrt(w), rcond=None)
        a, b = (max(float(c), 0.0) for c in coef)
        loss = float(np.sum(w * (y - a - b * lam**d) ** 2))
        if loss < best[0]:
            best = (loss, a, b, float(lam))
    return best[1], best[2], best[3]


def fit_tail_df(z: np.ndarray) -> tuple[float, dict[float, float]]:
    """The nu of :data:`TAIL_DFS` under which the standardised errors ``z`` are likeliest, a
    Student t scaled so that +-1.2816 holds 80% of it (as
    :func:`surrogate.layouts.best_odds.draw_log_errors` draws), and each nu's mean
    log-likelihood."""
    from scipy import stats

    scores = {}
    for nu in TAIL_DFS:
        if np.isfinite(nu):
            c = Z80 / float(stats.t.ppf(0.9, nu))
            scores[nu] = float(np.mean(stats.t.logpdf(z / c, nu) - np.log(c)))
        else:
            scores[nu] = float(np.mean(stats.norm.logpdf(z)))
    return max(scores, key=lambda nu: scores[nu]), scores


def p_best_reliability(res: pd.DataFrame, tail_dfs: tuple[float, ...]) -> pd.DataFrame:
    """Per held-out cell, its :data:`SHOWN` layouts of highest predicted MFU x p_completed
    (1 - p_oom) and their P(best) under each nu of ``tail_dfs``, against which of them
    measured the highest MFU (completed; none where none completed): per nu the Brier score
    and, per bin of P(best), the layouts, the mean P(best) and the share that were the best;
    nu 0 is the baseline that gives each shown layout 1 / their number."""
    from dataclasses import replace

    judged = res[
        res["status"].isin(["completed", "oom", "fail"])
        & (res["pred_mfu"] > 0)
        & np.isfinite(res["pred_mfu_lo"])
    ]
    # the protocol keeps p_oom; what completes is the rest (failures other than OOM: few)
    judged = judged.assign(p_completed=1.0 - judged["p_oom"])
    rows = []
    for _, cell in judged.groupby(cell_groups(judged)):
        shown = cell.assign(score=cell["pred_mfu"] * cell["p_completed"]).nlargest(SHOWN, "score")
        if len(shown) < 2:
            continue
        mfu = np.where(shown["status"] == "completed", shown["mfu"].fillna(0.0), 0.0)
        won = (mfu == mfu.max()) & (mfu > 0)
        for nu in tail_dfs:
            p = p_best(shown, correlation=replace(CORRELATION, tail_df=nu))
            rows += [
                {"nu": nu, "p": float(pi), "best": bool(w)} for pi, w in zip(p, won, strict=True)
            ]
        # the baseline: every shown layout alike
        rows += [{"nu": 0.0, "p": 1.0 / len(shown), "best": bool(w)} for w in won]
    out = pd.DataFrame(rows)
    out["bin"] = pd.cut(out["p"], [0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0], include_lowest=True)
    table = (
        out.groupby(["nu", "bin"], observed=True)
        .agg(layouts=("p", "size"), said=("p", "mean"), were_best=("best", "mean"))
        .reset_index()
    )
    brier = out.assign(sq=(out["p"] - out["best"]) ** 2).groupby("nu")["sq"].mean()
    table["brier"] = table["nu"].map(brier)
    return table


def held_out(data: object, protocol: str, args: argparse.Namespace) -> pd.DataFrame:
    """The protocol's held-out predictions, from ``--predictions`` when kept there."""
    path = None if args.predictions is None else Path(args.predictions) / f"{protocol}.parquet"
    if path is not None and path.exists():
        return pd.read_parquet(path)
    params = None if args.full_fit else {"status": CHEAP, "mfu": CHEAP, "mem": CHEAP}
    res = evaluate_protocol(
        data,
        protocol,
        params=params,
        seed=args.seed,  # type: ignore[arg-type]
        refit_physics=False,
    ).predictions
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        res.to_parquet(path)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--protocol", action="append", default=None, help="cv_cells and/or cv (default: both)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--full-fit", action="store_true", help="library-default LightGBM settings")
    ap.add_argument("--predictions", default=None, help="keep the held-out predictions here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    data = training_data(load_runs())
    for protocol in args.protocol or ["cv_cells", "cv"]:
        res = held_out(data, protocol, args)
        done = res[
            (res["status"] == "completed")
            & (res["mfu"] > 0)
            & (res["pred_mfu"] > 0)
            & np.isfinite(res["pred_mfu_lo"])
        ].reset_index(drop=True)
        sd = log_sd(done["pred_mfu_lo"].to_numpy(), done["pred_mfu_hi"].to_numpy())
        r = np.log(done["mfu"].to_numpy() / done["pred_mfu"].to_numpy())
        z = r / sd
        table = pair_correlations(done, r).rename(columns={"correlation": "log error"})
        table["z"] = pair_correlations(done, z)["correlation"]
        clipped = pair_correlations(done, np.clip(z, -3, 3))
        table["z, clipped to 3"] = clipped["correlation"]
        print(
            f"\n{protocol}: {len(done)} completed runs held out; log error: sd {r.std():.3f}; "
            f"z: mean {z.mean():+.2f}, sd {z.std():.2f} (1 if the intervals were exact), "
            f"{np.mean(np.abs(z) > 3):.1%} beyond 3"
        )
        print(table.drop(columns="d").to_string(index=False, float_format="%.2f"))
        a, b, lam = fit_decay(clipped)
        print(f"fit to the clipped z, d >= 1: corr = {a:.3f} + {b:.3f} x {lam:.2f}^d")
        nu, scores = fit_tail_df(z)
        print(
            f"tails: z likeliest under a Student t of nu = {nu:g} (mean log-likelihood "
            + ", ".join(f"{k:g}: {v:.3f}" for k, v in scores.items())
            + ")"
        )
        print(
            f"P(best) of each held-out cell's top {SHOWN} (nu inf: normal errors; nu 0: each "
            "alike), against which was best:"
        )
        print(
            p_best_reliability(res, (float("inf"), nu)).to_string(index=False, float_format="%.3f")
        )
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
