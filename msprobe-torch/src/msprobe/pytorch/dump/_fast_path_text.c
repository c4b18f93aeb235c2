/* Part of _fast_path.c, which includes it: A growing UTF-8 buffer for an entry's text, and the JSON it writes.
 * (One translation unit: the per-call helpers stay static and inline across the parts.) */

/* ------------------------------------------------------------------------------------------------------------ */
/* A growing UTF-8 buffer for an entry's text.                                                                  */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
    char small[1024];
} Text;

static void text_init(Text *t) {
    t->data = t->small;
    t->len = 0;
    t->cap = sizeof t->small;
}

static void text_free(Text *t) {
    if (t->data != t->small) PyMem_Free(t->data);
    text_init(t);
}

static int text_reserve(Text *t, Py_ssize_t extra) {
    if (t->len + extra <= t->cap) return 0;
    Py_ssize_t cap = t->cap * 2;
    while (cap < t->len + extra) cap *= 2;
    char *data = PyMem_Malloc(cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(data, t->data, t->len);
    if (t->data != t->small) PyMem_Free(t->data);
    t->data = data;
    t->cap = cap;
    return 0;
}

static int text_add(Text *t, const char *s, Py_ssize_t n) {
    if (text_reserve(t, n) < 0) return -1;
    memcpy(t->data + t->len, s, n);
    t->len += n;
    return 0;
}

#define TEXT_ADD(t, literal) text_add((t), (literal), (Py_ssize_t)(sizeof(literal) - 1))

static int text_ll(Text *t, long long value) {
    char digits[24];
    int start = sizeof digits;
    unsigned long long rest = value < 0 ? 0 - (unsigned long long)value : (unsigned long long)value;
    do {
        digits[--start] = (char)('0' + rest % 10);
        rest /= 10;
    } while (rest);
    if (value < 0) digits[--start] = '-';
    return text_add(t, digits + start, (Py_ssize_t)sizeof digits - start);
}

/* Finite doubles, each after its label, in their shortest text that reads back the same, always with a fraction
 * or an exponent so a reader sees floats: orjson's text where configure() gave it (as the Python path writes
 * them), else Python's repr. */
static int text_doubles(Text *t, const double *values, int count, const char *const *labels) {
    if (float_dumps == NULL) {
        for (int i = 0; i < count; i++) {
            char *repr = PyOS_double_to_string(values[i], 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
            if (repr == NULL) return -1;
            int status = text_add(t, labels[i], (Py_ssize_t)strlen(labels[i])) < 0 ||
                                 text_add(t, repr, (Py_ssize_t)strlen(repr)) < 0
                             ? -1
                             : 0;
            PyMem_Free(repr);
            if (status < 0) return -1;
        }
        return 0;
    }
    PyObject *numbers = PyTuple_New(count);
    if (numbers == NULL) return -1;
    for (int i = 0; i < count; i++) {
        PyObject *number = PyFloat_FromDouble(values[i]);
        if (number == NULL) {
            Py_DECREF(numbers);
            return -1;
        }
        PyTuple_SET_ITEM(numbers, i, number);
    }
    PyObject *text = PyObject_CallOneArg(float_dumps, numbers); /* b"[a,b,...]": no comma inside a number */
    Py_DECREF(numbers);
    if (text == NULL) return -1;
    int status = PyBytes_Check(text) ? 0 : -1;
    const char *cursor = status == 0 ? PyBytes_AS_STRING(text) + 1 : NULL;
    for (int i = 0; status == 0 && i < count; i++) {
        const char *end = cursor;
        while (*end != ',' && *end != ']' && *end != '\0') end++;
        status = text_add(t, labels[i], (Py_ssize_t)strlen(labels[i])) < 0 || text_add(t, cursor, end - cursor) < 0
                     ? -1
                     : 0;
        cursor = end + 1;
    }
    if (status < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "the float writer must return bytes");
    Py_DECREF(text);
    return status;
}

static int text_double(Text *t, double value) {
    static const char *const no_label[1] = {""};
    return text_doubles(t, &value, 1, no_label);
}

/* A str as a JSON string; 0 (no error set) for text UTF-8 cannot hold (lone surrogates): the caller declines. */
static int text_json_string(Text *t, PyObject *text) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    if (utf8 == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (text_reserve(t, n + 2) < 0 || TEXT_ADD(t, "\"") < 0) return -1;
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)utf8[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (text_add(t, utf8 + start, i - start) < 0) return -1;
        char escaped[8];
        int length;
        if (c == '"' || c == '\\')
            length = snprintf(escaped, sizeof escaped, "\\%c", c);
        else if (c == '\n')
            length = snprintf(escaped, sizeof escaped, "\\n");
        else if (c == '\t')
            length = snprintf(escaped, sizeof escaped, "\\t");
        else if (c == '\r')
            length = snprintf(escaped, sizeof escaped, "\\r");
        else
            length = snprintf(escaped, sizeof escaped, "\\u%04x", c);
        if (text_add(t, escaped, length) < 0) return -1;
        start = i + 1;
    }
    if (text_add(t, utf8 + start, n - start) < 0 || TEXT_ADD(t, "\"") < 0) return -1;
    return 1;
}

static int text_unicode(Text *t, PyObject *text) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    return utf8 == NULL ? -1 : text_add(t, utf8, n);
}

/* ``"key":`` of an object's member, after a comma unless it is the first; -1 with an error set for a key that is
 * no str or that UTF-8 cannot hold. */
static int text_member_key(Text *t, PyObject *key, int first) {
    if ((!first && TEXT_ADD(t, ",") < 0)) return -1;
    int done = PyUnicode_Check(key) ? text_json_string(t, key) : 0;
    if (done == 0) PyErr_Format(PyExc_ValueError, "a key JSON cannot hold: %R", key);
    return done == 1 && TEXT_ADD(t, ":") == 0 ? 0 : -1;
}

static PyObject *text_str(Text *t) { return PyUnicode_DecodeUTF8(t->data, t->len, NULL); }
