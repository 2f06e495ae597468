"""What a notebook shows of a live object: its first (slot, value) pairs, read through
the object's own API, so unsaved changes are included (``_repr_html_``)."""
from __future__ import annotations

from typing import Iterator


def live_slots(obj) -> Iterator[tuple]:
    """(slot, value) of a live object through its own API, unsaved changes included; slots
    as ``objectspace.iter_slots`` gives them from the records (stacks from the top here,
    labelled with their index). Lazy: take what you need with ``itertools.islice``."""
    kind = obj.kind
    if kind == "value":
        return iter([(None, obj.value)])
    if kind == "stack":
        top = len(obj) - 1
        return ((top - i, obj._get_slot(obj._tail - 1 - i)) for i in range(top + 1))
    if kind in ("set", "sorted_set"):
        return ((k, None) for k in obj)
    if kind in ("dict", "sorted_dict", "stream"):
        return iter(obj.items()) if kind != "stream" else iter(obj)
    return enumerate(obj)
