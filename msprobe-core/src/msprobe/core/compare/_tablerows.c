/* The compare table's rows of dump.json entries, for the common entry.
 *
 * A large compare spends most of its time turning entries into rows
 * (compare/rows.py, dump_rows with every_value) and then into table
 * columns.  Nearly every entry is a call whose sections hold only tensor
 * summaries: a dtype text, a shape of sizes and four float statistics.
 * Here:
 * - parse_rows builds the rows of such entries straight from the text of
 *   dump.json, and table_rows from entries already parsed;
 * - index_rows and rows_of keep the bench side compact, pair_calls pairs
 *   the NPU rows with it, pair_columns makes the table's plain columns.
 * Any entry with something else in it, anywhere, goes whole to a Python
 * function given (the general path, which also raises the schema errors),
 * so the rows are the same as Python's and in the same order.
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
static const char *const section_names[SECTIONS] = {"input_args", "input_kwargs", "input", "parameters", "output"};
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

/* a new row of the given field values (borrowed; none NULL), in field order */
static PyObject *filled_row(PyObject *const values[FIELDS]) {
    PyObject *row = row_type->tp_alloc(row_type, 0);
    for (int field = 0; row != NULL && field < FIELDS; field++) {
        if (set_field(row, field, values[field]) != 0) Py_CLEAR(row);
    }
    return row;
}

static PyObject *make_row(PyObject *name, PyObject *entry, PyObject *item, PyObject *role) {
    PyObject *stats = PyTuple_New(4);
    if (stats == NULL) return NULL;
    for (int i = 0; i < 4; i++) {
        PyObject *stat = PyDict_GetItem(item, key_stats[i]);
        Py_INCREF(stat);
        PyTuple_SET_ITEM(stats, i, stat);
    }
    PyObject *md5 = PyDict_GetItem(item, key_md5);
    PyObject *data_name = PyDict_GetItem(item, key_data_name);
    PyObject *const values[FIELDS] = {name, entry, PyDict_GetItem(item, key_dtype), PyDict_GetItem(item, key_shape),
                                      stats, md5 ? md5 : Py_None, data_name ? data_name : Py_None, role,
                                      empty_text};
    PyObject *row = filled_row(values);
    Py_DECREF(stats);
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
        PyObject *row = filled_row(&PyTuple_GET_ITEM(values, 0));
        if (row == NULL) {
            Py_DECREF(rows);
            return NULL;
        }
        PyList_SET_ITEM(rows, i, row);
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

/* the common case of same_structure in tables.py: role, dtype, shown dtype and shape equal row by row */
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

/* ---- rows straight from dump.json text ----
 *
 * Parsing an entry into dicts and then taking its rows costs most of a
 * large compare's reading: a dict, its keys and values per tensor summary,
 * all freed again at once.  parse_rows reads the text of a run of entries
 * of "data" and builds the rows of each entry that is plainly a call of
 * tensor summaries, written in a strict form of JSON: sections among
 * input_args, input_kwargs, input, parameters and output, each summary with
 * text type and dtype, a shape of sizes, four statistics written as JSON
 * fractions, and optionally requires_grad, md5 and data_name.  Strings must
 * be ASCII without escapes, numbers have fewer than 19 digits in a row, no
 * key appears twice.  Every other entry is handed to the Python function
 * given, by its byte span: it is parsed there as before, errors included.
 */

typedef struct {
    const char *text;
    Py_ssize_t at, end;
} Cursor;

typedef struct {
    int section;
    Py_ssize_t key_start, key_end; /* the key in a dict section */
    Py_ssize_t dtype_start, dtype_end, md5_start, md5_end, name_start, name_end, shape_start, shape_end;
    double stats[4];
} Summary;

typedef struct {
    Summary *items;
    Py_ssize_t count, capacity;
} Summaries;

#define LONGEST_DIGIT_RUN 18

static void blank(Cursor *c) {
    while (c->at < c->end) {
        char ch = c->text[c->at];
        if (ch != ' ' && ch != '\n' && ch != '\r' && ch != '\t') break;
        c->at++;
    }
}

static int take(Cursor *c, char expected) {
    blank(c);
    if (c->at < c->end && c->text[c->at] == expected) {
        c->at++;
        return 1;
    }
    return 0;
}

static int peek(Cursor *c, char expected) {
    blank(c);
    return c->at < c->end && c->text[c->at] == expected;
}

/* a string of printable ASCII without escapes; its contents' span */
static int plain_string(Cursor *c, Py_ssize_t *start, Py_ssize_t *stop) {
    if (!take(c, '"')) return 0;
    *start = c->at;
    while (c->at < c->end) {
        unsigned char ch = (unsigned char)c->text[c->at];
        if (ch == '"') {
            *stop = c->at++;
            return 1;
        }
        if (ch == '\\' || ch < 0x20 || ch >= 0x80) return 0;
        c->at++;
    }
    return 0;
}

static int span_is(Cursor *c, Py_ssize_t start, Py_ssize_t stop, const char *word) {
    size_t length = strlen(word);
    return (size_t)(stop - start) == length && memcmp(c->text + start, word, length) == 0;
}

static int digits(Cursor *c) {
    Py_ssize_t from = c->at;
    while (c->at < c->end && c->text[c->at] >= '0' && c->text[c->at] <= '9') c->at++;
    Py_ssize_t count = c->at - from;
    return count > 0 && count <= LONGEST_DIGIT_RUN ? (int)count : 0;
}

/* a JSON number with a fraction or an exponent (an integer is read by the Python path as an int) */
static int fraction(Cursor *c, double *value) {
    blank(c);
    Py_ssize_t from = c->at;
    if (c->at < c->end && c->text[c->at] == '-') c->at++;
    int whole = digits(c);
    if (!whole || (whole > 1 && c->text[c->at - whole] == '0')) return 0;
    int shaped = 0;
    if (c->at < c->end && c->text[c->at] == '.') {
        c->at++;
        if (!digits(c)) return 0;
        shaped = 1;
    }
    if (c->at < c->end && (c->text[c->at] == 'e' || c->text[c->at] == 'E')) {
        c->at++;
        if (c->at < c->end && (c->text[c->at] == '+' || c->text[c->at] == '-')) c->at++;
        if (!digits(c)) return 0;
        shaped = 1;
    }
    if (!shaped || c->at >= c->end) return 0; /* a number runs on to a separator, which the text holds */
    char *stop = NULL;
    *value = PyOS_string_to_double(c->text + from, &stop, NULL);
    if (*value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return stop == c->text + c->at;
}

/* a shape: [] or [sizes], each a JSON integer of at most 18 digits */
static int sizes(Cursor *c, Py_ssize_t *start, Py_ssize_t *stop) {
    if (!take(c, '[')) return 0;
    *start = c->at;
    if (take(c, ']')) {
        *stop = c->at;
        return 1;
    }
    do {
        blank(c);
        int count = digits(c);
        if (!count || (count > 1 && c->text[c->at - count] == '0')) return 0;
    } while (take(c, ','));
    *stop = c->at;
    return take(c, ']');
}

/* a key from ``names`` not ``seen`` before in this object (it is marked seen): its index, or -1 for any other
   key, a key twice (a dict keeps its last value: left to the Python path) or no key and colon */
static int known_key(Cursor *c, const char *const *names, int count, int *seen) {
    Py_ssize_t start, stop;
    if (!plain_string(c, &start, &stop) || !take(c, ':')) return -1;
    int key = 0;
    while (key < count && !span_is(c, start, stop, names[key])) key++;
    if (key == count || (*seen & (1 << key))) return -1;
    *seen |= 1 << key;
    return key;
}

enum { K_TYPE, K_DTYPE, K_SHAPE, K_MAX, K_MIN, K_MEAN, K_NORM, K_GRAD, K_MD5, K_NAME, SUMMARY_KEYS };
static const char *const summary_keys[SUMMARY_KEYS] = {"type", "dtype", "shape", "Max", "Min", "Mean",
                                                 "Norm", "requires_grad", "md5", "data_name"};
#define REQUIRED_KEYS 0x7F /* type to Norm */

static int summary(Cursor *c, Summary *item) {
    if (!take(c, '{')) return 0;
    int seen = 0;
    item->md5_start = item->name_start = -1;
    if (!peek(c, '}')) {
        do {
            int key = known_key(c, summary_keys, SUMMARY_KEYS, &seen);
            if (key < 0) return 0;
            Py_ssize_t start, stop;
            int ok;
            switch (key) {
                case K_TYPE: ok = plain_string(c, &start, &stop); break;
                case K_DTYPE: ok = plain_string(c, &item->dtype_start, &item->dtype_end); break;
                case K_MD5: ok = plain_string(c, &item->md5_start, &item->md5_end); break;
                case K_NAME: ok = plain_string(c, &item->name_start, &item->name_end); break;
                case K_SHAPE: ok = sizes(c, &item->shape_start, &item->shape_end); break;
                case K_GRAD:
                    blank(c);
                    ok = c->end - c->at >= 5 && (memcmp(c->text + c->at, "true", 4) == 0 ||
                                                 memcmp(c->text + c->at, "false", 5) == 0);
                    if (ok) c->at += c->text[c->at] == 't' ? 4 : 5;
                    break;
                default: ok = fraction(c, &item->stats[key - K_MAX]);
            }
            if (!ok) return 0;
        } while (take(c, ','));
    }
    return take(c, '}') && (seen & REQUIRED_KEYS) == REQUIRED_KEYS;
}

static Summary *next_summary(Summaries *all) {
    if (all->count == all->capacity) {
        Py_ssize_t capacity = all->capacity ? all->capacity * 2 : 16;
        Summary *grown = PyMem_Realloc(all->items, capacity * sizeof(Summary));
        if (grown == NULL) return NULL;
        all->items = grown;
        all->capacity = capacity;
    }
    return &all->items[all->count++];
}

/* Keys of one dict section that this file checks for repeats, each against every earlier one; a larger
   section (never seen in a real dump, easy to forge) goes to the Python path, whose dict is linear. */
#define DICT_KEYS_IN_C 64

/* the value of an entry: 1 when it is plainly a call of summaries (they are in ``all``), 0 when not, -1 on
   an error of memory */
static int plain_call(Cursor *c, Summaries *all) {
    all->count = 0;
    if (!take(c, '{')) return 0;
    int seen = 0;
    if (!peek(c, '}')) {
        do {
            int s = known_key(c, section_names, SECTIONS, &seen);
            if (s < 0) return 0;
            Py_ssize_t first = all->count;
            if (!take(c, section_is_list[s] ? '[' : '{')) return 0;
            if (take(c, section_is_list[s] ? ']' : '}')) continue;
            do {
                Summary *item = next_summary(all);
                if (item == NULL) return -1;
                item->section = s;
                if (!section_is_list[s]) {
                    if (!plain_string(c, &item->key_start, &item->key_end) || !take(c, ':')) return 0;
                    if (all->count - first > DICT_KEYS_IN_C) return 0;
                    for (Py_ssize_t k = first; k < all->count - 1; k++) { /* a key twice: dict semantics */
                        Summary *other = &all->items[k];
                        if (other->key_end - other->key_start == item->key_end - item->key_start &&
                            memcmp(c->text + other->key_start, c->text + item->key_start,
                                   item->key_end - item->key_start) == 0) {
                            return 0;
                        }
                    }
                }
                if (!summary(c, item)) return 0;
            } while (take(c, ','));
            if (!take(c, section_is_list[s] ? ']' : '}')) return 0;
        } while (take(c, ','));
    }
    return take(c, '}');
}

static PyObject *text_of(Cursor *c, Py_ssize_t start, Py_ssize_t stop) {
    return PyUnicode_DecodeASCII(c->text + start, stop - start, NULL);
}

static PyObject *shape_of(Cursor *c, Py_ssize_t start, Py_ssize_t stop) {
    PyObject *shape = PyList_New(0);
    Cursor inner = {c->text, start, stop};
    while (shape != NULL) {
        blank(&inner);
        if (inner.at >= stop || inner.text[inner.at] == ']') break;
        long long size = 0;
        while (inner.at < stop && inner.text[inner.at] >= '0' && inner.text[inner.at] <= '9') {
            size = size * 10 + (inner.text[inner.at++] - '0');
        }
        PyObject *number = PyLong_FromLongLong(size);
        if (number == NULL || PyList_Append(shape, number) != 0) Py_CLEAR(shape);
        Py_XDECREF(number);
        take(&inner, ',');
    }
    return shape;
}

static PyObject *summary_row(Cursor *c, Summary *item, PyObject *name, PyObject *entry) {
    PyObject *row = NULL;
    PyObject *stats = PyTuple_New(4);
    PyObject *dtype = text_of(c, item->dtype_start, item->dtype_end);
    PyObject *shape = shape_of(c, item->shape_start, item->shape_end);
    PyObject *md5 = item->md5_start < 0 ? Py_NewRef(Py_None) : text_of(c, item->md5_start, item->md5_end);
    PyObject *data_name =
        item->name_start < 0 ? Py_NewRef(Py_None) : text_of(c, item->name_start, item->name_end);
    int failed = !stats || !dtype || !shape || !md5 || !data_name;
    for (int k = 0; k < 4 && !failed; k++) {
        PyObject *value = PyFloat_FromDouble(item->stats[k]);
        failed = value == NULL;
        if (value) PyTuple_SET_ITEM(stats, k, value);
    }
    if (!failed) {
        PyObject *const values[FIELDS] = {name, entry, dtype, shape, stats, md5, data_name, roles[item->section],
                                          empty_text};
        row = filled_row(values);
    }
    Py_XDECREF(stats);
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(md5);
    Py_XDECREF(data_name);
    return row;
}

/* the rows of a plain call, in the table's order of sections */
static int call_rows(Cursor *c, Summaries *all, PyObject *entry, PyObject *rows) {
    for (int s = 0; s < SECTIONS; s++) {
        PyObject *prefix = NULL;
        Py_ssize_t index = 0;
        for (Py_ssize_t i = 0; i < all->count; i++) {
            Summary *item = &all->items[i];
            if (item->section != s) continue;
            if (prefix == NULL && (prefix = PyUnicode_Concat(entry, labels[s])) == NULL) return -1;
            PyObject *key = section_is_list[s] ? index_text(index++) : text_of(c, item->key_start, item->key_end);
            PyObject *name = key == NULL ? NULL : PyUnicode_Concat(prefix, key);
            Py_XDECREF(key);
            PyObject *row = name == NULL ? NULL : summary_row(c, item, name, entry);
            Py_XDECREF(name);
            int failed = row == NULL || PyList_Append(rows, row) != 0;
            Py_XDECREF(row);
            if (failed) {
                Py_XDECREF(prefix);
                return -1;
            }
        }
        Py_XDECREF(prefix);
    }
    return 0;
}

/* whether the member in c's span (a name, a colon, a value) is plainly a call of summaries; its rows are then
   appended to ``rows`` and its name to ``names``. 0: not plain, -1: an error of memory */
static int plain_member(Cursor *c, Summaries *all, PyObject *rows, PyObject *names) {
    static const char grad[] = ".parameters_grad"; /* a module's gradients: read as the Python path reads them */
    const Py_ssize_t grad_length = (Py_ssize_t)sizeof(grad) - 1;
    Py_ssize_t name_start, name_end;
    if (!plain_string(c, &name_start, &name_end) || !take(c, ':')) return 0;
    if (name_end - name_start >= grad_length && memcmp(c->text + name_end - grad_length, grad, grad_length) == 0) {
        return 0;
    }
    int plain = plain_call(c, all);
    if (plain <= 0) return plain;
    blank(c);
    if (c->at != c->end) return 0; /* more after the value */
    PyObject *entry = text_of(c, name_start, name_end);
    int failed = entry == NULL || call_rows(c, all, entry, rows) != 0 || PyList_Append(names, entry) != 0;
    Py_XDECREF(entry);
    return failed ? -1 : 1;
}

/* parse_rows(text, start, stop, commas, rows, names, other) -> None

   The members of "data" in text[start:stop], ``commas`` the positions of the commas between them (the
   scanner found them): the rows of each plain call are appended to ``rows`` and its name to ``names``; any
   other member is handed to other(first, end), its byte span, which appends them itself. */
static PyObject *parse_rows(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, stop;
    PyObject *commas, *rows, *names, *other;
    if (!PyArg_ParseTuple(args, "y*nnO!O!O!O", &view, &start, &stop, &PyList_Type, &commas, &PyList_Type, &rows,
                          &PyList_Type, &names, &other)) {
        return NULL;
    }
    if (row_type == NULL || start < 0 || stop > view.len || start > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, row_type == NULL ? "configure() the row class first" : "a span out of range");
        return NULL;
    }
    Summaries all = {NULL, 0, 0};
    int failed = 0;
    Py_ssize_t count = PyList_GET_SIZE(commas);
    for (Py_ssize_t i = 0, first = start; i <= count && !failed; i++) {
        Py_ssize_t end = i < count ? PyLong_AsSsize_t(PyList_GET_ITEM(commas, i)) : stop;
        if (end < first || end > stop) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a comma out of range");
            failed = 1;
            break;
        }
        Cursor c = {view.buf, first, end};
        blank(&c);
        Py_ssize_t begin = c.at;
        int plain = begin < end ? plain_member(&c, &all, rows, names) : count == 0; /* blank: an empty object */
        if (plain == 0) {
            /* a blank member after a comma (a trailing comma) goes with its comma, for the parser to name */
            PyObject *done = PyObject_CallFunction(other, "nn", begin < end ? begin : first - 1, end);
            plain = done == NULL ? -1 : 1;
            Py_XDECREF(done);
        }
        failed = plain < 0;
        first = end + 1;
    }
    PyMem_Free(all.items);
    PyBuffer_Release(&view);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"parse_rows", parse_rows, METH_VARARGS, "Rows of the plain calls in a span of dump.json's data members."},
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
    PyObject *created = PyModule_Create(&module);
    /* INTERFACE_VERSION: what rows.py expects (bump both together), so a stale build is not used */
    if (created != NULL && PyModule_AddIntConstant(created, "INTERFACE_VERSION", 1) < 0) Py_CLEAR(created);
    return created;
}
