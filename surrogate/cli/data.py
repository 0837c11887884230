"""`surrogate ingest`, `surrogate data fetch`, `surrogate data summary` (datasets issue)."""

from __future__ import annotations
