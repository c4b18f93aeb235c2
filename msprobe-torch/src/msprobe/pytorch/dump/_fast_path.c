/* The PyTorch dump's per-call path in C.
 *
 * Every recorded API call takes this path where the run's entries allow it
 * (see fast_path.py): in Python the bookkeeping of each call cost several times
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
 *   FastPath      - the handler the API wrappers call: handler(original, key,
 *               args, kwargs), as the Python recorder's _call_api.
 *
 * With device statistics waiting in a batch (device_batch.py), a tensor's summary text holds a token
 * (\x01{n}\x02, see msprobe/core/dump/waiting.py) for values still on the device: an entry holding one goes to
 * the writer's add_waiting, which fills it in when the batch is read back.
 *
 * The statistics come from msprobe-core's kernels, through the capsule
 * msprobe.core.dump._kernels._C_API, and each entry goes into the step's
 * files through msprobe-core's C add_journaled (msprobe.core.dump._journal's
 * capsule): this file reads none of core's private state.
 *
 * The file is split along its sections into the _fast_path_*.c parts it includes
 * below (text buffer, torch helpers, summaries, entries, the call), compiled
 * as one extension.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* msprobe-core's kernel table (see _kernels.c there): the statistics from version 1, the screen from 2, the
 * statistics with the sums that merge shards from 3 */
typedef struct {
    int version;
    int (*float_stats)(const void *data, Py_ssize_t n, char kind, double out[4]);
    int (*any_nonfinite)(const void *data, Py_ssize_t n, char kind);
    int (*float_stats_sums)(const void *data, Py_ssize_t n, char kind, double out[6]);
} KernelsAPI;

/* msprobe-core's DumpWriter.add_journaled in C (see _journal.c there), version 1: 1 when the entry is stored and
 * journaled, 0 when the writer's add_journaled must do it, -1 for an error that is no Exception */
typedef struct {
    int version;
    int (*add_journaled)(PyObject *writer, PyObject *name, PyObject *name_text, PyObject *text, PyObject *stack_text,
                         PyObject *parent_text);
} JournalAPI;

#define FAST_PATH_INTERFACE_VERSION 5 /* see INTERFACE in PyInit__fast_path */

static PyObject *one; /* the int 1 */
static PyObject *s_version, *s_data_ptr, *s_dtype, *s_shape, *s_requires_grad, *s_is_cpu, *s_is_neg,
    *s_is_contiguous, *s_stride, *s_untyped_storage, *s_busy, *s_count, *s_written_at, *s_out, *s_inplace, *s_writer,
    *s_open_step, *s_add_journaled, *s_add_waiting, *s_limit, *s_grad_fn, *s_register_hook, *s_acquire, *s_release,
    *s_local_tensor;

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

/* The parts, in order: each uses what the ones before it define. */
#include "_fast_path_text.c"
#include "_fast_path_torch.c"
#include "_fast_path_summaries.c"
#include "_fast_path_entries.c"
#include "_fast_path_call.c"

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

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast_path",
                                    "The PyTorch dump's per-call path in C (see msprobe/pytorch/dump/fast_path.py).", -1,
                                    module_methods};

PyMODINIT_FUNC PyInit__fast_path(void) {
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
    INTERN(s_add_waiting, "add_waiting")
    INTERN(s_limit, "limit")
    INTERN(s_grad_fn, "grad_fn")
    INTERN(s_local_tensor, "_local_tensor")
    INTERN(s_register_hook, "register_hook")
#undef INTERN
    if ((one = PyLong_FromLong(1)) == NULL) return NULL;
    if (PyType_Ready(&CachedType) < 0 || PyType_Ready(&SummariesType) < 0 || PyType_Ready(&FastPathType) < 0 ||
        PyType_Ready(&ScreenFirstType) < 0)
        return NULL;
    PyObject *created = PyModule_Create(&module);
    if (created == NULL) return NULL;
    /* The recorder's state this file reads and writes by attribute name, by owner: fast_path.py checks the objects
     * against it before the fast path is used, so a rename on the Python side turns the fast path off with a message
     * instead of changing what it does.  Bump INTERFACE_VERSION with any change here. */
    PyObject *interface = Py_BuildValue("{s:(s),s:(ss),s:(ss),s:(ss),s:(ss)}", "state", "busy", "log", "count",
                                        "written_at", "overflow", "count", "limit", "collector", "writer",
                                        "open_step", "writer", "add_journaled", "add_waiting");
    if (interface == NULL || PyModule_AddObjectRef(created, "Summaries", (PyObject *)&SummariesType) < 0 ||
        PyModule_AddObjectRef(created, "FastPath", (PyObject *)&FastPathType) < 0 ||
        PyModule_AddIntConstant(created, "INTERFACE_VERSION", FAST_PATH_INTERFACE_VERSION) < 0 ||
        PyModule_AddObjectRef(created, "INTERFACE", interface) < 0) {
        Py_XDECREF(interface);
        Py_DECREF(created);
        return NULL;
    }
    Py_DECREF(interface);
    return created;
}
