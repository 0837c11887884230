"""The project's exceptions: one small hierarchy, so callers can tell the failures apart.

- :class:`ConfigError`: the configuration is invalid (it could never run as given).
- :class:`DataError`: an input file or table is malformed or breaks the schema.
- :class:`NoModelError`: a learned model was asked for but none is fitted or found.
- :class:`MeasurementError`: a microbenchmark could not measure (timeout, backend failure).

The CLI turns any :class:`SurrogateError` into one line on stderr and exit code 2.
"""

from __future__ import annotations


class SurrogateError(Exception):
    """Base class of every error the project raises on purpose."""


class ConfigError(SurrogateError, ValueError):
    """A configuration breaks a rule; the message says what must hold and what was given."""


class DataError(SurrogateError, ValueError):
    """A data file or table is malformed or breaks the schema."""


class NoModelError(SurrogateError, LookupError):
    """A learned model was required but none is fitted or available."""


class MeasurementError(SurrogateError, RuntimeError):
    """A measurement failed or timed out."""
