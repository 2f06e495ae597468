"""objectspace: persisted Python collections over dkv that save only what changed.

>>> import dkv
>>> from objectspace import ObjectSpace
>>> with ObjectSpace.open("memory://objectspace-doc") as space:
...     q = space.get_or_create_queue("events")
...     q.append({"user": 42})
...     _ = space.checkpoint(1)
...     len(space.get_queue("events"))
1

See docs/objectspace.md (guide) and docs/format/objectspace.md (storage layout).
"""
from __future__ import annotations

from dkv import __version__ as __version__     # one version for the three packages

from ._cache import ObjectCache
from ._codec import register_type, unregister_type
from ._dict import PersistedDict, PersistedSortedDict
from ._groups import PendingEntry
from ._keycodec import decode_key, encode_key, encode_name
from ._layout import BLOOM_STRIP, SCHEMA_STATE
from ._linked import LinkedListNode, PersistedLinkedList
from ._list import PersistedList
from ._ndarray import PersistedNDArray
from ._queue import PersistedQueue, PersistedStack
from ._set import PersistedSet, PersistedSortedSet
from ._stream import PersistedStream
from ._unsaved import Unsaved, item_position, stream_id, stream_position
from ._value import PersistedArray, PersistedValue
from .errors import (AlreadyExistsError, CorruptionError, EncodingError, InPlaceChangeError, KindMismatchError,
                     ObjectDeletedError, ObjectNotFoundError, ObjectSpaceError, StreamIdError)
from .space import DEFAULT_PREFIX, ObjectSpace

# Inspection (docs/inspection.md) is imported when one of its names is first used: a
# notebook that only opens a space does not pay for it (~20 ms of a ~60 ms import).
_INSPECTION = ("FamilyMember", "FamilyRule", "InstanceRef", "ObjectChange", "ObjectInfo", "SlotChange",
               "SpaceStats", "diff", "diff_pair", "find_instances", "iter_slots", "key_groups_of",
               "list_objects", "object_info", "pair_instances", "register_family_rule", "space_stats",
               "spaces_of", "to_jsonable", "walk_slots")


def __getattr__(name):
    if name in _INSPECTION:
        from . import _inspect
        value = getattr(_inspect, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_INSPECTION))

__all__ = [
    "ObjectSpace", "DEFAULT_PREFIX", "SCHEMA_STATE", "BLOOM_STRIP", "ObjectCache",
    "PersistedValue", "PersistedArray", "PersistedList", "PersistedQueue", "PersistedStack",
    "PersistedLinkedList", "LinkedListNode", "PersistedSet", "PersistedSortedSet",
    "PersistedDict", "PersistedSortedDict", "PersistedStream", "PersistedNDArray", "PendingEntry",
    "register_type", "unregister_type", "encode_key", "decode_key", "encode_name",
    "Unsaved", "item_position", "stream_id", "stream_position",
    "ObjectSpaceError", "AlreadyExistsError", "ObjectNotFoundError", "KindMismatchError",
    "EncodingError", "ObjectDeletedError", "CorruptionError", "StreamIdError", "InPlaceChangeError",
    # inspection (docs/inspection.md)
    "list_objects", "object_info", "iter_slots", "walk_slots", "diff", "space_stats", "find_instances",
    "key_groups_of", "spaces_of", "pair_instances", "diff_pair", "to_jsonable", "ObjectInfo", "ObjectChange",
    "SlotChange", "SpaceStats", "InstanceRef", "FamilyRule", "FamilyMember", "register_family_rule",
]
