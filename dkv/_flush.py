"""Flushes and compactions: the background half of the write path.

Sealing is synchronous (``DB._seal``: a new memtable takes writes, the old one joins the
sealed list). Flushing is asynchronous: the flush thread writes the oldest sealed
memtable as an L0 SST, publishes a new Version, and drops the WAL segments the SST now
covers. Compaction runs on its own thread so a long merge never delays a flush.
"""
from __future__ import annotations

import logging

from . import _compaction, _paths
from ._memtable import Memtable
from ._table import Table
from .format.manifest import TableRef
from ._timeline import check_not_fenced
from .errors import DkvError, FencedError
from .format.sst import SstBuilder

log = logging.getLogger(__name__)


class FlushMixin:
    """The background half of DB (see _db.py for the state it uses)."""

    def _seal(self) -> None:
        """Caller holds the write lock. O(1) unless writes must wait for flushes."""
        mem = self._active
        if not mem.data:
            return
        mem.max_seq = self._seq
        if self._wal:       # WAL segments must not straddle a seal (see format/wal.py)
            self._wal_sealed.append((self._seq, self._wal))
            self._wal = {}
        with self._lock:        # a flush or compaction publishing concurrently must see it
            sealed, version = self._view
            self._view = ((mem,) + sealed, version)   # readers see it sealed before it leaves active
            self._active = Memtable()
        if self.opts.background:
            self._flusher.submit(self._run_bg, self._flush_one)
            if len(self._view[0]) > self.opts.max_sealed_memtables:
                with self._pacer.hurried(), self._cond:       # a stalled writer: flush unpaced
                    while len(self._view[0]) > self.opts.max_sealed_memtables and not self._closing:
                        if self._bg_error is not None:
                            raise DkvError(f"a background flush failed, so writes cannot continue; reopen "
                                           f"the store: {self._bg_error}") from self._bg_error
                        self._cond.wait(0.1)
        else:
            self._flush_one()

    def _run_bg(self, fn) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported to the next caller
            log.error("dkv background task %s failed: %s", getattr(fn, "__name__", fn), e)
            self._bg_error = e
            with self._cond:
                self._cond.notify_all()

    def _new_table_name(self) -> str:
        with self._lock:
            self._next_table += 1
            name = _paths.sst_name(self.ns, self._writer, self._next_table)
            self._writing.add(name)
            return name

    def _write_table(self, builder: SstBuilder, run: int | None = None) -> Table:
        data = builder.finish()
        self._pacer.take(len(data))
        if self._pacer.enabled:
            self._pause_while_fenced()
        name = self._new_table_name()
        self.store.put(name, data)
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

    def _flush_one(self) -> None:
        sealed, _ = self._view
        if not sealed or self._closing:
            return
        mem = sealed[-1]
        with self._pacer.working():
            while not self._write_flush(mem):
                if self._closing:
                    return
        log.debug("flushed memtable of %d records", len(mem))
        with self._cond:
            self._cond.notify_all()
        self._schedule_compaction()

    def _write_flush(self, mem) -> bool:
        """Write ``mem`` as L0 tables and publish them. False: a refresh made this writer
        another writer meanwhile (files the old one wrote may be gone), so write it again."""
        gen = self._gen
        # Paced, a flush writes small tables (one sorted run of L0, disjoint key ranges) so
        # its output can spread over several checkpoint intervals.
        limit = self._pacer.flush_table_bytes(self.opts.table_bytes) if self._pacer.enabled else None
        run = mem.max_seq
        tables = []
        builder = SstBuilder(self.opts.block_bytes, self.opts.sst_zstd_level)
        keys, values, seqs = mem.columns_sorted()
        i = 0
        while i < len(keys):
            i = builder.add_sorted(keys, values, seqs, i, limit)
            if limit is not None and builder.estimated_size >= limit:
                tables.append(self._write_table(builder, run))
                builder = SstBuilder(self.opts.block_bytes, self.opts.sst_zstd_level)
                if self._closing or self._gen != gen:
                    return self._discard(tables)
        if builder.count or not tables:
            tables.append(self._write_table(builder, run))
        with self._lock:
            if self._gen != gen:
                return self._discard(tables)
            sealed, version = self._view
            self._view = (tuple(m for m in sealed if m is not mem), version.with_l0(tables))
            for table in tables:
                self._writing.discard(table.path)
            self._flushed_seq = mem.max_seq
            # WAL truncation: segments whose records are all in SSTs are no longer needed.
            self._segments = [s for s in self._segments if s.max_seq > mem.max_seq]
        return True

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
        with self._pacer.working():
            outputs = _compaction.run(task, self._write_table, self.opts)
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
        for key in [k for k in self._tables if k[0] == path]:
            self._tables.pop(key).release()
