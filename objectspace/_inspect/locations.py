"""Finding the object spaces of a location: its dkv instances, the families other
packages make of them, their key-group spaces, and what to compare for a diff between
two epochs.

An instance stands alone unless a registered **family rule** claims it: a package that
keeps one state in several instances (one per key-group range, re-split from some epoch
on) tells by their names which family and which generation each instance belongs to.
spark_ops registers the rule for its operators' shards; ``python -m objectspace`` finds
rules through the ``objectspace.family_rules`` entry point group, and a program may call
``register_family_rule``. An instance's object spaces sit at ``key_prefix(kg,
SCHEMA_STATE)``, one per key group (``ObjectSpace.open`` uses key group 0).
"""
from __future__ import annotations

import logging
import os
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Optional

import dkv
from dkv.keys import key_prefix

from .._layout import SCHEMA_STATE
from ..errors import ObjectSpaceError
from .changes import diff
from .records import Progress

log = logging.getLogger(__name__)

ENTRY_POINTS = "objectspace.family_rules"
"""The entry point group where installed packages offer their ``FamilyRule``."""


@dataclass(frozen=True)
class FamilyMember:
    """What a family rule says of one instance: the ``family`` it belongs to (instances
    that hold one state together, each a key-group range of it), its ``generation`` (a
    tuple that sorts the family's generations; its first item is the first epoch the
    generation holds) and ``labels`` shown with it (JSON values by name)."""
    family: str
    generation: tuple
    labels: dict = field(default_factory=dict, compare=False, hash=False)
    rule: Optional[str] = field(default=None, compare=False, hash=False)     # set by find_instances


@dataclass(frozen=True)
class FamilyRule:
    """How a package names the instances of its families: ``member(location, instance)``
    gives the ``FamilyMember`` for an instance name found under ``location`` (a path or
    URL), or None for an instance that is not one of its own. ``labels`` names the labels
    its members carry: every instance's JSON has them (null where a rule does not apply),
    and tables show the first. ``expiries(db, key_group)``, for a package whose state
    expires (spark_ops' TTL), gives a reader with ``object(name)`` and ``item(name,
    item_key, kind)`` (``item_key``: an item record's key after the object's items prefix,
    None for other records; ``objectspace.item_position(kind, item_key)`` gives a sequence
    element's position), each the expiry in ms since the Unix epoch or None; inspection
    shows it as ``expires_at``."""
    name: str
    member: Callable[[str, str], Optional[FamilyMember]]
    labels: tuple = ()
    expiries: Optional[Callable] = None


_RULES: dict = {}
_ENTRY_POINTS_LOADED = False


def register_family_rule(rule: FamilyRule) -> None:
    """Make ``rule`` known to ``find_instances`` in this process (again: replaced)."""
    _RULES[rule.name] = rule


def family_rules() -> list:
    """The registered rules, with those of installed packages' entry points (loaded once;
    one that fails to load is skipped)."""
    global _ENTRY_POINTS_LOADED
    if not _ENTRY_POINTS_LOADED:
        _ENTRY_POINTS_LOADED = True
        from importlib import metadata     # ~20 ms to import: only when inspecting
        for ep in metadata.entry_points(group=ENTRY_POINTS):
            try:
                rule = ep.load()
            except Exception as e:  # noqa: BLE001 - a broken plugin must not break inspection
                log.warning("objectspace: family rule %s (%s) not loaded: %s", ep.name, ep.value, e)
                continue
            _RULES.setdefault(rule.name, rule)
    return list(_RULES.values())


def _member(location: str, instance: str) -> tuple:
    """(rule name, FamilyMember) of the first rule that claims ``instance``, or (None, None)."""
    for rule in family_rules():
        m = rule.member(location, instance)
        if m is not None:
            return rule.name, m
    return None, None


@dataclass(frozen=True)
class InstanceRef:
    """A dkv instance of a location at one checkpoint epoch, with the ``member``ship a
    family rule gave it (None: it stands alone); ``epochs`` are its retained checkpoints."""
    location: str | os.PathLike[str] | dkv.ObjectStore        # as given: a path or URL (or an ObjectStore)
    instance: str
    epoch: int
    epochs: tuple = ()
    member: Optional[FamilyMember] = None

    @property
    def labels(self) -> dict:
        """The labels its family rule gave it ({} when it stands alone)."""
        return dict(self.member.labels) if self.member is not None else {}

    def open(self, **dkv_options: Any) -> dkv.DB:
        """This instance read-only at ``epoch`` (a dkv DB; close it). dkv finds the files
        wherever the instance's writer opened it from (the location or a folder around it)."""
        return dkv.open(self.location, checkpoint=self.epoch, read_only=True, instance=self.instance,
                        **dkv_options)

    def as_json(self) -> dict:
        blank = {name: None for rule in family_rules() for name in rule.labels}
        return {"instance": self.instance, "epoch": self.epoch, **blank, **self.labels}


def _store_options(dkv_options: dict) -> dict:
    return {k: v for k, v in dkv_options.items() if k in dkv.STORE_OPTIONS}


def find_instances(location: str | os.PathLike[str] | dkv.ObjectStore, *, epoch: int | None = None,
                   instance: str | None = None, **dkv_options: Any) -> list[InstanceRef]:
    """The instances under ``location`` that hold ``epoch`` (default: each one's newest;
    for a family, the newest epoch of its members), sorted by name.

    ``instance`` selects one instance or every instance under a path (e.g. spark_ops'
    ``<query id>/<operator>``). For a family, the generation that held ``epoch`` is
    chosen (the newest one started at or before it): after a rescale, the members of
    older generations are skipped. Costs two
    listings per instance. Raises dkv.NotAStoreError when ``location`` holds no dkv
    instance (it says what is there instead; nothing is created), ObjectSpaceError when
    no instance matches ``instance`` and dkv.CheckpointNotFoundError when nothing holds
    ``epoch``."""
    store = dkv.open_store(location, create=False, **_store_options(dkv_options))
    loc = location if isinstance(location, str) else store
    where = location if isinstance(location, str) else store.location
    names = dkv.instances(store, required=True)
    if instance:
        sel = instance.strip("/")
        names = [n for n in names if n == sel or n.startswith(sel + "/")]
    if not names:
        raise ObjectSpaceError(f"no dkv instance under {loc!r}" + (f" matches {instance!r}" if instance else ""))
    families: dict = {}
    for n in names:
        rule, m = _member(where, n)
        if m is not None and m.rule != rule:
            m = replace(m, rule=rule)
        families.setdefault((rule, m.family) if m else (None, n), []).append((n, m))
    out, seen = [], {}
    for (rule, _), members in sorted(families.items(), key=lambda f: (f[0][0] or "", f[0][1])):
        epochs = {n: tuple(c.epoch for c in dkv.list_checkpoints(store, n)) for n, _ in members}
        seen.update(epochs)
        if rule is None:
            n = members[0][0]
            e = epoch if epoch is not None else max(epochs[n], default=None)
            if e is not None and e in epochs[n]:
                out.append(InstanceRef(loc, n, e, epochs[n]))
            continue
        e = epoch if epoch is not None else max((x for es in epochs.values() for x in es), default=None)
        holders = [(m.generation, n, m) for n, m in members if e in epochs[n]]
        if not holders:
            continue
        started = [g for g, _, _ in holders if g[0] <= e]
        generation = max(started) if started else max(g for g, _, _ in holders)
        out += [InstanceRef(loc, n, e, epochs[n], m) for g, n, m in holders if g == generation]
    if not out:
        held = sorted({e for es in seen.values() for e in es})
        what = "a checkpoint" if epoch is None else f"checkpoint {epoch}"
        raise dkv.CheckpointNotFoundError(f"no instance under {loc!r} holds {what}; "
                                          f"retained epochs: {held or 'none'}")
    return sorted(out, key=lambda r: r.instance)


class _NoExpiries:
    any = False

    @staticmethod
    def object(name):
        return None

    @staticmethod
    def item(name, item_key, kind):
        return None


NO_EXPIRIES = _NoExpiries()


def expiries_of(ref: "InstanceRef | None", db, key_group) -> object:
    """The expiry reader of key group ``key_group`` of instance ``ref`` (opened as ``db``)
    from its family rule's ``expiries``; one that knows of no expiry for instances no rule
    with ``expiries`` claims (or a space at a prefix, ``key_group`` None)."""
    if ref is None or ref.member is None or key_group is None:
        return NO_EXPIRIES
    rule = _RULES.get(ref.member.rule)
    if rule is None or rule.expiries is None:
        return NO_EXPIRIES
    return rule.expiries(db, key_group)


def key_groups_of(db: dkv.DB, first: int = 0, end: int = 1 << 16) -> list[int]:
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
        kg = dkv.key_group_of(key)
        if key[2] == SCHEMA_STATE:
            out.append(kg)
            start = key_prefix(kg, SCHEMA_STATE + 1)
        elif kg + 1 < 1 << 16:
            start = (kg + 1).to_bytes(2, "big")
        else:
            return out


ALL_KEY_GROUPS = (0, 1 << 16)


def _old_name(groups, key_group_range, fn: str):
    """``groups=``, the old name of ``key_group_range=`` (before 0.4): taken, with a warning."""
    if groups is None:
        return key_group_range
    warnings.warn(f"{fn}(groups=) is now key_group_range=", DeprecationWarning, stacklevel=3)
    return groups


def spaces_of(db: dkv.DB, *, key_group: int | None = None, prefix: bytes | None = None,
              key_group_range: tuple = ALL_KEY_GROUPS, groups: tuple | None = None) -> list[tuple]:
    """(key group, ObjectSpace) of the spaces to inspect in ``db``: the one at ``prefix``
    (key group None), the one of ``key_group``, or every key group in ``key_group_range``
    ``(first, end)`` that holds state. Spaces are free to make; finding key groups costs a
    seek per group."""
    from ..space import ObjectSpace
    key_group_range = _old_name(groups, key_group_range, "spaces_of")
    if prefix is not None:
        return [(None, ObjectSpace(db, prefix))]
    kgs = [key_group] if key_group is not None else key_groups_of(db, *key_group_range)
    return [(kg, ObjectSpace(db, key_prefix(kg, SCHEMA_STATE))) for kg in kgs]


def _family(ref: InstanceRef):
    return ("family", ref.member.family) if ref.member is not None else ("alone", ref.instance)


def pair_instances(location: str | os.PathLike[str] | dkv.ObjectStore, from_epoch: int, to_epoch: int, *,
                   instance: str | None = None, **dkv_options: Any) -> list[tuple]:
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
                    ranges[r] = db.key_group_range
            for o in olds:
                for n in news:
                    lo, hi = max(ranges[o][0], ranges[n][0]), min(ranges[o][1], ranges[n][1])
                    if lo < hi:
                        out.append((o, n, (lo, hi)))
    return out


def diff_pair(old: InstanceRef | None, new: InstanceRef | None, key_group_range: tuple = ALL_KEY_GROUPS, *,
              key_group: int | None = None, prefix: bytes | None = None, progress: Progress | None = None,
              groups: tuple | None = None, **dkv_options: Any) -> Iterator[tuple]:
    """(key group, ObjectChange or SlotChange) for every space of one pair of
    ``pair_instances``: both instances opened read-only, key groups of either side in
    ``key_group_range`` (or the one ``key_group``, or the space at ``prefix``) diffed in
    order."""
    key_group_range = _old_name(groups, key_group_range, "diff_pair")
    with ExitStack() as stack:
        dbs = [stack.enter_context(r.open(**dkv_options)) if r is not None else None for r in (old, new)]
        found: dict = {}
        for side, db in enumerate(dbs):
            if db is not None:
                for kg, sp in spaces_of(db, key_group=key_group, prefix=prefix, key_group_range=key_group_range):
                    found.setdefault(kg, [None, None])[side] = sp
        for kg in sorted(found, key=lambda k: -1 if k is None else k):
            for change in diff(*found[kg], progress=progress):
                yield kg, change


