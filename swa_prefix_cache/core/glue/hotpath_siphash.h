/*
 * hotpath_siphash.h -- CPython's hash of bytes (SipHash-1-3 keyed with the
 * interpreter's _Py_HashSecret; Python/pyhash.c, siphash13 and
 * _Py_HashBytes) for eight keys at a time in AVX2 registers, four 64-bit
 * lanes per register and two registers interleaved: one _Py_HashBytes call
 * per key costs about 2.5 times as much (measured by make bench's "ours,
 * read-ahead off" column and in docs/hot-path.md). Used by the read-ahead
 * of hotpath_pool.c only for the reads it certifies (a wrong hash finds
 * nothing there, and the read is then CPython's own). Glue, NOT proved;
 * hotpath_siphash_selftest checks it against _Py_HashBytes at import, and
 * the read-ahead hashes with _Py_HashBytes when the self-test fails or
 * cannot run (a CPU without AVX2, another hash algorithm, a build with
 * Py_HASH_CUTOFF, a big-endian machine, a compiler without GCC's target
 * attribute). HOTPATH_SIPHASH is 0 where there is nothing below.
 */
#ifndef HOTPATH_SIPHASH_H
#define HOTPATH_SIPHASH_H

#include "hotpath_dict.h"

#include <string.h>

/* Keys are read as rows of this many bytes (a key and what follows it). */
#define HOTPATH_HASH_ROW 64
/* Keys hashed together: a multiple of this many. */
#define HOTPATH_HASH_LANES 8

#if HOTPATH_DICT_LAYOUT && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HOTPATH_SIPHASH 1

#include <immintrin.h>

#define HP_TARGET __attribute__((target("avx2")))

/* x rotated left by n bits in each 64-bit lane (16: a byte shuffle). */
#define HP_ROTL(x, n)                                                                        \
    ((n) == 16 ? _mm256_shuffle_epi8((x), rot16)                                             \
               : _mm256_or_si256(_mm256_slli_epi64((x), (n)), _mm256_srli_epi64((x), 64 - (n))))
#define HP_HALF_ROUND(a, b, c, d, s, t)                                                      \
    a = _mm256_add_epi64(a, b);                                                              \
    c = _mm256_add_epi64(c, d);                                                              \
    b = _mm256_xor_si256(HP_ROTL(b, s), a);                                                  \
    d = _mm256_xor_si256(HP_ROTL(d, t), c);                                                  \
    a = _mm256_shuffle_epi32(a, _MM_SHUFFLE(2, 3, 0, 1));
/* One SipRound of both register sets (a* and b*). */
#define HP_ROUND()                                                                           \
    HP_HALF_ROUND(a0, a1, a2, a3, 13, 16)                                                    \
    HP_HALF_ROUND(b0, b1, b2, b3, 13, 16)                                                    \
    HP_HALF_ROUND(a2, a1, a0, a3, 17, 21)                                                    \
    HP_HALF_ROUND(b2, b1, b0, b3, 17, 21)
/* One message word: v3 ^= m, a round, v0 ^= m. */
#define HP_COMPRESS(ma, mb)                                                                  \
    a3 = _mm256_xor_si256(a3, ma);                                                           \
    b3 = _mm256_xor_si256(b3, mb);                                                           \
    HP_ROUND()                                                                               \
    a0 = _mm256_xor_si256(a0, ma);                                                           \
    b0 = _mm256_xor_si256(b0, mb);

/* Words 4h .. 4h + 3 of the four rows at base, as columns: col[w] holds
 * word 4h + w of rows 0, 1, 2, 3 in its lanes 0, 1, 2, 3. */
static inline HP_TARGET void
hp_columns(const unsigned char *base, int h, __m256i col[4])
{
    const unsigned char *p = base + 32 * h;
    __m256i r0 = _mm256_loadu_si256((const void *)(p + 0 * HOTPATH_HASH_ROW));
    __m256i r1 = _mm256_loadu_si256((const void *)(p + 1 * HOTPATH_HASH_ROW));
    __m256i r2 = _mm256_loadu_si256((const void *)(p + 2 * HOTPATH_HASH_ROW));
    __m256i r3 = _mm256_loadu_si256((const void *)(p + 3 * HOTPATH_HASH_ROW));
    __m256i t0 = _mm256_unpacklo_epi64(r0, r1);
    __m256i t1 = _mm256_unpackhi_epi64(r0, r1);
    __m256i t2 = _mm256_unpacklo_epi64(r2, r3);
    __m256i t3 = _mm256_unpackhi_epi64(r2, r3);
    col[0] = _mm256_permute2x128_si256(t0, t2, 0x20);
    col[1] = _mm256_permute2x128_si256(t1, t3, 0x20);
    col[2] = _mm256_permute2x128_si256(t0, t2, 0x31);
    col[3] = _mm256_permute2x128_si256(t1, t3, 0x31);
}

/* The hashes CPython gives the len-byte keys at rows + r * HOTPATH_HASH_ROW,
 * r < nrows (1 <= len <= HOTPATH_HASH_ROW; nrows a multiple of
 * HOTPATH_HASH_LANES; each row is read whole, its bytes after the key
 * ignored), as _Py_HashBytes does on a little-endian build with SipHash-1-3
 * and no cutoff: siphash13 of the bytes with the interpreter's key, -1 read
 * as -2. Only on a CPU with AVX2 (hotpath_siphash_selftest says). */
static HP_TARGET void
hotpath_siphash13_rows(const unsigned char *rows, Py_ssize_t nrows, Py_ssize_t len,
                       Py_hash_t *out)
{
    const __m256i rot16 = _mm256_setr_epi8(6, 7, 0, 1, 2, 3, 4, 5, 14, 15, 8, 9, 10, 11, 12, 13,
                                           6, 7, 0, 1, 2, 3, 4, 5, 14, 15, 8, 9, 10, 11, 12, 13);
    const uint64_t k0 = _Py_HashSecret.siphash.k0;
    const uint64_t k1 = _Py_HashSecret.siphash.k1;
    const Py_ssize_t words = len / 8; /* whole message words; then the last */
    const Py_ssize_t rest = len % 8;
    const __m256i keep = _mm256_set1_epi64x(rest ? (long long)((1ULL << (8 * rest)) - 1) : 0);
    const __m256i length = _mm256_set1_epi64x((long long)((uint64_t)len << 56));
    const __m256i minus_one = _mm256_set1_epi64x(-1);
    Py_ssize_t r, w;

    for (r = 0; r + HOTPATH_HASH_LANES <= nrows; r += HOTPATH_HASH_LANES) {
        const unsigned char *a = rows + r * HOTPATH_HASH_ROW;
        const unsigned char *b = a + 4 * HOTPATH_HASH_ROW;
        __m256i ca[8], cb[8], ma, mb;
        __m256i a0 = _mm256_set1_epi64x((long long)(k0 ^ 0x736f6d6570736575ULL));
        __m256i a1 = _mm256_set1_epi64x((long long)(k1 ^ 0x646f72616e646f6dULL));
        __m256i a2 = _mm256_set1_epi64x((long long)(k0 ^ 0x6c7967656e657261ULL));
        __m256i a3 = _mm256_set1_epi64x((long long)(k1 ^ 0x7465646279746573ULL));
        __m256i b0 = a0, b1 = a1, b2 = a2, b3 = a3;

        hp_columns(a, 0, ca);
        hp_columns(b, 0, cb);
        if (words >= 4) {
            hp_columns(a, 1, ca + 4);
            hp_columns(b, 1, cb + 4);
        }
        for (w = 0; w < words; w++) {
            HP_COMPRESS(ca[w], cb[w])
        }
        /* The last word: the len % 8 bytes left, little-endian, and the
         * length in the top byte. */
        ma = length;
        mb = length;
        if (rest) {
            ma = _mm256_or_si256(ma, _mm256_and_si256(ca[words], keep));
            mb = _mm256_or_si256(mb, _mm256_and_si256(cb[words], keep));
        }
        HP_COMPRESS(ma, mb)
        a2 = _mm256_xor_si256(a2, _mm256_set1_epi64x(0xff));
        b2 = _mm256_xor_si256(b2, _mm256_set1_epi64x(0xff));
        HP_ROUND()
        HP_ROUND()
        HP_ROUND()
        a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
        b0 = _mm256_xor_si256(_mm256_xor_si256(b0, b1), _mm256_xor_si256(b2, b3));
        /* -1 is -2 (x + (x == -1 ? -1 : 0)). */
        a0 = _mm256_add_epi64(a0, _mm256_cmpeq_epi64(a0, minus_one));
        b0 = _mm256_add_epi64(b0, _mm256_cmpeq_epi64(b0, minus_one));
        _mm256_storeu_si256((void *)(out + r), a0);
        _mm256_storeu_si256((void *)(out + r + 4), b0);
    }
}

/* 1 when hotpath_siphash13_rows gives _Py_HashBytes's hash on this
 * interpreter and CPU: the CPU has AVX2, the algorithm is named siphash13,
 * and HOTPATH_HASH_LANES keys of every length it takes, bytes varied and
 * the bytes after each key set, hash alike. Else 0. */
static inline int
hotpath_siphash_selftest(void)
{
    const PyHash_FuncDef *def = PyHash_GetFuncDef();
    unsigned char rows[HOTPATH_HASH_LANES][HOTPATH_HASH_ROW];
    Py_hash_t out[HOTPATH_HASH_LANES];
    Py_ssize_t len;
    int l, k;

    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2")) {
        return 0;
    }
    if (def == NULL || def->name == NULL || strcmp(def->name, "siphash13") != 0) {
        return 0;
    }
    for (len = 1; len <= HOTPATH_HASH_ROW; len++) {
        for (l = 0; l < HOTPATH_HASH_LANES; l++) {
            for (k = 0; k < HOTPATH_HASH_ROW; k++) {
                rows[l][k] = (unsigned char)(k * 131 + l * 17 + len * 7 + (k * l * len >> 3));
            }
        }
        hotpath_siphash13_rows(&rows[0][0], HOTPATH_HASH_LANES, len, out);
        for (l = 0; l < HOTPATH_HASH_LANES; l++) {
            if (out[l] != _Py_HashBytes(rows[l], len)) {
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
