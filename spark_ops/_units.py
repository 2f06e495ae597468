"""Durations and memory sizes as users write them ("10 seconds", "512m"): the arguments of
``apply_operator``, the operator functions and the test harness."""
from __future__ import annotations

import datetime as _dt
import re
from typing import TypeAlias

Duration: TypeAlias = "int | _dt.timedelta | str"
"""A duration as users write it: milliseconds (an int), a timedelta or "10 seconds"."""
Memory: TypeAlias = "int | str"
"""A memory size as users write it: bytes (an int) or "512m", "2g", "64 MiB"."""

_UNITS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "sec": 1000, "second": 1000,
          "seconds": 1000, "m": 60_000, "min": 60_000, "minute": 60_000, "minutes": 60_000,
          "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "day": 86_400_000, "days": 86_400_000}


def duration_ms(value, what: str = "duration") -> int:
    """Milliseconds from an int (ms), a timedelta or a string like "10 seconds"."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be ms, a timedelta or a string like '10 seconds', got {value!r}")
    if isinstance(value, int):
        ms = value
    elif isinstance(value, _dt.timedelta):
        ms = int(value.total_seconds() * 1000)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*", value)
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"{what} {value!r} is not like '10 seconds', '5 minutes' or '250 ms'")
        ms = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    else:
        raise TypeError(f"{what} must be ms, a timedelta or a string like '10 seconds', got {value!r}")
    if ms < 0:
        raise ValueError(f"{what} must not be negative, got {value!r}")
    return ms


_SIZES = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def memory_bytes(value, what: str = "memory") -> int:
    """Bytes from an int or a string like "512m", "2g" or "64 MiB" (powers of 1024)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what} must be bytes (an int) or a string like '512m', got {value!r}")
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
        if not m or m.group(2).lower() not in _SIZES:
            raise ValueError(f"{what} {value!r} is not like '512m', '2g' or '64 MiB'")
        value = int(float(m.group(1)) * _SIZES[m.group(2).lower()])
    if value < 8 << 20:
        raise ValueError(f"{what} must be at least 8 MiB, got {value:,} bytes")
    return value
