"""Finding the object spaces of a location: dkv instances, spark_ops operator layouts,
key groups, and what to compare for a diff between two epochs.

An instance named ``<owner>/L<first batch>-n<shards>/p<shard>`` is a shard of a spark_ops
operator's state (``<owner>`` is ``<query id>/<operator>``; the naming is spark_ops'
``_layout.py``); its object spaces sit at ``key_prefix(kg, SCHEMA_STATE)``. Other
instances stand alone (``ObjectSpace.open`` uses key group 0 of the root instance).
"""
from __future__ import annotations

import re
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Iterator, Optional

import dkv
from dkv.keys import SCHEMA_STATE, key_prefix

from ..errors import ObjectSpaceError
from .changes import diff
from .records import Progress

_LAYOUT_INSTANCE = re.compile(r"^(?:(?P<owner>.+)/)?L(?P<first>\d{12})-n(?P<shards>\d{5})/p(?P<shard>\d{5})$")


@dataclass(frozen=True)
class InstanceRef:
    """A dkv instance of a location at one checkpoint epoch. ``owner`` is set for the shards
    of a spark_ops operator (``<query id>/<operator>``, "" when the location is the
    operator's own folder); ``epochs`` are its retained checkpoints."""
    location: object        # as given: a path or URL (or an ObjectStore)
    instance: str
    epoch: int
    epochs: tuple = ()
    owner: Optional[str] = None
    first_batch: Optional[int] = None
    shards: Optional[int] = None
    shard: Optional[int] = None

    @property
    def operator(self) -> Optional[str]:
        if self.owner is None:
            return None
        loc = self.location if isinstance(self.location, str) else self.location.location
        return self.owner.rsplit("/", 1)[-1] if self.owner else loc.rstrip("/").rsplit("/", 1)[-1]

    @property
    def query_id(self) -> Optional[str]:
        if not self.owner or "/" not in self.owner:
            return None
        return self.owner.rsplit("/", 1)[0]

    def open(self, **dkv_options):
        """This instance read-only at ``epoch`` (a dkv DB; close it). dkv finds the files
        wherever the instance's writer opened it from (the location or a folder around it)."""
        return dkv.open(self.location, checkpoint=self.epoch, read_only=True, instance=self.instance,
                        **dkv_options)

    def as_json(self) -> dict:
        return {"instance": self.instance, "epoch": self.epoch, "operator": self.operator,
                "query_id": self.query_id}


def _store_options(dkv_options: dict) -> dict:
    keys = ("endpoint_url", "region_name", "aws_access_key_id", "aws_secret_access_key", "aws_session_token",
            "cache_dir", "cache_bytes", "fsync")
    return {k: v for k, v in dkv_options.items() if k in keys}


def find_instances(location, *, epoch: int | None = None, instance: str | None = None,
                   **dkv_options) -> list[InstanceRef]:
    """The instances under ``location`` that hold ``epoch`` (default: each one's newest;
    for an operator, the newest epoch of its shards), sorted by name.

    ``instance`` selects one instance or every instance under a path (e.g.
    ``<query id>/<operator>``). For an operator's shards, the layout (shard count) that
    ran ``epoch`` is chosen: after a rescale, older layouts are skipped. Costs two
    listings per instance. Raises dkv.NotAStoreError when ``location`` holds no dkv
    instance (it says what is there instead; nothing is created), ObjectSpaceError when
    no instance matches ``instance`` and dkv.CheckpointNotFoundError when nothing holds
    ``epoch``."""
    store = dkv.open_store(location, create=False, **_store_options(dkv_options))
    loc = location if isinstance(location, str) else store
    names = dkv.instances(store, required=True)
    if instance:
        sel = instance.strip("/")
        names = [n for n in names if n == sel or n.startswith(sel + "/")]
    if not names:
        raise ObjectSpaceError(f"no dkv instance under {loc!r}" + (f" matches {instance!r}" if instance else ""))
    families: dict = {}
    for n in names:
        m = _LAYOUT_INSTANCE.match(n)
        families.setdefault(("op", m["owner"] or "") if m else ("db", n), []).append((n, m))
    out, seen = [], {}
    for (what, owner), members in sorted(families.items()):
        epochs = {n: tuple(c.epoch for c in dkv.list_checkpoints(store, n)) for n, _ in members}
        seen.update(epochs)
        if what == "db":
            n = members[0][0]
            e = epoch if epoch is not None else max(epochs[n], default=None)
            if e is not None and e in epochs[n]:
                out.append(InstanceRef(loc, n, e, epochs[n]))
            continue
        e = epoch if epoch is not None else max((x for es in epochs.values() for x in es), default=None)
        holders = [(int(m["first"]), int(m["shards"]), n, m) for n, m in members if e in epochs[n]]
        if not holders:
            continue
        layout = max(h[:2] for h in holders if h[0] <= e) if any(h[0] <= e for h in holders) else max(
            h[:2] for h in holders)
        for first, shards, n, m in holders:
            if (first, shards) == layout:
                out.append(InstanceRef(loc, n, e, epochs[n], owner, first, shards, int(m["shard"])))
    if not out:
        held = sorted({e for es in seen.values() for e in es})
        what = "a checkpoint" if epoch is None else f"checkpoint {epoch}"
        raise dkv.CheckpointNotFoundError(f"no instance under {loc!r} holds {what}; "
                                          f"retained epochs: {held or 'none'}")
    return sorted(out, key=lambda r: r.instance)


def key_groups_of(db, first: int = 0, end: int = 1 << 16) -> list[int]:
    """Key groups in ``[first, end)`` that hold state records (object spaces) in ``db``.
    O(key groups present) seeks."""
    out, start = [], first.to_bytes(2, "big")
    stop = end.to_bytes(2, "big") if end < 1 << 16 else None
    while True:
        k = next(iter(db.scan(start, stop)), None)
        if k is None:
            return out
        key = k[0]
        if len(key) < 3:
            start = key + b"\x00"
            continue
        kg = (key[0] << 8) | key[1]
        if key[2] == SCHEMA_STATE:
            out.append(kg)
            start = key_prefix(kg, SCHEMA_STATE + 1)
        elif kg + 1 < 1 << 16:
            start = (kg + 1).to_bytes(2, "big")
        else:
            return out


ALL_KEY_GROUPS = (0, 1 << 16)


def spaces_of(db, *, key_group: int | None = None, prefix: bytes | None = None,
              groups: tuple = ALL_KEY_GROUPS) -> list[tuple]:
    """(key group, ObjectSpace) of the spaces to inspect in ``db``: the one at ``prefix``
    (key group None), the one of ``key_group``, or every key group in ``groups`` that
    holds state. Spaces are free to make; finding key groups costs a seek per group."""
    from ..space import ObjectSpace
    if prefix is not None:
        return [(None, ObjectSpace(db, prefix))]
    kgs = [key_group] if key_group is not None else key_groups_of(db, *groups)
    return [(kg, ObjectSpace(db, key_prefix(kg, SCHEMA_STATE))) for kg in kgs]


def _family(ref: InstanceRef):
    return ("op", ref.owner) if ref.owner is not None else ("db", ref.instance)


def pair_instances(location, from_epoch: int, to_epoch: int, *, instance: str | None = None,
                   **dkv_options) -> list[tuple]:
    """What to compare to diff ``from_epoch`` with ``to_epoch``: (old InstanceRef or None,
    new InstanceRef or None, (first, end) key-group range). The same instance at both
    epochs when the layout did not change; after a rescale, each old shard with each new
    shard whose key groups overlap (their manifests are read for the ranges). ``to_epoch``
    None: the newest (per operator). Raises
    dkv.CheckpointNotFoundError when no instance holds one of the epochs."""
    sides = []
    for epoch in (from_epoch, to_epoch):
        fams: dict = {}
        for ref in find_instances(location, epoch=epoch, instance=instance, **dkv_options):
            fams.setdefault(_family(ref), []).append(ref)
        sides.append(fams)
    out = []
    for fam in sorted(set(sides[0]) | set(sides[1])):
        olds, news = sides[0].get(fam, []), sides[1].get(fam, [])
        if not olds or not news:
            out += [(r, None, ALL_KEY_GROUPS) for r in olds] + [(None, r, ALL_KEY_GROUPS) for r in news]
        elif [r.instance for r in olds] == [r.instance for r in news]:
            out += [(o, n, ALL_KEY_GROUPS) for o, n in zip(olds, news)]
        else:
            ranges = {}
            for r in olds + news:
                with r.open(**dkv_options) as db:
                    ranges[r] = tuple(getattr(db, "groups", ALL_KEY_GROUPS))
            for o in olds:
                for n in news:
                    lo, hi = max(ranges[o][0], ranges[n][0]), min(ranges[o][1], ranges[n][1])
                    if lo < hi:
                        out.append((o, n, (lo, hi)))
    return out


def diff_pair(old: InstanceRef | None, new: InstanceRef | None, groups: tuple = ALL_KEY_GROUPS, *,
              key_group: int | None = None, prefix: bytes | None = None, progress: Progress | None = None,
              **dkv_options) -> Iterator[tuple]:
    """(key group, ObjectChange or SlotChange) for every space of one pair of
    ``pair_instances``: both instances opened read-only, key groups of either side in
    ``groups`` (or the one ``key_group``, or the space at ``prefix``) diffed in order."""
    with ExitStack() as stack:
        dbs = [stack.enter_context(r.open(**dkv_options)) if r is not None else None for r in (old, new)]
        found: dict = {}
        for side, db in enumerate(dbs):
            if db is not None:
                for kg, sp in spaces_of(db, key_group=key_group, prefix=prefix, groups=groups):
                    found.setdefault(kg, [None, None])[side] = sp
        for kg in sorted(found, key=lambda k: -1 if k is None else k):
            for change in diff(*found[kg], progress=progress):
                yield kg, change


