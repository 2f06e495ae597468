"""Whether dkv's optional C helpers (``_native``) are used (RFC 0012).

``OBJECTSPACE_NATIVE=0`` in the environment makes dkv use the pure-Python twins (the
reference: ``_front.py``, ``bloom.py``) and objectspace its Python value codec
(``objectspace/_codec.py``, which asks this function) even where the C modules are built, so
that CI runs the suites on both paths on one machine. Each module reads it at import.
"""
from __future__ import annotations

import os

ENV = "OBJECTSPACE_NATIVE"


def native_enabled() -> bool:
    """False when ``OBJECTSPACE_NATIVE`` is ``0`` (or ``false``/``no``/``off``)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")
