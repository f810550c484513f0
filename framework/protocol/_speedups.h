/* Shared definitions of the _speedups extension (see _speedups.c). */
#ifndef TRIOMQ_SPEEDUPS_H
#define TRIOMQ_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
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

/* CRC-32 (zlib's) folded with carry-less multiplications: about four times
 * zlib 1.2's table-driven crc32 on the bodies the walks check with 128-bit
 * folds 64 bytes a round, twice that again with 512-bit folds (VPCLMULQDQ)
 * 256 bytes a round. The method and constants are Intel's ("Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ", reflected CRC-32;
 * a constant for a fold over n bits is x^(n +- 32) mod P, bit-reflected and
 * shifted left once). Used when the CPU has the instructions; zlib does the
 * rest and the short tails. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CRC_CLMUL 1

/* Folds over 512 bits (x^480, x^544) and over 128 bits (x^96, x^160). */
#define K_FOLD_512_HI 0x01c6e41596
#define K_FOLD_512_LO 0x0154442bd4
#define K_FOLD_128_HI 0x00ccaa009e
#define K_FOLD_128_LO 0x01751997d0
/* Fold over 2048 bits: x^2016, x^2080. */
#define K_FOLD_2048_HI 0x01322d1430
#define K_FOLD_2048_LO 0x011542778a

/* Four consecutive 16-byte lanes x1..x4 (the bytes before p, folded) into the
 * CRC register: then the n remaining bytes, n % 16 == 0. */
__attribute__((target("pclmul,sse4.1")))
static inline uint32_t crc_clmul_finish(__m128i x1, __m128i x2, __m128i x3, __m128i x4,
                                        const unsigned char *p, size_t n) {
    const __m128i k3k4 = _mm_set_epi64x(K_FOLD_128_HI, K_FOLD_128_LO);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i lanes[3] = {x2, x3, x4};
    for (int i = 0; i < 3; i++) {
        __m128i lo = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), lo);
        x1 = _mm_xor_si128(x1, lanes[i]);
    }
    while (n >= 16) {
        __m128i lo = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), lo);
        x1 = _mm_xor_si128(x1, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    /* 128 bits to 64, then a Barrett reduction to 32. */
    __m128i x = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(x1, k3k4, 0x10));
    x = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x, low32), k5, 0x00),
                      _mm_srli_si128(x, 4));
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, low32), poly, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), poly, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x, t), 1);
}

/* The CRC register (not inverted) after ``crc`` and n bytes, n >= 64, n % 16 == 0. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_clmul_fold(uint32_t crc, const unsigned char *p, size_t n) {
    const __m128i k1k2 = _mm_set_epi64x(K_FOLD_512_HI, K_FOLD_512_LO);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    p += 64;
    n -= 64;
    while (n >= 64) {  /* four lanes, each folded 512 bits ahead */
        __m128i h1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        __m128i h2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        __m128i h3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        __m128i h4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k1k2, 0x00), h1);
        x2 = _mm_xor_si128(_mm_clmulepi64_si128(x2, k1k2, 0x00), h2);
        x3 = _mm_xor_si128(_mm_clmulepi64_si128(x3, k1k2, 0x00), h3);
        x4 = _mm_xor_si128(_mm_clmulepi64_si128(x4, k1k2, 0x00), h4);
        x1 = _mm_xor_si128(x1, _mm_loadu_si128((const __m128i *)(p + 0x00)));
        x2 = _mm_xor_si128(x2, _mm_loadu_si128((const __m128i *)(p + 0x10)));
        x3 = _mm_xor_si128(x3, _mm_loadu_si128((const __m128i *)(p + 0x20)));
        x4 = _mm_xor_si128(x4, _mm_loadu_si128((const __m128i *)(p + 0x30)));
        p += 64;
        n -= 64;
    }
    return crc_clmul_finish(x1, x2, x3, x4, p, n);
}

#define VCLMUL_TARGET "avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1"

/* x folded ``k``'s distance ahead, xor ``next`` (three-way xor: 0x96). */
__attribute__((target(VCLMUL_TARGET)))
static inline __m512i vclmul_fold(__m512i x, __m512i k, __m512i next) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), next, 0x96);
}

/* crc_clmul_fold with four 512-bit lanes, n >= 256, n % 16 == 0. */
__attribute__((target(VCLMUL_TARGET)))
static uint32_t crc_vclmul_fold(uint32_t crc, const unsigned char *p, size_t n) {
    const __m512i k2048 = _mm512_set_epi64(K_FOLD_2048_HI, K_FOLD_2048_LO,
                                           K_FOLD_2048_HI, K_FOLD_2048_LO,
                                           K_FOLD_2048_HI, K_FOLD_2048_LO,
                                           K_FOLD_2048_HI, K_FOLD_2048_LO);
    const __m512i k512 = _mm512_set_epi64(K_FOLD_512_HI, K_FOLD_512_LO,
                                          K_FOLD_512_HI, K_FOLD_512_LO,
                                          K_FOLD_512_HI, K_FOLD_512_LO,
                                          K_FOLD_512_HI, K_FOLD_512_LO);
    __m512i x1 = _mm512_loadu_si512((const void *)(p + 0x00));
    __m512i x2 = _mm512_loadu_si512((const void *)(p + 0x40));
    __m512i x3 = _mm512_loadu_si512((const void *)(p + 0x80));
    __m512i x4 = _mm512_loadu_si512((const void *)(p + 0xc0));
    x1 = _mm512_xor_si512(x1, _mm512_inserti32x4(_mm512_setzero_si512(),
                                                   _mm_cvtsi32_si128((int)crc), 0));
    p += 256;
    n -= 256;
    while (n >= 256) {  /* four 512-bit lanes, each folded 2048 bits ahead */
        x1 = vclmul_fold(x1, k2048, _mm512_loadu_si512((const void *)(p + 0x00)));
        x2 = vclmul_fold(x2, k2048, _mm512_loadu_si512((const void *)(p + 0x40)));
        x3 = vclmul_fold(x3, k2048, _mm512_loadu_si512((const void *)(p + 0x80)));
        x4 = vclmul_fold(x4, k2048, _mm512_loadu_si512((const void *)(p + 0xc0)));
        p += 256;
        n -= 256;
    }
    /* The four lanes into one, then 64 bytes a round into it. */
    x1 = vclmul_fold(x1, k512, x2);
    x1 = vclmul_fold(x1, k512, x3);
    x1 = vclmul_fold(x1, k512, x4);
    while (n >= 64) {
        x1 = vclmul_fold(x1, k512, _mm512_loadu_si512((const void *)p));
        p += 64;
        n -= 64;
    }
    return crc_clmul_finish(_mm512_extracti32x4_epi32(x1, 0), _mm512_extracti32x4_epi32(x1, 1),
                            _mm512_extracti32x4_epi32(x1, 2), _mm512_extracti32x4_epi32(x1, 3),
                            p, n);
}

static inline int crc_clmul_available(void) {
    static int known = -1;
    if (known < 0)
        known = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    return known;
}

static inline int crc_vclmul_available(void) {
    static int known = -1;
    if (known < 0)
        known = getenv("TRIOMQ_NO_VPCLMULQDQ") == NULL && crc_clmul_available()
            && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
            && __builtin_cpu_supports("vpclmulqdq");
    return known;
}
#endif

/* zlib's crc32(0, p, n). */
static inline uint32_t crc32_of(const unsigned char *p, Py_ssize_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
#ifdef HAVE_CRC_CLMUL
    if (n >= 64 && crc_clmul_available()) {
        size_t folded = (size_t)n & ~(size_t)15;
        crc = ~(n >= 256 && crc_vclmul_available()
                ? crc_vclmul_fold(~(uint32_t)crc, p, folded)
                : crc_clmul_fold(~(uint32_t)crc, p, folded)) & 0xFFFFFFFFu;
        p += folded;
        n -= (Py_ssize_t)folded;
    }
#endif
    while (n > 0) {
        uInt chunk = n > (1 << 30) ? (1 << 30) : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)crc;
}

/* Where the fields of the record at p[0:total] lie (total >= MIN_RECORD_SIZE,
 * v2 for MAGIC_V2's two-byte topic length). 0 when the body, topic and
 * properties lengths fit the record exactly, 1 when they do not. */
typedef struct {
    uint32_t sys_flag;
    int born6, store6;
    int64_t store_ts_at, store_at, reconsume_at;  /* bornHost is at 48 */
    const unsigned char *body, *topic, *props;
    int64_t body_len, topic_len, props_len;
} RecordFields;

static inline int record_fields(const unsigned char *p, int64_t total, int v2,
                                RecordFields *f) {
    f->sys_flag = get32(p + 36);
    f->born6 = (f->sys_flag & BORNHOST_V6) != 0;
    f->store6 = (f->sys_flag & STOREHOST_V6) != 0;
    f->store_ts_at = 48 + (f->born6 ? 20 : 8);
    f->store_at = f->store_ts_at + 8;
    f->reconsume_at = f->store_at + (f->store6 ? 20 : 8);
    /* reconsumeTimes (4), preparedTransactionOffset (8), then the body's length. */
    int64_t at = f->reconsume_at + 12;
    if (at + 4 > total)
        return 1;
    f->body_len = (int32_t)get32(p + at);
    at += 4;
    if (f->body_len < 0 || at + f->body_len > total)
        return 1;
    f->body = p + at;
    at += f->body_len;
    if (v2) {
        if (at + 2 > total)
            return 1;
        f->topic_len = ((int64_t)p[at] << 8) | p[at + 1];
        at += 2;
    } else {
        if (at + 1 > total)
            return 1;
        f->topic_len = p[at++];
    }
    f->topic = p + at;
    at += f->topic_len;
    if (at + 2 > total)
        return 1;
    f->props_len = ((int64_t)p[at] << 8) | p[at + 1];
    f->props = p + at + 2;
    return at + 2 + f->props_len != total;
}

/* RocketMQ's body CRC: CRC-32 with the sign bit cleared. */
static inline uint32_t body_crc(const unsigned char *p, Py_ssize_t n) {
    return crc32_of(p, n) & 0x7FFFFFFFu;
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

/* The module's functions (_speedups_pack.c, _speedups_index.c, _speedups_keys.c). */
int speedups_pack_init(void);
extern const char pack_records_doc[];
PyObject *pack_records(PyObject *module, PyObject *args);
extern const char index_records_doc[];
PyObject *index_records(PyObject *module, PyObject *args);
extern const char key_hashes_doc[];
PyObject *key_hashes(PyObject *module, PyObject *args);
extern const char put_index_entries_doc[];
PyObject *put_index_entries(PyObject *module, PyObject *args);
extern const char crc32_doc[];
PyObject *crc32_py(PyObject *module, PyObject *args);

#endif
