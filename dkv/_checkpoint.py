"""Checkpoints: the synchronous phase and the asynchronous upload (garbage collection: _gc.py).

Synchronous (``DB.checkpoint``, returns at once): seal the WAL buffer into a segment, pin
the current Version and the live WAL segments, hand both to the upload thread.
Asynchronous (upload thread, in order): write the WAL segment, create the manifest with a
conditional create, list the writer claims (a newer claim means this writer is fenced: the
manifest is withdrawn and the checkpoint fails; claims that cannot be listed leave the
manifest in place and the checkpoint's outcome unknown; a create that raised is read back
and, stored whole, kept), then collect garbage.
SSTs are referenced by name, never copied: a checkpoint costs its WAL segment plus a
manifest of ~100 bytes. A small segment is not a file at all: the manifest carries it
(an inline segment, RFC 0007), and every later manifest that still needs it names that
manifest, its *carrier*, instead of carrying it again (a carried run, RFC 0011). Garbage
collection keeps a carrier that left retention while a retained manifest, a pending
checkpoint or the live state names it; such a manifest is no checkpoint.
"""
from __future__ import annotations

import logging
import threading
import time

from . import _paths
from ._gc import GarbageMixin
from ._delta import Delta
from ._memtable import Memtable
from ._timeline import CheckpointInfo, check_not_fenced, instance_label
from ._timeline import _read_claim as read_claim
from .errors import DkvError, FencedError, StorageError, with_context
from .format import manifest as mf
from .format.wal import count as wal_count

log = logging.getLogger(__name__)


class Segment:
    """A WAL segment of the instance's live list (needed until a flush covers it).

    ``source``: its records as a read source — the sealed Memtable until it is encoded,
    then a Delta over ``data`` (the segment's bytes); None for a segment whose records
    are not replayed (a flush covers them). ``state``: pending (not uploaded yet),
    uploaded (a file), failed (a checkpoint's upload failed: the next one retries it), or
    inline (no file: a manifest carries its bytes, ``data``, which it keeps).
    ``carrier``: for an inline segment, ``(epoch, writer)`` of the committed manifest of
    this instance that carries it (later manifests name it there, RFC 0011); None while
    no committed manifest does (the next checkpoint carries it, or writes it out as a
    file when it does not fit)."""

    __slots__ = ("ns", "writer", "id", "max_seq", "skip", "groups", "state", "source", "data", "error", "carrier")

    def __init__(self, ns, writer, id, max_seq, skip=0, groups=mf.ALL_KEY_GROUPS, state="uploaded", source=None):
        self.ns, self.writer, self.id, self.max_seq = ns, writer, id, max_seq
        self.skip, self.groups, self.state, self.source = skip, groups, state, source
        self.data = None
        self.error = None
        self.carrier = None

    @property
    def carried(self) -> bool:
        """In a committed manifest of this instance: later manifests name it there."""
        return self.state == "inline" and self.carrier is not None

    @property
    def name(self) -> str:
        return _paths.wal_name(self.ns, self.writer, self.id)

    def read_from_file(self, store) -> None:
        """Its Delta reads the segment's file from now on, its bytes out of memory, where
        ``store``'s reads are local (``ObjectStore.local_reads``). For a file a committed
        manifest names (a checkpoint's, a reopen's, a refresh's): it then goes only as a
        table's does, out of the retained checkpoints, never as an uploaded file no
        manifest named, which a newer writer's collection adopts as garbage (RFC 0012,
        *Step 13*)."""
        if self.state == "uploaded" and type(self.source) is Delta and store.local_reads:
            self.source.read_from(store)


class Checkpoint:
    """Handle on a checkpoint in progress. ``wait()`` blocks until it is durable.

    Attributes after completion: ``name`` (manifest object name), ``wal_bytes`` (bytes of
    the WAL segments it made durable: files, and segments new in its manifest inline),
    ``manifest_bytes`` (the rest of the manifest), ``records`` (WAL records uploaded),
    ``bytes_written`` (their sum: every byte it wrote), ``inline_segments`` (segments its
    manifest carries), ``carried_segments`` (segments it names in earlier manifests).
    """

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.name: str | None = None
        self.wal_bytes = 0
        self.manifest_bytes = 0
        self.records = 0
        self.inline_segments = 0
        self.carried_segments = 0
        self.inline_new = 0     # bytes of segments new in its manifest inline (in wal_bytes)
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._runner = None     # set when wait() may run the upload itself (DB.checkpoint)

    @property
    def bytes_written(self) -> int:
        return self.wal_bytes + self.manifest_bytes

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> str:
        """Block until durable; return the manifest name. Raises what the upload raised.
        A small checkpoint that the upload thread has not started yet is uploaded here, on
        the caller's thread (without a timeout only)."""
        runner = self._runner
        if runner is not None and timeout is None and not self._done.is_set():
            self._runner = None
            runner()
        if not self._done.wait(timeout):
            raise TimeoutError(f"checkpoint {self.epoch} not complete after {timeout} s")
        if self._error is not None:
            raise self._error
        return self.name

    def _finish(self, error: BaseException | None = None) -> None:
        self._error = error
        self._done.set()

    def __repr__(self) -> str:
        state = "failed" if self._error else ("done" if self.done() else "pending")
        return f"<Checkpoint epoch={self.epoch} {state} bytes={self.bytes_written}>"


class Pinned:
    """What a checkpoint captured in its synchronous phase: the levels and the live WAL
    segments (those still pending or failed are uploaded by this checkpoint)."""

    __slots__ = ("version", "segments", "flushed_seq", "last_seq")

    def __init__(self, version, segments, flushed_seq, last_seq):
        self.version, self.segments = version, segments
        self.flushed_seq, self.last_seq = flushed_seq, last_seq

    def files(self) -> set:
        out = {t.path for t in self.version.tables()}
        out.update(s.name for s in self.segments)   # an inline one's name: no such file (harmless)
        return out


def wal_ranges(segments, flushed_seq: int, ns: str, inline=frozenset()) -> list:
    """Compress the live segment list into manifest WalRanges (consecutive ids share one).
    Own segments skip what this instance flushed; other instances' keep their own skip
    (their sequence numbers are another instance's). Segments in ``inline`` (by id()) are
    carried inline, one entry each, with their bytes; segments an earlier manifest
    carries are named there (carried runs: consecutive ids of one writer share one)."""
    out: list[mf.WalRange] = []
    for s in segments:
        skip = max(s.skip, flushed_seq) if s.ns == ns else s.skip
        if id(s) in inline:
            out.append(mf.WalRange(s.ns, s.writer, s.id, s.id, skip, s.groups, s.data))
            continue
        r = out[-1] if out else None
        same = r is not None and (r.ns, r.writer, r.groups, r.skip_through) == (s.ns, s.writer, s.groups, skip) \
            and r.last + 1 == s.id
        if s.state == "inline":
            if s.carrier is None:       # _choose_inline put it inline or wrote it out
                raise DkvError(f"inline WAL segment {s.name} is in no manifest")
            c = tuple(s.carrier)
            if same and r.carried is not None and r.carried[-1][1] == c[1] and r.carried[-1][0] <= c[0]:
                out[-1] = mf.WalRange(r.ns, r.writer, r.first, s.id, skip, r.groups, None, r.carried + (c,))
            else:
                out.append(mf.WalRange(s.ns, s.writer, s.id, s.id, skip, s.groups, None, (c,)))
            continue
        if same and not r.inline:
            out[-1] = mf.WalRange(r.ns, r.writer, r.first, s.id, skip, r.groups)
            continue
        out.append(mf.WalRange(s.ns, s.writer, s.id, s.id, skip, s.groups))
    return out


class CheckpointMixin(GarbageMixin):
    """The checkpoint half of DB (see _db.py for the state it uses)."""

    INLINE_BYTES = 64 * 1024
    # A WAL segment of at most INLINE_SEGMENT_BYTES (encoded) goes inside the manifest, not
    # in a file of its own, as long as the new segments a manifest carries stay within
    # INLINE_MANIFEST_BYTES (RFC 0007); past that, the oldest are written out as files.
    # Later manifests name the manifest that carries it (RFC 0011). Set per store from the
    # options inline_segment_bytes (default 0: off) and inline_manifest_bytes at open.
    INLINE_SEGMENT_BYTES = 0
    INLINE_MANIFEST_BYTES = 12 * 1024

    def _submit_stealable_upload(self, cp: Checkpoint, pin: Pinned) -> None:
        """Queue the upload, and let ``cp.wait()`` run it on the caller's thread if it gets
        there first. Whoever loses the claim waits for the winner: the upload thread must
        not start a later checkpoint's upload before this one is over."""
        claim = threading.Lock()

        def run(on_caller: bool) -> None:
            if not claim.acquire(blocking=False):
                cp._done.wait()
                if not on_caller and cp._error is None:
                    self._gc_quietly()      # the collection after the caller's upload
                return
            try:
                with self._upload_lock:
                    # On the caller's thread, the collection after it is left to the upload
                    # thread (this task, there, lost the claim and does it).
                    self._upload(cp, pin, gc_after=not on_caller)
            except BaseException as e:  # noqa: BLE001 - reported through cp.wait()
                log.error("checkpoint %d upload crashed: %s", cp.epoch, e)
                cp._finish(e)
            finally:
                cp._runner = None
        cp._runner = lambda: run(True)
        self._uploader.submit(run, False)

    def _pin(self, last_seq, segs=None) -> Pinned:
        """Caller holds the state lock. ``segs``: the segments that existed at the
        checkpoint's synchronous phase (those a flush has not truncated since are kept)."""
        live = list(self._segments)
        if segs is not None:
            mine = {id(x) for x in segs}
            live = [x for x in live if id(x) in mine]
        pin = Pinned(self._view[1], live, self._flushed_seq, last_seq)
        self._pending.append(pin)
        return pin

    def _pin_after_flushes(self, cp, last_seq, flushed: bool, segs) -> None:
        """Runs on the flush thread after every flush queued before it (without background
        threads: on the caller's, after the flush)."""
        self._pacer.hurry(-1)
        with self._lock:
            self._deferred_pins -= 1
            unflushed = [m for m in self._view[0] if m.max_seq <= last_seq]
            if flushed and unflushed:
                # A memtable sealed before this checkpoint is still not an SST: its flush
                # failed. The checkpoint put no WAL segment for it, so it must fail too; it
                # reports the flush's error (not the next call: the next checkpoint retries).
                with self._cond:
                    error = self._bg_failed
                    if error is not None and self._bg_error is error:
                        self._bg_error = None
                context = f"checkpoint {cp.epoch}: a memtable flush it needs failed"
                cp._finish(with_context(context, error) if error is not None else DkvError(context))
                return
            pin = self._pin(last_seq, segs)
            if self.opts.background:
                self._submit_upload(cp, pin)
                return
        self._upload_now(cp, pin)

    def _submit_upload(self, cp, pin) -> None:
        """Queue the upload on the upload thread. The caller holds ``_lock``, so uploads are
        queued in epoch order."""
        self._uploader.submit(self._upload_and_log, cp, pin)

    def _upload_now(self, cp, pin) -> None:
        """Without background threads: upload on this thread. The caller holds no ``_lock``
        (the upload takes ``_upload_lock`` and ``_gc_lock``, which come before it)."""
        with self._upload_lock:
            self._upload(cp, pin)

    def _replay_bytes(self) -> int:
        return self._active.nbytes + sum(m.nbytes for m in self._view[0])

    def _sealed_unencoded(self) -> int:
        return sum(1 for m in self._view[0] if type(m) is Memtable)

    def _upload_and_log(self, cp, pin) -> None:
        try:
            with self._upload_lock:
                self._upload(cp, pin)
        except BaseException as e:  # noqa: BLE001
            log.error("checkpoint %d upload crashed: %s", cp.epoch, e)
            cp._finish(e)

    def _upload(self, cp: Checkpoint, pin: Pinned, gc_after: bool = True) -> None:
        """Upload the pinned checkpoint. Callers hold ``_upload_lock``: uploads run one at a
        time in epoch order, and never beside garbage collection (which must see a new
        manifest either in the committed list or its files as pinned). ``gc_after=False``
        (an upload on the caller's thread) leaves the collection to the caller."""
        try:
            try:
                self._claim_durable()
            except StorageError as e:
                raise with_context(f"checkpoint {cp.epoch}: making the writer claim durable failed", e) from e
            inline = self._choose_inline(cp, pin)
            for seg in pin.segments:
                # failed: an earlier checkpoint's, retried; inline in no committed manifest
                # (its checkpoint failed) that does not fit in this one: written out now
                # (atomically: its failed manifest may have been created after all)
                if (seg.state in ("pending", "failed") or (seg.state == "inline" and seg.carrier is None)) \
                        and id(seg) not in inline:
                    self._upload_segment(cp, seg)
            self._grant_background_bytes(cp.wal_bytes)
            m = mf.Manifest(
                epoch=cp.epoch, writer=self._writer, last_seq=pin.last_seq,
                levels=[[t.ref for t in pin.version.l0]] + [[t.ref for t in lv] for lv in pin.version.levels],
                wal=wal_ranges(pin.segments, pin.flushed_seq, self.ns, inline),
                retained=[c.epoch for c in self._committed[-(self.opts.retain - 1):]] + [cp.epoch] if self.opts.retain > 1 else [cp.epoch],
                parent=self._committed[-1].epoch if self._committed else None,
                groups=self.groups, created_ms=int(time.time() * 1000), reserved=self._reserved())
            data = mf.encode(m)
            name = _paths.manifest_name(self.ns, cp.epoch, self._writer)
            try:
                created = self.store.put_if_absent(name, data)
            except BaseException as e:
                # The create may have succeeded after all (an answer lost after the object
                # was stored): a newer writer may already have opened from it and name it as
                # a carrier (RFC 0011), so a manifest read back whole is kept and the claims
                # decide, as after any create. Otherwise it may have left a partial object on
                # a store without atomic puts: this checkpoint is reported failed, so its
                # manifest must not survive as a checkpoint.
                if not (isinstance(e, Exception) and self._stored_whole(name, data)):
                    self._drop_failed_manifest(CheckpointInfo(cp.epoch, self._writer, name))
                    if isinstance(e, StorageError):
                        raise with_context(f"checkpoint {cp.epoch}: creating its manifest failed", e) from e
                    raise
                log.info("checkpoint %d: creating its manifest reported %s, but it was stored whole", cp.epoch, e)
                created = True
            try:
                # A newer writer may have claimed the instance before the create: then this
                # manifest is invalid (the claim rewound past it) and this writer is a zombie.
                # It must report failure and must not collect garbage.
                self._claims = check_not_fenced(self.store, self.ns, self._writer)
            except BaseException as e:
                if isinstance(e, FencedError):
                    self._fenced = True
                    # A newer writer that started from this epoch or later may have opened
                    # this manifest and name it as the carrier of its inline segments (RFC
                    # 0011): it stays (it is valid; the newer writer collects it). Otherwise
                    # it goes (invalid for good: the claim rewound past it).
                    if not created:
                        raise
                    started = self._started_from_here(cp.epoch)
                    if started is False:
                        self._drop_failed_manifest(CheckpointInfo(cp.epoch, self._writer, name))
                        raise
                    # Fenced all the same (this writer must stop), but the caller learns that
                    # the checkpoint's state is in the store (the newer writer's), or that
                    # whether it is could not be read (the claims failed the second time).
                    if started:
                        fenced = FencedError(f"{e} (checkpoint {cp.epoch} itself stays: the newer writer "
                                             "started from it or a later one)")
                        fenced.checkpoint_kept = True
                    else:
                        fenced = FencedError(f"{e} (whether checkpoint {cp.epoch} stays is unknown: the writer "
                                             "claims could not be read again; a newer writer's open decides)")
                        fenced.outcome_unknown = True
                    raise fenced from e
                if not created:
                    if isinstance(e, StorageError):
                        raise with_context(f"checkpoint {cp.epoch}: listing the writer claims after "
                                           "creating its manifest failed", e) from e
                    raise
                # The claims cannot be listed: a newer writer may have opened from this
                # manifest and name it as a carrier, so it is never withdrawn here (RFC 0011,
                # Risks). Its outcome is unknown to the caller, but this writer goes on as if
                # it committed (listed in the next manifest's retained epochs, its inline
                # segments named there): kept like any checkpoint, never a dangling carrier.
                # A zombie's next checkpoint is fenced; its collection deletes nothing.
                self._commit(cp, pin, m, name, data, inline)
                if not isinstance(e, Exception):    # an interrupt stays one
                    raise
                note = (f"checkpoint {cp.epoch}: listing the writer claims after creating its manifest "
                        f"failed; its outcome is unknown: the manifest {name} stays and is a checkpoint "
                        "unless a newer writer fenced this one")
                err = with_context(note, e)
                err.outcome_unknown = True      # for callers that report it (objectspace)
                raise err from e
            if not created:
                if self.store.get(name) != data:
                    raise FencedError(f"checkpoint {cp.epoch} of {instance_label(self.store, self.ns)} was already "
                                      f"committed by writer epoch {self._writer} with different contents")
            self._commit(cp, pin, m, name, data, inline)
            self._just_checked = True    # the claims were listed right after the create
            log.debug("checkpoint %d of %r: wal %d B, manifest %d B", cp.epoch, self.ns, cp.wal_bytes, len(data))
        except BaseException as e:  # noqa: BLE001 - reported through cp.wait()
            where = instance_label(self.store, self.ns)
            log.warning("checkpoint %d of %s failed: %s", cp.epoch, where, str(e).removeprefix(where + ": "))
            cp._finish(e)
            return
        finally:
            with self._lock:
                self._pending.remove(pin)
        if not self._orphans_listed:
            # A new writer adopts older writers' unreferenced files once, inside its first
            # checkpoint, so the adoption is over when that checkpoint returns: a writer that
            # catches up to it later (refresh) can tell what of its unfinished work survived.
            try:
                self._collect_garbage(orphans=True)
            except Exception as e:  # noqa: BLE001 - retried with the next checkpoint
                log.warning("garbage collection in checkpoint %d failed: %s", cp.epoch, e)
        cp._finish()
        if not gc_after:
            return
        try:
            self._collect_garbage()
        except Exception as e:  # noqa: BLE001 - garbage stays for the next round
            log.warning("garbage collection after checkpoint %d failed: %s", cp.epoch, e)

    def _commit(self, cp, pin, m, name: str, data: bytes, inline: set) -> None:
        """Take a created manifest as this writer's newest checkpoint."""
        cp.manifest_bytes = len(data) - cp.inline_new
        self._count_bytes("manifest", len(data))
        with self._lock:
            self._committed.append(CheckpointInfo(cp.epoch, self._writer, name))
            self._manifests[name] = m
            for seg in pin.segments:
                if id(seg) in inline:      # later manifests name this one as its carrier
                    seg.carrier = (cp.epoch, self._writer)
        for seg in pin.segments:
            seg.read_from_file(self.store)
        cp.name = name

    def _reserved(self) -> dict:
        """SST numbers a flush or compaction in progress (or to come) may still publish:
        per writer epoch, the lowest one. Only these writers' files are in flight here."""
        with self._lock:
            out = {self._writer: self._next_table + 1}
            for name in self._writing:
                parsed = _paths.parse_file_name(name)
                if parsed is not None and parsed[0] == "sst":
                    out[parsed[1]] = min(out.get(parsed[1], parsed[2]), parsed[2])
            return out

    def _grant_background_bytes(self, wal_bytes: int) -> None:
        """Pacing: this checkpoint interval's allowance for flush and compaction output,
        scaled by the backlog so work that fell behind catches up."""
        if self._pacer.enabled:
            immutable, version = self._view
            # Half a grant more per immutable memtable past twice the flush trigger (a flush
            # that fell a whole flush behind) or L0 run waiting: enough to catch up over a
            # few intervals without one interval doubling its bytes.
            files, inline = self._live_segment_counts()
            behind = (max(0, files - 2 * self.opts.flush_segments)
                      + max(0, inline - 2 * self.opts.flush_inline_segments))
            if self.opts.compaction:
                behind += max(0, version.l0_runs() - self.opts.l0_trigger)
            backlog = 1 + 0.5 * behind
            self._pacer.grant(wal_bytes, backlog)

    def _started_from_here(self, epoch: int) -> bool | None:
        """Whether a writer newer than this one claimed the instance starting from ``epoch``
        or later; None when the claims cannot be read (the caller keeps the manifest then:
        keeping one is safe, an invalid one is ignored and collected)."""
        try:
            for name, _ in self.store.list(_paths.ns_prefix(self.ns) + _paths.WRITER_DIR):
                w = _paths.parse_claim_name(name)
                if w is not None and w > self._writer:
                    start = read_claim(self.store, name)
                    if start is not None and start >= epoch:
                        return True
            return False
        except Exception:  # noqa: BLE001
            return None

    def _stored_whole(self, name: str, data: bytes) -> bool:
        """Whether the object ``name`` holds exactly ``data`` (False when it cannot be read:
        then the caller withdraws it as before, RFC 0011 Risks)."""
        try:
            return self.store.get(name) == data
        except Exception:  # noqa: BLE001 - missing, or unknown
            return False

    def _drop_failed_manifest(self, info: CheckpointInfo) -> None:
        try:
            self.store.delete(info.name)
        except Exception as e:  # noqa: BLE001 - garbage collection retries it
            log.warning("could not delete the manifest of failed checkpoint %d: %s", info.epoch, e)
            with self._lock:
                self._abandoned.append(info)

    def _choose_inline(self, cp: Checkpoint, pin: Pinned) -> set:
        """The segments (by id()) this checkpoint's manifest carries inline: the newest of
        those in no file and no committed manifest yet that are at most
        INLINE_SEGMENT_BYTES, as long as they add up to at most INLINE_MANIFEST_BYTES; once
        one does not fit, every older one goes out as a file. Segments an earlier manifest
        carries are named there, not carried again (RFC 0011), so a manifest holds only
        what is new in it. Other instances' inline segments (after a rescale, until this
        instance's first manifest carries them) are always carried: this writer must not
        write files in their names. Counts the new ones' bytes and records into ``cp``."""
        out: set = set()
        total, full = 0, False
        cp.inline_new = cp.carried_segments = 0
        for seg in reversed(pin.segments):
            if seg.carried:
                cp.carried_segments += 1
                continue
            if seg.state not in ("pending", "failed", "inline"):
                continue
            if seg.data is None:
                if seg.state == "inline":   # cannot happen: an inline segment keeps its bytes
                    raise DkvError(f"inline WAL segment {seg.name} lost its bytes")
                self._encode(seg)
            size = len(seg.data)
            foreign = seg.ns != self.ns.strip("/")
            if foreign or (not full and size <= self.INLINE_SEGMENT_BYTES
                           and total + size <= self.INLINE_MANIFEST_BYTES):
                out.add(id(seg))
                total += size
                cp.records += wal_count(seg.data)
                cp.wal_bytes += size
                cp.inline_new += size
                self._count_bytes("wal_inline", size)
                seg.state, seg.error = "inline", None
            elif size <= self.INLINE_SEGMENT_BYTES:
                full = True
        cp.inline_segments = len(out)
        return out

    def _upload_segment(self, cp: Checkpoint, seg: Segment) -> None:
        """Upload one segment. A segment whose upload failed goes again under the same
        name: no manifest ever referred to it, so whatever a failed put left is garbage.
        An inline segment that no longer fits in the manifest is written out with an
        atomic put: manifests (and another writer that opened from one) carry it too, and
        that writer may write out the same bytes under the same name."""
        try:
            if seg.data is None:
                self._encode(seg)
            data = seg.data
            if seg.state == "inline":
                self.store.put(seg.name, data)
            else:
                self.store.put_unreferenced(seg.name, data)   # the manifest comes after
                cp.records += wal_count(data)
            cp.wal_bytes += len(data)
            self._count_bytes("wal", len(data))
            with self._lock:
                self._known_files.add(seg.name)
            seg.state, seg.error = "uploaded", None
            seg.data = None       # the Delta (while it is a source) holds the same bytes
        except BaseException as e:
            if seg.state != "inline":       # an inline one keeps its bytes and state
                seg.state = "failed"
            seg.error = e
            raise with_context(f"checkpoint {cp.epoch}: uploading WAL segment {seg.name} failed "
                               "(the next checkpoint uploads it again)", e) from e
