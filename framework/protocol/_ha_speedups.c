/* Optional C versions of the HA drivers' per-frame work.
 *
 * - encode_transfer_headers: the headers of a master's batches
 *   (framework/protocol/ha_transfers.py);
 * - write_frames: one non-blocking gathered write of transfer frames, each
 *   header before its batch (framework/ha/streams.py);
 * - read_scattered: one non-blocking scattered read of transfer frames
 *   (framework/ha/streams.py: the layout, the read and its check);
 * - transfer_run: the transfer headers of a read that continue the current
 *   run (framework/protocol/ha_transfers.py).
 *
 * With 32 KiB batches a master sends and a slave reads about ten frames at a
 * time; doing this per frame in Python cost about as much as the kernel's
 * copies of their bodies. Each gives exactly the results of its pure-Python
 * version, the reference (tests compare the two).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>

#define HEADER_SIZE 36
#define STATE_TRANSFER 2
/* Linux's IOV_MAX: a gathered write takes at most this many pieces (the rest
 * goes in the next one). */
#define MAX_PIECES 1024

static int32_t
be32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
                     (uint32_t)p[3]);
}

static int64_t
be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)(uint32_t)be32(p) << 32 | (uint64_t)(uint32_t)be32(p + 4));
}

/* Whether the pieces of a read of `count` bytes put every body byte at its place:
 * each body after a whole header has that header's bodySize, or got less where
 * the read ended in it (the rest is still to come). Adds the body bytes to
 * *bodies. */
static int
laid_out_as_sent(const struct iovec *pieces, int count_pieces, Py_ssize_t count, int body_first,
                 Py_ssize_t *bodies)
{
    const unsigned char *header = NULL;
    int is_body = body_first;
    for (int i = 0; i < count_pieces && count > 0; i++) {
        Py_ssize_t length = (Py_ssize_t)pieces[i].iov_len;
        Py_ssize_t got = length < count ? length : count;
        count -= got;
        if (is_body && header != NULL) {
            int32_t body_size = be32(header + 4);
            if (be32(header) != STATE_TRANSFER ||
                !(body_size == got || (count == 0 && body_size > got)))
                return 0;
        }
        header = !is_body && got == length ? pieces[i].iov_base : NULL;
        if (is_body)
            *bodies += got;
        is_body = !is_body;
    }
    return 1;
}

static void
put_be32(unsigned char *p, int32_t value)
{
    uint32_t v = (uint32_t)value;
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void
put_be64(unsigned char *p, int64_t value)
{
    put_be32(p, (int32_t)((uint64_t)value >> 32));
    put_be32(p + 4, (int32_t)(uint64_t)value);
}

/* An int in [0, high]; else *ok = 0. */
static int64_t
in_range(PyObject *value, int64_t high, int *ok)
{
    int overflow = 0;
    long long result = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (result == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        *ok = 0;
        return 0;
    }
    if (overflow || result < 0 || result > high)
        *ok = 0;
    return result;
}

PyDoc_STRVAR(encode_transfer_headers_doc,
"encode_transfer_headers(offset, epoch, epoch_start_offset, confirm_offset, body_size,\n"
"                        batch_size) -> bytes | None\n\n"
"triomq.protocol.ha.encode_transfer_headers; None for any value it would refuse\n"
"(the Python version then raises the precise error).");

static PyObject *
encode_transfer_headers(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "encode_transfer_headers takes 6 arguments");
        return NULL;
    }
    int ok = 1;
    int64_t offset = in_range(args[0], INT64_MAX, &ok);
    int64_t epoch = in_range(args[1], INT32_MAX, &ok);
    int64_t epoch_start = in_range(args[2], INT64_MAX, &ok);
    int64_t confirm = in_range(args[3], INT64_MAX, &ok);
    int64_t body_size = in_range(args[4], INT64_MAX, &ok);
    int64_t batch_size = in_range(args[5], INT64_MAX, &ok);
    if (!ok || batch_size == 0 || body_size > INT64_MAX - offset ||
        (body_size < batch_size ? body_size : batch_size) > INT32_MAX)
        Py_RETURN_NONE;
    int64_t count = body_size ? (body_size - 1) / batch_size + 1 : 1;
    if (count > PY_SSIZE_T_MAX / HEADER_SIZE)
        Py_RETURN_NONE;
    PyObject *headers = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * HEADER_SIZE));
    if (headers == NULL)
        return NULL;
    unsigned char *h = (unsigned char *)PyBytes_AS_STRING(headers);
    int64_t end = offset + body_size;
    for (int64_t i = 0; i < count; i++, h += HEADER_SIZE) {
        int64_t at = offset + i * batch_size; /* i * batch_size < body_size: no overflow */
        int64_t size = end - at < batch_size ? end - at : batch_size;
        put_be32(h, STATE_TRANSFER);
        put_be32(h + 4, (int32_t)size);
        put_be64(h + 8, at);
        put_be32(h + 16, (int32_t)epoch);
        put_be64(h + 20, epoch_start);
        put_be64(h + 28, confirm);
    }
    return headers;
}

/* Retries a system call interrupted by a signal, unless a handler raised. */
#define RETRY_EINTR(n, error, call)                                                        \
    do {                                                                                   \
        Py_BEGIN_ALLOW_THREADS                                                             \
        n = call;                                                                          \
        error = errno;                                                                     \
        Py_END_ALLOW_THREADS                                                               \
    } while (n < 0 && error == EINTR && PyErr_CheckSignals() == 0)

/* After a failed call: None if it would have blocked, else NULL with OSError set
 * (or the exception a signal handler raised). */
static PyObject *
would_block_or_raise(int error)
{
    if (error == EAGAIN || error == EWOULDBLOCK)
        return Py_NewRef(Py_None);
    if (error != EINTR) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
    }
    return NULL;
}

PyDoc_STRVAR(write_frames_doc,
"write_frames(fd, headers, body, batch_size, skip) -> int | None\n\n"
"triomq.ha.streams.write_frames on a file descriptor.");

static PyObject *
write_frames(PyObject *module, PyObject *args)
{
    int fd;
    Py_buffer headers, body;
    Py_ssize_t batch_size, skip;
    if (!PyArg_ParseTuple(args, "iy*y*nn", &fd, &headers, &body, &batch_size, &skip))
        return NULL;
    PyObject *result = NULL;
    struct iovec pieces[MAX_PIECES];
    if (batch_size <= 0 || skip < 0) {
        PyErr_SetString(PyExc_ValueError, "batch_size must be > 0 and skip >= 0");
        goto done;
    }
    int count = 0;
    for (Py_ssize_t at = 0; at < headers.len && count < MAX_PIECES; at += HEADER_SIZE) {
        /* Where this header's batch starts in body; past its end if that overflows. */
        Py_ssize_t index = at / HEADER_SIZE;
        Py_ssize_t batch = index && batch_size > body.len / index ? body.len : index * batch_size;
        Py_ssize_t header_size = headers.len - at < HEADER_SIZE ? headers.len - at : HEADER_SIZE;
        Py_ssize_t batch_end = body.len - batch < batch_size ? body.len : batch + batch_size;
        char *piece[2] = {(char *)headers.buf + at, (char *)body.buf + batch};
        Py_ssize_t length[2] = {header_size, batch < body.len ? batch_end - batch : 0};
        for (int k = 0; k < 2 && count < MAX_PIECES; k++) {
            Py_ssize_t from = skip < length[k] ? skip : length[k];
            skip -= from;
            if (length[k] > from)
                pieces[count++] = (struct iovec){piece[k] + from, (size_t)(length[k] - from)};
        }
    }
    if (count == 0) {
        result = PyLong_FromLong(0);
        goto done;
    }
    ssize_t n;
    int error;
    RETRY_EINTR(n, error, writev(fd, pieces, count));
    result = n < 0 ? would_block_or_raise(error) : PyLong_FromSsize_t(n);
done:
    PyBuffer_Release(&headers);
    PyBuffer_Release(&body);
    return result;
}

PyDoc_STRVAR(read_scattered_doc,
"read_scattered(fd, space, body_remaining, body_size, headers, buffer) -> (n, bodies) | None\n\n"
"triomq.ha.streams.read_scattered on a file descriptor.");

static PyObject *
read_scattered(PyObject *module, PyObject *args)
{
    int fd;
    Py_ssize_t body_remaining, body_size;
    Py_buffer space, headers, buffer;
    if (!PyArg_ParseTuple(args, "iw*nnw*w*", &fd, &space, &body_remaining, &body_size, &headers,
                          &buffer))
        return NULL;
    PyObject *result = NULL;
    struct iovec *pieces = NULL;
    if (body_size <= 0 || body_remaining < 0) {
        PyErr_SetString(PyExc_ValueError, "body_size must be > 0 and body_remaining >= 0");
        goto done;
    }
    if (space.len == 0 || headers.len < HEADER_SIZE) {
        PyErr_SetString(PyExc_ValueError, "space and headers must hold a byte and a header");
        goto done;
    }
    if (buffer.len < space.len + headers.len) {
        PyErr_SetString(PyExc_ValueError, "buffer must hold len(space) + len(headers) bytes");
        goto done;
    }
    int waiting = 0;
    if (ioctl(fd, FIONREAD, &waiting) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    Py_ssize_t size = waiting > 1 ? waiting : 1;
    Py_ssize_t slots = headers.len / HEADER_SIZE;
    pieces = PyMem_New(struct iovec, 2 * slots + 1);
    if (pieces == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* The layout of triomq.ha.streams.scatter_layout. */
    char *log = space.buf;
    Py_ssize_t at = body_remaining < space.len ? body_remaining : space.len;
    int count_pieces = 0;
    if (at)
        pieces[count_pieces++] = (struct iovec){log, (size_t)at};
    Py_ssize_t slot = 0;
    while (at + slot < size && at < space.len && slot + HEADER_SIZE <= headers.len) {
        pieces[count_pieces++] = (struct iovec){(char *)headers.buf + slot, HEADER_SIZE};
        slot += HEADER_SIZE;
        Py_ssize_t end = body_size < space.len - at ? at + body_size : space.len;
        pieces[count_pieces++] = (struct iovec){log + at, (size_t)(end - at)};
        at = end;
    }
    ssize_t n;
    int error;
    RETRY_EINTR(n, error, readv(fd, pieces, count_pieces));
    if (n < 0) {
        result = would_block_or_raise(error);
        goto done;
    }
    Py_ssize_t bodies = 0;
    if (!laid_out_as_sent(pieces, count_pieces, n, body_remaining > 0, &bodies)) {
        /* Not laid out as sent: the bytes, in the order they came, into buffer. */
        char *into = buffer.buf;
        Py_ssize_t left = n;
        for (int i = 0; i < count_pieces && left > 0; i++) {
            size_t got = pieces[i].iov_len < (size_t)left ? pieces[i].iov_len : (size_t)left;
            memmove(into, pieces[i].iov_base, got);
            into += got;
            left -= (Py_ssize_t)got;
        }
        bodies = -1;
    }
    result = Py_BuildValue("(nn)", (Py_ssize_t)n, bodies);
done:
    PyMem_Free(pieces);
    PyBuffer_Release(&space);
    PyBuffer_Release(&headers);
    PyBuffer_Release(&buffer);
    return result;
}

PyDoc_STRVAR(transfer_run_doc,
"transfer_run(headers, pos, offset, epoch, epoch_start, max_body_size, room)\n"
"-> (pos, count, taken, largest_body, confirm_offset, last_confirm_offset, body_remaining)\n\n"
"triomq.protocol.ha.transfer_run.");

static PyObject *
transfer_run(PyObject *module, PyObject *args)
{
    Py_buffer headers;
    Py_ssize_t pos, room;
    long long offset, max_body_size;
    int epoch;
    long long epoch_start;
    if (!PyArg_ParseTuple(args, "y*nLiLLn", &headers, &pos, &offset, &epoch, &epoch_start,
                          &max_body_size, &room))
        return NULL;
    if (pos < 0) {
        PyBuffer_Release(&headers);
        PyErr_SetString(PyExc_ValueError, "pos must be >= 0");
        return NULL;
    }
    const unsigned char *bytes = headers.buf;
    Py_ssize_t count = 0, taken = 0, body_remaining = 0;
    int64_t largest = 0, confirm = -1, last_confirm = -1;
    /* A header continuing the run has these fields: negative, none is valid. */
    int negative = offset < 0 || epoch < 0 || epoch_start < 0;
    while (!negative && headers.len - pos >= HEADER_SIZE) {
        const unsigned char *h = bytes + pos;
        int64_t size = be32(h + 4), frame_confirm = be64(h + 28);
        if (be32(h) != STATE_TRANSFER || size < 0 || size > max_body_size ||
            be64(h + 8) != offset || be32(h + 16) != epoch || be64(h + 20) != epoch_start ||
            frame_confirm < 0 || offset > INT64_MAX - size)
            break;
        int64_t take = size < room ? size : room;
        room -= take;
        taken += take;
        offset += take;
        if (size > largest)
            largest = size;
        int64_t confirmed = frame_confirm < offset ? frame_confirm : offset;
        if (confirmed > confirm)
            confirm = confirmed;
        last_confirm = frame_confirm;
        count++;
        pos += HEADER_SIZE;
        if (take < size) {
            body_remaining = size - take;
            break;
        }
    }
    PyBuffer_Release(&headers);
    return Py_BuildValue("(nnnLLLn)", pos, count, taken, (long long)largest, (long long)confirm,
                         (long long)last_confirm, body_remaining);
}

static PyMethodDef methods[] = {
    {"encode_transfer_headers", (PyCFunction)(void (*)(void))encode_transfer_headers,
     METH_FASTCALL, encode_transfer_headers_doc},
    {"write_frames", write_frames, METH_VARARGS, write_frames_doc},
    {"read_scattered", read_scattered, METH_VARARGS, read_scattered_doc},
    {"transfer_run", transfer_run, METH_VARARGS, transfer_run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "triomq.protocol._ha_speedups",
    "C versions of the HA drivers' per-frame work (see triomq.ha.streams).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__ha_speedups(void)
{
    return PyModule_Create(&module_def);
}
