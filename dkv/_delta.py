"""Immutable memtables, kept as their WAL segments' bytes.

When a memtable is sealed (at a checkpoint, or when it outgrows ``memtable_bytes``) its
records are encoded once, as the WAL segment that the checkpoint uploads, and that same
encoding stays in memory as a read source until a flush merges it into an SST: a
``Delta``. Encoded, a record takes a few bytes (zstd over sorted keys) where a dict entry
takes a few hundred, so many checkpoint intervals fit in memory and records that die
within them (queue slots appended and popped) never reach an SST with their values (only
a tombstone, when older tables might hold the key). A Delta reads like a
Table (it is one, over in-memory bytes): blocks decoded on demand through the shared
block cache, a bloom filter built in memory (WAL segments carry none), key-group
clipping after a rescale. Reopening a store parses its live segments into Deltas
without decoding them.
"""
from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import cast

from .errors import CorruptionError
from .format import bloom, sst, wal
from .format._codec import crc32
from .format.manifest import ALL_KEY_GROUPS, TableRef
from ._table import Table, decoded_bytes, raw_cost


class _Blob:
    """The tiny ObjectStore face of a segment's bytes, for Table's block reads (any name:
    the one segment's)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def get(self, name, start, end):
        return self.data[start:end]


class Delta(Table):
    """A WAL segment as a read source. ``keys``: its keys when the caller has them (a
    sealed memtable), so the bloom filter needs no decoding."""

    __slots__ = ("max_seq", "index", "_keys", "_strip", "_crcs")
    read_ahead = False

    def __init__(self, name: str, data: bytes, index: wal.SegmentIndex, cache, groups=ALL_KEY_GROUPS,
                 keys: list | None = None, strip: tuple | None = None) -> None:
        if index.first_keys and index.first_keys[0] is None:       # one unblocked record batch
            k, _, _ = wal.decode_block(data[index.offsets[0]:index.offsets[0] + index.lengths[0]], name,
                                       index.version)
            keys = k
            index.first_keys, index.last_key = [k[0]], k[-1]
        ref = TableRef(name, len(data), index.min_key or b"", index.last_key or b"", index.max_seq,
                       index.max_seq, index.count, tuple(groups))
        super().__init__(ref, _Blob(data), cache)
        self.max_seq = index.max_seq
        self.index = index
        self._keys = keys
        self._strip = strip         # the bloom filter's strip rule (the store's bloom_strip)
        self._crcs: array | None = None     # each block's CRC-32 once read from a store (read_from)

    @property
    def nbytes(self) -> int:
        """Bytes held: the encoded segment (decoded blocks count in the block cache)."""
        return self.ref.size

    def _load_meta(self) -> sst.SstMeta:
        ix = self.index
        keys = self._keys
        if keys is None:
            keys = [k for ks, _ in self.records() for k in ks]
        self._keys = None       # only the filter needs them
        strip = self._strip
        filt = bloom.Bloom(bloom.build(keys, strip=strip), strip) if keys else None
        # (first_keys holds no None here: __init__ put in an unblocked segment's first key)
        return sst.SstMeta(ix.count, 0, ix.min_key, ix.last_key, ix.max_seq, ix.max_seq, self.ref.size, filt,
                           cast("list[bytes]", ix.first_keys), ix.offsets, ix.lengths, [None] * len(ix.offsets))

    def read_from(self, store) -> None:
        """Read the segment's blocks from ``store`` (its file, this Delta's path, which a
        committed manifest names) from now on, not from its bytes in memory, which go: for
        a store whose ``local_reads`` are cheap. Each block's CRC-32 is kept (4 bytes a block), so
        that a block read back is checked as the segment was when it was parsed. Safe
        while other threads read: each read takes the one store or the other whole."""
        if type(self._store) is not _Blob:
            return          # reads from a store already
        data = self._store.data
        self._crcs = array("I", [crc32(data[off:off + ln]) for off, ln in zip(self.index.offsets, self.index.lengths)])
        self._store = store

    def _frame(self, store, i: int) -> bytes:
        """Block i's bytes: from memory, or read back from the store and checked."""
        ix, crcs = self.index, self._crcs
        off = ix.offsets[i]
        frame = store.get(self.path, off, off + ix.lengths[i])
        if crcs is not None:        # (a read that took the bytes in memory just before checks them too)
            if len(frame) != ix.lengths[i]:
                raise CorruptionError(f"WAL segment {self.path}: block {i} read back does not match what was "
                                      f"written ({len(frame)} bytes, {ix.lengths[i]} expected)")
            if crc32(frame) != crcs[i]:
                raise CorruptionError(f"WAL segment {self.path}: block {i} read back does not match what was "
                                      "written (its CRC-32 differs)")
        return frame

    def _load(self, i: int) -> tuple[list, int]:
        ix = self.index
        frame = self._frame(self._store, i)
        if ix.version < 3:
            keys, values, _ = wal.decode_block(frame, self.path, ix.version)
            return [keys, values, self.max_seq, None], decoded_bytes(keys, values)
        raw = wal.block_raw(frame, self.path, ix.version)
        return [raw, 0, self.max_seq], raw_cost(raw)

    def records(self):
        """(keys, values) per block, in key order, within the owned key groups, decoded
        without the block cache (a flush reads each block once)."""
        store, path = self._store, self.path
        lo, hi = self.clip_lo, self.clip_hi
        version = self.index.version
        for i in range(len(self.index.offsets)):
            keys, values, _ = wal.decode_block(self._frame(store, i), path, version)
            if lo is not None or hi is not None:
                i = 0 if lo is None else bisect_left(keys, lo)
                j = len(keys) if hi is None else bisect_left(keys, hi)
                keys, values = keys[i:j], values[i:j]
            if keys:
                yield keys, values

    def empty(self) -> bool:
        return self.index.count == 0


def load(name: str, data: bytes, cache, groups=ALL_KEY_GROUPS, skip: int = -1,
         strip: tuple | None = None) -> tuple[int, Delta | None]:
    """(max_seq, Delta) of segment bytes read back from storage; the Delta is None for an
    empty segment or one whose records a flush covers (max_seq <= skip). Raises
    CorruptionError when the bytes do not check out."""
    index = wal.parse(data, f"WAL segment {name}")
    if index.count == 0 or index.max_seq <= skip:
        return index.max_seq, None
    return index.max_seq, Delta(name, data, index, cache, groups, strip=strip)


def encode(name: str, keys: list, values: list, max_seq: int, cache, groups, level: int,
           block_bytes: int, strip: tuple | None = None) -> tuple[bytes, Delta | None]:
    """The segment bytes of sorted records and the Delta over them."""
    data = wal.encode(keys, values, max_seq, level, block_bytes)
    if not keys:
        return data, None
    delta = Delta(name, data, wal.parse(data, name), cache, groups, keys, strip)
    delta.meta()        # the bloom filter now, while the keys are at hand
    return data, delta
