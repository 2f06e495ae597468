"""Garbage collection of one dkv instance's files (a mixin of DB, through CheckpointMixin).

After each checkpoint's upload, the writer deletes the manifests that left retention (and
those of abandoned checkpoints), then its own files that no retained checkpoint, pending
checkpoint or the live state needs. A manifest past retention that carries inline segments
still named elsewhere (RFC 0011) stays as a *carrier* until nothing names it. A fenced
writer (a zombie) deletes nothing; claims of writers older than every manifest still there
are deleted last.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from . import _paths
from ._locks import LockHolder
from ._timeline import CheckpointInfo, check_not_fenced
from .errors import FencedError
from .format import manifest as mf

if TYPE_CHECKING:
    from ._options import Options
    from .storage import ObjectStore

log = logging.getLogger(__name__)


class GarbageMixin(LockHolder):
    """What the collection reads of DB: its store, writer and retention, the checkpoints
    committed, doomed, abandoned and carrying (``_committed``, ``_doomed``, ``_abandoned``,
    ``_carriers``), the manifests read (``_manifests``), the files it knows of and is writing
    (``_known_files``, ``_writing``), and the live state (``_view``, ``_segments``, ``_pending``)."""

    if TYPE_CHECKING:
        store: ObjectStore
        ns: str
        read_only: bool
        opts: Options
        _writer: int
        _fenced: bool
        _just_checked: bool
        _claims: list
        _committed: list[CheckpointInfo]
        _abandoned: list[CheckpointInfo]
        _doomed: list[CheckpointInfo]
        _carriers: list[CheckpointInfo]
        _manifests: dict[str, mf.Manifest]
        _segments: list
        _pending: list
        _known_files: set
        _writing: set
        _view: tuple
        _orphans_listed: bool
        _base_reserved: dict

        def _claim_durable(self) -> None: ...

        def _forget_table(self, path: str) -> None: ...

    def _manifest_of(self, info: CheckpointInfo) -> mf.Manifest:
        m = self._manifests.get(info.name)
        if m is None:
            m = self._manifests[info.name] = mf.decode(self.store.get(info.name), info.name)
        return m

    def _collect_garbage(self, orphans: bool = False) -> None:
        """Delete manifests past retention (and abandoned ones), then own files that no
        retained checkpoint, pending checkpoint or live state needs. A manifest that could
        not be deleted stays doomed and keeps its files until a later round deletes it.

        A manifest past retention that carries inline segments a retained manifest, a
        pending checkpoint or the live state still names (RFC 0011) is not deleted but
        kept as a *carrier*: no checkpoint (readers tell by the newest manifest's retained
        epochs), its files not kept for it, deleted by the first round that finds it
        needed no more."""
        if self.read_only or self._fenced:
            return
        self._claim_durable()
        with self._gc_lock:
            if not self._just_checked:
                try:
                    self._claims = check_not_fenced(self.store, self.ns, self._writer)
                except FencedError:
                    self._fenced = True     # a zombie deletes nothing a newer writer may need
                    return
            self._just_checked = False
            with self._lock:
                committed = list(self._committed)
                for info in committed[:-self.opts.retain] + self._abandoned:
                    if info not in self._doomed and info not in committed[-self.opts.retain:]:
                        self._doomed.append(info)
                self._abandoned = []
                self._committed = committed[-self.opts.retain:]
                retained = list(self._committed)
                live_carriers = {s.carrier for s in self._segments if s.carried}
                for pin in self._pending:
                    live_carriers.update(s.carrier for s in pin.segments if s.carried)
            # The retained manifests say which carriers must stay: read them before deleting
            # any manifest. An unreadable one: delete nothing this round.
            try:
                retained_manifests = [self._manifest_of(info) for info in retained]
            except Exception as e:  # noqa: BLE001 - retried next round
                log.warning("garbage collection of %r skipped: a retained manifest is unreadable: %s", self.ns, e)
                return
            for m in retained_manifests:
                live_carriers |= mf.carriers(m)
            needed = {_paths.manifest_name(self.ns, e, w) for e, w in live_carriers}
            with self._lock:
                for info in list(self._doomed):
                    if info.name in needed:     # kept only for the segments it carries
                        self._doomed.remove(info)
                        if info not in self._carriers:
                            self._carriers.append(info)
                unneeded = [info for info in self._carriers if info.name not in needed]
                self._carriers = [info for info in self._carriers if info.name in needed]
                doomed_manifests = list(self._doomed) + [i for i in unneeded if i not in self._doomed]
                self._doomed = list(doomed_manifests)
            own = _paths.ns_prefix(self.ns)
            still_there = []
            for info in doomed_manifests:   # manifests first: none may point at a deleted file
                try:
                    if info.name.startswith(own):
                        self.store.delete(info.name)
                    self._doomed.remove(info)
                except Exception as e:  # noqa: BLE001 - retried next round
                    log.warning("could not delete manifest %s (will retry): %s", info.name, e)
                    still_there.append(info)
            keep: set = set()
            known: list[tuple[CheckpointInfo, mf.Manifest | None]] = list(zip(retained, retained_manifests))
            for info, read in known + [(i, None) for i in still_there]:
                try:
                    m = read or self._manifest_of(info)
                except Exception:  # noqa: BLE001 - an unreadable manifest: keep every file this round
                    return
                keep.update(t.path for t in m.tables())
                for r in m.wal:
                    if not r.inline:
                        keep.update(_paths.wal_name(r.ns, r.writer, i) for i in range(r.first, r.last + 1))
            for info in doomed_manifests:
                if info not in still_there:
                    self._manifests.pop(info.name, None)
            if orphans and not self._orphans_listed:
                self._list_orphans()
            with self._lock:
                live = self._live_files()
                doomed = {f for f in self._known_files if f not in keep and f not in live and f.startswith(own)}
                self._known_files -= doomed
            for name in sorted(doomed):
                self.store.delete(name)
                with self._lock:    # the flush and compaction threads add tables meanwhile
                    self._forget_table(name)
            if doomed or doomed_manifests:
                log.debug("gc of %r: deleted %d manifests, %d files; %d carriers kept", self.ns,
                          len(doomed_manifests), len(doomed), len(self._carriers))
            self._delete_old_claims()

    def _live_files(self) -> set:
        files = {t.path for t in self._view[1].tables()}
        files.update(s.name for s in self._segments)
        for pin in self._pending:
            files |= pin.files()
        files |= self._writing
        return files

    def _list_orphans(self) -> None:
        """Once per writer: adopt files of older writers that no manifest refers to, except
        SSTs the checkpoint we opened reserves (its writer may still publish them: a Spark
        shard that moved to another worker and comes back catches up with refresh)."""
        own = _paths.ns_prefix(self.ns)
        reserved = self._base_reserved      # the work in flight of the writer we opened from
        found = []
        for d in (_paths.SST_DIR, _paths.WAL_DIR):
            for name, _ in self.store.list(own + d):
                parsed = _paths.parse_file_name(name)
                if parsed is None or parsed[1] >= self._writer:
                    continue
                kind, writer, number = parsed
                if kind == "sst" and writer in reserved and number >= reserved[writer]:
                    continue
                found.append(name)
        with self._lock:
            self._known_files.update(found)
        self._orphans_listed = True

    def _delete_old_claims(self) -> None:
        if not self._committed:
            return
        # Claims rule on the validity of every manifest still there, carriers included.
        oldest = min(i.writer for i in self._committed + self._carriers + self._doomed)
        for name in self._claims:
            w = _paths.parse_claim_name(name)
            if w is not None and w < oldest and w < self._writer:
                self.store.delete(name)
