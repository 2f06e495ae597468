"""Which checkpoints are valid: manifests, writer claims and fencing.

Every writer that opens an instance claims a new **writer epoch** ``w`` by creating
``writer/<w>`` (conditional create; its body is the checkpoint epoch the writer started
from, or -1). A manifest is named by (checkpoint epoch, writer epoch). A manifest
``(E, w)`` is **valid** unless a later writer ``w' > w`` started from an epoch ``s' < E``:
that writer rewound the instance to ``s'``, so everything ``w`` wrote after ``s'``
belongs to an abandoned timeline (a zombie task, or a batch that is being re-run).
For each epoch the valid manifest of the highest writer wins.

Not every valid manifest is a checkpoint (RFC 0011): a manifest past its writer's
retention that still carries inline WAL segments which retained manifests name stays
until they no longer do, and it cannot be opened (the older manifests it names may be
gone). The **checkpoints** are the valid manifests whose epochs the newest valid
manifest lists as retained (its ``k``); a Timeline reads that one manifest to tell (and,
after a rewind, the invalid manifests of the abandoned timeline: see ``_not_left``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from . import _paths
from .errors import CheckpointNotFoundError, CorruptionError, FencedError, ObjectMissingError
from .format import manifest as mf

log = logging.getLogger(__name__)
MAX_CLAIM_TRIES = 16
MAX_LISTINGS = 8


@dataclass(frozen=True, order=True)
class CheckpointInfo:
    """A retained checkpoint: its epoch, the writer epoch that made it, its manifest name."""
    epoch: int
    writer: int
    name: str

    def __repr__(self) -> str:
        return f"Checkpoint(epoch={self.epoch}, writer={self.writer})"


class Timeline:
    """A listing of one instance's manifests and claims, with the validity rule applied."""

    def __init__(self, store, ns: str) -> None:
        self.store = store
        self.ns = ns
        self._newest: tuple | None = None       # (CheckpointInfo, decoded manifest or None)
        self._valid: tuple | None = None
        self._k: dict[str, frozenset | None] = {}      # `k` of invalid manifests (_retained_of)
        self._listed()

    def _listed(self) -> None:
        self._newest = self._valid = None
        for attempt in range(MAX_LISTINGS):
            try:
                self._list(_paths.ns_prefix(self.ns))
                return
            except ObjectMissingError:
                # A newer writer collected a claim between our listing and our read: it
                # deletes claims only after the manifests they invalidate, and a fresh
                # listing no longer holds those manifests. List again.
                if attempt == MAX_LISTINGS - 1:
                    raise

    def _list(self, prefix: str) -> None:
        self.claims: dict[int, int] = {}
        self.claim_names: dict[int, str] = {}
        for name, _ in self.store.list(prefix + _paths.WRITER_DIR):
            w = _paths.parse_claim_name(name)
            if w is not None:
                self.claim_names[w] = name
        self.manifests: list[CheckpointInfo] = []
        for name, _ in self.store.list(prefix + _paths.MANIFEST_DIR):
            parsed = _paths.parse_manifest_name(name)
            if parsed is not None:
                self.manifests.append(CheckpointInfo(parsed[0], parsed[1], name))
        self.manifests.sort()
        # Only claims newer than the oldest manifest's writer can invalidate anything.
        oldest = min((m.writer for m in self.manifests), default=0)
        for w, name in self.claim_names.items():
            if w > oldest:
                start = _read_claim(self.store, name)
                if start is not None:
                    self.claims[w] = start

    def add_claim(self, writer: int, name: str, start: int) -> None:
        """Count a claim made after the listing (the caller's own)."""
        self.claim_names[writer] = name
        self.claims[writer] = start
        self._newest = None

    @property
    def max_writer(self) -> int:
        return max(list(self.claim_names) + [m.writer for m in self.manifests], default=0)

    def valid(self) -> list[CheckpointInfo]:
        """Valid manifests, one per epoch (highest writer), oldest first (computed once per
        listing and claim): the checkpoints and the carriers (``checkpoints``)."""
        key = (len(self.manifests), tuple(sorted(self.claims.items())))
        if self._valid is None or self._valid[0] != key:
            self._valid = (key, self._compute_valid())
        return list(self._valid[1])

    def _compute_valid(self) -> list[CheckpointInfo]:
        later = sorted(self.claims.items())
        best: dict[int, CheckpointInfo] = {}
        for m in self.manifests:
            if any(w > m.writer and start < m.epoch for w, start in later):
                continue
            cur = best.get(m.epoch)
            if cur is None or m.writer > cur.writer:
                best[m.epoch] = m
        return [best[e] for e in sorted(best)]

    def invalid(self) -> list[CheckpointInfo]:
        keep = set(self.valid())
        return [m for m in self.manifests if m not in keep]

    def newest_manifest(self) -> mf.Manifest | None:
        """The decoded manifest of the newest valid manifest (None when there is none), read
        once. A damaged one raises CorruptionError naming it."""
        valid = self.valid()
        if not valid:
            return None
        if self._newest is None or self._newest[0] != valid[-1]:
            info = valid[-1]
            self._newest = (info, mf.decode(self.store.get(info.name), info.name))
        return self._newest[1]

    def manifest(self, info: CheckpointInfo) -> mf.Manifest:
        """The decoded manifest of ``info`` (no second read of the newest one)."""
        if self._newest is not None and self._newest[0] == info:
            return self._newest[1]
        return mf.decode(self.store.get(info.name), info.name)

    def checkpoints(self) -> list[CheckpointInfo]:
        """Checkpoints, one per epoch, oldest first: the valid manifests whose epochs the
        newest one lists as retained. The rest are carriers (see the module's doc). Reads
        the newest manifest when there are two valid manifests or more; lists again when a
        writer collected it meanwhile. A damaged newest manifest: every valid manifest
        counts (opening it reports the damage). After a rewind, not those that left
        retention in the abandoned timeline (``_not_left``)."""
        for attempt in range(MAX_LISTINGS):
            valid = self.valid()
            if len(valid) < 2:
                return valid
            try:
                newest = self.newest_manifest()
            except ObjectMissingError:
                if attempt == MAX_LISTINGS - 1:
                    raise
                self._listed()
                continue
            except CorruptionError as e:
                log.warning("%s: cannot tell carriers from checkpoints: %s", instance_label(self.store, self.ns), e)
                return valid
            if not newest.retained:         # written before `k` existed: all count
                return valid
            keep = set(newest.retained)
            try:
                return self._not_left([c for c in valid if c.epoch in keep])
            except ObjectMissingError:
                if attempt == MAX_LISTINGS - 1:
                    raise
                self._listed()
        raise AssertionError("unreachable")

    def _not_left(self, checkpoints: list[CheckpointInfo]) -> list[CheckpointInfo]:
        """``checkpoints`` without those that an invalid manifest says left retention.

        A rewind (a claim from an older epoch) makes the newest valid manifest an older one,
        whose ``k`` may list a manifest that left retention in the abandoned timeline and
        that a writer then kept as a carrier and collected the files of. A manifest that
        ``k`` lists counts only if every later manifest of a writer that knew it (an equal
        or newer writer epoch: the abandoned ones too, still listed until the rewinding
        writer's first manifest, whose ``k`` leaves it out in turn) lists it as well. Along
        one timeline an epoch that left ``k`` never comes back, so only invalid manifests
        are read, and only after a rewind (or a zombie's leftover). One that is damaged,
        or has no ``k``, says nothing; one gone meanwhile raises ObjectMissingError (the
        caller lists again)."""
        if not checkpoints:
            return checkpoints
        oldest = min(c.writer for c in checkpoints)
        later = [m for m in self.invalid() if m.epoch > checkpoints[0].epoch and m.writer >= oldest]
        for m in later:
            retained = self._retained_of(m)
            if retained is not None:
                checkpoints = [c for c in checkpoints
                               if c.epoch in retained or c.epoch >= m.epoch or c.writer > m.writer]
        return checkpoints

    def _retained_of(self, info: CheckpointInfo) -> frozenset | None:
        """The ``k`` of a manifest (None when it has none or is damaged), read once."""
        if info.name not in self._k:
            try:
                self._k[info.name] = frozenset(mf.decode(self.store.get(info.name), info.name).retained) or None
            except CorruptionError as e:
                log.debug("%s: %s (its retained epochs are not counted)", instance_label(self.store, self.ns), e)
                self._k[info.name] = None
        return self._k[info.name]

    def carriers(self) -> list[CheckpointInfo]:
        """Valid manifests that are no checkpoints: kept for the inline segments they carry."""
        keep = set(self.checkpoints())
        return [c for c in self.valid() if c not in keep]

    def find(self, epoch: int | None) -> CheckpointInfo | None:
        checkpoints = self.checkpoints()
        if epoch is None:
            return checkpoints[-1] if checkpoints else None
        for m in checkpoints:
            if m.epoch == epoch:
                return m
        return None

    def not_found(self, epoch: int, what: str = "") -> CheckpointNotFoundError:
        """The error for a checkpoint ``epoch`` that ``find`` does not know; says so when
        its manifest is there as a carrier."""
        have = [c.epoch for c in self.checkpoints()]
        where = what or f"{instance_label(self.store, self.ns)}"
        if any(c.epoch == epoch for c in self.carriers()):
            return CheckpointNotFoundError(
                f"epoch {epoch} of {where} is no checkpoint any more: it left retention, and its manifest is "
                "kept only for the inline WAL segments it carries for later checkpoints (RFC 0011), which "
                f"does not make it openable; retained epochs: {have}")
        return CheckpointNotFoundError(f"no checkpoint with epoch {epoch} in {where}; retained epochs: {have}")


def _read_claim(store, name: str) -> int | None:
    """The start epoch in a claim; None for an unfinished claim. A writer makes its claim
    durable before it writes or deletes anything (RFC 0006), so a claim that a power loss
    left empty or zero-filled is a writer that did neither: it invalidates nothing (its
    number still counts, so it is never claimed again)."""
    data = store.get(name)
    if not data.strip(b"\0"):
        return None
    try:
        return int(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise CorruptionError(f"writer claim {name} is damaged: {data[:40]!r}") from None


def instance_label(store, ns: str) -> str:
    """The instance as a message names it: its name and the store's location, so that a
    user with several stores (or a state root of many instances) recognises it; the root
    instance (``ns`` "") by the location alone."""
    location = getattr(store, "location", "") or repr(store)
    return f"instance {ns!r} of {location}" if ns else f"the root instance of {location}"


def claim_writer(store, ns: str, timeline: Timeline, start_epoch: int, deferred: bool = False) -> int:
    """Claim the next writer epoch (conditional create), starting from ``start_epoch``.
    ``deferred``: durable only after ``store.sync`` of the claim (see DB._claim_durable)."""
    w = timeline.max_writer + 1
    create = store.put_if_absent_deferred if deferred else store.put_if_absent
    for _ in range(MAX_CLAIM_TRIES):
        if create(_paths.claim_name(ns, w), str(start_epoch).encode("ascii")):
            log.debug("claimed writer epoch %d of %r starting at epoch %d", w, ns, start_epoch)
            return w
        w += 1
    raise FencedError(f"could not claim a writer epoch for {instance_label(store, ns)}: too many concurrent writers")


def check_not_fenced(store, ns: str, writer: int) -> list[str]:
    """Raise FencedError if a newer writer has claimed the instance; else the claim names."""
    names = [name for name, _ in store.list(_paths.ns_prefix(ns) + _paths.WRITER_DIR)]
    for name in names:
        w = _paths.parse_claim_name(name)
        if w is not None and w > writer:
            raise FencedError(f"{instance_label(store, ns)}: writer epoch {writer} was fenced by writer epoch {w}; "
                              "this writer must stop (reopen to continue from the latest checkpoint)")
    return names
