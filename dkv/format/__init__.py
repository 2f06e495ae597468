"""On-disk formats: pure bytes <-> objects, no I/O. Each format's constants live in its module.

Pages with byte diagrams: docs/format/wal.md, docs/format/sst.md, docs/format/manifest.md.
"""
