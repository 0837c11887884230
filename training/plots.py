"""Diagnostic figures of a trained surrogate (matplotlib, Agg backend, no display).

- predicted vs measured MFU on held-out runs, with the 80% interval as error bars;
- calibration of p_oom: measured OOM frequency per bin of predicted p_oom (reliability
  diagram, Niculescu-Mizil & Caruana 2005);
- interval coverage per (model, nodes) cell against the nominal level;
- feature importance (total gain) of the throughput corrector and the status classifier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from surrogate.learned.model import SurrogateModel
from surrogate.learned.training_data import cell_groups

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def _figure(width: float = 6.0, height: float = 5.0) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")  # no pyplot: no global state


def mfu_scatter(pred: pd.DataFrame, title: str) -> Figure:
    """Predicted vs measured MFU of completed held-out runs."""
    done = pred[(pred["status"] == "completed") & (pred["mfu"] > 0)]
    fig = _figure()
    ax = fig.add_subplot()
    lo = (done["pred_mfu"] - done["pred_mfu_lo"]).clip(lower=0)
    hi = (done["pred_mfu_hi"] - done["pred_mfu"]).clip(lower=0)
    ax.errorbar(
        done["mfu"], done["pred_mfu"], yerr=[lo, hi], fmt="o", ms=2, alpha=0.4, elinewidth=0.5
    )
    top = float(max(done["mfu"].max(), done["pred_mfu"].max())) if len(done) else 1.0
    ax.plot([0, top], [0, top], "k--", lw=1)
    ax.set_xlabel("measured MFU")
    ax.set_ylabel("predicted MFU (80% interval)")
    ax.set_title(title)
    return fig


def oom_calibration(pred: pd.DataFrame, title: str, n_bins: int = 10) -> Figure:
    """Measured OOM frequency per bin of p_oom (completed and oom runs)."""
    judged = pred[pred["status"].isin(["completed", "oom"])]
    p = judged["p_oom"].to_numpy(dtype=float)
    y = (judged["status"] == "oom").to_numpy(dtype=float)
    edges = np.linspace(0, 1, n_bins + 1)
    which = np.clip(np.digitize(p, edges) - 1, 0, n_bins - 1)
    fig = _figure()
    ax = fig.add_subplot()
    xs, ys, ns = [], [], []
    for b in range(n_bins):
        sel = which == b
        if sel.any():
            xs.append(p[sel].mean())
            ys.append(y[sel].mean())
            ns.append(int(sel.sum()))
    ax.plot([0, 1], [0, 1], "k--", lw=1)
    ax.plot(xs, ys, "o-")
    for x, yy, n in zip(xs, ys, ns, strict=True):
        ax.annotate(str(n), (x, yy), fontsize=7, xytext=(3, -8), textcoords="offset points")
    ax.set_xlabel("predicted p_oom (bin mean)")
    ax.set_ylabel("measured OOM frequency")
    ax.set_title(title)
    return fig


def interval_coverage(pred: pd.DataFrame, title: str, nominal: float = 0.8) -> Figure:
    """Share of completed runs inside their MFU interval, per (model, nodes) cell."""
    done = pred[(pred["status"] == "completed") & (pred["mfu"] > 0)]
    inside = (done["pred_mfu_lo"] <= done["mfu"]) & (done["mfu"] <= done["pred_mfu_hi"])
    per_cell = inside.groupby(cell_groups(done)).mean().sort_index()
    fig = _figure(8.0, 5.0)
    ax = fig.add_subplot()
    ax.bar(range(len(per_cell)), per_cell.to_numpy())
    ax.axhline(nominal, color="k", ls="--", lw=1, label=f"nominal {nominal:.0%}")
    ax.axhline(float(inside.mean()) if len(inside) else np.nan, color="C1", lw=1, label="overall")
    ax.set_xticks(range(len(per_cell)), list(per_cell.index), rotation=90, fontsize=6)
    ax.set_ylabel("coverage")
    ax.set_ylim(0, 1.05)
    ax.legend()
    ax.set_title(title)
    return fig


def feature_importance(model: SurrogateModel, top: int = 20) -> Figure:
    """Total gain of the features of the throughput corrector and the status classifier."""
    fig = _figure(10.0, 6.0)
    for i, (name, booster) in enumerate(
        (("MFU factor", model.mfu_model_), ("status", model.status_model_))
    ):
        gain = np.asarray(booster.feature_importance(importance_type="gain"), dtype=float)
        order = np.argsort(gain)[::-1][:top][::-1]
        ax = fig.add_subplot(1, 2, i + 1)
        ax.barh([model.feature_names_[j] for j in order], gain[order] / max(gain.sum(), 1e-12))
        ax.set_title(f"{name}: share of gain")
        ax.tick_params(axis="y", labelsize=7)
    return fig
