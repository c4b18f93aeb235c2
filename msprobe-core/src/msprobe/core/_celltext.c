/* The text of a CSV table, and the XML rows of an xlsx sheet, made a column list at a time in one C loop.
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
 *
 * sheet_rows() writes the <row> elements of a worksheet as XlsxWriter writes them in its constant-memory mode;
 * msprobe/core/compare/xlsx.py holds the rules and the Python fallback.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define INTERFACE_VERSION 1 /* what its Python wrapper expects: bump both together */
#include <math.h>
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

/* The buffer's text as bytes; the buffer is freed. */
static PyObject *take_bytes(Buffer *buffer) {
    PyObject *result = PyBytes_FromStringAndSize(buffer->data ? buffer->data : "", buffer->size);
    PyMem_Free(buffer->data);
    buffer->data = NULL;
    return result;
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

/* The text of a packed column's next cell (row ``row``): a pointer into the packed bytes or a fixed text. */
static int next_packed(Packed *packed, Py_ssize_t row, const char **text, Py_ssize_t *size) {
    if (packed->cursor > packed->size) {
        PyErr_SetString(PyExc_ValueError, "a packed column holds fewer texts than rows");
        return -1;
    }
    const char *start = packed->data + packed->cursor;
    const char *comma = memchr(start, ',', packed->size - packed->cursor);
    Py_ssize_t length = comma ? comma - start : packed->size - packed->cursor;
    packed->cursor += length + 1;
    *text = start;
    *size = length;
    if (packed->fix < packed->fixes) {
        Py_ssize_t fixed = PyLong_AsSsize_t(PyList_GET_ITEM(packed->fix_rows, packed->fix));
        if (fixed == -1 && PyErr_Occurred()) return -1;
        if (fixed == row) {
            *text = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(packed->fix_texts, packed->fix++), size);
            if (*text == NULL) return -1;
        }
    }
    return 0;
}

static int put_packed(Buffer *buffer, Packed *packed, Py_ssize_t row) {
    const char *text;
    Py_ssize_t size;
    return next_packed(packed, row, &text, &size) < 0 ? -1 : put(buffer, text, size);
}

/* Every packed column was read to its end: it held one text per row, no more. */
static int packs_used_up(const Packed *packed, Py_ssize_t width, Py_ssize_t rows) {
    for (Py_ssize_t c = 0; c < width; c++) {
        if (rows > 0 && packed[c].data != NULL &&
            (packed[c].cursor != packed[c].size + 1 || packed[c].fix != packed[c].fixes)) {
            PyErr_SetString(PyExc_ValueError, "a packed column does not hold one text per row");
            return -1;
        }
    }
    return 0;
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
    if (packs_used_up(packed, width, rows) < 0) goto fail;
    PyMem_Free(packed);
    return take_bytes(&buffer);
fail:
    PyMem_Free(packed);
    PyMem_Free(buffer.data);
    return NULL;
}

/* ---- xlsx sheet rows ---------------------------------------------------------------------------------- */

static int put_utf8(Buffer *buffer, Py_UCS4 c) {
    char bytes[4];
    Py_ssize_t n;
    if (c < 0x80) {
        bytes[0] = (char)c;
        n = 1;
    } else if (c < 0x800) {
        bytes[0] = (char)(0xC0 | (c >> 6));
        bytes[1] = (char)(0x80 | (c & 0x3F));
        n = 2;
    } else if (c < 0x10000) {
        bytes[0] = (char)(0xE0 | (c >> 12));
        bytes[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        bytes[2] = (char)(0x80 | (c & 0x3F));
        n = 3;
    } else {
        bytes[0] = (char)(0xF0 | (c >> 18));
        bytes[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        bytes[2] = (char)(0x80 | ((c >> 6) & 0x3F));
        bytes[3] = (char)(0x80 | (c & 0x3F));
        n = 4;
    }
    return put(buffer, bytes, n);
}

static int is_hex(Py_UCS4 c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* Excel's _xHHHH_ escapes (an existing "_xHHHH_" gets its underscore escaped first), then &, < and >. */
static int put_sheet_text(Buffer *buffer, PyObject *text, Py_ssize_t length) {
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    char escape[8];
    for (Py_ssize_t i = 0; i < length; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        int failed;
        if (c == '_' && i + 6 < length && PyUnicode_READ(kind, data, i + 1) == 'x' &&
            is_hex(PyUnicode_READ(kind, data, i + 2)) && is_hex(PyUnicode_READ(kind, data, i + 3)) &&
            is_hex(PyUnicode_READ(kind, data, i + 4)) && is_hex(PyUnicode_READ(kind, data, i + 5)) &&
            PyUnicode_READ(kind, data, i + 6) == '_') {
            if (put(buffer, "_x005F_x", 8) < 0) return -1;
            for (int k = 2; k < 7; k++)
                if (put_utf8(buffer, PyUnicode_READ(kind, data, i + k)) < 0) return -1;
            i += 6;
            continue;
        }
        if ((c <= 0x08) || (c >= 0x0B && c <= 0x1F) || c == 0xFFFE || c == 0xFFFF) {
            snprintf(escape, sizeof escape, "_x%04X_", (unsigned)c);
            failed = put(buffer, escape, 7);
        } else if (c == '&') {
            failed = put(buffer, "&amp;", 5);
        } else if (c == '<') {
            failed = put(buffer, "&lt;", 4);
        } else if (c == '>') {
            failed = put(buffer, "&gt;", 4);
        } else {
            failed = put_utf8(buffer, c >= 0xD800 && c <= 0xDFFF ? 0xFFFD : c); /* a lone surrogate is no UTF-8 */
        }
        if (failed < 0) return -1;
    }
    return 0;
}

/* Excel's limit of 32767 UTF-16 units per cell, cut as XlsxWriter cuts it: never inside a character. */
static Py_ssize_t sheet_text_length(PyObject *text) {
    Py_ssize_t length = PyUnicode_GET_LENGTH(text), units = 0;
    if (length <= 16383) return length;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t i = 0; i < length; i++) {
        units += PyUnicode_READ(kind, data, i) > 0xFFFF ? 2 : 1;
        if (units > 32767) return i;
    }
    return length;
}

/* What every cell of a row begins with: <c r="B12" and, for a coloured row, s="2" */
typedef struct {
    char tail[40]; /* after the column letters: the row number, and the style attribute of a coloured row */
    Py_ssize_t tail_size;
} CellStart;

static int put_cell_start(Buffer *buffer, const char *letters, const CellStart *start) {
    if (put(buffer, "<c r=\"", 6) < 0 || put(buffer, letters, (Py_ssize_t)strlen(letters)) < 0) return -1;
    return put(buffer, start->tail, start->tail_size);
}

static int put_number_text(Buffer *buffer, const char *letters, const CellStart *start, const char *text,
                           Py_ssize_t size) {
    if (put_cell_start(buffer, letters, start) < 0 || put(buffer, "><v>", 4) < 0 || put(buffer, text, size) < 0)
        return -1;
    return put(buffer, "</v></c>", 8);
}

static int put_sheet_cell(Buffer *buffer, const char *letters, const CellStart *start, int styled, PyObject *cell,
                          int *wrote);

/* inf and nan go in as the text "inf\t", "-inf\t", "nan\t", as the reference writes them */
static int put_non_finite(Buffer *buffer, const char *letters, const CellStart *start, int styled, int nan,
                          int positive, int *wrote) {
    PyObject *text = PyUnicode_FromString(nan ? "nan\t" : positive ? "inf\t" : "-inf\t");
    if (text == NULL) return -1;
    int failed = put_sheet_cell(buffer, letters, start, styled, text, wrote);
    Py_DECREF(text);
    return failed;
}

/* One cell; *wrote tells whether it made an element (XlsxWriter leaves out a blank cell without a style). */
static int put_sheet_cell(Buffer *buffer, const char *letters, const CellStart *start, int styled, PyObject *cell,
                          int *wrote) {
    *wrote = 1;
    if (PyBool_Check(cell)) {
        if (put_cell_start(buffer, letters, start) < 0 || put(buffer, " t=\"b\"><v>", 10) < 0) return -1;
        return put(buffer, cell == Py_True ? "1</v></c>" : "0</v></c>", 9);
    }
    if (PyFloat_Check(cell)) {
        double value = PyFloat_AS_DOUBLE(cell);
        if (!isfinite(value)) return put_non_finite(buffer, letters, start, styled, value != value, value > 0, wrote);
        char *text = PyOS_double_to_string(value, 'r', 0, Py_DTSF_ADD_DOT_0, NULL); /* repr(): exact, as in the CSV */
        if (text == NULL) return -1;
        int failed = put_number_text(buffer, letters, start, text, (Py_ssize_t)strlen(text));
        PyMem_Free(text);
        return failed;
    }
    if (PyLong_Check(cell)) {
        PyObject *text = PyObject_Str(cell);
        if (text == NULL) return -1;
        Py_ssize_t size;
        const char *utf8 = PyUnicode_AsUTF8AndSize(text, &size);
        int failed = utf8 == NULL ? -1 : put_number_text(buffer, letters, start, utf8, size);
        Py_DECREF(text);
        return failed;
    }
    if (cell == Py_None || (PyUnicode_Check(cell) && PyUnicode_GET_LENGTH(cell) == 0)) {
        if (!styled) {
            *wrote = 0;
            return 0;
        }
        if (put_cell_start(buffer, letters, start) < 0) return -1;
        return put(buffer, "/>", 2);
    }
    if (!PyUnicode_Check(cell)) { /* numpy scalars and the like: a number if float() takes it, else the text */
        PyObject *other = PyNumber_Float(cell);
        if (other == NULL) {
            PyErr_Clear();
            other = PyObject_Str(cell);
            if (other == NULL) return -1;
        }
        int failed = put_sheet_cell(buffer, letters, start, styled, other, wrote);
        Py_DECREF(other);
        return failed;
    }
    Py_ssize_t length = sheet_text_length(cell);
    int kind = PyUnicode_KIND(cell);
    const void *data = PyUnicode_DATA(cell);
    /* leading or trailing whitespace (re's \s) once the control characters are escaped */
    Py_UCS4 first = length ? PyUnicode_READ(kind, data, 0) : 'x';
    Py_UCS4 last = length ? PyUnicode_READ(kind, data, length - 1) : 'x';
    int first_escaped = first <= 0x08 || (first >= 0x0B && first <= 0x1F);
    int last_escaped = last <= 0x08 || (last >= 0x0B && last <= 0x1F);
    int preserve = (!first_escaped && Py_UNICODE_ISSPACE(first)) || (!last_escaped && Py_UNICODE_ISSPACE(last));
    if (put_cell_start(buffer, letters, start) < 0) return -1;
    if (put(buffer, preserve ? " t=\"inlineStr\"><is><t xml:space=\"preserve\">" : " t=\"inlineStr\"><is><t>",
            preserve ? 43 : 22) < 0)
        return -1;
    if (put_sheet_text(buffer, cell, length) < 0) return -1;
    return put(buffer, "</t></is></c>", 13);
}

/* A packed column's cell (see Packed): a number as its text, "nan", "inf" and "-inf" as the text cells above. */
static int put_packed_sheet_cell(Buffer *buffer, const char *letters, const CellStart *start, int styled,
                                 Packed *packed, Py_ssize_t row, int *wrote) {
    const char *text;
    Py_ssize_t size;
    if (next_packed(packed, row, &text, &size) < 0) return -1;
    *wrote = 1;
    if (size == 3 && memcmp(text, "nan", 3) == 0) return put_non_finite(buffer, letters, start, styled, 1, 0, wrote);
    if (size == 3 && memcmp(text, "inf", 3) == 0) return put_non_finite(buffer, letters, start, styled, 0, 1, wrote);
    if (size == 4 && memcmp(text, "-inf", 4) == 0) return put_non_finite(buffer, letters, start, styled, 0, 0, wrote);
    return put_number_text(buffer, letters, start, text, size);
}

/* sheet_rows(columns, first_row, styles) -> bytes: <row> elements for rows first_row, first_row + 1, ... (Excel's
 * 1-based numbers) of equal-length columns; a column is a list of cells or a packed column of floats (repr's
 * text, see Packed). styles[r] is row r's cell style index, 0 for none. */
static PyObject *sheet_rows(PyObject *self, PyObject *args) {
    PyObject *columns, *styles;
    Py_ssize_t first_row;
    if (!PyArg_ParseTuple(args, "O!nO!", &PyList_Type, &columns, &first_row, &PyList_Type, &styles)) return NULL;
    Py_ssize_t width = PyList_GET_SIZE(columns), rows = PyList_GET_SIZE(styles);
    if (width > 16384) return PyErr_Format(PyExc_ValueError, "a sheet holds at most 16384 columns");
    Packed *packed = PyMem_Calloc(width ? width : 1, sizeof(Packed));
    char (*letters)[4] = PyMem_Calloc(width ? width : 1, 4);
    Buffer buffer = {NULL, 0, 0};
    if (packed == NULL || letters == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t c = 0; c < width; c++) {
        PyObject *column = PyList_GET_ITEM(columns, c);
        Py_ssize_t count = -1;
        if (PyTuple_Check(column)) {
            if (unpack(column, &packed[c], &count) < 0) goto fail;
        } else if (PyList_Check(column)) {
            count = PyList_GET_SIZE(column);
        }
        if (count != rows) {
            PyErr_Format(PyExc_ValueError, "column %zd does not hold one cell per row", c);
            goto fail;
        }
        char reversed[4];
        int n = 0;
        for (Py_ssize_t number = c + 1; number > 0; number = (number - 1) / 26)
            reversed[n++] = (char)('A' + (number - 1) % 26);
        for (int k = 0; k < n; k++) letters[c][k] = reversed[n - 1 - k];
    }
    for (Py_ssize_t r = 0; r < rows; r++) {
        long style = PyLong_AsLong(PyList_GET_ITEM(styles, r));
        if (style == -1 && PyErr_Occurred()) goto fail;
        Py_ssize_t number = first_row + r, begin = buffer.size;
        CellStart start;
        start.tail_size = style ? snprintf(start.tail, sizeof start.tail, "%zd\" s=\"%ld\"", number, style)
                                : snprintf(start.tail, sizeof start.tail, "%zd\"", number);
        char head[40];
        int cells = 0, n = snprintf(head, sizeof head, "<row r=\"%zd\">", number);
        if (put(&buffer, head, n) < 0) goto fail;
        for (Py_ssize_t c = 0; c < width; c++) {
            int wrote, failed;
            if (packed[c].data != NULL)
                failed = put_packed_sheet_cell(&buffer, letters[c], &start, style != 0, &packed[c], r, &wrote);
            else
                failed = put_sheet_cell(&buffer, letters[c], &start, style != 0,
                                        PyList_GET_ITEM(PyList_GET_ITEM(columns, c), r), &wrote);
            if (failed < 0) goto fail;
            cells += wrote;
        }
        if (!cells) { /* no cell: XlsxWriter writes no row */
            buffer.size = begin;
            continue;
        }
        if (put(&buffer, "</row>", 6) < 0) goto fail;
    }
    if (packs_used_up(packed, width, rows) < 0) goto fail;
    PyMem_Free(packed);
    PyMem_Free(letters);
    return take_bytes(&buffer);
fail:
    PyMem_Free(packed);
    PyMem_Free(letters);
    PyMem_Free(buffer.data);
    return NULL;
}

/* shift_rows(text, offset) -> bytes: sheet_rows' text with every row number (in <row r="N"> and in each cell's
 * r="AB{N}") raised by offset: rows a helper process numbered from 1, put after this process's rows. Text never
 * holds '<' (sheet_rows escapes it), so every '<' opens an element and only elements are rewritten. */
static PyObject *shift_rows(PyObject *self, PyObject *args) {
    const char *text;
    Py_ssize_t size, offset;
    if (!PyArg_ParseTuple(args, "y#n", &text, &size, &offset)) return NULL;
    Buffer buffer = {NULL, 0, 0};
    if (reserve(&buffer, size + size / 8 + 64) < 0) return NULL;
    Py_ssize_t i = 0, copied = 0;  /* text[copied:i] is still to be copied */
    Py_ssize_t last = -1;          /* the row number shifted last, and its text: the cells of a row repeat it */
    char shifted[32];
    int shifted_length = 0;
    while (i < size) {
        const char *found = memchr(text + i, '<', size - i); /* every '<' opens an element: text escapes its own */
        if (found == NULL) break;
        Py_ssize_t at = found - text;
        i = at + 1;
        if (size - at >= 8 && memcmp(text + at, "<row r=\"", 8) == 0) {
            i = at + 8;
        } else if (size - at >= 6 && memcmp(text + at, "<c r=\"", 6) == 0) {
            i = at + 6;
            while (i < size && text[i] >= 'A' && text[i] <= 'Z') i++;
        } else {
            continue;
        }
        if (put(&buffer, text + copied, i - copied) < 0) goto fail;
        Py_ssize_t number = 0, digits = 0;
        while (i < size && text[i] >= '0' && text[i] <= '9' && digits < 18) number = number * 10 + (text[i++] - '0'), digits++;
        if (!digits || i >= size || text[i] != '"') {
            PyErr_SetString(PyExc_ValueError, "a row or cell reference without a row number");
            goto fail;
        }
        if (number != last) {
            shifted_length = snprintf(shifted, sizeof shifted, "%zd", number + offset);
            last = number;
        }
        if (put(&buffer, shifted, shifted_length) < 0) goto fail;
        copied = i;
    }
    if (put(&buffer, text + copied, size - copied) < 0) goto fail;
    return take_bytes(&buffer);
fail:
    PyMem_Free(buffer.data);
    return NULL;
}

static PyMethodDef methods[] = {
    {"lines", lines, METH_VARARGS, "CSV text (UTF-8) of the rows of equal-length column lists."},
    {"sheet_rows", sheet_rows, METH_VARARGS, "xlsx <row> elements (UTF-8) of equal-length column lists."},
    {"shift_rows", shift_rows, METH_VARARGS, "sheet_rows' text with every row number raised by an offset."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_celltext", NULL, -1, methods};

/* The module with INTERFACE_VERSION set: its Python wrapper checks it, so a build left from an older checkout
 * is not used with newer Python (the wrapper's Python twin runs instead). */
static PyObject *with_interface(PyObject *created) {
    if (created != NULL && PyModule_AddIntConstant(created, "INTERFACE_VERSION", INTERFACE_VERSION) < 0)
        Py_CLEAR(created);
    return created;
}

PyMODINIT_FUNC PyInit__celltext(void) { return with_interface(PyModule_Create(&module)); }
