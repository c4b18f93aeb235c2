/* The compare table's rows of a parsed dump.json block, for the common entry.
 *
 * A large compare spends most of its time turning parsed entries into rows
 * (compare/rows.py, dump_rows with every_value).  Nearly every entry is a
 * call whose sections hold only tensor summaries: a dtype text, a shape of
 * sizes and four float statistics.  Those rows are built here.  Any entry
 * with something else in it, anywhere, goes whole to the Python function
 * given (the general path, which also raises the schema errors), so the rows
 * are the same as Python's and in the same order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define FIELDS 9
static const char *field_names[FIELDS] = {"name",      "entry", "dtype", "shape",      "stats",
                                          "md5",       "data_name", "role", "shown_dtype"};
enum { NAME, ENTRY, DTYPE, SHAPE, STATS, MD5, DATA_NAME, ROLE, SHOWN_DTYPE };

static PyTypeObject *row_type = NULL;
static PyObject *descriptors[FIELDS];

/* the sections in the table's order: a module's parameters between its inputs and outputs */
#define SECTIONS 5
static const char *section_names[SECTIONS] = {"input_args", "input_kwargs", "input", "parameters", "output"};
static const int section_is_list[SECTIONS] = {1, 0, 1, 0, 1};
static const char *section_labels[SECTIONS] = {"input", "input", "input", "parameters", "output"};
static PyObject *section_keys[SECTIONS];
static PyObject *labels[SECTIONS]; /* ".input." and so on */
static PyObject *roles[SECTIONS];

static PyObject *key_dtype, *key_type, *key_shape, *key_md5, *key_data_name, *key_stats[4], *empty_text;
static PyObject *grad_suffix;

#define INDEX_TEXTS 64
static PyObject *index_texts[INDEX_TEXTS];

static int interned(PyObject **slot, const char *text) {
    *slot = PyUnicode_InternFromString(text);
    return *slot == NULL ? -1 : 0;
}

/* configure(Row): the row class (a dataclass with slots) whose fields are set here */
static PyObject *configure(PyObject *self, PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes the row class");
        return NULL;
    }
    PyObject *found[FIELDS];
    for (int i = 0; i < FIELDS; i++) {
        found[i] = PyObject_GetAttrString(cls, field_names[i]);
        if (found[i] == NULL || !PyObject_TypeCheck(found[i], &PyMemberDescr_Type)) {
            for (int j = 0; j <= i; j++) Py_XDECREF(found[j]);
            PyErr_Format(PyExc_TypeError, "the row class has no slot '%s'", field_names[i]);
            return NULL;
        }
    }
    for (int i = 0; i < FIELDS; i++) {
        Py_XSETREF(descriptors[i], found[i]);
    }
    Py_INCREF(cls);
    Py_XSETREF(row_type, (PyTypeObject *)cls);
    Py_RETURN_NONE;
}

static int set_field(PyObject *row, int field, PyObject *value) {
    PyObject *descriptor = descriptors[field];
    return Py_TYPE(descriptor)->tp_descr_set(descriptor, row, value);
}

/* the item is a tensor summary this file builds a row for (a dict with a dtype text, a text type, a list of
   sizes as its shape and four floats as its statistics) */
static int plain_tensor(PyObject *item) {
    if (!PyDict_CheckExact(item)) return 0;
    PyObject *dtype = PyDict_GetItemWithError(item, key_dtype);
    if (dtype == NULL || !PyUnicode_CheckExact(dtype)) return 0;
    PyObject *kind = PyDict_GetItemWithError(item, key_type);
    if (kind == NULL || !PyUnicode_CheckExact(kind)) return 0;
    PyObject *shape = PyDict_GetItemWithError(item, key_shape);
    if (shape == NULL || !PyList_CheckExact(shape)) return 0;
    for (Py_ssize_t i = 0, n = PyList_GET_SIZE(shape); i < n; i++) {
        PyObject *size = PyList_GET_ITEM(shape, i);
        if (!PyLong_CheckExact(size)) return 0;
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(size, &overflow);
        if (overflow < 0 || (overflow == 0 && value < 0)) return 0;
    }
    for (int i = 0; i < 4; i++) {
        PyObject *stat = PyDict_GetItemWithError(item, key_stats[i]);
        if (stat == NULL || !PyFloat_CheckExact(stat)) return 0;
    }
    return !PyErr_Occurred(); /* md5 and data_name are taken as they are, None where absent */
}

/* every section of the entry is of its kind and holds only plain tensors (dict sections: under text keys) */
static int plain_entry(PyObject *entry, PyObject *content) {
    if (!PyUnicode_CheckExact(entry) || !PyDict_CheckExact(content)) return 0;
    if (PyUnicode_Tailmatch(entry, grad_suffix, 0, PY_SSIZE_T_MAX, 1) != 0) return 0;
    for (int s = 0; s < SECTIONS; s++) {
        PyObject *value = PyDict_GetItemWithError(content, section_keys[s]);
        if (value == NULL) {
            if (PyErr_Occurred()) return 0;
            continue;
        }
        if (section_is_list[s]) {
            if (!PyList_CheckExact(value)) return 0;
            for (Py_ssize_t i = 0, n = PyList_GET_SIZE(value); i < n; i++) {
                if (!plain_tensor(PyList_GET_ITEM(value, i))) return 0;
            }
        } else {
            if (!PyDict_CheckExact(value)) return 0;
            Py_ssize_t at = 0;
            PyObject *key, *item;
            while (PyDict_Next(value, &at, &key, &item)) {
                if (!PyUnicode_CheckExact(key) || !plain_tensor(item)) return 0;
            }
        }
    }
    return 1;
}

static PyObject *index_text(Py_ssize_t index) {
    if (index < INDEX_TEXTS) {
        Py_INCREF(index_texts[index]);
        return index_texts[index];
    }
    return PyUnicode_FromFormat("%zd", index);
}

static PyObject *make_row(PyObject *name, PyObject *entry, PyObject *item, PyObject *role) {
    PyObject *row = row_type->tp_alloc(row_type, 0);
    if (row == NULL) return NULL;
    PyObject *stats = PyTuple_New(4);
    if (stats == NULL) {
        Py_DECREF(row);
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        PyObject *stat = PyDict_GetItem(item, key_stats[i]);
        Py_INCREF(stat);
        PyTuple_SET_ITEM(stats, i, stat);
    }
    PyObject *md5 = PyDict_GetItem(item, key_md5);
    PyObject *data_name = PyDict_GetItem(item, key_data_name);
    int failed = set_field(row, NAME, name) || set_field(row, ENTRY, entry) ||
                 set_field(row, DTYPE, PyDict_GetItem(item, key_dtype)) ||
                 set_field(row, SHAPE, PyDict_GetItem(item, key_shape)) || set_field(row, STATS, stats) ||
                 set_field(row, MD5, md5 ? md5 : Py_None) || set_field(row, DATA_NAME, data_name ? data_name : Py_None) ||
                 set_field(row, ROLE, role) || set_field(row, SHOWN_DTYPE, empty_text);
    Py_DECREF(stats);
    if (failed) {
        Py_DECREF(row);
        return NULL;
    }
    return row;
}

static int append_row(PyObject *rows, PyObject *name, PyObject *entry, PyObject *item, PyObject *role) {
    if (name == NULL) return -1;
    PyObject *row = make_row(name, entry, item, role);
    Py_DECREF(name);
    if (row == NULL) return -1;
    int failed = PyList_Append(rows, row);
    Py_DECREF(row);
    return failed;
}

static int entry_rows(PyObject *rows, PyObject *entry, PyObject *content) {
    for (int s = 0; s < SECTIONS; s++) {
        PyObject *value = PyDict_GetItem(content, section_keys[s]);
        if (value == NULL) continue;
        PyObject *prefix = PyUnicode_Concat(entry, labels[s]);
        if (prefix == NULL) return -1;
        int failed = 0;
        if (section_is_list[s]) {
            for (Py_ssize_t i = 0, n = PyList_GET_SIZE(value); i < n && !failed; i++) {
                PyObject *index = index_text(i);
                if (index == NULL) {
                    failed = 1;
                    break;
                }
                PyObject *name = PyUnicode_Concat(prefix, index);
                Py_DECREF(index);
                failed = append_row(rows, name, entry, PyList_GET_ITEM(value, i), roles[s]) != 0;
            }
        } else {
            Py_ssize_t at = 0;
            PyObject *key, *item;
            while (!failed && PyDict_Next(value, &at, &key, &item)) {
                failed = append_row(rows, PyUnicode_Concat(prefix, key), entry, item, roles[s]) != 0;
            }
        }
        Py_DECREF(prefix);
        if (failed) return -1;
    }
    return 0;
}

/* table_rows(data, rows, general): append to ``rows`` the rows of every entry of ``data`` in order; an entry
   this file does not build is given to general(entry, content), which appends its rows itself */
static PyObject *table_rows(PyObject *self, PyObject *args) {
    PyObject *data, *rows, *general;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyDict_Type, &data, &PyList_Type, &rows, &general)) return NULL;
    if (row_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() the row class first");
        return NULL;
    }
    Py_ssize_t at = 0;
    PyObject *entry, *content;
    /* the general path may not change data (it only reads it); hold the entry while it runs all the same */
    while (PyDict_Next(data, &at, &entry, &content)) {
        if (plain_entry(entry, content)) {
            if (entry_rows(rows, entry, content) != 0) return NULL;
            continue;
        }
        if (PyErr_Occurred()) return NULL;
        Py_INCREF(entry);
        Py_INCREF(content);
        PyObject *done = PyObject_CallFunctionObjArgs(general, entry, content, NULL);
        Py_DECREF(entry);
        Py_DECREF(content);
        if (done == NULL) return NULL;
        Py_DECREF(done);
    }
    Py_RETURN_NONE;
}

/* rows_of(fields): rows made of tuples of their fields, in field order (as a helper process sends them) */
static PyObject *rows_of(PyObject *self, PyObject *fields) {
    if (row_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() the row class first");
        return NULL;
    }
    if (!PyList_CheckExact(fields)) {
        PyErr_SetString(PyExc_TypeError, "rows_of() takes a list of tuples");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(fields);
    PyObject *rows = PyList_New(count);
    if (rows == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *values = PyList_GET_ITEM(fields, i);
        if (!PyTuple_CheckExact(values) || PyTuple_GET_SIZE(values) != FIELDS) {
            PyErr_Format(PyExc_TypeError, "rows_of(): item %zd is not a tuple of %d fields", i, FIELDS);
            Py_DECREF(rows);
            return NULL;
        }
        PyObject *row = row_type->tp_alloc(row_type, 0);
        if (row == NULL) {
            Py_DECREF(rows);
            return NULL;
        }
        PyList_SET_ITEM(rows, i, row);
        for (int field = 0; field < FIELDS; field++) {
            if (set_field(row, field, PyTuple_GET_ITEM(values, field)) != 0) {
                Py_DECREF(rows);
                return NULL;
            }
        }
    }
    return rows;
}

static PyObject *get_field(PyObject *row, int field) {
    PyObject *descriptor = descriptors[field];
    return Py_TYPE(descriptor)->tp_descr_get(descriptor, row, (PyObject *)row_type);
}

/* the first row index of a name or an entry: kept where there is none yet */
static int keep_first(PyObject *firsts, PyObject *key, PyObject *index) {
    PyObject *found = PyDict_SetDefault(firsts, key, index);
    return found == NULL ? -1 : 0;
}

/* index_rows(rows, start, first_of, call_starts, call_ends, shared) -> whether a tensor row holds an md5.
   Notes where each name's first row and each entry's rows are (rows numbered from ``start``), and gives
   equal dtype texts and equal shapes one object among all rows, from ``shared``. */
static PyObject *index_rows(PyObject *self, PyObject *args) {
    PyObject *rows, *first_of, *starts, *ends, *shared;
    Py_ssize_t index;
    if (!PyArg_ParseTuple(args, "O!nO!O!O!O!", &PyList_Type, &rows, &index, &PyDict_Type, &first_of, &PyDict_Type,
                          &starts, &PyDict_Type, &ends, &PyDict_Type, &shared)) {
        return NULL;
    }
    if (row_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() the row class first");
        return NULL;
    }
    int has_md5 = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++, index++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (Py_TYPE(row) != row_type) {
            PyErr_Format(PyExc_TypeError, "index_rows(): item %zd is not a row", i);
            return NULL;
        }
        PyObject *name = get_field(row, NAME), *entry = get_field(row, ENTRY), *dtype = get_field(row, DTYPE);
        PyObject *shape = get_field(row, SHAPE), *md5 = get_field(row, MD5), *shown = get_field(row, SHOWN_DTYPE);
        PyObject *at = PyLong_FromSsize_t(index), *after = PyLong_FromSsize_t(index + 1);
        int failed = !name || !entry || !dtype || !shape || !md5 || !shown || !at || !after;
        failed = failed || keep_first(first_of, name, at) || keep_first(starts, entry, at) ||
                 PyDict_SetItem(ends, entry, after);
        if (!failed) {
            PyObject *one = PyDict_SetDefault(shared, dtype, dtype);
            failed = one == NULL || set_field(row, DTYPE, one);
        }
        if (!failed && PyList_CheckExact(shape)) {
            PyObject *key = PyList_AsTuple(shape);
            PyObject *one = key == NULL ? NULL : PyDict_SetDefault(shared, key, shape);
            failed = one == NULL || set_field(row, SHAPE, one);
            Py_XDECREF(key);
        }
        if (!failed && !has_md5) {
            int truthy = PyObject_IsTrue(md5);
            int plain = shown == empty_text ? 1 : PyObject_RichCompareBool(shown, empty_text, Py_EQ);
            failed = truthy < 0 || plain < 0;
            has_md5 = truthy > 0 && plain > 0;
        }
        Py_XDECREF(name);
        Py_XDECREF(entry);
        Py_XDECREF(dtype);
        Py_XDECREF(shape);
        Py_XDECREF(md5);
        Py_XDECREF(shown);
        Py_XDECREF(at);
        Py_XDECREF(after);
        if (failed) return NULL;
    }
    return PyBool_FromLong(has_md5);
}

#define SHAPE_TEXTS_KEPT 100000

/* str(shape), from ``texts`` for a list of sizes seen before (the few shapes a dump holds many times over) */
static PyObject *shape_text(PyObject *shape, PyObject *texts) {
    if (!PyList_CheckExact(shape)) return PyObject_Str(shape);
    PyObject *key = PyList_AsTuple(shape);
    if (key == NULL) return NULL;
    PyObject *text = PyDict_GetItemWithError(texts, key);
    if (text != NULL) {
        Py_DECREF(key);
        Py_INCREF(text);
        return text;
    }
    text = PyErr_Occurred() ? NULL : PyObject_Str(shape);
    if (text != NULL && PyDict_GET_SIZE(texts) < SHAPE_TEXTS_KEPT && PyDict_SetItem(texts, key, text) != 0) {
        Py_CLEAR(text);
    }
    Py_DECREF(key);
    return text;
}

/* str() of the dtype the table shows: the plain value's own where it has one */
static PyObject *dtype_text(PyObject *row) {
    PyObject *shown = get_field(row, SHOWN_DTYPE);
    if (shown == NULL) return NULL;
    int plain = PyUnicode_CheckExact(shown) ? PyUnicode_GET_LENGTH(shown) == 0
                                            : PyObject_RichCompareBool(shown, empty_text, Py_EQ);
    if (plain < 0) {
        Py_DECREF(shown);
        return NULL;
    }
    if (plain) Py_SETREF(shown, get_field(row, DTYPE));
    if (shown == NULL) return NULL;
    PyObject *text = PyObject_Str(shown);
    Py_DECREF(shown);
    return text;
}

#define PAIR_COLUMNS 17 /* 2 names, 2 dtypes, 2 shapes, matched, 2 stats, 8 statistic values */

/* pair_columns(pairs, na, shape_texts): the columns of a statistics table that come straight from its pairs
   of rows (either may be None), or None where a pair is not two rows or Nones (the Python path takes it):
   names, dtypes and shapes of each side; the indexes of pairs with both sides and their two sides' stats
   tuples; the eight statistics as shown (None as "None", a missing side as ``na``). */
static PyObject *pair_columns(PyObject *self, PyObject *args) {
    PyObject *pairs, *na, *texts;
    if (!PyArg_ParseTuple(args, "O!OO!", &PyList_Type, &pairs, &na, &PyDict_Type, &texts)) return NULL;
    if (row_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() the row class first");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(pairs);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) Py_RETURN_NONE;
        for (int side = 0; side < 2; side++) {
            PyObject *row = PyTuple_GET_ITEM(pair, side);
            if (row != Py_None && Py_TYPE(row) != row_type) Py_RETURN_NONE;
        }
    }
    PyObject *none_text = PyUnicode_FromString("None");
    PyObject *columns[PAIR_COLUMNS];
    int failed = none_text == NULL;
    for (int c = 0; c < PAIR_COLUMNS; c++) {
        columns[c] = c >= 6 && c <= 8 ? PyList_New(0) : PyList_New(count);
        failed = failed || columns[c] == NULL;
    }
    for (Py_ssize_t i = 0; i < count && !failed; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        PyObject *stats[2] = {NULL, NULL};
        for (int side = 0; side < 2 && !failed; side++) {
            PyObject *row = PyTuple_GET_ITEM(pair, side);
            PyObject *name, *dtype, *shape;
            if (row == Py_None) {
                Py_INCREF(na);
                Py_INCREF(na);
                Py_INCREF(na);
                name = dtype = shape = na;
                for (int k = 0; k < 4; k++) {
                    Py_INCREF(na);
                    PyList_SET_ITEM(columns[9 + 4 * side + k], i, na);
                }
            } else {
                name = get_field(row, NAME);
                dtype = dtype_text(row);
                PyObject *sizes = get_field(row, SHAPE);
                shape = sizes == NULL ? NULL : shape_text(sizes, texts);
                Py_XDECREF(sizes);
                stats[side] = get_field(row, STATS);
                if (stats[side] != NULL && PyTuple_CheckExact(stats[side]) && PyTuple_GET_SIZE(stats[side]) == 4) {
                    for (int k = 0; k < 4; k++) {
                        PyObject *value = PyTuple_GET_ITEM(stats[side], k);
                        value = value == Py_None ? none_text : value;
                        Py_INCREF(value);
                        PyList_SET_ITEM(columns[9 + 4 * side + k], i, value);
                    }
                } else if (stats[side] != NULL) {
                    PyErr_SetString(PyExc_TypeError, "pair_columns(): a row's stats are not four values");
                    failed = 1;
                }
                failed = failed || stats[side] == NULL;
            }
            if (name == NULL || dtype == NULL || shape == NULL) failed = 1;
            /* a list item left NULL on failure is fine: the lists are dropped whole */
            if (name) PyList_SET_ITEM(columns[0 + side], i, name);
            if (dtype) PyList_SET_ITEM(columns[2 + side], i, dtype);
            if (shape) PyList_SET_ITEM(columns[4 + side], i, shape);
        }
        if (!failed && stats[0] != NULL && stats[1] != NULL) {
            PyObject *index = PyLong_FromSsize_t(i);
            failed = index == NULL || PyList_Append(columns[6], index) || PyList_Append(columns[7], stats[0]) ||
                     PyList_Append(columns[8], stats[1]);
            Py_XDECREF(index);
        }
        Py_XDECREF(stats[0]);
        Py_XDECREF(stats[1]);
    }
    Py_XDECREF(none_text);
    PyObject *result = failed ? NULL : PyTuple_New(PAIR_COLUMNS);
    for (int c = 0; c < PAIR_COLUMNS; c++) {
        if (result != NULL) {
            PyTuple_SET_ITEM(result, c, columns[c]);
        } else {
            Py_XDECREF(columns[c]);
        }
    }
    return result;
}

/* a field of two rows equal (the same object, most often) */
static int same_field(PyObject *one, PyObject *other, int field) {
    PyObject *a = get_field(one, field), *b = a == NULL ? NULL : get_field(other, field);
    int same = b == NULL ? -1 : a == b ? 1 : PyObject_RichCompareBool(a, b, Py_EQ);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return same;
}

/* the common case of same_structure in engine.py: role, dtype, shown dtype and shape equal row by row */
static int plainly_same(PyObject *npu, PyObject *bench) {
    Py_ssize_t count = PyList_GET_SIZE(npu);
    if (count != PyList_GET_SIZE(bench)) return 0;
    static const int fields[4] = {ROLE, DTYPE, SHOWN_DTYPE, SHAPE};
    for (Py_ssize_t i = 0; i < count; i++) {
        for (int f = 0; f < 4; f++) {
            int same = same_field(PyList_GET_ITEM(npu, i), PyList_GET_ITEM(bench, i), fields[f]);
            if (same <= 0) return same;
        }
    }
    return 1;
}

/* pair_calls(rows, first_of, matched, bench_rows, call_starts, call_ends, same_structure) -> (pairs, unpaired)

   The NPU rows of a block of whole calls paired as engine.match_rows and calls_of_one_structure pair them:
   each row with the bench row that first bears its name, unless another took it (``matched``, a bytearray
   over the bench rows, is marked); then a call whose rows differ in structure from the bench call they met
   (same_structure(npu_rows, bench_rows) is false) is unpaired, its bench rows returned apart. */
static PyObject *pair_calls(PyObject *self, PyObject *args) {
    PyObject *rows, *first_of, *matched, *bench_rows, *starts, *ends, *same_structure;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O", &PyList_Type, &rows, &PyDict_Type, &first_of, &PyByteArray_Type,
                          &matched, &PyList_Type, &bench_rows, &PyDict_Type, &starts, &PyDict_Type, &ends,
                          &same_structure)) {
        return NULL;
    }
    if (row_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() the row class first");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(rows), bench_count = PyList_GET_SIZE(bench_rows);
    if (PyByteArray_GET_SIZE(matched) != bench_count) {
        PyErr_SetString(PyExc_ValueError, "pair_calls(): matched is not one byte per bench row");
        return NULL;
    }
    char *taken = PyByteArray_AS_STRING(matched);
    PyObject *pairs = PyList_New(0), *unpaired = PyList_New(0);
    PyObject *partners = PyList_New(count); /* each row's bench row or None */
    PyObject *entries = PyList_New(count);
    if (pairs == NULL || unpaired == NULL || partners == NULL || entries == NULL) goto failed;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (Py_TYPE(row) != row_type) {
            PyErr_Format(PyExc_TypeError, "pair_calls(): item %zd is not a row", i);
            goto failed;
        }
        PyObject *name = get_field(row, NAME);
        PyObject *entry = get_field(row, ENTRY);
        if (name == NULL || entry == NULL) {
            Py_XDECREF(name);
            Py_XDECREF(entry);
            goto failed;
        }
        PyList_SET_ITEM(entries, i, entry);
        PyObject *index = PyDict_GetItemWithError(first_of, name);
        Py_DECREF(name);
        PyObject *partner = Py_None;
        if (index != NULL) {
            Py_ssize_t at = PyLong_AsSsize_t(index);
            if (at < 0 || at >= bench_count) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "pair_calls(): a bench index out of range");
                goto failed;
            }
            if (!taken[at]) {
                taken[at] = 1;
                partner = PyList_GET_ITEM(bench_rows, at);
            }
        } else if (PyErr_Occurred()) {
            goto failed;
        }
        Py_INCREF(partner);
        PyList_SET_ITEM(partners, i, partner);
    }
    for (Py_ssize_t start = 0, end; start < count; start = end) {
        PyObject *entry = PyList_GET_ITEM(entries, start);
        for (end = start + 1; end < count; end++) {
            PyObject *other = PyList_GET_ITEM(entries, end);
            int same = other == entry ? 1 : PyObject_RichCompareBool(other, entry, Py_EQ);
            if (same < 0) goto failed;
            if (!same) break;
        }
        PyObject *bench_entry = NULL; /* borrowed from a bench row's field: held below */
        for (Py_ssize_t i = start; i < end && bench_entry == NULL; i++) {
            PyObject *partner = PyList_GET_ITEM(partners, i);
            if (partner != Py_None) {
                bench_entry = get_field(partner, ENTRY);
                if (bench_entry == NULL) goto failed;
            }
        }
        int keep = 1;
        if (bench_entry != NULL) {
            PyObject *first = PyDict_GetItemWithError(starts, bench_entry);
            PyObject *last = first == NULL ? NULL : PyDict_GetItemWithError(ends, bench_entry);
            Py_DECREF(bench_entry);
            if (PyErr_Occurred()) goto failed;
            Py_ssize_t from = first ? PyLong_AsSsize_t(first) : 0, to = last ? PyLong_AsSsize_t(last) : 0;
            if (PyErr_Occurred()) goto failed;
            PyObject *npu = PyList_GetSlice(rows, start, end);
            PyObject *bench = PyList_GetSlice(bench_rows, from, to);
            keep = npu == NULL || bench == NULL ? -1 : plainly_same(npu, bench);
            if (keep == 0) {
                PyObject *verdict = PyObject_CallFunctionObjArgs(same_structure, npu, bench, NULL);
                keep = verdict == NULL ? -1 : PyObject_IsTrue(verdict);
                Py_XDECREF(verdict);
            }
            Py_XDECREF(npu);
            Py_XDECREF(bench);
            if (keep < 0) goto failed;
        }
        for (Py_ssize_t i = start; i < end; i++) {
            PyObject *partner = PyList_GET_ITEM(partners, i);
            if (!keep && partner != Py_None && PyList_Append(unpaired, partner) != 0) goto failed;
            PyObject *pair = PyTuple_Pack(2, PyList_GET_ITEM(rows, i), keep ? partner : Py_None);
            if (pair == NULL || PyList_Append(pairs, pair) != 0) {
                Py_XDECREF(pair);
                goto failed;
            }
            Py_DECREF(pair);
        }
    }
    Py_DECREF(partners);
    Py_DECREF(entries);
    PyObject *result = PyTuple_Pack(2, pairs, unpaired);
    Py_DECREF(pairs);
    Py_DECREF(unpaired);
    return result;
failed:
    Py_XDECREF(pairs);
    Py_XDECREF(unpaired);
    Py_XDECREF(partners);
    Py_XDECREF(entries);
    return NULL;
}

static PyMethodDef methods[] = {
    {"pair_calls", pair_calls, METH_VARARGS, "Pair a block's NPU rows with the bench rows, call by call."},
    {"pair_columns", pair_columns, METH_VARARGS, "The columns of a statistics table taken straight from its pairs."},
    {"rows_of", rows_of, METH_O, "Rows made of tuples of their fields."},
    {"index_rows", index_rows, METH_VARARGS, "Note where names and entries have their rows; share dtypes and shapes."},
    {"configure", configure, METH_O, "Set the row class whose slots the rows fill."},
    {"table_rows", table_rows, METH_VARARGS, "Append the compare table's rows of a dump's entries to a list."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tablerows", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tablerows(void) {
    for (int s = 0; s < SECTIONS; s++) {
        if (interned(&section_keys[s], section_names[s])) return NULL;
        labels[s] = PyUnicode_FromFormat(".%s.", section_labels[s]);
        if (labels[s] == NULL || interned(&roles[s], section_labels[s])) return NULL;
    }
    const char *stat_names[4] = {"Max", "Min", "Mean", "Norm"};
    for (int i = 0; i < 4; i++) {
        if (interned(&key_stats[i], stat_names[i])) return NULL;
    }
    if (interned(&key_dtype, "dtype") || interned(&key_type, "type") || interned(&key_shape, "shape") ||
        interned(&key_md5, "md5") || interned(&key_data_name, "data_name") || interned(&empty_text, "") ||
        interned(&grad_suffix, ".parameters_grad")) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < INDEX_TEXTS; i++) {
        index_texts[i] = PyUnicode_FromFormat("%zd", i);
        if (index_texts[i] == NULL) return NULL;
    }
    return PyModule_Create(&module);
}
