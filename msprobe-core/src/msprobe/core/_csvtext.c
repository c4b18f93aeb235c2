/* The text of a CSV table, made a column list at a time in one C loop.
 *
 * A compare of a million entries writes two million rows of two dozen
 * cells; made cell by cell in Python (or by pandas, or csv.writer after a
 * pass that makes each cell safe) that costs more than the compare itself.
 * The rules are msprobe/core/spreadsheet.py's, which stays the Python
 * fallback and the reference for the tests: a float as repr() writes it
 * (nothing for a NaN), None as nothing, text that a spreadsheet would run
 * as a formula with a leading quote (unless it reads as a number), a NUL
 * as the text \x00, and quotes around a cell holding a comma, a quote or a
 * line break, as csv.writer puts them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
} Buffer;

static int reserve(Buffer *buffer, Py_ssize_t more) {
    if (buffer->size + more <= buffer->capacity) return 0;
    Py_ssize_t capacity = buffer->capacity ? buffer->capacity : 1 << 16;
    while (capacity < buffer->size + more) capacity *= 2;
    char *data = PyMem_Realloc(buffer->data, capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    buffer->data = data;
    buffer->capacity = capacity;
    return 0;
}

static int put(Buffer *buffer, const char *text, Py_ssize_t size) {
    if (size == 0) return 0; /* the buffer may still be NULL, and memcpy from or to NULL is undefined */
    if (reserve(buffer, size) < 0) return -1;
    memcpy(buffer->data + buffer->size, text, size);
    buffer->size += size;
    return 0;
}

static int is_trigger(char c) { return c == '=' || c == '+' || c == '-' || c == '@' || c == '\t' || c == '\r'; }

/* float(text) succeeds: such text stays as it is though it begins like a formula ("-0.5", "-inf") */
static int reads_as_number(PyObject *text) {
    PyObject *number = PyFloat_FromString(text);
    if (number == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(number);
    return 1;
}

static int put_text(Buffer *buffer, PyObject *text, int quote_cr) {
    Py_ssize_t size;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &size);
    if (utf8 == NULL) return -1;
    int quote = 0, nul = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        char c = utf8[i];
        if (c == ',' || c == '"' || c == '\n' || (quote_cr && c == '\r')) quote = 1;
        else if (c == '\0') nul = 1;
    }
    int prefix = size > 0 && is_trigger(utf8[0]) && !reads_as_number(text);
    if (!quote && !nul && !prefix) return put(buffer, utf8, size);
    if (reserve(buffer, 2 * size + 8 + (nul ? 3 * size : 0)) < 0) return -1;
    char *out = buffer->data + buffer->size;
    if (quote) *out++ = '"';
    if (prefix) *out++ = '\'';
    for (Py_ssize_t i = 0; i < size; i++) {
        char c = utf8[i];
        if (c == '"') {
            *out++ = '"';
            *out++ = '"';
        } else if (c == '\0') {
            memcpy(out, "\\x00", 4);
            out += 4;
        } else {
            *out++ = c;
        }
    }
    if (quote) *out++ = '"';
    buffer->size = out - buffer->data;
    return 0;
}

static int put_cell(Buffer *buffer, PyObject *cell, int quote_cr) {
    if (cell == Py_None) return 0;
    if (PyUnicode_Check(cell)) return put_text(buffer, cell, quote_cr);
    if (PyFloat_Check(cell)) {
        double value = PyFloat_AS_DOUBLE(cell);
        if (value != value) return 0; /* pandas writes nothing for a NaN */
        if (PyFloat_CheckExact(cell)) {
            char *text = PyOS_double_to_string(value, 'r', 0, Py_DTSF_ADD_DOT_0, NULL); /* repr() itself */
            if (text == NULL) return -1;
            int failed = put(buffer, text, (Py_ssize_t)strlen(text));
            PyMem_Free(text);
            return failed;
        }
    }
    PyObject *text = PyObject_Str(cell); /* ints, bools, numpy scalars: what pandas writes for them */
    if (text == NULL) return -1;
    int failed = put_text(buffer, text, quote_cr);
    Py_DECREF(text);
    return failed;
}

/* a cell of a column of float texts made in Python: written as it is */
static int put_raw(Buffer *buffer, PyObject *cell) {
    Py_ssize_t size;
    const char *utf8 = PyUnicode_AsUTF8AndSize(cell, &size);
    return utf8 == NULL ? -1 : put(buffer, utf8, size);
}

/* A column of floats written by orjson in Python: (texts, rows, fix_rows, fix_texts).  texts holds the rows'
 * texts joined by commas; the rows listed in fix_rows (ascending) take the text in fix_texts instead. */
typedef struct {
    const char *data;
    Py_ssize_t size, cursor, fix, fixes;
    PyObject *fix_rows, *fix_texts;
} Packed;

static int unpack(PyObject *column, Packed *packed, Py_ssize_t *rows) {
    PyObject *texts, *fix_rows, *fix_texts;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(column, "O!nO!O!", &PyBytes_Type, &texts, &count, &PyList_Type, &fix_rows, &PyList_Type,
                          &fix_texts))
        return -1;
    if (PyList_GET_SIZE(fix_rows) != PyList_GET_SIZE(fix_texts)) {
        PyErr_SetString(PyExc_ValueError, "one text per fixed row");
        return -1;
    }
    packed->data = PyBytes_AS_STRING(texts);
    packed->size = PyBytes_GET_SIZE(texts);
    packed->cursor = 0;
    packed->fix = 0;
    packed->fixes = PyList_GET_SIZE(fix_rows);
    packed->fix_rows = fix_rows;
    packed->fix_texts = fix_texts;
    *rows = count;
    return 0;
}

static int put_packed(Buffer *buffer, Packed *packed, Py_ssize_t row) {
    if (packed->cursor > packed->size) {
        PyErr_SetString(PyExc_ValueError, "a packed column holds fewer texts than rows");
        return -1;
    }
    const char *start = packed->data + packed->cursor;
    const char *comma = memchr(start, ',', packed->size - packed->cursor);
    Py_ssize_t length = comma ? comma - start : packed->size - packed->cursor;
    packed->cursor += length + 1;
    if (packed->fix < packed->fixes) {
        Py_ssize_t fixed = PyLong_AsSsize_t(PyList_GET_ITEM(packed->fix_rows, packed->fix));
        if (fixed == -1 && PyErr_Occurred()) return -1;
        if (fixed == row) return put_raw(buffer, PyList_GET_ITEM(packed->fix_texts, packed->fix++));
    }
    return put(buffer, start, length);
}

/* lines(columns, raw, quote_cr) -> bytes: the rows of equal-length columns, each ended by "\n".  A column is a
 * list of cells, or a packed column of floats (see Packed); raw[c] true: column c is a list of texts that need
 * nothing done (numbers written by Python), written as they are. */
static PyObject *lines(PyObject *self, PyObject *args) {
    PyObject *columns, *raw;
    int quote_cr;
    if (!PyArg_ParseTuple(args, "O!O!p", &PyList_Type, &columns, &PyList_Type, &raw, &quote_cr)) return NULL;
    Py_ssize_t width = PyList_GET_SIZE(columns), rows = -1;
    if (PyList_GET_SIZE(raw) != width) return PyErr_Format(PyExc_ValueError, "one raw flag per column");
    Packed *packed = PyMem_Calloc(width ? width : 1, sizeof(Packed));
    if (packed == NULL) return PyErr_NoMemory();
    Buffer buffer = {NULL, 0, 0};
    for (Py_ssize_t c = 0; c < width; c++) {
        PyObject *column = PyList_GET_ITEM(columns, c);
        Py_ssize_t count;
        if (PyTuple_Check(column)) {
            if (unpack(column, &packed[c], &count) < 0) goto fail;
        } else if (PyList_Check(column)) {
            count = PyList_GET_SIZE(column);
        } else {
            PyErr_Format(PyExc_TypeError, "column %zd is neither a list nor a packed column", c);
            goto fail;
        }
        if (rows >= 0 && count != rows) {
            PyErr_SetString(PyExc_ValueError, "columns differ in length");
            goto fail;
        }
        rows = count;
    }
    for (Py_ssize_t r = 0; r < rows; r++) {
        for (Py_ssize_t c = 0; c < width; c++) {
            if (c && put(&buffer, ",", 1) < 0) goto fail;
            PyObject *column = PyList_GET_ITEM(columns, c);
            if (packed[c].data != NULL) {
                if (put_packed(&buffer, &packed[c], r) < 0) goto fail;
                continue;
            }
            PyObject *cell = PyList_GET_ITEM(column, r);
            int is_raw = PyList_GET_ITEM(raw, c) == Py_True && PyUnicode_Check(cell);
            if ((is_raw ? put_raw(&buffer, cell) : put_cell(&buffer, cell, quote_cr)) < 0) goto fail;
        }
        if (put(&buffer, "\n", 1) < 0) goto fail;
    }
    for (Py_ssize_t c = 0; c < width; c++) {
        if (rows > 0 && packed[c].data != NULL &&
            (packed[c].cursor != packed[c].size + 1 || packed[c].fix != packed[c].fixes)) {
            PyErr_SetString(PyExc_ValueError, "a packed column does not hold one text per row");
            goto fail;
        }
    }
    PyMem_Free(packed);
    PyObject *result = PyBytes_FromStringAndSize(buffer.data ? buffer.data : "", buffer.size);
    PyMem_Free(buffer.data);
    return result;
fail:
    PyMem_Free(packed);
    PyMem_Free(buffer.data);
    return NULL;
}

static PyMethodDef methods[] = {
    {"lines", lines, METH_VARARGS, "CSV text (UTF-8) of the rows of equal-length column lists."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csvtext", NULL, -1, methods};

PyMODINIT_FUNC PyInit__csvtext(void) { return PyModule_Create(&module); }
