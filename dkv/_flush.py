"""Seals, flushes and compactions: the background half of the write path.

Sealing is synchronous (``DB._seal``: a new memtable takes writes, the old one joins the
immutable memtables and becomes a live WAL segment). Encoding runs on the upload thread:
the sealed memtable's records become the segment's bytes and, in memory, a Delta over
them that replaces the dict. Flushing runs on its own thread once the immutable memtables
reach ``flush_segments`` segments in files (or ``flush_inline_segments`` segments inline in
manifests, RFC 0011) or ``flush_bytes`` bytes of encoded segments: it merges all of them into one
L0 sorted run (a key range at a time, so memory stays bounded), publishes a new Version,
and drops the WAL segments the run covers. Records that died within those checkpoint
intervals never reach an SST with their values (a tombstone does when older tables exist). Compaction runs on a third thread so a long merge never
delays a flush.
"""
from __future__ import annotations

import logging
from itertools import chain
from . import _compaction, _delta, _paths
from ._checkpoint import Segment
from ._locks import LockHolder
from ._memtable import Memtable
from ._merge import merged_ranges
from ._table import Table
from .format.manifest import TableRef
from ._timeline import check_not_fenced
from .errors import DkvError, FencedError, like, with_context
from .format.sst import SstBuilder

log = logging.getLogger(__name__)


class FlushMixin(LockHolder):
    """The background half of DB (see _db.py for the state it uses)."""

    def _seal(self, encode: bool = True, checkpoint: bool = False):
        """Caller holds the write lock. Make the active memtable immutable and a live WAL
        segment; O(1) unless writes must wait for encodings or flushes to catch up.
        ``encode=False``: the caller uploads the segment itself, which encodes it.
        With ``max_sealed_memtables=0`` a write that seals encodes the memtable itself, on
        its own thread, before it returns; a checkpoint's seal (``checkpoint``) leaves it to
        the upload thread as before (its upload encodes it, and Checkpoint.wait waits)."""
        mem = self._active
        if not mem.data:
            return None
        mem.max_seq = self._seq
        with self._lock:        # a flush or compaction publishing concurrently must see it
            self._next_segment += 1
            seg = Segment(self.ns, self._writer, self._next_segment, self._seq, 0, self.groups,
                          state="pending", source=mem)
            self._segments.append(seg)
            sources, version = self._view
            self._view = ((mem,) + sources, version)   # readers see it immutable before it leaves active
            self._active = Memtable()
        o = self.opts
        if o.background:
            if encode and not checkpoint and o.max_sealed_memtables == 0:
                # An error propagates: the write is applied, and the next checkpoint's
                # upload encodes the segment (as without background threads).
                self._encode(seg)
            elif encode:
                self._uploader.submit(self._run_bg, lambda: self._encode(seg))
            self._maybe_flush()
            self._wait_for_background()
        else:
            self._encode(seg)
            self._maybe_flush()
        return seg

    def _wait_for_background(self) -> None:
        """A writer ahead of its encodings or flushes waits (unpaced) until they catch up
        (with ``max_sealed_memtables=0`` it encodes what it seals itself: no encoding to wait for)."""
        o = self.opts

        def behind() -> bool:
            sources = self._view[0]
            files, inline = self._live_segment_counts()
            return ((o.max_sealed_memtables > 0 and self._sealed_unencoded() > o.max_sealed_memtables)
                    or files > 2 * o.flush_segments or inline > 2 * o.flush_inline_segments
                    or sum(m.nbytes for m in sources) > 2 * o.flush_bytes)
        if not behind():
            return
        with self._pacer.hurried(), self._cond:
            while behind() and not self._closing:
                # The write that sealed is applied (in memory, for the next checkpoint); the
                # flush is tried again by the next seal.
                if self._bg_error is not None and (error := self._take_bg_error("this write was applied")):
                    raise error
                self._maybe_flush()
                self._cond.wait(0.1)

    def _encode(self, seg) -> None:
        """Upload thread: a sealed memtable becomes its segment's bytes and a Delta."""
        mem = seg.source
        if type(mem) is not Memtable:
            return
        keys, values = mem.columns_sorted()
        data, delta = _delta.encode(seg.name, keys, values, seg.max_seq, self._cache, self.groups,
                                    self.opts.wal_zstd_level, self.opts.wal_block_bytes, self.opts.bloom_strip)
        with self._lock:
            seg.data = data
            if delta is None:       # nothing but... an empty memtable is never sealed
                return
            seg.source = delta
            sources, version = self._view
            if any(m is mem for m in sources):
                self._view = (tuple(delta if m is mem else m for m in sources), version)
        with self._cond:
            self._cond.notify_all()
        self._maybe_flush()

    def _live_segment_counts(self) -> tuple[int, int]:
        """Live segments with records to replay: (in files or not uploaded yet, inline in
        manifests). An open reads a file per segment of the first kind, a manifest per
        segment of the second (its carrier, RFC 0011): a small manifest each, so many more
        of them may wait for a flush."""
        files = inline = 0
        for s in self._segments:
            if s.source is None:
                continue
            if s.state == "inline":
                inline += 1
            else:
                files += 1
        return files, inline

    def _flush_due(self) -> bool:
        """The immutable memtables reached ``flush_segments`` segments in files,
        ``flush_inline_segments`` inline ones, or ``flush_bytes`` of encoded segments: a
        sealed memtable not encoded yet is not counted at its dict's size (~10x its
        segment's), or a writer ahead of the encoder would flush every memtable it seals,
        with the dicts, not the segments, as the flush's sources."""
        sources = self._view[0]
        if not sources:
            return False
        o = self.opts
        files, inline = self._live_segment_counts()
        return (files >= o.flush_segments or inline >= o.flush_inline_segments
                or sum(m.nbytes for m in sources if type(m) is not Memtable) >= o.flush_bytes
                # a writer waits past this (_wait_for_background): a flush must end every such wait,
                # also for a memtable nobody encodes before the wait ends (a checkpoint's own seal)
                or sum(m.nbytes for m in sources) > 2 * o.flush_bytes)

    def _maybe_flush(self) -> None:
        if self._flush_queued or self._closing or not self._flush_due():
            return
        self._flush_queued = True
        # Only what is immutable now: a checkpoint whose pin waits behind this flush on the
        # flush thread must not see records written after it.
        upto = self._seq
        if self.opts.background:
            try:
                self._flusher.submit(self._run_bg, lambda: self._flush_sources(upto))
            except RuntimeError:        # closing
                self._flush_queued = False
        else:
            self._flush_sources(upto)

    def _run_bg(self, fn) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported to the next caller, once
            log.error("dkv background task failed: %s", e)
            with self._cond:
                earlier = self._bg_error
                if earlier is not None and earlier is not e:
                    e = _both(e, earlier)       # a flush and a compaction failed: report both
                self._bg_error = self._bg_failed = e
                self._cond.notify_all()

    def _new_table_name(self) -> str:
        with self._lock:
            self._next_table += 1
            name = _paths.sst_name(self.ns, self._writer, self._next_table)
            self._writing.add(name)
            return name

    def _write_table(self, builder: SstBuilder, run: int | None = None) -> Table:
        data = builder.finish_buffer()
        if self._pacer.enabled:
            self._pause_while_fenced()
        name = self._new_table_name()
        try:
            self._claim_durable()
            self.store.put_unreferenced(name, data)     # published by a later manifest only
        except BaseException:
            with self._lock:        # whatever the failed put left is garbage to collect
                self._writing.discard(name)
                self._known_files.add(name)
            raise
        self._count_bytes("sst", len(data))
        ref = TableRef(name, len(data), builder.first_key, builder.last_key, builder.min_seq,
                       builder.max_seq, builder.count, self.groups)
        table = Table(ref, self.store, self._cache)
        table.run = run
        with self._lock:
            self._known_files.add(name)
            self._tables[(name, ref.groups)] = table
        return table

    def _pause_while_fenced(self) -> None:
        """Paced work of a writer that another writer replaced (a Spark shard now running in
        another Python worker) would only duplicate that writer's flushes: it waits until a
        refresh makes this writer current again (it goes on under the new writer epoch), or
        until close or a caller waiting for it. One listing of the claims per table."""
        writer = self._writer
        try:
            check_not_fenced(self.store, self.ns, writer)
            return
        except FencedError:
            pass
        except Exception:  # noqa: BLE001 - cannot tell: carry on, a later check decides
            return
        log.debug("writer %d of %r is fenced: paced background work waits", writer, self.ns)
        self._pacer.pause_until(lambda: self._writer != writer or self._closing)

    def _flush_sources(self, upto: int | None = None) -> None:
        """Flush thread: merge every immutable memtable (or those up to sequence number
        ``upto``) into one L0 run and publish it."""
        self._flush_queued = False
        picked = [m for m in reversed(self._view[0]) if upto is None or m.max_seq <= upto]   # oldest first
        if not picked or self._closing:
            return
        self._flushing = True
        try:
            with self._pacer.working():
                while not self._write_flush(picked):
                    if self._closing:
                        return
        except Exception as e:
            # Nothing was published: the memtables stay (in memory, and as WAL segments
            # of the checkpoints that took them) for the next flush to try again.
            raise with_context(f"flush of {len(picked)} sealed memtable(s) to an SST failed", e) from e
        finally:
            self._flushing = False
        log.debug("flushed %d immutable memtables", len(picked))
        with self._cond:
            self._cond.notify_all()
        self._schedule_compaction()
        # Seals between this flush's trigger and its start found it queued and did not
        # queue another; those after `upto` may already be past the trigger again.
        self._maybe_flush()

    def _write_flush(self, picked: list) -> bool:
        """Write the merge of ``picked`` (oldest first) as L0 tables and publish them. False:
        a refresh made this writer another writer meanwhile (files the old one wrote may
        be gone), so write it again."""
        gen = self._gen
        seq = max(m.max_seq for m in picked)
        # Nothing older than these records: tombstones have nothing left to hide.
        bottom = not any(True for _ in self._view[1].tables())
        sources = [_chunks(m) for m in picked]
        tables = self._write_run(merged_ranges(sources, bottom), seq, seq, lambda: self._gen != gen)
        if tables is None:
            return False
        with self._lock:
            if self._gen != gen:
                return self._discard(tables)
            sources, version = self._view
            kept = tuple(m for m in sources if m.max_seq > seq)
            self._view = (kept, version.with_l0(tables) if tables else version)
            for table in tables:
                self._writing.discard(table.path)
            self._flushed_seq = max(self._flushed_seq, seq)
            # WAL truncation: segments whose records are all in SSTs are no longer needed.
            self._segments = [s for s in self._segments if s.max_seq > seq]
        for m in sources:
            if m.max_seq <= seq and type(m) is not Memtable:
                m.release()
        return True

    def _write_run(self, ranges, seq: int, run, stop) -> list | None:
        """Write sorted (keys, values) ranges, every record with sequence number ``seq``, as
        tables of about ``table_bytes`` and at most ``table_bytes / 8`` records (one sorted
        run). Paced, each block spends tokens as
        it is built, so the CPU a flush or compaction takes spreads over checkpoint
        intervals however big its tables. None (and the tables discarded) when ``stop()``
        says the work is void or the store closes."""
        limit = self.opts.table_bytes
        # Records per table are bounded too: a table being built holds 8 bytes per key for
        # its bloom filter, and records of queue churn (tombstones, short values) compress
        # ~40x, so a table of table_bytes could hold tens of millions of them. At most
        # table_bytes / 8 keys keeps those hashes within the table's own size.
        max_keys = max(1 << 16, limit // 8)
        tables: list = []

        def builder():
            b = SstBuilder(self.opts.block_bytes, self.opts.sst_zstd_level, strip=self.opts.bloom_strip)
            if self._pacer.enabled:
                b.on_block = self._pacer.take
            return b
        b = builder()
        try:
            for keys, values in ranges:
                i = 0
                while i < len(keys):
                    i = b.add_sorted(keys, values, seq, i, limit)
                    if b.estimated_size >= limit or b.count >= max_keys:
                        tables.append(self._write_table(b, run))
                        b = builder()
                    if self._closing or stop():
                        self._discard(tables)
                        return None
            if b.count:
                tables.append(self._write_table(b, run))
        except BaseException:
            self._discard(tables)       # a failed write (a full disk): the work is retried
            raise
        return tables

    def _discard(self, tables: list) -> bool:
        """Give up on tables written but not published: garbage for a later collection."""
        with self._lock:
            for t in tables:
                self._writing.discard(t.path)
                self._forget_table(t.path)
        return False

    def _schedule_compaction(self) -> None:
        if not self.opts.compaction or self._closing:
            return
        if self.opts.background:
            if not self._compaction_queued:
                self._compaction_queued = True
                try:
                    self._compactor.submit(self._run_bg, self._compact_loop)
                except RuntimeError:        # closing, or the interpreter is exiting
                    self._compaction_queued = False
        else:
            self._compact_loop()

    def _compact_loop(self) -> None:
        self._compaction_queued = False
        while not self._closing:
            task = _compaction.pick(self._view[1], self.opts)
            if task is None:
                return
            self._compact(task)

    def _compact_full(self) -> None:
        version = self._view[1]
        tables = list(version.tables())
        if len(tables) > 1 or version.l0:
            self._compact(_compaction.Compaction(tables, max(1, len(version.levels)), True, "full compaction"))

    def _compact(self, task) -> None:
        log.debug("compaction to L%d of %d tables: %s", task.level, len(task.inputs), task.reason)
        gen = self._gen
        try:
            with self._pacer.working():
                seq = max(t.ref.max_seq for t in task.inputs)
                runs = _compaction.runs_oldest_first(self._view[1], task.inputs)
                ranges = merged_ranges([chain.from_iterable(t.records() for t in run) for run in runs], task.bottom)
                outputs = self._write_run(ranges, seq, None, lambda: self._gen != gen)
        except Exception as e:
            # The inputs stay as they are; a later flush (or compact()) tries again.
            raise with_context(f"compaction of {len(task.inputs)} tables to L{task.level} "
                               f"({task.reason}) failed", e) from e
        if outputs is None:
            return
        with self._lock:
            if self._gen != gen:        # a refresh came between (see _write_flush)
                self._discard(outputs)
                return
            sealed, version = self._view
            self._view = (sealed, version.replace(task.inputs, outputs, task.level))
            for t in outputs:
                self._writing.discard(t.path)
            self.stats_counters["compactions"] += 1
        self._collect_garbage_soon()

    def _forget_table(self, path: str) -> None:
        """Caller holds ``_lock``."""
        for key in [k for k in self._tables if k[0] == path]:
            self._tables.pop(key).release()



def _both(later: BaseException, earlier: BaseException) -> BaseException:
    """One error for two background failures that came before the next call (a flush and
    a compaction): its message names both, its class (and errno) is the later one's, or
    the earlier one's if only that one is a DkvError (a StorageError stays one)."""
    src = later if isinstance(later, DkvError) or not isinstance(earlier, DkvError) else earlier
    out = like(src, f"two background tasks failed: {later}; and before it: {earlier}")
    out.__cause__ = later
    out.__context__ = earlier
    return out


def _chunks(src):
    """Sorted (keys, values) chunks of an immutable memtable."""
    if type(src) is Memtable:
        yield src.columns_sorted()
    else:
        yield from src.records()
