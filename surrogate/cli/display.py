"""What the commands print around their tables: a console that keeps tables readable at 80
columns (fewer columns when narrow, all of them with ``--wide``), and the summary lines that say
which model and which hardware speed answered, whether any prediction extrapolates, and whether
the learned correction gave way to the physics for a framework."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from surrogate.hardware.perf_models import resolve_perf_model

if TYPE_CHECKING:
    from rich.console import Console

NARROW_COLUMNS = 110
"""Below this terminal width the layout tables drop their secondary columns."""
FULL_COLUMNS = 140
"""From this terminal width (or with ``--wide``) the layout tables add their widest
column, the peak memory's interval."""
WIDE_COLUMNS = 160
"""``--wide`` prints at least this wide (a pipe or a file: nothing is cut)."""


def console(*, wide: bool = False) -> Console:
    """The stdout console; with ``wide`` at least :data:`WIDE_COLUMNS` wide."""
    from rich.console import Console

    out = Console()
    return Console(width=WIDE_COLUMNS) if wide and out.width < WIDE_COLUMNS else out


def is_narrow(out: Console, wide: bool) -> bool:
    return not wide and out.width < NARROW_COLUMNS


def is_full(out: Console, wide: bool) -> bool:
    """Whether the layout tables have room for every column (:data:`FULL_COLUMNS`)."""
    return wide or out.width >= FULL_COLUMNS


def model_line(model: Any, gpu: str, where: str | Path | None = None, profile: Any = None) -> str:
    """``prediction: learned model (bundled, 3,339 runs, data d1ff3287); hardware speed: NAME``
    for a model argument of :func:`surrogate.prediction.predict.resolve_model` ("default", a path, a
    model or None) and the calibration profile that sets the hardware speed (``profile``, else
    the GPU's default)."""
    from surrogate.prediction.predict import resolve_model

    learned = resolve_model(model)
    speed = resolve_perf_model(gpu, profile).name
    if learned is None:
        return f"prediction: analytic model alone; hardware speed: {speed}"
    if where is None:
        where = "bundled" if isinstance(model, str) and model == "default" else str(model)
    n = (learned.n_train_ or {}).get("runs")
    runs = f", {n:,} runs" if isinstance(n, int) else ""
    return (
        f"prediction: learned model ({where}{runs}, data {learned.data_hash_[:8]}); "
        f"hardware speed: {speed}"
    )


def extrapolation_line(values: Iterable[Any]) -> str:
    """Whether any of the predictions extrapolates, and along what."""
    seen = [str(v) for v in values]
    hits = [v for v in seen if v and v.lower() not in ("nan", "none")]
    if not hits:
        return f"extrapolates: no (all {len(seen)} inside the learned model's data)"
    along = sorted({part.strip() for v in hits for part in v.split(";") if part.strip()})
    return (
        f"extrapolates: {len(hits)} of {len(seen)} (the learned correction shrinks toward "
        "the analytic answer) along " + "; ".join(along)
    )


GAVE_WAY = "the whole learned throughput correction predicted no better than the physics under it"
"""Why a framework version keeps only part of the correction
(``SurrogateModel.correction_weight_by_framework_``), as every command says it."""


def gives_way_line(rows: Any) -> str:
    """'' where every row (a table of scores with ``correction_share``, ``framework`` and
    ``framework_version``) keeps the whole learned throughput correction; else which framework
    versions keep only the share their held-out training runs bear out."""
    import pandas as pd

    if "correction_share" not in rows or len(rows) == 0:
        return ""
    share = pd.to_numeric(rows["correction_share"], errors="coerce")
    low = share < 1
    if not low.any():
        return ""
    unknown = pd.Series(["?"] * len(rows), index=share.index)
    framework = rows.get("framework", unknown)
    version = rows.get("framework_version", unknown)
    kept = sorted(
        {
            f"{fw}/{v} keeps {s:.0%}"
            for fw, v, s in zip(framework[low], version[low], share[low], strict=True)
        }
    )
    return (
        f"gives way: on held-out training runs {GAVE_WAY} ("
        + "; ".join(kept)
        + " of it; the rest is the analytic answer)"
    )


def print_correction_lines(out: Console, rows: Any) -> None:
    """Print whether any of the scored ``rows`` extrapolates (:func:`extrapolation_line`),
    and where the learned correction gave way (:func:`gives_way_line`)."""
    import pandas as pd
    from rich.markup import escape

    extrapolation = rows.get("extrapolation", pd.Series([""] * len(rows))).fillna("")
    out.print(escape(extrapolation_line(extrapolation)), highlight=False)
    if gives_way := gives_way_line(rows):
        out.print(f"[yellow]{escape(gives_way)}[/]", highlight=False)


def seq_len_note(hf_config: Path | None, seq_len: int | None, model: Any) -> str | None:
    """What a command says when the sequence length came from a Hugging Face config's
    ``max_position_embeddings`` (the longest the model supports, rarely the length one trains
    at), or None when it was given or came from a preset."""
    if hf_config is None or seq_len is not None:
        return None
    return (
        f"sequence length {model.seq_len:,}: the config's max_position_embeddings (the "
        "longest the model supports); give --seq-len for the length you train at"
    )


def reason(r: dict[str, Any]) -> str:
    """Why ``propose`` picked a run, in words."""
    value = r.get("value")
    if r.get("reason") == "oom-boundary":
        return f"OOM edge (p_oom {r['p_oom']:.2f})"
    if r.get("reason") == "expected-improvement" and value == value and value is not None:
        return f"EI {100 * float(value):.1f} MFU pts"
    if r.get("reason") == "probability-best" and value == value and value is not None:
        return f"best of all: {float(value):.0%}"
    if r.get("reason") == "best-predicted":
        return "best predicted"
    return str(r.get("reason", ""))


def memory_interval(r: dict[str, Any]) -> str:
    """The device's peak memory interval of a scored row, in GiB ('' without one)."""
    lo, hi = r.get("pred_peak_mem_reserved_lo_gib"), r.get("pred_peak_mem_reserved_hi_gib")
    if lo is None or hi is None or lo != lo or hi != hi:
        return ""
    context = r["pred_peak_device_mem_gib"] - r["pred_peak_mem_reserved_gib"]
    return f"{lo + context:.1f}-{hi + context:.1f}"


def layout_table(
    title: str,
    frame: Any,
    *,
    narrow: bool = False,
    full: bool = False,
    reasons: bool = False,
    frameworks: bool = False,
) -> Any:
    """Layouts with their predictions; ``narrow`` leaves out tokens/s and step time so that
    the table stays readable at 80 columns, ``full`` adds the peak memory's 80% interval;
    ``reasons`` adds why each was proposed; ``frameworks`` names each layout's framework
    (a space of several); a ``p_best`` column is shown as P(best) (not beside the reasons
    in a narrow table). Peak memory is the device's (the CUDA context included), its
    interval too."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title)
    cols = ["#", "nodes", "layout", "MFU", "80% interval"]
    cols += [] if narrow else ["tokens/s/GPU", "step s"]
    cols += ["peak GiB"] + (["peak 80%"] if full else [])
    odds = (
        "p_best" in frame.columns
        and bool(frame["p_best"].notna().any())
        and not (narrow and reasons)
    )  # at 80 columns the reasons need the room
    cols += ["p_oom"] + (["P(best)"] if odds else []) + (["why"] if reasons else [])
    for col in cols:
        text = col in ("layout", "why")
        t.add_column(
            col,
            justify="left" if text else "right",
            no_wrap=not text,
            overflow="fold",
            ratio=2 if text else None,
        )
    for i, r in enumerate(frame.to_dict("records"), start=1):
        lo, hi = r["pred_mfu_lo"], r["pred_mfu_hi"]
        interval = "" if lo != lo or lo is None else f"{100 * lo:.1f}-{100 * hi:.1f}%"
        layout = str(r["layout"]) + (f" ({r['framework']})" if frameworks else "")
        row = [str(i), str(r["num_nodes"]), escape(layout), f"{r['pred_mfu']:.1%}", interval]
        if not narrow:
            row += [f"{r['pred_tokens_per_s_per_gpu']:,.0f}", f"{r['pred_step_time_s']:.2f}"]
        row += [f"{r['pred_peak_device_mem_gib']:.1f}"]
        if full:
            row += [memory_interval(r)]
        row += [f"{r['p_oom']:.2f}"] + ([odds_cell(r)] if odds else [])
        t.add_row(*row, *([escape(reason(r))] if reasons else []))
    from surrogate.layouts.labels import label_legend

    notes = [label_legend(frame["layout"].astype(str))] if len(frame) else []
    if odds and "best_set" in frame.columns and bool(frame["best_set"].any()):
        notes.append(BEST_SET_NOTE)
    if reasons and "reason" in frame.columns and (frame["reason"] == "expected-improvement").any():
        notes.append(EI_NOTE)
    if reasons and "reason" in frame.columns and (frame["reason"] == "probability-best").any():
        notes.append(ODDS_NOTE)
    t.caption = escape("; ".join(n for n in notes if n)) or None
    t.caption_justify = "left"
    return t


BEST_SET_NOTE = (
    "*: the layouts that together hold 90% of P(best), which the model cannot tell apart"
)
"""What a P(best) marked * means (:func:`odds_cell`)."""


def odds_cell(r: dict[str, Any]) -> str:
    """A row's P(best), marked * where it is one of the layouts the search cannot tell apart
    (``best_set``: :func:`surrogate.layouts.best_odds.best_set`)."""
    return f"{r['p_best']:.0%}" + ("*" if str(r.get("best_set")) == "True" else "")


def best_set_line(frame: Any) -> str | None:
    """Whether the top of a search is a close call: which of its rows (numbered from 1) the
    model cannot tell apart, or the one that leads clearly; None without P(best)."""
    if "best_set" not in frame.columns or not bool(frame["best_set"].any()):
        return None
    rows = [i for i, held in enumerate(frame["best_set"].tolist(), start=1) if held]
    p = frame["p_best"].to_numpy()
    held = sum(float(p[i - 1]) for i in rows)
    if len(rows) == 1:
        return (
            f"clear lead: #{rows[0]} holds {held / float(p.sum()):.0%} of P(best); the "
            "model tells it apart from the others shown"
        )
    if len(rows) == len(frame):
        return (
            f"close call: the model cannot tell the {len(rows)} shown apart (no fewer hold "
            "90% of P(best)); a larger --top-k shows how far it reaches"
        )
    named = ", ".join(f"#{i}" for i in rows[:-1]) + f" and #{rows[-1]}"
    return (
        f"close call: {named} hold {held:.0%} of P(best) together; the model cannot tell "
        "which is fastest"
    )


ODDS_NOTE = (
    "best of all: the odds that the run completes faster than every other candidate "
    "and the best so far (the best measured run, else the best predicted), its errors "
    "correlated with its neighbours' (the runs go where the model cannot tell layouts "
    "apart)"
)
"""What the ``why`` of a probability-best pick means (:func:`reason`)."""

EI_NOTE = (
    "EI: expected improvement, the MFU points a run is expected to add above the best so "
    "far (the best measured run, else the best predicted), from its 80% interval and "
    "odds of completing: a layout predicted below the best has some"
)
"""What the ``why`` of an expected-improvement pick means (:func:`reason`)."""
