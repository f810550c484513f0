/* Optional C versions of the commit log's two hot loops.
 *
 * - pack_records: encode a batch of MessageRecord objects (RocketMQ's record
 *   layout, blank padding at segment ends, consume-queue entries);
 * - index_records: walk replicated log bytes, check every record and collect
 *   the consume-queue entries it needs;
 * - key_hashes and put_index_entries: the message index's (_speedups_keys.c).
 *
 * Both mirror the pure-Python functions of triomq.protocol.commitlog_layout
 * (the reference; tests compare the two). Neither raises for bad input: on
 * anything unusual (a value out of range, a property with a separator, a bad
 * or zero-filled record...) they return None and the caller runs the Python
 * version, which accepts it or raises the precise error. Every read of the
 * input buffer is bounds-checked against its length.
 */
#include "_speedups.h"

/* ----------------------------------------------------------------- module */

static PyMethodDef methods[] = {
    {"pack_records", pack_records, METH_VARARGS, pack_records_doc},
    {"index_records", index_records, METH_VARARGS, index_records_doc},
    {"crc32", crc32_py, METH_VARARGS, crc32_doc},
    {"key_hashes", key_hashes, METH_VARARGS, key_hashes_doc},
    {"put_index_entries", put_index_entries, METH_VARARGS, put_index_entries_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "triomq.protocol._speedups",
    "C versions of the commit log's hot loops (see commitlog_layout).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    if (speedups_pack_init() < 0)
        return NULL;
    return PyModule_Create(&module_def);
}
