/*
 * hotpath_pool.h -- the BlockPool side of the native hot path: a probe that
 * answers the proved searches' reads the way vLLM 0.33.0's
 * BlockPool.get_cached_block does, the log of what it found, and vLLM's
 * answer lists built from that log. Glue, NOT proved; tested against
 * vLLM's own methods (tests/test_hotpath_glue.py, tests/test_hot_path.py,
 * tests/test_full_hotpath.py, also under ASan + UBSan).
 *
 * A probe of block i, for each group in order: key = hash + 4-byte
 * big-endian group id, a read of the hash map's dict; a value of exactly
 * vLLM's block class is a hit; anything else under the key is read through
 * vLLM's own get_one_block and its truth test; the first miss ends the
 * probe (a miss for the block). The caller (hotpath_module.c) has checked
 * that this is what vLLM's probe does for the pool at hand.
 *
 * Hashes: block i of the search is hashes[(i + 1) * stride - 1] (stride 1:
 * the list itself; stride s: vLLM's BlockHashListWithBlockSize view, whose
 * block i is the last finer hash inside it); a fine index j of the
 * full-attention lookup's second phase is hashes[(j + 1) * fine_stride - 1].
 *
 * Reference counts: dict reads are borrowed; every block a probe finds is
 * INCREF'd into the log (owned) and later moved into an answer list
 * (PyList_SET_ITEM steals it) or released by pool_probe_release, on every
 * path. Keys are released after their read on every path.
 */
#ifndef HOTPATH_POOL_H
#define HOTPATH_POOL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The glue relies on the GIL for a lookup's whole call (hotpath_module.c)
 * and mirrors the dict layout of builds with one (hotpath_dict.h); setup.py
 * does not build it for a free-threaded CPython, and swa_prefix_cache/core/hotpath.py
 * refuses it there (the Python core serves). */
#ifdef Py_GIL_DISABLED
#error "swa_prefix_cache.core._hotpath does not support free-threaded CPython (Py_GIL_DISABLED)"
#endif

/* Log slots (entries x groups) kept on the caller's stack. */
#define POOL_LOG_STACK 512
/* Group suffixes kept on the caller's stack. */
#define POOL_SUFFIX_STACK 8

enum probe_status {
    PROBE_OK = 0,
    PROBE_ERROR = 1,       /* a Python exception is set */
    PROBE_UNSUPPORTED = 2, /* an input the fast path does not model */
};

/* Read-ahead: search indexes read together (a batch), the most groups it
 * reads (more groups: no read-ahead) and the longest hash it reads. */
#define POOL_BATCH 16
#define POOL_AHEAD_GROUPS 4
#define POOL_AHEAD_KEY_MAX 60


typedef struct {
    /* What to read (set by the caller; borrowed references). */
    PyObject *hashes;     /* a list, or any sequence */
    int hashes_is_list;
    int64_t stride;       /* block i is hashes[(i + 1) * stride - 1] */
    int64_t n;            /* blocks: i in [0, n) */
    int64_t fine_stride;  /* fine index j is hashes[(j + 1) * fine_stride - 1] */
    int64_t n_fine;       /* fine indices: j in [0, n_fine) */
    PyObject *cache;      /* the hash map's dict */
    PyObject *block_type; /* vLLM's KVCacheBlock */
    PyObject *hash_map;   /* the pool's BlockHashToBlockMap */
    PyObject *read_fn;    /* BlockHashToBlockMap.get_one_block */
    PyObject *blocks;     /* the id layout (vLLM 0.34): the map's ``_blocks``
                           * list, a value under a key is a block id and the
                           * block is blocks[id]; NULL: the value is the block */
    /* Groups (pool_probe_groups). */
    Py_ssize_t ngroups;
    unsigned char (*suffix)[4];
    /* State. */
    int status;
    PyObject *key; /* owned: the key reused for every read, or NULL */
    /* The hit log: entry e is log_idx[e] (block i, or -(j + 1) for fine
     * index j) and its blocks log_blocks[e * ngroups .. (e + 1) * ngroups),
     * owned references (NULL once moved into an answer list). */
    int64_t *log_idx;
    PyObject **log_blocks;
    Py_ssize_t log_len;
    Py_ssize_t log_cap;
    int log_on_heap;
    /* Read-ahead (pool_batch), for lookups that set ahead_on (the
     * full-attention scan: long runs of consecutive reads): the search
     * indexes [batch_lo, batch_hi) that the last batch found cached in every
     * group (logged), whether that batch stopped short at batch_hi (a read
     * it could not certify: batch_hi is left to probe_at), and the block
     * after the last block read that was a hit (0 if none). */
    int ahead_on;
    int batch_short;
    int64_t batch_lo;
    int64_t batch_hi;
    int64_t after_hit;
    int64_t idx_stack[POOL_LOG_STACK];
    PyObject *blocks_stack[POOL_LOG_STACK];
    unsigned char suffix_stack[POOL_SUFFIX_STACK][4];
} pool_probe;

/* An empty probe: nothing owned, safe to release. */
void pool_probe_init(pool_probe *c);

/* The groups' key suffixes from vLLM's list of group ids: 1, or 0 when one
 * is not an exact int in [0, 2^32) or the list is empty (the input is not
 * modelled), or -1 with an exception set. */
int pool_probe_groups(pool_probe *c, PyObject *group_ids);

/* Release everything the probe still owns. */
void pool_probe_release(pool_probe *c);

/* pc_probe_fn for block i / fine index j: 1 when every group has it
 * cached (logged), 0 otherwise. After an error or an unsupported hash every
 * read answers 0 (the searches terminate whatever the answers). */
uint8_t pool_probe_block(void *ctx, int64_t i);
uint8_t pool_probe_fine(void *ctx, int64_t j);

/* Group g's answer list: [null_block] * first_real, then the logged blocks
 * [first_real, end), then, when tail >= 0, the block logged for fine index
 * tail. NULL with an exception if one of them was never probed (checked,
 * not trusted). */
PyObject *pool_answer_list(pool_probe *c, Py_ssize_t g, PyObject *null_block,
                           int64_t first_real, int64_t end, int64_t tail);

/* Read-ahead of consecutive reads (hotpath_pool.c), off until
 * pool_ahead_set(1). pool_ahead_selftest: 1 when the dict layout it assumes
 * holds on this interpreter, 0 if not, -1 with an exception set.
 * pool_ahead_set(1) turns it on if the self-test (run once) passed,
 * pool_ahead_set(0) off; both return whether it was on, or -1 with an
 * exception set. Answers never depend on it, only the time: a block it
 * reads is a hit only when the dict holds an entry whose key is exactly
 * these bytes (equal) and whose value is exactly vLLM's block class, and
 * anything else is read by probe_at as without it. */
int pool_ahead_selftest(void);
int pool_ahead_set(int on);

/* The hashes the read-ahead gives keys (a list of bytes of one length,
 * 1 to 64 bytes), as a list of ints, when it hashes them itself
 * (hotpath_siphash.h passed its self-test); None when it leaves every hash
 * to _Py_HashBytes. NULL with TypeError / ValueError on other input. For
 * tests: each must be hash(key). */
PyObject *pool_key_hashes(PyObject *keys);

/* What this build and interpreter get: {"read_ahead": the read-ahead is
 * compiled in and its self-test passed, "read_ahead_on": it is on now
 * (pool_ahead_set), "hash": "avx2-siphash13" (hotpath_siphash.h) or
 * "cpython" (_Py_HashBytes, or the dict's own hashing), "built": True,
 * "why": a sentence}. */
PyObject *pool_fast_paths(void);

#endif /* HOTPATH_POOL_H */
