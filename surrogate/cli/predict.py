"""`surrogate predict`."""

from __future__ import annotations
