/* record_columns: every column of a run of contiguous commit-log records, as
 * Arrow-layout buffers built in one pass (see framework/protocol/columns.py).
 *
 * The buffers are read-only ColumnBuffer objects (native-endian values, int32
 * offsets, validity bitmaps) exposing the buffer protocol, so the module
 * needs no Arrow headers; the caller wraps them. It accepts only what the Arrow-kernel decoder accepts the same way:
 * on anything else (a length that does not add up, a bad magic or CRC,
 * invalid UTF-8, a property string of another shape, an IPv4-mapped IPv6
 * host whose text differs between Python versions, a timestamp whose
 * microseconds overflow) it returns None and the caller decodes in Python.
 *
 * record_starts (in _columns_starts.c): where the records of a range start,
 * from their headers alone (a planner cutting a log into tasks). */
#include "_columns.h"

#define MAX_MILLIS (INT64_MAX / 1000)

/* ------------------------------------------------------------ block pool */

/* Output buffers of 64 KiB and more are blocks of 2^k bytes. A freed block
 * is kept for the next run (up to POOL_KEEP bytes in all) instead of going
 * back to malloc: fresh memory costs a page fault and a cleared page per
 * 4 KiB, more than building the columns (glibc serves large blocks with
 * mmap and hands them back on free). */
#define POOL_MIN_SHIFT 16
#define POOL_SHIFTS 48
#define POOL_PER_SIZE 64
#define POOL_KEEP ((size_t)64 << 20)

static void *pool[POOL_SHIFTS][POOL_PER_SIZE];
static int pool_count[POOL_SHIFTS];
static size_t pool_kept;

static int block_shift(size_t cap) {
    int k = POOL_MIN_SHIFT;
    while (((size_t)1 << k) < cap)
        k++;
    return k;
}

/* A block of at least ``size`` bytes; its capacity in *cap. */
static void *block_alloc(size_t size, size_t *cap) {
    if (size < ((size_t)1 << POOL_MIN_SHIFT)) {
        *cap = size;
        return PyMem_RawMalloc(size ? size : 1);
    }
    int k = block_shift(size);
    if (k >= POOL_SHIFTS)
        return NULL;
    *cap = (size_t)1 << k;
    if (pool_count[k]) {
        pool_kept -= *cap;
        return pool[k][--pool_count[k]];
    }
    return PyMem_RawMalloc(*cap);
}

static void block_free(void *p, size_t cap) {
    if (p == NULL)
        return;
    if (cap >= ((size_t)1 << POOL_MIN_SHIFT) && (cap & (cap - 1)) == 0) {
        int k = block_shift(cap);
        if (pool_count[k] < POOL_PER_SIZE && pool_kept + cap <= POOL_KEEP) {
            pool[k][pool_count[k]++] = p;
            pool_kept += cap;
            return;
        }
    }
    PyMem_RawFree(p);
}

/* ---------------------------------------------------------- ColumnBuffer */

/* A finished column buffer: read-only bytes (buffer protocol) whose block
 * goes back to the pool when the last reader lets go. */
typedef struct {
    PyObject_HEAD
    unsigned char *data;
    Py_ssize_t len;
    size_t cap;
} ColumnBuffer;

static void column_buffer_dealloc(ColumnBuffer *self) {
    block_free(self->data, self->cap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int column_buffer_getbuffer(ColumnBuffer *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->len, 1, flags);
}

static Py_ssize_t column_buffer_length(ColumnBuffer *self) {
    return self->len;
}

static PyBufferProcs column_buffer_as_buffer = {
    (getbufferproc)column_buffer_getbuffer, NULL,
};

static PyMappingMethods column_buffer_as_mapping = {
    (lenfunc)column_buffer_length, NULL, NULL,
};

static PyTypeObject ColumnBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "triomq.protocol._columns.ColumnBuffer",
    .tp_basicsize = sizeof(ColumnBuffer),
    .tp_dealloc = (destructor)column_buffer_dealloc,
    .tp_as_buffer = &column_buffer_as_buffer,
    .tp_as_mapping = &column_buffer_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Read-only bytes of one column buffer (see columns.py).",
};

/* ------------------------------------------------------ output buffers */

/* A buffer filled front to back. */
typedef struct {
    unsigned char *data;
    Py_ssize_t len;
    size_t cap;
} Out;

static int out_init(Out *o, Py_ssize_t cap) {
    o->len = 0;
    o->data = block_alloc((size_t)cap, &o->cap);
    if (o->data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int out_grow(Out *o, Py_ssize_t extra) {
    size_t cap;
    size_t want = (size_t)(o->len + extra);
    if (want < 2 * o->cap)
        want = 2 * o->cap;
    unsigned char *data = block_alloc(want, &cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(data, o->data, (size_t)o->len);
    block_free(o->data, o->cap);
    o->data = data;
    o->cap = cap;
    return 0;
}

static inline int out_put(Out *o, const void *p, Py_ssize_t n) {
    if (n == 0)
        return 0;
    if ((size_t)(o->len + n) > o->cap && out_grow(o, n) < 0)
        return -1;
    memcpy(o->data + o->len, p, (size_t)n);
    o->len += n;
    return 0;
}

/* The buffer as a ColumnBuffer (which then owns the block). */
static PyObject *out_take(Out *o) {
    ColumnBuffer *buffer = PyObject_New(ColumnBuffer, &ColumnBufferType);
    if (buffer == NULL)
        return NULL;
    buffer->data = o->data;
    buffer->len = o->len;
    buffer->cap = o->cap;
    o->data = NULL;
    return (PyObject *)buffer;
}

static void out_release(Out *o) {
    block_free(o->data, o->cap);
    o->data = NULL;
}

/* Fixed-width values: the buffer was sized for all of them. */
static inline void put_i32(Out *o, int32_t v) {
    memcpy(o->data + o->len, &v, 4);
    o->len += 4;
}

static inline void put_i64(Out *o, int64_t v) {
    memcpy(o->data + o->len, &v, 8);
    o->len += 8;
}

/* A string or binary column: int32 offsets and the values' bytes. */
typedef struct {
    Out offsets, data;
} VarOut;

static int var_init(VarOut *v, Py_ssize_t values, Py_ssize_t data_cap) {
    if (out_init(&v->offsets, 4 * (values + 1)) < 0 || out_init(&v->data, data_cap) < 0)
        return -1;
    put_i32(&v->offsets, 0);
    return 0;
}

static inline int var_add(VarOut *v, const void *p, Py_ssize_t n) {
    if (out_put(&v->data, p, n) < 0)
        return -1;
    if (v->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a column's values exceed 2 GiB (int32 offsets)");
        return -1;
    }
    int32_t end = (int32_t)v->data.len;
    return out_put(&v->offsets, &end, 4);
}

/* ``count`` bits, all zero (null) until set. */
static int bitmap_init(Out *o, Py_ssize_t count) {
    if (out_init(o, (count + 7) / 8) < 0)
        return -1;
    o->len = (count + 7) / 8;
    memset(o->data, 0, (size_t)o->len);
    return 0;
}

static inline void bit_set(Out *bitmap, Py_ssize_t i) {
    bitmap->data[i >> 3] |= (unsigned char)(1u << (i & 7));
}

static Py_ssize_t put_decimal(char *out, int64_t v) {
    char digits[24];
    Py_ssize_t n = 0, len = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = digits[--n];
    return len;
}

/* Python's str() of the address, then ":port" ("[v6]:port" for IPv6), into
 * out (at least 64 bytes). Returns the length, or -1 for an IPv4-mapped
 * address (Python 3.13 writes those differently from 3.11). */
static Py_ssize_t format_host(char *out, const unsigned char *ip, int v6, int32_t port) {
    Py_ssize_t len = 0;
    if (!v6) {
        for (int i = 0; i < 4; i++) {
            if (i)
                out[len++] = '.';
            len += put_decimal(out + len, ip[i]);
        }
    } else {
        unsigned hextets[8];
        for (int i = 0; i < 8; i++)
            hextets[i] = ((unsigned)ip[2 * i] << 8) | ip[2 * i + 1];
        if (!hextets[0] && !hextets[1] && !hextets[2] && !hextets[3] && !hextets[4]
            && hextets[5] == 0xFFFF)
            return -1;
        /* The first longest run of two or more zero groups becomes "::". */
        int best = -1, best_len = 1, run = -1;
        for (int i = 0; i < 8; i++) {
            if (hextets[i]) {
                run = -1;
                continue;
            }
            if (run < 0)
                run = i;
            if (i - run + 1 > best_len) {
                best = run;
                best_len = i - run + 1;
            }
        }
        out[len++] = '[';
        for (int i = 0; i < 8; i++) {
            if (i == best) {
                out[len++] = ':';
                out[len++] = ':';
                i += best_len - 1;
                continue;
            }
            if (i && i != best + best_len)
                out[len++] = ':';
            len += snprintf(out + len, 8, "%x", hextets[i]);
        }
        out[len++] = ']';
    }
    out[len++] = ':';
    len += put_decimal(out + len, port);
    return len;
}

/* The last host written to a column, reused while records repeat it. */
typedef struct {
    unsigned char key[21];
    char text[64];
    Py_ssize_t len;
} HostCache;

static int add_host(VarOut *col, HostCache *cache, const unsigned char *p, int v6) {
    unsigned char key[21];
    Py_ssize_t n = v6 ? 20 : 8;
    key[0] = (unsigned char)v6;
    memcpy(key + 1, p, (size_t)n);
    if (cache->len <= 0 || memcmp(cache->key, key, (size_t)n + 1) != 0) {
        cache->len = format_host(cache->text, p, v6, (int32_t)get32(p + n - 4));
        if (cache->len < 0)
            return 1;
        memcpy(cache->key, key, (size_t)n + 1);
    }
    return var_add(col, cache->text, cache->len) < 0 ? -1 : 0;
}

enum {
    C_PHYS, C_SIZE, C_QUEUE_ID, C_QUEUE_OFFSET, C_CRC, C_SYSFLAG, C_FLAG, C_RECONSUME,
    C_BORN_TS, C_STORE_TS, C_PREPARED, C_PROPS_OFFSETS, N_FIXED
};
enum { V_TOPIC, V_BODY, V_TAGS, V_KEYS, V_PROP_KEYS, V_PROP_VALUES, V_BORN_HOST,
       V_STORE_HOST, N_VAR };
enum { B_TAGS, B_KEYS, B_BORN_TS, B_STORE_TS, N_BITMAPS };

typedef struct {
    Out fixed[N_FIXED];
    VarOut var[N_VAR];
    Out bitmaps[N_BITMAPS];
    Py_ssize_t nulls[N_BITMAPS];
    HostCache hosts[2];
    int32_t pairs;
} Columns;

static void columns_clear(Columns *c) {
    for (int i = 0; i < N_FIXED; i++)
        out_release(&c->fixed[i]);
    for (int i = 0; i < N_VAR; i++) {
        out_release(&c->var[i].offsets);
        out_release(&c->var[i].data);
    }
    for (int i = 0; i < N_BITMAPS; i++)
        out_release(&c->bitmaps[i]);
}

static int columns_init(Columns *c, Py_ssize_t n, Py_ssize_t run_bytes) {
    static const int width[N_FIXED] = {8, 4, 4, 8, 4, 4, 4, 4, 8, 8, 8, 4};
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < N_FIXED; i++)
        if (out_init(&c->fixed[i], width[i] * (i == C_PROPS_OFFSETS ? n + 1 : n)) < 0)
            return -1;
    put_i32(&c->fixed[C_PROPS_OFFSETS], 0);
    for (int i = 0; i < N_VAR; i++) {
        Py_ssize_t values = (i == V_PROP_KEYS || i == V_PROP_VALUES) ? 4 * n : n;
        Py_ssize_t cap = i == V_BODY ? run_bytes : 16 * n;
        if (var_init(&c->var[i], values, cap) < 0)
            return -1;
    }
    for (int i = 0; i < N_BITMAPS; i++)
        if (bitmap_init(&c->bitmaps[i], n) < 0)
            return -1;
    return 0;
}

/* The value of tags or keys: the record's first such pair, or null (value NULL). */
static int add_first(Columns *c, int col, int bitmap, Py_ssize_t row,
                     const unsigned char *value, Py_ssize_t len) {
    if (value == NULL) {
        c->nulls[bitmap]++;
        return var_add(&c->var[col], NULL, 0);
    }
    bit_set(&c->bitmaps[bitmap], row);
    return var_add(&c->var[col], value, len);
}

/* Split ``key\x01value\x02`` pairs into the map's key and value columns and
 * find the first TAGS and KEYS. 1 when the string is not of that exact shape
 * (empty, or every pair non-empty, with a separator, and terminated). */
static int add_properties(Columns *c, Py_ssize_t row, const unsigned char *p, Py_ssize_t n) {
    const unsigned char *tags = NULL, *keys = NULL;
    Py_ssize_t tags_len = 0, keys_len = 0;
    if (n && p[n - 1] != 2)
        return 1;
    if (utf8_check(p, n, NULL))
        return 1;
    Py_ssize_t i = 0;
    while (i < n) {
        const unsigned char *item = p + i;
        Py_ssize_t len = (const unsigned char *)memchr(item, 2, (size_t)(n - i)) - item;
        const unsigned char *sep = len ? memchr(item, 1, (size_t)len) : NULL;
        if (sep == NULL)
            return 1;
        Py_ssize_t key_len = sep - item, value_len = len - key_len - 1;
        if (var_add(&c->var[V_PROP_KEYS], item, key_len) < 0
            || var_add(&c->var[V_PROP_VALUES], sep + 1, value_len) < 0)
            return -1;
        if (key_len == 4 && tags == NULL && memcmp(item, "TAGS", 4) == 0) {
            tags = sep + 1;
            tags_len = value_len;
        } else if (key_len == 4 && keys == NULL && memcmp(item, "KEYS", 4) == 0) {
            keys = sep + 1;
            keys_len = value_len;
        }
        c->pairs++;
        i += len + 1;
    }
    put_i32(&c->fixed[C_PROPS_OFFSETS], c->pairs);
    if (add_first(c, V_TAGS, B_TAGS, row, tags, tags_len) < 0
        || add_first(c, V_KEYS, B_KEYS, row, keys, keys_len) < 0)
        return -1;
    return 0;
}

static void add_timestamp(Columns *c, int col, int bitmap, Py_ssize_t row, int64_t millis) {
    if (millis > MAX_MILLIS || millis < -MAX_MILLIS) {
        c->nulls[bitmap]++;
        put_i64(&c->fixed[col], 0);
        return;
    }
    bit_set(&c->bitmaps[bitmap], row);
    put_i64(&c->fixed[col], millis * 1000);
}

/* One record at p[0:total]: 0 when added, 1 to leave the run to Python, -1 on error. */
static int add_record(Columns *c, Py_ssize_t row, const unsigned char *p, int64_t total,
                      int verify_crc) {
    uint32_t magic = get32(p + 4);
    if ((magic != MAGIC_V1 && magic != MAGIC_V2) || total < MIN_RECORD_SIZE
        || (int64_t)get32(p) != total)
        return 1;
    RecordFields f;
    if (record_fields(p, total, magic == MAGIC_V2, &f))
        return 1;
    int32_t crc = (int32_t)get32(p + 8);
    if (verify_crc && (uint32_t)crc != body_crc(f.body, f.body_len))
        return 1;
    if (utf8_check(f.topic, f.topic_len, NULL))
        return 1;
    int64_t born_ts = (int64_t)get64(p + 40), store_ts = (int64_t)get64(p + f.store_ts_at);
    if (born_ts == INT64_MIN || store_ts == INT64_MIN)
        return 1;
    int r = add_properties(c, row, f.props, f.props_len);
    if (r)
        return r;
    if ((r = add_host(&c->var[V_BORN_HOST], &c->hosts[0], p + 48, f.born6)) != 0
        || (r = add_host(&c->var[V_STORE_HOST], &c->hosts[1], p + f.store_at, f.store6)) != 0)
        return r;
    if (var_add(&c->var[V_TOPIC], f.topic, f.topic_len) < 0
        || var_add(&c->var[V_BODY], f.body, f.body_len) < 0)
        return -1;
    put_i64(&c->fixed[C_PHYS], (int64_t)get64(p + 28));
    put_i32(&c->fixed[C_SIZE], (int32_t)total);
    put_i32(&c->fixed[C_QUEUE_ID], (int32_t)get32(p + 12));
    put_i64(&c->fixed[C_QUEUE_OFFSET], (int64_t)get64(p + 20));
    put_i32(&c->fixed[C_CRC], crc);
    put_i32(&c->fixed[C_SYSFLAG], (int32_t)f.sys_flag);
    put_i32(&c->fixed[C_FLAG], (int32_t)get32(p + 16));
    put_i32(&c->fixed[C_RECONSUME], (int32_t)get32(p + f.reconsume_at));
    put_i64(&c->fixed[C_PREPARED], (int64_t)get64(p + f.reconsume_at + 4));
    add_timestamp(c, C_BORN_TS, B_BORN_TS, row, born_ts);
    add_timestamp(c, C_STORE_TS, B_STORE_TS, row, store_ts);
    return 0;
}

/* Hand the buffers over as a tuple: the fixed columns, then (offsets, data)
 * of each variable one, then the bitmaps (None where nothing is null). */
static PyObject *columns_result(Columns *c) {
    PyObject *result = PyTuple_New(N_FIXED + 2 * N_VAR + N_BITMAPS);
    if (result == NULL)
        return NULL;
    Py_ssize_t k = 0;
    PyObject *item;
    for (int i = 0; i < N_FIXED; i++) {
        if ((item = out_take(&c->fixed[i])) == NULL)
            goto fail;
        PyTuple_SET_ITEM(result, k++, item);
    }
    for (int i = 0; i < N_VAR; i++) {
        if ((item = out_take(&c->var[i].offsets)) == NULL)
            goto fail;
        PyTuple_SET_ITEM(result, k++, item);
        if ((item = out_take(&c->var[i].data)) == NULL)
            goto fail;
        PyTuple_SET_ITEM(result, k++, item);
    }
    for (int i = 0; i < N_BITMAPS; i++) {
        if (!c->nulls[i]) {
            PyTuple_SET_ITEM(result, k++, Py_NewRef(Py_None));
        } else if ((item = out_take(&c->bitmaps[i])) == NULL) {
            goto fail;
        } else {
            PyTuple_SET_ITEM(result, k++, item);
        }
    }
    return result;
fail:
    Py_DECREF(result);
    return NULL;
}

static const char record_columns_doc[] =
    "record_columns(buf, starts, end, verify_crc) -> tuple | None\n\n"
    "The column buffers of the contiguous records of buf that start at the\n"
    "native int32 positions in starts (the last ends at end), or None when\n"
    "the run must be decoded in Python. See triomq.protocol.columns.";

static PyObject *record_columns(PyObject *module, PyObject *args) {
    Py_buffer view, starts;
    Py_ssize_t end;
    int verify_crc;
    if (!PyArg_ParseTuple(args, "y*y*np:record_columns", &view, &starts, &end, &verify_crc))
        return NULL;
    PyObject *result = NULL;
    Columns c;
    memset(&c, 0, sizeof(c));
    Py_ssize_t n = starts.len / 4;
    const unsigned char *buf = view.buf;
    int32_t first = 0;
    if (n)
        memcpy(&first, starts.buf, 4);
    if (!n || starts.len % 4 || end > view.len || end > INT32_MAX || first < 0 || first >= end) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (columns_init(&c, n, end - first) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t at, next = (int32_t)end;
        memcpy(&at, (const char *)starts.buf + 4 * i, 4);
        if (i + 1 < n)
            memcpy(&next, (const char *)starts.buf + 4 * (i + 1), 4);
        if (at < 0 || next > end || next - (int64_t)at < MIN_RECORD_SIZE) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        int r = add_record(&c, i, buf + at, next - (int64_t)at, verify_crc);
        if (r < 0)
            goto done;
        if (r > 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    result = columns_result(&c);
done:
    columns_clear(&c);
    PyBuffer_Release(&view);
    PyBuffer_Release(&starts);
    return result;
}

static PyMethodDef methods[] = {
    {"record_columns", record_columns, METH_VARARGS, record_columns_doc},
    {"record_starts", record_starts, METH_VARARGS, record_starts_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "triomq.protocol._columns",
    "Arrow-layout column buffers of commit-log records (see columns.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columns(void) {
    if (PyType_Ready(&ColumnBufferType) < 0)
        return NULL;
    return PyModule_Create(&module_def);
}
