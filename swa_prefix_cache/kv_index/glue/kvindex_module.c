/*
 * kvindex_module.c -- CPython glue of kv_index's native core
 * (swa_prefix_cache.kv_index._kvnative): vLLM's block-hash chain, the per-group key sets
 * of a replica's GPU pool, and the score, answered by the proved lookups.
 *
 * What is proved and what is not. The lookups are group_hit and
 * joint_lookup (swa_prefix_cache/core/proved/joint.c, with find_hit of prefix_cache.c, both
 * compiled unchanged, mask instance); Frama-C/WP proves them. This file and
 * kvindex_sha256.c are glue, NOT proved; tests/test_kv_native.py checks
 * them: the pickle bytes against pickle.dumps, SHA-256 against hashlib,
 * the chain against swa_prefix_cache.kv_index.hashing (and tests/test_kv_index.py against
 * vLLM's get_request_block_hasher), the key sets and the score against
 * the pure-Python reference (pyspec) on random event streams, and
 * tests/test_kv_index.py the score against real vLLM KVCacheManagers.
 *
 * What it assumes:
 *   - vLLM hashes a block as sha256(pickle.dumps((parent, tuple(tokens),
 *     None), protocol=5)) (vllm/utils/hashing.py sha256, 0.33.0) and
 *     CPython's pickler writes what encode_block below writes. That holds
 *     for CPython 3.8+ protocol 5 (Modules/_pickle.c: save_tuple, save_long,
 *     _save_bytes_data, memo_put, _Pickler_CommitFrame) within the cases
 *     encode_block takes: exact ints in [-2^63, 2^64) and a pickle body
 *     under 64 KiB (one frame: the pickler commits a frame only at an
 *     opcode boundary past FRAME_SIZE_TARGET = 64 KiB). Anything else is
 *     declined (None), and kv_index runs its Python chain: never a
 *     different hash;
 *   - the GIL is held for every call (the key sets are not locked); the
 *     extension is not built for free-threaded CPython (setup.py);
 *   - score's groups come from kv_index (swa_prefix_cache.pyspec.attention_groups: equal
 *     specs merged, full attention first), checked here for range.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "joint.h"
#include "kvindex_sha256.h"
#include "prefix_cache.h"

/* ---- the block pickle (protocol 5) ------------------------------------ */

/* pickle opcodes (Lib/pickle.py) */
enum {
    OP_PROTO = 0x80, OP_FRAME = 0x95, OP_SHORT_BINBYTES = 'C', OP_MEMOIZE = 0x94,
    OP_MARK = '(', OP_TUPLE = 't', OP_TUPLE1 = 0x85, OP_TUPLE3 = 0x87, OP_NONE = 'N',
    OP_BININT1 = 'K', OP_BININT2 = 'M', OP_BININT = 'J', OP_LONG1 = 0x8a, OP_STOP = '.'
};

#define HEADER_LEN 11         /* PROTO 5, FRAME, its 8-byte length */
#define FRAME_SIZE_TARGET 65536
#define MAX_INT_LEN 11        /* LONG1, its length byte, 9 bytes */
#define BLOCK_FIXED_LEN (HEADER_LEN + 2 + 32 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1)

/* How pickle writes the exact int obj: returns the bytes written to out,
 * 0 when obj is outside [-2^63, 2^64) (declined), -1 on a Python error.
 * save_long: ints in the C long range of a signed 4-byte int are BININT1
 * (0..0xff), BININT2 (0x100..0xffff) or BININT (4 bytes, little-endian,
 * two's complement); others LONG1 with the fewest bytes of two's
 * complement that hold the value (_PyLong_NumBits / 8 + 1, minus a
 * redundant 0xff of a negative). */
static int encode_int(PyObject *obj, uint8_t *out)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    int n, i;
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(obj);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
                return -1;
            }
            PyErr_Clear();
            return 0; /* >= 2^64 */
        }
        out[0] = OP_LONG1;
        out[1] = 9; /* 2^63 <= u < 2^64: 8 bytes and a 0x00 sign byte */
        for (i = 0; i < 8; i++) {
            out[2 + i] = (uint8_t)(u >> (8 * i));
        }
        out[10] = 0;
        return 11;
    }
    if (overflow < 0) {
        return 0; /* < -2^63 */
    }
    if (v >= 0 && v <= 0xff) {
        out[0] = OP_BININT1;
        out[1] = (uint8_t)v;
        return 2;
    }
    if (v >= 0 && v <= 0xffff) {
        out[0] = OP_BININT2;
        out[1] = (uint8_t)v;
        out[2] = (uint8_t)(v >> 8);
        return 3;
    }
    if (v >= -0x7fffffffLL - 1 && v <= 0x7fffffffLL) {
        uint32_t w = (uint32_t)v;
        out[0] = OP_BININT;
        for (i = 0; i < 4; i++) {
            out[1 + i] = (uint8_t)(w >> (8 * i));
        }
        return 5;
    }
    /* 5..8 bytes: the least n with -2^(8n-1) <= v < 2^(8n-1) */
    for (n = 5; n < 8; n++) {
        long long lim = 1LL << (8 * n - 1);
        if (v >= -lim && v < lim) {
            break;
        }
    }
    out[0] = OP_LONG1;
    out[1] = (uint8_t)n;
    for (i = 0; i < n; i++) {
        out[2 + i] = (uint8_t)((unsigned long long)v >> (8 * i));
    }
    return 2 + n;
}

/* pickle.dumps((parent, tuple(tokens[0 .. h)), None), protocol=5) into
 * out (room for BLOCK_FIXED_LEN + h * MAX_INT_LEN bytes): PROTO 5, FRAME
 * n, SHORT_BINBYTES 32 parent, MEMOIZE, the token tuple (TUPLE1..3 for up
 * to three items, else MARK .. TUPLE; then MEMOIZE), NONE, TUPLE3,
 * MEMOIZE, STOP; n counts the bytes after the FRAME header (STOP
 * included). Returns the length, 0 when declined (an int out of range, or
 * a body of 64 KiB or more: more than one frame), -1 on a Python error.
 * Every token must be an exact int (the caller checks). */
static Py_ssize_t encode_block(const uint8_t parent[32], PyObject *const *tokens, Py_ssize_t h, uint8_t *out)
{
    Py_ssize_t pos = HEADER_LEN, k;
    uint64_t body;
    int i;
    out[0] = OP_PROTO;
    out[1] = 5;
    out[2] = OP_FRAME;
    out[pos++] = OP_SHORT_BINBYTES;
    out[pos++] = 32;
    memcpy(out + pos, parent, 32);
    pos += 32;
    out[pos++] = OP_MEMOIZE;
    if (h > 3) {
        out[pos++] = OP_MARK;
    }
    for (k = 0; k < h; k++) {
        int w = encode_int(tokens[k], out + pos);
        if (w <= 0) {
            return w;
        }
        pos += w;
    }
    out[pos++] = h > 3 ? OP_TUPLE : (uint8_t)(OP_TUPLE1 + h - 1);
    out[pos++] = OP_MEMOIZE;
    out[pos++] = OP_NONE;
    out[pos++] = OP_TUPLE3;
    out[pos++] = OP_MEMOIZE;
    out[pos++] = OP_STOP;
    body = (uint64_t)(pos - HEADER_LEN);
    if (body >= FRAME_SIZE_TARGET) {
        return 0;
    }
    for (i = 0; i < 8; i++) {
        out[3 + i] = (uint8_t)(body >> (8 * i));
    }
    return pos;
}

/* ---- the SHA-256 implementation in use ---------------------------------- */

static kv_sha256_impl sha_impl = KV_SHA256_AUTO;

static const char *impl_name(kv_sha256_impl impl)
{
    if (impl == KV_SHA256_AUTO) {
        impl = kv_sha256_chosen();
    }
    return impl == KV_SHA256_SHANI ? "sha-ni" : "portable";
}

/* "auto", "portable" or "sha-ni" (ValueError otherwise, or when SHA-NI is
 * asked for on a CPU without it). */
static int parse_impl(PyObject *name, kv_sha256_impl *out)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "impl must be a str, not %.80s", Py_TYPE(name)->tp_name);
        return -1;
    }
    if (PyUnicode_CompareWithASCIIString(name, "auto") == 0) {
        *out = KV_SHA256_AUTO;
    } else if (PyUnicode_CompareWithASCIIString(name, "portable") == 0) {
        *out = KV_SHA256_PORTABLE;
    } else if (PyUnicode_CompareWithASCIIString(name, "sha-ni") == 0) {
        if (!kv_sha256_shani_usable()) {
            PyErr_SetString(PyExc_ValueError, "impl: this CPU has no usable SHA-NI");
            return -1;
        }
        *out = KV_SHA256_SHANI;
    } else {
        PyErr_Format(PyExc_ValueError, "impl must be 'auto', 'portable' or 'sha-ni', got %R", name);
        return -1;
    }
    return 0;
}

/* ---- the chain ------------------------------------------------------------ */

/* Checks a positive int argument. */
static int positive_arg(PyObject *obj, const char *name, Py_ssize_t *out)
{
    Py_ssize_t v;
    if (!PyLong_CheckExact(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.80s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    v = PyLong_AsSsize_t(obj);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s is out of range", name);
        return -1;
    }
    if (v < 1) {
        PyErr_Format(PyExc_ValueError, "%s must be >= 1, got %zd", name, v);
        return -1;
    }
    *out = v;
    return 0;
}

/* The chain of vLLM's get_request_block_hasher over the full blocks of
 * tokens: block j's digest = sha256(pickle((digest j-1 or none_hash,
 * tokens[j*h .. (j+1)*h), None))). Writes each digest (digests, if not
 * NULL) and its event key (keys: the low 64 bits, big-endian, as
 * swa_prefix_cache.kv_index.hashing.event_key reads it). Returns 1, 0 when declined (a
 * token not an exact int, anywhere in tokens, or one encode_block
 * declines), -1 on a Python error. */
static int hash_chain(PyObject *const *tokens, Py_ssize_t n, Py_ssize_t h, const uint8_t none_hash[32], uint8_t *digests, uint64_t *keys)
{
    Py_ssize_t blocks = n / h, j, k;
    uint8_t parent[32], *buf;
    for (k = 0; k < n; k++) {
        if (!PyLong_CheckExact(tokens[k])) {
            return 0;
        }
    }
    if (blocks == 0) {
        return 1;
    }
    if (h > (PY_SSIZE_T_MAX - BLOCK_FIXED_LEN) / MAX_INT_LEN) {
        return 0;
    }
    buf = PyMem_Malloc((size_t)(BLOCK_FIXED_LEN + h * MAX_INT_LEN));
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(parent, none_hash, 32);
    for (j = 0; j < blocks; j++) {
        Py_ssize_t len = encode_block(parent, tokens + j * h, h, buf);
        uint64_t key = 0;
        if (len <= 0) {
            PyMem_Free(buf);
            return len < 0 ? -1 : 0;
        }
        kv_sha256(buf, (size_t)len, parent, sha_impl);
        for (k = 24; k < 32; k++) {
            key = (key << 8) | parent[k];
        }
        keys[j] = key;
        if (digests != NULL) {
            memcpy(digests + 32 * j, parent, 32);
        }
    }
    PyMem_Free(buf);
    return 1;
}

/* Arguments of the chain functions: (tokens, hash_block_size, none_hash). */
typedef struct {
    PyObject *seq;         /* PySequence_Fast of tokens (a new reference) */
    Py_ssize_t n, h;
    const uint8_t *none_hash;
} chain_args;

static int parse_chain_args(PyObject *const *args, Py_ssize_t nargs, const char *fn, chain_args *out)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s(token_ids, hash_block_size, none_hash) takes 3 arguments", fn);
        return -1;
    }
    if (positive_arg(args[1], "hash_block_size", &out->h) < 0) {
        return -1;
    }
    if (!PyBytes_Check(args[2]) || PyBytes_GET_SIZE(args[2]) != 32) {
        PyErr_SetString(PyExc_TypeError, "none_hash must be 32 bytes");
        return -1;
    }
    out->none_hash = (const uint8_t *)PyBytes_AS_STRING(args[2]);
    if (PyUnicode_Check(args[0]) || PyBytes_Check(args[0]) || PyByteArray_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "token_ids must be a sequence of ints");
        return -1;
    }
    out->seq = PySequence_Fast(args[0], "token_ids must be a sequence of ints");
    if (out->seq == NULL) {
        return -1;
    }
    out->n = PySequence_Fast_GET_SIZE(out->seq);
    return 0;
}

/* prompt_block_keys(token_ids, hash_block_size, none_hash) -> bytes | None:
 * the event keys of the prompt's block hashes, native-endian uint64 each;
 * None when the chain is declined (kv_index then runs the Python chain). */
static PyObject *kv_prompt_block_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    chain_args a;
    PyObject *out;
    int done;
    (void)self;
    if (parse_chain_args(args, nargs, "prompt_block_keys", &a) < 0) {
        return NULL;
    }
    out = PyBytes_FromStringAndSize(NULL, (a.n / a.h) * (Py_ssize_t)sizeof(uint64_t));
    if (out == NULL) {
        Py_DECREF(a.seq);
        return NULL;
    }
    done = hash_chain(PySequence_Fast_ITEMS(a.seq), a.n, a.h, a.none_hash, NULL,
                      (uint64_t *)(void *)PyBytes_AS_STRING(out));
    Py_DECREF(a.seq);
    if (done <= 0) {
        Py_DECREF(out);
        if (done < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    return out;
}

/* prompt_block_hashes(token_ids, hash_block_size, none_hash) -> list[bytes]
 * | None: the digests themselves (swa_prefix_cache.kv_index.hashing.prompt_block_hashes'
 * answer for sha256), or None when declined. */
static PyObject *kv_prompt_block_hashes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    chain_args a;
    PyObject *list = NULL;
    uint8_t *digests;
    uint64_t *keys;
    Py_ssize_t blocks, j;
    int done;
    (void)self;
    if (parse_chain_args(args, nargs, "prompt_block_hashes", &a) < 0) {
        return NULL;
    }
    blocks = a.n / a.h;
    digests = PyMem_Malloc((size_t)blocks * 32 + 1);
    keys = PyMem_Malloc((size_t)blocks * sizeof(uint64_t) + 1);
    if (digests == NULL || keys == NULL) {
        PyErr_NoMemory();
        done = -1;
    } else {
        done = hash_chain(PySequence_Fast_ITEMS(a.seq), a.n, a.h, a.none_hash, digests, keys);
    }
    Py_DECREF(a.seq);
    if (done > 0) {
        list = PyList_New(blocks);
        for (j = 0; list != NULL && j < blocks; j++) {
            PyObject *d = PyBytes_FromStringAndSize((const char *)digests + 32 * j, 32);
            if (d == NULL) {
                Py_CLEAR(list);
                break;
            }
            PyList_SET_ITEM(list, j, d);
        }
    } else if (done == 0) {
        list = Py_NewRef(Py_None);
    }
    PyMem_Free(digests);
    PyMem_Free(keys);
    return list;
}

/* pickle_block(parent, tokens) -> bytes | None: encode_block's bytes
 * (for the tests against pickle.dumps), None when declined. */
static PyObject *kv_pickle_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *seq, *out = NULL;
    Py_ssize_t h, k, len;
    uint8_t *buf;
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "pickle_block(parent, tokens) takes 2 arguments");
        return NULL;
    }
    if (!PyBytes_Check(args[0]) || PyBytes_GET_SIZE(args[0]) != 32) {
        PyErr_SetString(PyExc_TypeError, "parent must be 32 bytes");
        return NULL;
    }
    seq = PySequence_Fast(args[1], "tokens must be a sequence of ints");
    if (seq == NULL) {
        return NULL;
    }
    h = PySequence_Fast_GET_SIZE(seq);
    if (h < 1 || h > (PY_SSIZE_T_MAX - BLOCK_FIXED_LEN) / MAX_INT_LEN) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "tokens must hold at least one int");
        return NULL;
    }
    for (k = 0; k < h; k++) {
        if (!PyLong_CheckExact(PySequence_Fast_ITEMS(seq)[k])) {
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
    }
    buf = PyMem_Malloc((size_t)(BLOCK_FIXED_LEN + h * MAX_INT_LEN));
    if (buf == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    len = encode_block((const uint8_t *)PyBytes_AS_STRING(args[0]), PySequence_Fast_ITEMS(seq), h, buf);
    if (len > 0) {
        out = PyBytes_FromStringAndSize((const char *)buf, len);
    } else if (len == 0) {
        out = Py_NewRef(Py_None);
    }
    PyMem_Free(buf);
    Py_DECREF(seq);
    return out;
}

/* sha256(data, impl="auto") -> bytes */
static PyObject *kv_sha256_fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    kv_sha256_impl impl = KV_SHA256_AUTO;
    Py_buffer view;
    uint8_t digest[32];
    (void)self;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "sha256(data, impl='auto') takes 1 or 2 arguments");
        return NULL;
    }
    if (nargs == 2 && parse_impl(args[1], &impl) < 0) {
        return NULL;
    }
    if (PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "data must be bytes-like, not str");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    kv_sha256((const uint8_t *)view.buf, (size_t)view.len, digest, impl);
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)digest, 32);
}

/* sha256_impl() -> "sha-ni" | "portable": what the chain uses now. */
static PyObject *kv_sha256_impl_fn(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(impl_name(sha_impl));
}

/* use_sha256(impl) -> the previous impl name ("auto" is resolved): which
 * compression function the chain uses (the tests run both). */
static PyObject *kv_use_sha256(PyObject *self, PyObject *name)
{
    kv_sha256_impl impl;
    const char *before = impl_name(sha_impl);
    (void)self;
    if (parse_impl(name, &impl) < 0) {
        return NULL;
    }
    sha_impl = impl;
    return PyUnicode_FromString(before);
}

/* ---- KeySet: uint64 key -> count ------------------------------------------
 * Open addressing, linear probing, capacity a power of two kept at least
 * twice the keys held; a slot is empty when its count is 0 (any key, 0
 * included, can be held); removal shifts the run back (no tombstones).
 * Slot of a key: its splitmix64 mix (event keys can be any uint64). */

typedef struct {
    PyObject_HEAD
    uint64_t *keys;
    uint64_t *counts; /* 0: empty slot */
    size_t mask;      /* capacity - 1; capacity 0 when keys is NULL */
    size_t used;
} KeySet;

#define KEYSET_MIN_CAPACITY 16

static size_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return (size_t)x;
}

/* The slot holding key, or the empty slot ending its run. */
static size_t keyset_slot(const KeySet *s, uint64_t key)
{
    size_t i = mix(key) & s->mask;
    while (s->counts[i] != 0 && s->keys[i] != key) {
        i = (i + 1) & s->mask;
    }
    return i;
}

static int keyset_contains(const KeySet *s, uint64_t key)
{
    return s->keys != NULL && s->counts[keyset_slot(s, key)] != 0;
}

static int keyset_resize(KeySet *s, size_t capacity)
{
    uint64_t *keys = PyMem_Calloc(capacity, sizeof(uint64_t));
    uint64_t *counts = PyMem_Calloc(capacity, sizeof(uint64_t));
    uint64_t *old_keys = s->keys, *old_counts = s->counts;
    size_t old_cap = s->keys == NULL ? 0 : s->mask + 1, i;
    if (keys == NULL || counts == NULL) {
        PyMem_Free(keys);
        PyMem_Free(counts);
        PyErr_NoMemory();
        return -1;
    }
    s->keys = keys;
    s->counts = counts;
    s->mask = capacity - 1;
    for (i = 0; i < old_cap; i++) {
        if (old_counts[i] != 0) {
            size_t j = keyset_slot(s, old_keys[i]);
            keys[j] = old_keys[i];
            counts[j] = old_counts[i];
        }
    }
    PyMem_Free(old_keys);
    PyMem_Free(old_counts);
    return 0;
}

static int keyset_add(KeySet *s, uint64_t key)
{
    size_t i;
    if (s->keys == NULL || (s->used + 1) * 2 > s->mask + 1) {
        size_t cap = s->keys == NULL ? KEYSET_MIN_CAPACITY : 2 * (s->mask + 1);
        if (cap > ((size_t)-1) / 2 / sizeof(uint64_t)) {
            PyErr_NoMemory();
            return -1;
        }
        if (keyset_resize(s, cap) < 0) {
            return -1;
        }
    }
    i = keyset_slot(s, key);
    if (s->counts[i] == 0) {
        s->keys[i] = key;
        s->used++;
    }
    s->counts[i]++;
    return 0;
}

/* One remove of key; returns 1 when the set did not hold it. */
static int keyset_remove(KeySet *s, uint64_t key)
{
    size_t i, j;
    if (s->keys == NULL) {
        return 1;
    }
    i = keyset_slot(s, key);
    if (s->counts[i] == 0) {
        return 1;
    }
    if (--s->counts[i] != 0) {
        return 0;
    }
    s->used--;
    /* backward shift: move up each later key of the run whose home slot is
     * not in (i, j] cyclically */
    for (j = (i + 1) & s->mask; s->counts[j] != 0; j = (j + 1) & s->mask) {
        size_t home = mix(s->keys[j]) & s->mask;
        int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            s->keys[i] = s->keys[j];
            s->counts[i] = s->counts[j];
            s->counts[j] = 0;
            i = j;
        }
    }
    return 0;
}

static void keyset_clear(KeySet *s)
{
    PyMem_Free(s->keys);
    PyMem_Free(s->counts);
    s->keys = s->counts = NULL;
    s->mask = 0;
    s->used = 0;
}

static PyTypeObject KeySetType;

static PyObject *keyset_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    KeySet *s;
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "KeySet() takes no arguments");
        return NULL;
    }
    s = (KeySet *)type->tp_alloc(type, 0);
    return (PyObject *)s; /* tp_alloc zeroes: an empty set */
}

static void keyset_dealloc(KeySet *s)
{
    keyset_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* The packed keys argument: bytes of native uint64s. */
static int packed_arg(PyObject *obj, const char *name, const uint64_t **keys, Py_ssize_t *n)
{
    if (!PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes (packed uint64 keys), not %.80s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PyBytes_GET_SIZE(obj) % (Py_ssize_t)sizeof(uint64_t) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: length %zd is not a multiple of 8", name,
                     PyBytes_GET_SIZE(obj));
        return -1;
    }
    *keys = (const uint64_t *)(const void *)PyBytes_AS_STRING(obj);
    *n = PyBytes_GET_SIZE(obj) / (Py_ssize_t)sizeof(uint64_t);
    return 0;
}

/* add(keys): one store of each packed key */
static PyObject *keyset_add_py(KeySet *s, PyObject *arg)
{
    const uint64_t *keys;
    Py_ssize_t n, k;
    if (packed_arg(arg, "keys", &keys, &n) < 0) {
        return NULL;
    }
    for (k = 0; k < n; k++) {
        if (keyset_add(s, keys[k]) < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

/* remove(keys) -> int: one remove of each packed key, in order; returns
 * how many were not held (kv_index's removed_unknown). */
static PyObject *keyset_remove_py(KeySet *s, PyObject *arg)
{
    const uint64_t *keys;
    Py_ssize_t n, k, unknown = 0;
    if (packed_arg(arg, "keys", &keys, &n) < 0) {
        return NULL;
    }
    for (k = 0; k < n; k++) {
        unknown += keyset_remove(s, keys[k]);
    }
    return PyLong_FromSsize_t(unknown);
}

static PyObject *keyset_clear_py(KeySet *s, PyObject *unused)
{
    (void)unused;
    keyset_clear(s);
    Py_RETURN_NONE;
}

/* count(key) -> int: the stores minus removes of key (0: not held). */
static PyObject *keyset_count_py(KeySet *s, PyObject *key)
{
    unsigned long long k;
    size_t i;
    if (!PyLong_Check(key)) {
        PyErr_Format(PyExc_TypeError, "key must be an int, not %.80s", Py_TYPE(key)->tp_name);
        return NULL;
    }
    k = PyLong_AsUnsignedLongLong(key);
    if (k == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return PyLong_FromLong(0); /* no key outside uint64 is held */
    }
    if (s->keys == NULL) {
        return PyLong_FromLong(0);
    }
    i = keyset_slot(s, (uint64_t)k);
    return PyLong_FromUnsignedLongLong(s->counts[i]);
}

static Py_ssize_t keyset_len(KeySet *s)
{
    return (Py_ssize_t)s->used;
}

static int keyset_contains_py(KeySet *s, PyObject *key)
{
    unsigned long long k;
    if (!PyLong_Check(key)) {
        return 0;
    }
    k = PyLong_AsUnsignedLongLong(key);
    if (k == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return keyset_contains(s, (uint64_t)k);
}

static PyMethodDef keyset_methods[] = {
    {"add", (PyCFunction)keyset_add_py, METH_O, "add(keys): one store of each packed uint64 key"},
    {"remove", (PyCFunction)keyset_remove_py, METH_O,
     "remove(keys) -> int: one remove of each packed key; the count of keys not held"},
    {"clear", (PyCFunction)keyset_clear_py, METH_NOARGS, "clear(): hold nothing"},
    {"count", (PyCFunction)keyset_count_py, METH_O, "count(key) -> int: stores minus removes"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods keyset_as_sequence = {
    .sq_length = (lenfunc)keyset_len,
    .sq_contains = (objobjproc)keyset_contains_py,
};

static PyTypeObject KeySetType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "swa_prefix_cache.kv_index._kvnative.KeySet",
    .tp_basicsize = sizeof(KeySet),
    .tp_dealloc = (destructor)keyset_dealloc,
    .tp_as_sequence = &keyset_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "uint64 key -> count (a group's cached block-hash keys)",
    .tp_methods = keyset_methods,
    .tp_new = keyset_new,
};

/* keys_of(block_hashes) -> (bytes, list): the event keys of an event's
 * hashes (swa_prefix_cache.kv_index.hashing.event_key: an int stays, bytes / bytearray
 * become their low 64 bits, big-endian), packed; the list holds, in
 * order, the int keys outside [0, 2^64) (never a prompt's key, but held
 * and counted as Python's index holds them). TypeError for any other
 * hash, before anything is returned. */
static PyObject *kv_keys_of(PyObject *self, PyObject *hashes)
{
    PyObject *seq, *packed = NULL, *big = NULL, *out = NULL;
    Py_ssize_t n, k, held = 0;
    uint64_t *keys;
    (void)self;
    seq = PySequence_Fast(hashes, "block_hashes must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    n = PySequence_Fast_GET_SIZE(seq);
    packed = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint64_t));
    big = PyList_New(0);
    if (packed == NULL || big == NULL) {
        goto done;
    }
    keys = (uint64_t *)(void *)PyBytes_AS_STRING(packed);
    for (k = 0; k < n; k++) {
        PyObject *h = PySequence_Fast_ITEMS(seq)[k];
        if (PyLong_CheckExact(h)) {
            unsigned long long v = PyLong_AsUnsignedLongLong(h);
            if (v == (unsigned long long)-1 && PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
                    goto done;
                }
                PyErr_Clear();
                if (PyList_Append(big, h) < 0) {
                    goto done;
                }
                continue;
            }
            keys[held++] = (uint64_t)v;
        } else if (PyBytes_Check(h) || PyByteArray_Check(h)) {
            const uint8_t *p = (const uint8_t *)(PyBytes_Check(h) ? PyBytes_AS_STRING(h) : PyByteArray_AS_STRING(h));
            Py_ssize_t len = PyBytes_Check(h) ? PyBytes_GET_SIZE(h) : PyByteArray_GET_SIZE(h);
            Py_ssize_t i = len > 8 ? len - 8 : 0;
            uint64_t v = 0;
            for (; i < len; i++) {
                v = (v << 8) | p[i];
            }
            keys[held++] = v;
        } else {
            PyErr_Format(PyExc_TypeError, "block hash must be bytes or int, not %.80s", Py_TYPE(h)->tp_name);
            goto done;
        }
    }
    if (held != n && _PyBytes_Resize(&packed, held * (Py_ssize_t)sizeof(uint64_t)) < 0) {
        goto done;
    }
    out = PyTuple_Pack(2, packed, big);
done:
    Py_DECREF(seq);
    Py_XDECREF(packed);
    Py_XDECREF(big);
    return out;
}

/* ---- the score --------------------------------------------------------------- */

/* One attention group of the plan (swa_prefix_cache.pyspec.attention_groups' fields). */
typedef struct {
    pc_group g;
    Py_ssize_t k;            /* block_size / hash_block_size */
    Py_ssize_t nmembers;
    KeySet *members[8];      /* the groups merged (first 8 inline) */
    KeySet **more;           /* all members when more than 8, else NULL */
} plan_group;

static KeySet **members_of(plan_group *a)
{
    return a->more != NULL ? a->more : a->members;
}

/* Mask byte of block i of attention group a: every member holds its key
 * (hash (i + 1) * k - 1 of the prompt, vLLM's BlockHashListWithBlockSize). */
static uint8_t cached_block(plan_group *a, const uint64_t *keys, Py_ssize_t i)
{
    uint64_t key = keys[(i + 1) * a->k - 1];
    KeySet **m = members_of(a);
    Py_ssize_t j;
    for (j = 0; j < a->nmembers; j++) {
        if (!keyset_contains(m[j], key)) {
            return 0;
        }
    }
    return 1;
}

static int int64_field(PyObject *obj, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    long long v;
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "groups: %s must be an int, not %.80s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "groups: %s is out of range", name);
        return -1;
    }
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "groups: %s = %lld is out of range [%lld, %lld]", name, v,
                     (long long)lo, (long long)hi);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* Reads one group of the plan: (block_size, sliding_window, is_full,
 * eagle, members), members indices into keysets. */
static int read_plan_group(PyObject *item, PyObject *keysets, int64_t h, int64_t align, int hybrid, plan_group *a)
{
    int64_t bs, window, full, eagle;
    PyObject *members;
    Py_ssize_t j;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "groups must hold (block_size, sliding_window, is_full, eagle, members) tuples");
        return -1;
    }
    if (int64_field(PyTuple_GET_ITEM(item, 0), "block_size", 1, PC_MAX_BLOCKS, &bs) < 0
        || int64_field(PyTuple_GET_ITEM(item, 1), "sliding_window", -PC_MAX_BLOCKS, PC_MAX_BLOCKS, &window) < 0
        || int64_field(PyTuple_GET_ITEM(item, 2), "is_full", 0, 1, &full) < 0
        || int64_field(PyTuple_GET_ITEM(item, 3), "eagle", 0, 1, &eagle) < 0) {
        return -1;
    }
    if (bs % h != 0 || (hybrid && align % bs != 0)) {
        PyErr_Format(PyExc_ValueError,
                     "groups: block_size %lld must be a multiple of hash_block_size and divide "
                     "alignment_tokens", (long long)bs);
        return -1;
    }
    members = PyTuple_GET_ITEM(item, 4);
    if (!PyTuple_Check(members) || PyTuple_GET_SIZE(members) < 1) {
        PyErr_SetString(PyExc_TypeError, "groups: members must be a non-empty tuple of indices");
        return -1;
    }
    a->nmembers = PyTuple_GET_SIZE(members);
    a->more = NULL;
    if (a->nmembers > 8) {
        a->more = PyMem_Calloc((size_t)a->nmembers, sizeof(KeySet *));
        if (a->more == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    for (j = 0; j < a->nmembers; j++) {
        int64_t idx;
        PyObject *ks;
        if (int64_field(PyTuple_GET_ITEM(members, j), "members", 0, PyTuple_GET_SIZE(keysets) - 1, &idx) < 0) {
            return -1;
        }
        ks = PyTuple_GET_ITEM(keysets, idx);
        if (Py_TYPE(ks) != &KeySetType) {
            PyErr_SetString(PyExc_TypeError, "keysets must hold KeySet objects");
            return -1;
        }
        members_of(a)[j] = (KeySet *)ks;
    }
    a->g.block_size = bs;
    a->g.sliding_window = window;
    a->g.is_full = (int)full;
    a->g.eagle = (int)eagle;
    a->k = (Py_ssize_t)(bs / h);
    return 0;
}

/* score(groups, keysets, keys, hash_block_size, alignment_tokens,
 *       max_cache_hit_length, hybrid) -> int
 *
 * The replica's get_computed_blocks hit, as swa_prefix_cache.kv_index.index._hit computes
 * it with pyspec: each attention group's mask at its block boundaries,
 * then group_hit (one group: alignment = its block size, the EAGLE drop as
 * flagged) or joint_lookup (hybrid: cap = len(keys) * hash_block_size).
 *
 * Masks are built only as far as the lookups can read them; the rest
 * stays 0 and is never read, so the answer is the one of the whole masks:
 *   - full attention reads its run from block 0 up to the first miss
 *     (full_attention_hit), and at most (max + bs) / bs blocks;
 *   - a sliding-window lookup with max_length m reads blocks < m / bs
 *     (group_hit: n = max_length / bs); every max_length is at most
 *     min(curr + bs, cap) with curr <= max_cache_hit_length, and, in a
 *     hybrid, curr <= F after the full-attention groups, which come first
 *     (F = the least full-attention run, in tokens). So blocks
 *     >= (min(F, max) + bs) / bs are never read. */
static PyObject *kv_score(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *groups, *keysets, *result = NULL;
    const uint64_t *keys;
    Py_ssize_t nkeys, ng, i, j, total = 0;
    int64_t h, align, max_len, bound;
    int hybrid;
    plan_group *plan = NULL;
    uint8_t *masks = NULL;
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "score(groups, keysets, keys, hash_block_size, "
                        "alignment_tokens, max_cache_hit_length, hybrid) takes 7 arguments");
        return NULL;
    }
    groups = args[0];
    keysets = args[1];
    if (!PyTuple_Check(groups) || PyTuple_GET_SIZE(groups) < 1) {
        PyErr_SetString(PyExc_TypeError, "groups must be a non-empty tuple");
        return NULL;
    }
    if (!PyTuple_Check(keysets)) {
        PyErr_SetString(PyExc_TypeError, "keysets must be a tuple of KeySet");
        return NULL;
    }
    if (packed_arg(args[2], "keys", &keys, &nkeys) < 0) {
        return NULL;
    }
    if (int64_field(args[3], "hash_block_size", 1, PC_MAX_BLOCKS, &h) < 0
        || int64_field(args[4], "alignment_tokens", 1, PC_MAX_BLOCKS, &align) < 0) {
        return NULL;
    }
    if (!PyLong_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "max_cache_hit_length must be an int");
        return NULL;
    }
    max_len = PyLong_AsLongLong(args[5]);
    if (max_len == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "max_cache_hit_length is out of range");
        return NULL;
    }
    hybrid = PyObject_IsTrue(args[6]);
    if (hybrid < 0) {
        return NULL;
    }
    ng = PyTuple_GET_SIZE(groups);
    if (!hybrid && ng != 1) {
        PyErr_SetString(PyExc_ValueError, "groups: a unitary replica has one group");
        return NULL;
    }
    if (nkeys > PC_MAX_BLOCKS / h || max_len > PC_MAX_BLOCKS / 2) {
        PyErr_SetString(PyExc_ValueError, "keys: the prompt is too long");
        return NULL;
    }
    plan = PyMem_Calloc((size_t)ng, sizeof(plan_group));
    if (plan == NULL) {
        return PyErr_NoMemory();
    }
    for (j = 0; j < ng; j++) {
        if (read_plan_group(PyTuple_GET_ITEM(groups, j), keysets, h, align, hybrid, &plan[j]) < 0) {
            goto done;
        }
        plan[j].g.mask_offset = total;
        plan[j].g.mask_len = nkeys / plan[j].k;
        total += plan[j].g.mask_len;
    }
    if (max_len <= 0) {
        result = PyLong_FromLong(0);
        goto done;
    }
    masks = PyMem_Calloc((size_t)total + 1, 1);
    if (masks == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    bound = max_len;
    for (j = 0; j < ng; j++) {
        plan_group *a = &plan[j];
        Py_ssize_t limit;
        uint8_t *m = masks + a->g.mask_offset;
        if (!a->g.is_full) {
            continue;
        }
        limit = (Py_ssize_t)((max_len + a->g.block_size) / a->g.block_size);
        if (limit > a->g.mask_len) {
            limit = (Py_ssize_t)a->g.mask_len;
        }
        for (i = 0; i < limit && (m[i] = cached_block(a, keys, i)) != 0; i++) {
        }
        if (hybrid && (int64_t)i * a->g.block_size < bound) {
            bound = (int64_t)i * a->g.block_size;
        }
    }
    for (j = 0; j < ng; j++) {
        plan_group *a = &plan[j];
        Py_ssize_t limit;
        uint8_t *m = masks + a->g.mask_offset;
        if (a->g.is_full) {
            continue;
        }
        limit = (Py_ssize_t)((bound + a->g.block_size) / a->g.block_size);
        if (limit > a->g.mask_len) {
            limit = (Py_ssize_t)a->g.mask_len;
        }
        for (i = 0; i < limit; i++) {
            m[i] = cached_block(a, keys, i);
        }
    }
    if (!hybrid) {
        int64_t first_real;
        int64_t tokens = group_hit(&plan[0].g, masks, total, max_len, plan[0].g.block_size,
                                   plan[0].g.eagle, &first_real);
        result = PyLong_FromLongLong(tokens);
    } else {
        pc_group *cgroups = PyMem_Calloc((size_t)ng, sizeof(pc_group));
        pc_group_answer *answers = PyMem_Calloc((size_t)ng, sizeof(pc_group_answer));
        pc_joint_result out;
        if (cgroups == NULL || answers == NULL) {
            PyMem_Free(cgroups);
            PyMem_Free(answers);
            PyErr_NoMemory();
            goto done;
        }
        for (j = 0; j < ng; j++) {
            cgroups[j] = plan[j].g;
        }
        joint_lookup(cgroups, ng, masks, total, max_len, align, (int64_t)nkeys * h, answers, &out);
        result = PyLong_FromLongLong(out.hit_length);
        PyMem_Free(cgroups);
        PyMem_Free(answers);
    }
done:
    if (plan != NULL) {
        for (j = 0; j < ng; j++) {
            PyMem_Free(plan[j].more);
        }
    }
    PyMem_Free(plan);
    PyMem_Free(masks);
    return result;
}

/* ---- the module ------------------------------------------------------------- */

static PyMethodDef kvnative_methods[] = {
    {"prompt_block_keys", (PyCFunction)(void (*)(void))kv_prompt_block_keys, METH_FASTCALL,
     "prompt_block_keys(token_ids, hash_block_size, none_hash) -> bytes | None"},
    {"prompt_block_hashes", (PyCFunction)(void (*)(void))kv_prompt_block_hashes, METH_FASTCALL,
     "prompt_block_hashes(token_ids, hash_block_size, none_hash) -> list[bytes] | None"},
    {"pickle_block", (PyCFunction)(void (*)(void))kv_pickle_block, METH_FASTCALL,
     "pickle_block(parent, tokens) -> bytes | None: pickle.dumps((parent, tuple(tokens), None), 5)"},
    {"sha256", (PyCFunction)(void (*)(void))kv_sha256_fn, METH_FASTCALL,
     "sha256(data, impl='auto') -> bytes"},
    {"sha256_impl", kv_sha256_impl_fn, METH_NOARGS, "sha256_impl() -> 'sha-ni' | 'portable'"},
    {"use_sha256", kv_use_sha256, METH_O, "use_sha256(impl) -> previous impl"},
    {"keys_of", kv_keys_of, METH_O, "keys_of(block_hashes) -> (packed keys, keys outside uint64)"},
    {"score", (PyCFunction)(void (*)(void))kv_score, METH_FASTCALL,
     "score(groups, keysets, keys, hash_block_size, alignment_tokens, max_cache_hit_length, "
     "hybrid) -> int"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kvnative_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "swa_prefix_cache.kv_index._kvnative",
    .m_doc = "kv_index's native core: vLLM's block-hash chain, key sets, the proved lookups",
    .m_size = -1,
    .m_methods = kvnative_methods,
};

PyMODINIT_FUNC
PyInit__kvnative(void)
{
    PyObject *m;
    if (PyType_Ready(&KeySetType) < 0) {
        return NULL;
    }
    m = PyModule_Create(&kvnative_module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&KeySetType);
    if (PyModule_AddObject(m, "KeySet", (PyObject *)&KeySetType) < 0) {
        Py_DECREF(&KeySetType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
