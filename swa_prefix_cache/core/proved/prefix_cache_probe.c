/*
 * prefix_cache_probe.c -- the probe instance of prefix_cache.c.
 *
 * Not a second copy: it is prefix_cache.c itself, compiled with
 * PC_PROBE_INSTANCE, so stride_search_probe, prefix_fallback_probe and
 * find_hit_probe are the proved functions token for token, with each read
 * of cached[i] replaced by probe(ctx, i). They rely on one assumption the
 * proof of the mask instance makes explicit: during one call, probe answers
 * the same for the same i (vLLM's BlockPool is not mutated during a lookup).
 * tests/test_exhaustive.py and tests/test_ffi.py check both instances agree.
 */
#define PC_PROBE_INSTANCE
#include "prefix_cache.c"
