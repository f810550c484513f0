/* index_records: walk replicated (or recovered) log bytes, check every record
 * and collect the consume-queue entries it needs. Mirrors
 * commitlog_layout.index_records_py (see _speedups.c). */
#include "_speedups.h"

/* ----------------------------------------------------------- index_records */

/* Check the record at p[0:total] (total already within the buffer) and read
 * what its consume-queue entry needs. Returns 0 if the Python reference
 * (check + check_placement + decode) would accept it. */
static int check_record(const unsigned char *p, int64_t total, int v2, int64_t phys,
                        int32_t *queue_id, int64_t *qoff, const unsigned char **topic,
                        Py_ssize_t *topic_len, int64_t *tags) {
    RecordFields f;
    if (total < MIN_RECORD_SIZE || record_fields(p, total, v2, &f))
        return 1;
    const unsigned char *t = f.topic, *props = f.props;
    int64_t tlen = f.topic_len, plen = f.props_len;
    if ((int32_t)get32(p + 8) != (int32_t)body_crc(f.body, f.body_len))
        return 1;
    if ((int64_t)get64(p + 28) != phys)
        return 1;
    int64_t q = (int64_t)get64(p + 20);
    if (q < 0 || q > phys / MIN_RECORD_SIZE)
        return 1;
    if (utf8_check(t, tlen, NULL))
        return 1;
    /* Properties: valid UTF-8, every item has a separator; TAGS (last wins). */
    if (utf8_check(props, plen, NULL))
        return 1;
    int64_t tag = 0;
    int64_t i = 0;
    while (i < plen) {
        const unsigned char *item = props + i;
        const unsigned char *end = memchr(item, 2, (size_t)(plen - i));
        int64_t ilen = end ? end - item : plen - i;
        if (ilen > 0) {
            const unsigned char *sep = memchr(item, 1, (size_t)ilen);
            if (sep == NULL)
                return 1;
            if (sep - item == 4 && memcmp(item, "TAGS", 4) == 0) {
                uint32_t h = 0;
                if (utf8_check(sep + 1, ilen - 5, &h))
                    return 1;
                tag = (int32_t)h;
            }
        }
        i += ilen + 1;
    }
    *queue_id = (int32_t)get32(p + 12);
    *qoff = q;
    *topic = t;
    *topic_len = (Py_ssize_t)tlen;
    *tags = tag;
    return 0;
}

typedef struct {
    const unsigned char *topic;
    Py_ssize_t topic_len;
    int32_t queue_id;
    int64_t first, next;
    Buf entries;
} IndexRun;

/* The walk over the records, touching no Python object (it may run without
 * the GIL): 0 when done (w->end, w->stop, w->runs set), 1 for a record the
 * Python version must judge, -1 when out of memory. */
typedef struct {
    IndexRun *runs;
    Py_ssize_t nruns;
    int64_t end;
    const char *stop;
} Walk;

static int raw_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->len + extra)
        cap *= 2;
    unsigned char *data = PyMem_RawRealloc(b->data, (size_t)cap);
    if (data == NULL)
        return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int walk(const unsigned char *buf, int64_t n, int64_t base, int64_t segment_size,
                Walk *w) {
    IndexRun *runs = NULL;
    Py_ssize_t nruns = 0, cap = 0, last = 0;
    int64_t pos = 0;
    w->stop = "end";
    while (pos < n) {
        int64_t phys = base + pos;
        int64_t seg_end = phys - phys % segment_size + segment_size - base;
        int64_t limit = n < seg_end ? n : seg_end;
        int64_t left = limit - pos;
        if (left < 8) {
            /* A zero totalSize is zero fill; other short bytes are torn only
             * at the end of the data. */
            if (left >= 4 && get32(buf + pos) == 0)
                w->stop = "zero";
            else if (limit == n)
                w->stop = "torn";
            else
                return 1;
            break;
        }
        int64_t total = (int32_t)get32(buf + pos);
        uint32_t magic = get32(buf + pos + 4);
        if (total == 0) {
            w->stop = "zero";
            break;
        }
        if (magic == BLANK_MAGIC) {
            if (pos + total != seg_end)
                return 1;
            if (seg_end > n) {
                w->stop = "torn";
                break;
            }
            pos = seg_end;
            continue;
        }
        if (magic != MAGIC_V1 && magic != MAGIC_V2)
            return 1;
        if (total > left) {
            if (limit == n && total <= seg_end - pos)
                w->stop = "torn";
            else
                return 1;
            break;
        }
        int32_t qid;
        int64_t qoff, tags;
        const unsigned char *topic;
        Py_ssize_t tlen;
        if (check_record(buf + pos, total, magic == MAGIC_V2, phys, &qid, &qoff, &topic,
                         &tlen, &tags))
            return 1;
        /* The key's newest run (``last`` always is one): continue it when the
         * queue offset follows, else start a new run. */
        IndexRun *run = NULL;
        if (nruns && runs[last].queue_id == qid && runs[last].topic_len == tlen
            && memcmp(runs[last].topic, topic, (size_t)tlen) == 0) {
            run = &runs[last];
        } else {
            for (Py_ssize_t k = nruns - 1; k >= 0; k--) {
                if (runs[k].queue_id == qid && runs[k].topic_len == tlen
                    && memcmp(runs[k].topic, topic, (size_t)tlen) == 0) {
                    run = &runs[k];
                    break;
                }
            }
        }
        if (run == NULL || run->next != qoff) {
            if (nruns == cap) {
                cap = cap ? cap * 2 : 8;
                IndexRun *grown = PyMem_RawRealloc(w->runs, (size_t)cap * sizeof(IndexRun));
                if (grown == NULL)
                    return -1;
                w->runs = runs = grown;
            }
            run = &runs[nruns];
            memset(run, 0, sizeof(IndexRun));
            run->topic = topic;
            run->topic_len = tlen;
            run->queue_id = qid;
            run->first = run->next = qoff;
            w->nruns = ++nruns;
        }
        last = run - runs;
        if (raw_reserve(&run->entries, CQ_ENTRY_SIZE) < 0)
            return -1;
        put_cq_entry(run->entries.data + run->entries.len, phys, (int32_t)total, tags);
        run->entries.len += CQ_ENTRY_SIZE;
        run->next = qoff + 1;
        pos += total;
    }
    w->end = base + pos;
    return 0;
}

/* Buffers at least this long are walked without the GIL (recovery scans
 * whole segments); shorter ones are not worth the hand-over. */
#define RELEASE_GIL_FROM (1 << 20)

const char index_records_doc[] = PyDoc_STR(
"index_records(buf, base_offset, segment_size)\n"
"--\n\n"
"Like commitlog_layout.index_records: ``(end, stop, runs)`` or None.");

PyObject *index_records(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer view;
    long long base, segment_size;
    if (!PyArg_ParseTuple(args, "y*LL:index_records", &view, &base, &segment_size))
        return NULL;
    PyObject *ret = NULL;
    Walk w = {NULL, 0, 0, "end"};
    if (base < 0 || segment_size <= 0) {
        ret = Py_NewRef(Py_None);
        goto finish;
    }
    int status;
    if (view.len >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        status = walk(view.buf, view.len, base, segment_size, &w);
        Py_END_ALLOW_THREADS
    } else {
        status = walk(view.buf, view.len, base, segment_size, &w);
    }
    if (status < 0) {
        PyErr_NoMemory();
        goto finish;
    }
    if (status > 0) {
        ret = Py_NewRef(Py_None);
        goto finish;
    }
    PyObject *list = PyList_New(w.nruns);
    if (list == NULL)
        goto finish;
    for (Py_ssize_t k = 0; k < w.nruns; k++) {
        IndexRun *r = &w.runs[k];
        PyObject *item = Py_BuildValue("(s#iLy#)", (const char *)r->topic, r->topic_len,
                                       (int)r->queue_id, (long long)r->first,
                                       (const char *)r->entries.data, r->entries.len);
        if (item == NULL) {
            Py_DECREF(list);
            goto finish;
        }
        PyList_SET_ITEM(list, k, item);
    }
    ret = Py_BuildValue("(LsN)", (long long)w.end, w.stop, list);
finish:
    for (Py_ssize_t k = 0; k < w.nruns; k++)
        PyMem_RawFree(w.runs[k].entries.data);
    PyMem_RawFree(w.runs);
    PyBuffer_Release(&view);
    return ret;
}

const char crc32_doc[] = PyDoc_STR(
"crc32(data)\n"
"--\n\n"
"zlib.crc32(data), as the walks compute it (with carry-less multiplications\n"
"where the CPU has them).");

PyObject *crc32_py(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:crc32", &view))
        return NULL;
    uint32_t crc = crc32_of(view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}
