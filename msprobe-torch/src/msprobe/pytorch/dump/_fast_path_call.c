/* Part of _fast_path.c, which includes it: the call itself: the API wrappers'
 * handler, its backward screen and the FastPath type.
 * (One translation unit: the per-call helpers stay static and inline across the parts.) */

/* The overflow check's hook on a call's autograd node: the gradients leaving it are screened here, and only
 * gradients holding inf or nan go on to the recorder's hook (which decides and writes, as the collector's
 * backward); finite ones, nearly all of them, cost no Python.  The screen runs as tool work (busy), since a
 * tensor it cannot read in C is measured by torch. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    FastPath *path;
    PyObject *hook;      /* hook(grad_inputs, grad_outputs), the recorder's; NULL until late_args make it */
    PyObject *late_args; /* (name, backward_name, parent) for the fast path's late_backward, or NULL */
} ScreenFirst;

static PyObject *screen_first_vectorcall(ScreenFirst *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    FastPath *path = self->path;
    if (nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "an autograd node hook takes (grad_inputs, grad_outputs)");
        return NULL;
    }
    PyObject *busy = PyObject_GetAttr(path->state, s_busy);
    int found = busy != NULL && set_busy(path, Py_True) == 0 ? any_nonfinite(path, argv[0], 0) : -1;
    if (busy != NULL && set_busy(path, busy) < 0) found = -1;
    Py_XDECREF(busy);
    if (found == 0) Py_RETURN_NONE;
    if (found < 0) { /* whatever it was, the recorder's hook meets it too and reports it */
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
        PyErr_Clear();
    }
    if (self->hook == NULL && (self->hook = PyObject_Call(path->late_backward, self->late_args, NULL)) == NULL)
        return NULL;
    return PyObject_Vectorcall(self->hook, argv, nargsf, NULL);
}

static int screen_first_traverse(ScreenFirst *self, visitproc visit, void *arg) {
    Py_VISIT(self->path);
    Py_VISIT(self->hook);
    Py_VISIT(self->late_args);
    return 0;
}

static int screen_first_clear(ScreenFirst *self) {
    Py_CLEAR(self->path);
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
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprobe.pytorch.dump._fast_path.ScreenFirst",
    .tp_basicsize = sizeof(ScreenFirst),
    .tp_dealloc = (destructor)screen_first_dealloc,
    .tp_vectorcall_offset = offsetof(ScreenFirst, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)screen_first_traverse,
    .tp_clear = (inquiry)screen_first_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "An autograd node hook that calls the recorder's only for gradients holding inf or nan.",
};

static PyObject *screen_first_new(FastPath *path, PyObject *hook, PyObject *late_args) {
    ScreenFirst *made = PyObject_GC_New(ScreenFirst, &ScreenFirstType);
    if (made == NULL) return NULL;
    made->vectorcall = (vectorcallfunc)screen_first_vectorcall;
    made->path = (FastPath *)Py_NewRef(path);
    made->hook = Py_XNewRef(hook);
    made->late_args = Py_XNewRef(late_args);
    PyObject_GC_Track(made);
    return (PyObject *)made;
}

/* The node that made one of the call's output tensors in this call, as grad_taps.output_node finds it: a new
 * reference, or NULL with *handed_back set when that node belonged to an input before (the call handed an input
 * back), or NULL with neither (no output has a node) or with an error set. */
static PyObject *output_node(FastPath *self, PyObject *output, PyObject *before, int *handed_back) {
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
static PyObject *screen_backward(FastPath *self, PyObject *key, long long index, PyObject *name, PyObject *grad_inputs,
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

/* What both kinds of call do around the original: the writes an in-place call makes are noted (after its inputs
 * were measured as they are now) and the autograd nodes of its inputs taken, since it replaces them; then it runs
 * without the tool lock, taken again after when the entry is kept.  A failure to note costs the entry (*keep 0),
 * not the call.  Returns the output, or NULL for the call's own error or an error of ours that is no Exception
 * (report_failure's -1); *held says whether the lock is held. */
static PyObject *run_original(FastPath *self, PyObject *original, PyObject *key, PyObject *args, PyObject *kwargs,
                              PyObject *name, PyObject *grad_inputs, int in_place, int *keep, int *held,
                              PyObject **nodes_before) {
    if (in_place > 0 && self->log != Py_None && note_overwritten(self, key, args, kwargs) < 0) {
        *keep = 0;
        if (report_failure(self, name) < 0) return NULL;
    }
    if (*keep && in_place > 0 && grad_inputs != NULL && self->nodes_of != Py_None) {
        *nodes_before = PyObject_CallOneArg(self->nodes_of, grad_inputs);
        if (*nodes_before == NULL) {
            *keep = 0;
            if (report_failure(self, name) < 0) return NULL;
        }
    }
    tool_unlock(self);
    *held = 0;
    PyObject *output = PyObject_Call(original, args, PyDict_GET_SIZE(kwargs) ? kwargs : NULL);
    if (output == NULL || !*keep) return output;
    if (tool_lock(self) < 0) {
        Py_DECREF(output);
        return NULL;
    }
    *held = 1;
    return output;
}

/* The overflow check's call: inputs screened before an in-place call (which changes them), outputs after; a call
 * whose outputs hold inf or nan is the recorder's to decide on and write.  No entry otherwise. */
static PyObject *fast_path_screen_call(FastPath *self, PyObject *original, PyObject *key, PyObject *args, PyObject *kwargs,
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
    output = run_original(self, original, key, args, kwargs, name, grad_inputs, in_place, &keep, &held, &nodes_before);
    if (output == NULL || !keep) goto leave;
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

/* handoff(name, entry_text, args, kwargs, stack, parent): 1 when it wrote the entry, 0 when the fast path writes it,
 * -1 on an error (set). */
static int hand_off(FastPath *self, PyObject *name, Text *entry, PyObject *args, PyObject *kwargs, PyObject *stack,
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

static PyObject *fast_path_record_call(FastPath *self, PyObject *original, PyObject *key, PyObject *args, PyObject *kwargs,
                                  PyObject *grad_inputs) {
    PyObject *name = NULL, *output = NULL, *nodes_before = NULL;
    Text entry;
    text_init(&entry);
    int recorded = 0;
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
    output = run_original(self, original, key, args, kwargs, name, grad_inputs, in_place, &keep, &held, &nodes_before);
    if (output == NULL || !keep) goto leave;
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
    if (stack != NULL && (handed || record_entry(self, name, &entry, stack, parent) == 0)) {
        result = Py_NewRef(Py_None);
        recorded = 1;
    }
    Py_XDECREF(stack);
    if (result != NULL && grad_inputs != NULL) { /* its backward entry */
        Py_DECREF(result);
        result = watch_backward(self, key, index, name, grad_inputs, output, nodes_before);
    }
    if (result == NULL && report_failure(self, name) < 0) Py_CLEAR(output);
    Py_XDECREF(result);
leave:
    if (!recorded) forget_tokens(self, &entry);
    text_free(&entry);
    Py_XDECREF(nodes_before);
    Py_XDECREF(name);
    output = leave_call(self, output);
    if (held) tool_unlock(self);
    return output;
}

static PyObject *fast_path_vectorcall(FastPath *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 4 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || !PyTuple_Check(argv[2]) ||
        !PyDict_Check(argv[3]) || !PyUnicode_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "fast_path(original, key, args: tuple, kwargs: dict)");
        return NULL;
    }
    PyObject *grad_inputs;
    int takes = fast_path_takes(self, argv[2], argv[3], &grad_inputs);
    if (takes < 0) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
        PyErr_Clear(); /* whatever it was, the recorder's own path meets it and reports it */
        takes = 0;
    }
    if (!takes) return PyObject_Vectorcall(self->slow, argv, 4, NULL);
    PyObject *output = self->overflow != Py_None
                           ? fast_path_screen_call(self, argv[0], argv[1], argv[2], argv[3], grad_inputs)
                           : fast_path_record_call(self, argv[0], argv[1], argv[2], argv[3], grad_inputs);
    Py_XDECREF(grad_inputs);
    return output;
}

/* backward_entry(name, arriving, leaving, parent): a backward entry as DumpCollector.backward writes it, for a
 * record the recorder's hooks completed: the gradients arriving at the outputs ("input") and those leaving
 * towards the inputs ("output"), lists. */
static PyObject *fast_path_backward_entry(FastPath *self, PyObject *const *args, Py_ssize_t nargs) {
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
    if (status < 0) forget_tokens(self, &entry);
    text_free(&entry);
    if (status < 0) return NULL;
    Py_RETURN_NONE;
}

/* inputs_text(name, args, kwargs) -> '"input_args":[...],"input_kwargs":{...}': a module's inputs as they are
 * when its forward starts (its forward may change them), for module_entry. */
static PyObject *fast_path_inputs_text(FastPath *self, PyObject *const *args, Py_ssize_t nargs) {
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
    if (result == NULL) forget_tokens(self, &text);
    text_free(&text);
    return result;
}

/* module_entry(name, inputs_text, output, parameters, stack, parent, recompute): a module's forward entry as
 * DumpCollector.forward writes it: inputs, output, parameters (a dict), is_recompute, in that order. */
static PyObject *fast_path_module_entry(FastPath *self, PyObject *const *args, Py_ssize_t nargs) {
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
    if (status < 0) forget_tokens(self, &entry);
    text_free(&entry);
    if (status < 0) return NULL;
    Py_RETURN_NONE;
}

/* grads_entry(name, grads): a module's parameters_grad entry as DumpCollector.parameters_grad writes it. */
static PyObject *fast_path_grads_entry(FastPath *self, PyObject *const *args, Py_ssize_t nargs) {
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
    if (status < 0) forget_tokens(self, &entry);
    text_free(&entry);
    if (status < 0) return NULL;
    Py_RETURN_NONE;
}

/* screen_first(hook): the overflow check's node hook around the recorder's (see ScreenFirst). */
static PyObject *fast_path_screen_first(FastPath *self, PyObject *hook) {
    if (self->overflow == Py_None) {
        PyErr_SetString(PyExc_ValueError, "screen_first serves the overflow check's fast path only");
        return NULL;
    }
    return screen_first_new(self, hook, NULL);
}

static PyMethodDef fast_path_methods[] = {
    {"backward_entry", (PyCFunction)(void (*)(void))fast_path_backward_entry, METH_FASTCALL,
     "backward_entry(name, arriving, leaving, parent): write a call's backward entry."},
    {"inputs_text", (PyCFunction)(void (*)(void))fast_path_inputs_text, METH_FASTCALL,
     "inputs_text(name, args, kwargs): a module's inputs as the JSON its entry starts with."},
    {"module_entry", (PyCFunction)(void (*)(void))fast_path_module_entry, METH_FASTCALL,
     "module_entry(name, inputs_text, output, parameters, stack, parent, recompute): write a module's forward entry."},
    {"grads_entry", (PyCFunction)(void (*)(void))fast_path_grads_entry, METH_FASTCALL,
     "grads_entry(name, grads): write a module's parameters_grad entry."},
    {"screen_first", (PyCFunction)fast_path_screen_first, METH_O,
     "screen_first(hook): an autograd node hook that calls hook only for gradients holding inf or nan."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastPathType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprobe.pytorch.dump._fast_path.FastPath",
    .tp_basicsize = sizeof(FastPath),
    .tp_dealloc = (destructor)fast_path_dealloc,
    .tp_vectorcall_offset = offsetof(FastPath, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)fast_path_traverse,
    .tp_clear = (inquiry)fast_path_clear_refs,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The API wrappers' handler (see the module's comment).",
    .tp_init = (initproc)fast_path_init,
    .tp_methods = fast_path_methods,
    .tp_new = PyType_GenericNew,
};
