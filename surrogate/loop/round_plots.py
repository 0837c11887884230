"""The figures of one scored active-learning round (matplotlib ``Figure`` objects, no pyplot and
no display), logged as artifacts of the round's MLflow run by
:func:`surrogate.loop.round_log.log_round`:

- :func:`predicted_vs_measured`: the proposing model's MFU (with its 80% interval) and the
  analytic model's against the measured MFU of the round's completed runs;
- :func:`interval_coverage`: per completed run, its interval, the prediction and the
  measurement, inside or outside;
- :func:`layout_space`: where the round's proposals landed among the parallel degrees, with
  their outcome, over the proposals of the campaign's earlier rounds.

Inputs are the frames of :func:`surrogate.loop.active.score_round` (configuration columns,
``status``, ``mfu``, ``pred_mfu``, ``pred_mfu_lo``, ``pred_mfu_hi``, ``name``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def _figure(width: float = 6.0, height: float = 5.0) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _completed(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty or "status" not in frame.columns:
        return frame.iloc[0:0]
    return frame[(frame["status"] == "completed") & (frame["mfu"] > 0)]


def predicted_vs_measured(
    matched: pd.DataFrame, title: str, analytic: pd.DataFrame | None = None
) -> Figure:
    """Predicted vs measured MFU of the round's completed runs; the analytic model's as x."""
    done = _completed(matched)
    fig = _figure()
    ax = fig.add_subplot()
    if len(done):
        lo = (done["pred_mfu"] - done["pred_mfu_lo"]).clip(lower=0).fillna(0)
        hi = (done["pred_mfu_hi"] - done["pred_mfu"]).clip(lower=0).fillna(0)
        ax.errorbar(
            done["mfu"],
            done["pred_mfu"],
            yerr=[lo, hi],
            fmt="o",
            ms=5,
            capsize=3,
            label="proposing model (80% interval)",
        )
        for label, x, y in zip(_numbers(done), done["mfu"], done["pred_mfu"], strict=True):
            ax.annotate(label, (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
    tops = [float(done[c].max()) for c in ("mfu", "pred_mfu_hi", "pred_mfu") if len(done)]
    if analytic is not None:
        a = _completed(analytic)
        if len(a):
            ax.plot(a["mfu"], a["pred_mfu"], "x", color="C3", label="analytic model")
            tops.append(float(a["pred_mfu"].max()))
    top = max([t for t in tops if np.isfinite(t)] or [0.6]) * 1.05
    ax.plot([0, top], [0, top], "k--", lw=1, label="prediction = measurement")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("measured MFU")
    ax.set_ylabel("predicted MFU")
    others = matched[matched["status"] != "completed"] if len(matched) else matched
    note = (
        ""
        if others.empty
        else " | not completed: "
        + ", ".join(f"{s} {n}" for s, n in others["status"].value_counts().items())
    )
    ax.set_title(f"{title}: {len(done)} completed runs{note}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    return fig


def _numbers(frame: pd.DataFrame) -> list[str]:
    """Each run's number in ``proposals.csv`` (1-based), read from the names that
    :func:`surrogate.loop.round_files.write_round` gives (``r<round>-<index>-...``)."""
    out = []
    for i, name in enumerate(frame.get("name", frame.index)):
        parts = str(name).split("-")
        out.append(str(int(parts[1]) + 1) if len(parts) > 2 and parts[1].isdigit() else str(i + 1))
    return out


def interval_coverage(matched: pd.DataFrame, title: str, nominal: float = 0.8) -> Figure:
    """One row per completed run: its MFU interval, the prediction (dot) and the measurement
    (diamond, green inside the interval, red outside)."""
    done = _completed(matched).reset_index(drop=True)
    fig = _figure(7.0, max(2.5, 0.35 * len(done) + 1.5))
    ax = fig.add_subplot()
    inside = (
        ((done["pred_mfu_lo"] <= done["mfu"]) & (done["mfu"] <= done["pred_mfu_hi"])).to_numpy(
            dtype=bool
        )
        if len(done)
        else np.zeros(0, dtype=bool)
    )
    for j, r in enumerate(done.to_dict("records")):
        y = len(done) - 1 - j
        ax.plot([r["pred_mfu_lo"], r["pred_mfu_hi"]], [y, y], "-", color="C0", lw=3, alpha=0.5)
        ax.plot([r["pred_mfu"]], [y], "o", color="C0")
        ax.plot([r["mfu"]], [y], "D", color="C2" if inside[j] else "C3")
    ax.set_yticks(
        range(len(done)),
        [f"{i}: {n}" for i, n in zip(_numbers(done), done.get("name", done.index), strict=True)][
            ::-1
        ],
        fontsize=6,
    )
    ax.set_xlabel("MFU: interval and prediction (blue), measured (green inside, red outside)")
    share = float(np.mean(inside)) if len(done) else float("nan")
    ax.set_title(
        f"{title}: {int(np.sum(inside))}/{len(done)} inside the interval "
        f"({share:.0%}; nominal {nominal:.0%})",
        fontsize=9,
    )
    return fig


def _log2(values: Any) -> np.ndarray:
    out: np.ndarray = np.log2(np.maximum(np.asarray(values, dtype=float), 1.0))
    return out


def layout_space(
    record: Mapping[str, Any], matched: pd.DataFrame, earlier: Sequence[Mapping[str, Any]] = ()
) -> Figure:
    """The round's proposals on (tp, pp) and (dp, micro-batch), coloured by outcome, over the
    proposals of earlier rounds (grey). Axes in doublings; points jittered so that layouts
    sharing two coordinates stay visible."""
    import pandas as pd

    props = pd.DataFrame(
        [
            {**p["config"], "name": p["name"], "reason": p["reason"]}
            for p in record.get("proposals", [])
        ]
    )
    old = pd.DataFrame([p["config"] for r in earlier for p in r.get("proposals", [])])
    outcome = {}
    if len(matched):
        outcome = {
            str(n): (str(s), float(m))
            for n, s, m in zip(matched["name"], matched["status"], matched["mfu"], strict=True)
        }
    rng = np.random.default_rng(0)
    fig = _figure(11.0, 5.0)
    for k, (xcol, ycol) in enumerate((("tp", "pp"), ("dp", "mbs"))):
        ax = fig.add_subplot(1, 2, k + 1)
        if len(old):
            ax.scatter(
                _log2(old[xcol]) + rng.uniform(-0.12, 0.12, len(old)),
                _log2(old[ycol]) + rng.uniform(-0.12, 0.12, len(old)),
                s=25,
                facecolors="none",
                edgecolors="0.7",
                label="earlier rounds",
            )
        if len(props):
            x = _log2(props[xcol]) + rng.uniform(-0.12, 0.12, len(props))
            y = _log2(props[ycol]) + rng.uniform(-0.12, 0.12, len(props))
            status = [outcome.get(str(n), ("not measured", np.nan))[0] for n in props["name"]]
            mfu = np.array([outcome.get(str(n), ("", np.nan))[1] for n in props["name"]])
            done = np.array([s == "completed" for s in status])
            if done.any():
                sc = ax.scatter(
                    x[done],
                    y[done],
                    c=mfu[done],
                    cmap="viridis",
                    s=60,
                    vmin=0,
                    label="completed (colour: MFU)",
                )
                if k == 1:
                    fig.colorbar(sc, ax=ax, label="measured MFU")
            for state, marker, colour in (
                ("oom", "X", "C3"),
                ("fail", "s", "C1"),
                ("timeout", "s", "C1"),
                ("not measured", "o", "0.4"),
            ):
                sel = np.array([s == state for s in status])
                if sel.any():
                    ax.scatter(
                        x[sel],
                        y[sel],
                        marker=marker,
                        s=60,
                        color=colour,
                        facecolors="none" if state == "not measured" else colour,
                        label=state,
                    )
            for i, (xi, yi) in enumerate(zip(x, y, strict=True), start=1):
                ax.annotate(str(i), (xi, yi), fontsize=6, xytext=(4, 3), textcoords="offset points")
        both = (
            pd.concat([f for f in (old, props) if len(f)])
            if len(old) or len(props)
            else pd.DataFrame({xcol: [1], ycol: [1]})
        )
        for axis, col in ((ax.xaxis, xcol), (ax.yaxis, ycol)):
            top = int(np.ceil(_log2(both[col]).max()))
            axis.set_ticks(range(top + 1), [str(2**e) for e in range(top + 1)])
        ax.set_xlim(-0.5, int(np.ceil(_log2(both[xcol]).max())) + 0.5)
        ax.set_ylim(-0.5, int(np.ceil(_log2(both[ycol]).max())) + 0.5)
        ax.set_xlabel(f"{xcol} (log scale)")
        ax.set_ylabel(f"{ycol} (log scale)")
        ax.grid(alpha=0.3)
        if k == 0:
            ax.legend(fontsize=7, loc="best")
    fig.suptitle(
        f"round {record.get('round')}: where the {len(props)} proposals landed "
        "(numbers: order in proposals.csv)",
        fontsize=10,
    )
    return fig
