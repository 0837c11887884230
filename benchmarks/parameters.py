"""The analytic model's free parameters as they ship: mechanism, scope, physical range, prior,
and each fitted set's value with its standard deviation and the runs it was fitted on.

    python benchmarks/parameters.py [--markdown]

Prints one table per parameter kind (time, memory, error): the rows the docs page on the
analytic model shows. Values come from ``surrogate/data/analytic_params.json`` (the sets
``surrogate calibrate --runs`` fitted, and the default set fitted on every framework's runs).
"""

from __future__ import annotations

import argparse

from surrogate.analytic.params import DEFAULT_SET, FREE_PARAMETERS
from surrogate.calibration.parameter_files import shipped_parameter_sets


def _value(v: float) -> str:
    return f"{v:.3g}"


def table(kind: str) -> list[list[str]]:
    """Rows of the parameters of ``kind``: name, scope, unit, range, prior, then one column
    per shipped set (value, and +- sd where the fit gives one)."""
    sets = shipped_parameter_sets().as_dict()
    names = sorted(sets, key=lambda n: (n != DEFAULT_SET, n))
    rows = [["parameter", "scope", "unit", "range", "prior", *names]]
    for p in FREE_PARAMETERS:
        if p.kind != kind:
            continue
        row = [p.name, p.scope, p.unit, f"{_value(p.lower)}-{_value(p.upper)}", _value(p.prior)]
        for n in names:
            values, sd = sets[n].get("values", {}), sets[n].get("sd", {})
            if p.name not in values:
                row.append("(prior)")
                continue
            s = sd.get(p.name)
            row.append(_value(values[p.name]) + ("" if s is None else f" ± {_value(s)}"))
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="Markdown tables")
    args = ap.parse_args()
    sets = shipped_parameter_sets().as_dict()
    print("Fitted sets (runs for time / memory; the clusters their cluster-scoped values hold on)")
    for name in sorted(sets, key=lambda n: (n != DEFAULT_SET, n)):
        entry = sets[name]
        runs = entry.get("runs", {})
        where = ", ".join(entry.get("clusters", [])) or "any cluster"
        pooled = f"; pooled from {', '.join(entry['pooled'])}" if "pooled" in entry else ""
        print(
            f"  {name}: {runs.get('time', 0)} / {runs.get('memory', 0)} runs; "
            f"cluster-scoped values hold on {where}{pooled}"
        )
    for kind in ("time", "memory", "error"):
        rows = table(kind)
        print(f"\n{kind} parameters")
        if args.markdown:
            print("| " + " | ".join(rows[0]) + " |")
            print("|" + " --- |" * len(rows[0]))
            for r in rows[1:]:
                print("| " + " | ".join(r) + " |")
            continue
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print("\nMechanism and source of each parameter:")
    for p in FREE_PARAMETERS:
        print(f"  {p.name} ({p.scope}-scoped): {p.source}")


if __name__ == "__main__":
    main()
