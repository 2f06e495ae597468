"""DB: the public handle on one dkv instance.

Writes go to the active memtable, which holds the records of the current checkpoint
interval and is that interval's WAL buffer. Sealing it (at a checkpoint, or when it
outgrows ``memtable_bytes``) makes it an immutable memtable, encoded once as its WAL
segment and kept in memory in that encoding (a Delta, see _delta.py) until a flush merges
the immutable memtables into an SST run. Reads look in the active memtable, the immutable
memtables newest first, then the SST levels. Reads take no lock: the immutable memtables
and the Version are published together as one immutable pair.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from . import _locate, _locks, _paths, _recovery
from ._checkpoint import Checkpoint, CheckpointMixin, Pinned, Segment
from ._flush import FlushMixin
from ._lanes import Lanes
from ._reads import ReadMixin
from ._refresh import RefreshMixin
from ._memtable import Memtable
from ._options import Options
from ._pacer import Pacer
from ._table import BlockCache, group_bounds
from ._timeline import CheckpointInfo, Timeline, claim_writer, instance_label
from .batch import WriteBatch, check_key, check_value, key_bounds
from .errors import (ClosedError, DkvError, FencedError, NewerCheckpointsError, ObjectMissingError, ReadOnlyError,
                     with_context)
from .format.manifest import ALL_KEY_GROUPS
from .storage import ObjectStore


log = logging.getLogger(__name__)



class DB(ReadMixin, CheckpointMixin, FlushMixin, RefreshMixin):
    """An open dkv instance. Create with ``dkv.open``; use as a context manager."""

    def __init__(self, store: ObjectStore, *, ns: str = "", checkpoint: int | None = None, read_only: bool = False,
                 sources: list | None = None, key_group_range: tuple | range | None = None, options: Options,
                 create: bool | str = True, discard_newer: bool = False) -> None:
        self.store = store
        self._owns_store = False    # dkv.open sets it when it made the store
        self.ns = ns.strip("/")
        self.opts = options
        self.INLINE_SEGMENT_BYTES = options.inline_segment_bytes       # RFC 0007 (see _checkpoint)
        self.INLINE_MANIFEST_BYTES = options.inline_manifest_bytes
        self.read_only = read_only
        rng = key_group_range
        if isinstance(rng, range) and rng.step == 1:
            rng = (rng.start, rng.stop)
        self.groups = tuple(rng) if rng is not None else ALL_KEY_GROUPS     # key_group_range
        if len(self.groups) != 2 or not (0 <= self.groups[0] < self.groups[1] <= 1 << 16):
            raise ValueError(f"key_group_range must be (first, end) with 0 <= first < end <= 65536, "
                             f"got {key_group_range!r}")
        self._glo, self._ghi = group_bounds(self.groups)
        # Locks, outermost first: a thread takes one only while it holds none that comes after
        # it (re-entering a held RLock is fine):
        #     _wlock > _upload_lock > _gc_lock > _lock > _claim_lock > _cond
        # Background threads never take _wlock (a writer stalled in _wait_for_background holds
        # it while it waits for them); nothing waits for another thread (a Future, wait_idle,
        # cp.wait) holding any of them, but for that stall (_cond.wait under _wlock). No lock of
        # the block cache, tables, pacer, lanes or stores is held while taking one of these.
        # DKV_CHECK_LOCKS=1 at open checks the order as it runs (_locks.py, docs/dkv.md).
        locks = _locks.make_locks()
        self._wlock = locks["_wlock"]               # the write path
        self._upload_lock = locks["_upload_lock"]   # one checkpoint upload, collection or refresh at a time
        self._gc_lock = locks["_gc_lock"]           # garbage collection (inside _upload_lock)
        self._lock = locks["_lock"]                 # engine state: view, segments, files, pins
        self._claim_lock = locks["_claim_lock"]     # making this writer's claim durable
        self._cond = locks["_cond"]                 # background errors; stalled writers wait on it
        # What guards each field ("lock-free": readers take a snapshot of a value replaced
        # whole, or read a flag or counter; writes take the lock named):
        # - immutable after open: store, ns, opts, groups, _glo, _ghi, read_only, _owns_store,
        #   INLINE_*, _pacer, _lanes and its lanes; _cache (own lock; replaced by close)
        # - engine view, _lock (read lock-free): _view (immutable memtables, Version),
        #   _segments (live WAL segments: a Segment's source and carrier change under _lock,
        #   its state, data and error only in its encoding and upload), _flushed_seq
        # - write path, _wlock: _seq, _last_epoch (lock-free reads); _active (written into
        #   under _wlock, replaced under _wlock + _lock; read lock-free)
        # - files, _lock: _next_segment, _next_table, _writing, _known_files, _tables
        # - checkpoints in flight, _lock: _pending, _deferred_pins
        # - checkpoint records, written holding _upload_lock and _lock (either keeps them
        #   stable): _committed, _abandoned
        # - upload and collection, _upload_lock (garbage collection holds _gc_lock too):
        #   _manifests, _doomed, _carriers, _claims, _just_checked, _orphans_listed, _base_reserved
        # - writer identity: _writer (open; refresh, holding _wlock, _upload_lock, _lock and
        #   _claim_lock: any one keeps it stable), opened_from (open; refresh), _claim_synced
        #   (_claim_lock), _fenced (set by whoever finds a newer claim, cleared by refresh), _gen
        #   (refresh; background work compares it under _lock before it publishes)
        # - background scheduling, owner threads, no lock: _flush_queued and
        #   _compaction_queued (set by the thread that queues the job, cleared by the job:
        #   a race costs one job with nothing to do), _flushing (flush thread); _closing,
        #   _closed (close)
        # - background errors, _cond: _bg_error, _bg_failed (lock-free "is there one" reads)
        # - caches and counters: _probe (get, lock-free: a pair replaced whole),
        #   stats_counters (_lock)
        self._closed = False
        self._closing = False
        self._claim_synced = True               # a reader has no claim; _open says for a writer
        self._cache = BlockCache(options.block_cache_bytes)
        self._tables: dict = {}
        self._manifests: dict = {}
        self._pending: list[Pinned] = []
        self._writing: set = set()
        self._known_files: set = set()
        self._orphans_listed = False
        self._bg_error: BaseException | None = None     # for the next call to raise, once
        self._bg_failed: BaseException | None = None    # the last one, for messages
        self._compaction_queued = False
        self._flush_queued = False
        self._flushing = False
        self._deferred_pins = 0
        self._gen = 0       # bumped by refresh(): background work begun before it is void
        self._doomed: list = []
        self._carriers: list = []   # manifests past retention kept for their inline segments
        self._fenced = False
        self._just_checked = False
        self._claims: list = []
        self.stats_counters: Counter = Counter()
        # Pacing needs background threads: inline flushes would wait for themselves.
        self._pacer = Pacer(options.pace if options.background and not read_only else 0.0)
        self._open(checkpoint, sources, create, discard_newer)

    # -- opening --------------------------------------------------------------------------

    def _open(self, checkpoint, sources, create, discard_newer: bool = False) -> None:
        if not self.read_only and self.store.exists(_paths.retired_name(self.ns)):
            raise FencedError(f"{instance_label(self.store, self.ns)} was retired by a rescale; open its "
                              "successors instead")
        if sources is not None and self.read_only:
            raise ValueError("sources= restores a new writer; it cannot be read_only")
        timeline = Timeline(self.store, self.ns)
        if not timeline.manifests and not timeline.claim_names:
            _locate.check_new(self.store, self.ns, read_only=self.read_only, create=create, checkpoint=checkpoint)
        if checkpoint is not None and sources is None and not self.read_only and not discard_newer:
            _refuse_discarding(self.store, self.ns, checkpoint, timeline)
        manifest = None
        if sources is None and (info := timeline.find(checkpoint)) is not None:
            # The manifest names files relative to the folder its writer opened: continue
            # from there (a reader or writer may have been given an enclosing folder, or the
            # instance's own folder).
            manifest = timeline.manifest(info)
            root = _locate.root_of(self.store, self.ns, manifest)
            if root.store is not self.store:
                log.debug("instance %r of %r is read from %r as instance %r", self.ns, self.store.location,
                          root.store.location, root.ns)
                self.store, self.ns = root.store, root.ns
                timeline = Timeline(self.store, self.ns)
        if sources is not None:
            restored = _recovery.load_sources(self.store, list(sources), self.groups, self._cache, self._tables,
                                              self.opts.bloom_strip)
            start = -1
        else:
            restored = _recovery.load_checkpoint(self.store, self.ns, checkpoint, self._cache, self._tables, timeline,
                                                 manifest=manifest, strip=self.opts.bloom_strip)
            start = restored.info.epoch if restored.info is not None else -1
            if restored.manifest is not None and self.groups == ALL_KEY_GROUPS:
                self.groups = tuple(restored.manifest.groups)
                self._glo, self._ghi = group_bounds(self.groups)
        self._seq = restored.last_seq
        self._flushed_seq = restored.flushed_seq
        self._active = Memtable()
        self._view = (restored.sources, restored.version)     # immutable memtables newest first
        self._probe = ((), ())      # (the view's sources, their bloom filters): see get
        self._segments: list[Segment] = restored.segments     # live WAL segments, oldest first
        self._next_segment = 0
        self._next_table = 0
        self.opened_from = restored.info
        # SSTs the checkpoint we opened reserves (see _list_orphans)
        self._base_reserved = dict(restored.manifest.reserved) if sources is None and restored.manifest else {}
        # Checkpoints as the newest manifest says before our claim (a writer that continues
        # from an older one makes the later ones invalid, and with them their word on which
        # older manifests are no checkpoints any more, RFC 0011).
        checkpoints = set(timeline.checkpoints()) if sources is None else set()
        if self.read_only:
            self._writer = 0
            self._committed = [c for c in timeline.valid() if c in checkpoints and (start < 0 or c.epoch <= start)]
            self._abandoned = []
            return
        # The claim is visible at once (it fences older writers), durable at this writer's
        # first write or delete (_claim_durable): an open that only reads waits for no disk.
        self._writer = claim_writer(self.store, self.ns, timeline, start, deferred=True)
        self._claim_synced = False
        if self._writer == timeline.max_writer + 1:
            # The first claim tried landed, so no other writer claimed since the listing (a
            # claim is always above every claim listed before it; one above ours fences us
            # at our first checkpoint): the listing plus our claim is the timeline. A manifest
            # an older writer made meanwhile has an epoch above `start` and our claim makes
            # it invalid; it is garbage the next writer's open finds.
            timeline.add_claim(self._writer, _paths.claim_name(self.ns, self._writer), start)
        else:
            timeline = Timeline(self.store, self.ns)    # with our claim: later epochs are abandoned
        valid = timeline.valid()
        self._committed = [c for c in valid if c.epoch <= start and c in checkpoints] if sources is None else []
        own = _paths.ns_prefix(self.ns)
        # ... the others go, but carriers that our checkpoints or live segments name stay
        # (garbage collection tells them apart)
        self._abandoned = [m for m in timeline.manifests if m not in self._committed and m.name.startswith(own)]
        self._last_epoch = start
        self._known_files = {t.path for t in restored.version.tables() if t.path.startswith(own)}
        self._known_files.update(s.name for s in self._segments if s.name.startswith(own) and s.state != "inline")
        if self.opts.background:
            self._lanes = Lanes()       # counts their jobs: wait_idle waits for zero
            self._flusher = self._lanes.lane("dkv-flush")
            self._compactor = self._lanes.lane("dkv-compact")
            self._uploader = self._lanes.lane("dkv-upload")
        log.debug("opened %r instance %r as writer %d at epoch %s", self.store.location, self.ns, self._writer, start)

    def _claim_durable(self) -> None:
        """Make this writer's claim durable, once, before its first write or delete to
        storage (WAL segment, SST, manifest, garbage collection). Until then a power loss
        may lose the claim, which is harmless: the writer has done nothing a claim must
        account for (RFC 0006)."""
        if self._claim_synced:
            return
        with self._claim_lock:
            if not self._claim_synced:
                try:
                    self.store.sync(_paths.claim_name(self.ns, self._writer))
                except ObjectMissingError:
                    # Only a newer writer deletes an older writer's claim.
                    self._fenced = True
                    raise FencedError(f"{instance_label(self.store, self.ns)}: the claim of writer epoch "
                                      f"{self._writer} is gone; "
                                      "a newer writer took over (reopen to continue)") from None
                self._claim_synced = True

    # -- writes ---------------------------------------------------------------------------

    def _check_write(self) -> None:
        if self._closed:
            raise ClosedError("this dkv store is closed")
        if self.read_only:
            raise ReadOnlyError("this dkv store was opened read_only=True")
        if self._bg_error is not None and (error := self._take_bg_error("this call did nothing")):
            raise error

    def _take_bg_error(self, what: str = "") -> DkvError | None:
        """The error of the background flush or compaction that failed, for the caller to
        raise, once (``what``: what became of the call that raises it). The failed work
        published nothing: checkpoints taken are intact, the records stay in memory (and in
        the WAL segments of the checkpoints that took them), and the work is tried again by
        the next seal or flush, or by flush() and compact(). So a store whose disk was full
        goes on once there is space, without a reopen."""
        with self._cond:        # not lost to a failure being recorded meanwhile (_run_bg)
            error, self._bg_error = self._bg_error, None
        if error is None:       # another caller took it
            return None
        return with_context(f"background work failed{f' ({what})' if what else ''}; completed checkpoints "
                            "are intact and it is tried again", error)

    def _check_group(self, key: bytes) -> None:
        if (self._glo is not None and key < self._glo) or (self._ghi is not None and key >= self._ghi):
            raise ValueError(f"key {key[:16]!r} is outside this instance's key groups {self.groups}")

    def put(self, key: bytes, value: bytes) -> None:
        """Set key to value. O(1) amortised; visible to reads at once, durable at the next checkpoint."""
        if type(key) is not bytes or not key:
            key = check_key(key)
        if type(value) is not bytes:
            value = check_value(value)
        with self._wlock:
            if self._closed or self.read_only or self._bg_error is not None:
                self._check_write()
            if self._glo is not None or self._ghi is not None:
                self._check_group(key)
            self._seq += 1
            mem = self._active
            mem.put(key, value)
            if mem.nbytes >= self.opts.memtable_bytes:
                self._seal()

    def delete(self, key: bytes) -> None:
        """Delete key (writes a tombstone). O(1); deleting a missing key is not an error."""
        key = check_key(key)
        with self._wlock:
            self._check_write()
            if self._glo is not None or self._ghi is not None:
                self._check_group(key)
            self._seq += 1
            mem = self._active
            mem.put(key, None)
            if mem.nbytes >= self.opts.memtable_bytes:
                self._seal()

    def write(self, batch: WriteBatch) -> None:
        """Apply a WriteBatch atomically, in order. Nothing is applied if a key is outside the
        instance's key groups. A batch never straddles a checkpoint or a memtable seal."""
        if not isinstance(batch, WriteBatch):
            raise TypeError(f"write() takes a dkv.WriteBatch, got {type(batch).__name__}")
        with self._wlock:
            self._check_write()
            if (self._glo is not None or self._ghi is not None) and len(batch):
                lo, hi = key_bounds(batch._ops)
                self._check_group(lo)
                self._check_group(hi)
            mem = self._active
            mem.apply(batch._ops, batch.nbytes)
            self._seq += len(batch)
            if mem.nbytes >= self.opts.memtable_bytes:
                self._seal()

    @contextmanager
    def batch(self) -> Iterator[WriteBatch]:
        """``with db.batch() as b: b.put(k, v)`` applies the batch on exit (not on error)."""
        b = WriteBatch()
        yield b
        self.write(b)

    # -- checkpoints ----------------------------------------------------------------------

    @property
    def last_checkpoint(self) -> int | None:
        """The epoch of the newest checkpoint this handle took, or opened from; None when
        there is none yet."""
        epoch = getattr(self, "_last_epoch", None)
        if epoch is None:           # read-only
            epoch = self.opened_from.epoch if self.opened_from is not None else -1
        return None if epoch < 0 else epoch

    def checkpoint(self, epoch: int | None = None, flush: bool | None = None) -> Checkpoint:
        """Start checkpoint ``epoch`` (an int greater than the previous one; None: the next,
        ``last_checkpoint + 1``, 1 for a new store) and return at once; ``cp.epoch`` is it.

        Synchronous phase: seal the active memtable (it becomes the interval's WAL
        segment), pin the current levels and live segments. Encoding and uploading the
        segment, then the manifest by conditional create, run in the background;
        ``cp.wait()`` returns the manifest name when it is durable. A small checkpoint
        (``INLINE_BYTES`` of changes) taken while the upload thread has nothing else to do
        is uploaded by whichever comes first: that thread, or the first ``cp.wait()``,
        which then does it on the caller's thread (a notebook's commit waits at once, and
        saves the two thread hand-offs).

        ``flush=True`` (or, by default, memtables holding more than ``max_replay_bytes``)
        makes a checkpoint that needs no WAL replay: the memtables are flushed to SSTs
        first and the manifest references those instead of WAL segments. With the option
        ``wait_for_flushes``, a checkpoint taken while a flush is queued or running waits
        for it and references its SSTs instead of the segments it covers.
        """
        if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0):
            raise ValueError(f"checkpoint epoch must be a non-negative int, got {epoch!r}")
        with self._wlock:
            self._check_write()
            if epoch is None:
                epoch = max(self._last_epoch + 1, 1)
            elif epoch <= self._last_epoch:
                raise ValueError(f"checkpoint epoch {epoch} must be greater than the last checkpoint's "
                                 f"({self._last_epoch}); pass a larger one, or call checkpoint() without "
                                 f"an epoch to take the next ({self._last_epoch + 1})")
            if flush is None:
                flush = 0 < self.opts.max_replay_bytes < self._replay_bytes()
            # A waiter may upload this one itself only if nothing else is on its way: no
            # checkpoint pending or deferred, every sealed memtable encoded (its segment is
            # then encoded by the upload, by whoever runs it), the new segment small. Read
            # under _lock: the flush thread turns a deferred checkpoint into a pending one
            # under it, and seen half-way the two would both say none.
            with self._lock:
                stealable = (self.opts.background and not flush and not self.opts.wait_for_flushes
                             and not self._pending and not self._deferred_pins and not self._sealed_unencoded()
                             and self._active.nbytes <= self.INLINE_BYTES)
            self._seal(encode=not stealable, checkpoint=True)
            with self._lock:
                self._last_epoch = epoch
                last_seq = self._seq
                # A checkpoint after a flushing one must pin after that flush too, or it would
                # miss the records the flushing checkpoint did not put in a WAL segment.
                deferred = (flush or self._deferred_pins > 0
                            or (self.opts.wait_for_flushes and (self._flushing or self._flush_queued)))
                cp = Checkpoint(epoch)
                if deferred:
                    self._deferred_pins += 1
                    self._pacer.hurry(1)        # this checkpoint waits for flushes: unpaced
                    segs = list(self._segments)   # later checkpoints' segments are not ours
                else:
                    pin = self._pin(last_seq)
                    # Queued under the lock: uploads must be queued in epoch order, and a
                    # deferred checkpoint queues its own under the lock too (_pin_after_flushes).
                    if stealable:
                        self._submit_stealable_upload(cp, pin)
                        return cp
                    if self.opts.background:
                        self._submit_upload(cp, pin)
                        return cp
            if not deferred:
                # Without background threads the upload runs here, under _wlock (which keeps
                # uploads in epoch order) but not _lock, which comes after _upload_lock.
                self._upload_now(cp, pin)
                return cp
        if self.opts.background:
            if flush:
                self._flusher.submit(self._run_bg, lambda: self._flush_sources(last_seq))
            self._flusher.submit(self._pin_after_flushes, cp, last_seq, flush, segs)
        else:
            if flush:
                self._flush_sources(last_seq)
            self._pin_after_flushes(cp, last_seq, flush, segs)
        return cp

    def checkpoints(self) -> list[CheckpointInfo]:
        """Retained checkpoints of this instance, oldest first: the newest ``retain`` (those its
        newest manifest lists as retained; an older one whose manifest garbage collection
        has not deleted yet is no checkpoint any more, RFC 0011)."""
        with self._lock:
            return list(self._committed[-self.opts.retain:]) if not self.read_only else list(self._committed)

    # -- maintenance ----------------------------------------------------------------------

    def flush(self) -> None:
        """Seal the active memtable and wait until every immutable memtable is an SST."""
        with self._wlock:
            self._check_write()
            self._seal()
            upto = self._seq
        if self.opts.background:
            with self._pacer.hurried():
                self._flusher.submit(self._run_bg, lambda: self._flush_sources(upto)).result()
        else:
            self._flush_sources(upto)
        self.wait_idle()

    def compact(self, full: bool = False) -> None:
        """Run compactions until no trigger fires, or with ``full=True`` merge every table
        into one sorted run in the last level (drops all shadowed versions and tombstones).
        Waits for the work to finish."""
        self._check_write()
        work = self._compact_full if full else self._compact_loop
        if self.opts.background:
            with self._pacer.hurried():
                self._compactor.submit(self._run_bg, work).result()
        else:
            work()
        self._raise_bg_error()

    def wait_idle(self, timeout: float | None = None) -> None:
        """Wait until the background work is done: no flush, compaction, encoding, checkpoint
        upload or garbage collection queued or running (work that queues more work, such as
        a flush its compaction, is waited for to the end). Starts nothing: a flush that
        failed is tried again by the next seal, ``flush()`` or ``compact()``. Raises what a
        background task raised, or TimeoutError if ``timeout`` seconds pass first."""
        if self.opts.background and not self.read_only:
            deadline = None if timeout is None else time.monotonic() + timeout
            with self._pacer.hurried():
                if not self._lanes.wait_quiet(deadline):
                    raise TimeoutError(f"dkv: background work of {self.store.location!r} still running "
                                       f"after {timeout} s ({self._lanes.active} job(s))")
        self._raise_bg_error()

    def _raise_bg_error(self) -> None:
        if self._bg_error is not None and (error := self._take_bg_error()):
            raise error

    def _collect_garbage_soon(self) -> None:
        if self.opts.background:
            try:
                self._uploader.submit(self._gc_quietly)
            except RuntimeError:   # closing: garbage waits for the next writer
                pass
        else:
            self._gc_quietly()

    def _gc_quietly(self) -> None:
        try:
            with self._upload_lock:
                self._collect_garbage()
        except Exception as e:  # noqa: BLE001
            log.warning("garbage collection failed (will retry later): %s", e)

    def _count_bytes(self, kind: str, n: int) -> None:
        with self._lock:        # the flush, compaction and upload threads count at once
            self.stats_counters[f"{kind}_bytes"] += n
            self.stats_counters[f"{kind}_files"] += 1

    def resize_block_cache(self, nbytes: int) -> None:
        """Set the block cache's byte budget (the ``block_cache_bytes`` option) of this
        open store: a smaller one drops blocks at once (in the cache's CLOCK order). For a
        caller that learns how its reads go, e.g. one whose reads each meet a block once,
        so that a large cache only holds memory."""
        if type(nbytes) is not int or nbytes < 0:
            raise ValueError(f"resize_block_cache: nbytes must be an int >= 0, got {nbytes!r}")
        self._cache.resize(nbytes)

    @property
    def flush_pending(self) -> bool:
        """A flush is queued or running (stats()'s "flush_pending", without the rest)."""
        return self._flush_queued or self._flushing

    def stats(self) -> dict:
        """Sizes and counters: memtables, levels, sequence numbers, bytes written by kind."""
        immutable, version = self._view
        return {
            "instance": self.ns, "writer_epoch": self._writer, "last_seq": self._seq,
            "memtable_bytes": self._active.nbytes, "memtable_records": len(self._active),
            "sealed_memtables": len(immutable),
            "immutable_bytes": sum(m.nbytes for m in immutable),
            # records, from counts kept in memory (no I/O); until a compaction merges them,
            # overwritten versions and tombstones count too
            "immutable_records": sum(len(m) if type(m) is Memtable else m.ref.count for m in immutable),
            "flush_pending": self.flush_pending,
            "levels": [{"level": i, "tables": len(run), "bytes": sum(t.ref.size for t in run),
                        "records": sum(t.ref.count for t in run)}
                       for i, run in enumerate((version.l0, *version.levels))],
            "wal_segments": len(self._segments), "checkpoints": [c.epoch for c in self._committed],
            "block_cache": {"bytes": self._cache.used, "budget": self._cache.budget, "hits": self._cache.hits,
                            "misses": self._cache.misses},
            "pacing": {"pace": self._pacer.pace, "tokens": int(self._pacer.tokens), "waits": self._pacer.waits},
            **dict(self.stats_counters),
        }

    def close(self) -> None:
        """Finish checkpoint uploads in progress and release resources. Writes made after
        the last checkpoint are not saved (that is what checkpoints are for)."""
        if self._closed:
            return
        if not self.read_only and self.opts.background:
            # Flushes and compactions only matter for speed: cancel them. Checkpoint
            # uploads in progress are finished, so a returned Checkpoint is never orphaned;
            # checkpoints waiting for a flush get it first.
            if self._deferred_pins:
                self._flusher.submit(lambda: None).result()
            self._closing = True
            self._pacer.stop()
            with self._cond:
                self._cond.notify_all()
            self._flusher.shutdown(wait=True, cancel_futures=True)
            self._compactor.shutdown(wait=True, cancel_futures=True)
            self._uploader.shutdown(wait=True)
        self._closed = True
        self._cache = BlockCache(1)
        if self._owns_store:        # dkv.open made it from a path: its open files go too
            self.store.close()

    @property
    def key_group_range(self) -> tuple[int, int]:
        """The key groups ``(first, end)`` this instance owns (all: ``(0, 65536)``)."""
        return tuple(self.groups)

    key_groups = key_group_range
    """The old name of ``key_group_range`` (kept for 0.x readers; spark_ops' ``key_groups``
    is a count)."""

    @property
    def instance(self) -> str:
        """The instance name this DB was opened with (``dkv.open(instance=)``; "" for the
        location's only instance)."""
        return self.ns

    def __enter__(self) -> "DB":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("read-only" if self.read_only else f"writer {self._writer}")
        inst = f" instance={self.ns!r}" if self.ns else ""
        return f"<dkv.DB {self.store.location!r}{inst} {state} seq={self._seq}>"


def _refuse_discarding(store, ns: str, checkpoint: int, timeline) -> None:
    """A writer opened at ``checkpoint`` continues from it, which abandons every later
    checkpoint: refuse unless the caller said so (``discard_newer=True``)."""
    newer = [c.epoch for c in timeline.checkpoints() if c.epoch > checkpoint]
    if not newer or timeline.find(checkpoint) is None:     # none, or CheckpointNotFoundError follows
        return
    where = store.location + (f" instance {ns!r}" if ns else "")
    shown = ", ".join(map(str, newer[:10])) + (f", ... ({len(newer)} in all)" if len(newer) > 10 else "")
    raise NewerCheckpointsError(
        f"opening {where} as a writer at checkpoint {checkpoint} would drop the later checkpoint(s) {shown}: "
        f"a writer continues from the checkpoint it opens. Pass read_only=True to look at checkpoint "
        f"{checkpoint}, or discard_newer=True to continue from it and drop the later ones")
