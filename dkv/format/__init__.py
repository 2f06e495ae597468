"""On-disk formats: pure bytes <-> objects, no I/O. Each format's constants live in its module.

Pages with byte diagrams: docs/format/wal.md, docs/format/sst.md, docs/format/manifest.md.

``native_enabled()`` says whether the optional C twins of the codecs are used (RFC 0012):
``OBJECTSPACE_NATIVE=0`` makes dkv and objectspace run their pure-Python reference codecs
even where the C modules are built.
"""
from ._env import native_enabled

__all__ = ["native_enabled"]
