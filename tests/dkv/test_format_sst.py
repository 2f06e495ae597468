"""SST format (dkv/format/sst.py, bloom.py, docs/format/sst.md): blocks, sparse index,
metadata, footer and bloom filter."""
from __future__ import annotations

import random
import struct
import zlib

import pytest

import dkv
from dkv.format import bloom, sst


def _build(n: int, block_size: int = 256, seed: int = 0):
    rng = random.Random(seed)
    keys = sorted({b"key-%06d" % rng.randrange(20 * n) for _ in range(n)})
    values = [None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 40)) for _ in keys]
    seqs = [rng.randrange(1, 1 << 40) for _ in keys]
    b = sst.SstBuilder(block_size)
    for k, v, s in zip(keys, values, seqs):
        b.add(k, v, s)
    return b, b.finish(), keys, values, seqs


def _parse(data: bytes):
    off, length, crc = sst.parse_footer(data, "t")
    return off, length, sst.parse_meta(data[off:off + length], crc, "t")


@pytest.mark.parametrize("n", [1, 5, 2000])
def test_round_trip_through_blocks(n):
    builder, data, keys, values, seqs = _build(n)
    off, length, meta = _parse(data)
    assert off + length + sst.FOOTER_SIZE == len(data)
    got_k, got_v, got_s = [], [], []
    for i, (o, ln, c) in enumerate(zip(meta.offsets, meta.lengths, meta.crcs)):
        k, v, s, _ = sst.decode_block(data[o:o + ln], c, f"block {i}")
        assert k[0] == meta.first_keys[i], "the sparse index holds each block's first key"
        got_k += k
        got_v += v
        got_s += [s] * len(k) if type(s) is int else s
    assert (got_k, got_v, got_s) == (keys, values, seqs)
    # Blocks are contiguous from offset 0 up to the metadata segment.
    assert meta.offsets[0] == 0 and meta.offsets[-1] + meta.lengths[-1] == off
    assert all(a + la == b for a, la, b in zip(meta.offsets, meta.lengths, meta.offsets[1:]))


def test_metadata_fields():
    builder, data, keys, values, seqs = _build(300)
    _, _, meta = _parse(data)
    assert meta.count == len(keys) == builder.count
    assert meta.tombstones == sum(v is None for v in values) == builder.tombstones
    assert (meta.min_key, meta.max_key) == (keys[0], keys[-1]) == (builder.first_key, builder.last_key)
    assert (meta.min_seq, meta.max_seq) == (min(seqs), max(seqs)) == (builder.min_seq, builder.max_seq)
    assert meta.raw_bytes == builder.raw_bytes == sum(
        len(k) + (0 if v is None else len(v)) + sst.RECORD_OVERHEAD for k, v in zip(keys, values))
    assert meta.first_keys == sorted(meta.first_keys) and len(meta.first_keys) > 5


def test_blocks_follow_the_target_size():
    for block_size in (128, 1024, 4096):
        b = sst.SstBuilder(block_size)
        n = 3000
        for i in range(n):
            b.add(b"k%06d" % i, b"v" * 20, i)
        _, _, meta = _parse(b.finish())
        per_record = len(b"k000000") + 20 + sst.RECORD_OVERHEAD
        expected = n * per_record / block_size
        assert 0.5 * expected <= len(meta.first_keys) <= 1.5 * expected + 1


def test_footer_layout_is_pinned():
    _, data, _, _, _ = _build(50)
    assert sst.FOOTER_SIZE == 32 and sst.MAGIC == b"DKVSST\x00\x01" and sst.VERSION == 2
    footer = data[-32:]
    meta_off, meta_len, meta_crc, ver, flags, fcrc, magic = struct.unpack("<QIIHHI8s", footer)
    assert magic == sst.MAGIC and ver == 2 and flags == 0
    assert fcrc == zlib.crc32(footer[:20])
    assert meta_crc == zlib.crc32(data[meta_off:meta_off + meta_len])
    assert meta_off + meta_len == len(data) - 32


def test_a_builder_finishes_once():
    b = sst.SstBuilder(256)
    b.add(b"k", b"v", 1)
    b.finish_buffer()
    with pytest.raises(ValueError, match="has finished"):
        b.finish()


def test_empty_table_is_refused():
    with pytest.raises(ValueError):
        sst.SstBuilder().finish()


def test_damage_is_corruption():
    _, data, _, _, _ = _build(100)
    off, length, meta = _parse(data)
    with pytest.raises(dkv.CorruptionError):
        sst.parse_footer(data[:20], "t")
    for i in range(len(data) - 32, len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x10
        with pytest.raises(dkv.CorruptionError):
            sst.parse_footer(bytes(bad), "t")
    bad = bytearray(data)
    bad[off + length // 2] ^= 0x10
    with pytest.raises(dkv.CorruptionError):
        sst.parse_meta(bytes(bad[off:off + length]), zlib.crc32(data[off:off + length]), "t")
    frame = bytearray(data[meta.offsets[0]:meta.offsets[0] + meta.lengths[0]])
    frame[len(frame) // 2] ^= 0x10
    with pytest.raises(dkv.CorruptionError, match="block 0"):
        sst.decode_block(bytes(frame), meta.crcs[0], "block 0")


@pytest.mark.parametrize("seq", [0, 1, 127, 128, 300, (1 << 14) - 1, 1 << 14, (1 << 21) - 1, 1 << 21,
                                 (1 << 28) + 5, (1 << 40) + 3, (1 << 62) + 1])
def test_a_blocks_shared_sequence_number_reads_back_at_every_varint_length(seq):
    """block_head reads varints of up to three bytes itself and longer ones with the
    general loop: the same number and where the records start, whatever the length."""
    from dkv.format._codec import block_head, pack_block
    raw = pack_block([b"a", b"b"], [b"1", None], seq)
    got, pos = block_head(raw, "t")
    assert got == seq and raw[pos:] == pack_block([b"a", b"b"], [b"1", None])


def test_damage_in_a_cached_tables_block_names_the_table_and_the_block(tmp_path):
    """A block that fails its checksum when a get reads it is a CorruptionError naming the
    SST and the block (the name is made only when it is raised)."""
    db = dkv.open(str(tmp_path / "db"), block_cache_bytes=1)
    b = dkv.WriteBatch()
    for i in range(2000):
        b.put(b"k%05d" % i, b"v" * 50)
    db.write(b)
    db.checkpoint(flush=True).wait()
    db.close()
    [path] = [p for p in (tmp_path / "db").rglob("*.sst")]
    data = bytearray(path.read_bytes())
    data[10] ^= 0x01                       # inside block 0
    path.write_bytes(bytes(data))
    db = dkv.open(str(tmp_path / "db"), block_cache_bytes=1)
    with pytest.raises(dkv.CorruptionError, match=r"^SST .*\.sst block 0: checksum mismatch"):
        db.get(b"k00000")
    db.close()


# -- bloom filter -------------------------------------------------------------------------

def test_bloom_has_no_false_negatives_and_about_one_percent_false_positives():
    keys = [b"present-%d" % i for i in range(10_000)]
    f = bloom.Bloom(bloom.build(keys))
    check = f.checker()
    assert all(f.may_contain(k) for k in keys)
    assert all(check(k) for k in keys)
    absent = [b"absent-%d" % i for i in range(20_000)]
    fp = sum(f.may_contain(k) for k in absent) / len(absent)
    assert 0.002 < fp < 0.02, fp
    assert sum(check(k) for k in absent) / len(absent) == fp   # the unrolled probe agrees


def test_bloom_serialisation_is_pinned():
    keys = [b"k%d" % i for i in range(100)]
    data = bloom.build(keys)
    assert data[0] == 5                               # probes at 10 bits per key
    assert len(data) == 1 + 100 * bloom.BITS_PER_KEY // 8
    assert len(bloom.build([])) == 1 + 64 // 8        # at least 64 bits
    assert bloom.build(keys) == data                  # stable across runs (CRC-based hashing)
    f = bloom.Bloom(bloom.build(keys, bits_per_key=20))
    assert f.k == 10 and all(f.may_contain(k) for k in keys)


def test_sst_bloom_covers_every_key():
    _, data, keys, _, _ = _build(3000)
    _, _, meta = _parse(data)
    assert all(meta.bloom.may_contain(k) for k in keys)


def test_metadata_segment_keys_are_pinned():
    import msgpack
    import zstandard
    _, data, keys, _, _ = _build(100)
    off, length, _ = sst.parse_footer(data, "t")
    meta = msgpack.unpackb(zstandard.ZstdDecompressor().decompress(data[off:off + length]), raw=False)
    assert set(meta) == {"n", "t", "lo", "hi", "s0", "s1", "rb", "bf", "ik", "io", "il", "ic"}
    assert meta["n"] == len(keys) and meta["lo"] == keys[0] and meta["hi"] == keys[-1]
    assert len(meta["ik"]) == len(meta["io"]) == len(meta["il"]) == len(meta["ic"])
    assert meta["bf"] == bloom.build(keys)


def test_incompressible_blocks_are_stored_raw_and_compressible_ones_as_zstd():
    rng = random.Random(7)
    for values, zstd in (([rng.randbytes(100) for _ in range(200)], False), ([b"v" * 100] * 200, True)):
        b = sst.SstBuilder(block_size=1024)
        for i, v in enumerate(values):
            b.add(b"k%05d" % i, v, i + 1)
        data = b.finish()
        off, length, crc = sst.parse_footer(data, "t")
        meta = sst.parse_meta(data[off:off + length], crc, "t")
        got = []
        for o, ln, c in zip(meta.offsets, meta.lengths, meta.crcs):
            frame = data[o:o + ln]
            assert (frame[:4] == sst.ZSTD_MAGIC) is zstd
            keys, vals, seqs, raw_len = sst.decode_block(frame, c, "block")
            assert raw_len >= ln
            got += vals
        assert got == values


def test_bloom_built_with_numpy_has_the_pure_python_bits():
    rng = random.Random(5)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 30))) for _ in range(3000)]
    fast = bloom.build(keys)
    saved, bloom._np = bloom._np, None
    try:
        assert bloom.build(keys) == fast
    finally:
        bloom._np = saved


@pytest.mark.parametrize("seed", range(12))
def test_adding_sorted_runs_writes_the_bytes_of_adding_one_record_at_a_time(seed):
    """add_sorted (the flush's bulk path) against add in a loop: the same tables, cut at the
    same records when a table size limit applies, from any starting state of a builder."""
    rng = random.Random(seed)
    n = rng.choice([1, 7, 300, 2000])
    keys = sorted({b"k-%07d" % rng.randrange(50 * n) for _ in range(n)})
    values = [None if rng.random() < 0.15 else rng.randbytes(rng.choice([0, 3, 40, 700, 5000])) for _ in keys]
    seqs = [rng.randrange(1, 1 << 40) for _ in keys]
    block = rng.choice([64, 512, 4096])
    limit = rng.choice([None, 200, 3000, 20000])
    head = rng.randrange(0, min(5, len(keys)) + 1)      # records added one by one first

    def tables(bulk: bool) -> list:
        out, b = [], sst.SstBuilder(block)
        for i in range(head):
            b.add(keys[i], values[i], seqs[i])
        i = head
        while i < len(keys):
            if bulk:
                i = b.add_sorted(keys, values, seqs, i, limit)
            else:
                b.add(keys[i], values[i], seqs[i])
                i += 1
            if limit is not None and b.estimated_size >= limit:
                out.append((b.count, b.tombstones, b.min_seq, b.max_seq, finish(b, bulk)))
                b = sst.SstBuilder(block)
        if b.count:
            out.append((b.count, b.tombstones, b.min_seq, b.max_seq, finish(b, bulk)))
        return out

    def finish(b, bulk: bool) -> bytes:     # the flush's way (its buffer) against finish()'s bytes
        data = b.finish_buffer() if bulk else b.finish()
        assert type(data) is (bytearray if bulk else bytes)
        return bytes(data)

    one, bulk = tables(False), tables(True)
    assert bulk == one
    assert sum(t[0] for t in bulk) == len(keys)


def test_a_block_whose_records_share_a_seq_stores_it_once():
    keys = [b"k%05d" % i for i in range(400)]
    b = sst.SstBuilder(512)
    b.add_sorted(keys, [b"v"] * 400, 77)
    data = b.finish()
    _, _, meta = _parse(data)
    for o, ln, c in zip(meta.offsets, meta.lengths, meta.crcs):
        k, v, s, _ = sst.decode_block(data[o:o + ln], c, "b")
        assert s == 77, "one int for the whole block"
    mixed = sst.SstBuilder(512)
    mixed.add_sorted(keys, [b"v"] * 400, list(range(400)))
    data = mixed.finish()
    _, _, meta = _parse(data)
    k, v, s, _ = sst.decode_block(data[meta.offsets[0]:meta.offsets[0] + meta.lengths[0]], meta.crcs[0], "b")
    assert s == list(range(len(k)))


def test_a_table_without_a_bloom_filter():
    b = sst.SstBuilder(256, bloom=False)
    for i in range(100):
        b.add(b"k%03d" % i, b"v", i)
    _, _, meta = _parse(b.finish())
    assert meta.bloom is None and meta.count == 100


def _v1_table(keys, values, seqs, per_block=50) -> bytes:
    """An SST as format 1 wrote it: blocks msgpack [keys, values, seqs] (zstd frames), the
    metadata map with a bloom filter, the footer with version 1."""
    import msgpack
    import zstandard
    z = zstandard.ZstdCompressor(level=1, write_checksum=False)
    blocks, fk, off, ln, cr, pos = [], [], [], [], [], 0
    for i in range(0, len(keys), per_block):
        frame = z.compress(msgpack.packb((keys[i:i + per_block], values[i:i + per_block], seqs[i:i + per_block]),
                                         use_bin_type=True))
        fk.append(keys[i]), off.append(pos), ln.append(len(frame)), cr.append(zlib.crc32(frame))
        blocks.append(frame)
        pos += len(frame)
    meta = {"n": len(keys), "t": values.count(None), "lo": keys[0], "hi": keys[-1], "s0": min(seqs),
            "s1": max(seqs), "rb": 0, "bf": bloom.build(keys), "ik": fk, "io": off, "il": ln, "ic": cr}
    mb = z.compress(msgpack.packb(meta, use_bin_type=True))
    head = struct.pack("<QIIHHI8s", pos, len(mb), zlib.crc32(mb), 1, 0, 0, sst.MAGIC)
    return b"".join(blocks) + mb + head[:20] + struct.pack("<I", zlib.crc32(head[:20])) + sst.MAGIC


def test_version_1_tables_still_read():
    """Format 1: msgpack [keys, values, seqs] blocks, always a bloom filter."""
    _, _, keys, values, seqs = _build(300)
    old = _v1_table(keys, values, seqs)
    assert sst.footer_version(old) == 1
    off, length, crc = sst.parse_footer(old, "v1")
    meta = sst.parse_meta(old[off:off + length], crc, "v1", sst.footer_version(old))
    got = []
    for o, ln, c in zip(meta.offsets, meta.lengths, meta.crcs):
        k, v, s, _ = sst.decode_block(old[o:o + ln], c, "v1", meta.version)
        got += zip(k, v, s)
    assert got == list(zip(keys, values, seqs))
    assert all(meta.bloom.may_contain(k) for k in keys)
    footer = bytearray(old[-32:])
    struct.pack_into("<H", footer, 16, 4)
    struct.pack_into("<I", footer, 20, zlib.crc32(bytes(footer[:20])))
    with pytest.raises(dkv.CorruptionError, match="version 4"):
        sst.parse_footer(old[:-32] + bytes(footer), "v4")


def test_a_version_1_table_reads_through_the_engine():
    """The engine picks the block decoder by the footer's version."""
    from dkv._table import BlockCache, Table
    from dkv.format.manifest import TableRef
    from dkv.storage import MemoryStore
    _, _, keys, values, seqs = _build(400)
    store = MemoryStore()
    data = _v1_table(keys, values, seqs, per_block=30)
    store.put("sst/x.sst", data)
    t = Table(TableRef("sst/x.sst", len(data), keys[0], keys[-1], min(seqs), max(seqs), len(keys)), store,
              BlockCache(1 << 20))
    for k, v, s in zip(keys, values, seqs):
        assert t.get(k) == (s, v)
    assert [r for c in t.scan_blocks(None, None) for r in zip(*c)] == list(zip(keys, values, seqs))


@pytest.mark.skipif(bloom._c_build is None, reason="the C helpers were not built (no compiler)")
@pytest.mark.parametrize("bits_per_key", [2, 10, 20, 60])       # k = 1, 5, 10, 30 probes
def test_bloom_built_and_probed_in_c_has_the_pure_python_bits(bits_per_key):
    """C hashes eight bytes at a time and steps the probe positions (two divisions a key):
    the bits are still those of zlib's CRC-32 and (h1 + i * h2) mod m, key lengths 0-59."""
    rng = random.Random(11)
    keys = [rng.randbytes(rng.randrange(0, 60)) for _ in range(4000)]
    fast = bloom.build(keys, bits_per_key)
    saved_c, saved_np = bloom._c_build, bloom._np
    bloom._c_build = bloom._np = None
    try:
        assert bloom.build(keys, bits_per_key) == fast
    finally:
        bloom._c_build, bloom._np = saved_c, saved_np
    f = bloom.Bloom(fast)
    check = f.checker()
    for key in keys + [rng.randbytes(rng.randrange(0, 60)) for _ in range(4000)]:
        assert check(key) == f.may_contain(key)


@pytest.mark.parametrize("native", [True, False])
def test_bloom_built_from_hashes_has_the_bits_of_one_built_from_the_keys(monkeypatch, native):
    """A builder keeps 8 bytes of hashes per key instead of the keys: the filter it builds
    from them (block by block, in C or in Python) is byte for byte the one over the keys."""
    rng = random.Random(12)
    keys = sorted({rng.randbytes(rng.randrange(0, 60)) for _ in range(5000)})
    want = bloom.build(keys)
    if not native:
        monkeypatch.setattr(bloom, "_c_hashes", None)
        monkeypatch.setattr(bloom, "_c_build_hashed", None)
    hashed = bytearray()
    for i in range(0, len(keys), 700):
        hashed += bloom.hashes(keys[i:i + 700])
    assert len(hashed) == 8 * len(keys)
    assert bloom.build_hashed(hashed) == want
    assert bloom.build_hashed(b"") == bloom.build([])
    b = sst.SstBuilder(block_size=512)
    for k in keys:
        b.add(k, b"v", 1)
    data = b.finish()
    off, length, crc = sst.parse_footer(data, "t")
    meta = sst.parse_meta(data[off:off + length], crc, "t", sst.footer_version(data))
    assert meta.bloom.bits == bloom.Bloom(want).bits and (meta.min_key, meta.max_key) == (keys[0], keys[-1])


@pytest.mark.parametrize("native", [True, False])
def test_bloom_candidates_are_the_filters_that_may_hold_the_key(monkeypatch, native):
    """A get probes every sealed segment's filter in one call: the positions it gives are
    those whose filter's own check says yes (None: always), in order, in C or in Python."""
    if native and bloom._c_candidates is None:
        pytest.skip("the C helpers were not built (no compiler)")
    if not native:
        monkeypatch.setattr(bloom, "_c_candidates", None)
    rng = random.Random(13)
    sets = [[rng.randbytes(rng.randrange(1, 40)) for _ in range(rng.randrange(1, 300))] for _ in range(12)]
    blooms = [bloom.Bloom(bloom.build(keys)) for keys in sets]
    filters = tuple(None if i % 5 == 4 else (b.bits, b.k) for i, b in enumerate(blooms))
    probes = [k for keys in sets for k in keys[:20]] + [rng.randbytes(rng.randrange(1, 40)) for _ in range(500)]
    for key in probes:
        want = [i for i, b in enumerate(blooms) if filters[i] is None or b.may_contain(key)]
        assert bloom.candidates(key, filters) == want
        assert all(i in want for i, keys in enumerate(sets) if key in keys)     # no false negative
    assert bloom.candidates(b"k", ()) == []
    if native:
        with pytest.raises(TypeError):
            bloom.candidates(b"k", ((b"\x00", "five"),))
