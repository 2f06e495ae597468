"""Exceptions raised by objectspace: one root, a few coarse subclasses that say what to do.

Each subclass also inherits the builtin a caller would naturally catch, so
``except KeyError`` around ``space.get_queue(name)`` works as it does around ``d[name]``.
"""
from __future__ import annotations

import dkv


class ObjectSpaceError(Exception):
    """Root of every error objectspace raises on purpose."""


class AlreadyExistsError(ObjectSpaceError, ValueError):
    """create_<kind> named an object (or a stream named a consumer group) that exists.

    Use get_or_create_<kind>, or delete the old object first.
    """


class ObjectNotFoundError(ObjectSpaceError, KeyError):
    """get_<kind> named an object that is not in the space (or a group not in a stream)."""

    def __str__(self) -> str:  # KeyError would show the message quoted
        return str(self.args[0]) if self.args else ""


class KindMismatchError(ObjectSpaceError, TypeError):
    """The object exists but is of another kind (or codec) than the one asked for.

    The message names both; call the get_<kind> that matches, or delete and re-create.
    """


class EncodingError(ObjectSpaceError, TypeError):
    """A value or key cannot be encoded; the message names the object and the slot.

    Nothing was written: save() encodes every record before it adds any to the batch.
    Register the type with ``objectspace.register_type`` or store a supported value.
    """


class ObjectDeletedError(ObjectSpaceError):
    """The handle's object was deleted from its space (or the space was closed).

    Get the object again from the space (it may have been re-created).
    """


class CorruptionError(ObjectSpaceError, dkv.CorruptionError):
    """A stored record is missing or unreadable (unknown kind, codec or format version,
    a slot that metadata promises but the store lacks). The data is not returned.

    It is a ``dkv.CorruptionError`` too, which the store underneath raises for damaged
    files: ``except dkv.CorruptionError`` catches both."""


class StreamIdError(ObjectSpaceError, ValueError):
    """A stream entry id is malformed, or not greater than the stream's last id."""


class InPlaceChangeError(ObjectSpaceError, ValueError):
    """A save of a space opened with ``inplace="raise"`` found stored values changed in
    place (``d[k].append(x)``), which no slot records; nothing was saved.

    The message names each object and slot and how to write the change (assign the value
    back: ``d[k] = d[k]``); ``changes`` holds ``(object name, kind, slot)`` of each.
    ``inplace="save"`` writes such changes at every save instead.
    """

    def __init__(self, message: str, changes: list) -> None:
        super().__init__(message)
        self.changes = changes
