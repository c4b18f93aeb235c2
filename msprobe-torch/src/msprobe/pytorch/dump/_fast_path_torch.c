/* Part of _fast_path.c, which includes it: Small helpers around torch's Python API.
 * (One translation unit: the per-call helpers stay static and inline across the parts.) */

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
        /* a DTensor has no storage: written in place, it writes its shard, whose own version counter does not
         * move, so the write is known by the shard's memory (as _storage_address in tensors.py) */
        PyObject *local = PyObject_GetAttr(tensor, s_local_tensor);
        if (local != NULL) {
            address = storage_address(local);
            Py_DECREF(local);
        }
        if (address == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
            PyErr_Clear();
            return 0;
        }
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
