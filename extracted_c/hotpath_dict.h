/*
 * hotpath_dict.h -- CPython 3.11/3.12's private dict layout, mirrored
 * (Include/internal/pycore_dict.h, struct _dictkeysobject and its entries),
 * and the reads of it: the read-ahead of hotpath_pool.c uses it for
 * prefetches only (answers never depend on it; its self-test checks the
 * layout on a real dict at import), and benchmarks/scan_floor.c for the
 * floor scan's prefetch and its copy of CPython's probe loop. Glue, NOT
 * proved. HOTPATH_DICT_LAYOUT is 0 on any other CPython: nothing below.
 */
#ifndef HOTPATH_DICT_H
#define HOTPATH_DICT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#define HOTPATH_DICT_LAYOUT 1

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

/* The address of hash h's first index slot. */
static inline const char *
ahead_slot(const ahead_keys *keys, Py_hash_t h)
{
    size_t mask = ((size_t)1 << keys->dk_log2_size) - 1;
    int width = keys->dk_log2_index_bytes - keys->dk_log2_size;
    return keys->dk_indices + (((size_t)h & mask) << width);
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
#else
#define HOTPATH_DICT_LAYOUT 0
#endif

#endif /* HOTPATH_DICT_H */
