/* Shared definitions of the _speedups extension (see _speedups.c). */
#ifndef TRIOMQ_SPEEDUPS_H
#define TRIOMQ_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define MAGIC_V1 0xDAA320A7u
#define MAGIC_V2 0xDAA320ABu
#define BLANK_MAGIC 0xCBD43194u
#define BORNHOST_V6 0x10
#define STOREHOST_V6 0x20
#define MIN_RECORD_SIZE 91
#define END_FILE_MIN_BLANK_LENGTH 8
#define CQ_ENTRY_SIZE 20
#define MAX_PROPERTIES_LENGTH 0x7FFF
#define MAX_TOPIC_LENGTH_V1 127
#define MAX_TOPIC_LENGTH_V2 0x7FFF

/* ------------------------------------------------------------ byte order */

static inline void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

static inline void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static inline uint32_t get32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t get64(const unsigned char *p) {
    return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

static inline void put_cq_entry(unsigned char *p, int64_t phys, int32_t size, int64_t tags) {
    put64(p, (uint64_t)phys);
    put32(p + 8, (uint32_t)size);
    put64(p + 12, (uint64_t)tags);
}

static inline uint32_t body_crc(const unsigned char *p, Py_ssize_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt chunk = n > (1 << 30) ? (1 << 30) : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)crc & 0x7FFFFFFFu;
}

/* ------------------------------------------------------ growable buffers */

typedef struct {
    unsigned char *data;
    Py_ssize_t len, cap;
} Buf;

static inline int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    unsigned char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

/* Room for ``extra`` more bytes in a bytearray used as a Buf (``b->data``
 * points into it and moves when it grows). */
static inline int bytearray_reserve(PyObject *ba, Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->len + extra)
        cap *= 2;
    if (PyByteArray_Resize(ba, cap) < 0)
        return -1;
    b->data = (unsigned char *)PyByteArray_AS_STRING(ba);
    b->cap = cap;
    return 0;
}

/* ---------------------------------------------------------- tags codes */

/* Java String.hashCode of a str: over its UTF-16 code units. */
static inline int32_t java_hash_str(PyObject *s) {
    uint32_t h = 0;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0x10000) {
            c -= 0x10000;
            h = 31 * h + (0xD800 + (c >> 10));
            h = 31 * h + (0xDC00 + (c & 0x3FF));
        } else {
            h = 31 * h + c;
        }
    }
    return (int32_t)h;
}

/* Strict UTF-8 (what Python's decoder accepts): no overlongs, surrogates or
 * code points past U+10FFFF. With hash != NULL, also the Java hash of the
 * decoded text's UTF-16 units. Returns 0 if valid. */
static inline int utf8_check(const unsigned char *p, Py_ssize_t n, uint32_t *hash) {
    uint32_t h = 0;
    Py_ssize_t i = 0;
    if (hash == NULL) {  /* skip ASCII eight bytes at a time */
        while (n - i >= 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
    }
    while (i < n) {
        uint32_t c = p[i];
        int extra;
        uint32_t min;
        if (c < 0x80) {
            extra = 0; min = 0;
        } else if ((c & 0xE0) == 0xC0) {
            extra = 1; min = 0x80; c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            extra = 2; min = 0x800; c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            extra = 3; min = 0x10000; c &= 0x07;
        } else {
            return -1;
        }
        if (n - i - 1 < extra)
            return -1;
        for (int k = 1; k <= extra; k++) {
            uint32_t cc = p[i + k];
            if ((cc & 0xC0) != 0x80)
                return -1;
            c = (c << 6) | (cc & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return -1;
        if (c >= 0x10000) {
            uint32_t v = c - 0x10000;
            h = 31 * h + (0xD800 + (v >> 10));
            h = 31 * h + (0xDC00 + (v & 0x3FF));
        } else {
            h = 31 * h + c;
        }
        i += 1 + extra;
    }
    if (hash != NULL)
        *hash = h;
    return 0;
}

/* The module's functions (_speedups_pack.c, _speedups_index.c). */
int speedups_pack_init(void);
extern const char pack_records_doc[];
PyObject *pack_records(PyObject *module, PyObject *args);
extern const char index_records_doc[];
PyObject *index_records(PyObject *module, PyObject *args);

#endif
