/*
 * hotpath_pool.c -- the BlockPool probe, its log and vLLM's answer lists
 * (see hotpath_pool.h for what it does, assumes and how it is tested).
 * Glue, NOT proved.
 */
#include "hotpath_pool.h"
#include "hotpath_dict.h"
#include "hotpath_siphash.h"

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

    c->batch_lo = c->batch_hi = c->after_hit = 0;
    c->batch_short = 0;
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

/* The log grown (full): to twice its size, or at once to room for a hit of
 * every block the search may read (c->n, and the fine tail), whichever is
 * more. */
static int
log_grow(pool_probe *c)
{
    Py_ssize_t cap;
    int64_t *idx;
    PyObject **blocks;

    cap = c->log_cap * 2;
    if (cap < c->n + 2 && c->n < PY_SSIZE_T_MAX / 2) {
        cap = (Py_ssize_t)c->n + 2;
    }
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

/* Room for one more log entry: 0, or -1 with an exception set. */
static inline int
log_reserve(pool_probe *c)
{
    return c->log_len < c->log_cap ? 0 : log_grow(c);
}

/* ---- Read-ahead -----------------------------------------------------------
 *
 * The full-attention scan reads thousands of consecutive hashes, each a
 * chain of dependent cache misses (the hash's bytes, the dict's index slot,
 * its entry, the stored key, the block) and a SipHash that waits on its own
 * chain. In a lookup that asks for it (ahead_on: the full-attention one),
 * when the search reads block i right after block i - 1, pool_batch reads
 * blocks i .. i + POOL_BATCH - 1 together, in stages over the whole batch
 * so that their misses overlap: the hash objects (and the next batch's,
 * fetched), the key hashes (eight at a time in AVX2 registers,
 * hotpath_siphash.h, or _Py_HashBytes), the index slots, the entries, the
 * stored keys and blocks, then the reads. A read of the batch counts only
 * when it certifies a hit: an entry whose key is exactly bytes equal to the
 * key (ahead_entry_is, hotpath_dict.h) and whose value is exactly vLLM's
 * block class, in every group; it looks at the entry the key's first index
 * slot names, then walks the dict as CPython's lookup does (ahead_find). A
 * dict holds one entry per key, so that entry is what CPython's read would
 * return. The batch stops at the first block it cannot certify (a miss,
 * anything else, a read that would call Python); that block is read by
 * probe_at, with CPython's own read, as without the read-ahead. The blocks
 * of a batch are the ones the search reads next (block by block up to the
 * first miss), logged as its probes would log them; a batch runs no Python
 * code. The dict layout is CPython 3.11-3.13's (hotpath_dict.h); a
 * self-test (pool_ahead_selftest) checks it on a real dict at import and
 * turns the read-ahead off if it does not hold. */
#if HOTPATH_DICT_LAYOUT
#define POOL_AHEAD_BUILD 1
#define AHEAD_LANES (POOL_BATCH * POOL_AHEAD_GROUPS)
/* A key (hash + 4-byte suffix) fills at most one hashing row. */
typedef char pool_key_fits_row[POOL_AHEAD_KEY_MAX + 4 <= HOTPATH_HASH_ROW ? 1 : -1];
#else
#define POOL_AHEAD_BUILD 0
#endif

static int pool_ahead_ok = 0;
static int pool_layout = -1; /* pool_ahead_selftest's result, once known */

/* The id layout's block for a value: blocks[value] (borrowed) when the
 * value is an exact int in [0, len(blocks)), else NULL (no exception): the
 * caller then reads through vLLM's own get_one_block. */
static PyObject *
id_block(pool_probe *c, PyObject *value)
{
    Py_ssize_t id;
    int overflow = 0;

    if (!PyLong_CheckExact(value)) {
        return NULL;
    }
    id = (Py_ssize_t)PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow != 0 || id < 0 || id >= PyList_GET_SIZE(c->blocks)) {
        if (PyErr_Occurred()) {
            PyErr_Clear();
        }
        return NULL;
    }
    return PyList_GET_ITEM(c->blocks, id);
}

#if POOL_AHEAD_BUILD
static int pool_own_hash = 0; /* hotpath_siphash13_rows passed its self-test */

#define AHEAD_FETCH(p) __builtin_prefetch((const void *)(p))

/* The hashes of the lanes len-byte keys at rows + r * HOTPATH_HASH_ROW:
 * eight at a time by hotpath_siphash13_rows where its self-test passed,
 * the rest (or all) by _Py_HashBytes. */
static void
key_hashes(const unsigned char *rows, Py_ssize_t lanes, Py_ssize_t len, Py_hash_t *out)
{
    Py_ssize_t lane = 0;

#if HOTPATH_SIPHASH
    if (pool_own_hash) {
        lane = lanes - lanes % HOTPATH_HASH_LANES;
        hotpath_siphash13_rows(rows, lane, len, out);
    }
#endif
    for (; lane < lanes; lane++) {
        out[lane] = _Py_HashBytes(rows + lane * HOTPATH_HASH_ROW, len);
    }
}

/* Reads blocks i .. (at most POOL_BATCH, below limit) as described above;
 * returns how many from i on it certified cached in every group, each
 * logged (owned references) as probe_at logs a hit. Sets no exception. */
static int64_t
pool_batch(pool_probe *c, int64_t i, int64_t stride, int64_t limit)
{
    const ahead_keys *keys = ahead_keys_of(c->cache);
    unsigned char buf[AHEAD_LANES][HOTPATH_HASH_ROW]; /* a key per row, then zeros */
    Py_hash_t hash[AHEAD_LANES];
    const ahead_entry *first[AHEAD_LANES];
    Py_ssize_t size = PyList_GET_SIZE(c->hashes);
    Py_ssize_t len = -1;
    Py_ssize_t ng = c->ngroups;
    int64_t count = limit - i < POOL_BATCH ? limit - i : POOL_BATCH;
    int64_t k, lanes, lane, g, at;

    if (keys == NULL) {
        return 0;
    }
    /* The batch's keys: hash + suffix, all of one length. */
    for (k = 0; k < count; k++) {
        PyObject *item;
        at = (i + k + 1) * stride - 1; /* < limit * stride <= len(hashes) at the start */
        if (at >= size) {
            break;
        }
        item = PyList_GET_ITEM(c->hashes, (Py_ssize_t)at);
        if (!PyBytes_CheckExact(item) || PyBytes_GET_SIZE(item) > POOL_AHEAD_KEY_MAX
            || PyBytes_GET_SIZE(item) < 1 || (len >= 0 && PyBytes_GET_SIZE(item) != len)) {
            break;
        }
        len = PyBytes_GET_SIZE(item);
        for (g = 0; g < ng; g++) {
            lane = k * ng + g;
            if (len == AHEAD_COMMON_KEY - 4) { /* sizes the compiler can copy inline */
                memcpy(buf[lane], PyBytes_AS_STRING(item), AHEAD_COMMON_KEY - 4);
                memcpy(buf[lane] + AHEAD_COMMON_KEY - 4, c->suffix[g], 4);
                memset(buf[lane] + AHEAD_COMMON_KEY, 0, HOTPATH_HASH_ROW - AHEAD_COMMON_KEY);
            } else {
                memcpy(buf[lane], PyBytes_AS_STRING(item), (size_t)len);
                memcpy(buf[lane] + len, c->suffix[g], 4);
                memset(buf[lane] + len + 4, 0, (size_t)(HOTPATH_HASH_ROW - len - 4));
            }
        }
    }
    count = k;
    if (count == 0) {
        return 0; /* nothing read: no key to hash (and buf is not read uninitialized) */
    }
    lanes = count * ng;
    /* The next batch's hash objects. */
    for (k = count; k < count + POOL_BATCH && i + k < limit; k++) {
        at = (i + k + 1) * stride - 1;
        if (at < size) {
            PyObject *item = PyList_GET_ITEM(c->hashes, (Py_ssize_t)at);
            AHEAD_FETCH(item);
            AHEAD_FETCH((const char *)item + 64);
        }
    }
    /* Key hashes, then their first index slots. */
    key_hashes(&buf[0][0], lanes, len + 4, hash);
    for (lane = 0; lane < lanes; lane++) {
        AHEAD_FETCH(ahead_slot(keys, hash[lane]));
    }
    /* The entries those slots name (first[lane]: NULL when the slot names
     * none), then (hash alike) their keys and blocks. */
    for (lane = 0; lane < lanes; lane++) {
        Py_ssize_t ix = ahead_index(keys, ahead_slot(keys, hash[lane]));
        first[lane] = NULL;
        if (ix >= 0 && ix < keys->dk_nentries) {
            first[lane] = &ahead_entries(keys)[ix];
            AHEAD_FETCH(first[lane]);
            AHEAD_FETCH((const char *)first[lane] + sizeof(ahead_entry) - 1);
        }
    }
    for (lane = 0; lane < lanes; lane++) {
        const ahead_entry *e = first[lane];
        if (e != NULL && e->me_hash == hash[lane] && e->me_key != NULL) {
            AHEAD_FETCH(e->me_key);
            AHEAD_FETCH((const char *)e->me_key + 64);
            AHEAD_FETCH(e->me_value);
        }
    }
    /* The reads, certified or the batch stops. */
    for (k = 0; k < count; k++) {
        PyObject **slot;
        if (log_reserve(c) < 0) {
            PyErr_Clear(); /* probe_at will meet it again, and raise */
            break;
        }
        slot = c->log_blocks + c->log_len * ng;
        for (g = 0; g < ng; g++) {
            /* The key's first slot names its entry (most keys), or the
             * walk from there finds it, or nothing certifies it. */
            const char *key = (const char *)buf[k * ng + g];
            const ahead_entry *e = first[k * ng + g];
            if (e == NULL || ahead_entry_is(e, key, len + 4, hash[k * ng + g]) <= 0) {
                e = ahead_find(keys, key, len + 4, hash[k * ng + g]);
            }
            if (e == NULL || e->me_value == NULL) {
                break;
            }
            slot[g] = c->blocks != NULL ? id_block(c, e->me_value) : e->me_value;
            if (slot[g] == NULL || Py_TYPE(slot[g]) != (PyTypeObject *)c->block_type) {
                break;
            }
        }
        if (g < ng) {
            break;
        }
        for (g = 0; g < ng; g++) {
            Py_INCREF(slot[g]);
        }
        c->log_idx[c->log_len] = i + k;
        c->log_len++;
    }
    return k;
}
#endif

int
pool_ahead_selftest(void)
{
#if POOL_AHEAD_BUILD
    PyObject *dict, *key;
    ahead_keys *keys;
    const ahead_entry *e;
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
        if (k < 8) {
            /* _Py_HashBytes is bytes' own hash (on 3.13 it is declared
             * by hotpath_dict.h, not by Python.h). */
            Py_hash_t own;
            key = PyBytes_FromStringAndSize(buf, sizeof buf);
            own = key == NULL ? -1 : PyObject_Hash(key);
            Py_XDECREF(key);
            if (own == -1) {
                Py_DECREF(dict);
                return -1;
            }
            if (own != h) {
                found = -n;
            }
        }
        e = ahead_find(keys, buf, (Py_ssize_t)sizeof buf, h);
        if (e != NULL && e->me_value == Py_None) {
            found++;
        }
        /* An absent key is not found. */
        buf[sizeof buf - 1] = 1;
        h = _Py_HashBytes(buf, (Py_ssize_t)sizeof buf);
        if (ahead_find(keys, buf, (Py_ssize_t)sizeof buf, h) != NULL) {
            found = -n;
        }
    }
    Py_DECREF(dict);
#if HOTPATH_SIPHASH
    pool_own_hash = hotpath_siphash_selftest();
#endif
    /* Every key is found when the layout is right; none would be by chance
     * otherwise. */
    return found == n;
#else
    return 0;
#endif
}

PyObject *
pool_key_hashes(PyObject *keys)
{
#if POOL_AHEAD_BUILD
    Py_ssize_t n, k, len = 0;
    unsigned char *rows;
    Py_hash_t *out;
    PyObject *result;

    if (!pool_own_hash) {
        Py_RETURN_NONE;
    }
    if (!PyList_CheckExact(keys)) {
        return PyErr_Format(PyExc_TypeError, "keys must be a list of bytes, not %.100s",
                            Py_TYPE(keys)->tp_name);
    }
    n = PyList_GET_SIZE(keys);
    for (k = 0; k < n; k++) {
        PyObject *key = PyList_GET_ITEM(keys, k);
        if (!PyBytes_CheckExact(key)) {
            return PyErr_Format(PyExc_TypeError, "keys[%zd] must be bytes, not %.100s", k,
                                Py_TYPE(key)->tp_name);
        }
        if (k == 0) {
            len = PyBytes_GET_SIZE(key);
        }
        if (PyBytes_GET_SIZE(key) != len || len < 1 || len > HOTPATH_HASH_ROW) {
            return PyErr_Format(PyExc_ValueError,
                                "keys must all be of one length in [1, %d] bytes (keys[%zd] has "
                                "%zd, keys[0] %zd)", HOTPATH_HASH_ROW, k, PyBytes_GET_SIZE(key),
                                len);
        }
    }
    rows = PyMem_Calloc((size_t)(n > 0 ? n : 1), HOTPATH_HASH_ROW);
    out = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(Py_hash_t));
    if (rows == NULL || out == NULL) {
        PyMem_Free(rows);
        PyMem_Free(out);
        return PyErr_NoMemory();
    }
    for (k = 0; k < n; k++) {
        memcpy(rows + k * HOTPATH_HASH_ROW, PyBytes_AS_STRING(PyList_GET_ITEM(keys, k)), (size_t)len);
    }
    key_hashes(rows, n, len, out);
    result = PyList_New(n);
    for (k = 0; result != NULL && k < n; k++) {
        PyObject *h = PyLong_FromSsize_t(out[k]);
        if (h == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, k, h);
    }
    PyMem_Free(rows);
    PyMem_Free(out);
    return result;
#else
    (void)keys;
    Py_RETURN_NONE;
#endif
}

int
pool_ahead_set(int on)
{
    int was = pool_ahead_ok;

    if (on && pool_layout < 0) {
        pool_layout = pool_ahead_selftest();
        if (pool_layout < 0) {
            return -1;
        }
    }
    pool_ahead_ok = on && pool_layout;
    return was;
}

PyObject *
pool_fast_paths(void)
{
    char why[400];
    const char *hash = "cpython";
    int ahead = 0;

#if POOL_AHEAD_BUILD
    ahead = pool_layout == 1;
    if (pool_own_hash) {
        hash = "avx2-siphash13";
    }
    PyOS_snprintf(why, sizeof why, "CPython %d.%d: read-ahead %s; key hashes: %s",
                  PY_MAJOR_VERSION, PY_MINOR_VERSION,
                  ahead ? "on (dict-layout self-test passed)"
                        : "off (dict-layout self-test failed)",
                  !ahead ? "the dict's own (no read-ahead)"
#if HOTPATH_SIPHASH
                  : pool_own_hash ? "AVX2 SipHash-1-3 (self-test against _Py_HashBytes passed)"
                  : "_Py_HashBytes (AVX2 SipHash self-test failed: no AVX2, or another hash)"
#else
                  : "_Py_HashBytes (AVX2 SipHash compiled out: not x86-64 with GCC/clang)"
#endif
    );
#else
    PyOS_snprintf(why, sizeof why, "CPython %d.%d: read-ahead compiled out (the dict layout "
                  "of this version is not verified; hotpath_dict.h); key hashes: the dict's own",
                  PY_MAJOR_VERSION, PY_MINOR_VERSION);
#endif
    return Py_BuildValue("{sOsOsssOss}", "read_ahead", ahead ? Py_True : Py_False,
                         "read_ahead_on", pool_ahead_ok ? Py_True : Py_False, "hash", hash,
                         "built", Py_True, "why", why);
}

/* The key of one read: hash + suffix. On CPython 3.11/3.12 one bytes
 * object per lookup is refilled for every read (c->key, which only this
 * file ever references) and its hash is computed as bytes_hash computes it,
 * so the dict is asked with _PyDict_GetItem_KnownHash and no object is made
 * per probe; elsewhere a new bytes object per read. A borrowed reference
 * (reused) or a new one (*fresh set); NULL with an exception set. */
static PyObject *
make_key(pool_probe *c, const char *hash, Py_ssize_t hash_len, const unsigned char *suffix,
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
    (void)c; /* no reused key: no _PyDict_GetItem_KnownHash in 3.13's public API */
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
read_block(pool_probe *c, const char *hash, Py_ssize_t hash_len, const unsigned char *suffix,
           int *miss)
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
    if (c->blocks != NULL) {
        /* The id layout: get_one_block is ``self._blocks[self._cache.get(key)]``
         * (fingerprinted, POOL_READ); an id outside the list or a value of
         * another type is read by vLLM's own get_one_block below. */
        PyObject *found = id_block(c, block);
        if (found != NULL && Py_TYPE(found) == (PyTypeObject *)c->block_type) {
            Py_INCREF(found);
            return found;
        }
    } else if (Py_TYPE(block) == (PyTypeObject *)c->block_type) {
        Py_INCREF(block);
        return block;
    }
    /* Several blocks under the key: what vLLM's get_one_block returns for
     * them (its source is fingerprinted, POOL_READ), the first value in the
     * plain dict's insertion order, ``next(iter(blocks.values()))``; a block
     * is true (checked at install). PyDict_Next runs no Python code. */
    if (c->blocks == NULL && PyDict_CheckExact(block)) {
        Py_ssize_t pos = 0;
        PyObject *inner_key;
        PyObject *first;

        if (PyDict_Next(block, &pos, &inner_key, &first)
            && Py_TYPE(first) == (PyTypeObject *)c->block_type) {
            Py_INCREF(first);
            return first;
        }
    }
    /* Anything else under the key (an empty dict, another type): vLLM's own read and
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
                             &miss);
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
    uint8_t hit;

    if (c->status != PROBE_OK) {
        return 0;
    }
    if (i >= c->batch_lo && i < c->batch_hi) {
        c->after_hit = i + 1;
        return 1; /* certified and logged by the batch */
    }
#if POOL_AHEAD_BUILD
    /* Block i right after a hit of block i - 1, and not where the last
     * batch stopped short: the scan goes on, read the next blocks together. */
    if (c->ahead_on && pool_ahead_ok && c->hashes_is_list && c->ngroups <= POOL_AHEAD_GROUPS
        && i > 0 && i == c->after_hit && i < c->n && !(c->batch_short && i == c->batch_hi)) {
        int64_t got = pool_batch(c, i, c->stride, c->n);
        c->batch_lo = i;
        c->batch_hi = i + got;
        c->batch_short = got < POOL_BATCH && i + got < c->n;
        if (got > 0) {
            c->after_hit = i + 1;
            return 1;
        }
    }
#endif
    hit = probe_at(c, i, c->stride, c->n, i);
    c->after_hit = hit ? i + 1 : 0;
    return hit;
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
