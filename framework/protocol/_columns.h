/* Declarations shared by the sources of triomq.protocol._columns. */
#ifndef TRIOMQ_COLUMNS_H
#define TRIOMQ_COLUMNS_H

#include "_speedups.h"

extern const char record_starts_doc[];
PyObject *record_starts(PyObject *module, PyObject *args);

#endif
