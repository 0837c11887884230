"""The training data prepared once from a sweep table: a part of it is the part's own
preparation, the targets are the measurements over the analytic answer, and the sources are
balanced."""

from __future__ import annotations

import numpy as np

from surrogate.learned.training_data import training_data


def test_a_part_of_the_prepared_data_is_the_parts_own_preparation(playbook_subset):
    rows = np.arange(3, 400, 7)
    part = training_data(playbook_subset).take(rows)
    own = training_data(playbook_subset.iloc[rows])
    assert part.runs.equals(own.runs) and part.X.equals(own.X)
    for name in ("y_status", "done", "y_mfu", "mem_ok", "y_mem", "mem_floor", "groups"):
        np.testing.assert_array_equal(getattr(part, name), getattr(own, name), err_msg=name)
    for k in own.analytic:
        np.testing.assert_array_equal(part.analytic[k], own.analytic[k], err_msg=k)
    for k in own.cols:
        np.testing.assert_array_equal(part.cols[k], own.cols[k], err_msg=k)
    assert part.data_hash == own.data_hash


def test_targets_are_the_measurements_over_the_analytic_answer(playbook_subset):
    data = training_data(playbook_subset)
    runs = data.runs
    completed = (runs["status"] == "completed").to_numpy()
    np.testing.assert_array_equal(data.done, completed & (runs["tokens_per_s_per_gpu"] > 0))
    np.testing.assert_array_equal(data.mem_ok, completed & (runs["peak_mem_reserved_gib"] > 0))
    np.testing.assert_array_equal(
        data.y_status, runs["status"].map({"completed": 0, "oom": 1, "fail": 2, "timeout": 2})
    )
    i = int(np.flatnonzero(data.done & data.mem_ok)[0])
    assert data.y_mfu[i] == np.log(
        runs["tokens_per_s_per_gpu"][i] / data.analytic["tokens_per_s_per_gpu"][i]
    )
    assert data.y_mem[i] == np.log(
        runs["peak_mem_reserved_gib"][i] * 2**30 / data.analytic["mem_reserved_logged"][i]
    )
    # the Playbook's memory is world rank 0's, on the first pipeline stage: the memory target is
    # over that stage's, which is the most loaded stage's without a pipeline, not always with one
    logged, peak = data.analytic["mem_reserved_logged"], data.analytic["mem_reserved"]
    piped = (runs["pp"] > 1).to_numpy()
    np.testing.assert_array_equal(logged[~piped], peak[~piped])
    assert (logged[piped] <= peak[piped]).all() and (logged[piped] < peak[piped]).any()
    assert np.isnan(data.y_mfu[~data.done]).all() and np.isnan(data.y_mem[~data.mem_ok]).all()
    # a run out of memory needed more than the GPU: its memory target is censored from below
    oom = data.y_status == 1
    assert oom.any() and np.isnan(data.mem_floor[~oom]).all()
    np.testing.assert_allclose(
        data.mem_floor[oom],
        np.log(data.cols["memory_bytes"][oom] / data.analytic["mem_reserved"][oom]),
    )


def test_source_weights_balance_sources():
    import pandas as pd

    from surrogate.learned.training_data import source_weights

    runs = pd.DataFrame({"source": ["a"] * 6 + ["b"] * 2})
    assert source_weights(runs).tolist() == [1.0] * 6 + [3.0, 3.0]
    assert source_weights(runs.head(6)).tolist() == [1.0] * 6
