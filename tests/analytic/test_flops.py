"""Parameter counts against published figures; FLOPs per token; the 4/3 of full recompute."""

from __future__ import annotations

import numpy as np
import pytest

from surrogate.analytic import flops, pipeline
from surrogate.analytic.inputs import RECOMPUTE_CODE, to_cols
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.model import ModelConfig

PUBLISHED_TOTAL = [
    # Dubey et al. 2024 (Llama 3) and the released checkpoints' parameter counts
    ("llama3-8b", 8.03e9, 0.005),
    ("llama3-70b", 70.6e9, 0.005),
    ("llama3-405b", 405.9e9, 0.005),
    # Jiang et al. 2024 (Mixtral of Experts): 46.7B total
    ("mixtral-8x7b", 46.7e9, 0.005),
    # The Playbook names its models by their size: within 1%
    ("playbook-1.34b", 1.34e9, 0.01),
    ("playbook-3.57b", 3.57e9, 0.01),
    ("playbook-8.86b", 8.86e9, 0.01),
    ("playbook-80b", 80e9, 0.01),
    ("playbook-469b", 469e9, 0.01),
]


@pytest.mark.parametrize("preset,published,tol", PUBLISHED_TOTAL)
def test_total_params_match_published(cols, preset, published, tol):
    got = float(flops.total_params(cols(preset, dp=8))[0])
    err = abs(got - published) / published
    print(
        f"{preset}: {got / 1e9:.3f}B params vs published {published / 1e9:.2f}B, "
        f"rel. error {err:.3%}"
    )
    assert err < tol


def test_mixtral_active_params_match_published(cols):
    c = cols("mixtral-8x7b", dp=8)
    got = float(flops.active_params(c)[0])
    err = abs(got - 12.9e9) / 12.9e9  # Jiang et al. 2024: 12.9B active per token
    print(f"mixtral-8x7b: {got / 1e9:.3f}B active vs published 12.9B, rel. error {err:.3%}")
    assert err < 0.005
    assert got < flops.total_params(c)[0]


@pytest.mark.parametrize("preset", ["llama3-8b", "playbook-1.34b", "playbook-80b"])
def test_dense_models_use_all_their_params(cols, preset):
    c = cols(preset, dp=8)
    assert flops.active_params(c)[0] == flops.total_params(c)[0]
    assert flops.expert_params_per_layer(c)[0] == 0


def test_param_count_by_hand(cols):
    # L=2, h=64, ffn=128, 4 heads, 2 kv heads (head_dim 16, kv dim 32), V=100, untied
    m = ModelConfig(
        num_layers=2,
        hidden_size=64,
        ffn_hidden_size=128,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=100,
        seq_len=32,
    )
    c = cols(m, dp=1)
    attn = 2 * 64 * 64 + 2 * 64 * 32
    mlp = 3 * 64 * 128
    assert flops.attention_params_per_layer(c)[0] == attn
    expected = 2 * (attn + mlp + 2 * 64) + 2 * 100 * 64 + 64
    assert flops.total_params(c)[0] == expected
    tied = cols(ModelConfig(**{**m.__dict__, "tie_embeddings": True}), dp=1)
    assert flops.total_params(tied)[0] == expected - 100 * 64


def test_moe_params_by_hand(cols):
    m = ModelConfig(
        num_layers=2,
        hidden_size=64,
        ffn_hidden_size=128,
        num_heads=4,
        num_kv_heads=4,
        vocab_size=100,
        seq_len=32,
        num_experts=4,
        experts_topk=2,
        moe_ffn_hidden_size=32,
    )
    c = cols(m, dp=1)
    attn, router, expert = 4 * 64 * 64, 64 * 4, 3 * 64 * 32
    shared = 2 * (attn + router + 2 * 64) + 2 * 100 * 64 + 64
    assert flops.total_params(c)[0] == shared + 2 * 4 * expert
    assert flops.active_params(c)[0] == shared + 2 * 2 * expert


@pytest.mark.parametrize("preset", ["llama3-8b", "playbook-3.57b", "mixtral-8x7b"])
def test_model_flops_per_token_is_6n_plus_12lhs(cols, preset):
    c = cols(preset, dp=8)
    n = flops.active_params(c)
    expected = 6 * n + 12 * c["num_layers"] * c["hidden_size"] * c["seq_len"]
    np.testing.assert_allclose(flops.model_flops_per_token(c), expected)


@pytest.mark.parametrize("preset", ["playbook-1.34b", "llama3-8b", "llama3-70b", "mixtral-8x7b"])
def test_full_recompute_costs_four_thirds(config, preset):
    """Seed figure: full recomputation reruns the forward, 4/3 of the model FLOPs."""
    c = to_cols(
        [config(preset, dp=8, recompute=r) for r in ("none", "selective", "full")],
        shipped_parameter_sets(),
    )
    assert list(c["recompute"]) == [RECOMPUTE_CODE[r] for r in ("none", "selective", "full")]
    ratio = flops.hardware_flops_per_token(c) / flops.model_flops_per_token(c)
    err = abs(ratio[2] - 4 / 3) / (4 / 3)
    print(f"{preset}: full-recompute factor {ratio[2]:.6f} vs 4/3, rel. error {err:.2e}")
    assert err < 1e-12
    np.testing.assert_allclose(ratio[:2], 1.0)  # selective: flash attention recomputes anyway


@pytest.mark.parametrize("preset", ["llama3-8b", "mixtral-8x7b"])
def test_per_operator_checkpointing_runs_every_other_matmul_again(config, preset):
    """torchtitan's per-operator mode runs the key, attention output and MLP up projections'
    forward again; in an MoE layer the routed experts whole (their grouped GEMMs are not
    kept: ``test_memory_measured_recompute.py``), 3 k moe_ffn wide, and no dense MLP."""
    c = to_cols(
        [config(preset, dp=8, framework="torchtitan", recompute=r) for r in ("none", "selective")],
        shipped_parameter_sets(),
    )
    again = flops.hardware_flops_per_token(c) - flops.model_flops_per_token(c)
    mlp = (
        3 * c["experts_topk"] * c["moe_ffn_hidden_size"] + c["shared_expert_ffn_hidden_size"]
        if preset.startswith("mixtral")
        else c["ffn_hidden_size"]
    )
    widths = c["num_kv_heads"] * c["qk_head_dim"] + c["num_heads"] * c["v_head_dim"] + mlp
    np.testing.assert_allclose(
        again, [0.0, (2 * c["num_layers"] * c["hidden_size"] * widths)[1]], rtol=1e-12
    )


def test_mfu_formula(cols):
    c = cols("llama3-8b", dp=8)
    tokens_per_s = np.array([5000.0])
    expected = 5000.0 * flops.model_flops_per_token(c) / 989.4e12
    np.testing.assert_allclose(flops.mfu(tokens_per_s, c), expected)
    fp8 = cols("llama3-8b", dp=8, dtype="fp8")
    np.testing.assert_allclose(flops.mfu(tokens_per_s, fp8), expected / 2, rtol=1e-3)


# Variants of the Llama block (flops module docstring), by hand on small shapes.
TINY = dict(
    num_layers=2,
    hidden_size=64,
    ffn_hidden_size=128,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=100,
    seq_len=32,
)


def test_explicit_head_dim_by_hand(cols):
    # Gemma-style: 4 heads of 32 on a 64-wide model (heads x head_dim = 128 != h)
    c = cols(ModelConfig(**TINY, head_dim=32), dp=1)
    attn = 2 * 64 * (4 * 32) + 2 * 64 * (2 * 32)
    assert flops.attention_params_per_layer(c)[0] == attn
    assert flops.total_params(c)[0] == 2 * (attn + 3 * 64 * 128 + 2 * 64) + 2 * 100 * 64 + 64
    # scores and values over 4 x 32 per token and layer, x 6: not 12 L h s
    assert flops.attention_flops_per_token(c)[0] == 6 * 2 * 32 * 4 * (32 + 32)


def test_mla_params_by_hand(cols):
    mla = dict(
        TINY,
        num_kv_heads=4,
        q_lora_rank=16,
        kv_lora_rank=8,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
    )
    q = 64 * 16 + 16 + 16 * 4 * (8 + 4)  # W_DQ, its norm, W_UQ and W_QR
    kv = 64 * (8 + 4) + 8 + 8 * 4 * (8 + 8)  # W_DKV and W_KR, the latent norm, W_UK and W_UV
    out = 4 * 8 * 64
    assert flops.attention_params_per_layer(cols(ModelConfig(**mla), dp=1))[0] == q + kv + out
    direct = cols(ModelConfig(**dict(mla, q_lora_rank=0)), dp=1)  # DeepSeek-V2-Lite: no W_DQ
    assert flops.attention_params_per_layer(direct)[0] == 64 * 4 * 12 + kv + out
    assert flops.attention_flops_per_token(direct)[0] == 6 * 2 * 32 * 4 * (12 + 8)


def test_shared_experts_and_leading_dense_layers_by_hand(cols):
    m = ModelConfig(
        **dict(TINY, num_layers=3, num_kv_heads=4),
        num_experts=4,
        experts_topk=2,
        moe_ffn_hidden_size=32,
        shared_expert_ffn_hidden_size=64,
        num_dense_layers=1,
    )
    c = cols(m, dp=1)
    attn, dense_mlp = 4 * 64 * 64, 3 * 64 * 128
    router, shared, expert = 64 * 4, 3 * 64 * 64, 3 * 64 * 32
    common = 3 * (attn + 2 * 64) + dense_mlp + 2 * (router + shared) + 2 * 100 * 64 + 64
    assert flops.total_params(c)[0] == common + 2 * 4 * expert
    assert flops.active_params(c)[0] == common + 2 * 2 * expert


def test_some_layers_recomputed_add_their_share_of_a_third(config):
    c = to_cols(
        [
            config(
                "llama3-8b",
                dp=2,
                pp=4,
                framework="megatron",
                recompute="full",
                recompute_layers=k,
                sequence_parallel=False,
            )
            for k in (0, 2, 4, 8)
        ],
        shipped_parameter_sets(),
    )
    ratio = flops.hardware_flops_per_token(c) / flops.model_flops_per_token(c)
    np.testing.assert_allclose(ratio, [4 / 3, 1 + 1 / 12, 1 + 1 / 6, 4 / 3], rtol=1e-12)


def test_torchtitan_checkpoints_every_nth_block_of_each_rank(config):
    """torchtitan's every-n-th block counts on each rank: 30 layers on 4 ranks are 7, 8, 8, 7
    (its split gives the embedding's and the head's slots to the end ranks), and n = 2 gives
    the first rank 3 (recompute_layers) but ranks 1 and 2 four. Megatron's block method
    checkpoints the same N on every stage."""
    model = ModelConfig(
        num_layers=30,
        hidden_size=256,
        ffn_hidden_size=512,
        num_heads=4,
        num_kv_heads=4,
        vocab_size=1000,
        seq_len=128,
    )
    c = to_cols(
        [
            config(
                model,
                dp=2,
                pp=4,
                framework=f,
                recompute="full",
                recompute_layers=3,
                sequence_parallel=False,
            )
            for f in ("torchtitan", "megatron")
        ],
        shipped_parameter_sets(),
    )
    np.testing.assert_array_equal(flops.every_nth_block(c), [2.0, 0.0])
    ranks = np.stack([pipeline.weighted_rank_layers(c, i) for i in range(4)])
    np.testing.assert_array_equal(ranks[:, 0], [7, 8, 8, 7])
    got = np.stack([flops.checkpointed_layers(c, ranks[i]) for i in range(4)])
    np.testing.assert_array_equal(got[:, 0], [3, 4, 4, 3])
    np.testing.assert_array_equal(flops.checkpointed_layers(c, np.full(2, 8.0))[1], 3)
    # No n gives 5 of 7 layers (floor(7 / n) is 3, 2 or 1): the count itself, at most a rank's.
    five = to_cols(
        [
            config(
                model,
                dp=2,
                pp=4,
                framework="torchtitan",
                recompute="full",
                recompute_layers=5,
                sequence_parallel=False,
            )
        ],
        shipped_parameter_sets(),
    )
    assert flops.every_nth_block(five)[0] == 0.0
    assert flops.checkpointed_layers(five, np.array([8.0]))[0] == 5


def test_layer_params_hold_each_part_of_each_row(cols):
    """LayerParams (computed once per table) holds every part's count per layer of each row,
    a GQA row beside an MLA row with experts alike, and its rows those of the subset."""
    gqa = cols(ModelConfig(**TINY), dp=1)
    mla = cols(
        ModelConfig(
            **dict(
                TINY,
                num_kv_heads=4,
                q_lora_rank=16,
                kv_lora_rank=8,
                qk_nope_head_dim=8,
                qk_rope_head_dim=4,
                v_head_dim=8,
            ),
            num_experts=4,
            experts_topk=2,
            moe_ffn_hidden_size=32,
            shared_expert_ffn_hidden_size=64,
        ),
        dp=1,
    )
    both = {k: np.concatenate([gqa[k], mla[k]]) for k in gqa}
    p = flops.LayerParams.of(both)
    parts = {
        "attention": flops.attention_params_per_layer,
        "mlp": flops.mlp_params_per_layer,
        "shared_expert": flops.shared_expert_params_per_layer,
        "router": flops.router_params_per_layer,
        "experts": flops.expert_params_per_layer,
    }
    for name, count in parts.items():
        np.testing.assert_array_equal(getattr(p, name), count(both), err_msg=name)
        for row, alone in enumerate((gqa, mla)):  # each row as in a table of its own
            assert getattr(p, name)[row] == count(alone)[0], name
            assert getattr(p.rows(np.array([row])), name).tolist() == [count(alone)[0]]
