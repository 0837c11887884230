"""The hardware table: required GPUs, cited sources, sane units, names and aliases."""

from __future__ import annotations

import pytest

from surrogate.config.gpus import GPU_ALIASES, GPUS, canonical_gpu_name, get_gpu
from surrogate.errors import ConfigError

REQUIRED = ("H100-SXM-80GB", "H100-PCIe-80GB", "H200-SXM-141GB", "A100-SXM-40GB",
            "A100-SXM-80GB", "B200-SXM-180GB")


def test_table_holds_the_issue_gpus():
    assert set(REQUIRED) <= set(GPUS)


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_entry_is_sane_and_cited(name):
    g = GPUS[name]
    assert g.name == name
    assert g.source.strip(), f"{name} has no source"
    assert 16 <= g.memory_gib <= 256
    assert 100e12 <= g.bf16_dense_flops <= 5e15
    assert g.fp8_dense_flops is None or g.fp8_dense_flops == pytest.approx(2 * g.bf16_dense_flops,
                                                                           rel=0.01)
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
    print(f"{name}: bf16 dense {got / 1e12:.1f} TFLOPS vs datasheet "
          f"{published_dense_bf16 / 1e12:.1f}, rel. error {err:.2%}")
    assert err < 0.005


def test_a100_has_no_fp8():
    for name in ("A100-SXM-40GB", "A100-SXM-80GB"):
        with pytest.raises(ConfigError, match=rf"dtype 'fp8' needs a GPU with FP8 tensor cores, "
                                              rf"got gpu={name}"):
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
    with pytest.raises(ConfigError, match=r"gpu must be one of A100-SXM-40GB, .* \(or an alias "
                                          r"such as H100\), got "):
        get_gpu(bad)
