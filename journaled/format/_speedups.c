/* The compiled hot path of journaled: the twins of the per-record loops (docs/format.md).
 *
 * format/fallback.py holds the pure-Python reference of every function here, and each section below
 * names its reference.  Anything unusual -- an argument of an unexpected type, a number out of the
 * fast path's range, a record that is neither a well-formed PUT nor a PUTX carrying only a
 * producer's tag -- is handed to that reference (given to configure()), so both implementations
 * return the same values and raise the same errors by construction; tests/format/test_speedups.py
 * checks it with hypothesis.
 *
 * format/speedups.py is the only importer: it checks ABI_VERSION, then calls configure() once with
 * record.py's layout constants (checked against the ones below), the classes the twins build and the
 * references; item.py's import calls configure_items() once with the Item class.
 *
 * Python code can run inside a twin: a dict lookup calls the ``__eq__`` of a key whose hash
 * collides, and on Python 3.11 any allocation of a container (list, tuple, item) may start the cyclic
 * garbage collector, hence ``gc.callbacks`` and ``__del__``.  That code may change or free anything
 * the caller passed that is mutable.  So across every such call a twin holds its own references
 * (a tuple copy of a list it encodes, a reference to the record or payload at hand) and re-reads
 * list sizes after it, walking a list as the reference's ``for`` does; the configuration objects
 * stay alive even when replaced (see keep()); and the slot descriptors the twins get and set are
 * checked to be plain slots, which run no Python code.  tests/format/test_speedups_hostile.py
 * checks this, and scripts/sanitize_twins.sh runs it under AddressSanitizer and UBSan.
 *
 * CRC32C is computed here (the SSE4.2 instruction when the CPU has it, else slicing-by-8
 * tables): calling the crc32c package would cost a Python-level call per record, which is
 * what this module exists to avoid.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#ifndef Py_T_OBJECT_EX /* before 3.12 */
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_READONLY READONLY
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define JOURNALED_HW_CRC 1
#include <nmmintrin.h>
#endif

/* What format/speedups.py expects (its ABI_VERSION): raise it whenever configure()'s or
 * configure_items()'s arguments or a twin's contract change, or a fix makes older builds unsafe to
 * run (3: the twins hold their references across Python code; 4: walk_puts; 5: items_from_puts hands
 * PUTX records to the reference; 6: PUTX records carrying only a producer's tag take the fast paths,
 * configure() takes PutX, Meta and NO_HEADERS; 7: decode_columns takes them too; 8: every PUTX
 * whose metadata scans takes the fast paths, configure_items() takes meta_item, decode_columns fills
 * the metadata columns; 9: encode_putx, configure() takes its reference; 10: unit_records,
 * configure() takes its reference; 11: new_meta and new_meta_item, configure_items() takes
 * meta_item_fields, checked_headers and encode_meta, configure() their references), so a stale
 * build is refused (the switch then runs the pure-Python references and says why in describe()). */
#define ABI_VERSION 11

/* The record layout, named as in format/record.py (and columns.py's batch cap).  configure()
 * receives record.py's values and refuses to run if any differs, so a format change there cannot
 * silently diverge from this file. */
#define RECORD_CRC_AT 0       /* u32: CRC32C, seeded by position, of the record from RECORD_LENGTH_AT on */
#define RECORD_LENGTH_AT 4    /* u32: bytes of the body (what follows the record header) */
#define RECORD_TYPE_AT 8      /* u8 */
#define RECORD_HEADER_SIZE 9  /* crc, length, type */
#define PUT_ID_AT 9           /* u64 */
#define PUT_ADD_MS_AT 17      /* u64 */
#define PUT_EXPIRE_MS_AT 25   /* u64, 0 = never */
#define PUT_FIELDS_SIZE 24    /* id, add_ms, expire_ms: the least body a PUT has */
#define PUT_OVERHEAD 33       /* bytes a PUT adds around its payload: where the payload starts */
#define TYPE_PUT 1
#define TYPE_PUTX 2                 /* a PUT with metadata (metadata.py): META_FIXED after the PUT fields */
#define PUTX_FIELDS_SIZE 56         /* the PUT fields and META_FIXED: the least body a PUTX has */
#define PUTX_NOT_BEFORE_AT 33       /* u64, 0 = none */
#define PUTX_PRODUCER_AT 41         /* u64, 0 = none */
#define PUTX_SEQUENCE_AT 49         /* u64 */
#define PUTX_KEY_LEN_AT 57          /* u16, 0 = no key */
#define PUTX_HEADER_COUNT_AT 59     /* u16 */
#define PUTX_HEADERS_LEN_AT 61      /* u32 */
#define PUTX_OVERHEAD 65            /* where the payload of a PUTX without key or headers starts */
#define MAX_BODY ((1LL << 30) + 24)    /* largest body a record may declare */
#define MAX_BATCH_BYTES (1LL << 30)    /* columns.py: largest max_bytes of decode_columns */

static const struct {
    const char *name;
    long long value;
} layout[] = {
    {"RECORD_CRC_AT", RECORD_CRC_AT},
    {"RECORD_LENGTH_AT", RECORD_LENGTH_AT},
    {"RECORD_TYPE_AT", RECORD_TYPE_AT},
    {"RECORD_HEADER_SIZE", RECORD_HEADER_SIZE},
    {"PUT_ID_AT", PUT_ID_AT},
    {"PUT_ADD_MS_AT", PUT_ADD_MS_AT},
    {"PUT_EXPIRE_MS_AT", PUT_EXPIRE_MS_AT},
    {"PUT_FIELDS_SIZE", PUT_FIELDS_SIZE},
    {"PUT_OVERHEAD", PUT_OVERHEAD},
    {"TYPE_PUT", TYPE_PUT},
    {"TYPE_PUTX", TYPE_PUTX},
    {"PUTX_FIELDS_SIZE", PUTX_FIELDS_SIZE},
    {"PUTX_NOT_BEFORE_AT", PUTX_NOT_BEFORE_AT},
    {"PUTX_PRODUCER_AT", PUTX_PRODUCER_AT},
    {"PUTX_SEQUENCE_AT", PUTX_SEQUENCE_AT},
    {"PUTX_KEY_LEN_AT", PUTX_KEY_LEN_AT},
    {"PUTX_HEADER_COUNT_AT", PUTX_HEADER_COUNT_AT},
    {"PUTX_HEADERS_LEN_AT", PUTX_HEADERS_LEN_AT},
    {"PUTX_OVERHEAD", PUTX_OVERHEAD},
    {"MAX_BODY", MAX_BODY},
    {"MAX_BATCH_BYTES", MAX_BATCH_BYTES},
};
#define LAYOUT_SIZE ((Py_ssize_t)(sizeof(layout) / sizeof(layout[0])))

/* The fast paths take offsets, ids, positions and counts up to this (sums of two never overflow);
 * larger numbers go to the reference. */
#define INDEX_MAX (1LL << 62)
/* Integers up to this convert to a double exactly (items_from_puts' times). */
#define EXACT_DOUBLE_MAX (1LL << 53)

/* The fields of record.Put and of journaled.item.Item, in the order configure() checks. */
enum { PUT_OFFSET, PUT_SIZE, PUT_ID, PUT_ADD_MS, PUT_EXPIRE_MS, PUT_PAYLOAD, PUT_NFIELDS };
static const char *const put_field_names[PUT_NFIELDS] = {"offset", "size", "id", "add_ms", "expire_ms", "payload"};
/* record.PutX: Put's fields, then its Meta; metadata.Meta's fields. */
enum { PUTX_META = PUT_NFIELDS, PUTX_NFIELDS };
static const char *const putx_field_names[PUTX_NFIELDS] = {"offset", "size", "id", "add_ms", "expire_ms", "payload",
                                                           "meta"};
enum { META_NOT_BEFORE, META_PRODUCER, META_SEQUENCE, META_KEY, META_HEADERS, META_NFIELDS };
static const char *const meta_field_names[META_NFIELDS] = {"not_before_ms", "producer", "sequence", "key", "headers"};
enum { ITEM_ID, ITEM_DATA, ITEM_ADD_TIME, ITEM_EXPIRE_AT, ITEM_ERROR_COUNT, ITEM_NFIELDS };
static const char *const item_field_names[ITEM_NFIELDS] = {"id", "data", "add_time", "expire_at", "error_count"};

/* ------------------------------------------------------------------------------ crc32c
 * reference: the crc32c package (which format/fallback.py calls) */

static uint32_t crc_table[8][256];
static int have_hw_crc = 0;

#ifdef JOURNALED_HW_CRC
/* The CRC instruction takes 3 cycles to give its result but starts a new one every cycle, so one
 * running register keeps it a third busy.  crc_hw therefore runs three registers at once over three
 * adjacent stripes A, B, C of S bytes each and joins them: the register is linear over GF(2), so
 *     crc(c, A || B || C) == zeros_2S(crc(c, A)) ^ zeros_S(crc(0, B)) ^ crc(0, C)
 * where zeros_K(x) is crc(x, K zero bytes), itself linear in x: the XOR of one table entry per byte of
 * x, each entry the register after K zero bytes from that byte alone (crc_zeros_init).  Both shifts
 * are looked up at once rather than one after the other, so the join waits for one lookup.  Long
 * stripes (fewer joins) while the input allows, then short ones, then the serial loop: 256 and 80
 * measured best on records of 0.1-64 KiB (the short stripes leave a record of 1 KiB under 48 bytes
 * for the serial loop). */
#define CRC_LONG 256 /* bytes per stripe of a long round: a round takes 3 * CRC_LONG */
#define CRC_SHORT 80 /* bytes per stripe of a short round (a multiple of 8) */
static uint32_t crc_zeros_long[4][256], crc_zeros_long2[4][256];   /* zeros_CRC_LONG, zeros_2*CRC_LONG */
static uint32_t crc_zeros_short[4][256], crc_zeros_short2[4][256]; /* zeros_CRC_SHORT, zeros_2*CRC_SHORT */

/* The plain loop: one register, 8 bytes per instruction, then the last 0-7 bytes in at most three
 * (each instruction waits for the one before: fewer is faster). */
__attribute__((target("sse4.2"))) static uint32_t
crc_hw_serial(uint32_t c, const unsigned char *p, size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    if (n & 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        c = _mm_crc32_u32(c, w);
        p += 4;
    }
    if (n & 2) {
        uint16_t w;
        memcpy(&w, p, 2);
        c = _mm_crc32_u16(c, w);
        p += 2;
    }
    if (n & 1)
        c = _mm_crc32_u8(c, *p);
    return c;
}

/* table[i][b] = the register after ``k`` zero bytes from the register b << 8i. */
static void
crc_zeros_init(uint32_t table[4][256], size_t k)
{
    static const unsigned char zeros[2 * CRC_LONG];
    for (int i = 0; i < 4; i++)
        for (uint32_t b = 0; b < 256; b++)
            table[i][b] = crc_hw_serial(b << (8 * i), zeros, k);
}

/* The register ``c`` followed by the table's number of zero bytes. */
static inline uint32_t
crc_zeros(const uint32_t table[4][256], uint32_t c)
{
    return table[0][c & 0xFF] ^ table[1][(c >> 8) & 0xFF] ^ table[2][(c >> 16) & 0xFF] ^ table[3][c >> 24];
}

/* Rounds of three stripes of ``STRIPE`` bytes while at least a round is left (a macro so that each
 * stripe length is a constant the compiler unrolls); ``ZEROS``/``ZEROS2`` shift by one/two stripes. */
#define CRC_ROUNDS(STRIPE, ZEROS, ZEROS2)                                                                  \
    while (n >= 3 * (STRIPE)) {                                                                            \
        uint64_t c0 = c, c1 = 0, c2 = 0;                                                                   \
        for (size_t i = 0; i < (STRIPE); i += 8) {                                                         \
            uint64_t w0, w1, w2;                                                                           \
            memcpy(&w0, p + i, 8);                                                                         \
            memcpy(&w1, p + (STRIPE) + i, 8);                                                              \
            memcpy(&w2, p + 2 * (STRIPE) + i, 8);                                                          \
            c0 = _mm_crc32_u64(c0, w0);                                                                    \
            c1 = _mm_crc32_u64(c1, w1);                                                                    \
            c2 = _mm_crc32_u64(c2, w2);                                                                    \
        }                                                                                                  \
        c = crc_zeros(ZEROS2, (uint32_t)c0) ^ crc_zeros(ZEROS, (uint32_t)c1) ^ (uint32_t)c2;               \
        p += 3 * (STRIPE);                                                                                 \
        n -= 3 * (STRIPE);                                                                                 \
    }

__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t c, const unsigned char *p, size_t n)
{
    CRC_ROUNDS(CRC_LONG, crc_zeros_long, crc_zeros_long2)
    CRC_ROUNDS(CRC_SHORT, crc_zeros_short, crc_zeros_short2)
    return crc_hw_serial(c, p, n);
}
#endif

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
#ifdef JOURNALED_HW_CRC
    __builtin_cpu_init();
    have_hw_crc = __builtin_cpu_supports("sse4.2");
    if (have_hw_crc) {
        crc_zeros_init(crc_zeros_long, CRC_LONG);
        crc_zeros_init(crc_zeros_long2, 2 * CRC_LONG);
        crc_zeros_init(crc_zeros_short, CRC_SHORT);
        crc_zeros_init(crc_zeros_short2, 2 * CRC_SHORT);
    }
#endif
}

/* ``c`` is the running (inverted) register, as in the CRC's inner loop. */
static uint32_t
crc_sw(uint32_t c, const unsigned char *p, size_t n)
{
#if PY_LITTLE_ENDIAN
    while (n >= 8) {
        uint32_t one, two;
        memcpy(&one, p, 4);
        memcpy(&two, p + 4, 4);
        one ^= c;
        c = crc_table[7][one & 0xFF] ^ crc_table[6][(one >> 8) & 0xFF] ^ crc_table[5][(one >> 16) & 0xFF] ^
            crc_table[4][one >> 24] ^ crc_table[3][two & 0xFF] ^ crc_table[2][(two >> 8) & 0xFF] ^
            crc_table[1][(two >> 16) & 0xFF] ^ crc_table[0][two >> 24];
        p += 8;
        n -= 8;
    }
#endif
    while (n--)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

/* crc32c.crc32c(data, value): the CRC of ``data`` continuing from a previous result ``value``. */
static inline uint32_t
crc32c(uint32_t value, const unsigned char *p, size_t n)
{
    uint32_t c = ~value;
#ifdef JOURNALED_HW_CRC
    if (have_hw_crc)
        return ~crc_hw(c, p, n);
#endif
    return ~crc_sw(c, p, n);
}

static inline void
put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline void
put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t
get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t
get_u64(const unsigned char *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* ------------------------------------------------------------------------------ configuration
 * reference: format/speedups.py, which calls configure() once (and item.py configure_items()) */

static PyTypeObject *put_type = NULL;
static PyObject *put_fields[PUT_NFIELDS]; /* slot descriptors of Put, in field order */
static PyTypeObject *putx_type = NULL;
static PyObject *putx_fields[PUTX_NFIELDS]; /* slot descriptors of PutX, in field order */
static PyTypeObject *meta_type = NULL;
static PyObject *meta_fields[META_NFIELDS]; /* slot descriptors of Meta, in field order */
static PyObject *no_headers = NULL;         /* metadata.NO_HEADERS: the headers of a tag-only PUTX */
static PyTypeObject *damage_type = NULL;
static PyObject *py_encode_puts = NULL;
static PyObject *py_encode_putx = NULL;
static PyObject *py_decode_many = NULL;
static PyObject *py_decode_one = NULL;
static PyObject *py_decode_columns = NULL;
static PyObject *py_walk_puts = NULL;
static PyObject *py_unit_records = NULL;
static PyObject *py_checked_headers = NULL; /* metadata.checked_headers, when configure() was given it */
static PyObject *py_encode_meta = NULL;     /* metadata.encode_parts, when configure() was given it */
static PyTypeObject *item_type = NULL;
static PyObject *item_fields[ITEM_NFIELDS]; /* slot descriptors of Item, in field order */
static PyObject *py_new_item = NULL;
static PyObject *py_new_items = NULL;
static PyObject *py_items_from_puts = NULL;
static PyObject *py_meta_item = NULL; /* builds the item of a PUTX carrying a key, headers or a not-before */
static PyTypeObject *meta_item_type = NULL; /* the meta_item whose meta_item_fields were checked last */
static PyObject *meta_item_fields[ITEM_NFIELDS + 1]; /* its slot descriptors: Item's, then "stored" */

/* The layout of a mappingproxy (Objects/descrobject.c; not in the C API): its one field. */
typedef struct {
    PyObject_HEAD
    PyObject *mapping;
} mappingproxyobject_compat;
static PyObject *str_size = NULL;
static PyObject *str_payload = NULL, *str_id = NULL, *str_add_ms = NULL, *str_expire_ms = NULL, *str_get = NULL;
static PyObject *float_1000 = NULL; /* the reference's 1000.0 */
static PyObject *max_body_obj = NULL; /* MAX_BODY as an int: decode_many's default max_body */

/* Configuration objects replaced by a later configure() or configure_items(), never released: a
 * twin further up the stack may still use the old ones through the globals above it read before
 * calling Python code (which may have configured again).  Configuration happens once per process
 * (a few times in the tests, mostly with the same objects, which are not kept twice). */
static PyObject *retired = NULL;

static void
keep(PyObject **slot, PyObject *value)
{
    PyObject *old = *slot;
    *slot = Py_NewRef(value);
    if (old == NULL)
        return;
    if (old == value || PyList_Append(retired, old) == 0)
        Py_DECREF(old);
    else
        PyErr_Clear(); /* not recorded: then it is never released either */
}

static PyObject *
not_configured(void)
{
    PyErr_SetString(PyExc_RuntimeError, "journaled.format._speedups is not configured");
    return NULL;
}

/* 0 when ``constants`` (name -> int, from format/record.py) holds exactly the layout compiled in
 * above, with the same values; else -1 with ValueError (or TypeError) naming the first difference. */
static int
check_layout(PyObject *constants)
{
    for (Py_ssize_t i = 0; i < LAYOUT_SIZE; i++) {
        PyObject *v = PyDict_GetItemString(constants, layout[i].name); /* borrowed */
        if (v == NULL) {
            PyErr_Format(PyExc_ValueError, "journaled.format._speedups needs format/record.py's %s", layout[i].name);
            return -1;
        }
        if (!PyLong_Check(v)) { /* not converted with __index__, which could change the dict under us */
            PyErr_Format(PyExc_TypeError, "format/record.py's %s must be an int", layout[i].name);
            return -1;
        }
        long long got = PyLong_AsLongLong(v);
        if (got == -1 && PyErr_Occurred())
            return -1;
        if (got != layout[i].value) {
            PyErr_Format(PyExc_ValueError,
                         "journaled.format._speedups was built with %s = %lld but format/record.py says %lld: "
                         "update _speedups.c and rebuild it (pip install -e .)",
                         layout[i].name, layout[i].value, got);
            return -1;
        }
    }
    if (PyDict_GET_SIZE(constants) != LAYOUT_SIZE) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(constants, &pos, &key, &value)) {
            int known = 0;
            for (Py_ssize_t i = 0; i < LAYOUT_SIZE && !known; i++)
                known = PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, layout[i].name) == 0;
            if (!known) {
                Py_INCREF(key); /* its repr may change the dict */
                PyErr_Format(PyExc_ValueError, "journaled.format._speedups does not know the constant %R", key);
                Py_DECREF(key);
                return -1;
            }
        }
    }
    return 0;
}

/* A slot of instances of ``type`` holding any object: its get and set run no Python code. */
static int
is_plain_slot(PyObject *d, PyObject *type)
{
    if (!Py_IS_TYPE(d, &PyMemberDescr_Type))
        return 0;
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    return m->type == Py_T_OBJECT_EX && !(m->flags & Py_READONLY) &&
           PyType_IsSubtype((PyTypeObject *)type, PyDescr_TYPE(d));
}

/* The slot descriptors of ``type``'s fields into ``out`` (new references), after checking that
 * ``names`` (the class's field names, in order) are ``expected``; -1 with an error otherwise. */
static int
field_slots(PyObject *type, PyObject *names, const char *const *expected, int n, PyObject **out)
{
    const char *tname = ((PyTypeObject *)type)->tp_name;
    int ok = PyTuple_GET_SIZE(names) == n;
    for (int i = 0; ok && i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        ok = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, expected[i]) == 0;
    }
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s has the fields %R, which journaled.format._speedups does not build",
                     tname, names);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttr(type, PyTuple_GET_ITEM(names, i));
        if (d != NULL && !is_plain_slot(d, type)) {
            Py_CLEAR(d);
            PyErr_Format(PyExc_TypeError, "%s's fields must be slots", tname);
        }
        if (d == NULL) {
            for (int j = 0; j < i; j++)
                Py_CLEAR(out[j]);
            return -1;
        }
        out[i] = d;
    }
    return 0;
}

static int
all_callable(PyObject *const *fns, int n)
{
    for (int i = 0; i < n; i++)
        if (!PyCallable_Check(fns[i])) {
            PyErr_Format(PyExc_TypeError, "a reference must be callable, not %.100s", Py_TYPE(fns[i])->tp_name);
            return 0;
        }
    return 1;
}

/* The shared empty headers of a tag-only PUTX: an exact mappingproxy (it holds no reference back to
 * anything, so a Meta holding it can be left out of the collector's walks) that is empty now. */
static int
check_no_headers(PyObject *o)
{
    if (!Py_IS_TYPE(o, &PyDictProxy_Type)) {
        PyErr_Format(PyExc_TypeError, "no_headers must be a mappingproxy, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t n = PyObject_Size(o);
    if (n < 0)
        return -1;
    if (n != 0) {
        PyErr_SetString(PyExc_ValueError, "no_headers must be empty");
        return -1;
    }
    return 0;
}

static void
drop_slots(PyObject **slots, int n)
{
    for (int i = 0; i < n; i++)
        Py_CLEAR(slots[i]);
}

/* configure(*, constants, put_type, put_fields, putx_type, putx_fields, meta_type, meta_fields,
 * no_headers, damage_type, encode_puts, decode_many, decode_one, decode_columns, walk_puts=None,
 * encode_putx=None, unit_records=None, checked_headers=None, encode_meta=None):
 * everything is checked before anything is kept, so a refused call leaves the module as it was.
 * putx_type must be a subclass of put_type (the references test records with isinstance(Put)).
 * Without walk_puts (its reference), the one configured before stays (walk_puts() refuses to run
 * while there is none); so for encode_putx, unit_records, checked_headers and encode_meta. */
static PyObject *
configure(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"constants",  "put_type",    "put_fields",  "putx_type",   "putx_fields",
                             "meta_type",  "meta_fields", "no_headers",  "damage_type", "encode_puts",
                             "decode_many", "decode_one", "decode_columns", "walk_puts", "encode_putx",
                             "unit_records", "checked_headers", "encode_meta", NULL};
    PyObject *constants = NULL, *type = NULL, *names = NULL, *xtype = NULL, *xnames = NULL, *mtype = NULL,
             *mnames = NULL, *empty = NULL, *dmg = NULL;
    PyObject *refs[9] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O!O!O!O!O!O!O!OO!OOOOOOOOO:configure", kwlist, &PyDict_Type,
                                     &constants, &PyType_Type, &type, &PyTuple_Type, &names, &PyType_Type, &xtype,
                                     &PyTuple_Type, &xnames, &PyType_Type, &mtype, &PyTuple_Type, &mnames, &empty,
                                     &PyType_Type, &dmg, &refs[0], &refs[1], &refs[2], &refs[3], &refs[4], &refs[5],
                                     &refs[6], &refs[7], &refs[8]))
        return NULL;
    if (!constants || !type || !names || !xtype || !xnames || !mtype || !mnames || !empty || !dmg || !refs[0] ||
        !refs[1] || !refs[2] || !refs[3]) {
        PyErr_SetString(PyExc_TypeError, "configure() takes all of its keyword arguments");
        return NULL;
    }
    if (check_layout(constants) < 0 || !all_callable(refs, refs[4] != NULL ? 5 : 4) ||
        (refs[5] != NULL && !all_callable(&refs[5], 1)) || (refs[6] != NULL && !all_callable(&refs[6], 1)) ||
        (refs[7] != NULL && !all_callable(&refs[7], 1)) || (refs[8] != NULL && !all_callable(&refs[8], 1)) ||
        check_no_headers(empty) < 0)
        return NULL;
    PyObject *slots[PUT_NFIELDS], *xslots[PUTX_NFIELDS], *mslots[META_NFIELDS];
    if (field_slots(type, names, put_field_names, PUT_NFIELDS, slots) < 0)
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)xtype, (PyTypeObject *)type)) {
        PyErr_Format(PyExc_TypeError, "putx_type must be a subclass of %.100s", ((PyTypeObject *)type)->tp_name);
        drop_slots(slots, PUT_NFIELDS);
        return NULL;
    }
    if (field_slots(xtype, xnames, putx_field_names, PUTX_NFIELDS, xslots) < 0) {
        drop_slots(slots, PUT_NFIELDS);
        return NULL;
    }
    if (field_slots(mtype, mnames, meta_field_names, META_NFIELDS, mslots) < 0) {
        drop_slots(slots, PUT_NFIELDS);
        drop_slots(xslots, PUTX_NFIELDS);
        return NULL;
    }
    for (int i = 0; i < PUT_NFIELDS; i++)
        keep(&put_fields[i], slots[i]);
    for (int i = 0; i < PUTX_NFIELDS; i++)
        keep(&putx_fields[i], xslots[i]);
    for (int i = 0; i < META_NFIELDS; i++)
        keep(&meta_fields[i], mslots[i]);
    drop_slots(slots, PUT_NFIELDS);
    drop_slots(xslots, PUTX_NFIELDS);
    drop_slots(mslots, META_NFIELDS);
    keep((PyObject **)&put_type, type);
    keep((PyObject **)&putx_type, xtype);
    keep((PyObject **)&meta_type, mtype);
    keep(&no_headers, empty);
    keep((PyObject **)&damage_type, dmg);
    keep(&py_encode_puts, refs[0]);
    keep(&py_decode_many, refs[1]);
    keep(&py_decode_one, refs[2]);
    keep(&py_decode_columns, refs[3]);
    if (refs[4] != NULL)
        keep(&py_walk_puts, refs[4]);
    if (refs[5] != NULL)
        keep(&py_encode_putx, refs[5]);
    if (refs[6] != NULL)
        keep(&py_unit_records, refs[6]);
    if (refs[7] != NULL)
        keep(&py_checked_headers, refs[7]);
    if (refs[8] != NULL)
        keep(&py_encode_meta, refs[8]);
    Py_RETURN_NONE;
}

static int configure_meta_item(PyObject *item, PyObject *meta_item, PyObject *names, PyObject **out);

/* configure_items(*, item_type, item_fields, new_item, new_items, items_from_puts): the class the
 * item twins build and their references; checked before kept, as configure(). */
static PyObject *
configure_items(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"item_type", "item_fields", "new_item", "new_items", "items_from_puts", "meta_item",
                             "meta_item_fields", NULL};
    PyObject *type = NULL, *names = NULL, *refs[4] = {NULL, NULL, NULL, NULL}, *mi_names = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O!O!OOOOO!:configure_items", kwlist, &PyType_Type, &type,
                                     &PyTuple_Type, &names, &refs[0], &refs[1], &refs[2], &refs[3], &PyTuple_Type,
                                     &mi_names))
        return NULL;
    if (!type || !names || !refs[0] || !refs[1] || !refs[2]) {
        PyErr_SetString(PyExc_TypeError, "configure_items() takes all of its keyword arguments");
        return NULL;
    }
    PyObject *slots[ITEM_NFIELDS];
    if (!all_callable(refs, refs[3] != NULL && refs[3] != Py_None ? 4 : 3) ||
        field_slots(type, names, item_field_names, ITEM_NFIELDS, slots) < 0)
        return NULL;
    PyObject *mi_slots[ITEM_NFIELDS + 1] = {NULL};
    if (mi_names != NULL && configure_meta_item(type, refs[3], mi_names, mi_slots) < 0) {
        drop_slots(slots, ITEM_NFIELDS);
        return NULL;
    }
    for (int i = 0; i < ITEM_NFIELDS; i++) {
        keep(&item_fields[i], slots[i]);
        Py_DECREF(slots[i]);
    }
    keep((PyObject **)&item_type, type);
    keep(&py_new_item, refs[0]);
    keep(&py_new_items, refs[1]);
    keep(&py_items_from_puts, refs[2]);
    keep(&py_meta_item, refs[3] != NULL ? refs[3] : Py_None); /* None: such records go to the reference */
    if (mi_names != NULL) { /* new_meta_item builds this class from now on */
        for (int i = 0; i <= ITEM_NFIELDS; i++)
            keep(&meta_item_fields[i], mi_slots[i]);
        drop_slots(mi_slots, ITEM_NFIELDS + 1);
        keep((PyObject **)&meta_item_type, refs[3]);
    }
    Py_RETURN_NONE;
}

/* An exact int in [0, INDEX_MAX] into *out; 0 (no error set) otherwise. */
static int
as_index(PyObject *o, long long *out)
{
    if (!PyLong_CheckExact(o))
        return 0;
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (v < 0 || v > INDEX_MAX)
        return 0;
    *out = v;
    return 1;
}

/* ------------------------------------------------------------------------------ encode_puts
 * reference: format/fallback.py, encode_puts */

/* Read a non-negative int below 2**64 into *out; 0 when ``o`` is not one (no error set). */
static int
as_u64(PyObject *o, uint64_t *out)
{
    if (!PyLong_CheckExact(o))
        return 0;
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

/* A tuple of the items of ``seq`` (a tuple: itself; a list: a copy), a new reference; None when the
 * list changed while the copy was allocated (the collector may run then); NULL with an error. */
static PyObject *
items_now(PyObject *seq)
{
    if (PyTuple_CheckExact(seq))
        return Py_NewRef(seq);
    Py_ssize_t n = PyList_GET_SIZE(seq);
    PyObject *copy = PyTuple_New(n);
    if (copy == NULL)
        return NULL;
    if (PyList_GET_SIZE(seq) != n) {
        Py_DECREF(copy);
        return Py_NewRef(Py_None);
    }
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(copy, i, Py_NewRef(PyList_GET_ITEM(seq, i)));
    return copy;
}

static PyObject *
encode_puts(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (py_encode_puts == NULL)
        return not_configured();
    uint64_t salt, offset, first_id, add_ms, expire_ms;
    PyObject *payloads, *out;
    if (kwnames != NULL || nargs != 7)
        goto reference;
    out = args[6];
    if (!as_u64(args[0], &salt) || !as_u64(args[1], &offset) || !as_u64(args[2], &first_id) ||
        !as_u64(args[3], &add_ms) || !as_u64(args[4], &expire_ms) || !PyByteArray_CheckExact(out) ||
        !(PyTuple_CheckExact(args[5]) || PyList_CheckExact(args[5])))
        goto reference;
    /* the payloads as they are now, held: the allocations below may run the collector */
    payloads = items_now(args[5]);
    if (payloads == NULL)
        return NULL;
    if (payloads == Py_None) {
        Py_DECREF(payloads);
        goto reference;
    }
    {
        PyObject **items = PySequence_Fast_ITEMS(payloads);
        Py_ssize_t n = PyTuple_GET_SIZE(payloads);
        /* The fast path takes plain bytes whose records' numbers all fit their fields; anything
         * else (where the reference may fail part-way) is left to the reference. */
        int fast = !(n > 0 && first_id > UINT64_MAX - (uint64_t)(n - 1));
        Py_ssize_t total = 0;
        for (Py_ssize_t i = 0; i < n && fast; i++) {
            if (!PyBytes_CheckExact(items[i])) {
                fast = 0;
                break;
            }
            Py_ssize_t len = PyBytes_GET_SIZE(items[i]);
            if ((uint64_t)len > UINT32_MAX - PUT_FIELDS_SIZE || total > PY_SSIZE_T_MAX - PUT_OVERHEAD - len)
                fast = 0;
            else
                total += PUT_OVERHEAD + len;
        }
        if (!fast || offset > UINT64_MAX - (uint64_t)total) {
            Py_DECREF(payloads);
            goto reference;
        }
        uint64_t offset0 = offset;
        PyObject *offsets = PyList_New(n);
        if (offsets == NULL) {
            Py_DECREF(payloads);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *o = PyLong_FromUnsignedLongLong(offset);
            if (o == NULL) {
                Py_DECREF(offsets);
                Py_DECREF(payloads);
                return NULL;
            }
            PyList_SET_ITEM(offsets, i, o);
            offset += PUT_OVERHEAD + (uint64_t)PyBytes_GET_SIZE(items[i]);
        }
        offset = offset0;
        /* from here to the return nothing can run Python code: ``out`` is sized now, not before */
        Py_ssize_t start = PyByteArray_GET_SIZE(out);
        if (start > PY_SSIZE_T_MAX - total) {
            PyErr_NoMemory();
            Py_DECREF(offsets);
            Py_DECREF(payloads);
            return NULL;
        }
        if (PyByteArray_Resize(out, start + total) < 0) {
            Py_DECREF(offsets);
            Py_DECREF(payloads);
            return NULL;
        }
        unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(out) + start;
        uint64_t item_id = first_id;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t len = PyBytes_GET_SIZE(items[i]);
            put_u32(p + RECORD_LENGTH_AT, (uint32_t)(PUT_FIELDS_SIZE + len));
            p[RECORD_TYPE_AT] = TYPE_PUT;
            put_u64(p + PUT_ID_AT, item_id);
            put_u64(p + PUT_ADD_MS_AT, add_ms);
            put_u64(p + PUT_EXPIRE_MS_AT, expire_ms);
            memcpy(p + PUT_OVERHEAD, PyBytes_AS_STRING(items[i]), (size_t)len);
            put_u32(p + RECORD_CRC_AT, crc32c((uint32_t)(salt ^ offset), p + RECORD_LENGTH_AT,
                                              (size_t)(PUT_OVERHEAD - RECORD_LENGTH_AT + len)));
            p += PUT_OVERHEAD + len;
            offset += PUT_OVERHEAD + (uint64_t)len;
            item_id++;
        }
        Py_DECREF(payloads);
        return offsets;
    }
reference:
    return PyObject_Vectorcall(py_encode_puts, args, (size_t)nargs, kwnames);
}

/* ------------------------------------------------------------------------------ encode_putx
 * reference: format/fallback.py, encode_putx */

/* encode_putx(salt, offset, item_id, add_ms, expire_ms, meta, payload, out): append one PUTX record
 * whose body is the PUT fields, ``meta`` (the encoded metadata) and ``payload`` to ``out``.  Over
 * bytes and plain ints only; anything else (another type, a number outside its field, a body too
 * long for its length field) is handed to the reference. */
static PyObject *
encode_putx(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (py_encode_putx == NULL)
        return not_configured();
    uint64_t salt, offset, item_id, add_ms, expire_ms;
    if (kwnames != NULL || nargs != 8)
        goto reference;
    PyObject *meta = args[5], *payload = args[6], *out = args[7];
    if (!as_u64(args[0], &salt) || !as_u64(args[1], &offset) || !as_u64(args[2], &item_id) ||
        !as_u64(args[3], &add_ms) || !as_u64(args[4], &expire_ms) || !PyBytes_CheckExact(meta) ||
        !PyBytes_CheckExact(payload) || !PyByteArray_CheckExact(out))
        goto reference;
    {
        Py_ssize_t mlen = PyBytes_GET_SIZE(meta), plen = PyBytes_GET_SIZE(payload);
        if ((uint64_t)mlen > UINT32_MAX - PUT_FIELDS_SIZE ||
            (uint64_t)plen > UINT32_MAX - PUT_FIELDS_SIZE - (uint64_t)mlen)
            goto reference;
        Py_ssize_t total = PUT_OVERHEAD + mlen + plen; /* < 2**32 + PUT_OVERHEAD: no overflow */
        Py_ssize_t start = PyByteArray_GET_SIZE(out);
        if (start > PY_SSIZE_T_MAX - total)
            return PyErr_NoMemory();
        /* nothing below runs Python code: ``meta`` and ``payload`` are immutable bytes */
        if (PyByteArray_Resize(out, start + total) < 0)
            return NULL;
        unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(out) + start;
        put_u32(p + RECORD_LENGTH_AT, (uint32_t)(PUT_FIELDS_SIZE + mlen + plen));
        p[RECORD_TYPE_AT] = TYPE_PUTX;
        put_u64(p + PUT_ID_AT, item_id);
        put_u64(p + PUT_ADD_MS_AT, add_ms);
        put_u64(p + PUT_EXPIRE_MS_AT, expire_ms);
        memcpy(p + PUT_OVERHEAD, PyBytes_AS_STRING(meta), (size_t)mlen);
        memcpy(p + PUT_OVERHEAD + mlen, PyBytes_AS_STRING(payload), (size_t)plen);
        put_u32(p + RECORD_CRC_AT, crc32c((uint32_t)(salt ^ offset), p + RECORD_LENGTH_AT,
                                          (size_t)(total - RECORD_LENGTH_AT)));
        Py_RETURN_NONE;
    }
reference:
    return PyObject_Vectorcall(py_encode_putx, args, (size_t)nargs, kwnames);
}

/* ------------------------------------------------------------------------------ decode_many
 * reference: format/fallback.py, decode_many (and record.py's decode_one for what is not a
 * well-formed PUT) */

/* perf: an object of a frozen class whose fields hold only ints, floats, bytes and None can never
 * be part of a reference cycle, so the cyclic collector need not look at it (CPython untracks such
 * tuples and dicts the same way).  Read-behind builds a record and an item per journal record, and
 * the collections their allocations start would otherwise walk every one of them, most of read-
 * behind's cost in a large backlog.  Setting a container into such an object with
 * object.__setattr__ would make a cycle the collector cannot free (a leak, nothing worse). */
static void
untrack_atomic(PyObject *obj, PyObject *const *vals, int n)
{
    for (int i = 0; i < n; i++) {
        PyObject *v = vals[i];
        /* also: the shared empty headers (configure() checked it is a mappingproxy: it refers to
         * nothing that can refer back), and a Meta left out already (of such values itself) */
        if (!(PyLong_CheckExact(v) || PyFloat_CheckExact(v) || PyBytes_CheckExact(v) || v == Py_None ||
              v == no_headers || (Py_TYPE(v) == meta_type && !PyObject_GC_IsTracked(v))))
            return;
    }
    if (PyObject_IS_GC(obj))
        PyObject_GC_UnTrack(obj);
}

/* The int made last for a field, reused while the next record holds the same value (perf: a batch
 * of puts shares its add_ms, and often its record size).  ``obj`` is a reference owned by the
 * cache (released by cache_clear). */
typedef struct {
    uint64_t value;
    PyObject *obj;
} IntCache;

static PyObject *
cached_u64(IntCache *c, uint64_t v)
{
    if (c == NULL)
        return PyLong_FromUnsignedLongLong(v);
    if (c->obj == NULL || c->value != v) {
        PyObject *obj = PyLong_FromUnsignedLongLong(v);
        if (obj == NULL)
            return NULL;
        Py_XSETREF(c->obj, obj);
        c->value = v;
    }
    return Py_NewRef(c->obj);
}

static void
cache_clear(IntCache *c, int n)
{
    for (int i = 0; i < n; i++)
        Py_CLEAR(c[i].obj);
}

/* An object of ``type`` with its ``n`` slots ``fields`` set to ``vals`` (new references, released
 * here; a NULL among them means an error is set), left out of the collector's walks when they
 * allow it. */
static PyObject *
new_record(PyTypeObject *type, PyObject *const *fields, PyObject **vals, int n)
{
    PyObject *obj = NULL;
    for (int i = 0; i < n; i++)
        if (vals[i] == NULL)
            goto done;
    obj = type->tp_alloc(type, 0);
    if (obj == NULL)
        goto done;
    for (int i = 0; i < n; i++) {
        if (Py_TYPE(fields[i])->tp_descr_set(fields[i], obj, vals[i]) < 0) {
            Py_CLEAR(obj);
            goto done;
        }
    }
    untrack_atomic(obj, vals, n);
done:
    for (int i = 0; i < n; i++)
        Py_XDECREF(vals[i]);
    return obj;
}

/* The offset and size every record of a compressed unit takes (the unit's), one int object each
 * shared by all of them (section unit_records); NULL in the other twins: each record its own. */
typedef struct {
    PyObject *offset, *size;
} Label;

/* A Put's fields into ``vals``; ``cache`` (NULL: none) holds two IntCaches, for the size and for
 * add_ms; ``label`` (NULL: none) replaces ``offset`` and ``size``. */
static void
put_values(PyObject **vals, int64_t offset, Py_ssize_t size, uint64_t id, uint64_t add_ms, uint64_t expire_ms,
           const unsigned char *payload, Py_ssize_t len, IntCache *cache, const Label *label)
{
    vals[PUT_OFFSET] = label != NULL ? Py_NewRef(label->offset) : PyLong_FromLongLong(offset);
    vals[PUT_SIZE] = label != NULL ? Py_NewRef(label->size) : cached_u64(cache, (uint64_t)size);
    vals[PUT_ID] = PyLong_FromUnsignedLongLong(id);
    vals[PUT_ADD_MS] = cached_u64(cache == NULL ? NULL : cache + 1, add_ms);
    vals[PUT_EXPIRE_MS] = PyLong_FromUnsignedLongLong(expire_ms);
    vals[PUT_PAYLOAD] = PyBytes_FromStringAndSize((const char *)payload, len);
}

/* A Put; ``cache`` and ``label`` as put_values(). */
static PyObject *
new_put(int64_t offset, Py_ssize_t size, uint64_t id, uint64_t add_ms, uint64_t expire_ms,
        const unsigned char *payload, Py_ssize_t len, IntCache *cache, const Label *label)
{
    PyObject *vals[PUT_NFIELDS];
    put_values(vals, offset, size, id, add_ms, expire_ms, payload, len, cache, label);
    return new_record(put_type, put_fields, vals, PUT_NFIELDS);
}

/* The record at ``p`` (a PUTX of at least PUTX_FIELDS_SIZE bytes of body) carries only a producer's
 * tag: no not-before, no key, no headers.  Its payload then starts at PUTX_OVERHEAD. */
static inline int
putx_tag_only(const unsigned char *p)
{
    return get_u64(p + PUTX_NOT_BEFORE_AT) == 0 && p[PUTX_KEY_LEN_AT] == 0 && p[PUTX_KEY_LEN_AT + 1] == 0 &&
           p[PUTX_HEADER_COUNT_AT] == 0 && p[PUTX_HEADER_COUNT_AT + 1] == 0 && get_u32(p + PUTX_HEADERS_LEN_AT) == 0;
}

/* The PutX of the tag-only PUTX record at ``p`` (``size`` bytes in all), as record.decode_one makes
 * it: Meta(0, producer, sequence, None, NO_HEADERS); ``cache`` and ``label`` as put_values(). */
static PyObject *
new_putx_tagged(int64_t offset, Py_ssize_t size, const unsigned char *p, IntCache *cache, const Label *label)
{
    PyObject *mvals[META_NFIELDS] = {PyLong_FromLong(0), PyLong_FromUnsignedLongLong(get_u64(p + PUTX_PRODUCER_AT)),
                                     PyLong_FromUnsignedLongLong(get_u64(p + PUTX_SEQUENCE_AT)), Py_NewRef(Py_None),
                                     Py_NewRef(no_headers)};
    PyObject *vals[PUTX_NFIELDS];
    put_values(vals, offset, size, get_u64(p + PUT_ID_AT), get_u64(p + PUT_ADD_MS_AT), get_u64(p + PUT_EXPIRE_MS_AT),
               p + PUTX_OVERHEAD, size - PUTX_OVERHEAD, cache, label);
    vals[PUTX_META] = new_record(meta_type, meta_fields, mvals, META_NFIELDS);
    return new_record(putx_type, putx_fields, vals, PUTX_NFIELDS);
}

/* The metadata of a PUTX, checked as metadata.decode checks it (reference: format/metadata.py,
 * decode), as offsets into the record: no Python object is made.  ``ok`` is 0 when the bytes are not
 * metadata (the reference then says why: every caller hands such a record to it) or when it holds
 * more headers than the fast paths take (MAX_FAST_HEADERS: the repeated-name check here compares
 * each name with the ones before it). */
#define MAX_FAST_HEADERS 64 /* metadata.MAX_HEADERS: what a put writes at most */
#define HEADER_LENS_SIZE 5  /* name_len u8, value_len u32 */
typedef struct {
    int ok;
    uint64_t not_before;
    long long key_at, key_len;       /* from the record's start */
    long long headers_at, headers_end;
    int count;
    long long payload_at;            /* == headers_end */
} MetaScan;

/* ``s[0..n)`` is UTF-8 as Python's strict decoder takes it: no overlong forms, no surrogates, nothing
 * past U+10FFFF. */
static int
valid_utf8(const unsigned char *s, long long n)
{
    long long i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int extra;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            extra = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            extra = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            extra = 3;
            cp = c & 0x07;
        } else
            return 0;
        if (i + extra >= n)
            return 0;
        for (int k = 1; k <= extra; k++) {
            unsigned char d = s[i + k];
            if ((d & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (d & 0x3F);
        }
        if ((extra == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += extra + 1;
    }
    return 1;
}

/* Scan the metadata of the PUTX record at ``p`` whose body ends at ``p + end`` (end >=
 * PUTX_OVERHEAD: its fixed fields are there). */
static MetaScan
scan_meta(const unsigned char *p, long long end)
{
    MetaScan m = {0};
    long long key_len = p[PUTX_KEY_LEN_AT] | p[PUTX_KEY_LEN_AT + 1] << 8;
    int count = p[PUTX_HEADER_COUNT_AT] | p[PUTX_HEADER_COUNT_AT + 1] << 8;
    long long block = get_u32(p + PUTX_HEADERS_LEN_AT);
    long long at = PUTX_OVERHEAD;
    if (at + key_len + block > end || count > MAX_FAST_HEADERS)
        return m;
    m.not_before = get_u64(p + PUTX_NOT_BEFORE_AT);
    m.key_at = at;
    m.key_len = key_len;
    at += key_len;
    long long stop = at + block;
    m.headers_at = at;
    long long name_at[MAX_FAST_HEADERS], name_len[MAX_FAST_HEADERS];
    for (int i = 0; i < count; i++) {
        if (at + HEADER_LENS_SIZE > stop)
            return m;
        long long nlen = p[at], vlen = get_u32(p + at + 1);
        at += HEADER_LENS_SIZE;
        if (nlen == 0 || at + nlen + vlen > stop || !valid_utf8(p + at, nlen))
            return m;
        for (int j = 0; j < i; j++)
            if (name_len[j] == nlen && memcmp(p + name_at[j], p + at, (size_t)nlen) == 0)
                return m;
        name_at[i] = at;
        name_len[i] = nlen;
        at += nlen + vlen;
    }
    if (at != stop)
        return m;
    m.headers_end = m.payload_at = stop;
    m.count = count;
    m.ok = 1;
    return m;
}

/* The header block decoded last in one call, and its mapping (owned), reused for the next record whose
 * block holds the same bytes (perf: the items of one put share their headers).  Sharing is safe: the
 * mapping is a read-only proxy of a dict only it refers to. */
#define HEADER_CACHE_BYTES 256 /* blocks up to this are cached, as a copy: Python code run between
                                * two records (the collector) may change a bytearray's bytes */
typedef struct {
    unsigned char block[HEADER_CACHE_BYTES];
    long long len;
    PyObject *hdrs;
} HeaderCache;

static void
header_cache_clear(HeaderCache *c)
{
    Py_CLEAR(c->hdrs);
}

/* The Meta of a scanned PUTX, as metadata.decode makes it: the key (None when empty), the headers in
 * a read-only mapping in stored order (NO_HEADERS when none); ``cache`` may be NULL. */
static PyObject *
new_meta(const unsigned char *p, const MetaScan *m, HeaderCache *cache)
{
    PyObject *hdrs = NULL;
    long long block = m->headers_end - m->headers_at;
    if (m->count == 0)
        hdrs = Py_NewRef(no_headers);
    else if (cache != NULL && cache->hdrs != NULL && cache->len == block &&
             memcmp(cache->block, p + m->headers_at, (size_t)block) == 0)
        hdrs = Py_NewRef(cache->hdrs);
    else {
        PyObject *d = PyDict_New();
        if (d == NULL)
            return NULL;
        long long at = m->headers_at;
        for (int i = 0; i < m->count; i++) {
            long long nlen = p[at], vlen = get_u32(p + at + 1);
            at += HEADER_LENS_SIZE;
            PyObject *name = PyUnicode_DecodeUTF8((const char *)p + at, (Py_ssize_t)nlen, "strict");
            PyObject *value = name ? PyBytes_FromStringAndSize((const char *)p + at + nlen, (Py_ssize_t)vlen) : NULL;
            int rc = value ? PyDict_SetItem(d, name, value) : -1;
            Py_XDECREF(name);
            Py_XDECREF(value);
            if (rc < 0) {
                Py_DECREF(d);
                return NULL;
            }
            at += nlen + vlen;
        }
        /* (the proxy stays tracked by the collector: its dealloc untracks it unconditionally) */
        hdrs = PyDictProxy_New(d);
        Py_DECREF(d);
        if (hdrs == NULL)
            return NULL;
        if (cache != NULL && block <= HEADER_CACHE_BYTES) {
            Py_XSETREF(cache->hdrs, Py_NewRef(hdrs));
            memcpy(cache->block, p + m->headers_at, (size_t)block);
            cache->len = block;
        }
    }
    PyObject *mvals[META_NFIELDS] = {
        PyLong_FromUnsignedLongLong(m->not_before), PyLong_FromUnsignedLongLong(get_u64(p + PUTX_PRODUCER_AT)),
        PyLong_FromUnsignedLongLong(get_u64(p + PUTX_SEQUENCE_AT)),
        m->key_len ? PyBytes_FromStringAndSize((const char *)p + m->key_at, (Py_ssize_t)m->key_len) : Py_NewRef(Py_None),
        hdrs};
    return new_record(meta_type, meta_fields, mvals, META_NFIELDS);
}

/* The PutX of the scanned PUTX record at ``p`` (``size`` bytes in all), as record.decode_one makes it;
 * ``cache`` and ``label`` as put_values(). */
static PyObject *
new_putx(int64_t offset, Py_ssize_t size, const unsigned char *p, const MetaScan *m, IntCache *cache,
         HeaderCache *hcache, const Label *label)
{
    PyObject *vals[PUTX_NFIELDS];
    put_values(vals, offset, size, get_u64(p + PUT_ID_AT), get_u64(p + PUT_ADD_MS_AT), get_u64(p + PUT_EXPIRE_MS_AT),
               p + m->payload_at, size - m->payload_at, cache, label);
    vals[PUTX_META] = new_meta(p, m, hcache);
    return new_record(putx_type, putx_fields, vals, PUTX_NFIELDS);
}

static PyObject *
decode_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (py_decode_many == NULL)
        return not_configured();
    /* decode_many(buf, base_offset, salt, pos=0, max_body=MAX_BODY, limit=None): the fast path
     * takes them positionally, with ``limit`` by keyword or not; anything else goes to the
     * reference. */
    PyObject *a[6] = {NULL, NULL, NULL, NULL, NULL, Py_None};
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs < 3 || nargs > 6 || nkw > 1)
        goto reference;
    for (Py_ssize_t i = 0; i < nargs; i++)
        a[i] = args[i];
    if (nkw == 1) {
        if (nargs != 5 || !PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0)) ||
            PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "limit") != 0)
            goto reference;
        a[5] = args[nargs];
    }
    PyObject *buf = a[0];
    if (!(PyBytes_CheckExact(buf) || PyByteArray_CheckExact(buf) || PyMemoryView_Check(buf)))
        goto reference;
    long long base_offset, pos0, max_body;
    Py_ssize_t limit = PY_SSIZE_T_MAX;
    uint64_t salt;
    if (!PyLong_CheckExact(a[1]) || !PyLong_CheckExact(a[2]))
        goto reference;
    base_offset = PyLong_AsLongLong(a[1]);
    if (base_offset == -1 && PyErr_Occurred())
        goto clear;
    if (base_offset < 0 || base_offset > INDEX_MAX)
        goto reference;
    salt = PyLong_AsUnsignedLongLongMask(a[2]);
    if (salt == (uint64_t)-1 && PyErr_Occurred())
        goto clear;
    if (a[3] == NULL)
        pos0 = 0;
    else {
        if (!PyLong_CheckExact(a[3]))
            goto reference;
        pos0 = PyLong_AsLongLong(a[3]);
        if (pos0 == -1 && PyErr_Occurred())
            goto clear;
        if (pos0 < 0 || pos0 > INDEX_MAX)
            goto reference;
    }
    {
        PyObject *mb = a[4] != NULL ? a[4] : max_body_obj;
        if (!PyLong_CheckExact(mb))
            goto reference;
        max_body = PyLong_AsLongLong(mb);
        if (max_body == -1 && PyErr_Occurred())
            goto clear;
    }
    if (a[5] != Py_None) {
        if (!PyLong_CheckExact(a[5]))
            goto reference;
        limit = PyLong_AsSsize_t(a[5]);
        if (limit == -1 && PyErr_Occurred())
            goto clear;
    }
    Py_buffer view;
    if (PyMemoryView_Check(buf)) {
        Py_buffer *mv = PyMemoryView_GET_BUFFER(buf);
        /* len(buf) must be the byte count, as it is for the reference's slicing */
        if (mv->itemsize != 1 || mv->ndim > 1 || !PyBuffer_IsContiguous(mv, 'C'))
            goto reference;
    }
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0)
        goto clear;

    PyObject *out = PyList_New(0);
    PyObject *damage = Py_None;
    HeaderCache hcache = {.len = 0, .hdrs = NULL};
    Py_INCREF(damage);
    if (out == NULL)
        goto fail;
    {
        const unsigned char *data = (const unsigned char *)view.buf;
        long long n = view.len, pos = pos0;
        Py_ssize_t count = 0;
        while (pos < n && count < limit) {
            if (pos + PUT_OVERHEAD <= n) {
                const unsigned char *p = data + pos;
                uint32_t crc = get_u32(p + RECORD_CRC_AT), length = get_u32(p + RECORD_LENGTH_AT);
                long long end = pos + RECORD_HEADER_SIZE + (long long)length;
                long long offset = base_offset + pos;
                if (p[RECORD_TYPE_AT] == TYPE_PUT && length >= PUT_FIELDS_SIZE && (long long)length <= max_body &&
                    end <= n &&
                    crc32c((uint32_t)(salt ^ (uint64_t)offset), p + RECORD_LENGTH_AT,
                           (size_t)(end - pos - RECORD_LENGTH_AT)) == crc) {
                    PyObject *rec = new_put(offset, (Py_ssize_t)(end - pos), get_u64(p + PUT_ID_AT),
                                            get_u64(p + PUT_ADD_MS_AT), get_u64(p + PUT_EXPIRE_MS_AT),
                                            p + PUT_OVERHEAD, (Py_ssize_t)(end - pos - PUT_OVERHEAD), NULL, NULL);
                    if (rec == NULL || PyList_Append(out, rec) < 0) {
                        Py_XDECREF(rec);
                        goto fail;
                    }
                    Py_DECREF(rec);
                    pos = end;
                    count++;
                    continue;
                }
                MetaScan m = {0};
                if (p[RECORD_TYPE_AT] == TYPE_PUTX && length >= PUTX_FIELDS_SIZE && (long long)length <= max_body &&
                    end <= n && (putx_tag_only(p) || (m = scan_meta(p, end - pos)).ok) &&
                    crc32c((uint32_t)(salt ^ (uint64_t)offset), p + RECORD_LENGTH_AT,
                           (size_t)(end - pos - RECORD_LENGTH_AT)) == crc) {
                    /* metadata that does not scan is the reference's to describe (Damage) */
                    PyObject *rec = m.ok ? new_putx(offset, (Py_ssize_t)(end - pos), p, &m, NULL, &hcache, NULL)
                                         : new_putx_tagged(offset, (Py_ssize_t)(end - pos), p, NULL, NULL);
                    if (rec == NULL || PyList_Append(out, rec) < 0) {
                        Py_XDECREF(rec);
                        goto fail;
                    }
                    Py_DECREF(rec);
                    pos = end;
                    count++;
                    continue;
                }
            }
            /* not a well-formed PUT or tag-only PUTX: the reference classifies it */
            PyObject *rec = PyObject_CallFunction(py_decode_one, "OLOOO", buf, pos, a[1], a[2],
                                                  a[4] ? a[4] : max_body_obj);
            if (rec == NULL)
                goto fail;
            if (PyObject_TypeCheck(rec, damage_type)) {
                Py_SETREF(damage, rec);
                break;
            }
            PyObject *size_obj = PyObject_GetAttr(rec, str_size);
            if (size_obj == NULL || PyList_Append(out, rec) < 0) {
                Py_XDECREF(size_obj);
                Py_DECREF(rec);
                goto fail;
            }
            Py_DECREF(rec);
            long long size = PyLong_AsLongLong(size_obj);
            Py_DECREF(size_obj);
            if (size == -1 && PyErr_Occurred())
                goto fail;
            if (size < -pos || size > LLONG_MAX - pos) {
                /* only a decode_one other than record.py's can say so: memory-safe refusal */
                PyErr_Format(PyExc_ValueError, "decode_one returned a record of size %lld at position %lld",
                             size, pos);
                goto fail;
            }
            pos += size;
            count++;
        }
        PyBuffer_Release(&view);
        header_cache_clear(&hcache);
        PyObject *end_obj = PyLong_FromLongLong(pos);
        if (end_obj == NULL) {
            Py_DECREF(out);
            Py_DECREF(damage);
            return NULL;
        }
        return Py_BuildValue("(NNN)", out, end_obj, damage);
    }
fail:
    PyBuffer_Release(&view);
    header_cache_clear(&hcache);
    Py_XDECREF(out);
    Py_DECREF(damage);
    return NULL;
clear:
    PyErr_Clear();
reference:
    return PyObject_Vectorcall(py_decode_many, args, (size_t)nargs, kwnames);
}

/* ------------------------------------------------------------------------------ walk_puts
 * reference: format/fallback.py, walk_puts */

/* walk_puts(buf, base_offset, salt, pos, expected, max_items, max_bytes, nbytes, first_free): the
 * record walker's loop, positional arguments only.  Well-formed PUTs and PUTXs carrying only a
 * producer's tag, with ids in [0, INDEX_MAX], are walked here; a PUT below ``expected`` is passed over without being built (the reference builds
 * and drops it), and a PUT that does not fit the budget ends the walk before it is built.  At the
 * first record off that path (damage, the buffer's end inside a record, another type, an id past
 * INDEX_MAX) the reference walks the rest, from that position with the state reached here (the
 * records it decodes are the ones decode_many's reference would), and its result is joined to the
 * PUTs kept so far.  Arguments off the fast path (other types, numbers outside [0, INDEX_MAX])
 * go to the reference from the start. */

static PyObject *
walk_result(PyObject *out, long long pos, long long expected, long long nbytes, int full, long long end)
{
    PyObject *p = PyLong_FromLongLong(pos), *x = PyLong_FromLongLong(expected), *b = PyLong_FromLongLong(nbytes),
             *e = PyLong_FromLongLong(end);
    if (p == NULL || x == NULL || b == NULL || e == NULL) {
        Py_XDECREF(p);
        Py_XDECREF(x);
        Py_XDECREF(b);
        Py_XDECREF(e);
        return NULL;
    }
    return Py_BuildValue("(ONNNONO)", out, p, x, b, full ? Py_True : Py_False, e, Py_None);
}

/* The reference's walk of the rest from ``pos``, joined to ``out`` (the PUTs kept here). */
static PyObject *
walk_rest(PyObject *const *args, PyObject *out, long long pos, long long expected, long long max_items,
          long long nbytes, int first_free)
{
    PyObject *rest_args[9] = {args[0], args[1], args[2], NULL, NULL, NULL, args[6], NULL, NULL};
    PyObject *res = NULL;
    rest_args[3] = PyLong_FromLongLong(pos);
    rest_args[4] = PyLong_FromLongLong(expected);
    rest_args[5] = PyLong_FromLongLong(max_items);
    rest_args[7] = PyLong_FromLongLong(nbytes);
    rest_args[8] = Py_NewRef(first_free && PyList_GET_SIZE(out) == 0 ? Py_True : Py_False);
    if (rest_args[3] == NULL || rest_args[4] == NULL || rest_args[5] == NULL || rest_args[7] == NULL)
        goto done;
    PyObject *ref = Py_NewRef(py_walk_puts); /* a configure() from Python code may replace it */
    res = PyObject_Vectorcall(ref, rest_args, 9, NULL);
    Py_DECREF(ref);
    if (res == NULL)
        goto done;
    if (!PyTuple_CheckExact(res) || PyTuple_GET_SIZE(res) != 7 || !PyList_CheckExact(PyTuple_GET_ITEM(res, 0))) {
        PyErr_SetString(PyExc_TypeError, "walk_puts' reference must return a 7-tuple starting with a list");
        Py_CLEAR(res);
        goto done;
    }
    {
        PyObject *tail = Py_NewRef(PyTuple_GET_ITEM(res, 0));
        int rc = PyList_SetSlice(out, PyList_GET_SIZE(out), PyList_GET_SIZE(out), tail);
        Py_DECREF(tail);
        if (rc < 0) {
            Py_CLEAR(res);
            goto done;
        }
        PyObject *joined = PyTuple_New(7);
        if (joined == NULL) {
            Py_CLEAR(res);
            goto done;
        }
        PyTuple_SET_ITEM(joined, 0, Py_NewRef(out));
        for (Py_ssize_t i = 1; i < 7; i++)
            PyTuple_SET_ITEM(joined, i, Py_NewRef(PyTuple_GET_ITEM(res, i)));
        Py_SETREF(res, joined);
    }
done:
    for (int i = 3; i < 9; i++)
        if (i != 6)
            Py_XDECREF(rest_args[i]);
    return res;
}

static PyObject *
walk_puts(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (py_walk_puts == NULL || put_type == NULL || putx_type == NULL)
        return not_configured();
    long long base_offset, pos, expected, max_items, max_bytes, nbytes;
    if (kwnames != NULL || nargs != 9)
        goto reference;
    PyObject *buf = args[0];
    if (!(PyBytes_CheckExact(buf) || PyByteArray_CheckExact(buf)) || !PyLong_CheckExact(args[2]) ||
        !as_index(args[1], &base_offset) || !as_index(args[3], &pos) || !as_index(args[4], &expected) ||
        !as_index(args[5], &max_items) || !as_index(args[6], &max_bytes) || !as_index(args[7], &nbytes) ||
        !PyBool_Check(args[8]))
        goto reference;
    uint64_t salt = PyLong_AsUnsignedLongLongMask(args[2]);
    if (salt == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto reference;
    }
    int first_free = args[8] == Py_True;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = PyList_New(0), *res = NULL;
    IntCache cache[2] = {{0, NULL}, {0, NULL}};
    HeaderCache hcache = {.len = 0, .hdrs = NULL};
    if (out == NULL)
        goto done;
    {
        /* the view pins the bytes (a bytearray cannot be resized while it is held) */
        const unsigned char *data = (const unsigned char *)view.buf;
        long long n = view.len, count = 0;
        while (pos < n && count < max_items) {
            if (pos + PUT_OVERHEAD > n)
                break;
            const unsigned char *p = data + pos;
            uint32_t crc = get_u32(p + RECORD_CRC_AT), length = get_u32(p + RECORD_LENGTH_AT);
            long long end = pos + RECORD_HEADER_SIZE + (long long)length;
            long long offset = base_offset + pos;
            uint64_t id = get_u64(p + PUT_ID_AT);
            int tagged = p[RECORD_TYPE_AT] == TYPE_PUTX;
            MetaScan m = {0};
            if (!(tagged ? length >= PUTX_FIELDS_SIZE : p[RECORD_TYPE_AT] == TYPE_PUT && length >= PUT_FIELDS_SIZE) ||
                (long long)length > MAX_BODY || end > n || id > (uint64_t)INDEX_MAX ||
                (tagged && !putx_tag_only(p) && !(m = scan_meta(p, end - pos)).ok) ||
                crc32c((uint32_t)(salt ^ (uint64_t)offset), p + RECORD_LENGTH_AT, (size_t)(end - pos - RECORD_LENGTH_AT)) !=
                    crc)
                break;
            if ((long long)id >= expected) {
                /* below 2**31: nbytes + len cannot overflow */
                long long len = end - pos - (m.ok ? m.payload_at : tagged ? PUTX_OVERHEAD : PUT_OVERHEAD);
                if ((PyList_GET_SIZE(out) > 0 || !first_free) && nbytes + len > max_bytes) {
                    res = walk_result(out, pos, expected, nbytes, 1, pos);
                    goto done;
                }
                PyObject *rec = m.ok     ? new_putx(offset, (Py_ssize_t)(end - pos), p, &m, cache, &hcache, NULL)
                                : tagged ? new_putx_tagged(offset, (Py_ssize_t)(end - pos), p, cache, NULL)
                                         : new_put(offset, (Py_ssize_t)(end - pos), id, get_u64(p + PUT_ADD_MS_AT),
                                                 get_u64(p + PUT_EXPIRE_MS_AT), p + PUT_OVERHEAD, (Py_ssize_t)len, cache,
                                                   NULL);
                if (rec == NULL)
                    goto done;
                int rc = PyList_Append(out, rec);
                Py_DECREF(rec);
                if (rc < 0)
                    goto done;
                nbytes += len;
                expected = (long long)id + 1;
            }
            pos = end;
            count++;
        }
        if (pos < n && count < max_items)
            res = walk_rest(args, out, pos, expected, max_items - count, nbytes, first_free);
        else
            res = walk_result(out, pos, expected, nbytes, 0, pos);
    }
done:
    cache_clear(cache, 2);
    header_cache_clear(&hcache);
    PyBuffer_Release(&view);
    Py_XDECREF(out);
    return res;
reference:
    return PyObject_Vectorcall(py_walk_puts, args, (size_t)nargs, kwnames);
}

/* ------------------------------------------------------------------------------ unit_records
 * reference: format/fallback.py, unit_records */

/* unit_records(raw, salt, offset, size, first_id, count), positional arguments only: the records of
 * a compressed unit's inner bytes, each with the unit's offset and size (one int object of each,
 * shared), and the running payload sizes.  The fast path takes inner bytes that are exactly
 * ``count`` well-formed PUTs and PUTXs whose metadata scans, ids ``first_id ..`` in order: a unit as
 * every writer makes it.  At the first thing off that path (damage, another type, an id out of
 * order, a count that differs) everything built is dropped and the reference decides, from the
 * start: it says why the unit is damaged in its words, so the twins agree by construction.
 * Arguments off the fast path (other types, numbers outside [0, INDEX_MAX]) go to the reference. */
static PyObject *
unit_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (py_unit_records == NULL || put_type == NULL || putx_type == NULL)
        return not_configured();
    long long offset, size, first_id, count;
    if (kwnames != NULL || nargs != 6)
        goto reference;
    PyObject *buf = args[0];
    if (!(PyBytes_CheckExact(buf) || PyByteArray_CheckExact(buf) || PyMemoryView_Check(buf)) ||
        !PyLong_CheckExact(args[1]) || !as_index(args[2], &offset) || !as_index(args[3], &size) ||
        !as_index(args[4], &first_id) || !as_index(args[5], &count))
        goto reference;
    if (PyMemoryView_Check(buf)) {
        Py_buffer *mv = PyMemoryView_GET_BUFFER(buf);
        /* len(raw) must be the byte count, as it is for the reference */
        if (mv->itemsize != 1 || mv->ndim > 1 || !PyBuffer_IsContiguous(mv, 'C'))
            goto reference;
    }
    uint64_t salt = PyLong_AsUnsignedLongLongMask(args[1]);
    if (salt == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto reference;
    }
    uint64_t inner_salt = (salt ^ (uint64_t)offset) & 0xFFFFFFFFu;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    /* one of each for every record (perf: the records of a unit share them, as they share add_ms) */
    Label label = {args[2], args[3]};
    PyObject *out = NULL, *sizes = NULL, *res = NULL;
    IntCache cache[2] = {{0, NULL}, {0, NULL}};
    HeaderCache hcache = {.len = 0, .hdrs = NULL};
    int off_path = 0;
    /* ``count`` is no promise of what the bytes hold (the unit's fields are the writer's word):
     * a list grows as the records come */
    out = PyList_New(0);
    sizes = PyList_New(0);
    if (out == NULL || sizes == NULL)
        goto done;
    {
        PyObject *zero = PyLong_FromLong(0);
        int rc = zero == NULL ? -1 : PyList_Append(sizes, zero);
        Py_XDECREF(zero);
        if (rc < 0)
            goto done;
    }
    {
        /* the view pins the bytes (a bytearray cannot be resized while it is held) */
        const unsigned char *data = (const unsigned char *)view.buf;
        long long n = view.len, pos = 0, k = 0, total = 0;
        while (pos < n) {
            if (k >= count || pos + PUT_OVERHEAD > n) {
                off_path = 1;
                break;
            }
            const unsigned char *p = data + pos;
            uint32_t crc = get_u32(p + RECORD_CRC_AT), length = get_u32(p + RECORD_LENGTH_AT);
            long long end = pos + RECORD_HEADER_SIZE + (long long)length;
            uint64_t id = get_u64(p + PUT_ID_AT);
            int tagged = p[RECORD_TYPE_AT] == TYPE_PUTX;
            MetaScan m = {0};
            if (!(tagged ? length >= PUTX_FIELDS_SIZE : p[RECORD_TYPE_AT] == TYPE_PUT && length >= PUT_FIELDS_SIZE) ||
                (long long)length > MAX_BODY || end > n || id != (uint64_t)(first_id + k) ||
                (tagged && !putx_tag_only(p) && !(m = scan_meta(p, end - pos)).ok) ||
                crc32c((uint32_t)(inner_salt ^ (uint64_t)pos), p + RECORD_LENGTH_AT,
                       (size_t)(end - pos - RECORD_LENGTH_AT)) != crc) {
                off_path = 1;
                break;
            }
            /* below 2**31 each, and n bounds their sum */
            long long len = end - pos - (m.ok ? m.payload_at : tagged ? PUTX_OVERHEAD : PUT_OVERHEAD);
            PyObject *rec = m.ok     ? new_putx(pos, (Py_ssize_t)(end - pos), p, &m, cache, &hcache, &label)
                            : tagged ? new_putx_tagged(pos, (Py_ssize_t)(end - pos), p, cache, &label)
                                     : new_put(pos, (Py_ssize_t)(end - pos), id, get_u64(p + PUT_ADD_MS_AT),
                                               get_u64(p + PUT_EXPIRE_MS_AT), p + PUT_OVERHEAD, (Py_ssize_t)len, cache,
                                               &label);
            if (rec == NULL)
                goto done;
            int rc = PyList_Append(out, rec);
            Py_DECREF(rec);
            if (rc < 0)
                goto done;
            total += len;
            PyObject *t = PyLong_FromLongLong(total);
            rc = t == NULL ? -1 : PyList_Append(sizes, t);
            Py_XDECREF(t);
            if (rc < 0)
                goto done;
            pos = end;
            k++;
        }
        if (!off_path && k != count)
            off_path = 1;
    }
    if (!off_path)
        res = PyTuple_Pack(2, out, sizes);
done:
    cache_clear(cache, 2);
    header_cache_clear(&hcache);
    PyBuffer_Release(&view);
    Py_XDECREF(out);
    Py_XDECREF(sizes);
    if (!off_path)
        return res;
reference:
    {
        PyObject *ref = Py_NewRef(py_unit_records); /* a configure() from Python code may replace it */
        PyObject *r = PyObject_Vectorcall(ref, args, (size_t)nargs, kwnames);
        Py_DECREF(ref);
        return r;
    }
}

/* ------------------------------------------------------------------------------ decode_columns
 * reference: format/fallback.py, decode_columns */

/* decode_columns(buf, base_offset, salt, pos, lo, hi, end_offset, max_rows, max_bytes, out): see the
 * reference for what it does.  ``out`` is columns.py's layout: five bytearrays (ids and times as
 * little-endian u64, the payloads' end offsets in ``data`` as little-endian int32, the payloads back to
 * back), or those and eight more for the metadata (columns.META_COLUMNS: key offsets and bytes,
 * not-before, header offsets, header names' offsets and bytes, values' offsets and bytes), with which
 * every PUTX whose metadata scans is a row.  Arguments off the fast path (other types, numbers outside
 * their range) go to the reference. */

enum {
    COL_IDS,
    COL_ADD_MS,
    COL_EXPIRE_MS,
    COL_OFFSETS,
    COL_DATA,
    NCOLUMNS,
    COL_KEY_OFFSETS = NCOLUMNS,
    COL_KEY_DATA,
    COL_NOT_BEFORE,
    COL_HEADER_OFFSETS,
    COL_NAME_OFFSETS,
    COL_NAME_DATA,
    COL_VALUE_OFFSETS,
    COL_VALUE_DATA,
    NCOLUMNS_META
};
#define U64 8 /* bytes of one id or time in its column */
#define I32 4 /* bytes of one payload end offset in its column */

/* One column being appended to: its bytearray, its size on entry and the bytes written so far. */
typedef struct {
    PyObject *obj;
    Py_ssize_t size0, used;
} Col;

/* The bytes ``b`` holds without reallocating: its allocation past its start, less the trailing NUL
 * (bytearray_resize's own test, Objects/bytearrayobject.c). */
static Py_ssize_t
bytearray_capacity(PyObject *b)
{
    PyByteArrayObject *a = (PyByteArrayObject *)b;
    Py_ssize_t cap = a->ob_alloc - (Py_ssize_t)(a->ob_start - a->ob_bytes) - 1;
    return cap > Py_SIZE(b) ? cap : Py_SIZE(b);
}

/* Room for ``need`` more bytes in ``c`` (grown by doubling); -1 with an error.  perf: the room is
 * the allocation's, not the size's.  A call ends by cutting each column to what it wrote, which
 * keeps the allocation; doubling the size on the next call's first row then missed it by a little,
 * and bytearray's resize moved the whole column (a Spark batch fed a unit at a time by the
 * compressed path, ~30 calls per batch, copied its 7 MB of payloads ~16 times: 0.4 us per row). */
static int
col_reserve(Col *c, long long need)
{
    Py_ssize_t have = PyByteArray_GET_SIZE(c->obj);
    long long want = c->size0 + c->used + need;
    if (want <= have)
        return 0;
    Py_ssize_t cap = bytearray_capacity(c->obj);
    if (want <= cap)
        return PyByteArray_Resize(c->obj, cap); /* within the allocation: no move, no realloc */
    long long doubled = 2 * (long long)cap;
    return PyByteArray_Resize(c->obj, (Py_ssize_t)(doubled > want ? doubled : want));
}

static inline unsigned char *
col_at(Col *c)
{
    return (unsigned char *)PyByteArray_AS_STRING(c->obj) + c->size0 + c->used;
}

/* Append ``n`` bytes (reserved) to ``c``. */
static inline void
col_put(Col *c, const unsigned char *p, long long n)
{
    memcpy(col_at(c), p, (size_t)n);
    c->used += n;
}

static PyObject *
decode_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (py_decode_columns == NULL)
        return not_configured();
    long long base_offset, pos, lo, hi, end_offset, max_rows, max_bytes;
    uint64_t salt;
    if (kwnames != NULL || nargs != 10 || !PyBytes_CheckExact(args[0]) || !PyLong_CheckExact(args[2]))
        goto reference;
    if (!as_index(args[1], &base_offset) || !as_index(args[3], &pos) || !as_index(args[4], &lo) ||
        !as_index(args[5], &hi) || !as_index(args[6], &end_offset) || !as_index(args[7], &max_rows) ||
        !as_index(args[8], &max_bytes) || max_bytes > MAX_BATCH_BYTES)
        goto reference;
    salt = PyLong_AsUnsignedLongLongMask(args[2]);
    if (salt == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto reference;
    }
    PyObject *out = args[9];
    if (!PyList_CheckExact(out) || (PyList_GET_SIZE(out) != NCOLUMNS && PyList_GET_SIZE(out) != NCOLUMNS_META))
        goto reference;
    int ncols = (int)PyList_GET_SIZE(out), with_meta = ncols == NCOLUMNS_META;
    Col col[NCOLUMNS_META];
    for (int i = 0; i < ncols; i++) {
        col[i].obj = PyList_GET_ITEM(out, i);
        if (!PyByteArray_CheckExact(col[i].obj))
            goto reference;
        for (int j = 0; j < i; j++)
            if (col[j].obj == col[i].obj)
                goto reference; /* one bytearray for two columns: the reference's appends interleave */
        col[i].size0 = PyByteArray_GET_SIZE(col[i].obj);
        col[i].used = 0;
    }
    /* as the reference: the metadata offsets continue from the sizes of their data columns, the header
     * offsets from the count of names (len(name offsets) // 4 - 1, after the leading 0) */
    long long key_end = 0, header_end = 0, name_end = 0, value_end = 0, meta_bytes = 0;
    if (with_meta) {
        key_end = col[COL_KEY_DATA].size0;
        name_end = col[COL_NAME_DATA].size0;
        value_end = col[COL_VALUE_DATA].size0;
        header_end = col[COL_NAME_OFFSETS].size0 / I32 - 1;
        if (col[COL_NAME_OFFSETS].size0 < I32 || key_end > MAX_BATCH_BYTES || name_end > MAX_BATCH_BYTES ||
            value_end > MAX_BATCH_BYTES)
            goto reference; /* not columns this layout makes: the reference says what it makes of them */
        meta_bytes = key_end + name_end + value_end;
    }
    /* as the reference: the row count is len(ids) // 8, offsets continue from len(data) */
    Py_ssize_t data0 = col[COL_DATA].size0;
    {
        Py_INCREF(args[0]); /* the bytes stay alive (and unchanged) while we read them */
        const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
        long long n = PyBytes_GET_SIZE(args[0]);
        long long rows = col[COL_IDS].size0 / U64;
        /* at most one record per PUT_OVERHEAD bytes, and max_rows in all */
        long long room = pos < n ? (n - pos) / PUT_OVERHEAD : 0;
        if (room > max_rows - rows)
            room = max_rows - rows > 0 ? max_rows - rows : 0;
        /* the columns grow as rows come, by doubling (perf: reserving for the most rows the buffer could
         * hold, four times what 100-byte items fill, made every call shrink them again, and the
         * allocator hand back and fault in their pages); ``cap`` rows fit the fixed-size columns */
        static const long long per_row[NCOLUMNS_META] = {U64, U64, U64, I32, 0, I32, 0, U64, I32, 0, 0, 0, 0};
        long long cap = 0;
        unsigned char *w[NCOLUMNS_META] = {NULL}; /* the fixed-size columns' row 0 of this call */
        long long dlen = data0, added = 0;
        uint64_t last_id = 0;
        int have_last = 0, status = 0;
        while (1) {
            if (rows >= max_rows || dlen >= max_bytes || meta_bytes >= max_bytes) {
                status = 2;
                break;
            }
            if (pos + PUT_OVERHEAD > n)
                break;
            const unsigned char *p = data + pos;
            uint32_t crc = get_u32(p + RECORD_CRC_AT), length = get_u32(p + RECORD_LENGTH_AT);
            long long end = pos + RECORD_HEADER_SIZE + (long long)length;
            /* a PUTX carrying only a producer's tag is a row like a PUT: no column holds the tag */
            int tagged = p[RECORD_TYPE_AT] == TYPE_PUTX;
            MetaScan m = {0};
            if (!(tagged ? length >= PUTX_FIELDS_SIZE : p[RECORD_TYPE_AT] == TYPE_PUT && length >= PUT_FIELDS_SIZE) ||
                (long long)length > MAX_BODY || end > n ||
                (tagged && !putx_tag_only(p) && !(with_meta && (m = scan_meta(p, end - pos)).ok)))
                break;
            long long offset = base_offset + pos;
            if (crc32c((uint32_t)(salt ^ (uint64_t)offset), p + RECORD_LENGTH_AT,
                       (size_t)(end - pos - RECORD_LENGTH_AT)) != crc)
                break;
            uint64_t id = get_u64(p + PUT_ID_AT);
            if (id >= (uint64_t)hi || offset >= end_offset) {
                status = 1;
                break;
            }
            last_id = id;
            have_last = 1;
            if (id >= (uint64_t)lo) {
                long long start = m.ok ? m.payload_at : tagged ? PUTX_OVERHEAD : PUT_OVERHEAD, len = end - pos - start;
                if (added == cap) {
                    /* the payloads: room for all the buffer holds (what a batch of a read takes,
                     * mostly), at the first row: a call that adds none (the compressed path's, at
                     * each unit) must not grow the column only to cut it back, a move each way */
                    if (added == 0 && col_reserve(&col[COL_DATA], n - pos) < 0)
                        goto fail;
                    long long more = cap > 256 ? cap : 256;
                    cap = more > room - added ? room : added + more; /* room > added: this row fits it */
                    for (int i = 0; i < ncols; i++)
                        if (per_row[i]) {
                            if (col_reserve(&col[i], per_row[i] * cap) < 0)
                                goto fail;
                            w[i] = col_at(&col[i]); /* where row 0 of this call goes */
                        }
                }
                if (col_reserve(&col[COL_DATA], len) < 0)
                    goto fail;
                memcpy(w[COL_IDS] + U64 * added, p + PUT_ID_AT, U64);
                memcpy(w[COL_ADD_MS] + U64 * added, p + PUT_ADD_MS_AT, U64);
                memcpy(w[COL_EXPIRE_MS] + U64 * added, p + PUT_EXPIRE_MS_AT, U64);
                col_put(&col[COL_DATA], p + start, len);
                dlen += len;
                put_u32(w[COL_OFFSETS] + I32 * added, (uint32_t)dlen);
                if (with_meta) {
                    /* below 2**31: each end is below max_bytes before the record, which adds less
                     * than MAX_BODY */
                    if (m.ok && m.count) {
                        long long block = m.headers_end - m.headers_at;
                        if (col_reserve(&col[COL_NAME_OFFSETS], I32 * (long long)m.count) < 0 ||
                            col_reserve(&col[COL_VALUE_OFFSETS], I32 * (long long)m.count) < 0 ||
                            col_reserve(&col[COL_NAME_DATA], block) < 0 || col_reserve(&col[COL_VALUE_DATA], block) < 0)
                            goto fail;
                        long long at = m.headers_at;
                        for (int h = 0; h < m.count; h++) {
                            long long nlen = p[at], vlen = get_u32(p + at + 1);
                            at += HEADER_LENS_SIZE;
                            col_put(&col[COL_NAME_DATA], p + at, nlen);
                            name_end += nlen;
                            put_u32(col_at(&col[COL_NAME_OFFSETS]), (uint32_t)name_end);
                            col[COL_NAME_OFFSETS].used += I32;
                            col_put(&col[COL_VALUE_DATA], p + at + nlen, vlen);
                            value_end += vlen;
                            put_u32(col_at(&col[COL_VALUE_OFFSETS]), (uint32_t)value_end);
                            col[COL_VALUE_OFFSETS].used += I32;
                            at += nlen + vlen;
                        }
                        header_end += m.count;
                        meta_bytes += block - HEADER_LENS_SIZE * (long long)m.count;
                    }
                    if (m.ok && m.key_len) {
                        if (col_reserve(&col[COL_KEY_DATA], m.key_len) < 0)
                            goto fail;
                        col_put(&col[COL_KEY_DATA], p + m.key_at, m.key_len);
                        key_end += m.key_len;
                        meta_bytes += m.key_len;
                    }
                    put_u32(w[COL_KEY_OFFSETS] + I32 * added, (uint32_t)key_end);
                    put_u64(w[COL_NOT_BEFORE] + U64 * added, m.ok ? m.not_before : 0);
                    put_u32(w[COL_HEADER_OFFSETS] + I32 * added, (uint32_t)header_end);
                }
                added++;
                rows++;
            }
            pos = end;
        }
        Py_DECREF(args[0]);
        for (int i = 0; i < ncols; i++) {
            long long used = per_row[i] ? per_row[i] * added : col[i].used;
            if (PyByteArray_Resize(col[i].obj, col[i].size0 + (Py_ssize_t)used) < 0)
                return NULL;
        }
        PyObject *last = have_last ? PyLong_FromUnsignedLongLong(last_id) : Py_NewRef(Py_None);
        if (last == NULL)
            return NULL;
        return Py_BuildValue("(LNi)", pos, last, status);
    fail:
        Py_DECREF(args[0]);
        for (int i = 0; i < ncols; i++)
            if (PyByteArray_GET_SIZE(col[i].obj) != col[i].size0) {
                PyObject *t, *v, *tb;
                PyErr_Fetch(&t, &v, &tb);
                if (PyByteArray_Resize(col[i].obj, col[i].size0) < 0)
                    PyErr_Clear(); /* shrinking: cannot fail */
                PyErr_Restore(t, v, tb);
            }
        return NULL;
    }
reference:
    return PyObject_Vectorcall(py_decode_columns, args, (size_t)nargs, kwnames);
}

/* ------------------------------------------------------------------------------ new_items
 * reference: format/fallback.py, new_item and new_items (built by item_references) */

/* An item with the field values ``vals``, a new reference (NULL with an error).  Its allocation may
 * run the collector: the caller holds ``vals``. */
static PyObject *
build_item(PyObject *const *vals)
{
    PyObject *obj = item_type->tp_alloc(item_type, 0);
    if (obj == NULL)
        return NULL;
    for (int k = 0; k < ITEM_NFIELDS; k++) {
        if (Py_TYPE(item_fields[k])->tp_descr_set(item_fields[k], obj, vals[k]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    untrack_atomic(obj, vals, ITEM_NFIELDS); /* every put makes one per reader's delivery */
    return obj;
}

/* new_item(id, data, add_time, expire_at=None, error_count=0), positional arguments only (the
 * caller holds them). */
static PyObject *
new_item(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (py_new_item == NULL)
        return not_configured();
    if (kwnames != NULL || nargs < 3 || nargs > 5)
        return PyObject_Vectorcall(py_new_item, args, (size_t)nargs, kwnames);
    PyObject *zero = NULL;
    if (nargs < 5 && (zero = PyLong_FromLong(0)) == NULL)
        return NULL;
    PyObject *vals[ITEM_NFIELDS] = {args[0], args[1], args[2], nargs > 3 ? args[3] : Py_None,
                                   nargs > 4 ? args[4] : zero};
    PyObject *obj = build_item(vals);
    Py_XDECREF(zero);
    return obj;
}

/* new_items(first_id, payloads, add_time, expire_at): fresh items with consecutive ids.  The list is
 * walked as the reference's ``for`` walks it, its size read again after each item (whose allocation
 * may run Python code that changes it). */
static PyObject *
new_items(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (py_new_items == NULL)
        return not_configured();
    if (kwnames != NULL || nargs != 4 || !PyLong_CheckExact(args[0]) || !PyList_CheckExact(args[1]))
        goto reference;
    long long first_id = PyLong_AsLongLong(args[0]);
    if (first_id == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto reference;
    }
    if (first_id < 0 || first_id > INDEX_MAX)
        goto reference;
    {
        PyObject *payloads = args[1];
        PyObject *out = PyList_New(0);
        if (out == NULL)
            return NULL;
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(payloads); i++) {
            PyObject *vals[ITEM_NFIELDS];
            /* first_id <= INDEX_MAX and a list holds fewer than 2**60 items: the sum fits */
            vals[ITEM_ID] = PyLong_FromLongLong(first_id + (long long)i);
            if (vals[ITEM_ID] == NULL)
                goto fail;
            vals[ITEM_DATA] = Py_NewRef(PyList_GET_ITEM(payloads, i));
            vals[ITEM_ADD_TIME] = args[2];
            vals[ITEM_EXPIRE_AT] = args[3];
            vals[ITEM_ERROR_COUNT] = zero;
            PyObject *obj = build_item(vals);
            Py_DECREF(vals[ITEM_ID]);
            Py_DECREF(vals[ITEM_DATA]);
            if (obj == NULL)
                goto fail;
            int appended = PyList_Append(out, obj);
            Py_DECREF(obj);
            if (appended < 0)
                goto fail;
        }
        Py_DECREF(zero);
        return out;
    fail:
        Py_DECREF(zero);
        Py_DECREF(out);
        return NULL;
    }
reference:
    return PyObject_Vectorcall(py_new_items, args, (size_t)nargs, kwnames);
}

/* ------------------------------------------------------------------------------ new_meta, new_meta_item
 * reference: format/fallback_meta.py, new_meta and new_meta_item (built by meta_references)
 *
 * A single put with a key or headers builds a metadata.Meta and, for its readers, an item.MetaItem:
 * here, as new_item builds an Item (slots set by their descriptors, no attribute read or set by name),
 * and left out of the collector's walks when nothing they hold can lead back to them (perf: the
 * collections every allocation may start otherwise walk each one while a reader holds it). */

static const char *const meta_item_field_names[ITEM_NFIELDS + 1] = {"id",        "data",        "add_time",
                                                                    "expire_at", "error_count", "stored"};

/* configure_items()'s meta_item_fields: ``meta_item`` (a subclass of ``item``) has Item's fields then
 * ``stored``, all plain slots; their descriptors into ``out`` (new references), else -1 with an error. */
static int
configure_meta_item(PyObject *item, PyObject *meta_item, PyObject *names, PyObject **out)
{
    if (meta_item == NULL || !PyType_Check(meta_item) ||
        !PyType_IsSubtype((PyTypeObject *)meta_item, (PyTypeObject *)item)) {
        PyErr_SetString(PyExc_TypeError, "meta_item_fields needs meta_item, a subclass of item_type");
        return -1;
    }
    return field_slots(meta_item, names, meta_item_field_names, ITEM_NFIELDS + 1, out);
}

/* ``h`` is the shared empty headers, or an exact mappingproxy of an exact dict holding at most
 * MAX_FAST_HEADERS exact str names and exact bytes values (what metadata.checked_headers and decode
 * make).  Nothing such a mapping refers to can refer to anything, so no reference cycle can pass
 * through a Meta that holds it with plain ints and bytes: the Meta may be left out of the collector's
 * walks (the proxy itself stays tracked: its dealloc untracks it unconditionally).  Reading the dict
 * runs no Python code. */
static int
atomic_headers(PyObject *h)
{
    if (h == no_headers)
        return 1;
    if (!Py_IS_TYPE(h, &PyDictProxy_Type))
        return 0;
    PyObject *d = ((mappingproxyobject_compat *)h)->mapping, *name, *value;
    if (!PyDict_CheckExact(d) || PyDict_GET_SIZE(d) > MAX_FAST_HEADERS)
        return 0;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &name, &value))
        if (!PyUnicode_CheckExact(name) || !PyBytes_CheckExact(value))
            return 0;
    return 1;
}

/* An object of ``type`` with its ``n`` slots ``fields`` set to ``args`` (borrowed: the caller holds
 * them across the allocation, which may run the collector). */
static PyObject *
build_slots(PyTypeObject *type, PyObject *const *fields, PyObject *const *args, int n)
{
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL)
        return NULL;
    for (int k = 0; k < n; k++) {
        if (Py_TYPE(fields[k])->tp_descr_set(fields[k], obj, args[k]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

/* new_meta(not_before_ms, producer, sequence, key, headers): Meta(...) built faster, positional
 * arguments only (any other call is Meta's own). */
static PyObject *
new_meta_twin(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyTypeObject *type = meta_type;
    if (type == NULL)
        return not_configured();
    if (kwnames != NULL || nargs != META_NFIELDS)
        return PyObject_Vectorcall((PyObject *)type, args, (size_t)nargs, kwnames);
    PyObject *obj = build_slots(type, meta_fields, args, META_NFIELDS);
    if (obj == NULL)
        return NULL;
    int atomic = 1;
    for (int k = 0; k < META_HEADERS && atomic; k++)
        atomic = PyLong_CheckExact(args[k]) || PyBytes_CheckExact(args[k]) || args[k] == Py_None;
    if (atomic && atomic_headers(args[META_HEADERS]) && PyObject_IS_GC(obj))
        PyObject_GC_UnTrack(obj);
    return obj;
}

/* new_meta_item(id, data, add_time, expire_at, error_count, stored): MetaItem(...) built faster,
 * positional arguments only: the class whose meta_item_fields configure_items() checked last
 * (whatever meta_item items_from_puts is given later: tests configure others).  Before any such
 * class, or for any other call, the configured meta_item builds it. */
static PyObject *
new_meta_item_twin(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (meta_item_type == NULL || kwnames != NULL || nargs != ITEM_NFIELDS + 1) {
        if (py_meta_item == NULL || py_meta_item == Py_None)
            return not_configured();
        PyObject *fn = Py_NewRef(py_meta_item); /* the call may configure again */
        PyObject *obj = PyObject_Vectorcall(fn, args, (size_t)nargs, kwnames);
        Py_DECREF(fn);
        return obj;
    }
    PyObject *obj = build_slots(meta_item_type, meta_item_fields, args, ITEM_NFIELDS + 1);
    if (obj != NULL) /* a Meta left out of the walks by new_meta (or decode) lets this one be too */
        untrack_atomic(obj, args, ITEM_NFIELDS + 1);
    return obj;
}

/* ------------------------------------------------------------------------------ checked_headers
 * reference: format/metadata.py, checked_headers */

#define MAX_HEADER_NAME 255           /* metadata.MAX_HEADER_NAME */
#define MAX_HEADER_BYTES (64 * 1024)  /* metadata.MAX_HEADER_BYTES */

/* checked_headers(headers) -> (read-only copy, encoded block), for an exact dict of 1 to
 * MAX_FAST_HEADERS exact str names (1 to MAX_HEADER_NAME bytes of UTF-8) to exact bytes values whose
 * block is within MAX_HEADER_BYTES: what nearly every put with headers gives (perf: headers that
 * change every put are checked and encoded here, not in a Python loop).  Anything else -- another
 * mapping or type, an empty dict, a name or a size the reference refuses, a name that is not valid
 * Unicode -- is handed to the reference, which returns or raises what it does. */
static PyObject *
checked_headers_twin(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (py_checked_headers == NULL)
        return not_configured();
    if (kwnames != NULL || nargs != 1 || !PyDict_CheckExact(args[0]) || PyDict_GET_SIZE(args[0]) == 0 ||
        PyDict_GET_SIZE(args[0]) > MAX_FAST_HEADERS)
        goto reference;
    {
        /* ours alone: Python code that an allocation below may run (the collector) cannot change it */
        PyObject *copy = PyDict_Copy(args[0]), *name, *value;
        if (copy == NULL)
            return NULL;
        Py_ssize_t pos = 0, total = 0, nlen;
        while (PyDict_Next(copy, &pos, &name, &value)) {
            if (!PyUnicode_CheckExact(name) || !PyBytes_CheckExact(value) ||
                PyBytes_GET_SIZE(value) > MAX_HEADER_BYTES)
                goto copy_to_reference;
            const char *utf8 = PyUnicode_AsUTF8AndSize(name, &nlen);
            if (utf8 == NULL) { /* a lone surrogate: the reference says which error */
                PyErr_Clear();
                goto copy_to_reference;
            }
            total += HEADER_LENS_SIZE + nlen + PyBytes_GET_SIZE(value);
            if (nlen < 1 || nlen > MAX_HEADER_NAME || total > MAX_HEADER_BYTES)
                goto copy_to_reference;
        }
        PyObject *block = PyBytes_FromStringAndSize(NULL, total);
        if (block == NULL) {
            Py_DECREF(copy);
            return NULL;
        }
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(block);
        pos = 0;
        while (PyDict_Next(copy, &pos, &name, &value)) {
            const char *utf8 = PyUnicode_AsUTF8AndSize(name, &nlen); /* cached by the first pass */
            Py_ssize_t vlen = PyBytes_GET_SIZE(value);
            p[0] = (unsigned char)nlen;
            put_u32(p + 1, (uint32_t)vlen);
            memcpy(p + HEADER_LENS_SIZE, utf8, (size_t)nlen);
            memcpy(p + HEADER_LENS_SIZE + nlen, PyBytes_AS_STRING(value), (size_t)vlen);
            p += HEADER_LENS_SIZE + nlen + vlen;
        }
        PyObject *proxy = PyDictProxy_New(copy);
        Py_DECREF(copy);
        if (proxy == NULL) {
            Py_DECREF(block);
            return NULL;
        }
        PyObject *out = PyTuple_Pack(2, proxy, block);
        Py_DECREF(proxy);
        Py_DECREF(block);
        return out;
    copy_to_reference:
        Py_DECREF(copy);
    }
reference:
    return PyObject_Vectorcall(py_checked_headers, args, (size_t)nargs, kwnames);
}

/* ------------------------------------------------------------------------------ encode_meta
 * reference: format/metadata.py, encode_parts */

/* encode_meta(not_before_ms, producer, sequence, key, header_count, block) -> bytes: the metadata part
 * of a PUTX body (META_FIXED, the key, the header block), for exact ints within their fields, a key
 * of None or exact bytes and a block of exact bytes; anything else is handed to the reference (which
 * raises struct's error for a number out of its field). */
static PyObject *
encode_meta_twin(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (py_encode_meta == NULL)
        return not_configured();
    uint64_t nb, producer, sequence, count;
    if (kwnames != NULL || nargs != 6 || !as_u64(args[0], &nb) || !as_u64(args[1], &producer) ||
        !as_u64(args[2], &sequence) || !as_u64(args[4], &count) || count > 0xFFFF ||
        !(args[3] == Py_None || PyBytes_CheckExact(args[3])) || !PyBytes_CheckExact(args[5]))
        goto reference;
    {
        PyObject *key = args[3], *block = args[5];
        Py_ssize_t klen = key == Py_None ? 0 : PyBytes_GET_SIZE(key), blen = PyBytes_GET_SIZE(block);
        if (klen > 0xFFFF || (uint64_t)blen > UINT32_MAX)
            goto reference;
        /* PUTX_OVERHEAD - PUT_OVERHEAD: META_FIXED's size */
        Py_ssize_t fixed = PUTX_OVERHEAD - PUT_OVERHEAD;
        PyObject *out = PyBytes_FromStringAndSize(NULL, fixed + klen + blen);
        if (out == NULL)
            return NULL;
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
        put_u64(p + PUTX_NOT_BEFORE_AT - PUT_OVERHEAD, nb);
        put_u64(p + PUTX_PRODUCER_AT - PUT_OVERHEAD, producer);
        put_u64(p + PUTX_SEQUENCE_AT - PUT_OVERHEAD, sequence);
        p[PUTX_KEY_LEN_AT - PUT_OVERHEAD] = (unsigned char)(klen & 0xFF);
        p[PUTX_KEY_LEN_AT - PUT_OVERHEAD + 1] = (unsigned char)(klen >> 8);
        p[PUTX_HEADER_COUNT_AT - PUT_OVERHEAD] = (unsigned char)(count & 0xFF);
        p[PUTX_HEADER_COUNT_AT - PUT_OVERHEAD + 1] = (unsigned char)(count >> 8);
        put_u32(p + PUTX_HEADERS_LEN_AT - PUT_OVERHEAD, (uint32_t)blen);
        if (klen)
            memcpy(p + fixed, PyBytes_AS_STRING(key), (size_t)klen);
        memcpy(p + fixed + klen, PyBytes_AS_STRING(block), (size_t)blen);
        return out;
    }
reference:
    return PyObject_Vectorcall(py_encode_meta, args, (size_t)nargs, kwnames);
}

/* ------------------------------------------------------------------------------ items_from_puts
 * reference: format/fallback.py, items_from_puts (built by item_references) */

/* items_from_puts(recs, errors, want, overhead): read-behind's items for decoded PUT records,
 * stopping before the record that would take the charge past ``want``.  Arguments off the fast path
 * (not a list, a mapping that is not a dict, budgets outside [0, INDEX_MAX]) or a first record off
 * it go to the reference, from the start.  A later record off the fast path is taken the
 * reference's way, by take_any(), and so are all after it: by then Python code may have run (a
 * key's __eq__ in the error-count lookup, the collector in an allocation) and changed the list, so
 * starting the reference over could see other records than the ones already taken.  The list is
 * walked as the reference's ``for`` walks it: its size is read again before each record. */

/* A record the fast path takes: an exact Put, or an exact PutX carrying only a producer's tag
 * (tag_only_putx()), with exact int times in [0, 2**53] (they convert to a double exactly, as the
 * reference's division does) and a bytes payload.  The fields are new references. */
typedef struct {
    PyObject *id, *payload;
    PyObject *meta; /* of a PutX carrying what a reader sees (shown_putx()), else NULL */
    long long add_ms, expire_ms, charge;
} FastPut;

static void
fast_put_clear(FastPut *p)
{
    Py_CLEAR(p->id);
    Py_CLEAR(p->payload);
    Py_CLEAR(p->meta);
}

/* A slot of ``obj`` (a new reference; NULL with AttributeError when unset): runs no Python code. */
static inline PyObject *
get_slot(PyObject *const *fields, int i, PyObject *obj)
{
    return Py_TYPE(fields[i])->tp_descr_get(fields[i], obj, (PyObject *)Py_TYPE(obj));
}

/* ``rec``, an exact PutX, carries a Meta of exactly (0, any, any, None, NO_HEADERS): the reference
 * builds a plain item for it (no key, no headers, no not-before), as for a Put.  1 or 0 (no error
 * set; anything else is the reference's to judge). */
static int
tag_only_putx(PyObject *rec)
{
    PyObject *meta = get_slot(putx_fields, PUTX_META, rec), *nb = NULL, *key = NULL, *headers = NULL;
    int ok = meta != NULL && Py_TYPE(meta) == meta_type;
    if (ok)
        ok = (nb = get_slot(meta_fields, META_NOT_BEFORE, meta)) != NULL &&
             (key = get_slot(meta_fields, META_KEY, meta)) != NULL &&
             (headers = get_slot(meta_fields, META_HEADERS, meta)) != NULL;
    if (ok) {
        int overflow = 0;
        ok = PyLong_CheckExact(nb) && PyLong_AsLongLongAndOverflow(nb, &overflow) == 0 && !overflow &&
             key == Py_None && headers == no_headers;
    }
    Py_XDECREF(meta);
    Py_XDECREF(nb);
    Py_XDECREF(key);
    Py_XDECREF(headers);
    PyErr_Clear();
    return ok;
}

/* ``rec``, an exact PutX, carries an exact Meta that the reference's ``_shown`` finds something in:
 * its not-before (an exact int) is not 0, its key is not None, or its headers (an exact mappingproxy)
 * are not empty.  The Meta (a new reference) when so, else NULL (no error set; anything else is the
 * reference's to judge).  Reading these runs no Python code. */
static PyObject *
shown_putx(PyObject *rec)
{
    PyObject *meta = get_slot(putx_fields, PUTX_META, rec), *nb = NULL, *key = NULL, *headers = NULL;
    int ok = meta != NULL && Py_TYPE(meta) == meta_type;
    if (ok)
        ok = (nb = get_slot(meta_fields, META_NOT_BEFORE, meta)) != NULL &&
             (key = get_slot(meta_fields, META_KEY, meta)) != NULL &&
             (headers = get_slot(meta_fields, META_HEADERS, meta)) != NULL;
    if (ok) {
        ok = PyLong_CheckExact(nb) && Py_IS_TYPE(headers, &PyDictProxy_Type);
        if (ok) {
            PyObject *mapping = ((mappingproxyobject_compat *)headers)->mapping;
            ok = PyDict_CheckExact(mapping) && (key != Py_None || PyDict_GET_SIZE(mapping) > 0 || Py_SIZE(nb) != 0);
        }
    }
    Py_XDECREF(nb);
    Py_XDECREF(key);
    Py_XDECREF(headers);
    PyErr_Clear();
    if (!ok)
        Py_CLEAR(meta);
    return meta;
}

/* 1 with *p filled when ``rec`` is a record the fast path takes; 0 when not (no error set). */
static int
fast_put(PyObject *rec, long long overhead, FastPut *p)
{
    p->id = p->payload = p->meta = NULL;
    PyObject *const *fields = put_fields;
    if (Py_TYPE(rec) == putx_type) {
        if (!tag_only_putx(rec) && (py_meta_item == NULL || py_meta_item == Py_None ||
                                    (p->meta = shown_putx(rec)) == NULL))
            return 0;
        fields = putx_fields;
    } else if (Py_TYPE(rec) != put_type)
        return 0;
    PyObject *add = NULL, *exp = NULL;
    p->id = get_slot(fields, PUT_ID, rec);
    if (p->id != NULL)
        add = get_slot(fields, PUT_ADD_MS, rec);
    if (add != NULL)
        exp = get_slot(fields, PUT_EXPIRE_MS, rec);
    if (exp != NULL)
        p->payload = get_slot(fields, PUT_PAYLOAD, rec);
    int ok = p->payload != NULL && PyLong_CheckExact(p->id) && PyLong_CheckExact(add) && PyLong_CheckExact(exp) &&
             PyBytes_CheckExact(p->payload);
    if (ok) {
        p->add_ms = PyLong_AsLongLong(add);
        p->expire_ms = PyLong_AsLongLong(exp);
        ok = p->add_ms >= 0 && p->add_ms <= EXACT_DOUBLE_MAX && p->expire_ms >= 0 &&
             p->expire_ms <= EXACT_DOUBLE_MAX && (long long)PyBytes_GET_SIZE(p->payload) <= LLONG_MAX - overhead;
        p->charge = ok ? (long long)PyBytes_GET_SIZE(p->payload) + overhead : 0;
    }
    Py_XDECREF(add);
    Py_XDECREF(exp);
    if (!ok) {
        PyErr_Clear(); /* an unset field, a number out of range: the reference's way says what it is */
        fast_put_clear(p);
    }
    return ok;
}

/* The running state of one items_from_puts call. */
typedef struct {
    PyObject *errors, *want_obj, *overhead_obj; /* the arguments (the caller holds them) */
    long long want;
    PyObject *out;   /* the items so far */
    long long total; /* their charge, while total_obj is NULL */
    PyObject *total_obj;
    int expiring;
    long long add_ms;   /* of the last item's add_time (perf: a batch of puts shares it) */
    PyObject *add_time; /* that float, or NULL; owned */
} Walk;

/* Take the fast record ``p``: 1 when taken, 0 when it does not fit (the walk stops), -1 on error. */
static int
take_fast(Walk *w, FastPut *p)
{
    /* want and each charge are in [0, LLONG_MAX], and total <= want after the first item */
    if (PyList_GET_SIZE(w->out) > 0 && (p->charge > w->want || w->total > w->want - p->charge))
        return 0;
    w->total += p->charge;
    if (p->expire_ms)
        w->expiring = 1;
    PyObject *vals[ITEM_NFIELDS] = {p->id, p->payload, NULL, NULL, NULL};
    int rc = -1;
    if (w->add_time == NULL || w->add_ms != p->add_ms) {
        PyObject *t = PyFloat_FromDouble((double)p->add_ms / 1000.0);
        if (t == NULL)
            goto done;
        Py_XSETREF(w->add_time, t);
        w->add_ms = p->add_ms;
    }
    vals[ITEM_ADD_TIME] = Py_NewRef(w->add_time);
    vals[ITEM_EXPIRE_AT] = p->expire_ms ? PyFloat_FromDouble((double)p->expire_ms / 1000.0) : Py_NewRef(Py_None);
    if (vals[ITEM_EXPIRE_AT] == NULL)
        goto done;
    /* may call a colliding key's __eq__; the value is taken (or 0) as soon as the lookup returns */
    PyObject *count = PyDict_GET_SIZE(w->errors) ? PyDict_GetItemWithError(w->errors, p->id) : NULL;
    if (count == NULL && PyErr_Occurred())
        goto done;
    vals[ITEM_ERROR_COUNT] = count != NULL ? Py_NewRef(count) : PyLong_FromLong(0);
    if (vals[ITEM_ERROR_COUNT] == NULL)
        goto done;
    PyObject *obj;
    if (p->meta != NULL) {
        /* the reference's meta_item(id, payload, add_time, expire_at, error_count, meta) */
        PyObject *margs[ITEM_NFIELDS + 1] = {vals[0], vals[1], vals[2], vals[3], vals[4], p->meta};
        PyObject *fn = Py_NewRef(py_meta_item); /* Python code may configure again */
        obj = PyObject_Vectorcall(fn, margs, ITEM_NFIELDS + 1, NULL);
        Py_DECREF(fn);
    } else
        obj = build_item(vals); /* left out of the collector's walks when it can be */
    if (obj == NULL)
        goto done;
    rc = PyList_Append(w->out, obj) < 0 ? -1 : 1;
    Py_DECREF(obj);
done:
    Py_XDECREF(vals[ITEM_ADD_TIME]);
    Py_XDECREF(vals[ITEM_EXPIRE_AT]);
    Py_XDECREF(vals[ITEM_ERROR_COUNT]);
    return rc;
}

/* Take ``rec``, any object, exactly as the reference's loop body does (the same attribute reads,
 * in the same order, with Python's arithmetic); 1, 0 or -1 as take_fast(). */
static int
take_any(Walk *w, PyObject *rec)
{
    PyObject *payload = NULL, *charge = NULL, *expire = NULL, *vals[ITEM_NFIELDS] = {NULL};
    int rc = -1;
    if (w->total_obj == NULL && (w->total_obj = PyLong_FromLongLong(w->total)) == NULL)
        return -1;
    if ((payload = PyObject_GetAttr(rec, str_payload)) == NULL)
        goto done;
    Py_ssize_t len = PyObject_Size(payload);
    if (len < 0)
        goto done;
    PyObject *len_obj = PyLong_FromSsize_t(len);
    if (len_obj == NULL)
        goto done;
    charge = PyNumber_Add(len_obj, w->overhead_obj);
    Py_DECREF(len_obj);
    if (charge == NULL)
        goto done;
    if (PyList_GET_SIZE(w->out) > 0) {
        PyObject *sum = PyNumber_Add(w->total_obj, charge);
        if (sum == NULL)
            goto done;
        int over = PyObject_RichCompareBool(sum, w->want_obj, Py_GT);
        Py_DECREF(sum);
        if (over != 0) {
            rc = over > 0 ? 0 : -1;
            goto done;
        }
    }
    PyObject *sum = PyNumber_InPlaceAdd(w->total_obj, charge);
    if (sum == NULL)
        goto done;
    Py_SETREF(w->total_obj, sum);
    if ((expire = PyObject_GetAttr(rec, str_expire_ms)) == NULL)
        goto done;
    int expires = PyObject_IsTrue(expire);
    if (expires < 0)
        goto done;
    if (expires)
        w->expiring = 1;
    if ((vals[ITEM_ID] = PyObject_GetAttr(rec, str_id)) == NULL)
        goto done;
    vals[ITEM_DATA] = Py_NewRef(payload);
    PyObject *add = PyObject_GetAttr(rec, str_add_ms);
    if (add == NULL)
        goto done;
    vals[ITEM_ADD_TIME] = PyNumber_TrueDivide(add, float_1000);
    Py_DECREF(add);
    if (vals[ITEM_ADD_TIME] == NULL)
        goto done;
    expires = PyObject_IsTrue(expire); /* the reference's conditional expression tests it again */
    if (expires < 0)
        goto done;
    vals[ITEM_EXPIRE_AT] = expires ? PyNumber_TrueDivide(expire, float_1000) : Py_NewRef(Py_None);
    if (vals[ITEM_EXPIRE_AT] == NULL)
        goto done;
    PyObject *id = PyObject_GetAttr(rec, str_id);
    if (id == NULL)
        goto done;
    PyObject *zero = PyLong_FromLong(0);
    vals[ITEM_ERROR_COUNT] = zero ? PyObject_CallMethodObjArgs(w->errors, str_get, id, zero, NULL) : NULL;
    Py_XDECREF(zero);
    Py_DECREF(id);
    if (vals[ITEM_ERROR_COUNT] == NULL)
        goto done;
    PyObject *obj = build_item(vals);
    if (obj == NULL)
        goto done;
    rc = PyList_Append(w->out, obj) < 0 ? -1 : 1;
    Py_DECREF(obj);
done:
    for (int k = 0; k < ITEM_NFIELDS; k++)
        Py_XDECREF(vals[k]);
    Py_XDECREF(payload);
    Py_XDECREF(charge);
    Py_XDECREF(expire);
    return rc;
}

static PyObject *
items_from_puts(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (py_items_from_puts == NULL || put_type == NULL || putx_type == NULL)
        return not_configured();
    long long want, overhead;
    if (kwnames != NULL || nargs != 4 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[1]) ||
        !as_index(args[2], &want) || !as_index(args[3], &overhead))
        goto reference;
    {
        PyObject *recs = args[0];
        Walk w = {args[1], args[2], args[3], want, PyList_New(0), 0, NULL, 0, 0, NULL};
        if (w.out == NULL)
            return NULL;
        int taken = 1;
        for (Py_ssize_t i = 0; taken > 0 && i < PyList_GET_SIZE(recs); i++) {
            PyObject *rec = Py_NewRef(PyList_GET_ITEM(recs, i));
            FastPut p;
            if (w.total_obj == NULL && fast_put(rec, overhead, &p)) {
                taken = take_fast(&w, &p);
                fast_put_clear(&p);
            } else if (i == 0 || (Py_TYPE(rec) != put_type && PyObject_TypeCheck(rec, put_type))) {
                /* a subclass of Put (a PUTX record with more than a tag) carries metadata only the
                 * reference's item builder knows: it does the whole call again, so the result is
                 * its own */
                Py_DECREF(rec);
                Py_XDECREF(w.total_obj);
                Py_CLEAR(w.add_time);
                Py_DECREF(w.out);
                goto reference;
            } else {
                taken = take_any(&w, rec);
            }
            Py_DECREF(rec);
        }
        Py_CLEAR(w.add_time);
        if (taken < 0) {
            Py_DECREF(w.out);
            Py_XDECREF(w.total_obj);
            return NULL;
        }
        if (w.total_obj == NULL && (w.total_obj = PyLong_FromLongLong(w.total)) == NULL) {
            Py_DECREF(w.out);
            return NULL;
        }
        return Py_BuildValue("(NNO)", w.out, w.total_obj, w.expiring ? Py_True : Py_False);
    }
reference:
    return PyObject_Vectorcall(py_items_from_puts, args, (size_t)nargs, kwnames);
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(*, constants, put_type, put_fields, putx_type, putx_fields, meta_type, meta_fields, no_headers, "
     "damage_type, encode_puts, decode_many, decode_one, decode_columns, walk_puts=None, encode_putx=None, "
     "unit_records=None, checked_headers=None, encode_meta=None): record.py's layout "
     "(checked), the classes and the pure-Python references."},
    {"configure_items", (PyCFunction)(void (*)(void))configure_items, METH_VARARGS | METH_KEYWORDS,
     "configure_items(*, item_type, item_fields, new_item, new_items, items_from_puts)"},
    {"encode_puts", (PyCFunction)(void (*)(void))encode_puts, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of journaled.format.fallback.encode_puts."},
    {"encode_putx", (PyCFunction)(void (*)(void))encode_putx, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of journaled.format.fallback.encode_putx."},
    {"decode_many", (PyCFunction)(void (*)(void))decode_many, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of journaled.format.fallback.decode_many."},
    {"walk_puts", (PyCFunction)(void (*)(void))walk_puts, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of journaled.format.fallback.walk_puts."},
    {"decode_columns", (PyCFunction)(void (*)(void))decode_columns, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of journaled.format.fallback.decode_columns."},
    {"unit_records", (PyCFunction)(void (*)(void))unit_records, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of journaled.format.fallback.unit_records."},
    {"new_item", (PyCFunction)(void (*)(void))new_item, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of the new_item of journaled.format.fallback.item_references."},
    {"new_items", (PyCFunction)(void (*)(void))new_items, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of the new_items of journaled.format.fallback.item_references."},
    {"items_from_puts", (PyCFunction)(void (*)(void))items_from_puts, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of the items_from_puts of journaled.format.fallback.item_references."},
    {"checked_headers", (PyCFunction)(void (*)(void))checked_headers_twin, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of journaled.format.metadata.checked_headers."},
    {"encode_meta", (PyCFunction)(void (*)(void))encode_meta_twin, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of journaled.format.metadata.encode_parts."},
    {"new_meta", (PyCFunction)(void (*)(void))new_meta_twin, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of the new_meta of journaled.format.fallback_meta.meta_references."},
    {"new_meta_item", (PyCFunction)(void (*)(void))new_meta_item_twin, METH_FASTCALL | METH_KEYWORDS,
     "Compiled twin of the new_meta_item of journaled.format.fallback_meta.meta_references."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "journaled.format._speedups",
    "Compiled twins of journaled.format.fallback's hot loops; imported only by journaled.format.speedups.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc_init();
    str_size = PyUnicode_InternFromString("size");
    max_body_obj = PyLong_FromLongLong(MAX_BODY);
    retired = PyList_New(0);
    str_payload = PyUnicode_InternFromString("payload");
    str_id = PyUnicode_InternFromString("id");
    str_add_ms = PyUnicode_InternFromString("add_ms");
    str_expire_ms = PyUnicode_InternFromString("expire_ms");
    str_get = PyUnicode_InternFromString("get");
    float_1000 = PyFloat_FromDouble(1000.0);
    if (str_size == NULL || max_body_obj == NULL || retired == NULL || str_payload == NULL || str_id == NULL ||
        str_add_ms == NULL || str_expire_ms == NULL || str_get == NULL || float_1000 == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddStringConstant(m, "crc", have_hw_crc ? "sse4.2" : "table") < 0 ||
        PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
