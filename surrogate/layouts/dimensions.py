"""The names of a layout space's dimensions (:class:`~surrogate.layouts.space.LayoutSpace`),
which its table (:mod:`surrogate.layouts.grid`) and the space itself are built on."""

from __future__ import annotations

from typing import Literal, get_args

DIMENSIONS: tuple[str, ...] = (
    "num_nodes",
    "tp",
    "pp",
    "cp",
    "ep",
    "vpp",
    "mbs",
    "zero_stage",
    "recompute",
    "sequence_parallel",
    "framework",
    "recompute_share",
    "sharding",
)
"""The free choices of a point, in the order
:meth:`~surrogate.layouts.space.LayoutSpace.choices` lists them.
``recompute_share`` is a choice only where the point's recomputation is full and its framework
checkpoints some layers; elsewhere it is 1 (every layer, or none). ``sharding``
(:data:`SHARDINGS`) is a choice only where the point's framework copies ZeRO's shards at its
ZeRO stage (``FrameworkTraits.hybrid_sharding_stages``); elsewhere it is 'full'."""

Sharding = Literal["full", "node"]
SHARDINGS: tuple[Sharding, ...] = get_args(Sharding)
"""How ZeRO shards a point's states: 'full', over every data- and context-parallel rank;
'node', over those of one node, with a copy of the shards per node (hybrid sharding, HSDP:
``dp_replicate`` = dp x cp / the group's ranks on a node,
:func:`~surrogate.layouts.degrees.node_copies`), the usual recipe (PyTorch FSDP's
``HYBRID_SHARD`` shards within a node by default). Other shard groups are weighed by
``surrogate predict --dp-replicate``."""

REST_DIMENSIONS: tuple[str, ...] = DIMENSIONS[4:]
"""The dimensions after the degrees' heads, in the order points are generated."""
