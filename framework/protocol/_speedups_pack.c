/* pack_records: encode a batch of MessageRecord objects in RocketMQ's record
 * layout, with blank padding at segment ends and consume-queue entries.
 * Mirrors commitlog_layout.pack_records_py (see _speedups.c). */
#include "_speedups.h"

/* ------------------------------------------------ reading record fields */

enum {
    F_TOPIC, F_BODY, F_QUEUE_ID, F_FLAG, F_SYS_FLAG, F_BORN_TS, F_BORN_HOST, F_STORE_TS,
    F_STORE_HOST, F_RECONSUME, F_PREPARED, F_PROPERTIES, F_COUNT
};

static const char *const field_names[F_COUNT] = {
    "topic", "body", "queue_id", "flag", "sys_flag", "born_timestamp", "born_host",
    "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset",
    "properties",
};

static PyObject *field_strs[F_COUNT];

/* Slot offsets of ``type``'s fields when they are plain object slots (attrs'
 * slotted classes), so reading them skips the attribute protocol. */
static int slot_offsets(PyTypeObject *type, Py_ssize_t *offsets) {
    for (int f = 0; f < F_COUNT; f++) {
        PyObject *d = PyObject_GetAttr((PyObject *)type, field_strs[f]);
        if (d == NULL) {
            PyErr_Clear();
            return 0;
        }
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type)
                 && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX
                 && ((PyMemberDescrObject *)d)->d_common.d_type == type;
        if (ok)
            offsets[f] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok)
            return 0;
    }
    return 1;
}

/* New references to a record's fields in ``owned`` (also in ``out``, which
 * callers read); 0 on success, 1 when unavailable. The references stay valid
 * while Python callbacks run, whatever other threads do meanwhile. */
static int read_fields(PyObject *rec, PyTypeObject *type, const Py_ssize_t *offsets,
                       int use_slots, PyObject **out, PyObject **owned) {
    if (use_slots && Py_TYPE(rec) == type) {
        for (int f = 0; f < F_COUNT; f++) {
            PyObject *value = *(PyObject **)((char *)rec + offsets[f]);
            if (value == NULL)
                return 1;
            out[f] = owned[f] = Py_NewRef(value);
        }
        return 0;
    }
    for (int f = 0; f < F_COUNT; f++) {
        owned[f] = PyObject_GetAttr(rec, field_strs[f]);
        if (owned[f] == NULL) {
            PyErr_Clear();
            return 1;
        }
        out[f] = owned[f];
    }
    return 0;
}

static int as_i64(PyObject *o, int64_t *v) {
    if (!PyLong_Check(o))
        return 1;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 1;
    }
    *v = x;
    return 0;
}

static int as_i32(PyObject *o, int32_t *v) {
    int64_t x;
    if (as_i64(o, &x) || x < INT32_MIN || x > INT32_MAX)
        return 1;
    *v = (int32_t)x;
    return 0;
}

/* A host (ip, port): the packed address via ``pack_ip`` (cached for the last
 * ip string seen) and the port. */
typedef struct {
    PyObject *ip;      /* last ip str seen (owned) */
    PyObject *packed;  /* its packed bytes (owned) */
} HostCache;

static int read_host(PyObject *host, PyObject *pack_ip, HostCache *cache,
                     const char **addr, Py_ssize_t *addr_len, int32_t *port) {
    if (!PyTuple_CheckExact(host) || PyTuple_GET_SIZE(host) != 2)
        return 1;
    PyObject *ip = PyTuple_GET_ITEM(host, 0);
    if (!PyUnicode_CheckExact(ip) || as_i32(PyTuple_GET_ITEM(host, 1), port))
        return 1;
    if (cache->ip == NULL || (ip != cache->ip && PyUnicode_Compare(ip, cache->ip) != 0)) {
        PyObject *packed = PyObject_CallOneArg(pack_ip, ip);
        if (packed == NULL) {
            PyErr_Clear();
            return 1;
        }
        if (!PyBytes_CheckExact(packed)
            || (PyBytes_GET_SIZE(packed) != 4 && PyBytes_GET_SIZE(packed) != 16)) {
            Py_DECREF(packed);
            return 1;
        }
        Py_XSETREF(cache->packed, packed);
        Py_XSETREF(cache->ip, Py_NewRef(ip));
    }
    *addr = PyBytes_AS_STRING(cache->packed);
    *addr_len = PyBytes_GET_SIZE(cache->packed);
    return 0;
}

/* ------------------------------------------------------------ pack_records */

typedef struct {
    PyObject *topic;          /* the record's topic (owned) */
    PyObject *queue_id_obj;   /* the record's queue id (owned) */
    const char *topic_utf8;
    Py_ssize_t topic_len;
    int64_t queue_id;
    PyObject *first;          /* what next_queue_offset returned (owned) */
    int64_t next;
    Buf entries;
} Run;

typedef struct {
    Run *items;
    Py_ssize_t n, cap;
} Runs;

static void runs_free(Runs *runs) {
    for (Py_ssize_t i = 0; i < runs->n; i++) {
        Py_XDECREF(runs->items[i].first);
        Py_XDECREF(runs->items[i].topic);
        Py_XDECREF(runs->items[i].queue_id_obj);
        PyMem_Free(runs->items[i].entries.data);
    }
    PyMem_Free(runs->items);
}

/* The run of (topic, queue_id); NULL with *status = 1 (give up) or -1 (error). */
static Run *find_run(Runs *runs, PyObject *topic, const char *utf8, Py_ssize_t tlen,
                     PyObject *qid_obj, int64_t qid, PyObject *next_queue_offset,
                     Py_ssize_t *last, int *status) {
    for (Py_ssize_t k = 0; k < runs->n; k++) {
        Py_ssize_t i = (*last + k) % runs->n;
        Run *r = &runs->items[i];
        if (r->queue_id == qid && r->topic_len == tlen
            && (r->topic == topic || memcmp(r->topic_utf8, utf8, (size_t)tlen) == 0)) {
            *last = i;
            return r;
        }
    }
    if (runs->n == runs->cap) {
        Py_ssize_t cap = runs->cap ? runs->cap * 2 : 8;
        Run *items = PyMem_Realloc(runs->items, (size_t)cap * sizeof(Run));
        if (items == NULL) {
            PyErr_NoMemory();
            *status = -1;
            return NULL;
        }
        runs->items = items;
        runs->cap = cap;
    }
    PyObject *first = PyObject_CallFunctionObjArgs(next_queue_offset, topic, qid_obj, NULL);
    if (first == NULL) {
        *status = -1;  /* the callback's own error propagates */
        return NULL;
    }
    int64_t f;
    if (as_i64(first, &f)) {
        Py_DECREF(first);
        *status = 1;
        return NULL;
    }
    Run *r = &runs->items[runs->n];
    memset(r, 0, sizeof(Run));
    r->topic = Py_NewRef(topic);
    r->queue_id_obj = Py_NewRef(qid_obj);
    r->topic_utf8 = utf8;
    r->topic_len = tlen;
    r->queue_id = qid;
    r->first = first;
    r->next = f;
    *last = runs->n;
    runs->n++;
    return r;
}

/* Serialize a properties dict into ``out`` (key \x01 value \x02 ...); the TAGS
 * value's Java hash into *tags. Returns 0, 1 (give up) or -1 (error). */
static int pack_properties(PyObject *props, Buf *out, int32_t *tags) {
    *tags = 0;
    out->len = 0;
    if (!PyDict_CheckExact(props))
        return 1;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(props, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(value))
            return 1;
        Py_ssize_t kn, vn;
        const char *k = PyUnicode_AsUTF8AndSize(key, &kn);
        if (k == NULL) {
            PyErr_Clear();
            return 1;
        }
        const char *v = PyUnicode_AsUTF8AndSize(value, &vn);
        if (v == NULL) {
            PyErr_Clear();
            return 1;
        }
        if (memchr(k, 1, (size_t)kn) || memchr(k, 2, (size_t)kn)
            || memchr(v, 1, (size_t)vn) || memchr(v, 2, (size_t)vn))
            return 1;
        if (buf_reserve(out, kn + vn + 2) < 0)
            return -1;
        memcpy(out->data + out->len, k, (size_t)kn);
        out->data[out->len + kn] = 1;
        memcpy(out->data + out->len + kn + 1, v, (size_t)vn);
        out->data[out->len + kn + 1 + vn] = 2;
        out->len += kn + vn + 2;
        if (out->len > MAX_PROPERTIES_LENGTH)
            return 1;
        if (kn == 4 && memcmp(k, "TAGS", 4) == 0)
            *tags = java_hash_str(value);
    }
    return 0;
}

/* A ``type`` (tuple or a tuple subclass such as a NamedTuple) of ``n`` items:
 * the ints a, b, c, then ``d`` when n == 4. */
static PyObject *int_tuple(PyTypeObject *type, Py_ssize_t n, int64_t a, int64_t b, int64_t c,
                           PyObject *d) {
    PyObject *t = type == &PyTuple_Type ? PyTuple_New(n) : type->tp_alloc(type, n);
    if (t == NULL)
        return NULL;
    int64_t v[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        PyObject *item = PyLong_FromLongLong(v[i]);
        if (item == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, item);
    }
    if (n == 4)
        PyTuple_SET_ITEM(t, 3, Py_NewRef(d));
    return t;
}

const char pack_records_doc[] = PyDoc_STR(
"pack_records(records, base_offset, segment_size, next_queue_offset, pack_ip,\n"
"             record_type, result_type=None)\n"
"--\n\n"
"Encode ``records`` like commitlog_layout.pack_records; return\n"
"``(data, placed, queue_runs, results)`` or None when the Python version\n"
"must handle the batch. ``results`` holds one ``result_type(physical_offset,\n"
"size, queue_offset, store_timestamp)`` per record (None without a type).");

PyObject *pack_records(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *records, *next_queue_offset, *pack_ip, *record_type_obj;
    PyObject *result_type_obj = Py_None;
    long long base_offset, segment_size;
    if (!PyArg_ParseTuple(args, "OLLOOO|O:pack_records", &records, &base_offset,
                          &segment_size, &next_queue_offset, &pack_ip, &record_type_obj,
                          &result_type_obj))
        return NULL;
    if (base_offset < 0 || segment_size <= 0 || !PyType_Check(record_type_obj))
        Py_RETURN_NONE;
    PyTypeObject *result_type = NULL;
    if (result_type_obj != Py_None) {
        if (!PyType_Check(result_type_obj)
            || !PyType_IsSubtype((PyTypeObject *)result_type_obj, &PyTuple_Type))
            Py_RETURN_NONE;
        result_type = (PyTypeObject *)result_type_obj;
    }
    PyTypeObject *record_type = (PyTypeObject *)record_type_obj;
    Py_ssize_t offsets[F_COUNT];
    int use_slots = slot_offsets(record_type, offsets);

    /* A tuple: callbacks may let other threads run, which must not be able to
     * resize what ``items`` points into. */
    PyObject *seq = PySequence_Tuple(records);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject **items = ((PyTupleObject *)seq)->ob_item;

    PyObject *ret = NULL, *data = NULL, *placed = NULL, *results = NULL, *runs_dict = NULL;
    Buf out = {0}, props = {0};
    Runs runs = {0};
    HostCache born = {0}, store = {0};
    Py_ssize_t last_run = 0;
    int give_up = 0;

    data = PyByteArray_FromStringAndSize(NULL, 0);
    placed = PyList_New(n);
    if (data == NULL || placed == NULL)
        goto done;
    if (result_type != NULL && (results = PyList_New(n)) == NULL)
        goto done;

    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f[F_COUNT], *owned[F_COUNT] = {0};
        int status = read_fields(items[i], record_type, offsets, use_slots, f, owned);
        int32_t queue_id, flag, born_port, store_port, reconsume, tags = 0;
        int64_t qid64, sys_flag, born_ts, store_ts, prepared;
        const char *born_ip = NULL, *store_ip = NULL, *topic = NULL;
        Py_ssize_t born_len = 0, store_len = 0, topic_len = 0;
        Py_buffer body = {0};
        Run *run = NULL;
        if (status == 0) {
            status = !PyUnicode_CheckExact(f[F_TOPIC]) || as_i32(f[F_QUEUE_ID], &queue_id)
                     || as_i32(f[F_FLAG], &flag) || as_i64(f[F_SYS_FLAG], &sys_flag)
                     || as_i64(f[F_BORN_TS], &born_ts) || as_i64(f[F_STORE_TS], &store_ts)
                     || as_i32(f[F_RECONSUME], &reconsume)
                     || as_i64(f[F_PREPARED], &prepared)
                     || !(PyBytes_CheckExact(f[F_BODY]) || PyByteArray_CheckExact(f[F_BODY]));
        }
        if (status == 0) {
            topic = PyUnicode_AsUTF8AndSize(f[F_TOPIC], &topic_len);
            if (topic == NULL) {
                PyErr_Clear();
                status = 1;
            } else if (topic_len > MAX_TOPIC_LENGTH_V2) {
                status = 1;
            }
        }
        if (status == 0) {
            qid64 = queue_id;
            run = find_run(&runs, f[F_TOPIC], topic, topic_len, f[F_QUEUE_ID], qid64,
                           next_queue_offset, &last_run, &status);
        }
        if (status == 0)
            status = pack_properties(f[F_PROPERTIES], &props, &tags);
        if (status == 0)
            status = read_host(f[F_BORN_HOST], pack_ip, &born, &born_ip, &born_len, &born_port)
                     || read_host(f[F_STORE_HOST], pack_ip, &store, &store_ip, &store_len,
                                  &store_port);
        if (status == 0 && PyObject_GetBuffer(f[F_BODY], &body, PyBUF_SIMPLE) < 0)
            status = -1;
        int64_t qoff = 0, phys = 0, total = 0;
        if (status == 0) {
            int v2 = topic_len > MAX_TOPIC_LENGTH_V1;
            int64_t v6 = (born_len == 16 ? BORNHOST_V6 : 0) | (store_len == 16 ? STOREHOST_V6 : 0);
            int64_t flags = (sys_flag & ~(int64_t)(BORNHOST_V6 | STOREHOST_V6)) | v6;
            total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born_len + 4 + 8 + store_len + 4 + 4
                    + 8 + 4 + body.len + (v2 ? 2 : 1) + topic_len + 2 + props.len;
            qoff = run->next;
            phys = base_offset + out.len;
            if (flags < INT32_MIN || flags > INT32_MAX || total > 0x7FFFFFFF
                || total + END_FILE_MIN_BLANK_LENGTH > segment_size || qoff == INT64_MAX) {
                status = 1;
            } else {
                int64_t room = segment_size - phys % segment_size;
                int64_t blank = total + END_FILE_MIN_BLANK_LENGTH > room ? room : 0;
                /* A base offset fewer than 8 bytes before a segment end has no
                 * room for a blank header: the Python version refuses it. */
                if (blank > 0x7FFFFFFF || (blank && blank < END_FILE_MIN_BLANK_LENGTH))
                    status = 1;
                else if (bytearray_reserve(data, &out, blank + total) < 0)
                    status = -1;
                if (status == 0 && blank) {
                    unsigned char *p = out.data + out.len;
                    put32(p, (uint32_t)blank);
                    put32(p + 4, BLANK_MAGIC);
                    memset(p + 8, 0, (size_t)(blank - 8));
                    out.len += blank;
                    phys += blank;
                }
                if (status == 0) {
                    unsigned char *p = out.data + out.len;
                    put32(p, (uint32_t)total);
                    put32(p + 4, v2 ? MAGIC_V2 : MAGIC_V1);
                    put32(p + 8, body_crc(body.buf, body.len));
                    put32(p + 12, (uint32_t)queue_id);
                    put32(p + 16, (uint32_t)flag);
                    put64(p + 20, (uint64_t)qoff);
                    put64(p + 28, (uint64_t)phys);
                    put32(p + 36, (uint32_t)flags);
                    put64(p + 40, (uint64_t)born_ts);
                    p += 48;
                    memcpy(p, born_ip, (size_t)born_len);
                    put32(p + born_len, (uint32_t)born_port);
                    p += born_len + 4;
                    put64(p, (uint64_t)store_ts);
                    memcpy(p + 8, store_ip, (size_t)store_len);
                    put32(p + 8 + store_len, (uint32_t)store_port);
                    p += 12 + store_len;
                    put32(p, (uint32_t)reconsume);
                    put64(p + 4, (uint64_t)prepared);
                    put32(p + 12, (uint32_t)body.len);
                    p += 16;
                    memcpy(p, body.buf, (size_t)body.len);
                    p += body.len;
                    if (v2) {
                        p[0] = (unsigned char)(topic_len >> 8);
                        p[1] = (unsigned char)topic_len;
                        p += 2;
                    } else {
                        *p++ = (unsigned char)topic_len;
                    }
                    memcpy(p, topic, (size_t)topic_len);
                    p += topic_len;
                    p[0] = (unsigned char)(props.len >> 8);
                    p[1] = (unsigned char)props.len;
                    if (props.len)
                        memcpy(p + 2, props.data, (size_t)props.len);
                    out.len += total;
                    if (buf_reserve(&run->entries, CQ_ENTRY_SIZE) < 0) {
                        status = -1;
                    } else {
                        put_cq_entry(run->entries.data + run->entries.len, phys,
                                     (int32_t)total, tags);
                        run->entries.len += CQ_ENTRY_SIZE;
                        run->next = qoff + 1;
                    }
                }
            }
        }
        if (body.obj != NULL)
            PyBuffer_Release(&body);
        if (status == 0) {
            PyObject *t = int_tuple(&PyTuple_Type, 3, phys, total, qoff, NULL);
            if (t == NULL) {
                status = -1;
            } else {
                PyList_SET_ITEM(placed, i, t);
                if (results != NULL) {
                    PyObject *res = int_tuple(result_type, 4, phys, total, qoff, f[F_STORE_TS]);
                    if (res == NULL)
                        status = -1;
                    else
                        PyList_SET_ITEM(results, i, res);
                }
            }
        }
        for (int k = 0; k < F_COUNT; k++)
            Py_XDECREF(owned[k]);
        if (status < 0)
            goto done;
        if (status > 0) {
            give_up = 1;
            break;
        }
    }
    if (give_up) {
        ret = Py_NewRef(Py_None);
        goto done;
    }
    if (PyByteArray_Resize(data, out.len) < 0)
        goto done;
    runs_dict = PyDict_New();
    if (runs_dict == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < runs.n; k++) {
        Run *r = &runs.items[k];
        PyObject *entries = PyByteArray_FromStringAndSize((const char *)r->entries.data,
                                                          r->entries.len);
        PyObject *key = entries ? PyTuple_Pack(2, r->topic, r->queue_id_obj) : NULL;
        PyObject *val = key ? PyTuple_Pack(2, r->first, entries) : NULL;
        int bad = val == NULL || PyDict_SetItem(runs_dict, key, val) < 0;
        Py_XDECREF(entries);
        Py_XDECREF(key);
        Py_XDECREF(val);
        if (bad)
            goto done;
    }
    ret = PyTuple_Pack(4, data, placed, runs_dict, results ? results : Py_None);
done:
    Py_XDECREF(data);
    Py_XDECREF(placed);
    Py_XDECREF(results);
    Py_XDECREF(runs_dict);
    Py_XDECREF(born.packed);
    Py_XDECREF(store.packed);
    Py_XDECREF(born.ip);
    Py_XDECREF(store.ip);
    PyMem_Free(props.data);
    runs_free(&runs);
    Py_DECREF(seq);
    return ret;
}

int speedups_pack_init(void) {
    for (int f = 0; f < F_COUNT; f++) {
        field_strs[f] = PyUnicode_InternFromString(field_names[f]);
        if (field_strs[f] == NULL)
            return -1;
    }
    return 0;
}
