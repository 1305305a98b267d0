/* The compiled twin of the reader core's hot operations (journaled/core/readercore.py).
 *
 * CoreOps is a base class with three methods, take(), commit(item) and on_put(items, nbytes);
 * core/twin.py derives CompiledReaderCore from it and from ReaderCore, so these shadow the
 * reference's methods of the same names.  Each does the common case here -- the one a steady
 * producer and consumer meet on every call -- and hands every other case, untouched, to the
 * reference's method (given to configure()):
 *
 *   take():   nothing parked, the next item in memory is a plain Item with bytes data, no expiry
 *             and no max_age, below max_errors, no open_read_timeout, and no read-behind refill
 *             due after the pop;
 *   commit(): the very Item this reader handed out for its open read, with bytes data;
 *   on_put(): a list of items whose first is a plain Item, no expiry unseen so far, no blocked get
 *             waiting, and the items fit max_memory (or read-behind is under way: they stay on disk).
 *
 * A fast path first reads everything it decides on, and changes the core only once it knows it
 * will finish; then it makes the very changes the reference makes, in the reference's order
 * (readercore.py's take/_pop_waiting, commit/_settle/_commit_id, on_put).  So the two leave the
 * core in the same state by construction; tests/core/test_core_twin.py drives both with the same
 * random operations and compares every delivery, stats figure and checkpoint byte.
 *
 * The core's attributes are read from and written to its instance dict directly: twin.py checks
 * that no class in the MRO defines one of these names (no property or slot stands in the way).
 * Every value is checked for its exact type (int, bytes, dict, set, deque, Item, ReaderConfig)
 * before it is used; anything else goes to the reference, so no user code runs between the
 * decision and the change except the head_moved() callback, which the reference calls at the same
 * point.  Integers outside int64, or sums that would overflow it, also go to the reference.  The
 * twin holds its own reference to every object it uses across a call that could run Python code.
 * tests/core/test_core_twin_hostile.py feeds it hostile inputs; scripts/sanitize_twins.sh runs
 * both under AddressSanitizer and UBSan.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* What core/twin.py expects: raise it whenever configure()'s arguments or a method's contract
 * change, so a stale build is refused. */
#define ABI_VERSION 1

/* configured once by core/twin.py */
static PyObject *ref_take = NULL, *ref_commit = NULL, *ref_on_put = NULL; /* ReaderCore's methods */
static PyTypeObject *item_type = NULL;                                    /* journaled.item.Item */
static PyTypeObject *config_type = NULL;    /* journaled.config.ReaderConfig */
static PyTypeObject *deque_type = NULL;     /* collections.deque */
static long long item_overhead = -1;        /* readbehind.ITEM_OVERHEAD */

/* interned attribute names */
static PyObject *s_parked, *s_mem, *s_config, *s_load_id, *s_mem_bytes, *s_open, *s_delivered;
static PyObject *s_errors, *s_backlog_bytes, *s_head, *s_done, *s_head_moved, *s_dirty, *s_committed;
static PyObject *s_saw_expiry, *s_waiters, *s_max_memory, *s_max_age, *s_max_errors;
static PyObject *s_open_read_timeout, *s_id, *s_data, *s_expire_at, *s_error_count;
static PyObject *s_popleft, *s_extend;

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

/* The instance dict of a core (a new reference), or NULL with an error set. */
static PyObject *
core_dict(PyObject *self)
{
    PyObject *d = PyObject_GenericGetDict(self, NULL);
    if (d != NULL && !PyDict_CheckExact(d)) {
        Py_DECREF(d);
        PyErr_SetString(PyExc_TypeError, "a reader core's __dict__ must be a dict");
        return NULL;
    }
    return d;
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
    Py_INCREF(v);
    return v;
}

/* A slot of an exact Item or ReaderConfig (plain slots: no Python code runs), new reference. */
static PyObject *
slot(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        PyErr_Clear();
    }
    return v;
}

/* Set d[name] = value (an int made from v); -1 with an error set on failure. */
static int
set_ll(PyObject *d, PyObject *name, long long v)
{
    PyObject *obj = PyLong_FromLongLong(v);
    if (obj == NULL) {
        return -1;
    }
    int rc = PyDict_SetItem(d, name, obj);
    Py_DECREF(obj);
    return rc;
}

static int
configured(void)
{
    if (ref_take == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "journaled.core._coreops is not configured");
        return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------------------------- take() */

/* 1: done (*out is the item, a new reference), 0: not the fast path (nothing changed), -1: error. */
static int
take_fast(PyObject *d, PyObject **out)
{
    int result = 0;
    PyObject *parked = NULL, *mem = NULL, *cfg = NULL, *item = NULL, *data = NULL, *open = NULL;
    PyObject *v = NULL, *id = NULL, *load_id = NULL, *new_mem_bytes = NULL, *new_delivered = NULL;
    long long max_memory, mem_bytes, delivered, error_count, max_errors;
    Py_ssize_t n;

    parked = get(d, s_parked);
    if (parked == NULL || !PyDict_Check(parked) || PyDict_GET_SIZE(parked) != 0) {
        goto done; /* a dict subclass (retry.Parked): its size is the dict's own */
    }
    mem = get(d, s_mem);
    if (mem == NULL || !Py_IS_TYPE(mem, deque_type) || (n = PyObject_Size(mem)) <= 0) {
        goto done;
    }
    cfg = get(d, s_config);
    if (cfg == NULL || !Py_IS_TYPE(cfg, config_type)) {
        goto done;
    }
    if ((v = slot(cfg, s_open_read_timeout)) == NULL || v != Py_None) {
        goto done;
    }
    Py_CLEAR(v);
    if ((v = slot(cfg, s_max_age)) == NULL || v != Py_None) {
        goto done;
    }
    Py_CLEAR(v);
    if ((v = slot(cfg, s_max_memory)) == NULL || !exact_ll(v, &max_memory)) {
        goto done;
    }
    Py_CLEAR(v);
    item = PySequence_GetItem(mem, 0); /* deque's own item access */
    if (item == NULL) {
        PyErr_Clear();
        goto done;
    }
    if (!Py_IS_TYPE(item, item_type)) {
        goto done;
    }
    if ((v = slot(item, s_expire_at)) == NULL || v != Py_None) {
        goto done;
    }
    Py_CLEAR(v);
    if ((data = slot(item, s_data)) == NULL || !PyBytes_CheckExact(data)) {
        goto done;
    }
    if ((id = slot(item, s_id)) == NULL || !PyLong_CheckExact(id)) {
        goto done;
    }
    if ((v = slot(cfg, s_max_errors)) == NULL) {
        goto done;
    }
    if (v != Py_None) {
        PyObject *ec = slot(item, s_error_count);
        int ok = exact_ll(v, &max_errors) && exact_ll(ec, &error_count);
        Py_XDECREF(ec);
        if (!ok || error_count >= max_errors) {
            goto done; /* to the dead letters: the reference's business */
        }
    }
    Py_CLEAR(v);
    if (!exact_ll(v = get(d, s_mem_bytes), &mem_bytes)) {
        goto done;
    }
    Py_CLEAR(v);
    if (!exact_ll(v = get(d, s_delivered), &delivered) || delivered == LLONG_MAX) {
        goto done;
    }
    Py_CLEAR(v);
    open = get(d, s_open);
    if (open == NULL || !PyDict_CheckExact(open)) {
        goto done;
    }
    long long size = (long long)PyBytes_GET_SIZE(data), after, charged;
    if (__builtin_sub_overflow(mem_bytes, size, &after)) {
        goto done;
    }
    load_id = get(d, s_load_id);
    if (load_id == NULL) {
        goto done;
    }
    if (load_id != Py_None) {
        /* _pop_waiting refills once memory is down to half its bound: the reference does that */
        if (__builtin_mul_overflow((long long)(n - 1), item_overhead, &charged) ||
            __builtin_add_overflow(charged, after, &charged) || max_memory < 0 || charged <= max_memory / 2) {
            goto done;
        }
    }
    /* Decided: make the reference's changes.  New ints first, so nothing below can fail half way
     * (but the dict insert, which may need memory: then the item goes back where it was). */
    if ((new_mem_bytes = PyLong_FromLongLong(after)) == NULL ||
        (new_delivered = PyLong_FromLongLong(delivered + 1)) == NULL) {
        result = -1;
        goto done;
    }
    PyObject *popped = PyObject_CallMethodNoArgs(mem, s_popleft);
    if (popped == NULL) {
        result = -1;
        goto done;
    }
    Py_DECREF(popped); /* the very object `item` holds: nothing else ran since it was read */
    if (PyDict_SetItem(d, s_mem_bytes, new_mem_bytes) < 0 || PyDict_SetItem(open, id, item) < 0 ||
        PyDict_SetItem(d, s_delivered, new_delivered) < 0) {
        result = -1;
        goto done;
    }
    *out = item;
    item = NULL;
    result = 1;
done:
    Py_XDECREF(parked);
    Py_XDECREF(mem);
    Py_XDECREF(cfg);
    Py_XDECREF(item);
    Py_XDECREF(data);
    Py_XDECREF(open);
    Py_XDECREF(v);
    Py_XDECREF(id);
    Py_XDECREF(load_id);
    Py_XDECREF(new_mem_bytes);
    Py_XDECREF(new_delivered);
    return result;
}

static PyObject *
core_take(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!configured()) {
        return NULL;
    }
    PyObject *d = core_dict(self);
    if (d == NULL) {
        return NULL;
    }
    PyObject *item = NULL;
    int rc = take_fast(d, &item);
    Py_DECREF(d);
    if (rc < 0) {
        return NULL;
    }
    if (rc > 0) {
        return item;
    }
    return PyObject_CallOneArg(ref_take, self);
}

/* -------------------------------------------------------------------------------- commit() */

/* 1: done, 0: not the fast path (nothing changed), -1: error (as the reference would raise it). */
static int
commit_fast(PyObject *self, PyObject *d, PyObject *item)
{
    int result = 0;
    PyObject *open = NULL, *id = NULL, *data = NULL, *errors = NULL, *done = NULL, *v = NULL;
    PyObject *head_moved = NULL, *new_backlog = NULL, *key = NULL;
    long long item_id, head, backlog, committed, new_head;

    if (!Py_IS_TYPE(item, item_type)) {
        return 0;
    }
    open = get(d, s_open);
    if (open == NULL || !PyDict_CheckExact(open)) {
        goto out;
    }
    if ((id = slot(item, s_id)) == NULL || !exact_ll(id, &item_id)) {
        goto out;
    }
    PyObject *current = PyDict_GetItemWithError(open, id); /* an exact int key: no Python code */
    if (current != item) {
        PyErr_Clear();
        goto out; /* not this reader's open read: open_read() raises the reference's error */
    }
    if ((data = slot(item, s_data)) == NULL || !PyBytes_CheckExact(data)) {
        goto out;
    }
    errors = get(d, s_errors);
    done = get(d, s_done);
    if (errors == NULL || !PyDict_CheckExact(errors) || done == NULL || !PySet_CheckExact(done)) {
        goto out;
    }
    if (!exact_ll(v = get(d, s_head), &head)) {
        goto out;
    }
    Py_CLEAR(v);
    if (!exact_ll(v = get(d, s_backlog_bytes), &backlog)) {
        goto out;
    }
    Py_CLEAR(v);
    if (!exact_ll(v = get(d, s_committed), &committed) || committed == LLONG_MAX) {
        goto out;
    }
    Py_CLEAR(v);
    if (item_id == head && (head_moved = get(d, s_head_moved)) == NULL) {
        goto out;
    }
    /* max(0, backlog - len(data)), as _settle keeps it */
    long long left;
    if (__builtin_sub_overflow(backlog, (long long)PyBytes_GET_SIZE(data), &left)) {
        goto out;
    }
    if ((new_backlog = PyLong_FromLongLong(left > 0 ? left : 0)) == NULL) {
        result = -1;
        goto out;
    }
    /* Decided.  commit: del open[id]; _settle: errors.pop(id), backlog; _commit_id. */
    if (PyDict_DelItem(open, id) < 0) {
        result = -1;
        goto out;
    }
    result = -1; /* from here on a failure is an error, as it would be in the reference */
    PyObject *had = PyDict_GetItemWithError(errors, id);
    if (had != NULL && PyDict_DelItem(errors, id) < 0) {
        goto out;
    }
    if (had == NULL && PyErr_Occurred()) {
        goto out;
    }
    if (PyDict_SetItem(d, s_backlog_bytes, new_backlog) < 0) {
        goto out;
    }
    if (item_id == head) {
        new_head = head + 1;
        for (;;) {
            if (new_head == LLONG_MAX) {
                break; /* no id reaches it; the set cannot hold it as an int64 either */
            }
            key = PyLong_FromLongLong(new_head);
            if (key == NULL) {
                goto out;
            }
            int found = PySet_Discard(done, key);
            Py_CLEAR(key);
            if (found < 0) {
                goto out;
            }
            if (!found) {
                break;
            }
            new_head += 1;
        }
        if (set_ll(d, s_head, new_head) < 0) {
            goto out;
        }
        v = PyObject_CallNoArgs(head_moved);
        if (v == NULL) {
            goto out;
        }
        Py_CLEAR(v);
    }
    else if (item_id > head) {
        if (PySet_Add(done, id) < 0) {
            goto out;
        }
    }
    if (PyDict_SetItem(d, s_dirty, Py_True) < 0) {
        goto out;
    }
    /* committed += 1, read again: head_moved() ran Python code */
    if (!exact_ll(v = get(d, s_committed), &committed) || committed == LLONG_MAX) {
        Py_CLEAR(v);
        v = PyObject_GetAttr(self, s_committed); /* then as the reference's ``+= 1`` does it */
        PyObject *one = PyLong_FromLong(1), *sum = NULL;
        if (v == NULL || one == NULL || (sum = PyNumber_Add(v, one)) == NULL) {
            Py_XDECREF(one);
            goto out;
        }
        Py_DECREF(one);
        int rc = PyObject_SetAttr(self, s_committed, sum);
        Py_DECREF(sum);
        if (rc < 0) {
            goto out;
        }
    }
    else if (set_ll(d, s_committed, committed + 1) < 0) {
        goto out;
    }
    result = 1;
out:
    Py_XDECREF(open);
    Py_XDECREF(id);
    Py_XDECREF(data);
    Py_XDECREF(errors);
    Py_XDECREF(done);
    Py_XDECREF(v);
    Py_XDECREF(head_moved);
    Py_XDECREF(new_backlog);
    Py_XDECREF(key);
    return result;
}

static PyObject *
core_commit(PyObject *self, PyObject *item)
{
    if (!configured()) {
        return NULL;
    }
    PyObject *d = core_dict(self);
    if (d == NULL) {
        return NULL;
    }
    Py_INCREF(item);
    int rc = commit_fast(self, d, item);
    Py_DECREF(item);
    Py_DECREF(d);
    if (rc < 0) {
        return NULL;
    }
    if (rc > 0) {
        Py_RETURN_NONE;
    }
    return PyObject_CallFunctionObjArgs(ref_commit, self, item, NULL);
}

/* -------------------------------------------------------------------------------- on_put() */

static int
on_put_fast(PyObject *d, PyObject *items, PyObject *nbytes_obj)
{
    int result = 0;
    PyObject *first = NULL, *v = NULL, *mem = NULL, *cfg = NULL, *waiters = NULL;
    PyObject *new_backlog = NULL, *new_mem_bytes = NULL, *copy = NULL;
    long long nbytes, backlog, mem_bytes, max_memory, cost, extra;
    Py_ssize_t n, m, w;

    if (!PyList_CheckExact(items) || (n = PyList_GET_SIZE(items)) == 0 || !exact_ll(nbytes_obj, &nbytes)) {
        return 0;
    }
    first = PyList_GET_ITEM(items, 0);
    Py_INCREF(first);
    if (!Py_IS_TYPE(first, item_type)) {
        goto out; /* metadata: not-yet-due items are parked by the reference */
    }
    if ((v = slot(first, s_expire_at)) == NULL) {
        goto out;
    }
    if (v != Py_None) {
        Py_CLEAR(v);
        v = get(d, s_saw_expiry);
        if (v != Py_True) {
            goto out; /* the first expiring item starts the expiry sweep */
        }
    }
    Py_CLEAR(v);
    if ((v = get(d, s_load_id)) == NULL) {
        goto out;
    }
    int behind = v != Py_None; /* read-behind: new items stay on disk, only the backlog grows */
    Py_CLEAR(v);
    waiters = get(d, s_waiters);
    if (waiters == NULL || !Py_IS_TYPE(waiters, deque_type) || (w = PyObject_Size(waiters)) != 0) {
        PyErr_Clear();
        goto out; /* blocked gets are served by the reference's hand-off */
    }
    mem = get(d, s_mem);
    if (mem == NULL || !Py_IS_TYPE(mem, deque_type) || (m = PyObject_Size(mem)) < 0) {
        PyErr_Clear();
        goto out;
    }
    cfg = get(d, s_config);
    if (cfg == NULL || !Py_IS_TYPE(cfg, config_type)) {
        goto out;
    }
    if ((v = slot(cfg, s_max_memory)) == NULL || !exact_ll(v, &max_memory)) {
        goto out;
    }
    Py_CLEAR(v);
    if (!exact_ll(v = get(d, s_backlog_bytes), &backlog)) {
        goto out;
    }
    Py_CLEAR(v);
    if (!exact_ll(v = get(d, s_mem_bytes), &mem_bytes)) {
        goto out;
    }
    Py_CLEAR(v);
    /* mem_bytes + nbytes + (len(mem) + len(items)) * ITEM_OVERHEAD <= max_memory */
    if (behind) {
        long long nb;
        if (__builtin_add_overflow(backlog, nbytes, &nb)) {
            goto out;
        }
        result = set_ll(d, s_backlog_bytes, nb) < 0 ? -1 : 1;
        goto out;
    }
    if (__builtin_add_overflow(mem_bytes, nbytes, &cost) ||
        __builtin_mul_overflow((long long)m + (long long)n, item_overhead, &extra) ||
        __builtin_add_overflow(cost, extra, &cost) || cost > max_memory) {
        goto out; /* the switch to read-behind is the reference's business */
    }
    long long nb, mb;
    if (__builtin_add_overflow(backlog, nbytes, &nb) || __builtin_add_overflow(mem_bytes, nbytes, &mb)) {
        goto out;
    }
    if ((new_backlog = PyLong_FromLongLong(nb)) == NULL || (new_mem_bytes = PyLong_FromLongLong(mb)) == NULL) {
        result = -1;
        goto out;
    }
    /* Decided: backlog_bytes += nbytes; mem.extend(items); mem_bytes += nbytes.  The list is
     * copied first so that the extend sees exactly the items decided on. */
    result = -1;
    if ((copy = PyList_GetSlice(items, 0, n)) == NULL) {
        goto out;
    }
    if (PyDict_SetItem(d, s_backlog_bytes, new_backlog) < 0) {
        goto out;
    }
    if ((v = PyObject_CallMethodOneArg(mem, s_extend, copy)) == NULL) {
        goto out;
    }
    Py_CLEAR(v);
    if (PyDict_SetItem(d, s_mem_bytes, new_mem_bytes) < 0) {
        goto out;
    }
    result = 1;
out:
    Py_XDECREF(first);
    Py_XDECREF(v);
    Py_XDECREF(mem);
    Py_XDECREF(cfg);
    Py_XDECREF(waiters);
    Py_XDECREF(new_backlog);
    Py_XDECREF(new_mem_bytes);
    Py_XDECREF(copy);
    return result;
}

static PyObject *
core_on_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!configured()) {
        return NULL;
    }
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "on_put() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *d = core_dict(self);
    if (d == NULL) {
        return NULL;
    }
    PyObject *items = args[0], *nbytes = args[1];
    Py_INCREF(items);
    Py_INCREF(nbytes);
    int rc = on_put_fast(d, items, nbytes);
    Py_DECREF(d);
    PyObject *res = NULL;
    if (rc > 0) {
        res = Py_NewRef(Py_None);
    }
    else if (rc == 0) {
        res = PyObject_CallFunctionObjArgs(ref_on_put, self, items, nbytes, NULL);
    }
    Py_DECREF(items);
    Py_DECREF(nbytes);
    return res;
}

/* ---------------------------------------------------------------------------- the module */

static PyMethodDef coreops_methods[] = {
    {"take", (PyCFunction)core_take, METH_NOARGS,
     "take() -> Item | None: ReaderCore.take, its common case compiled (the rest: the reference)."},
    {"commit", (PyCFunction)core_commit, METH_O,
     "commit(item): ReaderCore.commit, its common case compiled (the rest: the reference)."},
    {"on_put", (PyCFunction)(void (*)(void))core_on_put, METH_FASTCALL,
     "on_put(items, nbytes): ReaderCore.on_put, its common case compiled (the rest: the reference)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreOpsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "journaled.core._coreops.CoreOps",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The compiled hot operations of a reader core: a base of core/twin.py's CompiledReaderCore.",
    .tp_methods = coreops_methods,
    .tp_new = PyType_GenericNew,
};

static int
replace(PyObject **slot_, PyObject *value)
{
    /* configuration objects are never released: a method running on another thread may be
     * using the old one; configuring happens once per process */
    Py_INCREF(value);
    *slot_ = value;
    return 0;
}

static PyObject *
configure(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"take", "commit", "on_put", "item_type", "config_type", "deque_type", "overhead",
                             NULL};
    PyObject *take, *commit, *on_put, *itype, *ctype, *dtype;
    long long overhead;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOOO!O!O!L", kwlist, &take, &commit, &on_put,
                                     &PyType_Type, &itype, &PyType_Type, &ctype, &PyType_Type, &dtype,
                                     &overhead)) {
        return NULL;
    }
    if (!PyCallable_Check(take) || !PyCallable_Check(commit) || !PyCallable_Check(on_put)) {
        PyErr_SetString(PyExc_TypeError, "configure(): take, commit and on_put must be callables");
        return NULL;
    }
    if (overhead < 0 || overhead > (1LL << 40)) {
        PyErr_SetString(PyExc_ValueError, "configure(): overhead out of range");
        return NULL;
    }
    replace(&ref_take, take);
    replace(&ref_commit, commit);
    replace(&ref_on_put, on_put);
    replace((PyObject **)&item_type, itype);
    replace((PyObject **)&config_type, ctype);
    replace((PyObject **)&deque_type, dtype);
    item_overhead = overhead;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(*, take, commit, on_put, item_type, config_type, deque_type, overhead): the "
     "references (ReaderCore's methods) and the types the fast paths accept."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "journaled.core._coreops",
    "The compiled twin of the reader core's hot operations (see core/twin.py).", -1, module_methods,
};

#define INTERN(var, text)                                                                                    \
    do {                                                                                                     \
        if ((var = PyUnicode_InternFromString(text)) == NULL) {                                              \
            return NULL;                                                                                     \
        }                                                                                                    \
    } while (0)

PyMODINIT_FUNC
PyInit__coreops(void)
{
    INTERN(s_parked, "parked");
    INTERN(s_mem, "mem");
    INTERN(s_config, "config");
    INTERN(s_load_id, "load_id");
    INTERN(s_mem_bytes, "mem_bytes");
    INTERN(s_open, "open");
    INTERN(s_delivered, "delivered");
    INTERN(s_errors, "errors");
    INTERN(s_backlog_bytes, "backlog_bytes");
    INTERN(s_head, "head");
    INTERN(s_done, "done");
    INTERN(s_head_moved, "head_moved");
    INTERN(s_dirty, "dirty");
    INTERN(s_committed, "committed");
    INTERN(s_saw_expiry, "saw_expiry");
    INTERN(s_waiters, "waiters");
    INTERN(s_max_memory, "max_memory");
    INTERN(s_max_age, "max_age");
    INTERN(s_max_errors, "max_errors");
    INTERN(s_open_read_timeout, "open_read_timeout");
    INTERN(s_id, "id");
    INTERN(s_data, "data");
    INTERN(s_expire_at, "expire_at");
    INTERN(s_error_count, "error_count");
    INTERN(s_popleft, "popleft");
    INTERN(s_extend, "extend");
    if (PyType_Ready(&CoreOpsType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION) < 0 ||
        PyModule_AddObjectRef(m, "CoreOps", (PyObject *)&CoreOpsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
