"""The model-shape flags that `predict`, `search` and `propose` share.

Each overrides the preset (``--model``) or the Hugging Face config (``--hf-config``) it is
given with, so one model is described the same way whichever command scores it.
:data:`SHAPE_FLAGS` names them in :class:`surrogate.config.ModelConfig`'s fields; the CLI tests
check that every such command takes each of them.
"""

from __future__ import annotations

from typing import Annotated

import typer

LayersOpt = Annotated[int | None, typer.Option(help="Transformer layers (shape flags override the preset or --hf-config).")]
HiddenOpt = Annotated[int | None, typer.Option(help="Hidden size.")]
FfnOpt = Annotated[int | None, typer.Option(help="Width of the dense SwiGLU MLP.")]
HeadsOpt = Annotated[int | None, typer.Option(help="Attention (query) heads.")]
KvHeadsOpt = Annotated[int | None, typer.Option(help="Key/value heads (GQA; default: --num-heads).")]
VocabOpt = Annotated[int | None, typer.Option(help="Vocabulary size.")]
TieOpt = Annotated[bool | None, typer.Option("--tie-embeddings/--no-tie-embeddings", help="Input and output embeddings shared.")]
ExpertsOpt = Annotated[int | None, typer.Option(help="Routed experts per MoE layer (0: dense).")]
TopkOpt = Annotated[int | None, typer.Option(help="Experts each token is routed to.")]
MoeFfnOpt = Annotated[int | None, typer.Option(help="Width of one expert's MLP (default: --ffn-hidden-size).")]

SHAPE_FLAGS = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_heads", "num_kv_heads", "vocab_size",
    "tie_embeddings", "num_experts", "experts_topk", "moe_ffn_hidden_size",
)
"""The shape flags' parameter names, each a :class:`surrogate.config.ModelConfig` field."""


def shape_flags(arguments: dict[str, object]) -> dict[str, object]:
    """The shape flags among a command's arguments (its ``locals()``), by field name."""
    return {name: arguments[name] for name in SHAPE_FLAGS}
