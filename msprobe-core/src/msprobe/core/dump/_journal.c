/* DumpWriter.add_journaled (writer.py) in C, for other extensions to call without a Python call per entry.
 *
 * msprobe-torch's per-call path writes one entry per recorded API call.  It used to reach into the writer's and
 * the journal's attributes itself; the writer's state belongs to this package, so the code that touches it lives
 * here, beside the Python it mirrors (writer.py: DumpWriter.add_journaled, _journal_line and
 * _MappedJournal.write), and other packages call it through the capsule "_C_API".  Tests check that both ways
 * leave the same tables and the same journal bytes.
 *
 * Only the usual case is done here: the step's journal is open and has not failed.  Anything else (no journal
 * yet, a failed one, a mapping to grow, any error) answers 0 and the caller runs the writer's Python, which
 * handles every case and stores the same again.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define JOURNAL_API_VERSION 1

static PyObject *s_journal, *s_journal_failed, *s_dirty, *s_extra_info, *s_data, *s_stack, *s_construct, *s_names,
    *s_write, *s_map, *s_position, *s_size;

/* A growing byte buffer for one entry's journal lines. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
    char small[1024];
} Lines;

static int lines_add(Lines *lines, const char *text, Py_ssize_t n) {
    if (lines->len + n > lines->cap) {
        Py_ssize_t cap = lines->cap * 2 > lines->len + n ? lines->cap * 2 : lines->len + n;
        char *grown = lines->data == lines->small ? PyMem_Malloc((size_t)cap) : PyMem_Realloc(lines->data, (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (lines->data == lines->small) memcpy(grown, lines->small, (size_t)lines->len);
        lines->data = grown;
        lines->cap = cap;
    }
    memcpy(lines->data + lines->len, text, (size_t)n);
    lines->len += n;
    return 0;
}

static int lines_add_text(Lines *lines, PyObject *text) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    return utf8 == NULL ? -1 : lines_add(lines, utf8, n);
}

/* writer.py's _journal_line: ["kind", name, value] on a line of its own */
static int journal_line(Lines *lines, const char *kind, PyObject *name_text, PyObject *value) {
    return lines_add(lines, "[\"", 2) < 0 || lines_add(lines, kind, (Py_ssize_t)strlen(kind)) < 0 ||
                   lines_add(lines, "\", ", 3) < 0 || lines_add_text(lines, name_text) < 0 ||
                   lines_add(lines, ", ", 2) < 0 || lines_add_text(lines, value) < 0 || lines_add(lines, "]\n", 2) < 0
               ? -1
               : 0;
}

/* _MappedJournal.write for lines that fit the mapping as it is: copied in and the position moved on.  1 when
 * written, 0 when the journal's own write() must do it (another kind of journal, a mapping to grow), -1 on error. */
static int write_mapped(PyObject *journal, const char *data, Py_ssize_t len) {
    PyObject *map = PyObject_GetAttr(journal, s_map), *position = NULL, *size = NULL;
    int done = 0;
    if (map == NULL || !PyObject_CheckBuffer(map) || (position = PyObject_GetAttr(journal, s_position)) == NULL ||
        (size = PyObject_GetAttr(journal, s_size)) == NULL || !PyLong_CheckExact(position) || !PyLong_CheckExact(size))
        goto done;
    Py_ssize_t start = PyLong_AsSsize_t(position), reserved = PyLong_AsSsize_t(size);
    if (start < 0 || reserved < 0 || len > reserved - start) goto done; /* to grow: the journal's write() */
    Py_buffer view;
    if (PyObject_GetBuffer(map, &view, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0) goto done;
    if (view.len >= reserved) {
        memcpy((char *)view.buf + start, data, (size_t)len);
        done = 1;
    }
    PyBuffer_Release(&view);
    if (done) {
        PyObject *end = PyLong_FromSsize_t(start + len);
        if (end == NULL || PyObject_SetAttr(journal, s_position, end) < 0) done = -1;
        Py_XDECREF(end);
    }
done:
    Py_XDECREF(map);
    Py_XDECREF(position);
    Py_XDECREF(size);
    if (done == 0 && PyErr_Occurred()) { /* not this kind of journal: its write() does it */
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
        PyErr_Clear();
    }
    return done;
}

/* One table of the writer's (data, stack, construct, the names' texts), as a new reference; NULL when it is not
 * a dict (the caller then leaves the entry to Python). */
static PyObject *writer_table(PyObject *writer, PyObject *name) {
    PyObject *table = PyObject_GetAttr(writer, name);
    if (table != NULL && !PyDict_Check(table)) Py_CLEAR(table);
    return table;
}

/* The entry, its stack and its parent (each None where there is none; all JSON text already) into the writer's
 * tables and, in one write, its journal.  1 when done, 0 when the writer's add_journaled must do it, -1 only for
 * an error that is no Exception (KeyboardInterrupt, MemoryError's kin). */
static int add_journaled(PyObject *writer, PyObject *name, PyObject *name_text, PyObject *text, PyObject *stack_text,
                         PyObject *parent_text) {
    static PyObject **const table_names[4] = {&s_data, &s_stack, &s_construct, &s_names};
    static const char *const kinds[3] = {"data", "stack", "construct"};
    PyObject *tables[4] = {NULL, NULL, NULL, NULL};
    PyObject *journal = NULL, *failed = NULL, *extra = NULL;
    int written = 0;
    Lines lines = {NULL, 0, (Py_ssize_t)sizeof(lines.small), {0}};
    lines.data = lines.small;
    if (!PyUnicode_Check(name) || !PyUnicode_Check(name_text)) goto done;
    journal = PyObject_GetAttr(writer, s_journal);
    failed = journal == NULL ? NULL : PyObject_GetAttr(writer, s_journal_failed);
    extra = failed == NULL ? NULL : PyObject_GetAttr(writer, s_extra_info);
    if (extra == NULL || journal == Py_None || failed != Py_False) goto done;
    int with_extra = PyObject_IsTrue(extra);
    if (with_extra < 0) goto done;
    PyObject *values[3] = {text, with_extra ? stack_text : Py_None, with_extra ? parent_text : Py_None};
    for (int i = 0; i < 3; i++)
        if (values[i] != Py_None && !PyUnicode_Check(values[i])) goto done;
    for (int i = 0; i < 4; i++)
        if ((tables[i] = writer_table(writer, *table_names[i])) == NULL) goto done;
    if (PyDict_SetItem(tables[3], name, name_text) < 0) goto done;
    for (int i = 0; i < 3; i++) {
        if (values[i] == Py_None) continue;
        if (PyDict_SetItem(tables[i], name, values[i]) < 0 || journal_line(&lines, kinds[i], name_text, values[i]) < 0)
            goto done;
    }
    if (PyObject_SetAttr(writer, s_dirty, Py_True) < 0) goto done;
    if (lines.len == 0) { /* a name and nothing to journal, as _write_lines("") */
        written = 1;
        goto done;
    }
    written = write_mapped(journal, lines.data, lines.len);
    if (written == 0) {
        PyObject *bytes = PyBytes_FromStringAndSize(lines.data, lines.len);
        PyObject *result = bytes == NULL ? NULL : PyObject_CallMethodOneArg(journal, s_write, bytes);
        Py_XDECREF(bytes);
        written = result == NULL ? 0 : 1;
        Py_XDECREF(result);
    }
done:
    if (lines.data != lines.small) PyMem_Free(lines.data);
    for (int i = 0; i < 4; i++) Py_XDECREF(tables[i]);
    Py_XDECREF(journal);
    Py_XDECREF(failed);
    Py_XDECREF(extra);
    if (written < 0) return -1;
    if (written == 0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
        PyErr_Clear();
    }
    return written;
}

static PyObject *add_journaled_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "add_journaled(writer, name, name_text, text, stack_text, parent_text)");
        return NULL;
    }
    int done = add_journaled(args[0], args[1], args[2], args[3], args[4], args[5]);
    if (done < 0) return NULL;
    return PyBool_FromLong(done);
}

static PyMethodDef methods[] = {
    {"add_journaled", (PyCFunction)(void (*)(void))add_journaled_py, METH_FASTCALL,
     "add_journaled(writer, name, name_text, text, stack_text, parent_text) -> bool: True when the entry is stored "
     "and journaled, False when DumpWriter.add_journaled must do it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_journal", "DumpWriter.add_journaled's usual case in C.",
                                    -1, methods};

/* The table other extensions read from the capsule "_C_API".  Its users declare the same layout and check the
 * version: the packages build apart, so no header is shared; a new field goes at the end with a new version. */
typedef struct {
    int version;
    int (*add_journaled)(PyObject *writer, PyObject *name, PyObject *name_text, PyObject *text, PyObject *stack_text,
                         PyObject *parent_text);
} JournalAPI;

static const JournalAPI C_API = {JOURNAL_API_VERSION, add_journaled};

PyMODINIT_FUNC PyInit__journal(void) {
#define INTERN(variable, text)                                                                                       \
    if ((variable = PyUnicode_InternFromString(text)) == NULL) return NULL;
    INTERN(s_journal, "_journal")
    INTERN(s_journal_failed, "_journal_failed")
    INTERN(s_dirty, "_dirty")
    INTERN(s_extra_info, "extra_info")
    INTERN(s_data, "data")
    INTERN(s_stack, "stack")
    INTERN(s_construct, "construct")
    INTERN(s_names, "_names")
    INTERN(s_write, "write")
    INTERN(s_map, "_map")
    INTERN(s_position, "_position")
    INTERN(s_size, "_size")
#undef INTERN
    PyObject *created = PyModule_Create(&module);
    if (created == NULL) return NULL;
    /* the attributes read and written by name, by owner: a test checks them against a real writer and journal, so
     * a rename in writer.py fails there instead of sending every entry to the Python path unnoticed */
    PyObject *reads =
        Py_BuildValue("{s:(ssssssss),s:(sss)}", "writer", "_journal", "_journal_failed", "_dirty", "extra_info", "data",
                      "stack", "construct", "_names", "journal", "_map", "_position", "_size");
    PyObject *capsule = PyCapsule_New((void *)&C_API, "msprobe.core.dump._journal._C_API", NULL);
    if (reads == NULL || capsule == NULL || PyModule_AddObjectRef(created, "_C_API", capsule) < 0 ||
        PyModule_AddObjectRef(created, "READS", reads) < 0 ||
        PyModule_AddIntConstant(created, "INTERFACE_VERSION", JOURNAL_API_VERSION) < 0) {
        Py_XDECREF(reads);
        Py_XDECREF(capsule);
        Py_DECREF(created);
        return NULL;
    }
    Py_DECREF(reads);
    Py_DECREF(capsule);
    return created;
}
