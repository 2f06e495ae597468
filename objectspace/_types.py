"""Type aliases of objectspace's public signatures (annotations only)."""
from __future__ import annotations

from typing import TypeAlias

Name: TypeAlias = "str | tuple[str | int | bytes, ...]"
"""An object's name: a non-empty str, or a non-empty tuple of str, int and bytes parts."""

StreamId: TypeAlias = "str | tuple[int, int]"
"""A stream entry's id: "ms-seq" (or "ms"), or an (ms, seq) tuple."""
