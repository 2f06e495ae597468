"""PersistedNDArray: a chunked n-dimensional numpy array whose chunks are its slots.

A write rewrites the chunks it touches (one cell: one chunk); a read loads only the chunks
its index covers; a chunk never written, or all fill value, is absent from the store and
reads as the fill value. The first axis can grow and shrink (``resize``). The stored form
is in ``_ndlayout`` (docs/format/objectspace.md has the diagram).

In memory, ``_cells`` maps slot -> the chunk's cells (a numpy array of its extent inside
the array) or None (all fill value), for chunks that are loaded, dirty or pending; clean
ones are evicted past ``cache_items`` chunks or under the space's byte budget.

Resizing needs no per-chunk bookkeeping, as the positional kinds' tails: the store's
chunks of first-axis chunk rows ``>= _valid`` are stale (the array shrank or was cleared
since they were saved): they read as fill and the next save deletes them with one range
scan of rows ``[_valid, _hi)`` (``_hi`` bounds the rows the store may hold).
"""
from __future__ import annotations

import math
import operator
from itertools import product
from typing import TYPE_CHECKING, Any

from . import _layout as L
from . import _ndlayout as N
from ._base import F_META, F_REPLACE, MISSING, PersistedObject
from ._ndindex import axis_runs, int_index, select

if TYPE_CHECKING:
    import numpy
    import numpy.typing

_slot_key = L.slot_key
CHUNK_OVERHEAD = 200        # bytes per cached chunk besides its cells (the array object)


class PersistedNDArray(PersistedObject):
    """A persisted numpy-style array of fixed dtype, cut into chunks that are saved alone.

    ``a[i, j]``, ``a[2:10:2, ..., -1]``, ``a[None, 0]``: numpy's basic indexing, giving a
    numpy array (a copy) or scalar; O(cells read), one point read per chunk not in memory
    (a range scan when the chunks are adjacent). ``a[idx] = value``: numpy's broadcasting
    and casting; O(cells written) and marks the chunks touched dirty (reading first the
    ones written only in part). Out-of-bounds indices raise IndexError; a value that does
    not broadcast to the selection raises ValueError. ``resize(n)`` changes the length of
    the first axis. ``np.asarray(a)`` / ``a.to_numpy()`` read it whole.

    >>> import dkv; from objectspace import ObjectSpace
    >>> a = ObjectSpace(dkv.open("memory://nd-doc")).create_ndarray("a", (3, 4), "int32", chunks=(2, 2))
    >>> a[1, 1:3] = 7; a[-1] = [1, 2, 3, 4]
    >>> a[1:, ::2].tolist(), a.shape, a.chunks
    ([[0, 7], [1, 3]], (3, 4), (2, 2))
    """

    kind = "ndarray"
    _handle_bytes = 1900
    _twin_name = "numpy.ndarray"
    __slots__ = ("_shape", "_dtype", "_le", "_chunks", "_fillb", "_fill", "_grid", "_rowlen", "_strides",
                 "_cells", "_cbytes", "_dirty", "_pending", "_valid", "_hi", "_cut", "_snap")

    # -- making and loading -------------------------------------------------------------------

    @classmethod
    def _fresh(cls, space, name, nkey, codec, shape=(0,), dtype=None, chunks=(1,), fillb=b""):
        self = cls()
        self._init_base(space, name, nkey, codec, fresh=True)
        self._setup(shape, dtype, dtype.newbyteorder("<"), chunks, fillb, stored=False)
        return self

    @classmethod
    def _load(cls, space, name, nkey, codec, meta):
        shape, native, le, chunks, fill = N.unpack(meta, name)
        self = cls()
        self._init_base(space, name, nkey, codec, fresh=False)
        self._setup(shape, native, le, chunks, fill, stored=True)
        return self

    def _setup(self, shape, native, le, chunks, fill, stored: bool) -> None:
        np = N._np()
        self._shape, self._dtype, self._le, self._chunks, self._fillb = tuple(shape), native, le, chunks, fill
        self._fill = np.frombuffer(fill, dtype=le).astype(native)[0]
        self._regrid()
        self._cells: dict = {}
        self._cbytes = 0
        self._dirty: set = set()
        self._pending: set = set()
        rows = self._grid[0] if stored else 0
        self._valid = self._hi = self._cut = self._snap = rows

    def _regrid(self) -> None:
        g = self._grid = N.grid(self._shape, self._chunks)
        strides, acc = [], 1
        for n in reversed(g[1:]):
            strides.append(acc)
            acc *= n
        self._rowlen = acc
        self._strides = (acc,) + tuple(reversed(strides))

    def _meta(self) -> list:
        return N.pack(self._shape, self._le, self._chunks, self._fillb)

    # -- what it is ---------------------------------------------------------------------------

    @property
    def shape(self) -> tuple:
        """The array's shape; the first axis changes with ``resize``."""
        return self._shape

    @property
    def dtype(self) -> numpy.dtype[Any]:
        """The numpy dtype of the cells (native byte order)."""
        return self._dtype

    @property
    def chunks(self) -> tuple:
        """The shape of a chunk (a slot: the unit that is saved and loaded)."""
        return self._chunks

    @property
    def fill_value(self) -> Any:
        """What cells never written hold (a numpy scalar)."""
        return self._fill

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of cells."""
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the cells as a numpy array (not what the store holds: absent chunks cost nothing)."""
        return self.size * self._dtype.itemsize

    @property
    def nchunks(self) -> int:
        """Chunks of the grid, stored or not."""
        return math.prod(self._grid)

    def __len__(self) -> int:
        return self._shape[0]

    def __repr__(self) -> str:
        state = " deleted" if self._dead else ""
        return (f"<PersistedNDArray {self._name!r} kind=ndarray shape={self._shape} dtype={self._dtype} "
                f"chunks={self._chunks} dirty={self._dirty_count()}{state}>")

    def _repr_html_(self) -> str:
        """Notebook rendering: name, shape, dtype, chunks, unsaved chunks and the cells
        (the first rows of a large array). Never raises."""
        import html
        dirty = self._dirty_count()
        state = ("deleted" if self._dead else f"{dirty} unsaved record{'s' if dirty != 1 else ''}" if dirty
                 else "saved")
        head = (f"<b>PersistedNDArray</b> <code>{html.escape(repr(self._name))}</code> &middot; shape "
                f"{self._shape} &middot; {self._dtype} &middot; chunks {self._chunks} &middot; {state}")
        if self._dead:
            return f"<div>{head}</div>"
        try:
            rows = self._shape[0] if self.size <= 1000 else max(1, 1000 // max(1, self.size // self._shape[0]))
            text = str(self[:rows]) + (f"\n… {self._shape[0] - rows} more rows" if rows < self._shape[0] else "")
        except Exception as e:  # noqa: BLE001 - rendering must not fail
            text = f"cells unavailable: {e}"
        return f"<div class=\"objectspace\">{head}<pre>{html.escape(text)}</pre></div>"

    def _dirty_count(self) -> int:
        return len(self._dirty | self._pending) + super()._dirty_count()

    # -- chunks in memory -------------------------------------------------------------------------

    def _cput(self, s: int, cells) -> None:
        old = self._cells.get(s)
        if old is not None:
            self._cbytes -= old.nbytes + CHUNK_OVERHEAD
        elif s in self._cells:
            self._cbytes -= CHUNK_OVERHEAD
        self._cells[s] = cells
        self._cbytes += CHUNK_OVERHEAD + (cells.nbytes if cells is not None else 0)

    def _cdrop(self, s: int) -> None:
        if s in self._cells:
            old = self._cells.pop(s)
            self._cbytes -= CHUNK_OVERHEAD + (old.nbytes if old is not None else 0)

    def _coords(self, s: int) -> tuple:
        return N.coords_of(s, self._grid)

    def _extent(self, coords: tuple) -> tuple:
        return N.extent(coords, self._shape, self._chunks)

    def _fetch(self, slots) -> dict:
        """slot -> cells (or None: all fill) for ``slots``, from memory or the store: a
        point read per chunk, or one range scan when there are several and they are at
        least half of the range they span. Chunks read are cached while the object keeps
        at most cache_items chunks."""
        cells, out, want = self._cells, {}, []
        R = self._rowlen
        for s in slots:
            c = cells.get(s, MISSING)
            if c is not MISSING:
                out[s] = c
            elif s // R >= self._valid:
                out[s] = None
            else:
                want.append(s)
        if not want:
            return out
        db, ip, decode = self._space._db, self._items, self._codec.decode
        found = {}
        lo, hi = min(want), max(want) + 1
        if len(want) > 1 and 2 * len(want) >= hi - lo:
            wanted = set(want)
            for key, raw in db.scan(_slot_key(ip, lo), _slot_key(ip, hi)):
                s = L.slot_of(key)
                if s in wanted:
                    found[s] = raw
        else:
            for s in want:
                raw = db.get(_slot_key(ip, s))
                if raw is not None:
                    found[s] = raw
        keep = len(cells) + len(want) <= self._space._cache_items
        for s in want:
            raw = found.get(s)
            c = None
            if raw is not None:
                coords = self._coords(s)
                c = N.decode_chunk(decode(raw), self._extent(coords), self._dtype, self._le, self._fillb,
                                   self._name, s)
            out[s] = c
            if keep:
                self._cput(s, c)
        return out

    def _blank(self, ext: tuple):
        return N._np().full(ext, self._fill, dtype=self._dtype)

    # -- indexing ---------------------------------------------------------------------------------

    def _cell(self, key):
        """(slot, position in the chunk) of an index that names one cell by ints; None
        for any other index. The common case of ``a[i]`` / ``a[i, j]``."""
        if type(key) is int:
            if len(self._shape) != 1:
                return None
            key = (key,)
        elif type(key) is not tuple or len(key) != len(self._shape) or any(type(k) is not int for k in key):
            return None
        s, local = 0, []
        for axis, (i, n, c, st) in enumerate(zip(key, self._shape, self._chunks, self._strides)):
            if not 0 <= i < n:
                i = int_index(i, axis, self._shape, self._name)
            q, r = divmod(i, c)
            s += q * st
            local.append(r)
        return s, tuple(local)

    def _runs(self, sel) -> list:
        return [axis_runs(first, n, step, c) for (first, n, step), c in zip(sel, self._chunks)]

    def _slot(self, coords) -> int:
        return sum(c * st for c, st in zip(coords, self._strides))

    def __getitem__(self, key):
        """numpy's basic indexing: a new numpy array, or a numpy scalar for one cell.
        O(cells selected); loads only the chunks the selection covers."""
        if self._dead:
            self._raise_dead()
        cell = self._cell(key)
        if cell is not None:
            c = self._fetch((cell[0],))[cell[0]]
            return self._fill if c is None else c[cell[1]]
        np = N._np()
        sel, post = select(key, self._shape, self._name)
        runs = self._runs(sel)
        out = np.full(tuple(n for _, n, _ in sel), self._fill, dtype=self._dtype)
        combos = [(self._slot([r[0] for r in combo]), combo) for combo in product(*runs)]
        got = self._fetch([s for s, _ in combos])
        for s, combo in combos:
            c = got[s]
            if c is not None:
                out[tuple(r[2] for r in combo)] = c[tuple(r[1] for r in combo)]
        self._trim_cache()
        return out[post]

    def __setitem__(self, key, value) -> None:
        """numpy's basic indexing, broadcasting and casting. O(cells written); marks each
        chunk the selection touches dirty. A value that does not broadcast (ValueError) or
        does not cast changes nothing."""
        if self._dead:
            self._raise_dead()
        np = N._np()
        cell = self._cell(key) if isinstance(value, (int, float, complex, np.generic)) else None
        if cell is not None:            # one cell, one chunk
            s, local = cell
            c = self._cells.get(s, MISSING)
            if c is MISSING:
                c = self._fetch((s,))[s]
            fresh = c is None
            if fresh:
                c = self._blank(self._extent(self._coords(s)))
            try:
                c[local] = value
            except (ValueError, TypeError, OverflowError) as e:
                raise type(e)(f"cannot assign {value!r} to ndarray {self._name!r}[{_show(key)}] "
                              f"of dtype {self._dtype}: {e}") from e
            if fresh or s not in self._cells:
                self._cput(s, c)
            self._dirty.add(s)
            if not self._listed:
                self._touch()
            return
        sel, post = select(key, self._shape, self._name)
        block = np.empty(tuple(n for _, n, _ in sel), dtype=self._dtype)
        try:
            block[post] = value
        except (ValueError, TypeError, OverflowError) as e:
            raise type(e)(f"cannot assign to ndarray {self._name!r}[{_show(key)}] "
                          f"(selection of shape {block[post].shape}): {e}") from e
        if not block.size:
            return
        if not self._listed:
            self._touch()
        self._scatter(sel, block)

    def _scatter(self, sel, block) -> None:
        """Write ``block`` (cells of the selection, in increasing order) into the chunks."""
        combos = []
        for combo in product(*self._runs(sel)):
            coords = tuple(r[0] for r in combo)
            ext = self._extent(coords)
            whole = all(r[1].start == 0 and r[1].stop == e and r[1].step == 1 for r, e in zip(combo, ext))
            combos.append((self._slot(coords), coords, ext, whole, combo))
        need = [s for s, _, _, whole, _ in combos if not whole and s not in self._cells]
        got = self._fetch(need) if need else {}
        cells, dirty = self._cells, self._dirty
        for s, coords, ext, whole, combo in combos:
            c = cells.get(s, MISSING)
            if c is MISSING:
                c = got.get(s)
            if whole:
                c = block[tuple(r[2] for r in combo)].copy()
            else:
                if c is None:
                    c = self._blank(ext)
                c[tuple(r[1] for r in combo)] = block[tuple(r[2] for r in combo)]
            self._cput(s, c)
            dirty.add(s)

    def to_numpy(self) -> numpy.typing.NDArray[Any]:
        """The whole array as a new numpy array. O(size): loads every stored chunk (one
        range scan)."""
        return self[...]

    def __array__(self, dtype=None, copy=None):
        a = self.to_numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def copy(self) -> numpy.typing.NDArray[Any]:
        """The whole array as a plain numpy array (as ``to_numpy``)."""
        return self.to_numpy()

    def __iter__(self):
        """The sub-arrays (or scalars, for one dimension) along the first axis, as
        iterating a numpy array gives them. O(size); chunks are read as rows need them."""
        if self._dead:
            self._raise_dead()
        for i in range(self._shape[0]):
            yield self[i]

    # -- whole-array changes ----------------------------------------------------------------------

    def resize(self, n: int) -> None:
        """Make the first axis ``n`` long: new rows hold the fill value; shrinking drops the
        cells beyond. O(chunks of the boundary chunk row) now: the chunks of that row that
        lose cells are rewritten, those beyond it are deleted at the next save (one range
        scan). Raises ValueError for n < 0."""
        if isinstance(n, bool):
            raise TypeError("ndarray length must be an int")
        n = operator.index(n)
        if n < 0:
            raise ValueError(f"ndarray {self._name!r} cannot have length {n}")
        self._check()
        old = self._shape[0]
        if n == old:
            return
        if not self._listed:
            self._touch()
        self._flags |= F_META
        c0, R = self._chunks[0], self._rowlen
        if n < old:
            rows = -(-n // c0)
            for s in [s for s in self._cells if s // R >= rows]:
                self._cdrop(s)
            self._dirty = {s for s in self._dirty if s // R < rows}
            self._pending = {s for s in self._pending if s // R < rows}
            edge = rows - 1
            if n % c0:
                # The edge row's chunks lose rows: rewrite them shorter, so that growing
                # again shows fill value there rather than the old cells.
                got = self._fetch(range(edge * R, rows * R))
                keep = n - edge * c0
                for s, c in got.items():
                    if c is not None:
                        self._cput(s, c[:keep].copy())
                        self._dirty.add(s)
            self._valid = min(self._valid, rows)
            self._cut = min(self._cut, rows)
            self._shape = (n,) + self._shape[1:]
        else:
            edge = self._grid[0] - 1
            self._shape = (n,) + self._shape[1:]
            if old % c0:
                # Cached chunks of the old edge row get fill-value rows up to the new length.
                for s in range(edge * R, (edge + 1) * R):
                    c = self._cells.get(s)
                    if c is not None:
                        ext = self._extent(self._coords(s))
                        grown = self._blank(ext)
                        grown[:c.shape[0]] = c
                        self._cput(s, grown)
        self._regrid()

    def append(self, rows: Any) -> None:
        """Add ``rows`` at the end of the first axis: an array of shape ``(k, *shape[1:])``,
        or one row of shape ``shape[1:]`` (broadcast and cast as in assignment; a value
        that does not fit changes nothing). O(cells added)."""
        np = N._np()
        rows = np.asarray(rows)
        if rows.ndim < len(self._shape):
            rows = rows[None]
        n, k = self._shape[0], rows.shape[0]
        block = np.empty((k,) + self._shape[1:], dtype=self._dtype)
        try:
            block[...] = rows
        except (ValueError, TypeError, OverflowError) as e:
            raise type(e)(f"cannot append to ndarray {self._name!r} of shape {self._shape}: {e}") from e
        self.resize(n + k)
        self[n:] = block

    def clear(self) -> None:
        """Set every cell to the fill value. O(1) now; the next save deletes the stored
        chunks (one range scan)."""
        self._check()
        if not self._listed:
            self._touch()
        self._cells = {}
        self._cbytes = 0
        self._dirty = set()
        self._pending = set()
        self._valid = self._cut = 0

    def fill(self, value: Any) -> None:
        """Set every cell to ``value``: the fill value clears (O(1)), another writes every
        chunk of the grid (O(size))."""
        np = N._np()
        cell = np.empty((), dtype=self._dtype)
        cell[()] = value
        if cell.astype(self._le).tobytes() == self._fillb:
            self.clear()
        else:
            self[...] = cell

    # -- save ---------------------------------------------------------------------------------------

    def _collect(self, out: list, full: bool) -> None:
        start = len(out)
        super()._collect(out, full)
        self._space._sized.append((start, len(out)))     # chunks: not a sample of value sizes

    def _collect_items(self, out: list, full: bool) -> None:
        ip, R = self._items, self._rowlen
        db = self._space._db
        dirty = self._dirty | self._pending if self._pending else self._dirty
        if self._valid < self._hi:           # stale chunks of rows cut or cleared
            for key, _ in db.scan(_slot_key(ip, self._valid * R), _slot_key(ip, self._hi * R)):
                if L.slot_of(key) not in dirty:
                    out.append((key, None))
        if full:
            end = min(self._valid, self._grid[0]) * R
            if end:
                for key, raw in db.scan(_slot_key(ip, 0), _slot_key(ip, end)):
                    if L.slot_of(key) not in dirty:
                        out.append((key, raw))
        cells, encode = self._cells, self._codec.encode
        hi = self._hi * R
        for s in sorted(dirty):
            c = cells[s]
            raw = None if c is None else N.encode_chunk(c, self._le, self._fillb)
            if raw is not None:
                out.append((_slot_key(ip, s), encode(raw)))
            elif s < hi:                     # the store may hold it: delete
                out.append((_slot_key(ip, s), None))

    def _promote(self) -> None:
        self._pflags |= self._flags
        self._flags = 0
        if self._pending:
            self._pending |= self._dirty
            self._dirty = set()
        else:
            self._pending, self._dirty = self._dirty, self._pending
        self._snap = self._cut = self._grid[0]
        self._hi = max(self._hi, self._grid[0])

    def _confirm(self) -> bool:
        if self._pflags & F_META:
            self._msaved = self._mlast
        self._pflags = 0
        self._pending.clear()
        self._hi = self._snap
        self._valid = self._cut
        if self._space._cache.pressed():
            self._evict(0)
        else:
            self._trim_cache()
        return not self._flags and not self._dirty

    # -- memory -------------------------------------------------------------------------------------

    def _mem_estimate(self, item_bytes: int) -> int:
        return self._handle_bytes + self._cbytes

    def _evict_clean(self) -> None:
        self._evict(0)

    def _trim_cache(self) -> None:
        if len(self._cells) > self._space._cache_items:
            self._evict(self._space._cache_items // 2)

    def _evict(self, limit: int) -> None:
        """Drop clean cached chunks down to ``limit``. O(cached chunks)."""
        if (self._flags | self._pflags) & F_REPLACE:
            return
        pinned = self._dirty | self._pending
        clean = [s for s in self._cells if s not in pinned]
        for s in clean[: max(0, len(self._cells) - limit)]:
            self._cdrop(s)


def _show(key) -> str:
    parts = key if isinstance(key, tuple) else (key,)
    out = []
    for k in parts:
        if isinstance(k, slice):
            out.append(":".join("" if v is None else str(v) for v in (k.start, k.stop))
                       + ("" if k.step is None else f":{k.step}"))
        elif k is Ellipsis:
            out.append("...")
        else:
            out.append(repr(k))
    return ", ".join(out)
