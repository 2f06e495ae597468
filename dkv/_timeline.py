"""Which checkpoints are valid: manifests, writer claims and fencing.

Every writer that opens an instance claims a new **writer epoch** ``w`` by creating
``writer/<w>`` (conditional create; its body is the checkpoint epoch the writer started
from, or -1). A manifest is named by (checkpoint epoch, writer epoch). A manifest
``(E, w)`` is **valid** unless a later writer ``w' > w`` started from an epoch ``s' < E``:
that writer rewound the instance to ``s'``, so everything ``w`` wrote after ``s'``
belongs to an abandoned timeline (a zombie task, or a batch that is being re-run).
For each epoch the valid manifest of the highest writer wins.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from . import _paths
from .errors import CorruptionError, FencedError, ObjectMissingError

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
        for attempt in range(MAX_LISTINGS):
            try:
                self._list(_paths.ns_prefix(ns))
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

    @property
    def max_writer(self) -> int:
        return max(list(self.claim_names) + [m.writer for m in self.manifests], default=0)

    def valid(self) -> list[CheckpointInfo]:
        """Valid checkpoints, one per epoch (highest writer), oldest first."""
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

    def find(self, epoch: int | None) -> CheckpointInfo | None:
        valid = self.valid()
        if epoch is None:
            return valid[-1] if valid else None
        for m in valid:
            if m.epoch == epoch:
                return m
        return None


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
