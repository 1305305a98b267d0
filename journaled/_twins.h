/* Helpers shared by the compiled twins above the format: journaled/core/_coreops.c (the reader
 * core and a reader) and journaled/owner/_putops.c (the plain put).  Each twin first decides from
 * reads that run no Python code, then acts as its reference acts; these are the reads, and the
 * ``with lock:`` exit both need.  Included once per extension (static functions). */
#ifndef JOURNALED_TWINS_H
#define JOURNALED_TWINS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The value of an exact int within int64 in *out; 0 if it is not one (no error set).  Never runs
 * Python code (an int subclass or another type is refused, not converted). */
static int
exact_ll(PyObject *obj, long long *out)
{
    int overflow = 0;
    if (obj == NULL || !PyLong_CheckExact(obj)) {
        return 0;
    }
    *out = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* d[name] as a new reference, or NULL (with no error set) when missing. */
static PyObject *
get(PyObject *d, PyObject *name)
{
    PyObject *v = PyDict_GetItemWithError(d, name);
    if (v == NULL) {
        PyErr_Clear();
        return NULL;
    }
    return Py_NewRef(v);
}

/* A plain slot of an attrs instance (no Python code runs), a new reference; NULL (no error set)
 * when it is unset. */
static PyObject *
slot(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        PyErr_Clear();
    }
    return v;
}

/* lock.<release>() whatever happened before, as ``with`` releases: an exception already raised
 * stays the one raised, unless the release itself fails.  0 or -1. */
static int
release_lock(PyObject *lock, PyObject *release)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *r = PyObject_CallMethodNoArgs(lock, release);
    if (r == NULL) {
        Py_XDECREF(exc);
        return -1;
    }
    PyErr_SetRaisedException(exc);
#else
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *r = PyObject_CallMethodNoArgs(lock, release);
    if (r == NULL) {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        return -1;
    }
    PyErr_Restore(et, ev, tb);
#endif
    Py_DECREF(r);
    return 0;
}

#endif /* JOURNALED_TWINS_H */
