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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
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
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
