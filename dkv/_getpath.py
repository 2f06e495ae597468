"""DB.get's read in C (RFC 0012 step 3): ``DB.get`` calls ``_native.db_get`` first, which reads
the active memtable, the sealed sources (their bloom filters in one pass, each candidate's
dict or ``Table.get_probed``) and the SST levels (``Version.get``, ``Table.get``, ``owns``,
``_find``, ``_hints``, the block search) as the Python code below it does, with the same
results, errors and side effects on the block cache (``_ref`` marks, ``hits``; a block not in
the cache is read by the table's Python ``_fetch``).

The Python code stays the reference and what runs without the C module or with
``OBJECTSPACE_NATIVE=0``: ``db_get`` returns ``NO_RECORD`` (before changing anything) for a
read that is not the common case (a key that is not non-empty bytes, a closed DB, a probe of
the bloom filters to refresh, an unusual memtable or view), and DB.get's Python runs whole;
past that point, a source, table or Version of another class than the ones given here, or
whose class's methods or slots changed since (a monkeypatched ``get``, ``get_probed``,
``_find``, ``owns``), has its own Python method called in its place. An ObjectMissingError
of the levels after the view changed comes back as ``RETRY``: DB.get calls itself again, as
its Python does (tests/dkv/test_native_get.py holds both paths to the same results, errors
and block cache state).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

from ._delta import Delta
from ._memtable import NO_RECORD, Memtable
from ._table import _ONCE, Table, _hints, _list_get, _maybe
from ._version import Version
from .errors import ObjectMissingError
from .format._env import native_enabled
from .format._front import HINT_EVERY

RETRY = object()
"""What ``db_get`` returns when the levels raised ObjectMissingError and the view changed."""


def _load():
    if not native_enabled():
        return None
    try:
        from .format import _native
    except ImportError:         # pragma: no cover - no compiler when installed
        return None
    if not hasattr(_native, "get_setup"):     # pragma: no cover - an older build
        return None
    _native.get_setup(Memtable, Table, Delta, Version, NO_RECORD, RETRY, ObjectMissingError, _ONCE, _maybe, _hints,
                      _list_get, bisect_left, bisect_right, HINT_EVERY)
    return _native.db_get


db_get = _load()
"""``dkv.format._native.db_get`` set up, or None (no C module, or OBJECTSPACE_NATIVE=0)."""
