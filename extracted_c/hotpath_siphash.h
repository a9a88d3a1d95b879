/*
 * hotpath_siphash.h -- CPython's hash of bytes (SipHash-1-3 keyed with the
 * interpreter's _Py_HashSecret; Python/pyhash.c, siphash13 and
 * _Py_HashBytes), four keys at a time: the four chains are independent, so
 * they overlap in the pipeline where one _Py_HashBytes call at a time waits
 * on its own chain. Used by the read-ahead of hotpath_pool.c only for the
 * reads it certifies (a wrong hash finds nothing there, and the read is
 * then CPython's own). Glue, NOT proved; hotpath_siphash_selftest checks it
 * against _Py_HashBytes at import, and the read-ahead hashes with
 * _Py_HashBytes when the self-test fails (another hash algorithm, a build
 * with Py_HASH_CUTOFF, a big-endian machine). HOTPATH_SIPHASH is 0 where
 * hotpath_dict.h's layout is not CPython 3.11/3.12's: nothing below.
 */
#ifndef HOTPATH_SIPHASH_H
#define HOTPATH_SIPHASH_H

#include "hotpath_dict.h"

#include <string.h>

#if HOTPATH_DICT_LAYOUT
#define HOTPATH_SIPHASH 1

#define HP_ROTATE(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define HP_HALF_ROUND(a, b, c, d, s, t) \
    a += b;                             \
    c += d;                             \
    b = HP_ROTATE(b, s) ^ a;            \
    d = HP_ROTATE(d, t) ^ c;            \
    a = HP_ROTATE(a, 32);
#define HP_SINGLE_ROUND(v0, v1, v2, v3)           \
    HP_HALF_ROUND(v0, v1, v2, v3, 13, 16);        \
    HP_HALF_ROUND(v2, v1, v0, v3, 17, 21);

/* The hashes CPython gives the four len-byte strings src[0..3] (1 <= len),
 * as _Py_HashBytes does on a little-endian build with SipHash-1-3 and no
 * cutoff: siphash13 of the bytes with the interpreter's key, -1 read as -2. */
static inline void
hotpath_siphash13_x4(const unsigned char *const src[4], Py_ssize_t len, Py_hash_t out[4])
{
    const uint64_t k0 = _Py_HashSecret.siphash.k0;
    const uint64_t k1 = _Py_HashSecret.siphash.k1;
    uint64_t v0[4], v1[4], v2[4], v3[4], m[4];
    const uint64_t b = (uint64_t)len << 56;
    Py_ssize_t off;
    int l;

    for (l = 0; l < 4; l++) {
        v0[l] = k0 ^ 0x736f6d6570736575ULL;
        v1[l] = k1 ^ 0x646f72616e646f6dULL;
        v2[l] = k0 ^ 0x6c7967656e657261ULL;
        v3[l] = k1 ^ 0x7465646279746573ULL;
    }
    for (off = 0; len - off >= 8; off += 8) {
        for (l = 0; l < 4; l++) {
            memcpy(&m[l], src[l] + off, 8);
            v3[l] ^= m[l];
            HP_SINGLE_ROUND(v0[l], v1[l], v2[l], v3[l]);
            v0[l] ^= m[l];
        }
    }
    for (l = 0; l < 4; l++) {
        /* The last len % 8 bytes, little-endian, built in a register (a
         * copy through memory would stall on store forwarding). */
        uint64_t tail = 0;
        Py_ssize_t j;
        for (j = len - off - 1; j >= 0; j--) {
            tail = (tail << 8) | src[l][off + j];
        }
        m[l] = b | tail;
        v3[l] ^= m[l];
        HP_SINGLE_ROUND(v0[l], v1[l], v2[l], v3[l]);
        v0[l] ^= m[l];
        v2[l] ^= 0xff;
        HP_SINGLE_ROUND(v0[l], v1[l], v2[l], v3[l]);
        HP_SINGLE_ROUND(v0[l], v1[l], v2[l], v3[l]);
        HP_SINGLE_ROUND(v0[l], v1[l], v2[l], v3[l]);
    }
    for (l = 0; l < 4; l++) {
        Py_hash_t x = (Py_hash_t)((v0[l] ^ v1[l]) ^ (v2[l] ^ v3[l]));
        out[l] = x == -1 ? -2 : x;
    }
}

/* 1 when hotpath_siphash13_x4 gives _Py_HashBytes's hash on this
 * interpreter (its algorithm is named siphash13 and 4 x 64 strings of
 * lengths 1..64, bytes varied, hash alike), else 0. */
static inline int
hotpath_siphash_selftest(void)
{
    const PyHash_FuncDef *def = PyHash_GetFuncDef();
    unsigned char buf[4][64];
    const unsigned char *src[4] = {buf[0], buf[1], buf[2], buf[3]};
    Py_hash_t out[4];
    Py_ssize_t len;
    int l, k;

    if (def == NULL || def->name == NULL || strcmp(def->name, "siphash13") != 0) {
        return 0;
    }
    for (len = 1; len <= 64; len++) {
        for (l = 0; l < 4; l++) {
            for (k = 0; k < 64; k++) {
                buf[l][k] = (unsigned char)(k * 131 + l * 17 + len * 7 + (k * l * len >> 3));
            }
        }
        hotpath_siphash13_x4(src, len, out);
        for (l = 0; l < 4; l++) {
            if (out[l] != _Py_HashBytes(buf[l], len)) {
                return 0;
            }
        }
    }
    return 1;
}
#else
#define HOTPATH_SIPHASH 0
#endif

#endif /* HOTPATH_SIPHASH_H */
