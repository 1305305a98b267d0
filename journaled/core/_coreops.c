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

#include "../_twins.h"

/* What core/twin.py expects: raise it whenever configure()'s arguments or a method's contract
 * change, so a stale build is refused. */
#define ABI_VERSION 2

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
static PyObject *s_popleft, *s_extend, *s_get, *s_pop, *s_remove, *s_add, *s_open_read;

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

static int
configured(void)
{
    if (ref_take == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "journaled.core._coreops is not configured");
        return 0;
    }
    return 1;
}

/* The effects are made as the reference makes them: each attribute read from the core at the point
 * the reference reads it (through getattr, so a __dict__ replaced meanwhile is the one used), each
 * container changed with the C call that is that container method (dict.get is
 * PyDict_GetItemWithError on an exact dict, ``in`` PySequence_Contains, ``+=`` PyNumber_InPlaceAdd),
 * or with the method itself where no such call exists (dict.pop with a default, set.remove).  Only
 * the decision -- is this the common case? -- is taken up front, from reads that run no Python code
 * (attributes of an instance without descriptors, exact builtin containers, plain slots). */

/* self.<name>, read as getattr reads it: core/twin.py checked that no class of the core defines
 * these names, so it is the instance dict's entry (taken fresh: code may have replaced __dict__);
 * a missing one is left to getattr, for its error. */
static PyObject *
aget(PyObject *self, PyObject *name)
{
    PyObject *d = PyObject_GenericGetDict(self, NULL);
    if (d == NULL) {
        return NULL;
    }
    PyObject *v = PyDict_CheckExact(d) ? PyDict_GetItemWithError(d, name) : NULL;
    Py_XINCREF(v);
    Py_DECREF(d);
    if (v == NULL && !PyErr_Occurred()) {
        return PyObject_GetAttr(self, name);
    }
    return v;
}

/* self.<name> = value, as setattr does it for an attribute no class defines. */
static int
aset(PyObject *self, PyObject *name, PyObject *value)
{
    PyObject *d = PyObject_GenericGetDict(self, NULL);
    if (d == NULL) {
        return -1;
    }
    int rc = PyDict_CheckExact(d) ? PyDict_SetItem(d, name, value) : PyObject_SetAttr(self, name, value);
    Py_DECREF(d);
    return rc;
}

/* self.<name> += by (by a new or borrowed int); 0 or -1 with the error set. */
static int
iadd(PyObject *self, PyObject *name, PyObject *by)
{
    PyObject *v = aget(self, name);
    if (v == NULL) {
        return -1;
    }
    PyObject *sum = PyNumber_InPlaceAdd(v, by);
    Py_DECREF(v);
    if (sum == NULL) {
        return -1;
    }
    int rc = aset(self, name, sum);
    Py_DECREF(sum);
    return rc;
}

/* self.<name> -= by; 0 or -1 with the error set. */
static int
isub(PyObject *self, PyObject *name, PyObject *by)
{
    PyObject *v = aget(self, name);
    if (v == NULL) {
        return -1;
    }
    PyObject *diff = PyNumber_InPlaceSubtract(v, by);
    Py_DECREF(v);
    if (diff == NULL) {
        return -1;
    }
    int rc = aset(self, name, diff);
    Py_DECREF(diff);
    return rc;
}

static PyObject *one_obj, *zero_obj;

/* ---------------------------------------------------------------------------------- take() */

/* Is this take the common case?  1 yes (the item at the head is *out, a new reference), 0 no.
 * Reads only, running no Python code. */
static int
take_decide(PyObject *d, PyObject **out)
{
    int result = 0;
    PyObject *parked = NULL, *mem = NULL, *cfg = NULL, *item = NULL, *data = NULL, *v = NULL;
    long long max_memory, mem_bytes, error_count, max_errors, charged, after;
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
    if ((v = slot(cfg, s_max_memory)) == NULL || !exact_ll(v, &max_memory) || max_memory < 0) {
        goto done;
    }
    Py_CLEAR(v);
    if ((item = PySequence_GetItem(mem, 0)) == NULL) { /* deque's own item access */
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
    if ((v = slot(item, s_id)) == NULL || !PyLong_CheckExact(v)) {
        goto done;
    }
    Py_CLEAR(v);
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
    if (!exact_ll(v = get(d, s_mem_bytes), &mem_bytes) ||
        __builtin_sub_overflow(mem_bytes, (long long)PyBytes_GET_SIZE(data), &after)) {
        goto done;
    }
    Py_CLEAR(v);
    if (!exact_ll(v = get(d, s_delivered), &charged)) { /* ``+= 1`` on an int: no Python code */
        goto done;
    }
    Py_CLEAR(v);
    if ((v = get(d, s_load_id)) == NULL) {
        goto done;
    }
    if (v != Py_None) {
        /* _pop_waiting refills once memory is down to half its bound: the reference does that */
        if (__builtin_mul_overflow((long long)(n - 1), item_overhead, &charged) ||
            __builtin_add_overflow(charged, after, &charged) || charged <= max_memory / 2) {
            goto done;
        }
    }
    if ((v = get(d, s_open)) == NULL || !PyDict_CheckExact(v)) {
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
    Py_XDECREF(v);
    return result;
}

/* take()'s common case: _pop_waiting's pop, then ``self.open[item.id] = item; self.delivered += 1``. */
static PyObject *
take_do(PyObject *self, PyObject *item)
{
    PyObject *mem = NULL, *popped = NULL, *data = NULL, *size = NULL, *open = NULL, *id = NULL;
    PyObject *result = NULL;
    if ((mem = aget(self, s_mem)) == NULL || (popped = PyObject_CallMethodNoArgs(mem, s_popleft)) == NULL) {
        goto out;
    }
    /* popped is item: nothing ran between the decision and the pop */
    if ((data = PyObject_GetAttr(popped, s_data)) == NULL || (size = PyLong_FromSsize_t(PyObject_Size(data))) == NULL) {
        goto out;
    }
    if (isub(self, s_mem_bytes, size) < 0) { /* self.mem_bytes -= len(item.data) */
        goto out;
    }
    if ((open = aget(self, s_open)) == NULL || (id = PyObject_GetAttr(popped, s_id)) == NULL ||
        PyObject_SetItem(open, id, popped) < 0) {
        goto out;
    }
    if (iadd(self, s_delivered, one_obj) < 0) {
        goto out;
    }
    result = Py_NewRef(popped);
out:
    (void)item;
    Py_XDECREF(mem);
    Py_XDECREF(popped);
    Py_XDECREF(data);
    Py_XDECREF(size);
    Py_XDECREF(open);
    Py_XDECREF(id);
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
    int common = take_decide(d, &item);
    Py_DECREF(d);
    if (!common) {
        return PyObject_CallOneArg(ref_take, self);
    }
    PyObject *result = take_do(self, item);
    Py_DECREF(item);
    return result;
}

/* -------------------------------------------------------------------------------- commit() */

/* commit(item) for an Item handed out by this reader, step by step as commit, _settle and
 * _commit_id do it. */
static PyObject *
commit_do(PyObject *self, PyObject *item)
{
    PyObject *open = NULL, *id = NULL, *current = NULL, *v = NULL, *errors = NULL, *data = NULL;
    PyObject *diff = NULL, *head = NULL, *done = NULL, *result = NULL;
    int rc;

    /* current = self.open.get(item.id); if current is None or current is not item: open_read */
    if ((open = aget(self, s_open)) == NULL || (id = PyObject_GetAttr(item, s_id)) == NULL) {
        goto out;
    }
    if (PyDict_CheckExact(open)) {
        current = PyDict_GetItemWithError(open, id);
        Py_XINCREF(current);
        if (current == NULL && PyErr_Occurred()) {
            goto out;
        }
    }
    else if ((current = PyObject_CallMethodObjArgs(open, s_get, id, NULL)) == NULL) {
        goto out;
    }
    if (current == NULL || current == Py_None || current != item) {
        Py_XDECREF(current);
        if ((current = PyObject_CallMethodOneArg(self, s_open_read, item)) == NULL) {
            goto out;
        }
    }
    Py_CLEAR(open);
    Py_CLEAR(id);
    /* del self.open[current.id] */
    if ((open = aget(self, s_open)) == NULL || (id = PyObject_GetAttr(current, s_id)) == NULL ||
        PyObject_DelItem(open, id) < 0) {
        goto out;
    }
    Py_CLEAR(id);
    /* _settle(current): self.errors.pop(item.id, None) */
    if ((errors = aget(self, s_errors)) == NULL || (id = PyObject_GetAttr(current, s_id)) == NULL) {
        goto out;
    }
    if (!(PyDict_CheckExact(errors) && PyDict_GET_SIZE(errors) == 0 && PyLong_CheckExact(id))) {
        /* (popping an int from an empty dict runs nothing and changes nothing) */
        if ((v = PyObject_CallMethodObjArgs(errors, s_pop, id, Py_None, NULL)) == NULL) {
            goto out;
        }
        Py_CLEAR(v);
    }
    Py_CLEAR(id);
    /* self.backlog_bytes = max(0, self.backlog_bytes - len(item.data)) */
    if ((v = aget(self, s_backlog_bytes)) == NULL || (data = PyObject_GetAttr(current, s_data)) == NULL) {
        goto out;
    }
    Py_ssize_t size = PyObject_Size(data);
    if (size < 0) {
        goto out;
    }
    PyObject *sz = PyLong_FromSsize_t(size);
    if (sz == NULL) {
        goto out;
    }
    diff = PyNumber_Subtract(v, sz);
    Py_DECREF(sz);
    Py_CLEAR(v);
    if (diff == NULL || (rc = PyObject_RichCompareBool(diff, zero_obj, Py_GT)) < 0) {
        goto out;
    }
    if (aset(self, s_backlog_bytes, rc ? diff : zero_obj) < 0) {
        goto out;
    }
    /* _commit_id(item.id) */
    if ((id = PyObject_GetAttr(current, s_id)) == NULL || (head = aget(self, s_head)) == NULL) {
        goto out;
    }
    if ((rc = PyObject_RichCompareBool(id, head, Py_EQ)) < 0) {
        goto out;
    }
    Py_CLEAR(head);
    if (rc) {
        if (iadd(self, s_head, one_obj) < 0) {
            goto out;
        }
        if ((done = aget(self, s_done)) == NULL) {
            goto out;
        }
        for (;;) { /* while self.head in done: done.remove(self.head); self.head += 1 */
            if ((head = aget(self, s_head)) == NULL || (rc = PySequence_Contains(done, head)) < 0) {
                goto out;
            }
            if (!rc) {
                Py_CLEAR(head);
                break;
            }
            Py_CLEAR(head);
            if ((head = aget(self, s_head)) == NULL ||
                (v = PyObject_CallMethodOneArg(done, s_remove, head)) == NULL) {
                goto out;
            }
            Py_CLEAR(v);
            Py_CLEAR(head);
            if (iadd(self, s_head, one_obj) < 0) {
                goto out;
            }
        }
        if ((v = aget(self, s_head_moved)) == NULL) {
            goto out;
        }
        PyObject *r = PyObject_CallNoArgs(v);
        if (r == NULL) {
            goto out;
        }
        Py_DECREF(r);
        Py_CLEAR(v);
    }
    else {
        if ((head = aget(self, s_head)) == NULL || (rc = PyObject_RichCompareBool(id, head, Py_GT)) < 0) {
            goto out;
        }
        if (rc) {
            if ((done = aget(self, s_done)) == NULL) {
                goto out;
            }
            if ((v = PyObject_CallMethodOneArg(done, s_add, id)) == NULL) {
                goto out;
            }
            Py_CLEAR(v);
        }
    }
    if (aset(self, s_dirty, Py_True) < 0) {
        goto out;
    }
    /* commit: self.committed += 1 */
    if (iadd(self, s_committed, one_obj) < 0) {
        goto out;
    }
    result = Py_NewRef(Py_None);
out:
    Py_XDECREF(open);
    Py_XDECREF(id);
    Py_XDECREF(current);
    Py_XDECREF(v);
    Py_XDECREF(errors);
    Py_XDECREF(data);
    Py_XDECREF(diff);
    Py_XDECREF(head);
    Py_XDECREF(done);
    return result;
}

static PyObject *
core_commit(PyObject *self, PyObject *item)
{
    if (!configured()) {
        return NULL;
    }
    if (!Py_IS_TYPE(item, item_type)) {
        return PyObject_CallFunctionObjArgs(ref_commit, self, item, NULL);
    }
    Py_INCREF(item);
    PyObject *result = commit_do(self, item);
    Py_DECREF(item);
    return result;
}

/* -------------------------------------------------------------------------------- on_put() */

/* Is this on_put the common case?  1: new items go to memory, 2: read-behind (they stay on disk),
 * 0: no.  Reads only, running no Python code. */
static int
on_put_decide(PyObject *d, PyObject *items, PyObject *nbytes_obj)
{
    int result = 0, behind;
    PyObject *first = NULL, *v = NULL, *mem = NULL, *cfg = NULL;
    long long nbytes, backlog, mem_bytes, max_memory, cost, extra;
    Py_ssize_t n, m;

    if (!PyList_CheckExact(items) || (n = PyList_GET_SIZE(items)) == 0 || !exact_ll(nbytes_obj, &nbytes)) {
        return 0;
    }
    first = Py_NewRef(PyList_GET_ITEM(items, 0));
    if (!Py_IS_TYPE(first, item_type)) {
        goto out; /* metadata: not-yet-due items are parked by the reference */
    }
    if ((v = slot(first, s_expire_at)) == NULL) {
        goto out;
    }
    if (v != Py_None) {
        Py_CLEAR(v);
        if ((v = get(d, s_saw_expiry)) != Py_True) {
            goto out; /* the first expiring item starts the expiry sweep */
        }
    }
    Py_CLEAR(v);
    if ((v = get(d, s_load_id)) == NULL) {
        goto out;
    }
    behind = v != Py_None;
    Py_CLEAR(v);
    v = get(d, s_waiters);
    if (v == NULL || !Py_IS_TYPE(v, deque_type) || PyObject_Size(v) != 0) {
        goto out; /* blocked gets are served by the reference's hand-off */
    }
    Py_CLEAR(v);
    if (!exact_ll(v = get(d, s_backlog_bytes), &backlog) || __builtin_add_overflow(backlog, nbytes, &cost)) {
        goto out;
    }
    Py_CLEAR(v);
    if (behind) {
        result = 2;
        goto out;
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
    if (!exact_ll(v = get(d, s_mem_bytes), &mem_bytes)) {
        goto out;
    }
    /* mem_bytes + nbytes + (len(mem) + len(items)) * ITEM_OVERHEAD <= max_memory */
    if (__builtin_add_overflow(mem_bytes, nbytes, &cost) ||
        __builtin_mul_overflow((long long)m + (long long)n, item_overhead, &extra) ||
        __builtin_add_overflow(cost, extra, &cost) || cost > max_memory) {
        goto out; /* the switch to read-behind is the reference's business */
    }
    result = 1;
out:
    Py_XDECREF(first);
    Py_XDECREF(v);
    Py_XDECREF(mem);
    Py_XDECREF(cfg);
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
    PyObject *items = args[0], *nbytes = args[1], *res = NULL, *mem = NULL, *v = NULL;
    Py_INCREF(items);
    Py_INCREF(nbytes);
    int common = on_put_decide(d, items, nbytes);
    Py_DECREF(d);
    if (!common) {
        res = PyObject_CallFunctionObjArgs(ref_on_put, self, items, nbytes, NULL);
        goto out;
    }
    /* self.backlog_bytes += nbytes; then, in memory: self.mem.extend(items); self.mem_bytes += nbytes */
    if (iadd(self, s_backlog_bytes, nbytes) < 0) {
        goto out;
    }
    if (common == 1) {
        if ((mem = aget(self, s_mem)) == NULL || (v = PyObject_CallMethodOneArg(mem, s_extend, items)) == NULL ||
            iadd(self, s_mem_bytes, nbytes) < 0) {
            goto out;
        }
    }
    res = Py_NewRef(Py_None);
out:
    Py_XDECREF(mem);
    Py_XDECREF(v);
    Py_DECREF(items);
    Py_DECREF(nbytes);
    return res;
}

/* ------------------------------------------------------------------ Reader.get / Reader.commit */

/* ReaderOps is the base of journaled/reader.py's CompiledReader: its get() and commit() do
 * Reader.get's and Reader.commit's common case -- the lock taken, the core open, nobody in line,
 * an item ready -- with the same calls on the same objects (``with core.lock``, ``core.closed``,
 * ``core.waiters``, ``core.take()``, ``core.commit(item)``), and leave everything else (blocking,
 * a closed reader, a timeout to check) to the reference, which they call with the same arguments
 * after letting go of the lock. */
static PyObject *ref_reader_get = NULL, *ref_reader_commit = NULL;
static int replace(PyObject **slot_, PyObject *value);
static PyObject *s_core, *s_lock, *s_closed, *s_take, *s_commit, *s_acquire, *s_release;

/* Take core.lock and check core.closed: 1 open (lock held; core_out and lock_out new references),
 * 0 not the common case (nothing held), -1 error. */
static int
enter_open_core(PyObject *self, PyObject **core_out, PyObject **lock_out)
{
    PyObject *core = aget(self, s_core), *lock = NULL, *r = NULL, *closed = NULL;
    if (core == NULL || (lock = PyObject_GetAttr(core, s_lock)) == NULL ||
        (r = PyObject_CallMethodNoArgs(lock, s_acquire)) == NULL) {
        Py_XDECREF(core);
        Py_XDECREF(lock);
        return -1;
    }
    Py_DECREF(r);
    closed = PyObject_GetAttr(core, s_closed);
    if (closed != Py_False) {
        int failed = closed == NULL;
        Py_XDECREF(closed);
        if (release_lock(lock, s_release) < 0) {
            failed = 1;
        }
        Py_DECREF(core);
        Py_DECREF(lock);
        if (failed) {
            return -1;
        }
        return 0; /* closed (or odd): the reference says so */
    }
    Py_DECREF(closed);
    *core_out = core;
    *lock_out = lock;
    return 1;
}

static PyObject *
reader_get(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (ref_reader_get == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "journaled.core._coreops is not configured for readers");
        return NULL;
    }
    /* timeout (the second argument, or by name): the common case is None or a plain number >= 0 */
    PyObject *timeout = nargs >= 2 ? args[1] : NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    int odd = nargs > 2;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(name, "timeout") == 0) {
            timeout = args[nargs + i];
        }
        else if (PyUnicode_CompareWithASCIIString(name, "block") != 0) {
            odd = 1;
        }
    }
    if (timeout != NULL && timeout != Py_None) {
        double t = PyFloat_CheckExact(timeout) ? PyFloat_AS_DOUBLE(timeout) : -1.0;
        if (PyLong_CheckExact(timeout)) { /* its sign is all that matters here */
            int ge = PyObject_RichCompareBool(timeout, zero_obj, Py_GE);
            if (ge < 0) {
                return NULL;
            }
            t = ge ? 0.0 : -1.0;
        }
        if (!(t >= 0.0)) {
            odd = 1; /* negative, NaN or not a plain number: the reference's error */
        }
    }
    if (!odd) {
        PyObject *core = NULL, *lock = NULL, *item = NULL, *waiters;
        int rc = enter_open_core(self, &core, &lock);
        if (rc < 0) {
            return NULL;
        }
        if (rc > 0) {
            /* if not core.waiters: item = core.take() */
            waiters = PyObject_GetAttr(core, s_waiters);
            int busy = waiters == NULL ? -1 : PyObject_IsTrue(waiters);
            Py_XDECREF(waiters);
            if (busy == 0) {
                item = PyObject_CallMethodNoArgs(core, s_take);
            }
            int failed = busy < 0 || (busy == 0 && item == NULL);
            if (release_lock(lock, s_release) < 0) {
                failed = 1;
            }
            Py_DECREF(core);
            Py_DECREF(lock);
            if (failed) {
                Py_XDECREF(item);
                return NULL;
            }
            if (item != NULL && item != Py_None) {
                return item;
            }
            Py_XDECREF(item);
        }
    }
    /* blocking, closed, odd arguments: the reference, from the start */
    PyObject *full[8];
    Py_ssize_t total = nargs + nkw;
    if (total > 7) {
        PyObject *bound = PyMethod_New(ref_reader_get, self);
        if (bound == NULL) {
            return NULL;
        }
        PyObject *r = PyObject_Vectorcall(bound, args, nargs, kwnames);
        Py_DECREF(bound);
        return r;
    }
    full[0] = self;
    for (Py_ssize_t i = 0; i < total; i++) {
        full[i + 1] = args[i];
    }
    return PyObject_Vectorcall(ref_reader_get, full, nargs + 1, kwnames);
}

static PyObject *
reader_commit(PyObject *self, PyObject *item)
{
    if (ref_reader_commit == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "journaled.core._coreops is not configured for readers");
        return NULL;
    }
    PyObject *core = NULL, *lock = NULL;
    int rc = enter_open_core(self, &core, &lock);
    if (rc < 0) {
        return NULL;
    }
    if (rc == 0) {
        return PyObject_CallFunctionObjArgs(ref_reader_commit, self, item, NULL);
    }
    PyObject *r = PyObject_CallMethodOneArg(core, s_commit, item);
    int failed = r == NULL;
    if (release_lock(lock, s_release) < 0) {
        failed = 1;
    }
    Py_DECREF(core);
    Py_DECREF(lock);
    if (failed) {
        Py_XDECREF(r);
        return NULL;
    }
    return r;
}

static PyMethodDef readerops_methods[] = {
    {"get", (PyCFunction)(void (*)(void))reader_get, METH_FASTCALL | METH_KEYWORDS,
     "get(block=True, timeout=None) -> Item: Reader.get, its common case compiled (the rest: the reference)."},
    {"commit", (PyCFunction)reader_commit, METH_O,
     "commit(item): Reader.commit, its common case compiled (the rest: the reference)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderOpsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "journaled.core._coreops.ReaderOps",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The compiled get and commit of a reader: a base of journaled/reader.py's CompiledReader.",
    .tp_methods = readerops_methods,
    .tp_new = PyType_GenericNew,
};

static PyObject *
configure_reader(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"get", "commit", NULL};
    PyObject *get_, *commit_;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OO", kwlist, &get_, &commit_)) {
        return NULL;
    }
    if (!PyCallable_Check(get_) || !PyCallable_Check(commit_)) {
        PyErr_SetString(PyExc_TypeError, "configure_reader(): get and commit must be callables");
        return NULL;
    }
    replace(&ref_reader_get, get_);
    replace(&ref_reader_commit, commit_);
    Py_RETURN_NONE;
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
    {"configure_reader", (PyCFunction)(void (*)(void))configure_reader, METH_VARARGS | METH_KEYWORDS,
     "configure_reader(*, get, commit): the references (Reader's methods) of ReaderOps."},
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
    INTERN(s_get, "get");
    INTERN(s_pop, "pop");
    INTERN(s_remove, "remove");
    INTERN(s_add, "add");
    INTERN(s_open_read, "open_read");
    INTERN(s_core, "core");
    INTERN(s_lock, "lock");
    INTERN(s_closed, "closed");
    INTERN(s_take, "take");
    INTERN(s_commit, "commit");
    INTERN(s_acquire, "acquire");
    INTERN(s_release, "release");
    if ((one_obj = PyLong_FromLong(1)) == NULL || (zero_obj = PyLong_FromLong(0)) == NULL) {
        return NULL;
    }
    if (PyType_Ready(&CoreOpsType) < 0 || PyType_Ready(&ReaderOpsType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION) < 0 ||
        PyModule_AddObjectRef(m, "CoreOps", (PyObject *)&CoreOpsType) < 0 ||
        PyModule_AddObjectRef(m, "ReaderOps", (PyObject *)&ReaderOpsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
