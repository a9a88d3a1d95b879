/*
 * hotpath_pool.c -- the BlockPool probe, its log and vLLM's answer lists
 * (see hotpath_pool.h for what it does, assumes and how it is tested).
 * Glue, NOT proved.
 */
#include "hotpath_pool.h"
#include "hotpath_dict.h"

#include <stddef.h>
#include <string.h>

void
pool_probe_init(pool_probe *c)
{
    memset(c, 0, offsetof(pool_probe, idx_stack));
    c->suffix = c->suffix_stack;
    c->log_idx = c->idx_stack;
    c->log_blocks = c->blocks_stack;
    c->stride = 1;
    c->fine_stride = 1;
    c->last_at = -1;
}

int
pool_probe_groups(pool_probe *c, PyObject *group_ids)
{
    Py_ssize_t g, ngroups;
    int64_t gid;
    int overflow = 0;

    ngroups = PyList_GET_SIZE(group_ids);
    if (ngroups < 1) {
        return 0;
    }
    if (ngroups > POOL_SUFFIX_STACK) {
        c->suffix = PyMem_Malloc((size_t)ngroups * 4);
        if (c->suffix == NULL) {
            c->suffix = c->suffix_stack;
            PyErr_NoMemory();
            return -1;
        }
    }
    c->ngroups = ngroups;
    for (g = 0; g < ngroups; g++) {
        PyObject *id = PyList_GET_ITEM(group_ids, g);
        if (!PyLong_CheckExact(id)) {
            return 0;
        }
        gid = PyLong_AsLongLongAndOverflow(id, &overflow);
        if (overflow != 0 || gid < 0 || gid > 0xFFFFFFFFLL) {
            PyErr_Clear();
            return 0;
        }
        c->suffix[g][0] = (unsigned char)(gid >> 24);
        c->suffix[g][1] = (unsigned char)(gid >> 16);
        c->suffix[g][2] = (unsigned char)(gid >> 8);
        c->suffix[g][3] = (unsigned char)gid;
    }
    c->log_cap = POOL_LOG_STACK / ngroups;
    if (c->log_cap < 1) {
        /* More groups than stack slots: the log starts on the heap. */
        c->log_idx = PyMem_Malloc(sizeof(int64_t));
        c->log_blocks = PyMem_Malloc((size_t)ngroups * sizeof(PyObject *));
        c->log_on_heap = 1;
        c->log_cap = 1;
        if (c->log_idx == NULL || c->log_blocks == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 1;
}

void
pool_probe_release(pool_probe *c)
{
    Py_ssize_t k;

    if (c->ahead_ready) {
        for (k = 0; k < POOL_AHEAD_RING; k++) {
            Py_CLEAR(c->ahead[k].item);
        }
        c->ahead_ready = 0;
    }
    c->last_at = -1;
    if (c->log_blocks != NULL) {
        for (k = 0; k < c->log_len * c->ngroups; k++) {
            Py_XDECREF(c->log_blocks[k]);
        }
    }
    c->log_len = 0;
    if (c->log_on_heap) {
        PyMem_Free(c->log_idx);
        PyMem_Free(c->log_blocks);
        c->log_on_heap = 0;
    }
    c->log_idx = c->idx_stack;
    c->log_blocks = c->blocks_stack;
    if (c->suffix != c->suffix_stack) {
        PyMem_Free(c->suffix);
        c->suffix = c->suffix_stack;
    }
    Py_CLEAR(c->key);
}

static int
log_reserve(pool_probe *c)
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

/* ---- Read-ahead -----------------------------------------------------------
 *
 * The full-attention scan reads thousands of consecutive hashes, each a
 * chain of dependent cache misses (the hash's bytes, the dict's index slot,
 * its entry, the stored key, the block). In a lookup that asks for it
 * (ahead_on: the full-attention one; the sliding-window search reads short
 * runs, where hashing ahead of a run's end would be wasted), when reads go
 * one position at a time (up or down), the reads ahead of the current one
 * are fetched in stages: the hash object AHEAD_OBJECT reads ahead; the key
 * hashes (kept, so the real read does not hash again) and their index slots
 * AHEAD_HASH ahead; the entries AHEAD_ENTRY ahead; the stored keys and
 * blocks AHEAD_VALUE ahead. Only prefetches and reads of memory the dict
 * owns: what a read answers never depends on them (the real read is the
 * same _PyDict_GetItem_KnownHash with the same hash). A kept hash is used
 * only for the very object it was computed from (held until then; bytes are
 * immutable). The dict layout is CPython 3.11/3.12's (hotpath_dict.h); a
 * self-test (pool_ahead_selftest) checks it on a real dict at import and
 * turns the read-ahead off if it does not hold. */
#if HOTPATH_DICT_LAYOUT
#define POOL_AHEAD_BUILD 1
#define AHEAD_KEY_MAX 60
/* How far ahead (in reads) each stage runs (docs/hot-path.md). */
#ifndef AHEAD_OBJECT
#define AHEAD_OBJECT 24
#define AHEAD_HASH 16
#define AHEAD_ENTRY 10
#define AHEAD_VALUE 5
#endif
#else
#define POOL_AHEAD_BUILD 0
#endif

static int pool_ahead_ok = 0;

#if POOL_AHEAD_BUILD
#define AHEAD_FETCH(p) __builtin_prefetch((const void *)(p))

/* The ring slot of list position t, read as hashes[(index + 1) * stride - 1]:
 * consecutive indexes take consecutive slots whatever the stride. */
static pool_ahead_slot *
ahead_slot_of(pool_probe *c, int64_t t, int64_t stride)
{
    int64_t index = stride == 1 ? t + 1 : (t + 1) / stride; /* no division when plain */
    return &c->ahead[index & (POOL_AHEAD_RING - 1)];
}

/* Stage 2: hash position t's keys (kept) and fetch their index slots. */
static void
ahead_hash(pool_probe *c, const ahead_keys *keys, int64_t t, int64_t stride)
{
    pool_ahead_slot *s = ahead_slot_of(c, t, stride);
    PyObject *item = PyList_GET_ITEM(c->hashes, (Py_ssize_t)t);
    char buf[AHEAD_KEY_MAX + 4];
    Py_ssize_t len, g;

    if (s->at == t && s->item == item) {
        return;
    }
    s->at = -1;
    Py_CLEAR(s->item);
    if (!PyBytes_CheckExact(item) || PyBytes_GET_SIZE(item) > AHEAD_KEY_MAX) {
        return;
    }
    len = PyBytes_GET_SIZE(item);
    memcpy(buf, PyBytes_AS_STRING(item), (size_t)len);
    for (g = 0; g < c->ngroups; g++) {
        memcpy(buf + len, c->suffix[g], 4);
        s->hash[g] = _Py_HashBytes(buf, len + 4);
        s->ix[g] = -1;
        AHEAD_FETCH(ahead_slot(keys, s->hash[g]));
    }
    Py_INCREF(item);
    s->item = item;
    s->at = t;
}

/* Stage 3: read position t's index slots and fetch their entries. */
static void
ahead_entry_of(pool_probe *c, const ahead_keys *keys, int64_t t, int64_t stride)
{
    pool_ahead_slot *s = ahead_slot_of(c, t, stride);
    Py_ssize_t g, ix;

    if (s->at != t) {
        return;
    }
    for (g = 0; g < c->ngroups; g++) {
        ix = ahead_index(keys, ahead_slot(keys, s->hash[g]));
        if (ix >= 0 && ix < keys->dk_nentries) {
            s->ix[g] = ix;
            AHEAD_FETCH(&ahead_entries(keys)[ix]);
            AHEAD_FETCH((const char *)&ahead_entries(keys)[ix] + sizeof(ahead_entry) - 1);
        }
    }
}

/* Stage 4: fetch position t's stored keys and blocks. */
static void
ahead_value(pool_probe *c, const ahead_keys *keys, int64_t t, int64_t stride)
{
    pool_ahead_slot *s = ahead_slot_of(c, t, stride);
    const ahead_entry *e;
    Py_ssize_t g;

    if (s->at != t) {
        return;
    }
    for (g = 0; g < c->ngroups; g++) {
        if (s->ix[g] >= 0 && s->ix[g] < keys->dk_nentries) {
            e = &ahead_entries(keys)[s->ix[g]];
            if (e->me_hash == s->hash[g] && e->me_key != NULL) {
                AHEAD_FETCH(e->me_key);
                AHEAD_FETCH((const char *)e->me_key + 64);
                AHEAD_FETCH(e->me_value);
            }
        }
    }
}

/* Read-ahead around a read of list position at (see above). */
static void
pool_ahead(pool_probe *c, int64_t at, int64_t stride, int64_t limit)
{
    int64_t step = at - c->last_at;
    int64_t end = limit * stride; /* positions past it are never read */
    int64_t t;
    const ahead_keys *keys;

    c->last_at = at;
    if (!pool_ahead_ok || !c->ahead_on || !c->hashes_is_list || c->ngroups > POOL_AHEAD_GROUPS
        || (step != stride && step != -stride)) {
        return;
    }
    keys = ahead_keys_of(c->cache);
    if (keys == NULL) {
        return;
    }
    if (end > PyList_GET_SIZE(c->hashes)) {
        end = PyList_GET_SIZE(c->hashes);
    }
    if (!c->ahead_ready) {
        for (t = 0; t < POOL_AHEAD_RING; t++) {
            c->ahead[t].at = -1;
            c->ahead[t].item = NULL;
        }
        c->ahead_ready = 1;
    }
    t = at + AHEAD_OBJECT * step;
    if (t >= 0 && t < end) {
        PyObject *item = PyList_GET_ITEM(c->hashes, (Py_ssize_t)t);
        AHEAD_FETCH(item);
        AHEAD_FETCH((const char *)item + 64);
    }
    t = at + AHEAD_HASH * step;
    if (t >= 0 && t < end) {
        ahead_hash(c, keys, t, stride);
    }
    t = at + AHEAD_ENTRY * step;
    if (t >= 0 && t < end) {
        ahead_entry_of(c, keys, t, stride);
    }
    t = at + AHEAD_VALUE * step;
    if (t >= 0 && t < end) {
        ahead_value(c, keys, t, stride);
    }
}

/* The kept hash of item + suffix[g] when position at was hashed ahead from
 * this very object, else -1. */
static Py_hash_t
ahead_kept_hash(pool_probe *c, int64_t at, int64_t stride, PyObject *item, Py_ssize_t g)
{
    pool_ahead_slot *s;

    if (!c->ahead_ready) {
        return -1;
    }
    s = ahead_slot_of(c, at, stride);
    if (s->at == at && s->item == item && g < POOL_AHEAD_GROUPS) {
        return s->hash[g];
    }
    return -1;
}
#else
static void
pool_ahead(pool_probe *c, int64_t at, int64_t stride, int64_t limit)
{
    (void)c;
    (void)at;
    (void)stride;
    (void)limit;
}

static Py_hash_t
ahead_kept_hash(pool_probe *c, int64_t at, int64_t stride, PyObject *item, Py_ssize_t g)
{
    (void)c;
    (void)at;
    (void)stride;
    (void)item;
    (void)g;
    return -1;
}
#endif

int
pool_ahead_selftest(void)
{
#if POOL_AHEAD_BUILD
    PyObject *dict, *key;
    ahead_keys *keys;
    const ahead_entry *e;
    Py_ssize_t ix;
    Py_hash_t h;
    char buf[36];
    int k, found = 0, n = 512;

    dict = PyDict_New();
    if (dict == NULL) {
        return -1;
    }
    for (k = 0; k < n; k++) {
        memset(buf, 0, sizeof buf);
        memcpy(buf, &k, sizeof k);
        key = PyBytes_FromStringAndSize(buf, sizeof buf);
        if (key == NULL || PyDict_SetItem(dict, key, Py_None) < 0) {
            Py_XDECREF(key);
            Py_DECREF(dict);
            return -1;
        }
        Py_DECREF(key);
    }
    keys = ahead_keys_of(dict);
    for (k = 0; keys != NULL && k < n; k++) {
        memset(buf, 0, sizeof buf);
        memcpy(buf, &k, sizeof k);
        h = _Py_HashBytes(buf, (Py_ssize_t)sizeof buf);
        ix = ahead_index(keys, ahead_slot(keys, h));
        if (ix < 0 || ix >= keys->dk_nentries) {
            continue;
        }
        e = &ahead_entries(keys)[ix];
        if (e->me_hash == h && e->me_value == Py_None && PyBytes_CheckExact(e->me_key)
            && memcmp(PyBytes_AS_STRING(e->me_key), buf, sizeof buf) == 0) {
            found++;
        }
    }
    Py_DECREF(dict);
    /* Most keys sit in their first slot when the layout is right; none
     * would match by chance otherwise. */
    return found >= n / 2;
#else
    return 0;
#endif
}

int
pool_ahead_set(int on)
{
    static int layout = -1; /* the self-test's result, once known */
    int was = pool_ahead_ok;

    if (on && layout < 0) {
        layout = pool_ahead_selftest();
        if (layout < 0) {
            return -1;
        }
    }
    pool_ahead_ok = on && layout;
    return was;
}

/* The key of one read: hash + suffix. On CPython 3.11/3.12 one bytes
 * object per lookup is refilled for every read (c->key, which only this
 * file ever references) and its hash is computed as bytes_hash computes it,
 * so the dict is asked with _PyDict_GetItem_KnownHash and no object is made
 * per probe; elsewhere a new bytes object per read. A borrowed reference
 * (reused) or a new one (*fresh set); NULL with an exception set. */
static PyObject *
make_key(pool_probe *c, const char *hash, Py_ssize_t hash_len, const unsigned char *suffix,
         Py_hash_t kept, Py_hash_t *key_hash, int *fresh)
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
    *key_hash = kept != -1 ? kept : _Py_HashBytes(buf, hash_len + 4);
#else
    (void)kept;
    *key_hash = -1;
#endif
    return key;
}

/* One group's read: a new reference to the block, or NULL with *miss set
 * (no exception) or NULL with an exception set. */
static PyObject *
read_block(pool_probe *c, const char *hash, Py_ssize_t hash_len, const unsigned char *suffix,
           Py_hash_t kept, int *miss)
{
    PyObject *key;
    PyObject *block;
    Py_hash_t key_hash;
    int fresh;
    int truth;

    key = make_key(c, hash, hash_len, suffix, kept, &key_hash, &fresh);
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
    /* Several blocks (or anything else) under the key: vLLM's own read and
     * vLLM's own truth test (``if not block``), with a key of its own. */
    key = PyBytes_FromStringAndSize(NULL, hash_len + 4);
    if (key == NULL) {
        return NULL;
    }
    memcpy(PyBytes_AS_STRING(key), hash, (size_t)hash_len);
    memcpy(PyBytes_AS_STRING(key) + hash_len, suffix, 4);
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

/* One probe of hashes[(index + 1) * stride - 1] for every group, logged as
 * log_as on a hit. */
static uint8_t
probe_at(pool_probe *c, int64_t index, int64_t stride, int64_t limit, int64_t log_as)
{
    PyObject *item;
    PyObject *owned = NULL;
    PyObject **slot;
    Py_ssize_t g;
    int64_t at;
    int miss = 0;

    if (c->status != PROBE_OK) {
        return 0;
    }
    if (index < 0 || index >= limit) {
        PyErr_Format(PyExc_RuntimeError, "probe of %lld outside [0, %lld)", (long long)index,
                     (long long)limit);
        c->status = PROBE_ERROR;
        return 0;
    }
    at = (index + 1) * stride - 1; /* < limit * stride <= len(hashes): no overflow */
    if (c->hashes_is_list) {
        if (at >= PyList_GET_SIZE(c->hashes)) {
            PyErr_SetString(PyExc_RuntimeError, "block_hashes shrank during the lookup");
            c->status = PROBE_ERROR;
            return 0;
        }
        pool_ahead(c, at, stride, limit);
        item = PyList_GET_ITEM(c->hashes, (Py_ssize_t)at); /* borrowed */
    } else {
        owned = item = PySequence_GetItem(c->hashes, (Py_ssize_t)at);
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
        slot[g] = read_block(c, PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item), c->suffix[g],
                             ahead_kept_hash(c, at, stride, item, g), &miss);
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
    c->log_idx[c->log_len] = log_as;
    c->log_len++;
    return 1;
}

uint8_t
pool_probe_block(void *ctx, int64_t i)
{
    pool_probe *c = ctx;
    return probe_at(c, i, c->stride, c->n, i);
}

uint8_t
pool_probe_fine(void *ctx, int64_t j)
{
    pool_probe *c = ctx;
    return probe_at(c, j, c->fine_stride, c->n_fine, -(j + 1));
}

PyObject *
pool_answer_list(pool_probe *c, Py_ssize_t g, PyObject *null_block, int64_t first_real,
                 int64_t end, int64_t tail)
{
    Py_ssize_t size = (Py_ssize_t)end + (tail >= 0 ? 1 : 0);
    PyObject *list = PyList_New(size);
    Py_ssize_t k, e;

    if (list == NULL) {
        return NULL;
    }
    /* first_real references to null_block at once, as [x] * n does. */
    if (first_real > 0) {
        Py_SET_REFCNT(null_block, Py_REFCNT(null_block) + (Py_ssize_t)first_real);
    }
    for (k = 0; k < (Py_ssize_t)first_real; k++) {
        PyList_SET_ITEM(list, k, null_block);
    }
    for (e = 0; e < c->log_len; e++) {
        int64_t i = c->log_idx[e];
        PyObject **slot = c->log_blocks + e * c->ngroups + g;
        Py_ssize_t at = -1;
        if (i >= first_real && i < end) {
            at = (Py_ssize_t)i;
        } else if (tail >= 0 && i == -(tail + 1)) {
            at = (Py_ssize_t)end;
        }
        if (at >= 0 && PyList_GET_ITEM(list, at) == NULL) {
            PyList_SET_ITEM(list, at, *slot); /* steals the log's reference */
            *slot = NULL;
        }
    }
    for (k = (Py_ssize_t)first_real; k < size; k++) {
        if (PyList_GET_ITEM(list, k) == NULL) {
            Py_DECREF(list); /* list_dealloc skips the NULL items */
            PyErr_Format(PyExc_RuntimeError, "block %zd of the answer [%lld, %zd) was not probed",
                         k, (long long)first_real, size);
            return NULL;
        }
    }
    return list;
}
