"""The project's exceptions: one small hierarchy, so callers can tell the failures apart.

- :class:`ConfigError`: the configuration is invalid (it could never run as given).
- :class:`DataError`: an input file or table is malformed or breaks the schema.
- :class:`NoModelError`: a learned model was asked for but none is fitted or found.
- :class:`MeasurementError`: a microbenchmark could not measure (timeout, backend failure).
- :class:`OutputError`: an output could not be written (a full disk, a file-size limit, a
  closed or full stream); the message names the file or stream.

The CLI turns any :class:`SurrogateError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

import reprlib


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


class OutputError(SurrogateError, OSError):
    """An output could not be written; the message names the file or stream and why
    (``reason``: the why alone, for a caller that names a larger output)."""

    reason: str = ""


MESSAGE_VALUE_CHARS = 80
"""Longest value an error message quotes whole; a longer one is cut (:func:`shown`)."""


def shorten(text: str, limit: int = MESSAGE_VALUE_CHARS) -> str:
    """``text``, or its first ``limit`` characters and how long it was: an error message must
    stay one readable line whatever the input held (a YAML alias can expand a short file into
    billions of characters)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def shown(value: object, limit: int = MESSAGE_VALUE_CHARS) -> str:
    """The ``repr`` of ``value`` for an error message, cut to ``limit`` characters; a container
    is abbreviated by :mod:`reprlib` before it is turned into text, so a huge one costs
    nothing."""
    r = reprlib.Repr()
    r.maxstring = r.maxother = limit
    r.maxlist = r.maxdict = r.maxtuple = r.maxset = 8
    r.maxlevel = 3
    return shorten(r.repr(value), limit)
