"""Pipeline bubble, slots, micro-batches in flight and the split of layers into stages."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from surrogate.analytic import pipeline
from surrogate.analytic.inputs import to_cols
from surrogate.calibration.parameter_files import shipped_parameter_sets
from surrogate.config.model import ModelConfig

GRID = [(pp, m) for pp, m in itertools.product([1, 2, 4, 8], [1, 2, 3, 4, 8, 16, 64])]


def test_bubble_matches_the_seed_formula_over_a_grid(config):
    """Seed figure: 1F1B bubble = (pp - 1) / (m + pp - 1) (Narayanan et al. 2021)."""
    c = to_cols(
        [config("playbook-1.34b", dp=1, pp=pp, grad_accum=m) for pp, m in GRID],
        shipped_parameter_sets(),
    )
    expected = np.array([(pp - 1) / (m + pp - 1) for pp, m in GRID])
    got = pipeline.bubble_fraction(c)
    err = np.max(np.abs(got - expected))
    print(f"bubble over {len(GRID)} (pp, m) pairs: max abs. error {err:.2e}")
    assert err < 1e-12
    assert np.all(got[[i for i, (pp, _) in enumerate(GRID) if pp == 1]] == 0)
    np.testing.assert_allclose(pipeline.step_slots(c), [m + pp - 1 for pp, m in GRID])


@pytest.mark.parametrize("pp,vpp,m", [(2, 2, 4), (4, 2, 8), (4, 4, 1), (8, 2, 16)])
def test_interleaving_divides_the_idle_part_by_vpp(config, pp, vpp, m):
    c = to_cols(
        [config("playbook-1.34b", dp=1, pp=pp, vpp=vpp, grad_accum=m, framework="megatron")],
        shipped_parameter_sets(),
    )
    idle = (pp - 1) / vpp
    assert pipeline.bubble_fraction(c)[0] == pytest.approx(idle / (m + idle))
    plain = to_cols([config("playbook-1.34b", dp=1, pp=pp, grad_accum=m)], shipped_parameter_sets())
    assert pipeline.bubble_fraction(c)[0] < pipeline.bubble_fraction(plain)[0]


@pytest.mark.parametrize("pp,m", GRID)
def test_first_stage_holds_min_p_m_microbatches(config, pp, m):
    c = to_cols([config("playbook-1.34b", dp=1, pp=pp, grad_accum=m)], shipped_parameter_sets())
    assert pipeline.first_stage_inflight(c)[0] == min(pp, m)


def test_interleaved_inflight_factor(config):
    c = to_cols(
        [config("playbook-1.34b", dp=1, pp=4, vpp=2, grad_accum=8, framework="megatron")],
        shipped_parameter_sets(),
    )
    assert pipeline.first_stage_inflight(c)[0] == pytest.approx(4 * (1 + 3 / 8))


@pytest.mark.parametrize("pp", [1, 2, 4, 8])
def test_even_split(config, pp):
    c = to_cols(
        [config("llama3-8b", dp=1, pp=pp, framework="megatron")], shipped_parameter_sets()
    )  # 32 layers
    assert pipeline.first_stage_layers(c)[0] == 32 / pp
    assert pipeline.last_stage_layers(c)[0] == 32 / pp


def torchtitan_stages(num_stages, num_layers):
    """Transformer layers per virtual stage, transcribed from torchtitan 0.2.2's
    ``_generate_llm_fqn_per_model_part`` (input and output weight 1, the defaults)."""
    slots = num_layers + 2
    base, extra = divmod(slots, num_stages)
    out, current = [], 0
    for stage in range(num_stages):
        take = base + (stage < extra) - (stage == 0) - (stage == num_stages - 1)
        take = min(take, num_layers - current)
        out.append(take)
        current += take
    assert current == num_layers
    return out


@pytest.mark.parametrize(
    "layers,pp,vpp",
    [
        (32, 2, 1),
        (32, 4, 1),
        (32, 8, 1),
        (32, 4, 2),
        (32, 4, 3),
        (30, 8, 2),
        (126, 16, 1),
        (126, 16, 2),
        (126, 16, 4),
        (80, 8, 5),
        (61, 4, 1),
        (61, 4, 2),
        (6, 2, 2),
        (8, 4, 2),
    ],
)
def test_torchtitan_weighted_split(config, layers, pp, vpp):
    """Rank i runs virtual stages i, i + pp, ...; every rank's layers, the first and the last,
    and the start of each rank's first virtual stage agree with torchtitan's generator."""
    model = ModelConfig(
        num_layers=layers,
        hidden_size=1024,
        ffn_hidden_size=4096,
        num_heads=8,
        num_kv_heads=8,
        vocab_size=32000,
        seq_len=2048,
    )
    c = to_cols(
        [config(model, dp=1, pp=pp, vpp=vpp, framework="torchtitan")], shipped_parameter_sets()
    )
    virtual = torchtitan_stages(pp * vpp, layers)
    per_rank = [sum(virtual[r::pp]) for r in range(pp)]
    got = [float(pipeline.stage_layers(c, r)[0]) for r in range(pp)]
    assert got == per_rank
    assert pipeline.first_stage_layers(c)[0] == per_rank[0]
    assert pipeline.last_stage_layers(c)[0] == per_rank[-1]
    starts = np.cumsum([0, *virtual])[:pp]
    assert [float(pipeline.stage_start(c, r)[0]) for r in range(pp)] == list(starts)


@pytest.mark.parametrize("preset", ["playbook-1.34b", "playbook-8.86b", "playbook-80b"])
@pytest.mark.parametrize("pp", [2, 4, 8])
def test_nanotron_split_moves_layers_off_the_head_stage(config, preset, pp):
    c = to_cols([config(preset, dp=1, pp=pp, gpus_per_node=8)], shipped_parameter_sets())
    L = c["num_layers"][0]
    first, last = pipeline.first_stage_layers(c)[0], pipeline.last_stage_layers(c)[0]
    assert 1 <= first <= L and 0 <= last < L
    assert first >= np.ceil(L / pp) - 1  # the output head's cost pushes layers forward
    assert last <= first


def test_single_stage_holds_every_layer(config):
    c = to_cols([config("llama3-8b", dp=8)], shipped_parameter_sets())
    assert pipeline.first_stage_layers(c)[0] == pipeline.last_stage_layers(c)[0] == 32
    assert pipeline.first_stage_inflight(c)[0] == 1


@pytest.mark.parametrize("pp,m", GRID)
def test_all_forward_all_backward_keeps_the_bubble_and_holds_every_micro_batch(config, pp, m):
    """GPipe (Huang et al. 2019): the 1F1B bubble, all m micro-batches in flight per stage."""
    c = to_cols(
        [config("playbook-1.34b", dp=1, pp=pp, grad_accum=m, pp_schedule="afab")],
        shipped_parameter_sets(),
    )
    onef = to_cols([config("playbook-1.34b", dp=1, pp=pp, grad_accum=m)], shipped_parameter_sets())
    assert pipeline.bubble_fraction(c)[0] == pipeline.bubble_fraction(onef)[0]
    assert pipeline.first_stage_inflight(c)[0] == m
    for i in range(pp):
        assert pipeline.stage_inflight(c, i)[0] == m


def megatron_rank_layers(layers: int, pp: int, vpp: int) -> list[int]:
    """Megatron-Core 0.16.1's ``get_num_layers_to_build`` summed over each rank's model chunks,
    with ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``
    (transcribed): (L + 2) / pp layers per rank split into vpp chunks, one fewer on the first
    chunk of rank 0 and on the last chunk of rank pp - 1."""
    per_chunk = (layers + 2) // pp // vpp
    out = []
    for rank in range(pp):
        chunks = [
            per_chunk - (rank == 0 and v == 0) - (rank == pp - 1 and v == vpp - 1)
            for v in range(vpp)
        ]
        out.append(sum(chunks))
    return out


@pytest.mark.parametrize(
    "layers,pp,vpp", [(126, 8, 8), (126, 8, 1), (126, 4, 2), (30, 4, 2), (62, 8, 4)]
)
def test_megatron_counts_the_embedding_and_loss_where_the_layers_do_not_divide(
    config, layers, pp, vpp
):
    """Llama 3.1 405B's 126 layers on pp 8 x vpp 8 (Megatron-Bridge's recipe): 128 slots, 15
    layers on the first and last ranks, 16 on the others."""
    model = ModelConfig(
        num_layers=layers,
        hidden_size=1024,
        ffn_hidden_size=4096,
        num_heads=8,
        num_kv_heads=8,
        vocab_size=32000,
        seq_len=2048,
    )
    c = to_cols(
        [config(model, dp=1, pp=pp, vpp=vpp, framework="megatron")], shipped_parameter_sets()
    )
    expected = megatron_rank_layers(layers, pp, vpp)
    assert sum(expected) == layers
    assert [float(pipeline.stage_layers(c, r)[0]) for r in range(pp)] == expected
    assert pipeline.first_stage_layers(c)[0] == expected[0]
    assert pipeline.last_stage_layers(c)[0] == expected[-1]


def test_megatron_splits_evenly_where_the_layers_divide(config):
    c = to_cols(
        [config("llama3-70b", dp=1, pp=8, vpp=5, framework="megatron")], shipped_parameter_sets()
    )
    assert [float(pipeline.stage_layers(c, r)[0]) for r in range(8)] == [10.0] * 8
    assert pipeline.slot_split(c)[0] == 0
