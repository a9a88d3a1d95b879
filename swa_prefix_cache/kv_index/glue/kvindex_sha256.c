/*
 * kvindex_sha256.c -- SHA-256 for kv_index (see kvindex_sha256.h).
 *
 * compress_portable is FIPS 180-4 section 6.2.2 as written. compress_shani
 * is the usual SHA-NI formulation (as in Intel's white paper "Intel SHA
 * Extensions", 2013): the state kept as ABEF / CDGH, four rounds per
 * message register (two sha256rnds2), and the schedule
 *   W[t..t+3] = msg2(msg1(W[t-16..t-13], W[t-12..t-9]) + W[t-7..t-4],
 *                    W[t-4..t-1])
 * written as one loop over the 16 groups of four rounds.
 */
#include "kvindex_sha256.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KV_HAVE_SHANI_CODE 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define KV_HAVE_SHANI_CODE 0
#endif

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static const uint32_t H0[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

typedef void (*compress_fn)(uint32_t state[8], const uint8_t *blocks, size_t nblocks);

static uint32_t rotr(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static uint32_t load_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* FIPS 180-4, 6.2.2, over nblocks 64-byte blocks. */
static void compress_portable(uint32_t state[8], const uint8_t *blocks, size_t nblocks)
{
    uint32_t w[64];
    size_t b;
    int t;
    for (b = 0; b < nblocks; b++) {
        const uint8_t *p = blocks + 64 * b;
        uint32_t a = state[0], bb = state[1], c = state[2], d = state[3];
        uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
        for (t = 0; t < 16; t++) {
            w[t] = load_be32(p + 4 * t);
        }
        for (t = 16; t < 64; t++) {
            uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
            uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
            w[t] = w[t - 16] + s0 + w[t - 7] + s1;
        }
        for (t = 0; t < 64; t++) {
            uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
            uint32_t ch = (e & f) ^ (~e & g);
            uint32_t t1 = h + S1 + ch + K256[t] + w[t];
            uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
            uint32_t maj = (a & bb) ^ (a & c) ^ (bb & c);
            uint32_t t2 = S0 + maj;
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = bb;
            bb = a;
            a = t1 + t2;
        }
        state[0] += a;
        state[1] += bb;
        state[2] += c;
        state[3] += d;
        state[4] += e;
        state[5] += f;
        state[6] += g;
        state[7] += h;
    }
}

#if KV_HAVE_SHANI_CODE
__attribute__((target("sha,sse4.1,ssse3")))
static void compress_shani(uint32_t state[8], const uint8_t *blocks, size_t nblocks)
{
    /* byte order: each 32-bit lane big-endian */
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i tmp = _mm_loadu_si128((const __m128i *)(const void *)&state[0]);
    __m128i st1 = _mm_loadu_si128((const __m128i *)(const void *)&state[4]);
    __m128i st0;
    size_t b;
    tmp = _mm_shuffle_epi32(tmp, 0xB1);       /* CDAB */
    st1 = _mm_shuffle_epi32(st1, 0x1B);       /* EFGH */
    st0 = _mm_alignr_epi8(tmp, st1, 8);       /* ABEF */
    st1 = _mm_blend_epi16(st1, tmp, 0xF0);    /* CDGH */
    for (b = 0; b < nblocks; b++) {
        const uint8_t *p = blocks + 64 * b;
        __m128i abef = st0, cdgh = st1;
        __m128i w[4]; /* w[g % 4] = W[4g .. 4g + 3] */
        int g;
        for (g = 0; g < 16; g++) {
            __m128i msg;
            if (g < 4) {
                w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(const void *)(p + 16 * g)), bswap);
            } else {
                __m128i x = _mm_sha256msg1_epu32(w[g % 4], w[(g + 1) % 4]);
                x = _mm_add_epi32(x, _mm_alignr_epi8(w[(g + 3) % 4], w[(g + 2) % 4], 4));
                w[g % 4] = _mm_sha256msg2_epu32(x, w[(g + 3) % 4]);
            }
            msg = _mm_add_epi32(w[g % 4], _mm_loadu_si128((const __m128i *)(const void *)&K256[4 * g]));
            st1 = _mm_sha256rnds2_epu32(st1, st0, msg);
            msg = _mm_shuffle_epi32(msg, 0x0E);
            st0 = _mm_sha256rnds2_epu32(st0, st1, msg);
        }
        st0 = _mm_add_epi32(st0, abef);
        st1 = _mm_add_epi32(st1, cdgh);
    }
    tmp = _mm_shuffle_epi32(st0, 0x1B);       /* FEBA */
    st1 = _mm_shuffle_epi32(st1, 0xB1);       /* DCHG */
    st0 = _mm_blend_epi16(tmp, st1, 0xF0);    /* DCBA */
    st1 = _mm_alignr_epi8(st1, tmp, 8);       /* HGFE */
    _mm_storeu_si128((__m128i *)(void *)&state[0], st0);
    _mm_storeu_si128((__m128i *)(void *)&state[4], st1);
}

static int cpu_has_shani(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) {
        return 0;
    }
    if (!(c & (1u << 9)) || !(c & (1u << 19))) { /* SSSE3, SSE4.1 */
        return 0;
    }
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        return 0;
    }
    return (b >> 29) & 1u; /* SHA */
}
#endif

/* The message, padded (FIPS 180-4, 5.1.1), through compress. */
static void digest_with(compress_fn compress, const uint8_t *data, size_t len, uint8_t out[KV_SHA256_DIGEST])
{
    uint32_t state[8];
    uint8_t tail[128];
    size_t full = len / 64, rest = len % 64, tail_len;
    uint64_t bits = (uint64_t)len * 8u;
    int i;
    memcpy(state, H0, sizeof state);
    if (full) {
        compress(state, data, full);
    }
    memset(tail, 0, sizeof tail);
    if (rest) {
        memcpy(tail, data + 64 * full, rest);
    }
    tail[rest] = 0x80;
    tail_len = rest < 56 ? 64 : 128;
    for (i = 0; i < 8; i++) {
        tail[tail_len - 1 - i] = (uint8_t)(bits >> (8 * i));
    }
    compress(state, tail, tail_len / 64);
    for (i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(state[i] >> 24);
        out[4 * i + 1] = (uint8_t)(state[i] >> 16);
        out[4 * i + 2] = (uint8_t)(state[i] >> 8);
        out[4 * i + 3] = (uint8_t)state[i];
    }
}

/* -1: not resolved yet; else 0 / 1 */
static int shani_state = -1;

#if KV_HAVE_SHANI_CODE
/* FIPS 180-2 appendix B ("abc", the 448-bit message) and agreement with
 * the portable code on every length 0..200 (one to four blocks, every
 * padding case). */
static int shani_self_test(void)
{
    static const uint8_t abc_digest[32] = {
        0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae, 0x22, 0x23,
        0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad,
    };
    static const uint8_t two_block_digest[32] = {
        0x24, 0x8d, 0x6a, 0x61, 0xd2, 0x06, 0x38, 0xb8, 0xe5, 0xc0, 0x26, 0x93, 0x0c, 0x3e, 0x60, 0x39,
        0xa3, 0x3c, 0xe4, 0x59, 0x64, 0xff, 0x21, 0x67, 0xf6, 0xec, 0xed, 0xd4, 0x19, 0xdb, 0x06, 0xc1,
    };
    static const char two_block[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    uint8_t msg[200], a[32], b[32];
    size_t n;
    digest_with(compress_shani, (const uint8_t *)"abc", 3, a);
    if (memcmp(a, abc_digest, 32) != 0) {
        return 0;
    }
    digest_with(compress_shani, (const uint8_t *)two_block, sizeof two_block - 1, a);
    if (memcmp(a, two_block_digest, 32) != 0) {
        return 0;
    }
    for (n = 0; n < sizeof msg; n++) {
        msg[n] = (uint8_t)(n * 131u + 7u);
    }
    for (n = 0; n <= sizeof msg; n++) {
        digest_with(compress_shani, msg, n, a);
        digest_with(compress_portable, msg, n, b);
        if (memcmp(a, b, 32) != 0) {
            return 0;
        }
    }
    return 1;
}
#endif

int kv_sha256_shani_usable(void)
{
    if (shani_state < 0) {
#if KV_HAVE_SHANI_CODE
        shani_state = cpu_has_shani() && shani_self_test();
#else
        shani_state = 0;
#endif
    }
    return shani_state;
}

kv_sha256_impl kv_sha256_chosen(void)
{
    return kv_sha256_shani_usable() ? KV_SHA256_SHANI : KV_SHA256_PORTABLE;
}

int kv_sha256(const uint8_t *data, size_t len, uint8_t out[KV_SHA256_DIGEST], kv_sha256_impl impl)
{
    if (impl == KV_SHA256_AUTO) {
        impl = kv_sha256_chosen();
    }
    if (impl == KV_SHA256_SHANI) {
#if KV_HAVE_SHANI_CODE
        if (!kv_sha256_shani_usable()) {
            return -1;
        }
        digest_with(compress_shani, data, len, out);
        return 0;
#else
        return -1;
#endif
    }
    digest_with(compress_portable, data, len, out);
    return 0;
}
