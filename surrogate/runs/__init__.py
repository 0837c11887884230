"""Measured runs and microbenchmarks as tables: their schemas, the status rule, the files they
are read from and appended to, and how each run is explained from its own columns. Ingest
writes them; every layer above reads them."""
