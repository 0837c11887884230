"""The analytic model: pure functions of configuration columns, numbers in and numbers out.

Every function takes :class:`~surrogate.analytic.inputs.Cols` (one float64 array per
configuration column, one element per configuration) and returns arrays, so one code path
serves a single ``predict`` and a vectorised search over thousands of layouts. No I/O, no
torch, no logging. Each formula names its source.
"""
