/* The PyTorch dump's per-call path in C.
 *
 * Every recorded API call takes this path where the run's entries allow it
 * (see lane.py): in Python the bookkeeping of each call cost several times
 * an optimizer update's own work; here the same entry is built for a
 * fraction of that.  The Python recorder stays the definition: this
 * file handles the usual values (plain CPU float32 and float64 tensors with
 * finite values, None, bools, ints, floats, strings, lists and tuples of
 * them) and hands everything else to it, one value at a time.  A call that
 * gets a backward entry is written here too, and its backward record (a hook
 * on the autograd node that made the output) is made by the recorder
 * (``watch``).  A call made while backward runs goes to the recorder whole,
 * which tells a recomputation apart.  Tests check that both ways write the
 * same entries.
 *
 * Two types:
 *   Summaries - the statistics of plain CPU float tensors, cached as the
 *               entry's JSON text while the tensor is unchanged (the rule of
 *               msprobe/pytorch/dump/tensors.py: same object, version and
 *               memory, no write the dump saw since, same dtype and shape).
 *   Lane      - the handler the API wrappers call: handler(original, key,
 *               args, kwargs), as the Python recorder's _call_api.
 *
 * The statistics come from msprobe-core's kernels, through the capsule
 * msprobe.core.dump._kernels._C_API.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* msprobe-core's kernel table (see _kernels.c there): the statistics from version 1, the screen from 2 */
typedef struct {
    int version;
    int (*float_stats)(const void *data, Py_ssize_t n, char kind, double out[4]);
    int (*any_nonfinite)(const void *data, Py_ssize_t n, char kind);
} KernelsAPI;

#define LANE_INTERFACE_VERSION 3 /* see INTERFACE in PyInit__lane */

static PyObject *one; /* the int 1 */
static PyObject *s_version, *s_data_ptr, *s_dtype, *s_shape, *s_requires_grad, *s_is_cpu, *s_is_neg,
    *s_is_contiguous, *s_stride, *s_untyped_storage, *s_busy, *s_count, *s_written_at, *s_out, *s_inplace, *s_writer,
    *s_open_step, *s_add_journaled, *s_journal, *s_journal_failed, *s_dirty, *s_data, *s_stack, *s_construct,
    *s_names, *s_write, *s_limit, *s_map, *s_position, *s_size, *s_grad_fn, *s_register_hook, *s_acquire, *s_release;

/* What configure() gave: torch's own descriptors of the tensor attributes read per call (each read then skips
 * the lookup by name, which costs a dict lookup per class in the MRO and one in the tensor's __dict__), and
 * orjson.dumps, which writes a float's shortest text much faster than Python's repr (and as the Python
 * path writes it).  Unset, attributes are looked up by name and floats written by Python's repr. */
static PyObject *d_version, *d_dtype, *d_shape, *d_is_cpu, *d_requires_grad; /* getset descriptors */
static PyObject *d_data_ptr, *d_is_contiguous, *d_is_neg, *d_stride, *d_untyped_storage; /* method descriptors */
static PyObject *float_dumps;

static PyObject *tensor_attribute(PyObject *descriptor, PyObject *name, PyObject *tensor) {
    if (descriptor != NULL) return Py_TYPE(descriptor)->tp_descr_get(descriptor, tensor, (PyObject *)Py_TYPE(tensor));
    return PyObject_GetAttr(tensor, name);
}

static PyObject *tensor_method(PyObject *descriptor, PyObject *name, PyObject *tensor) {
    if (descriptor != NULL) return PyObject_Vectorcall(descriptor, &tensor, 1, NULL);
    return PyObject_CallMethodNoArgs(tensor, name);
}

#define ATTRIBUTE(tensor, field) tensor_attribute(d_##field, s_##field, (tensor))
#define METHOD(tensor, field) tensor_method(d_##field, s_##field, (tensor))

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

/* ------------------------------------------------------------------------------------------------------------ */
/* Small helpers around torch's Python API (no libtorch headers: these packages build apart from torch).       */

/* An error a quick path may meet on an unusual tensor (torch raises RuntimeError): cleared, and 0 returned
 * (decline); any other error stays set and -1 is returned. */
static int decline_runtime_error(void) {
    if (PyErr_ExceptionMatches(PyExc_RuntimeError)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
}

static int unsigned_of(PyObject *number, unsigned long long *value) {
    if (number == NULL) return -1;
    *value = PyLong_AsUnsignedLongLongMask(number);
    Py_DECREF(number);
    return *value == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

/* The address of a tensor's storage: the key of the write log (see WriteLog in tensors.py). */
static PyObject *storage_address(PyObject *tensor) {
    PyObject *storage = METHOD(tensor, untyped_storage);
    if (storage == NULL) return NULL;
    PyObject *address = PyObject_CallMethodNoArgs(storage, s_data_ptr); /* the storage's own data_ptr */
    Py_DECREF(storage);
    return address;
}

/* The write log says the dump saw this memory written: log.count += 1; log.written_at[storage] = log.count.
 * As WriteLog.note in tensors.py: a tensor without one storage (sparse, nested, wrappers) is skipped. */
static int note_write(PyObject *log, PyObject *tensor) {
    PyObject *address = storage_address(tensor);
    if (address == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
        PyErr_Clear();
        return 0;
    }
    PyObject *count = PyObject_GetAttr(log, s_count), *written_at = PyObject_GetAttr(log, s_written_at);
    PyObject *next = count != NULL ? PyNumber_Add(count, one) : NULL;
    int status = -1;
    if (next != NULL && written_at != NULL && PyObject_SetAttr(log, s_count, next) == 0)
        status = PyObject_SetItem(written_at, address, next);
    Py_XDECREF(count);
    Py_XDECREF(next);
    Py_XDECREF(written_at);
    Py_DECREF(address);
    return status;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Cached: one tensor's summary text, with what tells whether it still holds.                                  */

typedef struct {
    PyObject_HEAD
    PyObject *ref; /* weak reference to the tensor */
    long long version;
    unsigned long long data;
    PyObject *storage; /* the storage's address (an int: the write log's key) */
    PyObject *writes;  /* the write log's count when measured */
    PyObject *dtype, *shape;
    PyObject *prefix; /* bytes: the summary's JSON up to requires_grad's value */
    PyObject *suffix; /* bytes: what follows requires_grad's value (the md5 key, when asked for) and the brace */
} Cached;

static void cached_dealloc(Cached *self) {
    Py_XDECREF(self->ref);
    Py_XDECREF(self->storage);
    Py_XDECREF(self->writes);
    Py_XDECREF(self->dtype);
    Py_XDECREF(self->shape);
    Py_XDECREF(self->prefix);
    Py_XDECREF(self->suffix);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject CachedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprobe.pytorch.dump._lane.Cached",
    .tp_basicsize = sizeof(Cached),
    .tp_dealloc = (destructor)cached_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One tensor's cached summary.",
};

/* ------------------------------------------------------------------------------------------------------------ */
/* Summaries                                                                                                    */

typedef struct {
    PyObject_HEAD
    PyObject *entries; /* dict: id(tensor) -> Cached */
    PyObject *log;     /* the summarizer's WriteLog */
    PyTypeObject *tensor_type, *parameter_type;
    PyObject *float32, *float64;
    const KernelsAPI *kernels;
    PyObject *checksum; /* checksum(tensor) -> its CRC-32 as 8 hex digits (summary_mode md5), or None */
} Summaries;

static int summaries_init(Summaries *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"log", "tensor_type", "parameter_type", "float32", "float64", "kernels", "checksum", NULL};
    PyObject *log, *tensor_type, *parameter_type, *float32, *float64, *capsule, *checksum = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O!OOO|$O", names, &log, &PyType_Type, &tensor_type,
                                     &PyType_Type, &parameter_type, &float32, &float64, &capsule, &checksum))
        return -1;
    const KernelsAPI *kernels = PyCapsule_GetPointer(capsule, "msprobe.core.dump._kernels._C_API");
    if (kernels == NULL) return -1;
    if (kernels->version < 1) {
        PyErr_SetString(PyExc_RuntimeError, "msprobe-core's kernels are older than msprobe-torch expects");
        return -1;
    }
    PyObject *entries = PyDict_New();
    if (entries == NULL) return -1;
    Py_XSETREF(self->entries, entries);
    Py_INCREF(log);
    Py_XSETREF(self->log, log);
    Py_INCREF(tensor_type);
    Py_XSETREF(self->tensor_type, (PyTypeObject *)tensor_type);
    Py_INCREF(parameter_type);
    Py_XSETREF(self->parameter_type, (PyTypeObject *)parameter_type);
    Py_INCREF(float32);
    Py_XSETREF(self->float32, float32);
    Py_INCREF(float64);
    Py_XSETREF(self->float64, float64);
    Py_INCREF(checksum);
    Py_XSETREF(self->checksum, checksum);
    self->kernels = kernels;
    return 0;
}

static int summaries_traverse(Summaries *self, visitproc visit, void *arg) {
    Py_VISIT(self->entries);
    Py_VISIT(self->log);
    Py_VISIT(self->checksum);
    return 0;
}

static int summaries_clear_refs(Summaries *self) {
    Py_CLEAR(self->entries);
    Py_CLEAR(self->log);
    Py_CLEAR(self->tensor_type);
    Py_CLEAR(self->parameter_type);
    Py_CLEAR(self->float32);
    Py_CLEAR(self->float64);
    Py_CLEAR(self->checksum);
    return 0;
}

static void summaries_dealloc(Summaries *self) {
    PyObject_GC_UnTrack(self);
    summaries_clear_refs(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Whether the write log saw the memory written after the summary was taken. */
static int written_since(Summaries *self, Cached *cached) {
    PyObject *written_at = PyObject_GetAttr(self->log, s_written_at);
    if (written_at == NULL) return -1;
    PyObject *when = PyDict_GetItemWithError(written_at, cached->storage);
    int since = 0;
    if (when != NULL)
        since = PyObject_RichCompareBool(when, cached->writes, Py_GT);
    else if (PyErr_Occurred())
        since = -1;
    Py_DECREF(written_at);
    return since;
}

/* 1 when ``cached`` still describes ``tensor`` at ``version``; 0 when not; -1 on error. */
/* Whether the weak reference still leads to ``object`` (PyWeakref_GetObject is deprecated from Python 3.13). */
static int refers_to(PyObject *reference, PyObject *object) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *referent;
    if (PyWeakref_GetRef(reference, &referent) < 0) return -1;
    Py_XDECREF(referent); /* compared by identity only: object is alive, held by the caller */
    return referent == object;
#else
    return PyWeakref_GetObject(reference) == object;
#endif
}

static int still_holds(Summaries *self, Cached *cached, PyObject *tensor, long long version) {
    int same = refers_to(cached->ref, tensor);
    if (same <= 0 || cached->version != version) return same < 0 ? -1 : 0;
    unsigned long long data;
    if (unsigned_of(METHOD(tensor, data_ptr), &data) < 0) return -1;
    if (data != cached->data) return 0; /* `.data` or `set_` gave it other memory */
    int since = written_since(self, cached);
    if (since != 0) return since < 0 ? -1 : 0;
    PyObject *dtype = ATTRIBUTE(tensor, dtype);
    if (dtype == NULL) return -1;
    same = dtype == cached->dtype;
    Py_DECREF(dtype);
    if (!same) return 0;
    PyObject *shape = ATTRIBUTE(tensor, shape);
    if (shape == NULL) return -1;
    same = PyObject_RichCompareBool(shape, cached->shape, Py_EQ);
    Py_DECREF(shape);
    return same;
}

/* No gaps and no element twice: with the dimensions sorted by stride, each stride is the product of the sizes
 * before it (a permuted dense tensor, such as attention's head split, fills its block). */
static int fills_its_block(PyObject *tensor, PyObject *shape) {
    PyObject *strides = METHOD(tensor, stride);
    if (strides == NULL) return -1;
    Py_ssize_t dims = PyTuple_GET_SIZE(shape);
    int fills = PyTuple_Check(strides) && PyTuple_GET_SIZE(strides) == dims && dims <= 64;
    long long size[64], stride[64];
    for (Py_ssize_t i = 0; fills && i < dims; i++) {
        size[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        stride[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
    }
    Py_DECREF(strides);
    if (PyErr_Occurred()) return -1;
    long long expected = 1;
    for (Py_ssize_t done = 0; fills && done < dims; done++) { /* selection by stride, smallest first */
        Py_ssize_t best = -1;
        for (Py_ssize_t i = 0; i < dims; i++)
            if (size[i] >= 0 && (best < 0 || stride[i] < stride[best])) best = i;
        if (size[best] != 1) {
            fills = stride[best] == expected;
            expected *= size[best];
        }
        size[best] = -1;
    }
    return fills;
}

/* Where a CPU tensor's values fill one block of memory, in any order (tensors.py's _plain_memory): 1 with the
 * element count and the block's address set, the count 0 for an empty tensor (the address unset then); 0 for a
 * tensor not on the host, a negative view (its memory holds the values' negation) or one with gaps; -1 on error.
 * ``shape`` gets the tensor's shape (a new reference) whenever it was read. */
static int plain_memory(PyObject *tensor, PyObject **shape, Py_ssize_t *count, unsigned long long *data) {
    *shape = NULL;
    PyObject *flag = ATTRIBUTE(tensor, is_cpu);
    if (flag == NULL) return -1;
    int on_host = flag == Py_True;
    Py_DECREF(flag);
    if (!on_host) return 0;
    *shape = ATTRIBUTE(tensor, shape);
    if (*shape == NULL) return -1;
    if (!PyTuple_Check(*shape)) return 0;
    *count = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(*shape); i++) {
        Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(*shape, i));
        if (size < 0) return PyErr_Occurred() ? -1 : 0;
        *count *= size;
    }
    if (*count == 0) return 1;
    flag = METHOD(tensor, is_neg);
    if (flag == NULL) return -1;
    int negative = flag == Py_True;
    Py_DECREF(flag);
    if (negative) return 0;
    flag = METHOD(tensor, is_contiguous);
    if (flag == NULL) return -1;
    int dense = flag == Py_True;
    Py_DECREF(flag);
    if (!dense) { /* a 0-d tensor is always contiguous */
        dense = fills_its_block(tensor, *shape);
        if (dense <= 0) return dense;
    }
    return unsigned_of(METHOD(tensor, data_ptr), data) < 0 ? -1 : 1;
}

/* What follows requires_grad's value: '}', or with summary_mode md5 ',"md5":"xxxxxxxx"}' (the checksum's answer,
 * which must be 8 hex digits).  New bytes, or NULL with an error set. */
static PyObject *summary_suffix(Summaries *self, PyObject *tensor) {
    if (self->checksum == Py_None) return PyBytes_FromString("}");
    PyObject *digits = PyObject_CallOneArg(self->checksum, tensor);
    if (digits == NULL) return NULL;
    Py_ssize_t length;
    const char *text = PyUnicode_Check(digits) ? PyUnicode_AsUTF8AndSize(digits, &length) : NULL;
    PyObject *suffix = NULL;
    if (text != NULL && length == 8 && strspn(text, "0123456789abcdef") == 8) {
        suffix = PyBytes_FromFormat(",\"md5\":\"%s\"}", text);
    } else if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "the checksum must be 8 lowercase hex digits");
    }
    Py_DECREF(digits);
    return suffix;
}

/* Appends a plain CPU float tensor's summary (as TensorSummarizer's general path writes it) and returns 1;
 * returns 0, appending nothing, for any other tensor (the caller goes the general way); -1 on error. */
static int summary_into(Summaries *self, PyObject *tensor, Text *out) {
    PyTypeObject *type = Py_TYPE(tensor);
    if (type != self->tensor_type && type != self->parameter_type) return 0; /* subclasses keep values elsewhere */
    PyObject *version_object = ATTRIBUTE(tensor, version);
    if (version_object == NULL) return decline_runtime_error(); /* inference mode: no version counter */
    long long version = PyLong_AsLongLong(version_object);
    Py_DECREF(version_object);
    if (version == -1 && PyErr_Occurred()) return -1;
    PyObject *key = PyLong_FromVoidPtr(tensor);
    if (key == NULL) return -1;
    Cached *cached = (Cached *)PyDict_GetItemWithError(self->entries, key);
    int status = 0;
    PyObject *prefix = NULL, *suffix = NULL, *dtype = NULL, *shape = NULL, *storage = NULL, *ref = NULL, *flag;
    if (cached != NULL) {
        Py_INCREF(cached); /* held while torch's and the log's Python run in still_holds */
        int holds = still_holds(self, cached, tensor, version);
        if (holds > 0) {
            prefix = Py_NewRef(cached->prefix);
            suffix = Py_NewRef(cached->suffix);
            Py_DECREF(cached);
            goto write;
        }
        Py_DECREF(cached);
        if (holds < 0) {
            status = decline_runtime_error();
            goto done;
        }
    } else if (PyErr_Occurred()) {
        status = -1;
        goto done;
    }
    dtype = ATTRIBUTE(tensor, dtype);
    if (dtype == NULL) goto fail;
    char kind = dtype == self->float32 ? 'f' : dtype == self->float64 ? 'd' : 0;
    if (kind == 0) goto done;
    Py_ssize_t count;
    unsigned long long data;
    int plain = plain_memory(tensor, &shape, &count, &data);
    if (plain < 0) goto fail;
    if (!plain || count == 0) goto done; /* an empty tensor has no statistics: the general way says so */
    double stats[4];
    if (PyTuple_GET_SIZE(shape) == 0) { /* a 0-d tensor (an optimizer's step count): its value, four times */
        double value = kind == 'f' ? (double)*(const float *)(uintptr_t)data : *(const double *)(uintptr_t)data;
        if (!isfinite(value)) goto done;
        stats[0] = stats[1] = stats[2] = stats[3] = value;
    } else if (!self->kernels->float_stats((const void *)(uintptr_t)data, count, kind, stats))
        goto done; /* an inf or nan: the general way adds the *_except_inf_nan pair */
    Text summary;
    text_init(&summary);
    int failed = TEXT_ADD(&summary, "{\"type\":\"torch.Tensor\",\"dtype\":\"") < 0 ||
                 (kind == 'f' ? TEXT_ADD(&summary, "torch.float32") : TEXT_ADD(&summary, "torch.float64")) < 0 ||
                 TEXT_ADD(&summary, "\",\"shape\":[") < 0;
    for (Py_ssize_t i = 0; !failed && i < PyTuple_GET_SIZE(shape); i++)
        failed = (i && TEXT_ADD(&summary, ",") < 0) ||
                 text_ll(&summary, PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i))) < 0;
    static const char *const labels[4] = {"],\"Max\":", ",\"Min\":", ",\"Mean\":", ",\"Norm\":"};
    failed = failed || text_doubles(&summary, stats, 4, labels) < 0;
    failed = failed || TEXT_ADD(&summary, ",\"requires_grad\":") < 0;
    if (!failed) prefix = PyBytes_FromStringAndSize(summary.data, summary.len);
    text_free(&summary);
    if (prefix == NULL) goto fail;
    suffix = summary_suffix(self, tensor);
    if (suffix == NULL) goto fail;
    /* cached where it can be: a tensor with no storage of its own, or refusing weak references, is measured each time */
    storage = storage_address(tensor);
    if (storage == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) goto fail;
        PyErr_Clear();
        goto write;
    }
    ref = PyWeakref_NewRef(tensor, NULL);
    if (ref == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) goto fail;
        PyErr_Clear();
        goto write;
    }
    Cached *fresh = PyObject_New(Cached, &CachedType);
    if (fresh == NULL) goto fail;
    fresh->writes = PyObject_GetAttr(self->log, s_count);
    fresh->ref = ref;
    fresh->version = version;
    fresh->data = data;
    fresh->storage = storage;
    fresh->dtype = dtype;
    fresh->shape = shape;
    fresh->prefix = prefix;
    Py_INCREF(prefix);
    fresh->suffix = suffix;
    Py_INCREF(suffix);
    ref = storage = dtype = shape = NULL; /* now the entry's */
    if (fresh->writes == NULL || PyDict_SetItem(self->entries, key, (PyObject *)fresh) < 0) {
        Py_DECREF(fresh);
        goto fail;
    }
    Py_DECREF(fresh);
write:
    flag = ATTRIBUTE(tensor, requires_grad);
    if (flag == NULL) goto fail;
    status = text_add(out, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix)) < 0 ||
                     (flag == Py_True ? TEXT_ADD(out, "true") : TEXT_ADD(out, "false")) < 0 ||
                     text_add(out, PyBytes_AS_STRING(suffix), PyBytes_GET_SIZE(suffix)) < 0
                 ? -1
                 : 1;
    Py_DECREF(flag);
    goto done;
fail:
    status = decline_runtime_error();
done:
    Py_DECREF(key);
    Py_XDECREF(prefix);
    Py_XDECREF(suffix);
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(storage);
    Py_XDECREF(ref);
    return status;
}

static PyObject *summaries_text(Summaries *self, PyObject *tensor) {
    Text out;
    text_init(&out);
    int status = summary_into(self, tensor, &out);
    PyObject *result = status < 0 ? NULL : status == 0 ? Py_NewRef(Py_None) : text_str(&out);
    text_free(&out);
    return result;
}

static PyObject *summaries_clear(Summaries *self, PyObject *unused) {
    PyDict_Clear(self->entries);
    Py_RETURN_NONE;
}

static PyMethodDef summaries_methods[] = {
    {"text", (PyCFunction)summaries_text, METH_O,
     "text(tensor) -> the summary's JSON text, or None for a tensor the general way measures (not a plain CPU "
     "float32/float64 tensor with finite values, a 0-d or empty one, inference mode)."},
    {"clear", (PyCFunction)summaries_clear, METH_NOARGS, "Forget every cached summary."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SummariesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprobe.pytorch.dump._lane.Summaries",
    .tp_basicsize = sizeof(Summaries),
    .tp_dealloc = (destructor)summaries_dealloc,
    .tp_traverse = (traverseproc)summaries_traverse,
    .tp_clear = (inquiry)summaries_clear_refs,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Summaries(log, tensor_type, parameter_type, float32, float64, kernels): the usual tensors' summaries, "
              "measured in one pass and cached as JSON text while unchanged.",
    .tp_init = (initproc)summaries_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = summaries_methods,
};

/* ------------------------------------------------------------------------------------------------------------ */
/* Lane                                                                                                         */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Summaries *summaries; /* NULL: tensors are summarized the general way, one by one */
    int with_values;      /* entries hold the call's values (every task but structure) */
    PyObject *log;        /* the write log, or None where nothing is cached */
    PyTypeObject *tensor_type;
    PyObject *slow;          /* the Python recorder's handler: the whole call its way */
    PyObject *state;         /* .busy while this thread is inside a recorded call */
    PyObject *counts;        /* key -> calls so far this step */
    PyObject *in_place_keys; /* key -> whether the API writes in place, as classify says */
    PyObject *classify;      /* classify(key) -> bool */
    PyObject *grad_enabled, *graph_task_id;
    PyObject *module_stack; /* mix: the calls open around this one (the last is the parent); None at L1 */
    PyObject *no_parent;
    PyObject *stack;          /* stack() -> the call's stack text */
    PyObject *collector;      /* the DumpCollector: its step's writer takes each entry (add_journaled) */
    /* the writer last seen and its tables (data, stack, construct, the names' texts): see journal_entry */
    PyObject *writer, *tables[4];
    PyObject *encode_value;   /* encode_value(value, suffix) -> JSON text, the general way */
    PyObject *encode_outputs; /* encode_outputs(output, prefix) -> JSON text of the output list */
    PyObject *overwritten;    /* overwritten(key, args, kwargs) -> the tensors an in-place call writes */
    PyObject *report;         /* report(name, exception): logged once per API (raised with strict) */
    PyObject *watch;          /* watch(name, backward_name, parent, grad_inputs, output, nodes_before): its backward */
    PyObject *nodes_of;       /* nodes_of(tensors) -> their autograd nodes, taken before an in-place call replaces them */
    int backward;             /* backward entries are kept (data_mode) */
    /* the overflow check: calls are screened here, and only one whose output holds inf or nan goes on to the
     * recorder, which decides and writes its entry (as DumpCollector.forward) */
    PyObject *overflow;       /* the OverflowCounter (count, limit), or None: no overflow check */
    PyObject *overflowed;     /* overflowed(name, inputs_screen, output, args, kwargs, parent) */
    PyObject *nonfinite;      /* nonfinite(tensor) -> bool: the summarizer's screen, for what is not screened here */
    PyObject *screen_kinds;   /* dtype -> the kernels' kind ('f', 'd', 'e', 'b') */
    const KernelsAPI *kernels;
    PyTypeObject *parameter_type; /* with tensor_type, the plain tensor types screened here */
    /* the flight recorder: a call whose outputs' text shows inf or nan goes, with its entry's text, to
     * handoff(name, entry_text, args, kwargs, stack, parent) -> True when it wrote the entry itself; or None */
    PyObject *handoff;
    /* the overflow check: late_backward(name, backward_name, parent) -> the recorder's node hook for a call whose
     * leaving gradients hold inf or nan, made only then (see ScreenFirst); or None */
    PyObject *late_backward;
    /* the recorder's RLock, held for the tool's own work on a call (never while the call itself runs), so that
     * threads recording at once (backward hooks on a device's threads) keep its state whole; or None */
    PyObject *lock;
} Lane;

#define LANE_OBJECTS(X)                                                                                            \
    X(log) X(slow) X(state) X(counts) X(in_place_keys) X(classify) X(grad_enabled) X(graph_task_id) X(module_stack) \
        X(no_parent) X(stack) X(collector) X(encode_value) X(encode_outputs) X(overwritten) X(report) X(watch)     \
            X(overflow) X(overflowed) X(nonfinite) X(screen_kinds) X(nodes_of) X(handoff) X(late_backward) X(lock)

static PyObject *lane_vectorcall(Lane *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames);

static int lane_init(Lane *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"summaries", "with_values", "log", "tensor_type", "slow", "state", "counts", "classify",
                            "grad_enabled", "graph_task_id", "module_stack", "no_parent", "stack", "collector",
                            "encode_value", "encode_outputs", "overwritten", "report", "watch", "backward",
                            "overflow", "overflowed", "nonfinite", "screen_kinds", "kernels", "parameter_type",
                            "nodes_of", "handoff", "late_backward", "lock", NULL};
    PyObject *summaries, *tensor_type, *log, *slow, *state, *counts, *classify, *grad_enabled, *graph_task_id,
        *module_stack, *no_parent, *stack, *collector, *encode_value, *encode_outputs, *overwritten, *report, *watch;
    PyObject *overflow = Py_None, *overflowed = Py_None, *nonfinite = Py_None, *screen_kinds = Py_None,
             *capsule = Py_None, *parameter_type = Py_None, *nodes_of = Py_None, *handoff = Py_None,
             *late_backward = Py_None, *lock = Py_None;
    int with_values, backward;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OpOO!OOO!OOOOOOOOOOOOp|$OOOOOOOOOO", names, &summaries, &with_values,
                                     &log, &PyType_Type, &tensor_type, &slow, &state, &PyDict_Type, &counts, &classify,
                                     &grad_enabled, &graph_task_id, &module_stack, &no_parent, &stack, &collector,
                                     &encode_value, &encode_outputs, &overwritten, &report, &watch, &backward,
                                     &overflow, &overflowed, &nonfinite, &screen_kinds, &capsule, &parameter_type,
                                     &nodes_of, &handoff, &late_backward, &lock))
        return -1;
    Py_XSETREF(self->parameter_type, (PyTypeObject *)Py_NewRef(parameter_type == Py_None ? tensor_type : parameter_type));
    if (overflow != Py_None) { /* the overflow check needs the screen, version 2 of the kernels */
        self->kernels = PyCapsule_GetPointer(capsule, "msprobe.core.dump._kernels._C_API");
        if (self->kernels == NULL) return -1;
        if (self->kernels->version < 2 || !PyDict_Check(screen_kinds)) {
            PyErr_SetString(PyExc_ValueError, "the overflow check needs msprobe-core's screen (kernels version 2)");
            return -1;
        }
    }
    if (summaries != Py_None && !PyObject_TypeCheck(summaries, &SummariesType)) {
        PyErr_SetString(PyExc_TypeError, "summaries must be a Summaries or None");
        return -1;
    }
    if (module_stack != Py_None && !PyList_Check(module_stack)) {
        PyErr_SetString(PyExc_TypeError, "module_stack must be a list or None");
        return -1;
    }
    self->vectorcall = (vectorcallfunc)lane_vectorcall;
    self->with_values = with_values;
    self->backward = backward;
    Py_XSETREF(self->summaries, summaries == Py_None ? NULL : (Summaries *)Py_NewRef(summaries));
    Py_XSETREF(self->tensor_type, (PyTypeObject *)Py_NewRef(tensor_type));
    PyObject *in_place_keys = PyDict_New();
    if (in_place_keys == NULL) return -1;
    Py_XSETREF(self->in_place_keys, in_place_keys);
#define SET(field) Py_XSETREF(self->field, Py_NewRef(field));
    SET(log)
    SET(slow)
    SET(state)
    SET(counts)
    SET(classify)
    SET(grad_enabled)
    SET(graph_task_id)
    SET(module_stack)
    SET(no_parent)
    SET(stack)
    SET(collector)
    SET(encode_value)
    SET(encode_outputs)
    SET(overwritten)
    SET(report)
    SET(watch)
    SET(overflow)
    SET(overflowed)
    SET(nonfinite)
    SET(screen_kinds)
    SET(nodes_of)
    SET(handoff)
    SET(late_backward)
    SET(lock)
#undef SET
    return 0;
}

static int lane_traverse(Lane *self, visitproc visit, void *arg) {
#define VISIT(field) Py_VISIT(self->field);
    LANE_OBJECTS(VISIT)
#undef VISIT
    Py_VISIT(self->writer);
    for (int i = 0; i < 4; i++) Py_VISIT(self->tables[i]);
    Py_VISIT(self->summaries);
    return 0;
}

static int lane_clear_refs(Lane *self) {
#define CLEAR(field) Py_CLEAR(self->field);
    LANE_OBJECTS(CLEAR)
#undef CLEAR
    Py_CLEAR(self->writer);
    for (int i = 0; i < 4; i++) Py_CLEAR(self->tables[i]);
    Py_CLEAR(self->summaries);
    Py_CLEAR(self->tensor_type);
    Py_CLEAR(self->parameter_type);
    return 0;
}

static void lane_dealloc(Lane *self) {
    PyObject_GC_UnTrack(self);
    lane_clear_refs(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Where a value sits in its entry, for the general way's tensor file names: "{name}.input.0", "{name}.output.1.2". */
typedef struct {
    PyObject *name;
    const char *side;
    PyObject *prefix; /* "{name}.{side}" or a container's suffix; made on first use */
} Where;

/* "{prefix}.{leaf}", or the prefix itself where there is no leaf (a value named by its place alone). */
static PyObject *suffix_of(Where *where, PyObject *leaf) {
    if (where->prefix == NULL) {
        where->prefix = PyUnicode_FromFormat("%U.%s", where->name, where->side);
        if (where->prefix == NULL) return NULL;
    }
    return leaf == NULL ? Py_NewRef(where->prefix) : PyUnicode_FromFormat("%U.%S", where->prefix, leaf);
}

/* The general way for one value: the Python encoder's text. */
static int encode_generally(Lane *self, Text *out, PyObject *value, Where *where, PyObject *leaf) {
    PyObject *suffix = suffix_of(where, leaf);
    if (suffix == NULL) return -1;
    PyObject *text = PyObject_CallFunctionObjArgs(self->encode_value, value, suffix, NULL);
    Py_DECREF(suffix);
    if (text == NULL) return -1;
    int status = PyUnicode_Check(text) ? text_unicode(out, text) : -1;
    if (status < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "encode_value must return a str");
    Py_DECREF(text);
    return status;
}

static int encode_value(Lane *self, Text *out, PyObject *value, Where *where, PyObject *leaf);

static int encode_items(Lane *self, Text *out, PyObject *sequence, Where *where) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
    PyObject **items = PySequence_Fast_ITEMS(sequence);
    if (TEXT_ADD(out, "[") < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *leaf = PyLong_FromSsize_t(i);
        if (leaf == NULL) return -1;
        int status = (i && TEXT_ADD(out, ",") < 0) ? -1 : encode_value(self, out, items[i], where, leaf);
        Py_DECREF(leaf);
        if (status < 0) return -1;
    }
    return TEXT_ADD(out, "]");
}

/* As ValueEncoder.encode (msprobe/core/dump/values.py) for the usual values; anything else the general way. */
static int encode_value(Lane *self, Text *out, PyObject *value, Where *where, PyObject *leaf) {
    if (PyObject_TypeCheck(value, self->tensor_type)) {
        if (self->summaries != NULL) {
            int done = summary_into(self->summaries, value, out);
            if (done) return done < 0 ? -1 : 0;
        }
        return encode_generally(self, out, value, where, leaf);
    }
    if (value == Py_None) return TEXT_ADD(out, "null");
    if (value == Py_True) return TEXT_ADD(out, "{\"type\":\"bool\",\"value\":true}");
    if (value == Py_False) return TEXT_ADD(out, "{\"type\":\"bool\",\"value\":false}");
    if (PyLong_CheckExact(value)) {
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number == -1 && PyErr_Occurred()) return -1;
        if (overflow) return encode_generally(self, out, value, where, leaf);
        return TEXT_ADD(out, "{\"type\":\"int\",\"value\":") < 0 || text_ll(out, number) < 0 ? -1 : TEXT_ADD(out, "}");
    }
    if (PyFloat_CheckExact(value)) {
        double number = PyFloat_AS_DOUBLE(value);
        if (!isfinite(number)) return encode_generally(self, out, value, where, leaf); /* "inf", "nan" as text */
        return TEXT_ADD(out, "{\"type\":\"float\",\"value\":") < 0 || text_double(out, number) < 0 ? -1
                                                                                                     : TEXT_ADD(out, "}");
    }
    if (PyUnicode_CheckExact(value)) {
        Py_ssize_t mark = out->len;
        if (TEXT_ADD(out, "{\"type\":\"str\",\"value\":") < 0) return -1;
        int done = text_json_string(out, value);
        if (done < 0) return -1;
        if (done) return TEXT_ADD(out, "}");
        out->len = mark;
        return encode_generally(self, out, value, where, leaf);
    }
    if (PyList_CheckExact(value) || PyTuple_CheckExact(value)) { /* torch.Size, a tuple subclass, is described */
        PyObject *suffix = suffix_of(where, leaf);
        if (suffix == NULL) return -1;
        Where inner = {where->name, where->side, suffix};
        int status = encode_items(self, out, value, &inner);
        Py_DECREF(suffix);
        return status;
    }
    return encode_generally(self, out, value, where, leaf);
}

/* As ValueEncoder.encode_outputs: always a list. */
static int encode_outputs(Lane *self, Text *out, PyObject *output, PyObject *name) {
    Where where = {name, "output", NULL};
    int status;
    if (PyList_CheckExact(output) || PyTuple_CheckExact(output)) {
        status = encode_items(self, out, output, &where);
    } else if (PyList_Check(output) || PyTuple_Check(output)) { /* torch.return_types, torch.Size: the general way */
        where.prefix = PyUnicode_FromFormat("%U.output", name);
        PyObject *text = where.prefix ? PyObject_CallFunctionObjArgs(self->encode_outputs, output, where.prefix, NULL)
                                      : NULL;
        status = text != NULL && PyUnicode_Check(text) ? text_unicode(out, text) : -1;
        if (status < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "encode_outputs must return a str");
        Py_XDECREF(text);
    } else {
        PyObject *zero = PyLong_FromLong(0);
        status = zero == NULL || TEXT_ADD(out, "[") < 0 || encode_value(self, out, output, &where, zero) < 0
                     ? -1
                     : TEXT_ADD(out, "]");
        Py_XDECREF(zero);
    }
    Py_XDECREF(where.prefix);
    return status;
}

/* Keyword tensors' files are "{name}.kwargs.{key}", as the reference names them. */
static int encode_inputs(Lane *self, Text *out, PyObject *args, PyObject *kwargs, PyObject *name) {
    Where where = {name, "input", NULL}, keywords = {name, "kwargs", NULL};
    int status = TEXT_ADD(out, "{\"input_args\":") < 0 || encode_items(self, out, args, &where) < 0 ||
                         TEXT_ADD(out, ",\"input_kwargs\":{") < 0
                     ? -1
                     : 0;
    Py_ssize_t position = 0;
    PyObject *key, *value;
    for (int first = 1; status == 0 && PyDict_Next(kwargs, &position, &key, &value); first = 0)
        if (text_member_key(out, key, first) < 0 || encode_value(self, out, value, &keywords, key) < 0) status = -1;
    Py_XDECREF(where.prefix);
    Py_XDECREF(keywords.prefix);
    return status < 0 || TEXT_ADD(out, "}") < 0 ? -1 : 0;
}

/* The tensors needing a gradient among the values, each once, in grad_taps.tensors_requiring_grad's order:
 * ``found`` maps id(tensor) to the tensor. */
static int collect_grad_inputs(Lane *self, PyObject *value, PyObject *found, int depth) {
    if (PyObject_TypeCheck(value, self->tensor_type)) {
        PyObject *flag = ATTRIBUTE(value, requires_grad);
        if (flag == NULL) return -1;
        int needs = flag == Py_True;
        Py_DECREF(flag);
        if (!needs) return 0;
        PyObject *key = PyLong_FromVoidPtr(value);
        if (key == NULL) return -1;
        PyObject *known = PyDict_SetDefault(found, key, value);
        Py_DECREF(key);
        return known == NULL ? -1 : 0;
    }
    if (depth > 32) return 0;
    if (PyDict_Check(value)) {
        Py_ssize_t position = 0;
        PyObject *key, *item;
        while (PyDict_Next(value, &position, &key, &item))
            if (collect_grad_inputs(self, item, found, depth + 1) < 0) return -1;
        return 0;
    }
    if (PyList_Check(value) || PyTuple_Check(value)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
        PyObject **items = PySequence_Fast_ITEMS(value);
        for (Py_ssize_t i = 0; i < n; i++)
            if (collect_grad_inputs(self, items[i], found, depth + 1) < 0) return -1;
    }
    return 0;
}

/* Whether the call writes in place: by its name (asked once per key), or out= / inplace=True. */
static int writes_in_place(Lane *self, PyObject *key, PyObject *kwargs) {
    if (PyDict_GET_SIZE(kwargs)) {
        if (PyDict_GetItemWithError(kwargs, s_out) != NULL) return 1;
        if (PyErr_Occurred()) return -1;
        if (PyDict_GetItemWithError(kwargs, s_inplace) == Py_True) return 1;
        if (PyErr_Occurred()) return -1;
    }
    PyObject *known = PyDict_GetItemWithError(self->in_place_keys, key);
    if (known != NULL) return known == Py_True;
    if (PyErr_Occurred()) return -1;
    PyObject *answer = PyObject_CallOneArg(self->classify, key);
    if (answer == NULL) return -1;
    int in_place = PyObject_IsTrue(answer);
    if (in_place >= 0 && PyDict_SetItem(self->in_place_keys, key, in_place ? Py_True : Py_False) < 0) in_place = -1;
    Py_DECREF(answer);
    return in_place;
}

static int note_writes_in(Lane *self, PyObject *value) {
    if (PyObject_TypeCheck(value, self->tensor_type)) return note_write(self->log, value);
    if (PyList_Check(value) || PyTuple_Check(value)) { /* one level, as grad_taps.output_tensors */
        Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
        PyObject **items = PySequence_Fast_ITEMS(value);
        for (Py_ssize_t i = 0; i < n; i++)
            if (PyObject_TypeCheck(items[i], self->tensor_type) && note_write(self->log, items[i]) < 0) return -1;
    }
    return 0;
}

/* As the recorder's _overwritten: out=, else the first argument; collectives and torch's private
 * multi-tensor functions (any of their tensors) are asked of the recorder. */
static int note_overwritten(Lane *self, PyObject *key, PyObject *args, PyObject *kwargs) {
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(key, &n);
    if (text == NULL) return -1;
    if (strncmp(text, "Distributed.", 12) == 0 || strncmp(text, "Torch._", 7) == 0) {
        PyObject *tensors = PyObject_CallFunctionObjArgs(self->overwritten, key, args, kwargs, NULL);
        if (tensors == NULL) return -1;
        int status = note_writes_in(self, tensors);
        Py_DECREF(tensors);
        return status;
    }
    PyObject *out = PyDict_GET_SIZE(kwargs) ? PyDict_GetItemWithError(kwargs, s_out) : NULL;
    if (out != NULL) return note_writes_in(self, out);
    if (PyErr_Occurred()) return -1;
    return PyTuple_GET_SIZE(args) ? note_writes_in(self, PyTuple_GET_ITEM(args, 0)) : 0;
}

static int set_busy(Lane *self, PyObject *busy) { return PyObject_SetAttr(self->state, s_busy, busy); }

/* A failure of the tool's own work: reported (logged once per API); -1 when the report raises (strict, or a
 * device error, which belongs to the training) or the error is no Exception (KeyboardInterrupt). */
static int report_failure(Lane *self, PyObject *name) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL) PyException_SetTraceback(value, traceback);
    PyObject *result = PyObject_CallFunctionObjArgs(self->report, name, value ? value : Py_None, NULL);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (result == NULL) return -1;
    Py_DECREF(result);
    return 0;
}

/* 1 when the lane takes the call, 0 when the Python recorder must (backward is running: it tells a
 * recomputation apart).  ``grad_inputs`` is set to the list of inputs needing a gradient when the call gets a
 * backward record, else to NULL. */
static int lane_takes(Lane *self, PyObject *args, PyObject *kwargs, PyObject **grad_inputs) {
    *grad_inputs = NULL;
    PyObject *task = PyObject_CallNoArgs(self->graph_task_id);
    if (task == NULL) return -1;
    long running = PyLong_AsLong(task);
    Py_DECREF(task);
    if (running == -1 && PyErr_Occurred()) return -1;
    if (running != -1) return 0;
    if (!self->backward) return 1;
    PyObject *enabled = PyObject_CallNoArgs(self->grad_enabled);
    if (enabled == NULL) return -1;
    int grad = enabled == Py_True;
    Py_DECREF(enabled);
    if (!grad) return 1;
    PyObject *found = PyDict_New();
    if (found == NULL) return -1;
    int status = collect_grad_inputs(self, args, found, 0);
    if (status == 0 && PyDict_GET_SIZE(kwargs)) status = collect_grad_inputs(self, kwargs, found, 0);
    if (status == 0 && PyDict_GET_SIZE(found)) {
        *grad_inputs = PyDict_Values(found);
        if (*grad_inputs == NULL) status = -1;
    }
    Py_DECREF(found);
    return status < 0 ? -1 : 1;
}

/* writer.py's _MappedJournal.write for lines that fit the mapping as it is: copied in and the position moved on,
 * without a bytes object or a Python call.  1 when written, 0 when the journal's own write() must do it (another
 * kind of journal, a mapping to grow), -1 on error. */
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

/* DumpWriter.add_journaled's usual case, here: the step's journal is open and has not failed.  The entry goes into
 * the writer's tables and its lines (DumpWriter's _journal_line format) to the journal's own write().  Returns 1
 * when done, 0 when the writer's Python must do it (no journal yet, or a failed one, or any error here: its
 * add_journaled stores the same again and handles the case), -1 only for an error that is no Exception. */
static int journal_entry(Lane *self, PyObject *writer, PyObject *name, PyObject *name_text, PyObject *text,
                         PyObject *stack, PyObject *parent_text) {
    static PyObject **const table_names[4] = {&s_data, &s_stack, &s_construct, &s_names};
    if (writer != self->writer) { /* a new step's writer: its tables, once */
        for (int i = 0; i < 4; i++) {
            PyObject *table = PyObject_GetAttr(writer, *table_names[i]);
            if (table == NULL || !PyDict_Check(table)) {
                Py_XDECREF(table);
                goto python;
            }
            Py_XSETREF(self->tables[i], table);
        }
        Py_XSETREF(self->writer, Py_NewRef(writer));
    }
    PyObject *journal = PyObject_GetAttr(writer, s_journal), *failed = PyObject_GetAttr(writer, s_journal_failed);
    int usable = journal != NULL && journal != Py_None && failed == Py_False;
    Py_XDECREF(failed);
    if (!usable) {
        Py_XDECREF(journal);
        goto python;
    }
    Text lines;
    text_init(&lines);
    static const char *const kinds[3] = {"[\"data\", ", "[\"stack\", ", "[\"construct\", "};
    PyObject *values[3] = {text, stack, parent_text == Py_None ? NULL : parent_text};
    int status = PyDict_SetItem(self->tables[3], name, name_text);
    for (int i = 0; status == 0 && i < 3; i++) {
        if (values[i] == NULL) continue;
        if (PyDict_SetItem(self->tables[i], name, values[i]) < 0 ||
            text_add(&lines, kinds[i], (Py_ssize_t)strlen(kinds[i])) < 0 || text_unicode(&lines, name_text) < 0 ||
            TEXT_ADD(&lines, ", ") < 0 || text_unicode(&lines, values[i]) < 0 || TEXT_ADD(&lines, "]\n") < 0)
            status = -1;
    }
    int written = status == 0 && PyObject_SetAttr(writer, s_dirty, Py_True) == 0 ? 0 : -1;
    if (written == 0) written = write_mapped(journal, lines.data, lines.len);
    if (written == 0) {
        PyObject *bytes = PyBytes_FromStringAndSize(lines.data, lines.len);
        PyObject *result = bytes == NULL ? NULL : PyObject_CallMethodOneArg(journal, s_write, bytes);
        Py_XDECREF(bytes);
        written = result == NULL ? -1 : 1;
        Py_XDECREF(result);
    }
    text_free(&lines);
    Py_DECREF(journal);
    if (written > 0) return 1;
python:
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
        PyErr_Clear();
    }
    return 0;
}

/* The entry, with its stack (or NULL) and parent (the no_parent marker at L1: no construct.json record), into the
 * step's files through DumpWriter.add_journaled; the step's folder is made with its first entry.  -1 on error. */
static int record_entry(Lane *self, PyObject *name, Text *entry, PyObject *stack, PyObject *parent) {
    PyObject *writer = PyObject_GetAttr(self->collector, s_writer);
    if (writer == Py_None) {
        Py_DECREF(writer);
        writer = PyObject_CallMethodNoArgs(self->collector, s_open_step);
    }
    if (writer == NULL) return -1;
    Text name_json;
    text_init(&name_json);
    PyObject *name_text = NULL, *text = NULL, *parent_text = NULL, *result = NULL;
    if (text_json_string(&name_json, name) == 1) name_text = text_str(&name_json);
    text_free(&name_json);
    if (parent == self->no_parent || parent == Py_None) {
        parent_text = parent == Py_None ? PyUnicode_FromString("null") : Py_NewRef(Py_None);
    } else if (PyUnicode_Check(parent)) {
        Text parent_json;
        text_init(&parent_json);
        if (text_json_string(&parent_json, parent) == 1) parent_text = text_str(&parent_json);
        text_free(&parent_json);
    }
    if (name_text == NULL || parent_text == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "an entry's name or parent cannot be written as JSON");
    } else if ((text = text_str(entry)) != NULL) {
        int done = journal_entry(self, writer, name, name_text, text, stack, parent_text);
        if (done > 0) {
            result = Py_NewRef(Py_None);
        } else if (done == 0) {
            PyObject *call[] = {writer, name, name_text, text, stack != NULL ? stack : Py_None, parent_text};
            result = PyObject_VectorcallMethod(s_add_journaled, call, 6, NULL); /* no offset flag: call[-1] is not ours */
        }
    }
    Py_XDECREF(name_text);
    Py_XDECREF(text);
    Py_XDECREF(parent_text);
    Py_DECREF(writer);
    if (result == NULL) return -1;
    Py_DECREF(result);
    return 0;
}

/* 1 when a plain CPU float tensor holds an inf or nan, 0 when not (or when it is empty), 2 for a tensor to hand to
 * the summarizer's screen (any other); -1 on error.  As TensorSummarizer.nonfinite's first, quick way. */
static int screen_tensor(Lane *self, PyObject *tensor) {
    PyTypeObject *type = Py_TYPE(tensor);
    if (type != self->tensor_type && type != self->parameter_type) return 2; /* subclasses keep values elsewhere */
    PyObject *dtype = ATTRIBUTE(tensor, dtype);
    if (dtype == NULL) return decline_runtime_error() == 0 ? 2 : -1;
    PyObject *kind_text = PyDict_GetItemWithError(self->screen_kinds, dtype);
    Py_DECREF(dtype);
    if (kind_text == NULL) return PyErr_Occurred() ? -1 : 2;
    Py_ssize_t length;
    const char *kind = PyUnicode_AsUTF8AndSize(kind_text, &length);
    if (kind == NULL || length != 1) return -1;
    PyObject *shape;
    Py_ssize_t count;
    unsigned long long data;
    int status = 2, plain = plain_memory(tensor, &shape, &count, &data);
    if (plain <= 0) goto leave;
    if (count == 0) {
        status = 0; /* nothing to hold an inf or nan */
        goto leave;
    }
    int found = self->kernels->any_nonfinite((const void *)(uintptr_t)data, count, kind[0]);
    status = found < 0 ? 2 : found;
leave:
    Py_XDECREF(shape);
    if (PyErr_Occurred()) status = decline_runtime_error() == 0 ? 2 : -1;
    return status;
}

/* As ValueEncoder.any_nonfinite: any tensor (or float) in the value holding inf or nan; -1 on error. */
static int any_nonfinite(Lane *self, PyObject *value, int depth) {
    if (PyObject_TypeCheck(value, self->tensor_type)) {
        int found = screen_tensor(self, value);
        if (found != 2) return found;
        PyObject *answer = PyObject_CallOneArg(self->nonfinite, value);
        if (answer == NULL) return -1;
        found = PyObject_IsTrue(answer);
        Py_DECREF(answer);
        return found;
    }
    if (PyFloat_Check(value)) return !isfinite(PyFloat_AS_DOUBLE(value));
    if (depth > 32) return 0;
    if (PyList_Check(value) || PyTuple_Check(value)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
        PyObject **items = PySequence_Fast_ITEMS(value);
        for (Py_ssize_t i = 0; i < n; i++) {
            int found = any_nonfinite(self, items[i], depth + 1);
            if (found) return found;
        }
        return 0;
    }
    if (PyDict_Check(value)) {
        Py_ssize_t position = 0;
        PyObject *key, *item;
        while (PyDict_Next(value, &position, &key, &item)) {
            int found = any_nonfinite(self, item, depth + 1);
            if (found) return found;
        }
    }
    return 0;
}

/* The call's number this step, counted, and its entry's name "{key}.{index}.forward" (a new reference). */
static PyObject *count_call(Lane *self, PyObject *key, long long *index) {
    PyObject *done = PyDict_GetItemWithError(self->counts, key);
    *index = done != NULL ? PyLong_AsLongLong(done) : 0;
    PyObject *next = PyErr_Occurred() ? NULL : PyLong_FromLongLong(*index + 1);
    int status = next == NULL ? -1 : PyDict_SetItem(self->counts, key, next);
    Py_XDECREF(next);
    return status < 0 ? NULL : PyUnicode_FromFormat("%U.%lld.forward", key, *index);
}

/* The entry's parent in construct.json (borrowed): at mix the innermost open module or optimizer step (None at the
 * top), at L1 the no_parent marker (no record). */
static PyObject *parent_of(Lane *self) {
    if (self->module_stack == Py_None) return self->no_parent;
    Py_ssize_t open = PyList_GET_SIZE(self->module_stack);
    return open ? PyList_GET_ITEM(self->module_stack, open - 1) : Py_None;
}

/* The call's backward record, by the recorder (watch): the node that made the output is hooked.  Returns the
 * callback's result (a new reference) or NULL. */
static PyObject *watch_backward(Lane *self, PyObject *key, long long index, PyObject *name, PyObject *grad_inputs,
                                PyObject *output, PyObject *nodes_before) {
    PyObject *backward_name = PyUnicode_FromFormat("%U.%lld.backward", key, index);
    if (backward_name == NULL) return NULL;
    PyObject *parent = self->module_stack == Py_None ? Py_None : parent_of(self); /* as the recorder's _before */
    PyObject *result = PyObject_CallFunctionObjArgs(self->watch, name, backward_name, parent, grad_inputs, output,
                                                    nodes_before ? nodes_before : Py_None, NULL);
    Py_DECREF(backward_name);
    return result;
}

/* The recorder's lock around the tool's own work on a call. Waiting in acquire lets go of the GIL, so a thread
 * that waits does not stop the one that holds it. -1 on an error (set). */
static int tool_lock(Lane *self) {
    if (self->lock == Py_None) return 0;
    PyObject *got = PyObject_CallMethodNoArgs(self->lock, s_acquire);
    if (got == NULL) return -1;
    Py_DECREF(got);
    return 0;
}

/* Lets the lock go, keeping whatever error is set. */
static void tool_unlock(Lane *self) {
    if (self->lock == Py_None) return;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *done = PyObject_CallMethodNoArgs(self->lock, s_release);
    if (done == NULL)
        PyErr_Clear();
    else
        Py_DECREF(done);
    PyErr_Restore(type, value, traceback);
}

/* The end of every recorded call: not busy any more; the call's own error, if it raised, is what the caller sees. */
static PyObject *leave_call(Lane *self, PyObject *output) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (set_busy(self, Py_False) < 0) PyErr_Clear();
    PyErr_Restore(type, value, traceback);
    return output;
}

/* The overflow check's hook on a call's autograd node: the gradients leaving it are screened here, and only
 * gradients holding inf or nan go on to the recorder's hook (which decides and writes, as the collector's
 * backward); finite ones, nearly all of them, cost no Python.  The screen runs as tool work (busy), since a
 * tensor it cannot read in C is measured by torch. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Lane *lane;
    PyObject *hook;      /* hook(grad_inputs, grad_outputs), the recorder's; NULL until late_args make it */
    PyObject *late_args; /* (name, backward_name, parent) for the lane's late_backward, or NULL */
} ScreenFirst;

static PyObject *screen_first_vectorcall(ScreenFirst *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Lane *lane = self->lane;
    if (nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "an autograd node hook takes (grad_inputs, grad_outputs)");
        return NULL;
    }
    PyObject *busy = PyObject_GetAttr(lane->state, s_busy);
    int found = busy != NULL && set_busy(lane, Py_True) == 0 ? any_nonfinite(lane, argv[0], 0) : -1;
    if (busy != NULL && set_busy(lane, busy) < 0) found = -1;
    Py_XDECREF(busy);
    if (found == 0) Py_RETURN_NONE;
    if (found < 0) { /* whatever it was, the recorder's hook meets it too and reports it */
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
        PyErr_Clear();
    }
    if (self->hook == NULL && (self->hook = PyObject_Call(lane->late_backward, self->late_args, NULL)) == NULL)
        return NULL;
    return PyObject_Vectorcall(self->hook, argv, nargsf, NULL);
}

static int screen_first_traverse(ScreenFirst *self, visitproc visit, void *arg) {
    Py_VISIT(self->lane);
    Py_VISIT(self->hook);
    Py_VISIT(self->late_args);
    return 0;
}

static int screen_first_clear(ScreenFirst *self) {
    Py_CLEAR(self->lane);
    Py_CLEAR(self->hook);
    Py_CLEAR(self->late_args);
    return 0;
}

static void screen_first_dealloc(ScreenFirst *self) {
    PyObject_GC_UnTrack(self);
    screen_first_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ScreenFirstType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprobe.pytorch.dump._lane.ScreenFirst",
    .tp_basicsize = sizeof(ScreenFirst),
    .tp_dealloc = (destructor)screen_first_dealloc,
    .tp_vectorcall_offset = offsetof(ScreenFirst, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)screen_first_traverse,
    .tp_clear = (inquiry)screen_first_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "An autograd node hook that calls the recorder's only for gradients holding inf or nan.",
};

static PyObject *screen_first_new(Lane *lane, PyObject *hook, PyObject *late_args) {
    ScreenFirst *made = PyObject_GC_New(ScreenFirst, &ScreenFirstType);
    if (made == NULL) return NULL;
    made->vectorcall = (vectorcallfunc)screen_first_vectorcall;
    made->lane = (Lane *)Py_NewRef(lane);
    made->hook = Py_XNewRef(hook);
    made->late_args = Py_XNewRef(late_args);
    PyObject_GC_Track(made);
    return (PyObject *)made;
}

/* The node that made one of the call's output tensors in this call, as grad_taps.output_node finds it: a new
 * reference, or NULL with *handed_back set when that node belonged to an input before (the call handed an input
 * back), or NULL with neither (no output has a node) or with an error set. */
static PyObject *output_node(Lane *self, PyObject *output, PyObject *before, int *handed_back) {
    *handed_back = 0;
    PyObject *single[1] = {output}, **items = single;
    Py_ssize_t count = 1;
    if (PyList_Check(output) || PyTuple_Check(output)) {
        count = PySequence_Fast_GET_SIZE(output);
        items = PySequence_Fast_ITEMS(output);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!PyObject_TypeCheck(items[i], self->tensor_type)) continue;
        PyObject *node = PyObject_GetAttr(items[i], s_grad_fn);
        if (node == NULL) return NULL;
        if (node == Py_None) {
            Py_DECREF(node);
            continue;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(before) && !*handed_back; j++)
            *handed_back = PyTuple_GET_ITEM(before, j) == node;
        if (*handed_back) Py_CLEAR(node);
        return node;
    }
    return NULL;
}

/* The overflow check's watch on a call's backward, in C: the node that made its output gets a ScreenFirst whose
 * recorder hook is made only if the leaving gradients hold inf or nan.  An output handed back as it came in goes
 * to the recorder's watch.  A new reference (None) or NULL. */
static PyObject *screen_backward(Lane *self, PyObject *key, long long index, PyObject *name, PyObject *grad_inputs,
                                 PyObject *output, PyObject *nodes_before) {
    PyObject *before = nodes_before != NULL ? Py_NewRef(nodes_before) : PyObject_CallOneArg(self->nodes_of, grad_inputs);
    if (before == NULL) return NULL;
    if (!PyTuple_Check(before)) {
        Py_DECREF(before);
        PyErr_SetString(PyExc_TypeError, "nodes_of must give a tuple");
        return NULL;
    }
    int handed_back = 0;
    PyObject *node = output_node(self, output, before, &handed_back);
    Py_DECREF(before);
    if (node == NULL) {
        if (PyErr_Occurred()) return NULL;
        if (handed_back) return watch_backward(self, key, index, name, grad_inputs, output, nodes_before);
        Py_RETURN_NONE; /* nothing of this call's on the way back */
    }
    PyObject *backward_name = PyUnicode_FromFormat("%U.%lld.backward", key, index), *result = NULL;
    PyObject *parent = self->module_stack == Py_None ? Py_None : parent_of(self); /* as watch_backward's */
    PyObject *late_args = backward_name == NULL ? NULL : PyTuple_Pack(3, name, backward_name, parent);
    PyObject *hook = late_args == NULL ? NULL : screen_first_new(self, NULL, late_args);
    if (hook != NULL) result = PyObject_CallMethodOneArg(node, s_register_hook, hook);
    Py_XDECREF(hook);
    Py_XDECREF(late_args);
    Py_XDECREF(backward_name);
    Py_DECREF(node);
    if (result == NULL) return NULL;
    Py_DECREF(result); /* the hook's handle: removed with the graph */
    Py_RETURN_NONE;
}

/* The overflow check's call: inputs screened before an in-place call (which changes them), outputs after; a call
 * whose outputs hold inf or nan is the recorder's to decide on and write.  No entry otherwise. */
static PyObject *lane_screen_call(Lane *self, PyObject *original, PyObject *key, PyObject *args, PyObject *kwargs,
                                  PyObject *grad_inputs) {
    PyObject *name = NULL, *output = NULL, *nodes_before = NULL;
    if (set_busy(self, Py_True) < 0) return NULL;
    int held = 0;
    if (tool_lock(self) < 0) goto leave;
    held = 1;
    long long index;
    name = count_call(self, key, &index);
    if (name == NULL) goto leave;
    /* OverflowCounter.exhausted: count >= limit, unless limit is -1 */
    PyObject *count = PyObject_GetAttr(self->overflow, s_count), *limit = PyObject_GetAttr(self->overflow, s_limit);
    long long counted = count ? PyLong_AsLongLong(count) : -1, allowed = limit ? PyLong_AsLongLong(limit) : -1;
    Py_XDECREF(count);
    Py_XDECREF(limit);
    if (PyErr_Occurred()) goto leave;
    int keep = allowed == -1 || counted < allowed;
    int in_place = writes_in_place(self, key, kwargs), inputs_nonfinite = -1;
    if (in_place < 0) {
        keep = 0;
        if (report_failure(self, name) < 0) goto leave;
    }
    if (keep && in_place > 0) {
        inputs_nonfinite = any_nonfinite(self, args, 0);
        if (inputs_nonfinite == 0 && PyDict_GET_SIZE(kwargs)) inputs_nonfinite = any_nonfinite(self, kwargs, 0);
        if (inputs_nonfinite < 0) {
            keep = 0;
            if (report_failure(self, name) < 0) goto leave;
        }
    }
    if (in_place > 0 && self->log != Py_None && note_overwritten(self, key, args, kwargs) < 0) {
        keep = 0;
        if (report_failure(self, name) < 0) goto leave;
    }
    if (keep && in_place > 0 && grad_inputs != NULL && self->nodes_of != Py_None) {
        nodes_before = PyObject_CallOneArg(self->nodes_of, grad_inputs); /* the call replaces them */
        if (nodes_before == NULL) {
            keep = 0;
            if (report_failure(self, name) < 0) goto leave;
        }
    }
    tool_unlock(self);
    held = 0;
    output = PyObject_Call(original, args, PyDict_GET_SIZE(kwargs) ? kwargs : NULL);
    if (output == NULL || !keep) goto leave;
    if (tool_lock(self) < 0) {
        Py_CLEAR(output);
        goto leave;
    }
    held = 1;
    PyObject *parent = parent_of(self);
    int outputs_nonfinite = any_nonfinite(self, output, 0);
    PyObject *result = Py_NewRef(Py_None);
    if (outputs_nonfinite > 0) {
        Py_DECREF(result);
        PyObject *screened = inputs_nonfinite < 0 ? Py_None : inputs_nonfinite ? Py_True : Py_False;
        PyObject *call[] = {name, screened, output, args, kwargs, parent};
        result = PyObject_Vectorcall(self->overflowed, call, 6, NULL);
    } else if (outputs_nonfinite < 0) {
        Py_CLEAR(result);
    }
    if (result != NULL && grad_inputs != NULL) { /* its backward is screened too */
        Py_DECREF(result);
        result = self->late_backward != Py_None && self->nodes_of != Py_None
                     ? screen_backward(self, key, index, name, grad_inputs, output, nodes_before)
                     : watch_backward(self, key, index, name, grad_inputs, output, nodes_before);
    }
    if (result == NULL && report_failure(self, name) < 0) Py_CLEAR(output);
    Py_XDECREF(result);
leave:
    Py_XDECREF(nodes_before);
    Py_XDECREF(name);
    output = leave_call(self, output);
    if (held) tool_unlock(self);
    return output;
}

/* Whether JSON text holds one of the tokens the encoder writes for inf and nan (Infinity, -Infinity, NaN): a
 * statistic that is not finite.  A string that spells one only costs a look by the handoff, which decides. */
static int shows_nonfinite(const char *text, Py_ssize_t len) {
    for (Py_ssize_t i = 0; i + 3 <= len; i++) {
        if ((text[i] == 'N' && text[i + 1] == 'a' && text[i + 2] == 'N') ||
            (text[i] == 'I' && i + 8 <= len && memcmp(text + i, "Infinity", 8) == 0))
            return 1;
    }
    return 0;
}

/* handoff(name, entry_text, args, kwargs, stack, parent): 1 when it wrote the entry, 0 when the lane writes it,
 * -1 on an error (set). */
static int hand_off(Lane *self, PyObject *name, Text *entry, PyObject *args, PyObject *kwargs, PyObject *stack,
                    PyObject *parent) {
    PyObject *text = PyUnicode_DecodeUTF8(entry->data, entry->len, NULL);
    if (text == NULL) return -1;
    PyObject *call[] = {name, text, args, kwargs, stack, parent};
    PyObject *taken = PyObject_Vectorcall(self->handoff, call, 6, NULL);
    Py_DECREF(text);
    if (taken == NULL) return -1;
    int handed = PyObject_IsTrue(taken);
    Py_DECREF(taken);
    return handed;
}

static PyObject *lane_record_call(Lane *self, PyObject *original, PyObject *key, PyObject *args, PyObject *kwargs,
                                  PyObject *grad_inputs) {
    PyObject *name = NULL, *output = NULL, *nodes_before = NULL;
    Text entry;
    text_init(&entry);
    if (set_busy(self, Py_True) < 0) return NULL;
    int held = 0;
    if (tool_lock(self) < 0) goto leave;
    held = 1;
    long long index;
    name = count_call(self, key, &index);
    if (name == NULL) goto leave;
    int keep = 1;
    int in_place = writes_in_place(self, key, kwargs);
    if (in_place < 0) {
        keep = 0;
        if (report_failure(self, name) < 0) goto leave;
    }
    if (keep && self->with_values && encode_inputs(self, &entry, args, kwargs, name) < 0) {
        keep = 0;
        if (report_failure(self, name) < 0) goto leave;
    }
    if (in_place > 0 && self->log != Py_None && note_overwritten(self, key, args, kwargs) < 0) {
        keep = 0; /* after the inputs were measured as they are now, even if that failed */
        if (report_failure(self, name) < 0) goto leave;
    }
    if (keep && in_place > 0 && grad_inputs != NULL && self->nodes_of != Py_None) {
        nodes_before = PyObject_CallOneArg(self->nodes_of, grad_inputs); /* the call replaces them */
        if (nodes_before == NULL) {
            keep = 0;
            if (report_failure(self, name) < 0) goto leave;
        }
    }
    tool_unlock(self);
    held = 0;
    output = PyObject_Call(original, args, PyDict_GET_SIZE(kwargs) ? kwargs : NULL);
    if (output == NULL || !keep) goto leave;
    if (tool_lock(self) < 0) {
        Py_CLEAR(output);
        goto leave;
    }
    held = 1;
    PyObject *stack = NULL, *result = NULL, *parent = parent_of(self);
    Py_ssize_t outputs_at = entry.len;
    int failed = self->with_values ? TEXT_ADD(&entry, ",\"is_recompute\":false,\"output\":") < 0 ||
                                         encode_outputs(self, &entry, output, name) < 0 || TEXT_ADD(&entry, "}") < 0
                                   : TEXT_ADD(&entry, "{\"is_recompute\":false}") < 0;
    if (!failed) stack = PyObject_CallNoArgs(self->stack);
    int handed = 0;
    if (stack != NULL && self->handoff != Py_None && shows_nonfinite(entry.data + outputs_at, entry.len - outputs_at)) {
        handed = hand_off(self, name, &entry, args, kwargs, stack, parent);
        if (handed < 0) Py_CLEAR(stack); /* reported below, as any failure to record */
    }
    if (stack != NULL && (handed || record_entry(self, name, &entry, stack, parent) == 0)) result = Py_NewRef(Py_None);
    Py_XDECREF(stack);
    if (result != NULL && grad_inputs != NULL) { /* its backward entry */
        Py_DECREF(result);
        result = watch_backward(self, key, index, name, grad_inputs, output, nodes_before);
    }
    if (result == NULL && report_failure(self, name) < 0) Py_CLEAR(output);
    Py_XDECREF(result);
leave:
    text_free(&entry);
    Py_XDECREF(nodes_before);
    Py_XDECREF(name);
    output = leave_call(self, output);
    if (held) tool_unlock(self);
    return output;
}

static PyObject *lane_vectorcall(Lane *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 4 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || !PyTuple_Check(argv[2]) ||
        !PyDict_Check(argv[3]) || !PyUnicode_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "lane(original, key, args: tuple, kwargs: dict)");
        return NULL;
    }
    PyObject *grad_inputs;
    int takes = lane_takes(self, argv[2], argv[3], &grad_inputs);
    if (takes < 0) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
        PyErr_Clear(); /* whatever it was, the recorder's own path meets it and reports it */
        takes = 0;
    }
    if (!takes) return PyObject_Vectorcall(self->slow, argv, 4, NULL);
    PyObject *output = self->overflow != Py_None
                           ? lane_screen_call(self, argv[0], argv[1], argv[2], argv[3], grad_inputs)
                           : lane_record_call(self, argv[0], argv[1], argv[2], argv[3], grad_inputs);
    Py_XDECREF(grad_inputs);
    return output;
}

/* backward_entry(name, arriving, leaving, parent): a backward entry as DumpCollector.backward writes it, for a
 * record the recorder's hooks completed: the gradients arriving at the outputs ("input") and those leaving
 * towards the inputs ("output"), lists. */
static PyObject *lane_backward_entry(Lane *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyUnicode_Check(args[0]) || !PyList_Check(args[1]) || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "backward_entry(name: str, arriving: list, leaving: list, parent)");
        return NULL;
    }
    Text entry;
    text_init(&entry);
    int status;
    if (self->with_values) {
        Where arriving = {args[0], "input", NULL}, leaving = {args[0], "output", NULL};
        status = TEXT_ADD(&entry, "{\"input\":") < 0 || encode_items(self, &entry, args[1], &arriving) < 0 ||
                         TEXT_ADD(&entry, ",\"output\":") < 0 || encode_items(self, &entry, args[2], &leaving) < 0 ||
                         TEXT_ADD(&entry, "}") < 0
                     ? -1
                     : 0;
        Py_XDECREF(arriving.prefix);
        Py_XDECREF(leaving.prefix);
    } else {
        status = TEXT_ADD(&entry, "{}");
    }
    if (status == 0) status = record_entry(self, args[0], &entry, NULL, args[3]);
    text_free(&entry);
    if (status < 0) return NULL;
    Py_RETURN_NONE;
}

/* inputs_text(name, args, kwargs) -> '"input_args":[...],"input_kwargs":{...}': a module's inputs as they are
 * when its forward starts (its forward may change them), for module_entry. */
static PyObject *lane_inputs_text(Lane *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyTuple_Check(args[1]) || !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "inputs_text(name: str, args: tuple, kwargs: dict)");
        return NULL;
    }
    Text text;
    text_init(&text);
    PyObject *result = NULL;
    if (!self->with_values || encode_inputs(self, &text, args[1], args[2], args[0]) == 0) {
        /* without the brace that opens the entry (encode_inputs leaves it open: the entry goes on after it) */
        result = self->with_values ? PyUnicode_DecodeUTF8(text.data + 1, text.len - 1, NULL) : PyUnicode_FromString("");
    }
    text_free(&text);
    return result;
}

/* module_entry(name, inputs_text, output, parameters, stack, parent, recompute): a module's forward entry as
 * DumpCollector.forward writes it: inputs, output, parameters (a dict), is_recompute, in that order. */
static PyObject *lane_module_entry(Lane *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1]) || !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "module_entry(name, inputs_text: str, output, parameters: dict, stack, parent, recompute)");
        return NULL;
    }
    PyObject *name = args[0], *parameters = args[3];
    int recompute = PyObject_IsTrue(args[6]);
    if (recompute < 0) return NULL;
    Text entry;
    text_init(&entry);
    int status = TEXT_ADD(&entry, "{") < 0 || text_unicode(&entry, args[1]) < 0 ? -1 : 0;
    if (status == 0 && self->with_values) {
        status = TEXT_ADD(&entry, ",\"output\":") < 0 || encode_outputs(self, &entry, args[2], name) < 0 ||
                         TEXT_ADD(&entry, ",\"parameters\":{") < 0
                     ? -1
                     : 0;
        Where where = {name, "parameters", NULL};
        Py_ssize_t position = 0;
        PyObject *key, *value;
        for (int first = 1; status == 0 && PyDict_Next(parameters, &position, &key, &value); first = 0)
            if (text_member_key(&entry, key, first) < 0 || encode_value(self, &entry, value, &where, key) < 0)
                status = -1;
        Py_XDECREF(where.prefix);
        if (status == 0 && TEXT_ADD(&entry, "},") < 0) status = -1;
    }
    if (status == 0)
        status = (recompute ? TEXT_ADD(&entry, "\"is_recompute\":true}") : TEXT_ADD(&entry, "\"is_recompute\":false}")) < 0
                     ? -1
                     : 0;
    if (status == 0) status = record_entry(self, name, &entry, args[4] == Py_None ? NULL : args[4], args[5]);
    text_free(&entry);
    if (status < 0) return NULL;
    Py_RETURN_NONE;
}

/* grads_entry(name, grads): a module's parameters_grad entry as DumpCollector.parameters_grad writes it. */
static PyObject *lane_grads_entry(Lane *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "grads_entry(name: str, grads: dict)");
        return NULL;
    }
    Text entry;
    text_init(&entry);
    int status = TEXT_ADD(&entry, "{");
    if (self->with_values) {
        Py_ssize_t position = 0;
        PyObject *key, *value;
        for (int first = 1; status == 0 && PyDict_Next(args[1], &position, &key, &value); first = 0) {
            /* each gradient's file is "{name}.{key}", as the Python way names it */
            if (text_member_key(&entry, key, first) < 0) {
                status = -1;
                break;
            }
            Where where = {args[0], "", PyUnicode_FromFormat("%U.%U", args[0], key)};
            if (where.prefix == NULL || TEXT_ADD(&entry, "[") < 0 || encode_value(self, &entry, value, &where, NULL) < 0 ||
                TEXT_ADD(&entry, "]") < 0)
                status = -1;
            Py_XDECREF(where.prefix);
        }
    }
    if (status == 0) status = TEXT_ADD(&entry, "}");
    if (status == 0) status = record_entry(self, args[0], &entry, NULL, self->no_parent);
    text_free(&entry);
    if (status < 0) return NULL;
    Py_RETURN_NONE;
}

/* screen_first(hook): the overflow check's node hook around the recorder's (see ScreenFirst). */
static PyObject *lane_screen_first(Lane *self, PyObject *hook) {
    if (self->overflow == Py_None) {
        PyErr_SetString(PyExc_ValueError, "screen_first serves the overflow check's lane only");
        return NULL;
    }
    return screen_first_new(self, hook, NULL);
}

static PyMethodDef lane_methods[] = {
    {"backward_entry", (PyCFunction)(void (*)(void))lane_backward_entry, METH_FASTCALL,
     "backward_entry(name, arriving, leaving, parent): write a call's backward entry."},
    {"inputs_text", (PyCFunction)(void (*)(void))lane_inputs_text, METH_FASTCALL,
     "inputs_text(name, args, kwargs): a module's inputs as the JSON its entry starts with."},
    {"module_entry", (PyCFunction)(void (*)(void))lane_module_entry, METH_FASTCALL,
     "module_entry(name, inputs_text, output, parameters, stack, parent, recompute): write a module's forward entry."},
    {"grads_entry", (PyCFunction)(void (*)(void))lane_grads_entry, METH_FASTCALL,
     "grads_entry(name, grads): write a module's parameters_grad entry."},
    {"screen_first", (PyCFunction)lane_screen_first, METH_O,
     "screen_first(hook): an autograd node hook that calls hook only for gradients holding inf or nan."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprobe.pytorch.dump._lane.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_vectorcall_offset = offsetof(Lane, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)lane_traverse,
    .tp_clear = (inquiry)lane_clear_refs,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The API wrappers' handler (see the module's comment).",
    .tp_init = (initproc)lane_init,
    .tp_methods = lane_methods,
    .tp_new = PyType_GenericNew,
};

/* configure(descriptors: dict, dumps): see d_version above; a name missing from descriptors is read by name. */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *descriptors, *dumps;
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &descriptors, &dumps)) return NULL;
    struct {
        PyObject **slot;
        const char *name;
        int method;
    } wanted[] = {{&d_version, "_version", 0},         {&d_dtype, "dtype", 0},
                  {&d_shape, "shape", 0},              {&d_is_cpu, "is_cpu", 0},
                  {&d_requires_grad, "requires_grad", 0}, {&d_data_ptr, "data_ptr", 1},
                  {&d_is_contiguous, "is_contiguous", 1}, {&d_is_neg, "is_neg", 1},
                  {&d_stride, "stride", 1},            {&d_untyped_storage, "untyped_storage", 1}};
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        PyObject *descriptor = PyDict_GetItemString(descriptors, wanted[i].name);
        if (descriptor != NULL && (wanted[i].method ? !PyCallable_Check(descriptor)
                                                    : Py_TYPE(descriptor)->tp_descr_get == NULL)) {
            PyErr_Format(PyExc_TypeError, "configure: %s is not a %s", wanted[i].name,
                         wanted[i].method ? "callable" : "descriptor");
            return NULL;
        }
        Py_XINCREF(descriptor);
        Py_XSETREF(*wanted[i].slot, descriptor);
    }
    Py_XSETREF(float_dumps, dumps == Py_None ? NULL : Py_NewRef(dumps));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(descriptors, dumps): torch's descriptors of the tensor attributes read per call, by name, and "
     "orjson.dumps (or None) to write floats."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lane",
                                    "The PyTorch dump's per-call path in C (see msprobe/pytorch/dump/lane.py).", -1,
                                    module_methods};

PyMODINIT_FUNC PyInit__lane(void) {
#define INTERN(variable, text) \
    if ((variable = PyUnicode_InternFromString(text)) == NULL) return NULL;
    INTERN(s_version, "_version")
    INTERN(s_data_ptr, "data_ptr")
    INTERN(s_dtype, "dtype")
    INTERN(s_shape, "shape")
    INTERN(s_requires_grad, "requires_grad")
    INTERN(s_is_cpu, "is_cpu")
    INTERN(s_is_neg, "is_neg")
    INTERN(s_is_contiguous, "is_contiguous")
    INTERN(s_stride, "stride")
    INTERN(s_untyped_storage, "untyped_storage")
    INTERN(s_busy, "busy")
    INTERN(s_acquire, "acquire")
    INTERN(s_release, "release")
    INTERN(s_count, "count")
    INTERN(s_written_at, "written_at")
    INTERN(s_out, "out")
    INTERN(s_inplace, "inplace")
    INTERN(s_writer, "writer")
    INTERN(s_open_step, "open_step")
    INTERN(s_add_journaled, "add_journaled")
    INTERN(s_journal, "_journal")
    INTERN(s_journal_failed, "_journal_failed")
    INTERN(s_dirty, "_dirty")
    INTERN(s_data, "data")
    INTERN(s_stack, "stack")
    INTERN(s_construct, "construct")
    INTERN(s_names, "_names")
    INTERN(s_write, "write")
    INTERN(s_limit, "limit")
    INTERN(s_map, "_map")
    INTERN(s_position, "_position")
    INTERN(s_size, "_size")
    INTERN(s_grad_fn, "grad_fn")
    INTERN(s_register_hook, "register_hook")
#undef INTERN
    if ((one = PyLong_FromLong(1)) == NULL) return NULL;
    if (PyType_Ready(&CachedType) < 0 || PyType_Ready(&SummariesType) < 0 || PyType_Ready(&LaneType) < 0 ||
        PyType_Ready(&ScreenFirstType) < 0)
        return NULL;
    PyObject *created = PyModule_Create(&module);
    if (created == NULL) return NULL;
    /* The recorder's state this file reads and writes by attribute name, by owner: lane.py checks the objects
     * against it before the lane is used, so a rename on the Python side turns the lane off with a message
     * instead of changing what it does.  Bump INTERFACE_VERSION with any change here. */
    PyObject *interface = Py_BuildValue(
        "{s:(s),s:(ss),s:(ss),s:(ss),s:(ssssssss)}", "state", "busy", "log", "count", "written_at", "overflow",
        "count", "limit", "collector", "writer", "open_step", "writer", "_journal", "_journal_failed", "_dirty",
        "data", "stack", "construct", "_names", "add_journaled");
    if (interface == NULL || PyModule_AddObjectRef(created, "Summaries", (PyObject *)&SummariesType) < 0 ||
        PyModule_AddObjectRef(created, "Lane", (PyObject *)&LaneType) < 0 ||
        PyModule_AddIntConstant(created, "INTERFACE_VERSION", LANE_INTERFACE_VERSION) < 0 ||
        PyModule_AddObjectRef(created, "INTERFACE", interface) < 0) {
        Py_XDECREF(interface);
        Py_DECREF(created);
        return NULL;
    }
    Py_DECREF(interface);
    return created;
}
