"""Exceptions raised by dkv. One root, a few coarse subclasses that say what to do."""
from __future__ import annotations


class DkvError(Exception):
    """Root of every error dkv raises on purpose. ``outcome_unknown``: True when what
    failed may have taken effect all the same (a checkpoint whose manifest was created but
    whose writer could not list the claims after it: the manifest stays, RFC 0011)."""

    outcome_unknown = False


class CorruptionError(DkvError):
    """Stored bytes failed a checksum, magic or format check. The data is not returned.

    Restore from an older checkpoint (``dkv.open(location, checkpoint=epoch)``) or run
    ``python -m dkv verify`` to see which files are damaged.
    """


class FencedError(DkvError):
    """Another writer owns this store now (a newer writer epoch), or committed this epoch
    with different contents. This instance must stop writing; reopen to continue.
    ``checkpoint_kept`` is True when the checkpoint that raised it was committed before the
    newer writer opened, which started from it: its state stays in the store."""

    checkpoint_kept = False


class ClosedError(DkvError):
    """The store was closed; open it again to use it."""


class ReadOnlyError(DkvError):
    """A write was attempted on a store opened with ``read_only=True``."""


class CheckpointNotFoundError(DkvError, LookupError):
    """The requested checkpoint epoch is not among the retained checkpoints."""


class NewerCheckpointsError(DkvError, ValueError):
    """A writer was asked to open at a checkpoint older than the newest: continuing from it
    would drop the later checkpoints. Open ``read_only=True`` to look at the old state, or
    pass ``discard_newer=True`` to roll back on purpose. The message names what would go."""


class StorageError(DkvError, OSError):
    """The object store failed after retries (network, permissions, disk full)."""


class ObjectMissingError(DkvError, FileNotFoundError):
    """An object the store needs is not in storage (deleted, never uploaded, wrong location)."""


class LocationError(DkvError, ValueError):
    """A location dkv cannot read or write: an unsupported scheme (a path, ``file://``,
    ``memory://`` and ``s3://`` are supported). The message names it."""


class NotAStoreError(DkvError, FileNotFoundError):
    """The location (or the instance asked for) holds no dkv store: it does not exist, is
    empty, holds other files, or holds several instances (pass ``instance=``). The message
    names the path and what was there; nothing was created.

    A read-only open never creates a store. A writer creates one only in a missing or
    empty folder, unless ``create="force"``.
    """


def with_context(context: str, error: BaseException) -> DkvError:
    """``error`` with ``context`` (the operation of dkv that failed) in front of its message,
    to raise ``from`` it. A DkvError keeps its class (a StorageError stays a StorageError,
    with its ``errno``: ``errno.ENOSPC`` on a full disk); anything else becomes a DkvError."""
    out = like(error, f"{context}: {error}")
    out.__cause__ = error
    return out


def like(error: BaseException, msg: str) -> DkvError:
    """A DkvError saying ``msg``, of ``error``'s class (and ``errno``) when ``error`` is a
    DkvError whose class takes a message alone."""
    out: DkvError = DkvError(msg)
    if isinstance(error, DkvError):
        try:
            out = type(error)(msg)
        except Exception:  # noqa: BLE001 - a subclass with another signature
            pass
    if isinstance(error, OSError) and isinstance(out, OSError):
        out.errno = error.errno
    if isinstance(error, DkvError) and error.outcome_unknown:
        out.outcome_unknown = True
    if isinstance(error, FencedError) and isinstance(out, FencedError) and error.checkpoint_kept:
        out.checkpoint_kept = True
    return out
