/*
 * kvindex_sha256.h -- SHA-256 (FIPS 180-4) for kv_index's block-hash chain
 * (glue of the extension swa_prefix_cache.kv_index._kvnative; not proved, tested).
 *
 * Two compression functions behind one interface: the x86 SHA extensions
 * (SHA-NI: sha256rnds2 / sha256msg1 / sha256msg2) and portable C99. The
 * first use picks SHA-NI when cpuid says the CPU has SHA, SSSE3 and SSE4.1
 * AND a self-test (the FIPS 180-2 test vectors, and agreement with the
 * portable code on every message length 0..200) passes; otherwise the
 * portable code. tests/test_kv_native.py checks both against hashlib.
 *
 * Assumes: a C99 compiler; SHA-NI only with GCC or Clang on x86-64 (the
 * intrinsics are compiled with a function target attribute, so the rest
 * of the module needs no -msha).
 */
#ifndef KVINDEX_SHA256_H
#define KVINDEX_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define KV_SHA256_DIGEST 32

/* Which compression function kv_sha256 uses. */
typedef enum {
    KV_SHA256_AUTO = 0,     /* SHA-NI if present and self-tested, else portable */
    KV_SHA256_PORTABLE = 1, /* C99 */
    KV_SHA256_SHANI = 2     /* x86 SHA extensions (only if available) */
} kv_sha256_impl;

/* The digest of data[0 .. len) into out[0 .. 32), with impl (AUTO: the
 * chosen one). Returns 0, or -1 when SHA-NI is asked for and unavailable. */
int kv_sha256(const uint8_t *data, size_t len, uint8_t out[KV_SHA256_DIGEST], kv_sha256_impl impl);

/* The implementation AUTO resolves to (resolved and self-tested once). */
kv_sha256_impl kv_sha256_chosen(void);

/* 1 when the CPU has SHA-NI and it passed the self-test. */
int kv_sha256_shani_usable(void);

#endif /* KVINDEX_SHA256_H */
