"""DB's reads: ``get``, ``scan``, ``scan_prefix`` and ``prefetch`` (a mixin of DB, dkv/_db.py).

Reads take no lock: they look in the active memtable, then the sealed memtables and segments
and the SST levels of ``_view``, the pair of immutable sources and Version that writes and
background work replace whole. ``get`` and ``_scan`` call their C twins first
(``dkv/_getpath.py``, ``dkv/_scanpath.py``), which do the common case and hand anything else
back to the Python below, the reference.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from . import _getpath, _prefetch, _scanpath
from ._memtable import NO_RECORD, Memtable
from ._merge import merge_visible
from .batch import check_key
from .errors import ClosedError, ObjectMissingError
from .format.bloom import candidates as bloom_candidates

if TYPE_CHECKING:
    from ._table import BlockCache

_GET = _getpath.db_get
"""The C twin of DB.get (``dkv.format._native.db_get``, dkv/_getpath.py), or None."""
_RETRY = _getpath.RETRY
_SCAN = _scanpath.db_scan
"""The C twin of DB._scan (``dkv.format._native.db_scan``, dkv/_scanpath.py), or None."""


class ReadMixin:
    """What DB reads with: ``_active`` (the active memtable), ``_view`` (sealed sources and
    the Version), ``_probe`` (the sources' bloom filters, kept for the view they were made
    for), ``_seq``, ``_cache`` (the block cache) and ``_closed``."""

    if TYPE_CHECKING:
        _active: Memtable
        _view: tuple
        _probe: tuple
        _seq: int
        _cache: BlockCache
        _closed: bool

    def get(self, key: bytes) -> bytes | None:
        """The value of key, or None. Active memtable, immutable memtables newest first
        (skipped by key range and bloom filter), then L0 newest first and one table per
        deeper level; stops at the first hit. O(1) in the active memtable, else
        O(sources * (k + log n)) plus a block decode on a cache miss."""
        if _GET is not None:
            # The common case in C (dkv/_getpath.py); NO_RECORD: anything else, below, whole.
            got = _GET(self, key)
            if got is not NO_RECORD:
                return got if got is not _RETRY else self.get(key)
        if type(key) is not bytes or not key:
            key = check_key(key)
        if self._closed:
            raise ClosedError("this dkv store is closed")
        value = self._active.data.get(key, NO_RECORD)
        if value is not NO_RECORD:
            return value        # type: ignore[return-value]  # not NO_RECORD: bytes or None
        sources, version = self._view
        if sources:
            # The sealed memtables and segments whose bloom filters may hold the key, in
            # one C call (at a million keys a get passes dozens of segments).
            probe = self._probe
            if probe[0] is not sources:
                probe = self._probe = (sources, _filters(sources))
            for i in bloom_candidates(key, probe[1]):
                src = sources[i]
                if type(src) is Memtable:
                    value = src.data.get(key, NO_RECORD)
                    if value is not NO_RECORD:
                        return value        # type: ignore[return-value]  # as above
                elif src.min_key <= key <= src.max_key:
                    rec = src.get_probed(key)
                    if rec is not NO_RECORD:
                        return rec[1]
        try:
            rec = version.get(key)
        except ObjectMissingError:
            # A compaction replaced the tables this read started on and their files were
            # collected; the newest view has the same data. Re-raise if nothing changed.
            if self._view[1] is version:
                raise
            return self.get(key)
        return None if rec is NO_RECORD else rec[1]

    def scan(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Iterate (key, value) for start <= key < end in ascending order (heap merge of all
        sources; the newest version wins, tombstones hide). Writes during iteration are safe."""
        if start is not None:
            start = check_key(start)
        if end is not None:
            end = check_key(end)
        if self._closed:
            raise ClosedError("this dkv store is closed")
        if start is not None and end is not None and start >= end:
            return iter(())
        return self._scan(start, end)

    def _scan(self, start, end):
        if _SCAN is not None:
            # The common case in C (dkv/_scanpath.py): the sources and their merge, up to a
            # retry after an ObjectMissingError; NO_RECORD: not the common case, below, whole.
            pairs = _SCAN(self, start, end)
            if pairs is not NO_RECORD:
                yield from pairs
                return
        while True:
            active = self._active
            immutable, version = self._view
            sources = [active.scan_blocks(start, end, self._seq + 1)] if active.data else []
            for src in immutable:
                if type(src) is Memtable:
                    sources.append(src.scan_blocks(start, end, src.max_seq))
                elif (end is None or src.min_key < end) and (start is None or src.max_key >= start):
                    sources.append(src.scan_blocks(start, end))
            sources += version.sources(start, end)
            last = None
            try:
                # A chunk's records at C speed; a source reads its next block only after the
                # chunk before it was given out whole, so ``last`` is where a resume starts.
                for pairs, last in merge_visible(sources):
                    yield from pairs
                return
            except ObjectMissingError:
                # Files of this view were compacted away and collected: resume on the new view,
                # after the last key given.
                if self._view[1] is version or self._closed:
                    raise
                if last is not None:
                    start = last + b"\x00"

    def scan_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Iterate (key, value) for keys starting with prefix, ascending."""
        prefix = check_key(prefix)
        return self.scan(prefix, prefix_end(prefix))

    def prefetch(self, ranges: Iterable[tuple[bytes, bytes | None]]) -> dict:
        """Read ahead, at once, what reads of keys in ``ranges`` (``(lo, hi)`` pairs, ``hi``
        None for no end) will need from the tables: their tails in parallel, then their
        blocks concurrently by range, or a table fetched whole where that costs less (a
        store on S3; a local store reads lazily as before). For a caller that knows the
        keys it is about to read, on a store just opened remotely; returns what it did
        (see dkv/_prefetch.py). Reads return the same either way."""
        if self._closed:
            raise ClosedError("this dkv store is closed")
        return _prefetch.prefetch(self._view[1], self._cache, ranges)


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with prefix (None if there is none)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


def _filters(sources: tuple) -> tuple:
    """Per read source, its bloom filter as ``bloom.candidates`` takes it: None for a
    memtable (a dict lookup) or a table without one."""
    out = []
    for src in sources:
        bloom = None if type(src) is Memtable else src.meta().bloom
        out.append(None if bloom is None else bloom.probe())
    return tuple(out)
