"""`surrogate microbench`: run the standard microbenchmark suite (microbenchmarks issue)."""

from __future__ import annotations
