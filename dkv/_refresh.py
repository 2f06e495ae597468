"""Catching up to a checkpoint another writer of the same instance wrote.

A Spark shard can run in a different Python worker from one batch to the next. The
worker that ran it last keeps an open DB at the epoch it committed; when the shard comes
back after another worker ran a batch or two, reopening would replay the whole WAL since
the last flush. ``DB.refresh(epoch)`` instead applies only the WAL segments written
since — possible when the other writer did not flush or compact (same SSTs as our last
checkpoint) and its segment list extends that checkpoint's. Our own flushes may go on
meanwhile (a paced flush spans several checkpoints): they cover only records of our last
checkpoint or older, which the other writer's state holds too, so the result is the same
state. Otherwise refresh returns None and the caller reopens.
"""
from __future__ import annotations

import logging

from . import _paths
from ._locks import LockHolder
from ._recovery import carrier_name, fetch, load_segment, segments_of
from ._timeline import Timeline, claim_writer
from .errors import ClosedError, ReadOnlyError

log = logging.getLogger(__name__)


def _levels(levels: list) -> list:
    out = [list(lv) for lv in levels]
    while out and not out[-1]:
        out.pop()
    return out


class RefreshMixin(LockHolder):
    def refresh(self, checkpoint: int) -> list[bytes] | None:
        """Catch this writer up to ``checkpoint`` of its instance, written by another writer
        since this one's last checkpoint, and become the writer again (the other is fenced).

        Returns the keys whose records changed (callers drop what they cached for them), or
        None when catching up is not cheap — the other writer flushed or compacted, or this
        DB has uncommitted work — and the caller should reopen instead. Costs the manifest
        plus the new WAL segments."""
        if self._closed:
            raise ClosedError("this dkv store is closed")
        if self.read_only:
            raise ReadOnlyError("refresh() is for writers; reopen a read_only store instead")
        # _upload_lock too: a garbage collection running meanwhile would read the writer epoch,
        # the checkpoints and the claims half old, half new (and could leave _fenced set).
        with self._wlock, self._upload_lock, self._lock:
            if (self._pending or self._active.data or self._deferred_pins or self._bg_error
                    or any(s.state not in ("uploaded", "inline") for s in self._segments)):
                return None
            if not self._committed or checkpoint <= self._committed[-1].epoch:
                return None
            timeline = Timeline(self.store, self.ns)
            info = timeline.find(checkpoint)
            if info is None:
                raise timeline.not_found(checkpoint)
            m = timeline.manifest(info)
            ckpts = set(timeline.checkpoints())     # before our claim (RFC 0011: not carriers)
            base = self._manifest_of(self._committed[-1])      # our last checkpoint
            if _levels(base.levels) != _levels(m.levels) or tuple(m.groups) != tuple(self.groups):
                return None
            # Our own flushes and compactions may have changed our levels since that
            # checkpoint; their files are reserved in it, so the other writer left them alone.
            # Check rather than trust (an older manifest or a third writer may not have).
            in_base = {t.path for t in base.tables()}
            ours = {t.path for t in self._view[1].tables()} - in_base
            if any(not self.store.exists(name) for name in ours):
                return None
            # Segments by name, whether in a file or inline (the other writer may have
            # written out one that we carried inline, or the reverse: same bytes).
            theirs = segments_of(m.wal, home=(m.epoch, m.writer))
            have = [(r.ns, r.writer, i) for r in base.wal for i in range(r.first, r.last + 1)]
            if [(s.ns, s.writer, s.id) for s in theirs[:len(have)]] != have:
                return None
            if not {(s.ns, s.writer, s.id) for s in self._segments} <= set(have):
                return None     # we wrote a segment no committed checkpoint of ours holds
            # max_seq 0 until loaded (load_segment sets it from the segment's header)
            new = theirs[len(have):]
            changed = self._apply_segments(new, info.name)
            # A flush or compaction still running began as the old writer. If any of its
            # files were collected after all (it was not reserved, or a third writer came
            # between), that work starts again from its inputs.
            if any(not self.store.exists(name) for name in self._written_unpublished()):
                self._gen += 1
            self._segments.extend(new)
            self._seq = max(self._seq, m.last_seq)
            with self._claim_lock:      # a flush making the old claim durable reads _writer
                self._writer = claim_writer(self.store, self.ns, timeline, checkpoint)
                self._claim_synced = True
            timeline = Timeline(self.store, self.ns)
            self._committed = [c for c in timeline.valid() if c.epoch <= checkpoint and c in ckpts]
            own = _paths.ns_prefix(self.ns)
            self._abandoned += [c for c in timeline.manifests
                                if c not in self._committed and c.name.startswith(own) and c not in self._doomed]
            self._last_epoch = checkpoint
            self._next_segment = self._next_table = 0
            self._known_files.update(s.name for s in new if s.name.startswith(own) and s.state != "inline")
            self._orphans_listed = False
            self._fenced = False
            self.opened_from = info
            self._base_reserved = dict(m.reserved)
        self._pacer.wake()          # paced work paused while this writer was fenced goes on
        log.debug("refreshed %r to epoch %d: %d segments, %d keys", self.ns, checkpoint, len(new), len(changed))
        return changed

    def _written_unpublished(self) -> list[str]:
        """Tables a flush or compaction in progress has stored but not yet published."""
        with self._lock:
            stored = {path for path, _ in self._tables}
            return [name for name in self._writing if name in stored]

    def _apply_segments(self, segments: list, where: str = "") -> list[bytes]:
        """Load ``segments`` (oldest first) as the newest immutable memtables; returns their
        keys. Caller holds _wlock and _lock. ``where``: the manifest that names them."""
        if not segments:
            return []
        changed: list = []
        added: tuple = ()
        store = self.store
        for seg, blob in zip(segments, fetch(store, segments, self.ns, where)):
            seg.source = load_segment(seg, blob, self._cache, carrier_name(self.ns, seg, where), self.opts.bloom_strip)
            if seg.source is not None:
                added = (seg.source,) + added
                for keys, _ in seg.source.records():
                    changed += keys
                seg.read_from_file(store)
        sources, version = self._view
        self._view = (added + sources, version)
        return changed
