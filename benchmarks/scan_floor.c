/*
 * scan_floor.c -- benchmark only (never serves a lookup): the least work a
 * native full-attention lookup over vLLM 0.33.0's BlockPool dict can do,
 * so `make bench` can print what bounds the scheduler row next to ours.
 *
 * scan(hash_lists, cache, suffix, block_type, mode) walks every list of
 * block hashes from block 0: key = hash + suffix, one read of the dict,
 * a value of exactly block_type is a hit, appended to a list; the first
 * miss (or anything else) ends the list. No search, no checks of the
 * inputs beyond what keeps it memory-safe, no log, no answer tuple. The
 * key hash is computed AHEAD reads ahead (kept in a ring) and its index
 * slot prefetched, as the extension's read-ahead does.
 *
 * mode 0: the read is CPython's own (_PyDict_GetItem_KnownHash), as ours.
 * mode 1: the read is a copy of CPython 3.11/3.12's probe loop
 *         (dictkeys_generic_lookup) over the dict's private layout
 *         (extracted_c/hotpath_dict.h), comparing exact bytes keys with
 *         memcmp; a what-if the extension does not do (its answers would
 *         rest on a copy of CPython's internals).
 * Returns the number of blocks found (the caller checks it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "hotpath_dict.h"

#define AHEAD 16
#define RING 32
#define KEY_MAX 60

#if HOTPATH_DICT_LAYOUT
/* The copied probe loop (CPython's dictkeys_generic_lookup) over the layout
 * of extracted_c/hotpath_dict.h: the value (borrowed), NULL when absent;
 * *odd set when it cannot decide (another table kind, a stored key under
 * an equal hash that is not exact bytes). */
static PyObject *
copied_read(PyObject *dict, const char *buf, Py_ssize_t len, Py_hash_t hash, int *odd)
{
    const ahead_keys *k = ahead_keys_of(dict);
    const ahead_entry *ep0;
    size_t mask, perturb, i;
    int width;

    if (k == NULL) {
        *odd = 1;
        return NULL;
    }
    ep0 = ahead_entries(k);
    mask = ((size_t)1 << k->dk_log2_size) - 1;
    width = k->dk_log2_index_bytes - k->dk_log2_size;
    perturb = (size_t)hash;
    i = (size_t)hash & mask;
    for (;;) {
        Py_ssize_t ix = ahead_index(k, k->dk_indices + (i << width));
        if (ix >= 0) {
            const ahead_entry *ep = &ep0[ix];
            if (ep->me_hash == hash) {
                if (!PyBytes_CheckExact(ep->me_key)) {
                    *odd = 1;
                    return NULL;
                }
                if (PyBytes_GET_SIZE(ep->me_key) == len
                    && memcmp(PyBytes_AS_STRING(ep->me_key), buf, (size_t)len) == 0) {
                    return ep->me_value;
                }
            }
        } else if (ix == -1) {
            return NULL;
        }
        perturb >>= 5;
        i = mask & (i * 5 + perturb + 1);
    }
}
#endif

static Py_hash_t
key_hash(PyObject *item, const char *suffix, char *buf)
{
    Py_ssize_t len = PyBytes_GET_SIZE(item);
    memcpy(buf, PyBytes_AS_STRING(item), (size_t)len);
    memcpy(buf + len, suffix, 4);
    return _Py_HashBytes(buf, len + 4);
}

static PyObject *
scan(PyObject *self, PyObject *args)
{
    PyObject *lists, *cache, *block_type, *key;
    const char *suffix;
    Py_ssize_t suffix_len, r, i, found = 0;
    int mode;
    Py_hash_t ring[RING];
    char buf[KEY_MAX + 4];

    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!y#Oi", &PyList_Type, &lists, &PyDict_Type, &cache, &suffix,
                          &suffix_len, &block_type, &mode)) {
        return NULL;
    }
    if (suffix_len != 4 || (mode != 0 && mode != 1) || (mode == 1 && !HOTPATH_DICT_LAYOUT)) {
        PyErr_SetString(PyExc_ValueError, "suffix must be 4 bytes, mode 0 or 1 (1: CPython 3.11/3.12)");
        return NULL;
    }
    key = NULL;
    for (r = 0; r < PyList_GET_SIZE(lists); r++) {
        PyObject *hashes = PyList_GET_ITEM(lists, r);
        PyObject *out;
        Py_ssize_t n;
        if (!PyList_Check(hashes)) {
            Py_XDECREF(key);
            PyErr_SetString(PyExc_TypeError, "hash_lists must hold lists");
            return NULL;
        }
        n = PyList_GET_SIZE(hashes);
        for (i = 0; i < n; i++) {
            PyObject *item = PyList_GET_ITEM(hashes, i);
            if (!PyBytes_CheckExact(item) || PyBytes_GET_SIZE(item) > KEY_MAX) {
                Py_XDECREF(key);
                PyErr_SetString(PyExc_TypeError, "block hashes must be bytes of at most 60");
                return NULL;
            }
        }
        out = PyList_New(0);
        if (out == NULL) {
            Py_XDECREF(key);
            return NULL;
        }
        for (i = 0; i < n && i < AHEAD; i++) {
            ring[i % RING] = key_hash(PyList_GET_ITEM(hashes, i), suffix, buf);
        }
        for (i = 0; i < n; i++) {
            PyObject *item = PyList_GET_ITEM(hashes, i);
            PyObject *value;
            Py_ssize_t len = PyBytes_GET_SIZE(item);
            Py_hash_t h = ring[i % RING];
            int odd = 0;
            if (i + AHEAD < n) {
                Py_hash_t ahead = key_hash(PyList_GET_ITEM(hashes, i + AHEAD), suffix, buf);
                ring[(i + AHEAD) % RING] = ahead;
#if HOTPATH_DICT_LAYOUT
                {
                    const ahead_keys *k = ahead_keys_of(cache);
                    if (k != NULL) {
                        __builtin_prefetch(ahead_slot(k, ahead));
                    }
                }
#endif
            }
            if (key == NULL || PyBytes_GET_SIZE(key) != len + 4) {
                Py_XDECREF(key);
                key = PyBytes_FromStringAndSize(NULL, len + 4);
                if (key == NULL) {
                    Py_DECREF(out);
                    return NULL;
                }
            }
            memcpy(PyBytes_AS_STRING(key), PyBytes_AS_STRING(item), (size_t)len);
            memcpy(PyBytes_AS_STRING(key) + len, suffix, 4);
#if HOTPATH_DICT_LAYOUT
            if (mode == 1) {
                value = copied_read(cache, PyBytes_AS_STRING(key), len + 4, h, &odd);
                if (odd) {
                    value = _PyDict_GetItem_KnownHash(cache, key, h);
                }
            } else
#endif
            {
                value = _PyDict_GetItem_KnownHash(cache, key, h);
            }
            if (value == NULL || Py_TYPE(value) != (PyTypeObject *)block_type) {
                break;
            }
            if (PyList_Append(out, value) < 0) {
                Py_DECREF(out);
                Py_DECREF(key);
                return NULL;
            }
        }
        found += PyList_GET_SIZE(out);
        Py_DECREF(out);
    }
    Py_XDECREF(key);
    if (PyErr_Occurred()) {
        return NULL;
    }
    return PyLong_FromSsize_t(found);
}

static PyMethodDef floor_methods[] = {
    {"scan", scan, METH_VARARGS, "scan(hash_lists, cache, suffix, block_type, mode) -> blocks found"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef floor_module = {
    PyModuleDef_HEAD_INIT, "_scan_floor", "Benchmark only: the least work of a native scan.", -1,
    floor_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__scan_floor(void)
{
    return PyModule_Create(&floor_module);
}
