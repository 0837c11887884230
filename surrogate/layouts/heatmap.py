"""The Playbook's figure "best configuration by model size and number of nodes", predicted.

Each cell of a (model, nodes) grid holds the best layout the surrogate finds
(:func:`surrogate.layouts.search.search` over the enumerated space) coloured by its predicted MFU,
and,
when a sweep table is given, the measured grid beside it (the best completed run per cell).
Output: a PNG (matplotlib, Agg backend) and a self-contained HTML page (tables with inline
colours; no script, no external file).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from surrogate.config.model import ModelConfig
from surrogate.config.training import config_from_flat
from surrogate.errors import ConfigError
from surrogate.io.atomic import atomic_path, atomic_write
from surrogate.layouts.labels import layout_label
from surrogate.layouts.search import search
from surrogate.layouts.space import LayoutSpace
from surrogate.prediction.predict import resolve_model
from surrogate.progress import ProgressFn, report

if TYPE_CHECKING:
    import pandas as pd

GRID_COLUMNS: tuple[str, ...] = ("model", "num_nodes", "mfu", "layout")


def predicted_grid(
    models: Sequence[ModelConfig],
    node_counts: Sequence[int],
    *,
    global_batch_seqs: int,
    space_options: dict[str, Any] | None = None,
    model: Any = "default",
    limits: Any = None,
    progress: ProgressFn | None = None,
    profile: Any = None,
) -> pd.DataFrame:
    """Best predicted layout per (model, nodes): columns :data:`GRID_COLUMNS`; ``progress``
    hears of each cell (:mod:`surrogate.progress`); ``profile``: the cluster's calibration
    profile, as for :func:`surrogate.layouts.search.search`."""
    import pandas as pd

    learned = resolve_model(model)
    rows: list[dict[str, Any]] = []
    stage = "best predicted layout per model and node count"
    total = len(models) * len(node_counts)
    report(progress, stage, 0, total)
    for m in models:
        for nodes in node_counts:
            space = LayoutSpace(
                model=m,
                global_batch_seqs=global_batch_seqs,
                node_counts=(nodes,),
                **(space_options or {}),
            )
            try:
                result = search(
                    space,
                    model=learned,
                    limits=limits,
                    method="enumerate",
                    top_k=1,
                    profile=profile,
                )
                best = result.top.iloc[0]
                ok = bool(best["feasible"])
                rows.append(
                    {
                        "model": m.name,
                        "num_nodes": nodes,
                        "mfu": float(best["pred_mfu"]) if ok else math.nan,
                        "layout": str(best["layout"]) if ok else "none fits",
                    }
                )
            except ConfigError as e:
                rows.append(
                    {
                        "model": m.name,
                        "num_nodes": nodes,
                        "mfu": math.nan,
                        "layout": f"no layout ({e})"[:60],
                    }
                )
            report(progress, stage, len(rows), total)
    return pd.DataFrame(rows, columns=list(GRID_COLUMNS))


def measured_grid(runs: pd.DataFrame, *, label: str = "model_name") -> pd.DataFrame:
    """Best completed run per (model, nodes) of a sweep table: columns :data:`GRID_COLUMNS`."""
    import pandas as pd

    done = runs[runs["status"] == "completed"].dropna(subset=["mfu"])
    names = done[label] if label in done.columns else done["hidden_size"].astype(str)
    rows = []
    done = done.assign(_m=names.to_numpy()).sort_values("mfu", ascending=False)
    for rec in done.drop_duplicates(["_m", "num_nodes"]).to_dict("records"):
        rows.append(
            {
                "model": str(rec["_m"]),
                "num_nodes": int(rec["num_nodes"]),
                "mfu": float(rec["mfu"]),
                "layout": layout_label(config_from_flat(rec)),
            }
        )
    return pd.DataFrame(rows, columns=list(GRID_COLUMNS))


Cell = tuple[str, int, float, str]
"""(model, nodes, MFU, layout) of one grid cell."""


def _cells(grid: pd.DataFrame) -> list[Cell]:
    return [
        (str(m), int(n), float(v), str(lay))
        for m, n, v, lay in zip(
            grid["model"], grid["num_nodes"], grid["mfu"], grid["layout"], strict=True
        )
    ]


def _axes(grids: dict[str, pd.DataFrame]) -> tuple[list[str], list[int]]:
    """Rows (models, in the order the first grid lists them) and columns (node counts) shared
    by every grid, so that the figures side by side line up."""
    cells = [c for g in grids.values() for c in _cells(g)]
    models = list(dict.fromkeys(c[0] for c in cells))
    nodes = sorted({c[1] for c in cells})
    return models, nodes


def draw_png(grids: dict[str, pd.DataFrame], path: str | Path) -> Path:
    """Side-by-side heatmaps (one per grid), cells labelled with MFU and layout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(grids), figsize=(9 * len(grids), 7), squeeze=False)
    vmax = max(float(g["mfu"].max()) for g in grids.values() if len(g)) if grids else 1.0
    models, nodes = _axes(grids)
    for ax, (title, grid) in zip(axes[0], grids.items(), strict=True):
        values = np.full((len(models), len(nodes)), np.nan)
        labels = [["" for _ in nodes] for _ in models]
        for model, n, value, layout in _cells(grid):
            i, j = models.index(model), nodes.index(n)
            values[i, j] = value
            mfu = "" if value != value else f"{value:.0%}\n"
            words = layout.split()
            labels[i][j] = mfu + " ".join(words[:3]) + "\n" + " ".join(words[3:])
        image = ax.imshow(
            values, cmap="viridis", vmin=0, vmax=vmax if vmax == vmax else 1, aspect="auto"
        )
        for i in range(len(models)):
            for j in range(len(nodes)):
                ax.text(
                    j,
                    i,
                    labels[i][j],
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white"
                    if values[i, j] != values[i, j] or values[i, j] < vmax / 2
                    else "black",
                )
        ax.set_xticks(range(len(nodes)), [str(n) for n in nodes])
        ax.set_yticks(range(len(models)), models)
        ax.set_xlabel("nodes (8 GPUs each)" if title else "nodes")
        ax.set_title(title)
        fig.colorbar(image, ax=ax, label="MFU")
    fig.tight_layout()
    out = Path(path)
    try:
        with atomic_path(out) as tmp:
            fig.savefig(tmp, dpi=130, format=out.suffix.lstrip(".").lower() or "png")
    finally:
        plt.close(fig)
    return out


def _colour(value: float, vmax: float) -> str:
    if value != value:
        return "#dddddd"
    t = max(0.0, min(1.0, value / vmax if vmax > 0 else 0.0))
    # white -> dark green
    r, g, b = (int(255 - t * (255 - c)) for c in (0, 110, 60))
    return f"#{r:02x}{g:02x}{b:02x}"


def write_html(grids: dict[str, pd.DataFrame], path: str | Path, *, title: str) -> Path:
    """A self-contained HTML page with one coloured table per grid."""
    vmax = max((float(g["mfu"].max()) for g in grids.values() if len(g)), default=1.0)
    vmax = vmax if vmax == vmax else 1.0
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif}table{border-collapse:collapse;margin:1em}"
        "td,th{border:1px solid #999;padding:4px;font-size:12px;text-align:center}"
        "</style>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    models, nodes = _axes(grids)
    for name, grid in grids.items():
        cells = {(c[0], c[1]): c for c in _cells(grid)}
        parts.append(
            f"<h2>{html.escape(name)}</h2><table><tr><th>model \\ nodes</th>"
            + "".join(f"<th>{n}</th>" for n in nodes)
            + "</tr>"
        )
        for m in models:
            parts.append(f"<tr><th>{html.escape(m)}</th>")
            for n in nodes:
                cell = cells.get((m, n))
                if cell is None:
                    parts.append("<td></td>")
                    continue
                value, layout = cell[2], cell[3]
                mfu = "" if value != value else f"<b>{value:.1%}</b><br>"
                parts.append(
                    f"<td style='background:{_colour(value, vmax)}'>{mfu}{html.escape(layout)}</td>"
                )
            parts.append("</tr>")
        parts.append("</table>")
    out = Path(path)
    atomic_write(out, "\n".join(parts))
    return out
