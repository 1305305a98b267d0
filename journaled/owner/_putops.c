/* The compiled twin of the plain single put: JournaledQueue.put(data) for bytes and no options.
 *
 * The reference is three Python calls deep: queue.put takes the queue lock and calls
 * PutPath.append_locked (owner/putpath.py), which admits the put (_admit_locked), appends the record
 * with Writer.append_one (log/writer.py, under the journal's lock), builds the Item and hands it to
 * every reader core's on_put, then counts it; queue.put then waits for durability under
 * sync="always".  PlainPut does the same in one C call, on the same objects, in the same order, for
 * the common case only:
 *
 *   the put path is open, no reader has max_items or max_size (make_room has nothing to do), the
 *   journal is neither closed nor poisoned, and the record fits the current file.
 *
 * Anything else -- and any attribute of an unexpected type -- is declined before anything changes:
 * the call returns None and queue.put runs the reference.  The record itself is encoded by the
 * format's encode_puts (compiled where this is), the Item built by journaled.item.new_item, the
 * buffer written out by Writer.write_out_locked and each reader told by its core's own on_put,
 * exactly as the reference calls them; what is done here is the reference's bookkeeping around those
 * calls (the ids, the add time, the sparse index, the byte counters), read from and written to the
 * objects' instance dicts and plain slots (owner/fastput.py checks that no property stands in the
 * way).  tests/owner/test_put_twin.py compares the two paths' journals and state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../_twins.h"

#define ABI_VERSION 1

static PyObject *s_closed, *s_cores, *s_config, *s_max_items, *s_max_size, *s_put_count, *s_put_bytes;
static PyObject *s_buf, *s_appended, *s_write_through, *s_limit, *s_files, *s_poisoned, *s_next_id;
static PyObject *s_last_add_ms, *s_size, *s_header, *s_salt, *s_index_ids, *s_index_offsets;
static PyObject *s_write_out_locked, *s_on_put, *s_acquire, *s_release, *s_lock, *s_time_ns;
static PyObject *million; /* 1_000_000 */

typedef struct {
    PyObject_HEAD
    PyObject *qlock;       /* the queue's lock (queue.put's ``with self._lock``) */
    PyObject *putpath;     /* owner/putpath.PutPath */
    PyObject *writer;      /* log/writer.Writer */
    PyObject *state;       /* log/state.LogState (writer.state) */
    PyObject *encode_puts; /* format.speedups.encode_puts */
    PyObject *new_item;    /* journaled.item.new_item */
    PyObject *wait_durable; /* the journal's wait_durable, or None unless sync="always" */
    PyTypeObject *config_type;
    PyObject *time_module; /* the time module: add times are time.time_ns() // 1_000_000 */
    long long max_item_size, put_overhead, index_every, write_out_at;
} PlainPut;

/* The instance dict of obj, a new reference; NULL (no error set) if it has no plain dict. */
static PyObject *
dict_of(PyObject *obj)
{
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (d == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (!PyDict_CheckExact(d)) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* d[name] as an int64 in *out if it is an exact int within range; 0 if not (no error set). */
static int
get_ll(PyObject *d, PyObject *name, long long *out)
{
    PyObject *v = PyDict_GetItemWithError(d, name); /* borrowed: exact_ll runs no Python code */
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    return exact_ll(v, out);
}

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
call_method0(PyObject *obj, PyObject *name)
{
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* Does every reader admit a put without make_room (no max_items, no max_size)?  1 yes, 0 no. */
static int
no_limits(PlainPut *self, PyObject *cores)
{
    Py_ssize_t n = PyList_GET_SIZE(cores);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *core = PyList_GET_ITEM(cores, i);
        PyObject *d = dict_of(core);
        if (d == NULL) {
            return 0;
        }
        PyObject *cfg = get(d, s_config);
        Py_DECREF(d);
        if (cfg == NULL || !Py_IS_TYPE(cfg, self->config_type)) {
            Py_XDECREF(cfg);
            return 0;
        }
        PyObject *a = slot(cfg, s_max_items), *b = slot(cfg, s_max_size);
        Py_DECREF(cfg);
        int ok = a == Py_None && b == Py_None;
        Py_XDECREF(a);
        Py_XDECREF(b);
        if (!ok) {
            return 0;
        }
    }
    return 1;
}

/* The journal's part, Writer.append_one's fast case under the journal's lock (held by the caller).
 * 1: appended (*id_out, *add_ms_out, *seq_out), 0: declined (nothing changed), -1: error (raised
 * after the id was taken, as the reference raises it from write_out_locked). */
static int
append_one(PlainPut *self, PyObject *data, long long add_ms, long long *id_out, long long *add_ms_out,
           long long *seq_out)
{
    int result = 0;
    PyObject *wd = NULL, *sd = NULL, *v = NULL, *files = NULL, *jf = NULL, *buf = NULL, *header = NULL;
    PyObject *salt = NULL, *ids = NULL, *offs = NULL, *payloads = NULL, *args[7] = {NULL};
    long long size, limit, next_id, last_add_ms, appended, rec, pos;
    int write_through;

    if ((wd = dict_of(self->writer)) == NULL || (sd = dict_of(self->state)) == NULL) {
        goto out;
    }
    if ((v = get(sd, s_poisoned)) != Py_None) {
        goto out;
    }
    Py_CLEAR(v);
    if ((v = get(sd, s_closed)) != Py_False) {
        goto out;
    }
    Py_CLEAR(v);
    files = get(sd, s_files);
    if (files == NULL || !PyList_CheckExact(files) || PyList_GET_SIZE(files) == 0) {
        goto out;
    }
    jf = Py_NewRef(PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1));
    buf = get(wd, s_buf);
    if (buf == NULL || !PyByteArray_CheckExact(buf)) {
        goto out;
    }
    if (!exact_ll(v = slot(jf, s_size), &size)) {
        goto out;
    }
    Py_CLEAR(v);
    if (!get_ll(wd, s_limit, &limit) || !get_ll(wd, s_appended, &appended)) {
        goto out;
    }
    v = get(wd, s_write_through);
    if (v != Py_True && v != Py_False) {
        goto out;
    }
    write_through = v == Py_True;
    Py_CLEAR(v);
    if (!get_ll(sd, s_next_id, &next_id) || !get_ll(sd, s_last_add_ms, &last_add_ms)) {
        goto out;
    }
    if ((header = slot(jf, s_header)) == NULL || (salt = slot(header, s_salt)) == NULL) {
        goto out;
    }
    ids = slot(jf, s_index_ids);
    offs = slot(jf, s_index_offsets);
    if (ids == NULL || offs == NULL || !PyList_CheckExact(ids) || !PyList_CheckExact(offs)) {
        goto out;
    }
    long long plen = (long long)PyBytes_GET_SIZE(data), end;
    if (__builtin_add_overflow(size, (long long)PyByteArray_GET_SIZE(buf), &pos) ||
        __builtin_add_overflow(self->put_overhead, plen, &rec) || __builtin_add_overflow(pos, rec, &end) ||
        end > limit || next_id == LLONG_MAX || __builtin_add_overflow(appended, rec, &appended)) {
        goto out; /* the next file, or a number out of range: the reference's business */
    }
    /* jf.note(id, pos), inlined as append_one inlines it: decided before anything changes */
    Py_ssize_t k = PyList_GET_SIZE(offs);
    long long last = 0;
    if (k > 0 && !exact_ll(PyList_GET_ITEM(offs, k - 1), &last)) {
        goto out;
    }
    int note = k == 0 || pos - last >= self->index_every;
    if (add_ms < last_add_ms) {
        add_ms = last_add_ms;
    }
    /* Decided.  encode_puts(salt, pos, id, add_ms, 0, (payload,), buf) */
    result = -1;
    if ((payloads = PyTuple_Pack(1, data)) == NULL || (args[1] = PyLong_FromLongLong(pos)) == NULL ||
        (args[2] = PyLong_FromLongLong(next_id)) == NULL || (args[3] = PyLong_FromLongLong(add_ms)) == NULL ||
        (args[4] = PyLong_FromLong(0)) == NULL) {
        goto out;
    }
    args[0] = Py_NewRef(salt);
    args[5] = Py_NewRef(payloads);
    args[6] = Py_NewRef(buf);
    if ((v = PyObject_Vectorcall(self->encode_puts, args, 7, NULL)) == NULL) {
        goto out; /* nothing taken: the reference's encode fails the same way before any id moves */
    }
    Py_CLEAR(v);
    if (note && (PyList_Append(ids, args[2]) < 0 || PyList_Append(offs, args[1]) < 0)) {
        goto out;
    }
    /* st.appended(id + 1, add_ms); self.appended += size */
    if (set_ll(sd, s_next_id, next_id + 1) < 0 || PyDict_SetItem(sd, s_last_add_ms, args[3]) < 0 ||
        set_ll(wd, s_appended, appended) < 0) {
        goto out;
    }
    *id_out = next_id;
    *add_ms_out = add_ms;
    *seq_out = appended;
    if (write_through || PyByteArray_GET_SIZE(buf) >= self->write_out_at) {
        if (call_method0(self->writer, s_write_out_locked) < 0) {
            goto out;
        }
    }
    result = 1;
out:
    Py_XDECREF(wd);
    Py_XDECREF(sd);
    Py_XDECREF(v);
    Py_XDECREF(files);
    Py_XDECREF(jf);
    Py_XDECREF(buf);
    Py_XDECREF(header);
    Py_XDECREF(salt);
    Py_XDECREF(ids);
    Py_XDECREF(offs);
    Py_XDECREF(payloads);
    for (int i = 0; i < 7; i++) {
        Py_XDECREF(args[i]);
    }
    return result;
}

/* counter += by (an attribute of the put path), generically as the reference's ``+=``. */
static int
add_to(PyObject *obj, PyObject *name, PyObject *by)
{
    PyObject *v = PyObject_GetAttr(obj, name), *sum;
    if (v == NULL) {
        return -1;
    }
    sum = PyNumber_InPlaceAdd(v, by);
    Py_DECREF(v);
    if (sum == NULL) {
        return -1;
    }
    int rc = PyObject_SetAttr(obj, name, sum);
    Py_DECREF(sum);
    return rc;
}

/* Under the queue lock: PutPath.append_locked(data, 1, len(data), add_ms) for a plain payload.
 * 1 done (*id_out, *seq_out), 0 declined (nothing changed), -1 error. */
static int
append_locked(PlainPut *self, PyObject *data, long long add_ms, long long *id_out, long long *seq_out)
{
    int result = 0, rc;
    PyObject *pd = NULL, *v = NULL, *cores = NULL, *sd = NULL, *jlock = NULL, *made = NULL, *item = NULL;
    PyObject *nbytes = NULL, *args[5] = {NULL};
    long long item_id = 0, added_ms = 0, seq = 0;

    if ((pd = dict_of(self->putpath)) == NULL || (sd = dict_of(self->state)) == NULL) {
        goto out;
    }
    if ((v = get(pd, s_closed)) != Py_False) {
        goto out; /* closed: the reference raises the right error */
    }
    Py_CLEAR(v);
    cores = get(pd, s_cores); /* read once, as _admit_locked does */
    if (cores == NULL || !PyList_CheckExact(cores) || !no_limits(self, cores)) {
        goto out;
    }
    if ((jlock = get(sd, s_lock)) == NULL) {
        goto out;
    }
    if (call_method0(jlock, s_acquire) < 0) {
        result = -1;
        goto out;
    }
    rc = append_one(self, data, add_ms, &item_id, &added_ms, &seq);
    if (release_lock(jlock, s_release) < 0) {
        rc = -1;
    }
    if (rc <= 0) {
        result = rc;
        goto out;
    }
    result = -1; /* appended: from here on a failure is raised, as by the reference */
    if ((nbytes = PyLong_FromSsize_t(PyBytes_GET_SIZE(data))) == NULL) {
        goto out;
    }
    Py_ssize_t n = PyList_GET_SIZE(cores);
    if (n > 0) {
        if ((args[0] = PyLong_FromLongLong(item_id)) == NULL ||
            (args[2] = PyFloat_FromDouble((double)added_ms / 1000.0)) == NULL) {
            goto out;
        }
        args[1] = Py_NewRef(data);
        args[3] = Py_NewRef(Py_None);
        if ((args[4] = PyLong_FromLong(0)) == NULL) {
            goto out;
        }
        if ((item = PyObject_Vectorcall(self->new_item, args, 5, NULL)) == NULL || (made = PyList_New(1)) == NULL) {
            goto out;
        }
        PyList_SET_ITEM(made, 0, Py_NewRef(item));
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(cores); i++) {
            PyObject *core = Py_NewRef(PyList_GET_ITEM(cores, i));
            v = PyObject_CallMethodObjArgs(core, s_on_put, made, nbytes, NULL);
            Py_DECREF(core);
            if (v == NULL) {
                goto out;
            }
            Py_CLEAR(v);
        }
    }
    PyObject *one = PyLong_FromLong(1);
    if (one == NULL) {
        goto out;
    }
    rc = add_to(self->putpath, s_put_count, one);
    Py_DECREF(one);
    if (rc < 0 || add_to(self->putpath, s_put_bytes, nbytes) < 0) {
        goto out;
    }
    *id_out = item_id;
    *seq_out = seq;
    result = 1;
out:
    Py_XDECREF(pd);
    Py_XDECREF(sd);
    Py_XDECREF(v);
    Py_XDECREF(cores);
    Py_XDECREF(jlock);
    Py_XDECREF(made);
    Py_XDECREF(item);
    Py_XDECREF(nbytes);
    for (int i = 0; i < 5; i++) {
        Py_XDECREF(args[i]);
    }
    return result;
}

/* PlainPut(data): the id, or None when this put is not the fast case (nothing changed then). */
static PyObject *
plainput_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    PlainPut *self = (PlainPut *)op;
    PyObject *data;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "PlainPut() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "PlainPut", 1, 1, &data)) {
        return NULL;
    }
    if (!PyBytes_CheckExact(data) || PyBytes_GET_SIZE(data) > self->max_item_size) {
        Py_RETURN_NONE;
    }
    Py_INCREF(data);
    long long item_id = 0, seq = 0;
    int rc;
    PyObject *r = PyObject_CallMethodNoArgs(self->qlock, s_acquire);
    if (r == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    Py_DECREF(r);
    /* time.time_ns() // 1_000_000, looked up as the reference looks it up (a test's clock too) */
    long long add_ms = 0;
    PyObject *ns = PyObject_CallMethodNoArgs(self->time_module, s_time_ns), *ms = NULL;
    if (ns == NULL || (ms = PyNumber_FloorDivide(ns, million)) == NULL) {
        rc = -1;
    }
    else if (!exact_ll(ms, &add_ms)) {
        rc = 0; /* an odd clock: the reference's business */
    }
    else {
        rc = append_locked(self, data, add_ms, &item_id, &seq);
    }
    Py_XDECREF(ns);
    Py_XDECREF(ms);
    Py_DECREF(data);
    if (release_lock(self->qlock, s_release) < 0) {
        return NULL;
    }
    if (rc < 0) {
        return NULL;
    }
    if (rc == 0) {
        Py_RETURN_NONE;
    }
    if (self->wait_durable != Py_None) {
        r = PyObject_CallFunction(self->wait_durable, "L", seq);
        if (r == NULL) {
            return NULL;
        }
        Py_DECREF(r);
    }
    return PyLong_FromLongLong(item_id);
}

static int
plainput_traverse(PyObject *op, visitproc visit, void *arg)
{
    PlainPut *self = (PlainPut *)op;
    Py_VISIT(self->qlock);
    Py_VISIT(self->putpath);
    Py_VISIT(self->writer);
    Py_VISIT(self->state);
    Py_VISIT(self->encode_puts);
    Py_VISIT(self->new_item);
    Py_VISIT(self->wait_durable);
    Py_VISIT(self->config_type);
    Py_VISIT(self->time_module);
    return 0;
}

static int
plainput_clear(PyObject *op)
{
    PlainPut *self = (PlainPut *)op;
    Py_CLEAR(self->qlock);
    Py_CLEAR(self->putpath);
    Py_CLEAR(self->writer);
    Py_CLEAR(self->state);
    Py_CLEAR(self->encode_puts);
    Py_CLEAR(self->new_item);
    Py_CLEAR(self->wait_durable);
    Py_CLEAR(self->config_type);
    Py_CLEAR(self->time_module);
    return 0;
}

static void
plainput_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    plainput_clear(op);
    Py_TYPE(op)->tp_free(op);
}

static PyObject *
plainput_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"lock",         "putpath",       "writer",      "state",        "encode_puts",
                             "new_item",     "wait_durable",  "config_type", "max_item_size", "put_overhead",
                             "index_every", "write_out_at", "time_module", NULL};
    PyObject *lock, *putpath, *writer, *state, *encode, *newitem, *wait;
    PyObject *ctype, *tmod;
    long long max_item_size, put_overhead, index_every, write_out_at;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOOOOOOO!LLLLO", kwlist, &lock, &putpath, &writer, &state,
                                     &encode, &newitem, &wait, &PyType_Type, &ctype, &max_item_size,
                                     &put_overhead, &index_every, &write_out_at, &tmod)) {
        return NULL;
    }
    if (!PyCallable_Check(encode) || !PyCallable_Check(newitem) || (wait != Py_None && !PyCallable_Check(wait))) {
        PyErr_SetString(PyExc_TypeError, "PlainPut(): encode_puts, new_item and wait_durable must be callables");
        return NULL;
    }
    if (max_item_size < 0 || put_overhead < 0 || index_every < 0 || write_out_at < 0) {
        PyErr_SetString(PyExc_ValueError, "PlainPut(): the sizes must not be negative");
        return NULL;
    }
    PlainPut *self = (PlainPut *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->qlock = Py_NewRef(lock);
    self->putpath = Py_NewRef(putpath);
    self->writer = Py_NewRef(writer);
    self->state = Py_NewRef(state);
    self->encode_puts = Py_NewRef(encode);
    self->new_item = Py_NewRef(newitem);
    self->wait_durable = Py_NewRef(wait);
    self->config_type = (PyTypeObject *)Py_NewRef(ctype);
    self->time_module = Py_NewRef(tmod);
    self->max_item_size = max_item_size;
    self->put_overhead = put_overhead;
    self->index_every = index_every;
    self->write_out_at = write_out_at;
    return (PyObject *)self;
}

static PyTypeObject PlainPutType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "journaled.owner._putops.PlainPut",
    .tp_basicsize = sizeof(PlainPut),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "PlainPut(*, lock, putpath, writer, state, ...): call with bytes; the id, or None when "
              "the put is not the plain fast case (owner/fastput.py).",
    .tp_new = plainput_new,
    .tp_call = plainput_call,
    .tp_traverse = plainput_traverse,
    .tp_clear = plainput_clear,
    .tp_dealloc = plainput_dealloc,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "journaled.owner._putops",
    "The compiled twin of the plain single put (see owner/fastput.py).", -1, NULL,
};

#define INTERN(var, text)                                                                                    \
    do {                                                                                                     \
        if ((var = PyUnicode_InternFromString(text)) == NULL) {                                              \
            return NULL;                                                                                     \
        }                                                                                                    \
    } while (0)

PyMODINIT_FUNC
PyInit__putops(void)
{
    INTERN(s_closed, "closed");
    INTERN(s_cores, "cores");
    INTERN(s_config, "config");
    INTERN(s_max_items, "max_items");
    INTERN(s_max_size, "max_size");
    INTERN(s_put_count, "put_count");
    INTERN(s_put_bytes, "put_bytes");
    INTERN(s_buf, "buf");
    INTERN(s_appended, "appended");
    INTERN(s_write_through, "write_through");
    INTERN(s_limit, "limit");
    INTERN(s_files, "files");
    INTERN(s_poisoned, "poisoned");
    INTERN(s_next_id, "next_id");
    INTERN(s_last_add_ms, "last_add_ms");
    INTERN(s_size, "size");
    INTERN(s_header, "header");
    INTERN(s_salt, "salt");
    INTERN(s_index_ids, "index_ids");
    INTERN(s_index_offsets, "index_offsets");
    INTERN(s_write_out_locked, "write_out_locked");
    INTERN(s_on_put, "on_put");
    INTERN(s_acquire, "acquire");
    INTERN(s_release, "release");
    INTERN(s_lock, "lock");
    INTERN(s_time_ns, "time_ns");
    if ((million = PyLong_FromLong(1000000)) == NULL) {
        return NULL;
    }
    if (PyType_Ready(&PlainPutType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION) < 0 ||
        PyModule_AddObjectRef(m, "PlainPut", (PyObject *)&PlainPutType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
