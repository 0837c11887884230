"""Step time: the terms sum to the step, MFU is a sane fraction, tokens/s closes the batch."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from surrogate.analytic import flops, pipeline, step
from surrogate.analytic.flops import model_flops_per_token
from surrogate.analytic.inputs import to_cols
from surrogate.analytic.perf import SpecPerfModel
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.hf_config import model_from_hf_config

PERF = SpecPerfModel()

# Sane configurations: 8 to 64 H100s, dense and MoE, every parallel dimension.
LAYOUTS = [
    dict(dp=8),
    dict(dp=4, tp=2),
    dict(dp=2, tp=4, sequence_parallel=True),
    dict(dp=2, tp=2, pp=2),
    dict(dp=4, pp=4, vpp=2),
    dict(dp=4, cp=2, tp=2),
    dict(dp=16, tp=4),
    dict(dp=4, tp=8, pp=2, sequence_parallel=True),
]
RECIPES = [
    dict(mbs=mbs, grad_accum=ga, zero_stage=z, framework=fw, recompute=r)
    for mbs, ga, (fw, z), r in itertools.product(
        [1, 2],
        [1, 8],
        [("nanotron", 0), ("nanotron", 1), ("torchtitan", 2), ("torchtitan", 3), ("megatron", 1)],
        ["none", "full"],
    )
]


def _grid(config):
    # nanotron has no interleaved schedule: vpp > 1 only with the other frameworks
    configs = [
        config(m, **lay, **rec)
        for m, lay, rec in itertools.product(["playbook-1.34b", "llama3-8b"], LAYOUTS, RECIPES)
        if not (lay.get("vpp", 1) > 1 and rec["framework"] == "nanotron")
    ]
    configs += [
        config("mixtral-8x7b", dp=8, ep=ep, **rec)
        for ep in (1, 2, 8)
        for rec in RECIPES
        if rec["zero_stage"] < 3
    ]
    return configs


@pytest.fixture(scope="module")
def grid(config):
    configs = _grid(config)
    return configs, to_cols(configs, shipped_parameter_sets())


def test_step_terms_sum_to_step_time(grid):
    _, c = grid
    out = step.step_breakdown(c, PERF)
    np.testing.assert_allclose(sum(out[k] for k in step.STEP_TERMS), out["step_time_s"], rtol=1e-12)
    for k in step.STEP_TERMS:
        assert np.all(out[k] >= 0), k
        assert np.all(np.isfinite(out[k])), k
    assert np.all(out["compute"] > 0)


def test_mfu_is_a_fraction_for_sane_configs(grid):
    _, c = grid
    mfu = step.step_breakdown(c, PERF)["mfu"]
    print(f"MFU over {len(mfu)} configurations: {mfu.min():.1%} .. {mfu.max():.1%}")
    assert np.all((mfu > 0) & (mfu < 1))
    # no more than the GEMM efficiency the datasheet model assumes, over the fitted GEMM time
    # scale of the framework version (surrogate.analytic.params)
    assert np.all(mfu <= PERF.gemm_efficiency_frac / c["p_gemm_time_scale"] + 1e-9)


def test_tokens_per_s_times_gpus_times_step_is_the_batch(grid):
    configs, c = grid
    out = step.step_breakdown(c, PERF)
    gpus = np.array([cfg.cluster.num_gpus for cfg in configs])
    batch = np.array([cfg.batch_tokens for cfg in configs])
    np.testing.assert_allclose(
        out["tokens_per_s_per_gpu"] * gpus * out["step_time_s"], batch, rtol=1e-12
    )
    np.testing.assert_allclose(
        out["mfu"], out["tokens_per_s_per_gpu"] * model_flops_per_token(c) / c["peak_flops"]
    )


def test_bubble_term_and_fraction(grid):
    _, c = grid
    out = step.step_breakdown(c, PERF)
    np.testing.assert_allclose(out["bubble_frac"], pipeline.bubble_fraction(c))
    assert np.all(out["bubble"][c["pp"] == 1] == 0)
    assert np.all(out["pp_comm"][c["pp"] == 1] == 0)
    assert np.all(out["bubble"][c["pp"] > 1] > 0)


def test_terms_vanish_without_their_dimension(grid):
    _, c = grid
    out = step.step_breakdown(c, PERF)
    assert np.all(out["tp_comm"][c["tp"] == 1] == 0)
    assert np.all(out["cp_comm"][c["cp"] == 1] == 0)
    assert np.all(out["ep_comm"][c["ep"] == 1] == 0)
    assert np.all(out["zero3_comm"][c["zero_stage"] < 3] == 0)
    assert np.all(out["tp_comm"][c["tp"] > 1] > 0)


def test_full_recompute_costs_a_third_more_layer_compute(config):
    c = to_cols(
        [config("llama3-8b", dp=8, recompute=r) for r in ("none", "full")], shipped_parameter_sets()
    )
    layer_s, _ = step.layer_compute_s(c, PERF)
    assert layer_s[1] / layer_s[0] == pytest.approx(4 / 3)
    out = step.step_breakdown(c, PERF)
    assert out["compute"][0] < out["compute"][1] < 4 / 3 * out["compute"][0] + 1e-12
    assert out["mfu"][1] < out["mfu"][0]


def test_more_microbatches_shrink_the_bubble(config):
    c = to_cols(
        [config("llama3-8b", dp=1, pp=8, grad_accum=m) for m in (1, 4, 16, 64)],
        shipped_parameter_sets(),
    )
    out = step.step_breakdown(c, PERF)
    assert np.all(np.diff(out["bubble_frac"]) < 0)
    assert np.all(np.diff(out["mfu"]) > 0)


def test_step_terms_are_the_display_order():
    assert step.STEP_TERMS[0] == "compute"
    assert len(set(step.STEP_TERMS)) == len(step.STEP_TERMS)


@pytest.mark.parametrize(
    "family",
    ["llama3-8b", "gemma-7b", "qwen2-57b-a14b", "qwen3-30b-a3b", "deepseek-v2", "deepseek-v3"],
)
def test_layer_gemms_are_the_parameter_count(config, family):
    """The GEMM shapes of layer_compute_s and the parameter counts of flops agree: over the
    layers, 6 T x the active matrix parameters (no norms, no routers, which are not GEMMs)
    plus the attention core (datasheet model: one GEMM efficiency)."""
    path = Path(__file__).parents[1] / "fixtures" / "hf_configs" / f"{family}.json"
    c = to_cols(
        [config(model_from_hf_config(path, seq_len=4096), dp=1, mbs=1)], shipped_parameter_sets()
    )
    layer_s, attn_s = step.layer_compute_s(c, PERF)
    T, L, h = 4096.0, c["num_layers"], c["hidden_size"]
    core = T * flops.attention_flops_per_token(c) / L
    time_per_flop = attn_s / core  # the same for every GEMM here
    latent_norms = np.where(c["kv_lora_rank"] > 0, c["q_lora_rank"] + c["kv_lora_rank"], 0.0)
    matrices = (
        flops.active_params(c)
        - flops.embedding_params(c)
        - flops.lm_head_params(c)
        - h
        - L * (2 * h + latent_norms)
        - flops.moe_layers(c) * flops.router_params_per_layer(c)
    )
    expected = 6 * T * matrices + T * flops.attention_flops_per_token(c)
    got = L * layer_s / time_per_flop
    print(f"{family}: layer GEMM FLOPs {got[0]:.4g} vs parameters {expected[0]:.4g}")
    np.testing.assert_allclose(got, expected, rtol=1e-9)


@pytest.mark.parametrize(
    ("pp", "grad_accum", "waits"), [(2, 1, 0), (2, 4, 3), (4, 4, 2 * 3 + 2), (8, 16, 2 * 15 + 6)]
)
def test_cross_node_pipelines_wait_per_neighbour_after_the_first_microbatch(
    cols, pp, grad_accum, waits
):
    """min(p - 1, 2) x (m - 1) + (p - 2) waits (pipeline.cross_node_waits): pp 2 with one
    micro-batch waits for nothing."""
    c = dict(cols("llama3-8b", dp=8, pp=pp, grad_accum=grad_accum))  # dp 8 fills a node
    quiet = step.step_breakdown({**c, "p_pp_slot_latency_s": np.zeros(1)}, PERF)["pp_comm"]
    slow = step.step_breakdown({**c, "p_pp_slot_latency_s": np.full(1, 0.5)}, PERF)["pp_comm"]
    assert slow - quiet == pytest.approx(waits * 0.5)
    np.testing.assert_allclose(pipeline.cross_node_waits(c), waits)
    inside = dict(cols("llama3-8b", dp=1, pp=pp, grad_accum=4))  # one node: no wait
    for latency in (0.0, 0.5):
        assert step.step_breakdown({**inside, "p_pp_slot_latency_s": np.full(1, latency)}, PERF)[
            "pp_comm"
        ] == pytest.approx(
            step.step_breakdown({**inside, "p_pp_slot_latency_s": np.zeros(1)}, PERF)["pp_comm"]
        )


def test_tp_rings_across_nodes_wait_per_step(cols):
    """tp_inter_step_latency_s: 8 (tp - 1) steps per layer and micro-batch, only where the TP
    group crosses nodes."""

    def tp_comm(c, latency):
        return step.step_breakdown({**c, "p_tp_inter_step_latency_s": np.full(1, latency)}, PERF)[
            "tp_comm"
        ][0]

    across = dict(cols("playbook-8.86b", dp=1, tp=16, grad_accum=3))
    layers = across["num_layers"][0]
    assert tp_comm(across, 1e-4) - tp_comm(across, 0.0) == pytest.approx(3 * layers * 8 * 15 * 1e-4)
    inside = dict(cols("playbook-8.86b", dp=1, tp=8, grad_accum=3))
    assert tp_comm(inside, 1e-4) == pytest.approx(tp_comm(inside, 0.0))


FLOOR = {"p_pp_layer_floor_s": np.full(1, 0.02), "p_pp_layer_floor_per_tp_s": np.full(1, 0.01)}


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_pipelined_slot_lasts_at_least_its_layer_floor(cols, tp):
    for mbs in (1, 2):
        c = {**cols("playbook-1.34b", dp=8 // tp // 2, tp=tp, pp=2, mbs=mbs, grad_accum=8), **FLOOR}
        out = step.step_breakdown(c, PERF)
        floor = pipeline.first_stage_layers(c) * (0.02 + tp * 0.01)
        assert out["stage_compute_s"] < floor  # the floor binds: the slot is flat in mbs
        slot = out["bubble"] / (pipeline.step_slots(c) - pipeline.microbatches(c))
        np.testing.assert_allclose(slot, floor, rtol=1e-9)


def test_an_unpipelined_micro_batch_lasts_at_least_its_host_floor(cols):
    """Without a pipeline the floor is ``layer_floor_s`` per layer, a third more where the
    forward runs again (full recomputation); a maximum, not a sum."""
    for recompute, again in (("none", 0.0), ("full", 1.0)):
        flat = dict(cols("llama3-8b", dp=1, mbs=1, grad_accum=4, recompute=recompute))
        huge = {"p_layer_floor_s": np.full(1, 1.0)}
        out = step.step_breakdown({**flat, **huge}, PERF)
        layers = flat["num_layers"][0]
        assert out["step_time_s"] - step.step_breakdown(flat, PERF)["step_time_s"] > 0
        per_mb = layers * 1.0 * (1 + again / 3)
        work = (
            out["compute"]
            + out["memory_bound"]
            + out["tp_comm"]
            + out["zero3_comm"]
            + out["overhead"]
        ) / 4
        np.testing.assert_allclose(work, per_mb, rtol=1e-9)
    low = {"p_layer_floor_s": np.full(1, 1e-6)}
    assert step.step_breakdown({**flat, **low}, PERF)["step_time_s"] == pytest.approx(
        step.step_breakdown({**flat, "p_layer_floor_s": np.full(1, 1e-5)}, PERF)["step_time_s"]
    )


def test_the_layer_floor_is_no_added_cost_and_spares_unpipelined_runs(cols):
    huge = {"p_pp_layer_floor_s": np.full(1, 1.0), "p_pp_layer_floor_per_tp_s": np.zeros(1)}
    flat = dict(cols("llama3-8b", dp=8, mbs=2, grad_accum=4))
    assert step.step_breakdown({**flat, **huge}, PERF)["step_time_s"] == pytest.approx(
        step.step_breakdown(flat, PERF)["step_time_s"]
    )
    piped = dict(cols("llama3-8b", dp=4, pp=2, mbs=8, grad_accum=4))
    none = {"p_pp_layer_floor_s": np.full(1, 1e-6), "p_pp_layer_floor_per_tp_s": np.full(1, 1e-6)}
    low = {"p_pp_layer_floor_s": np.full(1, 1e-5), "p_pp_layer_floor_per_tp_s": np.full(1, 1e-5)}
    # under the work, the floor changes nothing (a maximum, not a sum)
    assert step.step_breakdown({**piped, **low}, PERF)["step_time_s"] == pytest.approx(
        step.step_breakdown({**piped, **none}, PERF)["step_time_s"]
    )


def test_flash_attention_frameworks_take_the_measured_curve(cols):
    """Attention runs at the profile's measured flash-attention efficiency (bf16 peak, also
    under fp8) for FlashAttention-2 frameworks; llm-foundry's unmeasured kernel keeps the
    GEMM proxy."""
    from dataclasses import replace

    from surrogate.analytic.params import param
    from surrogate.hardware.profile import load_profile

    measured = load_profile("H100-SXM-80GB")
    proxy = replace(measured, attention=None)
    c = cols("8b", dp=8, framework="megatron", zero_stage=0)
    _, attn = step.layer_compute_s(c, measured)
    _, attn_proxy = step.layer_compute_s(c, proxy)
    T, s, heads, d = c["mbs"] * c["seq_len"], c["seq_len"], c["num_heads"], c["qk_head_dim"]
    eff = measured.attention_efficiency(T * heads, s, d, c)  # tp 1: all heads on the rank
    flops = 12 * T * s * heads * d  # forward + backward at the full count
    expected = (
        flops
        / (c["peak_flops_bf16"] * eff * c["hopper_attention_speedup"])
        * param(c, "gemm_time_scale")
    )
    np.testing.assert_allclose(attn, expected)
    assert attn[0] < attn_proxy[0]
    fp8 = cols("8b", dp=8, framework="megatron", zero_stage=0, dtype="fp8")
    np.testing.assert_allclose(step.layer_compute_s(fp8, measured)[1], attn)
    foundry = cols("8b", dp=8, framework="llm-foundry", zero_stage=0)
    np.testing.assert_array_equal(
        step.layer_compute_s(foundry, measured)[1], step.layer_compute_s(foundry, proxy)[1]
    )


def test_some_layers_recomputed_cost_their_share_of_a_third(config):
    """Recomputing 8 of each stage's 16 layers (pp 2) runs half the layers' forward again:
    a layer costs 1 + 1/6 on average; the compute grows with the count."""
    kw = dict(dp=4, pp=2, grad_accum=8, framework="megatron", sequence_parallel=False)
    c = to_cols(
        [config("llama3-8b", **kw, recompute="none")]
        + [config("llama3-8b", **kw, recompute="full", recompute_layers=k) for k in (4, 8, 16)]
        + [config("llama3-8b", **kw, recompute="full")],
        shipped_parameter_sets(),
    )
    layer_s, _ = step.layer_compute_s(c, PERF)
    assert layer_s[2] / layer_s[0] == pytest.approx(1 + 1 / 6)
    assert layer_s[3] == pytest.approx(layer_s[4])  # all 16 of 16: full recomputation
    compute = step.step_breakdown(c, PERF)["compute"]
    assert np.all(np.diff(compute[:4]) > 0)


def test_per_operator_checkpointing_runs_the_routed_experts_again(config):
    """Per operator, torchtitan keeps none of an MoE layer's grouped GEMMs: what top-2 adds
    to a layer over top-1 (the routed experts' GEMMs, nothing else) costs a third more with
    it, where the dense MLP's up projection alone would cost a sixth."""
    import dataclasses

    from surrogate.config.presets import get_preset

    mixtral = get_preset("mixtral-8x7b")
    models = [dataclasses.replace(mixtral, experts_topk=k) for k in (1, 2)]
    c = to_cols(
        [
            config(m, dp=8, ep=8, framework="torchtitan", recompute=r)
            for r in ("none", "selective")
            for m in models
        ],
        shipped_parameter_sets(),
    )
    layer_s, _ = step.layer_compute_s(c, PERF)
    routed = layer_s[1] - layer_s[0]
    assert routed > 0
    assert layer_s[3] - layer_s[2] == pytest.approx(routed * (1 + 1 / 3), rel=1e-12)


def test_recomputation_runs_the_forward_elementwise_kernels_again(config):
    """A third of the elementwise traffic is forward: full recomputation adds it, per-operator
    checkpointing too (torch's checkpoint replays the whole forward); torchtitan accumulates
    no fp32 gradients, so its memory-bound term is that traffic alone."""
    c = to_cols(
        [
            config("llama3-8b", dp=8, framework="torchtitan", recompute=r)
            for r in ("none", "full", "selective")
        ],
        shipped_parameter_sets(),
    )
    bound = step.step_breakdown(c, PERF)["memory_bound"]
    np.testing.assert_allclose(bound[1:] / bound[0], 4 / 3, rtol=1e-12)


# --- Megatron-Core's framework terms -----------------------------------------------------------


def _megatron_without(c, *traits):
    """The columns of ``c`` with Megatron's ``traits`` switched off."""
    return {**c, **{t: np.zeros(1) for t in traits}}


def test_megatron_overlaps_tp_with_its_gemms_exposing_one_chunk_of_the_ring(cols):
    """tp_comm_overlap: a layer exposes max(1 / tp of its TP time, the part beyond its GEMMs),
    at the profile's time (no fitted scale); the rest is hidden; off, the fitted scale prices it
    all. nanotron's is unchanged."""
    from surrogate.analytic import comm

    for tp in (2, 4, 8):
        c = dict(
            cols(
                "llama3-70b",
                dp=8 // tp,
                tp=tp,
                pp=1,
                grad_accum=2,
                framework="megatron",
                sequence_parallel=True,
            )
        )
        layer_s, attn_s = step.layer_compute_s(c, PERF)
        raw = comm.tp_time_per_layer_s(c, PERF)[0]
        exposed = max(raw / tp, raw - (layer_s - attn_s)[0])
        out = step.step_breakdown(c, PERF)
        assert out["tp_comm"][0] == pytest.approx(2 * 80 * exposed)
        plain = step.step_breakdown(_megatron_without(c, "tp_comm_overlap"), PERF)
        assert plain["tp_comm"][0] == pytest.approx(2 * 80 * raw * c["p_tp_comm_scale"][0])
        assert out["tp_comm"][0] < plain["tp_comm"][0]
    # without sequence parallelism Megatron-Bridge turns the overlap off
    no_sp = dict(
        cols(
            "llama3-70b",
            dp=2,
            tp=4,
            pp=1,
            grad_accum=2,
            framework="megatron",
            sequence_parallel=False,
        )
    )
    assert step.step_breakdown(no_sp, PERF)["tp_comm"][0] == pytest.approx(
        step.step_breakdown(_megatron_without(no_sp, "tp_comm_overlap"), PERF)["tp_comm"][0]
    )


def test_megatron_accumulates_weight_gradients_in_the_gemm(cols):
    """fused_wgrad_accumulation: no 10 bytes per parameter per micro-batch of memory-bound
    accumulation; nanotron still pays them."""
    c = dict(cols("llama3-8b", dp=8, grad_accum=4, framework="megatron", zero_stage=1))
    fused = step.step_breakdown(c, PERF)["memory_bound"][0]
    unfused = step.step_breakdown(_megatron_without(c, "fused_wgrad_accumulation"), PERF)[
        "memory_bound"
    ][0]
    params = flops.total_params(c)[0]
    assert unfused - fused == pytest.approx(
        4 * step.GRAD_ACCUM_BYTES_PER_PARAM * params / c["hbm_bw"][0], rel=0.01
    )


def test_megatron_runs_its_output_head_in_bf16_under_fp8(cols):
    """fp8_head_in_bf16: the head's GEMM at the bf16 peak under fp8; in bf16 nothing
    changes. Without the trait it would take the measured fp8 speed-up, as the layers'."""
    fp8 = dict(cols("llama3-8b", dp=8, framework="megatron", dtype="fp8"))
    bf16 = dict(cols("llama3-8b", dp=8, framework="megatron"))
    assert step.lm_head_compute_s(fp8, PERF)[0] == pytest.approx(
        step.lm_head_compute_s(bf16, PERF)[0]
    )
    at_fp8 = step.lm_head_compute_s(_megatron_without(fp8, "fp8_head_in_bf16"), PERF)[0]
    assert at_fp8 == pytest.approx(
        step.lm_head_compute_s(fp8, PERF)[0] / fp8["fp8_gemm_speedup"][0]
    )


def test_megatron_hides_its_dp_reduction_and_gather_under_compute(cols):
    """overlaps_dp_with_compute: the gradient reduction hides under the whole backward of the
    last micro-batch (not the fitted dp_overlap's share) and ZeRO-1's gather under the first
    forward, so less of either is exposed than with the trait off."""
    c = dict(cols("llama3-8b", dp=32, grad_accum=2, framework="megatron", zero_stage=1))
    on = step.step_breakdown(c, PERF)
    off = step.step_breakdown(_megatron_without(c, "overlaps_dp_with_compute"), PERF)
    assert on["dp_comm"][0] < off["dp_comm"][0]
    assert on["step_time_s"][0] < off["step_time_s"][0]


def test_megatron_attention_runs_faster_than_the_measured_flash_attention_2_curve(cols):
    """hopper_attention_speedup: the measured curve's attention time divided by 1.5 for
    Megatron-Core (TE's cuDNN fused attention on Hopper); nanotron's stays on the curve."""
    from surrogate.hardware.profile import default_profile

    perf = default_profile("H100-SXM-80GB")
    c = dict(cols("llama3-8b", dp=8, framework="megatron"))
    _, attn = step.layer_compute_s(c, perf)
    _, curve = step.layer_compute_s(
        _megatron_without(c, "hopper_attention_speedup") | {"hopper_attention_speedup": np.ones(1)},
        perf,
    )
    assert attn[0] == pytest.approx(curve[0] / 1.5)
    n = dict(cols("llama3-8b", dp=8, framework="nanotron"))
    assert n["hopper_attention_speedup"][0] == 1.0


def test_megatron_attention_speedup_is_hopper_only(cols):
    """hopper_attention_speedup holds on H100 and H200 only: on an A100 Megatron-Core's
    attention takes the measured curve as every other framework's does."""
    from surrogate.hardware.profile import default_profile

    perf = default_profile("H100-SXM-80GB")  # its measured curve, on A100 columns
    c = dict(cols("llama3-8b", dp=8, framework="megatron", gpu="A100-SXM-80GB"))
    assert c["hopper"][0] == 0.0
    _, attn = step.layer_compute_s(c, perf)
    _, curve = step.layer_compute_s(c | {"hopper_attention_speedup": np.ones(1)}, perf)
    assert attn[0] == curve[0]
    h200 = dict(cols("llama3-8b", dp=8, framework="megatron", gpu="H200-SXM-141GB"))
    assert h200["hopper"][0] == 1.0


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_fp8_gemms_run_at_the_measured_speed_over_bf16(cols, framework):
    """fp8_gemm_speedup: under fp8 a Megatron or torchtitan layer's GEMMs take the bf16 time /
    1.84 (our H100's measured median; both call cuBLASLt's fp8 GEMM); in bf16 nothing changes;
    llm-foundry keeps the profile's fp8."""
    from surrogate.hardware.profile import default_profile

    perf = default_profile("H100-SXM-80GB")
    kw = dict(dp=8, framework=framework, zero_stage=2 if framework == "torchtitan" else 0)
    bf16 = dict(cols("llama3-8b", **kw))
    fp8 = dict(cols("llama3-8b", dtype="fp8", **kw))
    gemms = {
        k: np.subtract(*step.layer_compute_s(v, perf)) for k, v in (("bf16", bf16), ("fp8", fp8))
    }
    assert gemms["fp8"][0] == pytest.approx(gemms["bf16"][0] / 1.84)
    assert fp8["fp8_gemm_speedup"][0] == 1.84
    foundry = dict(cols("llama3-8b", dp=8, framework="llm-foundry", zero_stage=2, dtype="fp8"))
    assert foundry["fp8_gemm_speedup"][0] == 0.0


def test_torchtitan_tp_runs_synchronously_at_the_profile_time(cols):
    """tp_comm_synchronous: torchtitan's TP within a node costs the profile's time (no async
    TP by default), not the fitted tp_comm_scale nanotron's asynchronous TP sets."""
    from surrogate.analytic import comm

    c = dict(
        cols(
            "llama3-70b",
            dp=1,
            tp=8,
            grad_accum=2,
            framework="torchtitan",
            zero_stage=0,
            sequence_parallel=True,
        )
    )
    out = step.step_breakdown(c, PERF)
    assert out["tp_comm"][0] == pytest.approx(2 * 80 * comm.tp_time_per_layer_s(c, PERF)[0])
    scaled = step.step_breakdown({**c, "tp_comm_synchronous": np.zeros(1)}, PERF)
    assert scaled["tp_comm"][0] == pytest.approx(out["tp_comm"][0] * c["p_tp_comm_scale"][0])


def test_megatron_hides_its_interleaved_pipeline_transfers(cols):
    """overlaps_interleaved_pp_comm: with vpp > 1 Megatron's sends and receives run under the
    next chunk's compute (only the handshake waits stay); with vpp 1 they are exposed."""
    inter = dict(cols("llama3-8b", dp=1, pp=4, vpp=2, grad_accum=8, framework="megatron"))
    on = step.step_breakdown(inter, PERF)
    off = step.step_breakdown(_megatron_without(inter, "overlaps_interleaved_pp_comm"), PERF)
    assert on["pp_comm"][0] < off["pp_comm"][0]
    plain = dict(cols("llama3-8b", dp=1, pp=4, grad_accum=8, framework="megatron"))
    assert step.step_breakdown(plain, PERF)["pp_comm"][0] == pytest.approx(
        step.step_breakdown(_megatron_without(plain, "overlaps_interleaved_pp_comm"), PERF)[
            "pp_comm"
        ][0]
    )


def test_torchtitan_reduces_every_micro_batch_under_zero2_without_a_pipeline(cols):
    """reduces_every_microbatch: torchtitan's ZeRO-2 pays m - 1 more reduce-scatters a step
    (under each micro-batch's compute) without a pipeline; none with one micro-batch."""
    from surrogate.analytic import comm, memory

    c = dict(cols("llama3-8b", dp=8, grad_accum=4, framework="torchtitan", zero_stage=2))
    params = flops.total_params(c)
    dp = comm.dp_times_s(c, PERF, params, np.zeros(1))
    assert dp["zero3_per_microbatch"][0] == pytest.approx(dp["grad_reduce"][0] * 3 / 4)
    one = dict(cols("llama3-8b", dp=8, grad_accum=1, framework="torchtitan", zero_stage=2))
    assert comm.dp_times_s(one, PERF, params, np.zeros(1))["zero3_per_microbatch"][0] == 0
    assert memory.zero_shard_ranks(c)[0] == 8


def test_folded_experts_run_the_same_flops_in_another_shape(cols):
    """Folded (expert tensor parallelism 1), a rank's experts run T / tp x k rows at the full
    expert width instead of T x k rows at width / tp: at a constant GEMM efficiency the layer
    takes as long; the all-to-all sheds its gather over tp."""
    mega = cols(
        "mixtral-8x7b", dp=4, tp=2, ep=4, zero_stage=1, sequence_parallel=True, framework="megatron"
    )
    unfolded = {**mega, "moe_parallel_folding": np.zeros(1)}
    folded_s, _ = step.layer_compute_s(mega, PERF)
    split_s, _ = step.layer_compute_s(unfolded, PERF)
    assert folded_s[0] == pytest.approx(split_s[0], rel=1e-12)
    a, b = (step.step_breakdown(c, PERF) for c in (mega, unfolded))
    assert 0 < a["ep_comm"][0] < b["ep_comm"][0]


def test_grouped_expert_gemms_run_at_their_own_rows(cols):
    """Megatron-Core's grouped GEMM (FrameworkTraits.moe_grouped_gemm) runs one GEMM per local
    expert: at a constant efficiency it takes what one GEMM of all the rows takes; where the
    efficiency falls with the rows, it takes longer, by the per-expert shape's efficiency."""

    class RowBound(SpecPerfModel):
        def gemm_efficiency(self, m, n, k, c):
            return 0.7 * np.asarray(m) / (np.asarray(m) + 2048.0)

    mega = cols("mixtral-8x7b", dp=8, ep=4, zero_stage=1, framework="megatron")
    one = {**mega, "moe_grouped_gemm": np.zeros(1)}
    assert mega["moe_grouped_gemm"][0] == 1
    flat = [step.layer_compute_s(c, PERF)[0][0] for c in (mega, one)]
    assert flat[0] == pytest.approx(flat[1], rel=1e-12)
    slow = [step.layer_compute_s(c, RowBound())[0][0] for c in (mega, one)]
    assert slow[0] > slow[1]
    # torchtitan's torch._grouped_mm over the local experts' token groups: the same timing
    titan = cols("mixtral-8x7b", dp=8, ep=4, zero_stage=3, framework="torchtitan")
    assert titan["moe_grouped_gemm"][0] == 1
    titan_one = {**titan, "moe_grouped_gemm": np.zeros(1)}
    assert (
        step.layer_compute_s(titan, RowBound())[0][0]
        > step.layer_compute_s(titan_one, RowBound())[0][0]
    )


def _torchtitan_without(c: dict, *terms: str) -> dict:
    return {**c, **{t: np.zeros_like(c[t]) for t in terms}}


def test_torchtitan_reduces_its_gradients_in_fp32(cols):
    """reduces_gradients_in_fp32: torchtitan's FSDP2 reduce-scatters 4 bytes per parameter
    (reduce_dtype float32), twice the bf16 bytes; its all-gathers stay bf16."""
    from surrogate.analytic import comm

    c = dict(cols("llama3-8b", dp=64, framework="torchtitan", zero_stage=3))
    params = flops.total_params(c)
    fp32 = comm.dp_times_s(c, PERF, params, np.zeros(1))
    bf16 = comm.dp_times_s(
        _torchtitan_without(c, "reduces_gradients_in_fp32"), PERF, params, np.zeros(1)
    )
    assert 1.8 < fp32["grad_reduce"][0] / bf16["grad_reduce"][0] <= 2.0
    assert fp32["zero3_per_microbatch"][0] > bf16["zero3_per_microbatch"][0]
    ag = comm.dp_times_s({**c, "zero_stage": np.full(1, 2.0)}, PERF, params, np.zeros(1))
    assert ag["param_gather"][0] == pytest.approx(
        comm.dp_times_s(
            _torchtitan_without({**c, "zero_stage": np.full(1, 2.0)}, "reduces_gradients_in_fp32"),
            PERF,
            params,
            np.zeros(1),
        )["param_gather"][0]
    )


def test_torchtitan_runs_its_routed_experts_in_bf16_under_fp8(cols):
    """fp8_experts_in_bf16: torchtitan's Float8 converts nn.Linear only, so its routed
    experts' grouped GEMMs take their bf16 time under fp8; in bf16 nothing changes."""
    fp8 = dict(cols("mixtral-8x7b", dp=8, ep=8, zero_stage=3, framework="torchtitan", dtype="fp8"))
    bf16 = dict(cols("mixtral-8x7b", dp=8, ep=8, zero_stage=3, framework="torchtitan"))
    all_fp8 = _torchtitan_without(fp8, "fp8_experts_in_bf16")
    fp8_s, bf16_s, all_s = (step.layer_compute_s(c, PERF)[0][0] for c in (fp8, bf16, all_fp8))
    assert all_s < fp8_s < bf16_s
    assert step.layer_compute_s(_torchtitan_without(bf16, "fp8_experts_in_bf16"), PERF)[0][
        0
    ] == pytest.approx(bf16_s)


def test_an_fp8_head_takes_the_frameworks_measured_speed_up(cols):
    """torchtitan's output head is a Float8 linear under fp8: its GEMM takes the bf16 time
    divided by the measured speed-up (fp8_gemm_speedup), as the layers' do."""
    fp8 = dict(cols("llama3-8b", dp=8, framework="torchtitan", dtype="fp8"))
    bf16 = dict(cols("llama3-8b", dp=8, framework="torchtitan"))
    assert step.lm_head_compute_s(fp8, PERF)[0] == pytest.approx(
        step.lm_head_compute_s(bf16, PERF)[0] / fp8["fp8_gemm_speedup"][0]
    )


def test_torchtitans_pipeline_gathers_and_reduces_once_a_step(cols):
    """pipeline_keeps_fsdp_unsharded: with pp > 1 torchtitan's ZeRO-3 gathers once (the first
    forward) and reduce-scatters once (after the last backward), as its ZeRO-2; without a
    pipeline it gathers twice and reduces every micro-batch."""
    from surrogate.analytic import comm

    kw = dict(dp=8, tp=1, grad_accum=8, framework="torchtitan")
    piped = dict(cols("llama3-70b", pp=4, zero_stage=3, **kw))
    z2 = dict(cols("llama3-70b", pp=4, zero_stage=2, **kw))
    flat = dict(cols("llama3-70b", pp=1, zero_stage=3, **kw))
    n = flops.total_params(piped)
    got, as_z2 = (comm.dp_times_s(c, PERF, n, np.zeros(1)) for c in (piped, z2))
    assert got["zero3_per_microbatch"][0] == 0.0
    assert (
        got["param_gather"][0] == pytest.approx(as_z2["param_gather"][0])
        and got["param_gather"][0] > 0
    )
    assert got["grad_reduce"][0] == pytest.approx(as_z2["grad_reduce"][0])
    assert comm.dp_times_s(flat, PERF, n, np.zeros(1))["zero3_per_microbatch"][0] > 0
    other = _torchtitan_without(piped, "pipeline_keeps_fsdp_unsharded")
    assert comm.dp_times_s(other, PERF, n, np.zeros(1))["zero3_per_microbatch"][0] > 0
