"""DB.scan's read in C (RFC 0012 step 4): ``DB._scan`` calls ``_native.db_scan`` first, which
builds the sources as ``DB._scan`` and ``Version.sources`` do (the active and sealed
memtables' ``scan_blocks``, the segments' and tables' ``Table.scan_blocks``, a level's tables
chained) as C iterators of the same chunks, with the same side effects on the block cache
(``_ref`` marks, ``hits``, restart hints; a block not in the cache is read by the table's
Python ``_read_ahead`` and ``_fetch``), and merges them as ``merge_visible`` does: one source
chunk by chunk, several in one go while they hold at most ``SMALL_MERGE`` records (a dict,
oldest source first, then sorted; tombstones dropped). A bigger range goes on in Python
(``_merge.merge_rest``, given the chunks read and the sources, which it reads on), and an
ObjectMissingError after the view changed goes on as a new ``DB._scan`` after the last key
given, as its loop does.

The Python code stays the reference and what runs without the C module or with
``OBJECTSPACE_NATIVE=0``: ``db_scan`` returns ``NO_RECORD`` (having done nothing) when the DB
is not the common case (an active memtable of another class, or whose class's methods or
slots changed; a view that is not a pair of a tuple and a version), and ``DB._scan``'s
Python runs whole; past that point a source, table or Version of another class, or whose
class's methods changed since setup (``scan_blocks``, ``block``, ``read_ahead``,
``sorted_keys``, ``sources``, ...), has its own Python method called in its place, and a
format-1 block goes to ``_table.list_chunk`` (tests/dkv/test_native_scan.py holds both paths
to the same results, errors and block cache state).
"""
from __future__ import annotations

from . import _getpath, _merge
from ._delta import Delta
from ._memtable import Memtable
from ._table import Table, list_chunk
from ._version import Version


def _load():
    if _getpath.db_get is None:     # no C module, OBJECTSPACE_NATIVE=0, or an older build
        return None
    from .format import _native
    if not hasattr(_native, "scan_setup"):     # pragma: no cover - an older build
        return None
    _native.scan_setup(Memtable, Table, Delta, Version, _merge.__dict__, _merge._live, _merge.chunk_parts, list_chunk)
    return _native.db_scan


db_scan = _load()
"""``dkv.format._native.db_scan`` set up, or None (no C module, or OBJECTSPACE_NATIVE=0)."""
