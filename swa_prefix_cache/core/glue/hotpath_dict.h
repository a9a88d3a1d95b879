/*
 * hotpath_dict.h -- CPython 3.11-3.13's private dict layout, mirrored
 * (Include/internal/pycore_dict.h, struct _dictkeysobject and its entries:
 * the same fields in all three in a build with the GIL; a free-threaded
 * build adds dk_mutex and is refused, hotpath_module.c),
 * and the reads of it that the read-ahead of hotpath_pool.c makes: fetches
 * ahead of the reads, and ahead_find, a copy of CPython's probe sequence
 * that answers only with an entry it can show is the key's (exactly bytes,
 * equal; a dict has one entry per key), never with a miss. Its self-test
 * checks the layout on a real dict at import. Glue, NOT proved.
 * HOTPATH_DICT_LAYOUT is 0 on any other CPython (3.14 and later: layout
 * not verified): nothing below.
 *
 * CPython's hash of bytes: 3.11/3.12 declare _Py_HashBytes and
 * _Py_HashSecret in Include/pyhash.h; 3.13 moved both into
 * Include/internal/pycore_pyhash.h (Py_BUILD_CORE only) and still exports
 * them (PyAPI_FUNC / PyAPI_DATA, for _datetime and _elementtree): on 3.13
 * they are declared here as there. pool_ahead_selftest checks _Py_HashBytes
 * against bytes' own hash before the read-ahead is used.
 */
#ifndef HOTPATH_DICT_H
#define HOTPATH_DICT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define HOTPATH_DICT_LAYOUT 1

#if PY_VERSION_HEX >= 0x030D0000
/* Include/internal/pycore_pyhash.h of CPython 3.13, as declared there. */
typedef union {
    unsigned char uc[24];
    struct {
        Py_hash_t prefix;
        Py_hash_t suffix;
    } fnv;
    struct {
        uint64_t k0;
        uint64_t k1;
    } siphash;
    struct {
        unsigned char padding[16];
        Py_hash_t suffix;
    } djbx33a;
    struct {
        unsigned char padding[16];
        Py_hash_t hashsalt;
    } expat;
} _Py_HashSecret_t;
PyAPI_FUNC(Py_hash_t) _Py_HashBytes(const void *, Py_ssize_t);
PyAPI_DATA(_Py_HashSecret_t) _Py_HashSecret;
#endif

typedef struct {
    Py_ssize_t dk_refcnt;
    uint8_t dk_log2_size;
    uint8_t dk_log2_index_bytes;
    uint8_t dk_kind;
    uint32_t dk_version;
    Py_ssize_t dk_usable;
    Py_ssize_t dk_nentries;
    char dk_indices[]; /* then the entries */
} ahead_keys;

typedef struct {
    Py_hash_t me_hash;
    PyObject *me_key;
    PyObject *me_value;
} ahead_entry;

#define AHEAD_KEYS_GENERAL 0

/* The dict's keys object when it has the general layout, else NULL. */
static inline ahead_keys *
ahead_keys_of(PyObject *dict)
{
    ahead_keys *keys = (ahead_keys *)((PyDictObject *)dict)->ma_keys;
    if (keys->dk_kind != AHEAD_KEYS_GENERAL || keys->dk_log2_index_bytes < keys->dk_log2_size
        || keys->dk_log2_index_bytes - keys->dk_log2_size > 3) {
        return NULL;
    }
    return keys;
}

/* An index slot that once named an entry since deleted (DKIX_DUMMY). */
#define AHEAD_DUMMY (-2)

/* The index table's mask: index slots are 0 .. mask. */
static inline size_t
ahead_mask(const ahead_keys *keys)
{
    return ((size_t)1 << keys->dk_log2_size) - 1;
}

/* The address of index slot i (i <= ahead_mask(keys)). */
static inline const char *
ahead_slot_at(const ahead_keys *keys, size_t i)
{
    int width = keys->dk_log2_index_bytes - keys->dk_log2_size;
    return keys->dk_indices + ((i & ahead_mask(keys)) << width);
}

/* The address of hash h's first index slot. */
static inline const char *
ahead_slot(const ahead_keys *keys, Py_hash_t h)
{
    return ahead_slot_at(keys, (size_t)h);
}

/* The next index slot of a probe sequence, as CPython's lookup steps
 * (Objects/dictobject.c: perturb >>= PERTURB_SHIFT; i = mask & (i*5 +
 * perturb + 1)); the sequence starts at i = hash & mask, perturb = hash. */
static inline void
ahead_next_slot(const ahead_keys *keys, size_t *i, size_t *perturb)
{
    *perturb >>= 5;
    *i = ahead_mask(keys) & (*i * 5 + *perturb + 1);
}

/* The index an index slot holds (-1 empty, -2 dummy, else an entry). */
static inline Py_ssize_t
ahead_index(const ahead_keys *keys, const char *slot)
{
    switch (keys->dk_log2_index_bytes - keys->dk_log2_size) {
    case 0: return ((const int8_t *)slot)[0];
    case 1: return ((const int16_t *)(const void *)slot)[0];
    case 2: return ((const int32_t *)(const void *)slot)[0];
    default: return (Py_ssize_t)((const int64_t *)(const void *)slot)[0];
    }
}

static inline const ahead_entry *
ahead_entries(const ahead_keys *keys)
{
    return (const ahead_entry *)(const void *)(keys->dk_indices
                                               + ((size_t)1 << keys->dk_log2_index_bytes));
}

/* vLLM's keys: a 32-byte hash (sha256) and the 4-byte group id. */
#define AHEAD_COMMON_KEY 36

/* 1 when the len-byte strings a and b are equal (the common key length
 * compared with a constant size, which the compiler does inline). */
static inline int
ahead_same_bytes(const char *a, const char *b, Py_ssize_t len)
{
    if (len == AHEAD_COMMON_KEY) {
        return memcmp(a, b, AHEAD_COMMON_KEY) == 0;
    }
    return memcmp(a, b, (size_t)len) == 0;
}

/* What entry ep says of the len-byte key buf of hash h: 1 when its stored
 * key is exactly bytes and equal to buf (then it is the dict's entry for
 * buf), 0 when its hash or its bytes differ (CPython's lookup would walk
 * on), -1 when its hash is h and its key is not exactly bytes (CPython's
 * lookup would call that key's __eq__). */
static inline int
ahead_entry_is(const ahead_entry *ep, const char *buf, Py_ssize_t len, Py_hash_t h)
{
    if (ep->me_hash != h) {
        return 0;
    }
    if (ep->me_key == NULL || !PyBytes_CheckExact(ep->me_key)) {
        return -1;
    }
    return PyBytes_GET_SIZE(ep->me_key) == len
           && ahead_same_bytes(PyBytes_AS_STRING(ep->me_key), buf, len);
}

/* The entry of the len-byte key buf (hash h, as CPython hashes it) when
 * walking h's probe sequence as CPython's lookup does reaches an entry whose
 * stored key is exactly bytes equal to buf; NULL when it reaches an empty
 * slot first, or an entry of hash h whose key is not exactly bytes (where
 * CPython's lookup would call that key's __eq__), or gives up after
 * ahead_mask + 1 steps. A hit needs no trust in the walk: a dict has one
 * entry per key, and the index only names live entries. */
static inline const ahead_entry *
ahead_find(const ahead_keys *keys, const char *buf, Py_ssize_t len, Py_hash_t h)
{
    const ahead_entry *ep0 = ahead_entries(keys);
    size_t i = (size_t)h & ahead_mask(keys);
    size_t perturb = (size_t)h;
    size_t steps;

    for (steps = 0; steps <= ahead_mask(keys); steps++) {
        Py_ssize_t ix = ahead_index(keys, ahead_slot_at(keys, i));
        if (ix >= 0 && ix < keys->dk_nentries) {
            int is = ahead_entry_is(&ep0[ix], buf, len, h);
            if (is != 0) {
                return is > 0 ? &ep0[ix] : NULL;
            }
        } else if (ix != AHEAD_DUMMY) {
            return NULL; /* empty (or out of range: not a layout we read) */
        }
        ahead_next_slot(keys, &i, &perturb);
    }
    return NULL;
}
#else
#define HOTPATH_DICT_LAYOUT 0
#endif

#endif /* HOTPATH_DICT_H */
