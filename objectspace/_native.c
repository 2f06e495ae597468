/* objectspace's native value codec: the C twin of objectspace/_codec.py's msgpack codec
 * (RFC 0012), the same bytes and the same values for what it handles, the Python codec for
 * everything else.
 *
 * encode(value) -> bytes: msgpack as ``msgpack.Packer(default=_codec._default,
 * strict_types=True, use_bin_type=True).pack(value)`` writes it, for values made of None,
 * bool, int (64-bit), float, str, bytes, list and dict (exact types), and datetimes that
 * are naive or UTC with year >= 256 (objectspace's ext 4, the payload _codec._build_datetime
 * builds). Any other value (a tuple, a set, a Decimal, a subclass, a registered type, a
 * numpy scalar, a bigger int, a zoned datetime, nesting deeper than MAX_DEPTH, a str that
 * does not encode as UTF-8) anywhere inside: the whole value goes to the Python codec.
 *
 * decode(data) -> value: ``msgpack.unpackb(data, ext_hook=_codec._ext_hook,
 * strict_map_key=False, raw=False)`` for data made of nil, bool, int, float, str, bin,
 * array, map and objectspace's datetime ext (naive or UTC); anything else (another ext,
 * malformed or trailing bytes, an unhashable map key, a date out of range, nesting deeper
 * than MAX_DEPTH) goes to the Python codec, which returns the value or raises its error.
 *
 * So the C codec never decides an error: what it does not handle exactly, Python does.
 * tests/objectspace/test_native_codec.py holds both to the same bytes and values. Neither
 * function runs Python code of the caller's types (exact types only), so nothing can change
 * a value while it is encoded.
 *
 * Besides the codec, the C twins of the save path (RFC 0012 step 2), of the reload of a handle
 * and the cache's eviction (step 3) and of a slot sequence's walk of its items from the store
 * (step 4), each in its own section below.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 64        /* below msgpack's own limits (511 to pack, 1024 to unpack) */
#define UNSUPPORTED 1       /* pack(): the value needs the Python codec */

static PyObject *py_encode = NULL, *py_decode = NULL;  /* the Python codec (setup()) */
static int ext_datetime = -1;                           /* objectspace's datetime ext code */

/* -- encode ------------------------------------------------------------------------------- */

typedef struct {
    unsigned char *p;
    Py_ssize_t len, cap;
} buf;

static int grow(buf *b, Py_ssize_t need) {
    if (b->len + need <= b->cap) {
        return 0;
    }
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + need) {
        cap *= 2;
    }
    unsigned char *q = PyMem_Realloc(b->p, (size_t)cap);
    if (q == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = q;
    b->cap = cap;
    return 0;
}

static int put(buf *b, const void *data, Py_ssize_t n) {
    if (grow(b, n) < 0) {
        return -1;
    }
    memcpy(b->p + b->len, data, (size_t)n);
    b->len += n;
    return 0;
}

static int put1(buf *b, unsigned char c) {
    return put(b, &c, 1);
}

/* A byte and an n-byte big-endian unsigned integer. */
static int put_be(buf *b, unsigned char head, uint64_t v, int n) {
    unsigned char t[9];
    t[0] = head;
    for (int i = 0; i < n; i++) {
        t[n - i] = (unsigned char)(v >> (8 * i));
    }
    return put(b, t, n + 1);
}

/* Integers as msgpack's packer writes them: the smallest form; positive values unsigned. */
static int put_uint(buf *b, uint64_t d) {
    if (d < 0x80) {
        return put1(b, (unsigned char)d);
    }
    if (d <= 0xff) {
        return put_be(b, 0xcc, d, 1);
    }
    if (d <= 0xffff) {
        return put_be(b, 0xcd, d, 2);
    }
    if (d <= 0xffffffffULL) {
        return put_be(b, 0xce, d, 4);
    }
    return put_be(b, 0xcf, d, 8);
}

static int put_int(buf *b, int64_t d) {
    if (d >= 0) {
        return put_uint(b, (uint64_t)d);
    }
    if (d >= -32) {
        return put1(b, (unsigned char)(int8_t)d);
    }
    if (d >= -128) {
        return put_be(b, 0xd0, (uint64_t)d, 1);
    }
    if (d >= -32768) {
        return put_be(b, 0xd1, (uint64_t)d, 2);
    }
    if (d >= -2147483648LL) {
        return put_be(b, 0xd2, (uint64_t)d, 4);
    }
    return put_be(b, 0xd3, (uint64_t)d, 8);
}

/* Header of a str (fix, 8, 16, 32), bin (8, 16, 32), array or map (fix, 16, 32). */
static int put_len(buf *b, Py_ssize_t n, unsigned char fix, Py_ssize_t fix_max, unsigned char h8,
                   unsigned char h16, unsigned char h32) {
    if (n <= fix_max) {
        return put1(b, (unsigned char)(fix | n));
    }
    if (h8 && n <= 0xff) {
        return put_be(b, h8, (uint64_t)n, 1);
    }
    if (n <= 0xffff) {
        return put_be(b, h16, (uint64_t)n, 2);
    }
    if ((uint64_t)n <= 0xffffffffULL) {
        return put_be(b, h32, (uint64_t)n, 4);
    }
    return UNSUPPORTED;     /* msgpack refuses it: Python raises the error */
}

static int put_ext_head(buf *b, Py_ssize_t n, int code) {
    int r;
    switch (n) {
    case 1: r = put1(b, 0xd4); break;
    case 2: r = put1(b, 0xd5); break;
    case 4: r = put1(b, 0xd6); break;
    case 8: r = put1(b, 0xd7); break;
    case 16: r = put1(b, 0xd8); break;
    default:
        r = n <= 0xff ? put_be(b, 0xc7, (uint64_t)n, 1)
          : n <= 0xffff ? put_be(b, 0xc8, (uint64_t)n, 2) : put_be(b, 0xc9, (uint64_t)n, 4);
    }
    return r < 0 ? r : put1(b, (unsigned char)(int8_t)code);
}

/* objectspace's datetime ext for a naive or UTC datetime of year >= 256, as
   _codec._build_datetime makes it: [year, month, day, hour, minute, second, microsecond,
   offset (nil: naive; 0: UTC), fold] with a uint16 year. */
static int put_datetime(buf *b, PyObject *o) {
    PyObject *tz = PyDateTime_DATE_GET_TZINFO(o);
    int year = PyDateTime_GET_YEAR(o);
    if ((tz != Py_None && tz != PyDateTime_TimeZone_UTC) || year < 256) {
        return UNSUPPORTED;
    }
    unsigned char t[16];
    int n = 0, us = PyDateTime_DATE_GET_MICROSECOND(o);
    t[n++] = 0x99;
    t[n++] = 0xcd;
    t[n++] = (unsigned char)(year >> 8);
    t[n++] = (unsigned char)year;
    t[n++] = (unsigned char)PyDateTime_GET_MONTH(o);
    t[n++] = (unsigned char)PyDateTime_GET_DAY(o);
    t[n++] = (unsigned char)PyDateTime_DATE_GET_HOUR(o);
    t[n++] = (unsigned char)PyDateTime_DATE_GET_MINUTE(o);
    t[n++] = (unsigned char)PyDateTime_DATE_GET_SECOND(o);
    if (us < 128) {
        t[n++] = (unsigned char)us;
    } else if (us < 256) {
        t[n++] = 0xcc;
        t[n++] = (unsigned char)us;
    } else if (us < 65536) {
        t[n++] = 0xcd;
        t[n++] = (unsigned char)(us >> 8);
        t[n++] = (unsigned char)us;
    } else {
        t[n++] = 0xce;
        t[n++] = (unsigned char)(us >> 24);
        t[n++] = (unsigned char)(us >> 16);
        t[n++] = (unsigned char)(us >> 8);
        t[n++] = (unsigned char)us;
    }
    t[n++] = tz == Py_None ? 0xc0 : 0x00;
    t[n++] = PyDateTime_DATE_GET_FOLD(o) ? 0x01 : 0x00;
    int r = put_ext_head(b, n, ext_datetime);
    return r < 0 ? r : put(b, t, n);
}

/* 0, -1 (an exception: out of memory), or UNSUPPORTED. */
static int pack(buf *b, PyObject *o, int depth) {
    if (depth > MAX_DEPTH) {
        return UNSUPPORTED;
    }
    if (o == Py_None) {
        return put1(b, 0xc0);
    }
    if (o == Py_True) {
        return put1(b, 0xc3);
    }
    if (o == Py_False) {
        return put1(b, 0xc2);
    }
    PyTypeObject *t = Py_TYPE(o);
    if (t == &PyLong_Type) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow == 0) {
            if (v == -1 && PyErr_Occurred()) {
                return -1;
            }
            return put_int(b, v);
        }
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(o);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return UNSUPPORTED;     /* past 64 bits: the Python codec's bigint ext */
            }
            return put_uint(b, u);
        }
        return UNSUPPORTED;
    }
    if (t == &PyUnicode_Type) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL) {
            PyErr_Clear();              /* a lone surrogate: Python raises msgpack's error */
            return UNSUPPORTED;
        }
        int r = put_len(b, n, 0xa0, 31, 0xd9, 0xda, 0xdb);
        return r ? r : put(b, s, n);
    }
    if (t == &PyFloat_Type) {
        double d = PyFloat_AS_DOUBLE(o);
        uint64_t bits;
        memcpy(&bits, &d, 8);
        return put_be(b, 0xcb, bits, 8);
    }
    if (t == &PyBytes_Type) {
        Py_ssize_t n = PyBytes_GET_SIZE(o);
        int r = put_len(b, n, 0, -1, 0xc4, 0xc5, 0xc6);
        return r ? r : put(b, PyBytes_AS_STRING(o), n);
    }
    if (t == &PyList_Type) {
        Py_ssize_t n = PyList_GET_SIZE(o);
        int r = put_len(b, n, 0x90, 15, 0, 0xdc, 0xdd);
        for (Py_ssize_t i = 0; r == 0 && i < n; i++) {
            r = pack(b, PyList_GET_ITEM(o, i), depth + 1);
        }
        return r;
    }
    if (t == &PyDict_Type) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        int r = put_len(b, PyDict_GET_SIZE(o), 0x80, 15, 0, 0xde, 0xdf);
        while (r == 0 && PyDict_Next(o, &pos, &k, &v)) {
            r = pack(b, k, depth + 1);
            if (r == 0) {
                r = pack(b, v, depth + 1);
            }
        }
        return r;
    }
    if (t == PyDateTimeAPI->DateTimeType && ext_datetime >= 0) {
        return put_datetime(b, o);
    }
    return UNSUPPORTED;
}

static PyObject *encode(PyObject *self, PyObject *value) {
    buf b = {NULL, 0, 0};
    int r = pack(&b, value, 0);
    PyObject *out = NULL;
    if (r == 0) {
        out = PyBytes_FromStringAndSize((const char *)b.p, b.len);
    } else if (r == UNSUPPORTED) {
        out = py_encode ? PyObject_CallOneArg(py_encode, value) : NULL;
        if (py_encode == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "objectspace._native: setup() was not called");
        }
    }
    PyMem_Free(b.p);
    return out;
}

/* -- decode ------------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *p;
    Py_ssize_t len, pos;
} reader;

static int take(reader *r, Py_ssize_t n, const unsigned char **out) {
    if (n < 0 || r->len - r->pos < n) {
        return -1;
    }
    *out = r->p + r->pos;
    r->pos += n;
    return 0;
}

static int be(reader *r, int n, uint64_t *v) {
    const unsigned char *s;
    if (take(r, n, &s) < 0) {
        return -1;
    }
    uint64_t x = 0;
    for (int i = 0; i < n; i++) {
        x = (x << 8) | s[i];
    }
    *v = x;
    return 0;
}

static PyObject *unpack(reader *r, int depth);

/* Caches of what rows repeat: the str keys of maps ("user", "ts", ...: msgpack's unpacker
   interns them, which costs a hash and a lookup each) and the datetimes of ext payloads
   (the Python codec memoises those by their bytes too, 4,096 of them: rows read back share
   their datetime objects, whose hash -- a zoned one's costs a call of utcoffset -- is then
   computed once, e.g. by the output's conversion to Arrow). Direct-mapped by a hash of the
   bytes; an entry holds a reference to its object. Equal bytes give an equal object, so a
   hit changes no value. */
#define KEY_SLOTS 256
#define DT_SLOTS 4096
#define CACHE_BYTES 24
typedef struct {
    Py_ssize_t len;
    unsigned char data[CACHE_BYTES];
    PyObject *obj;
} cached;
static cached key_cache[KEY_SLOTS], dt_cache[DT_SLOTS];

static size_t slot_of(const unsigned char *s, Py_ssize_t n, size_t slots) {
    uint32_t h = 2166136261u;           /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) {
        h = (h ^ s[i]) * 16777619u;
    }
    return h % slots;
}

static PyObject *cache_get(cached *c, const unsigned char *s, Py_ssize_t n) {
    if (c->obj != NULL && c->len == n && memcmp(c->data, s, (size_t)n) == 0) {
        return Py_NewRef(c->obj);
    }
    return NULL;
}

static void cache_put(cached *c, const unsigned char *s, Py_ssize_t n, PyObject *obj) {
    Py_XSETREF(c->obj, Py_NewRef(obj));
    c->len = n;
    memcpy(c->data, s, (size_t)n);
}

/* A map key: a short str from the cache, else unpack() (a str key interned, as msgpack's
   unpacker does). */
static PyObject *unpack_key(reader *r, int depth) {
    const unsigned char *at = r->p + r->pos;
    if (r->pos < r->len && (*at & 0xe0) == 0xa0) {
        Py_ssize_t n = *at & 0x1f;
        if (n <= CACHE_BYTES && r->len - r->pos - 1 >= n) {
            cached *c = &key_cache[slot_of(at + 1, n, KEY_SLOTS)];
            PyObject *k = cache_get(c, at + 1, n);
            if (k == NULL) {
                k = PyUnicode_DecodeUTF8((const char *)at + 1, n, NULL);
                if (k == NULL) {
                    return NULL;
                }
                PyUnicode_InternInPlace(&k);
                cache_put(c, at + 1, n, k);
            }
            r->pos += 1 + n;
            return k;
        }
    }
    PyObject *k = unpack(r, depth);
    if (k != NULL && PyUnicode_CheckExact(k)) {
        PyUnicode_InternInPlace(&k);
    }
    return k;
}

static PyObject *unpack_array(reader *r, uint64_t n, int depth) {
    if (n > (uint64_t)(r->len - r->pos)) {
        return NULL;                    /* each item takes a byte at least */
    }
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (list == NULL) {
        return NULL;
    }
    for (uint64_t i = 0; i < n; i++) {
        PyObject *item = unpack(r, depth + 1);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

static PyObject *unpack_map(reader *r, uint64_t n, int depth) {
    if (n > (uint64_t)(r->len - r->pos) / 2) {
        return NULL;
    }
    PyObject *d = PyDict_New();
    if (d == NULL) {
        return NULL;
    }
    for (uint64_t i = 0; i < n; i++) {
        PyObject *k = unpack_key(r, depth + 1);
        if (k == NULL) {
            Py_DECREF(d);
            return NULL;
        }
        PyObject *v = unpack(r, depth + 1);
        if (v == NULL || PyDict_SetItem(d, k, v) < 0) {  /* unhashable key: Python's error */
            Py_DECREF(k);
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(v);
    }
    return d;
}

/* An exact int that fits a C int into *out. */
static int small_int(PyObject *o, int *out) {
    if (!PyLong_CheckExact(o)) {
        return -1;
    }
    long v = PyLong_AsLong(o);
    if ((v == -1 && PyErr_Occurred()) || v < INT_MIN || v > INT_MAX) {
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* The payload as the encoders write it for a naive or UTC datetime: 0x99, a uint16 year,
   five fixints, the microsecond (fixint, uint8, uint16 or uint32), nil or 0, and the fold
   (0 or 1). 0 with the fields in v[] (v[7]: 1 for UTC), -1 for any other layout. */
static int datetime_fields(const unsigned char *s, Py_ssize_t n, int v[9]) {
    if (n < 12 || s[0] != 0x99 || s[1] != 0xcd) {
        return -1;
    }
    v[0] = s[2] << 8 | s[3];
    for (int i = 0; i < 5; i++) {
        if (s[4 + i] >= 0x80) {
            return -1;
        }
        v[1 + i] = s[4 + i];
    }
    Py_ssize_t at = 9, w;
    unsigned char c = s[at++];
    if (c < 0x80) {
        v[6] = c;
        w = 0;
    } else if (c == 0xcc) {
        w = 1;
    } else if (c == 0xcd) {
        w = 2;
    } else if (c == 0xce) {
        w = 4;
    } else {
        return -1;
    }
    if (n != at + w + 2) {
        return -1;
    }
    if (w) {
        uint32_t x = 0;
        for (Py_ssize_t i = 0; i < w; i++) {
            x = x << 8 | s[at + i];
        }
        if (x > INT_MAX) {
            return -1;
        }
        v[6] = (int)x;
        at += w;
    }
    if ((s[at] != 0xc0 && s[at] != 0x00) || s[at + 1] > 1) {
        return -1;
    }
    v[7] = s[at] == 0x00;
    v[8] = s[at + 1];
    return 0;
}

/* objectspace's datetime ext (payload: [y, mo, d, h, mi, s, us, offset, fold]) when naive
   (offset nil) or UTC (offset 0); NULL otherwise (the Python codec decides). */
static PyObject *unpack_datetime(const unsigned char *data, Py_ssize_t n, int depth) {
    int v[9];
    if (n <= CACHE_BYTES && datetime_fields(data, n, v) == 0) {
        cached *c = &dt_cache[slot_of(data, n, DT_SLOTS)];
        PyObject *o = cache_get(c, data, n);
        if (o == NULL) {
            o = PyDateTimeAPI->DateTime_FromDateAndTimeAndFold(v[0], v[1], v[2], v[3], v[4], v[5], v[6],
                                                               v[7] ? PyDateTime_TimeZone_UTC : Py_None, v[8],
                                                               PyDateTimeAPI->DateTimeType);
            if (o != NULL) {
                cache_put(c, data, n, o);
            }
        }
        return o;
    }
    reader sub = {data, n, 0};
    PyObject *f = unpack(&sub, depth + 1), *out = NULL;
    if (f == NULL) {
        return NULL;
    }
    if (sub.pos == n && PyList_CheckExact(f) && PyList_GET_SIZE(f) == 9) {
        PyObject *tz = PyList_GET_ITEM(f, 7);
        int ok = 1;
        for (int i = 0; ok && i < 9; i++) {
            ok = i == 7 || small_int(PyList_GET_ITEM(f, i), &v[i]) == 0;
        }
        if (ok && tz != Py_None) {
            ok = small_int(tz, &v[7]) == 0 && v[7] == 0;
            tz = PyDateTime_TimeZone_UTC;
        }
        if (ok) {
            out = PyDateTimeAPI->DateTime_FromDateAndTimeAndFold(v[0], v[1], v[2], v[3], v[4], v[5], v[6], tz, v[8],
                                                                 PyDateTimeAPI->DateTimeType);
        }
    }
    Py_DECREF(f);
    return out;
}

/* A new reference, or NULL (with or without an exception) when the Python codec decides. */
static PyObject *unpack(reader *r, int depth) {
    const unsigned char *s;
    uint64_t n;
    if (depth > MAX_DEPTH || take(r, 1, &s) < 0) {
        return NULL;
    }
    unsigned char c = *s;
    if (c < 0x80) {
        return PyLong_FromLong(c);
    }
    if (c >= 0xe0) {
        return PyLong_FromLong((int8_t)c);
    }
    if ((c & 0xe0) == 0xa0) {
        n = c & 0x1f;
        goto str;
    }
    if ((c & 0xf0) == 0x90) {
        return unpack_array(r, c & 0x0f, depth);
    }
    if ((c & 0xf0) == 0x80) {
        return unpack_map(r, c & 0x0f, depth);
    }
    switch (c) {
    case 0xc0: Py_RETURN_NONE;
    case 0xc2: Py_RETURN_FALSE;
    case 0xc3: Py_RETURN_TRUE;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        if (be(r, 1 << (c - 0xcc), &n) < 0) {
            return NULL;
        }
        return PyLong_FromUnsignedLongLong(n);
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        int w = 1 << (c - 0xd0);
        if (be(r, w, &n) < 0) {
            return NULL;
        }
        int64_t v = w == 8 ? (int64_t)n : w == 4 ? (int32_t)n : w == 2 ? (int16_t)n : (int8_t)n;
        return PyLong_FromLongLong(v);
    }
    case 0xca: {
        float f;
        uint32_t bits;
        if (be(r, 4, &n) < 0) {
            return NULL;
        }
        bits = (uint32_t)n;
        memcpy(&f, &bits, 4);
        return PyFloat_FromDouble((double)f);
    }
    case 0xcb: {
        double d;
        if (be(r, 8, &n) < 0) {
            return NULL;
        }
        memcpy(&d, &n, 8);
        return PyFloat_FromDouble(d);
    }
    case 0xd9: case 0xda: case 0xdb:
        if (be(r, 1 << (c - 0xd9), &n) < 0) {
            return NULL;
        }
        goto str;
    case 0xc4: case 0xc5: case 0xc6:
        if (be(r, 1 << (c - 0xc4), &n) < 0 || take(r, (Py_ssize_t)n, &s) < 0) {
            return NULL;
        }
        return PyBytes_FromStringAndSize((const char *)s, (Py_ssize_t)n);
    case 0xdc: case 0xdd:
        if (be(r, c == 0xdc ? 2 : 4, &n) < 0) {
            return NULL;
        }
        return unpack_array(r, n, depth);
    case 0xde: case 0xdf:
        if (be(r, c == 0xde ? 2 : 4, &n) < 0) {
            return NULL;
        }
        return unpack_map(r, n, depth);
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        n = (uint64_t)1 << (c - 0xd4);
        goto ext;
    case 0xc7: case 0xc8: case 0xc9:
        if (be(r, 1 << (c - 0xc7), &n) < 0) {
            return NULL;
        }
        goto ext;
    default:
        return NULL;                    /* 0xc1 (never used) */
    }
str:
    if (take(r, (Py_ssize_t)n, &s) < 0) {
        return NULL;
    }
    return PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, NULL);
ext: {
        const unsigned char *code;
        if (take(r, 1, &code) < 0 || take(r, (Py_ssize_t)n, &s) < 0 || (int8_t)*code != ext_datetime) {
            return NULL;
        }
        return unpack_datetime(s, (Py_ssize_t)n, depth);
    }
}

static PyObject *decode(PyObject *self, PyObject *data) {
    Py_buffer view;
    PyObject *out = NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) == 0) {
        reader r = {view.buf, view.len, 0};
        out = unpack(&r, 0);
        if (out != NULL && r.pos != r.len) {     /* trailing bytes: msgpack's ExtraData */
            Py_CLEAR(out);
        }
        PyBuffer_Release(&view);
    }
    if (out == NULL) {
        PyErr_Clear();
        if (py_decode == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "objectspace._native: setup() was not called");
            return NULL;
        }
        out = PyObject_CallOneArg(py_decode, data);
    }
    return out;
}

/* -- the save path of slot sequences (RFC 0012 step 2) -------------------------------------
 *
 * The C twin of what ObjectSpace.save and on_saved do for each touched list, queue, stack
 * and array in the common case: PersistedObject._collect and SlotSequence._collect_items
 * (collect), SlotSequence._promote (promote), SlotSequence._confirm with on_saved's
 * bookkeeping and ObjectCache.clean (confirm). The state stays in the Python objects: these
 * functions read and write their __slots__ through the member descriptors' offsets
 * (save_setup()), so every Python method that reads the state (unsaved(), TTL, reads,
 * writes) is unchanged. An object is handled here only when its type is one registered at
 * setup whose hooks are still the ones it had then (checked again whenever the type's
 * version tag changes: a monkeypatched or subclassed hook goes to Python), and its state is
 * the common case: not a full save, no index entry or stale keys to write (F_INDEX,
 * F_REPLACE), not a format-1 object, plain ints, sets and dicts where the Python code has
 * them. Every other object, and any object whose values do not all encode (the Python
 * collector then raises its EncodingError, from scratch: the records this one had added
 * are removed first), goes to its own Python method, in its place in the order, so the
 * records and their order are the Python path's. The Python code stays the reference:
 * tests/objectspace/test_native_save.py holds the two to the same records and states. */

#define F_INDEX 1
#define F_META 2
#define F_REPLACE 4

enum { X_SPACE, X_NKEY, X_ITEMS, X_CODEC, X_FLAGS, X_PFLAGS, X_LISTED, X_DEAD, X_MSAVED, X_MLAST,
       X_MHEAD, X_OLD, X_VALS, X_DIRTY, X_PENDING, X_HEAD, X_TAIL, X_LO, X_HI, X_SNAP, X_COMPLETE, X_MAXLEN,
       X_ENCODE, X_PNAME, X_ISUMS, X_VERSION, X_CNAME, NFIELDS };
static const char *field_names[NFIELDS] = {
    "_space", "_nkey", "_items", "_codec", "_flags", "_pflags", "_listed", "_dead", "_msaved", "_mlast",
    "_mhead", "_old", "_vals", "_dirty", "_pending", "_head", "_tail", "_lo", "_hi", "_snap", "_complete",
    "_maxlen", "encode", "_pname", "_isums", "_version", "name"};
static Py_ssize_t offs[NFIELDS];

#define GET(o, x) (*(PyObject **)((char *)(o) + offs[x]))

/* Set a slot to v (a new reference, stolen). */
static void set_steal(PyObject *o, int x, PyObject *v) {
    PyObject **p = (PyObject **)((char *)o + offs[x]);
    Py_XSETREF(*p, v);
}

static void set_ref(PyObject *o, int x, PyObject *v) {
    Py_XINCREF(v);
    set_steal(o, x, v);
}

/* The hooks whose Python code the functions below stand in for, per registered type. */
enum { H_COLLECT, H_COLLECT_ITEMS, H_META, H_PROMOTE, H_CONFIRM, H_EVICT, H_MEM_ESTIMATE, H_HAS_META,
       H_HANDLE_BYTES, H_EVICT_CLEAN, NHOOKS };
static const char *hook_names[NHOOKS] = {"_collect", "_collect_items", "_meta", "_promote", "_confirm", "_evict",
                                         "_mem_estimate", "has_meta", "_handle_bytes", "_evict_clean"};
enum { C_PRESSED, C_CLEAN, C_ACCOUNT, NCHOOKS };
static const char *cache_hook_names[NCHOOKS] = {"pressed", "clean", "_account"};

typedef struct {
    PyTypeObject *type;
    int shape;                  /* metadata: 1 [tail], 2 [head, tail], 3 [head, tail, maxlen] */
    int nhooks;
    PyObject **names;
    PyObject *hooks[NHOOKS];    /* what the type's attributes were at setup (references) */
    unsigned int tag;           /* the type's version tag when last checked (0: check) */
    int ok;                     /* its hooks were the same then */
} checked;

#define MAX_KINDS 8
static checked kinds[MAX_KINDS];
static int nkinds = 0;
static checked cache_kind;
static PyObject *hook_strs[NHOOKS], *cache_hook_strs[NCHOOKS];
static PyObject *no_slots = NULL, *native_encode = NULL, *codec_type = NULL;
static PyObject *s_collect, *s_promote, *s_confirm, *s_evict, *s_clean, *s_add, *s_cevict, *s_move_to_end,
    *s_nbytes, *s_budget, *s_item_bytes, *s_lru, *s_heavy, *s_cost, *s_pressed, *s_drop_saved;
static int save_ready = 0;

/* Whether c's type still has the attributes it had at setup. O(1) while its version tag
   stays (any assignment to the type or a base changes it). */
static int still_same(checked *c) {
    PyTypeObject *t = c->type;
    if (c->tag && (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && t->tp_version_tag == c->tag) {
        return c->ok;
    }
    int ok = 1;
    for (int i = 0; i < c->nhooks; i++) {
        if (_PyType_Lookup(t, c->names[i]) != c->hooks[i]) {
            ok = 0;
        }
    }
    c->ok = ok;
    c->tag = (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? t->tp_version_tag : 0;
    return ok;
}

static checked *kind_of(PyObject *o) {
    PyTypeObject *t = Py_TYPE(o);
    for (int i = 0; i < nkinds; i++) {
        if (kinds[i].type == t) {
            return still_same(&kinds[i]) ? &kinds[i] : NULL;
        }
    }
    return NULL;
}

/* 0 and *v for an exact int of 64 bits; 1 otherwise (no exception left). */
static int as_i64(PyObject *o, long long *v) {
    if (o == NULL || !PyLong_CheckExact(o)) {
        return 1;
    }
    int overflow;
    *v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (*v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

static int anyset_exact(PyObject *o) {
    return o != NULL && (PySet_CheckExact(o) || PyFrozenSet_CheckExact(o));
}

/* items prefix + 8-byte big-endian slot (_layout.slot_key). */
static PyObject *slot_key(PyObject *ip, unsigned long long s) {
    Py_ssize_t n = PyBytes_GET_SIZE(ip);
    PyObject *k = PyBytes_FromStringAndSize(NULL, n + 8);
    if (k == NULL) {
        return NULL;
    }
    char *p = PyBytes_AS_STRING(k);
    memcpy(p, PyBytes_AS_STRING(ip), (size_t)n);
    for (int i = 7; i >= 0; i--) {
        p[n + i] = (char)(s & 0xff);
        s >>= 8;
    }
    return k;
}

/* Appends (key, value) to out; steals both (value NULL: None). 0 or -1. */
static int append_rec(PyObject *out, PyObject *key, PyObject *value) {
    if (key == NULL) {
        Py_XDECREF(value);
        return -1;
    }
    if (value == NULL) {
        value = Py_NewRef(Py_None);
    }
    PyObject *t = PyTuple_New(2);
    if (t == NULL) {
        Py_DECREF(key);
        Py_DECREF(value);
        return -1;
    }
    PyTuple_SET_ITEM(t, 0, key);
    PyTuple_SET_ITEM(t, 1, value);
    int r = PyList_Append(out, t);
    Py_DECREF(t);
    return r;
}

/* A value's record bytes through the object's codec: the C codec inline when that is the
   codec's encode, else the codec's own function. */
static PyObject *encode_value(PyObject *enc, PyObject *v, buf *b) {
    if (enc == native_encode) {
        b->len = 0;
        int r = pack(b, v, 0);
        if (r == 0) {
            return PyBytes_FromStringAndSize((const char *)b->p, b->len);
        }
        if (r < 0) {
            return NULL;
        }
        return PyObject_CallOneArg(py_encode, v);
    }
    return PyObject_CallOneArg(enc, v);
}

typedef struct {
    long long v;
    PyObject *o;
} slot_t;

static int slot_cmp(const void *a, const void *b) {
    long long x = ((const slot_t *)a)->v, y = ((const slot_t *)b)->v;
    return (x > y) - (x < y);
}

/* Gathers the int slots of set s into arr from *n on. 0, or 1 for a slot that is not a
   64-bit int. Takes references. */
static int gather_one(PyObject *key, slot_t *arr, Py_ssize_t *n) {
    long long v;
    if (as_i64(key, &v) || v < 0) {
        return 1;
    }
    Py_INCREF(key);
    arr[*n].v = v;
    arr[*n].o = key;
    (*n)++;
    return 0;
}

static int gather(PyObject *s, slot_t *arr, Py_ssize_t *n) {
#if PY_VERSION_HEX < 0x030D0000
    Py_ssize_t pos = 0;
    PyObject *key;
    Py_hash_t hash;
    while (_PySet_NextEntry(s, &pos, &key, &hash)) {    /* no iterator object: sets are small */
        if (gather_one(key, arr, n)) {
            return 1;
        }
    }
    return 0;
#else   /* 3.13 made _PySet_NextEntry internal: the public iterator */
    PyObject *it = PyObject_GetIter(s), *key;
    int r = 0;
    if (it == NULL) {
        PyErr_Clear();
        return 1;
    }
    while (r == 0 && (key = PyIter_Next(it)) != NULL) {
        r = gather_one(key, arr, n);
        Py_DECREF(key);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        r = 1;
    }
    return r;
#endif
}

typedef struct {
    PyObject *codec, *enc;      /* the last codec seen and its encode function */
} codec_memo;

/* PersistedObject._collect(out, False) with SlotSequence._collect_items for an object of a
   registered kind: 0 (its records appended), or 1: not the common case, or a failure (no
   exception left; the caller removes what was appended and calls the Python collector). */
static int collect_one(checked *k, PyObject *o, PyObject *out, buf *b, codec_memo *cm) {
    long long fl, pf, head, tail, lo, hi;
    if (as_i64(GET(o, X_FLAGS), &fl) || as_i64(GET(o, X_PFLAGS), &pf) || GET(o, X_OLD) != Py_False) {
        return 1;
    }
    long long f = fl | pf;
    if (f & (F_INDEX | F_REPLACE)) {
        return 1;
    }
    PyObject *ip = GET(o, X_ITEMS), *vals = GET(o, X_VALS), *dirty = GET(o, X_DIRTY);
    PyObject *pending = GET(o, X_PENDING), *codec = GET(o, X_CODEC);
    if (ip == NULL || !PyBytes_CheckExact(ip) || PyBytes_GET_SIZE(ip) < 1 || vals == NULL || !PyDict_CheckExact(vals)
        || !anyset_exact(dirty) || !anyset_exact(pending) || codec == NULL
        || as_i64(GET(o, X_HEAD), &head) || as_i64(GET(o, X_TAIL), &tail) || as_i64(GET(o, X_LO), &lo)
        || as_i64(GET(o, X_HI), &hi) || head < 0 || tail < 0 || lo < 0 || hi < 0) {
        return 1;
    }
    if (f & F_META) {
        PyObject *mhead = GET(o, X_MHEAD);
        PyObject *m[3] = {GET(o, X_HEAD), GET(o, X_TAIL), k->shape == 3 ? GET(o, X_MAXLEN) : NULL};
        if (mhead == NULL || !PyBytes_CheckExact(mhead) || (k->shape == 3 && (m[2] == NULL || !PyLong_CheckExact(m[2])))) {
            return 1;
        }
        b->len = 0;
        int r = put(b, PyBytes_AS_STRING(mhead), PyBytes_GET_SIZE(mhead));
        r = r ? r : put1(b, (unsigned char)(0x90 | k->shape));
        if (k->shape == 1) {
            r = r ? r : pack(b, m[1], 0);
        } else {
            for (int i = 0; i < k->shape && r == 0; i++) {
                r = pack(b, m[i], 0);
            }
        }
        if (r) {
            PyErr_Clear();
            return 1;
        }
        PyObject *packed = PyBytes_FromStringAndSize((const char *)b->p, b->len);
        if (packed == NULL) {
            PyErr_Clear();
            return 1;
        }
        set_ref(o, X_MLAST, packed);
        PyObject *msaved = GET(o, X_MSAVED);
        int same = msaved != NULL && PyBytes_CheckExact(msaved) && PyBytes_GET_SIZE(msaved) == b->len
                   && memcmp(PyBytes_AS_STRING(msaved), b->p, (size_t)b->len) == 0;
        if (!same || (pf & F_META)) {
            Py_ssize_t n = PyBytes_GET_SIZE(ip);         /* _ns + META: _items with its last byte 0 */
            PyObject *key = PyBytes_FromStringAndSize(PyBytes_AS_STRING(ip), n);
            if (key != NULL) {
                PyBytes_AS_STRING(key)[n - 1] = 0;     /* _layout.META */
            }
            if (append_rec(out, key, packed) < 0) {
                PyErr_Clear();
                return 1;
            }
        } else {
            Py_DECREF(packed);
        }
    }
    if (lo < head || tail < hi) {           /* stored slots outside [head, tail): delete them */
        long long end = head < hi ? head : hi;
        for (long long s = lo; s < end; s++) {
            if (append_rec(out, slot_key(ip, (unsigned long long)s), NULL) < 0) {
                PyErr_Clear();
                return 1;
            }
        }
        for (long long s = tail > lo ? tail : lo; s < hi; s++) {
            if (append_rec(out, slot_key(ip, (unsigned long long)s), NULL) < 0) {
                PyErr_Clear();
                return 1;
            }
        }
    }
    Py_ssize_t nd = PySet_GET_SIZE(dirty), np = PySet_GET_SIZE(pending), n = 0;
    if (nd + np == 0) {
        return 0;
    }
    if (codec != cm->codec) {
        PyObject *enc = Py_IS_TYPE(codec, (PyTypeObject *)codec_type) ? Py_XNewRef(GET(codec, X_ENCODE))
                                                                      : PyObject_GetAttrString(codec, "encode");
        if (enc == NULL) {
            PyErr_Clear();
            return 1;
        }
        Py_XSETREF(cm->enc, enc);
        Py_INCREF(codec);
        Py_XSETREF(cm->codec, codec);
    }
    PyObject *enc = cm->enc;
    slot_t small[8], *arr = nd + np <= 8 ? small : PyMem_Malloc(sizeof(slot_t) * (size_t)(nd + np));
    if (arr == NULL) {
        PyErr_Clear();
        return 1;
    }
    int res = gather(dirty, arr, &n) || (np && gather(pending, arr, &n));
    if (!res && n > 1) {
        if (n <= 8) {                   /* insertion sort: a batch dirties a few slots */
            for (Py_ssize_t i = 1; i < n; i++) {
                slot_t x = arr[i];
                Py_ssize_t j = i;
                for (; j > 0 && arr[j - 1].v > x.v; j--) {
                    arr[j] = arr[j - 1];
                }
                arr[j] = x;
            }
        } else {
            qsort(arr, (size_t)n, sizeof(slot_t), slot_cmp);
        }
    }
    Py_INCREF(vals);
    Py_INCREF(ip);
    for (Py_ssize_t i = 0; !res && i < n; i++) {
        long long s = arr[i].v;
        if ((i && s == arr[i - 1].v) || s < head || s >= tail) {
            continue;                   /* in both sets, or outside [head, tail) */
        }
        PyObject *v = PyDict_GetItemWithError(vals, arr[i].o);
        if (v == NULL) {
            res = 1;                    /* Python raises the KeyError */
            break;
        }
        Py_INCREF(v);
        PyObject *raw = encode_value(enc, v, b);
        Py_DECREF(v);
        if (raw == NULL || append_rec(out, slot_key(ip, (unsigned long long)s), raw) < 0) {
            res = 1;
        }
    }
    if (res) {
        PyErr_Clear();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_DECREF(arr[i].o);
    }
    if (arr != small) {
        PyMem_Free(arr);
    }
    Py_DECREF(vals);
    Py_DECREF(ip);
    return res;
}

/* collect(objs, out) -> the objects handed to their Python collector. */
static PyObject *save_collect(PyObject *self, PyObject *args) {
    PyObject *objs, *out;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &objs, &PyList_Type, &out)) {
        return NULL;
    }
    if (!save_ready) {
        PyErr_SetString(PyExc_RuntimeError, "objectspace._native: save_setup() was not called");
        return NULL;
    }
    PyObject *slow = PyList_New(0);
    if (slow == NULL) {
        return NULL;
    }
    buf b = {NULL, 0, 0};
    codec_memo cm = {NULL, NULL};
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objs); i++) {
        PyObject *o = Py_NewRef(PyList_GET_ITEM(objs, i));
        Py_ssize_t n0 = PyList_GET_SIZE(out);
        checked *k = kind_of(o);
        if (k == NULL || collect_one(k, o, out, &b, &cm)) {
            PyObject *r = NULL;
            if ((PyList_GET_SIZE(out) == n0 || PyList_SetSlice(out, n0, PY_SSIZE_T_MAX, NULL) == 0)
                && PyList_Append(slow, o) == 0) {
                r = PyObject_CallMethodObjArgs(o, s_collect, out, Py_False, NULL);
            }
            if (r == NULL) {
                Py_DECREF(o);
                Py_CLEAR(slow);
                break;
            }
            Py_DECREF(r);
        }
        Py_DECREF(o);
    }
    PyMem_Free(b.p);
    Py_XDECREF(cm.codec);
    Py_XDECREF(cm.enc);
    return slow;
}

/* SlotSequence._promote: 0, or 1 (not the common case: nothing changed). */
static int promote_one(PyObject *o) {
    PyObject *flags = GET(o, X_FLAGS), *pflags = GET(o, X_PFLAGS), *dirty = GET(o, X_DIRTY);
    PyObject *pending = GET(o, X_PENDING), *head = GET(o, X_HEAD), *tail = GET(o, X_TAIL), *hi = GET(o, X_HI);
    if (flags == NULL || !PyLong_CheckExact(flags) || pflags == NULL || !PyLong_CheckExact(pflags)
        || !anyset_exact(dirty) || !anyset_exact(pending) || head == NULL || tail == NULL
        || !PyLong_CheckExact(tail) || hi == NULL || !PyLong_CheckExact(hi)) {
        return 1;
    }
    int merge = PySet_GET_SIZE(pending) > 0;
    if (merge && !(PySet_CheckExact(pending) && PySet_CheckExact(dirty))) {
        return 1;
    }
    PyObject *nf = PyNumber_Or(pflags, flags);
    PyObject *snap = PyTuple_Pack(2, head, tail);
    int grow = PyObject_RichCompareBool(tail, hi, Py_GT);
    if (nf == NULL || snap == NULL || grow < 0) {
        Py_XDECREF(nf);
        Py_XDECREF(snap);
        PyErr_Clear();
        return 1;
    }
    set_steal(o, X_PFLAGS, nf);
    set_steal(o, X_FLAGS, PyLong_FromLong(0));
    if (merge) {
        PyObject *r = PyNumber_InPlaceOr(pending, dirty);    /* pending |= dirty (the same set) */
        if (r == NULL) {
            PyErr_Clear();          /* out of memory: what Python's |= would raise */
        }
        Py_XDECREF(r);
        PySet_Clear(dirty);
    } else {
        Py_INCREF(dirty);
        Py_INCREF(pending);
        set_steal(o, X_PENDING, dirty);
        set_steal(o, X_DIRTY, pending);
    }
    set_steal(o, X_SNAP, snap);
    if (grow) {
        set_ref(o, X_HI, tail);
    }
    return 0;
}

static PyObject *save_promote(PyObject *self, PyObject *objs) {
    if (!PyList_Check(objs)) {
        PyErr_SetString(PyExc_TypeError, "promote() takes a list");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objs); i++) {
        PyObject *o = Py_NewRef(PyList_GET_ITEM(objs, i));
        if (kind_of(o) == NULL || promote_one(o)) {
            PyObject *r = PyObject_CallMethodNoArgs(o, s_promote);
            if (r == NULL) {
                Py_DECREF(o);
                return NULL;
            }
            Py_DECREF(r);
        }
        Py_DECREF(o);
    }
    Py_RETURN_NONE;
}

/* What confirm() needs of the cache. nb is the cache's nbytes as last read or written here:
   valid until Python code runs (forget() after every call into Python). */
typedef struct {
    PyObject *cache;
    int inl;                                    /* an exact ObjectCache with its own methods */
    PyObject *lru, *heavy, *cost, *item_bytes, *budget, *nb;
    int drop;                                   /* its drop_saved (read by save_confirm) */
} cache_ctx;

static PyObject *odict_move_to_end = NULL;      /* OrderedDict.move_to_end (the method descriptor) */

static void forget(cache_ctx *c) {
    Py_CLEAR(c->nb);
}

/* The budget is exceeded: the cache's own _evict() (Python, or its C twin through it), after
   which what this context read of the cache is stale (forget). 0 or -1. */
static int evict_now(cache_ctx *c) {
    PyObject *r = PyObject_CallMethodNoArgs(c->cache, s_cevict);
    forget(c);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

static PyObject *call_method1(PyObject *o, PyObject *name, PyObject *arg) {
    PyObject *args[2] = {o, arg};
    return PyObject_VectorcallMethod(name, args, (arg ? 2 : 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* od.move_to_end(key): the method itself for an exact OrderedDict (no lookup per call). */
static int move_to_end(PyObject *od, PyObject *key) {
    PyObject *args[2] = {od, key}, *r;
    if (PyODict_CheckExact(od) && odict_move_to_end != NULL) {
        r = PyObject_Vectorcall(odict_move_to_end, args, 2, NULL);
    } else {
        r = PyObject_VectorcallMethod(s_move_to_end, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* The cache's nbytes (borrowed), or NULL (an exception). */
static PyObject *nbytes_of(cache_ctx *c) {
    if (c->nb == NULL) {
        c->nb = PyObject_GetAttr(c->cache, s_nbytes);
    }
    return c->nb;
}

/* cache.nbytes = v (stolen). 0 or -1. */
static int set_nbytes(cache_ctx *c, PyObject *v) {
    if (v == NULL || PyObject_SetAttr(c->cache, s_nbytes, v) < 0) {
        Py_XDECREF(v);
        forget(c);
        return -1;
    }
    Py_XSETREF(c->nb, v);
    return 0;
}

#define SMALL(x) ((x) >= 0 && (x) < (1LL << 56))

/* ObjectCache.pressed(): 1, 0, or -1 (an exception). */
static int cache_pressed(cache_ctx *c) {
    if (c->inl) {
        if (c->drop) {
            return 1;
        }
        PyObject *nb = nbytes_of(c);
        long long n, bud;
        if (nb == NULL) {
            return -1;
        }
        if (!as_i64(nb, &n) && !as_i64(c->budget, &bud) && SMALL(n) && SMALL(bud)) {
            return n * 5 >= bud * 4;
        }
        PyObject *five = PyLong_FromLong(5), *four = PyLong_FromLong(4);
        PyObject *x = five ? PyNumber_Multiply(nb, five) : NULL, *y = four ? PyNumber_Multiply(c->budget, four) : NULL;
        int res = x && y ? PyObject_RichCompareBool(x, y, Py_GE) : -1;
        Py_XDECREF(five);
        Py_XDECREF(four);
        Py_XDECREF(x);
        Py_XDECREF(y);
        return res;
    }
    PyObject *r = PyObject_CallMethodNoArgs(c->cache, s_pressed);
    forget(c);
    if (r == NULL) {
        return -1;
    }
    int res = PyObject_IsTrue(r);
    Py_DECREF(r);
    return res;
}

/* base + n * per as ObjectCache._mem_estimate's ints make it (new reference or NULL). */
static PyObject *estimate(PyObject *base, Py_ssize_t n, PyObject *per) {
    long long b, p;
    if (!as_i64(base, &b) && !as_i64(per, &p) && SMALL(b) && SMALL(p) && p < (1LL << 28) && n < (1LL << 28)) {
        return PyLong_FromLongLong(b + (long long)n * p);
    }
    PyObject *nn = PyLong_FromSsize_t(n), *t = nn ? PyNumber_Multiply(nn, per) : NULL;
    PyObject *r = t ? PyNumber_Add(base, t) : NULL;
    Py_XDECREF(nn);
    Py_XDECREF(t);
    return r;
}

/* nb + (cost - old), new reference or NULL. */
static PyObject *add_diff(PyObject *nb, PyObject *cost, PyObject *old) {
    long long x, y, z;
    if (!as_i64(nb, &x) && !as_i64(cost, &y) && !as_i64(old, &z) && SMALL(x) && SMALL(y) && SMALL(z)) {
        return PyLong_FromLongLong(x + (y - z));
    }
    PyObject *t = PyNumber_Subtract(cost, old), *r = t ? PyNumber_Add(nb, t) : NULL;
    Py_XDECREF(t);
    return r;
}

/* ObjectCache.clean(o) with _account and SlotSequence._mem_estimate for an object of a
   registered kind (k; NULL: the Python method). 0 or -1. */
static int cache_clean(cache_ctx *c, checked *k, PyObject *o) {
    PyObject *r;
    if (!c->inl || k == NULL) {
        r = call_method1(c->cache, s_clean, o);
        forget(c);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    PyObject *key = PyLong_FromVoidPtr(o), *old, *cost = NULL, *nb2 = NULL;
    int res = -1;
    if (key == NULL) {
        return -1;
    }
    old = PyDict_GetItemWithError(c->cost, key);
    if (old == NULL) {
        if (!PyErr_Occurred()) {
            PyObject *args[3] = {c->cache, key, o};
            r = PyObject_VectorcallMethod(s_add, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            forget(c);
            Py_XDECREF(r);
            res = r ? 0 : -1;
        }
        Py_DECREF(key);
        return res;
    }
    Py_INCREF(old);
    if (move_to_end(c->lru, key) < 0) {
        goto done;
    }
    PyObject *vals = GET(o, X_VALS), *hb = k->hooks[H_HANDLE_BYTES], *nb;
    if (vals == NULL || !PyDict_CheckExact(vals)) {         /* what _mem_estimate does with it */
        cost = PyObject_CallMethod(o, "_mem_estimate", "O", c->item_bytes);
        forget(c);
    } else {
        cost = estimate(hb, PyDict_GET_SIZE(vals), c->item_bytes);
    }
    if (cost == NULL || (nb = nbytes_of(c)) == NULL || set_nbytes(c, nb2 = add_diff(nb, cost, old)) < 0
        || PyDict_SetItem(c->cost, key, cost) < 0) {
        nb2 = NULL;     /* set_nbytes took it */
        goto done;
    }
    int heavy = PyObject_RichCompareBool(cost, hb, Py_GT);
    if (heavy < 0) {
        goto done;
    }
    if (heavy) {            /* _heavy[key] = o (already there: the same object, order kept) */
        PyObject *cur = PyDict_Check(c->heavy) ? PyDict_GetItemWithError(c->heavy, key) : NULL;
        if (PyErr_Occurred() || (cur != o && PyObject_SetItem(c->heavy, key, o) < 0)
            || move_to_end(c->heavy, key) < 0) {
            goto done;
        }
    }
    int over = PyObject_RichCompareBool(c->nb, c->budget, Py_GT);
    if (over < 0) {
        goto done;
    }
    if (over && evict_now(c) < 0) {
        goto done;
    }
    res = 0;
done:
    Py_DECREF(key);
    Py_DECREF(old);
    Py_XDECREF(cost);
    return res;
}

/* The cache's containers when it is an exact ObjectCache with its own methods (c->inl); 0 or -1. */
static int cache_open(cache_ctx *c) {
    if (Py_IS_TYPE(c->cache, cache_kind.type) && still_same(&cache_kind)) {
        c->lru = PyObject_GetAttr(c->cache, s_lru);
        c->heavy = c->lru ? PyObject_GetAttr(c->cache, s_heavy) : NULL;
        c->cost = c->heavy ? PyObject_GetAttr(c->cache, s_cost) : NULL;
        c->item_bytes = c->cost ? PyObject_GetAttr(c->cache, s_item_bytes) : NULL;
        c->budget = c->item_bytes ? PyObject_GetAttr(c->cache, s_budget) : NULL;
        if (c->budget == NULL) {
            return -1;
        }
        c->inl = PyDict_CheckExact(c->cost);
    }
    return 0;
}

static void cache_close(cache_ctx *c) {
    Py_CLEAR(c->lru);
    Py_CLEAR(c->heavy);
    Py_CLEAR(c->cost);
    Py_CLEAR(c->item_bytes);
    Py_CLEAR(c->budget);
    Py_CLEAR(c->nb);
}

/* SlotSequence._confirm: 1 (clean), 0, -1 (an exception), or 2: not the common case,
   nothing changed (the caller calls the Python method). */
static int confirm_one(PyObject *o, cache_ctx *c, Py_ssize_t cache_items, int inplace_none) {
    long long fl, pf;
    PyObject *snap = GET(o, X_SNAP), *pending = GET(o, X_PENDING), *vals = GET(o, X_VALS), *r;
    if (as_i64(GET(o, X_FLAGS), &fl) || as_i64(GET(o, X_PFLAGS), &pf) || snap == NULL
        || (snap != Py_None && !(PyTuple_CheckExact(snap) && PyTuple_GET_SIZE(snap) == 2)) || pending == NULL || !PySet_CheckExact(pending) || vals == NULL
        || !PyDict_CheckExact(vals) || !anyset_exact(GET(o, X_DIRTY)) || GET(o, X_MLAST) == NULL) {
        return 2;
    }
    if (pf & F_META) {
        set_ref(o, X_MSAVED, GET(o, X_MLAST));
    }
    set_ref(o, X_MLAST, Py_None);
    set_steal(o, X_PFLAGS, PyLong_FromLong(0));
    PySet_Clear(pending);
    if (snap != Py_None) {
        Py_INCREF(snap);
        set_ref(o, X_LO, PyTuple_GET_ITEM(snap, 0));
        set_ref(o, X_HI, PyTuple_GET_ITEM(snap, 1));
        set_ref(o, X_SNAP, Py_None);
        Py_DECREF(snap);
    }
    int pressed = cache_pressed(c);
    if (pressed < 0) {
        return -1;
    }
    if (pressed && GET(o, X_OLD) == Py_False) {
        set_ref(o, X_MSAVED, Py_None);  /* not kept under pressure (SlotSequence._confirm) */
    }
    if (pressed) {                      /* self._evict(0) */
        if (fl & F_REPLACE) {
            /* _evict returns at once */
        } else if (PySet_GET_SIZE(GET(o, X_DIRTY)) == 0 && inplace_none) {
            PyDict_Clear(vals);     /* in place: a running iterator holds this dict */
            PyObject *h = GET(o, X_HEAD), *t = GET(o, X_TAIL);
            if (h == NULL || t == NULL) {
                PyErr_SetString(PyExc_AttributeError, "_head");
                return -1;
            }
            PyObject *eq = PyObject_RichCompare(h, t, Py_EQ);
            if (eq == NULL) {
                return -1;
            }
            set_steal(o, X_COMPLETE, eq);
        } else {
            PyObject *zero = PyLong_FromLong(0);
            r = call_method1(o, s_evict, zero);
            forget(c);
            Py_DECREF(zero);
            if (r == NULL) {
                return -1;
            }
            Py_DECREF(r);
        }
    } else if (PyDict_GET_SIZE(vals) > cache_items) {
        r = PyObject_CallMethodNoArgs(o, s_evict);
        forget(c);
        if (r == NULL) {
            return -1;
        }
        Py_DECREF(r);
    }
    PyObject *flags = GET(o, X_FLAGS), *dirty = GET(o, X_DIRTY);
    int busy = flags == NULL ? 1 : PyObject_IsTrue(flags);
    if (busy < 0) {
        return -1;
    }
    if (busy || dirty == NULL || PyObject_IsTrue(dirty)) {
        return 0;
    }
    if (pressed) {                      /* clean, and on_saved unlists it: its sets go too */
        set_ref(o, X_DIRTY, no_slots);
        set_ref(o, X_PENDING, no_slots);
    }
    return 1;
}

/* confirm(objs, touched, cache, cache_items, inplace_is_none): on_saved's loop. */
static PyObject *save_confirm(PyObject *self, PyObject *args) {
    PyObject *objs, *touched;
    Py_ssize_t cache_items;
    int inplace_none;
    cache_ctx c = {NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    if (!PyArg_ParseTuple(args, "O!O!Onp", &PyList_Type, &objs, &PyDict_Type, &touched, &c.cache, &cache_items,
                          &inplace_none)) {
        return NULL;
    }
    if (!save_ready) {
        PyErr_SetString(PyExc_RuntimeError, "objectspace._native: save_setup() was not called");
        return NULL;
    }
    PyObject *res = NULL;
    if (cache_open(&c) < 0) {
        goto done;
    }
    if (c.inl) {                        /* ObjectCache.pressed()'s first test */
        PyObject *drop = PyObject_GetAttr(c.cache, s_drop_saved);
        c.drop = drop == NULL ? -1 : PyObject_IsTrue(drop);
        Py_XDECREF(drop);
        if (c.drop < 0) {
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objs); i++) {
        PyObject *o = Py_NewRef(PyList_GET_ITEM(objs, i));
        checked *k = kind_of(o);
        int ok;
        if (k != NULL) {            /* a registered kind: its fields by their offsets */
            PyObject *dead = GET(o, X_DEAD);
            ok = dead == NULL ? 2 : dead == Py_False ? confirm_one(o, &c, cache_items, inplace_none)
               : dead == Py_True ? 3 : 2;
        } else {
            ok = 2;
        }
        if (ok == 2) {              /* on_saved's Python, by attribute */
            forget(&c);
            PyObject *dead = PyObject_GetAttrString(o, "_dead");
            ok = dead == NULL ? -1 : PyObject_IsTrue(dead) ? 3 : 2;
            Py_XDECREF(dead);
            if (ok == 2) {
                PyObject *r = PyObject_CallMethodNoArgs(o, s_confirm);
                ok = r ? PyObject_IsTrue(r) : -1;
                Py_XDECREF(r);
            }
        }
        if (ok == 1) {
            PyObject *nkey = k ? Py_XNewRef(GET(o, X_NKEY)) : PyObject_GetAttrString(o, "_nkey");
            PyObject *cur = nkey ? PyDict_GetItemWithError(touched, nkey) : NULL;
            if (nkey == NULL || (cur == o && PyDict_DelItem(touched, nkey) < 0) || PyErr_Occurred()) {
                if (!PyErr_Occurred()) {
                    PyErr_SetString(PyExc_AttributeError, "_nkey");
                }
                ok = -1;
            } else if (k) {
                set_ref(o, X_LISTED, Py_False);
            } else if (PyObject_SetAttrString(o, "_listed", Py_False) < 0) {
                ok = -1;
            }
            if (k == NULL) {
                forget(&c);
            }
            Py_XDECREF(nkey);
            if (ok == 1) {
                ok = cache_clean(&c, k, o) < 0 ? -1 : 0;
            }
        }
        Py_DECREF(o);
        if (ok < 0) {
            goto done;
        }
    }
    res = Py_NewRef(Py_None);
done:
    cache_close(&c);
    return res;
}

/* ---- ObjectCache._evict (RFC 0012 step 3) -----------------------------------------------------
 *
 * evict(cache) is the twin of ObjectCache._evict, which calls it first: the items of the least
 * recently used objects holding some (_heavy) dropped, then, while the budget or the count
 * limit is exceeded, the least recently used handles (_lru) forgotten. An object of a kind
 * registered by save_setup whose hooks are unchanged (with _evict_clean, SlotSequence's) has
 * its _evict_clean and _mem_estimate done here in the common case (clean: no dirty or pending
 * slots, not F_REPLACE, the space's _inplace None); any other object has its own Python
 * methods called, in their place. It returns False, having done nothing, when the cache is not
 * an exact ObjectCache or an attribute it reads is missing or not of the common types (the
 * containers OrderedDicts and a dict, the numbers ints): then _evict's Python runs, whole.
 * Every number is read and written back as the Python code does, each time (other Python
 * code may run in between: an object's own methods, a weak map's callback as a handle dies). */

static PyObject *odict_popitem = NULL;
static PyObject *s_evict_clean, *s_mem_estimate, *s_inplace, *s_evictions, *s_cap, *s_listed, *s_dead, *one = NULL;

/* od.popitem(last=False) of an exact OrderedDict: a (key, value) tuple (last passed by
   position, which OrderedDict.popitem takes: no keyword to parse). */
static PyObject *pop_first(PyObject *od) {
    PyObject *args[2] = {od, Py_False};
    return PyObject_Vectorcall(odict_popitem, args, 2, NULL);
}

/* The truth of o's field x: by its offset for a registered kind (k), else its attribute. */
static int field_true(PyObject *o, checked *k, int x, PyObject *name) {
    PyObject *v = k != NULL ? GET(o, x) : NULL;
    if (v != NULL) {
        return v == Py_True ? 1 : v == Py_False ? 0 : PyObject_IsTrue(v);
    }
    if ((v = PyObject_GetAttr(o, name)) == NULL) {
        return -1;
    }
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* o._evict_clean(): SlotSequence's, in C for a registered kind in the common case (see above),
   else the object's own method. 0 or -1. */
static int evict_clean(PyObject *o, checked *k) {
    if (k != NULL) {
        long long fl, pf;
        PyObject *space = GET(o, X_SPACE), *dirty = GET(o, X_DIRTY), *pending = GET(o, X_PENDING),
            *vals = GET(o, X_VALS);
        if (!as_i64(GET(o, X_FLAGS), &fl) && !as_i64(GET(o, X_PFLAGS), &pf) && !((fl | pf) & F_REPLACE)
            && space != NULL && anyset_exact(dirty) && PySet_GET_SIZE(dirty) == 0 && anyset_exact(pending)
            && PySet_GET_SIZE(pending) == 0 && vals != NULL && PyDict_CheckExact(vals)) {
            /* Held across the attribute read and the clear: either can run Python code (a
               space's property, a value's __del__) that rebinds o's fields. */
            Py_INCREF(space);
            Py_INCREF(vals);
            PyObject *inplace = PyObject_GetAttr(space, s_inplace);
            Py_DECREF(space);
            if (inplace == NULL) {
                PyErr_Clear();          /* the Python method reads it again, and raises */
            } else if (inplace == Py_None) {
                Py_DECREF(inplace);
                /* _evict(0): self._vals.clear(); self._complete = self._head == self._tail; then
                   `if not self._listed`: the fields read after the clear, as Python reads them */
                PyDict_Clear(vals);
                Py_DECREF(vals);
                PyObject *head = GET(o, X_HEAD), *tail = GET(o, X_TAIL);
                if (head == NULL || tail == NULL) {     /* unset by Python code: its error */
                    PyObject *t = PyObject_GetAttrString(o, head == NULL ? "_head" : "_tail");
                    if (t != NULL) {
                        Py_DECREF(t);
                        PyErr_SetString(PyExc_AttributeError, head == NULL ? "_head" : "_tail");
                    }
                    return -1;
                }
                PyObject *eq = PyObject_RichCompare(head, tail, Py_EQ);
                if (eq == NULL) {
                    return -1;
                }
                set_steal(o, X_COMPLETE, eq);
                int listed = field_true(o, k, X_LISTED, s_listed);
                if (listed < 0) {
                    return -1;
                }
                if (!listed) {       /* the cache drops only clean objects: the sets go too */
                    set_ref(o, X_DIRTY, no_slots);
                    set_ref(o, X_PENDING, no_slots);
                }
                return 0;
            } else {
                Py_DECREF(inplace);
            }
            Py_DECREF(vals);
        }
    }
    PyObject *r = PyObject_CallMethodNoArgs(o, s_evict_clean);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* o._mem_estimate(item_bytes): SlotSequence's for a registered kind, else its own method. */
static PyObject *mem_estimate(PyObject *o, checked *k, PyObject *ib) {
    PyObject *vals = k != NULL ? GET(o, X_VALS) : NULL;
    if (vals != NULL && PyDict_CheckExact(vals)) {
        return estimate(k->hooks[H_HANDLE_BYTES], PyDict_GET_SIZE(vals), ib);
    }
    return PyObject_CallMethodOneArg(o, s_mem_estimate, ib);
}

/* a > b (b an int): 1, 0, -1. */
static int greater(PyObject *a, PyObject *b) {
    long long x, y;
    if (!as_i64(a, &x) && !as_i64(b, &y)) {
        return x > y;
    }
    return PyObject_RichCompareBool(a, b, Py_GT);
}

/* self.<name> = f(self.<name>, a, b): op 0 is += a - b, 1 is -= a, 2 is += 1. 0 or -1. */
static int update_number(PyObject *cache, PyObject *name, int op, PyObject *a, PyObject *b) {
    PyObject *v = PyObject_GetAttr(cache, name), *t = NULL, *r = NULL;
    long long x, y, z;
    if (v == NULL) {
        return -1;
    }
    if (!as_i64(v, &x) && SMALL(x) && (op == 2 || (!as_i64(a, &y) && SMALL(y)))
        && (op != 0 || (!as_i64(b, &z) && SMALL(z)))) {
        r = PyLong_FromLongLong(op == 0 ? x + (y - z) : op == 1 ? x - y : x + 1);
    } else if (op == 0) {
        t = PyNumber_Subtract(a, b);
        r = t ? PyNumber_InPlaceAdd(v, t) : NULL;
    } else {
        r = op == 1 ? PyNumber_InPlaceSubtract(v, a) : PyNumber_InPlaceAdd(v, one);
    }
    int res = r != NULL && PyObject_SetAttr(cache, name, r) == 0 ? 0 : -1;
    Py_DECREF(v);
    Py_XDECREF(t);
    Py_XDECREF(r);
    return res;
}

/* The cache's attribute name (a new reference), or NULL with no exception left. */
static PyObject *attr_quiet(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) {
        PyErr_Clear();
    }
    return v;
}

/* evict(cache) -> True (done), or False: nothing was done, ObjectCache._evict's Python runs. */
static PyObject *cache_evict(PyObject *self, PyObject *cache) {
    if (!save_ready) {
        PyErr_SetString(PyExc_RuntimeError, "objectspace._native: save_setup() was not called");
        return NULL;
    }
    if (!Py_IS_TYPE(cache, cache_kind.type)) {
        Py_RETURN_FALSE;
    }
    PyObject *res = NULL, *budget = NULL, *cap = NULL, *lru = NULL, *heavy = NULL, *cost = NULL, *ib = NULL,
        *nb = NULL, *ev = NULL, *target = NULL, *item = NULL, *key = NULL, *o = NULL, *c = NULL, *nw = NULL;
    long long bud, capv = 0, x;
    /* the attributes _evict reads, in its order (nbytes and evictions later, in its loops) */
    if ((budget = attr_quiet(cache, s_budget)) == NULL || (cap = attr_quiet(cache, s_cap)) == NULL
        || (lru = attr_quiet(cache, s_lru)) == NULL || (heavy = attr_quiet(cache, s_heavy)) == NULL
        || (cost = attr_quiet(cache, s_cost)) == NULL || (ib = attr_quiet(cache, s_item_bytes)) == NULL
        || (nb = attr_quiet(cache, s_nbytes)) == NULL || (ev = attr_quiet(cache, s_evictions)) == NULL
        || as_i64(budget, &bud) || !SMALL(bud) || (cap != Py_None && as_i64(cap, &capv))
        || !PyODict_CheckExact(lru) || !PyODict_CheckExact(heavy) || !PyDict_CheckExact(cost)
        || as_i64(nb, &x) || as_i64(ev, &x)) {
        res = Py_NewRef(Py_False);
        goto done;
    }
    Py_CLEAR(nb);
    if ((target = PyLong_FromLongLong(bud * 4 / 5)) == NULL) {
        goto done;
    }
    /* the cached items of the least recently used objects */
    while (PyDict_GET_SIZE(heavy) > 0) {
        int over = (nb = PyObject_GetAttr(cache, s_nbytes)) == NULL ? -1 : greater(nb, target);
        Py_CLEAR(nb);
        if (over <= 0) {
            if (over < 0) {
                goto done;
            }
            break;
        }
        if ((item = pop_first(heavy)) == NULL) {
            goto done;
        }
        /* key, obj = ...popitem(last=False): the previous ones live until rebound here, as
           in the Python frame (a handle's weakref callbacks run at the same point) */
        Py_XSETREF(key, Py_NewRef(PyTuple_GET_ITEM(item, 0)));
        Py_XSETREF(o, Py_NewRef(PyTuple_GET_ITEM(item, 1)));
        Py_CLEAR(item);
        checked *k = kind_of(o);
        int skip = field_true(o, k, X_LISTED, s_listed);
        if (skip == 0) {
            skip = field_true(o, k, X_DEAD, s_dead);
        }
        if (skip < 0) {
            goto done;
        }
        if (!skip) {        /* clean: its items go (dirty or dead: they stay) */
            if ((c = PyDict_GetItemWithError(cost, key)) == NULL) {
                if (!PyErr_Occurred()) {
                    PyErr_SetObject(PyExc_KeyError, key);
                }
                goto done;
            }
            Py_INCREF(c);
            if (evict_clean(o, k) < 0 || (nw = mem_estimate(o, k, ib)) == NULL || PyDict_SetItem(cost, key, nw) < 0
                || update_number(cache, s_nbytes, 0, nw, c) < 0) {
                goto done;
            }
            Py_CLEAR(c);
            Py_CLEAR(nw);
        }
    }
    /* then the least recently used handles */
    while (PyDict_GET_SIZE(lru) > 0) {
        int over = (nb = PyObject_GetAttr(cache, s_nbytes)) == NULL ? -1 : greater(nb, target);
        Py_CLEAR(nb);
        if (over == 0 && cap != Py_None) {
            over = PyDict_GET_SIZE(lru) > capv;
        }
        if (over <= 0) {
            if (over < 0) {
                goto done;
            }
            break;
        }
        if ((item = pop_first(lru)) == NULL) {
            goto done;
        }
        /* key, obj = ...popitem(last=False): the previous ones live until rebound here, as
           in the Python frame (a handle's weakref callbacks run at the same point) */
        Py_XSETREF(key, Py_NewRef(PyTuple_GET_ITEM(item, 0)));
        Py_XSETREF(o, Py_NewRef(PyTuple_GET_ITEM(item, 1)));
        Py_CLEAR(item);
        int has = PyDict_Contains(heavy, key);          /* heavy.pop(key, None) */
        if (has < 0 || (has && PyObject_DelItem(heavy, key) < 0)) {
            goto done;
        }
        if ((c = PyDict_GetItemWithError(cost, key)) == NULL) {         /* cost.pop(key) */
            if (!PyErr_Occurred()) {
                PyErr_SetObject(PyExc_KeyError, key);
            }
            goto done;
        }
        Py_INCREF(c);
        if (PyDict_DelItem(cost, key) < 0 || update_number(cache, s_nbytes, 1, c, NULL) < 0
            || update_number(cache, s_evictions, 2, NULL, NULL) < 0) {
            goto done;
        }
        Py_CLEAR(c);
        checked *k = kind_of(o);
        int skip = field_true(o, k, X_LISTED, s_listed);
        if (skip == 0) {
            skip = field_true(o, k, X_DEAD, s_dead);
        }
        if (skip < 0 || (!skip && evict_clean(o, k) < 0)) {
            goto done;
        }
    }
    res = Py_NewRef(Py_True);
done:
    Py_XDECREF(budget);
    Py_XDECREF(cap);
    Py_XDECREF(lru);
    Py_XDECREF(heavy);
    Py_XDECREF(cost);
    Py_XDECREF(ib);
    Py_XDECREF(nb);
    Py_XDECREF(ev);
    Py_XDECREF(target);
    Py_XDECREF(item);
    Py_XDECREF(key);
    Py_XDECREF(o);
    Py_XDECREF(c);
    Py_XDECREF(nw);
    return res;
}

static int offset_of(PyObject *descr, Py_ssize_t *off) {
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)
        || ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
        PyErr_SetString(PyExc_TypeError, "save_setup: a field is not a __slots__ member");
        return -1;
    }
    *off = ((PyMemberDescrObject *)descr)->d_member->offset;
    return 0;
}

static int check_setup(checked *c, PyTypeObject *t, int n, const char **names, PyObject **strs) {
    c->type = t;
    c->nhooks = n;
    c->names = strs;
    for (int i = 0; i < n; i++) {
        PyObject *v = _PyType_Lookup(t, strs[i]);
        if (v == NULL) {
            PyErr_Format(PyExc_TypeError, "save_setup: %s has no %s", t->tp_name, names[i]);
            return -1;
        }
        c->hooks[i] = Py_NewRef(v);
    }
    c->tag = 0;
    c->ok = 0;
    still_same(c);
    return 0;
}

/* save_setup(fields, kinds, cache_type, codec_type, native_encode, no_slots): fields maps each
   field name to its member descriptor; kinds is [(type, metadata shape)]. */
static PyObject *save_setup(PyObject *self, PyObject *args) {
    PyObject *fields, *kl, *ctype, *ctt, *enc, *ns;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OO", &PyDict_Type, &fields, &PyList_Type, &kl, &PyType_Type, &ctype,
                          &PyType_Type, &ctt, &enc, &ns)) {
        return NULL;
    }
    if (save_ready) {
        PyErr_SetString(PyExc_RuntimeError, "save_setup() was called already");
        return NULL;
    }
    if (PyList_GET_SIZE(kl) > MAX_KINDS) {
        PyErr_SetString(PyExc_ValueError, "save_setup: too many kinds");
        return NULL;
    }
    for (int i = 0; i < NFIELDS; i++) {
        PyObject *d = PyDict_GetItemString(fields, field_names[i]);
        if (d == NULL) {
            PyErr_Format(PyExc_KeyError, "save_setup: no field %s", field_names[i]);
            return NULL;
        }
        if (offset_of(d, &offs[i]) < 0) {
            return NULL;
        }
    }
#define INTERN(var, s) if ((var = PyUnicode_InternFromString(s)) == NULL) return NULL
    for (int i = 0; i < NHOOKS; i++) {
        INTERN(hook_strs[i], hook_names[i]);
    }
    for (int i = 0; i < NCHOOKS; i++) {
        INTERN(cache_hook_strs[i], cache_hook_names[i]);
    }
    INTERN(s_collect, "_collect");
    INTERN(s_promote, "_promote");
    INTERN(s_confirm, "_confirm");
    INTERN(s_evict, "_evict");
    INTERN(s_clean, "clean");
    INTERN(s_add, "_add");
    INTERN(s_cevict, "_evict");
    INTERN(s_move_to_end, "move_to_end");
    INTERN(s_nbytes, "nbytes");
    INTERN(s_budget, "budget");
    INTERN(s_item_bytes, "item_bytes");
    INTERN(s_lru, "_lru");
    INTERN(s_heavy, "_heavy");
    INTERN(s_cost, "_cost");
    INTERN(s_pressed, "pressed");
    INTERN(s_drop_saved, "drop_saved");
    INTERN(s_evict_clean, "_evict_clean");
    INTERN(s_mem_estimate, "_mem_estimate");
    INTERN(s_inplace, "_inplace");
    INTERN(s_evictions, "evictions");
    INTERN(s_cap, "max_objects");
    INTERN(s_listed, "_listed");
    INTERN(s_dead, "_dead");
#undef INTERN
    if ((one = PyLong_FromLong(1)) == NULL) {
        return NULL;
    }
    {
        PyObject *pop = PyUnicode_InternFromString("popitem");
        odict_popitem = pop ? _PyType_Lookup(&PyODict_Type, pop) : NULL;
        Py_XDECREF(pop);
        if (odict_popitem == NULL) {
            PyErr_SetString(PyExc_TypeError, "save_setup: no OrderedDict.popitem");
            return NULL;
        }
        Py_INCREF(odict_popitem);
    }
    nkinds = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(kl); i++) {
        PyObject *t;
        int shape;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(kl, i), "O!i", &PyType_Type, &t, &shape)) {
            return NULL;
        }
        if (shape < 1 || shape > 3) {
            PyErr_SetString(PyExc_ValueError, "save_setup: a metadata shape is 1, 2 or 3");
            return NULL;
        }
        checked *c = &kinds[nkinds];
        c->shape = shape;
        if (check_setup(c, (PyTypeObject *)Py_NewRef(t), NHOOKS, hook_names, hook_strs) < 0) {
            return NULL;
        }
        nkinds++;
    }
    if (check_setup(&cache_kind, (PyTypeObject *)Py_NewRef(ctype), NCHOOKS, cache_hook_names, cache_hook_strs) < 0) {
        return NULL;
    }
    odict_move_to_end = _PyType_Lookup(&PyODict_Type, s_move_to_end);
    Py_XINCREF(odict_move_to_end);
    codec_type = Py_NewRef(ctt);
    native_encode = Py_NewRef(enc);
    no_slots = Py_NewRef(ns);
    save_ready = 1;
    Py_RETURN_NONE;
}

/* ---- The reload of a handle (RFC 0012 step 3) -------------------------------------------
 *
 * lookup(space, name, kind, codec, nkey) is ObjectSpace._lookup for the common case: a name
 * that is a str or a tuple of str, bytes and 64-bit ints (encoded here as
 * _keycodec.encode_name does), an object alive in the space's weak map (its kind and codec
 * checked, then the cache's use()), or one whose format-2 metadata record names a list,
 * queue, stack or array with its plain metadata ([tail], [head, tail], [head, tail, maxlen]
 * of ints), which is built as the kind's _load builds it, put in the weak map (a KeyedRef
 * with the map's own callback, as WeakValueDictionary.__setitem__ makes it) and added to the
 * cache as ObjectCache.use adds it (its _evict stays Python). The metadata is read through
 * the space's db.get.
 *
 * Anything else returns (nkey or None, metadata or the _UNREAD sentinel): the Python lookup
 * takes over from there, with what was read, and decides every error (a closed space, a
 * deleted name, a kind or codec mismatch, a missing or unreadable record). Nothing is
 * changed before that hand-over. A space, cache or kind whose methods changed since setup
 * (a subclass, a monkeypatched method) goes to Python too. */

enum { SH_LOOKUP, SH_FIND, SH_GET_OR_CREATE, SH_REMEMBER, SH_BUILD, SH_LOAD, SH_MISMATCH, NSHOOKS };
static const char *space_hook_names[NSHOOKS] = {"_lookup", "_find", "_get_or_create", "_remember", "_build", "_load",
                                                 "_mismatch"};
enum { RH_LOAD, RH_INIT_BASE, RH_INIT_SLOTS, RH_KIND, RH_HAS_META, NRHOOKS };
static const char *rkind_hook_names[NRHOOKS] = {"_load", "_init_base", "_init_slots", "kind", "has_meta"};
enum { RC_USE, RC_ADD, NRCHOOKS };
static const char *rcache_hook_names[NRCHOOKS] = {"use", "_add"};
/* the weak map's methods the C code stands in for (get, and __setitem__ with its KeyedRef) */
enum { WH_GET, WH_SETITEM, NWHOOKS };
static const char *wvd_hook_names[NWHOOKS] = {"get", "__setitem__"};
static PyObject *space_hook_strs[NSHOOKS], *rkind_hook_strs[NRHOOKS], *rcache_hook_strs[NRCHOOKS],
    *wvd_hook_strs[NWHOOKS];

#define MAX_KIND_CODE 16
typedef struct {
    PyObject *name;             /* the kind's name ("queue") */
    checked *save;              /* its entry in kinds[] (the cache's hooks: _mem_estimate, _handle_bytes) */
    checked load;               /* its _load and the methods that builds it with */
    checked *bounded;           /* queue: the class of [head, tail, maxlen] (its kinds[] entry) */
    checked bload;
} rkind;
static rkind rkinds[MAX_KIND_CODE];     /* by kind code; name NULL: not handled here */
static checked space_kind, rcache_kind, wvd_kind;
static PyObject *kind_classes = NULL, *codecs_by_code = NULL, *wvd_type = NULL, *keyedref_type = NULL,
    *unread = NULL, *empty_tuple = NULL, *mheads[MAX_KIND_CODE][256];
static Py_ssize_t keyedref_key_off = 0;
static PyObject *s_closed, *s_live, *s_graves, *s_obj_prefix, *s_db, *s_get, *s_cache, *s_data, *s_pending_removals,
    *s_remove, *s_max_objects;
static int reload_ready = 0;

/* How a hand-over is returned: (nkey or None, meta or _UNREAD). */
static PyObject *hand_over(PyObject *nkey, PyObject *meta) {
    return PyTuple_Pack(2, nkey ? nkey : Py_None, meta ? meta : unread);
}

/* An attribute of the space or its cache that the Python lookup reads too (new reference),
   or NULL with no exception left: the caller hands over before changing anything, and the
   Python lookup meets (and raises) whatever made it fail. */
static PyObject *attr_or_clear(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) {
        PyErr_Clear();
    }
    return v;
}

/* ---- _keycodec.encode_name for str, bytes and int parts ---- */

static int put_escaped(buf *b, unsigned char tag, const char *s, Py_ssize_t n) {
    if (put1(b, tag) < 0) {
        return -1;
    }
    const char *z = memchr(s, 0, (size_t)n);
    if (z == NULL) {
        if (put(b, s, n) < 0) {
            return -1;
        }
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (put1(b, (unsigned char)s[i]) < 0 || (s[i] == 0 && put1(b, 0xff) < 0)) {
                return -1;
            }
        }
    }
    return put(b, "\x00\x01", 2);
}

/* 0: encoded; 1: not handled here (no exception); -1: an exception. */
static int enc_part(buf *b, PyObject *p) {
    if (PyUnicode_CheckExact(p)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(p, &n);
        if (s == NULL) {            /* a lone surrogate: Python's surrogatepass */
            PyErr_Clear();
            return 1;
        }
        return put_escaped(b, 0x50, s, n);
    }
    if (PyBytes_CheckExact(p)) {
        return put_escaped(b, 0x40, PyBytes_AS_STRING(p), PyBytes_GET_SIZE(p));
    }
    if (PyLong_CheckExact(p)) {
        long long v;
        if (as_i64(p, &v) || v == LLONG_MIN) {
            return 1;
        }
        unsigned long long m = v < 0 ? (unsigned long long)(-v) : (unsigned long long)v;
        int len = 0;
        for (unsigned long long t = m; t; t >>= 8) {
            len++;
        }
        unsigned char out[10];
        out[0] = 0x20;
        if (v >= 0) {
            out[1] = (unsigned char)(0x80 + len);
        } else {
            out[1] = (unsigned char)(0x7f - len);
            m = (len == 8 ? ~0ULL : ((1ULL << (8 * len)) - 1)) - m;
        }
        for (int i = len - 1; i >= 0; i--) {
            out[2 + i] = (unsigned char)(m & 0xff);
            m >>= 8;
        }
        return put(b, out, 2 + len);
    }
    return 1;
}

/* The encoded name (new reference), or NULL: not handled (no exception) or an exception. */
static PyObject *encode_name_c(PyObject *name) {
    buf b = {NULL, 0, 0};
    int r = 1;
    if (PyUnicode_CheckExact(name) && PyUnicode_GET_LENGTH(name) > 0) {
        r = enc_part(&b, name);
    } else if (PyTuple_CheckExact(name) && PyTuple_GET_SIZE(name) > 0) {
        r = put1(&b, 0x60);
        for (Py_ssize_t i = 0; r == 0 && i < PyTuple_GET_SIZE(name); i++) {
            r = enc_part(&b, PyTuple_GET_ITEM(name, i));
        }
        if (r == 0) {
            r = put1(&b, 0x00);
        }
    }
    PyObject *out = r == 0 ? PyBytes_FromStringAndSize((const char *)b.p, b.len) : NULL;
    PyMem_Free(b.p);
    return out;
}

static int str_eq(PyObject *a, PyObject *b) {
    return a == b || (PyUnicode_Check(a) && PyUnicode_Check(b) && PyUnicode_Compare(a, b) == 0);
}

/* ---- the cache's use() ---- */

/* ObjectCache._add(id(o), o) for a registered kind (mo: the cache's max_objects): 0 or -1. */
static int cache_add(cache_ctx *c, checked *k, PyObject *o, PyObject *key, PyObject *mo) {
    PyObject *vals = GET(o, X_VALS), *hb = k->hooks[H_HANDLE_BYTES], *cost, *nb;
    if (PyObject_SetItem(c->lru, key, o) < 0) {
        return -1;
    }
    if (vals == NULL || !PyDict_CheckExact(vals)) {
        cost = PyObject_CallMethod(o, "_mem_estimate", "O", c->item_bytes);
        forget(c);
    } else {
        cost = estimate(hb, PyDict_GET_SIZE(vals), c->item_bytes);
    }
    if (cost == NULL) {
        return -1;
    }
    int res = -1;
    if (PyDict_SetItem(c->cost, key, cost) < 0) {
        goto done;
    }
    int heavy = PyObject_RichCompareBool(cost, hb, Py_GT);
    if (heavy < 0 || (heavy && PyObject_SetItem(c->heavy, key, o) < 0)) {
        goto done;
    }
    if ((nb = nbytes_of(c)) == NULL || set_nbytes(c, PyNumber_Add(nb, cost)) < 0) {
        goto done;
    }
    int over = PyObject_RichCompareBool(c->nb, c->budget, Py_GT);
    if (over < 0) {
        goto done;
    }
    if (!over && mo != Py_None) {
        Py_ssize_t len = PyObject_Length(c->lru);
        PyObject *n = len < 0 ? NULL : PyLong_FromSsize_t(len);
        over = n ? PyObject_RichCompareBool(n, mo, Py_GT) : -1;
        Py_XDECREF(n);
        if (over < 0) {
            goto done;
        }
    }
    if (over && evict_now(c) < 0) {
        goto done;
    }
    res = 0;
done:
    Py_DECREF(cost);
    return res;
}

/* ObjectCache.use(o) (k: o's registered kind): 0 or -1. Every attribute of the cache it
   reads is read before anything changes; if one is missing (or the cache is not an exact
   ObjectCache with its own methods), the cache's Python use() runs instead, from the start. */
static int cache_use(PyObject *cache, checked *k, PyObject *o) {
    cache_ctx c = {cache, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    PyObject *r, *mo = NULL;
    int res = -1;
    int inl = Py_IS_TYPE(cache, rcache_kind.type) && still_same(&rcache_kind) && cache_open(&c) == 0 && c.inl
        && nbytes_of(&c) != NULL && (mo = PyObject_GetAttr(cache, s_max_objects)) != NULL;
    if (!inl) {
        PyErr_Clear();                  /* (a missing attribute: Python's use() meets it) */
        r = call_method1(cache, rcache_hook_strs[RC_USE], o);
        Py_XDECREF(r);
        res = r ? 0 : -1;
        goto done;
    }
    PyObject *key = PyLong_FromVoidPtr(o);
    if (key == NULL) {
        goto done;
    }
    PyObject *old = PyDict_GetItemWithError(c.cost, key);
    if (old != NULL) {
        res = cache_clean(&c, k, o);
    } else if (!PyErr_Occurred()) {
        int listed = PyObject_IsTrue(GET(o, X_LISTED) ? GET(o, X_LISTED) : Py_True);
        res = listed < 0 ? -1 : listed ? 0 : cache_add(&c, k, o, key, mo);
    }
    Py_DECREF(key);
done:
    Py_XDECREF(mo);
    cache_close(&c);
    return res;
}

/* ---- the metadata ---- */

/* msgpack ints of a fixarray of 1 to 3 of them filling s[0:n]: their count, or 0. */
static int meta_ints(const unsigned char *s, Py_ssize_t n, PyObject **out) {
    if (n < 1 || (s[0] & 0xf0) != 0x90 || (s[0] & 0x0f) == 0 || (s[0] & 0x0f) > 3) {
        return 0;
    }
    int cnt = s[0] & 0x0f, got = 0;
    Py_ssize_t pos = 1;
    while (got < cnt) {
        if (pos >= n) {
            goto bad;
        }
        unsigned char h = s[pos++];
        PyObject *v;
        if (h <= 0x7f) {
            v = PyLong_FromLong(h);
        } else if (h >= 0xe0) {
            v = PyLong_FromLong((long)(signed char)h);
        } else if (h >= 0xcc && h <= 0xd3) {
            int w = 1 << ((h - 0xcc) & 3);
            if (pos + w > n) {
                goto bad;
            }
            uint64_t u = 0;
            for (int i = 0; i < w; i++) {
                u = (u << 8) | s[pos + i];
            }
            pos += w;
            if (h <= 0xcf) {
                v = PyLong_FromUnsignedLongLong(u);
            } else {
                int64_t x = w == 1 ? (int8_t)u : w == 2 ? (int16_t)u : w == 4 ? (int32_t)u : (int64_t)u;
                v = PyLong_FromLongLong(x);
            }
        } else {
            goto bad;
        }
        if (v == NULL) {
            PyErr_Clear();
            goto bad;
        }
        out[got++] = v;
    }
    if (pos == n) {
        return cnt;
    }
bad:
    for (int i = 0; i < got; i++) {
        Py_DECREF(out[i]);
    }
    return 0;
}

/* The handle of a list, queue, stack or array from its metadata ints, as _load builds it
   (new reference; prefix: the space's _obj_prefix, bytes), or NULL: a MemoryError. */
static PyObject *build_handle(PyObject *space, PyObject *nkey, PyObject *prefix, checked *k,
                              PyObject *codec, PyObject *mhead, PyObject **ints, int n) {
    PyTypeObject *t = k->type;
    Py_ssize_t np = PyBytes_GET_SIZE(prefix), nk = PyBytes_GET_SIZE(nkey);
    PyObject *items = PyBytes_FromStringAndSize(NULL, np + nk + 1);     /* prefix + nkey + ITEMS */
    if (items != NULL) {
        memcpy(PyBytes_AS_STRING(items), PyBytes_AS_STRING(prefix), (size_t)np);
        memcpy(PyBytes_AS_STRING(items) + np, PyBytes_AS_STRING(nkey), (size_t)nk);
        PyBytes_AS_STRING(items)[np + nk] = 0x01;
    }
    PyObject *vals = items ? PyDict_New() : NULL;
    PyObject *head = n == 1 ? PyLong_FromLong(0) : Py_NewRef(ints[0]), *tail = ints[n == 1 ? 0 : 1];
    int eq = vals && head ? PyObject_RichCompareBool(head, tail, Py_EQ) : -1;
    PyObject *o = eq >= 0 ? t->tp_new(t, empty_tuple, NULL) : NULL;
    if (o == NULL) {
        Py_XDECREF(items);
        Py_XDECREF(vals);
        Py_XDECREF(head);
        return NULL;
    }
    /* PersistedObject._init_base(fresh=False) */
    set_ref(o, X_SPACE, space);
    set_ref(o, X_PNAME, Py_None);    /* the name: from nkey when asked (PersistedObject._name) */
    set_ref(o, X_NKEY, nkey);
    set_steal(o, X_ITEMS, items);
    set_ref(o, X_CODEC, codec);
    set_steal(o, X_FLAGS, PyLong_FromLong(0));
    set_steal(o, X_PFLAGS, PyLong_FromLong(0));
    set_ref(o, X_LISTED, Py_False);
    set_ref(o, X_DEAD, Py_False);
    set_ref(o, X_MSAVED, Py_None);
    set_ref(o, X_MLAST, Py_None);
    set_ref(o, X_MHEAD, mhead);
    set_ref(o, X_OLD, Py_False);
    set_ref(o, X_ISUMS, Py_None);
    /* SlotSequence._init_slots(head, tail, fresh=False) */
    set_steal(o, X_VALS, vals);
    set_ref(o, X_DIRTY, no_slots);
    set_ref(o, X_PENDING, no_slots);
    set_ref(o, X_HEAD, head);
    set_ref(o, X_TAIL, tail);
    set_ref(o, X_LO, head);
    set_ref(o, X_HI, tail);
    set_ref(o, X_SNAP, Py_None);
    set_ref(o, X_COMPLETE, eq ? Py_True : Py_False);
    set_steal(o, X_VERSION, PyLong_FromLong(0));
    if (n > 1) {            /* PersistedQueue._load: _maxlen */
        set_ref(o, X_MAXLEN, n == 3 ? ints[2] : Py_None);
    }
    Py_DECREF(head);
    return o;
}

/* The weak map's data dict (new reference) when live is a WeakValueDictionary as setup found
   it (reload_setup: data a dict, _pending_removals a list, get and __setitem__ its own) with
   no removals pending, so that live.get(k) is data[k]() and live[k] = o is data[k] =
   KeyedRef(o, live._remove, k); else NULL, no exception left (the caller uses the
   WeakValueDictionary's Python methods, or hands over). */
static PyObject *live_data(PyObject *live) {
    if (!Py_IS_TYPE(live, (PyTypeObject *)wvd_type) || !still_same(&wvd_kind)) {
        return NULL;
    }
    PyObject *pend = attr_or_clear(live, s_pending_removals);
    PyObject *data = pend ? attr_or_clear(live, s_data) : NULL;
    if (data != NULL && !(PyList_CheckExact(pend) && PyList_GET_SIZE(pend) == 0 && PyDict_CheckExact(data))) {
        Py_CLEAR(data);
    }
    Py_XDECREF(pend);
    return data;
}

/* The weak map's entry: live.get(nkey) as a new reference, or NULL: none, or *plain = 0 when
   the map is not as live_data wants it (then the caller hands over). Leaves no exception. */
static PyObject *live_get(PyObject *live, PyObject *nkey, int *plain) {
    PyObject *data = live_data(live), *o = NULL;
    *plain = data != NULL;
    if (data != NULL) {
        PyObject *wr = PyDict_GetItemWithError(data, nkey);      /* nkey: bytes, no error */
        if (wr != NULL && !PyWeakref_Check(wr)) {
            *plain = 0;                 /* not what __setitem__ stores: Python's get decides */
        } else if (wr != NULL) {
            o = PyObject_CallNoArgs(wr);        /* a weakref's call: its referent or None */
            if (o == Py_None) {
                Py_CLEAR(o);
            }
        }
        Py_DECREF(data);
    }
    if (PyErr_Occurred()) {
        PyErr_Clear();
        Py_CLEAR(o);
        *plain = 0;
    }
    return o;
}

/* live[nkey] = o as WeakValueDictionary.__setitem__ does it: 0 or -1 (an exception: Python's
   own __setitem__'s, called when the map is not as live_data wants it, or a MemoryError). */
static int live_set(PyObject *live, PyObject *nkey, PyObject *o) {
    PyObject *data = live_data(live);
    PyObject *cb = data ? attr_or_clear(live, s_remove) : NULL;
    int res = -1;
    if (cb == NULL || !PyCallable_Check(cb)) {
        res = PyObject_SetItem(live, nkey, o);          /* the map's own __setitem__ */
        goto done;
    }
    PyObject *args = PyTuple_Pack(2, o, cb);
    /* ref.__new__(KeyedRef, o, cb) and its key slot, as KeyedRef.__new__ does (its __init__
       only checks the arguments again) */
    PyObject *wr = args ? _PyWeakref_RefType.tp_new((PyTypeObject *)keyedref_type, args, NULL) : NULL;
    Py_XDECREF(args);
    if (wr == NULL) {
        goto done;
    }
    PyObject **slot = (PyObject **)((char *)wr + keyedref_key_off);
    Py_XSETREF(*slot, Py_NewRef(nkey));
    res = PyDict_SetItem(data, nkey, wr);
    Py_DECREF(wr);
done:
    Py_XDECREF(data);
    Py_XDECREF(cb);
    return res;
}

static rkind *rkind_named(PyObject *kind) {
    for (int i = 0; i < MAX_KIND_CODE; i++) {
        if (rkinds[i].name != NULL && str_eq(rkinds[i].name, kind)) {
            return &rkinds[i];
        }
    }
    return NULL;
}

/* The registered kind of an alive object with the kind and codec asked for, or NULL. */
static checked *alive_ok(PyObject *o, PyObject *kind, PyObject *codec) {
    checked *k = kind_of(o);
    if (k == NULL) {
        return NULL;
    }
    rkind *rk = NULL;
    for (int i = 0; i < MAX_KIND_CODE && rk == NULL; i++) {
        if (rkinds[i].name != NULL && (rkinds[i].save == k || rkinds[i].bounded == k)) {
            rk = &rkinds[i];
        }
    }
    if (rk == NULL || (kind != Py_None && !str_eq(rk->name, kind))) {
        return NULL;
    }
    if (codec != Py_None) {
        PyObject *c = GET(o, X_CODEC);
        if (c == NULL || !Py_IS_TYPE(c, (PyTypeObject *)codec_type) || GET(c, X_CNAME) == NULL
            || !str_eq(GET(c, X_CNAME), codec)) {
            return NULL;
        }
    }
    return k;
}

static PyObject *reload_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "lookup(space, name, kind, codec, nkey)");
        return NULL;
    }
    if (!reload_ready) {
        PyErr_SetString(PyExc_RuntimeError, "objectspace._native: reload_setup() was not called");
        return NULL;
    }
    PyObject *space = args[0], *name = args[1], *kind = args[2], *codec = args[3], *nkey = args[4];
    PyObject *res = NULL, *live = NULL, *o = NULL, *graves = NULL, *db = NULL, *key = NULL, *meta = NULL,
        *cache = NULL, *prefix = NULL, *ints[3] = {NULL, NULL, NULL};
    int n = 0;
    if (!Py_IS_TYPE(space, space_kind.type) || !still_same(&space_kind)) {
        return hand_over(nkey == Py_None ? NULL : nkey, NULL);
    }
    PyObject *closed = attr_or_clear(space, s_closed);
    Py_XDECREF(closed);
    if (closed != Py_False) {           /* (closed, or no _closed: Python's) */
        return hand_over(nkey == Py_None ? NULL : nkey, NULL);
    }
    if (nkey == Py_None) {
        nkey = encode_name_c(name);
        if (nkey == NULL) {
            return PyErr_Occurred() ? NULL : hand_over(NULL, NULL);
        }
    } else if (!PyBytes_CheckExact(nkey)) {
        return hand_over(nkey, NULL);
    } else {
        Py_INCREF(nkey);
    }
    /* Until the handle is put in the weak map nothing is changed, and every attribute read
       that fails hands over (attr_or_clear): the Python lookup reads it again and raises. */
    int plain = 0;
    if ((live = attr_or_clear(space, s_live)) != NULL) {
        o = live_get(live, nkey, &plain);
    }
    if (!plain) {
        res = hand_over(nkey, NULL);
        goto done;
    }
    if (o != NULL) {                            /* in memory */
        checked *k = alive_ok(o, kind, codec);
        if (k == NULL || (cache = attr_or_clear(space, s_cache)) == NULL) {
            res = hand_over(nkey, NULL);
        } else if (cache_use(cache, k, o) == 0) {
            res = Py_NewRef(o);
        }
        goto done;
    }
    rkind *want = NULL;
    if (kind != Py_None && (want = rkind_named(kind)) == NULL) {      /* another kind: Python's */
        res = hand_over(nkey, NULL);
        goto done;
    }
    graves = attr_or_clear(space, s_graves);
    int dead = graves && PyDict_CheckExact(graves) ? PyDict_Contains(graves, nkey) : 1;     /* bytes: no error */
    if (dead) {
        res = dead < 0 ? NULL : hand_over(nkey, NULL);
        goto done;
    }
    if ((prefix = attr_or_clear(space, s_obj_prefix)) == NULL || (db = attr_or_clear(space, s_db)) == NULL) {
        res = hand_over(nkey, NULL);
        goto done;
    }
    if (PyBytes_CheckExact(prefix)) {
        Py_ssize_t np = PyBytes_GET_SIZE(prefix), nk = PyBytes_GET_SIZE(nkey);
        key = PyBytes_FromStringAndSize(NULL, np + nk + 1);
        if (key != NULL) {
            memcpy(PyBytes_AS_STRING(key), PyBytes_AS_STRING(prefix), (size_t)np);
            memcpy(PyBytes_AS_STRING(key) + np, PyBytes_AS_STRING(nkey), (size_t)nk);
            PyBytes_AS_STRING(key)[np + nk] = 0x00;
        }
    } else {
        res = hand_over(nkey, NULL);            /* Python adds them (and raises) */
        goto done;
    }
    /* db.get by attribute, as Python calls it: its errors are the Python lookup's too */
    if (key == NULL || (meta = PyObject_CallMethodOneArg(db, s_get, key)) == NULL) {
        goto done;
    }
    /* split_meta for the common case: a format-2 head naming a handled kind and known codec */
    if (!PyBytes_CheckExact(meta) || PyBytes_GET_SIZE(meta) <= 4) {
        res = hand_over(nkey, meta);
        goto done;
    }
    const unsigned char *m = (const unsigned char *)PyBytes_AS_STRING(meta);
    rkind *rk = m[0] == 0xC1 && m[1] == 2 && m[2] < MAX_KIND_CODE && rkinds[m[2]].name ? &rkinds[m[2]] : NULL;
    if (rk == NULL || (want != NULL && want != rk)) {
        res = hand_over(nkey, meta);
        goto done;
    }
    PyObject *code = PyLong_FromLong(m[3]);
    PyObject *codec_obj = code ? PyDict_GetItemWithError(codecs_by_code, code) : NULL;
    Py_XDECREF(code);
    if (PyErr_Occurred()) {
        goto done;
    }
    if (codec_obj == NULL || !Py_IS_TYPE(codec_obj, (PyTypeObject *)codec_type) || GET(codec_obj, X_CNAME) == NULL
        || (codec != Py_None && !str_eq(GET(codec_obj, X_CNAME), codec))) {
        res = hand_over(nkey, meta);
        goto done;
    }
    n = meta_ints(m + 4, PyBytes_GET_SIZE(meta) - 4, ints);
    checked *k = n == 0 ? NULL : n == 3 ? rk->bounded : rk->save;
    checked *kl = n == 3 ? &rk->bload : &rk->load;
    PyObject *cls = PyDict_GetItemWithError(kind_classes, rk->name);
    if (PyErr_Occurred()) {
        goto done;
    }
    if (k == NULL || (rk->bounded == NULL) != (n == 1) || cls != (PyObject *)rk->save->type
        || !still_same(k) || !still_same(kl)) {
        res = hand_over(nkey, meta);
        goto done;
    }
    PyObject *mhead = mheads[m[2]][m[3]];
    if (mhead == NULL && (mhead = mheads[m[2]][m[3]] = PyBytes_FromStringAndSize((const char *)m, 4)) == NULL) {
        goto done;
    }
    o = build_handle(space, nkey, prefix, k, codec_obj, mhead, ints, n);
    if (o == NULL) {                /* a MemoryError: nothing changed */
        goto done;
    }
    /* Python's _find: self._live[nkey] = obj; self._remember(obj) (the cache's use), both
       read after the get, as Python reads them (db.get may be Python code) */
    Py_SETREF(live, attr_or_clear(space, s_live));
    if (live == NULL || (cache = attr_or_clear(space, s_cache)) == NULL) {
        res = hand_over(nkey, meta);
        goto done;
    }
    if (live_set(live, nkey, o) < 0 || cache_use(cache, k, o) < 0) {
        goto done;
    }
    res = Py_NewRef(o);
done:
    for (int i = 0; i < n; i++) {
        Py_XDECREF(ints[i]);
    }
    Py_XDECREF(nkey);
    Py_XDECREF(live);
    Py_XDECREF(o);
    Py_XDECREF(graves);
    Py_XDECREF(db);
    Py_XDECREF(key);
    Py_XDECREF(meta);
    Py_XDECREF(cache);
    Py_XDECREF(prefix);
    return res;
}

/* Whether KeyedRef is what live_set makes by hand: a direct subclass of weakref.ref whose
   instances are the ref's struct plus its one __slots__ member, key (an object slot). */
static int keyedref_fits(PyTypeObject *kr) {
    PyObject *kd = PyDict_GetItemString(kr->tp_dict, "key");        /* borrowed; str key: no error */
    if (kr->tp_base != &_PyWeakref_RefType || kd == NULL || !Py_IS_TYPE(kd, &PyMemberDescr_Type)) {
        return 0;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)kd)->d_member;
    return m->type == T_OBJECT_EX && m->offset >= _PyWeakref_RefType.tp_basicsize
        && m->offset + (Py_ssize_t)sizeof(PyObject *) <= kr->tp_basicsize && kr->tp_dictoffset == 0
        && _PyWeakref_RefType.tp_new != NULL;
}

/* Whether a fresh weak map works with live_get and live_set as with its own methods: a
   probe object put in by live_set is what the map's get returns, the KeyedRef's key
   attribute is the key, and the map's own callback takes the entry out when the probe dies.
   0 or 1, no exception left. */
static int weakmap_probe(void) {
    PyObject *w = PyObject_CallNoArgs(wvd_type), *probe = PySet_New(NULL), *k = PyBytes_FromString("probe");
    PyObject *got = NULL, *data = NULL, *wr = NULL, *wkey = NULL;
    int ok = 0, plain = 0;
    if (w == NULL || probe == NULL || k == NULL) {
        goto done;
    }
    got = live_get(w, k, &plain);
    if (!plain || got != NULL || live_set(w, k, probe) < 0) {
        goto done;
    }
    got = PyObject_CallMethod(w, "get", "O", k);
    data = got == probe ? live_data(w) : NULL;
    wr = data ? PyDict_GetItemWithError(data, k) : NULL;
    wkey = wr && Py_IS_TYPE(wr, (PyTypeObject *)keyedref_type) ? PyObject_GetAttrString(wr, "key") : NULL;
    if (wkey != k) {
        goto done;
    }
    Py_CLEAR(got);
    Py_CLEAR(probe);                    /* dies: the map's _remove runs */
    ok = PyDict_GET_SIZE(data) == 0 && PyObject_Length(w) == 0;
done:
    if (PyErr_Occurred()) {
        PyErr_Clear();
        ok = 0;
    }
    Py_XDECREF(wkey);
    Py_XDECREF(data);
    Py_XDECREF(got);
    Py_XDECREF(probe);
    Py_XDECREF(k);
    Py_XDECREF(w);
    return ok;
}

/* reload_setup(space_type, kind_classes, codecs_by_code, kinds, weak_value_dict, keyed_ref, unread):
   kinds is [(kind code, kind name, class, bounded class or None)], each class registered by
   save_setup. True, or False when the weak map's classes are not as the C code needs them
   (keyedref_fits, weakmap_probe): then lookup stays off and the Python lookup runs. */
static PyObject *reload_setup(PyObject *self, PyObject *args) {
    PyObject *st, *kc, *cbc, *kl, *wvd, *kr, *ur;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O", &PyType_Type, &st, &PyDict_Type, &kc, &PyDict_Type, &cbc,
                          &PyList_Type, &kl, &PyType_Type, &wvd, &PyType_Type, &kr, &ur)) {
        return NULL;
    }
    if (!save_ready || reload_ready) {
        PyErr_SetString(PyExc_RuntimeError, "reload_setup() needs save_setup() first, once");
        return NULL;
    }
    if (!keyedref_fits((PyTypeObject *)kr)) {
        Py_RETURN_FALSE;
    }
    keyedref_key_off = ((PyMemberDescrObject *)PyDict_GetItemString(((PyTypeObject *)kr)->tp_dict, "key"))
        ->d_member->offset;
#define INTERN(var, s) if ((var = PyUnicode_InternFromString(s)) == NULL) return NULL
    for (int i = 0; i < NSHOOKS; i++) {
        INTERN(space_hook_strs[i], space_hook_names[i]);
    }
    for (int i = 0; i < NRHOOKS; i++) {
        INTERN(rkind_hook_strs[i], rkind_hook_names[i]);
    }
    for (int i = 0; i < NRCHOOKS; i++) {
        INTERN(rcache_hook_strs[i], rcache_hook_names[i]);
    }
    for (int i = 0; i < NWHOOKS; i++) {
        INTERN(wvd_hook_strs[i], wvd_hook_names[i]);
    }
    INTERN(s_closed, "_closed");
    INTERN(s_live, "_live");
    INTERN(s_graves, "_graves");
    INTERN(s_obj_prefix, "_obj_prefix");
    INTERN(s_db, "_db");
    INTERN(s_get, "get");
    INTERN(s_cache, "_cache");
    INTERN(s_data, "data");
    INTERN(s_pending_removals, "_pending_removals");
    INTERN(s_remove, "_remove");
    INTERN(s_max_objects, "max_objects");
#undef INTERN
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(kl); i++) {
        int code;
        PyObject *kname, *cls, *bcls;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(kl, i), "iUOO", &code, &kname, &cls, &bcls)) {
            return NULL;
        }
        if (code < 0 || code >= MAX_KIND_CODE) {
            PyErr_SetString(PyExc_ValueError, "reload_setup: kind code out of range");
            return NULL;
        }
        rkind *rk = &rkinds[code];
        rk->save = rk->bounded = NULL;
        for (int j = 0; j < nkinds; j++) {
            if ((PyObject *)kinds[j].type == cls) {
                rk->save = &kinds[j];
            }
            if ((PyObject *)kinds[j].type == bcls) {
                rk->bounded = &kinds[j];
            }
        }
        if (rk->save == NULL || (bcls != Py_None && rk->bounded == NULL)) {
            PyErr_SetString(PyExc_ValueError, "reload_setup: a class not registered by save_setup");
            return NULL;
        }
        if (check_setup(&rk->load, rk->save->type, NRHOOKS, rkind_hook_names, rkind_hook_strs) < 0
            || (rk->bounded && check_setup(&rk->bload, rk->bounded->type, NRHOOKS, rkind_hook_names,
                                           rkind_hook_strs) < 0)) {
            return NULL;
        }
        rk->name = Py_NewRef(kname);
    }
    if (check_setup(&space_kind, (PyTypeObject *)Py_NewRef(st), NSHOOKS, space_hook_names, space_hook_strs) < 0
        || check_setup(&rcache_kind, (PyTypeObject *)Py_NewRef(cache_kind.type), NRCHOOKS, rcache_hook_names,
                       rcache_hook_strs) < 0) {
        return NULL;
    }
    if (check_setup(&wvd_kind, (PyTypeObject *)Py_NewRef(wvd), NWHOOKS, wvd_hook_names, wvd_hook_strs) < 0) {
        PyErr_Clear();                  /* no get or __setitem__: not a WeakValueDictionary */
        Py_RETURN_FALSE;
    }
    if ((empty_tuple = PyTuple_New(0)) == NULL) {
        return NULL;
    }
    kind_classes = Py_NewRef(kc);
    codecs_by_code = Py_NewRef(cbc);
    wvd_type = Py_NewRef(wvd);
    keyedref_type = Py_NewRef(kr);
    unread = Py_NewRef(ur);
    if (!weakmap_probe()) {
        Py_RETURN_FALSE;
    }
    reload_ready = 1;
    Py_RETURN_TRUE;
}

/* ---- The walk of a slot sequence's items from the store (RFC 0012 step 4) ------------------
 *
 * walk(obj, vals, s, b, version) is the twin of two branches of SlotSequence._iter_slots, for a
 * list, queue, stack or array of a kind registered with the save path whose _iter_merged is
 * unchanged: "nothing cached" (vals empty: one db.scan of slots [s, b), each record's slot
 * checked, its value decoded) and _iter_merged without keep (some cached: the cached values,
 * the others from one db.scan from the first missing slot). It returns an iterator that gives
 * the values one at a time as the Python loops do, at the same points: the sequence's version
 * checked before each, a value assigned meanwhile given instead of the stored one, a value
 * decoded only when it is given (by the C codec's function when the codec's decode is it, else
 * by a call of whatever it is), the scan made where the Python makes it. At its end it returns
 * (to the ``yield from`` of _iter_slots) the slot it stopped at and whether that slot is missing
 * from the store; _iter_slots raises the CorruptionError, or goes on with its version check and
 * ``cont``, as before. Module functions are read where the Python reads them: _slots._slot_key
 * when the scan is made, _layout.slot_of once (nothing cached) or at each record (_iter_merged);
 * when they are the functions given at setup their work is done here.
 *
 * None (nothing read, nothing called) when it is not that case: another type, a patched hook,
 * vals not an exact dict, slots or a version that are not ints of 63 bits; the Python branches
 * run. */

typedef struct {
    PyObject_HEAD
    PyObject *obj, *vals, *version, *ip, *decode, *scan, *slot_of, *result;
    long long s, b;
    int merged;                 /* 1: _iter_merged's loop; 0: the "nothing cached" loop */
    int fast_decode;            /* decode is this module's decode */
} Walk;

static PyTypeObject WalkType;
static checked walk_kinds[MAX_KINDS];      /* per registered kind: _iter_merged unchanged */
static PyObject *walk_hook_strs[1], *walk_slots_dict = NULL, *walk_layout = NULL, *walk_slot_key = NULL,
    *walk_slot_of = NULL, *walk_pair = NULL;
static PyObject *s_slot_key, *s_slot_of, *s_db, *s_scan, *s_decode;
static const char *walk_hook_names[1] = {"_iter_merged"};
static int walk_ready = 0;

/* _slot_key(ip, s) as _slots has it now (a new reference). */
static PyObject *walk_key(PyObject *ip, long long s) {
    PyObject *f = PyDict_GetItemWithError(walk_slots_dict, s_slot_key);
    if (f == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_NameError, "name '_slot_key' is not defined");
        }
        return NULL;
    }
    if (f == walk_slot_key && PyBytes_CheckExact(ip)) {
        return slot_key(ip, (unsigned long long)s);
    }
    PyObject *n = PyLong_FromLongLong(s), *k = NULL;
    if (n != NULL) {
        k = PyObject_CallFunctionObjArgs(f, ip, n, NULL);
        Py_DECREF(n);
    }
    return k;
}

/* iter(obj._space._db.scan(_slot_key(ip, s), _slot_key(ip, b))) (a new reference). */
static PyObject *walk_scan(PyObject *obj, PyObject *ip, long long s, long long b) {
    PyObject *space = GET(obj, X_SPACE), *db = NULL, *scan = NULL, *lo = NULL, *hi = NULL, *it = NULL, *r = NULL;
    if (space == NULL) {
        return PyObject_GetAttrString(obj, "_space");
    }
    if ((db = PyObject_GetAttr(space, s_db)) == NULL || (scan = PyObject_GetAttr(db, s_scan)) == NULL) {
        goto done;
    }
    lo = walk_key(ip, s);
    hi = lo ? walk_key(ip, b) : NULL;
    if (hi != NULL && (r = PyObject_CallFunctionObjArgs(scan, lo, hi, NULL)) != NULL) {
        it = PyObject_GetIter(r);
    }
done:
    Py_XDECREF(db);
    Py_XDECREF(scan);
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    Py_XDECREF(r);
    return it;
}

/* A record's key and value (borrowed from *pair, replaced by a tuple of two when it was not one):
   0 or -1 with the error of ``key, raw = pair``. */
static int walk_unpack(PyObject **pair, PyObject **key, PyObject **raw) {
    if (!PyTuple_CheckExact(*pair) || PyTuple_GET_SIZE(*pair) != 2) {
        PyObject *t = PyObject_CallOneArg(walk_pair, *pair);
        Py_SETREF(*pair, t);
        if (t == NULL) {
            return -1;
        }
    }
    *key = PyTuple_GET_ITEM(*pair, 0);
    *raw = PyTuple_GET_ITEM(*pair, 1);
    return 0;
}

/* slot_of(key) compared with slot s (f: the slot_of read, borrowed): 0 when equal, else 1 when
   greater (ordered: as _iter_merged's ``got == s`` then ``got > s``) or just 1 (not ordered: as
   ``slot_of(key) != s``), -1 when less; -2 with an error. */
static int walk_cmp_slot(PyObject *f, PyObject *key, long long s, int ordered) {
    if (f == walk_slot_of && PyBytes_CheckExact(key)) {     /* int.from_bytes(key[-8:], "big") */
        Py_ssize_t n = PyBytes_GET_SIZE(key), i = n > 8 ? n - 8 : 0;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(key);
        unsigned long long got = 0;
        for (; i < n; i++) {
            got = (got << 8) | p[i];
        }
        unsigned long long us = (unsigned long long)s;
        return got < us ? -1 : got > us;
    }
    PyObject *got = PyObject_CallOneArg(f, key), *sv = got ? PyLong_FromLongLong(s) : NULL;
    int r = -2;
    if (sv != NULL && !ordered) {
        int ne = PyObject_RichCompareBool(got, sv, Py_NE);
        r = ne < 0 ? -2 : ne;
    } else if (sv != NULL) {
        int eq = PyObject_RichCompareBool(got, sv, Py_EQ), gt = eq == 0 ? PyObject_RichCompareBool(got, sv, Py_GT) : 0;
        r = eq < 0 || gt < 0 ? -2 : eq ? 0 : gt ? 1 : -1;
    }
    Py_XDECREF(got);
    Py_XDECREF(sv);
    return r;
}

/* decode(raw), the codec's (a new reference). */
static PyObject *walk_decode(Walk *w, PyObject *raw) {
    return w->fast_decode ? decode(NULL, raw) : PyObject_CallOneArg(w->decode, raw);
}

/* self._version != version: 1, 0, -1. */
static int walk_changed(Walk *w) {
    PyObject *v = GET(w->obj, X_VERSION);
    if (v == NULL) {
        PyObject *a = PyObject_GetAttrString(w->obj, "_version");   /* its AttributeError */
        Py_XDECREF(a);
        return -1;
    }
    if (v == w->version) {
        return 0;
    }
    return PyObject_RichCompareBool(v, w->version, Py_NE);
}

/* The walk is over at slot s (missing: the store does not have it): the result for yield from. */
static int walk_finish(Walk *w, int missing) {
    Py_CLEAR(w->scan);
    w->result = Py_BuildValue("(LO)", w->s, missing ? Py_True : Py_False);
    return w->result == NULL ? -1 : 0;
}

/* The next value (a new reference), or NULL: w->result set at the end, or an error. */
static PyObject *walk_step(Walk *w) {
    if (w->result != NULL || w->obj == NULL) {
        return NULL;
    }
    if (!w->merged) {
        /* for key, raw in scan: if version changed: break; if slot_of(key) != s: missing; ... */
        PyObject *pair = PyIter_Next(w->scan), *key, *raw, *v = NULL;
        if (pair == NULL) {
            if (!PyErr_Occurred()) {
                walk_finish(w, 0);
            }
            return NULL;
        }
        if (walk_unpack(&pair, &key, &raw) < 0) {
            return NULL;
        }
        int c = walk_changed(w);
        if (c == 0) {
            c = walk_cmp_slot(w->slot_of, key, w->s, 0);
            if (c > 0) {
                walk_finish(w, 1);
            }
        } else if (c > 0) {
            walk_finish(w, 0);
        }
        if (c != 0) {
            Py_DECREF(pair);
            return NULL;
        }
        /* decode(raw) if not vals or s not in vals else vals[s] */
        if (PyDict_GET_SIZE(w->vals) > 0) {
            PyObject *sv = PyLong_FromLongLong(w->s);
            v = sv ? PyDict_GetItemWithError(w->vals, sv) : NULL;
            Py_XDECREF(sv);
            if (v == NULL && PyErr_Occurred()) {
                Py_DECREF(pair);
                return NULL;
            }
            Py_XINCREF(v);
        }
        if (v == NULL) {
            v = walk_decode(w, raw);
        }
        Py_DECREF(pair);
        if (v != NULL) {
            w->s++;
        }
        return v;
    }
    /* _iter_merged: while s < b: version check; v = vals.get(s, MISSING); ... */
    if (w->s >= w->b) {
        walk_finish(w, 0);
        return NULL;
    }
    int c = walk_changed(w);
    if (c != 0) {
        if (c > 0) {
            walk_finish(w, 0);
        }
        return NULL;
    }
    PyObject *sv = PyLong_FromLongLong(w->s), *v;
    v = sv ? PyDict_GetItemWithError(w->vals, sv) : NULL;
    Py_XDECREF(sv);
    if (v != NULL) {
        w->s++;
        return Py_NewRef(v);
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (w->scan == NULL && (w->scan = walk_scan(w->obj, w->ip, w->s, w->b)) == NULL) {
        return NULL;
    }
    for (;;) {                                  /* for key, raw in scan: got = L.slot_of(key) ... */
        PyObject *pair = PyIter_Next(w->scan), *key, *raw;
        if (pair == NULL) {
            if (!PyErr_Occurred()) {
                walk_finish(w, 1);
            }
            return NULL;
        }
        if (walk_unpack(&pair, &key, &raw) < 0) {
            return NULL;
        }
        PyObject *f = PyDict_GetItemWithError(PyModule_GetDict(walk_layout), s_slot_of);
        if (f == NULL) {
            Py_DECREF(pair);
            if (!PyErr_Occurred()) {
                Py_XDECREF(PyObject_GetAttr(walk_layout, s_slot_of));    /* its AttributeError */
            }
            return NULL;
        }
        Py_INCREF(f);
        c = walk_cmp_slot(f, key, w->s, 1);
        Py_DECREF(f);
        if (c == 0) {
            v = walk_decode(w, raw);
            Py_DECREF(pair);
            if (v != NULL) {
                w->s++;
            }
            return v;
        }
        Py_DECREF(pair);
        if (c == -2) {
            return NULL;
        }
        if (c > 0) {
            walk_finish(w, 1);
            return NULL;
        }
    }
}

static PyObject *walk_next(Walk *w) {
    PyObject *v = walk_step(w);
    if (v == NULL && w->result != NULL && !PyErr_Occurred()) {
        PyObject *e = PyObject_CallOneArg(PyExc_StopIteration, w->result);  /* its value: the result */
        if (e != NULL) {
            PyErr_SetObject(PyExc_StopIteration, e);
            Py_DECREF(e);
        }
    }
    return v;
}

/* yield from walk: the values, then the result (the value sent in is ignored, as a yield
   statement ignores it). */
static PySendResult walk_send(Walk *w, PyObject *arg, PyObject **out) {
    PyObject *v = walk_step(w);
    if (v != NULL) {
        *out = v;
        return PYGEN_NEXT;
    }
    if (w->result != NULL && !PyErr_Occurred()) {
        *out = Py_NewRef(w->result);
        return PYGEN_RETURN;
    }
    *out = NULL;
    return PYGEN_ERROR;
}

static int walk_traverse(Walk *w, visitproc visit, void *arg) {
    Py_VISIT(w->obj);
    Py_VISIT(w->vals);
    Py_VISIT(w->version);
    Py_VISIT(w->ip);
    Py_VISIT(w->decode);
    Py_VISIT(w->scan);
    Py_VISIT(w->slot_of);
    Py_VISIT(w->result);
    return 0;
}

static int walk_clear(Walk *w) {
    Py_CLEAR(w->obj);
    Py_CLEAR(w->vals);
    Py_CLEAR(w->version);
    Py_CLEAR(w->ip);
    Py_CLEAR(w->decode);
    Py_CLEAR(w->scan);
    Py_CLEAR(w->slot_of);
    Py_CLEAR(w->result);
    return 0;
}

static void walk_dealloc(Walk *w) {
    PyObject_GC_UnTrack(w);
    walk_clear(w);
    PyObject_GC_Del(w);
}

static PyAsyncMethods walk_async = {.am_send = (sendfunc)walk_send};

/* walk.send(value): what a generator delegating to the walk calls instead of am_send while a
   trace function is set (CPython 3.11's SEND under sys.settrace, e.g. coverage.py): the next
   value, the sent one ignored, as am_send does. */
static PyObject *walk_send_method(Walk *w, PyObject *Py_UNUSED(arg)) {
    return walk_next(w);
}

static PyMethodDef walk_methods[] = {
    {"send", (PyCFunction)walk_send_method, METH_O, "The next value (the one sent in is ignored)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WalkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "objectspace._native.Walk",
    .tp_doc = "The values of a slot sequence's slots read from the store (SlotSequence._iter_slots' twin).",
    .tp_basicsize = sizeof(Walk),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)walk_traverse,
    .tp_clear = (inquiry)walk_clear,
    .tp_dealloc = (destructor)walk_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)walk_next,
    .tp_methods = walk_methods,
    .tp_as_async = &walk_async,
};

/* walk(obj, vals, s, b, version) -> a Walk, or None: see the note above. */
static PyObject *walk_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "walk(obj, vals, s, b, version)");
        return NULL;
    }
    if (!walk_ready) {
        PyErr_SetString(PyExc_RuntimeError, "objectspace._native: walk_setup() was not called");
        return NULL;
    }
    PyObject *obj = args[0], *vals = args[1];
    checked *k = kind_of(obj);
    long long s, b, version;
    if (k == NULL || !still_same(&walk_kinds[k - kinds]) || !PyDict_CheckExact(vals) || as_i64(args[2], &s)
        || as_i64(args[3], &b) || as_i64(args[4], &version) || s < 0 || b < 0) {
        Py_RETURN_NONE;
    }
    Walk *w = PyObject_GC_New(Walk, &WalkType);
    if (w == NULL) {
        return NULL;
    }
    w->obj = Py_NewRef(obj);
    w->vals = Py_NewRef(vals);
    w->version = Py_NewRef(args[4]);
    w->ip = w->decode = w->scan = w->slot_of = w->result = NULL;
    w->s = s;
    w->b = b;
    w->merged = PyDict_GET_SIZE(vals) > 0;
    w->fast_decode = 0;
    PyObject_GC_Track(w);
    /* nothing cached: slot_of = L.slot_of; ip, decode = self._items, self._codec.decode; the scan.
       _iter_merged: vals, ip, decode = self._vals, self._items, self._codec.decode. */
    if (!w->merged && (w->slot_of = PyObject_GetAttr(walk_layout, s_slot_of)) == NULL) {
        goto fail;
    }
    if (w->merged) {
        PyObject *v = GET(obj, X_VALS);
        if (v == NULL) {
            Py_XDECREF(PyObject_GetAttrString(obj, "_vals"));
            goto fail;
        }
        Py_SETREF(w->vals, Py_NewRef(v));
        if (!PyDict_CheckExact(v)) {            /* (vals.get below is a dict's) */
            PyErr_SetString(PyExc_TypeError, "_vals is not a dict");
            goto fail;
        }
    }
    PyObject *codec = GET(obj, X_CODEC);
    if ((w->ip = GET(obj, X_ITEMS)) == NULL || codec == NULL) {
        Py_XDECREF(PyObject_GetAttrString(obj, w->ip == NULL ? "_items" : "_codec"));   /* its AttributeError */
        w->ip = NULL;
        goto fail;
    }
    Py_INCREF(w->ip);
    if ((w->decode = PyObject_GetAttr(codec, s_decode)) == NULL) {
        goto fail;
    }
    w->fast_decode = PyCFunction_Check(w->decode) && PyCFunction_GET_FUNCTION(w->decode) == (PyCFunction)decode;
    if (!w->merged && (w->scan = walk_scan(obj, w->ip, s, b)) == NULL) {
        goto fail;
    }
    return (PyObject *)w;
fail:
    Py_DECREF(w);
    return NULL;
}

/* walk_setup(slots_globals, layout_module, slot_key, slot_of, pair): _slots' globals (its
   _slot_key), _layout (its slot_of), the functions C stands in for, and the Python unpacking of
   a record that is not a pair. After save_setup: the kinds are its kinds. */
static PyObject *walk_setup(PyObject *self, PyObject *args) {
    PyObject *g, *lay, *sk, *so, *pr;
    if (walk_ready) {
        PyErr_SetString(PyExc_RuntimeError, "walk_setup() was called already");
        return NULL;
    }
    if (!save_ready) {
        PyErr_SetString(PyExc_RuntimeError, "walk_setup() needs save_setup() first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!OOO", &PyDict_Type, &g, &PyModule_Type, &lay, &sk, &so, &pr)) {
        return NULL;
    }
#define INTERN(var, s) if ((var = PyUnicode_InternFromString(s)) == NULL) return NULL
    INTERN(walk_hook_strs[0], walk_hook_names[0]);
    INTERN(s_slot_key, "_slot_key");
    INTERN(s_slot_of, "slot_of");
    INTERN(s_db, "_db");
    INTERN(s_scan, "scan");
    INTERN(s_decode, "decode");
#undef INTERN
    for (int i = 0; i < nkinds; i++) {
        if (check_setup(&walk_kinds[i], (PyTypeObject *)Py_NewRef(kinds[i].type), 1, walk_hook_names,
                        walk_hook_strs) < 0) {
            return NULL;
        }
    }
    walk_slots_dict = Py_NewRef(g);
    walk_layout = Py_NewRef(lay);
    walk_slot_key = Py_NewRef(sk);
    walk_slot_of = Py_NewRef(so);
    walk_pair = Py_NewRef(pr);
    walk_ready = 1;
    Py_RETURN_NONE;
}

/* setup(encode, decode, datetime_code): the Python codec the C one hands values to. */
static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *enc, *dec;
    int code;
    if (!PyArg_ParseTuple(args, "OOi", &enc, &dec, &code)) {
        return NULL;
    }
    if (code < -128 || code > 127) {
        PyErr_SetString(PyExc_ValueError, "ext codes are -128..127");
        return NULL;
    }
    Py_INCREF(enc);
    Py_INCREF(dec);
    Py_XSETREF(py_encode, enc);
    Py_XSETREF(py_decode, dec);
    ext_datetime = code;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_O, "msgpack bytes of a value (objectspace's msgpack codec; see the module)."},
    {"decode", decode, METH_O, "The value of msgpack bytes (objectspace's msgpack codec; see the module)."},
    {"setup", setup, METH_VARARGS, "setup(encode, decode, datetime_code): the Python codec to hand other values to."},
    {"collect", save_collect, METH_VARARGS,
     "collect(objs, out) -> objects collected by Python: ObjectSpace.save's collector (see the save path's note)."},
    {"promote", save_promote, METH_O, "promote(objs): each object's _promote, in C for the common case."},
    {"confirm", save_confirm, METH_VARARGS,
     "confirm(objs, touched, cache, cache_items, inplace_is_none): ObjectSpace.on_saved's loop over objs."},
    {"lookup", (PyCFunction)(void (*)(void))reload_lookup, METH_FASTCALL,
     "lookup(space, name, kind, codec, nkey) -> the object, or (nkey, metadata read) for Python's lookup."},
    {"reload_setup", reload_setup, METH_VARARGS,
     "reload_setup(space_type, kind_classes, codecs_by_code, kinds, weak_value_dict, keyed_ref, unread)."},
    {"evict", cache_evict, METH_O,
     "evict(cache) -> True, or False (nothing done): ObjectCache._evict for the common case (see the note)."},
    {"walk", (PyCFunction)(void (*)(void))walk_new, METH_FASTCALL,
     "walk(obj, vals, s, b, version) -> an iterator of slots' values from the store, or None (see the note)."},
    {"walk_setup", walk_setup, METH_VARARGS, "walk_setup(slots_globals, layout, slot_key, slot_of, pair)."},
    {"save_setup", save_setup, METH_VARARGS,
     "save_setup(fields, kinds, cache_type, codec_type, native_encode, no_slots): see objectspace/_savepath.py."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL || PyType_Ready(&WalkType) < 0) {
        return NULL;
    }
    return PyModule_Create(&module);
}
