"""Pipeline bubble, slots, micro-batches in flight and the split of layers into stages."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from surrogate.analytic import pipeline
from surrogate.analytic.inputs import to_cols

GRID = [(pp, m) for pp, m in itertools.product([1, 2, 4, 8], [1, 2, 3, 4, 8, 16, 64])]


def test_bubble_matches_the_seed_formula_over_a_grid(config):
    """Seed figure: 1F1B bubble = (pp - 1) / (m + pp - 1) (Narayanan et al. 2021)."""
    c = to_cols([config("playbook-1.34b", dp=1, pp=pp, grad_accum=m) for pp, m in GRID])
    expected = np.array([(pp - 1) / (m + pp - 1) for pp, m in GRID])
    got = pipeline.bubble_fraction(c)
    err = np.max(np.abs(got - expected))
    print(f"bubble over {len(GRID)} (pp, m) pairs: max abs. error {err:.2e}")
    assert err < 1e-12
    assert np.all(got[[i for i, (pp, _) in enumerate(GRID) if pp == 1]] == 0)
    np.testing.assert_allclose(pipeline.step_slots(c),
                               [m + pp - 1 for pp, m in GRID])


@pytest.mark.parametrize("pp,vpp,m", [(2, 2, 4), (4, 2, 8), (4, 4, 1), (8, 2, 16)])
def test_interleaving_divides_the_idle_part_by_vpp(config, pp, vpp, m):
    c = to_cols(
        [config("playbook-1.34b", dp=1, pp=pp, vpp=vpp, grad_accum=m, framework="megatron")]
    )
    idle = (pp - 1) / vpp
    assert pipeline.bubble_fraction(c)[0] == pytest.approx(idle / (m + idle))
    plain = to_cols([config("playbook-1.34b", dp=1, pp=pp, grad_accum=m)])
    assert pipeline.bubble_fraction(c)[0] < pipeline.bubble_fraction(plain)[0]


@pytest.mark.parametrize("pp,m", GRID)
def test_first_stage_holds_min_p_m_microbatches(config, pp, m):
    c = to_cols([config("playbook-1.34b", dp=1, pp=pp, grad_accum=m)])
    assert pipeline.first_stage_inflight(c)[0] == min(pp, m)


def test_interleaved_inflight_factor(config):
    c = to_cols([config("playbook-1.34b", dp=1, pp=4, vpp=2, grad_accum=8, framework="megatron")])
    assert pipeline.first_stage_inflight(c)[0] == pytest.approx(4 * (1 + 3 / 8))


@pytest.mark.parametrize("framework", ["torchtitan", "megatron"])
@pytest.mark.parametrize("pp", [1, 2, 4, 8])
def test_even_split(config, framework, pp):
    c = to_cols([config("llama3-8b", dp=1, pp=pp, framework=framework)])  # 32 layers
    assert pipeline.first_stage_layers(c)[0] == 32 / pp
    assert pipeline.last_stage_layers(c)[0] == 32 / pp


@pytest.mark.parametrize("preset", ["playbook-1.34b", "playbook-8.86b", "playbook-80b"])
@pytest.mark.parametrize("pp", [2, 4, 8])
def test_nanotron_split_moves_layers_off_the_head_stage(config, preset, pp):
    c = to_cols([config(preset, dp=1, pp=pp, gpus_per_node=8)])
    L = c["num_layers"][0]
    first, last = pipeline.first_stage_layers(c)[0], pipeline.last_stage_layers(c)[0]
    assert 1 <= first <= L and 0 <= last < L
    assert first >= np.ceil(L / pp) - 1  # the output head's cost pushes layers forward
    assert last <= first


def test_single_stage_holds_every_layer(config):
    c = to_cols([config("llama3-8b", dp=8)])
    assert pipeline.first_stage_layers(c)[0] == pipeline.last_stage_layers(c)[0] == 32
    assert pipeline.first_stage_inflight(c)[0] == 1


@pytest.mark.parametrize("pp,m", GRID)
def test_all_forward_all_backward_keeps_the_bubble_and_holds_every_micro_batch(config, pp, m):
    """GPipe (Huang et al. 2019): the 1F1B bubble, all m micro-batches in flight per stage."""
    c = to_cols([config("playbook-1.34b", dp=1, pp=pp, grad_accum=m, pp_schedule="afab")])
    onef = to_cols([config("playbook-1.34b", dp=1, pp=pp, grad_accum=m)])
    assert pipeline.bubble_fraction(c)[0] == pipeline.bubble_fraction(onef)[0]
    assert pipeline.first_stage_inflight(c)[0] == m
    for i in range(pp):
        assert pipeline.stage_inflight(c, i)[0] == m
