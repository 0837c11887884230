"""Microbenchmarks of GEMMs and collectives, run on a user's GPUs (or CPU, for CI).

A program that uses the ``surrogate`` library, not part of it: ``python -m microbench.gemm``,
``torchrun --nproc-per-node N -m microbench.collectives``, or ``surrogate microbench`` for the
standard suite. Output: JSON lines (schema in ``surrogate.ingest.microbench_jsonl``).
"""
