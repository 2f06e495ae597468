"""Whether the optional C helpers are used (RFC 0012).

``OBJECTSPACE_NATIVE=0`` in the environment makes objectspace and dkv use their pure-Python
codecs (the reference) even where the C twins are built: CI runs the dkv and objectspace
suites that way too, so both paths stay tested on one machine. Read at import.
"""
from __future__ import annotations

import os

ENV = "OBJECTSPACE_NATIVE"


def native_enabled() -> bool:
    """False when ``OBJECTSPACE_NATIVE`` is ``0`` (or ``false``/``no``/``off``)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")
