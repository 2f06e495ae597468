"""Tuning options of a dkv store, validated once at open."""
from __future__ import annotations

from dataclasses import dataclass, fields

from .format.bloom import check_strip
from .storage import STORE_OPTIONS

KiB = 1 << 10
MiB = 1 << 20


@dataclass
class Options:
    memtable_bytes: int = 32 * MiB        # seal the active memtable past this size (a checkpoint seals it too)
    flush_segments: int = 16              # flush the immutable memtables when this many are live
                                          # WAL segment files (or sealed, not yet uploaded) ...
    flush_inline_segments: int = 64       # ... or this many live segments are inline in manifests
                                          # (RFC 0011: an open reads one manifest per such segment)
    flush_bytes: int = 64 * MiB           # ... or when their WAL segments hold this many bytes
    max_sealed_memtables: int = 4         # writes wait for encodings past this many sealed memtables
                                          # (0: a write that seals encodes it before it returns)
    wal_block_bytes: int = 32 * KiB       # raw bytes of a block of a WAL segment
    block_bytes: int = 4096               # uncompressed target size of an SST data block
    block_cache_bytes: int = 128 * MiB    # decoded blocks kept in memory
    table_bytes: int = 16 * MiB           # target size of compaction output tables
    l0_trigger: int = 4                   # compact L0 when it holds this many tables
    level_base_bytes: int = 64 * MiB      # target size of L1; L(i+1) is level_ratio times larger
    level_ratio: int = 10
    max_levels: int = 4                   # deepest sorted-run level
    max_size_amp: float = 2.0             # merge everything into the last level past this ratio
    max_replay_bytes: int = 0             # >0: a checkpoint flushes memtables past this size first
    wait_for_flushes: bool = False        # a checkpoint references the SSTs of flushes in progress
                                          # (waits for them) instead of uploading their WAL
    pace: float = 0.0                     # >0: background writes per checkpoint about pace x its WAL
                                          # bytes, in tables of table_bytes (see _pacer.py)
    retain: int = 5                       # checkpoints kept; older ones and their files are deleted
    inline_segment_bytes: int = 0         # >0: a WAL segment this small goes inside the manifest,
                                          # carried by later ones while live (RFC 0007); 0: files
    inline_manifest_bytes: int = 12 * KiB  # ... while one manifest's inline segments stay within this
    bloom_strip: tuple | None = None      # (tag, n): keys whose last n bytes follow byte tag (slots
                                          # read by range scans) share one bloom entry, their prefix
    wal_zstd_level: int = 3
    sst_zstd_level: int = 1
    background: bool = True               # flush and compact on background threads
    compaction: bool = True               # False: never compact (benchmarks, inspection)
    fsync: bool = True                    # local folders: fsync files and folders
    cache_dir: str | None = None          # s3: local folder caching SSTs
    cache_bytes: int | None = None        # s3: byte budget of that folder
    range_read_cost: int | None = None    # s3: bytes a ranged GET is worth; an SST is read by range
                                          # until that would cost its size, then fetched whole into
                                          # cache_dir (None: 4 MiB; 0: whole at its first read)
    endpoint_url: str | None = None       # s3 options, else boto3's standard chain
    region_name: str | None = None
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    aws_session_token: str | None = None
    max_attempts: int | None = None       # s3: attempts per request (None: S3Store's default, 8)
    connect_timeout: float | None = None  # s3: seconds (None: 10)
    read_timeout: float | None = None     # s3: seconds (None: 60)
    part_bytes: int | None = None         # s3: a whole object is read in ranged parts this large,
                                          # up to 8 at once (None: 1 MiB; 0: one GET)

    @classmethod
    def from_kwargs(cls, kwargs: dict) -> "Options":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise TypeError(f"unknown dkv option(s): {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        opts = cls(**kwargs)
        for name in ("memtable_bytes", "block_bytes", "block_cache_bytes", "table_bytes", "l0_trigger",
                     "level_base_bytes", "level_ratio", "max_levels", "retain",
                     "flush_segments", "flush_inline_segments", "flush_bytes", "wal_block_bytes"):
            value = getattr(opts, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"dkv option {name} must be a positive int, got {value!r}")
        value = opts.max_sealed_memtables
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"dkv option max_sealed_memtables must be a non-negative int, got {value!r}")
        if opts.max_attempts is not None and (not isinstance(opts.max_attempts, int) or isinstance(
                opts.max_attempts, bool) or opts.max_attempts < 1):
            raise ValueError(f"dkv option max_attempts must be a positive int, got {opts.max_attempts!r}")
        for name in ("part_bytes", "range_read_cost"):
            value = getattr(opts, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ValueError(f"dkv option {name} must be an int >= 0, got {value!r}")
        for name in ("connect_timeout", "read_timeout"):
            value = getattr(opts, name)
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"dkv option {name} must be a positive number of seconds, got {value!r}")
        for name in ("inline_segment_bytes", "inline_manifest_bytes"):
            value = getattr(opts, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"dkv option {name} must be an int >= 0, got {value!r}")
        if not isinstance(opts.pace, (int, float)) or isinstance(opts.pace, bool) or not 0 <= opts.pace < float("inf"):
            raise ValueError(f"dkv option pace must be a number >= 0, got {opts.pace!r}")
        opts.bloom_strip = check_strip(opts.bloom_strip, "dkv option bloom_strip")
        if opts.l0_trigger < 2:
            raise ValueError("dkv option l0_trigger must be at least 2")
        return opts

    def store_options(self) -> dict:
        """The options for ``storage.open_store``."""
        return {k: getattr(self, k) for k in STORE_OPTIONS}
