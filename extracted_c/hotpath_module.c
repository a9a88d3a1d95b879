/*
 * hotpath_module.c -- CPython glue: vLLM's sliding-window prefix-cache
 * lookup answered by the proved C search in one call (extracted_c._hotpath).
 *
 * What is proved and what is not. The search is find_hit_probe, i.e.
 * prefix_cache.c compiled unchanged in its probe instance (see
 * prefix_cache_probe.c): Frama-C/WP proves the mask instance of that text.
 * This file is the glue around it and is NOT proved; it is tested against
 * vLLM's own method on vLLM's real BlockPool (tests/test_hotpath_glue.py, also
 * under ASan + UBSan). It does three things:
 *   1. decides whether the fast path applies (else it hands the call, as it
 *      came, to the Python lookup ``fallback``, which serves any input);
 *   2. answers probe(i) the way vLLM 0.33.0's BlockPool.get_cached_block
 *      does: for each group, in order, key = hash + 4-byte big-endian group
 *      id, a read of the hash map's dict; a value of exactly vLLM's block
 *      class is a hit; anything else under the key is read through vLLM's
 *      own get_one_block and its truth test; the first miss ends the probe;
 *   3. builds vLLM's return value: per group [null_block] * first_real then
 *      the blocks the probes returned, and the hit in tokens.
 *
 * What it assumes (the caller, vllm_adapter/swa_lookup.py, checks the
 * first two once at install time; this file checks the rest per call):
 *   - the read above is what vLLM's probe does: the sources of that probe
 *     match a known vLLM build (fingerprint.check_pool_read, ``pool_read``)
 *     and vLLM's block class has no __bool__/__len__;
 *   - the pool is exactly vLLM's BlockPool with its own get_cached_block,
 *     its hash map exactly vLLM's class with its own get_one_block and a
 *     plain dict, make_block_hash_with_group_id not replaced (per call);
 *   - the pool is not changed during one lookup (the GIL is held for the
 *     whole call and nothing here lets other Python code run, except vLLM's
 *     get_one_block for keys holding several blocks). The probe instance's
 *     proof needs probe(i) to answer the same for the same i within a call.
 *
 * Reference counts: PyDict_GetItemWithError and PyList_GET_ITEM return
 * borrowed references. Every block a probe returns is INCREF'd into the
 * hit log (owned), then either moved into an output list
 * (PyList_SET_ITEM steals it) or released, on every path. Each key is a new
 * bytes object, released after its read on every path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#include "prefix_cache.h"

/* Probe hits logged on the stack before the log moves to the heap. */
#define LOG_STACK_SLOTS 512
/* Largest |sliding_window| the fast path takes (need is then exact). */
#define WINDOW_LIMIT ((int64_t)1 << 62)

/* ---- the probe -------------------------------------------------------- */

enum probe_status {
    PROBE_OK = 0,
    PROBE_ERROR = 1,       /* a Python exception is set */
    PROBE_UNSUPPORTED = 2, /* an input the fast path does not model */
};

typedef struct {
    PyObject *hashes;     /* borrowed: the block hashes (list or sequence) */
    int hashes_is_list;
    PyObject *cache;      /* borrowed: the hash map's dict */
    PyObject *block_type; /* borrowed: vLLM's KVCacheBlock */
    PyObject *hash_map;   /* borrowed: the pool's BlockHashToBlockMap */
    PyObject *read_fn;    /* borrowed: BlockHashToBlockMap.get_one_block */
    Py_ssize_t ngroups;
    unsigned char (*suffix)[4]; /* ngroups big-endian group ids */
    int64_t n;
    int status;
    PyObject *key;        /* owned: the reused key (make_key), or NULL */
    /* The hit log: entry e is block index log_idx[e] and its blocks
     * log_blocks[e * ngroups .. (e + 1) * ngroups), owned references. */
    int64_t *log_idx;
    PyObject **log_blocks;
    Py_ssize_t log_len;
    Py_ssize_t log_cap;
    int log_on_heap;
} probe_ctx;

static int
log_reserve(probe_ctx *c)
{
    Py_ssize_t cap;
    int64_t *idx;
    PyObject **blocks;

    if (c->log_len < c->log_cap) {
        return 0;
    }
    cap = c->log_cap * 2;
    if (cap > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(PyObject *) / c->ngroups) {
        PyErr_NoMemory();
        return -1;
    }
    idx = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    blocks = PyMem_Malloc((size_t)(cap * c->ngroups) * sizeof(PyObject *));
    if (idx == NULL || blocks == NULL) {
        PyMem_Free(idx);
        PyMem_Free(blocks);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(idx, c->log_idx, (size_t)c->log_len * sizeof(int64_t));
    memcpy(blocks, c->log_blocks, (size_t)(c->log_len * c->ngroups) * sizeof(PyObject *));
    if (c->log_on_heap) {
        PyMem_Free(c->log_idx);
        PyMem_Free(c->log_blocks);
    }
    c->log_idx = idx;
    c->log_blocks = blocks;
    c->log_cap = cap;
    c->log_on_heap = 1;
    return 0;
}

/* Release what the log still owns (entries moved out are NULL). */
static void
log_release(probe_ctx *c)
{
    Py_ssize_t k;

    for (k = 0; k < c->log_len * c->ngroups; k++) {
        Py_XDECREF(c->log_blocks[k]);
    }
    c->log_len = 0;
    if (c->log_on_heap) {
        PyMem_Free(c->log_idx);
        PyMem_Free(c->log_blocks);
        c->log_on_heap = 0;
    }
}

/* The key of one read: hash + suffix. On CPython 3.11/3.12 one bytes
 * object per lookup is refilled for every read (c->key, which only this
 * file ever references) and its hash is computed as bytes_hash computes it,
 * so the dict is asked with _PyDict_GetItem_KnownHash and no object is made
 * per probe; elsewhere a new bytes object per read. A borrowed reference
 * (reused) or a new one (*fresh set); NULL with an exception set. */
static PyObject *
make_key(probe_ctx *c, const char *hash, Py_ssize_t hash_len, const unsigned char *suffix,
         Py_hash_t *key_hash, int *fresh)
{
    PyObject *key;
    char *buf;

#if PY_VERSION_HEX < 0x030D0000
    if (c->key == NULL || PyBytes_GET_SIZE(c->key) != hash_len + 4) {
        Py_XDECREF(c->key);
        c->key = PyBytes_FromStringAndSize(NULL, hash_len + 4);
        if (c->key == NULL) {
            return NULL;
        }
    }
    key = c->key;
    *fresh = 0;
#else
    key = PyBytes_FromStringAndSize(NULL, hash_len + 4);
    if (key == NULL) {
        return NULL;
    }
    *fresh = 1;
#endif
    buf = PyBytes_AS_STRING(key);
    memcpy(buf, hash, (size_t)hash_len);
    memcpy(buf + hash_len, suffix, 4);
#if PY_VERSION_HEX < 0x030D0000
    *key_hash = _Py_HashBytes(buf, hash_len + 4);
#else
    *key_hash = -1;
#endif
    return key;
}

/* One group's read: a new reference to the block, or NULL with *miss set
 * (no exception) or NULL with an exception set. */
static PyObject *
read_block(probe_ctx *c, const char *hash, Py_ssize_t hash_len, const unsigned char *suffix, int *miss)
{
    PyObject *key;
    PyObject *block;
    Py_hash_t key_hash;
    int fresh;
    int truth;

    key = make_key(c, hash, hash_len, suffix, &key_hash, &fresh);
    if (key == NULL) {
        return NULL;
    }
#if PY_VERSION_HEX < 0x030D0000
    block = _PyDict_GetItem_KnownHash(c->cache, key, key_hash); /* borrowed */
#else
    block = PyDict_GetItemWithError(c->cache, key); /* borrowed */
#endif
    if (fresh) {
        Py_DECREF(key);
    }
    if (block == NULL) {
        *miss = !PyErr_Occurred();
        return NULL;
    }
    if (Py_TYPE(block) == (PyTypeObject *)c->block_type) {
        Py_INCREF(block);
        return block;
    }
    /* vLLM's get_one_block gets a key of its own, never the reused one. */
    key = PyBytes_FromStringAndSize(NULL, hash_len + 4);
    if (key == NULL) {
        return NULL;
    }
    memcpy(PyBytes_AS_STRING(key), hash, (size_t)hash_len);
    memcpy(PyBytes_AS_STRING(key) + hash_len, suffix, 4);
    /* Several blocks (or anything else) under the key: vLLM's own read and
     * vLLM's own truth test (``if not block``). */
    {
        PyObject *call[2] = {c->hash_map, key};
        block = PyObject_Vectorcall(c->read_fn, call, 2, NULL); /* hash_map.get_one_block(key) */
    }
    Py_DECREF(key);
    if (block == NULL) {
        return NULL;
    }
    truth = PyObject_IsTrue(block);
    if (truth <= 0) {
        Py_DECREF(block);
        *miss = truth == 0;
        return NULL;
    }
    return block;
}

/* pc_probe_fn: 1 when every group has block i cached (vLLM's
 * get_cached_block is truthy), logging the blocks; 0 otherwise. After an
 * error every probe answers 0, which ends the search (its termination does
 * not depend on the answers). */
static uint8_t
probe(void *vctx, int64_t i)
{
    probe_ctx *c = vctx;
    PyObject *item;
    PyObject *owned = NULL;
    PyObject **slot;
    Py_ssize_t g;
    int miss = 0;

    if (c->status != PROBE_OK) {
        return 0;
    }
    if (i < 0 || i >= c->n) {
        PyErr_Format(PyExc_RuntimeError, "probe of block %lld outside [0, %lld)",
                     (long long)i, (long long)c->n);
        c->status = PROBE_ERROR;
        return 0;
    }
    if (c->hashes_is_list) {
        if (i >= PyList_GET_SIZE(c->hashes)) {
            PyErr_SetString(PyExc_RuntimeError, "block_hashes shrank during the lookup");
            c->status = PROBE_ERROR;
            return 0;
        }
        item = PyList_GET_ITEM(c->hashes, (Py_ssize_t)i); /* borrowed */
    } else {
        owned = item = PySequence_GetItem(c->hashes, (Py_ssize_t)i);
        if (item == NULL) {
            c->status = PROBE_ERROR;
            return 0;
        }
    }
    /* Exactly bytes (vLLM's BlockHash): then hash + suffix is these bytes
     * followed by the suffix, whatever a subclass's + would do. */
    if (!PyBytes_CheckExact(item)) {
        Py_XDECREF(owned);
        c->status = PROBE_UNSUPPORTED;
        return 0;
    }
    if (log_reserve(c) < 0) {
        Py_XDECREF(owned);
        c->status = PROBE_ERROR;
        return 0;
    }
    slot = c->log_blocks + c->log_len * c->ngroups;
    for (g = 0; g < c->ngroups; g++) {
        slot[g] = read_block(c, PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item), c->suffix[g], &miss);
        if (slot[g] == NULL) {
            while (g > 0) {
                g--;
                Py_CLEAR(slot[g]);
            }
            Py_XDECREF(owned);
            if (!miss) {
                c->status = PROBE_ERROR;
            }
            return 0;
        }
    }
    Py_XDECREF(owned);
    c->log_idx[c->log_len] = i;
    c->log_len++;
    return 1;
}

/* ---- the lookup object ------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;   /* fallback(cls, *args, **kwargs): any input */
    PyObject *original;   /* vLLM's own method (bound): answers after an error */
    PyObject *on_error;   /* on_error(exc): told before original answers */
    PyObject *resolve;    /* resolve(cls, hashes, hash_block_size, block_size, alignment) */
    PyObject *spec_type;  /* SlidingWindowSpec */
    PyObject *pool_type;  /* BlockPool */
    PyObject *map_type;   /* BlockHashToBlockMap */
    PyObject *block_type; /* KVCacheBlock */
    PyObject *probe_fn;   /* BlockPool.get_cached_block */
    PyObject *read_fn;    /* BlockHashToBlockMap.get_one_block */
    PyObject *key_fn;     /* make_block_hash_with_group_id */
    PyObject *key_scope;  /* the module dict where vLLM's probe finds key_fn */
    int pool_read;
    unsigned long long calls;      /* every call */
    unsigned long long native;     /* answered here, by the proved search */
    unsigned long long delegated;  /* handed to ``fallback`` */
} SwaLookup;

/* Calls answered and delegated by every SwaLookup of this process
 * (``totals()``), so a test can see the path taken across re-installs. */
static unsigned long long total_native, total_delegated;

/* Interned names. */
static PyObject *s_block_size, *s_sliding_window, *s_hash_block_size,
    *s_cached_block_hash_to_block, *s_null_block, *s_cache, *s_get_cached_block,
    *s_get_one_block, *s_make_key;

/* Parameter names of SlidingWindowManager.find_longest_cache_hit, after cls. */
enum {
    A_CLS, A_HASHES, A_MAX_LENGTH, A_GROUP_IDS, A_POOL, A_SPEC, A_EAGLE,
    A_ALIGNMENT, A_DCP, A_PCP, A_COUNT
};
static const char *const param_names[A_COUNT] = {
    "cls", "block_hashes", "max_length", "kv_cache_group_ids", "block_pool",
    "kv_cache_spec", "drop_eagle_block", "alignment_tokens", "dcp_world_size",
    "pcp_world_size",
};
static PyObject *param_strs[A_COUNT];

/* Positional and keyword arguments into slots; 0 when the call is not
 * the plain shape (unknown or repeated names, too many arguments). */
static int
bind_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **slots)
{
    Py_ssize_t k, nkw;
    int j;

    for (j = 0; j < A_COUNT; j++) {
        slots[j] = NULL;
    }
    if (nargs > A_COUNT) {
        return 0;
    }
    for (k = 0; k < nargs; k++) {
        slots[k] = args[k];
    }
    nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (j = 1; j < A_COUNT; j++) {
            if (name == param_strs[j]) {
                found = j;
                break;
            }
        }
        if (found < 0) {
            for (j = 1; j < A_COUNT; j++) {
                if (PyUnicode_Check(name) && PyUnicode_Compare(name, param_strs[j]) == 0) {
                    found = j;
                    break;
                }
            }
        }
        if (found < 0 || slots[found] != NULL) {
            return 0;
        }
        slots[found] = args[nargs + k];
    }
    for (j = 0; j <= A_ALIGNMENT; j++) {
        if (slots[j] == NULL) {
            return 0;
        }
    }
    return 1;
}

/* An exact int in [low, high] into *out; 0 when it is anything else. */
static int
exact_int(PyObject *obj, int64_t low, int64_t high, int64_t *out)
{
    int overflow = 0;
    long long v;

    if (obj == NULL || !PyLong_CheckExact(obj)) {
        return 0;
    }
    v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (v < low || v > high) {
        return 0;
    }
    *out = (int64_t)v;
    return 1;
}

/* obj.name() calls fn: the class resolves name to fn and the instance
 * does not shadow it (nothing patched on the class or the instance). Read
 * without making a bound method. -1 with an exception set on error. */
static int
resolves_to(PyObject *obj, PyObject *name, PyObject *fn)
{
    PyObject *dict;
    PyObject *shadow;

    if (_PyType_Lookup(Py_TYPE(obj), name) != fn) { /* borrowed, MRO-cached */
        return 0;
    }
    dict = PyObject_GenericGetDict(obj, NULL);
    if (dict == NULL) {
        return -1;
    }
    shadow = PyDict_GetItemWithError(dict, name);
    Py_DECREF(dict);
    if (shadow != NULL) {
        return 0;
    }
    return PyErr_Occurred() ? -1 : 1;
}

static int64_t
gcd64(int64_t a, int64_t b)
{
    while (b != 0) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* vLLM's cdiv(a, b) = -(a // -b), i.e. the ceiling of a / b, for b >= 1. */
static int64_t
ceil_div(int64_t a, int64_t b)
{
    int64_t q = a / b; /* truncates toward zero: the ceiling when a < 0 */
    return (a > 0 && a % b != 0) ? q + 1 : q;
}

/* The answer list of group g: [null] * first_real, then the logged blocks
 * of [first_real, length), moved out of the log. NULL with an exception
 * if one of them was never probed (cannot happen if the search is
 * correct; checked rather than trusted). */
static PyObject *
group_list(probe_ctx *c, Py_ssize_t g, PyObject *null_block, int64_t first_real, int64_t length)
{
    PyObject *list = PyList_New((Py_ssize_t)length);
    Py_ssize_t k, e;

    if (list == NULL) {
        return NULL;
    }
    /* first_real references to null_block at once, as [x] * n does. */
    Py_SET_REFCNT(null_block, Py_REFCNT(null_block) + (Py_ssize_t)first_real);
    for (k = 0; k < (Py_ssize_t)first_real; k++) {
        PyList_SET_ITEM(list, k, null_block);
    }
    for (e = 0; e < c->log_len; e++) {
        int64_t i = c->log_idx[e];
        PyObject **slot = c->log_blocks + e * c->ngroups + g;
        if (i >= first_real && i < length && PyList_GET_ITEM(list, (Py_ssize_t)i) == NULL) {
            PyList_SET_ITEM(list, (Py_ssize_t)i, *slot); /* steals the log's reference */
            *slot = NULL;
        }
    }
    for (k = (Py_ssize_t)first_real; k < (Py_ssize_t)length; k++) {
        if (PyList_GET_ITEM(list, k) == NULL) {
            Py_DECREF(list); /* list_dealloc skips the NULL items */
            PyErr_Format(PyExc_RuntimeError,
                         "block %zd of the hit [%lld, %lld) was not probed", k,
                         (long long)first_real, (long long)length);
            return NULL;
        }
    }
    return list;
}

enum { FAST_DONE, FAST_DELEGATE, FAST_ERROR };

/* The fast path. FAST_DONE with *result set, FAST_DELEGATE when the input
 * is outside what it models (no exception set), FAST_ERROR with an
 * exception set. */
static int
fast_lookup(SwaLookup *self, PyObject **a, PyObject **result)
{
    int64_t max_length, alignment, block_size, sliding_window, hash_block_size, ws;
    int64_t n, need, period, gid;
    Py_ssize_t ngroups, g, len;
    int eagle, own, status = FAST_ERROR, reading_input = 1;
    PyObject *bs_obj = NULL, *sw_obj = NULL, *hbs_obj = NULL, *hash_map = NULL,
             *cache = NULL, *null_block = NULL, *hashes = NULL,
             *computed = NULL, *hit = NULL, *key_fn;
    unsigned char suffix_stack[8][4];
    unsigned char (*suffix)[4] = suffix_stack;
    int64_t log_idx_stack[LOG_STACK_SLOTS];
    PyObject *log_blocks_stack[LOG_STACK_SLOTS];
    probe_ctx c;
    pc_hit_result r;

    c.log_len = 0;
    c.log_on_heap = 0;
    c.key = NULL;
    c.ngroups = 1;

    /* Arguments vLLM asserts on or that the search does not model go to
     * the Python lookup, which sends them on to vLLM's own method. */
    if (!self->pool_read
        || !PyObject_TypeCheck(a[A_SPEC], (PyTypeObject *)self->spec_type)
        || !exact_int(a[A_MAX_LENGTH], 0, INT64_MAX, &max_length)
        || !exact_int(a[A_ALIGNMENT], 1, INT64_MAX, &alignment)
        || (a[A_DCP] != NULL && !(exact_int(a[A_DCP], 1, 1, &ws)))
        || (a[A_PCP] != NULL && !(exact_int(a[A_PCP], 1, 1, &ws)))
        || !PyList_CheckExact(a[A_GROUP_IDS])
        || Py_TYPE(a[A_POOL]) != (PyTypeObject *)self->pool_type) {
        return FAST_DELEGATE;
    }
    ngroups = PyList_GET_SIZE(a[A_GROUP_IDS]);
    if (ngroups < 1) {
        return FAST_DELEGATE;
    }
    if (ngroups > 8) {
        suffix = PyMem_Malloc((size_t)ngroups * 4);
        if (suffix == NULL) {
            PyErr_NoMemory();
            return FAST_ERROR;
        }
    }
    for (g = 0; g < ngroups; g++) {
        if (!exact_int(PyList_GET_ITEM(a[A_GROUP_IDS], g), 0, 0xFFFFFFFFLL, &gid)) {
            status = FAST_DELEGATE;
            goto done;
        }
        suffix[g][0] = (unsigned char)(gid >> 24);
        suffix[g][1] = (unsigned char)(gid >> 16);
        suffix[g][2] = (unsigned char)(gid >> 8);
        suffix[g][3] = (unsigned char)gid;
    }
    eagle = PyObject_IsTrue(a[A_EAGLE]);
    if (eagle < 0) {
        goto done;
    }
    bs_obj = PyObject_GetAttr(a[A_SPEC], s_block_size);
    sw_obj = bs_obj == NULL ? NULL : PyObject_GetAttr(a[A_SPEC], s_sliding_window);
    if (sw_obj == NULL) {
        goto done;
    }
    if (!exact_int(bs_obj, 1, INT64_MAX, &block_size)
        || !exact_int(sw_obj, -WINDOW_LIMIT, WINDOW_LIMIT, &sliding_window)) {
        status = FAST_DELEGATE;
        goto done;
    }
    /* The pool: vLLM's own probe, on vLLM's own hash map, unpatched. */
    key_fn = PyDict_GetItemWithError(self->key_scope, s_make_key); /* borrowed */
    if (key_fn != self->key_fn) {
        status = PyErr_Occurred() ? FAST_ERROR : FAST_DELEGATE;
        goto done;
    }
    own = resolves_to(a[A_POOL], s_get_cached_block, self->probe_fn);
    if (own <= 0) {
        status = own < 0 ? FAST_ERROR : FAST_DELEGATE;
        goto done;
    }
    hash_map = PyObject_GetAttr(a[A_POOL], s_cached_block_hash_to_block);
    if (hash_map == NULL) {
        goto done;
    }
    if (Py_TYPE(hash_map) != (PyTypeObject *)self->map_type) {
        status = FAST_DELEGATE;
        goto done;
    }
    own = resolves_to(hash_map, s_get_one_block, self->read_fn);
    if (own <= 0) {
        status = own < 0 ? FAST_ERROR : FAST_DELEGATE;
        goto done;
    }
    cache = PyObject_GetAttr(hash_map, s_cache);
    if (cache == NULL) {
        goto done;
    }
    if (!PyDict_CheckExact(cache)) {
        status = FAST_DELEGATE;
        goto done;
    }
    null_block = PyObject_GetAttr(a[A_POOL], s_null_block);
    hbs_obj = null_block == NULL ? NULL : PyObject_GetAttr(a[A_POOL], s_hash_block_size);
    if (hbs_obj == NULL) {
        goto done;
    }
    if (!exact_int(hbs_obj, 1, INT64_MAX, &hash_block_size)) {
        status = FAST_DELEGATE;
        goto done;
    }
    /* resolve_block_hashes: its first line returns the list itself. */
    if (hash_block_size == block_size) {
        hashes = a[A_HASHES];
        Py_INCREF(hashes);
    } else {
        PyObject *call[5] = {a[A_CLS], a[A_HASHES], hbs_obj, bs_obj, a[A_ALIGNMENT]};
        hashes = PyObject_Vectorcall(self->resolve, call, 5, NULL);
        if (hashes == NULL) {
            goto done;
        }
    }
    n = max_length / block_size;
    if (PyList_CheckExact(hashes)) {
        len = PyList_GET_SIZE(hashes);
    } else {
        len = PySequence_Size(hashes);
        if (len < 0) {
            PyErr_Clear();
            status = FAST_DELEGATE;
            goto done;
        }
    }
    if (n > PC_MAX_BLOCKS || len < n) {
        status = FAST_DELEGATE; /* vLLM's own method says what is wrong */
        goto done;
    }
    /* SlidingWindowManager._contiguous_blocks_for_hit, and the search's
     * clamp of need to at least 1; the alignment gate as a period. */
    need = ceil_div(sliding_window - 1, block_size) + (eagle ? 1 : 0);
    if (need < 1) {
        need = 1;
    }
    period = alignment / gcd64(alignment, block_size);

    c.hashes = hashes;
    c.hashes_is_list = PyList_CheckExact(hashes);
    c.cache = cache;
    c.block_type = self->block_type;
    c.hash_map = hash_map;
    c.read_fn = self->read_fn;
    c.ngroups = ngroups;
    c.suffix = suffix;
    c.n = n;
    c.status = PROBE_OK;
    c.log_idx = log_idx_stack;
    c.log_blocks = log_blocks_stack;
    c.log_cap = LOG_STACK_SLOTS / ngroups;
    if (c.log_cap < 1) {
        /* More groups than stack slots: start on the heap. */
        c.log_cap = 1;
        c.log_idx = PyMem_Malloc(sizeof(int64_t));
        c.log_blocks = PyMem_Malloc((size_t)ngroups * sizeof(PyObject *));
        c.log_on_heap = 1;
        if (c.log_idx == NULL || c.log_blocks == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }

    reading_input = 0; /* from here on, a failure is ours */
    find_hit_probe(probe, &c, n, need, period, eagle, &r); /* the proved search */

    if (c.status == PROBE_UNSUPPORTED) {
        status = FAST_DELEGATE;
        goto done;
    }
    if (c.status == PROBE_ERROR) {
        goto done;
    }
    if (!(0 <= r.first_real && r.first_real <= r.length && r.length <= n)) {
        PyErr_SetString(PyExc_RuntimeError, "find_hit_probe answered outside [0, n]");
        goto done;
    }
    computed = PyTuple_New(ngroups);
    if (computed == NULL) {
        goto done;
    }
    for (g = 0; g < ngroups; g++) {
        PyObject *list = group_list(&c, g, null_block, r.first_real, r.length);
        if (list == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(computed, g, list);
    }
    hit = PyLong_FromLongLong((long long)(r.length * block_size));
    if (hit == NULL) {
        goto done;
    }
    *result = PyTuple_Pack(2, computed, hit);
    if (*result != NULL) {
        status = FAST_DONE;
    }

done:
    /* A failure while reading the arguments (a truth test, resolve's assert
     * on block sizes vLLM rejects, ...) is the input's: the Python lookup
     * reads them again the same way and raises what vLLM raises, without
     * telling on_error. BaseExceptions (KeyboardInterrupt) propagate. */
    if (status == FAST_ERROR && reading_input && PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        status = FAST_DELEGATE;
    }
    log_release(&c);
    Py_XDECREF(c.key);
    if (suffix != suffix_stack) {
        PyMem_Free(suffix);
    }
    Py_XDECREF(hit);
    Py_XDECREF(computed);
    Py_XDECREF(hashes);
    Py_XDECREF(hbs_obj);
    Py_XDECREF(null_block);
    Py_XDECREF(cache);
    Py_XDECREF(hash_map);
    Py_XDECREF(sw_obj);
    Py_XDECREF(bs_obj);
    return status;
}

static PyObject *
swa_lookup_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    SwaLookup *self = (SwaLookup *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *slots[A_COUNT];
    PyObject *result = NULL;
    PyObject *type, *value, *tb, *told;
    int status;

    self->calls++;
    if (!bind_args(args, nargs, kwnames, slots)) {
        status = FAST_DELEGATE;
    } else {
        status = fast_lookup(self, slots, &result);
    }
    if (status == FAST_DONE) {
        self->native++;
        total_native++;
        return result;
    }
    if (status == FAST_DELEGATE) {
        self->delegated++;
        total_delegated++;
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    /* A failure of ours (never an input vLLM rejects: those were
     * delegated): tell on_error, then vLLM's own method answers. Not a
     * KeyboardInterrupt or SystemExit, which the Python lookup lets
     * through too. */
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        return NULL;
    }
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) {
        PyException_SetTraceback(value, tb);
    }
    told = PyObject_CallOneArg(self->on_error, value != NULL ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (told == NULL) {
        return NULL;
    }
    Py_DECREF(told);
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "find_longest_cache_hit needs cls");
        return NULL;
    }
    return PyObject_Vectorcall(self->original, args + 1, (size_t)(nargs - 1), kwnames);
}

static int
swa_lookup_traverse(SwaLookup *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    Py_VISIT(self->original);
    Py_VISIT(self->on_error);
    Py_VISIT(self->resolve);
    Py_VISIT(self->spec_type);
    Py_VISIT(self->pool_type);
    Py_VISIT(self->map_type);
    Py_VISIT(self->block_type);
    Py_VISIT(self->probe_fn);
    Py_VISIT(self->read_fn);
    Py_VISIT(self->key_fn);
    Py_VISIT(self->key_scope);
    return 0;
}

static int
swa_lookup_clear(SwaLookup *self)
{
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->original);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->resolve);
    Py_CLEAR(self->spec_type);
    Py_CLEAR(self->pool_type);
    Py_CLEAR(self->map_type);
    Py_CLEAR(self->block_type);
    Py_CLEAR(self->probe_fn);
    Py_CLEAR(self->read_fn);
    Py_CLEAR(self->key_fn);
    Py_CLEAR(self->key_scope);
    return 0;
}

static void
swa_lookup_dealloc(SwaLookup *self)
{
    PyObject_GC_UnTrack(self);
    swa_lookup_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef swa_lookup_members[] = {
    {"calls", T_ULONGLONG, offsetof(SwaLookup, calls), 0, "every call"},
    {"native", T_ULONGLONG, offsetof(SwaLookup, native), 0,
     "calls answered here by the proved search"},
    {"delegated", T_ULONGLONG, offsetof(SwaLookup, delegated), 0,
     "calls handed to the Python lookup (inputs the fast path does not model)"},
    {"fallback", T_OBJECT, offsetof(SwaLookup, fallback), READONLY, "the Python lookup"},
    {"original", T_OBJECT, offsetof(SwaLookup, original), READONLY, "vLLM's own method"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SwaLookupType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "extracted_c._hotpath.SwaLookup",
    .tp_doc = PyDoc_STR(
        "SlidingWindowManager.find_longest_cache_hit(cls, block_hashes, max_length, "
        "kv_cache_group_ids, block_pool, kv_cache_spec, drop_eagle_block, "
        "alignment_tokens, dcp_world_size=1, pcp_world_size=1), answered by the "
        "proved stride search (find_hit_probe) in one call; made by new_lookup()."),
    .tp_basicsize = sizeof(SwaLookup),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(SwaLookup, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)swa_lookup_traverse,
    .tp_clear = (inquiry)swa_lookup_clear,
    .tp_dealloc = (destructor)swa_lookup_dealloc,
    .tp_members = swa_lookup_members,
};

static PyObject *
new_lookup(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {
        "fallback", "original", "on_error", "resolve", "spec_type", "pool_type",
        "map_type", "block_type", "probe_fn", "read_fn", "key_fn", "key_scope",
        "pool_read", NULL,
    };
    PyObject *o[12];
    int pool_read;
    int k;
    SwaLookup *self;

    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOOOp:new_lookup", kwlist,
                                     &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                                     &o[7], &o[8], &o[9], &o[10], &o[11], &pool_read)) {
        return NULL;
    }
    for (k = 0; k < 4; k++) {
        if (!PyCallable_Check(o[k])) {
            return PyErr_Format(PyExc_TypeError, "%s must be callable, got %s", kwlist[k],
                                Py_TYPE(o[k])->tp_name);
        }
    }
    for (k = 4; k < 8; k++) {
        if (!PyType_Check(o[k])) {
            return PyErr_Format(PyExc_TypeError, "%s must be a class, got %s", kwlist[k],
                                Py_TYPE(o[k])->tp_name);
        }
    }
    if (!PyDict_Check(o[11])) {
        return PyErr_Format(PyExc_TypeError, "key_scope must be a dict, got %s",
                            Py_TYPE(o[11])->tp_name);
    }
    self = PyObject_GC_New(SwaLookup, &SwaLookupType);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = swa_lookup_vectorcall;
    self->fallback = Py_NewRef(o[0]);
    self->original = Py_NewRef(o[1]);
    self->on_error = Py_NewRef(o[2]);
    self->resolve = Py_NewRef(o[3]);
    self->spec_type = Py_NewRef(o[4]);
    self->pool_type = Py_NewRef(o[5]);
    self->map_type = Py_NewRef(o[6]);
    self->block_type = Py_NewRef(o[7]);
    self->probe_fn = Py_NewRef(o[8]);
    self->read_fn = Py_NewRef(o[9]);
    self->key_fn = Py_NewRef(o[10]);
    self->key_scope = Py_NewRef(o[11]);
    self->pool_read = pool_read;
    self->calls = self->native = self->delegated = 0;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static PyObject *
totals(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_BuildValue("{sKsK}", "native", total_native, "delegated", total_delegated);
}

static PyMethodDef hotpath_methods[] = {
    {"totals", totals, METH_NOARGS,
     PyDoc_STR("totals() -> {'native': n, 'delegated': n}: lookups answered in C "
               "and handed to the Python lookup by every SwaLookup of this process")},
    {"new_lookup", (PyCFunction)(void (*)(void))new_lookup, METH_VARARGS | METH_KEYWORDS,
     PyDoc_STR("new_lookup(fallback, original, on_error, resolve, spec_type, pool_type, "
               "map_type, block_type, probe_fn, read_fn, key_fn, key_scope, pool_read) "
               "-> SwaLookup (see vllm_adapter/swa_lookup.py)")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef hotpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "extracted_c._hotpath",
    .m_doc = PyDoc_STR("vLLM's sliding-window prefix-cache lookup answered by the "
                       "Frama-C-proved stride search (prefix_cache.c, probe instance) "
                       "in one call; the glue is tested, not proved."),
    .m_size = -1,
    .m_methods = hotpath_methods,
};

static int
intern_names(void)
{
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_block_size, "block_size"},
        {&s_sliding_window, "sliding_window"},
        {&s_hash_block_size, "hash_block_size"},
        {&s_cached_block_hash_to_block, "cached_block_hash_to_block"},
        {&s_null_block, "null_block"},
        {&s_cache, "_cache"},
        {&s_get_cached_block, "get_cached_block"},
        {&s_get_one_block, "get_one_block"},
        {&s_make_key, "make_block_hash_with_group_id"},
    };
    size_t k;
    int j;

    for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        *names[k].slot = PyUnicode_InternFromString(names[k].text);
        if (*names[k].slot == NULL) {
            return -1;
        }
    }
    for (j = 0; j < A_COUNT; j++) {
        param_strs[j] = PyUnicode_InternFromString(param_names[j]);
        if (param_strs[j] == NULL) {
            return -1;
        }
    }
    return 0;
}

PyMODINIT_FUNC
PyInit__hotpath(void)
{
    PyObject *m;

    if (intern_names() < 0 || PyType_Ready(&SwaLookupType) < 0) {
        return NULL;
    }
    m = PyModule_Create(&hotpath_module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&SwaLookupType);
    if (PyModule_AddObject(m, "SwaLookup", (PyObject *)&SwaLookupType) < 0) {
        Py_DECREF(&SwaLookupType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
