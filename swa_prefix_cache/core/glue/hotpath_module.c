/*
 * hotpath_module.c -- CPython glue: vLLM's prefix-cache lookups answered by
 * the proved C searches in one call each (swa_prefix_cache.core._hotpath).
 *
 * What is proved and what is not. The searches are find_hit_probe
 * (sliding window: prefix_cache.c compiled unchanged in its probe instance,
 * prefix_cache_probe.c) and full_hit_probe (full attention: full_attention.c
 * in its probe instance, full_attention_probe.c); Frama-C/WP proves the mask
 * instances of those texts. This file and hotpath_pool.c are the glue around
 * them and are NOT proved; they are tested against vLLM's own methods on
 * vLLM's real BlockPool (tests/test_hotpath_glue.py, tests/test_hot_path.py,
 * tests/test_full_hotpath.py, also under ASan + UBSan). This file:
 *   1. binds vLLM's arguments and decides whether the fast path applies
 *      (else it hands the call, as it came, to ``fallback``, which serves
 *      any input: the Python lookup, or vLLM's own method);
 *   2. checks that vLLM's probe of this pool is the read hotpath_pool.c
 *      makes, and resolves the block hashes as vLLM does;
 *   3. runs the proved search with hotpath_pool.c's probe and returns
 *      vLLM's value: per group the answer list, and the hit in tokens.
 *
 * What it assumes (vllm_adapter checks the first two once at install
 * time; this file checks the rest per call):
 *   - the read is what vLLM's probe does: the sources of that probe match a
 *     known vLLM build (fingerprint.check_pool_read, ``pool_read``) and
 *     vLLM's block class has no __bool__/__len__;
 *   - the lookup being replaced is the one the search models (its own
 *     source fingerprint);
 *   - the pool is exactly vLLM's BlockPool with its own get_cached_block,
 *     its hash map exactly vLLM's class with its own get_one_block and a
 *     plain dict, make_block_hash_with_group_id not replaced (per call);
 *   - the pool is not changed during one lookup (the GIL is held for the
 *     whole call and nothing here lets other Python code run, except vLLM's
 *     get_one_block for a key holding anything but a block or a non-empty
 *     plain dict of blocks (those two are read in C, as it reads them) and
 *     vLLM's resolve_block_hashes). The probe instances' proofs need a probe to
 *     answer the same for the same index within a call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#include "full_attention.h"
#include "hotpath_pool.h"
#include "offload_lookup.h"
#include "params.h"
#include "prefix_cache.h"

/* Largest |sliding_window| the fast path takes (need is then exact). */
#define WINDOW_LIMIT ((int64_t)1 << 62)

/* ---- the lookup object ------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;   /* fallback(cls, *args, **kwargs): any input */
    PyObject *original;   /* original(cls, ...): vLLM's own method, bound to cls;
                           * answers after an error */
    PyObject *on_error;   /* on_error(exc): told before original answers */
    PyObject *resolve;    /* resolve(cls, hashes, hash_block_size, block_size, alignment) */
    PyObject *spec_type;  /* the spec class, or a tuple of them */
    PyObject *pool_type;  /* BlockPool */
    PyObject *map_type;   /* BlockHashToBlockMap, or a tuple of exact classes
                           * (vLLM's and the lookup memory's watching view of it) */
    PyObject *block_type; /* KVCacheBlock */
    PyObject *probe_fn;   /* BlockPool.get_cached_block */
    PyObject *read_fn;    /* BlockHashToBlockMap.get_one_block */
    PyObject *key_fn;     /* make_block_hash_with_group_id */
    PyObject *key_scope;  /* the module dict where vLLM's probe finds key_fn */
    PyObject *view_type;  /* BlockHashListWithBlockSize, or None */
    PyObject *home;       /* the class the lookup is installed on, or None: calls
                           * on another class (a subclass, which may override
                           * what the search assumes) go to ``fallback`` */
    int pool_read;
    int block_ids;        /* the map's values are block ids (layout "block_ids") */
    int kind;             /* KIND_SLIDING_WINDOW or KIND_FULL_ATTENTION */
    unsigned long long calls;      /* every call */
    unsigned long long native;     /* answered here, by the proved search */
    unsigned long long delegated;  /* handed to ``fallback`` */
} Lookup;

enum { KIND_SLIDING_WINDOW, KIND_FULL_ATTENTION };

/* Calls answered and delegated by every Lookup of this process
 * (``totals()``), so a test can see the path taken across re-installs. */
static unsigned long long total_native, total_delegated;

/* Interned names. */
static PyObject *s_block_size, *s_sliding_window, *s_hash_block_size,
    *s_cached_block_hash_to_block, *s_null_block, *s_cache, *s_get_cached_block,
    *s_get_one_block, *s_make_key, *s_view_hashes, *s_view_scale, *s_blocks;

/* Parameter names of SingleTypeKVCacheManager.find_longest_cache_hit. */
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

/* The spec is an instance of the spec class (or of one in the tuple). */
static int
spec_matches(Lookup *self, PyObject *spec)
{
    Py_ssize_t k;

    if (!PyTuple_Check(self->spec_type)) {
        return PyObject_TypeCheck(spec, (PyTypeObject *)self->spec_type);
    }
    for (k = 0; k < PyTuple_GET_SIZE(self->spec_type); k++) {
        if (PyObject_TypeCheck(spec, (PyTypeObject *)PyTuple_GET_ITEM(self->spec_type, k))) {
            return 1;
        }
    }
    return 0;
}

/* obj.name() calls fn: the class resolves name to fn and the instance
 * does not shadow it by anything else (nothing patched on the class or the
 * instance; the very bound method put on the instance calls fn too). The
 * instance is read as vLLM's call reads it: never through its __dict__,
 * which CPython 3.11+ would then build for the object (its attributes move
 * from inline values to a dict for good, and every later self.x of vLLM's
 * own code on that object is slower). Up to 3.12, _PyObject_GetMethod
 * (CPython's own LOAD_METHOD lookup, in its cpython/ headers; internal from
 * 3.13 on) answers with the class's function when no instance attribute
 * shadows it, and makes no bound method: two fewer objects a lookup.
 * -1 with an exception set on error. */
static int
resolves_to(PyObject *obj, PyObject *name, PyObject *fn)
{
    PyObject *found;
    int same;

    if (_PyType_Lookup(Py_TYPE(obj), name) != fn) { /* borrowed, MRO-cached */
        return 0;
    }
#if PY_VERSION_HEX < 0x030D0000
    if (_PyObject_GetMethod(obj, name, &found)) {
        same = found == fn; /* the class's own, unshadowed */
        Py_DECREF(found);
        return same;
    }
#else
    found = PyObject_GetAttr(obj, name);
#endif
    if (found == NULL) {
        return -1;
    }
    same = PyMethod_Check(found) && PyMethod_GET_FUNCTION(found) == fn
           && PyMethod_GET_SELF(found) == obj;
    Py_DECREF(found);
    return same;
}

/* The map's class is the map class itself (or one in the tuple): a
 * subclass is read inline only when named, as the lookup memory's watching
 * view is (swa_prefix_cache/vllm_adapter/lookup_memo.py: it changes only
 * insert, pop and clear, and shares the map's containers). */
static int
map_type_matches(Lookup *self, PyObject *hash_map)
{
    Py_ssize_t k;

    if (!PyTuple_Check(self->map_type)) {
        return Py_TYPE(hash_map) == (PyTypeObject *)self->map_type;
    }
    for (k = 0; k < PyTuple_GET_SIZE(self->map_type); k++) {
        if (Py_TYPE(hash_map) == (PyTypeObject *)PyTuple_GET_ITEM(self->map_type, k)) {
            return 1;
        }
    }
    return 0;
}

enum { FAST_DONE, FAST_DELEGATE, FAST_ERROR };

/* obj is a class, or (when a tuple is allowed) a non-empty tuple of
 * classes; 0 with a TypeError naming the argument otherwise. */
static int
class_or_classes(PyObject *obj, const char *name, int tuple_allowed)
{
    Py_ssize_t k;

    if (tuple_allowed && PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) > 0) {
        for (k = 0; k < PyTuple_GET_SIZE(obj); k++) {
            if (!PyType_Check(PyTuple_GET_ITEM(obj, k))) {
                PyErr_Format(PyExc_TypeError, "%s must be a class or a tuple of classes, got %s",
                             name, Py_TYPE(PyTuple_GET_ITEM(obj, k))->tp_name);
                return 0;
            }
        }
        return 1;
    }
    if (!PyType_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a class, got %s", name, Py_TYPE(obj)->tp_name);
        return 0;
    }
    return 1;
}


/* What one call reads of the pool, its hashes and its spec (new or
 * borrowed references as marked; released by view_release). */
typedef struct {
    int64_t max_length, alignment, block_size, hash_block_size;
    int eagle;
    PyObject *bs_obj;     /* new: spec.block_size */
    PyObject *hbs_obj;    /* new: pool.hash_block_size */
    PyObject *hash_map;   /* new: pool.cached_block_hash_to_block */
    PyObject *cache;      /* new: hash_map._cache */
    PyObject *blocks;     /* new: hash_map._blocks (layout "block_ids"), or NULL */
    PyObject *null_block; /* new: pool.null_block */
    PyObject *resolved;   /* new: resolve_block_hashes(...) */
    PyObject *base;       /* new: the list read (resolved, or the list inside vLLM's view) */
    int64_t base_stride;  /* resolved[j] is base[(j + 1) * base_stride - 1] */
    int64_t resolved_len; /* len(resolved) */
} call_view;

static void
view_release(call_view *v)
{
    Py_XDECREF(v->bs_obj);
    Py_XDECREF(v->hbs_obj);
    Py_XDECREF(v->hash_map);
    Py_XDECREF(v->cache);
    Py_XDECREF(v->blocks);
    Py_XDECREF(v->null_block);
    Py_XDECREF(v->resolved);
    Py_XDECREF(v->base);
}

/* An exact int into *out, else delegate; -1 (an exception) only on error. */
#define TAKE_INT(obj, low, high, out) \
    do { if (!exact_int((obj), (low), (high), (out))) { return FAST_DELEGATE; } } while (0)

/* The arguments both lookups share, the pool and the hashes: FAST_DONE
 * when the fast path applies (v filled, groups in c), FAST_DELEGATE or
 * FAST_ERROR (an exception set) otherwise. v must be zeroed by the caller
 * and released whatever this returns. */
static int
read_call(Lookup *self, PyObject **a, call_view *v, pool_probe *c)
{
    PyObject *key_fn;
    Py_ssize_t len;
    int own;

    if (!self->pool_read || !spec_matches(self, a[A_SPEC])
        || Py_TYPE(a[A_POOL]) != (PyTypeObject *)self->pool_type
        || !PyList_CheckExact(a[A_GROUP_IDS])) {
        return FAST_DELEGATE;
    }
    TAKE_INT(a[A_MAX_LENGTH], 0, PC_MAX_BLOCKS, &v->max_length);
    TAKE_INT(a[A_ALIGNMENT], 1, PC_MAX_BLOCKS, &v->alignment);
    own = pool_probe_groups(c, a[A_GROUP_IDS]);
    if (own <= 0) {
        return own < 0 ? FAST_ERROR : FAST_DELEGATE;
    }
    v->eagle = PyObject_IsTrue(a[A_EAGLE]);
    if (v->eagle < 0) {
        return FAST_ERROR;
    }
    v->bs_obj = PyObject_GetAttr(a[A_SPEC], s_block_size);
    if (v->bs_obj == NULL) {
        return FAST_ERROR;
    }
    TAKE_INT(v->bs_obj, 1, PC_MAX_BLOCKS, &v->block_size);
    /* The pool: vLLM's own probe, on vLLM's own hash map, unpatched. */
    key_fn = PyDict_GetItemWithError(self->key_scope, s_make_key); /* borrowed */
    if (key_fn != self->key_fn) {
        return PyErr_Occurred() ? FAST_ERROR : FAST_DELEGATE;
    }
    own = resolves_to(a[A_POOL], s_get_cached_block, self->probe_fn);
    if (own <= 0) {
        return own < 0 ? FAST_ERROR : FAST_DELEGATE;
    }
    v->hash_map = PyObject_GetAttr(a[A_POOL], s_cached_block_hash_to_block);
    if (v->hash_map == NULL) {
        return FAST_ERROR;
    }
    if (!map_type_matches(self, v->hash_map)) {
        return FAST_DELEGATE;
    }
    own = resolves_to(v->hash_map, s_get_one_block, self->read_fn);
    if (own <= 0) {
        return own < 0 ? FAST_ERROR : FAST_DELEGATE;
    }
    v->cache = PyObject_GetAttr(v->hash_map, s_cache);
    if (v->cache == NULL) {
        return FAST_ERROR;
    }
    if (!PyDict_CheckExact(v->cache)) {
        return FAST_DELEGATE;
    }
    if (self->block_ids) {
        v->blocks = PyObject_GetAttr(v->hash_map, s_blocks);
        if (v->blocks == NULL) {
            return FAST_ERROR;
        }
        if (!PyList_CheckExact(v->blocks)) {
            return FAST_DELEGATE;
        }
    }
    v->null_block = PyObject_GetAttr(a[A_POOL], s_null_block);
    v->hbs_obj = v->null_block == NULL ? NULL : PyObject_GetAttr(a[A_POOL], s_hash_block_size);
    if (v->hbs_obj == NULL) {
        return FAST_ERROR;
    }
    TAKE_INT(v->hbs_obj, 1, PC_MAX_BLOCKS, &v->hash_block_size);
    /* resolve_block_hashes: its first line returns the list itself. */
    if (v->hash_block_size == v->block_size) {
        v->resolved = Py_NewRef(a[A_HASHES]);
    } else {
        PyObject *call[5] = {a[A_CLS], a[A_HASHES], v->hbs_obj, v->bs_obj, a[A_ALIGNMENT]};
        v->resolved = PyObject_Vectorcall(self->resolve, call, 5, NULL);
        if (v->resolved == NULL) {
            return FAST_ERROR;
        }
    }
    /* vLLM's block-size view over a list is read in that list directly. */
    v->base = Py_NewRef(v->resolved);
    v->base_stride = 1;
    if (self->view_type != Py_None && Py_TYPE(v->resolved) == (PyTypeObject *)self->view_type) {
        PyObject *inner = PyObject_GetAttr(v->resolved, s_view_hashes);
        PyObject *scale = inner == NULL ? NULL : PyObject_GetAttr(v->resolved, s_view_scale);
        int64_t stride;
        int ok = scale != NULL && PyList_CheckExact(inner)
                 && exact_int(scale, 1, PC_MAX_BLOCKS, &stride);
        Py_XDECREF(scale);
        if (PyErr_Occurred()) {
            Py_XDECREF(inner);
            return FAST_ERROR;
        }
        if (ok) {
            Py_SETREF(v->base, inner); /* owned: the view may be changed meanwhile */
            v->base_stride = stride;
        } else {
            Py_XDECREF(inner);
        }
    }
    if (PyList_CheckExact(v->base)) {
        len = PyList_GET_SIZE(v->base) / (Py_ssize_t)v->base_stride;
    } else {
        len = PySequence_Size(v->base);
        if (len < 0) {
            PyErr_Clear();
            return FAST_DELEGATE;
        }
    }
    v->resolved_len = len;
    c->hashes = v->base;
    c->hashes_is_list = PyList_CheckExact(v->base);
    c->cache = v->cache;
    c->block_type = self->block_type;
    c->hash_map = v->hash_map;
    c->read_fn = self->read_fn;
    c->blocks = v->blocks;
    c->status = PROBE_OK;
    return FAST_DONE;
}

/* vLLM's value: (tuple of the groups' answer lists, hit tokens). */
static PyObject *
answer(pool_probe *c, PyObject *null_block, int64_t first_real, int64_t end, int64_t tail,
       int64_t hit_tokens)
{
    PyObject *computed, *hit, *result;
    Py_ssize_t g;

    computed = PyTuple_New(c->ngroups);
    if (computed == NULL) {
        return NULL;
    }
    for (g = 0; g < c->ngroups; g++) {
        PyObject *list = pool_answer_list(c, g, null_block, first_real, end, tail);
        if (list == NULL) {
            Py_DECREF(computed);
            return NULL;
        }
        PyTuple_SET_ITEM(computed, g, list);
    }
    hit = PyLong_FromLongLong((long long)hit_tokens);
    if (hit == NULL) {
        Py_DECREF(computed);
        return NULL;
    }
    result = PyTuple_Pack(2, computed, hit);
    Py_DECREF(computed);
    Py_DECREF(hit);
    return result;
}

/* SlidingWindowManager.find_longest_cache_hit by find_hit_probe. */
static int
sliding_window_lookup(PyObject **a, call_view *v, pool_probe *c, PyObject **result)
{
    PyObject *sw_obj;
    int64_t ws, sliding_window, n, need, period;
    pc_hit_result r;

    if ((a[A_DCP] != NULL && !exact_int(a[A_DCP], 1, 1, &ws))
        || (a[A_PCP] != NULL && !exact_int(a[A_PCP], 1, 1, &ws))) {
        return FAST_DELEGATE;
    }
    sw_obj = PyObject_GetAttr(a[A_SPEC], s_sliding_window);
    if (sw_obj == NULL) {
        return FAST_ERROR;
    }
    ws = exact_int(sw_obj, -WINDOW_LIMIT, WINDOW_LIMIT, &sliding_window);
    Py_DECREF(sw_obj);
    if (!ws) {
        return FAST_DELEGATE;
    }
    n = v->max_length / v->block_size;
    if (v->resolved_len < n) {
        return FAST_DELEGATE; /* vLLM's own method says what is wrong */
    }
    /* SlidingWindowManager._contiguous_blocks_for_hit clamped to at least
     * 1, and the alignment gate as a period (params.c, proved; its
     * preconditions: window and both sizes within +-PC_MAX_BLOCKS, sizes
     * >= 1, as read above). */
    need = search_need(sliding_window, v->block_size, v->eagle ? 1 : 0);
    period = alignment_period(v->block_size, v->alignment);
    c->n = n;
    c->stride = v->base_stride;

    find_hit_probe(pool_probe_block, c, n, need, period, v->eagle, &r); /* proved */

    if (c->status != PROBE_OK) {
        return c->status == PROBE_UNSUPPORTED ? FAST_DELEGATE : FAST_ERROR;
    }
    if (!(0 <= r.first_real && r.first_real <= r.length && r.length <= n)) {
        PyErr_SetString(PyExc_RuntimeError, "find_hit_probe answered outside [0, n]");
        return FAST_ERROR;
    }
    *result = answer(c, v->null_block, r.first_real, r.length, -1, r.length * v->block_size);
    return *result == NULL ? FAST_ERROR : FAST_DONE;
}

/* FullAttentionManager.find_longest_cache_hit by full_hit_probe. vLLM's
 * fine-grained mode reads the resolved hashes through a block-size view
 * (BlockHashListWithBlockSize(resolved, alignment, block_size)): block i is
 * resolved[(i + 1) * scale - 1], fine index j is resolved[j]. */
static int
full_attention_lookup(PyObject **a, call_view *v, pool_probe *c, PyObject **result)
{
    int64_t ws, scale = 1, n_cached, n_fine = 0, end, tail;
    fa_hit_result r;

    if (a[A_DCP] != NULL && !exact_int(a[A_DCP], 1, 1, &ws)) {
        return FAST_DELEGATE; /* vLLM scales block_size by DCP: not modelled */
    }
    if (v->alignment < v->block_size && v->block_size % v->alignment == 0) {
        /* Fine-grained: vLLM asserts the resolved hashes are a Sequence
         * (not its block-size view, which a class without fine-grained
         * lookup gets) and views them itself; anything but the raw list
         * is left to it. */
        if (!PyList_CheckExact(v->resolved)) {
            return FAST_DELEGATE;
        }
        scale = v->block_size / v->alignment;
        n_fine = v->resolved_len;
    }
    n_cached = v->resolved_len / scale;
    c->n = n_cached < v->max_length / v->block_size ? n_cached : v->max_length / v->block_size;
    c->stride = v->base_stride * scale;
    c->n_fine = n_fine;
    c->fine_stride = v->base_stride;
    c->ahead_on = 1; /* phase 1 reads the cached run block by block */

    full_hit_probe(pool_probe_block, pool_probe_fine, c, n_cached, n_fine, v->max_length,
                   v->block_size, v->alignment, v->eagle, &r); /* proved */

    if (c->status != PROBE_OK) {
        return c->status == PROBE_UNSUPPORTED ? FAST_DELEGATE : FAST_ERROR;
    }
    if (!(0 <= r.num_blocks && r.num_blocks <= r.prefix + (r.tail >= 0 ? 1 : 0)
          && r.prefix <= c->n && r.hit_tokens >= 0)) {
        PyErr_SetString(PyExc_RuntimeError, "full_hit_probe answered outside its range");
        return FAST_ERROR;
    }
    end = r.num_blocks < r.prefix ? r.num_blocks : r.prefix;
    tail = r.num_blocks > r.prefix ? r.tail : -1;
    *result = answer(c, v->null_block, 0, end, tail, r.hit_tokens);
    return *result == NULL ? FAST_ERROR : FAST_DONE;
}

/* The fast path: FAST_DONE with *result set, FAST_DELEGATE when the input
 * is outside what it models (no exception set), FAST_ERROR with an
 * exception set. */
static int
fast_lookup(Lookup *self, PyObject **a, PyObject **result)
{
    call_view v;
    pool_probe c;
    int status;

    memset(&v, 0, sizeof(v));
    pool_probe_init(&c);
    status = read_call(self, a, &v, &c);
    if (status == FAST_ERROR && PyErr_ExceptionMatches(PyExc_Exception)) {
        /* A failure while reading the arguments (a truth test,
         * resolve_block_hashes' assert on block sizes vLLM rejects, ...) is
         * the input's: ``fallback`` reads them again the same way and
         * raises what vLLM raises, without telling on_error. */
        PyErr_Clear();
        status = FAST_DELEGATE;
    }
    if (status == FAST_DONE) {
        status = self->kind == KIND_FULL_ATTENTION
                     ? full_attention_lookup(a, &v, &c, result)
                     : sliding_window_lookup(a, &v, &c, result);
    }
    pool_probe_release(&c);
    view_release(&v);
    return status;
}

static PyObject *
lookup_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Lookup *self = (Lookup *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *slots[A_COUNT];
    PyObject *result = NULL;
    PyObject *type, *value, *tb, *told;
    int status;

    self->calls++;
    if (!bind_args(args, nargs, kwnames, slots)
        || (self->home != Py_None && slots[A_CLS] != self->home)) {
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
    return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
}

static int
lookup_traverse(Lookup *self, visitproc visit, void *arg)
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
    Py_VISIT(self->view_type);
    Py_VISIT(self->home);
    return 0;
}

static int
lookup_clear(Lookup *self)
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
    Py_CLEAR(self->view_type);
    Py_CLEAR(self->home);
    return 0;
}

static void
lookup_dealloc(Lookup *self)
{
    PyObject_GC_UnTrack(self);
    lookup_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef lookup_members[] = {
    {"calls", T_ULONGLONG, offsetof(Lookup, calls), 0, "every call"},
    {"native", T_ULONGLONG, offsetof(Lookup, native), 0,
     "calls answered here by the proved search"},
    {"delegated", T_ULONGLONG, offsetof(Lookup, delegated), 0,
     "calls handed to the Python lookup (inputs the fast path does not model)"},
    {"fallback", T_OBJECT, offsetof(Lookup, fallback), READONLY, "the Python lookup"},
    {"original", T_OBJECT, offsetof(Lookup, original), READONLY,
     "original(cls, ...): vLLM's own method, bound to cls"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject LookupType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "swa_prefix_cache.core._hotpath.Lookup",
    .tp_doc = PyDoc_STR(
        "find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, "
        "block_pool, kv_cache_spec, drop_eagle_block, alignment_tokens, "
        "dcp_world_size=1, pcp_world_size=1) of vLLM's SlidingWindowManager "
        "(find_hit_probe) or FullAttentionManager (full_hit_probe), answered by the "
        "proved search in one call; made by new_lookup()."),
    .tp_basicsize = sizeof(Lookup),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Lookup, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)lookup_traverse,
    .tp_clear = (inquiry)lookup_clear,
    .tp_dealloc = (destructor)lookup_dealloc,
    .tp_members = lookup_members,
};

static PyObject *
new_lookup(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {
        "fallback", "original", "on_error", "resolve", "spec_type", "pool_type",
        "map_type", "block_type", "probe_fn", "read_fn", "key_fn", "key_scope",
        "pool_read", "kind", "view_type", "home", "layout", NULL,
    };
    PyObject *o[12];
    PyObject *view_type = Py_None;
    PyObject *home = Py_None;
    const char *kind_name = "sliding_window";
    const char *layout = "blocks";
    int pool_read, kind, block_ids;
    int k;
    Lookup *self;

    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOOOp|$sOOs:new_lookup", kwlist,
                                     &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                                     &o[7], &o[8], &o[9], &o[10], &o[11], &pool_read,
                                     &kind_name, &view_type, &home, &layout)) {
        return NULL;
    }
    for (k = 0; k < 4; k++) {
        if (!PyCallable_Check(o[k])) {
            return PyErr_Format(PyExc_TypeError, "%s must be callable, got %s", kwlist[k],
                                Py_TYPE(o[k])->tp_name);
        }
    }
    for (k = 4; k < 8; k++) {
        if (!class_or_classes(o[k], kwlist[k], k == 4 || k == 6)) {
            return NULL;
        }
    }
    if (!PyDict_Check(o[11])) {
        return PyErr_Format(PyExc_TypeError, "key_scope must be a dict, got %s",
                            Py_TYPE(o[11])->tp_name);
    }
    if (strcmp(kind_name, "sliding_window") == 0) {
        kind = KIND_SLIDING_WINDOW;
    } else if (strcmp(kind_name, "full_attention") == 0) {
        kind = KIND_FULL_ATTENTION;
    } else {
        return PyErr_Format(PyExc_ValueError,
                            "kind must be 'sliding_window' or 'full_attention', got '%s'",
                            kind_name);
    }
    if (strcmp(layout, "blocks") == 0) {
        block_ids = 0;
    } else if (strcmp(layout, "block_ids") == 0) {
        block_ids = 1;
    } else {
        return PyErr_Format(PyExc_ValueError, "layout must be 'blocks' or 'block_ids', got '%s'",
                            layout);
    }
    if (view_type != Py_None && !PyType_Check(view_type)) {
        return PyErr_Format(PyExc_TypeError, "view_type must be a class or None, got %s",
                            Py_TYPE(view_type)->tp_name);
    }
    if (home != Py_None && !PyType_Check(home)) {
        return PyErr_Format(PyExc_TypeError, "home must be a class or None, got %s",
                            Py_TYPE(home)->tp_name);
    }
    self = PyObject_GC_New(Lookup, &LookupType);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = lookup_vectorcall;
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
    self->view_type = Py_NewRef(view_type);
    self->home = Py_NewRef(home);
    self->pool_read = pool_read;
    self->block_ids = block_ids;
    self->kind = kind;
    self->calls = self->native = self->delegated = 0;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* ---- the KV-offload sliding-window lookup ----------------------------------
 * OffloadingConnectorScheduler._sliding_window_lookup by the proved
 * offload_stride_search_probe: a probe of chunk i reads what a pure
 * CPUOffloadingManager's lookup(keys[i]) reads, inline: its policy's dicts
 * (LRU: chunks; ARC: t1 then t2) and the chunk's ref_cnt. Only for vLLM's
 * CPUOffloadingManager with its own lookup and an LRU or ARC policy with its
 * own get (swa_prefix_cache/vllm_adapter/connector_lookup.py checks which,
 * on a source fingerprint, and passes the maps and vLLM's ChunkStatus):
 * any other value makes the call "unsupported" and the caller runs vLLM's
 * own scan instead. A manager call cost about 0.5 us a probe; a dict read
 * and a field read cost tens of ns. */

typedef struct {
    PyObject *keys;    /* borrowed: the chunk keys (list or sequence) */
    PyObject *maps[2]; /* borrowed: the policy's dicts, read in order */
    Py_ssize_t nmaps;
    PyObject *chunk_type; /* borrowed: ChunkStatus */
    int keys_is_list;
    int64_t n;
    int status;
} offload_probe;

static PyObject *s_ref_cnt; /* "ref_cnt", interned by intern_names */

/* keys[i], a new reference; NULL with PROBE_ERROR set. */
static PyObject *
offload_key(offload_probe *c, int64_t i)
{
    PyObject *key;

    if (i < 0 || i >= c->n) {
        PyErr_Format(PyExc_RuntimeError, "probe of chunk %lld outside [0, %lld)", (long long)i,
                     (long long)c->n);
        c->status = PROBE_ERROR;
        return NULL;
    }
    if (c->keys_is_list && i < PyList_GET_SIZE(c->keys)) {
        return Py_NewRef(PyList_GET_ITEM(c->keys, (Py_ssize_t)i));
    }
    key = PySequence_GetItem(c->keys, (Py_ssize_t)i);
    if (key == NULL) {
        c->status = PROBE_ERROR;
    }
    return key;
}

/* The same answer as CPUOffloadingManager.lookup(keys[i]) read inline:
 * the policy's get (LRU: chunks.get(key); ARC: t1.get(key) or t2.get(key))
 * over exact dicts, then ChunkStatus.is_ready (ref_cnt >= 0). A value that
 * is not exactly chunk_type, or a ref_cnt that is not an int, makes the
 * call "unsupported" (the caller runs vLLM's own scan). */
static uint8_t
offload_probe_chunk(void *ctx, int64_t i)
{
    offload_probe *c = ctx;
    PyObject *key, *chunk = NULL, *ref_cnt;
    Py_ssize_t m;
    long long count;
    int overflow;

    if (c->status != PROBE_OK) {
        return 0;
    }
    key = offload_key(c, i);
    if (key == NULL) {
        return 0;
    }
    for (m = 0; m < c->nmaps && chunk == NULL; m++) {
        chunk = PyDict_GetItemWithError(c->maps[m], key); /* borrowed */
        if (chunk == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            c->status = PROBE_ERROR;
            return 0;
        }
    }
    Py_DECREF(key);
    if (chunk == NULL) {
        return 0; /* MISS */
    }
    if (Py_TYPE(chunk) != (PyTypeObject *)c->chunk_type) {
        c->status = PROBE_UNSUPPORTED;
        return 0;
    }
    Py_INCREF(chunk); /* held while its field is read */
    ref_cnt = PyObject_GetAttr(chunk, s_ref_cnt);
    Py_DECREF(chunk);
    if (ref_cnt == NULL) {
        c->status = PROBE_ERROR;
        return 0;
    }
    if (!PyLong_CheckExact(ref_cnt)) {
        Py_DECREF(ref_cnt);
        c->status = PROBE_UNSUPPORTED;
        return 0;
    }
    count = PyLong_AsLongLongAndOverflow(ref_cnt, &overflow);
    Py_DECREF(ref_cnt);
    if (overflow != 0) {
        return overflow < 0 ? 2 : 1;
    }
    if (count == -1 && PyErr_Occurred()) {
        c->status = PROBE_ERROR;
        return 0;
    }
    return count < 0 ? 2 : 1; /* HIT_PENDING : HIT */
}

static int
offload_size(PyObject *obj, const char *name, int64_t *out)
{
    if (!PyLong_CheckExact(obj) || !exact_int(obj, 0, OL_MAX_CHUNKS, out)) {
        PyErr_Format(PyExc_ValueError, "%s must be an int in [0, 2**62], got %R", name, obj);
        return -1;
    }
    return 0;
}

/* keys' length, or -1 with a TypeError naming it. */
static Py_ssize_t
offload_keys_size(PyObject *keys)
{
    Py_ssize_t n = PyList_CheckExact(keys) ? PyList_GET_SIZE(keys) : PySequence_Size(keys);

    if (n < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "keys must be a sequence, got %s", Py_TYPE(keys)->tp_name);
    }
    return n;
}

/* Run the proved search with probe over c's keys; its answer as vLLM's
 * _sliding_window_lookup returns it (None, or the window's end), or
 * NotImplemented when a probe met something outside the model. */
static PyObject *
offload_search(pc_tri_probe_fn probe, offload_probe *c, int64_t window, int64_t initial)
{
    int64_t probes = 0, end;

    c->status = PROBE_OK;
    end = offload_stride_search_probe(probe, c, c->n, window, initial, &probes);
    if (c->status == PROBE_ERROR) {
        return NULL;
    }
    if (c->status == PROBE_UNSUPPORTED) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (end < -1 || end > c->n) {
        return PyErr_Format(PyExc_RuntimeError, "offload_stride_search answered %lld outside "
                            "[-1, %lld]", (long long)end, (long long)c->n);
    }
    if (end == OL_NONE) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong((long long)end);
}

static PyObject *
offload_lookup(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    offload_probe c = {0};
    int64_t window, initial;
    Py_ssize_t n, m;

    (void)module;
    if (nargs != 5) {
        return PyErr_Format(PyExc_TypeError,
                            "offload_lookup(maps, keys, window, initial_window, "
                            "chunk_type) takes 5 arguments, got %zd", nargs);
    }
    if (!PyTuple_CheckExact(args[0]) || PyTuple_GET_SIZE(args[0]) < 1
        || PyTuple_GET_SIZE(args[0]) > 2) {
        return PyErr_Format(PyExc_TypeError, "maps must be a tuple of 1 or 2 dicts, got %R",
                            args[0]);
    }
    for (m = 0; m < PyTuple_GET_SIZE(args[0]); m++) {
        if (!PyDict_Check(PyTuple_GET_ITEM(args[0], m))) {
            return PyErr_Format(PyExc_TypeError, "maps must be a tuple of 1 or 2 dicts, got a %s",
                                Py_TYPE(PyTuple_GET_ITEM(args[0], m))->tp_name);
        }
        c.maps[m] = PyTuple_GET_ITEM(args[0], m);
    }
    if (!PyType_Check(args[4])) {
        return PyErr_Format(PyExc_TypeError, "chunk_type must be a class, got %s",
                            Py_TYPE(args[4])->tp_name);
    }
    if (offload_size(args[2], "window", &window) < 0
        || offload_size(args[3], "initial_window", &initial) < 0) {
        return NULL;
    }
    n = offload_keys_size(args[1]);
    if (n < 0) {
        return NULL;
    }
    c.nmaps = PyTuple_GET_SIZE(args[0]);
    c.chunk_type = args[4];
    c.keys = args[1];
    c.keys_is_list = PyList_CheckExact(args[1]);
    c.n = (int64_t)n;
    return offload_search(offload_probe_chunk, &c, window, initial);
}

/* calls_own(obj, pairs): every (name, fn) of pairs is resolves_to(obj,
 * name, fn): obj.name(...) calls its class's fn on obj. The KV-offload
 * lookups check about twenty of vLLM's methods per tier lookup (those that
 * can change what a remembered ready run holds); in Python each check made
 * a bound method and read two of its attributes. */
static PyObject *
calls_own(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *pairs, *pair;
    Py_ssize_t k;
    int own;

    (void)module;
    if (nargs != 2) {
        return PyErr_Format(PyExc_TypeError, "calls_own(obj, pairs) takes 2 arguments, got %zd",
                            nargs);
    }
    pairs = args[1];
    if (!PyTuple_CheckExact(pairs)) {
        return PyErr_Format(PyExc_TypeError, "pairs must be a tuple of (name, function) "
                            "tuples, got %s", Py_TYPE(pairs)->tp_name);
    }
    for (k = 0; k < PyTuple_GET_SIZE(pairs); k++) {
        pair = PyTuple_GET_ITEM(pairs, k);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2
            || !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0))) {
            return PyErr_Format(PyExc_TypeError, "pairs[%zd] must be a (name, function) "
                                "tuple, got %R", k, pair);
        }
    }
    for (k = 0; k < PyTuple_GET_SIZE(pairs); k++) {
        pair = PyTuple_GET_ITEM(pairs, k);
        own = resolves_to(args[0], PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1));
        if (own < 0) {
            return NULL;
        }
        if (!own) {
            Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

static PyObject *
totals(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_BuildValue("{sKsK}", "native", total_native, "delegated", total_delegated);
}

static PyObject *
read_ahead(PyObject *module, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    int was;

    (void)module;
    if (on < 0) {
        return NULL;
    }
    was = pool_ahead_set(on);
    if (was < 0) {
        return NULL;
    }
    return PyBool_FromLong(was);
}

static PyObject *
pool_key_hashes_method(PyObject *module, PyObject *keys)
{
    (void)module;
    return pool_key_hashes(keys);
}

static PyObject *
fast_paths(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return pool_fast_paths();
}

static PyMethodDef hotpath_methods[] = {
    {"fast_paths", fast_paths, METH_NOARGS,
     PyDoc_STR("fast_paths() -> dict: what this build and interpreter get: read_ahead (compiled "
               "in and its dict-layout self-test passed), read_ahead_on (now), hash "
               "('avx2-siphash13' or 'cpython'), built (True), why (a sentence)")},
    {"read_ahead", read_ahead, METH_O,
     PyDoc_STR("read_ahead(on) -> bool: turn the read-ahead of consecutive pool reads off, or "
               "on again if its dict-layout self-test passes; returns whether it was on "
               "(answers never depend on it; for benchmarks)")},
    {"key_hashes", (PyCFunction)(void (*)(void))pool_key_hashes_method, METH_O,
     PyDoc_STR("key_hashes(keys) -> list[int] | None: the hashes the read-ahead computes "
               "itself for a list of bytes of one length (1-64 bytes; each must be hash(key)), "
               "or None when it leaves them to CPython's _Py_HashBytes (for tests)")},
    {"offload_lookup", (PyCFunction)(void (*)(void))offload_lookup, METH_FASTCALL,
     PyDoc_STR("offload_lookup(maps, keys, window, initial_window, chunk_type) -> "
               "int | None | NotImplemented: vLLM's "
               "OffloadingConnectorScheduler._sliding_window_lookup by the proved "
               "offload_stride_search (initial_window 0 = None), each chunk read as a pure "
               "CPUOffloadingManager's lookup reads it: the first of maps (1 or 2 dicts, the "
               "policy's) holding the key, then the chunk's ref_cnt (>= 0: HIT, < 0: "
               "HIT_PENDING; absent: MISS); NotImplemented when a value is not exactly "
               "chunk_type or its ref_cnt is not an int")},
    {"calls_own", (PyCFunction)(void (*)(void))calls_own, METH_FASTCALL,
     PyDoc_STR("calls_own(obj, pairs) -> bool: for every (name, fn) in pairs, obj.name(...) "
               "calls fn, its class's function, on obj (the class resolves name to fn and "
               "no instance attribute shadows it), read without building obj's __dict__")},
    {"totals", totals, METH_NOARGS,
     PyDoc_STR("totals() -> {'native': n, 'delegated': n}: lookups answered in C "
               "and handed to the Python lookup by every Lookup of this process")},
    {"new_lookup", (PyCFunction)(void (*)(void))new_lookup, METH_VARARGS | METH_KEYWORDS,
     PyDoc_STR("new_lookup(fallback, original, on_error, resolve, spec_type, pool_type, "
               "map_type, block_type, probe_fn, read_fn, key_fn, key_scope, pool_read, *, "
               "kind='sliding_window', view_type=None, home=None, layout='blocks') -> Lookup (see "
               "swa_prefix_cache/vllm_adapter/swa_lookup.py)")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef hotpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "swa_prefix_cache.core._hotpath",
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
        {&s_view_hashes, "block_hashes"},
        {&s_view_scale, "scale_factor"},
        {&s_blocks, "_blocks"},
        {&s_ref_cnt, "ref_cnt"},
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

    if (intern_names() < 0 || PyType_Ready(&LookupType) < 0 || pool_ahead_set(1) < 0) {
        return NULL;
    }
    m = PyModule_Create(&hotpath_module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&LookupType);
    if (PyModule_AddObject(m, "Lookup", (PyObject *)&LookupType) < 0) {
        Py_DECREF(&LookupType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
