/* The call stack of each recorded call, found without running Python code.
 *
 * A dump asks for the caller's stack at every recorded API call, some six
 * hundred times a training step; in Python the walk costs a few microseconds
 * a call, several percent of the step.  The rules are stack.py's
 * (StackCapture), which stays the fallback and keeps the state: this walker
 * reads and updates the very dicts and list that StackCapture holds, so the
 * two can take turns, and it calls back into StackCapture for anything rare
 * (a code object seen for the first time, a stack seen for the first time,
 * whose text StackCapture formats).  Frames are read through the public C
 * API of Python 3.11 and later; on an older Python the module does not load.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

#if PY_VERSION_HEX < 0x030B0000
/* PyFrame_GetLasti arrived in 3.11: older Pythons use stack.py */
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frames", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__frames(void) {
    PyErr_SetString(PyExc_ImportError, "msprobe.core.dump._frames needs Python 3.11 or later");
    return NULL;
}
#else

/* a generator's or coroutine's frame is resumed by different callers (stack.py's _RESUMABLE) */
#define RESUMABLE (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *capture;                         /* the StackCapture whose state this is */
    PyObject *is_tool, *numbers, *cache, *place; /* its dicts: _is_tool, _numbers, _cache, _place */
    PyObject *chain;                           /* its list: _chain */
    PyObject *tool, *cached;                   /* its methods: _tool(code), _cached(key, frame) */
} Walker;

static PyObject *s_is_tool, *s_numbers, *s_cache, *s_place, *s_chain, *s_tool, *s_cached, *s_forget;

/* 1 when `code` is the tool's own, 0 when not, -1 on error; asks StackCapture._tool the first time */
static int is_tool(Walker *self, PyObject *code) {
    PyObject *id = PyLong_FromVoidPtr(code);
    if (id == NULL) return -1;
    PyObject *known = PyDict_GetItemWithError(self->is_tool, id);
    Py_DECREF(id);
    if (known != NULL) return PyObject_IsTrue(known);
    if (PyErr_Occurred()) return -1;
    PyObject *answer = PyObject_CallOneArg(self->tool, code);
    if (answer == NULL) return -1;
    int tool = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    return tool;
}

static int held_at(PyObject *dict, PyObject *frame, Py_ssize_t *index) {
    PyObject *id = PyLong_FromVoidPtr(frame);
    if (id == NULL) return -1;
    PyObject *found = PyDict_GetItemWithError(dict, id);
    Py_DECREF(id);
    if (found == NULL) return PyErr_Occurred() ? -1 : 0;
    *index = PyLong_AsSsize_t(found);
    return *index == -1 && PyErr_Occurred() ? -1 : 1;
}

/* Whether the kept `entry` (frame, instruction, number) is `frame` still at that instruction, outside a generator. */
static int still_there(PyObject *entry, PyFrameObject *frame) {
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3 || PyTuple_GET_ITEM(entry, 0) != (PyObject *)frame)
        return 0;
    long instruction = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));
    if (instruction == -1 && PyErr_Occurred()) return -1;
    if (instruction != PyFrame_GetLasti(frame)) return 0;
    PyCodeObject *code = PyFrame_GetCode(frame);
    int resumable = code->co_flags & RESUMABLE;
    Py_DECREF(code);
    return !resumable;
}

/* stack.py's _number_above: the number of the stack from `frame` up (-1 for none), walking only what the last
 * walk did not see.  Takes a new reference to `frame` (may be NULL); returns a new reference or NULL. */
static PyObject *number_above(Walker *self, PyFrameObject *frame) {
    PyObject *walked = PyList_New(0), *number = NULL, *result = NULL;
    Py_ssize_t kept = 0;
    if (walked == NULL) goto done;
    while (frame != NULL) {
        Py_ssize_t index;
        int found = held_at(self->place, (PyObject *)frame, &index);
        if (found < 0) goto done;
        if (found && index >= 0 && index < PyList_GET_SIZE(self->chain)) {
            PyObject *entry = PyList_GET_ITEM(self->chain, index);
            int there = still_there(entry, frame);
            if (there < 0) goto done;
            if (there) {
                kept = index + 1;
                number = Py_NewRef(PyTuple_GET_ITEM(entry, 2));
                break;
            }
        }
        if (PyList_Append(walked, (PyObject *)frame) < 0) goto done;
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_SETREF(frame, back);
    }
    if (number == NULL && (number = PyLong_FromLong(-1)) == NULL) goto done;
    /* no longer on this stack, or moved on: let go of them */
    for (Py_ssize_t i = kept; i < PyList_GET_SIZE(self->chain); i++) {
        PyObject *entry = PyList_GET_ITEM(self->chain, i);
        PyObject *id = PyLong_FromVoidPtr(PyTuple_GET_ITEM(entry, 0));
        if (id == NULL) goto done;
        int gone = PyDict_DelItem(self->place, id);
        Py_DECREF(id);
        if (gone < 0) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError)) goto done;
            PyErr_Clear();
        }
    }
    if (PyList_SetSlice(self->chain, kept, PyList_GET_SIZE(self->chain), NULL) < 0) goto done;
    for (Py_ssize_t i = PyList_GET_SIZE(walked) - 1; i >= 0; i--) { /* outermost first */
        PyFrameObject *walked_frame = (PyFrameObject *)PyList_GET_ITEM(walked, i);
        PyCodeObject *code = PyFrame_GetCode(walked_frame);
        PyObject *instruction = PyLong_FromLong(PyFrame_GetLasti(walked_frame));
        int tool = instruction == NULL ? -1 : is_tool(self, (PyObject *)code);
        PyObject *key = NULL, *id = NULL, *entry = NULL;
        if (tool == 0) { /* the tool's own frames add nothing */
            id = PyLong_FromVoidPtr(code);
            key = id == NULL ? NULL : PyTuple_Pack(3, id, instruction, number);
            PyObject *next = key == NULL ? NULL : PyLong_FromSsize_t(PyDict_GET_SIZE(self->numbers));
            PyObject *numbered = next == NULL ? NULL : PyDict_SetDefault(self->numbers, key, next);
            Py_XDECREF(next);
            Py_XSETREF(id, NULL);
            if (numbered == NULL) tool = -1;
            else Py_SETREF(number, Py_NewRef(numbered));
        }
        Py_DECREF(code);
        Py_XDECREF(key);
        if (tool >= 0) {
            PyObject *position = PyLong_FromSsize_t(PyList_GET_SIZE(self->chain));
            id = position == NULL ? NULL : PyLong_FromVoidPtr(walked_frame);
            if (id == NULL || PyDict_SetItem(self->place, id, position) < 0) tool = -1;
            Py_XDECREF(position);
            Py_XDECREF(id);
        }
        if (tool >= 0) {
            entry = PyTuple_Pack(3, (PyObject *)walked_frame, instruction, number);
            if (entry == NULL || PyList_Append(self->chain, entry) < 0) tool = -1;
            Py_XDECREF(entry);
        }
        Py_XDECREF(instruction);
        if (tool < 0) goto done;
    }
    result = Py_NewRef(number);
done:
    Py_XDECREF(frame);
    Py_XDECREF(walked);
    Py_XDECREF(number);
    return result;
}

/* The cached text of `key`, or StackCapture._cached(key, frame) to make it. */
static PyObject *cached_text(Walker *self, PyObject *key, PyObject *frame) {
    PyObject *text = PyDict_GetItemWithError(self->cache, key);
    if (text != NULL) return Py_NewRef(text);
    if (PyErr_Occurred()) return NULL;
    PyObject *call[] = {key, frame};
    return PyObject_Vectorcall(self->cached, call, 2, NULL);
}

/* walker(skip=1): StackCapture.__call__, from the frame that called this (skip=1) or one further out per step */
static PyObject *walker_vectorcall(Walker *self, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    long skip = 1;
    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "stack capture takes one optional argument, skip");
        return NULL;
    }
    if (nargs == 1 && (skip = PyLong_AsLong(argv[0])) == -1 && PyErr_Occurred()) return NULL;
    PyFrameObject *frame = PyEval_GetFrame();
    Py_XINCREF(frame);
    for (long i = 1; i < skip && frame != NULL; i++) Py_SETREF(frame, PyFrame_GetBack(frame));
    while (frame != NULL) { /* the tool's own frames, skipped */
        PyCodeObject *code = PyFrame_GetCode(frame);
        int tool = is_tool(self, (PyObject *)code);
        Py_DECREF(code);
        if (tool < 0) {
            Py_DECREF(frame);
            return NULL;
        }
        if (!tool) break;
        Py_SETREF(frame, PyFrame_GetBack(frame));
    }
    if (frame == NULL) {
        PyObject *empty = PyTuple_New(0);
        if (empty == NULL) return NULL;
        PyObject *text = cached_text(self, empty, Py_None);
        Py_DECREF(empty);
        return text;
    }
    PyObject *result = NULL, *key = NULL;
    PyCodeObject *code = PyFrame_GetCode(frame);
    PyObject *id = PyLong_FromVoidPtr(code);
    PyObject *instruction = PyLong_FromLong(PyFrame_GetLasti(frame));
    Py_DECREF(code);
    PyObject *number = id == NULL || instruction == NULL ? NULL : number_above(self, PyFrame_GetBack(frame));
    if (number != NULL) key = PyTuple_Pack(3, id, instruction, number);
    if (key != NULL) result = cached_text(self, key, (PyObject *)frame);
    Py_XDECREF(key);
    Py_XDECREF(number);
    Py_XDECREF(instruction);
    Py_XDECREF(id);
    Py_DECREF(frame);
    return result;
}

static PyObject *attribute_of(PyObject *capture, PyObject *name, PyTypeObject *type) {
    PyObject *value = PyObject_GetAttr(capture, name);
    if (value != NULL && type != NULL && !Py_IS_TYPE(value, type)) {
        PyErr_Format(PyExc_TypeError, "StackCapture.%U must be a %s", name, type->tp_name);
        Py_CLEAR(value);
    }
    return value;
}

static int walker_init(Walker *self, PyObject *args, PyObject *kwargs) {
    PyObject *capture;
    if (!PyArg_ParseTuple(args, "O:Walker", &capture)) return -1;
    Py_XSETREF(self->capture, Py_NewRef(capture));
    Py_XSETREF(self->is_tool, attribute_of(capture, s_is_tool, &PyDict_Type));
    Py_XSETREF(self->numbers, attribute_of(capture, s_numbers, &PyDict_Type));
    Py_XSETREF(self->cache, attribute_of(capture, s_cache, &PyDict_Type));
    Py_XSETREF(self->place, attribute_of(capture, s_place, &PyDict_Type));
    Py_XSETREF(self->chain, attribute_of(capture, s_chain, &PyList_Type));
    Py_XSETREF(self->tool, attribute_of(capture, s_tool, NULL));
    Py_XSETREF(self->cached, attribute_of(capture, s_cached, NULL));
    if (!self->is_tool || !self->numbers || !self->cache || !self->place || !self->chain || !self->tool ||
        !self->cached)
        return -1;
    self->vectorcall = (vectorcallfunc)walker_vectorcall;
    return 0;
}

static int walker_traverse(Walker *self, visitproc visit, void *arg) {
    Py_VISIT(self->capture);
    Py_VISIT(self->is_tool);
    Py_VISIT(self->numbers);
    Py_VISIT(self->cache);
    Py_VISIT(self->place);
    Py_VISIT(self->chain);
    Py_VISIT(self->tool);
    Py_VISIT(self->cached);
    return 0;
}

static int walker_clear(Walker *self) {
    Py_CLEAR(self->capture);
    Py_CLEAR(self->is_tool);
    Py_CLEAR(self->numbers);
    Py_CLEAR(self->cache);
    Py_CLEAR(self->place);
    Py_CLEAR(self->chain);
    Py_CLEAR(self->tool);
    Py_CLEAR(self->cached);
    return 0;
}

static void walker_dealloc(Walker *self) {
    PyObject_GC_UnTrack(self);
    walker_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *walker_forget(Walker *self, PyObject *unused) { return PyObject_CallMethodNoArgs(self->capture, s_forget); }

static PyMethodDef walker_methods[] = {
    {"forget", (PyCFunction)walker_forget, METH_NOARGS, "StackCapture.forget: let go of the frames kept."},
    {NULL},
};

static PyMemberDef walker_members[] = {
    {"capture", T_OBJECT, offsetof(Walker, capture), READONLY, "the StackCapture whose state this walker uses"},
    {NULL},
};

static PyTypeObject WalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprobe.core.dump._frames.Walker",
    .tp_basicsize = sizeof(Walker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Walker(capture): capture(skip=1) without Python code per call.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)walker_init,
    .tp_dealloc = (destructor)walker_dealloc,
    .tp_traverse = (traverseproc)walker_traverse,
    .tp_clear = (inquiry)walker_clear,
    .tp_vectorcall_offset = offsetof(Walker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_methods = walker_methods,
    .tp_members = walker_members,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frames",
                                    "Call stacks for stack.json, walked in C (see stack.py).", -1, NULL};

PyMODINIT_FUNC PyInit__frames(void) {
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL;
    INTERN(s_is_tool, "_is_tool")
    INTERN(s_numbers, "_numbers")
    INTERN(s_cache, "_cache")
    INTERN(s_place, "_place")
    INTERN(s_chain, "_chain")
    INTERN(s_tool, "_tool")
    INTERN(s_cached, "_cached")
    INTERN(s_forget, "forget")
#undef INTERN
    if (PyType_Ready(&WalkerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    /* INTERFACE_VERSION: what stack.py expects (bump both together), so a stale build is not used */
    if (PyModule_AddObjectRef(m, "Walker", (PyObject *)&WalkerType) < 0 ||
        PyModule_AddIntConstant(m, "INTERFACE_VERSION", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
#endif
