"""The checks every configuration field goes through: counts, flags, dtypes, and the largest
count a configuration may hold. Each raises :class:`~surrogate.errors.ConfigError` saying what
must hold and what was given."""

from __future__ import annotations

from typing import Any, Literal, get_args

from surrogate.errors import ConfigError

Dtype = Literal["bf16", "fp8"]
DTYPES: tuple[str, ...] = get_args(Dtype)


MAX_COUNT = 2**53
"""Largest count (of layers, ranks, tokens, ...) a configuration may hold: the analytic model
computes in float64, whose integers are exact up to 2**53 (9.0e15, some 300 times the tokens
of the largest published training sets), and tables store int64. Beyond it a count would be
rounded or overflow, so it is an error, not a prediction."""
MAX_TEXT = f"2**53 = {MAX_COUNT:,}"


def positive_int(owner: str, name: str, value: Any, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{owner}.{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{owner}.{name} must be an integer >= {minimum}, got {value}")
    if value > MAX_COUNT:
        got = f"{value:,}" if value < 10**30 else f"a {len(str(value))}-digit number"
        raise ConfigError(
            f"{owner}.{name} must be at most {MAX_TEXT} (counts are exact in "
            f"float64 up to there), got {got}"
        )


def capped_count(value: Any, flag: str, cap: int, why: str) -> None:
    """ConfigError unless ``value`` is an integer in [1, ``cap``]; past the cap the message
    gives ``why`` (what the cap spares the user)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{flag} must be >= 1, got {value!r}")
    if value > cap:
        raise ConfigError(f"{flag} must be at most {cap:,}, got {value:,}: {why}")


def check_ints(obj: Any, names: tuple[str, ...], *, minimum: int = 1) -> None:
    owner = type(obj).__name__
    for n in names:
        positive_int(owner, n, getattr(obj, n), minimum=minimum)


def check_bool(obj: Any, name: str) -> None:
    value = getattr(obj, name)
    if not isinstance(value, bool):
        raise ConfigError(f"{type(obj).__name__}.{name} must be true or false, got {value!r}")
