/* Optional C versions of the remoting header fast paths (framework/protocol/remoting.py).
 *
 * Both cover only the header layout remoting.py writes itself, with no remark
 * and no extFields on the way out; anything else returns None and the caller
 * falls back to the pure-Python code, which gives the same results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_LANGUAGE 32

static PyObject *python_str; /* "PYTHON" */
static PyObject *java_str;   /* "JAVA" */

static int
plain_name(const char *text, Py_ssize_t length)
{
    if (length < 1 || length > MAX_LANGUAGE)
        return 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        char c = text[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return 0;
    }
    return 1;
}

/* An exact int in the 32-bit range the protocol uses; else *ok = 0. */
static long long
exact_int(PyObject *value, int *ok)
{
    if (!PyLong_CheckExact(value)) {
        *ok = 0;
        return 0;
    }
    int overflow = 0;
    long long result = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || (result == -1 && PyErr_Occurred()) || result < -2147483648LL ||
        result > 2147483647LL) {
        PyErr_Clear();
        *ok = 0;
        return 0;
    }
    return result;
}

/* header_json(code, language, version, opaque, flag) -> bytes | None */
static PyObject *
header_json(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "header_json takes 5 arguments");
        return NULL;
    }
    int ok = 1;
    long long code = exact_int(args[0], &ok);
    long long version = exact_int(args[2], &ok);
    long long opaque = exact_int(args[3], &ok);
    long long flag = exact_int(args[4], &ok);
    if (!ok || !PyUnicode_CheckExact(args[1]) || !PyUnicode_IS_ASCII(args[1]))
        Py_RETURN_NONE;
    Py_ssize_t language_length;
    const char *language = PyUnicode_AsUTF8AndSize(args[1], &language_length);
    if (language == NULL)
        return NULL;
    if (!plain_name(language, language_length))
        Py_RETURN_NONE;
    char buffer[256];
    int written = snprintf(buffer, sizeof buffer,
                           "{\"code\":%lld,\"language\":\"%s\",\"version\":%lld,"
                           "\"opaque\":%lld,\"flag\":%lld}",
                           code, language, version, opaque, flag);
    if (written < 0 || (size_t)written >= sizeof buffer)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(buffer, written);
}

/* A JSON integer of at most 9 digits (so it fits 32 bits) at text[*pos]. */
static int
parse_int(const char *text, Py_ssize_t length, Py_ssize_t *pos, long *out)
{
    Py_ssize_t i = *pos;
    int negative = 0;
    if (i < length && text[i] == '-') {
        negative = 1;
        i++;
    }
    if (i >= length || text[i] < '0' || text[i] > '9')
        return 0;
    long value = 0;
    Py_ssize_t start = i;
    if (text[i] == '0') {
        i++;
    }
    else {
        while (i < length && text[i] >= '0' && text[i] <= '9') {
            if (i - start == 9)
                return 0;
            value = value * 10 + (text[i] - '0');
            i++;
        }
    }
    *out = negative ? -value : value;
    *pos = i;
    return 1;
}

static int
expect(const char *text, Py_ssize_t length, Py_ssize_t *pos, const char *literal)
{
    size_t size = strlen(literal);
    if ((size_t)(length - *pos) < size || memcmp(text + *pos, literal, size) != 0)
        return 0;
    *pos += size;
    return 1;
}

/* parse_header(header) -> (code, language, version, opaque, flag, ext) | None
 *
 * ext is None or the bytes of the extFields value (still to be parsed as JSON).
 */
static PyObject *
parse_header(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *text = view.buf;
    Py_ssize_t length = view.len;
    Py_ssize_t pos = 0;
    long code, version, opaque, flag;
    PyObject *result = NULL;

    if (!expect(text, length, &pos, "{\"code\":") || !parse_int(text, length, &pos, &code) ||
        !expect(text, length, &pos, ",\"language\":\""))
        goto none;
    Py_ssize_t language_start = pos;
    while (pos < length && text[pos] != '"')
        pos++;
    Py_ssize_t language_length = pos - language_start;
    if (!plain_name(text + language_start, language_length) ||
        !expect(text, length, &pos, "\",\"version\":") ||
        !parse_int(text, length, &pos, &version) ||
        !expect(text, length, &pos, ",\"opaque\":") || !parse_int(text, length, &pos, &opaque) ||
        !expect(text, length, &pos, ",\"flag\":") || !parse_int(text, length, &pos, &flag))
        goto none;

    PyObject *ext;
    if (pos == length - 1 && text[pos] == '}') {
        ext = Py_NewRef(Py_None);
    }
    else if (expect(text, length, &pos, ",\"extFields\":{") && length - pos >= 2 &&
             text[length - 2] == '}' && text[length - 1] == '}') {
        ext = PyBytes_FromStringAndSize(text + pos - 1, length - pos);
        if (ext == NULL)
            goto done;
    }
    else {
        goto none;
    }

    PyObject *language;
    if (language_length == 6 && memcmp(text + language_start, "PYTHON", 6) == 0)
        language = Py_NewRef(python_str);
    else if (language_length == 4 && memcmp(text + language_start, "JAVA", 4) == 0)
        language = Py_NewRef(java_str);
    else
        language = PyUnicode_DecodeASCII(text + language_start, language_length, NULL);
    if (language == NULL) {
        Py_DECREF(ext);
        goto done;
    }
    result = Py_BuildValue("(lNlllN)", code, language, version, opaque, flag, ext);
    goto done;

none:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"header_json", (PyCFunction)(void (*)(void))header_json, METH_FASTCALL,
     "header_json(code, language, version, opaque, flag) -> bytes | None"},
    {"parse_header", parse_header, METH_O,
     "parse_header(header) -> (code, language, version, opaque, flag, ext) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "triomq.protocol._remoting_speedups",
    "C fast paths for remoting headers.", -1, methods,
};

PyMODINIT_FUNC
PyInit__remoting_speedups(void)
{
    python_str = PyUnicode_InternFromString("PYTHON");
    java_str = PyUnicode_InternFromString("JAVA");
    if (python_str == NULL || java_str == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
