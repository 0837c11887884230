"""The model of a training run: the shape of its transformer (:class:`ModelConfig`), a Llama
block and its variants (grouped-query and multi-head latent attention, mixtures of experts with
shared experts and dense first layers)."""

from __future__ import annotations

from dataclasses import dataclass

from surrogate.config.checks import check_bool, check_ints, positive_int
from surrogate.errors import ConfigError

MLA_FIELDS: tuple[str, ...] = (
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)
ARCHITECTURE_FIELDS: tuple[str, ...] = (
    "head_dim",
    "shared_expert_ffn_hidden_size",
    "num_dense_layers",
    *MLA_FIELDS,
)
"""Model columns describing the variants of the Llama block (ModelConfig docstring); each 0
by default, so tables written before they existed read as Llama blocks."""


def swiglu_equivalent_width(width: int) -> int:
    """The SwiGLU width ``ffn_hidden_size`` of a two-matrix MLP of width ``width`` (a GELU
    MLP, :attr:`ModelConfig.gated_mlp` False): the same parameters and FLOPs per token,
    3 h f = 2 h width, f = round(2 width / 3)."""
    return round(2 * width / 3)


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A decoder-only transformer (Llama style: GQA attention, SwiGLU MLP, RMSNorm, no biases).

    The fields after ``moe_ffn_hidden_size`` describe the variants of the families
    :func:`surrogate.config.hf_config.model_from_hf_config` reads; their defaults (0) give the Llama
    block:
    an explicit ``head_dim`` (Gemma, Qwen3), shared experts and leading dense layers
    (Qwen2-MoE, DeepSeek) and multi-head latent attention (DeepSeek-V2/V3, when
    ``kv_lora_rank`` > 0; DeepSeek-AI 2024, "DeepSeek-V2", sec. 2.1).

    Build one from a preset (``surrogate.config.presets.get_preset("llama3-8b")``), a Hugging Face
    ``config.json`` (``surrogate.config.hf_config.model_from_hf_config``) or the fields below, all
    keyword-only; the instance is frozen.

    Raises:
        ConfigError: A count is not a positive integer (the variant fields: not a
            non-negative one) or a flag not a boolean; ``hidden_size`` is not divisible by
            ``num_heads`` (without ``head_dim``), nor ``num_heads`` by ``num_kv_heads``;
            ``num_experts`` is 1, ``experts_topk`` is outside 1..``num_experts``, or the MoE
            or MLA fields are set without the experts or the latent rank they need. The
            message names the rule and the values given.
    """

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    """Width of the SwiGLU MLP (Hugging Face ``intermediate_size``)."""
    num_heads: int
    num_kv_heads: int
    """Key/value heads (GQA); equal to num_heads for multi-head attention."""
    vocab_size: int
    seq_len: int
    """Tokens per sequence."""
    tie_embeddings: bool = False
    num_experts: int = 0
    """Routed experts per MoE layer; 0 for a dense model."""
    experts_topk: int = 0
    """Experts each token is routed to (MoE only)."""
    moe_ffn_hidden_size: int = 0
    """Width of one expert's MLP; 0 means ffn_hidden_size (MoE only)."""
    head_dim: int = 0
    """Width of one query, key and value head; 0 means hidden_size / num_heads. Gemma and Qwen3
    set it so that num_heads x head_dim differs from hidden_size (HF ``head_dim``)."""
    shared_expert_ffn_hidden_size: int = 0
    """Width of the shared-expert MLP every token passes through beside its routed experts
    (MoE only; DeepSeek ``n_shared_experts x moe_intermediate_size``, Qwen2-MoE
    ``shared_expert_intermediate_size``); 0 for none."""
    num_dense_layers: int = 0
    """Leading layers whose MLP is dense (width ffn_hidden_size) instead of experts (MoE only;
    DeepSeek ``first_k_dense_replace``)."""
    q_lora_rank: int = 0
    """MLA: rank of the compressed query (0: queries are projected directly from the hidden
    state, as in DeepSeek-V2-Lite)."""
    kv_lora_rank: int = 0
    """MLA: rank of the compressed key-value latent; > 0 selects multi-head latent attention."""
    qk_nope_head_dim: int = 0
    """MLA: per-head query/key width without rotary embedding."""
    qk_rope_head_dim: int = 0
    """MLA: per-head query/key width carrying the rotary embedding (the key part is shared by
    all heads)."""
    v_head_dim: int = 0
    """MLA: per-head value width."""
    gated_mlp: bool = True
    """False: the dense MLP is two matrices around an element-wise activation (GELU: GPT-2,
    GPT-NeoX, MPT) instead of SwiGLU's three. ``ffn_hidden_size`` is then the SwiGLU width of
    the same parameters and FLOPs, two thirds of the MLP's own (MPT's 4 h becomes 8 h / 3:
    :func:`swiglu_equivalent_width`); what differs is memory: the MLP keeps its
    activation's input and output, 2 x 2 T x 4 h bytes = 3 x 2 T ffn, where SwiGLU keeps four
    T x ffn tensors (``surrogate.analytic.activations``). Dense models only."""
    name: str = "custom"

    def __post_init__(self) -> None:
        check_ints(
            self,
            (
                "num_layers",
                "hidden_size",
                "ffn_hidden_size",
                "num_heads",
                "num_kv_heads",
                "vocab_size",
                "seq_len",
            ),
        )
        check_ints(self, ("num_experts", "experts_topk", "moe_ffn_hidden_size"), minimum=0)
        check_ints(self, ARCHITECTURE_FIELDS, minimum=0)
        check_bool(self, "tie_embeddings")
        check_bool(self, "gated_mlp")
        if not self.head_dim and not self.is_mla and self.hidden_size % self.num_heads:
            raise ConfigError(
                f"hidden_size must be divisible by num_heads, got hidden_size={self.hidden_size} "
                f"num_heads={self.num_heads}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"num_heads must be divisible by num_kv_heads, got num_heads={self.num_heads} "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.num_experts == 1:
            raise ConfigError("num_experts must be 0 (dense) or >= 2, got 1")
        if self.is_moe and not 1 <= self.experts_topk <= self.num_experts:
            raise ConfigError(
                f"experts_topk must be between 1 and num_experts={self.num_experts}, "
                f"got {self.experts_topk}"
            )
        if self.is_moe and not self.gated_mlp:
            raise ConfigError(
                f"gated_mlp=False (a two-matrix MLP) is modelled for dense models only, got "
                f"num_experts={self.num_experts}"
            )
        if not self.is_moe and (self.experts_topk or self.moe_ffn_hidden_size):
            raise ConfigError(
                "experts_topk and moe_ffn_hidden_size need num_experts >= 2, got "
                f"num_experts={self.num_experts} experts_topk={self.experts_topk} "
                f"moe_ffn_hidden_size={self.moe_ffn_hidden_size}"
            )
        self._check_architecture()

    def _check_architecture(self) -> None:
        """The variant fields (head_dim, shared experts, dense layers, MLA) agree."""
        if not self.is_moe and (self.shared_expert_ffn_hidden_size or self.num_dense_layers):
            raise ConfigError(
                "shared_expert_ffn_hidden_size and num_dense_layers need num_experts >= 2, got "
                f"num_experts={self.num_experts} shared_expert_ffn_hidden_size="
                f"{self.shared_expert_ffn_hidden_size} num_dense_layers={self.num_dense_layers}"
            )
        if self.num_dense_layers >= self.num_layers:
            raise ConfigError(
                f"num_dense_layers must be < num_layers (an MoE model has MoE layers), got "
                f"num_dense_layers={self.num_dense_layers} num_layers={self.num_layers}"
            )
        mla = {n: getattr(self, n) for n in MLA_FIELDS}
        if not self.is_mla:
            if any(mla.values()):
                given = " ".join(f"{n}={v}" for n, v in mla.items() if v)
                raise ConfigError(
                    f"the MLA fields need kv_lora_rank >= 1, got kv_lora_rank=0 {given}"
                )
            return
        for n in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            positive_int(type(self).__name__, n, mla[n])
        if self.head_dim:
            raise ConfigError(
                f"head_dim must be 0 with MLA (its widths are qk_nope_head_dim, "
                f"qk_rope_head_dim and v_head_dim), got head_dim={self.head_dim}"
            )
        if self.num_kv_heads != self.num_heads:
            raise ConfigError(
                f"MLA has one key and value per head: num_kv_heads must equal num_heads, got "
                f"num_kv_heads={self.num_kv_heads} num_heads={self.num_heads}"
            )

    @property
    def is_moe(self) -> bool:
        return self.num_experts >= 2

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def attention_head_dim(self) -> int:
        """Query/key width of one head: head_dim, or hidden_size / num_heads when 0; with MLA
        qk_nope_head_dim + qk_rope_head_dim."""
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def value_head_dim(self) -> int:
        """Value width of one head (v_head_dim with MLA, else attention_head_dim)."""
        return self.v_head_dim if self.is_mla else self.attention_head_dim

    @property
    def expert_ffn_hidden_size(self) -> int:
        """Width of one expert's MLP (MoE); ffn_hidden_size when not given."""
        return self.moe_ffn_hidden_size or self.ffn_hidden_size
