/* Putting wrappers on a class's attributes, and the originals back, in one C loop each.
 *
 * A dump starts and stops every training step, and each time some six
 * hundred attributes of torch.Tensor change (the API wrappers and the
 * watchers of in-place writes).  The rule is msprobe/core/api_patch.py's
 * (_OwnerPatches), which stays the Python fallback: an attribute is replaced
 * only where it still holds the original (someone else's replacement is left
 * alone), a read-only one is skipped, and on removal an attribute the class
 * held itself gets its original back while an inherited one is deleted, so
 * the base class's shows through again.  Here the loop costs no interpreter
 * time per attribute; setattr and delattr themselves (type slots, the method
 * cache) cost what they cost.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define INTERFACE_VERSION 1 /* what its Python wrapper expects: bump both together */

/* install(owner, originals: dict, wrappers: dict) -> applied: dict (attribute -> original) */
static PyObject *install(PyObject *self, PyObject *args) {
    PyObject *owner, *originals, *wrappers;
    if (!PyArg_ParseTuple(args, "OO!O!", &owner, &PyDict_Type, &originals, &PyDict_Type, &wrappers)) return NULL;
    PyObject *present = PyList_New(0), *applied = PyDict_New();
    if (present == NULL || applied == NULL) goto fail;
    Py_ssize_t position = 0;
    PyObject *name, *original;
    /* looked up first, all of them, then set: Python invalidates the class's method cache once, not per attribute */
    while (PyDict_Next(originals, &position, &name, &original)) {
        PyObject *current = PyObject_GetAttr(owner, name);
        if (current == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) goto fail;
            PyErr_Clear();
            continue;
        }
        int same = current == original;
        Py_DECREF(current);
        if (same && PyList_Append(present, name) < 0) goto fail;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(present); i++) {
        name = PyList_GET_ITEM(present, i);
        PyObject *wrapper = PyDict_GetItemWithError(wrappers, name);
        if (wrapper == NULL) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, name);
            goto fail;
        }
        if (PyObject_SetAttr(owner, name, wrapper) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError) && !PyErr_ExceptionMatches(PyExc_TypeError)) goto fail;
            PyErr_Clear(); /* a read-only attribute */
            continue;
        }
        if (PyDict_SetItem(applied, name, PyDict_GetItem(originals, name)) < 0) goto fail;
    }
    Py_DECREF(present);
    return applied;
fail:
    Py_XDECREF(present);
    Py_XDECREF(applied);
    return NULL;
}

/* remove(owner, applied: dict, owned: set) */
static PyObject *remove_attributes(PyObject *self, PyObject *args) {
    PyObject *owner, *applied, *owned;
    if (!PyArg_ParseTuple(args, "OO!O!", &owner, &PyDict_Type, &applied, &PySet_Type, &owned)) return NULL;
    Py_ssize_t position = 0;
    PyObject *name, *original;
    while (PyDict_Next(applied, &position, &name, &original)) {
        int held = PySet_Contains(owned, name);
        if (held < 0) return NULL;
        if (!held) {
            if (PyObject_DelAttr(owner, name) == 0) continue;
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
            PyErr_Clear(); /* no longer there to delete: the original goes back instead */
        }
        if (PyObject_SetAttr(owner, name, original) < 0) return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"install", install, METH_VARARGS,
     "install(owner, originals, wrappers) -> applied: each wrapper on the attribute still holding its original."},
    {"remove", remove_attributes, METH_VARARGS,
     "remove(owner, applied, owned): the originals back (set where owned, else deleted to show the inherited one)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_attributes",
                                    "Wrappers on a class's attributes and off again (see msprobe/core/api_patch.py).",
                                    -1, methods};

/* The module with INTERFACE_VERSION set: its Python wrapper checks it, so a build left from an older checkout
 * is not used with newer Python (the wrapper's Python twin runs instead). */
static PyObject *with_interface(PyObject *created) {
    if (created != NULL && PyModule_AddIntConstant(created, "INTERFACE_VERSION", INTERFACE_VERSION) < 0)
        Py_CLEAR(created);
    return created;
}

PyMODINIT_FUNC PyInit__attributes(void) { return with_interface(PyModule_Create(&module)); }
