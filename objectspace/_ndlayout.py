"""The stored form of an ndarray: metadata, the chunk grid, chunk bytes. Pure: no I/O.

An ndarray of shape ``S`` (``S[0]`` may change: resize along the first axis) is cut into
chunks of shape ``C``; the chunk grid has ``G[d] = ceil(S[d] / C[d])`` chunks per axis.
A chunk is one slot, numbered row-major with the first axis outermost::

    slot = c[0] * R + c[1] * G[2]...G[n-1] + ... + c[n-1],     R = G[1] * ... * G[n-1]

Only ``G[0]`` changes with a resize and it is the outermost factor, so a chunk keeps its
slot when the array grows or shrinks, and the chunks of first-axis rows ``[a, b)`` are the
slot range ``[a * R, b * R)`` (a resize deletes one range). Keys are the usual 8-byte
big-endian slot keys (``_layout.slot_key``).

A chunk's record is msgpack ``bin`` holding its cells as raw little-endian bytes in C
order, clipped to the array: a chunk at the array's edge holds only the cells inside
it, and along the first axis it may hold fewer rows than the array has there (written
before the array grew): the missing rows are the fill value. An absent chunk is all fill
value, so a chunk that becomes all fill is deleted (sparse arrays cost nothing).

Metadata (``P 01 <name> 00``): msgpack ``[shape, dtype, chunks, fill]``: two int arrays,
the little-endian dtype string (``"<f8"``, ``"|b1"``, ``"<i4"``, ``"<c16"``) and the fill
value as one cell's little-endian bytes (exact for NaN, -0.0 and complex values).

numpy is imported by the functions that need it, never when objectspace is imported.
"""
from __future__ import annotations

import math
import operator

from .errors import CorruptionError, EncodingError

CHUNK_BYTES = 64 << 10          # the default chunk size aimed at
MAX_CHUNK_BYTES = 64 << 20      # one chunk is one record: keep records of sane size
MAX_DIMS = 32
_KIND_NAMES = {"b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex", "O": "Python objects",
               "U": "str", "S": "bytes", "V": "void/structured", "M": "datetime64", "m": "timedelta64",
               "T": "variable-length str"}


def _np():
    import numpy
    return numpy


def check_dtype(dtype, name=None):
    """(native dtype, little-endian dtype) of a storable dtype: bool, int8..int64,
    uint8..uint64, float16..float64, complex64/complex128. Anything else raises
    EncodingError (a TypeError) naming the dtype."""
    np = _np()
    what = f" for ndarray {name!r}" if name is not None else ""
    try:
        dt = np.dtype(dtype)
    except Exception as e:  # noqa: BLE001 - numpy raises TypeError or others for junk
        raise EncodingError(f"dtype {dtype!r}{what} is not a numpy dtype: {e}") from None
    fixed = dt.fields is None and dt.subdtype is None and dt.kind in "biufc"
    if not fixed or (dt.kind == "f" and dt.itemsize > 8) or (dt.kind == "c" and dt.itemsize > 16):
        kind = _KIND_NAMES.get(dt.kind, dt.kind)
        if dt.fields is not None:
            kind = "structured"
        elif dt.kind in "fc":
            kind = "extended precision, whose bytes differ between platforms"
        raise EncodingError(
            f"cannot store dtype {dt!s} ({kind}){what}: an ndarray stores its cells as raw little-endian "
            "bytes in msgpack bin records, so its dtype must be fixed-size bool, int, uint, float "
            "(up to float64) or complex (up to complex128)")
    return dt.newbyteorder("="), dt.newbyteorder("<")


def _dims(value, what: str, name, minimum: int) -> tuple:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        value = (value,)
    out = []
    for v in value:
        if isinstance(v, bool):
            raise TypeError(f"ndarray {name!r} {what} must be ints, got {v!r}")
        try:
            v = operator.index(v)
        except TypeError:
            raise TypeError(f"ndarray {name!r} {what} must be ints, got {type(v).__name__} {v!r}") from None
        if v < minimum:
            raise ValueError(f"ndarray {name!r} {what} must be >= {minimum}, got {tuple(value)!r}")
        out.append(v)
    return tuple(out)


def default_chunks(shape: tuple, itemsize: int) -> tuple:
    """About CHUNK_BYTES per chunk: the trailing axes whole, halved (largest first) until
    one first-axis row fits, then as many first-axis rows as fit. The first axis is not
    cut to its current length, since it grows (a chunk stores only the cells inside the
    array, so an array smaller than a chunk costs what it holds)."""
    budget = max(1, CHUNK_BYTES // itemsize)
    tail = [max(1, d) for d in shape[1:]]
    while tail and math.prod(tail) > budget:
        i = max(range(len(tail)), key=tail.__getitem__)
        tail[i] = (tail[i] + 1) // 2
    return (max(1, budget // math.prod(tail)),) + tuple(tail)


def check_params(name, shape, dtype, chunks, fill_value) -> dict:
    """The validated parameters of a new ndarray: shape and chunks as int tuples, the
    dtype pair, the fill value's little-endian bytes. Raises TypeError / ValueError (and
    EncodingError for a dtype that cannot be stored) saying what was wrong."""
    shape = _dims(shape, "shape", name, 0)
    if not 1 <= len(shape) <= MAX_DIMS:
        raise ValueError(f"ndarray {name!r} needs 1 to {MAX_DIMS} dimensions, got shape {shape!r} "
                         "(a single number is a value: space.create_value)")
    native, le = check_dtype(dtype, name)
    if chunks is None:
        chunks = default_chunks(shape, native.itemsize)
    else:
        chunks = _dims(chunks, "chunks", name, 1)
        if len(chunks) == 1 and len(shape) > 1:
            chunks = chunks * len(shape)
        if len(chunks) != len(shape):
            raise ValueError(f"ndarray {name!r} chunks {chunks!r} must have one size per dimension of "
                             f"shape {shape!r}")
    if math.prod(chunks) * native.itemsize > MAX_CHUNK_BYTES:
        raise ValueError(f"ndarray {name!r} chunks {chunks!r} of {native} hold "
                         f"{math.prod(chunks) * native.itemsize} bytes; at most {MAX_CHUNK_BYTES} are allowed "
                         "(a chunk is one record)")
    return {"shape": shape, "dtype": native, "chunks": chunks, "fillb": fill_bytes(fill_value, native, le, name)}


def fill_bytes(fill_value, native, le, name) -> bytes:
    """One cell of ``fill_value`` as little-endian bytes. A number is rounded to a float
    dtype as numpy rounds it; a bool or int dtype must hold it exactly, and a string or a
    complex number with an imaginary part for a real dtype is refused (ValueError)."""
    np = _np()
    ok = isinstance(fill_value, (int, float, complex, np.number, np.bool_))
    value = fill_value
    if ok and native.kind != "c" and isinstance(value, (complex, np.complexfloating)):
        ok, value = value.imag == 0, value.real
    try:
        cell = np.array(value, dtype=native) if ok else None
        if ok and native.kind in "biu":
            ok = cell.item() == value
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"fill_value {fill_value!r} of ndarray {name!r} cannot be held by dtype {native}")
    return cell.astype(le).tobytes()


def pack(shape: tuple, le, chunks: tuple, fill: bytes) -> list:
    return [list(shape), le.str, list(chunks), fill]


def unpack(meta, name) -> tuple:
    """(shape, native dtype, little-endian dtype, chunks, fill bytes) of stored metadata.
    Raises CorruptionError when it is not an ndarray's."""
    try:
        shape, dstr, chunks, fill = meta
        shape, chunks = tuple(shape), tuple(chunks)
        native, le = check_dtype(dstr)
        ok = (len(shape) == len(chunks) >= 1 and all(type(d) is int and d >= 0 for d in shape)
              and all(type(c) is int and c >= 1 for c in chunks) and type(fill) is bytes
              and len(fill) == native.itemsize)
    except (TypeError, ValueError) as e:
        raise CorruptionError(f"metadata of ndarray {name!r} is unreadable: {meta!r:.80}") from e
    if not ok:
        raise CorruptionError(f"metadata of ndarray {name!r} is unreadable: {meta!r:.80}")
    return shape, native, le, chunks, fill


def grid(shape: tuple, chunks: tuple) -> tuple:
    """Chunks per axis."""
    return tuple(-(-s // c) for s, c in zip(shape, chunks))


def coords_of(slot: int, grid_: tuple) -> tuple:
    """Chunk coordinates of a slot (the first axis from ``slot // R``)."""
    out = []
    for g in reversed(grid_[1:]):
        slot, c = divmod(slot, g)
        out.append(c)
    out.append(slot)
    return tuple(reversed(out))


def extent(coords: tuple, shape: tuple, chunks: tuple) -> tuple:
    """The shape of the part of chunk ``coords`` inside the array."""
    return tuple(min(c, s - i * c) for i, s, c in zip(coords, shape, chunks))


def decode_chunk(data, ext: tuple, native, le, fill: bytes, name, slot):
    """The chunk's cells, shape ``ext``, writable, native byte order: rows missing from
    the record (written before the array grew) are the fill value. Raises CorruptionError
    for bytes that are not such a chunk."""
    np = _np()
    row = le.itemsize * math.prod(ext[1:])
    if type(data) is not bytes or not row or len(data) % row or not 0 < len(data) // row <= ext[0]:
        raise CorruptionError(f"ndarray {name!r} chunk slot {slot}: {len(data) if type(data) is bytes else data!r} "
                              f"is not the bytes of a chunk of shape {ext} of {le}")
    rows = len(data) // row
    cells = np.frombuffer(data, dtype=le).reshape((rows,) + ext[1:])
    if rows == ext[0]:
        return cells.astype(native)      # a copy: frombuffer's array is read-only
    out = np.full(ext, np.frombuffer(fill, dtype=le)[0], dtype=native)
    out[:rows] = cells
    return out


def encode_chunk(cells, le, fill: bytes):
    """The record bytes of a chunk's cells, or None when every cell is the fill value
    (bit for bit: the chunk is then absent)."""
    raw = cells.astype(le, copy=False).tobytes()
    if raw == fill * cells.size:
        return None
    return raw
