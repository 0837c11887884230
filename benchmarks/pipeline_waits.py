"""How cross-node pipelines lose time: the Playbook's pre-pp-fix nanotron pipelines against
two counts of handshake waits.

For every completed pre-pp-fix run whose pipeline crosses a node boundary (nearly all of
them), the step time the analytic model explains without any handshake wait (the shipped
parameters with ``pp_slot_latency_s`` = 0) is subtracted from the measured one. The rest is
printed by pipeline depth p and micro-batches m (runs of micro-batch size <= 8, where the
compute per slot is short), beside it the same rest per wait under two counts:

- ``slots``: min(p - 1, 2) x (m + p - 1), a wait per slot and per neighbour (the model up to
  the seventeenth session);
- ``waits``: min(p - 1, 2) x (m - 1) + (p - 2) (``surrogate.analytic.pipeline.
  cross_node_waits``), a wait per neighbour for every micro-batch after the first plus one per
  inner stage on the way through.

A count that describes the runs gives the same time per wait in every cell. Then the model's
log error (mean log(predicted / measured) step time) by p and m with each count at its own
wait, the other parameters as shipped (fitted with the ``waits`` count: ``surrogate calibrate
--runs playbook`` refits all of them with either).

    python benchmarks/pipeline_waits.py
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from surrogate.analytic import comm, pipeline
from surrogate.clusters import playbook_runs
from surrogate.fit_params import (
    blocks_for_runs,
    framework_version_of,
    predicted_step_s,
    values_in_use,
)

VERSION = "nanotron/pre-pp-fix"
MAX_MBS = 8


def pipeline_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per completed run of :data:`VERSION` whose pipeline crosses nodes: p, m,
    micro-batch size, measured step, predicted step with and without waits, the wait the
    shipped set fits, and the two counts."""
    blocks, _ = blocks_for_runs(runs)
    parts = []
    for b in blocks:
        if framework_version_of(b) != VERSION:
            continue
        vals = values_in_use(b)
        c = b.cols
        crosses = (c["pp"] > 1) & (comm.spans_nodes(c)["pp"] > 0)
        m, p = pipeline.microbatches(c), c["pp"]
        parts.append(pd.DataFrame({
            "pp": p, "m": m, "mbs": c["mbs"], "measured_s": b.step_time_s,
            "predicted_s": predicted_step_s(b, vals),
            "no_wait_s": predicted_step_s(b, {**vals, "pp_slot_latency_s": 0.0}),
            "wait_s": vals["pp_slot_latency_s"],
            "slots": np.minimum(p - 1, 2) * (m + p - 1),
            "waits": pipeline.cross_node_waits(c),
        })[crosses & np.isfinite(b.step_time_s)])
    return pd.concat(parts, ignore_index=True)


def main() -> None:
    runs = playbook_runs()
    runs = runs[runs["status"] == "completed"]
    t = pipeline_table(runs)
    t["rest_s"] = t["measured_s"] - t["no_wait_s"]
    short = t[t["mbs"] <= MAX_MBS]
    print(f"{len(t)} completed {VERSION} runs whose pipeline crosses nodes; {len(short)} of "
          f"micro-batch size <= {MAX_MBS} in the first table; shipped wait "
          f"{t['wait_s'].iloc[0]:.3f} s\n")
    print("1. measured step - the model without waits (s), median, and that per wait under "
          "each count")
    cells = short.groupby(["pp", "m"]).agg(
        runs=("rest_s", "size"), rest_s=("rest_s", "median"),
        slots=("slots", "first"), waits=("waits", "first"))
    cells["per_slot_s"] = cells["rest_s"] / cells["slots"]
    cells["per_wait_s"] = cells["rest_s"] / cells["waits"].where(cells["waits"] > 0)
    print(cells.round(3).to_string())
    print("\n2. each count at its own wait (the median of table 1's rest per wait over the "
          "runs that wait), mean log(predicted / measured) step time, all micro-batch sizes")
    err = {}
    for count in ("waits", "slots"):
        waiting = short[short[count] > 0]
        wait = float(np.median(waiting["rest_s"] / waiting[count]))
        err[f"{count} ({wait:.3f} s)"] = np.log((t["no_wait_s"] + wait * t[count])
                                                / t["measured_s"])
    errors = pd.DataFrame(err).assign(pp=t["pp"], m=t["m"])
    for col in ("pp", "m"):
        print(errors.groupby(col)[list(err)].mean().round(3).T.to_string())
    print("\nmean |log error|: " + ", ".join(
        f"{name} {errors[name].abs().mean():.3f}" for name in err))


if __name__ == "__main__":
    main()
