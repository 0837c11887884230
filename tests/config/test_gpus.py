"""The hardware table: required GPUs, cited sources, sane units, names and aliases."""

from __future__ import annotations

import pytest

from surrogate.config.gpus import GPU_ALIASES, GPUS, canonical_gpu_name, get_gpu
from surrogate.errors import ConfigError

REQUIRED = (
    "H100-SXM-80GB",
    "H100-PCIe-80GB",
    "H200-SXM-141GB",
    "A100-SXM-40GB",
    "A100-SXM-80GB",
    "B200-SXM-180GB",
)


def test_table_holds_the_issue_gpus():
    assert set(REQUIRED) <= set(GPUS)


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_entry_is_sane_and_cited(name):
    g = GPUS[name]
    assert g.name == name
    assert g.source.strip(), f"{name} has no source"
    assert 16 <= g.memory_gib <= 256
    assert 100e12 <= g.bf16_dense_flops <= 5e15
    assert g.fp8_dense_flops is None or g.fp8_dense_flops == pytest.approx(
        2 * g.bf16_dense_flops, rel=0.01
    )
    assert g.hbm_bw_bytes_per_s > g.intra_node_bw_bytes_per_s >= g.inter_node_bw_bytes_per_s > 0
    assert 0 < g.intra_node_latency_s <= g.inter_node_latency_s < 1e-3


@pytest.mark.parametrize(
    "name,published_dense_bf16",
    [
        # datasheets quote sparse figures at twice the dense peak
        ("H100-SXM-80GB", 1979e12 / 2),
        ("H200-SXM-141GB", 1979e12 / 2),
        ("A100-SXM-80GB", 312e12),
        ("B200-SXM-180GB", 4.5e15 / 2),
    ],
)
def test_dense_bf16_peaks_match_datasheets(name, published_dense_bf16):
    got = GPUS[name].peak_flops("bf16")
    err = abs(got - published_dense_bf16) / published_dense_bf16
    print(
        f"{name}: bf16 dense {got / 1e12:.1f} TFLOPS vs datasheet "
        f"{published_dense_bf16 / 1e12:.1f}, rel. error {err:.2%}"
    )
    assert err < 0.005


def test_a100_has_no_fp8():
    for name in ("A100-SXM-40GB", "A100-SXM-80GB"):
        with pytest.raises(
            ConfigError,
            match=rf"dtype 'fp8' needs a GPU with FP8 tensor cores, "
            rf"got gpu={name}",
        ):
            GPUS[name].peak_flops("fp8")
    assert GPUS["H100-SXM-80GB"].peak_flops("fp8") > GPUS["H100-SXM-80GB"].peak_flops("bf16")


def test_unknown_dtype():
    with pytest.raises(ConfigError, match=r"dtype must be one of 'bf16', 'fp8', got 'fp16'"):
        GPUS["H100-SXM-80GB"].peak_flops("fp16")


@pytest.mark.parametrize("alias,canonical", sorted(GPU_ALIASES.items()))
def test_aliases_resolve(alias, canonical):
    assert canonical in GPUS
    assert canonical_gpu_name(alias) == canonical
    assert canonical_gpu_name(f" {alias.lower()} ") == canonical


def test_canonical_names_are_case_insensitive():
    for name in GPUS:
        assert canonical_gpu_name(name.lower()) == name
        assert get_gpu(name.upper()) is GPUS[name]


@pytest.mark.parametrize("bad", ["V100", "", "H100-SXM-40GB"])
def test_unknown_gpu(bad):
    with pytest.raises(
        ConfigError,
        match=r"gpu must be one of A100-SXM-40GB, .* \(or an alias "
        r"such as H100\), got ",
    ):
        get_gpu(bad)


@pytest.mark.parametrize(
    "name,rated,clock",
    [
        ("H100-SXM-80GB", 700, 1830),
        ("H100-PCIe-80GB", 350, 1620),
        ("H100-NVL-94GB", 400, 1545),
        ("H200-SXM-141GB", 700, 1830),
        ("H200-NVL-141GB", 600, 1545),
        ("H100-SXM-96GB", 700, 1830),
    ],
)
def test_hopper_parts_carry_power_and_the_clock_their_peak_implies(name, rated, clock):
    g = GPUS[name]
    assert g.rated_power_w == rated and g.power_limit_w == rated and g.sustained_scale == 1
    assert g.tensor_clock_mhz == pytest.approx(clock, abs=1)


def test_the_hbm2e_part_flags_its_assumptions():
    g = get_gpu("H100-96GB")
    assert g.name == "H100-SXM-96GB" and "assumed" in g.assumed
    assert all(not GPUS[n].assumed for n in REQUIRED)  # the datasheet parts assume nothing


def test_a_power_limit_scales_sustained_throughput_within_its_range():
    from surrogate.config.gpus import POWER_CAP_EXPONENT, power_cap_scale

    assert canonical_gpu_name("h100@500w") == "H100-SXM-80GB@500W"
    capped = get_gpu("H100-SXM-80GB@500W")
    assert capped.name == "H100-SXM-80GB" and capped.power_limit_w == 500
    assert capped.peak_flops("bf16") == GPUS["H100-SXM-80GB"].peak_flops("bf16")  # MFU's peak
    assert capped.sustained_scale == pytest.approx((500 / 700) ** POWER_CAP_EXPONENT)
    # the assumption's range: clock proportional to power (exponent 1) up to its cube root
    assert 500 / 700 < capped.sustained_scale < 1
    assert power_cap_scale(800, 700) == 1
    assert canonical_gpu_name("H100@700W") == "H100-SXM-80GB"  # the rated power: no limit
    with pytest.raises(ConfigError, match=r"power limit of H100-SXM-80GB must be at least 350 W"):
        canonical_gpu_name("H100@300W")
    with pytest.raises(ConfigError, match=r"needs the GPU's rated power"):
        canonical_gpu_name("A100@200W")
    with pytest.raises(ConfigError, match=r"gpu must be one of"):
        canonical_gpu_name("H100@lots")


def test_a_capped_gpu_predicts_slower_and_the_uncapped_unchanged():
    from surrogate.config.layout import ClusterConfig, LayoutConfig
    from surrogate.config.presets import get_preset
    from surrogate.config.training import TrainingConfig
    from surrogate.hardware.perf_models import PowerCapped, resolve_perf_model
    from surrogate.prediction.predict import predict

    assert not isinstance(resolve_perf_model("H100-SXM-80GB"), PowerCapped)
    assert isinstance(resolve_perf_model("H100@500W"), PowerCapped)

    def tps(gpu: str) -> float:
        cfg = TrainingConfig(
            model=get_preset("llama3-8b"),
            cluster=ClusterConfig(gpu=gpu, num_nodes=1),
            layout=LayoutConfig(framework="nanotron", dp=8, mbs=1, grad_accum=4, zero_stage=1),
        )
        return predict(cfg, model=None).tokens_per_s_per_gpu

    full, capped = tps("H100-SXM-80GB"), tps("H100-SXM-80GB@500W")
    assert capped < full
    assert capped > full * (500 / 700)  # only the tensor-core time slows, by at most the cap
