/* dkv's native helpers: the C twins of dkv/format/_front.py (front coding of sorted
 * records) and of dkv/format/bloom.py (bloom filter build and probe), same bytes and bits.
 *
 * A front-coded batch of n records is
 *
 *     varint n
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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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
    Py_ssize_t w = put_varint(p, (size_t)n);
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

/* decode(data, pos=0) -> (keys, values, end) */
static PyObject *front_decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos = 0;
    if (!PyArg_ParseTuple(args, "y*|n", &view, &pos)) {
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len;
    PyObject *keys = NULL, *values = NULL, *result = NULL;
    size_t n;
    if (pos < 0 || pos > len || get_varint(buf, len, &pos, &n) < 0 || n > (size_t)len) {
        malformed();
        goto done;
    }
    keys = PyList_New((Py_ssize_t)n);
    values = PyList_New((Py_ssize_t)n);
    if (keys == NULL || values == NULL) {
        goto done;
    }
    for (int pass = 0; pass < 2; pass++) {
        PyObject *list = pass == 0 ? keys : values;
        PyObject *prev = NULL;      /* borrowed: the previous key / non-tombstone value */
        for (size_t i = 0; i < n; i++) {
            size_t sh, code;
            if (get_varint(buf, len, &pos, &sh) < 0 || get_varint(buf, len, &pos, &code) < 0) {
                malformed();
                goto done;
            }
            if (pass == 1 && code == 0) {
                if (sh != 0) {
                    malformed();
                    goto done;
                }
                Py_INCREF(Py_None);
                PyList_SET_ITEM(list, (Py_ssize_t)i, Py_None);
                continue;
            }
            size_t slen = pass == 0 ? code : code - 1;
            Py_ssize_t plen = prev == NULL ? 0 : PyBytes_GET_SIZE(prev);
            if (sh > (size_t)plen || slen > (size_t)(len - pos)) {
                malformed();
                goto done;
            }
            PyObject *item = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(sh + slen));
            if (item == NULL) {
                goto done;
            }
            char *d = PyBytes_AS_STRING(item);
            if (sh) {
                memcpy(d, PyBytes_AS_STRING(prev), sh);
            }
            memcpy(d + sh, buf + pos, slen);
            pos += (Py_ssize_t)slen;
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
            prev = item;
        }
    }
    result = Py_BuildValue("(OOn)", keys, values, pos);
done:
    Py_XDECREF(keys);
    Py_XDECREF(values);
    PyBuffer_Release(&view);
    return result;
}

/* -- bloom filters ---------------------------------------------------------------------- */

#define SEED2 0x9E3779B9u
static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int j = 0; j < 8; j++) {
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
        crc_table[n] = c;
    }
}

static uint32_t crc32_of(uint32_t crc, const unsigned char *p, Py_ssize_t n) {
    crc = ~crc;
    while (n-- > 0) {
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    }
    return ~crc;
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
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (!PyBytes_CheckExact(key)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "keys must be bytes");
            return NULL;
        }
        const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(key);
        Py_ssize_t len = PyBytes_GET_SIZE(key);
        uint64_t h1 = crc32_of(0, s, len), h2 = crc32_of(SEED2, s, len) | 1u;
        for (int j = 0; j < k; j++) {
            uint64_t p = (h1 + (uint64_t)j * h2) % (uint64_t)m;
            bits[p >> 3] |= (unsigned char)(1u << (p & 7));
        }
    }
    return out;
}

/* bloom_check(bits: bytes, k: int, key: bytes) -> bool */
static PyObject *bloom_check(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "bloom_check(bits: bytes, k: int, key: bytes)");
        return NULL;
    }
    long k = PyLong_AsLong(args[1]);
    if (k == -1 && PyErr_Occurred()) {
        return NULL;
    }
    const unsigned char *bits = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    uint64_t m = (uint64_t)PyBytes_GET_SIZE(args[0]) * 8;
    if (m == 0) {
        Py_RETURN_TRUE;
    }
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(args[2]);
    Py_ssize_t len = PyBytes_GET_SIZE(args[2]);
    uint64_t h1 = crc32_of(0, s, len), h2 = crc32_of(SEED2, s, len) | 1u;
    for (long j = 0; j < k; j++) {
        uint64_t p = (h1 + (uint64_t)j * h2) % m;
        if (!(bits[p >> 3] & (1u << (p & 7)))) {
            Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"encode", front_encode, METH_VARARGS, "Front-code sorted keys and their values (None: tombstone)."},
    {"decode", front_decode, METH_VARARGS, "(keys, values, end) of front-coded records at pos."},
    {"bloom_build", bloom_build, METH_VARARGS, "The bit array of a bloom filter over keys (m bits, k probes)."},
    {"bloom_check", (PyCFunction)(void (*)(void))bloom_check, METH_FASTCALL, "Whether key may be in the filter."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init();
    return PyModule_Create(&module);
}
