/* The message index's two loops, in C: which keys the records of a stretch of
 * log carry and their hashes (key_hashes), and the put of hashed keys into an
 * index file (put_index_entries).
 * Both run without the GIL: the index service calls them in a worker thread.
 * They mirror triomq.broker.index.core.index_dispatch.key_hashes_py and
 * triomq.broker.index.core.index_file.IndexFile.put_hashed_py (the references; tests
 * compare the two). key_hashes returns None for anything unusual (a bad
 * record, invalid UTF-8, a property without its separator) and the caller
 * runs the Python version, which raises the precise error. */
#include "_speedups.h"

#define TRANSACTION_ROLLBACK 0xC
#define KEY_ENTRY_SIZE 20 /* keyHash:4 | phyOffset:8 | storeTimestamp:8 */
#define INDEX_HEADER_SIZE 40
#define INDEX_SLOT_SIZE 4
#define INDEX_ENTRY_SIZE 20

/* ------------------------------------------------------------ key_hashes */

typedef struct {
    unsigned char *data;
    Py_ssize_t len, cap;
} RawBuf;

static int raw_put_entry(RawBuf *b, uint32_t hash, int64_t offset, int64_t timestamp) {
    if (b->len + KEY_ENTRY_SIZE > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 4096;
        unsigned char *data = PyMem_RawRealloc(b->data, (size_t)cap);
        if (data == NULL)
            return -1;
        b->data = data;
        b->cap = cap;
    }
    unsigned char *p = b->data + b->len;
    put32(p, hash);
    put64(p + 4, (uint64_t)offset);
    put64(p + 12, (uint64_t)timestamp);
    b->len += KEY_ENTRY_SIZE;
    return 0;
}

/* Java's String.hashCode of topic + "#" + key, made RocketMQ's index hash
 * (abs, 0 for Integer.MIN_VALUE); key is valid UTF-8 (checked before). */
static uint32_t index_key_hash(uint32_t topic_hash, const unsigned char *key, Py_ssize_t n) {
    uint32_t h = 31 * topic_hash + '#';
    Py_ssize_t i = 0;
    while (i < n) {
        uint32_t c = key[i];
        int extra = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : 3;
        if (extra)
            c &= 0x3F >> extra;
        for (int k = 1; k <= extra; k++)
            c = (c << 6) | (key[i + k] & 0x3F);
        if (c >= 0x10000) {
            uint32_t v = c - 0x10000;
            h = 31 * h + (0xD800 + (v >> 10));
            h = 31 * h + (0xDC00 + (v & 0x3FF));
        } else {
            h = 31 * h + c;
        }
        i += 1 + extra;
    }
    int32_t s = (int32_t)h;
    if (s == INT32_MIN)
        return 0;
    return (uint32_t)(s < 0 ? -s : s);
}

/* The keys of the record at p[0:total]: 0 done, 1 for the Python version,
 * -1 out of memory. */
static int record_keys(const unsigned char *p, int64_t total, int v2, int64_t phys,
                       RawBuf *out) {
    RecordFields f;
    if (record_fields(p, total, v2, &f))
        return 1;
    uint32_t topic_hash = 0;
    if (utf8_check(f.topic, f.topic_len, &topic_hash) || utf8_check(f.props, f.props_len, NULL))
        return 1;
    int64_t timestamp = (int64_t)get64(p + f.store_ts_at);
    /* The last UNIQ_KEY and KEYS win, as in a dict of the properties. */
    const unsigned char *uniq = NULL, *keys = NULL;
    int64_t uniq_len = 0, keys_len = 0;
    int64_t i = 0, plen = f.props_len;
    while (i < plen) {
        const unsigned char *item = f.props + i;
        const unsigned char *end = memchr(item, 2, (size_t)(plen - i));
        int64_t ilen = end ? end - item : plen - i;
        if (ilen > 0) {
            const unsigned char *sep = memchr(item, 1, (size_t)ilen);
            if (sep == NULL)
                return 1;
            int64_t nlen = sep - item;
            if (nlen == 8 && memcmp(item, "UNIQ_KEY", 8) == 0) {
                uniq = sep + 1;
                uniq_len = ilen - 9;
            } else if (nlen == 4 && memcmp(item, "KEYS", 4) == 0) {
                keys = sep + 1;
                keys_len = ilen - 5;
            }
        }
        i += ilen + 1;
    }
    if ((f.sys_flag & TRANSACTION_ROLLBACK) == TRANSACTION_ROLLBACK)
        return 0;
    if (uniq_len > 0 && raw_put_entry(out, index_key_hash(topic_hash, uniq, uniq_len), phys,
                                      timestamp))
        return -1;
    int64_t k = 0;
    while (k < keys_len) {
        const unsigned char *word = keys + k;
        const unsigned char *space = memchr(word, ' ', (size_t)(keys_len - k));
        int64_t wlen = space ? space - word : keys_len - k;
        if (wlen > 0 && raw_put_entry(out, index_key_hash(topic_hash, word, wlen), phys,
                                      timestamp))
            return -1;
        k += wlen + 1;
    }
    return 0;
}

/* index_dispatch.walk's loop over raw bytes, collecting key entries: 0 done
 * (*next set), 1 for the Python version, -1 out of memory. */
static int walk_keys(const unsigned char *buf, int64_t n, int64_t base, int64_t segment_size,
                     RawBuf *out, int64_t *next) {
    int64_t pos = 0;
    while (n - pos >= 8) {
        int32_t total = (int32_t)get32(buf + pos);
        uint32_t magic = get32(buf + pos + 4);
        if (magic == BLANK_MAGIC) {
            int64_t phys = base + pos;
            *next = phys - phys % segment_size + segment_size;
            return 0;
        }
        if (total == 0)
            break;
        if ((magic != MAGIC_V1 && magic != MAGIC_V2) || total < MIN_RECORD_SIZE)
            return 1;
        if (total > n - pos)
            break;
        int r = record_keys(buf + pos, total, magic == MAGIC_V2, base + pos, out);
        if (r)
            return r;
        pos += total;
    }
    *next = base + pos;
    return 0;
}

const char key_hashes_doc[] = PyDoc_STR(
"key_hashes(buf, base_offset, segment_size)\n"
"--\n\n"
"Like index_dispatch.key_hashes_py: ``(entries, next_offset)`` or None. Runs\n"
"without the GIL.");

PyObject *key_hashes(PyObject *module, PyObject *args) {
    Py_buffer view;
    long long base, segment_size;
    if (!PyArg_ParseTuple(args, "y*LL:key_hashes", &view, &base, &segment_size))
        return NULL;
    if (segment_size <= 0) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    RawBuf out = {NULL, 0, 0};
    int64_t next = 0;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = walk_keys(view.buf, view.len, base, segment_size, &out, &next);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (r < 0) {
        PyErr_NoMemory();
    } else if (r > 0) {
        result = Py_NewRef(Py_None);
    } else {
        result = Py_BuildValue("(y#L)", out.data ? (const char *)out.data : "",
                               out.len, (long long)next);
    }
    PyMem_RawFree(out.data);
    return result;
}

/* ----------------------------------------------------- put_index_entries */

typedef struct {
    long long begin_ts, end_ts, begin_phy, end_phy;
    int slot_count, index_count;
} IndexHeader;

/* IndexFile._put for each entry from ``start`` until the file is full, touching no
 * Python object; how many it put. */
static int64_t put_entries(unsigned char *buf, int64_t slot_num, int64_t index_num,
                           IndexHeader *h, const unsigned char *entries, int64_t start,
                           int64_t total) {
    int64_t count = 0;
    for (int64_t i = start; i < total && h->index_count < index_num; i++, count++) {
        const unsigned char *entry = entries + i * KEY_ENTRY_SIZE;
        uint32_t hash = get32(entry);
        int64_t phy = (int64_t)get64(entry + 4);
        int64_t ts = (int64_t)get64(entry + 12);
        unsigned char *slot = buf + INDEX_HEADER_SIZE
                              + (int64_t)(hash % (uint64_t)slot_num) * INDEX_SLOT_SIZE;
        int32_t previous = (int32_t)get32(slot);
        if (previous <= 0 || previous > h->index_count)
            previous = 0;
        int64_t diff = 0;
        if (h->begin_ts > 0) {
            diff = ts - h->begin_ts;
            diff = diff < 0 ? 0 : diff / 1000;
            if (diff > INT32_MAX)
                diff = INT32_MAX;
        }
        int32_t number = h->index_count;
        unsigned char *at = buf + INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE
                            + (int64_t)number * INDEX_ENTRY_SIZE;
        put32(at, hash);
        put64(at + 4, (uint64_t)phy);
        put32(at + 12, (uint32_t)diff);
        put32(at + 16, (uint32_t)previous);
        put32(slot, (uint32_t)number);
        if (number <= 1) {
            h->begin_phy = phy;
            h->begin_ts = ts;
        }
        if (previous == 0)
            h->slot_count++;
        h->index_count++;
        h->end_phy = phy;
        h->end_ts = ts;
    }
    if (count) {
        put64(buf, (uint64_t)h->begin_ts);
        put64(buf + 8, (uint64_t)h->end_ts);
        put64(buf + 16, (uint64_t)h->begin_phy);
        put64(buf + 24, (uint64_t)h->end_phy);
        put32(buf + 32, (uint32_t)h->slot_count);
        put32(buf + 36, (uint32_t)h->index_count);
    }
    return count;
}

const char put_index_entries_doc[] = PyDoc_STR(
"put_index_entries(buf, slot_num, index_num, header, entries, start)\n"
"--\n\n"
"Like index_file.IndexFile.put_hashed_py: put the key entries of ``entries``\n"
"from entry ``start`` until the file is full; ``(count, header)``, the header\n"
"a tuple of its six fields (also written into ``buf``). Runs without the GIL.");

PyObject *put_index_entries(PyObject *module, PyObject *args) {
    Py_buffer file, entries;
    long long slot_num, index_num, start;
    IndexHeader h;
    if (!PyArg_ParseTuple(args, "w*LL(LLLLii)y*L:put_index_entries", &file, &slot_num,
                          &index_num, &h.begin_ts, &h.end_ts, &h.begin_phy, &h.end_phy,
                          &h.slot_count, &h.index_count, &entries, &start))
        return NULL;
    PyObject *result = NULL;
    if (slot_num <= 0 || index_num <= 0 || start < 0
        || file.len < INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE
                          + index_num * INDEX_ENTRY_SIZE) {
        PyErr_SetString(PyExc_ValueError, "index file too small for its counts");
    } else {
        int64_t count;
        /* First writes to a sparse file's pages fault: the loop runs meanwhile. */
        Py_BEGIN_ALLOW_THREADS
        count = put_entries(file.buf, slot_num, index_num, &h, entries.buf, start,
                            entries.len / KEY_ENTRY_SIZE);
        Py_END_ALLOW_THREADS
        result = Py_BuildValue("(L(LLLLii))", (long long)count, h.begin_ts, h.end_ts,
                               h.begin_phy, h.end_phy, h.slot_count, h.index_count);
    }
    PyBuffer_Release(&file);
    PyBuffer_Release(&entries);
    return result;
}
