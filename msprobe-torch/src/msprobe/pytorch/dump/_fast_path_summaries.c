/* Part of _fast_path.c, which includes it: Cached and Summaries, the statistics
 * of plain CPU float tensors kept as JSON text while they hold.
 * (One translation unit: the per-call helpers stay static and inline across the parts.) */

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
    PyObject *waiting; /* a device tensor's: its statistics in the batch (BatchedStats); NULL for a CPU one's */
} Cached;

static void cached_dealloc(Cached *self) {
    Py_XDECREF(self->ref);
    Py_XDECREF(self->storage);
    Py_XDECREF(self->writes);
    Py_XDECREF(self->dtype);
    Py_XDECREF(self->shape);
    Py_XDECREF(self->prefix);
    Py_XDECREF(self->suffix);
    Py_XDECREF(self->waiting);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject CachedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprobe.pytorch.dump._fast_path.Cached",
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
    int sums; /* a run of several processes: the float64 sums that merge shards, and parameters marked */
    /* device tensors (see summary_into): measure(tensor) -> its statistics waiting in the batch, or None for a
     * tensor the general way summarizes; rest(stats, requires_grad) -> the summary's text from its statistics
     * on (a token until the batch is read back).  Both None: plain CPU float tensors, measured at once. */
    PyObject *measure, *rest;
} Summaries;

static int summaries_init(Summaries *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"log",      "tensor_type", "parameter_type", "float32", "float64", "kernels",
                            "checksum", "measure",     "rest",           "sums",    NULL};
    PyObject *log, *tensor_type, *parameter_type, *float32, *float64, *capsule, *checksum = Py_None,
                                                                                  *measure = Py_None, *rest = Py_None;
    int sums = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O!OOO|$OOOp", names, &log, &PyType_Type, &tensor_type,
                                     &PyType_Type, &parameter_type, &float32, &float64, &capsule, &checksum, &measure,
                                     &rest, &sums))
        return -1;
    if ((measure == Py_None) != (rest == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "measure and rest come together");
        return -1;
    }
    if (sums && measure != Py_None) {
        PyErr_SetString(PyExc_TypeError, "the sums are measured at once, not in a device batch");
        return -1;
    }
    const KernelsAPI *kernels = PyCapsule_GetPointer(capsule, "msprobe.core.dump._kernels._C_API");
    if (kernels == NULL) return -1;
    if (kernels->version < (sums ? 3 : 1)) {
        PyErr_SetString(PyExc_RuntimeError, "msprobe-core's kernels are older than msprobe-torch expects");
        return -1;
    }
    self->sums = sums;
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
    Py_XSETREF(self->measure, Py_NewRef(measure));
    Py_XSETREF(self->rest, Py_NewRef(rest));
    self->kernels = kernels;
    return 0;
}

static int summaries_traverse(Summaries *self, visitproc visit, void *arg) {
    Py_VISIT(self->entries);
    Py_VISIT(self->log);
    Py_VISIT(self->checksum);
    Py_VISIT(self->measure);
    Py_VISIT(self->rest);
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
    Py_CLEAR(self->measure);
    Py_CLEAR(self->rest);
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

/* What follows requires_grad's value, in the general way's order: with ``sums`` (two doubles, or NULL)
 * ',"Sum":s,"SumSq":q', and ',"parameter":true' for a parameter; with summary_mode md5 ',"md5":"xxxxxxxx"' (the
 * checksum's answer, which must be 8 hex digits); then the brace.  New bytes, or NULL with an error set. */
static PyObject *summary_suffix(Summaries *self, PyObject *tensor, const double *sums) {
    Text suffix;
    text_init(&suffix);
    static const char *const labels[2] = {",\"Sum\":", ",\"SumSq\":"};
    int failed = sums != NULL && (text_doubles(&suffix, sums, 2, labels) < 0 ||
                                  (Py_TYPE(tensor) == self->parameter_type && TEXT_ADD(&suffix, ",\"parameter\":true") < 0));
    PyObject *digits = NULL;
    if (!failed && self->checksum != Py_None) {
        digits = PyObject_CallOneArg(self->checksum, tensor);
        Py_ssize_t length;
        const char *text = digits != NULL && PyUnicode_Check(digits) ? PyUnicode_AsUTF8AndSize(digits, &length) : NULL;
        if (text != NULL && length == 8 && strspn(text, "0123456789abcdef") == 8) {
            failed = TEXT_ADD(&suffix, ",\"md5\":\"") < 0 || text_add(&suffix, text, 8) < 0 || TEXT_ADD(&suffix, "\"") < 0;
        } else {
            failed = 1;
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the checksum must be 8 lowercase hex digits");
        }
    }
    Py_XDECREF(digits);
    PyObject *bytes = failed || TEXT_ADD(&suffix, "}") < 0 ? NULL : PyBytes_FromStringAndSize(suffix.data, suffix.len);
    text_free(&suffix);
    return bytes;
}

/* The cached parts of ``tensor``'s summary where they still hold: 1 with ``*prefix`` and ``*rest`` set (new
 * references: the suffix, or the waiting statistics), 0 with none (``*key`` and ``*version`` are set for remember
 * then), -1 on error. 0 with ``*key`` NULL declines: a subclass (its values kept elsewhere), or a RuntimeError
 * from torch (measured the general way). */
static int look_up(Summaries *self, PyObject *tensor, PyObject **key, long long *version, PyObject **prefix,
                   PyObject **rest) {
    *key = *prefix = *rest = NULL;
    PyTypeObject *type = Py_TYPE(tensor);
    if (type != self->tensor_type && type != self->parameter_type) return 0;
    PyObject *version_object = ATTRIBUTE(tensor, version);
    if (version_object == NULL) return decline_runtime_error(); /* inference mode: no version counter */
    *version = PyLong_AsLongLong(version_object);
    Py_DECREF(version_object);
    if (*version == -1 && PyErr_Occurred()) return -1;
    if ((*key = PyLong_FromVoidPtr(tensor)) == NULL) return -1;
    Cached *cached = (Cached *)PyDict_GetItemWithError(self->entries, *key);
    int holds = 0;
    if (cached != NULL) {
        Py_INCREF(cached); /* held while torch's and the log's Python run in still_holds */
        holds = still_holds(self, cached, tensor, *version);
        if (holds > 0) {
            *prefix = Py_NewRef(cached->prefix);
            *rest = Py_NewRef(cached->waiting != NULL ? cached->waiting : cached->suffix);
            Py_DECREF(cached);
            return 1;
        }
        Py_DECREF(cached);
    } else if (PyErr_Occurred()) {
        holds = -1;
    }
    if (holds == 0) return 0;
    Py_CLEAR(*key); /* the caller has nothing to release */
    return decline_runtime_error();
}

/* Keeps the summary's parts for ``tensor`` under ``key`` where it can: a tensor with no storage of its own, or
 * refusing weak references, is measured each time.  Takes nothing from the caller; 0, or -1 on error. */
static int remember(Summaries *self, PyObject *key, PyObject *tensor, long long version, unsigned long long data,
                    PyObject *dtype, PyObject *shape, PyObject *prefix, PyObject *suffix, PyObject *waiting) {
    PyObject *storage = storage_address(tensor);
    if (storage == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
        PyErr_Clear();
        return 0;
    }
    PyObject *ref = PyWeakref_NewRef(tensor, NULL);
    if (ref == NULL) {
        Py_DECREF(storage);
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
        PyErr_Clear();
        return 0;
    }
    Cached *fresh = PyObject_New(Cached, &CachedType);
    if (fresh == NULL) {
        Py_DECREF(storage);
        Py_DECREF(ref);
        return -1;
    }
    fresh->writes = PyObject_GetAttr(self->log, s_count);
    fresh->ref = ref;
    fresh->version = version;
    fresh->data = data;
    fresh->storage = storage;
    fresh->dtype = Py_NewRef(dtype);
    fresh->shape = Py_NewRef(shape);
    fresh->prefix = Py_NewRef(prefix);
    fresh->suffix = Py_XNewRef(suffix);
    fresh->waiting = Py_XNewRef(waiting);
    int status = fresh->writes == NULL || PyDict_SetItem(self->entries, key, (PyObject *)fresh) < 0 ? -1 : 0;
    Py_DECREF(fresh);
    return status;
}

/* The summary's text up to its statistics: '{"type":"torch.Tensor","dtype":"<name>","shape":[<sizes>],' (new
 * bytes), or NULL with an error set. */
static PyObject *summary_head(PyObject *dtype_name, PyObject *shape) {
    Text head;
    text_init(&head);
    int failed = TEXT_ADD(&head, "{\"type\":\"torch.Tensor\",\"dtype\":") < 0 ||
                 text_json_string(&head, dtype_name) != 1 || TEXT_ADD(&head, ",\"shape\":[") < 0;
    for (Py_ssize_t i = 0; !failed && i < PyTuple_GET_SIZE(shape); i++)
        failed = (i && TEXT_ADD(&head, ",") < 0) || text_ll(&head, PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i))) < 0;
    failed = failed || TEXT_ADD(&head, "],") < 0;
    PyObject *bytes = failed ? NULL : PyBytes_FromStringAndSize(head.data, head.len);
    text_free(&head);
    if (bytes == NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a dtype's name cannot be written as JSON");
    return bytes;
}

/* A plain CPU float tensor's summary, measured now (as TensorSummarizer's general path writes it): 1 with
 * ``*prefix`` (up to requires_grad's value) and ``*suffix`` (what follows it) set and remembered; 0 for any other
 * tensor (the general way); -1 on error. */
static int measured_now(Summaries *self, PyObject *tensor, PyObject *key, long long version, PyObject **prefix,
                        PyObject **suffix) {
    PyObject *dtype = ATTRIBUTE(tensor, dtype), *shape = NULL, *head = NULL;
    int status = -1;
    if (dtype == NULL) goto done;
    char kind = dtype == self->float32 ? 'f' : dtype == self->float64 ? 'd' : 0;
    status = 0;
    if (kind == 0) goto done;
    Py_ssize_t count;
    unsigned long long data;
    status = plain_memory(tensor, &shape, &count, &data);
    if (status <= 0) goto done;
    status = 0;
    if (count == 0) goto done; /* an empty tensor has no statistics: the general way says so */
    double stats[6]; /* Max, Min, Mean, Norm; with self->sums the sum and the sum of squares */
    const void *values = (const void *)(uintptr_t)data;
    if (PyTuple_GET_SIZE(shape) == 0) { /* a 0-d tensor (an optimizer's step count): its value, four times */
        double value = kind == 'f' ? (double)*(const float *)values : *(const double *)values;
        if (!isfinite(value) || (self->sums && !self->kernels->float_stats_sums(values, 1, kind, stats))) goto done;
        stats[0] = stats[1] = stats[2] = stats[3] = value;
    } else if (!(self->sums ? self->kernels->float_stats_sums(values, count, kind, stats)
                            : self->kernels->float_stats(values, count, kind, stats)))
        goto done; /* an inf or nan: the general way adds the *_except_inf_nan pair */
    status = -1;
    PyObject *name = PyUnicode_FromString(kind == 'f' ? "torch.float32" : "torch.float64");
    head = name != NULL ? summary_head(name, shape) : NULL;
    Py_XDECREF(name);
    if (head == NULL) goto done;
    Text summary;
    text_init(&summary);
    static const char *const labels[4] = {"\"Max\":", ",\"Min\":", ",\"Mean\":", ",\"Norm\":"};
    int failed = text_add(&summary, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head)) < 0 ||
                 text_doubles(&summary, stats, 4, labels) < 0 || TEXT_ADD(&summary, ",\"requires_grad\":") < 0;
    if (!failed) *prefix = PyBytes_FromStringAndSize(summary.data, summary.len);
    text_free(&summary);
    if (*prefix != NULL && (*suffix = summary_suffix(self, tensor, self->sums ? stats + 4 : NULL)) != NULL &&
        remember(self, key, tensor, version, data, dtype, shape, *prefix, *suffix, NULL) == 0)
        status = 1;
done:
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(head);
    return status;
}

/* A device tensor's statistics put in the batch (``measure``): 1 with ``*prefix`` (up to the statistics) and
 * ``*stats`` (their row in the batch) set and remembered; 0 for a tensor ``measure`` leaves to the general way;
 * -1 on error. */
static int measured_later(Summaries *self, PyObject *tensor, PyObject *key, long long version, PyObject **prefix,
                          PyObject **stats) {
    *stats = PyObject_CallOneArg(self->measure, tensor);
    if (*stats == NULL) return -1;
    if (*stats == Py_None) return 0;
    PyObject *dtype = ATTRIBUTE(tensor, dtype);
    PyObject *shape = dtype != NULL ? ATTRIBUTE(tensor, shape) : NULL;
    PyObject *name = shape != NULL ? PyObject_Str(dtype) : NULL;
    unsigned long long data;
    int status = name == NULL ? -1 : !PyTuple_Check(shape) ? 0 : 1;
    if (status > 0 && ((*prefix = summary_head(name, shape)) == NULL ||
                       unsigned_of(METHOD(tensor, data_ptr), &data) < 0 ||
                       remember(self, key, tensor, version, data, dtype, shape, *prefix, NULL, *stats) < 0))
        status = -1;
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(name);
    return status;
}

/* Appends ``tensor``'s summary and returns 1; returns 0, appending nothing, for a tensor the general way
 * summarizes; -1 on error.  A CPU Summaries measures plain float tensors at once (measured_now); one made with
 * ``measure`` and ``rest`` writes device tensors' summaries whose statistics wait in the batch (measured_later):
 * ``rest(stats, requires_grad)`` writes them, a token until the batch is read back.  Either way the parts are
 * cached while the tensor is unchanged (look_up). */
static int summary_into(Summaries *self, PyObject *tensor, Text *out) {
    PyObject *key, *prefix, *rest, *flag, *text = NULL;
    long long version;
    int status = look_up(self, tensor, &key, &version, &prefix, &rest);
    if (status < 0 || key == NULL) return status;
    int later = self->measure != Py_None;
    if (status == 0)
        status = later ? measured_later(self, tensor, key, version, &prefix, &rest)
                       : measured_now(self, tensor, key, version, &prefix, &rest);
    if (status <= 0) goto done;
    status = -1;
    flag = ATTRIBUTE(tensor, requires_grad);
    if (flag == NULL) goto done;
    if (later) {
        text = PyObject_CallFunctionObjArgs(self->rest, rest, flag, NULL);
        if (text != NULL && !PyUnicode_Check(text)) PyErr_SetString(PyExc_TypeError, "rest must return a str");
        if (text != NULL && PyUnicode_Check(text))
            status = text_add(out, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix)) < 0 ||
                             text_unicode(out, text) < 0
                         ? -1
                         : 1;
    } else {
        status = text_add(out, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix)) < 0 ||
                         (flag == Py_True ? TEXT_ADD(out, "true") : TEXT_ADD(out, "false")) < 0 ||
                         text_add(out, PyBytes_AS_STRING(rest), PyBytes_GET_SIZE(rest)) < 0
                     ? -1
                     : 1;
    }
    Py_DECREF(flag);
done:
    if (status < 0) status = decline_runtime_error();
    Py_DECREF(key);
    Py_XDECREF(prefix);
    Py_XDECREF(rest);
    Py_XDECREF(text);
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
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprobe.pytorch.dump._fast_path.Summaries",
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
