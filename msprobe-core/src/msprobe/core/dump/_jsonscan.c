/* Where the members of a JSON object end, found without building them.
 *
 * A dump.json of a million entries is several hundred megabytes: parsed
 * whole it takes gigabytes of Python objects.  The reader (dump/block_reader.py)
 * reads it in blocks, asks here where each complete entry of "data" ends,
 * and hands a run of whole entries at a time to a JSON parser.  Nothing is
 * decoded here: strings are skipped with their escapes, brackets counted,
 * and the parser that follows checks everything else.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define INTERFACE_VERSION 1 /* what its Python wrapper expects: bump both together */

#define INCOMPLETE (-1)
#define INVALID (-2)

static Py_ssize_t skip_space(const char *text, Py_ssize_t at, Py_ssize_t size) {
    while (at < size && (text[at] == ' ' || text[at] == '\n' || text[at] == '\r' || text[at] == '\t')) at++;
    return at;
}

/* text[at] is the opening quote; the position after the closing one */
static Py_ssize_t string_end(const char *text, Py_ssize_t at, Py_ssize_t size) {
    for (at++; at < size; at++) {
        char c = text[at];
        if (c == '\\') at++;
        else if (c == '"') return at + 1;
    }
    return INCOMPLETE;
}

/* the position after the value starting at text[at] */
static Py_ssize_t value_end_at(const char *text, Py_ssize_t at, Py_ssize_t size) {
    if (at >= size) return INCOMPLETE;
    char c = text[at];
    if (c == '"') return string_end(text, at, size);
    if (c == '{' || c == '[') {
        Py_ssize_t depth = 0;
        while (at < size) {
            c = text[at];
            if (c == '"') {
                at = string_end(text, at, size);
                if (at < 0) return at;
                continue;
            }
            if (c == '{' || c == '[') depth++;
            else if (c == '}' || c == ']') {
                if (--depth == 0) return at + 1;
            }
            at++;
        }
        return INCOMPLETE;
    }
    if (c == ',' || c == '}' || c == ']' || c == ':') return INVALID;
    while (at < size) {  /* a number, true, false, null (NaN and Infinity too): checked by the parser */
        c = text[at];
        if (c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\r' || c == '\t') return at;
        at++;
    }
    return INCOMPLETE;
}

static PyObject *invalid(Py_ssize_t at) {
    PyErr_Format(PyExc_ValueError, "invalid JSON at byte %zd", at);
    return NULL;
}

/* value_end(buffer, pos) -> end of the value at pos (after spaces), -1 when the buffer ends first */
/* a position before the buffer would be read from memory that is not its own: refused (the buffer released) */
static int out_of_range(Py_buffer *view, Py_ssize_t at) {
    if (at >= 0 && at <= view->len) return 0;
    PyBuffer_Release(view);
    PyErr_Format(PyExc_ValueError, "position %zd is outside the buffer of %zd bytes", at, view->len);
    return 1;
}

static PyObject *value_end(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t at;
    if (!PyArg_ParseTuple(args, "y*n", &view, &at)) return NULL;
    if (out_of_range(&view, at)) return NULL;
    const char *text = view.buf;
    Py_ssize_t size = view.len;
    at = skip_space(text, at, size);
    Py_ssize_t end = value_end_at(text, at, size);
    PyBuffer_Release(&view);
    if (end == INVALID) return invalid(at);
    return PyLong_FromSsize_t(end);
}

/* member_ends(buffer, pos) -> (ends, close)
 *
 * pos is just inside an object, or just after the comma that ends one of its members.  ends holds the
 * position of the comma after each complete member that follows; close is the position of the brace that
 * closes the object when the buffer reaches it, else -1.  A member cut off by the end of the buffer is left
 * for the next call.
 */
static PyObject *member_ends(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t at;
    if (!PyArg_ParseTuple(args, "y*n", &view, &at)) return NULL;
    if (out_of_range(&view, at)) return NULL;
    const char *text = view.buf;
    Py_ssize_t size = view.len, close = -1, bad = -1;
    PyObject *ends = PyList_New(0);
    if (ends == NULL) goto done;
    for (;;) {
        at = skip_space(text, at, size);
        if (at >= size) break;
        if (text[at] == '}') {
            close = at;
            break;
        }
        if (text[at] != '"') { bad = at; break; }
        Py_ssize_t next = string_end(text, at, size);
        if (next < 0) break;
        next = skip_space(text, next, size);
        if (next >= size) break;
        if (text[next] != ':') { bad = next; break; }
        next = skip_space(text, next + 1, size);
        Py_ssize_t end = value_end_at(text, next, size);
        if (end == INVALID) { bad = next; break; }
        if (end < 0) break;
        end = skip_space(text, end, size);
        if (end >= size) break;
        if (text[end] == '}') {
            close = end;
            break;
        }
        if (text[end] != ',') { bad = end; break; }
        PyObject *position = PyLong_FromSsize_t(end);
        int failed = position == NULL || PyList_Append(ends, position) < 0;
        Py_XDECREF(position);
        if (failed) { bad = -3; break; }
        at = end + 1;
    }
done:
    PyBuffer_Release(&view);
    if (ends == NULL) return NULL;
    if (bad == -3) {
        Py_DECREF(ends);
        return NULL;
    }
    if (bad >= 0) {
        Py_DECREF(ends);
        return invalid(bad);
    }
    return Py_BuildValue("(Nn)", ends, close);
}

static PyMethodDef methods[] = {
    {"value_end", value_end, METH_VARARGS, "End of the JSON value at pos, or -1 when the buffer ends first."},
    {"member_ends", member_ends, METH_VARARGS, "Positions of the commas ending each complete object member."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonscan", NULL, -1, methods};

/* The module with INTERFACE_VERSION set: its Python wrapper checks it, so a build left from an older checkout
 * is not used with newer Python (the wrapper's Python twin runs instead). */
static PyObject *with_interface(PyObject *created) {
    if (created != NULL && PyModule_AddIntConstant(created, "INTERFACE_VERSION", INTERFACE_VERSION) < 0)
        Py_CLEAR(created);
    return created;
}

PyMODINIT_FUNC PyInit__jsonscan(void) { return with_interface(PyModule_Create(&module)); }
