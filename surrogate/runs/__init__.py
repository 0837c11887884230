"""Measured runs and microbenchmarks as tables: their schemas, the status rule and the files
they are read from and appended to. Ingest writes them; every layer above reads them."""
