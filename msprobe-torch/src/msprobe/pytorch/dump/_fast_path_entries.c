/* Part of _fast_path.c, which includes it: The FastPath type's state, and how one call's entry is encoded and written.
 * (One translation unit: the per-call helpers stay static and inline across the parts.) */

/* ------------------------------------------------------------------------------------------------------------ */
/* FastPath                                                                                                         */

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
    const JournalAPI *journal; /* msprobe-core's C add_journaled (see record_entry), or NULL */
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
    /* device tensors' summaries, their statistics waiting in the batch (a token in the text until it is read back,
     * see msprobe.core.dump.pending_values): a Summaries made with measure and rest; NULL: none */
    Summaries *waiting;
    PyObject *drop; /* drop(text): forget the values of the tokens in an entry that was not recorded; or None */
} FastPath;

#define LANE_OBJECTS(X)                                                                                            \
    X(log) X(slow) X(state) X(counts) X(in_place_keys) X(classify) X(grad_enabled) X(graph_task_id) X(module_stack) \
        X(no_parent) X(stack) X(collector) X(encode_value) X(encode_outputs) X(overwritten) X(report) X(watch)     \
            X(overflow) X(overflowed) X(nonfinite) X(screen_kinds) X(nodes_of) X(handoff) X(late_backward) X(lock) X(drop)

static PyObject *fast_path_vectorcall(FastPath *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames);

static int fast_path_init(FastPath *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"summaries", "with_values", "log", "tensor_type", "slow", "state", "counts", "classify",
                            "grad_enabled", "graph_task_id", "module_stack", "no_parent", "stack", "collector",
                            "encode_value", "encode_outputs", "overwritten", "report", "watch", "backward",
                            "overflow", "overflowed", "nonfinite", "screen_kinds", "kernels", "parameter_type",
                            "nodes_of", "handoff", "late_backward", "lock", "journal", "waiting", "drop", NULL};
    PyObject *summaries, *tensor_type, *log, *slow, *state, *counts, *classify, *grad_enabled, *graph_task_id,
        *module_stack, *no_parent, *stack, *collector, *encode_value, *encode_outputs, *overwritten, *report, *watch;
    PyObject *overflow = Py_None, *overflowed = Py_None, *nonfinite = Py_None, *screen_kinds = Py_None,
             *capsule = Py_None, *parameter_type = Py_None, *nodes_of = Py_None, *handoff = Py_None,
             *late_backward = Py_None, *lock = Py_None, *journal = Py_None, *waiting = Py_None, *drop = Py_None;
    int with_values, backward;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OpOO!OOO!OOOOOOOOOOOOp|$OOOOOOOOOOOOO", names, &summaries, &with_values,
                                     &log, &PyType_Type, &tensor_type, &slow, &state, &PyDict_Type, &counts, &classify,
                                     &grad_enabled, &graph_task_id, &module_stack, &no_parent, &stack, &collector,
                                     &encode_value, &encode_outputs, &overwritten, &report, &watch, &backward,
                                     &overflow, &overflowed, &nonfinite, &screen_kinds, &capsule, &parameter_type,
                                     &nodes_of, &handoff, &late_backward, &lock, &journal, &waiting, &drop))
        return -1;
    self->journal = NULL;
    if (journal != Py_None) { /* without it every entry goes through the writer's add_journaled */
        self->journal = PyCapsule_GetPointer(journal, "msprobe.core.dump._journal._C_API");
        if (self->journal == NULL) return -1;
        if (self->journal->version < 1) {
            PyErr_SetString(PyExc_RuntimeError, "msprobe-core's journal write is older than msprobe-torch expects");
            return -1;
        }
    }
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
    if (waiting != Py_None && (!PyObject_TypeCheck(waiting, &SummariesType) || ((Summaries *)waiting)->measure == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "waiting must be a Summaries made with measure and rest, or None");
        return -1;
    }
    Py_XSETREF(self->waiting, waiting == Py_None ? NULL : (Summaries *)Py_NewRef(waiting));
    if (module_stack != Py_None && !PyList_Check(module_stack)) {
        PyErr_SetString(PyExc_TypeError, "module_stack must be a list or None");
        return -1;
    }
    self->vectorcall = (vectorcallfunc)fast_path_vectorcall;
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
    SET(drop)
#undef SET
    return 0;
}

static int fast_path_traverse(FastPath *self, visitproc visit, void *arg) {
#define VISIT(field) Py_VISIT(self->field);
    LANE_OBJECTS(VISIT)
#undef VISIT
    Py_VISIT(self->summaries);
    Py_VISIT(self->waiting);
    return 0;
}

static int fast_path_clear_refs(FastPath *self) {
#define CLEAR(field) Py_CLEAR(self->field);
    LANE_OBJECTS(CLEAR)
#undef CLEAR
    Py_CLEAR(self->summaries);
    Py_CLEAR(self->waiting);
    Py_CLEAR(self->tensor_type);
    Py_CLEAR(self->parameter_type);
    return 0;
}

static void fast_path_dealloc(FastPath *self) {
    PyObject_GC_UnTrack(self);
    fast_path_clear_refs(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An entry that will not be recorded (a value failed to encode, the writer refused it): the values its tokens
 * stand for are let go of, so that nothing waits for them.  Keeps any error that is set. */
static void forget_tokens(FastPath *self, Text *entry) {
    if (self->drop == Py_None || memchr(entry->data, '\x01', (size_t)entry->len) == NULL) return;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *text = PyUnicode_DecodeUTF8(entry->data, entry->len, "replace");
    PyObject *done = text != NULL ? PyObject_CallOneArg(self->drop, text) : NULL;
    Py_XDECREF(text);
    Py_XDECREF(done);
    PyErr_Clear(); /* nothing to report: at worst a few small values stay in the table */
    PyErr_Restore(type, value, traceback);
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
static int encode_generally(FastPath *self, Text *out, PyObject *value, Where *where, PyObject *leaf) {
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

static int encode_value(FastPath *self, Text *out, PyObject *value, Where *where, PyObject *leaf);

static int encode_items(FastPath *self, Text *out, PyObject *sequence, Where *where) {
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
static int encode_value(FastPath *self, Text *out, PyObject *value, Where *where, PyObject *leaf) {
    if (PyObject_TypeCheck(value, self->tensor_type)) {
        if (self->summaries != NULL) {
            int done = summary_into(self->summaries, value, out);
            if (done) return done < 0 ? -1 : 0;
        }
        if (self->waiting != NULL) {
            int done = summary_into(self->waiting, value, out);
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
static int encode_outputs(FastPath *self, Text *out, PyObject *output, PyObject *name) {
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
static int encode_inputs(FastPath *self, Text *out, PyObject *args, PyObject *kwargs, PyObject *name) {
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
static int collect_grad_inputs(FastPath *self, PyObject *value, PyObject *found, int depth) {
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
static int writes_in_place(FastPath *self, PyObject *key, PyObject *kwargs) {
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

static int note_writes_in(FastPath *self, PyObject *value) {
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
static int note_overwritten(FastPath *self, PyObject *key, PyObject *args, PyObject *kwargs) {
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

static int set_busy(FastPath *self, PyObject *busy) { return PyObject_SetAttr(self->state, s_busy, busy); }

/* A failure of the tool's own work: reported (logged once per API); -1 when the report raises (strict, or a
 * device error, which belongs to the training) or the error is no Exception (KeyboardInterrupt). */
static int report_failure(FastPath *self, PyObject *name) {
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

/* 1 when the fast path takes the call, 0 when the Python recorder must (backward is running: it tells a
 * recomputation apart).  ``grad_inputs`` is set to the list of inputs needing a gradient when the call gets a
 * backward record, else to NULL. */
static int fast_path_takes(FastPath *self, PyObject *args, PyObject *kwargs, PyObject **grad_inputs) {
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

/* The entry, with its stack (or NULL) and parent (the no_parent marker at L1: no construct.json record), into the
 * step's files through DumpWriter.add_journaled; the step's folder is made with its first entry.  -1 on error. */
static int record_entry(FastPath *self, PyObject *name, Text *entry, PyObject *stack, PyObject *parent) {
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
        PyObject *stack_text = stack != NULL ? stack : Py_None;
        /* a token (msprobe.core.dump.pending_values) stands for a value still on a device: the entry waits for it */
        int waits = self->drop != Py_None && memchr(entry->data, '\x01', (size_t)entry->len) != NULL;
        int done = self->journal == NULL || waits
                       ? 0
                       : self->journal->add_journaled(writer, name, name_text, text, stack_text, parent_text);
        if (done > 0) {
            result = Py_NewRef(Py_None);
        } else if (done == 0) {
            PyObject *call[] = {writer, name, name_text, text, stack_text, parent_text};
            /* no offset flag: call[-1] is not ours */
            result = PyObject_VectorcallMethod(waits ? s_add_waiting : s_add_journaled, call, 6, NULL);
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
static int screen_tensor(FastPath *self, PyObject *tensor) {
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
static int any_nonfinite(FastPath *self, PyObject *value, int depth) {
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
static PyObject *count_call(FastPath *self, PyObject *key, long long *index) {
    PyObject *done = PyDict_GetItemWithError(self->counts, key);
    *index = done != NULL ? PyLong_AsLongLong(done) : 0;
    PyObject *next = PyErr_Occurred() ? NULL : PyLong_FromLongLong(*index + 1);
    int status = next == NULL ? -1 : PyDict_SetItem(self->counts, key, next);
    Py_XDECREF(next);
    return status < 0 ? NULL : PyUnicode_FromFormat("%U.%lld.forward", key, *index);
}

/* The entry's parent in construct.json (borrowed): at mix the innermost open module or optimizer step (None at the
 * top), at L1 the no_parent marker (no record). */
static PyObject *parent_of(FastPath *self) {
    if (self->module_stack == Py_None) return self->no_parent;
    Py_ssize_t open = PyList_GET_SIZE(self->module_stack);
    return open ? PyList_GET_ITEM(self->module_stack, open - 1) : Py_None;
}

/* The call's backward record, by the recorder (watch): the node that made the output is hooked.  Returns the
 * callback's result (a new reference) or NULL. */
static PyObject *watch_backward(FastPath *self, PyObject *key, long long index, PyObject *name, PyObject *grad_inputs,
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
static int tool_lock(FastPath *self) {
    if (self->lock == Py_None) return 0;
    PyObject *got = PyObject_CallMethodNoArgs(self->lock, s_acquire);
    if (got == NULL) return -1;
    Py_DECREF(got);
    return 0;
}

/* Lets the lock go, keeping whatever error is set. */
static void tool_unlock(FastPath *self) {
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
static PyObject *leave_call(FastPath *self, PyObject *output) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (set_busy(self, Py_False) < 0) PyErr_Clear();
    PyErr_Restore(type, value, traceback);
    return output;
}
