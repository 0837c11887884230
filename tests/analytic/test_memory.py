"""Per-GPU memory: the seed figures, ZeRO sharding, activations, and invariants over grids."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from surrogate.analytic import activations, flops, memory, pipeline
from surrogate.analytic.inputs import to_cols
from surrogate.analytic.params import param
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.frameworks import FRAMEWORKS
from surrogate.config.gpus import GIB
from surrogate.config.model import ModelConfig

STATE_TERMS = ("weights", "gradients", "optimizer")
LLAMA2_7B = ModelConfig(  # Touvron et al. 2023: 6.74e9 parameters, "7B"
    name="llama2-7b",
    num_layers=32,
    hidden_size=4096,
    ffn_hidden_size=11008,
    num_heads=32,
    num_kv_heads=32,
    vocab_size=32000,
    seq_len=4096,
)


def states(parts: dict[str, np.ndarray]) -> np.ndarray:
    return sum(parts[k] for k in STATE_TERMS)


# --- seed figures ----------------------------------------------------------------------------


def test_seed_7b_zero3_on_8_gpus_is_14_gb(cols):
    """Seed: 7B parameters x 16 bytes / 8 GPUs = 14 GB of model states per GPU (ZeRO-3)."""
    c = cols(LLAMA2_7B, dp=8, zero_stage=3, framework="torchtitan")
    got = float(states(memory.model_state_bytes(c, np.array([7e9]), np.array([0.0])))[0])
    err = abs(got - 14e9) / 14e9
    print(
        f"7B ZeRO-3 / 8 GPUs, explicit 7e9 params: {got / 1e9:.3f} GB vs 14 GB, "
        f"rel. error {err:.2e}"
    )
    assert err < 1e-12
    # The same through the whole breakdown of a real 7B shape (6.74e9 parameters).
    built = float(states(memory.memory_breakdown(c))[0])
    err = abs(built - 14e9) / 14e9
    print(
        f"7B ZeRO-3 / 8 GPUs, Llama-2-7B shape: {built / 1e9:.3f} GB vs 14 GB, rel. error {err:.2%}"
    )
    assert err < 0.05


def test_seed_80b_on_32_gpus_is_at_least_40_gb(config):
    """Seed: 80B x 16 bytes / 32 GPUs = 40 GB, the least any layout of 32 GPUs can hold."""
    c = to_cols(
        [config("80b", dp=32, zero_stage=3, framework="torchtitan")], shipped_parameter_sets()
    )
    explicit = float(states(memory.model_state_bytes(c, np.array([80e9]), np.array([0.0])))[0])
    assert explicit == pytest.approx(40e9, rel=1e-12)
    layouts = [
        config("80b", dp=32 // (tp * pp), tp=tp, pp=pp, zero_stage=z, framework=fw)
        for tp, pp in itertools.product([1, 2, 4, 8], [1, 2, 4])
        for fw, z in (
            ("torchtitan", 0),
            ("torchtitan", 2),
            ("torchtitan", 3),
            ("megatron", 3),
            ("nanotron", 1),
        )
    ]
    # The most loaded rank by model states: with torchtitan's split the rank that needs the
    # most memory in all can be stage 1, whose extra layer weighs less than the embedding.
    cols = to_cols(layouts, shipped_parameter_sets())
    per_gpu = np.nanmax([states(memory.stage_memory(cols, s)) for s in range(4)], axis=0)
    best = float(per_gpu.min())
    err = abs(best - 40e9) / 40e9
    print(
        f"80B on 32 GPUs: least model states over {len(layouts)} layouts {best / 1e9:.3f} GB "
        f"vs 40 GB, rel. error {err:.2%}"
    )
    assert err < 0.01
    assert np.all(per_gpu >= 40e9 * 0.99)


# --- model states ----------------------------------------------------------------------------


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_bytes_per_param_under_each_zero_stage(cols, framework):
    dp, n = 8, np.array([1e9])
    accum = 4 * FRAMEWORKS[framework].fp32_grad_accumulation
    bf16 = 2 * FRAMEWORKS[framework].keeps_bf16_gradients
    for z in FRAMEWORKS[framework].zero_stages:
        c = cols("8b", dp=dp, zero_stage=z, framework=framework)
        s = memory.model_state_bytes(c, n, np.array([0.0]))
        assert s["weights"][0] == 2e9 / (dp if z >= 3 else 1)
        assert s["gradients"][0] == (bf16 + accum) * 1e9 / (dp if z >= 2 else 1)
        assert s["optimizer"][0] == 12e9 / (dp if z >= 1 else 1)


def test_megatron_distributed_optimizer_keeps_6_plus_12_over_d_bytes_per_param(cols):
    """Megatron-Core's distributed optimizer (ZeRO-1): bf16 parameter, fp32 main_grad (no
    bf16 gradient beside it), fp32 main parameter and two moments sharded over d; nanotron
    keeps a bf16 gradient beside its fp32 accumulator, 2 bytes more."""
    n, none = np.array([1e9]), np.array([0.0])
    for dp in (1, 2, 8):
        c = cols("8b", dp=dp, zero_stage=1, framework="megatron")
        assert states(memory.model_state_bytes(c, n, none))[0] == pytest.approx((6 + 12 / dp) * 1e9)
        c = cols("8b", dp=dp, zero_stage=1, framework="nanotron")
        assert states(memory.model_state_bytes(c, n, none))[0] == pytest.approx((8 + 12 / dp) * 1e9)


@pytest.mark.parametrize(
    ("framework", "zero"), [("torchtitan", 2), ("torchtitan", 3), ("megatron", 1)]
)
def test_copies_of_the_shards_shard_over_fewer_ranks(cols, framework, zero):
    """Hybrid sharding: each of dp_replicate copies shards over dp x cp / dp_replicate ranks,
    and so do the optimizer's update and (MoE) the experts, over ep."""
    n = np.array([1e9])
    full = memory.model_state_bytes(
        cols("8b", dp=16, zero_stage=zero, framework=framework), n, np.array([0.0])
    )
    c = cols("8b", dp=16, zero_stage=zero, dp_replicate=4, framework=framework)
    hybrid = memory.model_state_bytes(c, n, np.array([0.0]))
    assert memory.zero_shard_ranks(c)[0] == 4
    assert hybrid["optimizer"][0] == pytest.approx(4 * full["optimizer"][0])
    assert hybrid["optimizer"][0] == pytest.approx(12e9 / 4)
    moe = cols(
        "mixtral-8x7b", dp=8, cp=2, ep=4, zero_stage=3, dp_replicate=2, framework="torchtitan"
    )
    s = memory.model_state_bytes(moe, np.array([0.0]), np.array([1e9]))
    assert s["optimizer"][0] == pytest.approx(12e9 / (8 * 2 / 2 / 4))


def test_expert_states_shard_over_dp_cp_over_ep(cols):
    m = "mixtral-8x7b"
    c = cols(m, dp=8, ep=4, zero_stage=3, framework="torchtitan")
    s = memory.model_state_bytes(c, np.array([0.0]), np.array([1e9]))
    assert s["optimizer"][0] == pytest.approx(12e9 / (8 / 4))


def test_tp_and_ep_split_parameters(cols):
    base = cols("mixtral-8x7b", dp=8)
    split = cols("mixtral-8x7b", dp=2, tp=4, ep=2)
    d0, e0 = memory.stage_params(base, np.array([32.0]), first=True, last=True)
    d1, e1 = memory.stage_params(split, np.array([32.0]), first=True, last=True)
    assert e1[0] == pytest.approx(e0[0] / 8)
    assert d0[0] / 4 < d1[0] < d0[0] / 3  # norms and the router stay replicated


def test_folded_experts_are_whole_and_shard_their_states_over_tp_dp_cp_over_ep(cols):
    """Megatron's folded experts (expert tensor parallelism 1): a rank holds num_experts / ep
    experts whole, tp times the share of experts split by tp (expert tensor parallelism tp,
    megatron-core's default: the column set to 0); its distributed optimizer shards their
    states over tp x dp x cp / ep ranks, so the optimizer's bytes per rank are the same and
    the weights' and gradients' tp times more; the dense parameters alike; the copies of the
    routed tokens those a rank routes, T / tp x k of them."""
    mega = cols(
        "mixtral-8x7b", dp=4, tp=2, ep=4, zero_stage=1, sequence_parallel=True, framework="megatron"
    )
    unfolded = {**mega, "moe_parallel_folding": np.zeros(1)}
    layers = np.array([32.0])
    d0, e0 = memory.stage_params(unfolded, layers, first=True, last=True)
    d1, e1 = memory.stage_params(mega, layers, first=True, last=True)
    assert d1[0] == d0[0] and e1[0] == pytest.approx(2 * e0[0])
    assert e1[0] == pytest.approx(32 * flops.expert_params_per_layer(mega)[0] / 4)
    s0, s1 = (
        memory.model_state_bytes(c, np.array([0.0]), e) for c, e in ((unfolded, e0), (mega, e1))
    )
    assert s1["optimizer"][0] == pytest.approx(s0["optimizer"][0])
    assert s1["optimizer"][0] == pytest.approx(12 * e1[0] / (2 * 4 / 4))
    assert s1["weights"][0] == pytest.approx(2 * s0["weights"][0])
    assert s1["gradients"][0] == pytest.approx(2 * s0["gradients"][0])
    h, k, t = 4096, 2, 32768  # the preset's hidden size, top-k and sequence
    mlp = (
        activations.activation_terms_per_layer(unfolded)["mlp"][0]
        - activations.activation_terms_per_layer(mega)["mlp"][0]
    )
    assert mlp == pytest.approx(t * k * h * 2 * (1 - 1 / 2))


def test_without_tp_folding_changes_nothing(cols):
    kw = dict(dp=8, ep=8, zero_stage=1)
    mega = cols("mixtral-8x7b", **kw, framework="megatron")
    unfolded = {**mega, "moe_parallel_folding": np.zeros(1)}
    for a, b in ((memory.memory_breakdown(mega), memory.memory_breakdown(unfolded)),):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


# --- activations -----------------------------------------------------------------------------

ACT_GRID = [
    dict(model=m, tp=tp, cp=cp, mbs=mbs)
    for m, tp, cp, mbs in itertools.product(
        ["playbook-1.34b", "llama3-8b", "mixtral-8x7b"], [1, 2, 4, 8], [1, 2], [1, 4]
    )
]


def _act(config, recompute="none", sp=False, **kw):
    kw = dict(kw)
    model = kw.pop("model")
    c = to_cols(
        [config(model, dp=1, recompute=recompute, sequence_parallel=sp, **kw)],
        shipped_parameter_sets(),
    )
    return float(activations.activation_bytes_per_layer(c)[0]), float(
        memory.memory_breakdown(c)["activations"][0]
    )


@pytest.mark.parametrize("kw", ACT_GRID, ids=str)
def test_full_recompute_lowers_activations(config, kw):
    for sp in (False, True):
        none_layer, none_total = _act(config, "none", sp, **kw)
        full_layer, full_total = _act(config, "full", sp, **kw)
        assert full_layer < none_layer and full_total < none_total
        assert _act(config, "selective", sp, **kw) == (none_layer, none_total)


@pytest.mark.parametrize("kw", ACT_GRID, ids=str)
def test_sequence_parallel_lowers_activations_when_tp_above_1(config, kw):
    for recompute in ("none", "full"):
        plain = _act(config, recompute, False, **kw)
        sp = _act(config, recompute, True, **kw)
        if kw["tp"] > 1:
            assert sp[0] < plain[0] and sp[1] < plain[1]
        else:
            assert sp == plain


def test_activations_by_hand(cols):
    # T = 2 x 4096 tokens, h = 2048, kv = h (MHA), ffn = 8192, tp = 2, no SP:
    # replicated 4 x 2 T h; split (2 x 2 T h + 2 x 2 T kv + 4 x 2 T ffn) / tp
    c = cols("playbook-1.34b", dp=4, tp=2, mbs=2)
    T, h, ffn = 2 * 4096, 2048, 8192
    expected = 8 * T * h + (4 * T * h + 4 * T * h + 8 * T * ffn) / 2
    assert activations.activation_bytes_per_layer(c)[0] == expected
    full = cols("playbook-1.34b", dp=4, tp=2, mbs=2, recompute="full", sequence_parallel=True)
    assert activations.activation_bytes_per_layer(full)[0] == 2 * T * h / 2


def test_megatron_keeps_its_linear_inputs_in_fp8(cols):
    """Under fp8 Megatron-Core on Transformer Engine keeps the QKV and MLP-in projections'
    normed inputs and the MLP-out projection's input at 1 byte, and an FP8 copy of the
    attention output: T (2 h - o + ffn) / tp bytes fewer a layer (sequence parallel, o = h);
    torchtitan's Float8 linears keep their bf16 inputs."""
    T, h, ffn, tp = 8192, 4096, 14336, 2
    kw = dict(dp=4, tp=tp, sequence_parallel=True)
    layer = {
        (fw, dtype): activations.activation_bytes_per_layer(
            cols("8b", framework=fw, dtype=dtype, **kw)
        )[0]
        for fw in ("megatron", "torchtitan")
        for dtype in ("bf16", "fp8")
    }
    assert layer["megatron", "bf16"] - layer["megatron", "fp8"] == T * (h + ffn) / tp
    assert layer["torchtitan", "fp8"] == layer["torchtitan", "bf16"]


def test_megatron_and_llm_foundry_state_their_activation_scale_the_others_take_their_sets(cols):
    """Megatron-Core's and llm-foundry's stored activations over the count are 1.08
    (FrameworkTraits: bf16 residual streams, no memory measured), not the default set's 1.20;
    nanotron's and torchtitan's under FSDP alone come from their parameter sets (torchtitan's
    tp / pp / cp layouts take 1.08: tests/config/test_frameworks.py)."""
    for fw, z in (("megatron", 1), ("llm-foundry", 3)):
        c = cols("8b", dp=8, framework=fw, zero_stage=z)
        assert memory.activation_scale(c)[0] == 1.08
        assert param(c, "activation_scale")[0] > 1.15  # the default set's, which they leave
    for fw, z in (("nanotron", 1), ("torchtitan", 2)):
        c = cols("8b", dp=8, framework=fw, zero_stage=z)
        assert memory.activation_scale(c)[0] == param(c, "activation_scale")[0]


def test_llm_foundry_keeps_what_mpts_block_saves(cols):
    """An MPT block (LayerNorm, fused QKV, ALiBi flash attention, GELU MLP of width 4 h) keeps
    16 T x h bf16 tensors a layer, the count read from llm-foundry's MPTBlock (two norm inputs,
    two projection inputs, the fused QKV output, the attention output, the GELU's input and
    output of 4 h each); its stage keeps that times 1.08 and no more, the default set's 1.20 set
    aside (FrameworkTraits.activation_scale)."""
    h, s, mbs, layers = 128, 64, 2, 4
    mpt = ModelConfig(
        num_layers=layers,
        hidden_size=h,
        ffn_hidden_size=8 * h // 3,  # 4 h of GELU as its SwiGLU-equivalent width (rounded)
        num_heads=4,
        num_kv_heads=4,
        vocab_size=1000,
        seq_len=s,
        gated_mlp=False,
        tie_embeddings=True,
    )
    c = cols(mpt, dp=8, mbs=mbs, zero_stage=3, framework="llm-foundry")
    T, ffn = mbs * s, 8 * h // 3
    layer = activations.activation_bytes_per_layer(c)[0]
    assert layer == 2 * T * (2 * h + 2 * h + 4 * h) + 3 * 2 * T * ffn
    assert layer == pytest.approx(16 * 2 * T * h, rel=1 / (8 * h))
    kept = memory.memory_breakdown(c)["activations"][0]
    assert kept == pytest.approx(1.08 * layers * layer, rel=1e-12)


def test_torchtitan_pipelines_keep_fsdp_states_unsharded(cols):
    """pipeline_keeps_fsdp_unsharded: torchtitan with pp > 1 under ZeRO-2/3 holds its stage's
    parameters unsharded in bf16 and their gradients unsharded in fp32 (6 bytes a parameter
    beside the sharded optimizer); without a pipeline, and for Megatron, the ZeRO count."""
    n, none = np.array([1e9]), np.array([0.0])
    for z in (2, 3):
        piped = memory.model_state_bytes(
            cols("8b", dp=4, pp=2, zero_stage=z, framework="torchtitan"), n, none
        )
        assert piped["weights"][0] == 2e9 and piped["gradients"][0] == 4e9
        assert piped["optimizer"][0] == 12e9 / 4
        flat = memory.model_state_bytes(
            cols("8b", dp=8, zero_stage=z, framework="torchtitan"), n, none
        )
        assert flat["gradients"][0] == 2e9 / 8
    mg = memory.model_state_bytes(
        cols("8b", dp=4, pp=2, zero_stage=3, framework="megatron"), n, none
    )
    assert mg["weights"][0] == 2e9 / 4


def test_variant_activations_by_hand(cols):
    """Explicit head_dim, MLA, shared experts (memory module docstring, Variants)."""
    T, h = 2 * 32, 64
    base = dict(
        num_layers=4,
        hidden_size=h,
        ffn_hidden_size=128,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=100,
        seq_len=32,
    )
    c = cols(ModelConfig(**base, head_dim=32), dp=1, mbs=2)  # Q, out 4 x 32; K, V 2 x 32
    expected = 8 * T * h + 2 * T * 128 + 2 * T * 128 + 4 * T * 64 + 8 * T * 128
    assert activations.activation_bytes_per_layer(c)[0] == expected
    mla = ModelConfig(
        **dict(base, num_kv_heads=4),
        q_lora_rank=16,
        kv_lora_rank=8,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
    )
    c = cols(mla, dp=1, mbs=2)  # Q, K 4 x 12; V, out 4 x 8; latents 2 x 16 + 2 x 8 + 4
    latents = 2 * T * (2 * 16 + 2 * 8 + 4)
    expected = 8 * T * h + latents + 4 * T * 48 + 4 * T * 32 + 8 * T * 128
    assert activations.activation_bytes_per_layer(c)[0] == expected
    moe = ModelConfig(
        **dict(base, num_kv_heads=4),
        num_experts=4,
        experts_topk=2,
        moe_ffn_hidden_size=32,
        shared_expert_ffn_hidden_size=64,
        num_dense_layers=1,
    )
    c = cols(moe, dp=1, mbs=2)  # MLP width per token: 3/4 x (2 x 32 + 64) + 1/4 x 128
    routed = 3 / 4 * 2 * T * h * 2  # 3 of 4 layers route: 2 copies of each token, 2 bytes
    expected = 8 * T * h + 4 * T * h + 4 * T * h + 8 * T * 128 + routed
    assert activations.activation_bytes_per_layer(c)[0] == expected
    # torchtitan: also the fp32 weighted copy, and its grouped GEMM's padding: up to a
    # multiple of 8 (2 T tokens routed: none) and 8 rows per expert, each kept like a routed
    # token (its 2 h input and 4 expert-wide activations), in the 3 layers that route.
    titan = cols(moe, dp=1, mbs=2, framework="torchtitan")
    padding = 3 / 4 * 8 * 4 * (2 * h + 4 * 2 * 32)
    assert activations.activation_bytes_per_layer(titan)[0] == expected + 2 * routed + padding


def test_a_two_matrix_mlp_keeps_its_activation_input_and_output(cols):
    """A GELU MLP of width 4 h, given by its SwiGLU-equivalent ffn = 8 h / 3, keeps 2 x 2 T x 4 h
    bytes (the GELU's input and output: 3 x 2 T ffn), where SwiGLU keeps 4 x 2 T ffn."""
    T, h = 2 * 32, 96
    base = dict(
        num_layers=4,
        hidden_size=h,
        ffn_hidden_size=256,
        num_heads=4,
        num_kv_heads=4,
        vocab_size=100,
        seq_len=32,
    )
    gated = cols(ModelConfig(**base), dp=1, mbs=2)
    gelu = cols(ModelConfig(**base, gated_mlp=False), dp=1, mbs=2)
    got = activations.activation_terms_per_layer(gelu)["mlp"][0]
    assert got == 2 * 2 * T * (4 * h) == 3 * 2 * T * 256
    assert activations.activation_terms_per_layer(gated)["mlp"][0] == 4 * 2 * T * 256
    # FLOPs are those of the equivalent width: the same either way
    assert flops.total_params(gelu)[0] == flops.total_params(gated)[0]


def test_a_fused_cross_entropy_keeps_four_bytes_per_logit(cols):
    """llm-foundry's fused cross entropy: bf16 logits and their bf16 gradient at the loss, not
    the fitted logit_bytes of a loss through fp32 (FrameworkTraits.fused_cross_entropy)."""
    model = ModelConfig(
        num_layers=4,
        hidden_size=96,
        ffn_hidden_size=256,
        num_heads=4,
        num_kv_heads=4,
        vocab_size=1000,
        seq_len=32,
    )
    foundry = cols(model, dp=2, mbs=2, zero_stage=3, framework="llm-foundry")
    nanotron = cols(model, dp=2, mbs=2, framework="nanotron")
    logits = 2 * 32 * 1000
    assert memory.logits_bytes(foundry)[0] == memory.FUSED_LOGIT_BYTES * logits == 4 * logits
    assert memory.logits_bytes(nanotron)[0] == param(nanotron, "logit_bytes")[0] * logits
    # Megatron-Core with Transformer Engine's fused cross entropy (Megatron-Bridge's recipes)
    megatron = cols(model, dp=2, mbs=2, zero_stage=1, framework="megatron")
    assert memory.logits_bytes(megatron)[0] == 4 * logits


def test_leading_dense_layers_sit_on_the_first_stage(cols):
    m = ModelConfig(
        num_layers=4,
        hidden_size=64,
        ffn_hidden_size=128,
        num_heads=4,
        num_kv_heads=4,
        vocab_size=100,
        seq_len=32,
        num_experts=4,
        experts_topk=2,
        moe_ffn_hidden_size=32,
        shared_expert_ffn_hidden_size=64,
        num_dense_layers=2,
    )
    c = cols(m, dp=1, pp=2, framework="megatron")  # even split: layers 0-1, then 2-3
    two = np.array([2.0])
    attn_norms, dense_mlp = 4 * 64 * 64 + 2 * 64, 3 * 64 * 128
    router, shared, experts = 64 * 4, 3 * 64 * 64, 4 * 3 * 64 * 32
    dense, expert = memory.stage_params(c, two, first=True, last=False)
    assert (dense[0], expert[0]) == (2 * (attn_norms + dense_mlp) + 100 * 64, 0)
    dense, expert = memory.stage_params(c, two, first=False, last=True)
    assert (dense[0], expert[0]) == (
        2 * (attn_norms + router + shared) + 100 * 64 + 64,
        2 * experts,
    )
    _, expert = memory.stage_params(cols(m, dp=1), np.array([4.0]), first=True, last=True)
    assert expert[0] == 2 * experts


def test_cp_splits_activations_and_logits(cols):
    one = cols("llama3-8b", dp=8)
    two = cols("llama3-8b", dp=4, cp=2)
    act = activations.activation_bytes_per_layer
    assert act(two)[0] == act(one)[0] / 2
    assert memory.logits_bytes(two)[0] == memory.logits_bytes(one)[0] / 2
    per_logit = one["p_logit_bytes"][0]
    assert memory.logits_bytes(one)[0] == per_logit * 8192 * 128256


# --- the breakdown ---------------------------------------------------------------------------

BREAKDOWN_GRID = [
    dict(
        model=m,
        dp=8 // (tp * pp),
        tp=tp,
        pp=pp,
        zero_stage=z,
        framework=fw,
        recompute=r,
        sequence_parallel=sp,
        grad_accum=4,
    )
    for m, (tp, pp), (fw, z), r, sp in itertools.product(
        ["playbook-1.34b", "llama3-8b"],
        [(1, 1), (2, 2), (1, 4), (8, 1)],
        [("nanotron", 0), ("nanotron", 1), ("torchtitan", 2), ("megatron", 3)],
        ["none", "full"],
        [False, True],
    )
]


def test_breakdown_terms_sum_to_total(config):
    configs = [config(kw.pop("model"), **kw) for kw in (dict(k) for k in BREAKDOWN_GRID)]
    c = to_cols(configs, shipped_parameter_sets())
    out = memory.memory_breakdown(c)
    assert set(memory.BREAKDOWN_TERMS) | {"total", "stage"} == set(out)
    np.testing.assert_allclose(
        sum(out[k] for k in memory.BREAKDOWN_TERMS), out["total"], rtol=1e-12
    )
    for k in memory.BREAKDOWN_TERMS:
        assert np.all(out[k] >= 0), k
    reserved = memory.torch_reserved_bytes(out)
    np.testing.assert_allclose(reserved, out["total"] - memory.CUDA_CONTEXT_BYTES)
    assert np.all(out["cuda_context"] == memory.CUDA_CONTEXT_BYTES)
    np.testing.assert_allclose(
        out["allocator"],
        c["p_allocator_overhead_frac"] * (out["total"] - out["allocator"] - out["cuda_context"]),
    )


# --- invariants: memory falls as tp, pp or zero_stage rises ----------------------------------

WORLD = 32
RECIPES = [
    dict(mbs=mbs, grad_accum=ga, recompute=r, sequence_parallel=sp)
    for mbs, ga, r, sp in itertools.product([1, 2], [1, 8], ["none", "full"], [False, True])
]
STAGES = [(fw, z) for fw in sorted(FRAMEWORKS) for z in FRAMEWORKS[fw].zero_stages]


def _totals(config, model, layouts, **fixed):
    configs = [config(model, gpus_per_node=8, **lay, **fixed) for lay in layouts]
    return memory.memory_breakdown(to_cols(configs, shipped_parameter_sets()))


def _assert_non_increasing(values, label):
    values = np.asarray(values)
    rises = np.diff(values) > 1e-9 * values[:-1]
    assert not rises.any(), f"{label}: {np.round(values / GIB, 3)} GiB"


@pytest.mark.parametrize("model", ["playbook-1.34b", "llama3-8b", "playbook-8.86b"])
@pytest.mark.parametrize("fw,z", [s for s in STAGES if FRAMEWORKS[s[0]].tensor_parallel])
def test_memory_falls_as_tp_rises(config, model, fw, z):
    for recipe in RECIPES:
        layouts = [dict(dp=WORLD // tp, tp=tp) for tp in (1, 2, 4, 8)]
        out = _totals(config, model, layouts, framework=fw, zero_stage=z, **recipe)
        _assert_non_increasing(out["total"], f"{model} {fw} zero{z} {recipe} tp=1..8")


EVEN_SPLIT = [
    s
    for s in STAGES
    if FRAMEWORKS[s[0]].pipeline_split == "even" and FRAMEWORKS[s[0]].pipeline_parallel
]


@pytest.mark.parametrize("model", ["playbook-1.34b", "llama3-8b", "playbook-8.86b"])
@pytest.mark.parametrize("fw,z", EVEN_SPLIT)
@pytest.mark.parametrize("dp", [1, 4])
def test_memory_falls_as_pp_rises(config, model, fw, z, dp):
    """dp held fixed (the GPUs grow with pp), even stage splits (Megatron).

    Left out on purpose, because there the model says, rightly, that memory need not fall:
    trading dp for pp under ZeRO >= 1 concentrates the dp-sharded states of the embedding on
    fewer ranks (see the next test for ZeRO-0); nanotron's cost-balanced split gives the
    first stage about one extra layer per stage, and under 1F1B it holds pp micro-batches;
    torchtitan's weighted split gives stage 1 a layer more than the first where the slots do
    not divide (llama3-8b: 9 layers x 3 micro-batches at pp 4, 5 x 7 at pp 8).
    """
    for recipe in RECIPES:
        layouts = [dict(dp=dp, pp=pp) for pp in (1, 2, 4, 8)]
        out = _totals(config, model, layouts, framework=fw, zero_stage=z, **recipe)
        _assert_non_increasing(out["total"], f"{model} {fw} zero{z} dp{dp} {recipe} pp=1..8")


@pytest.mark.parametrize("model", ["playbook-1.34b", "llama3-8b", "playbook-8.86b"])
@pytest.mark.parametrize("fw", ["torchtitan", "megatron"])
def test_memory_falls_as_pp_rises_trading_dp_without_zero(config, model, fw):
    for recipe in RECIPES:
        layouts = [dict(dp=WORLD // pp, pp=pp) for pp in (1, 2, 4, 8)]
        out = _totals(config, model, layouts, framework=fw, zero_stage=0, **recipe)
        _assert_non_increasing(out["total"], f"{model} {fw} {recipe} pp=1..8 on {WORLD} GPUs")


@pytest.mark.parametrize("model", ["playbook-1.34b", "llama3-8b", "playbook-8.86b"])
@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
@pytest.mark.parametrize("dp,tp,pp", [(32, 1, 1), (8, 4, 1), (4, 2, 4), (2, 8, 2)])
def test_memory_falls_as_zero_stage_rises(config, model, fw, dp, tp, pp):
    if (tp > 1 and not FRAMEWORKS[fw].tensor_parallel) or (
        pp > 1 and not FRAMEWORKS[fw].pipeline_parallel
    ):
        pytest.skip(f"{fw} has no tensor or pipeline parallelism")
    for recipe in RECIPES:
        layouts = [dict(zero_stage=z) for z in FRAMEWORKS[fw].zero_stages]
        out = _totals(config, model, layouts, framework=fw, dp=dp, tp=tp, pp=pp, **recipe)
        _assert_non_increasing(out["total"], f"{model} {fw} dp{dp} tp{tp} pp{pp} {recipe}")
        _assert_non_increasing(states(out), f"states {model} {fw} dp{dp} tp{tp} pp{pp}")


def test_nanotron_keeps_more_than_torchtitan(cols):
    """The fp32 gradient-accumulation buffer: +4 bytes per parameter (unsharded at ZeRO-0)."""
    nano = memory.memory_breakdown(cols("llama3-8b", dp=8, zero_stage=0))
    titan = memory.memory_breakdown(cols("llama3-8b", dp=8, zero_stage=0, framework="torchtitan"))
    assert nano["gradients"][0] == pytest.approx(3 * titan["gradients"][0])


def test_oom_probability_is_half_where_the_margin_puts_the_boundary():
    """p_oom = Phi((log(need / capacity) + margin) / sd): a need of capacity x exp(-margin) is
    even odds; a larger margin means runs fail sooner."""
    capacity = np.full(3, 80 * GIB)
    need = capacity * np.exp(np.array([-0.2, 0.0, 0.2]))
    for margin in (-0.2, 0.0, 0.2):
        c = {
            "memory_bytes": capacity,
            "p_memory_log_sd": np.full(3, 0.1),
            "p_oom_log_margin": np.full(3, margin),
        }
        p = memory.oom_probability(c, {"total": need})
        assert p[[-0.2, 0.0, 0.2].index(-margin)] == pytest.approx(0.5)
        assert (np.diff(p) > 0).all()
    priors = memory.oom_probability({"memory_bytes": capacity}, {"total": need})
    np.testing.assert_allclose(priors[1], 0.5)  # prior margin 0: at capacity


def test_the_oom_margin_holds_only_beside_a_set_fitted_on_the_frameworks_memory():
    """A margin fitted where one framework's runs ran out of memory moves the boundary for
    layouts of that framework's set (``memory_fitted`` 1); where the default set or the priors
    stand in (0), the prior's 0 holds: even odds at capacity, whatever the set's margin."""
    capacity = np.full(2, 80 * GIB)
    c = {
        "memory_bytes": capacity,
        "p_memory_log_sd": np.full(2, 0.1),
        "p_oom_log_margin": np.full(2, 0.05),
        "memory_fitted": np.array([1.0, 0.0]),
    }
    p = memory.oom_probability(c, {"total": capacity})
    assert p[0] > 0.5
    assert p[1] == pytest.approx(0.5)


def _layouts(config):
    """Pipelined layouts over frameworks, schedules, depths and micro-batch counts, dense and
    MoE (Mixtral with three leading dense layers, as DeepSeek's models have)."""
    from dataclasses import replace

    from surrogate.config.presets import get_preset
    from surrogate.errors import ConfigError

    moe = replace(get_preset("mixtral-8x7b"), num_dense_layers=3)
    out = []
    for model, fw, pp, vpp, m, mbs, schedule in itertools.product(
        ("playbook-1.34b", "8b", moe),
        ("nanotron", "megatron", "torchtitan"),
        (2, 3, 4, 8),
        (1, 2),
        (1, 3, 8, 32),
        (1, 4),
        ("1f1b", "afab"),
    ):
        if (vpp > 1 and fw == "nanotron") or (
            schedule == "afab" and (vpp > 1 or schedule not in FRAMEWORKS[fw].pipeline_schedules)
        ):
            continue
        try:
            out.append(
                config(
                    model,
                    dp=1,
                    pp=pp,
                    vpp=vpp,
                    grad_accum=m,
                    mbs=mbs,
                    framework=fw,
                    pp_schedule=schedule,
                )
            )
        except ConfigError:  # a layout the model's layer count does not admit
            continue
    return out


def test_the_reported_peak_is_the_heaviest_of_every_stage(config):
    """The reported peak is the largest of every stage's, stage by stage, over frameworks
    (nanotron's greedy split), 1F1B, interleaved and all-forward-all-backward schedules, dense
    and MoE models (whose leading dense layers make a middle stage the heaviest)."""
    from surrogate.analytic import pipeline

    cfgs = _layouts(config)
    c = to_cols(cfgs, shipped_parameter_sets())
    assert len(cfgs) > 200 and (c["vpp"] > 1).any() and (c["num_dense_layers"] > 0).any()
    assert (c["pp_afab"] > 0).any()
    peak = memory.memory_breakdown(c)["total"]
    every = np.stack([memory.stage_memory(c, i)["total"] for i in range(int(c["pp"].max()))])
    np.testing.assert_allclose(np.nanmax(every, axis=0), peak, rtol=1e-12)
    middle = memory.memory_breakdown(c)["stage"]
    assert ((middle > 0) & (middle < 1)).any()  # some peaks are on a middle stage
    # the stages hold every layer, and stage 0 and the last are the first and last stages
    layers = np.stack(
        [np.where(i < c["pp"], pipeline.stage_layers(c, i), 0.0) for i in range(int(c["pp"].max()))]
    )
    np.testing.assert_array_equal(layers.sum(axis=0), c["num_layers"])
    np.testing.assert_array_equal(pipeline.stage_layers(c, 0), pipeline.first_stage_layers(c))
    np.testing.assert_array_equal(
        pipeline.stage_layers(c, c["pp"] - 1), pipeline.last_stage_layers(c)
    )


def test_the_logged_stage_is_that_stage_and_the_peak_elsewhere(config):
    """A run whose memory was logged on a given stage is predicted that stage's memory; without
    a stage (NaN), on one pipeline stage, or a stage the run lacks: the most loaded stage."""
    cfgs = _layouts(config)
    c = to_cols(cfgs, shipped_parameter_sets())
    peak = memory.memory_breakdown(c)
    n = len(cfgs)
    stage = np.where(np.arange(n) % 3 == 0, 0.0, np.where(np.arange(n) % 3 == 1, 1.0, np.nan))
    logged = memory.logged_breakdown({**c, memory.LOGGED_STAGE_COLUMN: stage}, peak)
    for i in (0, 1):
        rows = stage == i
        np.testing.assert_allclose(
            logged["total"][rows], memory.stage_memory(c, i)["total"][rows], rtol=1e-12
        )
    unset = np.isnan(stage)
    np.testing.assert_array_equal(logged["total"][unset], peak["total"][unset])
    assert (logged["total"] <= peak["total"] * (1 + 1e-12)).all()
    assert (logged["total"] < peak["total"]).any()  # the first stage is not always the peak
    np.testing.assert_allclose(
        memory.logged_reserved_bytes({**c, memory.LOGGED_STAGE_COLUMN: stage}, peak),
        memory.torch_reserved_bytes(logged),
    )
    # absent, or beyond the run's stages: the peak; the breakdown given is left as it was
    before = {k: v.copy() for k, v in peak.items()}
    beyond = memory.logged_breakdown({**c, memory.LOGGED_STAGE_COLUMN: c["pp"]}, peak)
    np.testing.assert_array_equal(beyond["total"], peak["total"])
    np.testing.assert_array_equal(memory.logged_breakdown(c, peak)["total"], peak["total"])
    for k, v in before.items():
        np.testing.assert_array_equal(peak[k], v)


def test_all_forward_all_backward_holds_every_micro_batch(config):
    """Under all-forward-all-backward every stage holds all m micro-batches' activations (1F1B:
    p - i), and the last stage the softmax the loss saved for m - 1 of them: 4 bytes per
    logit (the fp32 exp_logits of the vocab-parallel cross entropy)."""
    kw = dict(dp=1, pp=4, grad_accum=16, mbs=1, framework="torchtitan")
    afab = to_cols([config("8b", pp_schedule="afab", **kw)], shipped_parameter_sets())
    onef = to_cols([config("8b", **kw)], shipped_parameter_sets())
    per_layer = activations.activation_bytes_per_layer(afab) * memory.activation_scale(afab)
    for i in range(4):
        a, b = memory.stage_memory(afab, i), memory.stage_memory(onef, i)
        layers = (8, 9, 8, 7)[i]  # torchtitan's split of 32 layers + 2 slots (test_pipeline)
        for got, n, c in ((a, 16, afab), (b, 4 - i, onef)):
            want = layers * n * per_layer + memory.inflight_hidden_bytes(c, np.array([n]))
            np.testing.assert_allclose(got["activations"], want, rtol=1e-12)
    a, b = memory.stage_memory(afab, 3), memory.stage_memory(onef, 3)
    logits = afab["mbs"] * afab["seq_len"] * afab["vocab_size"]
    np.testing.assert_allclose(a["logits"] - b["logits"], 15 * 4.0 * logits, rtol=1e-12)
    assert memory.memory_breakdown(afab)["total"][0] > memory.memory_breakdown(onef)["total"][0]


def test_stages_keep_unsharded_hidden_tensors_per_microbatch_in_flight_beyond_the_first(config):
    """``inflight_hidden_tensors`` T x h bf16 tensors per micro-batch in flight beyond the
    first, on every stage: none without a pipeline, the same at every tp, linear in the
    count, and nothing else in the breakdown moves with it."""
    kw = dict(dp=1, grad_accum=16, mbs=2, framework="nanotron")
    k = 5.0
    for tp, pp in ((1, 1), (1, 4), (4, 4), (8, 8)):
        c = to_cols([config("8b", tp=tp, pp=pp, **kw)], shipped_parameter_sets())
        tokens_h = 2 * c["mbs"] * c["seq_len"] * c["hidden_size"]  # one T x h tensor in bf16
        with_k = {**c, "p_inflight_hidden_tensors": np.array([k])}
        none = {**c, "p_inflight_hidden_tensors": np.array([1e-12])}
        for i in range(pp):
            a, b = memory.stage_memory(with_k, i), memory.stage_memory(none, i)
            n = min(pp - i, 16)  # 1F1B: p - i micro-batches in flight on stage i
            np.testing.assert_allclose(
                a["activations"] - b["activations"], k * tokens_h * (n - 1), rtol=1e-9
            )
            for term in memory.BREAKDOWN_TERMS:
                if term not in ("activations", "allocator"):
                    np.testing.assert_array_equal(a[term], b[term])


def test_nanotron_all_forward_all_backward_without_a_pipeline(config):
    """nanotron's engine drives every step, pp = 1 too: afab then holds every micro-batch."""
    kw = dict(dp=8, pp=1, grad_accum=8, mbs=1)
    afab = memory.memory_breakdown(
        to_cols([config("playbook-1.34b", pp_schedule="afab", **kw)], shipped_parameter_sets())
    )
    onef = memory.memory_breakdown(
        to_cols([config("playbook-1.34b", **kw)], shipped_parameter_sets())
    )
    c = to_cols([config("playbook-1.34b", pp_schedule="afab", **kw)], shipped_parameter_sets())
    kept = 8 * onef["activations"] + memory.inflight_hidden_bytes(c, np.array([8.0]))
    np.testing.assert_allclose(afab["activations"], kept, rtol=1e-12)


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
@pytest.mark.parametrize("pp", [1, 4])
def test_some_layers_checkpointed_lie_between_none_and_all(config, framework, pp):
    """Checkpointing some of a stage's layers keeps, on every stage, their inputs and the
    rest of the layers whole: linear in the stage's checkpointed count
    (``flops.checkpointed_layers``: min(k, its layers) under Megatron, floor(its layers / n)
    under torchtitan), from no recomputation (none) to full recomputation (every layer;
    recompute_layers=0 means all)."""
    kw = dict(dp=8 // pp, pp=pp, grad_accum=8, framework=framework, sequence_parallel=False)
    counts = list(range(1, 32 // pp + 1))
    c = to_cols(
        [config("llama3-8b", **kw, recompute="none")]
        + [config("llama3-8b", **kw, recompute="full", recompute_layers=k) for k in counts]
        + [config("llama3-8b", **kw, recompute="full")],
        shipped_parameter_sets(),
    )
    for stage in range(pp):
        acts = memory.stage_memory(c, stage)["activations"]
        layers = pipeline.stage_layers(c, stage)  # torchtitan's stages differ
        checkpointed = flops.checkpointed_layers(c, layers)
        np.testing.assert_array_equal(checkpointed[[0, -1]], [0, layers[0]])
        saving = (acts[0] - acts) / (acts[0] - acts[-1])  # 0 none .. 1 every layer
        np.testing.assert_allclose(saving, checkpointed / layers, rtol=1e-9, atol=1e-12)
        if framework == "megatron":
            np.testing.assert_array_equal(checkpointed[1:-1], np.minimum(counts, layers[0]))
    layers = float(pipeline.first_stage_layers(c)[0])
    none, ckpt = (float(activations.activation_bytes_per_layer(c)[i]) for i in (0, -1))
    assert memory.stage_activation_bytes(c, layers)[2] == pytest.approx(
        2 * ckpt + (layers - 2) * none
    )  # recompute_layers=2
