"""How a layout is named: its short label (``dp8 tp4 pp2 mbs2 ...``), one configuration's or a
table's, as search results, proposals and the heatmap show it, and its point of the layout
space (:func:`point_of`: a value per :data:`surrogate.layouts.dimensions.DIMENSIONS`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from surrogate.config.table import FlatTable
from surrogate.config.training import (
    TrainingConfig,
)
from surrogate.layouts.degrees import stage_layers


def layout_label(cfg: TrainingConfig) -> str:
    """A short human label: ``dp8 tp2 pp1 mbs4 ga8 z1`` plus the non-default extras
    (``hsdp4``: four copies of ZeRO's shards; ``rc-full-k3``: full recomputation of 3 layers
    of each pipeline stage)."""
    lay = cfg.layout
    return label_of(
        lay.dp,
        lay.tp,
        lay.pp,
        lay.cp,
        lay.ep,
        lay.vpp,
        lay.mbs,
        lay.grad_accum,
        lay.zero_stage,
        lay.recompute,
        lay.recompute_layers,
        lay.sequence_parallel,
        lay.dp_replicate,
    )


LABEL_FIELDS = (
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "vpp",
    "mbs",
    "grad_accum",
    "zero_stage",
    "recompute",
    "recompute_layers",
    "sequence_parallel",
    "dp_replicate",
)


def layout_labels(table: FlatTable) -> list[str]:
    """:func:`layout_label` of every configuration of a flat table."""
    return [
        label_of(*values) for values in zip(*(table[k].tolist() for k in LABEL_FIELDS), strict=True)
    ]


def label_of(
    dp: int,
    tp: int,
    pp: int,
    cp: int,
    ep: int,
    vpp: int,
    mbs: int,
    grad_accum: int,
    zero_stage: int,
    recompute: str,
    recompute_layers: int,
    sequence_parallel: bool,
    dp_replicate: int = 1,
) -> str:
    parts = [f"dp{dp}", f"tp{tp}", f"pp{pp}"]
    if cp > 1:
        parts.append(f"cp{cp}")
    if ep > 1:
        parts.append(f"ep{ep}")
    if vpp > 1:
        parts.append(f"vpp{vpp}")
    parts += [f"mbs{mbs}", f"ga{grad_accum}", f"z{zero_stage}"]
    if dp_replicate > 1:
        parts.append(f"hsdp{dp_replicate}")
    if recompute != "none":
        parts.append(f"rc-{recompute}" + (f"-k{recompute_layers}" if recompute_layers else ""))
    if sequence_parallel:
        parts.append("sp")
    return " ".join(parts)


def label_legend(labels: Iterable[str]) -> str:
    """What the less obvious parts of ``labels`` (:func:`label_of`) mean, those present only
    (``rc-full-k20: full recomputation of 20 layers of each pipeline stage``); '' for none.
    The degrees, ``mbs``, ``ga`` and ``z`` read as the flags of the same names."""
    parts = sorted({part for label in labels for part in str(label).split()})
    said: dict[str, str] = {}
    for part in parts:
        if part == "rc-selective":
            said[part] = f"{part}: selective recomputation (part of each layer)"
        elif part.startswith("rc-"):
            _, how, *k = part.split("-")
            layers = f"{k[0][1:]} layers of each pipeline stage" if k else "every layer"
            said[part] = f"{part}: {how} recomputation of {layers}"
        elif part.startswith("hsdp"):
            said["hsdp"] = "hsdpN: N copies of ZeRO's shards (hybrid sharding)"
        elif part.startswith("vpp"):
            said["vpp"] = "vppN: N virtual pipeline stages per rank (interleaved)"
        elif part == "sp":
            said[part] = "sp: sequence parallelism"
    return "; ".join(said.values())


def point_of(cfg: TrainingConfig) -> dict[str, Any]:
    """The point (a value per :data:`DIMENSIONS`) of a configuration: its share is its
    checkpointed layers over its stage's (:func:`stage_layers`), 1 for every layer; its
    sharding 'node' where it has copies of the shards (their number is then the node
    sharding's, :func:`node_copies`, in the space's points)."""
    lay = cfg.layout
    share = 1.0
    if lay.recompute_layers:
        share = lay.recompute_layers / stage_layers(
            lay.framework, cfg.model.num_layers, lay.pp, lay.vpp
        )
    return {
        "num_nodes": cfg.cluster.num_nodes,
        "tp": lay.tp,
        "pp": lay.pp,
        "cp": lay.cp,
        "ep": lay.ep,
        "vpp": lay.vpp,
        "mbs": lay.mbs,
        "zero_stage": lay.zero_stage,
        "recompute": lay.recompute,
        "sequence_parallel": lay.sequence_parallel,
        "framework": lay.framework,
        "recompute_share": share,
        "sharding": "node" if lay.dp_replicate > 1 else "full",
    }
