"""Inspection: list, read, diff and measure object spaces from their committed dkv records.

Everything here reads the records a space's db holds (what saves committed; unsaved
changes of an open space are not seen) and decodes them with the layout and codec
modules. Nothing prints: long operations report through ``progress(done, total or None,
what)``. See docs/inspection.md.

>>> from objectspace import ObjectSpace, list_objects, iter_slots
>>> space = ObjectSpace.open("memory://inspect-doc")
>>> q = space.create_queue("q", [1, 2]); _ = space.checkpoint(1)
>>> [(o.name, o.kind, o.length) for o in list_objects(space)]
[('q', 'queue', 2)]
>>> list(iter_slots(space, "q"))
[(0, 1), (1, 2)]

Modules: ``records`` (one space: JSON, objects, slots), ``changes`` (two states of a space:
stats), ``locations`` (the instances and spaces of a location, alone or in the families
that other packages' rules make of them, such as spark_ops' operator shards).

The core of objectspace (the space and the kinds) does not import this package: it reads
what they wrote.
"""
from __future__ import annotations

from .changes import ObjectChange, SlotChange, SpaceStats, diff, space_stats
from .locations import (ALL_KEY_GROUPS, FamilyMember, FamilyRule, InstanceRef, diff_pair, expiries_of, family_rules,
                        find_instances, key_groups_of, pair_instances, register_family_rule, spaces_of)
from .records import (ObjectInfo, Progress, iter_slots, list_objects, name_from_json, object_info, to_jsonable,
                      walk_slots)

__all__ = ["to_jsonable", "ObjectInfo", "list_objects", "object_info", "iter_slots", "walk_slots",
           "ObjectChange", "SlotChange", "diff", "SpaceStats", "space_stats", "InstanceRef",
           "find_instances", "key_groups_of", "spaces_of", "pair_instances", "diff_pair",
           "FamilyRule", "FamilyMember", "register_family_rule", "family_rules",
           "name_from_json", "Progress", "ALL_KEY_GROUPS", "expiries_of"]
