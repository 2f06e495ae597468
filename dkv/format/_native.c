/* dkv's native helpers: the C twins of dkv/format/_front.py (front coding of sorted
 * records) and of dkv/format/bloom.py (bloom filter build and probe), same bytes and bits.
 *
 * A front-coded batch of n records is
 *
 *     varint n, varint keys_len (bytes of the key stream that follows)
 *     n x key:    varint shared, varint suffix_len, suffix bytes
 *     n x value:  varint shared, varint code, suffix bytes   (code 0: tombstone, no bytes;
 *                                                              else suffix_len = code - 1)
 *
 * where ``shared`` is the length of the prefix an item shares with the previous key (for
 * keys) or with the previous non-tombstone value (for values). See docs/format/wal.md.
 * Python's own loop over the records costs ~0.5 us each; this costs ~20 ns.
 *
 * Bloom filter: m bits, k probes; probe i of a key sets bit (h1 + i*h2) mod m where
 * h1 = crc32(key) and h2 = crc32(key, 0x9E3779B9) | 1 (zlib's CRC-32, the IEEE polynomial),
 * bit p being bit (p & 7) of byte (p >> 3). See dkv/format/bloom.py.
 *
 * And DB.get's read (db_get, RFC 0012 step 3): the twin of dkv/_reads.py's DB.get with the
 * Table, Delta and Version methods it calls, set up by dkv/_getpath.py (see its section); and
 * DB.scan's (db_scan, RFC 0012 step 4): the twin of DB._scan with the sources' scan_blocks and
 * merge_visible, set up by dkv/_scanpath.py (see its section).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

static Py_ssize_t put_varint(unsigned char *out, size_t v) {
    Py_ssize_t i = 0;
    while (v >= 0x80) {
        out[i++] = (unsigned char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    out[i++] = (unsigned char)v;
    return i;
}

static int get_varint(const unsigned char *buf, Py_ssize_t len, Py_ssize_t *pos, size_t *out) {
    size_t v = 0;
    int shift = 0;
    while (*pos < len) {
        unsigned char b = buf[(*pos)++];
        if (shift > 56) {
            return -1;
        }
        v |= (size_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

static Py_ssize_t common(const char *a, Py_ssize_t la, const char *b, Py_ssize_t lb) {
    Py_ssize_t n = la < lb ? la : lb, i = 0;
    while (i < n && a[i] == b[i]) {
        i++;
    }
    return i;
}

/* encode(keys: list[bytes], values: list[bytes | None]) -> bytes */
static PyObject *front_encode(PyObject *self, PyObject *args) {
    PyObject *keys, *values;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &keys, &PyList_Type, &values)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(values) != n) {
        PyErr_SetString(PyExc_ValueError, "keys and values differ in length");
        return NULL;
    }
    size_t bound = 10;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i), *v = PyList_GET_ITEM(values, i);
        if (!PyBytes_CheckExact(k)) {
            PyErr_SetString(PyExc_TypeError, "keys must be bytes");
            return NULL;
        }
        bound += (size_t)PyBytes_GET_SIZE(k) + 40;
        if (v != Py_None) {
            if (!PyBytes_CheckExact(v)) {
                PyErr_SetString(PyExc_TypeError, "values must be bytes or None");
                return NULL;
            }
            bound += (size_t)PyBytes_GET_SIZE(v);
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound);
    if (out == NULL) {
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    /* The header is n and the key stream's length: keys go at a fixed offset first, then
       move next to the header once their length is known. */
    Py_ssize_t w = 20;
    const char *prev = "";
    Py_ssize_t plen = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        const char *s = PyBytes_AS_STRING(k);
        Py_ssize_t len = PyBytes_GET_SIZE(k);
        Py_ssize_t sh = common(prev, plen, s, len);
        w += put_varint(p + w, (size_t)sh);
        w += put_varint(p + w, (size_t)(len - sh));
        memcpy(p + w, s + sh, (size_t)(len - sh));
        w += len - sh;
        prev = s;
        plen = len;
    }
    {
        unsigned char head[20];
        Py_ssize_t klen = w - 20, h = put_varint(head, (size_t)n);
        h += put_varint(head + h, (size_t)klen);
        memmove(p + h, p + 20, (size_t)klen);
        memcpy(p, head, (size_t)h);
        w = h + klen;
    }
    prev = "";
    plen = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        if (v == Py_None) {
            p[w++] = 0;     /* shared 0 */
            p[w++] = 0;     /* code 0: tombstone */
            continue;
        }
        const char *s = PyBytes_AS_STRING(v);
        Py_ssize_t len = PyBytes_GET_SIZE(v);
        Py_ssize_t sh = common(prev, plen, s, len);
        w += put_varint(p + w, (size_t)sh);
        w += put_varint(p + w, (size_t)(len - sh + 1));
        memcpy(p + w, s + sh, (size_t)(len - sh));
        w += len - sh;
        prev = s;
        plen = len;
    }
    if (_PyBytes_Resize(&out, w) < 0) {
        return NULL;
    }
    return out;
}

static PyObject *malformed(void) {
    PyErr_SetString(PyExc_ValueError, "front-coded records are malformed");
    return NULL;
}

static int cmp(const unsigned char *a, size_t la, const unsigned char *b, size_t lb) {
    size_t n = la < lb ? la : lb;
    int c = n ? memcmp(a, b, n) : 0;
    if (c) {
        return c;
    }
    return (la > lb) - (la < lb);
}

/* A growable scratch buffer for the item being rebuilt. */
typedef struct {
    unsigned char *p;
    size_t cap;
} scratch;

static int reserve(scratch *sc, size_t need) {
    if (need <= sc->cap) {
        return 0;
    }
    size_t cap = sc->cap ? sc->cap : 256;
    while (cap < need) {
        cap *= 2;
    }
    unsigned char *q = PyMem_Realloc(sc->p, cap);
    if (q == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    sc->p = q;
    sc->cap = cap;
    return 0;
}

/* The header at *pos: n records and the length of the key stream, checked against len. */
static int read_header(const unsigned char *buf, Py_ssize_t len, Py_ssize_t *pos, size_t *n, size_t *klen) {
    if (*pos < 0 || *pos > len || get_varint(buf, len, pos, n) < 0 || get_varint(buf, len, pos, klen) < 0
        || *n > (size_t)len || *klen > (size_t)(len - *pos)) {
        malformed();
        return -1;
    }
    return 0;
}

/* The next key of the key stream (which ends at kend) at *kp, rebuilt in sc over the previous
   one (*plen bytes long). -1 with an exception on malformed input. */
static int next_key(const unsigned char *buf, Py_ssize_t kend, Py_ssize_t *kp, scratch *sc, size_t *plen) {
    size_t sh, slen;
    if (get_varint(buf, kend, kp, &sh) < 0 || get_varint(buf, kend, kp, &slen) < 0 || sh > *plen
        || slen > (size_t)(kend - *kp) || reserve(sc, sh + slen) < 0) {
        if (!PyErr_Occurred()) {
            malformed();
        }
        return -1;
    }
    memcpy(sc->p + sh, buf + *kp, slen);
    *kp += (Py_ssize_t)slen;
    *plen = sh + slen;
    return 0;
}

/* The next value at *vp: 1 for a tombstone (sc keeps the previous value), 0 for a value
   rebuilt in sc (*plen bytes), -1 with an exception on malformed input. */
static int next_value(const unsigned char *buf, Py_ssize_t len, Py_ssize_t *vp, scratch *sc, size_t *plen) {
    size_t sh, code;
    if (get_varint(buf, len, vp, &sh) < 0 || get_varint(buf, len, vp, &code) < 0) {
        malformed();
        return -1;
    }
    if (code == 0) {
        if (sh != 0) {
            malformed();
            return -1;
        }
        return 1;
    }
    size_t slen = code - 1;
    if (sh > *plen || slen > (size_t)(len - *vp) || reserve(sc, sh + slen) < 0) {
        if (!PyErr_Occurred()) {
            malformed();
        }
        return -1;
    }
    memcpy(sc->p + sh, buf + *vp, slen);
    *vp += (Py_ssize_t)slen;
    *plen = sh + slen;
    return 0;
}

/* A restart point of front-coded records (see index() below): after record `rec`, where the
   next key (kp) and the next value (vp) start, and that record's whole key and the whole
   previous value at off and voff of the hints' blob. */
typedef struct {
    uint32_t rec, kp, vp, klen, vlen, off, voff;
} hint;

/* Resume a walk of n records (keys from pos to kend, values to len) after hint e: its key
   into sc (*plen bytes), where the next key and value start, the next record's number.
   -1 with an exception when the hint does not fit the records. */
static int resume(const hint *e, const unsigned char *hblob, size_t n, Py_ssize_t pos, Py_ssize_t kend,
                  Py_ssize_t len, scratch *sc, size_t *plen, Py_ssize_t *kp, Py_ssize_t *vp, size_t *next) {
    if (e->rec >= n || e->kp < pos || e->kp > kend || e->vp < kend || e->vp > len
        || reserve(sc, e->klen + 1) < 0) {
        if (!PyErr_Occurred()) {
            malformed();
        }
        return -1;
    }
    memcpy(sc->p, hblob + e->off, e->klen);
    *plen = e->klen;
    *kp = e->kp;
    *vp = e->vp;
    *next = (size_t)e->rec + 1;
    return 0;
}

/* Walk the records at pos with keys in [lo, hi) (NULL: unbounded), resuming after hint e
   (NULL: from the first record; e's key must be < lo). Returns (keys, values, end) — end is
   where the records end, or -1 when the walk stopped before the end. NULL with an exception
   on malformed input. */
static PyObject *walk(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos, const unsigned char *lo,
                      Py_ssize_t llo, const unsigned char *hi, Py_ssize_t lhi, const hint *e,
                      const unsigned char *hblob) {
    size_t n, klen;
    scratch sc = {NULL, 0};
    PyObject *keys = NULL, *values = NULL, *result = NULL;
    if (read_header(buf, len, &pos, &n, &klen) < 0) {
        goto done;
    }
    keys = PyList_New(0);
    values = PyList_New(0);
    if (keys == NULL || values == NULL) {
        goto done;
    }
    Py_ssize_t kend = pos + (Py_ssize_t)klen, kp = pos, vp = kend;
    size_t i0 = n, i1 = n, plen = 0, i, first = 0;
    if (e != NULL && resume(e, hblob, n, pos, kend, len, &sc, &plen, &kp, &vp, &first) < 0) {
        goto done;
    }
    for (i = first; i < n; i++) {
        if (next_key(buf, kend, &kp, &sc, &plen) < 0) {
            goto done;
        }
        if (i0 == n) {
            if (lo != NULL && cmp(sc.p, plen, lo, (size_t)llo) < 0) {
                continue;
            }
            i0 = i;
        }
        if (hi != NULL && cmp(sc.p, plen, hi, (size_t)lhi) >= 0) {
            i1 = i;
            break;
        }
        PyObject *k = PyBytes_FromStringAndSize((const char *)sc.p, (Py_ssize_t)plen);
        if (k == NULL || PyList_Append(keys, k) < 0) {
            Py_XDECREF(k);
            goto done;
        }
        Py_DECREF(k);
    }
    if (i == n && kp != kend) {
        malformed();            /* the key stream is longer than its n keys */
        goto done;
    }
    /* The values up to i1 (each may share a prefix with the previous one). */
    plen = 0;
    if (e != NULL) {
        if (reserve(&sc, e->vlen + 1) < 0) {
            goto done;
        }
        memcpy(sc.p, hblob + e->voff, e->vlen);
        plen = e->vlen;
    }
    for (i = first; i < i1; i++) {
        int tomb = next_value(buf, len, &vp, &sc, &plen);
        if (tomb < 0) {
            goto done;
        }
        if (i < i0) {
            continue;
        }
        PyObject *v = tomb ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)sc.p, (Py_ssize_t)plen);
        if (v == NULL || PyList_Append(values, v) < 0) {
            Py_XDECREF(v);
            goto done;
        }
        Py_DECREF(v);
    }
    result = Py_BuildValue("(OOn)", keys, values, i1 == n ? vp : (Py_ssize_t)-1);
done:
    PyMem_Free(sc.p);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    return result;
}

/* decode(data, pos=0, lo=None, hi=None) -> (keys, values, end): the records at pos with
   lo <= key < hi; end is where the records end (-1 when hi stopped the walk early). */

/* -- restart hints: an in-memory index of a cached block ----------------------------------
 *
 * Front coding makes a lookup walk the block from its first record. index(data, pos, every)
 * records, after every `every`-th record, what a walk needs to resume there: the record's
 * number, where the next key and the next value start, the record's whole key and the whole
 * previous value (the prefix the next value may share). find(data, key, pos, hints) then
 * binary-searches those keys and walks at most `every` records. The hints live in memory
 * only (built when a block is first searched); nothing about them is stored.
 *
 * Layout (native byte order): u32 m, then m entries of 7 u32 {rec, kp, vp, klen, vlen, off,
 * voff}, then the bytes the entries' off (key) and voff (value) point at.
 */

/* Append n bytes to blob at *used; the offset they start at goes to *off. */
static int keep(scratch *blob, size_t *used, const unsigned char *p, size_t n, uint32_t *off) {
    if (reserve(blob, *used + n + 1) < 0) {
        return -1;
    }
    memcpy(blob->p + *used, p, n);
    *off = (uint32_t)*used;
    *used += n;
    return 0;
}

static PyObject *front_index(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos = 0, every = 16;
    if (!PyArg_ParseTuple(args, "y*|nn", &view, &pos, &every)) {
        return NULL;
    }
    const unsigned char *buf = view.buf;
    Py_ssize_t len = view.len;
    size_t n, klen;
    PyObject *result = NULL;
    scratch sc = {NULL, 0}, blob = {NULL, 0};
    hint *h = NULL;
    size_t m = 0, used = 0;
    if (every < 1 || len > 0xFFFFFFF0) {
        malformed();
        goto done;
    }
    if (read_header(buf, len, &pos, &n, &klen) < 0) {
        goto done;
    }
    size_t cap = n / (size_t)every + 1;
    h = PyMem_Calloc(cap, sizeof(hint));
    if (h == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t kend = pos + (Py_ssize_t)klen, kp = pos;
    size_t plen = 0;
    for (size_t i = 0; i < n; i++) {
        if (next_key(buf, kend, &kp, &sc, &plen) < 0) {
            goto done;
        }
        if ((i + 1) % (size_t)every == 0 && i + 1 < n && m < cap) {
            if (keep(&blob, &used, sc.p, plen, &h[m].off) < 0) {
                goto done;
            }
            h[m].rec = (uint32_t)i;
            h[m].kp = (uint32_t)kp;
            h[m].klen = (uint32_t)plen;
            m++;
        }
    }
    if (kp != kend) {
        malformed();
        goto done;
    }
    Py_ssize_t vp = kend;
    size_t j = 0;
    plen = 0;
    for (size_t i = 0; i < n && j < m; i++) {
        if (next_value(buf, len, &vp, &sc, &plen) < 0) {
            goto done;
        }
        if (i == h[j].rec) {
            if (keep(&blob, &used, sc.p, plen, &h[j].voff) < 0) {
                goto done;
            }
            h[j].vp = (uint32_t)vp;
            h[j].vlen = (uint32_t)plen;
            j++;
        }
    }
    size_t head = 4 + m * sizeof(hint);
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(head + used));
    if (result == NULL) {
        goto done;
    }
    char *out = PyBytes_AS_STRING(result);
    uint32_t m32 = (uint32_t)m;
    memcpy(out, &m32, 4);
    if (m) {
        memcpy(out + 4, h, m * sizeof(hint));
    }
    if (used) {
        memcpy(out + head, blob.p, used);
    }
done:
    PyMem_Free(h);
    PyMem_Free(sc.p);
    PyMem_Free(blob.p);
    PyBuffer_Release(&view);
    return result;
}

/* *e: the last of `hints` (bytes that index() returned, or None) whose key < k, NULL when
   none is; *hblob: the blob its key and value are in. -1 with an exception when hints is not
   such bytes. */
static int pick_hint(PyObject *hints, const unsigned char *k, Py_ssize_t lk, const hint **e,
                     const unsigned char **hblob) {
    *e = NULL;
    *hblob = NULL;
    if (hints == Py_None) {
        return 0;
    }
    if (!PyBytes_Check(hints) || PyBytes_GET_SIZE(hints) < 4) {
        PyErr_SetString(PyExc_TypeError, "hints must be the bytes index() returned");
        return -1;
    }
    const char *hb = PyBytes_AS_STRING(hints);
    uint32_t m;
    memcpy(&m, hb, 4);
    size_t head = 4 + (size_t)m * sizeof(hint);
    if (head > (size_t)PyBytes_GET_SIZE(hints)) {
        PyErr_SetString(PyExc_ValueError, "hints are malformed");
        return -1;
    }
    const hint *hs = (const hint *)(hb + 4);
    *hblob = (const unsigned char *)hb + head;
    size_t lo = 0, hi = m;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cmp(*hblob + hs[mid].off, hs[mid].klen, k, (size_t)lk) < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo > 0) {
        *e = &hs[lo - 1];
        size_t blob = (size_t)PyBytes_GET_SIZE(hints) - head;
        if ((size_t)(*e)->off + (*e)->klen > blob || (size_t)(*e)->voff + (*e)->vlen > blob) {
            PyErr_SetString(PyExc_ValueError, "hints are malformed");
            return -1;
        }
    }
    return 0;
}

/* decode(data, pos=0, lo=None, hi=None, hints=None) -> (keys, values, end): the records at
   pos with lo <= key < hi; end is where the records end (-1 when hi stopped the walk early).
   With hints (index() of the same records) and lo, the walk starts at the last restart
   point below lo instead of the first record. */
static PyObject *front_decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos = 0;
    PyObject *lo = Py_None, *hi = Py_None, *hints = Py_None;
    if (!PyArg_ParseTuple(args, "y*|nOOO", &view, &pos, &lo, &hi, &hints)) {
        return NULL;
    }
    PyObject *r = NULL;
    const hint *e = NULL;
    const unsigned char *hblob = NULL;
    if ((lo != Py_None && !PyBytes_Check(lo)) || (hi != Py_None && !PyBytes_Check(hi))) {
        PyErr_SetString(PyExc_TypeError, "lo and hi must be bytes or None");
    } else if (lo == Py_None || pick_hint(hints, (const unsigned char *)PyBytes_AS_STRING(lo),
                                          PyBytes_GET_SIZE(lo), &e, &hblob) == 0) {
        r = walk((const unsigned char *)view.buf, view.len, pos,
                 lo == Py_None ? NULL : (const unsigned char *)PyBytes_AS_STRING(lo),
                 lo == Py_None ? 0 : PyBytes_GET_SIZE(lo),
                 hi == Py_None ? NULL : (const unsigned char *)PyBytes_AS_STRING(hi),
                 hi == Py_None ? 0 : PyBytes_GET_SIZE(hi), e, hblob);
    }
    PyBuffer_Release(&view);
    return r;
}

/* The exact lookup of key, resuming after hint e (NULL: from the first record): 1 and *value (a new
   reference: the bytes, None for a tombstone), 0 when absent, -1 with an exception. */
static int find_core(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos, const hint *e,
                     const unsigned char *hblob, const unsigned char *key, Py_ssize_t lkey, PyObject **value) {
    size_t n, klen, plen = 0, i0 = 0;
    scratch sc = {NULL, 0};
    int result = -1;
    if (read_header(buf, len, &pos, &n, &klen) < 0) {
        return -1;
    }
    Py_ssize_t kend = pos + (Py_ssize_t)klen, kp = pos, vp = kend;
    if (e != NULL && resume(e, hblob, n, pos, kend, len, &sc, &plen, &kp, &vp, &i0) < 0) {
        goto done;
    }
    size_t i, target = n;
    for (i = i0; i < n; i++) {
        if (next_key(buf, kend, &kp, &sc, &plen) < 0) {
            goto done;
        }
        int c = cmp(sc.p, plen, key, (size_t)lkey);
        if (c >= 0) {
            if (c == 0) {
                target = i;
            }
            break;
        }
    }
    if (target == n) {
        result = 0;
        goto done;
    }
    plen = 0;
    if (e != NULL) {
        if (reserve(&sc, e->vlen + 1) < 0) {
            goto done;
        }
        memcpy(sc.p, hblob + e->voff, e->vlen);
        plen = e->vlen;
    }
    for (i = i0; i <= target; i++) {
        int tomb = next_value(buf, len, &vp, &sc, &plen);
        if (tomb < 0) {
            goto done;
        }
        if (i == target) {
            *value = tomb ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)sc.p, (Py_ssize_t)plen);
            result = *value == NULL ? -1 : 1;
            goto done;
        }
    }
    malformed();
done:
    PyMem_Free(sc.p);
    return result;
}

/* The exact lookup of key, resuming after hint e (NULL: from the first record): (found, value). */
static PyObject *find_from(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos, const hint *e,
                           const unsigned char *hblob, const unsigned char *key, Py_ssize_t lkey) {
    PyObject *value = NULL;
    int found = find_core(buf, len, pos, e, hblob, key, lkey, &value);
    if (found < 0) {
        return NULL;
    }
    return found ? Py_BuildValue("(ON)", Py_True, value) : Py_BuildValue("(OO)", Py_False, Py_None);
}

/* find(data, key, pos=0, hints=None) -> (found, value): value None for a tombstone or when
   absent. With hints (index() of the same records), at most `every` records are walked. */
static PyObject *front_find(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *key, *hints = Py_None;
    Py_ssize_t pos = 0;
    if (!PyArg_ParseTuple(args, "y*O!|nO", &view, &PyBytes_Type, &key, &pos, &hints)) {
        return NULL;
    }
    const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(key);
    Py_ssize_t lk = PyBytes_GET_SIZE(key);
    const hint *e = NULL;
    const unsigned char *hblob = NULL;
    PyObject *r = NULL;
    if (pick_hint(hints, k, lk, &e, &hblob) == 0) {
        r = find_from((const unsigned char *)view.buf, view.len, pos, e, hblob, k, lk);
    }
    PyBuffer_Release(&view);
    return r;
}

/* -- bloom filters ---------------------------------------------------------------------- */

#define SEED2 0x9E3779B9u
/* CRC-32 (zlib's) eight bytes at a time ("slicing-by-8"): the same values as the byte-wise
   table, ~4x faster on keys of tens of bytes. crc_tables[0] is the byte-wise table. */
static uint32_t crc_tables[8][256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int j = 0; j < 8; j++) {
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
        crc_tables[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        for (int t = 1; t < 8; t++) {
            uint32_t c = crc_tables[t - 1][n];
            crc_tables[t][n] = crc_tables[0][c & 0xff] ^ (c >> 8);
        }
    }
}

static uint32_t crc32_of(uint32_t crc, const unsigned char *p, Py_ssize_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_tables[7][lo & 0xff] ^ crc_tables[6][(lo >> 8) & 0xff] ^ crc_tables[5][(lo >> 16) & 0xff]
              ^ crc_tables[4][lo >> 24] ^ crc_tables[3][hi & 0xff] ^ crc_tables[2][(hi >> 8) & 0xff]
              ^ crc_tables[1][(hi >> 16) & 0xff] ^ crc_tables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) {
        crc = crc_tables[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    }
    return ~crc;
}

/* Set the k probe bits (h1 + j * h2) mod m of one key. */
static inline void set_probes(unsigned char *bits, uint64_t h1, uint64_t h2, Py_ssize_t m, int k) {
    /* (h1 + j * h2) mod m, stepped: two divisions a key instead of k (h1 + j * h2 < 2**64,
       so the stepped positions are exactly those) */
    uint64_t mm = (uint64_t)m, p = h1 % mm, step = h2 % mm;
    for (int j = 0; j < k; j++) {
        bits[p >> 3] |= (unsigned char)(1u << (p & 7));
        p += step;
        if (p >= mm) {
            p -= mm;
        }
    }
}

/* Whether every one of the k probe bits of (h1, h2) is set in an m-bit filter. */
static inline int all_probes(const unsigned char *bits, uint64_t h1, uint64_t h2, uint64_t m, long k) {
    if (k < 1) {
        return 1;
    }
    uint64_t p = h1 % m;
    if (!(bits[p >> 3] & (1u << (p & 7)))) {
        return 0;           /* most filters a get probes say no at the first bit: one division */
    }
    uint64_t step = h2 % m;
    for (long j = 1; j < k; j++) {
        p += step;
        if (p >= m) {
            p -= m;
        }
        if (!(bits[p >> 3] & (1u << (p & 7)))) {
            return 0;
        }
    }
    return 1;
}

/* The two CRC-32s a bloom filter probes with for key (h2 made odd); -1 with a TypeError when
   key is not bytes. */
static int key_hashes(PyObject *key, uint32_t *h1, uint32_t *h2) {
    if (!PyBytes_CheckExact(key)) {
        PyErr_SetString(PyExc_TypeError, "keys must be bytes");
        return -1;
    }
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(key);
    Py_ssize_t len = PyBytes_GET_SIZE(key);
    *h1 = crc32_of(0, s, len);
    *h2 = crc32_of(SEED2, s, len) | 1u;
    return 0;
}

/* bloom_build(keys: list[bytes], m: int, k: int) -> bytes of m / 8 bytes */
static PyObject *bloom_build(PyObject *self, PyObject *args) {
    PyObject *keys;
    Py_ssize_t m;
    int k;
    if (!PyArg_ParseTuple(args, "O!ni", &PyList_Type, &keys, &m, &k)) {
        return NULL;
    }
    if (m <= 0 || m % 8 || k < 1) {
        PyErr_SetString(PyExc_ValueError, "m must be a positive multiple of 8 and k >= 1");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, m / 8);
    if (out == NULL) {
        return NULL;
    }
    unsigned char *bits = (unsigned char *)PyBytes_AS_STRING(out);
    memset(bits, 0, (size_t)(m / 8));
    Py_ssize_t n = PyList_GET_SIZE(keys);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t h1, h2;
        if (key_hashes(PyList_GET_ITEM(keys, i), &h1, &h2) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        set_probes(bits, h1, h2, m, k);
    }
    return out;
}

/* The length of key's bloom entry under a strip rule (tag, n): a key whose last n bytes
 * follow the byte tag enters the filter without them (its prefix), any other key whole.
 * tag < 0: no rule. */
static inline Py_ssize_t bloom_len(const unsigned char *s, Py_ssize_t len, long tag, long n) {
    return (tag >= 0 && len > n && s[len - n - 1] == (unsigned char)tag) ? len - n : len;
}

/* The (tag, n) of a strip rule from two Python ints; tag -1 and n 0 mean none. */
static int strip_rule(PyObject *tag_obj, PyObject *n_obj, long *tag, long *n) {
    *tag = PyLong_AsLong(tag_obj);
    if (*tag == -1 && PyErr_Occurred()) {
        return -1;
    }
    *n = PyLong_AsLong(n_obj);
    if (*n == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (*tag < -1 || *tag > 255 || *n < 0 || (*tag >= 0 && *n < 1)) {
        PyErr_SetString(PyExc_ValueError, "a bloom strip rule is a tag in 0..255 and a length >= 1");
        return -1;
    }
    return 0;
}

/* bloom_hashes(keys: list[bytes][, tag: int, n: int]) -> bytes: per key its two CRC-32s (h1,
 * then h2 | 1), each a little-endian u32; what bloom_build_hashed makes a filter of, 8 bytes
 * a key. With a strip rule, of each key's bloom entry (bloom_len), and a run of keys with the
 * same entry (a collection's slots, sorted together) gives it once. */
static PyObject *bloom_hashes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long tag = -1, n = 0;
    if ((nargs != 1 && nargs != 3) || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "bloom_hashes(keys: list[bytes][, tag: int, n: int])");
        return NULL;
    }
    if (nargs == 3 && strip_rule(args[1], args[2], &tag, &n) < 0) {
        return NULL;
    }
    PyObject *keys = args[0];
    Py_ssize_t count = PyList_GET_SIZE(keys);
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * 8);
    if (out == NULL) {
        return NULL;
    }
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *prev = NULL;
    Py_ssize_t prev_len = -1, w = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (!PyBytes_CheckExact(key)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "keys must be bytes");
            return NULL;
        }
        const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(key);
        Py_ssize_t len = bloom_len(s, PyBytes_GET_SIZE(key), tag, n);
        if (tag >= 0) {
            if (len == prev_len && memcmp(s, prev, (size_t)len) == 0) {
                continue;
            }
            prev = s;
            prev_len = len;
        }
        uint32_t h[2] = {crc32_of(0, s, len), crc32_of(SEED2, s, len) | 1u};
        for (int j = 0; j < 2; j++, w += 4) {
            o[w] = (unsigned char)h[j];
            o[w + 1] = (unsigned char)(h[j] >> 8);
            o[w + 2] = (unsigned char)(h[j] >> 16);
            o[w + 3] = (unsigned char)(h[j] >> 24);
        }
    }
    if (w < count * 8 && _PyBytes_Resize(&out, w) < 0) {
        return NULL;
    }
    return out;
}

/* bloom_build_hashed(hashes: bytes-like of bloom_hashes, m: int, k: int) -> bytes of m / 8
 * bytes: the bits bloom_build gives for the same keys. */
static PyObject *bloom_build_hashed(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t m;
    int k;
    if (!PyArg_ParseTuple(args, "y*ni", &buf, &m, &k)) {
        return NULL;
    }
    if (m <= 0 || m % 8 || k < 1 || buf.len % 8) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "m must be a positive multiple of 8, k >= 1, hashes 8 bytes a key");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, m / 8);
    if (out == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    unsigned char *bits = (unsigned char *)PyBytes_AS_STRING(out);
    memset(bits, 0, (size_t)(m / 8));
    const unsigned char *h = (const unsigned char *)buf.buf;
    for (Py_ssize_t i = 0; i < buf.len / 8; i++, h += 8) {
        set_probes(bits, (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24,
                   (uint32_t)h[4] | (uint32_t)h[5] << 8 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 24, m, k);
    }
    PyBuffer_Release(&buf);
    return out;
}

/* bloom_check(bits: bytes, k: int[, tag: int, n: int], key: bytes) -> bool: whether the
 * filter may hold key (its bloom entry under the strip rule, when one is given). */
static PyObject *bloom_check(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long tag = -1, n = 0;
    if ((nargs != 3 && nargs != 5) || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[nargs - 1])) {
        PyErr_SetString(PyExc_TypeError, "bloom_check(bits: bytes, k: int[, tag: int, n: int], key: bytes)");
        return NULL;
    }
    long k = PyLong_AsLong(args[1]);
    if (k == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (nargs == 5 && strip_rule(args[2], args[3], &tag, &n) < 0) {
        return NULL;
    }
    const unsigned char *bits = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    uint64_t m = (uint64_t)PyBytes_GET_SIZE(args[0]) * 8;
    if (m == 0) {
        Py_RETURN_TRUE;
    }
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(args[nargs - 1]);
    Py_ssize_t len = bloom_len(s, PyBytes_GET_SIZE(args[nargs - 1]), tag, n);
    uint64_t h1 = crc32_of(0, s, len), h2 = crc32_of(SEED2, s, len) | 1u;
    return PyBool_FromLong(all_probes(bits, h1, h2, m, k));
}

/* The positions i of filters (an exact tuple) whose filter may hold the key s[0:len], into out
   (room for every filter); their count, or -1 with an exception (a malformed filter: nothing
   is written to out then that a caller may use). */
static Py_ssize_t candidates_of(const unsigned char *s, Py_ssize_t len, PyObject *filters, Py_ssize_t *out) {
    uint64_t h1 = crc32_of(0, s, len), h2 = crc32_of(SEED2, s, len) | 1u;
    Py_ssize_t slen = -1;       /* the stripped length the hashes sh1, sh2 are of */
    uint64_t sh1 = 0, sh2 = 0;
    Py_ssize_t count = PyTuple_GET_SIZE(filters), nout = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *f = PyTuple_GET_ITEM(filters, i);
        int may = 1;
        if (f != Py_None) {
            Py_ssize_t fn = PyTuple_CheckExact(f) ? PyTuple_GET_SIZE(f) : 0;
            if ((fn != 2 && fn != 4) || !PyBytes_CheckExact(PyTuple_GET_ITEM(f, 0))) {
                PyErr_SetString(PyExc_TypeError, "bloom_candidates: a filter is None, (bits: bytes, k: int) "
                                "or (bits, k, tag: int, n: int)");
                return -1;
            }
            long k = PyLong_AsLong(PyTuple_GET_ITEM(f, 1)), tag = -1, n = 0;
            if ((k == -1 && PyErr_Occurred())
                || (fn == 4 && strip_rule(PyTuple_GET_ITEM(f, 2), PyTuple_GET_ITEM(f, 3), &tag, &n) < 0)) {
                return -1;
            }
            PyObject *b = PyTuple_GET_ITEM(f, 0);
            const unsigned char *bits = (const unsigned char *)PyBytes_AS_STRING(b);
            uint64_t m = (uint64_t)PyBytes_GET_SIZE(b) * 8;
            Py_ssize_t blen = bloom_len(s, len, tag, n);
            if (blen == len) {
                may = m == 0 || all_probes(bits, h1, h2, m, k);
            } else {
                if (blen != slen) {
                    slen = blen;
                    sh1 = crc32_of(0, s, blen);
                    sh2 = crc32_of(SEED2, s, blen) | 1u;
                }
                may = m == 0 || all_probes(bits, sh1, sh2, m, k);
            }
        }
        if (may) {
            out[nout++] = i;
        }
    }
    return nout;
}

/* bloom_candidates(key: bytes, filters: tuple) -> list[int]: the positions i of filters
 * (each None, or a (bits: bytes, k: int) pair as bloom_check takes them, or (bits, k, tag, n)
 * for a filter of stripped entries) whose filter may contain key; None may contain anything.
 * The key's hashes are computed once for all (twice with a strip rule: whole and stripped):
 * a get over many sealed segments probes them all in one call. */
static PyObject *bloom_candidates(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bloom_candidates(key: bytes, filters: tuple)");
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(args[1]), small[64];
    Py_ssize_t *pos = count <= 64 ? small : PyMem_New(Py_ssize_t, (size_t)count);
    if (pos == NULL) {
        return PyErr_NoMemory();
    }
    Py_ssize_t n = candidates_of((const unsigned char *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]),
                                 args[1], pos);
    PyObject *out = n < 0 ? NULL : PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *v = PyLong_FromSsize_t(pos[i]);
        if (v == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, v);
    }
    if (pos != small) {
        PyMem_Free(pos);
    }
    return out;
}

/* batch_extend(ops, records) -> the bytes of records' keys and values, with records appended
   to the list ops; or -1, ops unchanged, when a record is not an exact (non-empty bytes,
   bytes or None) pair: then WriteBatch.extend's Python loop converts or refuses it. */
static PyObject *batch_extend(PyObject *self, PyObject *args) {
    PyObject *ops, *recs;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &ops, &PyList_Type, &recs)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(recs), nbytes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(recs, i);
        if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 2) {
            return PyLong_FromLong(-1);
        }
        PyObject *k = PyTuple_GET_ITEM(r, 0), *v = PyTuple_GET_ITEM(r, 1);
        if (!PyBytes_CheckExact(k) || PyBytes_GET_SIZE(k) == 0 || (v != Py_None && !PyBytes_CheckExact(v))) {
            return PyLong_FromLong(-1);
        }
        nbytes += PyBytes_GET_SIZE(k) + (v == Py_None ? 0 : PyBytes_GET_SIZE(v));
    }
    Py_ssize_t at = PyList_GET_SIZE(ops);
    if (PyList_SetSlice(ops, at, at, recs) < 0) {
        return NULL;
    }
    return PyLong_FromSsize_t(nbytes);
}

/* batch_bounds(ops) -> (least key, greatest key) of a WriteBatch's records, as min() and max()
   of the keys give them (DB.write checks both against the instance's key groups): one pass of
   memcmp where the builtins compare each key twice through the generic rich compare; None when
   ops is empty or not a list of exact (bytes, bytes or None) pairs (the builtins then). */
static PyObject *batch_bounds(PyObject *self, PyObject *ops) {
    if (!PyList_CheckExact(ops) || PyList_GET_SIZE(ops) == 0) {
        Py_RETURN_NONE;
    }
    PyObject *lo = NULL, *hi = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ops); i++) {
        PyObject *r = PyList_GET_ITEM(ops, i);
        if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 2 || !PyBytes_CheckExact(PyTuple_GET_ITEM(r, 0))) {
            Py_RETURN_NONE;
        }
        PyObject *k = PyTuple_GET_ITEM(r, 0);
        const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(k);
        size_t n = (size_t)PyBytes_GET_SIZE(k);
        if (lo == NULL) {
            lo = hi = k;
        } else if (cmp(s, n, (const unsigned char *)PyBytes_AS_STRING(lo), (size_t)PyBytes_GET_SIZE(lo)) < 0) {
            lo = k;
        } else if (cmp(s, n, (const unsigned char *)PyBytes_AS_STRING(hi), (size_t)PyBytes_GET_SIZE(hi)) > 0) {
            hi = k;
        }
    }
    return PyTuple_Pack(2, lo, hi);
}

/* block_ends(keys, values, block_bytes) -> list of int: where the blocks of a blocked WAL
   segment end, each taking records up to the one that brings its raw size (key, value and 4
   bytes a record) to block_bytes; the twin of dkv/format/wal.py's _block_ends. None when the
   records are not lists of the same length of bytes keys and bytes-or-None values (the
   Python twin then cuts them, or raises what it raises). */
static PyObject *block_ends(PyObject *self, PyObject *args) {
    PyObject *keys, *values;
    Py_ssize_t block;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyList_Type, &keys, &PyList_Type, &values, &block)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(values) != n) {
        Py_RETURN_NONE;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        if (!PyBytes_CheckExact(PyList_GET_ITEM(keys, i)) || (v != Py_None && !PyBytes_CheckExact(v))) {
            Py_RETURN_NONE;
        }
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t j = i, size = 0;
        do {        /* at least one record a block, as the bisection's end */
            PyObject *v = PyList_GET_ITEM(values, j);
            size += PyBytes_GET_SIZE(PyList_GET_ITEM(keys, j)) + (v == Py_None ? 0 : PyBytes_GET_SIZE(v)) + 4;
            j++;
        } while (j < n && size < block);
        PyObject *end = PyLong_FromSsize_t(j);
        if (end == NULL || PyList_Append(out, end) < 0) {
            Py_XDECREF(end);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(end);
        i = j;
    }
    return out;
}

/* merge_runs(runs, drop_tombstones) -> (keys, values): the merge of sorted runs, oldest first,
   each a pair (keys, values) of lists (keys exact bytes, strictly ascending; values bytes or
   None): every key once, ascending, with the value of the newest run that holds it, and
   without the None ones when drop_tombstones. The twin of dkv/_merge.py's _merge_runs (a dict
   updated oldest run first, then sorted): a heap over the runs' next keys, compared with
   memcmp, instead of a hash, an insertion and a sort's comparisons per record. None when a
   run is not of that shape (not a pair of lists of the same length, a key that is not bytes
   or out of order, a value that is neither): the Python twin then merges them, whatever
   they hold, and no list was changed. */
typedef struct {
    PyObject **keys, **vals;
    Py_ssize_t n, pos;
    const char *k;          /* the next key's bytes and length, kept at hand for the heap */
    Py_ssize_t kn;
} mrun;

static inline void mrun_at(mrun *m) {
    if (m->pos < m->n) {
        m->k = PyBytes_AS_STRING(m->keys[m->pos]);
        m->kn = PyBytes_GET_SIZE(m->keys[m->pos]);
    }
}

static inline int mrun_less(const mrun *a, Py_ssize_t ia, const mrun *b, Py_ssize_t ib) {
    /* a's next key sorts before b's; the same key: the newer run (larger index) first */
    Py_ssize_t la = a->kn, lb = b->kn;
    int c = memcmp(a->k, b->k, (size_t)(la < lb ? la : lb));
    if (c != 0) {
        return c < 0;
    }
    if (la != lb) {
        return la < lb;
    }
    return ia > ib;
}

static void mrun_sift(mrun *runs, Py_ssize_t *heap, Py_ssize_t size, Py_ssize_t i) {
    for (;;) {
        Py_ssize_t l = 2 * i + 1, best = i;
        if (l < size && mrun_less(&runs[heap[l]], heap[l], &runs[heap[best]], heap[best])) {
            best = l;
        }
        if (l + 1 < size && mrun_less(&runs[heap[l + 1]], heap[l + 1], &runs[heap[best]], heap[best])) {
            best = l + 1;
        }
        if (best == i) {
            return;
        }
        Py_ssize_t t = heap[i];
        heap[i] = heap[best];
        heap[best] = t;
        i = best;
    }
}

static PyObject *merge_runs(PyObject *self, PyObject *args) {
    PyObject *seq;
    int drop;
    if (!PyArg_ParseTuple(args, "O!p", &PyList_Type, &seq, &drop)) {
        return NULL;
    }
    Py_ssize_t k = PyList_GET_SIZE(seq), total = 0, size = 0;
    mrun *runs = PyMem_Malloc(sizeof(mrun) * (size_t)(k ? k : 1));
    Py_ssize_t *heap = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(k ? k : 1));
    PyObject *ok = NULL, *ov = NULL, *out = NULL;
    if (runs == NULL || heap == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < k; r++) {
        PyObject *pair = PyList_GET_ITEM(seq, r), *ks, *vs;
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2
            || !PyList_CheckExact(ks = PyTuple_GET_ITEM(pair, 0)) || !PyList_CheckExact(vs = PyTuple_GET_ITEM(pair, 1))
            || PyList_GET_SIZE(ks) != PyList_GET_SIZE(vs)) {
            goto fallback;
        }
        mrun *m = &runs[r];
        m->keys = ((PyListObject *)ks)->ob_item;
        m->vals = ((PyListObject *)vs)->ob_item;
        m->n = PyList_GET_SIZE(ks);
        m->pos = 0;
        for (Py_ssize_t i = 0; i < m->n; i++) {     /* the shape checked whole: nothing runs in between */
            PyObject *key = m->keys[i], *v = m->vals[i];
            if (!PyBytes_CheckExact(key) || (v != Py_None && !PyBytes_CheckExact(v))) {
                goto fallback;
            }
            if (i) {
                PyObject *prev = m->keys[i - 1];
                Py_ssize_t lp = PyBytes_GET_SIZE(prev), lk = PyBytes_GET_SIZE(key);
                int c = memcmp(PyBytes_AS_STRING(prev), PyBytes_AS_STRING(key), (size_t)(lp < lk ? lp : lk));
                if (c > 0 || (c == 0 && lp >= lk)) {
                    goto fallback;
                }
            }
        }
        total += m->n;
        if (m->n) {
            mrun_at(m);
            heap[size++] = r;
        }
    }
    if ((ok = PyList_New(total)) == NULL || (ov = PyList_New(total)) == NULL) {
        goto done;
    }
    for (Py_ssize_t i = size / 2 - 1; i >= 0; i--) {
        mrun_sift(runs, heap, size, i);
    }
    Py_ssize_t w = 0;
    while (size) {
        mrun *top = &runs[heap[0]];
        PyObject *key = top->keys[top->pos], *v = top->vals[top->pos];
        const char *kp = top->k;
        Py_ssize_t kn = top->kn;
        if (!(drop && v == Py_None)) {
            Py_INCREF(key);
            Py_INCREF(v);
            PyList_SET_ITEM(ok, w, key);
            PyList_SET_ITEM(ov, w, v);
            w++;
        }
        /* every run's record of this key leaves the heap; the first was the newest */
        do {
            mrun *m = &runs[heap[0]];
            if (++m->pos == m->n) {
                heap[0] = heap[--size];
            } else {
                mrun_at(m);
            }
            if (size) {
                mrun_sift(runs, heap, size, 0);
            }
        } while (size && runs[heap[0]].kn == kn && memcmp(runs[heap[0]].k, kp, (size_t)kn) == 0);
    }
    Py_SET_SIZE(ok, w);        /* the slots past w were never set (NULL) */
    Py_SET_SIZE(ov, w);
    out = PyTuple_Pack(2, ok, ov);
    goto done;
fallback:
    out = Py_NewRef(Py_None);
done:
    Py_XDECREF(ok);
    Py_XDECREF(ov);
    PyMem_Free(runs);
    PyMem_Free(heap);
    return out;
}

/* -- DB.get in C (RFC 0012 step 3) --------------------------------------------------------
 *
 * db_get(db, key) is the twin of dkv/_reads.py's DB.get for the common case, with what it calls:
 * the active memtable's dict, the bloom filters of the sealed sources (candidates_of above, as
 * bloom.candidates), each candidate memtable's dict or segment's Table.get_probed, then
 * Version.get over L0 and the levels with Table.get, Table.owns, Table._find and _hints of
 * dkv/_table.py down to the block search (find_core, as front_find). get_setup (called by
 * dkv/_getpath.py) gives it the classes and functions the Python code uses.
 *
 * A read that is not the common case returns NO_RECORD before anything changed, and DB.get's
 * Python goes on from the start: a key that is not non-empty bytes, a DB whose _closed is not
 * False, whose _active is not an exact Memtable (with its own slots) holding a dict, whose
 * _view is not a pair of a tuple of sources and something, or whose _probe is not the filters
 * of that tuple (DB.get's Python computes them). Past that point the C code does what the
 * Python code does, step by step, with the same side effects (a cached block's _ref set and
 * the block cache's hits counted, a missing block read by the table's Python _fetch, a block's
 * restart hints built on its second lookup): a source or table whose class is not exactly
 * Table or Delta, or whose class's methods or slots changed since setup (get, get_probed,
 * _find, owns, a slot), and a Version of another class or with another get, gets its own
 * Python method called in its place; a block that is not a front-coded list entry goes to the
 * Python _hints and _list_get. When the levels raise ObjectMissingError (a compaction's
 * collected file), the error propagates if the DB's view is still the one read, and
 * otherwise RETRY is returned: DB.get's Python then calls self.get(key) again, as it does. */

#define G_MAXHOOKS 16
typedef struct {
    PyTypeObject *type;
    int n;
    PyObject *names[G_MAXHOOKS];
    PyObject *hooks[G_MAXHOOKS];    /* what the type's attributes were at setup (references) */
    unsigned int tag;               /* the type's version tag when last checked (0: check) */
    int ok;
} gkind;

static gkind g_memtable, g_table, g_delta, g_version;
enum { T_MIN, T_MAX, T_CLIP_LO, T_CLIP_HI, T_META, T_FIRST, T_BLOCKS, T_REF, T_CACHE, T_BLOOM, NT };
static const char *t_slot_names[NT] = {"min_key", "max_key", "clip_lo", "clip_hi", "_meta", "_first", "_blocks",
                                       "_ref", "_cache", "_bloom"};
static Py_ssize_t toff[NT], mem_data_off, v_l0_off, v_levels_off, v_maxkeys_off;
static PyObject *t_slot_strs[NT];
static PyObject *g_no_record, *g_retry, *g_missing, *g_once, *g_maybe, *g_py_hints, *g_py_list_get, *g_bisect_left,
    *g_bisect_right, *g_every, *g_one;
static PyObject *gs_closed, *gs_active, *gs_view, *gs_probe, *gs_get, *gs_get_probed, *gs_meta, *gs_fetch, *gs_hits,
    *gs_data, *gs_l0, *gs_levels, *gs_maxkeys;
static int get_ready = 0;

/* Whether c's type still has the attributes it had at setup: O(1) while its version tag stays
   (an assignment to the type or a base changes it). */
static int gkind_same(gkind *c) {
    PyTypeObject *t = c->type;
    if (c->tag && (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && t->tp_version_tag == c->tag) {
        return c->ok;
    }
    int ok = 1;
    for (int i = 0; i < c->n; i++) {
        if (_PyType_Lookup(t, c->names[i]) != c->hooks[i]) {
            ok = 0;
        }
    }
    c->ok = ok;
    c->tag = (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? t->tp_version_tag : 0;
    return ok;
}

/* A table whose Python methods the C code stands in for: exactly Table or Delta, unchanged. */
static int plain_table(PyObject *t) {
    PyTypeObject *tp = Py_TYPE(t);
    return (tp == g_delta.type && gkind_same(&g_delta)) || (tp == g_table.type && gkind_same(&g_table));
}

/* o's slot at off (a new reference), or, when it is empty, its attribute: the AttributeError
   Python's read raises. */
static PyObject *slot_or_attr(PyObject *o, Py_ssize_t off, PyObject *name) {
    PyObject *v = *(PyObject **)((char *)o + off);
    return v != NULL ? Py_NewRef(v) : PyObject_GetAttr(o, name);
}

/* a <op> b as Python's comparison and truth test: 1, 0 or -1; exact bytes compared here. */
static int compare(PyObject *a, PyObject *b, int op) {
    if (PyBytes_CheckExact(a) && PyBytes_CheckExact(b)) {
        int c = cmp((const unsigned char *)PyBytes_AS_STRING(a), (size_t)PyBytes_GET_SIZE(a),
                    (const unsigned char *)PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
        switch (op) {
        case Py_LT: return c < 0;
        case Py_LE: return c <= 0;
        case Py_GT: return c > 0;
        case Py_GE: return c >= 0;
        case Py_EQ: return c == 0;
        default: return c != 0;
        }
    }
    return PyObject_RichCompareBool(a, b, op);
}

/* seq[i] as Python's subscript (a new reference). */
static PyObject *item_at(PyObject *seq, Py_ssize_t i) {
    if (PyTuple_CheckExact(seq)) {
        if (i < PyTuple_GET_SIZE(seq)) {
            return Py_NewRef(PyTuple_GET_ITEM(seq, i));
        }
        PyErr_SetString(PyExc_IndexError, "tuple index out of range");
        return NULL;
    }
    if (PyList_CheckExact(seq)) {
        if (i < PyList_GET_SIZE(seq)) {
            return Py_NewRef(PyList_GET_ITEM(seq, i));
        }
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return NULL;
    }
    PyObject *ix = PyLong_FromSsize_t(i), *r = ix ? PyObject_GetItem(seq, ix) : NULL;
    Py_XDECREF(ix);
    return r;
}

/* bisect_right(a, x, lo) (right) or bisect_left(a, x, lo) into *out: 0 or -1. The loop of the
   bisect module's C for a list; the module's function for anything else. */
static int bisect_from(PyObject *a, PyObject *x, int right, Py_ssize_t lo, Py_ssize_t *out) {
    if (!PyList_CheckExact(a)) {
        PyObject *ix = lo ? PyLong_FromSsize_t(lo) : NULL, *r = NULL;
        if (lo == 0 || ix != NULL) {
            r = PyObject_CallFunctionObjArgs(right ? g_bisect_right : g_bisect_left, a, x, ix, NULL);
        }
        Py_XDECREF(ix);
        if (r == NULL) {
            return -1;
        }
        *out = PyLong_AsSsize_t(r);
        Py_DECREF(r);
        return *out == -1 && PyErr_Occurred() ? -1 : 0;
    }
    Py_ssize_t hi = PyList_GET_SIZE(a);
    while (lo < hi) {
        Py_ssize_t mid = (Py_ssize_t)(((size_t)lo + (size_t)hi) / 2);
        if (mid >= PyList_GET_SIZE(a)) {        /* (a comparison's Python code shrank it) */
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            return -1;
        }
        PyObject *item = Py_NewRef(PyList_GET_ITEM(a, mid));
        int c = right ? compare(x, item, Py_LT) : compare(item, x, Py_LT);
        Py_DECREF(item);
        if (c < 0) {
            return -1;
        }
        if (right ? c : !c) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    *out = lo;
    return 0;
}

static int bisect(PyObject *a, PyObject *x, int right, Py_ssize_t *out) {
    return bisect_from(a, x, right, 0, out);
}

/* A record a Python method returned: 0 for NO_RECORD, else 1 and *value = rec[1]; -1. */
static int rec_value(PyObject *rec, PyObject **value) {
    if (rec == NULL) {
        return -1;
    }
    int r = 0;
    if (rec != g_no_record) {
        *value = PyObject_GetItem(rec, g_one);
        r = *value == NULL ? -1 : 1;
    }
    Py_DECREF(rec);
    return r;
}

/* _hints(blk) of an exact list blk of at least 3 items (a new reference). */
static PyObject *hints_of(PyObject *blk) {
    if (PyList_GET_SIZE(blk) == 3) {
        return PyList_Append(blk, g_once) < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *h = item_at(blk, 3);
    if (h != g_once) {
        return h;
    }
    Py_DECREF(h);
    PyObject *args = PyTuple_Pack(3, PyList_GET_ITEM(blk, 0), PyList_GET_ITEM(blk, 1), g_every);
    h = args ? front_index(NULL, args) : NULL;
    Py_XDECREF(args);
    if (h != NULL && PyList_SetItem(blk, 3, Py_NewRef(h)) < 0) {
        Py_CLEAR(h);
    }
    return h;
}

/* The rest of Table._find for the block blk (a reference, stolen): 1 and *value, 0, -1. */
static int block_find(PyObject *blk, PyObject *key, PyObject **value) {
    int r = -1;
    PyObject *raw = NULL, *pos = NULL, *hints = NULL, *found = NULL, *tail = NULL;
    if (PyList_CheckExact(blk) && PyList_GET_SIZE(blk) >= 3) {
        raw = Py_NewRef(PyList_GET_ITEM(blk, 0));
        if (PyBytes_CheckExact(raw)) {
            pos = Py_NewRef(PyList_GET_ITEM(blk, 1));
            hints = hints_of(blk);
        }
    } else {
        raw = item_at(blk, 0);
        if (raw != NULL && PyBytes_CheckExact(raw)) {
            pos = item_at(blk, 1);
            hints = pos ? PyObject_CallOneArg(g_py_hints, blk) : NULL;
        }
    }
    if (raw == NULL) {
        goto done;
    }
    if (!PyBytes_CheckExact(raw)) {             /* a format-1 block: _list_get */
        r = rec_value(PyObject_CallFunctionObjArgs(g_py_list_get, blk, key, NULL), value);
        goto done;
    }
    if (hints == NULL) {
        goto done;
    }
    /* found, value = front_find(blk[0], key, blk[1], hints) */
    Py_ssize_t p = PyLong_CheckExact(pos) ? PyLong_AsSsize_t(pos) : -1;
    int hit;
    if (p >= 0 && (hints == Py_None || PyBytes_Check(hints))) {
        const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(key), *hblob = NULL;
        const hint *e = NULL;
        if (pick_hint(hints, k, PyBytes_GET_SIZE(key), &e, &hblob) < 0) {
            goto done;
        }
        hit = find_core((const unsigned char *)PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw), p, e, hblob, k,
                        PyBytes_GET_SIZE(key), value);
    } else {
        PyErr_Clear();                          /* (an int past Py_ssize_t: find()'s error below) */
        PyObject *args = PyTuple_Pack(4, raw, key, pos, hints);
        found = args ? front_find(NULL, args) : NULL;
        Py_XDECREF(args);
        if (found == NULL) {
            goto done;
        }
        hit = PyObject_IsTrue(PyTuple_GET_ITEM(found, 0));
        if (hit > 0) {
            *value = Py_NewRef(PyTuple_GET_ITEM(found, 1));
        }
    }
    if (hit > 0) {                              /* (blk[2], value) */
        tail = item_at(blk, 2);
        if (tail == NULL) {
            Py_CLEAR(*value);
            hit = -1;
        }
    }
    r = hit;
done:
    Py_DECREF(blk);
    Py_XDECREF(raw);
    Py_XDECREF(pos);
    Py_XDECREF(hints);
    Py_XDECREF(found);
    Py_XDECREF(tail);
    return r;
}

/* Table.block(i) of a plain table (a new reference): the cached block, its _ref[i] set and the
   block cache's hits counted, or a miss read by the table's Python _fetch(i). */
static PyObject *t_block(PyObject *t, Py_ssize_t i) {
    PyObject *blocks = slot_or_attr(t, toff[T_BLOCKS], t_slot_strs[T_BLOCKS]), *blk;
    if (blocks == NULL) {
        return NULL;
    }
    blk = item_at(blocks, i);
    Py_DECREF(blocks);
    if (blk == NULL) {
        return NULL;
    }
    if (blk == Py_None) {                       /* a miss: the table's Python _fetch */
        Py_DECREF(blk);
        PyObject *ix = PyLong_FromSsize_t(i);
        blk = ix ? PyObject_CallMethodOneArg(t, gs_fetch, ix) : NULL;
        Py_XDECREF(ix);
        return blk;
    }
    /* self._ref[i] = 1; self._cache.hits += 1 */
    PyObject *ref = slot_or_attr(t, toff[T_REF], t_slot_strs[T_REF]), *cache = NULL, *h = NULL, *h2 = NULL;
    int ok = ref != NULL;
    if (ok && PyByteArray_CheckExact(ref)) {
        if (i < PyByteArray_GET_SIZE(ref)) {
            PyByteArray_AS_STRING(ref)[i] = 1;
        } else {
            PyErr_SetString(PyExc_IndexError, "bytearray index out of range");
            ok = 0;
        }
    } else if (ok) {
        PyObject *ix = PyLong_FromSsize_t(i);
        ok = ix != NULL && PyObject_SetItem(ref, ix, g_one) == 0;
        Py_XDECREF(ix);
    }
    ok = ok && (cache = slot_or_attr(t, toff[T_CACHE], t_slot_strs[T_CACHE])) != NULL
        && (h = PyObject_GetAttr(cache, gs_hits)) != NULL && (h2 = PyNumber_InPlaceAdd(h, g_one)) != NULL
        && PyObject_SetAttr(cache, gs_hits, h2) == 0;
    Py_XDECREF(ref);
    Py_XDECREF(cache);
    Py_XDECREF(h);
    Py_XDECREF(h2);
    if (!ok) {
        Py_CLEAR(blk);
    }
    return blk;
}

/* Table._find(key) of a plain table: 1 and *value (the record's value), 0, -1. */
static int t_find(PyObject *t, PyObject *key, PyObject **value) {
    PyObject *first = slot_or_attr(t, toff[T_FIRST], t_slot_strs[T_FIRST]), *blk;
    Py_ssize_t i;
    if (first == NULL) {
        return -1;
    }
    int r = bisect(first, key, 1, &i);
    Py_DECREF(first);
    if (r < 0) {
        return -1;
    }
    if (--i < 0) {
        return 0;
    }
    if ((blk = t_block(t, i)) == NULL) {
        return -1;
    }
    return block_find(blk, key, value);
}

/* Table.owns(key) of a plain table: 1, 0, -1. */
static int t_owns(PyObject *t, PyObject *key) {
    PyObject *lo = slot_or_attr(t, toff[T_CLIP_LO], t_slot_strs[T_CLIP_LO]), *hi;
    if (lo == NULL) {
        return -1;
    }
    int r = lo == Py_None ? 1 : compare(key, lo, Py_GE);
    Py_DECREF(lo);
    if (r <= 0) {
        return r;
    }
    if ((hi = slot_or_attr(t, toff[T_CLIP_HI], t_slot_strs[T_CLIP_HI])) == NULL) {
        return -1;
    }
    r = hi == Py_None ? 1 : compare(key, hi, Py_LT);
    Py_DECREF(hi);
    return r;
}

/* Table.get(key) (probed 0) or Table.get_probed(key) (probed 1): 1 and *value, 0, -1. A plain
   table here, any other through its Python method. */
static int t_get(PyObject *t, PyObject *key, int probed, PyObject **value) {
    if (!plain_table(t)) {
        return rec_value(PyObject_CallMethodOneArg(t, probed ? gs_get_probed : gs_get, key), value);
    }
    PyObject *lo = slot_or_attr(t, toff[T_CLIP_LO], t_slot_strs[T_CLIP_LO]), *meta;
    if (lo == NULL) {
        return -1;
    }
    int r = lo == Py_None ? 1 : t_owns(t, key);
    Py_DECREF(lo);
    if (r <= 0) {
        return r;
    }
    if ((meta = slot_or_attr(t, toff[T_META], t_slot_strs[T_META])) == NULL) {
        return -1;
    }
    if (meta == Py_None) {
        Py_DECREF(meta);
        meta = PyObject_CallMethodNoArgs(t, gs_meta);
        if (meta == NULL) {
            return -1;
        }
    }
    Py_DECREF(meta);
    if (!probed) {
        PyObject *bloom = slot_or_attr(t, toff[T_BLOOM], t_slot_strs[T_BLOOM]);
        if (bloom == NULL) {
            return -1;
        }
        if (bloom != g_maybe) {                 /* _maybe: True for every key */
            PyObject *may = PyObject_CallOneArg(bloom, key);
            r = may ? PyObject_IsTrue(may) : -1;
            Py_XDECREF(may);
        }
        Py_DECREF(bloom);
        if (r <= 0) {
            return r;
        }
    }
    return t_find(t, key, value);
}

/* o.min_key <= key <= o.max_key: 1, 0, -1. */
static int in_range(PyObject *o, int plain, PyObject *key) {
    PyObject *lo = plain ? slot_or_attr(o, toff[T_MIN], t_slot_strs[T_MIN]) : PyObject_GetAttr(o, t_slot_strs[T_MIN]);
    if (lo == NULL) {
        return -1;
    }
    int r = compare(lo, key, Py_LE);
    Py_DECREF(lo);
    if (r <= 0) {
        return r;
    }
    PyObject *hi = plain ? slot_or_attr(o, toff[T_MAX], t_slot_strs[T_MAX]) : PyObject_GetAttr(o, t_slot_strs[T_MAX]);
    if (hi == NULL) {
        return -1;
    }
    r = compare(key, hi, Py_LE);
    Py_DECREF(hi);
    return r;
}

/* One level of Version.get: the tables of run from bisect_left(maxkeys, key) on. */
static int level_get(PyObject *run, PyObject *maxkeys, PyObject *key, PyObject **value) {
    Py_ssize_t i;
    if (bisect(maxkeys, key, 0, &i) < 0) {
        return -1;
    }
    for (;; i++) {
        Py_ssize_t n = PyTuple_CheckExact(run) ? PyTuple_GET_SIZE(run) : PyObject_Length(run);
        if (n < 0) {
            return -1;
        }
        if (i >= n) {
            return 0;
        }
        PyObject *t = item_at(run, i), *x;
        if (t == NULL) {
            return -1;
        }
        int plain = plain_table(t), r = -1;
        x = plain ? slot_or_attr(t, toff[T_MIN], t_slot_strs[T_MIN]) : PyObject_GetAttr(t, t_slot_strs[T_MIN]);
        int c = x ? compare(x, key, Py_GT) : -1;        /* if t.min_key > key: break */
        Py_XDECREF(x);
        if (c != 0) {
            Py_DECREF(t);
            return c < 0 ? -1 : 0;
        }
        r = t_get(t, key, 0, value);
        if (r != 0) {
            Py_DECREF(t);
            return r;
        }
        /* if t.clip_hi is None or key < t.clip_hi: break */
        x = plain ? slot_or_attr(t, toff[T_CLIP_HI], t_slot_strs[T_CLIP_HI])
                  : PyObject_GetAttr(t, t_slot_strs[T_CLIP_HI]);
        Py_DECREF(t);
        c = x == NULL ? -1 : x == Py_None ? 1 : compare(key, x, Py_LT);
        Py_XDECREF(x);
        if (c != 0) {
            return c < 0 ? -1 : 0;
        }
    }
}

/* The L0 part of Version.get: each table t of l0 with t.min_key <= key <= t.max_key, newest
   first, until one has a record. */
static int l0_get(PyObject *t, PyObject *key, PyObject **value) {
    int c = in_range(t, plain_table(t), key);
    return c <= 0 ? c : t_get(t, key, 0, value);
}

/* Version.get(key): 1 and *value, 0 (NO_RECORD), -1. */
static int v_get(PyObject *v, PyObject *key, PyObject **value) {
    if (!Py_IS_TYPE(v, g_version.type) || !gkind_same(&g_version)) {
        return rec_value(PyObject_CallMethodOneArg(v, gs_get, key), value);
    }
    int r = -1;
    PyObject *l0 = slot_or_attr(v, v_l0_off, gs_l0), *it = NULL, *t, *levels = NULL, *maxkeys = NULL,
        *ita = NULL, *itb = NULL;
    if (l0 == NULL) {
        goto done;
    }
    if (PyTuple_CheckExact(l0)) {               /* for t in self.l0 */
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(l0); i++) {
            t = Py_NewRef(PyTuple_GET_ITEM(l0, i));
            r = l0_get(t, key, value);
            Py_DECREF(t);
            if (r != 0) {
                goto done;
            }
        }
    } else {
        if ((it = PyObject_GetIter(l0)) == NULL) {
            goto done;
        }
        while ((t = PyIter_Next(it)) != NULL) {
            r = l0_get(t, key, value);
            Py_DECREF(t);
            if (r != 0) {
                goto done;
            }
        }
        if (PyErr_Occurred()) {
            r = -1;
            goto done;
        }
    }
    r = -1;
    if ((levels = slot_or_attr(v, v_levels_off, gs_levels)) == NULL
        || (maxkeys = slot_or_attr(v, v_maxkeys_off, gs_maxkeys)) == NULL) {
        goto done;
    }
    if (PyTuple_CheckExact(levels) && PyTuple_CheckExact(maxkeys)) {    /* zip(self.levels, self._maxkeys) */
        Py_ssize_t n = PyTuple_GET_SIZE(levels) < PyTuple_GET_SIZE(maxkeys) ? PyTuple_GET_SIZE(levels)
                                                                            : PyTuple_GET_SIZE(maxkeys);
        r = 0;
        for (Py_ssize_t i = 0; i < n && r == 0; i++) {
            r = level_get(PyTuple_GET_ITEM(levels, i), PyTuple_GET_ITEM(maxkeys, i), key, value);
        }
        goto done;
    }
    if ((ita = PyObject_GetIter(levels)) == NULL || (itb = PyObject_GetIter(maxkeys)) == NULL) {
        goto done;
    }
    for (;;) {
        PyObject *run = PyIter_Next(ita), *mk = run ? PyIter_Next(itb) : NULL;
        if (mk == NULL) {
            Py_XDECREF(run);
            r = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        r = level_get(run, mk, key, value);
        Py_DECREF(run);
        Py_DECREF(mk);
        if (r != 0) {
            goto done;
        }
    }
done:
    Py_XDECREF(l0);
    Py_XDECREF(it);
    Py_XDECREF(levels);
    Py_XDECREF(maxkeys);
    Py_XDECREF(ita);
    Py_XDECREF(itb);
    return r;
}

/* The sealed sources' part of DB.get (sources and filters exact tuples): 1 and *value, 0, -1. */
static int sealed_get(PyObject *sources, PyObject *filters, PyObject *key, PyObject **value) {
    Py_ssize_t count = PyTuple_GET_SIZE(filters), small[64];
    Py_ssize_t *pos = count <= 64 ? small : PyMem_New(Py_ssize_t, (size_t)count);
    if (pos == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int r = 0;
    Py_ssize_t n = candidates_of((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), filters, pos);
    if (n < 0) {
        r = -1;
    }
    for (Py_ssize_t j = 0; j < n && r == 0; j++) {
        if (pos[j] >= PyTuple_GET_SIZE(sources)) {
            PyErr_SetString(PyExc_IndexError, "tuple index out of range");
            r = -1;
            break;
        }
        PyObject *src = PyTuple_GET_ITEM(sources, pos[j]);
        if (Py_IS_TYPE(src, g_memtable.type)) {     /* src.data.get(key, NO_RECORD) */
            PyObject *data = gkind_same(&g_memtable) ? slot_or_attr(src, mem_data_off, gs_data)
                                                     : PyObject_GetAttr(src, gs_data);
            if (data == NULL) {
                r = -1;
            } else if (PyDict_CheckExact(data)) {
                PyObject *v = PyDict_GetItemWithError(data, key);
                if (v != NULL) {
                    *value = Py_NewRef(v);
                    r = 1;
                } else if (PyErr_Occurred()) {
                    r = -1;
                }
            } else {
                PyObject *v = PyObject_CallMethod(data, "get", "OO", key, g_no_record);
                if (v == NULL) {
                    r = -1;
                } else if (v != g_no_record) {
                    *value = v;
                    r = 1;
                } else {
                    Py_DECREF(v);
                }
            }
            Py_XDECREF(data);
            continue;
        }
        Py_INCREF(src);
        int c = in_range(src, plain_table(src), key);
        r = c <= 0 ? c : t_get(src, key, 1, value);
        Py_DECREF(src);
    }
    if (pos != small) {
        PyMem_Free(pos);
    }
    return r;
}

/* Make the exception (et, ev, tb) the __context__ of the one being raised (an error while
   handling it, as Python's except block chains it). Steals the three. */
static void chain_context(PyObject *et, PyObject *ev, PyObject *tb) {
    PyObject *t2, *v2, *tb2;
    PyErr_NormalizeException(&et, &ev, &tb);
    if (tb != NULL && ev != NULL) {
        PyException_SetTraceback(ev, tb);
    }
    PyErr_Fetch(&t2, &v2, &tb2);
    PyErr_NormalizeException(&t2, &v2, &tb2);
    if (v2 != NULL && ev != NULL) {
        PyException_SetContext(v2, ev);     /* steals ev */
        ev = NULL;
    }
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    PyErr_Restore(t2, v2, tb2);
}

/* db_get(db, key) -> the value, None, NO_RECORD (not the common case: nothing was done, DB.get's
   Python runs) or RETRY (the view changed under an ObjectMissingError: DB.get calls itself). */
static PyObject *db_get(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "db_get(db, key)");
        return NULL;
    }
    if (!get_ready) {
        PyErr_SetString(PyExc_RuntimeError, "dkv.format._native: get_setup() was not called");
        return NULL;
    }
    PyObject *db = args[0], *key = args[1], *res = NULL, *closed = NULL, *active = NULL, *data = NULL, *view = NULL,
        *probe = NULL, *value = NULL;
    if (!PyBytes_CheckExact(key) || PyBytes_GET_SIZE(key) == 0) {
        return Py_NewRef(g_no_record);
    }
    /* Until the sealed sources are read nothing changes: an attribute that cannot be read, or
       is not the common case, hands over (DB.get's Python reads it again and raises). */
    if ((closed = PyObject_GetAttr(db, gs_closed)) == NULL || closed != Py_False
        || (active = PyObject_GetAttr(db, gs_active)) == NULL || !Py_IS_TYPE(active, g_memtable.type)
        || !gkind_same(&g_memtable) || (data = *(PyObject **)((char *)active + mem_data_off)) == NULL
        || !PyDict_CheckExact(data)) {
        goto hand_over;
    }
    PyObject *v = PyDict_GetItemWithError(data, key);
    if (v != NULL || PyErr_Occurred()) {
        res = Py_XNewRef(v);
        goto done;
    }
    if ((view = PyObject_GetAttr(db, gs_view)) == NULL || !PyTuple_CheckExact(view) || PyTuple_GET_SIZE(view) != 2
        || !PyTuple_CheckExact(PyTuple_GET_ITEM(view, 0))) {
        goto hand_over;
    }
    PyObject *sources = PyTuple_GET_ITEM(view, 0), *version = PyTuple_GET_ITEM(view, 1);
    if (PyTuple_GET_SIZE(sources) > 0) {
        if ((probe = PyObject_GetAttr(db, gs_probe)) == NULL || !PyTuple_CheckExact(probe)
            || PyTuple_GET_SIZE(probe) != 2 || PyTuple_GET_ITEM(probe, 0) != sources
            || !PyTuple_CheckExact(PyTuple_GET_ITEM(probe, 1))) {
            goto hand_over;
        }
        int r = sealed_get(sources, PyTuple_GET_ITEM(probe, 1), key, &value);
        if (r != 0) {
            res = r > 0 ? value : NULL;
            goto done;
        }
    }
    int r = v_get(version, key, &value);
    if (r > 0) {
        res = value;
    } else if (r == 0) {
        res = Py_NewRef(Py_None);
    } else if (PyErr_ExceptionMatches(g_missing)) {
        /* except ObjectMissingError: if self._view[1] is version: raise; return self.get(key) */
        PyObject *et, *ev, *tb, *now = NULL;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *cur = PyObject_GetAttr(db, gs_view);
        now = cur ? PyObject_GetItem(cur, g_one) : NULL;
        Py_XDECREF(cur);
        if (now == NULL) {
            chain_context(et, ev, tb);
        } else if (now == version) {
            PyErr_Restore(et, ev, tb);
        } else {
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
            res = Py_NewRef(g_retry);
        }
        Py_XDECREF(now);
    }
    goto done;
hand_over:
    PyErr_Clear();
    res = Py_NewRef(g_no_record);
done:
    Py_XDECREF(closed);
    Py_XDECREF(active);
    Py_XDECREF(view);
    Py_XDECREF(probe);
    return res;
}

/* A member descriptor's offset (a __slots__ member): 0, or -1 with a TypeError. */
static int member_offset(PyTypeObject *t, const char *name, Py_ssize_t *off) {
    PyObject *d = PyDict_GetItemString(t->tp_dict, name);
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)
        || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "get_setup: %s.%s is not a __slots__ member", t->tp_name, name);
        return -1;
    }
    *off = ((PyMemberDescrObject *)d)->d_member->offset;
    return 0;
}

static int gkind_setup(gkind *c, PyObject *type, const char **names, int n) {
    c->type = (PyTypeObject *)Py_NewRef(type);
    c->n = n;
    for (int i = 0; i < n; i++) {
        if ((c->names[i] = PyUnicode_InternFromString(names[i])) == NULL) {
            return -1;
        }
        PyObject *v = _PyType_Lookup(c->type, c->names[i]);
        if (v == NULL) {
            PyErr_Format(PyExc_TypeError, "get_setup: %s has no %s", c->type->tp_name, names[i]);
            return -1;
        }
        c->hooks[i] = Py_NewRef(v);
    }
    c->tag = 0;
    gkind_same(c);
    return 0;
}

/* get_setup(Memtable, Table, Delta, Version, NO_RECORD, RETRY, ObjectMissingError, _ONCE, _maybe,
   _hints, _list_get, bisect_left, bisect_right, HINT_EVERY): see dkv/_getpath.py. */
static PyObject *get_setup(PyObject *self, PyObject *args) {
    PyObject *mt, *tt, *dt, *vt, *every;
    if (get_ready) {
        PyErr_SetString(PyExc_RuntimeError, "get_setup() was called already");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!O!O!OOOOOOOOOO!", &PyType_Type, &mt, &PyType_Type, &tt, &PyType_Type, &dt,
                          &PyType_Type, &vt, &g_no_record, &g_retry, &g_missing, &g_once, &g_maybe, &g_py_hints,
                          &g_py_list_get, &g_bisect_left, &g_bisect_right, &PyLong_Type, &every)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)dt, (PyTypeObject *)tt)) {
        PyErr_SetString(PyExc_TypeError, "get_setup: Delta is not a Table");
        return NULL;
    }
    static const char *mem_hooks[] = {"data"};
    static const char *table_hooks[] = {"get", "get_probed", "_find", "owns", "min_key", "max_key", "clip_lo",
                                        "clip_hi", "_meta", "_first", "_blocks", "_ref", "_cache", "_bloom"};
    static const char *version_hooks[] = {"get", "l0", "levels", "_maxkeys"};
    if (gkind_setup(&g_memtable, mt, mem_hooks, 1) < 0 || gkind_setup(&g_table, tt, table_hooks, 14) < 0
        || gkind_setup(&g_delta, dt, table_hooks, 14) < 0 || gkind_setup(&g_version, vt, version_hooks, 4) < 0
        || member_offset((PyTypeObject *)mt, "data", &mem_data_off) < 0
        || member_offset((PyTypeObject *)vt, "l0", &v_l0_off) < 0
        || member_offset((PyTypeObject *)vt, "levels", &v_levels_off) < 0
        || member_offset((PyTypeObject *)vt, "_maxkeys", &v_maxkeys_off) < 0) {
        return NULL;
    }
    for (int i = 0; i < NT; i++) {
        if (member_offset((PyTypeObject *)tt, t_slot_names[i], &toff[i]) < 0
            || (t_slot_strs[i] = PyUnicode_InternFromString(t_slot_names[i])) == NULL) {
            return NULL;
        }
    }
#define INTERN(var, s) if ((var = PyUnicode_InternFromString(s)) == NULL) return NULL
    INTERN(gs_closed, "_closed");
    INTERN(gs_active, "_active");
    INTERN(gs_view, "_view");
    INTERN(gs_probe, "_probe");
    INTERN(gs_get, "get");
    INTERN(gs_get_probed, "get_probed");
    INTERN(gs_meta, "meta");
    INTERN(gs_fetch, "_fetch");
    INTERN(gs_hits, "hits");
    INTERN(gs_data, "data");
    INTERN(gs_l0, "l0");
    INTERN(gs_levels, "levels");
    INTERN(gs_maxkeys, "_maxkeys");
#undef INTERN
    if ((g_one = PyLong_FromLong(1)) == NULL) {
        return NULL;
    }
    Py_INCREF(g_no_record);
    Py_INCREF(g_retry);
    Py_INCREF(g_missing);
    Py_INCREF(g_once);
    Py_INCREF(g_maybe);
    Py_INCREF(g_py_hints);
    Py_INCREF(g_py_list_get);
    Py_INCREF(g_bisect_left);
    Py_INCREF(g_bisect_right);
    g_every = Py_NewRef(every);
    get_ready = 1;
    Py_RETURN_NONE;
}

/* -- DB.scan in C (RFC 0012 step 4) -------------------------------------------------------
 *
 * db_scan(db, start, end) is the twin of dkv/_reads.py's DB._scan for the common case, with what
 * it calls: Memtable.scan_blocks and sorted_keys, Table.scan_blocks (Table.block, _hints and the
 * block decode of the front-coded blocks, as front_decode), Version.sources, and
 * merge_visible's paths for one source (chunk by chunk) and for a small range of several (in one
 * go: a dict, oldest source first, then sorted; tombstones dropped). scan_setup (called by
 * dkv/_scanpath.py, after get_setup) gives it the classes and functions the Python code uses.
 *
 * A DB that is not the common case gets NO_RECORD before anything was read, and DB._scan's
 * Python runs whole: an active memtable that is not an exact Memtable (with its methods and
 * slots) holding a dict, a view that is not a pair of a tuple of sources and something. Past
 * that point the C code does what the Python code does, step by step, with the same side effects:
 * the sources are iterators of the same chunks (type Blocks below, made where the Python code
 * makes its generators and started where they would start: a source reads its blocks only
 * when the merge reaches it), a block not in the cache is read by the table's Python
 * _read_ahead and _fetch, a block's restart hints are built on its second lookup. A source or
 * table of another class, or whose class's methods changed since setup (scan_blocks, block,
 * read_ahead, sorted_keys, or the get path's), and a Version of another class or with another
 * sources, has its own Python method called in its place; a format-1 block goes to the Python
 * list_chunk. When the records read pass SMALL_MERGE (read from dkv/_merge.py at each scan), the
 * rest goes to the Python merge_rest with the chunks read and the sources, as merge_visible hands
 * it over; when reading raises ObjectMissingError, the error propagates if the DB's view is still
 * the one read or the DB is closed, and otherwise the scan goes on as a new DB._scan after the last
 * key given, as DB._scan's loop does. */

enum { B_MEM, B_TABLE, B_CHAIN };
typedef struct {
    PyObject_HEAD
    int kind, state;            /* state: 0 not started, 1 after a chunk given, 2 done */
    PyObject *src;              /* the memtable or table; B_CHAIN: the list of tables */
    PyObject *start, *end;      /* the range; a table's clipped to its groups when it starts */
    PyObject *seq;              /* B_MEM: its chunks' sequence number */
    PyObject *data, *keys;      /* B_MEM: the dict read at the start, the sorted keys */
    PyObject *last;             /* B_MEM: the last key of the last chunk given */
    PyObject *first;            /* B_TABLE: the blocks' first keys */
    PyObject *cur;              /* B_CHAIN: the chunks of the current table */
    Py_ssize_t lo, hi, i, n;    /* B_MEM: lo, hi; B_TABLE: the block, the blocks; B_CHAIN: the next table */
    int stop;                   /* B_TABLE: the range ended in the last block given */
} Blocks;

static PyTypeObject BlocksType;
static gkind g_memscan, g_tscan, g_dscan, g_vscan;
static Py_ssize_t mem_view_off;
static PyObject *g_merge_dict, *g_live, *g_chunk_parts, *g_list_chunk, *g_nul, *g_minus_one;
static PyObject *gs_scan_blocks, *gs_sorted_keys, *gs_view, *gs_read_ahead, *gs_read_ahead_fn, *gs_block, *gs_small_merge,
    *gs_seq, *gs_max_seq, *gs_scan, *gs_sources, *gs_merge_rest;
static int scan_ready = 0;
#define MEM_CHUNK 4096          /* Memtable.scan_blocks' chunk */

/* A memtable whose Python scan the C code stands in for: exactly Memtable, unchanged. */
static int plain_memtable(PyObject *m) {
    return Py_IS_TYPE(m, g_memscan.type) && gkind_same(&g_memscan);
}

/* A table whose scan_blocks the C code stands in for: a plain table (see db_get) whose scan hooks
   are unchanged too. *ra: its class's read_ahead, as a truth value. */
static int scan_table(PyObject *t, int *ra) {
    PyTypeObject *tp = Py_TYPE(t);
    gkind *k = tp == g_delta.type ? &g_dscan : tp == g_table.type ? &g_tscan : NULL;
    if (k == NULL || !plain_table(t) || !gkind_same(k)) {
        return 0;
    }
    if (ra != NULL) {
        *ra = k->hooks[2] == Py_True;       /* (scan hooks: scan_blocks, block, read_ahead) */
        if (k->hooks[2] != Py_True && k->hooks[2] != Py_False) {
            return 0;
        }
    }
    return 1;
}

static PyObject *blocks_new(int kind, PyObject *src, PyObject *start, PyObject *end, PyObject *seq) {
    Blocks *b = PyObject_GC_New(Blocks, &BlocksType);
    if (b == NULL) {
        return NULL;
    }
    b->kind = kind;
    b->state = 0;
    b->src = Py_NewRef(src);
    b->start = Py_NewRef(start);
    b->end = Py_NewRef(end);
    b->seq = Py_XNewRef(seq);
    b->data = b->keys = b->last = b->first = b->cur = NULL;
    b->lo = b->hi = b->i = b->n = 0;
    b->stop = 0;
    PyObject_GC_Track(b);
    return (PyObject *)b;
}

/* sorted(keys + pending) for keys, the memtable's sorted view (Memtable's invariant: only
   sorted_keys makes it, with sorted(), and never changes it in place), and pending, the keys
   added since, lists of bytes: pending (the caller's own list) sorted in place, then the two
   merged with memcmp, which costs less than half of timsort's generic comparisons over the
   whole (the same list: a stable sort of the same bytes). 1 and *out, 0 when they are not
   such lists (nothing done), -1 with an error. */
static int merge_sorted(PyObject *keys, PyObject *pending, PyObject **out) {
    if (!PyList_CheckExact(keys) || !PyList_CheckExact(pending)) {
        return 0;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys), p = PyList_GET_SIZE(pending);
    for (Py_ssize_t j = 0; j < p; j++) {
        if (!PyBytes_CheckExact(PyList_GET_ITEM(pending, j))) {
            return 0;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_CheckExact(PyList_GET_ITEM(keys, i))) {
            return 0;
        }
    }
    PyObject *ps = pending, *lst = NULL;
    if (PyList_Sort(ps) < 0 || PyList_GET_SIZE(ps) != p || (lst = PyList_New(n + p)) == NULL) {
        return -1;
    }
    Py_ssize_t i = 0, j = 0, o = 0;
    while (i < n || j < p) {
        PyObject *a = i < n ? PyList_GET_ITEM(keys, i) : NULL, *b = j < p ? PyList_GET_ITEM(ps, j) : NULL, *x;
        if (b == NULL || (a != NULL && cmp((const unsigned char *)PyBytes_AS_STRING(a), (size_t)PyBytes_GET_SIZE(a),
                                           (const unsigned char *)PyBytes_AS_STRING(b),
                                           (size_t)PyBytes_GET_SIZE(b)) <= 0)) {
            x = a;                              /* equal keys: the earlier list's first, as a stable sort */
            i++;
        } else {
            x = b;
            j++;
        }
        PyList_SET_ITEM(lst, o++, Py_NewRef(x));
    }
    *out = lst;
    return 1;
}

/* Memtable.sorted_keys() of a plain memtable (a new reference): the view (_view: the keys in
   order and the dict's size then) as it is when no key came since; else the keys added since
   sorted and merged into it, or the view made anew (sorted(data)) when more came than it
   holds. The keys added since are the dict's entries from position `seen` on (PyDict_Next
   from there): a memtable never removes a key and a dict keeps its entries in insertion
   order. No Python code runs here, so the view is one instant's keys. Anything not of that
   shape: the Python method. */
static PyObject *mem_sorted_keys(PyObject *m) {
    if (!plain_memtable(m)) {
        return PyObject_CallMethodNoArgs(m, gs_sorted_keys);
    }
    PyObject **vp = (PyObject **)((char *)m + mem_view_off);
    PyObject *data = slot_or_attr(m, mem_data_off, gs_data), *view = NULL, *keys = NULL, *lst = NULL;
    if (data == NULL || (view = slot_or_attr(m, mem_view_off, gs_view)) == NULL) {
        Py_XDECREF(data);
        return NULL;
    }
    Py_ssize_t n = PyDict_CheckExact(data) ? PyDict_GET_SIZE(data) : -1, seen = 0;
    if (n >= 0 && view != Py_None) {
        if (PyTuple_CheckExact(view) && PyTuple_GET_SIZE(view) == 2 && PyList_CheckExact(PyTuple_GET_ITEM(view, 0))) {
            keys = PyTuple_GET_ITEM(view, 0);
            seen = PyLong_AsSsize_t(PyTuple_GET_ITEM(view, 1));
        }
        if (keys == NULL || seen < 0 || seen > n) {
            PyErr_Clear();
            n = -1;
        }
    }
    if (n < 0) {                                /* not the shape the Python keeps: its method */
        Py_DECREF(data);
        Py_DECREF(view);
        return PyObject_CallMethodNoArgs(m, gs_sorted_keys);
    }
    if (keys != NULL && seen == n) {            /* no key came since */
        lst = Py_NewRef(keys);
        Py_DECREF(data);
        Py_DECREF(view);
        return lst;
    }
    if (keys != NULL && n - seen <= seen) {     /* sorted(keys + the keys added since) */
        PyObject *pending = PyList_New(0), *k, *v;
        Py_ssize_t pos = seen;
        while (pending != NULL && PyDict_Next(data, &pos, &k, &v)) {
            if (PyList_Append(pending, k) < 0) {
                Py_CLEAR(pending);
            }
        }
        if (pending != NULL && PyList_GET_SIZE(pending) == n - seen) {
            int merged = merge_sorted(keys, pending, &lst);
            if (merged == 0) {                  /* not lists of bytes: as the Python does it */
                PyObject *cat = PyNumber_Add(keys, pending);
                if (cat != NULL) {
                    lst = PySequence_List(cat);
                    Py_DECREF(cat);
                }
                if (lst != NULL && PyList_Sort(lst) < 0) {
                    Py_CLEAR(lst);
                }
            }
        }
        if (pending == NULL) {
            Py_DECREF(data);
            Py_DECREF(view);
            return NULL;
        }
        Py_DECREF(pending);
    }
    if (lst == NULL && !PyErr_Occurred()) {     /* anew: sorted(data) */
        lst = PyDict_Keys(data);
        if (lst != NULL && PyList_Sort(lst) < 0) {
            Py_CLEAR(lst);
        }
    }
    Py_DECREF(data);
    Py_DECREF(view);
    PyObject *nv = lst != NULL ? Py_BuildValue("(On)", lst, n) : NULL;
    if (nv == NULL) {
        Py_XDECREF(lst);
        return NULL;
    }
    Py_XSETREF(*vp, nv);
    return lst;
}

/* len(o) into *n: 0 or -1. */
static int size_of(PyObject *o, Py_ssize_t *n) {
    *n = PyList_CheckExact(o) ? PyList_GET_SIZE(o) : PyObject_Size(o);
    return *n < 0 ? -1 : 0;
}

/* Memtable.scan_blocks(start, end, seq)'s next chunk: a new reference, NULL at the end (no
   error set) or with an error. */
static PyObject *mem_next(Blocks *b) {
    PyObject *m = b->src;
    if (b->state == 0) {                        /* data = self.data; if not data: return */
        b->state = 2;
        if ((b->data = PyObject_GetAttr(m, gs_data)) == NULL) {
            return NULL;
        }
        int any = PyObject_IsTrue(b->data);
        if (any <= 0 || (b->keys = mem_sorted_keys(m)) == NULL) {
            return NULL;
        }
        if (b->start != Py_None && bisect_from(b->keys, b->start, 0, 0, &b->lo) < 0) {
            return NULL;
        }
    } else if (b->state == 1) {                 /* resume after the last key given */
        b->state = 2;
        if (b->lo + MEM_CHUNK >= b->hi) {
            return NULL;
        }
        Py_SETREF(b->keys, mem_sorted_keys(m));
        if (b->keys == NULL || bisect_from(b->keys, b->last, 1, 0, &b->lo) < 0) {
            return NULL;
        }
    } else {
        return NULL;
    }
    if (b->end == Py_None) {
        if (size_of(b->keys, &b->hi) < 0) {
            return NULL;
        }
    } else if (bisect_from(b->keys, b->end, 0, b->lo, &b->hi) < 0) {
        return NULL;
    }
    if (b->lo >= b->hi) {
        return NULL;
    }
    Py_ssize_t stop = b->hi < b->lo + MEM_CHUNK ? b->hi : b->lo + MEM_CHUNK;
    PyObject *part = PyList_CheckExact(b->keys) ? PyList_GetSlice(b->keys, b->lo, stop)
                                                : PySequence_GetSlice(b->keys, b->lo, stop);
    if (part == NULL) {
        return NULL;
    }
    Py_ssize_t n;
    PyObject *values = NULL;
    if (size_of(part, &n) < 0 || (values = PyList_New(0)) == NULL) {
        goto fail;
    }
    PyObject *it = PyObject_GetIter(part), *k;     /* [data[k] for k in part] */
    if (it == NULL) {
        goto fail;
    }
    while ((k = PyIter_Next(it)) != NULL) {
        PyObject *v = NULL;
        if (PyDict_CheckExact(b->data)) {
            v = PyDict_GetItemWithError(b->data, k);
            if (v == NULL && !PyErr_Occurred()) {
                _PyErr_SetKeyError(k);
            }
            Py_XINCREF(v);
        } else {
            v = PyObject_GetItem(b->data, k);
        }
        Py_DECREF(k);
        if (v == NULL || PyList_Append(values, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(it);
            goto fail;
        }
        Py_DECREF(v);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        goto fail;
    }
    Py_XSETREF(b->last, n > 0 ? item_at(part, n - 1) : NULL);  /* part[-1], read when resumed */
    if (n > 0 && b->last == NULL) {
        goto fail;
    }
    b->state = 1;
    PyObject *chunk = PyTuple_Pack(3, part, values, b->seq);
    Py_DECREF(part);
    Py_DECREF(values);
    return chunk;
fail:
    Py_DECREF(part);
    Py_XDECREF(values);
    return NULL;
}

/* front_decode(raw, pos, lo, hi[, hints]) of a front-coded block: (keys, values, end). hints
   NULL: not passed. The walk above for the common arguments, the function for any others. */
static PyObject *block_decode(PyObject *raw, PyObject *pos, PyObject *lo, PyObject *hi, PyObject *hints) {
    Py_ssize_t p = PyLong_CheckExact(pos) ? PyLong_AsSsize_t(pos) : -1;
    if (p == -1) {
        PyErr_Clear();
    }
    if (p >= 0 && (lo == Py_None || PyBytes_CheckExact(lo)) && (hi == Py_None || PyBytes_CheckExact(hi))
        && (hints == NULL || hints == Py_None || PyBytes_Check(hints))) {
        const hint *e = NULL;
        const unsigned char *hblob = NULL;
        if (lo != Py_None && hints != NULL && pick_hint(hints, (const unsigned char *)PyBytes_AS_STRING(lo),
                                                        PyBytes_GET_SIZE(lo), &e, &hblob) < 0) {
            return NULL;
        }
        return walk((const unsigned char *)PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw), p,
                    lo == Py_None ? NULL : (const unsigned char *)PyBytes_AS_STRING(lo),
                    lo == Py_None ? 0 : PyBytes_GET_SIZE(lo),
                    hi == Py_None ? NULL : (const unsigned char *)PyBytes_AS_STRING(hi),
                    hi == Py_None ? 0 : PyBytes_GET_SIZE(hi), e, hblob);
    }
    PyObject *args = hints == NULL ? PyTuple_Pack(4, raw, pos, lo, hi) : PyTuple_Pack(5, raw, pos, lo, hi, hints);
    PyObject *r = args ? front_decode(NULL, args) : NULL;
    Py_XDECREF(args);
    return r;
}

/* The chunk of block blk (front-coded: raw bytes first) in [lo or the block's start, end): 1 and
   *chunk (keys, values, blk[2]) when it has keys, 0 when not; *stop: whether end fell inside the
   block. -1 with an error. */
static int front_chunk(PyObject *blk, PyObject *raw, PyObject *lo, PyObject *end, PyObject **chunk, int *stop) {
    int r = -1;
    PyObject *pos = item_at(blk, 1), *hints = NULL, *res = NULL, *seq = NULL;
    if (pos == NULL) {
        return -1;
    }
    if (lo != Py_None) {                        /* _hints(blk) */
        hints = PyList_CheckExact(blk) && PyList_GET_SIZE(blk) >= 3 ? hints_of(blk)
                                                                    : PyObject_CallOneArg(g_py_hints, blk);
        if (hints == NULL) {
            goto done;
        }
    }
    if ((res = block_decode(raw, pos, lo, end, hints)) == NULL) {
        goto done;
    }
    if (!PyTuple_CheckExact(res) || PyTuple_GET_SIZE(res) != 3) {
        PyErr_SetString(PyExc_TypeError, "decode() did not return (keys, values, end)");
        goto done;
    }
    PyObject *keys = PyTuple_GET_ITEM(res, 0), *values = PyTuple_GET_ITEM(res, 1);
    Py_ssize_t e = PyLong_AsSsize_t(PyTuple_GET_ITEM(res, 2));
    if (e == -1 && PyErr_Occurred()) {
        goto done;
    }
    *stop = e < 0;
    int any = PyObject_IsTrue(keys);
    if (any < 0) {
        goto done;
    }
    r = 0;
    if (any) {                                  /* yield keys, values, blk[2] */
        if ((seq = item_at(blk, 2)) == NULL || (*chunk = PyTuple_Pack(3, keys, values, seq)) == NULL) {
            r = -1;
        } else {
            r = 1;
        }
    }
done:
    Py_DECREF(pos);
    Py_XDECREF(hints);
    Py_XDECREF(res);
    Py_XDECREF(seq);
    return r;
}

/* The start of Table.scan_blocks: the range clipped, the metadata, the first block. 0 to go
   on, 1 when the range is empty, -1. */
static int table_begin(Blocks *b, PyObject *t) {
    PyObject *clip = slot_or_attr(t, toff[T_CLIP_LO], t_slot_strs[T_CLIP_LO]);
    if (clip == NULL) {
        return -1;
    }
    if (clip != Py_None) {                      /* start = max(start, clip_lo) */
        int c = b->start == Py_None ? 1 : compare(b->start, clip, Py_LT);
        if (c > 0) {
            Py_SETREF(b->start, Py_NewRef(clip));
        }
        if (c < 0) {
            Py_DECREF(clip);
            return -1;
        }
    }
    Py_DECREF(clip);
    if ((clip = slot_or_attr(t, toff[T_CLIP_HI], t_slot_strs[T_CLIP_HI])) == NULL) {
        return -1;
    }
    if (clip != Py_None) {                      /* end = min(end, clip_hi) */
        int c = b->end == Py_None ? 1 : compare(b->end, clip, Py_GT);
        if (c > 0) {
            Py_SETREF(b->end, Py_NewRef(clip));
        }
        if (c < 0) {
            Py_DECREF(clip);
            return -1;
        }
    }
    Py_DECREF(clip);
    if (b->start != Py_None && b->end != Py_None) {
        int c = compare(b->start, b->end, Py_GE);
        if (c != 0) {
            return c < 0 ? -1 : 1;
        }
    }
    PyObject *meta = slot_or_attr(t, toff[T_META], t_slot_strs[T_META]);
    if (meta == NULL) {
        return -1;
    }
    if (meta == Py_None) {
        Py_SETREF(meta, PyObject_CallMethodNoArgs(t, gs_meta));
        if (meta == NULL) {
            return -1;
        }
    }
    Py_DECREF(meta);
    if ((b->first = slot_or_attr(t, toff[T_FIRST], t_slot_strs[T_FIRST])) == NULL) {
        return -1;
    }
    b->i = 0;
    if (b->start != Py_None) {                  /* max(0, bisect_right(first, start) - 1) */
        if (bisect(b->first, b->start, 1, &b->i) < 0) {
            return -1;
        }
        b->i = b->i > 0 ? b->i - 1 : 0;
    }
    return size_of(b->first, &b->n);
}

/* Table.scan_blocks(start, end)'s next chunk (a new reference; NULL at the end or with an error). */
static PyObject *table_next(Blocks *b) {
    PyObject *t = b->src;
    if (b->state == 0) {
        b->state = 2;
        if (table_begin(b, t) != 0) {
            return NULL;
        }
    } else if (b->state == 1) {                 /* after a chunk: if stop < 0: return */
        b->state = 2;
        if (b->stop) {
            return NULL;
        }
        b->i++;
    } else {
        return NULL;
    }
    for (; b->i < b->n; b->i++) {
        Py_ssize_t i = b->i;
        PyObject *fi = item_at(b->first, i), *blk = NULL, *raw = NULL, *chunk = NULL;
        int c = fi == NULL ? -1 : b->end == Py_None ? 0 : compare(fi, b->end, Py_GE);
        if (c != 0) {                           /* if first[i] >= end: return */
            Py_XDECREF(fi);
            return NULL;
        }
        /* if self._blocks[i] is None and self.read_ahead: self._read_ahead(i, end) */
        int ra = 0, plain = scan_table(t, &ra);
        PyObject *blocks = plain ? slot_or_attr(t, toff[T_BLOCKS], t_slot_strs[T_BLOCKS])
                                 : PyObject_GetAttr(t, t_slot_strs[T_BLOCKS]);
        PyObject *cached = blocks ? item_at(blocks, i) : NULL, *ix = NULL;
        Py_XDECREF(blocks);
        if (cached == NULL) {
            goto fail;
        }
        if (cached == Py_None && !plain) {
            PyObject *flag = PyObject_GetAttr(t, gs_read_ahead);
            ra = flag ? PyObject_IsTrue(flag) : -1;
            Py_XDECREF(flag);
            if (ra < 0) {
                Py_DECREF(cached);
                goto fail;
            }
        }
        if (cached == Py_None && ra) {
            PyObject *done = (ix = PyLong_FromSsize_t(i)) ? PyObject_CallMethodObjArgs(t, gs_read_ahead_fn, ix, b->end,
                                                                                        NULL) : NULL;
            if (done == NULL) {
                Py_DECREF(cached);
                Py_XDECREF(ix);
                goto fail;
            }
            Py_DECREF(done);
        }
        Py_DECREF(cached);
        if (plain) {                            /* blk = self.block(i) */
            blk = t_block(t, i);
        } else {
            blk = (ix != NULL || (ix = PyLong_FromSsize_t(i)) != NULL) ? PyObject_CallMethodOneArg(t, gs_block, ix)
                                                                         : NULL;
        }
        Py_XDECREF(ix);
        if (blk == NULL || (raw = item_at(blk, 0)) == NULL) {
            goto fail;
        }
        int got, stop = 0;
        if (PyBytes_CheckExact(raw)) {
            /* lo = start if start is not None and (i == 0 or start > first[i]) else None */
            PyObject *lo = Py_None;
            if (b->start != Py_None) {
                int after = i == 0 ? 1 : compare(b->start, fi, Py_GT);
                if (after < 0) {
                    goto fail;
                }
                lo = after ? b->start : Py_None;
            }
            got = front_chunk(blk, raw, lo, b->end, &chunk, &stop);
        } else {                                /* a format-1 block: list_chunk(blk, start, end) */
            PyObject *r = PyObject_CallFunctionObjArgs(g_list_chunk, blk, b->start, b->end, NULL);
            got = -1;
            if (r != NULL && PyTuple_CheckExact(r) && PyTuple_GET_SIZE(r) == 2) {
                stop = PyObject_IsTrue(PyTuple_GET_ITEM(r, 1));
                chunk = PyTuple_GET_ITEM(r, 0) == Py_None ? NULL : Py_NewRef(PyTuple_GET_ITEM(r, 0));
                got = stop < 0 ? -1 : chunk != NULL;
            } else if (r != NULL) {
                PyErr_SetString(PyExc_TypeError, "list_chunk() did not return (chunk, stop)");
            }
            Py_XDECREF(r);
        }
        Py_DECREF(fi);
        Py_DECREF(blk);
        Py_DECREF(raw);
        if (got < 0) {
            Py_XDECREF(chunk);
            return NULL;
        }
        if (got > 0) {
            b->stop = stop;
            b->state = 1;
            return chunk;
        }
        if (stop) {
            return NULL;
        }
        continue;
    fail:
        Py_XDECREF(fi);
        Py_XDECREF(blk);
        Py_XDECREF(raw);
        return NULL;
    }
    return NULL;
}

/* t.scan_blocks(start, end): a Blocks of a table the C code stands in for, else its own. */
static PyObject *table_source(PyObject *t, PyObject *start, PyObject *end) {
    if (scan_table(t, NULL)) {
        return blocks_new(B_TABLE, t, start, end, NULL);
    }
    return PyObject_CallMethodObjArgs(t, gs_scan_blocks, start, end, NULL);
}

/* chain.from_iterable(t.scan_blocks(start, end) for t in tables)'s next chunk. */
static PyObject *chain_next(Blocks *b) {
    for (;;) {
        if (b->cur != NULL) {
            PyObject *chunk = PyIter_Next(b->cur);
            if (chunk != NULL || PyErr_Occurred()) {
                return chunk;
            }
            Py_CLEAR(b->cur);
        }
        if (b->i >= PyList_GET_SIZE(b->src)) {
            b->state = 2;
            return NULL;
        }
        PyObject *t = Py_NewRef(PyList_GET_ITEM(b->src, b->i)), *src;
        b->i++;
        src = table_source(t, b->start, b->end);
        Py_DECREF(t);
        if (src == NULL) {
            return NULL;
        }
        b->cur = PyObject_GetIter(src);
        Py_DECREF(src);
        if (b->cur == NULL) {
            return NULL;
        }
    }
}

static PyObject *blocks_next(Blocks *b) {
    if (b->state == 2 && b->kind != B_CHAIN) {
        return NULL;
    }
    switch (b->kind) {
    case B_MEM: return mem_next(b);
    case B_TABLE: return table_next(b);
    default: return chain_next(b);
    }
}

static int blocks_traverse(Blocks *b, visitproc visit, void *arg) {
    Py_VISIT(b->src);
    Py_VISIT(b->start);
    Py_VISIT(b->end);
    Py_VISIT(b->seq);
    Py_VISIT(b->data);
    Py_VISIT(b->keys);
    Py_VISIT(b->last);
    Py_VISIT(b->first);
    Py_VISIT(b->cur);
    return 0;
}

static int blocks_clear(Blocks *b) {
    Py_CLEAR(b->src);
    Py_CLEAR(b->start);
    Py_CLEAR(b->end);
    Py_CLEAR(b->seq);
    Py_CLEAR(b->data);
    Py_CLEAR(b->keys);
    Py_CLEAR(b->last);
    Py_CLEAR(b->first);
    Py_CLEAR(b->cur);
    b->state = 2;
    return 0;
}

static void blocks_dealloc(Blocks *b) {
    PyObject_GC_UnTrack(b);
    blocks_clear(b);
    PyObject_GC_Del(b);
}

static PyTypeObject BlocksType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "dkv.format._native.Blocks",
    .tp_doc = "A source's chunks (keys, values, seqs) in a key range: the twin of Memtable.scan_blocks, "
              "Table.scan_blocks and a level's chain of them (dkv's C scan).",
    .tp_basicsize = sizeof(Blocks),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)blocks_traverse,
    .tp_clear = (inquiry)blocks_clear,
    .tp_dealloc = (destructor)blocks_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)blocks_next,
};

/* The next chunk of a source: a Blocks' directly, any other iterator's by its next. */
static PyObject *next_chunk(PyObject *it) {
    return Py_IS_TYPE(it, &BlocksType) ? blocks_next((Blocks *)it) : PyIter_Next(it);
}

/* (t.min_key < end or end is None) and (t.max_key >= start or start is None): _overlaps and
   DB._scan's test of a segment. 1, 0, -1. */
static int overlaps(PyObject *t, PyObject *start, PyObject *end) {
    int plain = plain_table(t), c = 1;
    if (end != Py_None) {
        PyObject *x = plain ? slot_or_attr(t, toff[T_MIN], t_slot_strs[T_MIN]) : PyObject_GetAttr(t, t_slot_strs[T_MIN]);
        c = x ? compare(x, end, Py_LT) : -1;
        Py_XDECREF(x);
    }
    if (c > 0 && start != Py_None) {
        PyObject *x = plain ? slot_or_attr(t, toff[T_MAX], t_slot_strs[T_MAX]) : PyObject_GetAttr(t, t_slot_strs[T_MAX]);
        c = x ? compare(x, start, Py_GE) : -1;
        Py_XDECREF(x);
    }
    return c;
}

/* Append the source of (the tables of) o to out, stealing it: 0 or -1. */
static int add_source(PyObject *out, PyObject *src) {
    if (src == NULL) {
        return -1;
    }
    int r = PyList_Append(out, src);
    Py_DECREF(src);
    return r;
}

/* One level of Version.sources: its tables from bisect_left(maxkeys, start) while min_key < end. */
static int level_sources(PyObject *out, PyObject *run, PyObject *maxkeys, PyObject *start, PyObject *end) {
    Py_ssize_t i = 0, n;
    if (start != Py_None && bisect(maxkeys, start, 0, &i) < 0) {
        return -1;
    }
    PyObject *picked = PyList_New(0);
    if (picked == NULL) {
        return -1;
    }
    for (;; i++) {
        if (size_of(run, &n) < 0) {
            goto fail;
        }
        if (i >= n) {
            break;
        }
        PyObject *t = item_at(run, i);
        if (t == NULL) {
            goto fail;
        }
        int c = 1;
        if (end != Py_None) {                   /* run[i].min_key < end */
            PyObject *x = plain_table(t) ? slot_or_attr(t, toff[T_MIN], t_slot_strs[T_MIN])
                                         : PyObject_GetAttr(t, t_slot_strs[T_MIN]);
            c = x ? compare(x, end, Py_LT) : -1;
            Py_XDECREF(x);
        }
        if (c <= 0 || PyList_Append(picked, t) < 0) {
            Py_DECREF(t);
            if (c == 0) {
                break;
            }
            goto fail;
        }
        Py_DECREF(t);
    }
    int r = 0;
    if (PyList_GET_SIZE(picked) == 1) {
        r = add_source(out, table_source(PyList_GET_ITEM(picked, 0), start, end));
    } else if (PyList_GET_SIZE(picked) > 1) {
        r = add_source(out, blocks_new(B_CHAIN, picked, start, end, NULL));
    }
    Py_DECREF(picked);
    return r;
fail:
    Py_DECREF(picked);
    return -1;
}

/* out += version.sources(start, end): 0 or -1. */
static int version_sources(PyObject *out, PyObject *v, PyObject *start, PyObject *end) {
    if (!Py_IS_TYPE(v, g_vscan.type) || !gkind_same(&g_vscan) || !gkind_same(&g_version)) {
        PyObject *more = PyObject_CallMethodObjArgs(v, gs_sources, start, end, NULL), *r;
        if (more == NULL) {
            return -1;
        }
        r = PyNumber_InPlaceAdd(out, more);     /* sources += ... */
        Py_DECREF(more);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    int r = -1;
    PyObject *l0 = slot_or_attr(v, v_l0_off, gs_l0), *it = NULL, *t, *levels = NULL, *maxkeys = NULL, *ita = NULL,
        *itb = NULL;
    if (l0 == NULL || (it = PyObject_GetIter(l0)) == NULL) {
        goto done;
    }
    while ((t = PyIter_Next(it)) != NULL) {     /* for t in self.l0: if _overlaps(t, start, end): ... */
        int c = overlaps(t, start, end);
        if (c != 0 && (c < 0 || add_source(out, table_source(t, start, end)) < 0)) {
            Py_DECREF(t);
            goto done;
        }
        Py_DECREF(t);
    }
    if (PyErr_Occurred() || (levels = slot_or_attr(v, v_levels_off, gs_levels)) == NULL
        || (maxkeys = slot_or_attr(v, v_maxkeys_off, gs_maxkeys)) == NULL || (ita = PyObject_GetIter(levels)) == NULL
        || (itb = PyObject_GetIter(maxkeys)) == NULL) {
        goto done;
    }
    for (;;) {                                  /* for run, maxkeys in zip(self.levels, self._maxkeys) */
        PyObject *run = PyIter_Next(ita), *mk = run ? PyIter_Next(itb) : NULL;
        if (mk == NULL) {
            Py_XDECREF(run);
            r = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        int c = level_sources(out, run, mk, start, end);
        Py_DECREF(run);
        Py_DECREF(mk);
        if (c < 0) {
            goto done;
        }
    }
done:
    Py_XDECREF(l0);
    Py_XDECREF(it);
    Py_XDECREF(levels);
    Py_XDECREF(maxkeys);
    Py_XDECREF(ita);
    Py_XDECREF(itb);
    return r;
}

/* -- the merge ---------------------------------------------------------------------------- */

enum { S_START, S_ONE, S_LIST, S_BIG, S_PY, S_DONE };
typedef struct {
    PyObject_HEAD
    int mode;
    PyObject *db, *start, *end, *version;
    PyObject *srcs;             /* the sources, newest first (a list) */
    PyObject *it;               /* S_ONE: the source's iterator; S_BIG: merge_rest's; S_PY: DB._scan's */
    PyObject *pairs;            /* S_ONE, S_BIG: the (key, value) iterator of a chunk that is not two lists */
    PyObject *keys, *values;    /* S_ONE, S_LIST: the chunk, or the merged records */
    PyObject *last;             /* the last key of the chunk given last: where a retry resumes */
    Py_ssize_t i, n;
} Scan;

static PyTypeObject ScanType;

static void scan_drop(Scan *s) {
    Py_CLEAR(s->srcs);
    Py_CLEAR(s->it);
    Py_CLEAR(s->pairs);
    Py_CLEAR(s->keys);
    Py_CLEAR(s->values);
}

/* A chunk's keys and values (new references): a tuple of three's, any other's by chunk_parts. */
static int parts(PyObject *chunk, PyObject **keys, PyObject **values) {
    if (PyTuple_CheckExact(chunk) && PyTuple_GET_SIZE(chunk) == 3) {
        *keys = Py_NewRef(PyTuple_GET_ITEM(chunk, 0));
        *values = Py_NewRef(PyTuple_GET_ITEM(chunk, 1));
        return 0;
    }
    PyObject *p = PyObject_CallOneArg(g_chunk_parts, chunk);
    if (p == NULL) {
        return -1;
    }
    *keys = Py_NewRef(PyTuple_GET_ITEM(p, 0));
    *values = Py_NewRef(PyTuple_GET_ITEM(p, 1));
    Py_DECREF(p);
    return 0;
}

/* Take a chunk's records to give out (S_ONE): two lists walked here, anything else through the
   Python _live. Steals keys and values. */
static int take_chunk(Scan *s, PyObject *keys, PyObject *values) {
    Py_CLEAR(s->keys);
    Py_CLEAR(s->values);
    Py_CLEAR(s->pairs);
    if (PyList_CheckExact(keys) && PyList_CheckExact(values)) {
        s->keys = keys;
        s->values = values;
        s->i = 0;
        s->n = PyList_GET_SIZE(keys) < PyList_GET_SIZE(values) ? PyList_GET_SIZE(keys) : PyList_GET_SIZE(values);
        return 0;
    }
    PyObject *live = PyObject_CallFunctionObjArgs(g_live, keys, values, NULL);
    Py_DECREF(keys);
    Py_DECREF(values);
    if (live == NULL) {
        return -1;
    }
    s->pairs = PyObject_GetIter(live);
    Py_DECREF(live);
    return s->pairs == NULL ? -1 : 0;
}

/* SMALL_MERGE as dkv/_merge.py has it now: 0 or -1. */
static int small_merge(Py_ssize_t *out) {
    PyObject *v = PyDict_GetItemWithError(g_merge_dict, gs_small_merge);
    if (v == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_NameError, "name 'SMALL_MERGE' is not defined");
        }
        return -1;
    }
    *out = PyLong_AsSsize_t(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* Whether the keys of a source's chunks (exact lists of exact bytes) ascend strictly: then
   they are what a dict of them, sorted, gives. 1, 0, -1. */
static int ascending(PyObject *chunks) {
    PyObject *prev = NULL;
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(chunks); c++) {
        PyObject *chunk = PyList_GET_ITEM(chunks, c), *keys, *values;
        if (!PyTuple_CheckExact(chunk) || PyTuple_GET_SIZE(chunk) != 3) {
            return 0;
        }
        keys = PyTuple_GET_ITEM(chunk, 0);
        values = PyTuple_GET_ITEM(chunk, 1);
        if (!PyList_CheckExact(keys) || !PyList_CheckExact(values) || PyList_GET_SIZE(keys) != PyList_GET_SIZE(values)) {
            return 0;
        }
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(keys); j++) {
            PyObject *k = PyList_GET_ITEM(keys, j);
            if (!PyBytes_CheckExact(k)) {
                return 0;
            }
            if (prev != NULL && compare(prev, k, Py_LT) != 1) {
                return 0;
            }
            prev = k;
        }
    }
    return 1;
}

/* merge_visible's small range over the chunks read (oldest source first): the live records
   in key order into s->keys and s->values (S_LIST). */
static int merge_read(Scan *s, PyObject *read) {
    PyObject *keys = PyList_New(0), *values = PyList_New(0), *only = NULL, *merged = NULL, *sorted = NULL;
    int r = -1;
    if (keys == NULL || values == NULL) {
        goto done;
    }
    Py_ssize_t with = 0;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(read); j++) {
        if (PyList_GET_SIZE(PyList_GET_ITEM(read, j)) > 0) {
            with++;
            only = PyList_GET_ITEM(read, j);
        }
    }
    int asc = with == 1 ? ascending(only) : 0;
    if (asc < 0) {
        goto done;
    }
    if (asc) {                                  /* one source: its chunks as they are */
        for (Py_ssize_t c = 0; c < PyList_GET_SIZE(only); c++) {
            PyObject *chunk = PyList_GET_ITEM(only, c), *ks = PyTuple_GET_ITEM(chunk, 0), *vs = PyTuple_GET_ITEM(chunk, 1);
            for (Py_ssize_t j = 0; j < PyList_GET_SIZE(ks); j++) {
                if (PyList_GET_ITEM(vs, j) != Py_None && (PyList_Append(keys, PyList_GET_ITEM(ks, j)) < 0
                                                          || PyList_Append(values, PyList_GET_ITEM(vs, j)) < 0)) {
                    goto done;
                }
            }
        }
        r = 0;
        goto done;
    }
    if ((merged = PyDict_New()) == NULL) {
        goto done;
    }
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(read); j++) {  /* merged.update(zip(keys, values)) */
        PyObject *chunks = PyList_GET_ITEM(read, j);
        for (Py_ssize_t c = 0; c < PyList_GET_SIZE(chunks); c++) {
            PyObject *ks, *vs;
            if (parts(PyList_GET_ITEM(chunks, c), &ks, &vs) < 0) {
                goto done;
            }
            int bad = 0;
            if (PyList_CheckExact(ks) && PyList_CheckExact(vs)) {
                for (Py_ssize_t k = 0; !bad && k < PyList_GET_SIZE(ks) && k < PyList_GET_SIZE(vs); k++) {
                    PyObject *key = Py_NewRef(PyList_GET_ITEM(ks, k)), *v = Py_NewRef(PyList_GET_ITEM(vs, k));
                    bad = PyDict_SetItem(merged, key, v) < 0;
                    Py_DECREF(key);
                    Py_DECREF(v);
                }
            } else {
                PyObject *z = PyObject_CallFunctionObjArgs((PyObject *)&PyZip_Type, ks, vs, NULL);
                bad = z == NULL || PyDict_MergeFromSeq2(merged, z, 1) < 0;
                Py_XDECREF(z);
            }
            Py_DECREF(ks);
            Py_DECREF(vs);
            if (bad) {
                goto done;
            }
        }
    }
    /* keys = sorted(merged); _live(keys, [merged[k] for k in keys]) */
    if ((sorted = PyDict_Keys(merged)) == NULL || PyList_Sort(sorted) < 0) {
        goto done;
    }
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(sorted); j++) {
        PyObject *k = PyList_GET_ITEM(sorted, j), *v = PyDict_GetItemWithError(merged, k);
        if (v == NULL) {
            if (!PyErr_Occurred()) {
                _PyErr_SetKeyError(k);
            }
            goto done;
        }
        if (v != Py_None && (PyList_Append(keys, k) < 0 || PyList_Append(values, v) < 0)) {
            goto done;
        }
    }
    r = 0;
done:
    Py_XDECREF(merged);
    Py_XDECREF(sorted);
    if (r == 0) {
        Py_XSETREF(s->keys, keys);
        Py_XSETREF(s->values, values);
        s->i = 0;
        s->n = PyList_GET_SIZE(keys);
        s->mode = S_LIST;
    } else {
        Py_XDECREF(keys);
        Py_XDECREF(values);
    }
    return r;
}

/* merge_visible over several sources: read them, oldest first, while they hold at most
   SMALL_MERGE records (then S_LIST), or hand the rest to merge_rest (S_BIG). 0 or -1. */
static int merge_several(Scan *s) {
    Py_ssize_t small, total = 0, n = PyList_GET_SIZE(s->srcs);
    PyObject *olds = NULL, *read = NULL;
    int r = -1;
    if (small_merge(&small) < 0 || (olds = PyList_GetSlice(s->srcs, 0, n)) == NULL || PyList_Reverse(olds) < 0
        || (read = PyList_New(0)) == NULL) {
        goto done;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *chunks = PyList_New(0), *it, *chunk;
        if (chunks == NULL || PyList_Append(read, chunks) < 0) {
            Py_XDECREF(chunks);
            goto done;
        }
        Py_DECREF(chunks);
        if ((it = PyObject_GetIter(PyList_GET_ITEM(olds, j))) == NULL) {
            goto done;
        }
        while ((chunk = next_chunk(it)) != NULL) {
            PyObject *ks = PyTuple_CheckExact(chunk) && PyTuple_GET_SIZE(chunk) > 0
                               ? Py_NewRef(PyTuple_GET_ITEM(chunk, 0)) : item_at(chunk, 0);
            Py_ssize_t len;
            int bad = PyList_Append(chunks, chunk) < 0 || ks == NULL || size_of(ks, &len) < 0;
            Py_XDECREF(ks);
            Py_DECREF(chunk);
            if (bad) {
                Py_DECREF(it);
                goto done;
            }
            total += len;
            if (total > small) {                /* a big range: the rest a key range at a time */
                Py_DECREF(it);
                PyObject *rest = PyDict_GetItemWithError(g_merge_dict, gs_merge_rest);
                if (rest == NULL && !PyErr_Occurred()) {
                    PyErr_SetString(PyExc_NameError, "name 'merge_rest' is not defined");
                }
                s->it = rest ? PyObject_CallFunctionObjArgs(rest, read, olds, NULL) : NULL;
                if (s->it == NULL) {
                    goto done;
                }
                s->mode = S_BIG;
                r = 0;
                goto done;
            }
        }
        Py_DECREF(it);
        if (PyErr_Occurred()) {
            goto done;
        }
    }
    r = merge_read(s, read);
done:
    Py_XDECREF(olds);
    Py_XDECREF(read);
    return r;
}

/* DB._scan's except ObjectMissingError (the error is set): raise it if the view is still the one
   read or the DB is closed, else go on as a new DB._scan after the last key given (S_PY). */
static int retry(Scan *s) {
    PyObject *et, *ev, *tb, *view = NULL, *now = NULL, *closed = NULL, *from = NULL;
    PyErr_Fetch(&et, &ev, &tb);
    int same = -1;
    if ((view = PyObject_GetAttr(s->db, gs_view)) != NULL && (now = PyObject_GetItem(view, g_one)) != NULL) {
        same = now == s->version;
        if (!same && (closed = PyObject_GetAttr(s->db, gs_closed)) != NULL) {
            same = PyObject_IsTrue(closed);
        } else if (!same) {
            same = -1;
        }
    }
    Py_XDECREF(view);
    Py_XDECREF(now);
    Py_XDECREF(closed);
    if (same < 0) {
        chain_context(et, ev, tb);
        return -1;
    }
    if (same) {
        PyErr_Restore(et, ev, tb);
        return -1;
    }
    /* if last is not None: start = last + b"\x00" */
    from = s->last != NULL ? PyNumber_Add(s->last, g_nul) : Py_NewRef(s->start);
    if (from == NULL) {
        chain_context(et, ev, tb);
        return -1;
    }
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    scan_drop(s);
    s->mode = S_PY;
    s->it = PyObject_CallMethodObjArgs(s->db, gs_scan, from, s->end, NULL);
    Py_DECREF(from);
    if (s->it == NULL) {
        s->mode = S_DONE;
        return -1;
    }
    return 0;
}

/* After an error of the reading: retry on an ObjectMissingError (0: go on), else -1. */
static int read_failed(Scan *s) {
    if (PyErr_ExceptionMatches(g_missing)) {
        return retry(s);
    }
    s->mode = S_DONE;
    return -1;
}

/* merge_visible's step over a chunk of its one source (stolen): for keys, values, _ in source:
   if keys: give its live records, with keys[-1] as where a retry resumes. 0 or -1. */
static int one_chunk(Scan *s, PyObject *chunk) {
    PyObject *ks, *vs, *last = NULL;
    int r = parts(chunk, &ks, &vs);
    Py_DECREF(chunk);
    if (r < 0) {
        return -1;
    }
    int any = PyList_CheckExact(ks) ? PyList_GET_SIZE(ks) > 0 : PyObject_IsTrue(ks);
    if (any > 0) {
        last = PyList_CheckExact(ks) ? Py_NewRef(PyList_GET_ITEM(ks, PyList_GET_SIZE(ks) - 1))
                                     : PyObject_GetItem(ks, g_minus_one);
    }
    if (any <= 0 || last == NULL) {
        Py_DECREF(ks);
        Py_DECREF(vs);
        return any == 0 ? 0 : -1;
    }
    Py_XSETREF(s->last, last);
    return take_chunk(s, ks, vs);
}

/* merge_rest's step (item stolen): for pairs, last in merge_rest(...): give pairs. 0 or -1. */
static int big_range(Scan *s, PyObject *item) {
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
        Py_DECREF(item);
        PyErr_SetString(PyExc_TypeError, "merge_rest() did not give (pairs, last)");
        return -1;
    }
    Py_XSETREF(s->last, Py_NewRef(PyTuple_GET_ITEM(item, 1)));
    s->pairs = PyObject_GetIter(PyTuple_GET_ITEM(item, 0));
    Py_DECREF(item);
    return s->pairs == NULL ? -1 : 0;
}

static PyObject *scan_next(Scan *s) {
    for (;;) {
        switch (s->mode) {
        case S_START: {
            Py_ssize_t n = PyList_GET_SIZE(s->srcs);
            if (n == 0) {
                s->mode = S_DONE;
                break;
            }
            if (n == 1) {
                s->it = PyObject_GetIter(PyList_GET_ITEM(s->srcs, 0));
                s->mode = S_ONE;
                if (s->it == NULL && read_failed(s) < 0) {
                    return NULL;
                }
                break;
            }
            if (merge_several(s) < 0 && read_failed(s) < 0) {
                return NULL;
            }
            break;
        }
        case S_ONE:
        case S_LIST:
        case S_BIG: {
            if (s->pairs != NULL) {
                PyObject *p = PyIter_Next(s->pairs);
                if (p != NULL) {
                    return p;
                }
                if (PyErr_Occurred()) {
                    if (read_failed(s) < 0) {
                        return NULL;
                    }
                    break;
                }
                Py_CLEAR(s->pairs);
            }
            while (s->i < s->n) {               /* the live records of the chunk */
                PyObject *k = PyList_GET_ITEM(s->keys, s->i), *v = PyList_GET_ITEM(s->values, s->i);
                s->i++;
                if (v != Py_None) {
                    return PyTuple_Pack(2, k, v);
                }
            }
            if (s->mode == S_LIST) {
                s->mode = S_DONE;
                break;
            }
            PyObject *item = s->mode == S_ONE ? next_chunk(s->it) : PyIter_Next(s->it);
            if (item == NULL) {
                if (!PyErr_Occurred()) {
                    s->mode = S_DONE;
                } else if (read_failed(s) < 0) {
                    return NULL;
                }
                break;
            }
            if (s->mode == S_ONE ? one_chunk(s, item) < 0 : big_range(s, item) < 0) {
                if (read_failed(s) < 0) {
                    return NULL;
                }
            }
            break;
        }
        case S_PY:
            return PyIter_Next(s->it);
        default:
            return NULL;
        }
    }
}

static int scan_traverse(Scan *s, visitproc visit, void *arg) {
    Py_VISIT(s->db);
    Py_VISIT(s->start);
    Py_VISIT(s->end);
    Py_VISIT(s->version);
    Py_VISIT(s->srcs);
    Py_VISIT(s->it);
    Py_VISIT(s->pairs);
    Py_VISIT(s->keys);
    Py_VISIT(s->values);
    Py_VISIT(s->last);
    return 0;
}

static int scan_clear(Scan *s) {
    scan_drop(s);
    Py_CLEAR(s->db);
    Py_CLEAR(s->start);
    Py_CLEAR(s->end);
    Py_CLEAR(s->version);
    Py_CLEAR(s->last);
    s->mode = S_DONE;
    return 0;
}

static void scan_dealloc(Scan *s) {
    PyObject_GC_UnTrack(s);
    scan_clear(s);
    PyObject_GC_Del(s);
}

static PyTypeObject ScanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "dkv.format._native.Scan",
    .tp_doc = "The (key, value) records of a DB's key range: the twin of DB._scan's loop (db_scan).",
    .tp_basicsize = sizeof(Scan),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)scan_traverse,
    .tp_clear = (inquiry)scan_clear,
    .tp_dealloc = (destructor)scan_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)scan_next,
};

/* The sources of DB._scan, newest first, into out: the active memtable's (data: its dict,
   already known to be a dict), the sealed ones', the version's. 0 or -1. */
static int db_sources(PyObject *out, PyObject *db, PyObject *active, PyObject *data, PyObject *immutable,
                      PyObject *version, PyObject *start, PyObject *end) {
    if (PyDict_GET_SIZE(data) > 0) {            /* [active.scan_blocks(start, end, self._seq + 1)] */
        PyObject *seq = PyObject_GetAttr(db, gs_seq), *next = seq ? PyNumber_Add(seq, g_one) : NULL;
        Py_XDECREF(seq);
        if (next == NULL || add_source(out, blocks_new(B_MEM, active, start, end, next)) < 0) {
            Py_XDECREF(next);
            return -1;
        }
        Py_DECREF(next);
    }
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(immutable); j++) {
        PyObject *src = PyTuple_GET_ITEM(immutable, j);
        int r;
        if (Py_IS_TYPE(src, g_memscan.type)) {  /* src.scan_blocks(start, end, src.max_seq) */
            PyObject *ms = PyObject_GetAttr(src, gs_max_seq);
            if (ms == NULL) {
                return -1;
            }
            r = add_source(out, plain_memtable(src) ? blocks_new(B_MEM, src, start, end, ms)
                                                    : PyObject_CallMethodObjArgs(src, gs_scan_blocks, start, end,
                                                                                 ms, NULL));
            Py_DECREF(ms);
        } else {
            Py_INCREF(src);
            r = overlaps(src, start, end);
            if (r > 0) {
                r = add_source(out, table_source(src, start, end));
            }
            Py_DECREF(src);
        }
        if (r < 0) {
            return -1;
        }
    }
    return version_sources(out, version, start, end);
}

/* db_scan(db, start, end) -> an iterator of the (key, value) records of [start, end) (start and
   end non-empty bytes or None, start < end: DB.scan checked them), or NO_RECORD: not the common
   case, nothing was done, and DB._scan's Python runs. */
static PyObject *db_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "db_scan(db, start, end)");
        return NULL;
    }
    if (!scan_ready) {
        PyErr_SetString(PyExc_RuntimeError, "dkv.format._native: scan_setup() was not called");
        return NULL;
    }
    PyObject *db = args[0], *start = args[1], *end = args[2], *active = NULL, *view = NULL, *srcs = NULL;
    Scan *s = NULL;
    if ((start != Py_None && !PyBytes_CheckExact(start)) || (end != Py_None && !PyBytes_CheckExact(end))) {
        return Py_NewRef(g_no_record);
    }
    /* Until the sources are made nothing changes: an attribute that cannot be read, or is not the
       common case, hands over (DB._scan's Python reads it again and raises). */
    PyObject *data;
    if ((active = PyObject_GetAttr(db, gs_active)) == NULL || !plain_memtable(active)
        || (data = *(PyObject **)((char *)active + mem_data_off)) == NULL || !PyDict_CheckExact(data)
        || (view = PyObject_GetAttr(db, gs_view)) == NULL || !PyTuple_CheckExact(view) || PyTuple_GET_SIZE(view) != 2
        || !PyTuple_CheckExact(PyTuple_GET_ITEM(view, 0))) {
        PyErr_Clear();
        Py_XDECREF(active);
        Py_XDECREF(view);
        return Py_NewRef(g_no_record);
    }
    PyObject *version = PyTuple_GET_ITEM(view, 1);
    if ((srcs = PyList_New(0)) == NULL
        || db_sources(srcs, db, active, data, PyTuple_GET_ITEM(view, 0), version, start, end) < 0
        || (s = PyObject_GC_New(Scan, &ScanType)) == NULL) {
        goto done;
    }
    s->mode = S_START;
    s->db = Py_NewRef(db);
    s->start = Py_NewRef(start);
    s->end = Py_NewRef(end);
    s->version = Py_NewRef(version);
    s->srcs = Py_NewRef(srcs);
    s->it = s->pairs = s->keys = s->values = s->last = NULL;
    s->i = s->n = 0;
    PyObject_GC_Track(s);
done:
    Py_XDECREF(active);
    Py_XDECREF(view);
    Py_XDECREF(srcs);
    return (PyObject *)s;
}

/* scan_setup(Memtable, Table, Delta, Version, _merge.__dict__, _live, chunk_parts, list_chunk): see
   dkv/_scanpath.py. After get_setup. */
static PyObject *scan_setup(PyObject *self, PyObject *args) {
    PyObject *mt, *tt, *dt, *vt;
    if (scan_ready) {
        PyErr_SetString(PyExc_RuntimeError, "scan_setup() was called already");
        return NULL;
    }
    if (!get_ready) {
        PyErr_SetString(PyExc_RuntimeError, "scan_setup() needs get_setup() first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!OOO", &PyType_Type, &mt, &PyType_Type, &tt, &PyType_Type, &dt,
                          &PyType_Type, &vt, &PyDict_Type, &g_merge_dict, &g_live, &g_chunk_parts, &g_list_chunk)) {
        return NULL;
    }
    if (mt != (PyObject *)g_memtable.type || tt != (PyObject *)g_table.type || dt != (PyObject *)g_delta.type
        || vt != (PyObject *)g_version.type) {
        PyErr_SetString(PyExc_TypeError, "scan_setup: not the classes get_setup was given");
        return NULL;
    }
    static const char *mem_hooks[] = {"data", "_view", "max_seq", "sorted_keys", "scan_blocks"};
    static const char *tscan_hooks[] = {"scan_blocks", "block", "read_ahead"};
    static const char *vscan_hooks[] = {"sources", "l0", "levels", "_maxkeys"};
    if (gkind_setup(&g_memscan, mt, mem_hooks, 5) < 0 || gkind_setup(&g_tscan, tt, tscan_hooks, 3) < 0
        || gkind_setup(&g_dscan, dt, tscan_hooks, 3) < 0 || gkind_setup(&g_vscan, vt, vscan_hooks, 4) < 0
        || member_offset((PyTypeObject *)mt, "_view", &mem_view_off) < 0) {
        return NULL;
    }
#define INTERN(var, s) if ((var = PyUnicode_InternFromString(s)) == NULL) return NULL
    INTERN(gs_scan_blocks, "scan_blocks");
    INTERN(gs_sorted_keys, "sorted_keys");
    INTERN(gs_view, "_view");
    INTERN(gs_read_ahead, "read_ahead");
    INTERN(gs_read_ahead_fn, "_read_ahead");
    INTERN(gs_block, "block");
    INTERN(gs_small_merge, "SMALL_MERGE");
    INTERN(gs_seq, "_seq");
    INTERN(gs_max_seq, "max_seq");
    INTERN(gs_scan, "_scan");
    INTERN(gs_sources, "sources");
    INTERN(gs_merge_rest, "merge_rest");
#undef INTERN
    if ((g_nul = PyBytes_FromStringAndSize("\0", 1)) == NULL || (g_minus_one = PyLong_FromLong(-1)) == NULL) {
        return NULL;
    }
    Py_INCREF(g_merge_dict);
    Py_INCREF(g_live);
    Py_INCREF(g_chunk_parts);
    Py_INCREF(g_list_chunk);
    scan_ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"encode", front_encode, METH_VARARGS, "Front-code sorted keys and their values (None: tombstone)."},
    {"decode", front_decode, METH_VARARGS, "(keys, values, end) of front-coded records at pos in [lo, hi) (with index() hints)."},
    {"find", front_find, METH_VARARGS, "(found, value) of one key in front-coded records (with index() hints)."},
    {"index", front_index, METH_VARARGS, "Restart hints of front-coded records, every n-th record (in memory only)."},
    {"bloom_hashes", (PyCFunction)(void (*)(void))bloom_hashes, METH_FASTCALL, "Two CRC-32s per bloom entry (8 bytes an entry) for bloom_build_hashed."},
    {"bloom_build_hashed", bloom_build_hashed, METH_VARARGS, "The bit array of a bloom filter from bloom_hashes."},
    {"bloom_build", bloom_build, METH_VARARGS, "The bit array of a bloom filter over keys (m bits, k probes)."},
    {"bloom_check", (PyCFunction)(void (*)(void))bloom_check, METH_FASTCALL, "Whether key may be in the filter."},
    {"bloom_candidates", (PyCFunction)(void (*)(void))bloom_candidates, METH_FASTCALL, "Positions of the filters that may hold key (None: any)."},
    {"db_get", (PyCFunction)(void (*)(void))db_get, METH_FASTCALL, "DB.get for the common case (NO_RECORD: DB.get's Python; RETRY: again)."},
    {"get_setup", get_setup, METH_VARARGS, "get_setup(...): the classes and functions db_get stands in for (dkv/_getpath.py)."},
    {"db_scan", (PyCFunction)(void (*)(void))db_scan, METH_FASTCALL, "DB._scan for the common case: an iterator of its records (NO_RECORD: DB._scan's Python)."},
    {"scan_setup", scan_setup, METH_VARARGS, "scan_setup(...): the classes and functions db_scan stands in for (dkv/_scanpath.py)."},
    {"block_ends", block_ends, METH_VARARGS, "Where the blocks of a blocked WAL segment end (None: the Python twin)."},
    {"merge_runs", merge_runs, METH_VARARGS, "(keys, values) of sorted runs merged, the newest run's value of a key (None: the Python twin)."},
    {"batch_bounds", batch_bounds, METH_O, "(least key, greatest key) of a WriteBatch's records (None: min() and max())."},
    {"batch_extend", batch_extend, METH_VARARGS, "WriteBatch.extend's checks and append, for records of exact types (-1: others)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init();
    if (PyType_Ready(&BlocksType) < 0 || PyType_Ready(&ScanType) < 0) {
        return NULL;
    }
    return PyModule_Create(&module);
}
